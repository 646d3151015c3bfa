"""Replicas over several hosts: the layout, the fit of the replica, the advice for a host that cannot hold the model
alone, and each member's command line, every flag checked against the pinned parsers."""
import pytest

from ansible_collections.kimi.deploy.plugins.module_utils._model import deployment as dm
from ansible_collections.kimi.deploy.plugins.module_utils._model.site import group_disagreement

from test_deployment import SHA, gpus, parse_against_pinned_parser

H100x8 = gpus("NVIDIA H100 80GB HBM3", "9.0", 81559, 8)
H200x4 = gpus("NVIDIA H200", "9.0", 143771, 4)
RTX4 = gpus("NVIDIA RTX PRO 6000 Blackwell Server Edition", "12.0", 97887, 4)
B200x8 = gpus("NVIDIA B200", "10.0", 183359, 8)
HEAD = "10.0.0.11"


def replica(gpu_list, nodes, rank=0, **inputs):
    inputs.setdefault("revisions", {"int4": SHA, "nvfp4": SHA})
    inputs.update(nodes=nodes, node_rank=rank, head_address=HEAD if nodes > 1 else None)
    return dm.resolve(inputs, gpu_list)


def flags_of(engine, command):
    argv = command if engine == "sglang" else command[2:]  # vLLM: after `vllm serve`
    return parse_against_pinned_parser(engine, argv)


@pytest.mark.parametrize("gpu_list, engine, nodes, tp, pp", [
    (H100x8, "vllm", 2, 8, 2),      # TP inside each host, PP across the two
    (H100x8, "sglang", 2, 16, 1),   # SGLang: one TP group over the replica
    (H200x4, "vllm", 2, 4, 2),
    (H200x4, "sglang", 2, 8, 1),
    (RTX4, "vllm", 2, 4, 2),
    (RTX4, "sglang", 2, 8, 1),
    (B200x8, "vllm", 1, 8, 1),      # one host holds it: a replica of one, as before
])
def test_layout_and_every_members_flags_in_the_pinned_parser(gpu_list, engine, nodes, tp, pp):
    d = replica(gpu_list, nodes, quant="int4", engine=engine)
    assert (d["tp"], d["pp"], d["nodes"]) == (tp, pp, nodes)
    assert d["hardware"]["fits"], d["hardware"]["fit_reason"]
    assert len(d["member_commands"]) == nodes
    for rank, command in enumerate(d["member_commands"]):
        flags = flags_of(engine, command)
        size = "--tp-size" if engine == "sglang" else "--tensor-parallel-size"
        assert flags[size] == str(tp)
        if nodes == 1:
            assert not set(flags) & {"--nnodes", "--node-rank", "--dist-init-addr", "--master-addr", "--headless",
                                     "--pipeline-parallel-size", "--pp-size"}
            assert command == d["command"]
            continue
        assert (flags["--nnodes"], flags["--node-rank"]) == (str(nodes), str(rank))
        if engine == "sglang":
            assert flags["--dist-init-addr"] == "%s:%d" % (HEAD, dm.DEFAULT_DIST_PORT)
            assert "--pp-size" not in flags
        else:
            assert (flags["--master-addr"], flags["--master-port"]) == (HEAD, str(dm.DEFAULT_DIST_PORT))
            assert flags["--pipeline-parallel-size"] == str(pp)
            assert ("--headless" in flags) == (rank > 0), "only the head serves the API"


def test_the_layout_says_why():
    vllm = replica(H100x8, 2, quant="int4", engine="vllm")
    assert any("tensor parallel 8 inside each host, pipeline parallel 2 across them" in r for r in vllm["reasons"])
    sglang = replica(H100x8, 2, quant="int4", engine="sglang")
    assert any("tensor parallel 16 over the whole replica" in r for r in sglang["reasons"])


def test_a_member_gets_its_own_rank_and_only_the_head_serves():
    head, worker = replica(H100x8, 2, 0, quant="int4", engine="vllm"), replica(H100x8, 2, 1, quant="int4", engine="vllm")
    assert head["serves_api"] and not worker["serves_api"]
    assert worker["command"] == head["member_commands"][1] and head["command"] == head["member_commands"][0]
    assert "--headless" in worker["argv"] and "--headless" not in head["argv"]


