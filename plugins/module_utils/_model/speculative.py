# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Speculative decoding: the method, the draft, its knobs, what it costs in memory, and what it achieved. Private to
kimi.deploy.

kimi_speculative is `none` (the default), `eagle3` or `dflash` (a draft model proposes tokens that the target checks in
one forward pass), or `ngram` (the prompt itself is the draft: no model). resolve_speculative() is called by
the deployment's resolve() and decides, from the engine's data (its `speculative` field) and the version's own flag
list (the methods it accepts): the engine's name of the method, the draft (a known one of the model's drafts,
_model/models.py, or the user's repo with its pinned revision), the knobs with each engine's rules, and a refusal with
the reason where the engine version, the quant or the deployment cannot run it. The engine data files emit the flags from the
`speculative` field (_engines/spec.py's spec_* functions read it; nothing here renders a flag). draft_mismatch()
compares a downloaded draft's config.json with the target's (kimi_weights runs it before anything serves);
acceptance() reads the engine's metrics into the acceptance rate and mean accepted length the verify summary reports.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.kimi.deploy.plugins.module_utils._engines.spec import DRAFT_METHODS
from ansible_collections.kimi.deploy.plugins.module_utils._model.checkpoints import (
    TARGET_HIDDEN_SIZE, TARGET_LAYERS, TARGET_VOCAB_SIZE, UNKNOWN_DRAFT_BYTES)
from ansible_collections.kimi.deploy.plugins.module_utils._model.models import DEFAULT_MODEL, model as model_entry
from ansible_collections.kimi.deploy.plugins.module_utils._model.inputs import (
    DeploymentError, check_choice, check_int, check_text, fail, is_unset)
from ansible_collections.kimi.deploy.plugins.module_utils._model.validate import ValueRuleError, check_revision

METHODS = ("none", "eagle3", "dflash", "ngram")
REPO_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,95}/[A-Za-z0-9][A-Za-z0-9_.-]{0,95}")
REVISION_VARIABLE = "kimi_speculative_draft_revision"
# The range of each knob (the engines take larger values; past these the verify cost outgrows any acceptance).
MAX_TOKENS = 16
MAX_TOPK = 8
MAX_DRAFT_TOKENS = 64

WHEN_IT_PAYS = ("Speculation pays at low concurrency with long outputs (a single agent, long answers or code): each "
                "target step checks several drafted tokens, and mean accepted lengths of 2.5-3.2 are reported for "
                "Kimi-K2.6's EAGLE-3 drafts. It does not pay at high concurrency, where the batch already fills the "
                "GPUs and the rejected drafts are wasted compute, nor for short answers.")


def _default_draft(engine_spec, method, entry=None):
    """The model's known draft for the method on this engine (the model's data, by engine name), or None."""
    return ((entry or model_entry(DEFAULT_MODEL))["default_drafts"].get(engine_spec["name"]) or {}).get(method)


def _engine_methods(engine_spec, options):
    """The methods this engine version accepts, in the engine's spelling (its flag list's values)."""
    spec = engine_spec["speculative"]
    for dest in spec["methods_from"]:
        values = options["values"].get(dest)
        if values:
            return tuple(values)
    return ()


