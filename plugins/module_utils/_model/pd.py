# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Prefill/decode disaggregation: a deployment's instances, roles, KV transfer backend and router. Private to
kimi.deploy.

A disaggregated deployment (inventory: kimi_pd: <name> and kimi_pd_role: prefill|decode on its hosts) runs the same
identity on every host, the prefill instances computing each prompt's KV cache and the decode instances receiving it
and generating, behind the engine's own router on one host (by default the first decode instance's). An instance is a
host, or a replica over several hosts (kimi_replica): its head is what the router sends to. resolve_pd() is called
by _model.deployment.resolve() and decides, for this host: its role, the transfer backend (with the reason), the
engine's PD arguments (the engine data files emit them from the `pd` field), the layout that must match between the
roles, and, on the router host, the router's command, checked against the pinned router's own parser
(_engines/routers.py).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import re

from ansible_collections.kimi.deploy.plugins.module_utils._model.inputs import (
    DeploymentError, check_choice, check_int, check_text, fail, is_unset)
from ansible_collections.kimi.deploy.plugins.module_utils._model import ports as _ports
from ansible_collections.kimi.deploy.plugins.module_utils._engines.routers import ROUTERS, router_argv

ROLES = ("prefill", "decode")
# SGLang's default --disaggregation-bootstrap-port (server_args.py); the prefill serves its bootstrap server there.
DEFAULT_BOOTSTRAP_PORT = 8998
# The router listens on loopback (Caddy fronts it) and serves its Prometheus text on loopback too (SMG's own default
# metrics port is 29000, as sglang-router's was).
DEFAULT_ROUTER_PORT = 30080
DEFAULT_ROUTER_METRICS_PORT = 29000
# vLLM's NIXL side channel (VLLM_NIXL_SIDE_CHANNEL_PORT's default): the decode pulls the KV through it.
NIXL_SIDE_CHANNEL_PORT = 5600
# vLLM-Ascend's Mooncake connector: each instance's kv_port (seed 004 uses 30000, 30100, 30200: one per instance;
# 30000 is this collection's engine port, so the first is 30100).
MOONCAKE_KV_PORT_BASE = 30100
PLAN_RE = re.compile(r"([1-9][0-9]?)P([1-9][0-9]?)D")
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}")
HOST_RE = re.compile(r"[A-Za-z0-9.:\[\]-]{1,253}")
DEVICE_RE = re.compile(r"[A-Za-z0-9_.:-]{1,64}")


def plan_members(plan):
    """The members of a preview (make plan PD=2P2D): prefill-1.., decode-1.., at example addresses."""
    match = PLAN_RE.match(str(plan).strip().upper()) if not is_unset(plan) else None
    if not match or match.group(0) != str(plan).strip().upper():
        fail("pd_plan", plan, ["<P>P<D>D with 1-99 of each, e.g. 1P1D or 2P2D"])
    members = []
    for role, count, net in (("prefill", int(match.group(1)), 1), ("decode", int(match.group(2)), 2)):
        members += [{"host": "%s-%d" % (role, i + 1), "role": role, "address": "10.0.%d.%d" % (net, i + 11)}
                    for i in range(count)]
    return members


def _instances(members, name):
    """The instances (dicts: role, head, hosts, address, port) in inventory order: a host alone, or the hosts of one
    replica together (same kimi_replica), its first host the head."""
    instances, by_replica = [], {}
    for member in members:
        replica = member.get("replica")
        if replica is not None and replica in by_replica:
            instance = by_replica[replica]
            if member["role"] != instance["role"]:
                fail("pd_role", member["role"], [instance["role"]], "%s is in replica %s with %s, whose role is %s: the "
                     "hosts of one replica serve one role" % (member["host"], replica, instance["head"],
                                                              instance["role"]))
            instance["hosts"].append(member["host"])
            continue
        instance = {"role": member["role"], "head": member["host"], "hosts": [member["host"]],
                    "address": member["address"], "port": member.get("port"), "rdma_devices": member["rdma_devices"]}
        if replica is not None:
            by_replica[replica] = instance
        instances.append(instance)
    for role in ROLES:
        if not any(i["role"] == role for i in instances):
            fail("pd_role", role, list(ROLES), "kimi_pd %s has no %s instance (hosts: %s): a disaggregated deployment "
                 "needs at least one of each role" % (name, role, ", ".join(m["host"] for m in members)))
    return instances


