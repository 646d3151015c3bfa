"""_accuracy: the probe file, the JSON-schema check (against the jsonschema package), the scoring of real answer shapes
from each engine's parsers, the figures and the gate's judgement; then the shipped probes against the engine double,
sound (every case passes) and with each fault knob (each caught by the figure that exists for it). No Docker."""
import json
import os
import sys

import jsonschema
import pytest
import yaml

from ansible_collections.kimi.deploy.plugins.module_utils import _accuracy as acc

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
PROBES = os.path.join(ROOT, "roles", "kimi_probes", "files", "kimi-k26-probes.yml")
sys.path.insert(0, os.path.join(ROOT, "tests", "unit", "doubles"))
sys.path.insert(0, os.path.join(ROOT, "tests", "doubles", "engine"))
import test_engine_double  # noqa: E402
from kimi_engine_double import answers  # noqa: E402

cache, start = test_engine_double.cache, test_engine_double.start  # its fixtures


def shipped():
    with open(PROBES) as handle:
        return yaml.safe_load(handle)


def test_the_shipped_probes_cover_every_category_with_and_without_thinking_and_streaming():
    cases = acc.load(shipped())
    assert len(set(c["case"] for c in cases)) >= 60  # cases, not requests (a case runs once per variant)
    assert all(c["source"].startswith(("K2-Vendor-Verifier: ", "written for kimi.deploy: ")) for c in cases)
    assert set(c["category"] for c in cases) == set(acc.CATEGORIES) - {"vendor"}  # vendor: converted, not shipped
    assert {(c["thinking"], c["stream"]) for c in cases} >= {(True, False), (False, False), (True, True)}
    for tool in shipped()["tools"].values():
        jsonschema.Draft202012Validator.check_schema(tool["parameters"])


def values(schema):
    """Arguments to check the validator with: the double's valid ones, its three broken ones, and a few more."""
    good = answers.example_value(schema)
    out = [good] + [answers.broken_arguments(schema, turn) for turn in range(3)]
    out += [dict(good, extra=1), [], "text", None, dict((k, None) for k in good)]
    for key, value in good.items():
        out += [dict(good, **{key: bad}) for bad in (1.5, -1, "", True, [value], {"x": value}) if bad != value]
    return out


def test_the_validator_agrees_with_jsonschema_on_every_shipped_tool():
    for name, tool in shipped()["tools"].items():
        schema = tool["parameters"]
        reference = jsonschema.Draft202012Validator(schema)
        for value in values(schema):
            found = acc.validate(value, schema)
            assert (found == []) == reference.is_valid(value), (name, value, found)


@pytest.mark.parametrize("doc, words", [
    ({"version": 2, "cases": []}, "version: 1 is required"),
    ({"version": 1, "tools": {"t": {"parameters": {"type": "object", "oneOf": []}}}, "cases": []},
     "schema keyword(s) oneOf not supported"),
    ({"version": 1, "cases": [{"id": "a", "category": "poetry", "prompt": "x"}]}, "category 'poetry' is not one of"),
    ({"version": 1, "cases": [{"id": "a", "category": "required", "prompt": "x", "expect": {"tools": ["t"]}}]},
     "tool(s) t are not defined under tools"),
    ({"version": 1, "cases": [{"id": "a", "category": "choice", "prompt": "x"}]}, "must say which tools it expects"),
    ({"version": 1, "cases": [{"id": "a", "category": "deterministic", "prompt": "x", "expected": {}}]},
     "unknown field(s) expected"),
    ({"version": 1, "cases": [{"id": "a", "category": "deterministic", "source": "s", "prompt": "x"},
                              {"id": "a", "category": "deterministic", "source": "s", "prompt": "y"}]},
     "the id is used twice"),
    ({"version": 1, "cases": [{"id": "a", "category": "deterministic", "prompt": "What is 2 plus 2?"}]},
     "case a: source is required: one line saying where the case's kind and expectation come from"),
    ({"version": 1, "cases": [{"id": "a", "category": "deterministic", "source": " ", "prompt": "x"}]},
     "case a: source is required"),
    ({"version": 1, "cases": [{"id": "a", "category": "deterministic", "source": ["s"], "prompt": "x"}]},
     "case a: source is required"),
])
def test_a_probe_file_out_of_format_is_refused_naming_the_case_and_field(doc, words):
    with pytest.raises(acc.ProbeError, match="^my.yml") as refused:
        acc.load(doc, "my.yml")
    assert words in str(refused.value) and "\n" not in str(refused.value)


