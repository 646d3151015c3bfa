"""_gateway: the fleet gateway resolved from the fleet's instances (each resolved from its own site inputs, as the
kimi.deploy.gateway action resolves them): the router and why, its policy, every worker URL, and its command checked
against the pinned router's flag list; bad settings refused naming the variable."""
import shlex

import pytest

from ansible_collections.kimi.deploy.plugins.module_utils._engines.routers import ROUTERS
from ansible_collections.kimi.deploy.plugins.module_utils._model import site as _site
from ansible_collections.kimi.deploy.plugins.module_utils._model.deployment import resolve
from ansible_collections.kimi.deploy.plugins.module_utils._model.gateway import gateway_lines, resolve_gateway
from ansible_collections.kimi.deploy.plugins.module_utils._model.inputs import DeploymentError

from test_site import SHA, getter, site_inputs

from test_deployment import B200x8 as B200, H200x8 as H200
# kimi_gateway's defaults (roles/kimi_gateway/defaults/main.yml; the action reads them from there)
SETTINGS = {"router": None, "policy": "cache_aware", "port": 30090, "metrics_port": 29010, "https_port": 8443,
            "extra_args": [], "retry": "10s", "health_interval": 5, "health_failures": 2, "usage_port": 30091,
            "usage_metrics_port": 29011}


def fleet(hostvars, gpus=H200, gateways=("gw",)):
    """[{host, deployment}] of every host of `hostvars` (the kimi_servers), resolved as the action does."""
    get = getter(hostvars)
    servers = list(hostvars)
    out = []
    for host in servers:
        inputs = site_inputs(get, host, servers, gateways=list(gateways))
        deployment = resolve(inputs, gpus)
        if deployment["serves_api"]:
            out.append({"host": host, "deployment": deployment})
    return out


def hosts(engine, count=2, **extra):
    return dict(("gpu%d" % (i + 1), dict({"quant": "int4", "engine": engine, "kimi_int4_revision": SHA,
                                          "ansible_host": "10.0.1.%d" % (11 + i)}, **extra)) for i in range(count))


def test_behind_a_gateway_the_engine_listens_on_the_fleet_address_and_says_why():
    get = getter(hosts("sglang", 1, kimi_fleet_address="192.168.7.5"))
    inputs = site_inputs(get, "gpu1", ["gpu1"], gateways=["gw"])
    deployment = resolve(inputs, H200)
    assert deployment["host"] == "192.168.7.5" and deployment["local_url"] == "http://192.168.7.5:30000"
    assert "--host 192.168.7.5" in shlex.join(deployment["command"]) or "192.168.7.5" in deployment["command"]
    assert deployment["gateways"] == ["gw"]
    assert any("Behind the fleet gateway (gw): the engine listens on 192.168.7.5" in r for r in deployment["reasons"])
    # without a gateway nothing moves: loopback, Caddy in front
    alone = resolve(site_inputs(get, "gpu1", ["gpu1"]), H200)
    assert alone["host"] == "127.0.0.1" and alone["gateways"] == []


def test_a_replica_is_one_worker_at_its_heads_address():
    hostvars = hosts("sglang", 3)
    hostvars["gpu1"]["kimi_replica"] = hostvars["gpu2"]["kimi_replica"] = "r1"
    instances = fleet(hostvars)
    assert [i["host"] for i in instances] == ["gpu1", "gpu3"]
    gateway = resolve_gateway("gw", instances, SETTINGS)
    assert [w["url"] for w in gateway["workers"]] == ["http://10.0.1.11:30000", "http://10.0.1.13:30000"]


@pytest.mark.parametrize("engine, extra", [("sglang", {}), ("vllm", {}),
                                           ("trtllm", {"quant": "nvfp4", "kimi_nvfp4_revision": SHA})])
