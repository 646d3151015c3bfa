"""Unit tests of the engine double (tests/doubles/engine): parsing, offline load, HTTP API. No Docker needed."""
import base64
import io
import json
import re
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import pytest

ENGINE_DIR = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "doubles", "engine"))
sys.path.insert(0, ENGINE_DIR)

from kimi_engine_double import flags, hfcache, png  # noqa: E402
from kimi_engine_double.main import serve  # noqa: E402
from kimi_engine_double.server import AUTO_TOOL_ERROR, READY_LINE, EngineDouble  # noqa: E402

MODEL = "moonshotai/Kimi-K2.6"
SHA = "0123456789abcdef0123456789abcdef01234567"
SGLANG_LINE = ("--model-path moonshotai/Kimi-K2.6 --tp-size 8 --trust-remote-code --host 0.0.0.0 --port 30000 "
               "--served-model-name kimi-k2.6 --tool-call-parser kimi_k2 --reasoning-parser kimi_k2 "
               "--mem-fraction-static 0.85 --kv-cache-dtype fp8_e4m3 --context-length 262144 --enable-metrics").split()
VLLM_LINE = ("moonshotai/Kimi-K2.6 --tensor-parallel-size 8 --trust-remote-code --host 0.0.0.0 --port 30000 "
             "--served-model-name kimi-k2.6 --tool-call-parser kimi_k2 --enable-auto-tool-choice "
             "--reasoning-parser kimi_k2 --mm-encoder-tp-mode data --gpu-memory-utilization 0.95 "
             "--kv-cache-dtype fp8 --max-model-len 262144").split()
NVFP4_EXTRA = "--quantization modelopt_fp4 --moe-backend marlin --disable-custom-all-reduce".split()
WEATHER_TOOL = {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                                                                "unit": {"enum": ["celsius", "fahrenheit"]}},
                               "required": ["city", "unit"]}}}


# ---- command-line parsing -------------------------------------------------------------------------------
def test_accepts_real_sglang_line():
    args = flags.parse("sglang", SGLANG_LINE)
    assert args.model == MODEL
    assert args.get("tensor_parallel_size") == "8"
    assert args.get("kv_cache_dtype") == "fp8_e4m3"
    assert args.flag("enable_metrics") and args.flag("trust_remote_code")
    assert args.get("served_model_name") == "kimi-k2.6"


@pytest.mark.parametrize("extra", [[], NVFP4_EXTRA], ids=["int4", "nvfp4"])
def test_accepts_real_vllm_lines(extra):
    args = flags.parse("vllm", VLLM_LINE + extra)
    assert args.model == MODEL
    assert args.get("served_model_name") == ["kimi-k2.6"]
    assert args.flag("enable_auto_tool_choice")
    assert args.get("mm_encoder_tp_mode") == "data"
    assert flags.startup_problems(args) == []
    if extra:
        assert args.get("quantization") == "modelopt_fp4" and args.get("moe_backend") == "marlin"
        assert args.flag("disable_custom_all_reduce")


