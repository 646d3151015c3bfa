"""The engine double's KV host tier series (kimi_kv_offload host): each engine's own hit series appear only when the
double is started with that engine's tier flags, with the names the dashboard's "KV host tier hit rate" panel reads
and the engine data declares (the engine files' kv_offload metrics). No Docker needed."""
import io
import json
import os
import time

import pytest

import test_engine_double  # noqa: F401 (puts the double on sys.path)  # pylint: disable=unused-import
from kimi_engine_double import flags, trtllm  # noqa: E402
from kimi_engine_double.server import EngineDouble  # noqa: E402

from ansible_collections.kimi.deploy.plugins.module_utils._engines.registry import ENGINES

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
DASHBOARD = os.path.join(ROOT, "roles", "kimi_monitoring", "files", "kimi-k26-dashboard.json")
MODEL = "moonshotai/Kimi-K2.6"
TIER_ARGS = {"vllm": ["--kv-offloading-backend", "native", "--kv-offloading-size", "64"],
             "sglang": ["--enable-hierarchical-cache", "--hicache-size", "8"]}
SERIES = {"vllm": ("vllm:external_prefix_cache_hits_total", "vllm:external_prefix_cache_queries_total"),
          "sglang": ('sglang:cached_tokens_total{cache_source="host"}',),
          "trtllm": ("trtllm_kv_cache_hit_rate",)}


def double(engine, tier):
    if engine == "trtllm":
        args = trtllm.parse([MODEL], flags.load_flags("trtllm"))
        args.llm_args = {"return_perf_metrics": True, "enable_iter_perf_stats": True}
        if tier:
            args.llm_args["kv_cache_config"] = {"host_cache_size": 1 << 30}
    else:
        argv = ([MODEL] if engine == "vllm" else ["--model-path", MODEL, "--enable-metrics"])
        args = flags.parse(engine, argv + (TIER_ARGS[engine] if tier else []))
    out = EngineDouble(engine, args, env={}, out=io.StringIO(), err=io.StringIO())
    started = time.time()
    code, plan = out.chat({"messages": [{"role": "user", "content": "Hello there"}]})
    assert code == 200, plan
    out.record_latency(plan, started, started + 0.05, started + 0.5)
    return out


def names(text):
    """Sample names, and for SGLang's cached tokens the name with its cache_source label."""
    out = set()
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name = line.split("{")[0].split(" ")[0]
            out.add(name)
            if 'cache_source="host"' in line:
                out.add(name + '{cache_source="host"}')
    return out


@pytest.mark.parametrize("engine", ["vllm", "sglang", "trtllm"])
def test_the_hit_series_appear_only_with_the_tier(engine):
    on, off = names(double(engine, True).metrics()), names(double(engine, False).metrics())
    for series in SERIES[engine]:
        assert series in on and series not in off, (engine, series)


def test_the_dashboard_reads_the_series_the_engine_data_declares():
    with open(DASHBOARD, encoding="utf-8") as handle:
        panel = [p for p in json.load(handle)["panels"] if p["title"] == "KV host tier hit rate"][0]
    expr = panel["targets"][0]["expr"]
    for key in ("vllm", "sglang", "trtllm"):
        for metric in ENGINES[key]["kv_offload"]["metrics"].values():
            name, _brace, labels = metric.partition("{")
            assert name in expr, metric
            for pair in labels.rstrip("}").split(","):
                assert not pair or pair in expr, metric
    for engine, series in SERIES.items():
        for one in series:
            assert one.split("{", maxsplit=1)[0] in expr
