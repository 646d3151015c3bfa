# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The routers, as data, and their command lines: in front of a prefill/decode deployment, and as the fleet gateway in
front of aggregated instances (regular mode). Private to kimi.deploy.

A router is pinned like an engine release: a version with the flag list generated from its released package
(tools/engine_flags.py, as the engines'), and every option the collection emits is checked against that list, as are
kimi_pd_router_extra_args (read the way the router's parser reads them). install: "venv" (the pinned wheel in a
virtualenv on the router host: SMG and vllm-router are Rust routers shipped as PyPI wheels) or "image" (the
engine image's own router: trtllm-serve disaggregated). metrics: "own-port" (a Prometheus listener of its own) or
"same-port" (on the router's port). config_path / config_format: where the router reads its config file (the
workers), and in which format the role writes it: on the router host for a venv router (its argv names the path), in
the container for an image router (the role mounts its own file there).

The builders are keyed by (router, engine), as one router may take each engine's prefill/decode its own way: SMG
takes SGLang's workers on its command line, and vLLM's from its discovery file (each worker's KV connector is only
given there).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.kimi.deploy.plugins.module_utils._engines.cli import check_extra, option_index
from ansible_collections.kimi.deploy.plugins.module_utils._engines.spec import Arg
from ansible_collections.kimi.deploy.plugins.module_utils._engines.flags.smg_1_13_0 import OPTIONS as SMG
from ansible_collections.kimi.deploy.plugins.module_utils._engines.flags.vllm_router_0_1_17 import OPTIONS as VLLM_ROUTER
from ansible_collections.kimi.deploy.plugins.module_utils._common import DeploymentError

# trtllm-serve disaggregated (click), read from tensorrt_llm/commands/serve.py on GitHub (the code index's copy, the
# same file the 1.3.0rc17 serve list was read from is not the tag): the options of the `disaggregated` command.
TRTLLM_DISAGGREGATED = {
    "engine": "trtllm-serve disaggregated",
    "version": "1.3.0rc17",
    "provenance": "approximate",
    "parser": "click",
    "underscores": False,
    "dotted": (),
    "optimization_level": None,
    "dests": {
        "config_file": (1, "--config_file", "-c"),
        "metadata_server_config_file": (1, "--metadata_server_config_file", "-m"),
        "server_start_timeout": (1, "--server_start_timeout", "-t"),
        "request_timeout": (1, "--request_timeout", "-r"),
        "log_level": (1, "--log_level", "-l"),
        "metrics_log_interval": (1, "--metrics-log-interval"),
    },
    "arities": {},
    "values": {"log_level": ("internal_error", "error", "warning", "info", "verbose", "debug", "trace")},
}

ROUTERS = {
    # SMG (Shepherd Model Gateway, the `smg` wheel): sglang-router's successor (0.3.2, January 2026, was its last
    # release), engine-agnostic; the fleet gateway for every engine, and SGLang's and vLLM's prefill/decode router.
    "smg": {
        # each worker's request outcomes as its circuit breaker counts them ({worker, outcome="success"|"failure"}),
        # read from the released package's /metrics; a failure counts before the router retries elsewhere
        "title": "SMG",
        "package": "smg",
        "version": "1.13.0",
        "options": SMG,
        "entrypoint": ("smg", "launch"),
        "install": "venv",
        "metrics": "own-port",
        "metrics_path": "/metrics",
        "health_path": "/health",
        "serves": ("sglang", "vllm", "trtllm", "sglang-ascend", "vllm-ascend"),
        "workers_api": {"list": "/workers", "add": "/workers", "remove_by": "id"},
        "worker_outcomes": "smg_worker_cb_outcomes_total",
        # vLLM's prefill/decode: the file discovery provider's manifest (_smg_vllm). JSON: SMG reads it with serde
        # (deny_unknown_fields), and JSON is what its file provider was verified with.
        "config_path": "/etc/kimi-k26/pd-workers.json",
        "config_format": "json",
        # What kimi_router waits on after a (re)start: SMG listens before it has registered its workers (from the
        # discovery file, each after its /health and model info answer); GET /workers lists them, each with its
        # "status" ("ready" once registered), {"workers": [{"url", "worker_type", "status", ...}]}.
        "ready_path": "/workers",
        # The options that name its prefill/decode workers, the collection's whichever way a builder names them (a
        # --prefill in kimi_pd_router_extra_args next to the discovery file would add a worker without its connector).
        "pd_reserved": ("--prefill", "--decode", "--worker-urls", "--discovery-provider", "--discovery-file",
                        "--service-discovery"),
        # As the fleet gateway: each client key's name is its tenant, read from the header Caddy sets (--trust-tenant-
        # header, never forwarded to a worker); its priority scheduler admits a request by the class in
        # priority_header (clamped to the tenant's max_class in the config file); its traces go to an OTLP/gRPC
        # collector at host:port, with the W3C trace context of the request (tracing).
        "tenants": {"trust": ("--trust-tenant-header",), "header": "--tenant-header-name",
                    "scheduler": ("--priority-scheduler-enabled",), "scheduler_config": "--priority-scheduler-config",
                    "priority_header": "x-smg-priority"},
        "tracing": {"enable": ("--enable-trace",), "endpoint": "--otlp-traces-endpoint"},
    },
    # vLLM-Ascend's prefill/decode only (MooncakeConnectorV1, which SMG 1.13.0 does not know: _smg_vllm).
    "vllm-router": {
        "title": "vllm-router",
        "package": "vllm-router",
        "version": "0.1.17",
        "options": VLLM_ROUTER,
        "entrypoint": ("vllm-router",),
        "install": "venv",
        "metrics": "own-port",
        "metrics_path": "/metrics",
        "health_path": "/health",
        "serves": ("vllm", "vllm-ascend"),
        "workers_api": {"list": "/workers", "add": "/workers", "remove_by": "url"},
        "worker_outcomes": "vllm_router_cb_outcomes_total",
    },
    "trtllm-disaggregated": {
        "title": "trtllm-serve disaggregated",
        "package": None,
        "version": "1.3.0rc17",
        "options": TRTLLM_DISAGGREGATED,
        "entrypoint": ("trtllm-serve", "disaggregated"),
        "install": "image",
        "metrics": "same-port",
        "metrics_path": "/prometheus/metrics",
        "health_path": "/health",
        "serves": (),
        "config_path": "/etc/kimi-k26/disagg.yaml",
        "config_format": "yaml",
    },
}


def _instances(pd, role):
    return [i for i in pd["instances"] if i["role"] == role]


def _smg_sglang(pd, deployment):
    """SMG in front of SGLang's prefill/decode: each prefill with its bootstrap port (the same syntax sglang-router
    0.3.2 had)."""
    argv = ["--pd-disaggregation"]
    for instance in _instances(pd, "prefill"):
        argv += ["--prefill", instance["url"], str(pd["bootstrap_port"])]
    for instance in _instances(pd, "decode"):
        argv += ["--decode", instance["url"]]
    return argv, None


# The KV connectors SMG 1.13.0's HTTP PD router takes vLLM's prefill/decode with, read off each prefill worker's
# kv_connector (model_gateway/src/routers/common/kv_transfer.rs, kv_connector_mode):
#     match kv_connector {
#         Some(MOONCAKE_CONNECTOR) => KvConnectorMode::Mooncake { .. },
#         Some(NIXL_CONNECTOR) => KvConnectorMode::Nixl,
#         _ => KvConnectorMode::Passthrough,
#     }
# with MOONCAKE_CONNECTOR = "MooncakeConnector" and NIXL_CONNECTOR = "NixlConnector" (worker/worker.rs). Passthrough
# sends the prefill no kv_transfer_params, so it keeps no KV for the decode, which recomputes the prompt: every request
# still answers 200 (verified with SMG 1.13.0 against the engine double). The Mooncake mode is vLLM's own
# MooncakeConnector (push-based: SMG mints a transfer_id and gives the decode "remote_bootstrap_addr", from the
# worker's kv_engine_id and bootstrap_port; "the engine returns nothing to relay", kv_transfer.rs); no vLLM build of
# this collection serves Mooncake, and vLLM-Ascend's MooncakeConnectorV1 is another connector (kv_port and engine_id
# per instance), which SMG would route as passthrough: vLLM-Ascend stays behind vllm-router.
SMG_VLLM_CONNECTORS = ("NixlConnector",)


def _smg_vllm(pd, deployment):
    """SMG in front of vLLM's prefill/decode (sequential: the prefill with kv_transfer_params do_remote_decode, then
    the decode with what the prefill returned). The workers come from its file discovery provider: its manifest is the
    only start-up way to give each worker its KV connector (--prefill/--decode take a URL and a bootstrap port, and
    without a kv_connector SMG routes vLLM as passthrough: no KV handoff)."""
    workers = []
    for role in ("prefill", "decode"):
        for instance in _instances(pd, role):
            kv = instance["kv_transfer_config"] or {}
            if kv.get("kv_connector") not in SMG_VLLM_CONNECTORS:
                raise DeploymentError("kimi_pd %s: SMG %s hands the KV cache over between vLLM's prefill and decode "
                                      "only with %s, and %s %s runs %s (routers.py, SMG_VLLM_CONNECTORS)" % (
                                          pd["name"], ROUTERS["smg"]["version"], ", ".join(SMG_VLLM_CONNECTORS),
                                          role, instance["head"], kv.get("kv_connector")))
            workers.append({"id": instance["head"], "url": instance["url"], "worker_type": role,
                            "kv_connector": kv["kv_connector"], "kv_role": kv["kv_role"]})
    path = ROUTERS["smg"]["config_path"]
    return (["--pd-disaggregation", "--discovery-provider", "file", "--discovery-file", path],
            {"version": 1, "workers": workers})


def _vllm_router(pd, deployment):
    """vllm-router in front of vLLM-Ascend's prefill/decode (its MooncakeConnectorV1: see SMG_VLLM_CONNECTORS)."""
    argv = ["--vllm-pd-disaggregation"]
    for instance in _instances(pd, "prefill"):
        argv += ["--prefill", instance["url"]]
    for instance in _instances(pd, "decode"):
        argv += ["--decode", instance["url"]]
    argv += ["--kv-connector", {"nixl": "nixl", "mooncake": "mooncake"}[pd["transfer_backend"]]]
    return argv, None


def _trtllm_disaggregated(pd, deployment):
    def servers(role):
        urls = ["%s:%d" % (i["address"], i["port"]) for i in _instances(pd, role)]
        return {"num_instances": len(urls), "urls": urls}
    config = {"hostname": "127.0.0.1", "port": pd["router"]["port"], "backend": "pytorch",
              "context_servers": servers("prefill"), "generation_servers": servers("decode")}
    return ["--config_file", ROUTERS["trtllm-disaggregated"]["config_path"]], config


# (router, engine) -> the builder of its argv and config file; engine: the deployment's engine (vLLM-Ascend is vllm,
# SGLang on Ascend sglang).
BUILDERS = {
    ("smg", "sglang"): _smg_sglang,
    ("smg", "vllm"): _smg_vllm,
    ("vllm-router", "vllm"): _vllm_router,
    ("trtllm-disaggregated", "trtllm"): _trtllm_disaggregated,
}
# Options every venv router takes the same way: the API on loopback (Caddy fronts it), its Prometheus text on loopback.
LISTEN = {"venv": lambda r: ["--host", "127.0.0.1", "--port", str(r["port"]), "--prometheus-host", "127.0.0.1",
                             "--prometheus-port", str(r["metrics_port"])],
          "image": lambda r: []}


# What a refusal of a managed router option in kimi_pd_router_extra_args names as its owner: the port variables, None
# for the listen hosts (loopback, Caddy in front: fixed), else kimi_pd (the workers come from its hosts).
OWNERS = {"--port": "pd_router_port", "--prometheus-port": "pd_router_metrics_port", "--host": None,
          "--prometheus-host": None}


def router_argv(name, pd, deployment, extra):
    """(argv after the router's entry point, its config file or None) for the router `name` of the disaggregated
    deployment `pd`; every option checked against the pinned router's list, kimi_pd_router_extra_args read as its
    parser reads them."""
    argv, config = BUILDERS[(name, deployment["engine"])](pd, deployment)
    argv += LISTEN[ROUTERS[name]["install"]](pd["router"])
    return checked_argv(name, argv, extra, OWNERS, "pd_members", "kimi_pd", "pd_router_extra_args",
                        ROUTERS[name].get("pd_reserved", ())), config


def checked_argv(name, argv, extra, owners, workers_field, what, extra_field, reserved=()):
    """`argv` (what the collection passes the router `name`) with the user's `extra` (the variable `extra_field`)
    appended: every option the collection passes must exist in the pinned router's flag list, and an option of
    `extra` that the collection manages is refused naming its owner (`owners`, else `workers_field`); `reserved`
    options are the collection's even when this argv leaves them out."""
    router = ROUTERS[name]
    table = router["options"]
    index = option_index(table)
    label = "%s %s" % (router["title"], router["version"])
    managed = {}
    for element in argv:
        if element.startswith("-") and not element.lstrip("-").isdigit():
            if element not in index:
                raise DeploymentError("%s: %s, which the collection passes to the router, is not an option of %s "
                                      "(its flag list: plugins/module_utils/_engines/flags/*); that version needs its own "
                                      "router data (plugins/module_utils/_engines/routers.py)" % (what, element, label))
            managed[index[element][0]] = Arg(element, owners.get(element, workers_field))
    for element in reserved:
        managed.setdefault(index[element][0], Arg(element, owners.get(element, workers_field)))
    return argv + check_extra(table, label, managed, extra, field=extra_field)
