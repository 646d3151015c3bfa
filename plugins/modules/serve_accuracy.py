#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: serve_accuracy
short_description: The accuracy gate - tool calls, reasoning split and answers of a Kimi-K2.6 endpoint, A/B
description:
  - Runs the accuracy probes (O(probes), the format of roles/kimi_probes/files/kimi-k26-probes.yml) against an
    OpenAI-compatible endpoint on the host, O(workers) at a time, at temperature 0, each case once per variant
    (thinking on and off, streamed and not), with the standard library only.
  - "Scores: the tool-call schema accuracy (the share of tool calls whose arguments validate against the tool's JSON
    schema), the tool-choice accuracy (the share of cases that called exactly the expected tools, none where none is
    needed), the reasoning leaks (a think tag or the reasoning text in C(content)) and the answer failures
    (deterministic answers, follow-ups after a tool result, a needle near the context limit)."
  - Fails below O(thresholds), and (A/B) when an accuracy is more than O(max_drop) points below the stored result
    of the identity it replaces (O(previous_env_file) names it) on the same probes and the same model, naming the
    figure and the first three failing cases. When the identity replaced served another model (the environment
    file's C(MODEL), else the C(model) its stored result records; a result without one served C(kimi-k2.6)) - a
    switch between models, even of the same quant-engine - the gate judges by O(thresholds) alone and says so.
  - A passing result is stored as C(<result_dir>/<identity>.json) (atomically; what the next switch compares with).
    Without O(force), a stored result of the same identity on the same probes is returned instead of asking again
    (the engine was not restarted).
version_added: 1.0.0
author: kimi.deploy maintainers (@kimi-deploy)
options:
  url:
    description: Base URL of the API (without C(/v1)).
    type: str
    default: http://127.0.0.1:30000
  served_model_name:
    description: The model id to send requests to.
    type: str
    default: kimi-k2.6
  api_key:
    description: Sent as a bearer key when set. Never returned.
    type: str
  ca_path:
    description: CA bundle (PEM) for an C(https) O(url).
    type: path
  probes:
    description: The probe files' contents (parsed YAML), each a C({version, variants, tools, cases}); their cases run
      together (ids must differ).
    type: list
    elements: dict
    required: true
  identity:
    description: The identity being gated (C(<quant>-<engine>)).
    type: str
    required: true
  previous_env_file:
    description: The environment file of what served before this run (its QUANT and FRAMEWORK name the identity the
      A/B compares with, its MODEL - where it has one - the model that identity served); absent or unreadable - no
      A/B.
    type: path
  result_dir:
    description: Where each identity's last passing result is kept on the host.
    type: path
    required: true
  thresholds:
    description: C(min_schema_accuracy), C(min_choice_accuracy) (percent), C(max_reasoning_leaks),
      C(max_answer_failures) (counts). A missing key is not checked.
    type: dict
    default: {}
  max_drop:
    description: How many points an accuracy may be below the replaced identity's (the A/B).
    type: float
    default: 2.0
  context_length:
    description: The deployment's context length; a needle case fills about 80% of it.
    type: int
    default: 8192
  max_tokens:
    description: C(max_tokens) of each probe request (room for the reasoning and the answer).
    type: int
    default: 2048
  workers:
    description: Requests in flight at once.
    type: int
    default: 8
  timeout:
    description: Seconds each request may take.
    type: int
    default: 300
  force:
    description: Ask again even when a stored result of this identity on these probes exists.
    type: bool
    default: true
  tool_calls:
    description: The engine parses Kimi's tool calls (a deployment without a Kimi tool-call parser - its verify
      leaves the tool check out - is asked the other cases only).
    type: bool
    default: true
  reasoning_split:
    description: The engine splits the reasoning out of C(content) (a Kimi reasoning parser). False - the deployment
      says the thinking stays in C(content), so it is not counted as a leak and the answer is what follows it.
    type: bool
    default: true
  model:
    description:
      - The deployment's model (its entry's C(name), C(chat_format), C(thinking), C(reasoning_efforts)); the requests
        follow it - a model that always thinks is never asked with thinking off, a model with reasoning efforts is
        asked each in turn as C(reasoning_effort), the others get none. Unset - Kimi-K2.6's (optional thinking, no
        efforts).
      - The A/B compares a result taken on the same probes and the same model's requests only.
    type: dict
