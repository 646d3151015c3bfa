"""module_utils/_bench: aiperf's config for a bounded sweep, aiperf 0.13.0's real result files read into our summary
(tests/fixtures/bench: a 3-level sweep through a proxy that failed one request in four, and a single-level run
whose requests all failed), the comparison with a baseline, the last-run lookup and the plot."""
import json
import os
import shutil
import struct
import subprocess
import sys

import pytest

from ansible_collections.kimi.deploy.plugins.module_utils import _bench
from ansible_collections.kimi.deploy.plugins.module_utils._bench import BenchError
from ansible_collections.kimi.deploy.plugins.module_utils._files import atomic_write

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "bench")
AIPERF = os.path.join(ROOT, ".venv-bench", "bin", "aiperf")
PLAN = [(1, 6), (2, 6), (4, 8)]


def config(**extra):
    args = dict(url="https://gpu-01:8443/", model="kimi-k2.6", tokenizer="/t", artifact_dir="/r/a", levels=[4, 1, 16],
                requests_per_level=32, input_tokens=1024, output_tokens=1024, timeout=1800)
    args.update(extra)
    return _bench.build_config(**args)


# ---- config ---------------------------------------------------------------------------------------------------
def test_config_is_a_zip_sweep_of_levels_and_their_request_counts():
    cfg = config(levels=[32, 1, 8], requests_per_level=10)
    assert cfg["sweep"] == {"type": "zip", "parameters": {"phases.profiling.concurrency": [1, 8, 32],
                                                          "phases.profiling.requests": [10, 16, 64]}}
    assert _bench.sweep_plan(cfg) == [(1, 10), (8, 16), (32, 64)]
    bench = cfg["benchmark"]
    assert bench["endpoint"] == {"url": "https://gpu-01:8443", "type": "chat", "streaming": True,
                                 "useServerTokenCount": True, "timeout": 1800.0, "apiKey": "${KIMI_BENCH_API_KEY}",
                                 "extra": {"ignore_eos": True}}
    assert bench["dataset"] == {"type": "synthetic", "entries": 64, "prompts": {"isl": 1024, "osl": 1024}}
    assert bench["tokenizer"] == {"name": "/t", "trustRemoteCode": True}
    phase = bench["phases"][0]
    assert (phase["concurrency"], phase["requests"]) == (1, 10) and phase["duration"] + phase["gracePeriod"] <= 580
    assert bench["serverMetrics"] == {"enabled": False} and bench["gpuTelemetry"] == {"enabled": False}
    assert bench["artifacts"] == {"dir": "/r/a"} and bench["runtime"] == {"ui": "none"}
    assert json.loads(_bench.render_config(cfg)) == cfg  # JSON: valid YAML for aiperf's loader


def test_defaults_give_1024_in_1024_out_and_32_requests_at_1_4_16():
    cfg = config()
    assert _bench.sweep_plan(cfg) == [(1, 32), (4, 32), (16, 32)]
    assert cfg["benchmark"]["dataset"]["prompts"] == {"isl": 1024, "osl": 1024}


def test_single_level_has_no_sweep_and_no_key_means_no_key_reference():
    cfg = config(levels=[2], requests_per_level=3, api_key=False, ignore_eos=False)
    assert "sweep" not in cfg and _bench.sweep_plan(cfg) == [(2, 4)]
    assert "apiKey" not in cfg["benchmark"]["endpoint"] and "extra" not in cfg["benchmark"]["endpoint"]
    assert "${" not in _bench.render_config(cfg)


def test_argv_holds_only_the_config_file():
    assert _bench.build_argv("/v/bin/aiperf", "/r/a/aiperf-config.yaml") == [
        "/v/bin/aiperf", "profile", "--config", "/r/a/aiperf-config.yaml"]


def test_time_limits_share_the_timeout_between_levels():
    duration, grace = _bench.level_time_limit(1800, [1, 4, 16])
    assert (duration, grace) == (464, 116)
    assert 3 * (duration + grace + _bench.LEVEL_OVERHEAD_S) <= 1800
    assert _bench.level_time_limit(27, [1]) == (5, 2)
    with pytest.raises(BenchError, match="timeout 26 s is too short for 1 concurrency levels: give at least 27 s"):
        _bench.level_time_limit(26, [1])


