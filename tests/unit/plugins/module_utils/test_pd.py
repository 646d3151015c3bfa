"""Prefill/decode disaggregation in the deployment model (_pd, _routers): each role's argv and the router's (and
its config file), for 1P1D and 2P2D, NVIDIA (SGLang mooncake/nixl and vLLM NIXL behind SMG, TensorRT-LLM UCX behind
trtllm-serve disaggregated) and Ascend (SGLang ascend behind SMG, vLLM-Ascend Mooncake behind vllm-router), every
flag checked against the pinned lists (the engines' and the routers'), and the refusals."""
import json
import os
import sys

import pytest

from ansible_collections.kimi.deploy.plugins.module_utils._model import deployment as dm
from ansible_collections.kimi.deploy.plugins.module_utils._engines import registry as eng
from ansible_collections.kimi.deploy.plugins.module_utils._engines.cli import check_extra, option_index
from ansible_collections.kimi.deploy.plugins.module_utils._model.inputs import DeploymentError
from ansible_collections.kimi.deploy.plugins.module_utils._model.pd import layout_mismatch
from ansible_collections.kimi.deploy.plugins.module_utils._engines.routers import ROUTERS
from ansible_collections.kimi.deploy.plugins.module_utils._model.report import plan_lines
from test_deployment import A3x16, B200x8, H200x8, ROOT, SHA

sys.path.insert(0, os.path.join(ROOT, "tests", "doubles", "engine"))
from kimi_engine_double import flags as double_flags  # noqa: E402


def members(*roles, rdma=None):
    """p1, d1, p2, ... (role initial and count) in the order given, at 10.0.0.11 and up."""
    out, count = [], {}
    for i, role in enumerate(roles):
        count[role] = count.get(role, 0) + 1
        out.append({"host": "%s%d" % (role[0], count[role]), "role": role, "address": "10.0.0.%d" % (11 + i),
                    "rdma_devices": rdma})
    return out


def resolve(gpus, quant, engine, me, member_list, **pd):
    inputs = {"quant": quant, "engine": engine, "revisions": {quant: SHA},
              "pd": dict({"name": "pd1", "me": me, "members": member_list}, **pd)}
    return dm.resolve(inputs, gpus)


def arg(argv, option):
    return argv[argv.index(option) + 1]


def test_sglang_1p1d_without_rdma_uses_nixl_and_the_router_lists_both():
    dep = resolve(H200x8, "int4", "sglang", "p1", members("prefill", "decode"))
    pd = dep["pd"]
    assert (pd["role"], pd["transfer_backend"], dep["host"]) == ("prefill", "nixl", "10.0.0.11")
    assert "no RDMA device on p1, d1" in pd["transfer_why"]
    argv = dep["argv"]
    assert arg(argv, "--disaggregation-mode") == "prefill" and arg(argv, "--disaggregation-bootstrap-port") == "8998"
    assert arg(argv, "--disaggregation-transfer-backend") == "nixl" and "--disaggregation-ib-device" not in argv
    assert dep["serves_api"] is False and dep["local_url"] == "http://10.0.0.11:30000"
    assert pd["router"]["host"] == "d1" and not pd["router"]["is_here"]
    assert pd["router"]["command"] == [
        "smg", "launch", "--pd-disaggregation",
        "--prefill", "http://10.0.0.11:30000", "8998", "--decode", "http://10.0.0.12:30000",
        "--host", "127.0.0.1", "--port", "30080", "--prometheus-host", "127.0.0.1", "--prometheus-port", "29000"]
    decode = resolve(H200x8, "int4", "sglang", "d1", members("prefill", "decode"))
    assert decode["serves_api"] and decode["api_url"] == "http://127.0.0.1:30080" and decode["api_port"] == 30080
    assert arg(decode["argv"], "--disaggregation-mode") == "decode"
    assert "--disaggregation-bootstrap-port" not in decode["argv"]  # only the prefill serves a bootstrap server
    assert decode["pd"]["layout"] == pd["layout"]


