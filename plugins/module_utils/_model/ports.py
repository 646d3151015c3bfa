# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Every port the collection opens on a host, in one table; two users of one port are refused naming both.

The deployment's own ports come from the resolved deployment (the engine, the replica's rendezvous on its head, the
PD bootstrap server and the PD router); the roles' ports are role variables, each owned by the role ROLE_PORTS names,
with its default here (the role's defaults/main.yml holds the same literal: tests/unit/roles/test_role_contracts.py
holds them equal; the deployment action reads the default from this table, never from a role's files).
Private to kimi.deploy.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.kimi.deploy.plugins.module_utils._model.inputs import check_int, fail

# What listens on each of the deployment's own ports, by the variable that moves it.
LISTENERS = {
    "kimi_engine_port": "the engine's API",
    "kimi_replica_port": "the replica's rendezvous on its head",
    "kimi_pd_bootstrap_port": "the PD bootstrap server",
    "kimi_pd_router_port": "the PD router",
    "kimi_pd_router_metrics_port": "the PD router's metrics",
}

# variable: (the role whose defaults/main.yml declares it, what listens there, the group its hosts are in or None,
# its default)
ROLE_PORTS = {
    "caddy_proxy_https_port": ("caddy_proxy", "Caddy's HTTPS listener", None, 443),
    "kimi_weights_peer_port": ("kimi_weights", "the fleet's weights peer cache (Caddy)", None, 8444),
    "kimi_metrics_node_exporter_port": ("kimi_metrics", "the node exporter", None, 9100),
    "kimi_metrics_accelerator_exporter_port": ("kimi_metrics", "the accelerator exporter", None, 9400),
    "kimi_serve_replica_watchdog_port": ("kimi_serve", "the replica watchdog", None, 9480),
    # the fleet gateway (kimi_gateway) runs on the kimi_gateways hosts only
    "kimi_gateway_port": ("kimi_gateway", "the fleet gateway's router", "kimi_gateways", 30090),
    "kimi_gateway_metrics_port": ("kimi_gateway", "the fleet gateway router's metrics", "kimi_gateways", 29010),
    "kimi_gateway_https_port": ("kimi_gateway", "Caddy's HTTPS listener of the fleet gateway", "kimi_gateways", 8443),
    "kimi_gateway_usage_port": ("kimi_gateway", "the fleet gateway's usage tap", "kimi_gateways", 30091),
    "kimi_gateway_usage_metrics_port": ("kimi_gateway", "the fleet gateway usage tap's metrics", "kimi_gateways",
                                        29011),
    # host:port; Prometheus runs on the kimi_monitoring hosts only
    "kimi_monitoring_listen_address": ("kimi_monitoring", "Prometheus", "kimi_monitoring", "127.0.0.1:9090"),
}


def role_port(variable, value):
    """The port of a role variable's value (an integer, or host:port for a listen address), checked."""
    if variable.endswith("_address"):
        text = str(value)
        if ":" not in text:
            fail(variable, value, ["host:port, e.g. 127.0.0.1:9090"])
        value = text.rsplit(":", 1)[1]
    return check_int(variable, value, 1, 65535)


def deployment_ports(deployment):
    """[(port, variable, what)] the resolved deployment opens on this host."""
    uses = [(deployment["port"], "kimi_engine_port", LISTENERS["kimi_engine_port"])]
    if deployment.get("nodes", 1) > 1 and deployment.get("node_rank", 0) == 0:
        uses.append((deployment["dist_port"], "kimi_replica_port", LISTENERS["kimi_replica_port"]))
    pd = deployment.get("pd")
    if pd:
        if pd.get("bootstrap_port") and pd.get("role") == "prefill":  # SGLang's prefill serves it; a decode dials it
            uses.append((pd["bootstrap_port"], "kimi_pd_bootstrap_port", LISTENERS["kimi_pd_bootstrap_port"]))
        # the KV transfer's own listeners, fixed by the collection (no variable moves them): kimi_pd names them
        side_channel = (pd.get("container_env") or {}).get("VLLM_NIXL_SIDE_CHANNEL_PORT")
        if side_channel:
            uses.append((int(side_channel), "kimi_pd", "vLLM's NIXL side channel"))
        kv_port = (pd.get("kv_transfer_config") or {}).get("kv_port")
        if kv_port:
            uses.append((int(kv_port), "kimi_pd", "the Mooncake connector's KV port"))
        router = pd.get("router") or {}
        if router.get("is_here"):
            uses.append((router["port"], "kimi_pd_router_port", LISTENERS["kimi_pd_router_port"]))
            if router.get("metrics_url", "").startswith("http://127.0.0.1:%d/" % router.get("metrics_port", 0)):
                uses.append((router["metrics_port"], "kimi_pd_router_metrics_port",
                             LISTENERS["kimi_pd_router_metrics_port"]))
    return uses


# Listeners no variable moves (kimi_pd's KV transfer): a collision with one names the other user's variable.
FIXED = ("kimi_pd",)


def check(uses):
    """Refuse two users of one port: [(port, variable, what)] in table order, the later one named as the variable
    (the earlier one when the later is fixed)."""
    taken = {}
    for port, variable, what in uses:
        if port in taken and taken[port][0] != variable:
            first, first_what = taken[port]
            named, other, named_what, other_what = (first, variable, first_what, what) if variable in FIXED else (
                variable, first, what, first_what)
            fail(named, port, ["a port that no other service of this host uses"],
                 "%s would listen on port %d, which %s (%s) already uses" % (named_what, port, other_what, other))
        taken.setdefault(port, (variable, what))
    return uses
