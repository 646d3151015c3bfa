"""The KV host tier (kimi_kv_offload, _kv_offload): each engine's flags against its pinned flag lists, the refusals
(a bad value, a build or version without a tier for MLA, a size larger than the host can pin) and the sizing rule."""
import os

import pytest
import yaml

from ansible_collections.kimi.deploy.plugins.module_utils._model import deployment as dm
from ansible_collections.kimi.deploy.plugins.module_utils._model import kv_offload as kvo
from ansible_collections.kimi.deploy.plugins.module_utils._model.checkpoints import CHECKPOINTS, GB, GIB
from ansible_collections.kimi.deploy.plugins.module_utils._model.report import plan_lines
from ansible_collections.kimi.deploy.plugins.module_utils._model.site import inputs as site_inputs, MISSING
from ansible_collections.kimi.deploy.plugins.module_utils._engines.cli import option_index
from ansible_collections.kimi.deploy.plugins.module_utils._engines.registry import ENGINES, options
from test_deployment import A3x16, B200x8, H200x8, SHA

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
TIB = 1024 * GIB


def resolve(gpus, quant, engine, **inputs):
    return dm.resolve(dict({"quant": quant, "engine": engine, "revisions": {quant: SHA}}, **inputs), gpus)


def arg(argv, option):
    return argv[argv.index(option) + 1]


def budget(memory, quant="int4", nodes=1, shm=0):
    return kvo.host_budget(memory, CHECKPOINTS[quant]["weights_bytes"], nodes, shm)[0]


# ---- the flags, per engine and pinned version ------------------------------------------------------------------------
def test_none_is_the_default_and_emits_nothing():
    dep = resolve(H200x8, "int4", "vllm", host_memory_bytes=2 * TIB)
    assert dep["kv_offload"] is None
    assert not [a for a in dep["argv"] if a.startswith(("--kv-offloading", "--hicache", "--enable-hierarchical"))]


@pytest.mark.parametrize("version", sorted(ENGINES["vllm"]["versions"]))
def test_vllm_emits_native_offloading_with_the_replica_total_in_gib(version):
    dep = resolve(H200x8, "int4", "vllm", engine_version=version, kv_offload="host", kv_offload_gb=512,
                  host_memory_bytes=2 * TIB)
    argv = dep["argv"]
    assert arg(argv, "--kv-offloading-backend") == "native" and arg(argv, "--kv-offloading-size") == "512"
    index = option_index(options("vllm", version))
    assert "--kv-offloading-backend" in index and "--kv-offloading-size" in index
    dest = index["--kv-offloading-backend"][0]
    assert "native" in options("vllm", version)["values"][dest]
    assert dep["kv_offload"]["tokens"] == 512 * GIB // 8 // (61 * 576)  # fp8 MLA latent per token, per rank