def test_sglang_2p2d_with_rdma_everywhere_uses_mooncake_on_the_hosts_devices():
    dep = resolve(H200x8, "int4", "sglang", "d2", members("prefill", "prefill", "decode", "decode",
                                                          rdma=["mlx5_0", "mlx5_1"]), router="d2")
    assert dep["pd"]["transfer_backend"] == "mooncake" and "RDMA devices on every host" in dep["pd"]["transfer_why"]
    assert arg(dep["argv"], "--disaggregation-ib-device") == "mlx5_0,mlx5_1"
    router = dep["pd"]["router"]["argv"]
    assert router.count("--prefill") == 2 and router.count("--decode") == 2 and dep["serves_api"]
    assert [i["role"] for i in dep["pd"]["instances"]] == ["prefill", "prefill", "decode", "decode"]
    roles = [arg(i["command"], "--disaggregation-mode") for i in dep["pd"]["instances"]]
    assert roles == ["prefill", "prefill", "decode", "decode"]


def test_one_host_without_rdma_means_nixl_for_all_and_mooncake_is_refused_then():
    hosts = members("prefill", "decode", rdma=["mlx5_0"])
    hosts[1]["rdma_devices"] = []
    assert resolve(H200x8, "int4", "sglang", "p1", hosts)["pd"]["transfer_backend"] == "nixl"
    with pytest.raises(DeploymentError, match=r"kimi_pd_transfer_backend='mooncake' is not allowed: mooncake moves the "
                                              r"KV cache over RDMA, and d1 has no RDMA device"):
        resolve(H200x8, "int4", "sglang", "p1", hosts, transfer_backend="mooncake")


def test_vllm_uses_nixl_kv_transfer_config_and_smg_with_each_workers_connector_in_its_discovery_file():
    dep = resolve(H200x8, "int4", "vllm", "d1", members("prefill", "decode"))
    assert json.loads(arg(dep["argv"], "--kv-transfer-config")) == {"kv_connector": "NixlConnector",
                                                                    "kv_role": "kv_both"}
    assert dep["container_env"]["VLLM_NIXL_SIDE_CHANNEL_HOST"] == "10.0.0.12"
    router = dep["pd"]["router"]
    assert (router["name"], router["version"], router["package"]) == ("smg", "1.13.0", "smg")
    # the file discovery provider: the only start-up way to give SMG each worker's KV connector; plain
    # --prefill/--decode would route vLLM as passthrough (no KV handoff)
    assert router["command"] == [
        "smg", "launch", "--pd-disaggregation", "--discovery-provider", "file",
        "--discovery-file", "/etc/kimi-k26/pd-workers.json",
        "--host", "127.0.0.1", "--port", "30080", "--prometheus-host", "127.0.0.1", "--prometheus-port", "29000"]
    assert "--prefill" not in router["argv"] and "--decode" not in router["argv"]
    assert (router["config_path"], router["config_format"]) == ("/etc/kimi-k26/pd-workers.json", "json")
    assert router["config"] == {"version": 1, "workers": [
        {"id": "p1", "url": "http://10.0.0.11:30000", "worker_type": "prefill", "kv_connector": "NixlConnector",
         "kv_role": "kv_both"},
        {"id": "d1", "url": "http://10.0.0.12:30000", "worker_type": "decode", "kv_connector": "NixlConnector",
         "kv_role": "kv_both"}]}
    assert "NixlConnector" in router["why"]
    # the manifest's model_id would replace the model name SMG sends upstream: left out
    assert all("model_id" not in w for w in router["config"]["workers"])


def test_vllm_2p2d_lists_every_instance_head_once_in_the_discovery_file():
    hosts = members("prefill", "prefill", "decode", "decode")
    hosts[0]["replica"] = hosts[1]["replica"] = "r1"
    workers = resolve(H200x8, "int4", "vllm", "d1", hosts)["pd"]["router"]["config"]["workers"]
    assert [(w["id"], w["worker_type"]) for w in workers] == [("p1", "prefill"), ("d1", "decode"), ("d2", "decode")]


