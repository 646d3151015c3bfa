"""Engines as data: each engine version's argv and config checked against its own list, version selection, TensorRT-LLM."""
import json
import os

import pytest

from ansible_collections.kimi.deploy.plugins.module_utils._model import deployment as dm
from ansible_collections.kimi.deploy.plugins.module_utils._engines import registry as eng
from ansible_collections.kimi.deploy.plugins.module_utils._model.report import plan_lines

from test_deployment import A3x16, B200x8, H200x8, RTX8, SHA, gpus

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
FLAGS_DIR = os.path.join(ROOT, "tests", "fixtures", "engine_flags")
GB200x4 = gpus("NVIDIA GB200", "10.0", 189471, 4)
TRTLLM = eng.ENGINES["trtllm"]["default_version"]


def resolve(gpu_list=None, **inputs):
    inputs.setdefault("revisions", {"int4": SHA, "nvfp4": SHA, "w4a8": SHA, "mxfp4": SHA})
    return dm.resolve(inputs, gpu_list)


def flags(engine, version):
    with open(os.path.join(FLAGS_DIR, "engine_flags_%s-%s.json" % (engine, version))) as handle:
        return json.load(handle)


def parse(engine, version, argv):
    """argv read against the version's own list, as its parser would (full names only): {option: value or True}."""
    data = flags(engine, version)
    options = dict(data["options"])
    for spec in data["options"].values():
        for alias in spec.get("aliases") or ():
            options[alias] = spec
    positionals = len(data.get("positionals", ["model"] if engine == "trtllm" else []))
    seen, index = {}, 0
    while index < len(argv):
        token = argv[index]
        if not token.startswith("-"):
            assert positionals > 0 or engine == "vllm", "stray value %r in %s %s argv" % (token, engine, version)
            positionals -= 1
            index += 1
            continue
        assert token in options, "%s is not an option of %s %s" % (token, engine, version)
        spec = options[token]
        if spec["takes_value"]:
            value = argv[index + 1]
            if spec.get("choices"):
                assert value in [str(c) for c in spec["choices"]], (token, value)
            seen[token] = value
            index += 2
        else:
            seen[token] = True
            index += 1
    return seen


RELEASE_ROWS = [(e, v, q) for e, spec in sorted(eng.ENGINES.items()) for v in sorted(spec["versions"])
                for q in sorted(spec["quants"]) if q in spec["versions"][v]["images"]]


@pytest.mark.parametrize("engine, version, quant", RELEASE_ROWS)
def test_every_release_renders_an_argv_its_own_parser_takes(engine, version, quant):
    spec = eng.ENGINES[engine]
    hardware = B200x8 if engine == "trtllm" else A3x16 if spec["platform"] == "ascend" else RTX8
    model = "kimi-k3" if quant == "mxfp4" else None  # the one model whose checkpoint it is
    dep = resolve(hardware, quant=quant, engine=spec["name"], engine_version=version, model=model)
    assert (dep["engine_build"], dep["engine_version"]) == (engine, version)
    entry = dep["command"][:len(spec["entrypoint"])]
    assert entry == list(spec["entrypoint"])
    table = eng.options(engine, version)
    seen = parse(table["engine"], table["version"], dep["command"][len(entry):])
    assert seen, dep["command"]
    for key in (dep["engine_config"] or {}):  # the YAML's keys, each in the version's LLM-API schema
        assert key in flags(engine, version)["llm_args"]["fields"], key


@pytest.mark.parametrize("engine, option, old, new", [
    ("sglang", ["--attn-dp-size", "2"], "0.5.12.post1", "0.5.23"),   # new in 0.5.23
    ("sglang", ["--cuda-graph-max-bs", "64"], "0.5.23", "0.5.12.post1"),  # gone in 0.5.23
])
def test_a_flag_of_one_release_is_refused_for_the_other(engine, option, old, new):
    with pytest.raises(dm.DeploymentError, match=r"%s is not an option of %s %s" % (option[0], engine, old.replace(
            ".", r"\."))):
        resolve(RTX8, quant="int4", engine=engine, engine_version=old, extra_args=option)
    assert resolve(RTX8, quant="int4", engine=engine, engine_version=new, extra_args=option)["argv"][-2:] == option


