"""The engine double speaks each checkpoint's chat format: a Kimi-K3 checkpoint (the fake hub's, config.json model_type
kimi_k3) writes K3's XTML, which only the kimi_k3 parsers split into reasoning_content and tool_calls, with
reasoning_effort low/high/max and tool_choice required; any other parser leaves K3's markup where the real engines
leave it. Each engine at the first release of it that serves K3 (vLLM 0.33.0, SGLang 0.5.23). No Docker."""
import json
import os
import sys

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "doubles", "hub"))
sys.path.insert(0, os.path.join(ROOT, "tests", "unit", "doubles"))
import fake_hub  # noqa: E402
import test_engine_double as ted  # noqa: E402
from kimi_engine_double import flags  # noqa: E402
from kimi_engine_double.chat_format import cf  # noqa: E402

from ansible_collections.kimi.deploy.plugins.module_utils import _chat_format  # noqa: E402
from ansible_collections.kimi.deploy.plugins.module_utils._model.models import MODEL_NAMES, model  # noqa: E402

VERSIONS = {"vllm": "0.33.0", "sglang": "0.5.23"}
WEATHER = ted.WEATHER_TOOL


def k3_line(engine, folder, tool="kimi_k3", reasoning="kimi_k3"):
    if engine == "vllm":
        line = [folder, "--tensor-parallel-size", "8", "--trust-remote-code", "--host", "127.0.0.1", "--port", "0",
                "--served-model-name", "kimi-k3", "--enable-auto-tool-choice"]
    else:
        line = ["--model-path", folder, "--tp-size", "8", "--trust-remote-code", "--host", "127.0.0.1", "--port", "0",
                "--served-model-name", "kimi-k3"]
    return line + (["--tool-call-parser", tool] if tool else []) + (
        ["--reasoning-parser", reasoning] if reasoning else [])


@pytest.fixture(scope="module")
def k3_folder(tmp_path_factory):
    return fake_hub.write_repo("moonshotai/Kimi-K3:shards=1,shard_size=4096", str(tmp_path_factory.mktemp("k3")),
                               cache_dir=None)


@pytest.fixture
def k3(monkeypatch, k3_folder):
    """Start a K3 double: k3(engine, tool=, reasoning=, env=)."""
    started = []

    def _start(engine, tool="kimi_k3", reasoning="kimi_k3", env=None):
        monkeypatch.setenv(flags.VERSION_ENV, VERSIONS[engine])
        r = ted.Running(engine, k3_line(engine, k3_folder, tool, reasoning), dict(env or {}))
        started.append(r)
        return r
    yield _start
    for r in started:
        r.close()


def chat(text="Hello there", **kw):
    return dict({"model": "kimi-k3", "messages": [{"role": "user", "content": text}]}, **kw)


def message(r, body):
    status, answer = r.post(body)
    assert status == 200, answer
    return answer["choices"][0]


def test_the_double_loads_the_collections_chat_formats(k3_folder):
    assert cf.FORMATS == _chat_format.FORMATS  # one declaration, loaded by path from the repository
    with open(os.path.join(k3_folder, "config.json")) as handle:
        assert cf.checkpoint_format(json.load(handle)) == "k3"  # the fake hub's K3 checkpoint


def test_every_models_parsers_read_its_chat_format():
    """The parsers a deployment of each model gets (its data entry) are among those its chat format names."""
    for name in MODEL_NAMES:
        entry = model(name)
        for build, kinds in entry["parsers"].items():
            for kind, names in kinds.items():
                assert any(cf.reads(entry["chat_format"], kind, n) for n in names), (name, build, kind, names)


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_k3_with_its_parsers_splits_reasoning_and_tool_calls(k3, engine):
    r = k3(engine)
    plain = message(r, chat("What is 2+2?"))["message"]
    assert plain["content"] == "4" and plain["reasoning_content"] and "<|" not in plain["reasoning_content"]
    tools = message(r, chat("Weather in Paris?", tools=[WEATHER]))
    call = tools["message"]["tool_calls"][0]
    assert tools["finish_reason"] == "tool_calls" and call["function"]["name"] == "get_weather"
    assert json.loads(call["function"]["arguments"]) == {"city": "Paris", "unit": "celsius"}
    assert not call["id"].startswith("functions.")  # K3's parsers leave the id to the engine
    required = message(r, chat("Hello there", tools=[WEATHER], tool_choice="required"))
    assert required["finish_reason"] == "tool_calls" and required["message"]["tool_calls"]


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_reasoning_effort_low_high_max_thinks_longer_and_none_not_at_all(k3, engine):
    r = k3(engine)
    tokens = {}
    for effort in ("low", "high", "max"):
        answer = r.post(chat("What is 2+2?", reasoning_effort=effort))[1]
        assert answer["choices"][0]["message"]["content"] == "4"
        tokens[effort] = answer["usage"]["completion_tokens"]
    assert tokens["low"] < tokens["high"] < tokens["max"]
    off = message(r, chat("What is 2+2?", reasoning_effort="none"))["message"]
    assert not off.get("reasoning_content") and off["content"] == "4"


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_k3_always_thinks_chat_template_kwargs_thinking_false_is_not_read(k3, engine):
    """K3 always thinks (models.py thinking "always"): its renderer has no template switch, so the verify gate's
    text_no_thinking request still gets the reasoning, apart from the answer; kimi_serve leaves that check out."""
    r = k3(engine)
    for kwargs in ({"thinking": False}, {"enable_thinking": False}):
        answer = message(r, chat("What is 2+2?", chat_template_kwargs=kwargs))["message"]
        assert answer["content"] == "4" and answer["reasoning_content"], kwargs


