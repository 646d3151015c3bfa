"""Ascend NPU hosts in the deployment model: the npu-smi parser, the NPU summary, the W4A8 identities per family, the
fit in HBM, the refusals across platforms, and the argv of each member of a two-host A2 replica."""
import pytest

from ansible_collections.kimi.deploy.plugins.module_utils._model import accelerators as acc
from ansible_collections.kimi.deploy.plugins.module_utils._model import deployment as dm
from ansible_collections.kimi.deploy.plugins.module_utils._model import npu as _npu

from test_deployment import A2x8, A3x16, RTX8, SHA

A2_ROWS = """| NPU   Name                | Health        | Power(W)    Temp(C)           Hugepages-Usage(page)|
| Chip                      | Bus-Id        | AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)        |
+===========================+===============+====================================================+
| 0     910B3               | OK            | 97.5        41                0    / 0             |
| 0                         | 0000:C1:00.0  | 0           0    / 0          3379 / 65536         |
+===========================+===============+====================================================+
| 1     910B3               | Warning       | 93.9        40                0    / 0             |
| 0                         | 0000:C2:00.0  | 0           0    / 0          3385 / 65536         |
+===========================+===============+====================================================+
"""


def resolve(gpu_list=None, **inputs):
    inputs.setdefault("revisions", {"int4": SHA, "nvfp4": SHA, "w4a8": SHA})
    return dm.resolve(inputs, gpu_list)


def test_the_published_a2_table_parses_with_its_health():
    table = _npu.parse_npu_smi_info(A2_ROWS)
    assert [(c["npu"], c["name"], c["health"], c["hbm_total_mib"], c["phy_id"]) for c in table["chips"]] == [
        (0, "910B3", "OK", 65536, None), (1, "910B3", "Warning", 65536, None)]
    summary = _npu.summarize_npus(_npu.npu_entries(table["chips"]))
    assert summary["unhealthy"] == ["NPU 1: Warning"]


def test_a_table_cut_after_the_first_row_is_refused_quoting_it():
    with pytest.raises(_npu.NpuParseError, match="NPU 0 .910B3. has no second row"):
        _npu.parse_npu_smi_info(A2_ROWS.split("\n")[3] + "\n")


@pytest.mark.parametrize("name, family", [("910B3", "ascend-a2"), ("Ascend910B4", "ascend-a2"), ("910C", "ascend-a3"),
                                          ("Ascend910", "ascend-a3"), ("Ascend910_9391", "ascend-a3"),
                                          ("310P3", None)])
def test_chip_families(name, family):
    assert _npu.chip_of(name)[0] == family


def test_version_info():
    assert _npu.parse_version_info("Version=24.1.rc3\npackage_version=24.1.rc3\n")["version"] == "24.1.rc3"


def test_one_host_is_nvidia_or_ascend_not_both():
    with pytest.raises(dm.DeploymentError, match="mixes 1 Ascend NPU.*one host is NVIDIA or Ascend"):
        resolve(RTX8[:1] + A3x16[:1], quant="w4a8", engine="vllm")
    assert acc.summarize(A3x16)["platform"] == "ascend" and acc.summarize(RTX8)["platform"] == "nvidia"


def test_a3_recommends_w4a8_on_vllm_ascend_at_tp4_dp4_with_reasons():
    dep = resolve(A3x16)
    assert (dep["identity"], dep["engine_build"], dep["platform"]) == ("w4a8-vllm", "vllm-ascend", "ascend")
    assert dep["image"] == "quay.io/ascend/vllm-ascend:v0.20.2rc1-a3"
    assert (dep["tp"], dep["dp"], dep["pp"]) == (4, 4, 1)
    assert dep["command"][:3] == ["vllm", "serve", "Eco-Tech/Kimi-K2.6-W4A8"]
    argv = " ".join(dep["argv"])
    for part in ("--quantization ascend", "--tensor-parallel-size 4", "--data-parallel-size 4",
                 "--enable-expert-parallel", "--gpu-memory-utilization 0.9"):
        assert part in argv
    assert dep["container_env"]["HCCL_OP_EXPANSION_MODE"] == "AIV"
    assert dep["container_shm_bytes"] == 1024 ** 3
    assert dep["hardware"]["fits"] and "65536 MiB HBM each" in dep["hardware"]["fit_reason"]
    assert any("W4A8 (Eco-Tech/Kimi-K2.6-W4A8" in r for r in dep["reasons"])


