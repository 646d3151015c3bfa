# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""A canary switch (kimi_canary): how many replicas the canary batch takes, the figures of the canary and of the rest
of the fleet between two reads of their metrics, and the decision - promote (the switch goes on) or roll the canary
back - with the figure that decided. Stdlib only; private to kimi.deploy.

Figures per group of instances: requests (the engines' own finished-request counters), the error rate (the gateway
router's per-worker outcomes: a failure counts before the router retries it elsewhere, so clients may never see it),
and TTFT and ITL p50 (the engines' own histograms, each instance's quantile weighted by its requests).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import math

from ansible_collections.kimi.deploy.plugins.module_utils import _prometheus as prom
from ansible_collections.kimi.deploy.plugins.module_utils._model.constraints import count_or_share
from ansible_collections.kimi.deploy.plugins.module_utils._model.inputs import fail


def canary_count(value, replicas):
    """Replicas in the canary batch: a count (1, 2, ...) or a percentage of the replicas (rounded up, at least one),
    leaving at least one replica out of it to compare with."""
    parsed = count_or_share(value)
    allowed = ["a count of replicas (1, 2, ...) or a percentage of them (10%%) that leaves at least one replica "
               "outside the canary, of the %d here" % replicas]
    if not parsed or (parsed[1] and parsed[0] >= 100):
        fail("kimi_canary", value, allowed)
    count = int(math.ceil(parsed[0] * replicas / 100.0)) if parsed[1] else parsed[0]
    if count >= replicas:
        fail("kimi_canary", value, allowed, "the canary would take every replica, leaving none to compare it with")
    return max(1, count)


def read(worker, engine_text, router_samples, outcomes_metrics, engine_metrics=()):
    """One worker's counters at one moment: requests, failures and successes at the router, TTFT and ITL buckets.
    The series are named by the set of `engine_metrics` whose request counter the text has (an instance mid-switch
    may run another engine than its worker entry says), else by the worker's own serving_metrics."""
    samples = prom.parse(engine_text)
    present = set(name for name, _labels, _value in samples)
    names = next((m for m in engine_metrics if m["requests"] in present), worker["serving_metrics"])
    # the router that runs writes one of the routers' outcome counters (outcomes_metrics: a name, or all of them)
    outcomes = [outcomes_metrics] if isinstance(outcomes_metrics, str) else list(outcomes_metrics)
    # An exposition with the engine's request counter but without a latency histogram is a release that renamed it:
    # named, so that decide() refuses to judge the canary instead of skipping its TTFT or ITL comparison.
    missing = [names[kind] for kind in ("ttft", "itl")
               if names["requests"] in present and names[kind] + "_bucket" not in present]
    return {"requests": prom.total(samples, names["requests"]),
            "failures": sum(prom.total(router_samples, m, worker=worker["url"], outcome="failure") for m in outcomes),
            "successes": sum(prom.total(router_samples, m, worker=worker["url"], outcome="success") for m in outcomes),
            "ttft": prom.buckets(samples, names["ttft"]), "itl": prom.buckets(samples, names["itl"]),
            "missing": ["%s on %s" % (name, worker["url"]) for name in missing]}


def group_figures(before, after):
    """Figures of a group of workers between two reads ({url: read()} each): requests, errors, error_rate (0..1),
    ttft_p50_ms and itl_p50_ms (None without observations)."""
    figures = {"requests": 0, "errors": 0, "answered": 0, "missing": []}
    weighted = {"ttft": [], "itl": []}
    for url, end in after.items():
        figures["missing"] += end.get("missing") or []
        start = before.get(url) or {"requests": 0, "failures": 0, "successes": 0, "ttft": [], "itl": []}
        requests = max(0.0, end["requests"] - start["requests"])
        figures["requests"] += requests
        figures["errors"] += max(0.0, end["failures"] - start["failures"])
        figures["answered"] += max(0.0, end["successes"] - start["successes"])
        for kind in ("ttft", "itl"):
            p50 = prom.quantile(0.5, prom.delta(end[kind], start[kind]))
            if p50 is not None:
                weighted[kind].append((p50, max(requests, 1.0)))
    attempts = figures["errors"] + figures["answered"]
    figures["error_rate"] = figures["errors"] / attempts if attempts else 0.0
    for kind in ("ttft", "itl"):
        pairs = weighted[kind]
        figures["%s_p50_ms" % kind] = (1000.0 * sum(v * w for v, w in pairs) / sum(w for _v, w in pairs)
                                       if pairs else None)
    return figures


def decide(canary, rest, max_error_rate_points, max_latency_ratio, latency_floor_ms, wanted=1, minutes=None):
    """(promote, reason): the canary is rolled back when fewer than `wanted` requests reached it (too little traffic to
    judge it; `minutes` says how long it waited), when its error rate is more than max_error_rate_points percentage
    points above the rest's, or when its TTFT or ITL p50 is more than max_latency_ratio times the rest's and more than
    latency_floor_ms above it (a few milliseconds are noise)."""
    attempts = canary["requests"] + canary["errors"]
    if attempts < max(1, wanted):
        return False, ("requests: %d of the %d asked (kimi_canary_requests) reached the canary%s - too little "
                       "traffic to judge it" % (attempts, wanted, " in %s minutes" % minutes if minutes else ""))
    missing = (canary.get("missing") or []) + (rest.get("missing") or [])
    if missing:
        return False, ("latency: %s missing from the engines' /metrics (a release that renamed its histograms?): the "
                       "canary cannot be judged on TTFT and ITL" % ", ".join(missing))
    points = 100.0 * (canary["error_rate"] - rest["error_rate"])
    if points > max_error_rate_points:
        return False, ("error rate: %.1f%% on the canary against %.1f%% on the rest (%d of %d attempts failed), more "
                       "than %s points above" % (100 * canary["error_rate"], 100 * rest["error_rate"],
                                                 canary["errors"], canary["errors"] + canary["answered"],
                                                 max_error_rate_points))
    for kind, title in (("ttft", "TTFT"), ("itl", "ITL")):
        mine, theirs = canary["%s_p50_ms" % kind], rest["%s_p50_ms" % kind]
        if mine is None or theirs is None:
            continue
        if mine > theirs * max_latency_ratio and mine - theirs > latency_floor_ms:
            return False, ("%s p50: %.0f ms on the canary against %.0f ms on the rest, more than %sx"
                           % (title, mine, theirs, max_latency_ratio))
    return True, ("error rate %.1f%% against %.1f%%, TTFT p50 %s against %s ms, ITL p50 %s against %s ms"
                  % (100 * canary["error_rate"], 100 * rest["error_rate"], _ms(canary["ttft_p50_ms"]),
                     _ms(rest["ttft_p50_ms"]), _ms(canary["itl_p50_ms"]), _ms(rest["itl_p50_ms"])))


def _ms(value):
    return "-" if value is None else "%.0f" % value