def test_smg_refuses_a_vllm_connector_it_would_route_as_passthrough(monkeypatch):
    from ansible_collections.kimi.deploy.plugins.module_utils._engines import routers
    monkeypatch.setattr(routers, "SMG_VLLM_CONNECTORS", ("MooncakeConnector",))
    with pytest.raises(DeploymentError, match=r"kimi_pd pd1: SMG 1.13.0 hands the KV cache over between vLLM's "
                                              r"prefill and decode only with MooncakeConnector, and prefill p1 runs "
                                              r"NixlConnector"):
        resolve(H200x8, "int4", "vllm", "d1", members("prefill", "decode"))


def test_ascend_sglang_uses_the_ascend_backend_and_vllm_ascend_mooncake_v1():
    dep = resolve(A3x16, "w4a8", "sglang", "p1", members("prefill", "decode"))
    assert dep["engine_build"] == "sglang-ascend" and arg(dep["argv"], "--disaggregation-transfer-backend") == "ascend"
    hosts = members("prefill", "prefill", "decode", "decode")
    configs = []
    for me in ("p1", "p2", "d1", "d2"):
        dep = resolve(A3x16, "w4a8", "vllm", me, hosts)
        configs.append(json.loads(arg(dep["argv"], "--kv-transfer-config")))
    assert [c["kv_role"] for c in configs] == ["kv_producer", "kv_producer", "kv_consumer", "kv_consumer"]
    assert [c["kv_port"] for c in configs] == ["30100", "30200", "30300", "30400"]
    assert [c["engine_id"] for c in configs] == ["0", "1", "2", "3"]
    assert {c["kv_connector"] for c in configs} == {"MooncakeConnectorV1"}
    assert configs[0]["kv_connector_extra_config"]["prefill"] == {"dp_size": 4, "tp_size": 4}  # seed 004's layout
    # vLLM-Ascend stays behind vllm-router: SMG routes a connector it does not know (MooncakeConnectorV1) as passthrough
    router = dep["pd"]["router"]
    assert router["name"] == "vllm-router" and arg(router["argv"], "--kv-connector") == "mooncake"
    assert "MooncakeConnectorV1" in router["why"] and router["config"] is None and router["config_path"] is None


def test_trtllm_context_and_generation_servers_with_the_ucx_transceiver_behind_trtllm_serve_disaggregated():
    prefill = resolve(B200x8, "nvfp4", "trtllm", "p1", members("prefill", "decode"))
    decode = resolve(B200x8, "nvfp4", "trtllm", "d1", members("prefill", "decode"))
    assert prefill["engine_config"]["cache_transceiver_config"] == {"backend": "UCX"}
    assert prefill["engine_config"]["disable_overlap_scheduler"] is True
    assert decode["engine_config"]["disable_overlap_scheduler"] is False
    router = decode["pd"]["router"]
    assert router["install"] == "image" and router["command"] == ["trtllm-serve", "disaggregated", "--config_file",
                                                                  "/etc/kimi-k26/disagg.yaml"]
    assert router["config"]["context_servers"] == {"num_instances": 1, "urls": ["10.0.0.11:30000"]}
    assert router["config"]["generation_servers"] == {"num_instances": 1, "urls": ["10.0.0.12:30000"]}


@pytest.mark.parametrize("gpus, quant, engine", [(H200x8, "int4", "sglang"), (H200x8, "int4", "vllm"),
                                                 (A3x16, "w4a8", "sglang"), (A3x16, "w4a8", "vllm")])
def test_every_role_command_parses_with_the_engine_double_against_its_pinned_list(gpus, quant, engine):
    dep = resolve(gpus, quant, engine, "p1", members("prefill", "prefill", "decode", "decode"))
    version = eng.ENGINES[dep["engine_build"]]["versions"][dep["engine_version"]]["options"]["version"]
    for instance in dep["pd"]["instances"]:
        argv = instance["command"]
        argv = argv[3:] if argv[:3] == ["python3", "-m", "sglang.launch_server"] else argv[2:]  # after `vllm serve`
        os.environ["KIMI_DOUBLE_ENGINE_VERSION"] = version
        try:
            args = double_flags.parse(engine, argv)
        finally:
            del os.environ["KIMI_DOUBLE_ENGINE_VERSION"]
        assert args.get("disaggregation_mode") or args.get("kv_transfer_config")