def test_a_vendor_case_has_the_vendor_verifier_as_its_source_unless_it_names_one():
    doc = {"version": 1, "tools": {"t": {"parameters": {"type": "object"}}},
           "cases": [{"id": "v", "category": "vendor", "tools": ["t"], "prompt": "x"},
                     {"id": "w", "category": "vendor", "source": "K2-Vendor-Verifier: line 7", "tools": ["t"],
                      "prompt": "x"}]}
    assert [c["source"] for c in acc.load(doc)] == [acc.VENDOR_SOURCE, "K2-Vendor-Verifier: line 7"]


WEATHER = acc.load(shipped())[0]  # required-weather/think


# vLLM 0.22's chat completion with its kimi_k2 tool parser and reasoning parser
# (vllm/entrypoints/openai/tool_parsers/kimi_k2_tool_parser.py: ids "functions.<name>:<n>", arguments a JSON string;
# vllm/entrypoints/openai/protocol.py ChatMessage: reasoning_content, and reasoning since 0.12).
VLLM = {"id": "chatcmpl-1", "object": "chat.completion", "model": "kimi-k2.6", "choices": [{
    "index": 0, "finish_reason": "tool_calls", "message": {
        "role": "assistant", "content": None, "reasoning_content": "The user wants the weather in Paris.",
        "reasoning": "The user wants the weather in Paris.",
        "tool_calls": [{"id": "functions.get_weather:0", "type": "function",
                        "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]}}]}
# SGLang 0.5's stream with --tool-call-parser kimi_k2 (python/sglang/srt/function_call/kimik2_detector.py: the name in
# the first tool-call delta, the arguments in pieces after it, each with the call's index) and --reasoning-parser
# kimi_k2 (reasoning_content deltas).
SGLANG_STREAM = [
    {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]},
    {"choices": [{"index": 0, "delta": {"reasoning_content": "Weather in Paris: "}, "finish_reason": None}]},
    {"choices": [{"index": 0, "delta": {"reasoning_content": "call the tool."}, "finish_reason": None}]},
    {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "functions.get_weather:0", "type": "function",
                                                        "function": {"name": "get_weather", "arguments": ""}}]},
                  "finish_reason": None}]},
    {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "{\"city\": "}}]},
                  "finish_reason": None}]},
    {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "\"Paris\"}"}}]},
                  "finish_reason": None}]},
    {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
    {"choices": [], "usage": {"prompt_tokens": 30, "completion_tokens": 12, "total_tokens": 42}},
]


