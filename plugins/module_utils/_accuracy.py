# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The accuracy probes: the probe file's format, the requests, the scoring and the figures (standard library only:
the serve_accuracy module runs it on the host, and kimi_probes copies it beside the serving-time probe script).

A probe file (roles/kimi_probes/files/kimi-k26-probes.yml is the shipped one; docs: accuracy.rst):
  version: 1
  variants: [{thinking: true, stream: false}, ...]   # each case runs once per variant unless it names its own
  tools: {key: {name (default: the key), description, parameters: <JSON schema of the arguments>}}
  cases: [{id, category, source, prompt | messages, tools: [names], tool_choice (auto | required), needle: {code,
           depth}, variants, expect: {tools: [names], any_order, answer_regex, finish_reason}}]
  Every case says where its kind and its expectation come from (source: a line of text); a case without one is
  refused. A `vendor` case (tools/probes_from_vendor.py converts the vendor verifier's requests) has no expected
  tools: its tool calls are scored on their schema only, as the vendor verifier scores them; its source, when the
  converter gave none, is the vendor verifier's test set (VENDOR_SOURCE).

A case's score: every tool call's arguments parse as JSON and validate against the tool's schema (schema accuracy);
the called tools are the expected ones (choice accuracy; none for a question that needs no tool); no reasoning in
`content` (a think tag or any other markup of the Kimi chat formats, or the reasoning text itself); the answer matches
answer_regex (deterministic, follow-up, needle); finish_reason is the expected one (tool_calls when tools are expected,
else stop).

The requests follow the deployment's model (its entry's chat_format, thinking, reasoning_efforts: `applicable`): a
model that always thinks is never asked with thinking off (it would think anyway, and the parser told otherwise leaves
the reasoning in content), and a model with reasoning efforts is asked each of them in turn; the others get no
reasoning_effort.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import re
import socket
import ssl
import time
from concurrent.futures import ThreadPoolExecutor

from urllib.error import HTTPError, URLError
from urllib.request import HTTPSHandler, ProxyHandler, Request, build_opener

try:
    from ansible_collections.kimi.deploy.plugins.module_utils import _chat_format as chat_format
except ImportError:  # beside the serving-time probe (roles/kimi_probes copies both files there)
    import _chat_format as chat_format  # pylint: disable=import-error

FORMAT_VERSION = 1
CATEGORIES = ("required", "types", "enums", "nested", "choice", "parallel", "no_tool", "follow_up", "deterministic",
              "needle", "vendor")
# The categories whose cases score tool calls (the rest score the answer only).
TOOL_CATEGORIES = ("required", "types", "enums", "nested", "choice", "parallel", "no_tool", "follow_up")
# The JSON-schema keywords the validator below implements (draft 2020-12 semantics); a probe file that uses another
# is refused rather than half-checked. description, examples and title are annotations.
SCHEMA_KEYWORDS = ("type", "properties", "required", "additionalProperties", "enum", "const", "items", "minItems",
                   "maxItems", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "minLength",
                   "maxLength", "pattern", "description", "examples", "title")
CASE_KEYS = ("id", "category", "source", "prompt", "messages", "tools", "tool_choice", "needle", "variants", "expect")
TOOL_CHOICES = ("auto", "required")  # a case's tool_choice (auto unless it says required)
VENDOR_SOURCE = "K2-Vendor-Verifier: a request of its published tool-call test set"
EXPECT_KEYS = ("tools", "any_order", "answer_regex", "finish_reason")
# The think markers of every Kimi chat format (_chat_format.py declares them, and the rest of their markup).
THINK_TAGS = tuple(sorted(set(m for fmt in chat_format.FORMATS.values() for m in fmt["think"] + fmt["markup"]
                              if "think" in m)))
# A needle's filler: the prompt grows to this share of the context length (about 4 characters a token).
FILLER = ("The archive room kept its ledgers in tall grey cabinets, and every evening the clerk counted them again "
          "before the lights went out. ")
CHARS_PER_TOKEN = 4


class ProbeError(ValueError):
    """A probe file that does not follow the format (the message names the case and the field)."""


# ---- JSON schema (the subset above) -----------------------------------------------------------------------------
_TYPES = {"object": dict, "array": list, "string": str, "boolean": bool, "null": type(None)}


def _is_type(value, kind):
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool) or (
            isinstance(value, float) and value.is_integer())
    if kind == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, _TYPES[kind])


