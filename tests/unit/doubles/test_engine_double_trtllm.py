"""The engine double as TensorRT-LLM's `trtllm-serve`, and the version selection (KIMI_DOUBLE_ENGINE_VERSION).

Run as processes (`python3 -m kimi_engine_double trtllm ...` and the `trtllm-serve` shim), no Docker needed. Each
trtllm test runs against the provisional flag list (fixtures/engine_flags_trtllm-test.json) and, when it exists, the
the collection's list for 1.3.0rc17 (tests/fixtures/engine_flags/engine_flags_trtllm-1.3.0rc17.json); option names
are taken from the list under test, so underscore/dash spellings follow it.
"""
import difflib
import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ENGINE_DIR = os.path.abspath(os.path.join(HERE, "..", "..", "doubles", "engine"))
REAL_FLAGS = os.path.abspath(os.path.join(HERE, "..", "..", "fixtures", "engine_flags"))
TEST_FLAGS = os.path.join(HERE, "fixtures")
sys.path.insert(0, ENGINE_DIR)

from kimi_engine_double import yamlmini  # noqa: E402
from kimi_engine_double.process import DoubleProcess  # noqa: E402
from test_engine_double import MODEL, WEATHER_TOOL, call, chat, make_cache  # noqa: E402

FLAVOURS = [pytest.param((TEST_FLAGS, "test"), id="provisional")]
if os.path.isfile(os.path.join(REAL_FLAGS, "engine_flags_trtllm-1.3.0rc17.json")):
    FLAVOURS.append(pytest.param((REAL_FLAGS, "1.3.0rc17"), id="real-1.3.0rc17"))


class Flavour:
    def __init__(self, directory, version):
        self.dir, self.version = directory, version
        with open(os.path.join(directory, "engine_flags_trtllm-%s.json" % version), encoding="utf-8") as f:
            self.table = json.load(f)
        self.env = {"KIMI_DOUBLE_FLAGS_DIR": directory, "KIMI_DOUBLE_ENGINE_VERSION": version}

    def opt(self, dest):
        """The option name declared for `dest` (e.g. '--tensor_parallel_size')."""
        for name, spec in self.table["options"].items():
            if spec.get("dest") == dest:
                return name
        pytest.skip("the flag list has no option for %s" % dest)

    def config_opt(self):
        behaviour = self.table.get("parser_behaviour") or {}
        named = behaviour.get("config_option")
        for name in named if isinstance(named, list) else [named]:
            if name in self.table["options"]:
                return name
        return self.opt("extra_llm_api_options")

    def first_choice(self, dest, prefer="kimi_k2"):
        choices = self.table["options"][self.opt(dest)].get("choices") or []
        if not choices:
            pytest.skip("%s has no choices" % dest)
        return prefer if prefer in choices else choices[0]


@pytest.fixture(params=FLAVOURS)
def flavour(request):
    return Flavour(*request.param)


def run(argv, env, timeout=30, tool="module"):
    full_env = dict((k, v) for k, v in os.environ.items() if not k.startswith(("KIMI_DOUBLE_", "HF_")))
    full_env.update(env)
    full_env["PYTHONPATH"] = ENGINE_DIR
    if tool == "module":
        cmd = [sys.executable, "-m", "kimi_engine_double", "trtllm"] + list(argv)
    else:  # the shims are /bin/sh scripts that exec `python3`: let that be this interpreter
        full_env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), full_env.get("PATH", os.defpath)])
        cmd = [os.path.join(ENGINE_DIR, "shims", tool)] + list(argv)
    return subprocess.run(cmd, env=full_env, capture_output=True, text=True, timeout=timeout, check=False, cwd="/")


def click_error(message, group=False):
    path = "trtllm-serve" if group else "trtllm-serve serve"
    usage = "Usage: trtllm-serve [OPTIONS] COMMAND [ARGS]..." if group else "Usage: trtllm-serve serve [OPTIONS] MODEL"
    return "%s\nTry '%s --help' for help.\n\nError: %s\n" % (usage, path, message)