@pytest.mark.parametrize("engine,argv,message", [
    ("sglang", ["--tp", "8"], "unrecognized arguments: --tp"),
    ("vllm", ["--tp", "8"], "unrecognized arguments: --tp 8"),
    ("vllm", ["--enable-metrics"], "unrecognized arguments: --enable-metrics"),
    ("sglang", ["--kv-cache-dtype", "fp8"], "argument --kv-cache-dtype: invalid choice: 'fp8' (choose from 'auto'"),
    ("sglang", ["--enable-flashinfer-mla"], "unrecognized arguments: --enable-flashinfer-mla"),
    ("vllm", ["--enable-flashinfer-mla"], "unrecognized arguments: --enable-flashinfer-mla"),
    ("vllm", ["--disable-log-requests"], "unrecognized arguments: --disable-log-requests"),
    ("sglang", ["--moe-backend", "marlin"], "unrecognized arguments: --moe-backend marlin"),
    ("sglang", ["--mm-encoder-tp-mode", "data"], "unrecognized arguments: --mm-encoder-tp-mode data"),
    ("vllm", ["--gpu-memory-util", "0.9"], "full option names"),
    ("sglang", ["--mem-frac", "0.8"], "full option names"),
    ("sglang", ["--trust_remote_code"], "unrecognized arguments: --trust_remote_code"),
    ("vllm", ["--port"], "argument --port: expected one argument"),
    ("vllm", ["--served-model-name"], "argument --served-model-name: expected at least one argument"),
    ("vllm", ["--trust-remote-code=yes"], "argument --trust-remote-code: ignored explicit argument 'yes'"),
    ("vllm", ["--moe-backend", "flashinfer_b13x"], "argument --moe-backend: invalid choice"),
    ("vllm", ["--port", "abc"], "argument --port: invalid int value: 'abc'"),
])
def test_refuses_bad_options_with_exit_2(engine, argv, message, capsys):
    base = ["--model-path", MODEL] if engine == "sglang" else [MODEL]
    with pytest.raises(SystemExit) as exc:
        serve(engine, base + argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "error: " in err and message in err


def test_sglang_requires_model_path(capsys):
    with pytest.raises(SystemExit) as exc:
        serve("sglang", ["--port", "30000"])
    assert exc.value.code == 2
    assert "the following arguments are required: --model-path/--model" in capsys.readouterr().err


def test_vllm_spellings_short_negation_nargs_and_underscores():
    args = flags.parse("vllm", [MODEL, "-tp", "8", "--trust_remote_code", "--no-enable-auto-tool-choice",
                                "--served-model-name", "kimi-k2.6", "kimi", "--moe-backend=Flashinfer-B12X",
                                "-O3", "--speculative-config.method", "mtp"])
    assert args.get("tensor_parallel_size") == "8"
    assert args.flag("trust_remote_code") is True
    assert args.get("enable_auto_tool_choice") is False
    assert args.get("served_model_name") == ["kimi-k2.6", "kimi"]
    assert args.get("moe_backend") == "flashinfer_b12x"  # the real type= lowercases and maps - to _
    assert args.get("optimization_level") == "3"


def test_sglang_model_alias():
    assert flags.parse("sglang", ["--model", MODEL]).model == MODEL


@pytest.mark.parametrize("argv,name", [(["--tool-call-parser", "kimi"], "--tool-call-parser"),
                                       (["--reasoning-parser", "kimi"], "--reasoning-parser"),
                                       (["--quantization", "nvfp4"], "--quantization")])
def test_vllm_valid_values_fail_at_startup_not_parse(argv, name):
    args = flags.parse("vllm", [MODEL] + argv)  # argparse accepts it ...
    err = io.StringIO()
    code = EngineDouble("vllm", args, env={}, out=io.StringIO(), err=err).run(threading.Event())
    assert code == 1  # ... the engine refuses it at start-up
    assert "invalid value %r for %s" % (argv[1], name) in err.getvalue()


# ---- offline load from a Hugging Face cache -----------------------------------------------------------
def make_cache(root, repo=MODEL, sha=SHA, quant="compressed-tensors", py_symlink=False, ref_newline=""):
    repo_dir = root / ("models--" + repo.replace("/", "--"))
    (repo_dir / "blobs").mkdir(parents=True)
    (repo_dir / "refs").mkdir()
    (repo_dir / "refs" / "main").write_text(sha + ref_newline)  # huggingface_hub writes no trailing newline
    snap = repo_dir / "snapshots" / sha
    snap.mkdir(parents=True)
    files = {"config.json": json.dumps({"model_type": "kimi_k25", "max_position_embeddings": 262144,
                                        "quantization_config": {"quant_method": quant}}).encode(),
             "model-00001-of-00001.safetensors": b"\0" * 4096}
    if py_symlink:
        files["tool_declaration_ts.py"] = b"X = 1\n"
    for name, data in files.items():
        blob = repo_dir / "blobs" / ("blob-" + name)
        blob.write_bytes(data)
        os.symlink(os.path.join("..", "..", "blobs", "blob-" + name), snap / name)
    return sum(len(d) for d in files.values())


@pytest.mark.parametrize("newline", ["", "\n"])
def test_load_reads_snapshot_through_relative_symlinks(tmp_path, newline):
    size = make_cache(tmp_path, ref_newline=newline)
    info = hfcache.load(MODEL, env={"HF_HUB_CACHE": str(tmp_path), "HF_HUB_OFFLINE": "1"})
    assert info["bytes"] == size and info["files"] == 2
    assert info["snapshot"].endswith("snapshots/" + SHA)


def test_cache_root_precedence(tmp_path):
    assert hfcache.cache_root({"HF_HOME": "/h"}) == "/h/hub"
    assert hfcache.cache_root({"HF_HOME": "/h", "HF_HUB_CACHE": "/c"}) == "/c"
    (tmp_path / "hub").mkdir()
    make_cache(tmp_path / "hub")
    assert hfcache.load(MODEL, env={"HF_HOME": str(tmp_path)})["files"] == 2


def test_revision_by_sha_and_missing_revision(tmp_path):
    make_cache(tmp_path)
    env = {"HF_HUB_CACHE": str(tmp_path), "HF_HUB_OFFLINE": "1"}
    assert hfcache.load(MODEL, revision=SHA, env=env)["files"] == 2
    with pytest.raises(hfcache.LoadError, match="LocalEntryNotFoundError"):
        hfcache.load(MODEL, revision="f" * 40, env=env)


def test_offline_load_fails_on_missing_snapshot(tmp_path):
    make_cache(tmp_path, sha=SHA)
    (tmp_path / "models--moonshotai--Kimi-K2.6" / "refs" / "main").write_text("a" * 40)
    with pytest.raises(hfcache.LoadError) as exc:
        hfcache.load(MODEL, env={"HF_HUB_CACHE": str(tmp_path), "HF_HUB_OFFLINE": "1"})
    assert "LocalEntryNotFoundError" in str(exc.value)
    assert "Cannot find the requested files in the local cache" in str(exc.value)
    assert "no snapshot" in str(exc.value) and "a" * 40 in str(exc.value)


def test_engine_exits_nonzero_when_model_not_cached(tmp_path):
    err = io.StringIO()
    args = flags.parse("sglang", ["--model-path", "nvidia/Kimi-K2.6-NVFP4"])
    code = EngineDouble("sglang", args, env={"HF_HUB_CACHE": str(tmp_path), "HF_HUB_OFFLINE": "1"},
                        out=io.StringIO(), err=err).run(threading.Event())
    assert code == 1 and "LocalEntryNotFoundError" in err.getvalue()


def test_remote_code_strict_mimics_nvfp4_failure(tmp_path):
    make_cache(tmp_path, py_symlink=True)
    env = {"HF_HUB_CACHE": str(tmp_path), "HF_HUB_OFFLINE": "1"}
    assert hfcache.load(MODEL, env=env, trust_remote_code=True)["files"] == 3
    env["KIMI_DOUBLE_REMOTE_CODE_STRICT"] = "1"
    assert hfcache.load(MODEL, env=env, trust_remote_code=False)["files"] == 3
    with pytest.raises(hfcache.LoadError, match=r"FileNotFoundError: .*/blobs/tool_declaration_ts\.py"):
        hfcache.load(MODEL, env=env, trust_remote_code=True)


def test_quantization_disagreeing_with_checkpoint_fails_at_startup(tmp_path):
    make_cache(tmp_path, quant="compressed-tensors")
    err = io.StringIO()
    args = flags.parse("vllm", [MODEL, "--quantization", "modelopt_fp4"])
    code = EngineDouble("vllm", args, env={"HF_HUB_CACHE": str(tmp_path)}, out=io.StringIO(), err=err
                        ).run(threading.Event())
    assert code == 1 and "does not match the quantization method" in err.getvalue()


# ---- PNG colour ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("rgb,name", [((255, 0, 0), "red"), ((0, 0, 255), "blue"), ((0, 255, 0), "green"),
                                      ((250, 250, 250), "white"), ((255, 255, 0), "yellow")])