def test_the_a2_image_is_the_plain_tag_and_an_a2_alone_fits_as_a_two_host_replica():
    dep = resolve(A2x8)
    assert dep["image"] == "quay.io/ascend/vllm-ascend:v0.20.2rc1"
    hw = dep["hardware"]
    assert not hw["fits"] and "~76 GB" in hw["fit_reason"]
    assert hw["replica_advice"].startswith("Does not fit alone; fits as a 2-host replica")
    assert "tensor parallel 4 x data parallel 4 + expert parallel 16 on 2 hosts of 8 x Ascend 910B3" in \
        hw["replica_advice"]


def test_the_members_of_a_two_host_a2_replica():
    head = resolve(A2x8, nodes=2, node_rank=0, head_address="10.0.0.11", dist_port=29600)
    worker = resolve(A2x8, nodes=2, node_rank=1, head_address="10.0.0.11", dist_port=29600)
    assert head["hardware"]["fits"] and head["member_commands"][1] == worker["command"]
    tail = ["--data-parallel-size-local", "2", "--data-parallel-address", "10.0.0.11", "--data-parallel-rpc-port", "29600"]
    assert head["argv"][-6:] == tail
    assert worker["argv"][-9:] == tail + ["--data-parallel-start-rank", "2", "--headless"]
    assert worker["container_env"]["VLLM_RPC_TIMEOUT"] == "3600000"


def test_sglang_on_a3_runs_attention_dp_16_with_deepep():
    dep = resolve(A3x16, quant="w4a8", engine="sglang")
    assert (dep["engine_build"], dep["attention_dp"]) == ("sglang-ascend", True)
    argv = " ".join(dep["argv"])
    for part in ("--quantization modelslim", "--tp-size 16", "--dp-size 16", "--enable-dp-attention", "--ep-size 16",
                 "--moe-a2a-backend deepep", "--deepep-mode auto", "--attention-backend ascend"):
        assert part in argv
    assert dep["image"] == "quay.io/ascend/sglang:v0.5.13.post1-cann9.0.0-a3"
    assert dep["container_shm_bytes"] == 16 * 1024 ** 3


@pytest.mark.parametrize("gpus, inputs, message", [
    (A3x16, {"quant": "int4", "engine": "vllm"}, r"quant=int4 engine=vllm is refused on 16 x Ascend910.*needs CUDA.*"
                                                 r"Allowed here: w4a8\+sglang, w4a8\+vllm"),
    (A3x16, {"quant": "nvfp4", "engine": "auto"}, r"NVFP4 needs NVIDIA's FP4 tensor cores"),
    (A3x16, {"engine": "trtllm"}, r"engine=trtllm is refused on 16 x Ascend910.*TensorRT-LLM runs on NVIDIA GPUs"),
    (RTX8, {"quant": "w4a8", "engine": "vllm"}, r"quant=w4a8 engine=vllm is refused on 8 x NVIDIA RTX PRO 6000.*"
                                                r"Allowed here: int4\+sglang"),
    (A2x8, {"quant": "w4a8", "engine": "sglang"}, r"refused on 8 x Ascend 910B3.*Atlas 800 A3.*use engine=vllm"),
    (None, {"quant": "w4a8", "engine": "trtllm"}, r"engine=trtllm with quant=w4a8 is refused"),
])
def test_cuda_only_identities_on_ascend_and_the_reverse_are_refused(gpus, inputs, message):
    with pytest.raises(dm.DeploymentError, match=message):
        resolve(gpus, **inputs)


def test_without_facts_w4a8_plans_the_a3_reference_host():
    dep = resolve(None, quant="w4a8", engine="vllm")
    assert (dep["platform"], dep["tp"], dep["dp"]) == ("ascend", 4, 4)
    assert any("no accelerator facts, assuming the 16-NPU reference host" in r for r in dep["reasons"])