def test_real_answer_shapes_score_a_right_tool_call_right():
    assert acc.score(WEATHER, acc.read_answer(VLLM))["ok"]
    streamed = acc.read_answer(SGLANG_STREAM)
    assert streamed["tool_calls"] == [{"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}]
    assert streamed["reasoning"] == "Weather in Paris: call the tool." and acc.score(WEATHER, streamed)["ok"]


def test_what_breaks_is_named():
    wrong = json.loads(json.dumps(VLLM))
    wrong["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] = "{\"unit\": \"kelvin\"}"
    outcome = acc.score(WEATHER, acc.read_answer(wrong))
    assert not outcome["ok"] and outcome["calls_valid"] == 0 and outcome["choice_ok"]
    assert "the required 'city' is missing" in outcome["problems"][0] and "kelvin" in outcome["problems"][0]
    # a wrong reasoning parser: Kimi-K2.6's template opened <think>, so content has the reasoning and </think>
    leaked = {"choices": [{"finish_reason": "stop", "message": {
        "content": "The user greets me.</think>Hello!", "tool_calls": []}}]}
    greeting = next(c for c in acc.load(shipped()) if c["case"] == "no-tool-greeting")
    outcome = acc.score(greeting, acc.read_answer(leaked))
    assert outcome["leak"] and outcome["problems"] == ["reasoning leak: a think tag in content"]
    nothing = acc.score(WEATHER, acc.read_answer({"choices": [{"finish_reason": "stop", "message": {"content": "?"}}]}))
    assert nothing["problems"] == ["called no tool, expected ['get_weather']", "finish_reason stop, expected tool_calls"]


def test_figures_and_the_gate_with_its_a_b():
    outcomes = [{"id": "a", "category": "required", "ok": True, "problems": [], "calls": 1, "calls_valid": 1,
                 "choice_ok": True, "leak": False, "answer_ok": None}] * 49
    outcomes += [{"id": "b", "category": "types", "ok": False, "problems": ["get_weather: $.city: 7 is not of type"],
                  "calls": 1, "calls_valid": 0, "choice_ok": True, "leak": False, "answer_ok": None}]
    now = acc.figures(outcomes)
    assert (now["schema_accuracy"], now["choice_accuracy"], now["failed_cases"]) == (98.0, 100.0, 1)
    assert now["failing"] == ["b: get_weather: $.city: 7 is not of type"]
    thresholds = {"min_schema_accuracy": 98, "min_choice_accuracy": 95, "max_reasoning_leaks": 0,
                  "max_answer_failures": 0}
    assert acc.judge(now, thresholds) == []
    before = {"schema_accuracy": 100.0, "choice_accuracy": 100.0, "identity": "int4-sglang"}
    assert acc.judge(now, thresholds, before, max_drop=1) == [
        "schema accuracy 98.00% is 2.00 points below 100.00% of int4-sglang (at most 1 allowed)"]
    assert acc.judge(now, thresholds, before, max_drop=2) == []
    assert acc.judge(dict(now, reasoning_leaks=2), thresholds) == ["2 reasoning leaks, at most 0 allowed"]


def run_on(double, **knobs):
    double.double.env.update(knobs)
    cases = acc.load(shipped())
    outcomes, _seconds = acc.run(cases, "http://127.0.0.1:%d" % double.double.port, "kimi-k2.6", workers=8,
                                 context_length=4096)
    return acc.figures(outcomes)


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_the_sound_double_passes_every_shipped_probe(start, engine):
    got = run_on(start(engine))
    assert got["failed_cases"] == 0, got["failing"]
    assert (got["schema_accuracy"], got["choice_accuracy"], got["reasoning_leaks"], got["answer_failures"]) == (
        100.0, 100.0, 0, 0)


def test_each_fault_knob_is_caught_by_its_figure(start):
    thresholds = {"min_schema_accuracy": 98, "min_choice_accuracy": 95, "max_reasoning_leaks": 0,
                  "max_answer_failures": 0}
    tools = run_on(start("sglang"), KIMI_DOUBLE_TOOL_ERROR_RATE="0.1")
    assert 80 <= tools["schema_accuracy"] <= 95 and tools["reasoning_leaks"] == 0
    assert acc.judge(tools, thresholds)[0].startswith("schema accuracy")
    leak = run_on(start("sglang"), KIMI_DOUBLE_THINK_LEAK="1")
    assert leak["reasoning_leaks"] > 10 and leak["schema_accuracy"] == 100.0
    assert any(r.endswith("reasoning leaks, at most 0 allowed") for r in acc.judge(leak, thresholds))
    garbage = run_on(start("sglang"), KIMI_DOUBLE_GARBAGE_AFTER="0")
    assert garbage["answer_failures"] > 5 and garbage["schema_accuracy"] == 0.0
    broken = run_on(start("sglang"), KIMI_DOUBLE_BROKEN_TOOLS="1")  # the tool calls come back as text
    assert broken["choice_accuracy"] < 95 and broken["answer_failures"] == 0
    assert acc.judge(broken, thresholds)[0].startswith("choice accuracy")


def test_the_vendor_verifiers_requests_convert_into_cases_scored_on_their_schema(tmp_path, start):
    """tools/probes_from_vendor.py on request bodies shaped as the verifier's JSONL lines (written here: the repository
    ships none of their data): the cases load, a tool schema the gate cannot check is left out and counted, and the
    sound double passes them."""
    sys.path.insert(0, os.path.join(ROOT, "tools"))
    import probes_from_vendor
    weather = {"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
    other = {"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"lat": {"type": "number"}, "lon": {"type": "number"}}, "required": ["lat"]}}}
    union = {"type": "function", "function": {"name": "pick", "parameters": {"anyOf": [{"type": "object"}]}}}
    lines = [json.dumps({"model": "x", "messages": [{"role": "user", "content": "Weather in Oslo?"}], "tools": [t]})
             for t in (weather, other, union, weather)]
    doc, skipped = probes_from_vendor.convert(lines)
    assert [c["id"] for c in doc["cases"]] == ["vendor-0001", "vendor-0002", "vendor-0004"]
    assert sorted(doc["tools"]) == ["get_weather", "get_weather@2"] and doc["tools"]["get_weather@2"]["name"] == "get_weather"
    assert list(skipped.values()) == [1] and "anyOf" in list(skipped)[0]
    cases = acc.load(doc)
    assert cases[1]["tools"][0]["function"]["name"] == "get_weather" and "lat" in str(cases[1]["schemas"])
    double = start("sglang")
    outcomes, _s = acc.run(cases, "http://127.0.0.1:%d" % double.double.port, "kimi-k2.6")
    assert all(o["ok"] and o["calls_valid"] == 1 for o in outcomes), outcomes


def test_an_engine_without_kimi_parsers_is_asked_what_it_can_answer():
    """TensorRT-LLM 1.3 has no Kimi reasoning parser (the plan warns that the thinking stays in content): no leak is
    counted there and the answer is what follows the think block; without a tool-call parser the tool cases are left
    out, as the verify gate leaves out its tool check."""
    multiply = next(c for c in acc.load(shipped()) if c["case"] == "deterministic-multiply")
    inline = {"choices": [{"finish_reason": "stop", "message": {"content": "<think>17 times 23</think>391"}}]}
    assert acc.score(multiply, acc.read_answer(inline), reasoning_split=False)["ok"]
    assert acc.score(multiply, acc.read_answer(inline))["problems"] == ["reasoning leak: a think tag in content"]
    left = acc.applicable(acc.load(shipped()), tool_calls=False)
    assert left and set(c["category"] for c in left) == {"deterministic", "needle"}


# ---- every model, in its own chat format ------------------------------------------------------------------------
sys.path.insert(0, os.path.join(ROOT, "tests", "doubles", "hub"))
import fake_hub  # noqa: E402
from kimi_engine_double import flags as double_flags  # noqa: E402
from ansible_collections.kimi.deploy.plugins.module_utils._model.models import (  # noqa: E402
    MODEL_NAMES, model as model_entry)

# The first release of each engine that serves every model (K3: vLLM 0.27.0+, SGLang 0.5.23; models.py engines).
K3_VERSIONS = {"vllm": "0.33.0", "sglang": "0.5.23"}
# A checkpoint of each architecture, as the fake hub writes it (K3.1-Pro is K3's architecture; its repo is unknown).
CHECKPOINTS = {"kimi_k25": "moonshotai/Kimi-K2.7-Code:shards=1,shard_size=4096",
               "kimi_k3": "moonshotai/Kimi-K3:shards=1,shard_size=4096"}


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    return dict((arch, fake_hub.write_repo(spec, str(tmp_path_factory.mktemp(arch))))
                for arch, spec in CHECKPOINTS.items())


@pytest.fixture
def served(monkeypatch, folders):
    """Start a double serving `name`'s checkpoint on `engine` with the given parsers (default: the model's own)."""
    started = []

    def _start(name, engine, tool=None, reasoning=None):
        entry = dict(model_entry(name), name=name)
        parsers = entry["parsers"][engine]
        tool, reasoning = tool or parsers["tool"][0], reasoning or parsers["reasoning"][0]
        monkeypatch.setenv(double_flags.VERSION_ENV, K3_VERSIONS[engine])
        folder = folders["kimi_k3" if entry["chat_format"] == "k3" else "kimi_k25"]
        line = ([folder, "--tensor-parallel-size", "8", "--enable-auto-tool-choice"] if engine == "vllm" else
                ["--model-path", folder, "--tp-size", "8"]) + [
            "--trust-remote-code", "--host", "127.0.0.1", "--port", "0", "--served-model-name", name,
            "--tool-call-parser", tool, "--reasoning-parser", reasoning]
        double = test_engine_double.Running(engine, line, {})
        started.append(double)
        return double, entry
    yield _start
    for double in started:
        double.close()


def gate(double, entry, **knobs):
    double.double.env.update(knobs)
    cases = acc.applicable(acc.load(shipped()), model=entry)
    outcomes, _seconds = acc.run(cases, "http://127.0.0.1:%d" % double.double.port, entry["name"], workers=8,
                                 context_length=4096)
    return cases, acc.figures(outcomes)


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
@pytest.mark.parametrize("name", MODEL_NAMES)
def test_the_gate_passes_every_model_on_a_double_with_its_parsers(served, engine, name):
    """Each model asked in its own format (K3: reasoning_effort low/high/max in turn, never thinking off;
    tool_choice required) against a double of its checkpoint with the parsers its entry names: every case passes."""
    cases, got = gate(*served(name, engine))
    assert got["failed_cases"] == 0, got["failing"]
    assert (got["schema_accuracy"], got["choice_accuracy"], got["reasoning_leaks"], got["answer_failures"]) == (
        100.0, 100.0, 0, 0)
    entry = model_entry(name)
    assert any(c["tool_choice"] == "required" for c in cases)
    if entry["thinking"] == "always":
        assert all(c["thinking"] for c in cases)
    assert set(c["reasoning_effort"] for c in cases if c["thinking"]) == set(entry["reasoning_efforts"] or [None])


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_the_gate_fails_a_k3_double_started_with_k2s_parsers(served, engine, name="kimi-k3"):
    """The safety removed: K3 served with kimi_k2 parsers. The K2 parsers do not know K3's tokens, so no tool call is
    parsed and the answers are not where a client reads them (SGLang: K3's markup in content, counted as leaks;
    vLLM 0.33.0: all of it in reasoning_content)."""
    _cases, got = gate(*served(name, engine, tool="kimi_k2", reasoning="kimi_k2"))
    thresholds = {"min_schema_accuracy": 98, "min_choice_accuracy": 95, "max_reasoning_leaks": 0,
                  "max_answer_failures": 0}
    reasons = acc.judge(got, thresholds)
    assert got["choice_accuracy"] < 95 and got["answer_failures"] > 10
    assert any(r.startswith("choice accuracy") for r in reasons)
    if engine == "sglang":
        assert got["reasoning_leaks"] > 10 and "reasoning leak: a think tag in content" in " ".join(got["failing"])


def test_a_k2_double_with_k3s_parsers_fails_the_gate_too(served):
    _cases, got = gate(*served("kimi-k2.7-code", "vllm", tool="kimi_k3", reasoning="kimi_k3"))
    assert got["choice_accuracy"] < 95 and got["answer_failures"] > 10


def test_the_requests_follow_the_model():
    """K2.6: thinking on and off, no reasoning_effort; a model that always thinks: never thinking off (its nothink
    variants become think ones, asked once); K3: its efforts in turn; a case's tool_choice required is sent."""
    cases = acc.load(shipped())
    k26 = acc.applicable(cases, model=dict(model_entry("kimi-k2.6"), name="kimi-k2.6"))
    assert k26 == acc.applicable(cases) and {c["thinking"] for c in k26} == {True, False}
    assert all("reasoning_effort" not in acc.request_body(c, "m") for c in k26)
    k3 = acc.applicable(cases, model=dict(model_entry("kimi-k3"), name="kimi-k3"))
    assert all(c["thinking"] for c in k3) and len(set(c["id"] for c in k3)) == len(k3) < len(k26)
    bodies = [acc.request_body(c, "kimi-k3") for c in k3]
    assert {b.get("reasoning_effort") for b in bodies} == {"low", "high", "max"}
    assert all(b["chat_template_kwargs"] == {"thinking": True} for b in bodies)
    forced = next(b for c, b in zip(k3, bodies) if c["case"] == "required-forced-choice")
    assert forced["tool_choice"] == "required"


def test_k3_markup_in_content_is_a_leak_and_a_deployment_without_a_parser_reads_k3s_answer():
    multiply = next(c for c in acc.load(shipped()) if c["case"] == "deterministic-multiply")
    raw = "<|open|>think<|sep|>17 times 23<|close|>think<|sep|><|open|>response<|sep|>391<|close|>response<|sep|>"
    answer = acc.read_answer({"choices": [{"finish_reason": "stop", "message": {"content": raw}}]})
    assert acc.score(multiply, answer)["problems"][0] == "reasoning leak: a think tag in content"
    assert acc.score(multiply, answer, reasoning_split=False)["ok"]
    tools = {"choices": [{"finish_reason": "stop", "message": {"content": "<|open|>tools<|sep|>..."}}]}
    assert acc.score(multiply, acc.read_answer(tools))["problems"][0].startswith(
        "reasoning leak: chat-format markup in content (<|open|>)")


@pytest.mark.parametrize("doc_case, words", [
    ({"tool_choice": "none", "tools": ["t"], "expect": {"tools": ["t"]}}, "tool_choice is one of auto, required"),
    ({"tool_choice": "required", "tools": ["t"], "expect": {"tools": []}}, "required: with tools offered and expected"),
])
def test_a_case_tool_choice_is_auto_or_a_forced_call(doc_case, words):
    doc = {"version": 1, "tools": {"t": {"parameters": {"type": "object"}}},
           "cases": [dict({"id": "a", "category": "required", "source": "s", "prompt": "x"}, **doc_case)]}
    with pytest.raises(acc.ProbeError, match=words):
        acc.load(doc)


def test_the_a_b_compares_with_the_same_model_only():
    """A switch between models is an identity switch: the result of the identity replaced counts only when it served
    the same model (the previous environment file's MODEL, else the model its result records; none: kimi-k2.6)."""
    k26 = {"identity": "int4-vllm", "schema_accuracy": 100.0, "choice_accuracy": 100.0, "model": "kimi-k2.6"}
    note = "previous identity served kimi-k2.6: compared with the thresholds only"
    assert acc.comparable(k26, "kimi-k2.7-code") == (None, note)
    assert acc.comparable(dict(k26, model=None), "kimi-k3") == (None, note)  # stored before models were data
    assert acc.comparable(dict(k26, model="kimi-k2.7-code"), "kimi-k2.7-code", "kimi-k2.6") == (None, note)
    assert acc.comparable(k26, "kimi-k2.6") == (k26, None) and acc.comparable(k26, None) == (k26, None)
    assert acc.comparable(None, "kimi-k3") == (None, None)
    # the thresholds alone then: a drop that would fail the A/B passes
    now = {"schema_accuracy": 90.0, "choice_accuracy": 90.0, "reasoning_leaks": 0, "answer_failures": 0}
    before, _note = acc.comparable(k26, "kimi-k3")
    assert acc.judge(now, {}, before, 2.0) == [] and acc.judge(now, {}, k26, 2.0) != []