"""

EXAMPLES = r"""
- name: Gate the new identity on its answers
  kimi.deploy.serve_accuracy:
    url: http://127.0.0.1:30000
    probes: ["{{ lookup('ansible.builtin.file', 'kimi-k26-probes.yml') | from_yaml }}"]
    identity: int4-vllm
    previous_env_file: /etc/kimi-k26.env.1234.2026-11-28@10:00:00~
    result_dir: /var/lib/kimi-k26/accuracy
    thresholds: {min_schema_accuracy: 98, min_choice_accuracy: 95, max_reasoning_leaks: 0, max_answer_failures: 0}
"""

RETURN = r"""
figures:
  description: schema_accuracy, choice_accuracy, reasoning_leaks, answer_failures, cases, failed_cases, failing,
    seconds, probes_digest, identity, model (the model's name, what the next switch compares by).
  returned: always
  type: dict
before:
  description: The stored figures of the replaced identity (the A/B), or null (none, other probes, or another
    model).
  returned: always
  type: dict
reasons:
  description: Why the gate failed (empty when it passed).
  returned: always
  type: list
  elements: str
result_path:
  description: Where the result is stored.
  returned: always
  type: str
msg:
  description: One line - the figures, against the replaced identity's.
  returned: always
  type: str
"""

import hashlib
import json
import os
import re

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.kimi.deploy.plugins.module_utils import _accuracy as acc
from ansible_collections.kimi.deploy.plugins.module_utils._files import atomic_write
from ansible_collections.kimi.deploy.plugins.module_utils._model.models import DEFAULT_MODEL, model as model_entry

DEFAULT_KEY = acc.model_key(dict(model_entry(DEFAULT_MODEL), name=DEFAULT_MODEL))
IDENTITY_RE = re.compile(r"^[a-z0-9]+-[a-z0-9-]+$")


def previous_served(path):
    """(QUANT-FRAMEWORK, MODEL) of an environment file: (None, None) when unreadable, the model None when the file
    does not name it (the stored result's model decides then)."""
    try:
        with open(path) as handle:
            env = dict(re.findall(r"(?m)^([A-Z_]+)=(.*)$", handle.read()))
    except (IOError, OSError, TypeError):
        return None, None
    name = "%s-%s" % (env.get("QUANT", ""), env.get("FRAMEWORK", ""))
    if not IDENTITY_RE.match(name):
        return None, None
    return name, (env.get("MODEL") or "").strip() or None


def read_json(path):
    try:
        with open(path) as handle:
            return json.load(handle)
    except (IOError, OSError, ValueError):
        return None


def write_json(path, data):
    folder = os.path.dirname(path)
    if not os.path.isdir(folder):
        os.makedirs(folder, 0o755)
    atomic_write(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


def line(figures, before, note=None):
    text = "schema accuracy %.2f%%, choice accuracy %.2f%%, %d reasoning leaks, %d answer failures (%d cases in %.1f s)" % (
        figures["schema_accuracy"], figures["choice_accuracy"], figures["reasoning_leaks"],
        figures["answer_failures"], figures["cases"], figures["seconds"])
    if before:
        text += "; %s had %.2f%% and %.2f%%" % (
            before.get("identity"), before["schema_accuracy"], before["choice_accuracy"])
    if note:
        text += "; " + note
    return text


def main():
    module = AnsibleModule(
        argument_spec=dict(
            url=dict(type="str", default="http://127.0.0.1:30000"),
            served_model_name=dict(type="str", default="kimi-k2.6"),
            api_key=dict(type="str", no_log=True),
            ca_path=dict(type="path"),
            probes=dict(type="list", elements="dict", required=True),
            identity=dict(type="str", required=True),
            previous_env_file=dict(type="path"),
            result_dir=dict(type="path", required=True),
            thresholds=dict(type="dict", default={}),
            max_drop=dict(type="float", default=2.0),
            context_length=dict(type="int", default=8192),
            max_tokens=dict(type="int", default=2048, no_log=False),
            workers=dict(type="int", default=8),
            timeout=dict(type="int", default=300),
            force=dict(type="bool", default=True),
            tool_calls=dict(type="bool", default=True),
            reasoning_split=dict(type="bool", default=True),
            model=dict(type="dict"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    if not IDENTITY_RE.match(p["identity"]):
        module.fail_json(msg="identity=%r is not <quant>-<engine>" % p["identity"])
    try:
        cases = acc.applicable(acc.load_all(p["probes"]), p["tool_calls"], p["model"])
    except acc.ProbeError as exc:
        module.fail_json(msg="the probes are refused: %s" % exc)
    # the probes and the model's requests: a stored result counts (A/B, unchanged) only on the same ones. The default
    # model's digest is the probes' alone, as before models were data (its stored results stay comparable).
    key = acc.model_key(p["model"] or DEFAULT_KEY)
    digest = hashlib.sha256(json.dumps(p["probes"] if key == DEFAULT_KEY else [p["probes"], key],
                                       sort_keys=True).encode("utf-8")).hexdigest()[:16]
    model_name = key["name"] or DEFAULT_MODEL
    result_path = os.path.join(p["result_dir"], "%s.json" % p["identity"])
    replaced, replaced_model = (previous_served(p["previous_env_file"]) if p["previous_env_file"]
                                else (None, None))
    before = read_json(os.path.join(p["result_dir"], "%s.json" % replaced)) if replaced else None
    # the same model only: the identity replaced may have served another (or the same quant-engine of another model)
    before, note = acc.comparable(before, model_name, replaced_model, DEFAULT_MODEL)
    if before and before.get("probes_digest") != digest:
        before = None  # other probes: no A/B
    out = dict(changed=False, before=before, reasons=[], result_path=result_path)
    if module.check_mode:
        module.exit_json(figures=None, msg="would ask %d probe cases of %s%s" % (
            len(cases), p["identity"], "; " + note if note else ""), **out)
    stored = read_json(result_path)
    if (not p["force"] and stored and stored.get("probes_digest") == digest
            and (stored.get("model") or DEFAULT_MODEL) == model_name):
        module.exit_json(figures=stored, msg="unchanged since the last gate: " + line(stored, None), **out)
    outcomes, seconds = acc.run(cases, p["url"], p["served_model_name"], p["api_key"], p["ca_path"],
                                workers=p["workers"], timeout=p["timeout"], max_tokens=p["max_tokens"],
                                context_length=p["context_length"], reasoning_split=p["reasoning_split"])
    # the model is recorded with the figures: the next switch compares with them only when it serves the same model
    figures = dict(acc.figures(outcomes), seconds=seconds, probes_digest=digest, identity=p["identity"],
                   model=model_name)
    reasons = acc.judge(figures, p["thresholds"], before, p["max_drop"])
    out.update(figures=figures, reasons=reasons)
    if reasons:
        module.fail_json(msg="the accuracy gate failed for %s: %s; failing cases: %s%s" % (
            p["identity"], "; ".join(reasons), " | ".join(figures["failing"]) or "none",
            " (%s)" % note if note else ""), **out)
    out["msg"] = line(figures, before, note)
    write_json(result_path, dict(figures, outcomes=outcomes))
    out["changed"] = True
    module.exit_json(**out)


if __name__ == "__main__":
    main()
