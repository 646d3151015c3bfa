#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: serve_verify
short_description: Verify an OpenAI-compatible Kimi-K2.6 endpoint - health, models, text, tools, vision
description:
  - The go/no-go gate before an engine takes traffic (the runbook's verify step). Runs on the host, with Python's
    standard library only, against the engine (C(http://127.0.0.1:30000)) or a proxy in front of it.
  - One result per check, with its latency.
  - V(health) - C(GET /health) answers 200.
  - V(models) - C(GET /v1/models) lists O(served_model_name).
  - V(text) - a chat answer with thinking on (Kimi-K2.6's default); the answer may be in C(content) or, for a
    thinking model, in C(reasoning_content) / C(reasoning); it must not be empty.
  - "V(text_no_thinking) - the same with C(chat_template_kwargs) C({\"thinking\": false}); the answer must be in
    C(content), with no reasoning. A model that always thinks (C(kimi_deployment.model.thinking) C(always), e.g.
    Kimi-K3, Kimi-K2.7-Code) ignores the switch and cannot pass it; the kimi.deploy.kimi_serve role leaves it out there."
  - V(tool) - a request with one tool (a required C(city) property); C(tool_calls) must be present, name that tool,
    and carry C(function.arguments) that is a JSON object with the required key (vLLM needs
    C(--enable-auto-tool-choice) and C(--tool-call-parser) for this).
  - V(vision) - a solid red PNG generated here, sent as a base64 data URL; the answer in C(content) must name the
    colour. O(max_tokens) must leave room for the reasoning and the answer.
  - V(no_key) - C(GET /v1/models) without any key must be refused with 401 (a proxy that checks keys; the engine
    itself answers 200 there).
  - V(speculative) - with speculative decoding on (O(speculative_metrics)), a long answer, then the engine's own
    Prometheus text at O(engine_metrics_path) must count drafted tokens; the acceptance rate and mean accepted length
    it reports are returned as RV(speculative). Fails when the engine drafted nothing (speculation is off).
  - V(metrics) - every path of O(metrics_paths) answers O(metrics_key) with 200 and Prometheus text (a C(# TYPE)
    line), and O(api_key) with 401 (a proxy that serves metrics to a metrics key only). An exporter that is still
    starting gets up to O(metrics_wait) seconds. One module run for every path, where one C(uri) task per path and
    key would each pay a round trip to the host.
  - Fails when any check fails, with a message listing the failed checks and why. Changes nothing.
version_added: 1.0.0
author: kimi.deploy maintainers (@kimi-deploy)
options:
  url:
    description: Base URL of the API (without C(/v1)).
    type: str
    default: http://127.0.0.1:30000
  served_model_name:
    description: The model id to list and to send requests to.
    type: str
    default: kimi-k2.6
  api_key:
    description:
      - "Sent as C(Authorization: Bearer <api_key>) on every request when set (a proxy such as Caddy that checks keys)."
      - Never returned.
    type: str
  validate_certs:
    description: Verify the server's TLS certificate for an C(https) O(url).
    type: bool
    default: true
  ca_path:
    description: CA bundle (PEM) to verify the server's certificate with, instead of the system's.
    type: path
  use_proxy:
    description: Use the proxy of the environment (C(https_proxy), ...). Off by default - the engine is local.
    type: bool
    default: false
  checks:
    description: The checks to run, in this order.
    type: list
    elements: str
    choices: [health, models, text, text_no_thinking, tool, vision, no_key, metrics, speculative]
    default: [health, models, text, text_no_thinking, tool, vision]
  metrics_paths:
    description: The paths of the V(metrics) check, e.g. C([/metrics, /metrics/node]).
    type: list
    elements: str
    default: []
  metrics_key:
    description:
      - "The key the V(metrics) check reads O(metrics_paths) with (C(Authorization: Bearer <metrics_key>)). Never
        returned."
    type: str
  metrics_wait:
    description: Seconds the V(metrics) check keeps asking while a path does not answer as it should yet.
    type: int
    default: 10
  speculative_metrics:
    description:
      - The engine's speculative-decoding series, as C(kimi_deployment.speculative.metrics) gives them - C(kind)
        C(counters) (vLLM - C(drafts), C(draft_tokens), C(accepted) totals) or C(gauges) (SGLang - C(accept_length),
        C(accept_rate)). Required by the V(speculative) check.
    type: dict
  engine_metrics_path:
    description: Where the engine serves its Prometheus text, under O(url) (the V(speculative) check reads it).
    type: str
    default: /metrics
  timeout:
    description: Seconds one request may take.
    type: int
    default: 300
  max_tokens:
    description: C(max_tokens) of the chat requests; large enough that the reasoning cannot eat the answer.
    type: int
    default: 2048
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: It only reads, so it runs in check mode too.
  diff_mode:
    support: none
  platform:
    platforms: posix
notes:
  - An empty vision answer with C(finish_reason=length) and the colour in C(reasoning_content) means the reasoning
    used up O(max_tokens) - raise it; it is not a vision failure.
seealso:
  - module: kimi.deploy.serve_ready
"""

EXAMPLES = r"""
- name: Verify the engine on the host
  kimi.deploy.serve_verify:
    served_model_name: kimi-k2.6
  register: kimi_verify

- name: Verify through the proxy, with a key
  kimi.deploy.serve_verify:
    url: https://kimi.example.internal
    served_model_name: kimi-k2.6
    api_key: "{{ kimi_api_key }}"
    ca_path: /etc/caddy/ca.pem
    checks: [models, text, tool]

- name: Show the latencies
  ansible.builtin.debug:
    msg: "{{ kimi_verify.checks | items2dict(key_name='name', value_name='latency_s') }}"
"""

RETURN = r"""
checks:
  description: One result per check, in the order run.
  returned: always
  type: list
  elements: dict
  contains:
    name:
      description: The check.
      type: str
      sample: tool
    ok:
      description: The check passed.
      type: bool
    latency_s:
      description: Seconds the request took (null when no request was made).
      type: float
      sample: 1.42
    detail:
      description: What was seen - the answer, the model ids, or why the check failed.
      type: str
      sample: "get_weather({\"city\": \"Paris\"})"
passed:
  description: Every check passed.
  returned: always
  type: bool
speculative:
  description: What speculative decoding achieved during the checks (the V(speculative) check), else null.
  returned: always
  type: dict
  contains:
    accept_rate:
      description: Accepted draft tokens over drafted ones (null where the engine reports only the mean length).
      type: float
      sample: 0.62
    mean_accepted_length:
      description: Tokens each target step produced on average (1 + accepted tokens per draft).
      type: float
      sample: 2.85
    drafts:
      description: The drafts counted (vLLM), or null.
      type: int
failed_checks:
  description: The names of the checks that failed.
  returned: always
  type: list
  elements: str
"""

import base64
import json
import re
import socket
import ssl
import struct
import time
import zlib

from urllib.error import HTTPError, URLError
from urllib.request import HTTPSHandler, ProxyHandler, Request, build_opener

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.kimi.deploy.plugins.module_utils._model.speculative import acceptance
# The checks and the default ones (no_key only makes sense through a proxy that checks keys) come from the one table;
# test_verify_checks.py compares DOCUMENTATION's choices and default with it.
from ansible_collections.kimi.deploy.plugins.module_utils._model.verify_checks import (
    ALL as CHECKS, MODULE_DEFAULT as DEFAULT_CHECKS)

VISION_COLOUR = ("red", (220, 20, 20))
TEXT_PROMPT = "What is the capital of France? Answer in one short sentence."
TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "The city name"}},
                   "required": ["city"]}}}
TOOL_PROMPT = "What is the weather in Paris right now? Use the get_weather tool."
VISION_PROMPT = "What colour is this image? Answer with the colour name only."
DETAIL_CHARS = 200


def make_png(width, height, rgb):
    """A solid-colour PNG: 8-bit RGB, non-interlaced, filter type 0 on every row."""
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
    row = b"\x00" + bytes(bytearray(rgb)) * width
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(row * height, 9)) + chunk(b"IEND", b""))


def excerpt(text, size=DETAIL_CHARS):
    text = " ".join(str(text or "").split())
    return text if len(text) <= size else text[:size - 3] + "..."


class CheckFailed(Exception):
    """A check's failure; the message is its detail."""


class Verifier(object):
    """The checks against one endpoint. opener: a urllib opener (built from the options when None)."""

    def __init__(self, params, opener=None):
        self.p = params
        self.base = params["url"].rstrip("/")
        self.speculative = None
        self.opener = opener or self.build_opener()

    def build_opener(self):
        handlers = [] if self.p["use_proxy"] else [ProxyHandler({})]
        if self.base.startswith("https://"):
            context = ssl.create_default_context(cafile=self.p["ca_path"] or None)
            if not self.p["validate_certs"]:
                context.check_hostname = False
                context.verify_mode = ssl.CERT_NONE
            handlers.append(HTTPSHandler(context=context))
        return build_opener(*handlers)

    # ---- HTTP -------------------------------------------------------------------------------------------
    def request(self, path, body=None, key=True, bearer=None):
        """(status, parsed JSON or raw text). Raises CheckFailed when there is no HTTP answer. bearer: send that key
        instead of api_key."""
        headers = {"Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body).encode("utf-8")
            headers["Content-Type"] = "application/json"
        if bearer or (self.p["api_key"] and key):
            headers["Authorization"] = "Bearer " + (bearer or self.p["api_key"])
        req = Request(self.base + path, data=data, headers=headers, method="POST" if data is not None else "GET")
        try:
            response = self.opener.open(req, timeout=self.p["timeout"])
            status, raw = response.getcode(), response.read()
        except HTTPError as exc:
            status, raw = exc.code, exc.read()
        except (socket.timeout, TimeoutError):
            raise CheckFailed("no answer within %d s (timeout) from %s" % (self.p["timeout"], self.base + path))
        except URLError as exc:
            raise CheckFailed("cannot reach %s: %s" % (self.base + path, exc.reason))
        except (OSError, ValueError) as exc:
            raise CheckFailed("cannot reach %s: %s" % (self.base + path, exc))
        text = raw.decode("utf-8", "replace")
        try:
            return status, json.loads(text)
        except ValueError:
            return status, text

    def chat(self, messages, **extra):
        body = dict({"model": self.p["served_model_name"], "messages": messages, "max_tokens": self.p["max_tokens"]},
                    **extra)
        status, reply = self.request("/v1/chat/completions", body)
        if status != 200:
            raise CheckFailed("POST /v1/chat/completions answered %s: %s" % (status, excerpt(error_text(reply))))
        try:
            choice = reply["choices"][0]
            return choice.get("message") or {}, choice.get("finish_reason")
        except (KeyError, IndexError, TypeError):
            raise CheckFailed("POST /v1/chat/completions: not a chat completion: %s" % excerpt(json.dumps(reply)))

    # ---- checks -----------------------------------------------------------------------------------------
    def check_health(self):
        status, reply = self.request("/health")
        if status != 200:
            raise CheckFailed("GET /health answered %s: %s" % (status, excerpt(error_text(reply))))
        return "GET /health answered 200"

    def check_models(self):
        status, reply = self.request("/v1/models")
        if status != 200:
            raise CheckFailed("GET /v1/models answered %s: %s" % (status, excerpt(error_text(reply))))
        data = reply.get("data") if isinstance(reply, dict) else None
        ids = [m.get("id") for m in data or [] if isinstance(m, dict)]
        if self.p["served_model_name"] not in ids:
            raise CheckFailed("GET /v1/models lists %s, not %r" % (ids, self.p["served_model_name"]))
        return "lists %s" % ", ".join(str(i) for i in ids)

    def check_no_key(self):
        status, reply = self.request("/v1/models", key=False)
        if status != 401:
            raise CheckFailed("GET /v1/models without a key answered %s, not 401: %s" % (
                status, excerpt(error_text(reply))))
        return "GET /v1/models without a key answered 401"

    def _metrics_problems(self):
        problems = []
        for path in self.p["metrics_paths"]:
            try:
                status, text = self.request(path, bearer=self.p["metrics_key"])
                if status != 200:
                    problems.append("%s with the metrics key: %s, not 200" % (path, status))
                elif "# TYPE " not in str(text):
                    problems.append("%s with the metrics key: not Prometheus text" % path)
                status, _text = self.request(path, key=bool(self.p["api_key"]))
                if status != 401:
                    problems.append("%s with %s: %s, not 401" % (path, "a client key" if self.p["api_key"] else "no key",
                                                                 status))
            except CheckFailed as exc:
                problems.append("%s: %s" % (path, exc))
        return problems

    def check_metrics(self):
        if not self.p["metrics_paths"] or not self.p["metrics_key"]:
            raise CheckFailed("the metrics check needs metrics_paths and metrics_key")
        deadline = time.time() + self.p["metrics_wait"]
        problems = self._metrics_problems()
        while problems and time.time() < deadline:
            time.sleep(2)
            problems = self._metrics_problems()
        if problems:
            raise CheckFailed("%s. The metrics key must get 200 with Prometheus text at every metrics path, and a client "
                              "key 401 (is the exporter behind the path running on loopback?)" % "; ".join(problems))
        return "%s: 200 with the metrics key, 401 with %s" % (", ".join(self.p["metrics_paths"]),
                                                              "a client key" if self.p["api_key"] else "no key")

    def check_speculative(self):
        """A long answer (the draft proposes, the target verifies), then the engine's own counters of it."""
        spec = self.p["speculative_metrics"]
        if not spec:
            raise CheckFailed("the speculative check needs speculative_metrics (kimi_deployment.speculative.metrics)")
        self.chat([{"role": "user", "content": "Count from one to forty in words, comma separated."}],
                  chat_template_kwargs={"thinking": False})
        path = self.p["engine_metrics_path"]
        status, text = self.request(path, key=False)
        if status != 200 or not isinstance(text, str):
            raise CheckFailed("GET %s answered %s: the engine's metrics are needed to see speculation" % (path, status))
        self.speculative = acceptance(text, spec)
        if not self.speculative:
            raise CheckFailed("%s has no drafted tokens (%s): the engine is not speculating" % (path, ", ".join(
                v for k, v in sorted(spec.items()) if k != "kind")))
        rate = self.speculative["accept_rate"]
        return "acceptance rate %s, mean accepted length %.2f%s" % (
            "%.0f%%" % (rate * 100) if rate is not None else "not reported", self.speculative["mean_accepted_length"],
            " over %d drafts" % self.speculative["drafts"] if self.speculative["drafts"] else "")

    def check_text(self):
        message, finish = self.chat([{"role": "user", "content": TEXT_PROMPT}])
        content = (message.get("content") or "").strip()
        reasoning = (message.get("reasoning_content") or message.get("reasoning") or "").strip()
        if content:
            return "content: %s" % excerpt(content)
        if reasoning:
            return "answer only in the reasoning (finish_reason=%s): %s" % (finish, excerpt(reasoning))
        raise CheckFailed("empty answer: no content, no reasoning_content (finish_reason=%s)" % finish)

    def check_text_no_thinking(self):
        message, finish = self.chat([{"role": "user", "content": TEXT_PROMPT}],
                                    chat_template_kwargs={"thinking": False})
        content = (message.get("content") or "").strip()
        reasoning = (message.get("reasoning_content") or message.get("reasoning") or "").strip()
        if not content:
            raise CheckFailed("no content with thinking off (finish_reason=%s)%s" % (
                finish, "; reasoning: %s" % excerpt(reasoning) if reasoning else ""))
        if reasoning:
            # The switch was not read: a model that always thinks (Kimi-K3, Kimi-K2.7-Code) cannot pass this check.
            raise CheckFailed("reasoning with thinking off: chat_template_kwargs thinking=false was not honoured (a "
                              "model that always thinks cannot pass text_no_thinking): %s" % excerpt(reasoning, 120))
        return "content: %s" % excerpt(content)

    def check_tool(self):
        message, finish = self.chat([{"role": "user", "content": TOOL_PROMPT}], tools=[TOOL], tool_choice="auto")
        calls = message.get("tool_calls") or []
        if not calls:
            raise CheckFailed("no tool_calls in the reply (finish_reason=%s); content: %s (tool parsing needs "
                              "--tool-call-parser kimi_k2, and on vLLM --enable-auto-tool-choice)"
                              % (finish, excerpt(message.get("content"), 120) or "empty"))
        function = (calls[0] or {}).get("function") or {}
        name, arguments = function.get("name"), function.get("arguments")
        if name != TOOL["function"]["name"]:
            raise CheckFailed("the tool call names %r, not %r" % (name, TOOL["function"]["name"]))
        try:
            parsed = json.loads(arguments) if isinstance(arguments, str) else arguments
        except ValueError:
            raise CheckFailed("function.arguments is not valid JSON: %s" % excerpt(arguments))
        missing = [k for k in TOOL["function"]["parameters"]["required"] if not isinstance(parsed, dict) or k not in parsed]
        if missing:
            raise CheckFailed("function.arguments lacks the required %s: %s" % (", ".join(missing), excerpt(arguments)))
        return "%s(%s)" % (name, excerpt(json.dumps(parsed, sort_keys=True), 120))

    def check_vision(self):
        colour, rgb = VISION_COLOUR
        url = "data:image/png;base64," + base64.b64encode(make_png(64, 64, rgb)).decode("ascii")
        content = [{"type": "text", "text": VISION_PROMPT}, {"type": "image_url", "image_url": {"url": url}}]
        message, finish = self.chat([{"role": "user", "content": content}])
        answer = (message.get("content") or "").strip()
        if re.search(r"\b%s\b" % colour, answer, re.IGNORECASE):
            return "a %s PNG: %s" % (colour, excerpt(answer))
        reasoning = message.get("reasoning_content") or message.get("reasoning") or ""
        if not answer and reasoning:
            raise CheckFailed("no answer in content (finish_reason=%s), the reasoning says: %s%s" % (
                finish, excerpt(reasoning, 120), " - raise max_tokens" if finish == "length" else ""))
        raise CheckFailed("asked for the colour of a %s PNG, the answer does not name it: %s" % (colour, excerpt(answer) or "empty"))

    def run(self):
        """[{name, ok, latency_s, detail}] for the checks asked for."""
        results = []
        for name in self.p["checks"]:
            started = time.time()
            try:
                detail, ok = getattr(self, "check_" + name)(), True
            except CheckFailed as exc:
                detail, ok = str(exc), False
            results.append({"name": name, "ok": ok, "latency_s": round(time.time() - started, 3), "detail": detail})
        return results


def error_text(reply):
    if isinstance(reply, dict):
        error = reply.get("error")
        if isinstance(error, dict) and error.get("message"):
            return error["message"]
        if reply.get("message"):
            return reply["message"]
        return json.dumps(reply)
    return reply


def main():
    module = AnsibleModule(
        argument_spec=dict(
            url=dict(type="str", default="http://127.0.0.1:30000"),
            served_model_name=dict(type="str", default="kimi-k2.6"),
            api_key=dict(type="str", no_log=True),
            validate_certs=dict(type="bool", default=True),
            ca_path=dict(type="path"),
            use_proxy=dict(type="bool", default=False),
            checks=dict(type="list", elements="str", choices=list(CHECKS), default=list(DEFAULT_CHECKS)),
            metrics_paths=dict(type="list", elements="str", default=[]),
            metrics_key=dict(type="str", no_log=True),
            metrics_wait=dict(type="int", default=10),
            speculative_metrics=dict(type="dict"),
            engine_metrics_path=dict(type="str", default="/metrics"),
            timeout=dict(type="int", default=300),
            max_tokens=dict(type="int", default=2048, no_log=False),
        ),
        supports_check_mode=True,
    )
    p = module.params
    if not p["url"].startswith(("http://", "https://")):
        module.fail_json(msg="url must be an http(s) URL such as http://127.0.0.1:30000, got %r" % p["url"], option="url")
    for name, low in (("timeout", 1), ("max_tokens", 16)):
        if p[name] < low:
            module.fail_json(msg="%s must be at least %d, got %s" % (name, low, p[name]), option=name)
    if not p["checks"]:
        module.fail_json(msg="checks is empty: name at least one of %s" % ", ".join(CHECKS), option="checks")
    verifier = Verifier(p)
    checks = verifier.run()
    failed = [c for c in checks if not c["ok"]]
    result = dict(changed=False, checks=checks, passed=not failed, failed_checks=[c["name"] for c in failed],
                  speculative=verifier.speculative)
    if failed:
        module.fail_json(msg="%d of %d checks failed against %s (%s): %s" % (
            len(failed), len(checks), p["url"], p["served_model_name"],
            "; ".join("%s: %s" % (c["name"], c["detail"]) for c in failed)), **result)
    module.exit_json(msg="%d checks passed" % len(checks), **result)


if __name__ == "__main__":
    main()
