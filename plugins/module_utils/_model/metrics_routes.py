# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The metrics paths each host's Caddy serves to a metrics key, and the Prometheus job that scrapes each, declared
once. Private to kimi.deploy.

The routes Caddy serves (caddy_proxy's engine route, kimi_metrics' kimi_metrics_routes: the kimi.deploy.metrics_routes
filter) and the scrape jobs kimi_monitoring writes (the kimi.deploy.prometheus_scrape filter) are made from this table.
Every path is /metrics or under /metrics/: the Caddyfile refuses an API key there with one matcher.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# In the order the jobs are written. name: the route's name (the Caddyfile's matcher @metrics_<name>); what: what
# answers there.
TABLE = (
    {"name": "engine", "path": "/metrics", "job": "kimi-engine",
     "what": "the engine's own Prometheus text (every host whose proxy serves)"},
    {"name": "node", "path": "/metrics/node", "job": "kimi-node",
     "what": "node exporter, with kimi_metrics' textfile series"},
    {"name": "accelerator", "path": "/metrics/accelerator", "job": "kimi-accelerator",
     "what": "the platform's accelerator exporter (kimi_metrics)"},
    {"name": "caddy", "path": "/metrics/caddy", "job": "kimi-caddy", "what": "Caddy's own metrics"},
    {"name": "router", "path": "/metrics/router", "job": "kimi-router",
     "what": "a disaggregated deployment's router, on its router host"},
    {"name": "gateway", "path": "/metrics/gateway", "job": "kimi-gateway",
     "what": "the fleet gateway's router, on a kimi_gateways host's gateway site"},
    {"name": "usage", "path": "/metrics/usage", "job": "kimi-usage",
     "what": "tokens and requests per client key name (the gateway's usage tap), on its gateway site"},
)

NAMES = tuple(r["name"] for r in TABLE)
PATHS = dict((r["name"], r["path"]) for r in TABLE)
# (path, job) in the order Prometheus' configuration lists them.
JOBS = tuple((r["path"], r["job"]) for r in TABLE)
# The path every served host has: the engine's.
ENGINE_PATH = PATHS["engine"]


class RouteError(ValueError):
    """An upstream for a route the table does not have, or one without its upstream."""


def routes(upstreams):
    """The routes of the upstreams given, {name: {upstream, upstream_path} or None (no such route here)}, as
    [{name, path, upstream, upstream_path}] in the table's order."""
    unknown = sorted(set(upstreams) - set(NAMES))
    if unknown:
        raise RouteError("no metrics route named %s (the routes: %s)" % (", ".join(unknown), ", ".join(NAMES)))
    out = []
    for route in TABLE:
        given = upstreams.get(route["name"])
        if not given:
            continue
        if not given.get("upstream") or not given.get("upstream_path"):
            raise RouteError("the %s route needs upstream and upstream_path, got %r" % (route["name"], given))
        out.append({"name": route["name"], "path": route["path"], "upstream": given["upstream"],
                    "upstream_path": given["upstream_path"]})
    return out