def test_vllm_refuses_the_efforts_k3_does_not_take_with_its_errors(k3):
    r = k3("vllm")
    status, body = r.post(chat(reasoning_effort="medium"))
    assert status == 400 and body["error"] == {
        "message": "Kimi K3 supports thinking_effort values: low, high, max (parameter=thinking_effort, value=medium)",
        "type": "BadRequestError", "param": "thinking_effort", "code": 400}
    status, body = r.post(chat(reasoning_effort="extreme"))
    assert status == 400 and body["error"]["param"] == "body.reasoning_effort"
    assert body["error"]["message"].startswith("1 validation error:") and "literal_error" in body["error"]["message"]


def test_sglang_ignores_the_efforts_k3_does_not_take_with_a_warning(k3):
    r = k3("sglang")
    assert message(r, chat("What is 2+2?", reasoning_effort="medium"))["message"]["content"] == "4"
    assert "Kimi K3 does not support reasoning_effort='medium'; using the encoder default." in r.out.getvalue()
    assert r.post(chat(reasoning_effort="extreme"))[0] == 400


def test_vllm_named_tool_choice_needs_strict_tool_calling_on_k3(k3):
    named = chat("Weather?", tools=[WEATHER], tool_choice={"type": "function", "function": {"name": "get_weather"}})
    assert message(k3("vllm"), named)["message"]["tool_calls"]
    status, body = k3("vllm", env={"VLLM_ENFORCE_STRICT_TOOL_CALLING": "0"}).post(named)
    assert status == 400 and body["error"]["message"].startswith("Named tool choice for Kimi K3 requires strict")


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_k3_with_k2s_parsers_parses_nothing(k3, engine):
    """A K3 checkpoint served with the K2 parsers (the safety removed): the K2 parsers do not know K3's tokens. SGLang's
    leaves K3's markup in content; vLLM 0.33.0's kimi_k2 reasoning parser starts inside the think block, so it takes
    the whole text for reasoning. Either way no tool call and no clean answer."""
    r = k3(engine, tool="kimi_k2", reasoning="kimi_k2")
    for body in (chat("What is 2+2?"), chat("Weather in Paris?", tools=[WEATHER])):
        got = message(r, body)
        text = got["message"]["content"] if engine == "sglang" else got["message"]["reasoning_content"]
        assert not got["message"]["tool_calls"] and got["finish_reason"] == "stop"
        assert cf.K3_THINK_CLOSE in text and cf.K3_RESPONSE_OPEN in text and cf.K3_MESSAGE_CLOSE in text
        if engine == "vllm":
            assert not got["message"]["content"]
    raw = message(r, chat("Weather in Paris?", tools=[WEATHER]))["message"]
    assert 'call tool="get_weather" index="1"' in (raw["content"] or raw["reasoning_content"])


def test_k3_without_parsers_returns_the_whole_xtml_text(k3):
    got = message(k3("sglang", tool=None, reasoning=None), chat("Weather in Paris?", tools=[WEATHER]))["message"]
    assert not got["tool_calls"] and not got.get("reasoning_content")
    assert got["content"].startswith(cf.K3_THINK_OPEN) and cf.K3_TOOLS_OPEN in got["content"]
    assert '<|open|>argument key="city" type="string"<|sep|>Paris<|close|>argument<|sep|>' in got["content"]


def test_k3_think_leak_switch_closes_with_k3s_marker(k3):
    got = message(k3("vllm", env={"KIMI_DOUBLE_THINK_LEAK": "1"}), chat("What is 2+2?"))["message"]
    assert not got.get("reasoning_content") and got["content"].endswith(cf.K3_THINK_CLOSE + "4")


def test_k2_checkpoints_keep_k2s_format(k3, monkeypatch, tmp_path):
    """Kimi-K2.7-Code is K2.6's architecture (kimi_k25): K2's format, whatever the engine version."""
    folder = fake_hub.write_repo("moonshotai/Kimi-K2.7-Code:shards=1,shard_size=4096", str(tmp_path / "k27"))
    monkeypatch.setenv(flags.VERSION_ENV, "0.33.0")
    r = ted.Running("vllm", k3_line("vllm", folder, "kimi_k3", "kimi_k3"), {})
    try:
        got = message(r, chat("Weather in Paris?", tools=[WEATHER]))["message"]
        # K3's parsers on K2 output: its reasoning parser takes all for reasoning (no K3 marker ever comes)
        assert not got["tool_calls"] and not got["content"]
        assert "<think>" in got["reasoning_content"] and "<|tool_call_begin|>" in got["reasoning_content"]
    finally:
        r.close()


@pytest.mark.parametrize("engine, version", [("vllm", "0.22.1"), ("sglang", "0.5.12.post1"), ("vllm", "0.20.2")])
def test_a_release_without_k3_refuses_the_k3_checkpoint_at_start_up(monkeypatch, k3_folder, engine, version):
    """The pinned defaults predate K3: the real model registry has no KimiK3ForConditionalGeneration there."""
    import io
    import threading
    from kimi_engine_double.server import EngineDouble
    monkeypatch.setenv(flags.VERSION_ENV, version)
    err = io.StringIO()
    args = flags.parse(engine, k3_line(engine, k3_folder, tool="kimi_k2", reasoning="kimi_k2"))
    assert EngineDouble(engine, args, env={}, out=io.StringIO(), err=err).run(threading.Event()) == 1
    assert "ValueError: Model architectures ['KimiK3ForConditionalGeneration'] are not supported for now." in (
        err.getvalue())