def test_every_engine_gets_smg_cache_aware_the_key_name_its_tenant(engine, extra):
    gateway = resolve_gateway("gw", fleet(hosts(engine, **extra), gpus=B200), SETTINGS)
    assert gateway["router"] == "smg" and gateway["version"] == ROUTERS["smg"]["version"] == "1.13.0"
    assert gateway["why"].startswith("SMG 1.13.0: the maintained gateway for every engine")
    assert gateway["policy"] == "cache_aware" and "longest prefix" in gateway["policy_why"]
    assert gateway["command"] == ["smg", "launch",
                                  "--worker-urls", "http://10.0.1.11:30000", "http://10.0.1.12:30000", "--policy",
                                  "cache_aware", "--host", "127.0.0.1", "--port", "30090", "--prometheus-host",
                                  "127.0.0.1", "--prometheus-port", "29010", "--health-check-interval-secs", "5",
                                  "--health-failure-threshold", "2", "--trust-tenant-header", "--tenant-header-name",
                                  "X-LLM-Client"]
    assert gateway["workers_api"]["remove_by"] == "id"
    # Caddy -> the usage tap -> the router, all on loopback
    assert gateway["site"]["upstream"] == "127.0.0.1:30091" and gateway["site"]["https_port"] == 8443
    assert gateway["usage_argv"] == ["--listen", "127.0.0.1:30091", "--upstream", "127.0.0.1:30090",
                                     "--metrics", "127.0.0.1:29011", "--retry-seconds", "10",
                                     "--clients", "/etc/kimi-k26-gateway/clients.json"]
    assert [r["path"] for r in gateway["site"]["metrics_routes"]] == ["/metrics/caddy", "/metrics/gateway",
                                                                      "/metrics/usage"]
    assert any("must stay private" in w for w in gateway["warnings"])
    lines = gateway_lines(gateway)
    assert lines[0].startswith("gateway: gw, https port 8443") and "worker: http://10.0.1.12:30000 (gpu2, %s-%s)" \
        % (extra.get("quant", "int4"), engine) in lines
    assert shlex.split(next(line for line in lines if line.startswith("gateway command: "))[17:]) == gateway["command"]


def test_a_fleet_of_two_engines_gets_smg_and_says_so():
    hostvars = hosts("sglang")
    hostvars["gpu2"]["engine"] = "vllm"
    gateway = resolve_gateway("gw", fleet(hostvars), SETTINGS)
    assert gateway["router"] == "smg"
    assert gateway["why"] == ("SMG 1.13.0: the maintained gateway for every engine (its regular mode proxies the "
                              "OpenAI API of each: sglang, vllm)")


def test_a_client_keys_priority_and_limits_become_smgs_classes_and_the_taps_limits_never_a_key():
    clients = [{"name": "chat", "keys": ["k" * 40], "priority": "interactive"},
               {"name": "etl", "keys": ["e" * 40], "priority": "batch",
                "limits": {"requests_per_minute": 30, "tokens_per_minute": 90000, "concurrent": 2}},
               {"name": "plain", "keys": ["p" * 40]}]
    gateway = resolve_gateway("gw", fleet(hosts("sglang")), dict(SETTINGS, clients=clients))
    assert "--priority-scheduler-enabled" in gateway["command"]
    assert gateway["command"][-1] == "/etc/kimi-k26-gateway/priority.yaml"
    assert gateway["priority_config"]["path"] == "/etc/kimi-k26-gateway/priority.yaml"
    lines = gateway["priority_config"]["content"].splitlines()
    assert lines[1] == "classes:" and lines[3].startswith("  interactive: {reserved_floor: 0, reserved_per_slot: 0.75,")
    assert lines[lines.index("tenant_policies:"):] == ["tenant_policies:", '  "header:chat": {max_class: interactive}',
                                                       '  "header:etl": {max_class: bulk}']
    content = gateway["clients_config"]["content"]
    assert content["header"] == "X-LLM-Client" and content["priority_header"] == "x-smg-priority"
    assert content["clients"] == {
        "chat": {"limits": {}, "priority": "interactive"},
        "etl": {"limits": {"concurrent": 2, "requests_per_minute": 30, "tokens_per_minute": 90000}, "priority": "bulk"},
        "plain": {"limits": {}, "priority": None}}
    assert "k" * 40 not in repr(gateway) and "e" * 40 not in repr(gateway)
    # no priority anywhere: SMG's admission stays as it is
    plain = resolve_gateway("gw", fleet(hosts("sglang")), dict(SETTINGS, clients=clients[2:]))
    assert "--priority-scheduler-enabled" not in plain["command"] and plain["priority_config"]["content"] is None
    # the rule caddy_proxy's filter applies, before any host changes
    with pytest.raises(DeploymentError, match=r"caddy_proxy_clients\[0\].priority='urgent' is not allowed\. Allowed "
                                              r"values: interactive, batch"):
        resolve_gateway("gw", fleet(hosts("sglang")), dict(SETTINGS, clients=[dict(clients[0], priority="urgent")]))
    with pytest.raises(DeploymentError, match=r"kimi_gateway_router_extra_args='--priority-scheduler-enabled' is not "
                                              r"allowed: --priority-scheduler-enabled is set by the collection"):
        resolve_gateway("gw", fleet(hosts("sglang")), dict(SETTINGS, extra_args=["--priority-scheduler-enabled"]))


