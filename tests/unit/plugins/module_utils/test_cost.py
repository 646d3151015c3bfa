"""_cost: kimi_gpu_hour_cost turned into the host's cost per hour (the plan line and kimi_deployment.hour_cost, which
the node series, the dashboard and the benchmark report read), and into a cost per million tokens; bad prices refused
naming the variable before anything runs."""
import pytest

from ansible_collections.kimi.deploy.plugins.module_utils._model.cost import check_costs, hour_cost, per_million_tokens
from ansible_collections.kimi.deploy.plugins.module_utils._model.deployment import resolve
from ansible_collections.kimi.deploy.plugins.module_utils._model.inputs import DeploymentError
from ansible_collections.kimi.deploy.plugins.module_utils._model.report import plan_lines

from test_deployment import H200x8 as H200
from test_site import SHA

INPUTS = {"quant": "int4", "engine": "sglang", "revisions": {"int4": SHA}}


def test_the_host_cost_per_hour_is_its_accelerators_at_their_price_and_the_plan_says_so():
    deployment = resolve(dict(INPUTS, gpu_hour_cost={"NVIDIA H200": 3.5, "NVIDIA B200": "5.9"}), H200)
    assert deployment["hour_cost"] == {"per_hour": 28.0, "accelerators": "8 x NVIDIA H200",
                                       "why": "8 x NVIDIA H200 at 3.5 per accelerator-hour"}
    assert "cost: 28.0 per hour (8 x NVIDIA H200 at 3.5 per accelerator-hour)" in plan_lines(deployment)


def test_no_price_means_no_cost_and_an_unpriced_model_is_a_warning_not_a_refusal():
    unset = resolve(INPUTS, H200)
    assert unset["hour_cost"]["per_hour"] is None and not [line for line in plan_lines(unset) if line.startswith("cost")]
    other = resolve(dict(INPUTS, gpu_hour_cost={"NVIDIA B200": 5.9}), H200)
    assert other["hour_cost"]["per_hour"] is None
    assert "no cost per hour for this host: kimi_gpu_hour_cost has no price for NVIDIA H200 (it prices NVIDIA B200)" \
        in other["warnings"]


@pytest.mark.parametrize("costs, words", [
    (["NVIDIA H200", 3.5], "kimi_gpu_hour_cost=['NVIDIA H200', 3.5] is not allowed. Allowed values: a mapping"),
    ({"NVIDIA H200": -1}, "the price of NVIDIA H200 is -1"),
    ({"NVIDIA H200": "cheap"}, "the price of NVIDIA H200 is 'cheap'"),
    ({"NVIDIA H200": True}, "the price of NVIDIA H200 is True"),
    ({"NVIDIA H200": float("nan")}, "the price of NVIDIA H200 is nan"),
])
def test_a_bad_price_is_refused_naming_the_variable(costs, words):
    with pytest.raises(DeploymentError, match="^kimi_gpu_hour_cost=") as refused:
        resolve(dict(INPUTS, gpu_hour_cost=costs), H200)
    assert words in str(refused.value)


def test_a_million_tokens_costs_the_hour_over_the_tokens_of_an_hour():
    per_hour = hour_cost({"count": 8, "models": ["NVIDIA H200"]}, check_costs({"NVIDIA H200": 2.5}))["per_hour"]
    assert per_hour == 20.0
    # 20 per hour at 1000 tokens/s: 3.6 M tokens an hour, 5.5556 per million
    assert per_million_tokens(per_hour, 1000.0) == pytest.approx(5.555556)
    assert per_million_tokens(None, 1000.0) is None and per_million_tokens(per_hour, 0) is None
    assert hour_cost(None, {"NVIDIA H200": 2.5})["why"] == "no accelerators read on this host"


def test_bench_yml_s_filter_reads_the_accelerators_as_the_deployment_does():
    """kimi.deploy.hour_cost: the facts a platform's facts module set, or kimi_gpus where given; a bad price refused."""
    from ansible.errors import AnsibleFilterError
    from ansible_collections.kimi.deploy.plugins.filter.hour_cost import hour_cost_filter
    costs = {"NVIDIA H200": 3.5}
    assert hour_cost_filter({"nvidia_gpus": H200}, costs)["per_hour"] == 28.0
    assert hour_cost_filter({}, costs, given=H200[:4])["per_hour"] == 14.0
    assert hour_cost_filter({}, costs)["why"] == "no accelerators read on this host"
    with pytest.raises(AnsibleFilterError, match="kimi.deploy.hour_cost: kimi_gpu_hour_cost="):
        hour_cost_filter({"nvidia_gpus": H200}, {"NVIDIA H200": "dear"})
