"""The multi_turn benchmark workload (module_utils/_bench): the deterministic session file (shared prefixes, aiperf
0.13.0's multi_turn record shape), aiperf's config for it, the per-level results counted in sessions, the cost per
million tokens, and that a chat run is never the baseline of a multi_turn one."""
import hashlib
import json
import os

import pytest

from ansible_collections.kimi.deploy.plugins.module_utils import _bench
from ansible_collections.kimi.deploy.plugins.module_utils._bench import BenchError


def records(**extra):
    args = dict(sessions=3, turns=4, input_tokens=50, output_tokens=64, system_tokens=200)
    args.update(extra)
    return _bench.session_records(**args)


def config(**extra):
    args = dict(url="https://gpu-01:8443/", model="kimi-k2.6", tokenizer="/t", artifact_dir="/r/a", levels=[4, 1, 16],
                requests_per_level=8, input_tokens=1024, output_tokens=256, timeout=1800, workload="multi_turn",
                sessions_path="/r/a/sessions.jsonl")
    args.update(extra)
    return _bench.build_config(**args)


# ---- the session file --------------------------------------------------------------------------------------------
def test_sessions_are_deterministic_and_render_one_json_line_each():
    first, again = _bench.render_sessions(records()), _bench.render_sessions(records())
    assert first == again
    lines = first.splitlines()
    assert len(lines) == 3 and first.endswith("\n")
    sessions = [json.loads(line)["session_id"] for line in lines]
    assert sessions == ["kimi-bench-0000", "kimi-bench-0001", "kimi-bench-0002"]
    # a pinned digest: a change of the generator changes every later comparison, so it must be deliberate
    assert hashlib.sha256(first.encode()).hexdigest() == (
        "3ba8185a8b74a3dc427c313564fd8f2ddcf6fa349d8a1c0821a6a6ced9209c15")
    assert len(_bench._words("x", 7).split()) == 7


def test_every_session_shares_the_system_prompt_and_has_its_own_turns():
    recs = records()
    systems = set(r["turns"][0]["text"] for r in recs)
    assert len(systems) == 1 and all(r["turns"][0]["role"] == "system" for r in recs)
    (system,) = systems
    assert 200 <= len(system.split()) <= 220  # about system_tokens words
    user = [t["text"] for r in recs for t in r["turns"][1:]]
    assert len(user) == 12 and len(set(user)) == 12  # no two turns alike: the reuse is the history, not a copy
    assert all(t["output_length"] == 64 and 50 <= len(t["text"].split()) <= 52 for r in recs for t in r["turns"][1:])
    assert [t["text"].split(".")[0] for t in recs[0]["turns"][1:]] == ["Step 1", "Step 2", "Step 3", "Step 4"]


def test_the_records_have_aiperfs_multi_turn_shape():
    """aiperf 0.13.0 dataset/loader/models.py MultiTurn: session_id, turns of SingleTurn (text, role, delay,
    output_length); timestamp and delay never together."""
    allowed = {"text", "role", "delay", "output_length"}
    for rec in records(turn_delay_ms=1500):
        assert set(rec) == {"session_id", "turns"}
        assert all(set(turn) <= allowed for turn in rec["turns"])
        delays = [turn.get("delay") for turn in rec["turns"][1:]]
        assert delays == [None, 1500, 1500, 1500]  # think time before each turn after the first


def test_no_system_prompt_when_zero():
    assert all(t.get("role") != "system" for r in records(system_tokens=0) for t in r["turns"])


@pytest.mark.parametrize("field,value", [("sessions", 0), ("turns", 0), ("input_tokens", 0), ("output_tokens", -1),
                                         ("system_tokens", -1), ("turn_delay_ms", -5), ("turns", True),
                                         ("sessions", "3")])
def test_bad_session_settings_are_refused_naming_them(field, value):
    with pytest.raises(BenchError, match=field):
        records(**{field: value})


