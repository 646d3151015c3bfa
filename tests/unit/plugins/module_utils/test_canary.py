"""_canary and _prometheus: a canary's figures from the engines' own Prometheus text (the engine double writes the
pinned engines' series, tests/doubles/engine/kimi_engine_double/metrics.py) and the gateway routers' per-worker
outcomes (as SMG 1.13.0 and vllm-router 0.1.17 write them, observed in tests/unit/doubles), and the decision
with the figure that decided. The module's defaults are the site inputs' (one declaration)."""
import os
import sys

import pytest

from ansible_collections.kimi.deploy.plugins.module_utils import _prometheus as prom
from ansible_collections.kimi.deploy.plugins.module_utils._engines.sglang import SERVING_METRICS as SGLANG
from ansible_collections.kimi.deploy.plugins.module_utils._engines.vllm import SERVING_METRICS as VLLM
from ansible_collections.kimi.deploy.plugins.module_utils._model import canary as _canary
from ansible_collections.kimi.deploy.plugins.module_utils._model.site_inputs import by_variable

ROOT = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..")
sys.path.insert(0, os.path.join(ROOT, "tests", "doubles", "engine"))
from kimi_engine_double import metrics as double_metrics  # noqa: E402

ROUTER = '''# TYPE smg_worker_cb_outcomes_total counter
smg_worker_cb_outcomes_total{worker="http://a:30000",outcome="success"} %d
smg_worker_cb_outcomes_total{worker="http://a:30000",outcome="failure"} %d
smg_worker_cb_outcomes_total{worker="http://b:30000",outcome="success"} %d
'''


def engine_text(engine, requests, ttft_seconds):
    """Prometheus text as the engine double writes it: `requests` finished, each with the same TTFT and ITL."""
    buckets = double_metrics.LATENCY_BUCKETS[engine]
    names = VLLM if engine == "vllm" else SGLANG
    lines = ["# TYPE %s counter" % names["requests"]]
    lines.append('%s{model_name="kimi-k2.6"} %d' % (names["requests"], requests))
    for kind, value in (("ttft", ttft_seconds), ("itl", 0.02)):
        for bound in buckets[kind]:
            lines.append('%s_bucket{le="%s",model_name="kimi-k2.6"} %d' % (names[kind], float(bound),
                                                                           requests if value <= bound else 0))
        lines.append('%s_bucket{le="+Inf",model_name="kimi-k2.6"} %d' % (names[kind], requests))
    return "\n".join(lines) + "\n"


A = {"url": "http://a:30000", "serving_metrics": VLLM}
B = {"url": "http://b:30000", "serving_metrics": SGLANG}
KNOWN = [VLLM, SGLANG]


def reads(requests_a, ttft_a, ok_a, fail_a, requests_b, ttft_b, ok_b):
    router = prom.parse(ROUTER % (ok_a, fail_a, ok_b))
    return {A["url"]: _canary.read(A, engine_text("vllm", requests_a, ttft_a), router, "smg_worker_cb_outcomes_total",
                                   KNOWN),
            B["url"]: _canary.read(B, engine_text("sglang", requests_b, ttft_b), router,
                                   "smg_worker_cb_outcomes_total", KNOWN)}


def test_prometheus_text_with_labels_and_histogram_quantiles():
    samples = prom.parse('# HELP x y\nx_total{a="1",b="q\\"uote"} 3\nx_total{a="2"} 4.5\nbad line\n'
                         'h_bucket{le="0.1"} 1\nh_bucket{le="1.0"} 3\nh_bucket{le="+Inf"} 4\n')
    assert prom.total(samples, "x_total") == 7.5 and prom.total(samples, "x_total", a="1") == 3
    assert samples[0][1] == {"a": "1", "b": 'q"uote'}
    cumulative = prom.buckets(samples, "h")
    assert cumulative == [(0.1, 1), (1.0, 3), (float("inf"), 4)]
    assert prom.quantile(0.5, cumulative) == pytest.approx(0.1 + 0.9 * 0.5)  # rank 2 of 4: halfway in (0.1, 1]
    assert prom.quantile(0.99, cumulative) == 1.0  # in +Inf: the last finite bound
    assert prom.quantile(0.5, []) is None
    assert prom.delta(cumulative, [(0.1, 1), (1.0, 1)]) == [(0.1, 0), (1.0, 2), (float("inf"), 4)]