def _members(pd):
    members = pd.get("members")
    if not isinstance(members, list) or not members:
        fail("pd_members", members, ["the hosts of kimi_servers with this kimi_pd"])
    out = []
    for member in members:
        if not isinstance(member, dict) or not member.get("host"):
            fail("pd_members", member, ["{host, role, address}"])
        role = member.get("role")
        if role not in ROLES:
            fail("pd_role", role, list(ROLES), "host %s of kimi_pd %s" % (member["host"], pd.get("name")))
        address = check_text("pd_address", member.get("address") or member["host"], HOST_RE,
                             ["the host's address on the network of the deployment, e.g. 10.0.0.11"], None)
        port = member.get("port")
        out.append({"host": str(member["host"]), "role": role, "address": address, "replica": member.get("replica"),
                    "port": None if is_unset(port) else check_int("port", port, 1, 65535),
                    "rdma_devices": _rdma(member.get("rdma_devices"))})
    return out


def _rdma(devices):
    """A member's RDMA devices as a list ([] none; ['none'] in kimi_pd_rdma_devices turns them off)."""
    if devices is None or devices == "":
        return []
    if isinstance(devices, str):
        devices = [d for d in devices.split(",") if d.strip()]
    if not isinstance(devices, list):
        fail("pd_rdma_devices", devices, ["a list of RDMA device names, e.g. [mlx5_0, mlx5_1]", "[none]"])
    devices = [str(d).strip() for d in devices]
    if devices == ["none"]:
        return []
    for device in devices:
        check_text("pd_rdma_devices", device, DEVICE_RE, ["RDMA device names as in /sys/class/infiniband"], None)
    return devices


def choose_backend(spec, given, rdma_everywhere, rdma_hosts_missing):
    """(backend, why) for the engine build `spec`: kimi_pd_transfer_backend when set (one the engine data lists), else
    the engine's choice for RDMA on every host or for TCP."""
    data = spec["disaggregation"]
    allowed = sorted(data["backends"])
    if not is_unset(given):
        backend = check_choice("pd_transfer_backend", str(given).strip(), allowed,
                               "the KV transfer backends %s serves Kimi-K2.6 with" % spec["title"])
        needs = data["backends"][backend]
        if needs.get("rdma") and not rdma_everywhere:
            verb = "has" if len(rdma_hosts_missing) == 1 else "have"
            fail("pd_transfer_backend", backend, [b for b in allowed if not data["backends"][b].get("rdma")],
                 "%s moves the KV cache over RDMA, and %s %s no RDMA device (/sys/class/infiniband, or "
                 "kimi_pd_rdma_devices)" % (backend, ", ".join(rdma_hosts_missing), verb))
        return backend, "kimi_pd_transfer_backend=%s: set by the user. %s" % (backend, needs["why"])
    pick = data["rdma"] if rdma_everywhere else data["tcp"]
    if rdma_everywhere:
        why = "RDMA devices on every host of the deployment: %s. %s" % (pick, data["backends"][pick]["why"])
    else:
        why = "no RDMA device on %s: %s. %s" % (
            ", ".join(rdma_hosts_missing) or "the hosts", pick, data["backends"][pick]["why"])
    return pick, why


def _kv_transfer_config(data, role, index, deployment):
    """vLLM's --kv-transfer-config for this instance (None for engines without one)."""
    kind = data.get("kv_transfer_config")
    if kind == "nixl":
        return {"kv_connector": "NixlConnector", "kv_role": "kv_both"}
    if kind == "mooncake-v1":  # vLLM-Ascend, seed 004: producer/consumer, a kv_port and an engine id per instance
        layout = {"dp_size": deployment["dp"], "tp_size": deployment["tp"]}
        return {"kv_connector": "MooncakeConnectorV1", "kv_role": "kv_producer" if role == "prefill" else "kv_consumer",
                "kv_port": str(MOONCAKE_KV_PORT_BASE + 100 * index), "engine_id": str(index),
                "kv_connector_extra_config": {"prefill": layout, "decode": layout}}
    return None