@pytest.fixture
def cache(tmp_path):
    hub = tmp_path / "hub"
    hub.mkdir()
    make_cache(hub, quant="modelopt")
    return {"HF_HUB_CACHE": str(hub), "HF_HUB_OFFLINE": "1"}


# ---- click parsing -------------------------------------------------------------------------------------------
def test_unknown_option_is_clicks_error_exit_2(flavour):
    r = run([MODEL, "--no-such-thing", "1"], flavour.env)
    assert r.returncode == 2
    assert r.stderr == click_error("No such option: --no-such-thing")


def test_a_close_unknown_option_gets_clicks_suggestion(flavour):
    trust = flavour.opt("trust_remote_code")
    names = [n for name, spec in flavour.table["options"].items() for n in [name] + (spec.get("aliases") or [])]
    close = difflib.get_close_matches(trust + "s", [n for n in names if n.startswith("--")] + ["--help"])
    assert trust in close
    r = run([MODEL, trust + "s"], flavour.env)
    hint = "Did you mean %s?" % trust if len(close) == 1 else "(Possible options: %s)" % ", ".join(sorted(close))
    assert r.returncode == 2 and r.stderr == click_error("No such option: %ss %s" % (trust, hint))


def test_underscore_and_dash_spellings_follow_the_flag_list(flavour, tmp_path):
    name = flavour.opt("tensor_parallel_size")
    other = "--" + (name[2:].replace("_", "-") if "_" in name else name[2:].replace("-", "_"))
    assert other != name
    env = dict(flavour.env, HF_HUB_CACHE=str(tmp_path), HF_HUB_OFFLINE="1")  # empty cache: parsed ones exit 1
    declared = run([MODEL, name, "8"], env)
    assert declared.returncode == 1 and "LocalEntryNotFoundError" in declared.stderr
    swapped = run([MODEL, other, "8"], env)
    if (flavour.table.get("parser_behaviour") or {}).get("underscores_accepted"):
        assert swapped.returncode == 1 and "LocalEntryNotFoundError" in swapped.stderr
    else:
        assert swapped.returncode == 2
        assert "\nError: No such option: %s Did you mean %s?\n" % (other, name) in swapped.stderr \
            or "\nError: No such option: %s (Possible options: " % other in swapped.stderr


@pytest.mark.parametrize("case", ["missing_value", "bad_int", "bad_choice", "missing_model", "group_option",
                                  "extra_argument", "flag_with_value"])
def test_click_errors(flavour, case):
    port, tool = flavour.opt("port"), flavour.opt("tool_parser")
    trust = flavour.opt("trust_remote_code")
    argv, expected = {
        "missing_value": ([MODEL, port], "Error: Option '%s' requires an argument.\n" % port),
        "bad_int": ([MODEL, port, "abc"], click_error("Invalid value for '%s': 'abc' is not a valid integer." % port)),
        "bad_choice": ([MODEL, tool, "nope"], None),
        "missing_model": (["serve", port, "8000"], click_error("Missing argument 'MODEL'.")),
        "group_option": ([port, "8000", MODEL], click_error("No such option: %s" % port, group=True)),
        "extra_argument": ([MODEL, "other"], click_error("Got unexpected extra argument (other)")),
        "flag_with_value": ([MODEL, trust + "=yes"], "Error: Option '%s' does not take a value.\n" % trust),
    }[case]
    r = run(argv, flavour.env)
    assert r.returncode == 2, r.stderr
    if case == "bad_choice":
        choices = flavour.table["options"][tool]["choices"]
        expected = click_error("Invalid value for '%s': 'nope' is not one of %s."
                               % (tool, ", ".join(repr(c) for c in choices)))
    assert r.stderr == expected


def test_unknown_version_exits_1_naming_the_known_ones(flavour):
    r = run([MODEL], dict(flavour.env, KIMI_DOUBLE_ENGINE_VERSION="9.9.9"))
    assert r.returncode == 1
    assert "no flag list for trtllm 9.9.9" in r.stderr and "known trtllm versions: %s" % flavour.version in r.stderr