def test_figures_between_two_reads_each_instance_named_by_the_series_it_has():
    before = reads(10, 0.05, 10, 0, 50, 0.3, 50)
    after = reads(110, 0.05, 100, 10, 150, 0.3, 150)
    canary = _canary.group_figures(before, {A["url"]: after[A["url"]]})
    rest = _canary.group_figures(before, {B["url"]: after[B["url"]]})
    assert canary["requests"] == 100 and canary["errors"] == 10 and canary["error_rate"] == pytest.approx(0.1)
    assert rest["requests"] == 100 and rest["errors"] == 0 and rest["error_rate"] == 0
    assert 40 < canary["ttft_p50_ms"] <= 60 and 200 < rest["ttft_p50_ms"] <= 400  # vLLM's and SGLang's own buckets
    # an instance mid-switch whose worker entry names the other engine is read by the series its text has
    wrong = dict(B, serving_metrics=VLLM)
    text = engine_text("sglang", 7, 0.3)
    assert _canary.read(wrong, text, [], "smg_worker_cb_outcomes_total", KNOWN)["requests"] == 7


def test_the_decision_names_the_figure():
    good = {"requests": 100, "errors": 0, "answered": 100, "error_rate": 0.0, "ttft_p50_ms": 60, "itl_p50_ms": 20}
    promote, reason = _canary.decide(good, dict(good, ttft_p50_ms=50), 1.0, 1.5, 50)
    assert promote and reason.startswith("error rate 0.0% against 0.0%, TTFT p50 60 against 50 ms")
    bad = dict(good, errors=5, answered=95, error_rate=0.05)
    promote, reason = _canary.decide(bad, good, 1.0, 1.5, 50)
    assert not promote and reason == ("error rate: 5.0% on the canary against 0.0% on the rest (5 of 100 attempts "
                                      "failed), more than 1.0 points above")
    slow = dict(good, ttft_p50_ms=900)
    promote, reason = _canary.decide(slow, dict(good, ttft_p50_ms=300), 1.0, 1.5, 50)
    assert not promote and reason.startswith("TTFT p50: 900 ms on the canary against 300 ms on the rest, more than 1.5x")
    # a few milliseconds are noise, however large the ratio
    assert _canary.decide(dict(good, itl_p50_ms=9), dict(good, itl_p50_ms=3), 1.0, 1.5, 50)[0]
    idle = dict(good, requests=3, answered=3)
    promote, reason = _canary.decide(idle, good, 1.0, 1.5, 50, wanted=200, minutes=10.0)
    assert not promote and reason == ("requests: 3 of the 200 asked (kimi_canary_requests) reached the canary in 10.0 "
                                      "minutes - too little traffic to judge it")
    assert _canary.decide(good, good, 1.0, 1.5, 50, wanted=100)[0]


def test_the_module_defaults_are_the_site_inputs():
    sys.path.insert(0, os.path.join(ROOT, "tests", "unit", "plugins", "modules"))
    import yaml
    from ansible_collections.kimi.deploy.plugins.modules import canary_compare
    options = yaml.safe_load(canary_compare.DOCUMENTATION)["options"]
    inputs = by_variable()
    for name in ("requests", "minutes", "max_error_rate", "max_latency_ratio"):
        assert options[name]["default"] == inputs["kimi_canary_" + name].default, name


def test_a_release_without_the_latency_histograms_is_not_judged_but_named():
    """A release that renamed its TTFT histogram still counts requests, so the canary's latency comparison would skip
    itself silently: the missing series is named and the canary is rolled back on it. An exposition without the
    engine's request counter (an engine that did not answer) is not taken for a rename."""
    renamed = engine_text("vllm", 50, 0.05).replace(VLLM["ttft"] + "_bucket", "vllm:time_to_first_token_bucket")
    router = prom.parse(ROUTER % (50, 0, 50))
    before = {A["url"]: _canary.read(A, engine_text("vllm", 0, 0.05), router, "smg_worker_cb_outcomes_total", KNOWN)}
    after = {A["url"]: _canary.read(A, renamed, router, "smg_worker_cb_outcomes_total", KNOWN)}
    assert after[A["url"]]["missing"] == ["%s on %s" % (VLLM["ttft"], A["url"])]
    canary = _canary.group_figures(before, after)
    rest = _canary.group_figures(before, {A["url"]: _canary.read(A, engine_text("vllm", 50, 0.05), router,
                                                                 "smg_worker_cb_outcomes_total", KNOWN)})
    assert canary["ttft_p50_ms"] is None and rest["missing"] == []
    promote, reason = _canary.decide(canary, rest, 1.0, 1.5, 50)
    assert not promote and reason.startswith("latency: %s on %s missing" % (VLLM["ttft"], A["url"])), reason
    assert _canary.read(A, "", router, "smg_worker_cb_outcomes_total", KNOWN)["missing"] == []