@pytest.mark.parametrize("levels, match", [([], "levels is empty"), ([1, 0], "positive integers"),
                                           ([2, 2], "duplicates"), ([1, True], "positive integers")])
def test_bad_levels_are_refused(levels, match):
    with pytest.raises(BenchError, match=match):
        config(levels=levels)


# ---- aiperf's files -------------------------------------------------------------------------------------------
def test_parse_real_sweep_with_failed_requests():
    levels = _bench.parse_results(os.path.join(FIXTURES, "sweep"), PLAN, base=FIXTURES)
    assert [(lv["concurrency"], lv["requests"], lv["requests_ok"], lv["requests_failed"]) for lv in levels] == [
        (1, 6, 5, 1), (2, 6, 4, 2), (4, 8, 6, 2)]
    first = levels[0]
    assert first["errors"] == ["503 Service Unavailable: upstream overloaded (1 request)"]
    assert levels[1]["errors"] == ["503 Service Unavailable: upstream overloaded (2 requests)"]
    assert first["artifacts"] == os.path.join("sweep", "concurrency_1__requests_6")
    with open(os.path.join(FIXTURES, "sweep", "concurrency_1__requests_6", _bench.SUMMARY_FILE)) as handle:
        export = json.load(handle)
    assert first["output_tokens_per_s"] == export["output_token_throughput"]["avg"]
    assert first["requests_per_s"] == export["request_throughput"]["avg"]
    for ours, theirs in (("ttft", "time_to_first_token"), ("itl", "inter_token_latency"), ("e2e", "request_latency")):
        for p in ("p50", "p99"):
            assert first["%s_%s_ms" % (ours, p)] == export[theirs][p]
    assert _bench.client_version(levels) == "0.13.0"
    with open(os.path.join(FIXTURES, "sweep", "aiperf-config.yaml")) as handle:
        assert _bench.sweep_plan(json.load(handle)) == PLAN  # the config that made these files


def test_parse_level_whose_requests_all_failed_counts_them_from_the_records():
    (level,) = _bench.parse_results(os.path.join(FIXTURES, "all_failed"), [(2, 6)])
    assert (level["requests_ok"], level["requests_failed"]) == (0, 6)
    assert level["errors"] == ["404 Not Found: The model `nope` does not exist."]
    assert level["output_tokens_per_s"] is None and level["ttft_p50_ms"] is None


def test_a_level_aiperf_never_reached_says_so(tmp_path):
    shutil.copytree(os.path.join(FIXTURES, "sweep", "concurrency_1__requests_6"),
                    str(tmp_path / "concurrency_1__requests_6"))
    levels = _bench.parse_results(str(tmp_path), PLAN)
    assert levels[0]["requests_ok"] == 5 and levels[0]["artifacts"]
    assert levels[1]["artifacts"] is None and levels[1]["errors"][0].startswith("not run")
    assert _bench.parse_results(str(tmp_path / "absent"), [(1, 6)])[0]["artifacts"] is None


def summary(levels=None, identity="int4-vllm", host="gpu-01", timestamp="2026-11-24T10:00:00Z", complete=True,
            kimi_model=None):
    levels = levels if levels is not None else _bench.parse_results(os.path.join(FIXTURES, "sweep"), PLAN)
    out = _bench.summarize(levels, identity, host, timestamp, "https://gpu-01", "kimi-k2.6", {"levels": [1, 2, 4]},
                           label="nightly", duration_s=17.0, exit_code=0, kimi_model=kimi_model)
    out["complete"] = complete
    return out


def test_summary_has_identity_host_time_client_and_config():
    s = summary()
    assert (s["schema"], s["identity"], s["host"], s["timestamp"], s["label"]) == (
        _bench.SCHEMA, "int4-vllm", "gpu-01", "2026-11-24T10:00:00Z", "nightly")
    assert s["client"] == {"name": "aiperf", "version": "0.13.0"} and s["config"] == {"levels": [1, 2, 4]}
    assert all("client_version" not in lv for lv in s["levels"])
    assert s["endpoint"] == {"url": "https://gpu-01", "model": "kimi-k2.6"}


# ---- comparison ---------------------------------------------------------------------------------------------
def scaled(s, factors):
    levels = [dict(lv, output_tokens_per_s=lv["output_tokens_per_s"] * factors.get(lv["concurrency"], 1))
              for lv in s["levels"] if lv["concurrency"] in factors]
    return dict(s, levels=levels)


