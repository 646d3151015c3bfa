"""_site: a host's site variables as the model's inputs, and the hosts of its replica and disaggregated deployment,
from the inventory's variables (what the kimi.deploy.deployment action reads)."""
import pytest

from ansible_collections.kimi.deploy.plugins.module_utils._model import site as _site
from ansible_collections.kimi.deploy.plugins.module_utils._model.inputs import DeploymentError

SHA = "0123456789abcdef0123456789abcdef01234567"


def getter(hostvars):
    return lambda host, name: hostvars.get(host, {}).get(name, _site.MISSING)


def site_inputs(get, host, servers, **previews):
    """As the action calls it: the host's groups first, then its inputs."""
    return _site.inputs(get, host, _site.replica_members(get, host, servers), _site.pd_members(get, host, servers),
                        **previews)


def test_a_host_alone_is_a_replica_of_one_with_the_defaults():
    get = getter({"gpu1": {"quant": "int4", "kimi_int4_revision": SHA}})
    inputs = site_inputs(get, "gpu1", ["gpu1"])
    assert inputs["quant"] == "int4" and inputs["engine"] == "auto" and inputs["extra_args"] == []
    assert inputs["revisions"] == {"int4": SHA, "nvfp4": None, "w4a8": None}
    assert "nodes" not in inputs and "pd" not in inputs
    assert _site.replica_members(get, "gpu1", ["gpu1"]) == ["gpu1"] and _site.pd_members(get, "gpu1", ["gpu1"]) == []


def test_replica_members_in_inventory_order_the_first_the_head():
    hostvars = {"a": {"kimi_replica": "r2"}, "b": {"kimi_replica": "r1", "ansible_host": "10.0.0.2"},
                "c": {"kimi_replica": "r1"}, "d": {}}
    get = getter(hostvars)
    servers = ["a", "b", "c", "d"]
    assert _site.replica_members(get, "c", servers) == ["b", "c"]
    inputs = site_inputs(get, "c", servers)
    assert (inputs["nodes"], inputs["node_rank"], inputs["head_address"]) == (2, 1, "10.0.0.2")
    hostvars["c"]["kimi_replica_head_address"] = "192.168.1.2"
    assert site_inputs(get, "c", servers)["head_address"] == "192.168.1.2"


def test_pd_members_with_their_address_replica_port_and_rdma_devices():
    hostvars = {
        "p1": {"kimi_pd": "pd1", "kimi_pd_role": "prefill", "ansible_host": "10.0.0.11",
               "ansible_facts": {"rdma_devices": ["mlx5_0", "mlx5_1"]}},
        "d1": {"kimi_pd": "pd1", "kimi_pd_role": "decode", "kimi_pd_address": "192.168.0.21",
               "ansible_host": "10.0.0.21", "kimi_pd_rdma_devices": ["none"], "kimi_replica": "r",
               "kimi_engine_port": 31000, "kimi_pd_router_port": 8100},
        "x": {"kimi_pd": "other", "kimi_pd_role": "decode"},
    }
    get = getter(hostvars)
    servers = ["p1", "x", "d1"]
    assert _site.pd_members(get, "d1", servers) == ["p1", "d1"]
    pd = site_inputs(get, "d1", servers)["pd"]
    assert pd["name"] == "pd1" and pd["me"] == "d1" and pd["router_port"] == 8100 and pd["router_extra_args"] == []
    assert pd["members"] == [
        {"host": "p1", "role": "prefill", "address": "10.0.0.11", "replica": None, "port": None,
         "rdma_devices": ["mlx5_0", "mlx5_1"]},
        {"host": "d1", "role": "decode", "address": "192.168.0.21", "replica": "r", "port": 31000,
         "rdma_devices": ["none"]}]


def test_the_plan_previews_a_replica_and_a_disaggregated_deployment():
    get = getter({"localhost": {"kimi_pd_rdma_devices": ["mlx5_0"]}})
    inputs = site_inputs(get, "localhost", [], plan_hosts="2", pd_plan="1P1D")
    assert (inputs["nodes"], inputs["head_address"]) == (2, "head.replica.example")
    assert inputs["pd"]["plan"] == "1P1D" and inputs["pd"]["rdma_devices"] == ["mlx5_0"]
    assert site_inputs(get, "localhost", [], plan_hosts=1)["head_address"] is None
    with pytest.raises(DeploymentError, match=r"^kimi_replica_plan_hosts=0 is not allowed.*from 1 to 16"):
        site_inputs(get, "localhost", [], plan_hosts="0")