def test_default_version_of_trtllm_is_1_2_1(tmp_path):
    r = run([MODEL], {"KIMI_DOUBLE_FLAGS_DIR": str(tmp_path)})
    assert r.returncode == 1 and "no flag list for trtllm 1.3.0rc17" in r.stderr and "versions: none" in r.stderr


# ---- the YAML config ------------------------------------------------------------------------------------------
def test_yaml_with_an_unknown_key_fails_like_pydantic(flavour, tmp_path, cache):
    cfg = tmp_path / "extra.yaml"
    cfg.write_text("tensor_parallel_size: 8\nnot_a_trtllm_option: 3\nkv_cache_config:\n  dtype: fp8\n  bogus: x\n")
    r = run([MODEL, flavour.config_opt(), str(cfg)], dict(flavour.env, **cache))
    assert r.returncode == 1
    cls = flavour.table["llm_args"].get("class", "TorchLlmArgs")
    assert "pydantic_core._pydantic_core.ValidationError: 2 validation errors for %s" % cls in r.stderr
    assert ("not_a_trtllm_option\n  Extra inputs are not permitted [type=extra_forbidden, input_value=3, "
            "input_type=int]") in r.stderr
    kv_fields = flavour.table["llm_args"]["fields"].get("kv_cache_config", {}).get("fields")
    if kv_fields and "bogus" not in kv_fields:
        assert "kv_cache_config.bogus\n  Extra inputs are not permitted" in r.stderr
    assert "KIMI ENGINE DOUBLE" in r.stdout.splitlines()[0]


def test_yaml_with_a_bad_type_fails(flavour, tmp_path, cache):
    cfg = tmp_path / "extra.yaml"
    cfg.write_text("tensor_parallel_size: eight\n")
    r = run([MODEL, flavour.config_opt(), str(cfg)], dict(flavour.env, **cache))
    assert r.returncode == 1
    assert "tensor_parallel_size\n  Input should be a valid integer, unable to parse string as an integer" in r.stderr


def test_missing_config_file_fails(flavour, tmp_path, cache):
    r = run([MODEL, flavour.config_opt(), str(tmp_path / "nope.yaml")], dict(flavour.env, **cache))
    assert r.returncode == 1 and "FileNotFoundError" in r.stderr


GOOD_YAML = """# written by kimi.deploy
tensor_parallel_size: 8
moe_expert_parallel_size: 8
enable_attention_dp: true
trust_remote_code: true
max_seq_len: 131072
max_batch_size: 16
kv_cache_config:
  dtype: fp8
  free_gpu_memory_fraction: 0.85
"""


@pytest.fixture
def served(flavour, tmp_path, cache):
    started = []

    def _start(extra=(), yaml_text=GOOD_YAML, env=None, wait_ready=True, model=MODEL):
        argv = [model]
        if yaml_text is not None:
            cfg = tmp_path / ("cfg%d.yaml" % len(started))
            cfg.write_text(yaml_text)
            argv += [flavour.config_opt(), str(cfg)]
        p = DoubleProcess("trtllm", argv + list(extra), tmp_path / ("log%d" % len(started)),
                          env=dict(flavour.env, **dict(cache, **(env or {}))))
        started.append(p)
        return p.start(wait_ready=wait_ready)
    yield _start
    for p in started:
        p.stop()