def test_with_the_hosts_hour_cost_each_level_says_what_a_million_output_tokens_cost():
    levels = _bench.parse_results(os.path.join(FIXTURES, "sweep"), PLAN)
    priced = _bench.summarize(levels, "int4-vllm", "gpu-01", "2026-11-24T10:00:00Z", "https://gpu-01", "kimi-k2.6",
                              {}, hour_cost=28.0)
    assert priced["hour_cost"] == 28.0
    for level in priced["levels"]:
        if level["output_tokens_per_s"]:
            assert level["cost_per_million_output_tokens"] == pytest.approx(
                28.0 / (level["output_tokens_per_s"] * 3600) * 1e6, rel=1e-5)
        else:
            assert level["cost_per_million_output_tokens"] is None
    assert summary()["hour_cost"] is None and all(lv["cost_per_million_output_tokens"] is None
                                                  for lv in summary()["levels"])


def test_compare_is_the_geometric_mean_of_per_level_throughput_ratios():
    current = summary()
    assert _bench.compare(current, current)["ratio"] == 1.0
    result = _bench.compare(current, scaled(current, {1: 0.5, 2: 2.0, 4: 1.0}))
    assert [lv["ratio"] for lv in result["levels"]] == [2.0, 0.5, 1.0]
    assert result["ratio"] == 1.0 and result["common_levels"] == [1, 2, 4] and result["reason"] is None
    half = _bench.compare(current, scaled(current, {1: 2.0, 2: 2.0, 4: 2.0}))
    assert half["ratio"] == 0.5
    assert half["baseline"] == {"identity": "int4-vllm", "host": "gpu-01", "timestamp": "2026-11-24T10:00:00Z",
                                "label": "nightly"}


def test_compare_uses_only_levels_measured_in_both():
    current = summary()
    only_4 = _bench.compare(current, scaled(current, {4: 4.0, 16: 1.0}))
    assert only_4["common_levels"] == [4] and only_4["ratio"] == 0.25
    failed = dict(current, levels=[dict(lv, requests_ok=0) if lv["concurrency"] == 4 else lv
                                   for lv in current["levels"]])
    assert _bench.compare(failed, current)["common_levels"] == [1, 2]


def test_compare_says_why_nothing_is_comparable():
    current = summary()
    result = _bench.compare(current, scaled(current, {8: 1.0}))
    assert result["ratio"] is None and result["levels"] == []
    assert result["reason"] == ("nothing comparable: no concurrency with a measured output throughput in both runs "
                                "(this run: 1, 2, 4; baseline: none)")
    assert _bench.compare(current, None)["reason"] == "no baseline to compare with"


# ---- files --------------------------------------------------------------------------------------------------
def test_last_run_is_the_newest_earlier_complete_result_of_the_same_host_and_identity(tmp_path):
    def put(name, **kw):
        (tmp_path / name).write_text(json.dumps(summary(**kw)))
    put("a.json", timestamp="2026-11-20T10:00:00Z")
    put("b.json", timestamp="2026-11-22T10:00:00Z")
    put("c.json", timestamp="2026-11-23T10:00:00Z", identity="fp8-sglang")
    put("d.json", timestamp="2026-11-23T11:00:00Z", host="gpu-02")
    put("e.json", timestamp="2026-11-23T12:00:00Z", complete=False)  # killed: never a baseline
    put("f.json", timestamp="2026-11-25T10:00:00Z")  # later than the run
    (tmp_path / "g.json").write_text('{"not": "ours"}')
    (tmp_path / "h.json").write_text("{broken")
    path, data = _bench.find_last_run(str(tmp_path), "gpu-01", "int4-vllm", "2026-11-24T10:00:00Z")
    assert path == str(tmp_path / "b.json") and data["timestamp"] == "2026-11-22T10:00:00Z"
    assert _bench.find_last_run(str(tmp_path), "gpu-03", "int4-vllm", "2026-11-24T10:00:00Z") == (None, None)
    assert _bench.find_last_run(str(tmp_path / "none"), "gpu-01", "int4-vllm", "z") == (None, None)