# The venv routers in front of a PD deployment, with the engine builds each one serves (and the hardware of each).
PD_ROUTERS = {("smg", "sglang"): (H200x8, "int4", "sglang"), ("smg", "sglang-ascend"): (A3x16, "w4a8", "sglang"),
              ("smg", "vllm"): (H200x8, "int4", "vllm"), ("vllm-router", "vllm-ascend"): (A3x16, "w4a8", "vllm")}


def test_the_pd_routers_above_are_the_engines():
    from ansible_collections.kimi.deploy.plugins.module_utils._engines.registry import ENGINES
    used = set((e["disaggregation"]["router"], key) for key, e in ENGINES.items() if e.get("disaggregation"))
    assert set(PD_ROUTERS) == set(u for u in used if ROUTERS[u[0]]["install"] == "venv")


@pytest.mark.parametrize("name, build", sorted(PD_ROUTERS))
def test_every_router_option_the_collection_emits_is_in_the_pinned_router_list(name, build):
    gpus, quant, engine = PD_ROUTERS[(name, build)]
    dep = resolve(gpus, quant, engine, "d1", members("prefill", "prefill", "decode"))
    assert (dep["engine_build"], dep["pd"]["router"]["name"]) == (build, name)
    index = option_index(ROUTERS[name]["options"])
    options = [a for a in dep["pd"]["router"]["argv"] if a.startswith("--")]
    assert options and all(o in index for o in options)
    # the router's own parser rules read the argv back unchanged
    assert check_extra(ROUTERS[name]["options"], name, {}, dep["pd"]["router"]["argv"]) == dep["pd"]["router"]["argv"]


def test_router_pins_match_requirements_router_txt():
    with open(os.path.join(ROOT, "requirements-router.txt"), encoding="utf-8") as handle:
        pins = dict(line.strip().split("==") for line in handle if "==" in line and not line.startswith("#"))
    assert pins == {r["package"]: r["version"] for r in ROUTERS.values() if r["package"]}


def test_router_extra_args_are_read_as_its_parser_reads_them_and_managed_ones_refused():
    hosts = members("prefill", "decode")
    dep = resolve(H200x8, "int4", "sglang", "d1", hosts, router_extra_args=["--policy", "round_robin"])
    assert dep["pd"]["router"]["argv"][-2:] == ["--policy", "round_robin"]
    with pytest.raises(DeploymentError, match=r"kimi_pd_router_extra_args='--prefill' is not allowed: --prefill is set "
                                              r"by the collection"):
        resolve(H200x8, "int4", "sglang", "d1", hosts, router_extra_args=["--prefill", "http://x:1"])
    with pytest.raises(DeploymentError, match=r"kimi_pd_router_extra_args='--no-such' is not allowed: --no-such is not "
                                              r"an option of SMG 1.13.0"):
        resolve(H200x8, "int4", "sglang", "d1", hosts, router_extra_args=["--no-such"])
    with pytest.raises(DeploymentError, match=r"invalid|not allowed"):
        resolve(H200x8, "int4", "vllm", "d1", hosts, router_extra_args=["--pd-disaggregation"])
    # SMG's workers are the collection's either way it names them: no worker without its connector next to the file
    for extra in (["--prefill", "http://x:1"], ["--discovery-file", "/tmp/w.json"], ["--worker-urls", "http://x:1"]):
        with pytest.raises(DeploymentError, match=r"kimi_pd_router_extra_args='%s' is not allowed: %s is set by the "
                                                  r"collection" % (extra[0], extra[0])):
            resolve(H200x8, "int4", "vllm", "d1", hosts, router_extra_args=extra)