def _check_draft(method, inputs, engine_spec, require_revision, warnings, entry=None):
    """The draft of a draft method: the model's known one for the engine unless kimi_speculative_draft names another,
    with its pinned revision. A known draft of another method is refused."""
    entry = entry or model_entry(DEFAULT_MODEL)
    drafts = entry["drafts"]
    given = check_text("speculative_draft", inputs.get("speculative_draft"), REPO_RE,
                       ["a Hugging Face repo id, e.g. %s" % (_default_draft(engine_spec, method, entry)
                                                             or "lightseekorg/kimi-k2.6-eagle3")], None)
    repo_id = given or _default_draft(engine_spec, method, entry)
    if repo_id is None:
        others = ", ".join("%s (%s)" % (r, d["method"]) for r, d in sorted(drafts.items()) if d["method"] != method)
        fail("speculative_draft", None, sorted(r for r, d in drafts.items() if d["method"] == method)
             or ["the repo id of a %s draft trained for %s" % (method, entry["title"])],
             "%s has no known %s draft for %s: name one%s" % (
                 engine_spec["title"], method, entry["title"],
                 " (its known drafts are of methods kimi_speculative does not run: %s)" % others if others else ""))
    known = drafts.get(repo_id)
    if known and known["method"] != method:
        fail("speculative_draft", repo_id, sorted(r for r, d in drafts.items() if d["method"] == method),
             "%s is a %s draft, not %s (%s)" % (repo_id, known["method"], method, known["source"]))
    revision = inputs.get("speculative_draft_revision")
    if not require_revision and (revision is None or (isinstance(revision, str) and revision.strip() == "")):
        warnings.append("%s is not set: site.yml will refuse to run until the draft %s is pinned to a commit."
                        % (REVISION_VARIABLE, repo_id))
        revision = None
    else:
        try:
            revision = check_revision(revision, repo_id, REVISION_VARIABLE)
        except ValueRuleError as exc:
            raise DeploymentError(str(exc))
    if not known:
        warnings.append("%s is not a draft this collection knows: its size is estimated (%.0f GB) until the download "
                        "plan reads it, and kimi_weights checks its config.json against %s's before it serves."
                        % (repo_id, UNKNOWN_DRAFT_BYTES / 1e9, entry["title"]))
    if known and known.get("gated"):
        warnings.append("%s is gated on the hub: kimi_weights_hf_token must belong to an account that was granted "
                        "access." % repo_id)
    return {
        "repo_id": repo_id,
        "revision": revision,
        "revision_variable": REVISION_VARIABLE,
        "known": bool(known),
        "source": known["source"] if known else "kimi_speculative_draft",
        "architecture": known["architecture"] if known else None,
        "weights_bytes": known["weights_bytes"] if known and known["weights_bytes"] else UNKNOWN_DRAFT_BYTES,
        # An unknown draft's KV is taken as the largest known one's (six GQA layers).
        "kv": dict(known["kv"]) if known else {"layers": 6, "kv_heads": 8, "head_dim": 128},
    }


def _knobs(method, form, inputs, draft_data, engine_spec):
    """(tokens, topk, draft_tokens) for the method in the engine's form, validated.

    tokens:       the tokens drafted per step: vLLM num_speculative_tokens, SGLang --speculative-num-steps (EAGLE-3)
                  or --speculative-num-draft-tokens (DFlash block, n-gram);
    topk, draft_tokens: SGLang's EAGLE tree (topk branches per step, draft_tokens verified in all); with topk 1 the
                  chain verifies steps + 1 tokens, which SGLang enforces.
    """
    topk, draft_tokens = None, None
    if form == "sglang" and method == "dflash":
        # SGLang sets DFlash's steps and topk to 1 and its block (the tokens verified) from the draft's config.json
        # (block_size; server_args.py 0.5.12.post1 lines 3605-3697); a different --speculative-num-draft-tokens fails.
        for field in ("speculative_tokens", "speculative_topk", "speculative_draft_tokens"):
            if not is_unset(inputs.get(field)):
                fail(field, inputs[field], ["unset"], "SGLang's DFlash drafts one block of the size the draft's "
                     "config.json gives (block_size)")
        return None, None, None
    # SGLang's own choice for Kimi and DeepSeek is 3 steps, topk 1, 4 draft tokens (auto_choose_speculative_params);
    # its n-gram default is 12 draft tokens; seed 004 drafts 15 DFlash tokens on vLLM.
    defaults = {"eagle3": 3, "dflash": 15, "ngram": 12 if form == "sglang" else 4}
    tokens = inputs.get("speculative_tokens")
    tokens = (draft_data or {}).get("tokens", defaults[method]) if is_unset(tokens) else tokens
    tokens = check_int("speculative_tokens", tokens, 1, MAX_TOKENS)
    eagle_tree = form == "sglang" and method == "eagle3"
    if not eagle_tree:
        for field in ("speculative_topk", "speculative_draft_tokens"):
            if not is_unset(inputs.get(field)):
                fail(field, inputs[field], ["unset"], "%s with method %s takes only kimi_speculative_tokens (%s)"
                     % (engine_spec["title"], method, "vLLM drafts one chain of num_speculative_tokens"
                        if form == "vllm" else "SGLang drafts a block of --speculative-num-draft-tokens"))
        return tokens, topk, draft_tokens
    topk = inputs.get("speculative_topk")
    topk = check_int("speculative_topk", (draft_data or {}).get("topk", 1) if is_unset(topk) else topk, 1, MAX_TOPK)
    chain = tokens + 1
    given = inputs.get("speculative_draft_tokens")
    if topk == 1:
        if not is_unset(given) and check_int("speculative_draft_tokens", given, 2, MAX_DRAFT_TOKENS) != chain:
            fail("speculative_draft_tokens", given, [chain, "unset"], "with kimi_speculative_topk 1 SGLang verifies "
                 "one chain of kimi_speculative_tokens + 1 tokens (it overrides any other value)")
        return tokens, topk, chain
    tree = 1 + topk * tokens
    draft_tokens = tree if is_unset(given) else check_int("speculative_draft_tokens", given, 2,
                                                          min(tree, MAX_DRAFT_TOKENS))
    return tokens, topk, min(draft_tokens, MAX_DRAFT_TOKENS)