def test_a_router_that_does_not_serve_an_engine_of_the_fleet_is_refused_naming_the_one_that_does():
    hostvars = hosts("sglang")
    with pytest.raises(DeploymentError, match=r"kimi_gateway_router='vllm-router' is not allowed: vllm-router does not "
                                              r"serve sglang \(gpu1: int4-sglang, gpu2: int4-sglang\)\. Allowed "
                                              r"values: smg"):
        resolve_gateway("gw", fleet(hostvars), dict(SETTINGS, router="vllm-router"))
    with pytest.raises(DeploymentError, match=r"kimi_gateway_router='nginx' is not allowed\. Allowed values: "
                                              r"smg, vllm-router"):
        resolve_gateway("gw", fleet(hostvars), dict(SETTINGS, router="nginx"))


def test_bad_gateway_settings_are_refused_naming_the_variable():
    instances = fleet(hosts("sglang"))
    with pytest.raises(DeploymentError, match=r"kimi_gateway_policy='fastest' is not allowed: not a policy of "
                                              r"SMG 1.13.0. Allowed values: random, round_robin, passthrough, cache_aware"):
        resolve_gateway("gw", instances, dict(SETTINGS, policy="fastest"))
    with pytest.raises(DeploymentError, match=r"kimi_gateway_port=.*five different ports"):
        resolve_gateway("gw", instances, dict(SETTINGS, metrics_port=30090))
    with pytest.raises(DeploymentError, match=r"kimi_gateway_usage_port=30090"):
        resolve_gateway("gw", instances, dict(SETTINGS, usage_port=30090))
    with pytest.raises(DeploymentError, match=r"kimi_gateway_https_port=70000 is not allowed"):
        resolve_gateway("gw", instances, dict(SETTINGS, https_port=70000))
    with pytest.raises(DeploymentError, match=r"kimi_gateway_retry='soon' is not allowed"):
        resolve_gateway("gw", instances, dict(SETTINGS, retry="soon"))
    with pytest.raises(DeploymentError, match=r"kimi_gateway_router_extra_args='--worker-urls' is not allowed: "
                                              r"--worker-urls is set by the collection"):
        resolve_gateway("gw", instances, dict(SETTINGS, extra_args=["--worker-urls", "http://evil:1"]))
    with pytest.raises(DeploymentError, match=r"kimi_gateway_router_extra_args='--policy' is not allowed: .* use "
                                              r"kimi_gateway_policy instead"):
        resolve_gateway("gw", instances, dict(SETTINGS, extra_args=["--policy", "random"]))
    extra = resolve_gateway("gw", instances, dict(SETTINGS, extra_args=["--retry-max-retries", "3"]))
    assert extra["argv"][-2:] == ["--retry-max-retries", "3"]


def test_an_engine_on_loopback_and_two_model_names_are_refused():
    hostvars = hosts("sglang")
    hostvars["gpu2"]["kimi_engine_host"] = "127.0.0.1"
    with pytest.raises(DeploymentError, match=r"kimi_engine_host=.127.0.0.1. is not allowed: gpu2's engine must listen "
                                              r"where the gateway gw reaches it"):
        resolve_gateway("gw", fleet(hostvars), SETTINGS)
    hostvars = hosts("sglang")
    hostvars["gpu2"]["kimi_served_model_name"] = "kimi-b"
    with pytest.raises(DeploymentError, match=r"the gateway routes one model; its instances serve kimi-b on gpu2, "
                                              r"kimi-k2.6 on gpu1"):
        resolve_gateway("gw", fleet(hostvars), SETTINGS)


