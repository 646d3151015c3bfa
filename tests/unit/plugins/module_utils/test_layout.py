"""The throughput-aware layout (issue 39): the ranking on every GPU profile, the anchors' picks, the user's choice
winning, and the data-parallel command line of each engine against every pinned flag list."""
import json
import os

import pytest

from ansible_collections.kimi.deploy.plugins.module_utils._engines import registry as eng
from ansible_collections.kimi.deploy.plugins.module_utils._model import deployment as dm
from ansible_collections.kimi.deploy.plugins.module_utils._model import layout as lm
from ansible_collections.kimi.deploy.plugins.module_utils._model.inputs import DeploymentError
from ansible_collections.kimi.deploy.plugins.module_utils._model.report import plan_lines
from ansible_collections.kimi.deploy.plugins.module_utils._model.site_inputs import INPUTS

from test_deployment import SHA

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
PROFILES = os.path.join(ROOT, "tests", "fixtures", "gpus")


def profile(name):
    with open(os.path.join(PROFILES, name + ".json")) as handle:
        return json.load(handle)["kimi_gpus"]


def resolve(gpu_list, **inputs):
    inputs.setdefault("revisions", {"int4": SHA, "nvfp4": SHA, "w4a8": SHA})
    return dm.resolve(inputs, gpu_list)


NVIDIA_PROFILES = sorted(n[:-5] for n in os.listdir(PROFILES)
                         if n.endswith(".json") and not n.startswith(("ascend", "none")))