def resolve_speculative(inputs, engine_spec, version, options, quant, deployment, require_revision, warnings,
                        model=DEFAULT_MODEL):
    """The `speculative` field of a deployment, or None for kimi_speculative none.

    engine_spec: the engine build's data; options: the version's flag list; deployment: the fields resolved so far
    (tp, pp, nodes, pd). Raises DeploymentError naming the variable for anything that cannot run.
    """
    method = inputs.get("speculative")
    method = "none" if is_unset(method) or method is False else str(method).strip().lower()
    check_choice("speculative", method, METHODS)
    if method == "none":
        for field in ("speculative_draft", "speculative_draft_revision", "speculative_tokens", "speculative_topk",
                      "speculative_draft_tokens"):
            if not is_unset(inputs.get(field)):
                fail(field, inputs[field], ["unset"], "kimi_speculative is none")
        return None
    title = "%s %s" % (engine_spec["title"], version)
    spec = engine_spec.get("speculative")
    if spec is None:
        fail("speculative", method, ["none"], "%s: %s" % (title, engine_spec["speculative_why"]))
    engine_name = spec["names"][method]
    accepted = _engine_methods(engine_spec, options)
    if engine_name not in accepted:
        ours = [m for m in METHODS[1:] if spec["names"].get(m) in accepted]
        fail("speculative", method, ["none"] + ours, "%s does not accept %s %s (its methods: %s)"
             % (title, spec["option"], engine_name, ", ".join(accepted) or "none listed"))
    for condition, why in spec["refused"]:
        reason = condition(method, quant, deployment)
        if reason:
            fail("speculative", method, ["none"], "%s: %s" % (title, why if reason is True else reason))
    draft = None
    if method in DRAFT_METHODS:
        draft = _check_draft(method, inputs, engine_spec, require_revision, warnings, model_entry(model))
    else:  # the draft and its revision alike: the n-gram method has neither
        for field in ("speculative_draft", "speculative_draft_revision"):
            if not is_unset(inputs.get(field)):
                fail(field, inputs[field], ["unset"], "the n-gram method drafts from the prompt itself and loads no "
                     "model")
    tokens, topk, draft_tokens = _knobs(method, spec["form"], inputs,
                                        model_entry(model)["drafts"].get(draft["repo_id"]) if draft else None,
                                        engine_spec)
    result = {
        "method": method,
        "engine_method": engine_name,
        "form": spec["form"],
        "draft": draft,
        "tokens": tokens,
        "topk": topk,
        "draft_tokens": draft_tokens,
        # SGLang-Ascend applies the target's --quantization (modelslim) to the draft unless told not to (seed 001).
        "draft_quantization": spec.get("draft_quantization") if draft else None,
        "metrics": spec["metrics"],
        "why": ("the draft as named by %s" % draft["source"] if draft
                else "n-grams of the prompt and the output so far are the draft: no draft model"),
    }
    result["summary"] = summary_line(result)
    return result


def summary_line(speculative):
    """One line for the plan and the report: the method, the draft and the knobs."""
    if not speculative:
        return "none"
    knobs = "%d tokens per step" % speculative["tokens"] if speculative["tokens"] else "the draft's block size"
    if speculative["topk"]:
        knobs = "%d steps, topk %d, %d draft tokens verified" % (
            speculative["tokens"], speculative["topk"], speculative["draft_tokens"])
    draft = speculative["draft"]
    return "%s (%s)%s, %s" % (speculative["method"], speculative["engine_method"], (
        " with %s@%s" % (draft["repo_id"], (draft["revision"] or "<unpinned>")[:12])) if draft else "", knobs)