def test_8_x_h100_alone_does_not_fit_and_is_told_it_fits_as_a_2_host_replica():
    d = dm.resolve({"quant": "int4", "engine": "vllm", "revisions": {"int4": SHA}}, H100x8)
    hw = d["hardware"]
    assert not hw["fits"] and hw["fit_reason"].startswith("Does not fit: tensor parallel 8 on 8 x NVIDIA H100")
    advice = hw["replica_advice"]
    assert advice.startswith("Does not fit alone; fits as a 2-host replica of such hosts"), advice
    assert "tensor parallel 8 x pipeline parallel 2 on 2 hosts of 8 x NVIDIA H100 80GB HBM3" in advice
    assert "each GPU holds ~42 GB" in advice  # 595 GB / 16 + the replicated part
    assert advice in d["reasons"]


def test_the_recommendation_for_one_4_x_h200_names_the_replica():
    d = dm.resolve({"quant": "auto", "engine": "auto", "revisions": {"int4": SHA}}, H200x4)
    assert not d["hardware"]["fits"]
    assert "fits as a 2-host replica" in d["hardware"]["replica_advice"]


def test_the_layout_is_overridable_and_must_use_every_gpu_of_the_replica():
    d = replica(H100x8, 2, quant="int4", engine="vllm", tp=16, pp=1)  # TP across hosts, by choice
    assert (d["tp"], d["pp"]) == (16, 1)
    with pytest.raises(dm.DeploymentError, match=r"kimi_pipeline_parallel=1 is not allowed.*tp x pp x dp = 16"):
        replica(H100x8, 2, quant="int4", engine="vllm", tp=8, pp=1)


def test_a_replica_without_a_head_address_is_refused_naming_the_variable():
    with pytest.raises(dm.DeploymentError, match=r"kimi_replica_head_address=None is not allowed"):
        dm.resolve({"quant": "int4", "engine": "vllm", "nodes": 2, "revisions": {"int4": SHA}}, H100x8)
    with pytest.raises(dm.DeploymentError, match=r"kimi_replica \(the host's place among the replica's hosts, in inventory order\)=2 is not allowed"):
        replica(H100x8, 2, 2, quant="int4", engine="vllm")


def test_replica_flags_cannot_be_set_by_hand():
    with pytest.raises(dm.DeploymentError, match=r"--nnodes is set by the collection"):
        replica(H100x8, 1, quant="int4", engine="vllm", extra_args=["--nnodes", "2"])


RTX8 = gpus("NVIDIA RTX PRO 6000 Blackwell Server Edition", "12.0", 97887, 8)


@pytest.mark.parametrize("other, shown, what", [
    (B200x8, "8 x NVIDIA B200 (sm_100, 179 GiB each)", "architecture, model and memory differ"),
    (RTX8, "8 x NVIDIA RTX PRO 6000 Blackwell Server Edition (sm_120, 96 GiB each)",
     "architecture, model and memory differ"),
])
def test_a_replica_of_other_gpus_with_the_same_command_is_refused(other, shown, what):
    """Issue 50: 8 x H100 with 8 x B200 (or 8 x RTX PRO 6000) resolve the very same int4 vLLM commands, and are still
    two kinds of GPU under one engine: refused, naming the member and what differs."""
    head = replica(H100x8, 2, 0, quant="int4", engine="vllm")
    worker = replica(other, 2, 1, quant="int4", engine="vllm")
    assert worker["member_commands"] == head["member_commands"]  # what the command comparison alone let through
    same = replica(H100x8, 2, 1, quant="int4", engine="vllm")
    assert group_disagreement("replica", "r1", [("gpu1", head), ("gpu2", same)]) == ""
    refused = group_disagreement("replica", "r1", [("gpu1", head), ("gpu2", worker)])
    assert refused.startswith("kimi_replica r1: gpu2 has %s, its head gpu1 8 x NVIDIA H100 80GB HBM3 (sm_90, 80 GiB "
                              "each): %s. A replica over several hosts is one engine" % (shown, what)), refused