def test_png_dominant_colour(rgb, name):
    assert png.dominant_colour(png.make_png(8, 4, rgb)) == name


def test_png_decoder_handles_filters_and_rgba():
    import struct
    import zlib
    # 2x2 RGBA, row 0 filter Sub, row 1 filter Up: all pixels (10, 200, 30, 255)
    raw = bytes([1, 10, 200, 30, 255, 0, 0, 0, 0]) + bytes([2] + [0] * 8)

    def chunk(t, b):
        return struct.pack(">I", len(b)) + t + b + struct.pack(">I", zlib.crc32(t + b))
    data = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 2, 2, 8, 6, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))
    _w, _h, rows = png.decode(data)
    assert rows == [[(10, 200, 30, 255)] * 2] * 2


# ---- HTTP API --------------------------------------------------------------------------------------------
def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Running:
    def __init__(self, engine, argv, env, wait_ready=True):
        self.out, self.err, self.stop = io.StringIO(), io.StringIO(), threading.Event()
        self.double = EngineDouble(engine, flags.parse(engine, argv), env=env, out=self.out, err=self.err)
        self.code = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        if wait_ready:
            assert self.double.ready.wait(10), self.err.getvalue()

    def _run(self):
        self.code = self.double.run(self.stop)

    def url(self, path):
        return "http://127.0.0.1:%d%s" % (self.double.port, path)

    def get(self, path):
        return call(self.url(path))

    def post(self, body, raw=False):
        return call(self.url("/v1/chat/completions"), body, raw)

    def close(self):
        self.stop.set()
        self.thread.join(10)


def call(url, body=None, raw=False):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            status, text = r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        status, text = e.code, e.read().decode()
    if raw:
        return status, text
    return status, (json.loads(text) if text.strip().startswith(("{", "[")) else text)


@pytest.fixture
def cache(tmp_path):
    make_cache(tmp_path)
    return {"HF_HUB_CACHE": str(tmp_path), "HF_HUB_OFFLINE": "1"}


@pytest.fixture
def start(cache):
    started = []

    def _start(engine, extra=(), env=None, line=None, wait_ready=True):
        argv = list(line or (SGLANG_LINE if engine == "sglang" else VLLM_LINE))
        argv[argv.index("--port") + 1] = "0"
        argv[argv.index("--host") + 1] = "127.0.0.1"
        r = Running(engine, argv + list(extra), dict(cache, **(env or {})), wait_ready)
        started.append(r)
        return r
    yield _start
    for r in started:
        r.close()


