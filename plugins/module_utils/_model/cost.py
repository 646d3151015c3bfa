# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""What a host's accelerators cost per hour (kimi_gpu_hour_cost: a price per accelerator-hour for each model, as
the accelerator facts name it), the one figure the node series kimi_deployment_hour_cost, the dashboard's cost per
million tokens and the benchmark report's are derived from (stdlib only). Private to kimi.deploy."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.kimi.deploy.plugins.module_utils._model.inputs import fail, is_unset

EXAMPLE = "{'NVIDIA H200': 3.5, 'NVIDIA B200': 5.9}"


def check_costs(costs):
    """kimi_gpu_hour_cost as {model: non-negative price}, or refused naming the variable."""
    if is_unset(costs):
        return {}
    if not isinstance(costs, dict):
        fail("gpu_hour_cost", costs, ["a mapping of accelerator model to its price per hour, e.g. " + EXAMPLE])
    checked = {}
    for model, price in costs.items():
        if not isinstance(model, str) or not model.strip():
            fail("gpu_hour_cost", costs, ["accelerator models as the accelerator facts name them, e.g. " + EXAMPLE])
        if isinstance(price, bool) or not isinstance(price, (int, float, str)):
            fail("gpu_hour_cost", costs, ["a number of at least 0 per model, e.g. " + EXAMPLE],
                 "the price of %s is %r" % (model, price))
        try:
            value = float(price)
        except ValueError:
            value = -1.0
        if not value >= 0 or value == float("inf"):
            fail("gpu_hour_cost", costs, ["a number of at least 0 per model, e.g. " + EXAMPLE],
                 "the price of %s is %r" % (model, price))
        checked[model.strip()] = value
    return checked


def hour_cost(summary, costs):
    """{per_hour, accelerators, why}: what the host's accelerators (the collection's summary: count, models) cost per
    hour at `costs` (already checked), or per_hour None and why not."""
    if not costs:
        return {"per_hour": None, "accelerators": None, "why": "kimi_gpu_hour_cost is not set"}
    if not summary or not summary.get("count"):
        return {"per_hour": None, "accelerators": None, "why": "no accelerators read on this host"}
    models = list(summary.get("models") or [])
    accelerators = "%d x %s" % (summary["count"], "/".join(models))
    missing = [m for m in models if m not in costs]
    if missing or len(models) != 1:
        return {"per_hour": None, "accelerators": accelerators,
                "why": "kimi_gpu_hour_cost has no price for %s (it prices %s)" % (
                    ", ".join(missing or models), ", ".join(sorted(costs)))}
    per_hour = round(summary["count"] * costs[models[0]], 6)
    return {"per_hour": per_hour, "accelerators": accelerators,
            "why": "%s at %g per accelerator-hour" % (accelerators, costs[models[0]])}


def per_million_tokens(per_hour, tokens_per_s):
    """The cost of a million tokens at `tokens_per_s`, or None (no price, or no tokens)."""
    if per_hour is None or not tokens_per_s:
        return None
    return round(per_hour / (tokens_per_s * 3600.0) * 1e6, 6)


def resolve(ctx):
    """The feature's fragment of the deployment: {"hour_cost": what the host's accelerators cost per hour}
    (kimi_gpu_hour_cost; the node series, dashboard and bench read it), with a warning where no cost is known."""
    costs = check_costs(ctx["inputs"].get("gpu_hour_cost"))
    cost = hour_cost(ctx["summary"], costs)
    if costs and cost["accelerators"] and cost["per_hour"] is None:
        ctx["warnings"].append("no cost per hour for this host: " + cost["why"])
    return {"hour_cost": cost}
