#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: canary_compare
short_description: Compare a canary batch with the rest of the fleet on the traffic the gateway sends them
description:
  - Runs on a gateway host, after the canary batch of a rolling switch was verified and put back in the gateway. Reads
    every instance's own Prometheus text (its finished-request counter and TTFT and ITL histograms, named by its
    engine's data) and the gateway router's per-worker outcomes, then waits until the canary's instances have finished
    O(requests) requests or O(minutes) have passed, reads them again and compares the two groups between the reads.
  - The canary is rolled back (RV(promote) false, RV(reason) names the figure) when fewer than O(requests) reached it
    in O(minutes) (too little traffic to judge it - the router's policy decides its share), when its error rate is
    more than O(max_error_rate) percentage points above the rest's, or when its TTFT or ITL p50 is more than
    O(max_latency_ratio) times the rest's and more than O(latency_floor_ms) above it.
  - Changes nothing; in check mode it reads once and promotes.
version_added: 1.0.0
author: kimi.deploy maintainers (@kimi-deploy)
options:
  router_metrics_url:
    description: The gateway router's Prometheus text, e.g. C(http://127.0.0.1:29010/metrics).
    type: str
    required: true
  worker_outcomes:
    description:
      - The routers' per-worker outcome counters (C({worker, outcome}) labels), from their data; the one the running
        router writes is read (mid-switch it may be the previous router).
    type: list
    elements: str
    required: true
  canary:
    description: The canary's workers, each C({url, metrics_url, serving_metrics}) as the gateway lists them.
    type: list
    elements: dict
    required: true
  rest:
    description: The other workers of the fleet, in the same form.
    type: list
    elements: dict
    required: true
  engine_metrics:
    description:
      - Every engine's serving series (C({requests, ttft, itl}) names); an instance's are the set whose request counter
        its text has (the rest of the fleet still runs the identity being replaced).
    type: list
    elements: dict
    default: []
  requests:
    description: Finished requests on the canary that end the wait.
    type: int
    default: 200
  minutes:
    description: The longest wait.
    type: float
    default: 10.0
  max_error_rate:
    description: How many percentage points the canary's error rate may exceed the rest's.
    type: float
    default: 1.0
  max_latency_ratio:
    description: How many times the rest's TTFT and ITL p50 the canary's may be.
    type: float
    default: 1.5
  latency_floor_ms:
    description: A latency difference below this is never a regression.
    type: float
    default: 50
"""

EXAMPLES = r"""
- name: Compare the canary with the rest of the fleet
  kimi.deploy.canary_compare:
    router_metrics_url: http://127.0.0.1:29010/metrics
    worker_outcomes: [smg_worker_cb_outcomes_total, vllm_router_cb_outcomes_total]
    canary: "{{ kimi_gateway.workers | selectattr('host', 'in', ['gpu1']) | list }}"
    rest: "{{ kimi_gateway.workers | rejectattr('host', 'in', ['gpu1']) | list }}"
    requests: 200
    minutes: 10
"""

RETURN = r"""
promote:
  description: Whether the canary passed.
  returned: always
  type: bool
reason:
  description: The figure that decided, with both groups' values.
  returned: always
  type: str
canary:
  description: The canary's figures (requests, errors, answered, error_rate, ttft_p50_ms, itl_p50_ms).
  returned: always
  type: dict
rest:
  description: The rest's figures, in the same form.
  returned: always
  type: dict
seconds:
  description: How long it watched.
  returned: always
  type: float
"""

import time

from urllib.request import ProxyHandler, build_opener

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.kimi.deploy.plugins.module_utils import _prometheus as prom
from ansible_collections.kimi.deploy.plugins.module_utils._model import canary as _canary


# The router on loopback and the engines on the fleet's network: never through a proxy from the environment.
OPENER = build_opener(ProxyHandler({}))


def fetch(url):
    with OPENER.open(url, timeout=10) as response:
        return response.read().decode("utf-8", "replace")


def read_all(router_url, outcomes, workers, engine_metrics):
    """{url: one read} of every worker; an instance that does not answer reads as nothing (its requests then do not
    count, and the router's failures for it still do)."""
    router = prom.parse(fetch(router_url))
    out = {}
    for worker in workers:
        try:
            text = fetch(worker["metrics_url"])
        except (OSError, ValueError):
            text = ""
        out[worker["url"]] = _canary.read(worker, text, router, outcomes, engine_metrics)
    return out


def main():
    module = AnsibleModule(
        argument_spec=dict(
            router_metrics_url=dict(type="str", required=True),
            worker_outcomes=dict(type="list", elements="str", required=True),
            canary=dict(type="list", elements="dict", required=True),
            rest=dict(type="list", elements="dict", required=True),
            engine_metrics=dict(type="list", elements="dict", default=[]),
            requests=dict(type="int", default=200),
            minutes=dict(type="float", default=10.0),
            max_error_rate=dict(type="float", default=1.0),
            max_latency_ratio=dict(type="float", default=1.5),
            latency_floor_ms=dict(type="float", default=50),
        ),
        supports_check_mode=True,
    )
    p = module.params
    workers = p["canary"] + p["rest"]
    started = time.time()
    try:
        before = read_all(p["router_metrics_url"], p["worker_outcomes"], workers, p["engine_metrics"])
        deadline = started + 60 * p["minutes"]
        while not module.check_mode:
            time.sleep(2)
            now = read_all(p["router_metrics_url"], p["worker_outcomes"], p["canary"], p["engine_metrics"])
            served = sum(now[w["url"]]["requests"] - before[w["url"]]["requests"] for w in p["canary"])
            if served >= p["requests"] or time.time() >= deadline:
                break
        after = read_all(p["router_metrics_url"], p["worker_outcomes"], workers, p["engine_metrics"])
    except (OSError, ValueError) as error:
        module.fail_json(msg="canary: the gateway router's metrics at %s do not answer: %s"
                         % (p["router_metrics_url"], error))
    mine = [w["url"] for w in p["canary"]]
    canary = _canary.group_figures(before, dict((u, v) for u, v in after.items() if u in mine))
    rest = _canary.group_figures(before, dict((u, v) for u, v in after.items() if u not in mine))
    if module.check_mode:
        promote, reason = True, "check mode: nothing was switched"
    else:
        promote, reason = _canary.decide(canary, rest, p["max_error_rate"], p["max_latency_ratio"],
                                         p["latency_floor_ms"], p["requests"], p["minutes"])
    module.exit_json(changed=False, promote=promote, reason=reason, canary=canary, rest=rest,
                     seconds=round(time.time() - started, 1))


if __name__ == "__main__":
    main()