def test_a_gateway_without_instances_or_in_front_of_a_pd_router_is_refused():
    with pytest.raises(DeploymentError, match=r"gw is a gateway, but the inventory has no serving instance"):
        resolve_gateway("gw", [], SETTINGS)
    pd = fleet(hosts("sglang"))
    pd[0]["deployment"] = dict(pd[0]["deployment"], pd={"name": "pd1"})
    with pytest.raises(DeploymentError, match=r"gpu1 is part of the disaggregated deployment pd1"):
        resolve_gateway("gw", pd, SETTINGS)


def test_the_model_reads_the_gateway_defaults_from_the_role():
    """SETTINGS above is kimi_gateway's defaults/main.yml, as the action reads it."""
    import os
    import yaml
    from ansible_collections.kimi.deploy.plugins.action.gateway import SETTINGS as VARIABLES
    root = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..")
    with open(os.path.join(root, "roles", "kimi_gateway", "defaults", "main.yml")) as handle:
        defaults = yaml.safe_load(handle)
    assert dict((key, defaults[variable]) for key, variable in VARIABLES.items()) == SETTINGS


@pytest.mark.parametrize("engine, extra, options", [
    ("sglang", {}, ["--enable-trace", "--otlp-traces-endpoint", "otel.internal:4317"]),
    ("vllm", {}, ["--otlp-traces-endpoint", "http://otel.internal:4317"]),
    ("trtllm", {"quant": "nvfp4", "kimi_nvfp4_revision": SHA}, ["--otlp_traces_endpoint", "http://otel.internal:4317"]),
])
def test_kimi_otlp_endpoint_turns_on_smgs_and_each_engines_own_trace_options(engine, extra, options):
    hostvars = hosts(engine, kimi_otlp_endpoint="otel.internal:4317", **extra)
    instances = fleet(hostvars, gpus=B200)
    for instance in instances:
        argv = instance["deployment"]["argv"]
        at = argv.index(options[-2])
        assert argv[at - len(options) + 2:at + 2] == options, argv
    gateway = resolve_gateway("gw", instances, dict(SETTINGS, otlp_endpoint="otel.internal:4317"))
    assert gateway["command"][-3:] == ["--enable-trace", "--otlp-traces-endpoint", "otel.internal:4317"]
    assert gateway["otlp_endpoint"] == "otel.internal:4317"
    # unset: no trace option anywhere
    quiet = fleet(hosts(engine, **extra), gpus=B200)
    assert not any("otlp" in a for i in quiet for a in i["deployment"]["argv"])
    assert "--enable-trace" not in resolve_gateway("gw", quiet, SETTINGS)["command"]
    # the collection's options: not in the extra args
    with pytest.raises(DeploymentError, match=r"kimi_gateway_router_extra_args='--enable-trace' is not allowed"):
        resolve_gateway("gw", quiet, dict(SETTINGS, extra_args=["--enable-trace"]))


def test_tenant_and_trace_options_come_from_the_routers_data():
    """SMG's tenant, priority and trace options and its priority header are its data (ROUTERS["smg"]); a gateway
    router without that data (vllm-router) gets none of them, and the usage tap then sets no priority header; a client
    key with a priority class is refused in front of it."""
    clients = [{"name": "chat", "keys": ["k" * 32], "priority": "interactive"}]
    settings = dict(SETTINGS, clients=clients, otlp_endpoint="otel.internal:4317")
    instances = fleet(hosts("vllm"))
    smg = resolve_gateway("gw", instances, settings)
    for part in ("tenants", "tracing"):
        for value in ROUTERS["smg"][part].values():
            for option in value if isinstance(value, tuple) else (value,):
                assert option in smg["command"] if option.startswith("--") else True, option
    assert smg["clients_config"]["content"]["priority_header"] == ROUTERS["smg"]["tenants"]["priority_header"]
    with pytest.raises(DeploymentError, match=r"kimi_gateway_router='vllm-router' is not allowed: caddy_proxy_clients "
                                              r"give chat a priority class, and vllm-router 0.1.17 has no priority "
                                              r"admission. Allowed values: smg"):
        resolve_gateway("gw", instances, dict(settings, router="vllm-router"))
    clients[0].pop("priority")
    plain = resolve_gateway("gw", instances, dict(settings, router="vllm-router"))
    assert "tenants" not in ROUTERS["vllm-router"] and "tracing" not in ROUTERS["vllm-router"]
    assert not [a for a in plain["command"] if "tenant" in a or "trace" in a or "priority" in a], plain["command"]
    assert plain["clients_config"]["content"]["priority_header"] is None
