"""_site: a host's site variables as the model's inputs, and the hosts of its replica and disaggregated deployment,
from the inventory's variables (what the kimi.deploy.deployment action reads)."""
import pytest

from ansible_collections.kimi.deploy.plugins.module_utils._model import deployment as _deployment
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
    assert inputs["revisions"] == {"int4": SHA, "nvfp4": None, "w4a8": None, "mxfp4": None}
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


H200 = {"models": ["NVIDIA H200"], "platform": "nvidia", "arch": "hopper", "sm": "sm_90", "mib": 143771}


def hardware_dict(gpus=8, models=None, platform=None, arch=None, sm=None, mib=None, spec=None):
    """A deployment's `hardware` dict (_deployment) of `gpus` accelerators like `spec` (H200), some fields changed."""
    spec = dict(spec or H200)
    spec.update((k, v) for k, v in (("models", models), ("platform", platform), ("arch", arch), ("sm", sm),
                                    ("mib", mib)) if v is not None)
    return {"gpu_count": gpus, "models": spec["models"], "platform": spec["platform"], "arch": spec["arch"],
            "sm": spec["sm"], "vram_min_mib": spec["mib"], "vram_total_mib": spec["mib"] * gpus}


def deployment(commands, gpus=8, kv="fp8", hardware=True, pd_role=None, **accelerators):
    out = {"member_commands": commands, "identity": "int4-vllm", "engine_version": "0.22.1", "tp": gpus, "pp": 2,
           "context_length": 262144, "kv_cache_dtype": kv, "mem_fraction": 0.9,
           "hardware": hardware_dict(gpus, **accelerators) if hardware else None}
    if pd_role:
        out["pd"] = {"role": pd_role, "layout": {"identity": "int4-sglang", "kv_cache_dtype": kv}}
    return out


def test_a_replica_host_that_resolves_another_command_is_named_with_what_differs():
    head = deployment([["vllm", "--tp", "8"], ["vllm", "--tp", "8", "--rank", "1"]])
    assert _site.group_disagreement("replica", "r1", [("a", head), ("b", dict(head))]) == ""
    other = deployment([["vllm", "--tp", "4"], ["vllm", "--tp", "4", "--rank", "1"]], kv="auto")
    refused = _site.group_disagreement("replica", "r1", [("a", head), ("b", dict(head)), ("c", other)])
    assert refused.startswith("kimi_replica r1: c resolves another command than its head a: kimi_kv_cache_dtype auto "
                              "(a: fp8). A replica over several hosts is one engine")
    assert " b " not in refused
    # same summary, another command (e.g. kimi_engine_extra_args on one host): still refused
    assert "(another site input differs)" in _site.group_disagreement(
        "replica", "r1", [("a", head), ("b", dict(head, member_commands=[["vllm", "--x"]]))])


def test_hosts_whose_gpus_are_not_read_yet_are_compared_once_they_are():
    head = deployment([["vllm", "--tp", "8"]])
    bare = deployment([["vllm", "--tp", "1"]], hardware=False)
    assert _site.group_disagreement("replica", "r1", [("a", head), ("b", bare)]) == ""
    assert _site.group_disagreement("replica", "r1", [("a", bare), ("b", head)]) == ""
    assert "b has 4 x NVIDIA H200 (sm_90, 140 GiB each), its head a 8 x" in _site.group_disagreement(
        "replica", "r1", [("a", head), ("b", deployment([["vllm", "--tp", "4"]], gpus=4))])
    assert "b resolves another command" in _site.group_disagreement(
        "replica", "r1", [("a", head), ("b", deployment([["vllm", "--tp", "4"]]))])


def test_a_pd_host_with_another_kv_layout_is_named():
    prefill, decode = deployment([], pd_role="prefill"), deployment([], pd_role="decode")
    assert _site.group_disagreement("pd", "pd1", [("p1", prefill), ("d1", decode)]) == ""
    other = deployment([], kv="auto", pd_role="decode")
    refused = _site.group_disagreement("pd", "pd1", [("p1", prefill), ("d1", other)])
    assert refused.startswith('kimi_pd pd1: kimi_kv_cache_dtype differs between the hosts of the disaggregated '
                              'deployment: "fp8" on p1 (prefill) and "auto" on d1 (decode)')