def for_instance(pd, index, data, deployment, me=None):
    """The fields of `pd` that are the instance's own (role, address, RDMA devices, KV connector settings, container
    environment): for this host (me: its member entry), or for the plan's view of another instance (its head)."""
    instance = pd["instances"][index]
    address, devices = (me or instance)["address"], (me or instance)["rdma_devices"]
    own = {
        "role": instance["role"],
        "instance": index,
        "head": instance["head"],
        "address": address,
        "rdma_devices": devices if data["backends"][pd["transfer_backend"]].get("rdma") else [],
        "kv_transfer_config": instance["kv_transfer_config"],  # resolve_pd's, which the router reads too
        "container_env": dict(data.get("container_env", {})),
    }
    if data.get("kv_transfer_config") == "nixl":
        own["container_env"].update({"VLLM_NIXL_SIDE_CHANNEL_HOST": address,
                                     "VLLM_NIXL_SIDE_CHANNEL_PORT": str(NIXL_SIDE_CHANNEL_PORT)})
    return own


def resolve_pd(pd, spec, version, deployment, warnings):
    """The `pd` field of this host's deployment, or None when it is not disaggregated.

    pd: {name, me (this host), members: [{host, role, address, replica, port, rdma_devices}], router (a host, default
    the first decode instance's head), bootstrap_port, transfer_backend, router_port, router_metrics_port,
    router_extra_args} (site.yml), or {plan: "1P1D"} (plan.yml: example members, this host the router's).
    deployment: the fields resolved so far (tp, dp, port, kv_cache_dtype, ...).
    """
    if not pd:
        return None
    if not isinstance(pd, dict):
        fail("pd_members", pd, ["{name, members, ...}"])
    data = spec.get("disaggregation")
    if not data:
        raise DeploymentError("kimi_pd is set, but %s %s is not served disaggregated by this collection: %s"
                              % (spec["title"], version, spec.get("disaggregation_why", "no PD support")))
    plan = pd.get("plan")
    if not is_unset(plan):
        members = [dict(m, rdma_devices=pd.get("rdma_devices")) for m in plan_members(plan)]
        pd = dict(pd, name=pd.get("name") or "plan", members=members, me=None)
    name = check_text("pd_members", pd.get("name"), NAME_RE, ["a name of letters, digits, . _ -"], None)
    if name is None:
        fail("pd_members", name, ["a name of letters, digits, . _ - (the value of kimi_pd)"])
    members = _members(pd)
    instances = _instances(members, name)
    heads = [i["head"] for i in instances]
    router_host = pd.get("router")
    if is_unset(router_host):
        router_host = next(i["head"] for i in instances if i["role"] == "decode")
    elif router_host not in [m["host"] for m in members]:
        fail("pd_router", router_host, [m["host"] for m in members], "the router runs on a host of kimi_pd %s" % name)
    me = pd.get("me") or router_host
    mine = next((m for m in members if m["host"] == me), None)
    if mine is None:
        fail("pd_members", me, [m["host"] for m in members], "this host is not among the hosts of kimi_pd %s" % name)
    instance = next(i for i in instances if me in i["hosts"])
    index = instances.index(instance)

    missing = [m["host"] for m in members if not m["rdma_devices"]]
    backend, backend_why = choose_backend(spec, pd.get("transfer_backend"), not missing, missing)
    bootstrap = pd.get("bootstrap_port")
    bootstrap = DEFAULT_BOOTSTRAP_PORT if is_unset(bootstrap) else check_int("pd_bootstrap_port", bootstrap, 1, 65535)
    router_port = pd.get("router_port")
    router_port = DEFAULT_ROUTER_PORT if is_unset(router_port) else check_int("pd_router_port", router_port, 1, 65535)
    metrics_port = pd.get("router_metrics_port")
    metrics_port = DEFAULT_ROUTER_METRICS_PORT if is_unset(metrics_port) else check_int(
        "pd_router_metrics_port", metrics_port, 1, 65535)
    port = deployment["port"]
    # The PD ports against the engine's and each other, by the host ports' one rule (_ports.check); the resolve
    # action checks them again with the roles' ports of each host.
    uses = [(port, "kimi_engine_port")] + ([(bootstrap, "kimi_pd_bootstrap_port")] if data.get("bootstrap") else []) + [
        (router_port, "kimi_pd_router_port"), (metrics_port, "kimi_pd_router_metrics_port")]
    _ports.check([(number, variable, _ports.LISTENERS[variable]) for number, variable in uses])
    for number, inst in enumerate(instances):
        inst["port"] = inst["port"] or port
        inst["url"] = "http://%s:%d" % (("[%s]" % inst["address"]) if ":" in inst["address"] else inst["address"],
                                        inst["port"])
        # what its engine is started with, which a router that names each worker's connector reads (SMG for vLLM)
        inst["kv_transfer_config"] = _kv_transfer_config(data, inst["role"], number, deployment)

    result = {
        "name": name,
        "transfer_backend": backend,
        "transfer_why": backend_why,
        "bootstrap_port": bootstrap if data.get("bootstrap") else None,
        "instances": instances,
        "members": [m["host"] for m in members],
        "heads": heads,
    }
    result.update(for_instance(result, index, data, deployment, me=mine))
    # What must be the same on both sides: the decode reads the prefill's KV cache as it is sent.
    result["layout"] = {
        "identity": deployment["identity"],
        "engine_version": version,
        "revision": deployment["checkpoint"]["revision"],
        "kv_cache_dtype": deployment["kv_cache_dtype"],
        "transfer_backend": backend,
        "served_model_name": deployment["served_model_name"],
        "context_length": deployment["context_length"],
    }
    if data.get("kv_transfer_config") == "mooncake-v1":
        # Its kv_connector_extra_config states this instance's tensor and data parallel sizes for both roles
        # (_kv_transfer_config), and the connector computes which ranks of the other side to pull from with them.
        result["layout"]["parallel"] = {"tp_size": deployment["tp"], "dp_size": deployment["dp"]}
    router = ROUTERS[data["router"]]
    result["router"] = {
        "host": router_host,
        "is_here": me == router_host,
        "name": data["router"],
        "title": router["title"],
        "package": router.get("package"),
        "version": router["version"],
        "install": router["install"],
        "port": router_port,
        "url": "http://127.0.0.1:%d" % router_port,
        "metrics_port": metrics_port,
        "metrics_url": "http://127.0.0.1:%d%s" % (metrics_port if router["metrics"] == "own-port" else router_port,
                                                  router["metrics_path"]),
        "metrics_path": router["metrics_path"],
        "why": data.get("router_why"),
        # what kimi_router waits on: /workers (every instance listed ready), else /v1/models (a model listed)
        "ready_path": router.get("ready_path", "/v1/models"),
    }
    argv, config = router_argv(data["router"], result, deployment, pd.get("router_extra_args"))
    result["router"]["argv"] = argv
    # Its config file (the workers), when this engine's builder gives it one: where the router reads it (on the
    # router host for a venv router, in the container for an image router) and the format kimi_router writes.
    result["router"]["config"] = config
    result["router"]["config_path"] = router.get("config_path") if config is not None else None
    result["router"]["config_format"] = router.get("config_format") if config is not None else None
    result["router"]["command"] = list(router["entrypoint"]) + argv
    warnings.append("kimi_pd %s: the engines listen on the deployment's network (%s) without authentication, as they "
                    "must for the router and the KV transfer: keep that network private; clients reach the router "
                    "through Caddy on %s only." % (name, ", ".join(i["url"] for i in instances), router_host))
    return result