def check_schema(schema, where):
    """Refuse a schema with a keyword the validator does not implement, or a bad type name."""
    if not isinstance(schema, dict):
        raise ProbeError("%s: a schema must be a mapping, got %r" % (where, schema))
    unknown = sorted(set(schema) - set(SCHEMA_KEYWORDS))
    if unknown:
        raise ProbeError("%s: schema keyword(s) %s not supported (supported: %s)" % (
            where, ", ".join(unknown), ", ".join(SCHEMA_KEYWORDS)))
    kinds = schema.get("type")
    for kind in kinds if isinstance(kinds, list) else [kinds] if kinds else []:
        if kind not in ("integer", "number") + tuple(_TYPES):
            raise ProbeError("%s: unknown type %r" % (where, kind))
    for name, sub in (schema.get("properties") or {}).items():
        check_schema(sub, "%s.%s" % (where, name))
    if isinstance(schema.get("items"), dict):
        check_schema(schema["items"], where + "[]")
    if isinstance(schema.get("additionalProperties"), dict):
        check_schema(schema["additionalProperties"], where + ".*")
    if "pattern" in schema:
        try:
            re.compile(schema["pattern"])
        except re.error as exc:
            raise ProbeError("%s: pattern does not compile: %s" % (where, exc))


def validate(value, schema, path="$"):
    """The ways `value` breaks `schema` (empty when it is valid), each naming where."""
    errors = []
    kinds = schema.get("type")
    if kinds is not None:
        kinds = kinds if isinstance(kinds, list) else [kinds]
        if not any(_is_type(value, k) for k in kinds):
            return ["%s: %s is not of type %s" % (path, json.dumps(value), " or ".join(kinds))]
    if "enum" in schema and value not in schema["enum"]:
        errors.append("%s: %s is not one of %s" % (path, json.dumps(value), json.dumps(schema["enum"])))
    if "const" in schema and value != schema["const"]:
        errors.append("%s: %s is not %s" % (path, json.dumps(value), json.dumps(schema["const"])))
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        for key, broken in (("minimum", lambda lim: value < lim), ("maximum", lambda lim: value > lim),
                            ("exclusiveMinimum", lambda lim: value <= lim),
                            ("exclusiveMaximum", lambda lim: value >= lim)):
            if key in schema and broken(schema[key]):
                errors.append("%s: %s breaks %s %s" % (path, value, key, schema[key]))
    if isinstance(value, str):
        if "minLength" in schema and len(value) < schema["minLength"]:
            errors.append("%s: shorter than %d" % (path, schema["minLength"]))
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            errors.append("%s: longer than %d" % (path, schema["maxLength"]))
        if "pattern" in schema and not re.search(schema["pattern"], value):
            errors.append("%s: %s does not match %s" % (path, json.dumps(value), schema["pattern"]))
    if isinstance(value, list):
        if "minItems" in schema and len(value) < schema["minItems"]:
            errors.append("%s: fewer than %d items" % (path, schema["minItems"]))
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            errors.append("%s: more than %d items" % (path, schema["maxItems"]))
        if isinstance(schema.get("items"), dict):
            for index, item in enumerate(value):
                errors += validate(item, schema["items"], "%s[%d]" % (path, index))
    if isinstance(value, dict):
        properties = schema.get("properties") or {}
        for name in schema.get("required") or []:
            if name not in value:
                errors.append("%s: the required %r is missing" % (path, name))
        extra = schema.get("additionalProperties", True)
        for name, item in value.items():
            if name in properties:
                errors += validate(item, properties[name], "%s.%s" % (path, name))
            elif extra is False:
                errors.append("%s: %r is not allowed" % (path, name))
            elif isinstance(extra, dict):
                errors += validate(item, extra, "%s.%s" % (path, name))
    return errors