def chat(text="Hello there", **kw):
    return dict({"model": "kimi-k2.6", "messages": [{"role": "user", "content": text}]}, **kw)


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_health_models_and_readiness_line(start, engine):
    r = start(engine)
    assert r.get("/health")[0] == 200
    status, body = r.get("/v1/models")
    assert status == 200 and [m["id"] for m in body["data"]] == ["kimi-k2.6"]
    assert READY_LINE[engine] in r.out.getvalue()
    assert "bytes read from" in r.out.getvalue()


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_models_default_to_model_path(start, engine):
    line = ["--model-path", MODEL] if engine == "sglang" else [MODEL]
    r = start(engine, line=line + ["--host", "x", "--port", "0"])
    assert [m["id"] for m in r.get("/v1/models")[1]["data"]] == [MODEL]
    assert r.post(chat(model=MODEL))[0] == 200


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_chat_non_stream_thinks_and_counts_tokens(start, engine):
    status, body = start(engine).post(chat("What is 2+2?"))
    assert status == 200
    msg = body["choices"][0]["message"]
    assert msg["reasoning_content"] and msg["content"] == "4"  # the sums the accuracy probes ask, answered right
    assert body["choices"][0]["finish_reason"] == "stop"
    u = body["usage"]
    assert u["prompt_tokens"] > 0 and u["completion_tokens"] > 0
    assert u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"]


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_thinking_off_has_no_reasoning(start, engine):
    status, body = start(engine).post(chat(chat_template_kwargs={"thinking": False}))
    assert status == 200
    msg = body["choices"][0]["message"]
    assert not msg.get("reasoning_content") and "<think>" not in msg["content"] and msg["content"]