# ---------------------------------------------------------------------------------------------------
# The draft's config against the target's (kimi_weights, after the download, before anything serves)
# ---------------------------------------------------------------------------------------------------

def _text_config(config):
    return config.get("text_config") or config


def draft_mismatch(target_config, draft_config, method, repo_id="the draft"):
    """Why the draft cannot serve with the target (a sentence naming the field and both values), or None.

    A draft reads the target's hidden states and proposes token ids of the target's tokenizer: its hidden size and its
    vocabulary must be the target's; an EAGLE-3 draft's aux layers must exist in the target; its architecture must be
    the method's.
    """
    target = _text_config(target_config or {})
    draft = draft_config or {}
    t_hidden = target.get("hidden_size", TARGET_HIDDEN_SIZE)
    t_vocab = target.get("vocab_size", TARGET_VOCAB_SIZE)
    t_layers = target.get("num_hidden_layers", TARGET_LAYERS)
    hidden = draft.get("target_hidden_size") or draft.get("hidden_size")
    if hidden != t_hidden:
        return ("%s has hidden_size %s and Kimi-K2.6 has %s: it was trained for another target and cannot read its "
                "hidden states" % (repo_id, hidden, t_hidden))
    vocab = draft.get("vocab_size")
    if vocab != t_vocab:
        return ("%s has vocab_size %s and Kimi-K2.6's tokenizer has %s: its token ids are another tokenizer's"
                % (repo_id, vocab, t_vocab))
    architectures = " ".join(draft.get("architectures") or [])
    expected = {"eagle3": "eagle3", "dflash": "dflash"}[method]
    if expected not in architectures.lower():
        return "%s's architectures are [%s], not an %s draft's" % (repo_id, architectures, method)
    layers = (draft.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids") or draft.get("target_layer_ids")
    beyond = [n for n in layers or [] if not 0 <= int(n) < t_layers]
    if beyond:
        return "%s reads target layers %s, and Kimi-K2.6 has %d" % (repo_id, beyond, t_layers)
    mask = draft.get("mask_token_id")
    if mask is not None and not 0 <= int(mask) < t_vocab:
        return "%s's mask_token_id %s is outside Kimi-K2.6's vocabulary of %d" % (repo_id, mask, t_vocab)
    return None


# ---------------------------------------------------------------------------------------------------
# What speculation achieved: the engine's own counters (the verify summary)
# ---------------------------------------------------------------------------------------------------

SAMPLE_RE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(\{[^}]*\})?\s+([-+0-9.eEinfNa]+)(?:\s+\d+)?$")


def _samples(text):
    out = {}
    for line in (text or "").splitlines():
        match = SAMPLE_RE.match(line.strip())
        if match:
            try:
                out.setdefault(match.group(1), []).append(float(match.group(3)))
            except ValueError:
                continue
    return out


def acceptance(metrics_text, metrics):
    """{accept_rate, mean_accepted_length, drafts} from the engine's Prometheus text, read with the engine's names
    (its data's speculative.metrics), or None where it has no speculative series (yet).

    counters: vLLM's totals (accepted / drafted tokens is the acceptance rate; 1 + accepted / drafts the mean accepted
    length, its own log line's formulas); gauges: SGLang's running averages.
    """
    samples = _samples(metrics_text)
    if metrics["kind"] == "counters":
        drafts = sum(samples.get(metrics["drafts"], []))
        drafted = sum(samples.get(metrics["draft_tokens"], []))
        accepted = sum(samples.get(metrics["accepted"], []))
        if not drafts or not drafted:
            return None
        return {"accept_rate": round(accepted / drafted, 3), "mean_accepted_length": round(1 + accepted / drafts, 2),
                "drafts": int(drafts)}
    length = samples.get(metrics["accept_length"])
    if not length:
        return None
    rate = samples.get(metrics.get("accept_rate") or "", [])
    return {"accept_rate": round(sum(rate) / len(rate), 3) if rate else None,
            "mean_accepted_length": round(sum(length) / len(length), 2), "drafts": None}
