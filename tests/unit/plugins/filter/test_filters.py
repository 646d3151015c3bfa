"""The filter plugins are thin adapters: same results, errors as AnsibleFilterError naming the filter."""
import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.kimi.deploy.plugins.filter.deployment import FilterModule as DeploymentFilters
from ansible_collections.kimi.deploy.plugins.filter.engine_flags import FilterModule as EngineFlagsFilters
from ansible_collections.kimi.deploy.plugins.filter.recommend import FilterModule as RecommendFilters

RTX8 = [{"index": i, "name": "NVIDIA RTX PRO 6000 Blackwell Server Edition", "compute_cap": "12.0",
         "memory_mib": 97887} for i in range(8)]
SHA = "0123456789abcdef0123456789abcdef01234567"

recommend = RecommendFilters().filters()["recommend"]
engine_flags = EngineFlagsFilters().filters()["engine_flags"]
deployment = DeploymentFilters().filters()["deployment"]


def test_recommend_filter():
    rec = recommend(RTX8)
    assert set(["quant", "engine", "kv_cache_dtype", "moe_backend", "fits", "reasons"]) <= set(rec)
    assert (rec["quant"], rec["engine"], rec["fits"]) == ("int4", "sglang", True)
    assert rec["fit_reason"].startswith("Fits: ") and rec["vram_total_mib"] == 8 * 97887
    assert recommend(RTX8, min_kv_tokens=10 ** 7)["fits"] is False


def test_recommend_filter_error():
    with pytest.raises(AnsibleFilterError, match=r"^kimi\.deploy\.recommend: .*compute_cap"):
        recommend([{"name": "x", "memory_mib": 1}])


def test_engine_flags_filter():
    argv = engine_flags({"quant": "int4", "engine": "sglang", "tp": 8})
    assert argv[:3] == ["python3", "-m", "sglang.launch_server"] and "--tp-size" in argv
    with pytest.raises(AnsibleFilterError, match=r"^kimi\.deploy\.engine_flags: engine=sglang with quant=nvfp4"):
        engine_flags({"quant": "nvfp4", "engine": "sglang"})


def test_engine_flags_filter_returns_a_resolved_deployments_argv():
    dep = deployment({"quant": "int4", "engine": "vllm", "tp": 4, "revisions": {"int4": SHA}}, RTX8)
    assert engine_flags(dep) == dep["argv"] and dep["argv"][dep["argv"].index("--tensor-parallel-size") + 1] == "4"
    assert engine_flags(dict(dep, argv=["x"])) == ["x"]  # rendered once, by resolve: not re-derived


@pytest.mark.parametrize("inputs, message", [
    ({"quant": "int4"}, r"quant=int4 engine=auto needs GPU facts"),
    ("int4-sglang", r"deployment inputs must be a dict, got str"),
    ({"quant": "int4", "engine": "sglang", "extra_args": ["--tensor-parallel-size", "4"]},
     r"kimi_engine_extra_args='--tensor-parallel-size' is not allowed: --tensor-parallel-size is set by the "
     r"collection .*use kimi_tensor_parallel instead"),
])
def test_engine_flags_filter_refusals_come_from_the_resolver(inputs, message):
    with pytest.raises(AnsibleFilterError, match=r"^kimi\.deploy\.engine_flags: " + message):
        engine_flags(inputs)


def test_deployment_filter():
    dep = deployment({"quant": "auto", "engine": "auto", "revisions": {"int4": SHA}}, RTX8)
    assert dep["identity"] == "int4-sglang" and dep["argv"] == engine_flags(dep)
    preview = deployment({"quant": "int4", "engine": "vllm"}, RTX8, require_revision=False)
    assert preview["checkpoint"]["revision"] is None
    with pytest.raises(AnsibleFilterError, match=r"^kimi\.deploy\.deployment: kimi_int4_revision is not set"):
        deployment({"quant": "int4", "engine": "vllm"}, RTX8)