# ---- the probe file ---------------------------------------------------------------------------------------------
def load(doc, origin="the probe file"):
    """The cases of a parsed probe file, one per variant: [{id (with the variant), case, category, thinking, stream,
    tools: [OpenAI tool definitions], schemas: {name: schema}, ...}]. Raises ProbeError naming what is wrong."""
    if not isinstance(doc, dict) or doc.get("version") != FORMAT_VERSION:
        raise ProbeError("%s: a mapping with version: %d is required" % (origin, FORMAT_VERSION))
    tools = doc.get("tools") or {}
    if not isinstance(tools, dict):
        raise ProbeError("%s: tools must be a mapping of name to {description, parameters}" % origin)
    for name, tool in tools.items():
        if not isinstance(tool, dict) or not isinstance(tool.get("parameters"), dict):
            raise ProbeError("%s: tool %s needs parameters (a JSON schema)" % (origin, name))
        check_schema(tool["parameters"], "%s: tool %s" % (origin, name))
    default_variants = doc.get("variants") or [{"thinking": True, "stream": False}]
    cases, seen = [], set()
    for raw in doc.get("cases") or []:
        if not isinstance(raw, dict) or not raw.get("id"):
            raise ProbeError("%s: every case needs an id, got %r" % (origin, raw))
        where = "%s: case %s" % (origin, raw["id"])
        if raw["id"] in seen:
            raise ProbeError("%s: the id is used twice" % where)
        seen.add(raw["id"])
        unknown = sorted(set(raw) - set(CASE_KEYS))
        if unknown:
            raise ProbeError("%s: unknown field(s) %s (known: %s)" % (where, ", ".join(unknown), ", ".join(CASE_KEYS)))
        if raw.get("category") not in CATEGORIES:
            raise ProbeError("%s: category %r is not one of %s" % (where, raw.get("category"), ", ".join(CATEGORIES)))
        if bool(raw.get("prompt")) == bool(raw.get("messages")):
            raise ProbeError("%s: give a prompt or messages, not both or neither" % where)
        expect = raw.get("expect") or {}
        unknown = sorted(set(expect) - set(EXPECT_KEYS))
        if unknown:
            raise ProbeError("%s: unknown expect field(s) %s (known: %s)"
                             % (where, ", ".join(unknown), ", ".join(EXPECT_KEYS)))
        offered = raw.get("tools") or []
        missing = [t for t in offered + list(expect.get("tools") or []) if t not in tools]
        if missing:
            raise ProbeError("%s: tool(s) %s are not defined under tools" % (where, ", ".join(missing)))
        if raw["category"] in TOOL_CATEGORIES and "tools" not in expect:
            raise ProbeError("%s: a %s case must say which tools it expects (expect.tools, [] for none)"
                             % (where, raw["category"]))
        if raw.get("tool_choice", "auto") not in TOOL_CHOICES or (
                raw.get("tool_choice", "auto") != "auto" and not (offered and expect.get("tools"))):
            raise ProbeError("%s: tool_choice is one of %s (required: with tools offered and expected)"
                             % (where, ", ".join(TOOL_CHOICES)))
        if "answer_regex" in expect:
            try:
                re.compile(expect["answer_regex"])
            except re.error as exc:
                raise ProbeError("%s: expect.answer_regex does not compile: %s" % (where, exc))
        if raw["category"] == "needle" and not (raw.get("needle") or {}).get("code"):
            raise ProbeError("%s: a needle case needs needle.code" % where)
        source = raw.get("source", VENDOR_SOURCE if raw["category"] == "vendor" else None)
        if not isinstance(source, str) or not source.strip() or "\n" in source.strip():
            raise ProbeError("%s: source is required: one line saying where the case's kind and expectation come "
                             "from (e.g. \"written for this site: 37 x 43 = 1591\")" % where)
        for variant in raw.get("variants") or default_variants:
            thinking, stream = bool(variant.get("thinking", True)), bool(variant.get("stream", False))
            cases.append({
                "id": "%s/%s%s" % (raw["id"], "think" if thinking else "nothink", "/stream" if stream else ""),
                "case": raw["id"], "category": raw["category"], "source": source.strip(), "thinking": thinking,
                "stream": stream, "tool_choice": raw.get("tool_choice", "auto"), "reasoning_effort": None,
                "prompt": raw.get("prompt"), "messages": raw.get("messages"), "needle": raw.get("needle"),
                "tools": [{"type": "function", "function": {
                    "name": tools[t].get("name", t), "description": tools[t].get("description", ""),
                    "parameters": tools[t]["parameters"]}} for t in offered],
                "schemas": dict((tools[t].get("name", t), tools[t]["parameters"]) for t in offered),
                "expect": expect})
    if not cases:
        raise ProbeError("%s: no cases" % origin)
    return cases


def load_all(docs):
    """The cases of several probe files, run together (a case id twice is refused)."""
    cases, ids = [], set()
    for index, doc in enumerate(docs):
        for case in load(doc, "probe file %d" % (index + 1)):
            if case["id"] in ids:
                raise ProbeError("probe file %d: case %s is also in an earlier probe file" % (index + 1, case["case"]))
            ids.add(case["id"])
            cases.append(case)
    return cases