@pytest.mark.parametrize("name", NVIDIA_PROFILES)
def test_every_nvidia_profile_ranks_every_power_of_two_layout_with_a_reason(name):
    d = resolve(profile(name), quant="int4", engine="vllm")
    count = d["hardware"]["gpu_count"]
    layouts = d["layouts"]
    assert sorted((l["tp"], l["instances"]) for l in layouts) == sorted(
        (tp, count // tp) for tp in (1, 2, 4, 8, 16) if tp <= count and count % tp == 0)
    assert all(l["reason"] for l in layouts)
    if d["hardware"]["fits"]:  # the pick is the best-ranked layout that fits, and the deployment serves it
        assert layouts[0]["fits"] and (d["tp"], d["dp"]) == (layouts[0]["tp"], layouts[0]["instances"])
        assert d["instances"] == d["dp"]
    else:  # none fits: one instance over every GPU, whose fit says why (as before)
        assert (d["tp"], d["dp"]) == (count, 1)
    # Fits come before the layouts that do not; among those that fit, anchored ones first.
    fits = [l["fits"] for l in layouts]
    assert fits == sorted(fits, reverse=True)


def test_b200_nvfp4_picks_two_tp4_instances_from_the_published_anchor():
    d = resolve(profile("b200-x8"), quant="nvfp4", engine="vllm")
    assert (d["tp"], d["dp"], d["instances"]) == (4, 2, 2)
    best = d["layouts"][0]
    assert best["basis"] == "anchor" and best["tok_s_per_gpu"] == 3879
    assert "InferenceX" in best["reason"] and "3879" in best["reason"]
    assert any("TP4 x 2" in r and "best-ranked" in r for r in d["reasons"])
    # The fit is per data-parallel rank (the experts over all 8 GPUs) and fits.
    assert d["hardware"]["fits"] and "data parallel 2" in d["hardware"]["fit_reason"]
    # TP8 has no NVFP4 anchor: it ranks after, saying so.
    tp8 = [l for l in d["layouts"] if l["tp"] == 8][0]
    assert tp8["basis"] == "fit" and "no published anchor" in tp8["reason"]


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_h200_int4_keeps_tp8(engine):
    d = resolve(profile("h200-x8"), quant="int4", engine=engine)
    assert (d["tp"], d["dp"]) == (8, 1)
    assert d["layouts"][0]["basis"] == "anchor" and d["layouts"][0]["tok_s_per_gpu"] == 1175
    if engine == "sglang":  # the anchor is vLLM's: the reason says where it was measured
        assert "measured on vLLM" in d["layouts"][0]["reason"]


def test_b200_int4_keeps_tp8_and_trtllm_is_offered_one_instance_only():
    assert (resolve(profile("b200-x8"), quant="int4", engine="vllm")["tp"]) == 8
    d = resolve(profile("b200-x8"), quant="nvfp4", engine="trtllm")
    assert (d["tp"], d["dp"]) == (8, 1)
    refused = [l for l in d["layouts"] if l["instances"] > 1]
    assert refused and all(l["basis"] == "refused" and "single-instance" in l["reason"] for l in refused)


def test_without_an_anchor_the_single_instance_over_every_gpu_stays():
    d = resolve(profile("rtx-pro-6000-x8"), quant="int4", engine="vllm")
    assert (d["tp"], d["dp"]) == (8, 1)
    assert all(l["basis"] != "anchor" for l in d["layouts"])
    assert all("no published anchor" in l["reason"] for l in d["layouts"] if l["basis"] == "fit")


def test_the_users_choice_wins():
    gpus = profile("b200-x8")
    assert (resolve(gpus, quant="nvfp4", engine="vllm", tp=8)["tp"],
            resolve(gpus, quant="nvfp4", engine="vllm", tp=8)["dp"]) == (8, 1)
    d = resolve(gpus, quant="int4", engine="vllm", instances=2)
    assert (d["tp"], d["dp"]) == (4, 2)
    d = resolve(gpus, quant="nvfp4", engine="vllm", instances=1)
    assert (d["tp"], d["dp"]) == (8, 1)


def test_bad_layout_inputs_are_refused_naming_the_variable():
    gpus = profile("b200-x8")
    with pytest.raises(DeploymentError, match="kimi_instances=2 is not allowed.*single-instance"):
        resolve(gpus, quant="nvfp4", engine="trtllm", instances=2)
    with pytest.raises(DeploymentError, match="kimi_instances"):
        resolve(gpus, quant="nvfp4", engine="vllm", instances=4, tp=4)
    with pytest.raises(DeploymentError, match="kimi_instances=3 is not allowed.*Allowed values: 1, 2, 4, 8"):
        resolve(gpus, quant="nvfp4", engine="vllm", instances=3)
    with pytest.raises(DeploymentError, match="kimi_workload"):
        resolve(gpus, quant="nvfp4", engine="vllm", workload={"prompt": 10})
    with pytest.raises(DeploymentError, match="kimi_workload"):
        resolve(gpus, quant="nvfp4", engine="vllm", workload={"concurrency": 0})


def test_the_workload_changes_the_reason_not_the_anchor():
    d = resolve(profile("b200-x8"), quant="nvfp4", engine="vllm",
                workload={"input_tokens": 8192, "output_tokens": 1024, "concurrency": 64})
    assert "not this workload" not in d["layouts"][0]["reason"]
    d = resolve(profile("b200-x8"), quant="nvfp4", engine="vllm")
    assert "not this workload's 2048 / 512 at 32 concurrent" in d["layouts"][0]["reason"]


def test_the_chat_default_is_the_one_the_site_input_documents():
    doc = " ".join([i for i in INPUTS if i.variable == "kimi_workload"][0].doc)
    w = lm.DEFAULT_WORKLOAD
    assert "%d in, %d out, %d concurrent" % (w["input_tokens"], w["output_tokens"], w["concurrency"]) in doc


def test_every_anchor_cites_its_source_and_names_known_things():
    for anchor in lm.ANCHORS:
        assert "InferenceX" in anchor["source"]
        assert anchor["engine"] is None or anchor["engine"] in eng.ENGINES
        assert anchor["tp"] & (anchor["tp"] - 1) == 0 and anchor["tp"] * anchor["instances"] == 8
    keys = [(a["gpu"], a["arch"], a["quant"], a["engine"], a["tp"], a["instances"]) for a in lm.ANCHORS]
    assert len(keys) == len(set(keys)), "one row per key"


def test_the_plan_prints_the_ranking():
    lines = plan_lines(resolve(profile("b200-x8"), quant="nvfp4", engine="vllm"))
    ranked = [line for line in lines if line.startswith("layout ")]
    assert ranked[0].startswith("layout 1: TP4 x 2 instances: published anchor")
    assert len(ranked) == 4


# --- the data-parallel command line of each engine, against every pinned flag list ------------------------------

def _option_strings(key, version):
    return set(s for entry in eng.options(key, version)["dests"].values() for s in entry[1:])


DP_CASES = [(key, version) for key, spec in sorted(eng.ENGINES.items()) if spec.get("data_parallel")
            for version in sorted(spec["versions"])]


@pytest.mark.parametrize("key, version", DP_CASES)
def test_the_data_parallel_flags_exist_in_the_pinned_release(key, version):
    spec = eng.ENGINES[key]
    quant = "nvfp4" if "nvfp4" in spec["quants"] else sorted(spec["quants"])[0]
    d = resolve(profile("b200-x8"), quant=quant, engine=spec["name"], engine_version=version, instances=2)
    assert (d["tp"], d["dp"]) == (4, 2)
    argv = list(d["argv"])
    known = _option_strings(key, version)
    dp_args = [a for a in spec["args"] if a.field == "dp" and a.when is not None and a.when(d)]
    assert dp_args, "%s emits a data-parallel size" % key
    for arg in dp_args:
        assert arg.option in known, "%s is not in %s %s's flag list" % (arg.option, key, version)
        assert argv[argv.index(arg.option) + 1] == "2"
    tp_flag = [a.option for a in spec["args"] if a.field == "tp" and a.when is None][0]
    assert argv[argv.index(tp_flag) + 1] == "4"
    # One instance: no data-parallel flag at all.
    single = resolve(profile("b200-x8"), quant=quant, engine=spec["name"], engine_version=version, instances=1)
    assert not any(a.option in single["argv"] for a in dp_args)


def test_engines_without_data_parallelism_say_why():
    for key, spec in eng.ENGINES.items():
        if "data_parallel" in spec and spec["data_parallel"] is None:
            assert spec["data_parallel_why"]
        elif spec.get("data_parallel"):
            assert spec["data_parallel"]["experts"] in ("all", "instance") and spec["data_parallel"]["how"]


@pytest.mark.parametrize("name, engine, tp, dp", [("ascend-a3-x16", "vllm", 4, 4), ("ascend-a3-x16", "sglang", 16, 1)])
def test_an_engine_whose_layout_is_its_data_is_not_ranked(name, engine, tp, dp):
    d = resolve(profile(name), quant="w4a8", engine=engine)
    assert d["layouts"] is None and (d["tp"], d["dp"]) == (tp, dp)
    with pytest.raises(DeploymentError, match="kimi_instances"):
        resolve(profile(name), quant="w4a8", engine=engine, instances=2)