def layout_mismatch(layouts):
    """layouts: [{host, role, layout}] of one disaggregated deployment -> the first difference as a message, or ''."""
    if not layouts:
        return ""
    first = layouts[0]
    for other in layouts[1:]:
        for field, value in sorted(first["layout"].items()):
            if other["layout"].get(field) != value:
                return ("%s differs between the hosts of the disaggregated deployment: %s on %s (%s) and %s on %s (%s). "
                        "The decode instances read the KV cache the prefill instances send, as it is sent: every host "
                        "of it needs the same identity, engine version, checkpoint revision, KV cache dtype, transfer "
                        "backend, model name and context length%s (set them for the group, not per host)"
                        % (_LAYOUT_VARIABLES.get(field, field), json.dumps(value), first["host"], first["role"],
                           json.dumps(other["layout"].get(field)), other["host"], other["role"],
                           _PARALLEL_WHY if "parallel" in first["layout"] else ""))
    return ""


_LAYOUT_VARIABLES = {
    "identity": "quant/engine",
    "engine_version": "kimi_engine_version",
    "revision": "the checkpoint revision (kimi_<quant>_revision)",
    "kv_cache_dtype": "kimi_kv_cache_dtype",
    "transfer_backend": "kimi_pd_transfer_backend",
    "served_model_name": "kimi_served_model_name",
    "context_length": "kimi_context_length",
    "parallel": "the parallel layout (kimi_tensor_parallel, and each instance's accelerators)",
}
_PARALLEL_WHY = (", and, with vLLM-Ascend's MooncakeConnectorV1 (each instance states its own sizes for both "
                 "roles), the same tensor and data parallel sizes")