def test_a_baseline_is_of_the_same_model_only(tmp_path):
    """A switch between models is an identity switch: the last run of the same quant-engine of another model (Kimi-K2.6
    int4-vllm before Kimi-K2.7-Code int4-vllm) is no baseline, nor a given baseline of another model; a result
    written before models were data (no kimi_model) served kimi-k2.6."""
    def put(name, **kw):
        data = summary(**kw)
        if kw.get("kimi_model") is None:
            del data["kimi_model"]  # as written before models were data
        (tmp_path / name).write_text(json.dumps(data))
    put("old.json", timestamp="2026-11-20T10:00:00Z")
    put("k26.json", timestamp="2026-11-21T10:00:00Z", kimi_model="kimi-k2.6")
    put("k27.json", timestamp="2026-11-22T10:00:00Z", kimi_model="kimi-k2.7-code")
    put("k3.json", timestamp="2026-11-23T10:00:00Z", kimi_model="kimi-k3")
    before = "2026-11-24T10:00:00Z"
    assert summary(kimi_model="kimi-k3")["kimi_model"] == "kimi-k3" and summary()["kimi_model"] == "kimi-k2.6"
    assert _bench.find_last_run(str(tmp_path), "gpu-01", "int4-vllm", before)[0] == str(tmp_path / "k26.json")
    assert _bench.find_last_run(str(tmp_path), "gpu-01", "int4-vllm", before,
                                kimi_model="kimi-k2.7-code")[0] == str(tmp_path / "k27.json")
    assert _bench.find_last_run(str(tmp_path), "gpu-01", "int4-vllm", "2026-11-21T12:00:00Z",
                                kimi_model="kimi-k2.7-code") == (None, None)  # only K2.6's before it
    assert _bench.find_last_run(str(tmp_path), "gpu-01", "int4-vllm", before,
                                kimi_model="kimi-k3.1-pro") == (None, None)  # K3's is another model's
    old = json.loads((tmp_path / "old.json").read_text())
    assert _bench.other_model(old, None) is None and _bench.other_model(old, "kimi-k2.6") is None
    assert _bench.other_model(old, "kimi-k3") == (
        "the baseline served kimi-k2.6, this run kimi-k3: another model's throughput is never compared")


def test_result_names_and_atomic_writes(tmp_path):
    assert _bench.result_stem("gpu-01", "int4-vllm", "20261124T221911Z") == "gpu-01-int4-vllm-20261124T221911Z"
    assert _bench.result_stem("gpu 01/a", "nvfp4:trtllm", "S") == "gpu_01_a-nvfp4_trtllm-S"
    target = tmp_path / "x.json"
    atomic_write(str(target), "one")
    atomic_write(str(target), b"two")
    assert target.read_bytes() == b"two" and os.listdir(str(tmp_path)) == ["x.json"]
    with pytest.raises(BenchError, match="not a serve_bench result"):
        (tmp_path / "y.json").write_text("{}")
        _bench.load_summary(str(tmp_path / "y.json"))


# ---- plot ---------------------------------------------------------------------------------------------------
def png_size(data):
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def test_plot_is_a_png_with_and_without_baseline(tmp_path):
    """Drawn here when this interpreter has matplotlib, else as serve_bench does: in aiperf's interpreter."""
    current = summary()
    baseline = scaled(current, {1: 1.1, 2: 0.9, 4: 1.0})
    try:
        import matplotlib  # noqa: F401  pylint: disable=unused-import
        pngs = [_bench.plot_png(current), _bench.plot_png(current, baseline)]
    except ImportError:
        if not os.access(AIPERF, os.X_OK):
            pytest.skip("no matplotlib here and no .venv-bench/bin/aiperf (make bench-client)")
        argv = _bench.plot_command(_bench.interpreter_of(AIPERF))
        pngs = [subprocess.run(argv, input=json.dumps({"summary": current, "baseline": b}).encode(),
                               stdout=subprocess.PIPE, check=True, timeout=120).stdout for b in (None, baseline)]
    for data in pngs:
        assert png_size(data) == (1200, 480)
    assert pngs[0] != pngs[1]
    atomic_write(str(tmp_path / "p.png"), pngs[1])
    assert png_size((tmp_path / "p.png").read_bytes()) == (1200, 480)


def test_interpreter_of_a_console_script(tmp_path):
    script = tmp_path / "aiperf"
    script.write_text("#!%s\nprint()\n" % os.path.realpath(sys.executable))
    assert _bench.interpreter_of(str(script)) == os.path.realpath(sys.executable)