@pytest.mark.parametrize("hosts, pd, message", [
    (members("prefill", "prefill"), {}, r"kimi_pd_role='decode' is not allowed: kimi_pd pd1 has no decode instance"),
    ([{"host": "x", "role": "middle", "address": "10.0.0.1"}] + members("decode"), {},
     r"kimi_pd_role='middle' is not allowed: host x of kimi_pd pd1. Allowed values: prefill, decode"),
    (members("prefill", "decode"), {"router": "elsewhere"}, r"kimi_pd_router='elsewhere' is not allowed"),
    (members("prefill", "decode"), {"transfer_backend": "tcp"},
     r"kimi_pd_transfer_backend='tcp' is not allowed.*Allowed values: mooncake, nixl"),
    (members("prefill", "decode"), {"router_port": 30000}, r"kimi_pd_router_port=30000 is not allowed"),
    (members("prefill", "decode"), {"bootstrap_port": 30000}, r"kimi_pd_bootstrap_port=30000 is not allowed"),
])
def test_refusals_name_the_variable(hosts, pd, message):
    with pytest.raises(DeploymentError, match=message):
        resolve(H200x8, "int4", "sglang", hosts[0]["host"], hosts, **pd)


def test_a_replica_is_one_instance_its_head_in_the_router():
    hosts = members("prefill", "prefill", "decode")
    hosts[0]["replica"] = hosts[1]["replica"] = "r1"
    dep = resolve(H200x8, "int4", "sglang", "d1", hosts)
    prefill = [i for i in dep["pd"]["instances"] if i["role"] == "prefill"]
    assert len(prefill) == 1 and prefill[0]["hosts"] == ["p1", "p2"] and prefill[0]["head"] == "p1"
    assert dep["pd"]["router"]["argv"].count("--prefill") == 1
    hosts[1]["role"] = "decode"
    with pytest.raises(DeploymentError, match=r"p2 is in replica r1 with p1, whose role is prefill"):
        resolve(H200x8, "int4", "sglang", "d1", hosts)


def test_engines_without_pd_in_this_collection_are_refused_with_the_reason():
    dep = resolve(H200x8, "int4", "sglang", "p1", members("prefill", "decode"))
    assert dep["pd"]["bootstrap_port"] == 8998
    with pytest.raises(DeploymentError, match=r"kimi_pd_plan='3X' is not allowed"):
        dm.resolve({"quant": "int4", "engine": "sglang", "pd": {"plan": "3X"}}, H200x8, require_revision=False)


def test_layout_mismatch_names_the_variable_both_values_and_hosts():
    prefill = resolve(H200x8, "int4", "sglang", "p1", members("prefill", "decode"))
    inputs = {"quant": "int4", "engine": "sglang", "revisions": {"int4": SHA}, "kv_cache_dtype": "auto",
              "pd": {"name": "pd1", "me": "d1", "members": members("prefill", "decode")}}
    decode = dm.resolve(inputs, H200x8)
    message = layout_mismatch([{"host": "p1", "role": "prefill", "layout": prefill["pd"]["layout"]},
                               {"host": "d1", "role": "decode", "layout": decode["pd"]["layout"]}])
    assert message.startswith('kimi_kv_cache_dtype differs between the hosts of the disaggregated deployment: '
                              '"fp8_e4m3" on p1 (prefill) and "auto" on d1 (decode)')
    assert layout_mismatch([{"host": "p1", "role": "prefill", "layout": prefill["pd"]["layout"]}] * 2) == ""


def test_the_plan_prints_each_roles_command_and_the_routers():
    dep = dm.resolve({"quant": "int4", "engine": "sglang", "pd": {"plan": "1P1D"}}, H200x8, require_revision=False)
    lines = plan_lines(dep)
    assert any(line.startswith("disaggregated: kimi_pd plan, 1P1D") for line in lines)
    commands = [line for line in lines if line.startswith("command of ")]
    assert [c.split(":")[0] for c in commands] == [
        "command of prefill instance prefill-1", "command of decode instance decode-1", "command of the router"]
    assert "--disaggregation-mode prefill" in commands[0] and "--disaggregation-mode decode" in commands[1]
    assert "--prefill http://10.0.1.11:30000 8998 --decode http://10.0.2.11:30000" in commands[2]
