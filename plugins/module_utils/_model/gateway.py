# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The fleet gateway: one endpoint for every serving instance of the fleet, a router (SMG) in regular mode on
the hosts of the group kimi_gateways, with Caddy in front (the same client keys and TLS as a serving host). Private to
kimi.deploy.

resolve_gateway() takes the instances the group resolution found (kimi.deploy.gateway: each kimi_servers host's
deployment from its own inputs, as kimi.deploy.deployment resolves a group's members) and the gateway settings, and
returns the router, its policy and why, every worker URL and the router's command, every option checked against the
pinned router's flag list (_engines/routers.py). Nothing here asks which platform an instance is on: the router data
says which engine builds it serves.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.kimi.deploy.plugins.module_utils._clients import client_policy
from ansible_collections.kimi.deploy.plugins.module_utils._engines.registry import ENGINES
from ansible_collections.kimi.deploy.plugins.module_utils._engines.routers import ROUTERS, checked_argv
from ansible_collections.kimi.deploy.plugins.module_utils._model.inputs import DeploymentError, check_int, check_text, fail, is_unset
from ansible_collections.kimi.deploy.plugins.module_utils._model.metrics_routes import routes
from ansible_collections.kimi.deploy.plugins.module_utils._model.ports import ROLE_PORTS
from ansible_collections.kimi.deploy.plugins.module_utils._model.report import shell_line

# The routers a gateway may run, the default first: SMG serves every engine build (its regular mode proxies the
# OpenAI API), cache-aware across a mixed fleet mid-switch; vllm-router serves vLLM builds only.
GATEWAY_ROUTERS = ("smg", "vllm-router")

# The gateway's settings (resolve_gateway's `settings`): key -> (kimi_gateway's role variable, its default). The ports'
# defaults are ports.ROLE_PORTS'; kimi_gateway's defaults/main.yml holds the same literals (tests/unit/roles/
# test_role_contracts.py holds them equal), and the gateway action reads the defaults from here, never from the role.
SETTINGS = {
    "router": ("kimi_gateway_router", None),
    "policy": ("kimi_gateway_policy", "cache_aware"),
    "port": ("kimi_gateway_port", ROLE_PORTS["kimi_gateway_port"][3]),
    "metrics_port": ("kimi_gateway_metrics_port", ROLE_PORTS["kimi_gateway_metrics_port"][3]),
    "https_port": ("kimi_gateway_https_port", ROLE_PORTS["kimi_gateway_https_port"][3]),
    "extra_args": ("kimi_gateway_router_extra_args", []),
    "retry": ("kimi_gateway_retry", "10s"),
    "health_interval": ("kimi_gateway_health_interval", 5),
    "health_failures": ("kimi_gateway_health_failures", 2),
    "usage_port": ("kimi_gateway_usage_port", ROLE_PORTS["kimi_gateway_usage_port"][3]),
    "usage_metrics_port": ("kimi_gateway_usage_metrics_port", ROLE_PORTS["kimi_gateway_usage_metrics_port"][3]),
}
DURATION_RE = re.compile(r"[0-9]+(ms|s|m)")


def seconds(duration):
    """A DURATION_RE duration (Caddy's lb_try_duration) in seconds."""
    number, unit = re.match(r"([0-9]+)(ms|s|m)$", duration).groups()
    return int(number) * {"ms": 0.001, "s": 1, "m": 60}[unit]


# The options the collection passes a gateway router, and the variable that owns each (kimi_gateway_router_extra_args
# may not set them).
OWNERS = {"--port": "kimi_gateway_port", "--prometheus-port": "kimi_gateway_metrics_port", "--host": None,
          "--prometheus-host": None, "--policy": "kimi_gateway_policy",
          "--health-check-interval-secs": "kimi_gateway_health_interval",
          "--health-failure-threshold": "kimi_gateway_health_failures"}
# Per client key name (caddy_proxy_clients' priority and limits): Caddy sets the name in X-LLM-Client (replacing what a
# client sent), the usage tap enforces the limits and sets SMG's priority header, SMG admits by class. SMG's own
# per-tenant rate limiter applies to gRPC workers only (rate_limit/ is wired into routers/grpc alone), so the tap, which
# reads every answer's usage anyway, holds the limits.
CLIENT_HEADER = "X-LLM-Client"
PRIORITY_CLASS = {"interactive": "interactive", "batch": "bulk"}  # a client's priority -> SMG's scheduler class
# SMG's classes, every one listed (a listed class replaces only its own defaults, and the defaults - system 32 slots,
# interactive 128 or 25% - are sized for fleets of hundreds of slots). The slots are the fleet's (the workers'
# max_running_requests, summed: SGLang's from its /server_info, vLLM's and TensorRT-LLM's the label the workers are
# registered with, each worker's max_running_requests below), counted fleet-wide: interactive reserves 75% of them, so
# batch holds at most a quarter and round robin finds a free slot for an interactive request on any instance; nothing
# preempts (a batch stream is never cut off with a 503), and batch waits in its queue without being promoted over
# interactive (tests/unit/doubles/test_gateway_priority.py measures it with the real SMG).
PRIORITY_CLASSES = (
    ("system", (("reserved_floor", 0), ("reserved_per_slot", 0.0), ("queue_size", 64), ("queue_timeout_secs", 30),
                ("starvation_threshold_secs", 5), ("can_preempt", False))),
    ("interactive", (("reserved_floor", 0), ("reserved_per_slot", 0.75), ("queue_size", 256),
                     ("queue_timeout_secs", 30), ("starvation_threshold_secs", 5), ("can_preempt", False))),
    ("default", (("reserved_floor", 0), ("reserved_per_slot", 0.0), ("queue_size", 512), ("queue_timeout_secs", 60),
                 ("starvation_threshold_secs", 30), ("can_preempt", False))),
    ("bulk", (("reserved_floor", 0), ("reserved_per_slot", 0.0), ("queue_size", 1024), ("queue_timeout_secs", 300),
              ("starvation_threshold_secs", 3600), ("can_preempt", False))),
)
CONFIG_DIR = "/etc/kimi-k26-gateway"
PRIORITY_CONFIG = CONFIG_DIR + "/priority.yaml"
CLIENTS_CONFIG = CONFIG_DIR + "/clients.json"


def _options(part):
    """Every option of a router's tenants or tracing data (its flags and the options that take a value)."""
    return tuple(o for v in (part or {}).values() for o in (v if isinstance(v, tuple) else (v,)) if o.startswith("--"))


# A gateway router's tenant and trace options are the collection's (kimi_gateway_router_extra_args may not set them):
# each router's own, from its data (_engines/routers.py: tenants, tracing; a router without them has neither).
TENANT_OPTIONS = dict((r, _options(ROUTERS[r].get("tenants"))) for r in GATEWAY_ROUTERS)
TRACE_OPTIONS = dict((r, _options(ROUTERS[r].get("tracing"))) for r in GATEWAY_ROUTERS)
OWNERS.update((option, "caddy_proxy_clients") for r in GATEWAY_ROUTERS for option in TENANT_OPTIONS[r])
OWNERS.update((option, "kimi_otlp_endpoint") for r in GATEWAY_ROUTERS for option in TRACE_OPTIONS[r])
WHY_POLICY = {
    "cache_aware": "cache_aware: the router keeps a radix tree of the prompts each instance has seen and sends a "
                   "request to the instance that holds the longest prefix of it (long agentic sessions reuse their "
                   "KV cache), falling back to the least loaded one when the load is uneven",
    "round_robin": "round_robin: each instance in turn, whatever its cache holds",
}


def _url(address, port):
    return "http://%s:%d" % (("[%s]" % address) if ":" in address else address, port)


def resolve_gateway(host, instances, settings, warnings=None):
    """The gateway on `host`.

    instances: [{"host", "deployment"}], the serving instances of the fleet in inventory order (a host alone, a
    replica's head); settings: router (or None: chosen), policy, port, metrics_port, https_port, extra_args.
    """
    warnings = [] if warnings is None else warnings
    if not instances:
        raise DeploymentError("kimi_gateways: %s is a gateway, but the inventory has no serving instance for it to "
                              "front (no host in kimi_servers)" % host)
    for instance in instances:
        if instance["deployment"].get("pd"):
            fail("kimi_gateways", host, ["a fleet of aggregated instances (hosts alone, or kimi_replica groups)"],
                 "%s is part of the disaggregated deployment %s, which its own router fronts; a gateway in front of a "
                 "prefill/decode router is not supported" % (instance["host"], instance["deployment"]["pd"]["name"]))
    builds = sorted(set(i["deployment"]["engine_build"] for i in instances))
    names = sorted(set(i["deployment"]["served_model_name"] for i in instances))
    if len(names) > 1:
        serving = ["%s on %s" % (name, ", ".join(i["host"] for i in instances
                                                 if i["deployment"]["served_model_name"] == name)) for name in names]
        fail("kimi_served_model_name", names, ["one model name across the fleet"],
             "the gateway routes one model; its instances serve %s" % ", ".join(serving))
    name = settings.get("router")
    if is_unset(name):
        name = next((r for r in GATEWAY_ROUTERS if all(b in ROUTERS[r]["serves"] for b in builds)), None)
        if name is None:
            raise DeploymentError("kimi_gateways: no router serves every engine of this fleet (%s)" % ", ".join(builds))
        why = ("%s %s: the maintained gateway for every engine (its regular mode proxies the OpenAI API of each: %s)"
               % (ROUTERS[name]["title"], ROUTERS[name]["version"], ", ".join(builds)))
    else:
        if name not in GATEWAY_ROUTERS:
            fail("kimi_gateway_router", name, GATEWAY_ROUTERS)
        missing = [i for i in instances if i["deployment"]["engine_build"] not in ROUTERS[name]["serves"]]
        if missing:
            able = [r for r in GATEWAY_ROUTERS if all(b in ROUTERS[r]["serves"] for b in builds)]
            fail("kimi_gateway_router", name, able or None, "%s does not serve %s (%s)" % (
                name, ", ".join(sorted(set(i["deployment"]["engine_build"] for i in missing))),
                ", ".join("%s: %s" % (i["host"], i["deployment"]["identity"]) for i in missing)))
        why = "%s: kimi_gateway_router" % name
    router = ROUTERS[name]
    policies = router["options"]["values"]["policy"]
    policy = settings.get("policy")
    if policy not in policies:
        fail("kimi_gateway_policy", policy, policies, "not a policy of %s %s" % (router["title"], router["version"]))
    port = check_int("kimi_gateway_port", settings.get("port"), 1, 65535)
    metrics_port = check_int("kimi_gateway_metrics_port", settings.get("metrics_port"), 1, 65535)
    https_port = check_int("kimi_gateway_https_port", settings.get("https_port"), 1, 65535)
    usage_port = check_int("kimi_gateway_usage_port", settings.get("usage_port"), 1, 65535)
    usage_metrics_port = check_int("kimi_gateway_usage_metrics_port", settings.get("usage_metrics_port"), 1, 65535)
    ports = (port, metrics_port, https_port, usage_port, usage_metrics_port)
    if len(set(ports)) < len(ports):
        fail("kimi_gateway_port", port, ["five different ports for the router, its metrics, Caddy, the usage tap and "
                                         "its metrics"],
             "kimi_gateway_port=%d, kimi_gateway_metrics_port=%d, kimi_gateway_https_port=%d, "
             "kimi_gateway_usage_port=%d, kimi_gateway_usage_metrics_port=%d" % ports)
    workers = []
    for instance in instances:
        deployment = instance["deployment"]
        address = deployment["host"]
        if address in ("127.0.0.1", "localhost", "::1", "0.0.0.0", "::"):
            fail("host", address, ["the host's address on the fleet's network (kimi_fleet_address)"],
                 "%s's engine must listen where the gateway %s reaches it" % (instance["host"], host))
        url = _url(address, deployment["port"])
        # max_running_requests: SMG's label for the worker's slots (its priority scheduler's pool is their sum), which
        # SMG reads only off SGLang's /server_info and otherwise counts as 64; kimi.deploy.gateway_workers registers
        # it. None: the engine reports its own, or its count is not known.
        workers.append({"host": instance["host"], "url": url, "identity": deployment["identity"],
                        "engine_build": deployment["engine_build"], "metrics_url": url + deployment["metrics_path"],
                        "serving_metrics": deployment["serving_metrics"],
                        "max_running_requests": deployment.get("max_running_requests")})
    # The routers' own health checks take a dead instance out (their default: a check a minute, out after three
    # failures - three minutes of retries against it); the circuit breaker and retries cover the moments between.
    interval = check_int("kimi_gateway_health_interval", settings.get("health_interval"), 1, 3600)
    failures = check_int("kimi_gateway_health_failures", settings.get("health_failures"), 1, 100)
    argv = (["--worker-urls"] + [w["url"] for w in workers] + ["--policy", policy, "--host", "127.0.0.1", "--port",
            str(port), "--prometheus-host", "127.0.0.1", "--prometheus-port", str(metrics_port),
            "--health-check-interval-secs", str(interval), "--health-failure-threshold", str(failures)])
    tenants = _tenants(settings.get("clients"))
    priority = None
    tenancy, tracing = router.get("tenants"), router.get("tracing")
    classed = [t["name"] for t in tenants if t["priority"]]
    if classed and not tenancy:
        fail("kimi_gateway_router", name, [r for r in GATEWAY_ROUTERS if ROUTERS[r].get("tenants")],
             "caddy_proxy_clients give %s a priority class, and %s %s has no priority admission"
             % (", ".join(classed), router["title"], router["version"]))
    if tenancy:
        # the tenant is the key's name (the scheduler's per-tenant series name it); a priority class per key
        argv += list(tenancy["trust"]) + [tenancy["header"], CLIENT_HEADER]
        if classed:
            priority = priority_config(tenants)
            argv += list(tenancy["scheduler"]) + [tenancy["scheduler_config"], PRIORITY_CONFIG]
    if tracing and not is_unset(settings.get("otlp_endpoint")):
        argv += list(tracing["enable"]) + [tracing["endpoint"], settings["otlp_endpoint"]]
    argv = checked_argv(name, argv, settings.get("extra_args"), OWNERS, "kimi_gateways", "kimi_gateways",
                        "kimi_gateway_router_extra_args", reserved=TENANT_OPTIONS[name] + TRACE_OPTIONS[name])
    retry = check_text("kimi_gateway_retry", settings.get("retry"), DURATION_RE, ["a duration, e.g. 10s"], None)
    checks = [c for c in instances[0]["deployment"]["verify_checks"]
              if all(c in i["deployment"]["verify_checks"] for i in instances) and c != "speculative"]
    warnings.append("kimi_gateways: the engines of %s listen on the fleet's network (%s) without authentication, "
                    "for the gateway to reach them; that network must stay private (only the gateways and the "
                    "engines' own Caddy in front of them may reach those ports)."
                    % (", ".join(w["host"] for w in workers), ", ".join(w["url"] for w in workers)))
    return {
        "host": host,
        "router": name,
        "title": router["title"],
        "package": router["package"],
        "version": router["version"],
        "install": router["install"],
        "workers_api": router["workers_api"],
        # the per-worker outcome counters of every gateway router: the one that runs may be the previous one mid-switch
        "worker_outcomes": [ROUTERS[r]["worker_outcomes"] for r in GATEWAY_ROUTERS],
        # every engine's serving series: an instance in the middle of a switch may still run another engine than its
        # worker entry says, so a reader picks the set whose request counter its text has
        "engine_metrics": [dict(m) for m in sorted(set(tuple(sorted(e["serving_metrics"].items()))
                                                       for e in ENGINES.values()))],
        "why": why,
        "policy": policy,
        "policy_why": WHY_POLICY.get(policy, policy),
        "workers": workers,
        "engines": builds,
        "port": port,
        "metrics_port": metrics_port,
        "https_port": https_port,
        "url": "http://127.0.0.1:%d" % port,
        "metrics_url": "http://127.0.0.1:%d%s" % (metrics_port, router["metrics_path"]),
        "argv": argv,
        "command": list(router["entrypoint"]) + argv,
        "config": None,
        "served_model_name": names[0],
        "verify_checks": checks,
        # what the gateway holds per client key name (never a key): the usage tap's limits, SMG's classes
        "tenants": tenants,
        "config_dir": CONFIG_DIR,
        # kimi_otlp_endpoint (host:port) or None
        "otlp_endpoint": None if is_unset(settings.get("otlp_endpoint")) else settings["otlp_endpoint"],
        "priority_config": {"path": PRIORITY_CONFIG, "content": priority},
        # the usage tap's file: the header it reads the name from, the header it sets the class in, per name
        "clients_config": {"path": CLIENTS_CONFIG, "content": {
            "header": CLIENT_HEADER, "priority_header": (tenancy or {}).get("priority_header"),
            "clients": dict((t["name"], {"limits": t["limits"], "priority": PRIORITY_CLASS.get(t["priority"])})
                            for t in tenants)}},
        "usage_port": usage_port,
        "usage_metrics_port": usage_metrics_port,
        # the usage tap's command (kimi_usage_tap.py, from the role's files): Caddy -> tap -> router
        "usage_argv": ["--listen", "127.0.0.1:%d" % usage_port, "--upstream", "127.0.0.1:%d" % port,
                       "--metrics", "127.0.0.1:%d" % usage_metrics_port, "--retry-seconds", "%g" % seconds(retry),
                       "--clients", CLIENTS_CONFIG],
        # Caddy's gateway site on this host (caddy_proxy_gateway): the usage tap in front of the router on loopback,
        # the router's, the tap's and Caddy's own metrics behind the metrics key, a request that cannot reach the
        # tap or the router (a restart) retried for `retry`.
        "site": {"https_port": https_port, "upstream": "127.0.0.1:%d" % usage_port, "served_model_name": names[0],
                 "verify_checks": checks, "retry": retry,
                 "metrics_routes": routes({"gateway": {"upstream": "127.0.0.1:%d" % metrics_port,
                                                       "upstream_path": router["metrics_path"]},
                                           "usage": {"upstream": "127.0.0.1:%d" % usage_metrics_port,
                                                     "upstream_path": "/metrics"},
                                           "caddy": {"upstream": "caddy", "upstream_path": "/metrics"}})},
        "warnings": warnings,
    }


def _tenants(clients):
    """[{name, priority, limits}] of caddy_proxy_clients (the gateway host's), checked by the rule caddy_proxy's
    filter uses; the keys stay behind."""
    if is_unset(clients):
        return []
    if not isinstance(clients, (list, tuple)):
        raise DeploymentError("caddy_proxy_clients must be a list of {name, keys}, got %r" % type(clients).__name__)
    tenants = []
    for index, client in enumerate(clients):
        where = "caddy_proxy_clients[%d]" % index
        if not isinstance(client, dict):
            raise DeploymentError("%s must be a dict with the keys name and keys" % where)
        policy, refused = client_policy(client, where)
        if refused:
            raise DeploymentError(refused)
        tenants.append(dict(policy, name=client["name"]))
    return tenants


def priority_config(tenants):
    """SMG's priority-scheduler YAML (middleware/scheduler/config.rs): every class (PRIORITY_CLASSES), and each client
    name's most a request of it may ask (its max_class); the tap sets the class a request asks for. A name without a
    priority keeps SMG's default class."""
    lines = ["# kimi.deploy: the fleet gateway's priority classes per client key name (SMG's priority scheduler)",
             "classes:"]
    for name, fields in PRIORITY_CLASSES:
        values = ("%s: %s" % (k, ("true" if v else "false") if isinstance(v, bool) else v) for k, v in fields)
        lines.append("  %s: {%s}" % (name, ", ".join(values)))
    lines.append("tenant_policies:")
    lines += ['  "header:%s": {max_class: %s}' % (t["name"], PRIORITY_CLASS[t["priority"]]) for t in tenants
              if t["priority"]]
    return "\n".join(lines) + "\n"


def gateway_lines(gateway):
    """The gateway as lines for people (the plan and site.yml's preflight)."""
    lines = ["gateway: %s, https port %d (Caddy, the fleet's client keys), %s %s on 127.0.0.1:%d"
             % (gateway["host"], gateway["https_port"], gateway["title"], gateway["version"], gateway["port"]),
             "router: %s" % gateway["why"],
             "policy: %s" % gateway["policy_why"]]
    lines += ["worker: %s (%s, %s)" % (w["url"], w["host"], w["identity"]) for w in gateway["workers"]]
    lines.append("gateway command: %s" % shell_line(gateway["command"]))
    lines += ["warning: %s" % w for w in gateway["warnings"]]
    return lines