def needle_text(needle, context_length):
    """The haystack of a needle case: filler up to about 80% of the context, the code at `depth` of it."""
    total = int(context_length * 0.8) * CHARS_PER_TOKEN
    repeats = max(1, total // len(FILLER))
    at = int(repeats * float(needle.get("depth", 0.5)))
    fact = "Remember this: the secret probe code is %s. " % needle["code"]
    return FILLER * at + fact + FILLER * (repeats - at)


def request_body(case, model, max_tokens=1024, context_length=8192):
    """The chat completion request of a case (temperature 0)."""
    if case["messages"]:
        messages = [dict(m) for m in case["messages"]]
    else:
        prompt = case["prompt"]
        if case["needle"]:
            prompt = needle_text(case["needle"], context_length) + "\n\n" + prompt
        messages = [{"role": "user", "content": prompt}]
    body = {"model": model, "messages": messages, "max_tokens": max_tokens, "temperature": 0,
            "chat_template_kwargs": {"thinking": case["thinking"]}}
    if case.get("reasoning_effort"):  # only for a model that takes it (applicable)
        body["reasoning_effort"] = case["reasoning_effort"]
    if case["tools"]:
        body["tools"], body["tool_choice"] = case["tools"], case.get("tool_choice") or "auto"
    if case["stream"]:
        body["stream"], body["stream_options"] = True, {"include_usage": True}
    return body


# ---- answers ----------------------------------------------------------------------------------------------------
def read_answer(reply):
    """The parts scored, from a chat completion (a dict) or a stream (a list of its events' JSON):
    {content, reasoning, tool_calls: [{name, arguments}], finish_reason}."""
    if isinstance(reply, list):
        content, reasoning, finish, calls = "", "", None, {}
        for event in reply:
            for choice in (event or {}).get("choices") or []:
                delta = choice.get("delta") or {}
                content += delta.get("content") or ""
                reasoning += delta.get("reasoning_content") or delta.get("reasoning") or ""
                for call in delta.get("tool_calls") or []:
                    slot = calls.setdefault(call.get("index", len(calls)), {"name": "", "arguments": ""})
                    function = call.get("function") or {}
                    slot["name"] += function.get("name") or ""
                    slot["arguments"] += function.get("arguments") or ""
                finish = choice.get("finish_reason") or finish
        return {"content": content, "reasoning": reasoning, "finish_reason": finish,
                "tool_calls": [calls[i] for i in sorted(calls)]}
    choice = ((reply or {}).get("choices") or [{}])[0]
    message = choice.get("message") or {}
    return {"content": message.get("content") or "",
            "reasoning": message.get("reasoning_content") or message.get("reasoning") or "",
            "finish_reason": choice.get("finish_reason"),
            "tool_calls": [{"name": (c.get("function") or {}).get("name") or "",
                            "arguments": (c.get("function") or {}).get("arguments") or ""}
                           for c in message.get("tool_calls") or []]}


def _leak(answer):
    content = answer["content"]
    if any(tag in content for tag in THINK_TAGS):
        return "a think tag in content"
    markup = [m for m in chat_format.all_markup() if m in content]
    if markup:  # a tool call or channel the parsers left as text (another format's parser, or none)
        return "chat-format markup in content (%s)" % markup[0]
    reasoning = " ".join(answer["reasoning"].split())
    if len(reasoning) >= 20 and reasoning[:60] in " ".join(content.split()):
        return "the reasoning text in content"
    return None


def score(case, answer, reasoning_split=True):
    """One case's outcome: {id, category, ok, problems, calls, calls_valid, choice_ok, leak, answer_ok}. Without a
    reasoning parser (reasoning_split false: the deployment says the thinking stays in content) the leak is not
    counted and the answer is what follows the think block."""
    expect, problems = case["expect"], []
    if not reasoning_split:
        answer = dict(answer, content=chat_format.after_think(None, answer["content"]))
    calls, valid = answer["tool_calls"], 0
    for call in calls:
        schema = case["schemas"].get(call["name"])
        if schema is None:
            problems.append("called %r, which was not offered" % call["name"])
            continue
        try:
            arguments = json.loads(call["arguments"]) if isinstance(call["arguments"], str) else call["arguments"]
        except ValueError:
            problems.append("%s: arguments are not JSON: %s" % (call["name"], call["arguments"][:80]))
            continue
        errors = validate(arguments, schema)
        if errors:
            problems.append("%s: %s" % (call["name"], "; ".join(errors[:2])))
        else:
            valid += 1
    choice_ok = None
    if "tools" in expect:
        names, wanted = [c["name"] for c in calls], list(expect["tools"])
        choice_ok = sorted(names) == sorted(wanted) if expect.get("any_order") else names == wanted
        if not choice_ok:
            problems.append("called %s, expected %s" % (names or "no tool", wanted or "no tool"))
    finish = expect.get("finish_reason") or (None if case["category"] == "vendor" else
                                             "tool_calls" if expect.get("tools") else "stop")
    if finish and answer["finish_reason"] != finish:
        problems.append("finish_reason %s, expected %s" % (answer["finish_reason"], finish))
    leak = _leak(answer) if reasoning_split else None
    if leak:
        problems.append("reasoning leak: " + leak)
    answer_ok = None
    if expect.get("answer_regex"):
        answer_ok = re.search(expect["answer_regex"], answer["content"]) is not None
        if not answer_ok:
            problems.append("the answer does not match %s: %s"
                            % (expect["answer_regex"], " ".join(answer["content"].split())[:80] or "empty"))
    return {"id": case["id"], "category": case["category"], "ok": not problems, "problems": problems,
            "calls": len(calls), "calls_valid": valid, "choice_ok": choice_ok, "leak": bool(leak),
            "answer_ok": answer_ok}


def failed(case, why):
    """The outcome of a case that got no answer (an HTTP error, a timeout)."""
    return {"id": case["id"], "category": case["category"], "ok": False, "problems": [why], "calls": 0,
            "calls_valid": 0, "choice_ok": False if "tools" in case["expect"] else None, "leak": False,
            "answer_ok": False if case["expect"].get("answer_regex") else None}


# ---- figures ----------------------------------------------------------------------------------------------------
def _share(good, total):
    return round(100.0 * good / total, 2) if total else 100.0


def figures(outcomes):
    """The gate's figures: schema_accuracy (valid tool calls, %), choice_accuracy (cases that called the expected
    tools, %), reasoning_leaks, answer_failures (deterministic, follow-up and needle answers), cases, failed_cases,
    failing (the first three failing cases, with why)."""
    calls = sum(o["calls"] for o in outcomes)
    chosen = [o for o in outcomes if o["choice_ok"] is not None]
    answers = [o for o in outcomes if o["answer_ok"] is not None]
    bad = [o for o in outcomes if not o["ok"]]
    return {"schema_accuracy": _share(sum(o["calls_valid"] for o in outcomes), calls),
            "choice_accuracy": _share(sum(1 for o in chosen if o["choice_ok"]), len(chosen)),
            "reasoning_leaks": sum(1 for o in outcomes if o["leak"]),
            "answer_failures": sum(1 for o in answers if not o["answer_ok"]),
            "cases": len(outcomes), "failed_cases": len(bad),
            "failing": ["%s: %s" % (o["id"], "; ".join(o["problems"])[:200]) for o in bad[:3]]}


# (figure, how it compares, threshold key): the gate's thresholds, and what the A/B compares.
ACCURACIES = ("schema_accuracy", "choice_accuracy")
COUNTS = ("reasoning_leaks", "answer_failures")


def judge(now, thresholds, before=None, max_drop=None):
    """The reasons the figures `now` fail: below a minimum accuracy, above a maximum count, or (A/B) an accuracy more
    than max_drop points below `before` (the identity serving until now, on the same probes). Empty: passed."""
    reasons = []
    for name in ACCURACIES:
        minimum = thresholds.get("min_" + name)
        if minimum is not None and now[name] < minimum:
            reasons.append("%s %.2f%% is below the minimum %s%%" % (name.replace("_", " "), now[name], minimum))
    for name in COUNTS:
        maximum = thresholds.get("max_" + name)
        if maximum is not None and now[name] > maximum:
            reasons.append("%d %s, at most %s allowed" % (now[name], name.replace("_", " "), maximum))
    if before and max_drop is not None:
        for name in ACCURACIES:
            if name in before and now[name] < before[name] - max_drop:
                reasons.append("%s %.2f%% is %.2f points below %.2f%% of %s (at most %s allowed)" % (
                    name.replace("_", " "), now[name], before[name] - now[name], before[name],
                    before.get("identity", "the identity it replaces"), max_drop))
    return reasons


# ---- running the probes -----------------------------------------------------------------------------------------
def opener(url, ca_path=None, validate_certs=True):
    """A urllib opener without proxies (loopback and the fleet's network), verifying TLS with ca_path."""
    handlers = [ProxyHandler({})]
    if url.startswith("https://"):
        context = ssl.create_default_context(cafile=ca_path or None)
        if not validate_certs:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        handlers.append(HTTPSHandler(context=context))
    return build_opener(*handlers)


def ask(open_url, url, body, api_key=None, timeout=300):
    """POST one request; the answer as read_answer reads it. Raises ValueError with why there is none."""
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    if api_key:
        headers["Authorization"] = "Bearer " + api_key
    request = Request(url.rstrip("/") + "/v1/chat/completions", data=json.dumps(body).encode("utf-8"),
                      headers=headers, method="POST")
    try:
        response = open_url.open(request, timeout=timeout)
        raw = response.read().decode("utf-8", "replace")
    except HTTPError as exc:
        raise ValueError("HTTP %s: %s" % (exc.code, exc.read().decode("utf-8", "replace")[:160]))
    except (URLError, socket.timeout, OSError) as exc:
        raise ValueError("no answer: %s" % getattr(exc, "reason", exc))
    if body.get("stream"):
        events = []
        for line in raw.splitlines():
            if line.startswith("data:") and line[5:].strip() != "[DONE]":
                try:
                    events.append(json.loads(line[5:].strip()))
                except ValueError:
                    raise ValueError("a stream event is not JSON: %s" % line[:80])
        return read_answer(events)
    try:
        return read_answer(json.loads(raw))
    except ValueError:
        raise ValueError("not JSON: %s" % raw[:80])


def applicable(cases, tool_calls=True, model=None):
    """The cases an endpoint is asked: without a Kimi tool-call parser (the deployment's verify leaves its tool check
    out) the tool cases are left out, as clients get raw tool markup there. `model`: the deployment's model entry
    (thinking, reasoning_efforts; None: Kimi-K2.6's, optional thinking and no efforts). A model that always thinks is
    asked its thinking-off variants with thinking on (a case already asked that way is not asked twice); a model with
    reasoning efforts gets them in turn over its thinking cases, so every effort it takes is asked."""
    model = model or {}
    always = model.get("thinking") == "always"
    efforts = list(model.get("reasoning_efforts") or ())
    out, ids = [], set()
    for case in cases:
        if not (tool_calls or case["category"] not in TOOL_CATEGORIES + ("vendor",)):
            continue
        if always and not case["thinking"]:
            case = dict(case, thinking=True, id=case["id"].replace("/nothink", "/think", 1))
        if case["id"] in ids:
            continue
        ids.add(case["id"])
        if efforts and case["thinking"]:
            case = dict(case, reasoning_effort=efforts[len(out) % len(efforts)])
        out.append(case)
    return out


def model_key(model):
    """What of the deployment's model shapes the requests and the format scored (the A/B compares like with like:
    a result taken on another model's requests is not compared)."""
    model = model or {}
    return {"name": model.get("name"), "chat_format": model.get("chat_format"),
            "thinking": model.get("thinking"), "reasoning_efforts": list(model.get("reasoning_efforts") or ())}


def comparable(before, model_name, previous_model=None, default_model="kimi-k2.6"):
    """(before, note): the stored result of the identity replaced when it served the same model, else (None, why the
    gate judges by its thresholds alone). A switch between models is an identity switch: Kimi-K2.7-Code int4-vllm
    after Kimi-K2.6 int4-vllm is never compared with K2.6's figures. previous_model: what the previous environment
    file says it served (its MODEL), else the stored result's `model` (a result stored before models were data served
    default_model)."""
    if not before:
        return None, None
    served = previous_model or before.get("model") or default_model
    if served != (model_name or default_model):
        return None, "previous identity served %s: compared with the thresholds only" % served
    return before, None


def run(cases, url, model, api_key=None, ca_path=None, validate_certs=True, workers=8, timeout=300,
        max_tokens=1024, context_length=8192, reasoning_split=True):
    """Every case against the endpoint, `workers` at a time: (outcomes in the cases' order, seconds taken)."""
    open_url = opener(url, ca_path, validate_certs)
    started = time.time()

    def one(case):
        try:
            answer = ask(open_url, url, request_body(case, model, max_tokens, context_length), api_key, timeout)
        except ValueError as exc:
            return failed(case, str(exc))
        return score(case, answer, reasoning_split)

    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        outcomes = list(pool.map(one, cases))
    return outcomes, round(time.time() - started, 2)
