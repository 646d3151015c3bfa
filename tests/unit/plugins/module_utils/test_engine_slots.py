"""The requests an engine runs at once (deployment max_running_requests, _engines/registry.engine_slots), derived from
the engine's own options, and each fleet gateway worker's copy of it: SMG's priority scheduler counts a worker's slots
from its max_running_requests label, which it reads only off SGLang's /server_info (64 for any other worker)."""
import pytest

from ansible_collections.kimi.deploy.plugins.module_utils._engines.cli import option_value
from ansible_collections.kimi.deploy.plugins.module_utils._engines.registry import options
from ansible_collections.kimi.deploy.plugins.module_utils._model.gateway import resolve_gateway

from test_deployment import B200x8, H200x8, RTX8, gpus, resolve
from test_gateway import SETTINGS, fleet, hosts
from test_site import SHA

A100x8 = gpus("NVIDIA A100-SXM4-80GB", "8.0", 81920, 8)
L40Sx8 = gpus("NVIDIA L40S", "8.9", 46068, 8)


@pytest.mark.parametrize("argv, value", [
    (["--max-num-seqs", "64"], "64"),
    (["--max-num-seqs=32"], "32"),
    (["--max_num_seqs", "16"], "16"),                       # vLLM reads it as --max-num-seqs
    (["--max-num-seqs", "8", "--enforce-eager", "--max-num-seqs=12"], "12"),  # the last one wins, as in argparse
    (["--enforce-eager"], None),
    ([], None),
])
def test_option_value_reads_checked_extra_args_as_the_parser_would(argv, value):
    assert option_value(options("vllm", "0.22.1"), argv, "max_num_seqs") == value


@pytest.mark.parametrize("extra, per_rank", [(["--max-num-seqs", "64"], 64), (["--max-num-seqs=48"], 48),
                                             (["--max_num_seqs", "40"], 40)])
def test_vllm_runs_max_num_seqs_per_data_parallel_rank(extra, per_rank):
    deployment = resolve(RTX8, quant="int4", engine="vllm", extra_args=extra)
    assert deployment["max_running_requests"] == per_rank * deployment["dp"]


@pytest.mark.parametrize("gpu_list, default", [
    (RTX8, 1024), (H200x8, 1024),  # 70 GiB or more, not an A100: vLLM's larger default
    (A100x8, 256), (L40Sx8, 256),
])
def test_vllm_without_max_num_seqs_gets_its_default_for_the_gpus(gpu_list, default):
    deployment = resolve(gpu_list, quant="int4", engine="vllm")
    assert deployment["max_running_requests"] == default * deployment["dp"]
    capped = resolve(gpu_list, quant="int4", engine="vllm", extra_args=["--max-num-batched-tokens", "128"])
    assert capped["max_running_requests"] == 128 * capped["dp"]  # never more than the tokens of a step


def test_vllm_without_gpu_facts_and_sglang_leave_it_unknown():
    assert resolve(None, quant="int4", engine="vllm")["max_running_requests"] is None
    # SGLang reports its own (/server_info max_running_requests, which SMG reads)
    assert resolve(RTX8, quant="int4", engine="sglang", extra_args=["--max-running-requests", "64"])[
        "max_running_requests"] is None


@pytest.mark.parametrize("engine_options, slots", [
    ({}, 128 * 8),                                                  # seed 003's 128 per attention data-parallel rank
    ({"max_batch_size": 16}, 16 * 8),
    ({"max_batch_size": 16, "enable_attention_dp": False}, 16),     # one batch for the tensor-parallel group
])
def test_trtllm_runs_max_batch_size_of_its_config_per_attention_rank(engine_options, slots):
    deployment = resolve(B200x8, quant="nvfp4", engine="trtllm", engine_options=engine_options)
    assert deployment["tp"] == 8 and deployment["max_running_requests"] == slots
    assert deployment["engine_config"]["max_batch_size"] == engine_options.get("max_batch_size", 128)


@pytest.mark.parametrize("engine, extra, slots", [
    ("sglang", {}, None),
    ("vllm", {"kimi_engine_extra_args": ["--max-num-seqs", "96"]}, 96),
    ("trtllm", {"quant": "nvfp4", "kimi_nvfp4_revision": SHA, "kimi_trtllm_options": {"max_batch_size": 32}}, 256),
])
def test_each_gateway_worker_carries_its_instances_slots(engine, extra, slots):
    instances = fleet(hosts(engine, **extra), gpus=B200x8)
    gateway = resolve_gateway("gw", instances, SETTINGS)
    expected = [None if slots is None else slots * (i["deployment"]["dp"] if engine == "vllm" else 1)
                for i in instances]
    assert [w["max_running_requests"] for w in gateway["workers"]] == expected
    assert [w["max_running_requests"] for w in gateway["workers"]] == [
        i["deployment"]["max_running_requests"] for i in instances]