B200 = {"models": ["NVIDIA B200"], "platform": "nvidia", "arch": "blackwell-dc", "sm": "sm_100", "mib": 183359}
ONE_COMMAND = [["vllm", "serve", "--tp", "8"], ["vllm", "serve", "--tp", "8", "--headless"]]


@pytest.mark.parametrize("change, shown, what", [
    ({"models": ["NVIDIA H200 NVL"]}, "8 x NVIDIA H200 NVL (sm_90, 140 GiB each)", "model differs"),
    ({"mib": 97887}, "8 x NVIDIA H200 (sm_90, 96 GiB each)", "memory differs"),
    ({"gpus": 4}, "4 x NVIDIA H200 (sm_90, 140 GiB each)", "count differs"),
    ({"arch": "blackwell-dc", "sm": "sm_100"}, "8 x NVIDIA H200 (sm_100, 140 GiB each)", "architecture differs"),
    ({"spec": B200}, "8 x NVIDIA B200 (sm_100, 179 GiB each)", "architecture, model and memory differ"),
])
def test_a_replica_member_with_other_accelerators_is_refused_though_its_command_is_the_heads(change, shown, what):
    """The engine command does not show the accelerators (8 x H100 and 8 x B200 resolve the same int4 vLLM command):
    each of model, memory, count and architecture alone refuses the member, named with both hosts' accelerators."""
    head = deployment(ONE_COMMAND)
    assert _site.group_disagreement("replica", "r1", [("gpu1", head), ("gpu2", deployment(ONE_COMMAND))]) == ""
    refused = _site.group_disagreement("replica", "r1", [("gpu1", head), ("gpu2", deployment(ONE_COMMAND, **change))])
    assert refused.startswith("kimi_replica r1: gpu2 has %s, its head gpu1 8 x NVIDIA H200 (sm_90, 140 GiB each): %s. "
                              "A replica over several hosts is one engine" % (shown, what)), refused
    assert "\n" not in refused and "resolves another command" not in refused


def test_a_replica_of_three_names_each_member_whose_accelerators_differ_and_skips_those_not_read_yet():
    head, same = deployment(ONE_COMMAND), deployment(ONE_COMMAND)
    b200, bare = deployment(ONE_COMMAND, spec=B200), deployment(ONE_COMMAND, hardware=False)
    refused = _site.group_disagreement("replica", "r1", [("a", head), ("b", b200), ("c", same), ("d", bare),
                                                         ("e", deployment(ONE_COMMAND, gpus=4))])
    assert "kimi_replica r1: b has 8 x NVIDIA B200 (sm_100, 179 GiB each), its head a" in refused
    assert "; e has 4 x NVIDIA H200 (sm_90, 140 GiB each), its head a 8 x NVIDIA H200 (sm_90, 140 GiB each): count " \
           "differs." in refused
    assert " c has " not in refused and " d has " not in refused


def test_a_host_of_mixed_gpus_shows_its_smallest_memory():
    mixed = dict(hardware_dict(), models=["NVIDIA B200", "NVIDIA H200"], vram_min_mib=143771,
                 vram_total_mib=4 * 143771 + 4 * 183359)
    refused = _site.group_disagreement("replica", "r1", [("a", deployment(ONE_COMMAND)),
                                                         ("b", dict(deployment(ONE_COMMAND), hardware=mixed))])
    assert "b has 8 x NVIDIA B200/NVIDIA H200 (sm_90, at least 140 GiB each), its head a" in refused
    assert "model and memory differ" in refused