def test_no_reasoning_parser_leaves_think_block_in_content(start):
    line = [MODEL, "--host", "x", "--port", "0", "--served-model-name", "kimi-k2.6"]
    msg = start("vllm", line=line).post(chat())[1]["choices"][0]["message"]
    assert msg["content"].startswith("<think>") and "reasoning_content" not in msg


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_stream_sse(start, engine):
    r = start(engine)
    status, text = r.post(chat("Stream please", stream=True, stream_options={"include_usage": True}), raw=True)
    assert status == 200
    events = [line[len("data: "):] for line in text.splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    reasoning = "".join(d.get("reasoning_content", "") for d in deltas)
    content = "".join(d.get("content", "") for d in deltas)
    full = r.post(chat("Stream please"))[1]["choices"][0]["message"]
    assert reasoning == full["reasoning_content"] and content == full["content"]
    assert [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]][-1] == "stop"
    assert chunks[-1]["usage"]["completion_tokens"] > 0


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_tools_give_tool_calls(start, engine):
    status, body = start(engine).post(chat("Weather in Paris?", tools=[WEATHER_TOOL]))
    assert status == 200
    choice = body["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    call_ = choice["message"]["tool_calls"][0]
    assert call_["type"] == "function" and call_["function"]["name"] == "get_weather"
    assert json.loads(call_["function"]["arguments"]) == {"city": "Paris", "unit": "celsius"}


def test_tool_calls_streamed(start):
    status, text = start("sglang").post(chat("Weather?", tools=[WEATHER_TOOL], stream=True), raw=True)
    chunks = [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: {")]
    calls = [tc for c in chunks for tc in c["choices"][0]["delta"].get("tool_calls", [])]
    assert status == 200 and calls[0]["function"]["name"] == "get_weather" and calls[0]["index"] == 0
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"


def test_vllm_without_auto_tool_choice_is_400(start):
    line = [x for x in VLLM_LINE if x != "--enable-auto-tool-choice"]
    r = start("vllm", line=line)
    status, body = r.post(chat(tools=[WEATHER_TOOL]))
    assert status == 400 and body["error"]["message"] == AUTO_TOOL_ERROR
    assert r.post(chat())[0] == 200  # plain chat still fine


def test_sglang_without_tool_parser_returns_raw_markup(start):
    line = [x for x in SGLANG_LINE if x not in ("--tool-call-parser",)]
    line.remove("kimi_k2")  # the value of --tool-call-parser (first kimi_k2)
    msg = start("sglang", line=line).post(chat(tools=[WEATHER_TOOL]))[1]["choices"][0]["message"]
    assert not msg["tool_calls"] and "<|tool_call_begin|>functions.get_weather:0" in msg["content"]


@pytest.mark.parametrize("engine,tool,reasoning", [("sglang", "qwen3_coder", "gpt-oss"), ("vllm", "hermes", "mistral"),
                                                   ("sglang", "kimi_k2", "mistral"), ("vllm", "llama3_json", "kimi_k2")])
def test_another_models_parser_leaves_kimis_markup_in_the_content(start, engine, tool, reasoning):
    """A parser name the engine accepts but that reads another model's format parses nothing of Kimi's output."""
    line = list(SGLANG_LINE if engine == "sglang" else VLLM_LINE)
    line[line.index("--tool-call-parser") + 1] = tool
    line[line.index("--reasoning-parser") + 1] = reasoning
    msg = start(engine, line=line).post(chat(tools=[WEATHER_TOOL]))[1]["choices"][0]["message"]
    if tool == "kimi_k2":
        assert msg["tool_calls"] and msg["tool_calls"][0]["function"]["name"] == "get_weather"
    else:
        assert not msg["tool_calls"] and "<|tool_call_begin|>functions.get_weather:0" in msg["content"]
    if reasoning == "kimi_k2":
        assert msg.get("reasoning_content") and "<think>" not in (msg["content"] or "")
    else:
        assert not msg.get("reasoning_content") and "<think>" in msg["content"]


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_broken_tools_switch(start, engine):
    status, body = start(engine, env={"KIMI_DOUBLE_BROKEN_TOOLS": "1"}).post(chat(tools=[WEATHER_TOOL]))
    choice = body["choices"][0]
    assert status == 200 and not choice["message"]["tool_calls"] and choice["finish_reason"] == "stop"
    assert "get_weather" in choice["message"]["content"]


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_error_rate_switch_fails_that_share_of_requests_evenly(start, engine):
    double = start(engine, env={"KIMI_DOUBLE_ERROR_RATE": "0.25"})
    codes = [double.post(chat("n %d" % i))[0] for i in range(8)]
    assert codes == [200, 200, 200, 500, 200, 200, 200, 500]
    status, body = double.post(chat("again"))
    assert status == 200 and double.get("/health")[0] == 200
    bad = start(engine, env={"KIMI_DOUBLE_ERROR_RATE": "2"}, wait_ready=False)
    bad.thread.join(10)
    assert bad.code == 1 and "bad KIMI_DOUBLE_ERROR_RATE='2'" in bad.err.getvalue()


@pytest.mark.parametrize("engine,rgb,name", [("sglang", (255, 0, 0), "red"), ("vllm", (255, 0, 0), "red"),
                                             ("vllm", (0, 0, 255), "blue")])
def test_vision_names_dominant_colour(start, engine, rgb, name):
    url = "data:image/png;base64," + base64.b64encode(png.make_png(16, 16, rgb)).decode()
    content = [{"type": "text", "text": "What colour is this image?"},
               {"type": "image_url", "image_url": {"url": url}}]
    status, body = start(engine).post(chat(content))
    assert status == 200 and name in body["choices"][0]["message"]["content"].lower()


def test_bad_image_is_400(start):
    content = [{"type": "image_url", "image_url": {"url": "data:image/png;base64,aGVsbG8="}}]
    assert start("vllm").post(chat(content))[0] == 400


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_wrong_model_is_404(start, engine):
    status, body = start(engine).post(chat(model="gpt-4"))
    assert status == 404 and "gpt-4" in json.dumps(body)


def test_metrics_rules(start):
    assert start("vllm").get("/metrics")[0] == 200
    v = start("vllm")
    v.post(chat())
    assert "vllm:generation_tokens_total" in v.get("/metrics")[1]
    s = start("sglang")
    s.post(chat())
    status, text = s.get("/metrics")
    assert status == 200 and 'sglang:num_requests_total{model_name="kimi-k2.6"} 1.0' in text
    line = [x for x in SGLANG_LINE if x != "--enable-metrics"]
    assert start("sglang", line=line).get("/metrics")[0] == 404


def test_vllm_data_parallel_engines_each_have_their_series_and_share_the_requests(start):
    """--data-parallel-size 2 (kimi_instances=2): one child per engine index, as vLLM's logger makes them; the
    requests spread over both."""
    v = start("vllm", ["--data-parallel-size", "2"])
    for i in range(4):
        assert v.post(chat("hello %d" % i))[0] == 200
    # The double observes a request's latencies after its answer is sent: read the series once the last one is in.
    deadline = time.time() + 10
    while True:
        text = v.get("/metrics")[1]
        observed = re.findall(r'^vllm:e2e_request_latency_seconds_count\{.*\} ([0-9.]+)$', text, re.M)
        if sum(map(float, observed)) >= 4 or time.time() > deadline:
            break
        time.sleep(0.05)
    for index in ("0", "1"):
        success = re.search(r'^vllm:request_success_total\{model_name="kimi-k2.6",engine="%s",finished_reason="stop"\} '
                            r'([0-9.]+)$' % index, text, re.M)
        assert success and float(success.group(1)) == 2.0, text
        assert re.search(r'^vllm:time_to_first_token_seconds_count\{model_name="kimi-k2.6",engine="%s"\} 2.0$'
                         % index, text, re.M), text
    assert 'engine="2"' not in text
    one = start("vllm").get("/metrics")[1]
    assert 'engine="0"' in one and 'engine="1"' not in one


def test_the_weight_loader_asked_for_is_logged(start):
    v = start("vllm", ["--load-format", "runai_streamer", "--model-loader-extra-config", '{"concurrency": 16}'])
    assert 'Weight loader: load_format=runai_streamer, model_loader_extra_config={"concurrency": 16}' in v.out.getvalue() + v.err.getvalue()
    plain = start("vllm")
    assert "Weight loader:" not in plain.out.getvalue() + plain.err.getvalue()


def test_sglang_health_503_while_starting(start):
    r = start("sglang", env={"KIMI_DOUBLE_START_DELAY": "1.5"}, wait_ready=False)
    assert r.double.bound.wait(10)
    assert r.get("/health")[0] == 503 and r.get("/health_generate")[0] == 503
    assert r.double.ready.wait(10)
    assert r.get("/health")[0] == 200 and r.get("/health_generate")[0] == 200


def test_vllm_refuses_connections_while_starting(cache):
    port = free_port()
    argv = [MODEL, "--host", "127.0.0.1", "--port", str(port)]
    r = Running("vllm", argv, dict(cache, KIMI_DOUBLE_START_DELAY="1.5"), wait_ready=False)
    try:
        time.sleep(0.3)
        with pytest.raises(urllib.error.URLError):
            urllib.request.urlopen("http://127.0.0.1:%d/health" % port, timeout=2)
        assert r.double.ready.wait(10)
        assert r.get("/health")[0] == 200
    finally:
        r.close()


def test_crash_switches(start):
    r = start("vllm", env={"KIMI_DOUBLE_CRASH": "startup"}, wait_ready=False)
    r.thread.join(10)
    assert r.code == 1 and "KIMI_DOUBLE_CRASH=startup" in r.err.getvalue() and not r.double.ready.is_set()
    r = start("sglang", env={"KIMI_DOUBLE_CRASH": "after:0.5"})
    r.thread.join(10)
    assert r.code == 1 and "simulated crash" in r.err.getvalue()
    r = start("sglang", env={"KIMI_DOUBLE_CRASH": "sometimes"}, wait_ready=False)
    r.thread.join(10)
    assert r.code == 1 and "bad KIMI_DOUBLE_CRASH" in r.err.getvalue()


def test_clean_stop_returns_zero(start):
    r = start("sglang")
    r.close()
    assert r.code == 0


# ---- the real entry points, as processes -----------------------------------------------------------------
def test_shim_entry_points_and_sigterm(cache):
    env = dict(os.environ, PYTHONPATH=os.path.join(ENGINE_DIR, "shims"), **cache)
    # the vllm shim is a /bin/sh script that execs `python3`: let that be this interpreter
    shim_env = dict(env, PATH=os.pathsep.join([os.path.dirname(sys.executable), env.get("PATH", os.defpath)]))
    bad = subprocess.run([os.path.join(ENGINE_DIR, "shims", "vllm"), "serve", MODEL, "--tp", "8"],
                         env=shim_env, capture_output=True, text=True, timeout=30, check=False)
    assert bad.returncode == 2 and "error: unrecognized arguments: --tp 8" in bad.stderr
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "sglang.launch_server", "--model-path", MODEL,
                             "--host", "127.0.0.1", "--port", str(port)], env=env, cwd="/",
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if READY_LINE["sglang"] in line:
                break
        assert call("http://127.0.0.1:%d/v1/models" % port)[1]["data"][0]["id"] == MODEL, lines
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()


# ---- vLLM's NVFP4 MoE dispatch lines (what the runbook's assert-native step reads) ----------------------------
@pytest.mark.parametrize("backend,logged,marlin_warning", [
    ("marlin", "MARLIN", True), ("flashinfer_b12x", "FLASHINFER_B12X", False),
    ("flashinfer_cutedsl", "FLASHINFER_CUTEDSL", False), (None, "FLASHINFER_CUTLASS", False)])
def test_vllm_nvfp4_logs_the_moe_dispatch(tmp_path, backend, logged, marlin_warning):
    make_cache(tmp_path, quant="modelopt")
    extra = ["--quantization", "modelopt_fp4"] + (["--moe-backend", backend] if backend else [])
    r = Running("vllm", [MODEL, "--host", "127.0.0.1", "--port", "0", "--tensor-parallel-size", "8"] + extra,
                {"HF_HUB_CACHE": str(tmp_path), "HF_HUB_OFFLINE": "1"})
    try:
        out = r.out.getvalue()
        line = "Using '%s' NvFp4 MoE backend out of potential backends: ['FLASHINFER_TRTLLM'," % logged
        assert line in out and "(Worker_TP0 pid=" in out and "[nvfp4.py:" in out
        assert ("Your GPU does not have native support for FP4 computation" in out) is marlin_warning
        assert out.index(line) < out.index("Loading weights took") < out.index(READY_LINE["vllm"])
    finally:
        r.close()


def test_int4_and_sglang_log_no_moe_dispatch(start):
    assert "NvFp4 MoE backend" not in start("vllm").out.getvalue()
    assert "NvFp4 MoE backend" not in start("sglang").out.getvalue()


def test_vllm_nvfp4_refuses_a_non_nvfp4_moe_backend(tmp_path):
    make_cache(tmp_path, quant="modelopt")
    err = io.StringIO()
    args = flags.parse("vllm", [MODEL, "--quantization", "modelopt_fp4", "--moe-backend", "triton"])
    code = EngineDouble("vllm", args, env={"HF_HUB_CACHE": str(tmp_path)}, out=io.StringIO(), err=err
                        ).run(threading.Event())
    assert code == 1 and "ValueError: moe_backend='triton' is not supported for NvFP4 MoE." in err.getvalue()


# ---- a replica over several hosts (--nnodes): the rendezvous -----------------------------------------------
def replica_lines(engine, port, nnodes=2, tp=8, pp=2):
    if engine == "vllm":
        base = list(VLLM_LINE) + ["--pipeline-parallel-size", str(pp), "--nnodes", str(nnodes),
                                  "--master-addr", "127.0.0.1", "--master-port", str(port)]
        return [base + ["--node-rank", str(rank)] + (["--headless"] if rank else []) for rank in range(nnodes)]
    base = [a if a != "8" else str(tp * nnodes) for a in SGLANG_LINE] + [
        "--nnodes", str(nnodes), "--dist-init-addr", "127.0.0.1:%d" % port]
    return [base + ["--node-rank", str(rank)] for rank in range(nnodes)]


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_a_replica_starts_when_every_rank_joins_and_only_the_head_serves(start, engine):
    head_line, worker_line = replica_lines(engine, free_port())
    head = start(engine, line=head_line, wait_ready=False)
    worker = start(engine, line=worker_line, wait_ready=False)
    assert head.double.ready.wait(10), head.err.getvalue()
    assert head.get("/v1/models")[0] == 200
    for _attempt in range(100):  # the worker loads its weights on its own after the rendezvous
        if worker.double.state == "ready":
            break
        time.sleep(0.1)
    assert worker.double.state == "ready" and worker.double.httpd is None, "a worker serves no HTTP"
    assert "Rendezvous: all 2 ranks joined" in head.out.getvalue()
    assert "running headless" in worker.out.getvalue()


def test_the_head_keeps_its_rendezvous_port_open_like_a_store_and_a_probe_does_no_harm(start):
    port = free_port()
    head_line, worker_line = replica_lines("sglang", port)
    head = start("sglang", line=head_line, wait_ready=False)
    start("sglang", line=worker_line, wait_ready=False)
    assert head.double.ready.wait(10), head.err.getvalue()
    for _probe in range(5):  # more than the listen backlog: each one is accepted and closed
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    time.sleep(0.3)
    assert head.get("/health")[0] == 200 and not head.double.rendezvous.lost.is_set()


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_when_a_member_goes_away_the_head_fails_and_a_restart_recovers(start, engine):
    port = free_port()
    head_line, worker_line = replica_lines(engine, port)
    head = start(engine, line=head_line, wait_ready=False)
    worker = start(engine, line=worker_line, wait_ready=False)
    assert head.double.ready.wait(10), head.err.getvalue()
    worker.close()
    head.thread.join(5)
    assert head.code == 1 and "NCCL error: remote process exited" in head.err.getvalue()
    again = [start(engine, line=line, wait_ready=False) for line in replica_lines(engine, port)]
    assert again[0].double.ready.wait(10), again[0].err.getvalue()


def test_the_head_answers_through_every_rank_and_stalls_on_a_frozen_one_while_health_answers(start):
    from kimi_engine_double import rendezvous
    port = free_port()
    head_line, worker_line = replica_lines("vllm", port)
    head = start("vllm", line=head_line, wait_ready=False)
    worker = start("vllm", line=worker_line, wait_ready=False)
    assert head.double.ready.wait(10), head.err.getvalue()
    assert head.post(chat())[0] == 200  # the worker acknowledged the step
    worker.close()
    head.thread.join(5)
    # A rank that joined and then froze (SIGSTOP): it never acknowledges a step.
    again = start("vllm", line=head_line, wait_ready=False)
    worker_argv = list(worker_line)
    worker_argv[worker_argv.index("--host") + 1] = "127.0.0.1"
    conf = rendezvous.settings("vllm", flags.parse("vllm", worker_argv), {})
    for _attempt in range(50):  # the new head listens once its thread got there
        try:
            frozen = socket.create_connection(("127.0.0.1", port), timeout=5)
            break
        except OSError:
            time.sleep(0.1)
    frozen.sendall((json.dumps(dict(conf["me"], rank=1)) + "\n").encode())
    assert json.loads(frozen.makefile("r").readline())["ok"]
    assert again.double.ready.wait(10), again.err.getvalue()
    req = urllib.request.Request(again.url("/v1/chat/completions"), data=json.dumps(chat()).encode(),
                                 headers={"Content-Type": "application/json"})
    with pytest.raises(OSError):  # a timeout: the request stalls
        urllib.request.urlopen(req, timeout=1)
    assert again.get("/health")[0] == 200
    frozen.close()  # the frozen rank goes away: the head fails
    again.thread.join(5)
    assert again.code == 1 and "NCCL error" in again.err.getvalue()


def test_a_member_with_another_configuration_fails_both_at_init(start):
    port = free_port()
    head_line, worker_line = replica_lines("vllm", port)
    worker_line[worker_line.index("--kv-cache-dtype") + 1] = "auto"
    head = start("vllm", line=head_line, wait_ready=False)
    worker = start("vllm", line=worker_line, wait_ready=False)
    head.thread.join(10)
    worker.thread.join(10)
    for rank in (head, worker):
        assert rank.code == 1
        assert "rank 1 was started with kv_cache_dtype='auto', rank 0 with 'fp8'" in rank.err.getvalue()


@pytest.mark.parametrize("engine, rank, message", [
    ("sglang", 0, "DistStoreError: Timed out after 1 seconds waiting for clients. 1/2 clients joined."),  # the head
    ("vllm", 1, "DistNetworkError: The client socket has timed out after 1000ms"),  # a worker without its head
])
def test_a_rank_alone_fails_after_the_timeout(start, engine, rank, message):
    alone = start(engine, line=replica_lines(engine, free_port())[rank], env={"KIMI_DOUBLE_RENDEZVOUS_TIMEOUT": "1"},
                  wait_ready=False)
    alone.thread.join(10)
    assert alone.code == 1 and message in alone.err.getvalue()


# ---- the kernel compile and its cache (KIMI_DOUBLE_COMPILE_SECONDS, issue 39) -----------------------------------
def _compile_env(tmp_path, engine):
    from kimi_engine_double import kernels
    return {"KIMI_DOUBLE_COMPILE_SECONDS": "0.3", kernels.CACHES[engine][0][0]: str(tmp_path / "kernels")}


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_compiles_into_an_empty_cache_then_reuses_it(start, tmp_path, engine):
    from ansible_collections.kimi.deploy.plugins.module_utils._engines import log as engine_log
    env = _compile_env(tmp_path, engine)
    first = start(engine, env=env)
    assert first.double.compile_phase == "compiled"
    written = [name for _root, _dirs, names in os.walk(str(tmp_path / "kernels")) for name in names]
    assert len(written) == 3
    first.close()
    second = start(engine, env=env)
    assert second.double.compile_phase == "cached"
    assert [name for _root, _dirs, names in os.walk(str(tmp_path / "kernels")) for name in names] == written
    # readiness reads the phase from the log, as from the real engines'
    for run, phase in ((first, "compiled"), (second, "cached")):
        watch = engine_log.LogWatch(engine)
        watch.feed(run.out.getvalue().splitlines())
        assert watch.compile["phase"] == phase, run.out.getvalue()
    compile_line = "Entering DeepGEMM JIT" if engine == "sglang" else "Compiling a graph for dynamic shape"
    assert compile_line in first.out.getvalue() and compile_line not in second.out.getvalue()


def test_another_cache_folder_compiles_again(start, tmp_path):
    env = _compile_env(tmp_path, "sglang")
    start("sglang", env=env).close()
    other = start("sglang", env=dict(env, SGLANG_DG_CACHE_DIR=str(tmp_path / "other-key")))
    assert other.double.compile_phase == "compiled"


def test_without_the_knob_nothing_is_compiled_or_written(start, tmp_path):
    r = start("vllm", env={"VLLM_CACHE_ROOT": str(tmp_path / "kernels")})
    assert r.double.compile_phase == "off" and not (tmp_path / "kernels").exists()


def test_a_bad_compile_knob_fails_at_start_up(start):
    r = start("sglang", env={"KIMI_DOUBLE_COMPILE_SECONDS": "soon"}, wait_ready=False)
    r.thread.join(10)
    assert r.code == 1 and "KIMI_DOUBLE_COMPILE_SECONDS" in r.err.getvalue()


def test_the_doubles_cache_variable_is_the_engine_datas():
    """The folder the double checks is the one the collection mounts: kernel_cache.primary of every build."""
    from kimi_engine_double import kernels
    from ansible_collections.kimi.deploy.plugins.module_utils._engines import registry
    from ansible_collections.kimi.deploy.plugins.module_utils._model.kernel_cache import spec_of
    for spec in registry.ENGINES.values():
        for version in spec["versions"]:
            assert spec_of(spec, version)["primary"] in kernels.CACHES[spec["name"]][0], (spec["key"], version)
