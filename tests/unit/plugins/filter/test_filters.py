"""The filter plugins are thin adapters: same results, errors as AnsibleFilterError naming the filter."""
import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.kimi.deploy.plugins.filter.deployment import FilterModule as DeploymentFilters

RTX8 = [{"index": i, "name": "NVIDIA RTX PRO 6000 Blackwell Server Edition", "compute_cap": "12.0",
         "memory_mib": 97887} for i in range(8)]
SHA = "0123456789abcdef0123456789abcdef01234567"

deployment = DeploymentFilters().filters()["deployment"]


def test_deployment_filter():
    dep = deployment({"quant": "auto", "engine": "auto", "revisions": {"int4": SHA}}, RTX8)
    assert dep["identity"] == "int4-sglang" and dep["argv"][:3] == ["python3", "-m", "sglang.launch_server"]
    preview = deployment({"quant": "int4", "engine": "vllm"}, RTX8, require_revision=False)
    assert preview["checkpoint"]["revision"] is None
    with pytest.raises(AnsibleFilterError, match=r"^kimi\.deploy\.deployment: kimi_int4_revision is not set"):
        deployment({"quant": "int4", "engine": "vllm"}, RTX8)


@pytest.mark.parametrize("inputs, message", [
    ({"quant": "int4"}, r"quant=int4 engine=auto needs GPU facts"),
    ("int4-sglang", r"deployment inputs must be a dict, got str"),
    ({"quant": "int4", "engine": "sglang", "extra_args": ["--tensor-parallel-size", "4"]},
     r"kimi_engine_extra_args='--tensor-parallel-size' is not allowed: --tensor-parallel-size is set by the "
     r"collection .*use kimi_tensor_parallel instead"),
])
def test_deployment_filter_refusals_come_from_the_resolver(inputs, message):
    with pytest.raises(AnsibleFilterError, match=r"^kimi\.deploy\.deployment: " + message):
        deployment(inputs, [], require_revision=False)