def test_an_unknown_version_is_refused_naming_the_known_ones_and_the_command():
    with pytest.raises(dm.DeploymentError, match=r"kimi_engine_version='0\.30\.0'.*Allowed values of kimi_engine_version "
                                                 r"for engine=vllm: 0\.22\.1, 0\.33\.0\. Add a release with: make engine-flags ENGINE=vllm "
                       r"VERSION=<version>"):
        resolve(RTX8, quant="int4", engine="vllm", engine_version="0.30.0")


def test_the_image_tag_selects_the_version_and_must_agree_with_kimi_engine_version():
    dep = resolve(RTX8, quant="int4", engine="sglang", image="mirror.local/lmsysorg/sglang:v0.5.23-cu130")
    assert dep["engine_version"] == "0.5.23" and dep["image"] == "mirror.local/lmsysorg/sglang:v0.5.23-cu130"
    assert any("named by the tag of kimi_engine_image" in r for r in dep["reasons"])
    with pytest.raises(dm.DeploymentError, match=r"kimi_engine_version='0\.5\.12\.post1'.*names sglang 0\.5\.23"):
        resolve(RTX8, quant="int4", engine="sglang", image="lmsysorg/sglang:v0.5.23-cu130",
                engine_version="0.5.12.post1")
    with pytest.raises(dm.DeploymentError, match=r"names sglang 0\.5\.20, which has no flag list"):
        resolve(RTX8, quant="int4", engine="sglang", image="lmsysorg/sglang:v0.5.20-cu130")
    untagged = resolve(RTX8, quant="int4", engine="sglang", image="mirror.local/sglang:latest")
    assert untagged["engine_version"] == "0.5.12.post1"
    assert any("names no version in its tag: it is trusted" in r for r in untagged["reasons"])


@pytest.mark.parametrize("image, version", [
    ("vllm/vllm-openai:v0.22.1", "0.22.1"), ("lmsysorg/sglang:v0.5.12.post1-cu130", "0.5.12.post1"),
    ("nvcr.io/nvidia/tensorrt-llm/release:1.2.1", "1.2.1"), ("registry:5000/vllm", None),
    ("kimi-k26-nvfp4-vllm:cu130-mla", None), ("vllm/vllm-openai@sha256:" + "a" * 64, None),
    ("reg.local:5000/vllm/vllm-openai:v0.33.0@sha256:" + "b" * 64, "0.33.0"), ("x/trt:1.3.0rc17", "1.3.0rc17"),
])
def test_image_version(image, version):
    assert eng.image_version(image) == version


def test_the_plan_says_which_version_and_why():
    dep = resolve(RTX8, quant="int4", engine="sglang")
    assert "SGLang 0.5.12.post1: the default, the sm_120 runbook" in " ".join(dep["reasons"])
    assert dep["engine_verified"]
    newer = resolve(RTX8, quant="int4", engine="sglang", engine_version="0.5.23")
    assert newer["engine_verified"] is None and "set by kimi_engine_version" in " ".join(newer["reasons"])


# --- TensorRT-LLM ---------------------------------------------------------------------------------------------