def test_good_yaml_serves_health_models_chat_and_tools(flavour, served):
    tp = flavour.opt("tensor_parallel_size")
    parsers = [flavour.opt("tool_parser"), flavour.first_choice("tool_parser"),
               flavour.opt("reasoning_parser"), flavour.first_choice("reasoning_parser")]
    p = served([tp, "4"] + parsers)
    log = p.log()
    lines = log.splitlines()
    assert "KIMI ENGINE DOUBLE" in lines[0]
    assert "[TRT-LLM] [I]" in log and "bytes read from" in log and "quant_method=modelopt" in log
    assert "the config file" in log and "tensor_parallel_size=8 (CLI: 4)" in log  # the YAML wins, logged
    assert "tensor_parallel_size=8" in log and "'dtype': 'fp8'" in log and "enable_attention_dp=True" in log
    for line in ("INFO:     Started server process [", "INFO:     Waiting for application startup.",
                 "INFO:     Application startup complete.",
                 "INFO:     Uvicorn running on http://127.0.0.1:%d (Press CTRL+C to quit)" % p.port):
        assert line in log
    assert log.index("bytes read from") < log.index("Application startup complete.")
    assert call(p.url + "/health")[0] == 200
    status, models = call(p.url + "/v1/models")
    assert status == 200 and [m["id"] for m in models["data"]] == [MODEL]
    assert models["data"][0]["owned_by"] == "tensorrt_llm"
    status, body = call(p.url + "/v1/chat/completions", chat("Hello", model=MODEL))
    msg = body["choices"][0]["message"]
    assert status == 200 and "You said: Hello" in msg["content"] and msg["reasoning_content"]
    status, body = call(p.url + "/v1/chat/completions", chat("Weather?", model=MODEL, tools=[WEATHER_TOOL]))
    choice = body["choices"][0]
    assert status == 200 and choice["finish_reason"] == "tool_calls"
    arguments = json.loads(choice["message"]["tool_calls"][0]["function"]["arguments"])
    assert arguments == {"city": "Paris", "unit": "celsius"}
    status, text = call(p.url + "/v1/chat/completions", chat("Stream", model=MODEL, stream=True), raw=True)
    assert status == 200 and text.rstrip().endswith("data: [DONE]")
    assert call(p.url + "/metrics")[0] == 200  # JSON iteration stats ([] without enable_iter_perf_stats)
    assert call(p.url + "/version")[1] == {"version": flavour.version}


def test_without_parsers_tool_calls_and_thinking_stay_in_the_text(served):
    p = served(yaml_text=None)
    assert "the config file" not in p.log()
    msg = call(p.url + "/v1/chat/completions", chat(model=MODEL, tools=[WEATHER_TOOL]))[1]["choices"][0]["message"]
    assert not msg["tool_calls"] and "<|tool_call_begin|>functions.get_weather:0" in msg["content"]
    assert msg["content"].startswith("<think>")


def test_default_host_and_port_come_from_the_flag_list(flavour):
    opts = flavour.table["options"]
    assert opts[flavour.opt("host")]["default"] == "localhost" and opts[flavour.opt("port")]["default"] == 8000


def test_fault_switches_and_shm(served):
    p = served(env={"KIMI_DOUBLE_CRASH": "startup"}, wait_ready=False)
    assert p.wait_exit() == 1 and "KIMI_DOUBLE_CRASH=startup" in p.log()
    p = served(env={"KIMI_DOUBLE_SHM_BYTES_PER_WEIGHT_BYTE": "1e18"}, wait_ready=False)
    assert p.wait_exit() == 135 and "Caught signal 7 (Bus error: nonexistent physical address)" in p.log()
    p = served(env={"KIMI_DOUBLE_SHM_BYTES_PER_WEIGHT_BYTE": "1e-9", "KIMI_DOUBLE_BROKEN_TOOLS": "1"})
    body = call(p.url + "/v1/chat/completions", chat(model=MODEL, tools=[WEATHER_TOOL]))[1]
    assert body["choices"][0]["finish_reason"] == "stop" and not body["choices"][0]["message"]["tool_calls"]
    p = served(env={"KIMI_DOUBLE_CRASH": "after:0.3"})
    assert p.wait_exit() == 1 and "simulated crash" in p.log()


