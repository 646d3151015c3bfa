"""kimi.deploy.serve_bench with workload multi_turn, against a stand-in aiperf that checks what it is given (the config
names the session file, which exists and holds the sessions) and writes aiperf 0.13.0's per-level summary files: the
session file is written beside aiperf's config, the levels count sessions, and the report carries the cost per
million tokens (kimi_gpu_hour_cost); check mode writes nothing."""
import json
import os
import stat
import sys

from module_runner import run_module

MODULE = os.path.join(os.path.dirname(__file__), *([os.pardir] * 4 + ["plugins", "modules", "serve_bench.py"]))

FAKE_AIPERF = """#!%s
import json, os, sys
assert sys.argv[1:3] == ["profile", "--config"], sys.argv
config = json.load(open(sys.argv[3]))
dataset = config["benchmark"]["dataset"]
assert dataset["type"] == "file" and dataset["format"] == "multi_turn", dataset
sessions = [json.loads(line) for line in open(dataset["path"])]
params = config["sweep"]["parameters"]
levels = list(zip(params["phases.profiling.concurrency"], params["phases.profiling.sessions"]))
assert len(sessions) >= max(n for _c, n in levels)
turns = sum(1 for t in sessions[0]["turns"] if t.get("role") != "system")
for concurrency, count in levels:
    name = "concurrency_%%d__sessions_%%d" %% (concurrency, count)
    folder = os.path.join(config["benchmark"]["artifacts"]["dir"], name)
    os.makedirs(folder)
    json.dump({"aiperf_version": "0.13.0", "request_count": {"avg": count * turns},
               "output_token_throughput": {"avg": 100.0 * concurrency},
               "total_token_throughput": {"avg": 2000.0 * concurrency}},
              open(os.path.join(folder, "profile_export_aiperf.json"), "w"))
"""


def setup(tmp_path):
    aiperf = tmp_path / "aiperf"
    aiperf.write_text(FAKE_AIPERF % sys.executable)
    aiperf.chmod(aiperf.stat().st_mode | stat.S_IEXEC)
    tokenizer = tmp_path / "tokenizer"
    tokenizer.mkdir()
    (tokenizer / "tokenizer_config.json").write_text("{}")
    return {"url": "http://127.0.0.1:9", "tokenizer": str(tokenizer), "aiperf": str(aiperf),
            "result_dir": str(tmp_path / "results"), "host": "gpu-01", "identity": "int4-vllm",
            "workload": "multi_turn", "levels": [1, 2], "sessions_per_level": 3, "turns": 2, "input_tokens": 20,
            "output_tokens": 8, "system_tokens": 30, "timeout": 120, "hour_cost": 36.0}


def test_a_multi_turn_run_writes_its_sessions_and_prices_every_token(tmp_path):
    result = run_module(MODULE, setup(tmp_path))
    assert not result.get("failed"), result
    summary = result["summary"]
    assert summary["config"]["workload"] == "multi_turn" and summary["config"]["multi_turn"]["turns"] == 2
    assert [(lv["concurrency"], lv["sessions"], lv["requests"]) for lv in summary["levels"]] == [(1, 3, 6), (2, 3, 6)]
    sessions_file = os.path.join(result["artifact_dir"], "sessions.jsonl")
    with open(sessions_file) as handle:
        assert len(handle.read().splitlines()) == 3
    first = summary["levels"][0]
    assert first["cost_per_million_tokens"] == round(36.0 / (2000.0 * 3600) * 1e6, 6)
    assert "per million tokens (prompt and output) 5 @1" in result["message"]
    assert "cost per million output tokens 100 @1" in result["message"]
    with open(result["json_path"]) as handle:
        assert json.load(handle)["levels"][0]["cost_per_million_tokens"] == first["cost_per_million_tokens"]


def test_check_mode_writes_nothing_and_says_sessions(tmp_path):
    params = setup(tmp_path)
    result = run_module(MODULE, params, check_mode=True)
    assert "concurrency 1: 3 sessions of 2 turns" in result["message"]
    assert result["config"]["benchmark"]["dataset"]["path"].endswith("sessions.jsonl")
    assert not os.path.exists(params["result_dir"])


def test_bad_session_settings_fail_before_anything_runs(tmp_path):
    params = dict(setup(tmp_path), turn_delay_ms=-1)
    result = run_module(MODULE, params, check_mode=True)
    assert result["failed"] and "turn_delay_ms" in result["msg"]