def test_the_old_image_name_is_read_when_the_new_one_is_not_set():
    assert site_inputs(getter({"h": {"kimi_image": "old:1"}}), "h", ["h"])["image"] == "old:1"
    both = {"h": {"kimi_image": "old:1", "kimi_engine_image": "new:2"}}
    assert site_inputs(getter(both), "h", ["h"])["image"] == "new:2"


def test_a_hosts_accelerators_are_its_kimi_gpus_else_its_facts_npus_first():
    gpu, npu = {"name": "NVIDIA H200"}, {"chip": "910B3"}
    get = getter({"a": {"kimi_gpus": [gpu], "ansible_facts": {"nvidia_gpus": [npu]}},
                  "b": {"ansible_facts": {"nvidia_gpus": [gpu], "ascend_npus": [npu]}},
                  "c": {"ansible_facts": {"nvidia_gpus": [], "ascend_npus": []}}, "d": {}})
    assert [_site.accelerators(get, h) for h in "abcd"] == [[gpu], [npu], [], []]


def deployment(commands, gpus=8, kv="fp8", hardware=True, pd_role=None):
    out = {"member_commands": commands, "identity": "int4-vllm", "engine_version": "0.22.1", "tp": gpus, "pp": 2,
           "context_length": 262144, "kv_cache_dtype": kv, "mem_fraction": 0.9,
           "hardware": {"gpu_count": gpus, "models": ["NVIDIA H200"]} if hardware else None}
    if pd_role:
        out["pd"] = {"role": pd_role, "layout": {"identity": "int4-sglang", "kv_cache_dtype": kv}}
    return out


def test_a_replica_host_that_resolves_another_command_is_named_with_what_differs():
    head = deployment([["vllm", "--tp", "8"], ["vllm", "--tp", "8", "--rank", "1"]])
    assert _site.group_disagreement("replica", "r1", [("a", head), ("b", dict(head))]) == ""
    other = deployment([["vllm", "--tp", "4"], ["vllm", "--tp", "4", "--rank", "1"]], gpus=4)
    refused = _site.group_disagreement("replica", "r1", [("a", head), ("b", dict(head)), ("c", other)])
    assert refused.startswith("kimi_replica r1: c resolves another command than its head a: GPUs 4 x NVIDIA H200 "
                              "(a: 8 x NVIDIA H200), kimi_tensor_parallel 4 (a: 8).")
    assert " b " not in refused
    # same summary, another command (e.g. kimi_engine_extra_args on one host): still refused
    assert "(another site input differs)" in _site.group_disagreement(
        "replica", "r1", [("a", head), ("b", dict(head, member_commands=[["vllm", "--x"]]))])


def test_hosts_whose_gpus_are_not_read_yet_are_compared_once_they_are():
    head = deployment([["vllm", "--tp", "8"]])
    bare = deployment([["vllm", "--tp", "1"]], hardware=False)
    assert _site.group_disagreement("replica", "r1", [("a", head), ("b", bare)]) == ""
    assert _site.group_disagreement("replica", "r1", [("a", bare), ("b", head)]) == ""
    assert "b resolves another command" in _site.group_disagreement(
        "replica", "r1", [("a", head), ("b", deployment([["vllm", "--tp", "4"]], gpus=4))])


def test_a_pd_host_with_another_kv_layout_is_named():
    prefill, decode = deployment([], pd_role="prefill"), deployment([], pd_role="decode")
    assert _site.group_disagreement("pd", "pd1", [("p1", prefill), ("d1", decode)]) == ""
    other = deployment([], kv="auto", pd_role="decode")
    refused = _site.group_disagreement("pd", "pd1", [("p1", prefill), ("d1", other)])
    assert refused.startswith('kimi_pd pd1: kimi_kv_cache_dtype differs between the hosts of the disaggregated '
                              'deployment: "fp8" on p1 (prefill) and "auto" on d1 (decode)')