def test_pd_instances_may_differ_in_size_but_not_in_architecture():
    """The hosts of a disaggregated deployment: instances of other sizes (count, memory, model) serve together; another
    architecture or platform is refused before the KV layout is compared, naming both hosts' accelerators."""
    prefill = deployment([], pd_role="prefill")
    smaller = deployment([], gpus=4, pd_role="decode", models=["NVIDIA H100 80GB HBM3"], mib=81559)
    assert _site.group_disagreement("pd", "pd1", [("p1", prefill), ("d1", smaller)]) == ""
    blackwell = deployment([], pd_role="decode", spec=B200)
    refused = _site.group_disagreement("pd", "pd1", [("p1", prefill), ("d1", blackwell)])
    assert refused.startswith("kimi_pd pd1: d1 (decode) has 8 x NVIDIA B200 (sm_100, 179 GiB each), p1 (prefill) 8 x "
                              "NVIDIA H200 (sm_90, 140 GiB each): architecture differs. The decode instances read the "
                              "KV cache"), refused
    ascend = deployment([], pd_role="decode", models=["Ascend910"], platform="ascend", arch="ascend-a3",
                        sm="Ascend910", mib=65536)
    assert "d1 (decode) has 8 x Ascend910 (Ascend910, 64 GiB each), p1 (prefill) 8 x NVIDIA H200 (sm_90, 140 GiB " \
           "each): platform differs" in _site.group_disagreement("pd", "pd1", [("p1", prefill), ("d1", ascend)])
    other_chip = deployment([], pd_role="decode", models=["Ascend 910B4"], platform="ascend", arch="ascend-a2",
                            sm="910B4", mib=32768)
    a2 = deployment([], pd_role="prefill", models=["Ascend 910B3"], platform="ascend", arch="ascend-a2", sm="910B3",
                    mib=65536)
    assert _site.group_disagreement("pd", "pd1", [("p1", a2), ("d1", other_chip)]) == ""  # one Ascend family
    # not read yet: skipped, as in a replica
    assert _site.group_disagreement("pd", "pd1", [("p1", prefill), ("d1", deployment([], pd_role="decode",
                                                                                     hardware=False))]) == ""
    # the architecture first: a KV layout difference too is shown once the accelerators agree
    assert _site.group_disagreement("pd", "pd1", [("p1", prefill), ("d1", deployment(
        [], kv="auto", pd_role="decode", spec=B200))]).startswith("kimi_pd pd1: d1 (decode) has 8 x NVIDIA B200")


def test_vllm_ascend_pd_instances_need_the_same_parallel_sizes():
    """vLLM-Ascend's MooncakeConnectorV1 config states this instance's tensor and data parallel sizes for both roles
    (the connector pulls from the other side's ranks by them): an A3 of 16 chips (tp 4 x dp 4) beside one of 8 (tp 4 x
    dp 2) is refused; the same A3 on both sides passes."""
    def chips(count):
        return [{"index": i, "name": "Ascend910", "chip": "Ascend910", "platform": "ascend", "memory_mib": 65536,
                 "chips_per_npu": 2} for i in range(count)]

    def host(me, count):
        pd = {"name": "pd1", "me": me, "members": [{"host": "p1", "role": "prefill", "address": "10.0.0.11"},
                                                   {"host": "d1", "role": "decode", "address": "10.0.0.12"}]}
        return me, _deployment.resolve({"quant": "w4a8", "engine": "vllm", "context_length": 4096, "pd": pd,
                                        "revisions": {"w4a8": "0123456789abcdef0123456789abcdef01234567"}},
                                       chips(count))

    assert _site.group_disagreement("pd", "pd1", [host("p1", 16), host("d1", 16)]) == ""
    refused = _site.group_disagreement("pd", "pd1", [host("p1", 16), host("d1", 8)])
    assert refused.startswith('kimi_pd pd1: the parallel layout (kimi_tensor_parallel, and each instance\'s '
                              'accelerators) differs between the hosts of the disaggregated deployment: {"tp_size": 4, '
                              '"dp_size": 4} on p1 (prefill) and {"tp_size": 4, "dp_size": 2} on d1 (decode).'), refused
    assert "with vLLM-Ascend's MooncakeConnectorV1" in refused