def test_trtllm_nvfp4_on_b200_writes_the_yaml_and_the_command():
    dep = resolve(B200x8, quant="nvfp4", engine="trtllm")
    assert dep["identity"] == "nvfp4-trtllm" and dep["engine_version"] == TRTLLM
    assert dep["command"][0] == "trtllm-serve" and dep["argv"] == dep["command"]
    assert dep["command"][1:4] == ["nvidia/Kimi-K2.6-NVFP4", "--revision", SHA]  # the pinned commit, offline
    assert dep["served_model_name"] == "nvidia/Kimi-K2.6-NVFP4"  # trtllm-serve names the model after its argument
    assert dep["engine_config_path"] == "/etc/kimi-k26/engine-config.yaml"
    config = dep["engine_config"]
    assert config["tensor_parallel_size"] == 8 and config["moe_expert_parallel_size"] == 8
    assert config["enable_attention_dp"] is True and config["trust_remote_code"] is True
    assert config["kv_cache_config"] == {"dtype": "fp8", "free_gpu_memory_fraction": 0.75}
    assert config["max_batch_size"] == 128 and config["max_num_tokens"] == 8448
    assert config["max_seq_len"] == dep["context_length"]
    assert dep["hardware"]["fits"] and "attention data parallel 8" in dep["hardware"]["fit_reason"]
    assert dep["shm_bytes_required"] == 640 * 1024 ** 3
    assert dep["verify_checks"] == ["health", "models", "text", "text_no_thinking", "tool", "vision"]
    # The 1.3.0rc17 list has kimi_k2 among its tool parsers but no Kimi reasoning parser: the plan says what clients see.
    assert (dep["tool_parser"], dep["reasoning_parser"]) == ("kimi_k2", None)
    assert "--reasoning_parser" not in dep["command"] and "--tool_parser" in dep["command"]
    assert any("has no Kimi reasoning parser: the thinking comes back inside content" in w for w in dep["warnings"])
    assert any("flag list is approximate" in w for w in dep["warnings"])


def test_trtllm_options_are_checked_key_by_key_against_the_schema():
    dep = resolve(B200x8, quant="nvfp4", engine="trtllm",
                  engine_options={"max_batch_size": 64, "kv_cache_config": {"enable_block_reuse": False}})
    assert dep["engine_config"]["max_batch_size"] == 64
    assert dep["engine_config"]["kv_cache_config"] == {"dtype": "fp8", "free_gpu_memory_fraction": 0.75,
                                                       "enable_block_reuse": False}
    with pytest.raises(dm.DeploymentError, match=(r"kimi_trtllm_options=.*kv_cache_config\.dtype is set by the "
                                                  r"collection; use kimi_kv_cache_dtype instead")):
        resolve(B200x8, quant="nvfp4", engine="trtllm", engine_options={"kv_cache_config": {"dtype": "auto"}})
    with pytest.raises(dm.DeploymentError, match=r"tensor_parallel_size is set by the collection; use "
                                                 r"kimi_tensor_parallel instead"):
        resolve(B200x8, quant="nvfp4", engine="trtllm", engine_options={"tensor_parallel_size": 4})
    with pytest.raises(dm.DeploymentError, match=r"max_batch_sizes is not an LLM-API option of trtllm"):
        resolve(B200x8, quant="nvfp4", engine="trtllm", engine_options={"max_batch_sizes": 4})
    with pytest.raises(dm.DeploymentError, match=r"kv_cache_config\.free_gpu_memory is not an LLM-API option"):
        resolve(B200x8, quant="nvfp4", engine="trtllm", engine_options={"kv_cache_config": {"free_gpu_memory": 1}})
    with pytest.raises(dm.DeploymentError, match=r"engine=sglang takes no config file"):
        resolve(RTX8, quant="int4", engine="sglang", engine_options={"max_batch_size": 4})


def test_attention_dp_off_changes_the_fit():
    adp = resolve(B200x8, quant="nvfp4", engine="trtllm")
    tp = resolve(B200x8, quant="nvfp4", engine="trtllm", engine_options={"enable_attention_dp": False})
    assert tp["attention_dp"] is False and "tensor parallel 8" in tp["hardware"]["fit_reason"]
    assert tp["hardware"]["kv_tokens_estimate"] > adp["hardware"]["kv_tokens_estimate"]  # weights split 8 ways


def test_trtllm_memory_knob_is_a_share_of_what_is_free_after_the_weights():
    low = resolve(B200x8, quant="nvfp4", engine="trtllm", mem_fraction=0.5)["hardware"]["kv_tokens_estimate"]
    high = resolve(B200x8, quant="nvfp4", engine="trtllm", mem_fraction=0.9)["hardware"]["kv_tokens_estimate"]
    assert abs(high / float(low) - 0.9 / 0.5) < 0.01  # proportional: the weights are outside the fraction
    with pytest.raises(dm.DeploymentError, match=r"kimi_mem_fraction=0\.95.*a share of the memory left after the "
                                                 r"weights.*\(0, 0\.9\] for kv_cache_config\.free_gpu_memory_fraction"):
        resolve(B200x8, quant="nvfp4", engine="trtllm", mem_fraction=0.95)