@pytest.mark.parametrize("version", sorted(ENGINES["sglang"]["versions"]))
def test_sglang_emits_the_hierarchical_cache_with_each_ranks_gb(version):
    dep = resolve(H200x8, "int4", "sglang", engine_version=version, kv_offload="host", kv_offload_gb=800,
                  host_memory_bytes=2 * TIB)
    argv = dep["argv"]
    assert "--enable-hierarchical-cache" in argv
    assert arg(argv, "--hicache-size") == str(800 * GIB // 8 // GB)  # per rank, in GB (1e9): 107
    assert arg(argv, "--hicache-write-policy") == "write_through"
    assert "--hicache-ratio" not in argv
    opts = options("sglang", version)
    index = option_index(opts)
    for option in ("--enable-hierarchical-cache", "--hicache-size", "--hicache-write-policy", "--hicache-ratio"):
        assert option in index, (version, option)
    assert "write_through" in opts["values"][index["--hicache-write-policy"][0]]


def test_the_managed_flags_are_refused_in_extra_args():
    with pytest.raises(dm.DeploymentError, match="kimi_kv_offload_gb"):
        resolve(H200x8, "int4", "sglang", extra_args=["--hicache-ratio", "4"])
    with pytest.raises(dm.DeploymentError, match="kimi_kv_offload"):
        resolve(H200x8, "int4", "vllm", extra_args=["--kv-offloading-backend=lmcache"])


def test_trtllm_writes_each_ranks_bytes_into_its_config():
    dep = resolve(B200x8, "nvfp4", "trtllm", kv_offload="host", kv_offload_gb=400, host_memory_bytes=2 * TIB)
    assert dep["engine_config"]["kv_cache_config"]["host_cache_size"] == 400 * GIB // 8
    assert dep["kv_offload"]["unit"] == "bytes"
    plain = resolve(B200x8, "nvfp4", "trtllm")
    assert "host_cache_size" not in plain["engine_config"]["kv_cache_config"]


def test_trtllm_options_cannot_set_the_host_cache():
    with pytest.raises(dm.DeploymentError, match="kimi_kv_offload_gb"):
        resolve(B200x8, "nvfp4", "trtllm", engine_options={"kv_cache_config": {"host_cache_size": 10}})


def test_a_replica_over_two_hosts_gives_vllm_the_total_and_each_host_its_share():
    dep = resolve(H200x8, "int4", "vllm", kv_offload="host", kv_offload_gb=300, host_memory_bytes=2 * TIB, nodes=2,
                  node_rank=0, head_address="10.0.0.1")
    assert arg(dep["argv"], "--kv-offloading-size") == "600"
    assert dep["kv_offload"]["ranks_here"] == 8


# ---- refusals --------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("value", ["disk", "yes", True, 1])
def test_a_bad_mode_is_refused_with_the_allowed_values(value):
    with pytest.raises(dm.DeploymentError, match=r"kimi_kv_offload=.* is not allowed.*Allowed values: none, host"):
        resolve(H200x8, "int4", "vllm", kv_offload=value)


@pytest.mark.parametrize("value", ["lots", 0, -4, 1.5, True])
def test_a_bad_size_is_refused(value):
    with pytest.raises(dm.DeploymentError, match=r"kimi_kv_offload_gb=.* is not allowed"):
        resolve(H200x8, "int4", "vllm", kv_offload="host", kv_offload_gb=value, host_memory_bytes=2 * TIB)


@pytest.mark.parametrize("gpus, engine, source", [
    (A3x16, "vllm", r"vllm-project/vllm-ascend#7971"),
    (A3x16, "sglang", r"seed 001"),
])
def test_the_ascend_builds_are_refused_naming_the_source(gpus, engine, source):
    with pytest.raises(dm.DeploymentError) as refused:
        resolve(gpus, "w4a8", engine, kv_offload="host", kv_offload_gb=100, host_memory_bytes=2 * TIB)
    message = str(refused.value)
    assert message.startswith("kimi_kv_offload='host' is not allowed")
    assert "MLA" in message and "Allowed values: none" in message
    assert __import__("re").search(source, message), message


def test_vllm_with_a_disaggregated_deployment_is_refused():
    spec = ENGINES["vllm"]
    with pytest.raises(dm.DeploymentError, match=r"kimi_kv_offload='host'.*kv_transfer_config.*kimi_pd"):
        kvo.resolve_kv_offload({"kv_offload": "host", "kv_offload_gb": 10}, spec, {
            "engine_version": "0.22.1", "pd": {"role": "prefill"}, "nodes": 1, "tp": 8, "pp": 1, "dp": 1,
            "checkpoint": {"weights_bytes": 1}, "kv_cache_dtype": "fp8"}, [])


def test_a_version_the_engine_data_refuses_is_refused_naming_it():
    spec = dict(ENGINES["sglang"], kv_offload=dict(ENGINES["sglang"]["kv_offload"],
                                                   refused_versions={"0.5.12.post1": "no MLA host pool (source)"}))
    with pytest.raises(dm.DeploymentError, match=r"kimi_kv_offload='host'.*SGLang 0\.5\.12\.post1: no MLA host pool"):
        kvo.resolve_kv_offload({"kv_offload": "host", "kv_offload_gb": 10}, spec, {
            "engine_version": "0.5.12.post1", "nodes": 1, "tp": 8, "pp": 1, "dp": 1,
            "checkpoint": {"weights_bytes": 1}, "kv_cache_dtype": "fp8"}, [])


def test_a_size_larger_than_the_host_can_pin_is_refused_with_the_maximum():
    most = budget(2 * TIB) // GIB
    assert resolve(H200x8, "int4", "vllm", kv_offload="host", kv_offload_gb=most, host_memory_bytes=2 * TIB)
    with pytest.raises(dm.DeploymentError, match=r"kimi_kv_offload_gb=%d is not allowed.*Allowed values: 1\.\.%d "
                       % (most + 1, most)):
        resolve(H200x8, "int4", "vllm", kv_offload="host", kv_offload_gb=most + 1, host_memory_bytes=2 * TIB)


def test_a_host_too_small_for_a_tier_is_refused():
    with pytest.raises(dm.DeploymentError, match=r"kimi_kv_offload='host'.*leaves no room"):
        resolve(H200x8, "int4", "vllm", kv_offload="host", host_memory_bytes=512 * GIB)


def test_without_memory_facts_the_size_must_be_given():
    with pytest.raises(dm.DeploymentError, match=r"kimi_kv_offload=host needs the size.*kimi_kv_offload_gb"):
        resolve(H200x8, "int4", "vllm", kv_offload="host")
    dep = resolve(H200x8, "int4", "vllm", kv_offload="host", kv_offload_gb=100)
    assert arg(dep["argv"], "--kv-offloading-size") == "100" and "not checked" in dep["kv_offload"]["why"]


def test_a_size_with_the_tier_off_is_ignored_with_a_warning():
    dep = resolve(H200x8, "int4", "vllm", kv_offload_gb=100)
    assert dep["kv_offload"] is None and any("kimi_kv_offload_gb=100 is ignored" in w for w in dep["warnings"])


# ---- the sizing rule -------------------------------------------------------------------------------------------------
def test_the_rule_keeps_the_larger_reserve_the_weights_share_and_the_shm():
    weights = CHECKPOINTS["int4"]["weights_bytes"]
    assert budget(2 * TIB) == 2 * TIB - int(2 * TIB * 0.10) - weights
    assert kvo.reserve_bytes(256 * GIB) == 64 * GIB and kvo.reserve_bytes(2 * TIB) == int(2 * TIB * 0.10)
    assert budget(2 * TIB, nodes=2) == 2 * TIB - int(2 * TIB * 0.10) - weights // 2
    assert budget(2 * TIB, shm=640 * GIB) == budget(2 * TIB) - 640 * GIB
    assert budget(256 * GIB) == 0


def test_unset_sizes_the_tier_from_the_host_and_says_why():
    dep = resolve(H200x8, "int4", "sglang", kv_offload="host", host_memory_bytes=2 * TIB)
    tier = dep["kv_offload"]
    assert tier["size_bytes"] == budget(2 * TIB) // GIB * GIB
    assert arg(dep["argv"], "--hicache-size") == str(tier["size_bytes"] // 8 // GB)
    assert "sized from the host's memory" in tier["why"] and "max(64 GiB, 10% of RAM)" in tier["why"]
    assert tier["why"] in dep["reasons"]
    assert any(tier["why"] in line for line in plan_lines(dep))


def test_trtllm_counts_its_dev_shm_staging():
    dep = resolve(B200x8, "nvfp4", "trtllm", kv_offload="host", host_memory_bytes=2 * TIB)
    assert dep["kv_offload"]["size_bytes"] == budget(2 * TIB, "nvfp4", shm=640 * GIB) // GIB * GIB
    assert "/dev/shm" in dep["kv_offload"]["why"]


def test_the_floor_is_kimi_weights_warm_reserve():
    with open(os.path.join(ROOT, "roles", "kimi_weights", "defaults", "main.yml")) as handle:
        defaults = yaml.safe_load(handle)
    assert kvo.HOST_RESERVE["floor_bytes"] == defaults["kimi_weights_warm_reserve_bytes"]


def test_the_site_reads_the_hosts_memory_from_its_facts():
    facts = {"h": {"ansible_facts": {"memtotal_mb": 2097152}}}

    def get(host, variable):
        return facts.get(host, {}).get(variable, MISSING)
    assert site_inputs(get, "h", ["h"], [])["host_memory_bytes"] == 2 * TIB
    assert site_inputs(lambda h, v: MISSING, "h", ["h"], [])["host_memory_bytes"] is None


def test_sglang_warns_when_each_ranks_host_pool_is_no_larger_than_its_gpu_pool():
    small = resolve(H200x8, "int4", "sglang", kv_offload="host", kv_offload_gb=8, host_memory_bytes=2 * TIB)
    assert any("larger than the device pool" in w for w in small["warnings"])
    large = resolve(H200x8, "int4", "sglang", kv_offload="host", host_memory_bytes=2 * TIB)
    assert not any("larger than the device pool" in w for w in large["warnings"])
    assert large["kv_offload"]["tokens"] > large["hardware"]["kv_tokens_estimate"]