# ---- aiperf's config ---------------------------------------------------------------------------------------------
def test_config_reads_the_session_file_and_sweeps_sessions():
    cfg = config()
    bench = cfg["benchmark"]
    assert bench["dataset"] == {"type": "file", "path": "/r/a/sessions.jsonl", "format": "multi_turn",
                                "sampling": "sequential"}
    assert cfg["sweep"] == {"type": "zip", "parameters": {"phases.profiling.concurrency": [1, 4, 16],
                                                          "phases.profiling.sessions": [8, 8, 16]}}
    phase = bench["phases"][0]
    assert phase["sessions"] == 8 and "requests" not in phase and phase["concurrency"] == 1
    assert _bench.sweep_plan(cfg) == [(1, 8), (4, 8), (16, 16)]
    assert bench["endpoint"]["streaming"] is True and bench["endpoint"]["extra"] == {"ignore_eos": True}
    assert json.loads(_bench.render_config(cfg)) == cfg


def test_single_level_multi_turn_has_no_sweep():
    cfg = config(levels=[2], requests_per_level=5)
    assert "sweep" not in cfg and _bench.sweep_plan(cfg) == [(2, 5)]


def test_chat_stays_as_it_was():
    cfg = config(workload="chat", sessions_path=None)
    assert cfg["benchmark"]["dataset"]["type"] == "synthetic" and "requests" in cfg["benchmark"]["phases"][0]


def test_bad_workloads_are_refused():
    with pytest.raises(BenchError, match="workload must be one of chat, multi_turn"):
        config(workload="agentic")
    with pytest.raises(BenchError, match="sessions file"):
        config(sessions_path=None)


# ---- results, cost and baselines ---------------------------------------------------------------------------------
def export(folder, output_tps, total_tps, count):
    os.makedirs(folder)
    with open(os.path.join(folder, _bench.SUMMARY_FILE), "w") as handle:
        json.dump({"aiperf_version": "0.13.0", "request_count": {"avg": count},
                   "output_token_throughput": {"avg": output_tps}, "total_token_throughput": {"avg": total_tps},
                   "usage_prompt_cache_read_tokens": {"avg": 1800.0},
                   "time_to_first_token": {"p50": 90.0, "p99": 200.0}}, handle)


def test_levels_count_sessions_and_the_report_prices_every_token(tmp_path):
    export(str(tmp_path / "concurrency_1__sessions_8"), 100.0, 2000.0, 32)
    export(str(tmp_path / "concurrency_4__sessions_8"), 300.0, 6000.0, 32)
    levels = _bench.parse_results(str(tmp_path), [(1, 8), (4, 8)], turns=4)
    assert [(lv["sessions"], lv["requests"], lv["requests_ok"]) for lv in levels] == [(8, 32, 32), (8, 32, 32)]
    assert levels[0]["total_tokens_per_s"] == 2000.0 and levels[0]["cached_prompt_tokens_avg"] == 1800.0
    s = _bench.summarize(levels, "int4-vllm", "gpu-01", "2026-11-28T10:00:00Z", "https://gpu-01", "kimi-k2.6",
                         {"workload": "multi_turn"}, hour_cost=36.0)
    first = s["levels"][0]
    assert first["cost_per_million_tokens"] == pytest.approx(36.0 / (2000.0 * 3600) * 1e6)
    assert first["cost_per_million_output_tokens"] == pytest.approx(36.0 / (100.0 * 3600) * 1e6)
    unpriced = _bench.summarize(levels, "int4-vllm", "gpu-01", "2026-11-28T10:00:00Z", "https://gpu-01", "kimi-k2.6",
                                {"workload": "multi_turn"})
    assert all(lv["cost_per_million_tokens"] is None for lv in unpriced["levels"])


def test_a_chat_run_is_never_the_baseline_of_a_multi_turn_run(tmp_path):
    def write(name, stamp, workload):
        data = {"schema": _bench.SCHEMA, "host": "gpu-01", "identity": "int4-vllm", "timestamp": stamp,
                "complete": True, "levels": [], "config": {"workload": workload} if workload else {}}
        with open(str(tmp_path / name), "w") as handle:
            json.dump(data, handle)
    write("old-chat.json", "2026-11-27T10:00:00Z", None)  # a result from before the workload was recorded: chat
    write("mt.json", "2026-11-27T11:00:00Z", "multi_turn")
    write("chat.json", "2026-11-27T12:00:00Z", "chat")
    now = "2026-11-28T00:00:00Z"
    assert os.path.basename(_bench.find_last_run(str(tmp_path), "gpu-01", "int4-vllm", now,
                                                 workload="multi_turn")[0]) == "mt.json"
    assert os.path.basename(_bench.find_last_run(str(tmp_path), "gpu-01", "int4-vllm", now)[0]) == "chat.json"