@pytest.mark.parametrize("gpu_list, inputs, message", [
    (B200x8, {"quant": "int4", "engine": "trtllm"}, r"engine=trtllm with quant=int4 is refused: TensorRT-LLM reads "
                                                    r"compressed-tensors checkpoints only as FP8"),
    (H200x8, {"quant": "nvfp4", "engine": "trtllm"}, r"quant=nvfp4 engine=trtllm is refused on 8 x NVIDIA H200 "
                                                     r"\(hopper, sm_90\).*datacenter Blackwell"),
    (RTX8, {"quant": "nvfp4", "engine": "trtllm"}, r"refused on 8 x NVIDIA RTX PRO 6000.*\(blackwell-rtx, sm_120\)"),
    (B200x8, {"quant": "nvfp4", "engine": "trtllm", "nodes": 2, "head_address": "10.0.0.1"},
     r"kimi_replica \(the hosts that share it\)=2 is not allowed: TensorRT-LLM runs a model over several hosts as one "
     r"MPI world"),
    (B200x8, {"quant": "nvfp4", "engine": "trtllm", "extra_args": ["--tp_size", "4"]},
     r"--tp_size is set by the collection .* use kimi_tensor_parallel instead"),
])
def test_trtllm_refusals(gpu_list, inputs, message):
    with pytest.raises(dm.DeploymentError, match=message):
        resolve(gpu_list, **inputs)


def test_trtllm_runs_on_gb200_too():
    assert resolve(GB200x4, quant="nvfp4", engine="trtllm")["tp"] == 4


def test_the_plan_prints_the_trtllm_command_and_the_yaml():
    lines = plan_lines(resolve(B200x8, quant="nvfp4", engine="trtllm"))
    text = "\n".join(lines)
    assert "command: trtllm-serve nvidia/Kimi-K2.6-NVFP4 --revision %s --host 127.0.0.1 --port 30000" % SHA in text
    assert "--config /etc/kimi-k26/engine-config.yaml" in text
    assert "config /etc/kimi-k26/engine-config.yaml, from <kimi_serve_config_dir>/nvfp4-trtllm.yaml on the host:" in lines
    assert "  kv_cache_config:" in lines and "    dtype: fp8" in lines
    assert '    free_gpu_memory_fraction: 0.75' in lines and "  enable_attention_dp: true" in lines
    assert "warning: TensorRT-LLM %s has no served-model-name option: clients send model=nvidia/Kimi-K2.6-NVFP4" % (
        TRTLLM) in text


def test_trtllm_refuses_a_served_model_name_it_cannot_serve():
    with pytest.raises(dm.DeploymentError, match=r"kimi_served_model_name='kimi-k2\.6' is not allowed: TensorRT-LLM "
                                                 r"1\.3\.0rc17 has no served-model-name option"):
        resolve(B200x8, quant="nvfp4", engine="trtllm", served_model_name="kimi-k2.6")


def test_the_b200_recommendation_names_trtllm_with_the_reason():
    rec = dm.recommend(B200x8)
    assert (rec["quant"], rec["engine"]) == ("nvfp4", "vllm")
    assert "vLLM over TensorRT-LLM here" in " ".join(rec["reasons"]) and "seed 003" in " ".join(rec["reasons"])


# --- the fit's advice names the user's own setting first ----------------------------------------------------------

def test_a_low_memory_fraction_is_told_to_raise_it_not_to_add_hosts():
    dep = resolve(RTX8, quant="int4", engine="sglang", mem_fraction=0.2)
    hw = dep["hardware"]
    assert not hw["fits"] and "With kimi_mem_fraction=0.85 it would fit" in hw["fit_reason"]
    assert hw["replica_advice"] is None and "host replica" not in " ".join(dep["reasons"])


def test_a_pool_no_setting_can_fix_still_gets_the_replica_advice():
    hw = resolve(gpus("NVIDIA H100 80GB HBM3", "9.0", 81559, 8), quant="int4", engine="vllm")["hardware"]
    assert not hw["fits"] and hw["replica_advice"].startswith("Does not fit alone; fits as a 2-host replica")