def test_a_local_directory_is_served_under_its_name(served, cache):
    snap = os.path.join(cache["HF_HUB_CACHE"], "models--moonshotai--Kimi-K2.6", "snapshots")
    model_dir = os.path.join(snap, os.listdir(snap)[0])
    p = served(model=model_dir, yaml_text=None)
    assert [m["id"] for m in call(p.url + "/v1/models")[1]["data"]] == [os.path.basename(model_dir)]


def test_trtllm_serve_shim(flavour, cache):
    r = run([MODEL, "--zzqqxx"], flavour.env, tool="trtllm-serve")
    assert r.returncode == 2 and r.stderr == click_error("No such option: --zzqqxx")
    r = run(["--help"], flavour.env, tool="trtllm-serve")
    assert r.returncode == 0 and "Usage: trtllm-serve [OPTIONS] COMMAND [ARGS]..." in r.stdout


# ---- the YAML reader used when PyYAML is missing -----------------------------------------------------------------
SAMPLE_YAML = """# comment
a: 1
b: 0.85
c: true
d: null
e: "quoted: yes"   # trailing comment
f: [1, 2, 4]
g:
  h: fp8
  i:
    - x
    - y: 2
      z: no
j: {k: 1, l: two}
m:
- 1
- -2
"""


def test_yaml_subset_reader():
    got = yamlmini.load_subset(SAMPLE_YAML)
    assert got == {"a": 1, "b": 0.85, "c": True, "d": None, "e": "quoted: yes", "f": [1, 2, 4],
                   "g": {"h": "fp8", "i": ["x", {"y": 2, "z": False}]}, "j": {"k": 1, "l": "two"}, "m": [1, -2]}
    assert yamlmini.load_subset(GOOD_YAML)["kv_cache_config"] == {"dtype": "fp8", "free_gpu_memory_fraction": 0.85}
    yaml = pytest.importorskip("yaml")
    assert got == yaml.safe_load(SAMPLE_YAML)


# ---- version selection for vLLM ----------------------------------------------------------------------------------
def run_vllm(argv, env):
    return run(argv, env, tool="vllm")


def test_vllm_version_prints_the_active_version(tmp_path):
    assert run_vllm(["--version"], {}).stdout.strip() == "0.22.1"
    r = run_vllm(["--version"], {"KIMI_DOUBLE_ENGINE_VERSION": "0.33.0"})
    assert r.stdout.strip() == "0.33.0"
    r = run_vllm(["serve", MODEL], {"KIMI_DOUBLE_ENGINE_VERSION": "0.0.1"})
    assert r.returncode == 1 and "known vllm versions: 0.20.2, 0.22.1" in r.stderr


VLLM_033 = os.path.join(REAL_FLAGS, "engine_flags_vllm-0.33.0.json")


@pytest.mark.skipif(not os.path.isfile(VLLM_033), reason="engine_flags_vllm-0.33.0.json does not exist yet")
def test_vllm_0_33_0_accepts_a_flag_0_22_1_refuses(tmp_path):
    with open(VLLM_033, encoding="utf-8") as f:
        new = json.load(f)["options"]
    with open(os.path.join(REAL_FLAGS, "engine_flags_vllm-0.22.1.json"), encoding="utf-8") as f:
        old = json.load(f)["options"]
    only_new = sorted(n for n, s in new.items() if n.startswith("--") and n not in old and s.get("dest") != "help"
                      and not s.get("takes_value") and "." not in n)
    if not only_new:
        pytest.skip("no flag (option without a value) is new in 0.33.0")
    flag = only_new[0]
    env = {"HF_HUB_CACHE": str(tmp_path), "HF_HUB_OFFLINE": "1"}  # an empty cache: a parsed line exits 1
    r = run_vllm(["serve", MODEL, flag], dict(env, KIMI_DOUBLE_ENGINE_VERSION="0.33.0"))
    assert r.returncode == 1 and "LocalEntryNotFoundError" in r.stderr and "vLLM API server version 0.33.0" in r.stdout
    r = run_vllm(["serve", MODEL, flag], env)
    assert r.returncode == 2 and "unrecognized arguments: %s" % flag in r.stderr
