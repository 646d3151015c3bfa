"""Speculative decoding in the deployment model (_speculative): the argv for each engine and method against the
pinned flag lists, the knobs, the refusals with their reasons, the draft in the fit, the draft's config against the
target's, and the acceptance read from each engine's metrics."""
import json

import pytest

from ansible_collections.kimi.deploy.plugins.module_utils._model import deployment as dm
from ansible_collections.kimi.deploy.plugins.module_utils._model import fit as fitm
from ansible_collections.kimi.deploy.plugins.module_utils._model.checkpoints import DRAFTS
from ansible_collections.kimi.deploy.plugins.module_utils._engines.cli import option_index
from ansible_collections.kimi.deploy.plugins.module_utils._engines.registry import ENGINES, options
from ansible_collections.kimi.deploy.plugins.module_utils._model.inputs import DeploymentError
from ansible_collections.kimi.deploy.plugins.module_utils._model.report import plan_lines
from ansible_collections.kimi.deploy.plugins.module_utils._model.speculative import DRAFT_METHODS, acceptance, draft_mismatch
from test_deployment import A3x16, B200x8, RTX8, SHA

DRAFT_SHA = "b" * 40


def resolve(gpus, quant, engine, **inputs):
    """A deployment with the draft pinned where the method loads one (n-gram and none refuse a draft revision)."""
    pinned = {"speculative_draft_revision": DRAFT_SHA} if inputs.get("speculative") in DRAFT_METHODS else {}
    return dm.resolve(dict({"quant": quant, "engine": engine, "revisions": {quant: SHA}}, **dict(pinned, **inputs)), gpus)


def arg(argv, option):
    return argv[argv.index(option) + 1]


def test_none_is_the_default_and_emits_nothing():
    dep = resolve(RTX8, "int4", "sglang")
    assert dep["speculative"] is None and not [a for a in dep["argv"] if a.startswith("--speculative")]
    assert "speculative" not in dep["verify_checks"]


def test_sglang_eagle3_emits_the_tree_and_the_pinned_draft():
    dep = resolve(RTX8, "int4", "sglang", speculative="eagle3")
    argv = dep["argv"]
    assert arg(argv, "--speculative-algorithm") == "EAGLE3"
    assert arg(argv, "--speculative-draft-model-path") == "AQ-MedAI/Kimi-K26-eagle3"
    assert arg(argv, "--speculative-draft-model-revision") == DRAFT_SHA
    # the draft's published knobs: 3 steps, topk 1, 4 draft tokens (SGLang's own pick for Kimi too)
    assert (arg(argv, "--speculative-num-steps"), arg(argv, "--speculative-eagle-topk"),
            arg(argv, "--speculative-num-draft-tokens")) == ("3", "1", "4")
    assert "speculative" in dep["verify_checks"]
    assert dep["speculative"]["metrics"]["accept_length"] == "sglang:spec_accept_length"


@pytest.mark.parametrize("tokens, topk, draft_tokens, expected", [
    (4, None, None, ("4", "1", "5")),            # seed 001's chain: steps 4, topk 1, 5 draft tokens
    (3, 4, None, ("3", "4", "13")),              # a tree: up to 1 + topk x steps
    (3, 4, 8, ("3", "4", "8")),
])
def test_sglang_eagle3_knobs(tokens, topk, draft_tokens, expected):
    dep = resolve(RTX8, "int4", "sglang", speculative="eagle3", speculative_tokens=tokens, speculative_topk=topk,
                  speculative_draft_tokens=draft_tokens)
    argv = dep["argv"]
    assert (arg(argv, "--speculative-num-steps"), arg(argv, "--speculative-eagle-topk"),
            arg(argv, "--speculative-num-draft-tokens")) == expected


def test_sglang_refuses_a_chain_of_the_wrong_length():
    with pytest.raises(DeploymentError, match=r"kimi_speculative_draft_tokens=6 .*kimi_speculative_topk 1 SGLang "
                                              r"verifies one chain of kimi_speculative_tokens \+ 1 tokens.*Allowed "
                                              r"values: 4, unset"):
        resolve(RTX8, "int4", "sglang", speculative="eagle3", speculative_draft_tokens=6)


@pytest.mark.parametrize("quant, method, config", [
    ("int4", "eagle3", {"method": "eagle3", "model": "lightseekorg/kimi-k2.6-eagle3", "num_speculative_tokens": 3,
                        "revision": DRAFT_SHA}),
    ("nvfp4", "dflash", {"method": "dflash", "model": "z-lab/Kimi-K2.6-DFlash", "num_speculative_tokens": 15,
                         "revision": DRAFT_SHA}),
    ("int4", "ngram", {"method": "ngram", "num_speculative_tokens": 4}),
])
def test_vllm_speculative_config_json(quant, method, config):
    dep = resolve(RTX8, quant, "vllm", speculative=method)
    assert json.loads(arg(dep["argv"], "--speculative-config")) == config
    assert dep["speculative"]["flags"] == ["--speculative-config", arg(dep["argv"], "--speculative-config")]


def test_every_emitted_flag_is_in_the_pinned_lists():
    """The speculative flags of each engine build and version exist in that version's generated list."""
    cases = [(RTX8, "int4", "sglang", "eagle3"), (RTX8, "int4", "sglang", "ngram"), (RTX8, "int4", "sglang", "dflash"),
             (RTX8, "int4", "vllm", "eagle3"), (RTX8, "int4", "vllm", "dflash"), (RTX8, "int4", "vllm", "ngram"),
             (A3x16, "w4a8", "vllm", "eagle3"), (A3x16, "w4a8", "vllm", "dflash"), (A3x16, "w4a8", "sglang", "eagle3")]
    for gpus, quant, engine, method in cases:
        for version in ENGINES[dm.resolve({"quant": quant, "engine": engine}, gpus, False)["engine_build"]]["versions"]:
            dep = resolve(gpus, quant, engine, speculative=method, engine_version=version)
            index = option_index(options(dep["engine_build"], version))
            emitted = [t for t in dep["speculative"]["flags"] if t.startswith("--")]
            assert emitted and all(t in index for t in emitted), (engine, version, emitted)


def test_sglang_ascend_loads_the_draft_unquantized():
    dep = resolve(A3x16, "w4a8", "sglang", speculative="eagle3", speculative_tokens=4)
    argv = dep["argv"]
    assert arg(argv, "--speculative-draft-model-quantization") == "unquant"  # seed 001
    assert (arg(argv, "--speculative-num-steps"), arg(argv, "--speculative-num-draft-tokens")) == ("4", "5")


def test_sglang_dflash_takes_the_block_from_the_draft():
    dep = resolve(RTX8, "int4", "sglang", speculative="dflash")
    assert arg(dep["argv"], "--speculative-algorithm") == "DFLASH"
    assert "--speculative-num-draft-tokens" not in dep["argv"] and "--speculative-num-steps" not in dep["argv"]
    with pytest.raises(DeploymentError, match=r"kimi_speculative_tokens=8 .*one block of the size the draft's config.json gives"):
        resolve(RTX8, "int4", "sglang", speculative="dflash", speculative_tokens=8)


@pytest.mark.parametrize("gpus, quant, engine, extra, message", [
    (B200x8, "nvfp4", "trtllm", {}, r"kimi_speculative='eagle3' is not allowed: TensorRT-LLM 1.3.0rc17: speculative "
                                    r"decoding is not offered on TensorRT-LLM yet.*Allowed values: none"),
    (RTX8, "int4", "vllm", {"speculative_topk": 2}, r"kimi_speculative_topk=2 .*vLLM drafts one chain"),
    (RTX8, "int4", "vllm", {"speculative_draft": "z-lab/Kimi-K2.6-DFlash"},
     r"z-lab/Kimi-K2.6-DFlash is a dflash draft, not eagle3.*Allowed values: AQ-MedAI/Kimi-K26-eagle3, "
     r"lightseekorg/kimi-k2.6-eagle3"),
    (RTX8, "int4", "vllm", {"speculative_tokens": 17}, r"kimi_speculative_tokens=17 .*an integer from 1 to 16"),
    (RTX8, "int4", "vllm", {"tp": 4, "pp": 2}, r"vLLM 0.22.1: EAGLE-3 and DFlash drafts need the target's aux hidden "
                                               r"states on one stage.*pipeline parallel"),
    (RTX8, "int4", "sglang", {"tp": 4, "pp": 2}, r"SGLang 0.5.12.post1: pipeline parallelism is not compatible with "
                                                 r"speculative decoding"),
    (A3x16, "w4a8", "sglang", {"speculative": "ngram"}, r"SGLang-Ascend 0.5.13.post1: SGLang's n-gram drafter runs on "
                                                        r"CUDA only"),
    (A3x16, "w4a8", "sglang", {"speculative": "dflash"}, r"DFlash is refused with DP attention"),
    (RTX8, "int4", "vllm", {"speculative_draft_revision": "main"}, r"kimi_speculative_draft_revision"),
    (RTX8, "int4", "sglang", {"speculative": "ngram", "speculative_draft": "AQ-MedAI/Kimi-K26-eagle3"},
     r"kimi_speculative_draft='AQ-MedAI/Kimi-K26-eagle3' .*n-gram method drafts from the prompt"),
    (RTX8, "int4", "sglang", {"speculative": "medusa"}, r"kimi_speculative='medusa' .*Allowed values: none, eagle3, "
                                                        r"dflash, ngram"),
    (RTX8, "int4", "sglang", {"speculative": "none", "speculative_tokens": 3}, r"kimi_speculative is none"),
])
def test_refusals_name_the_variable_and_the_reason(gpus, quant, engine, extra, message):
    extra = dict({"speculative": "eagle3"}, **extra)
    with pytest.raises(DeploymentError, match=message):
        resolve(gpus, quant, engine, **extra)


def test_a_method_missing_from_the_version_list_is_refused(monkeypatch):
    """The version's own list decides: a release whose list lacks DFLASH refuses it, naming what it has."""
    opts = options("sglang", "0.5.12.post1")
    monkeypatch.setitem(opts["values"], "speculative_algorithm", ("EAGLE", "EAGLE3", "NGRAM"))
    with pytest.raises(DeploymentError, match=r"SGLang 0.5.12.post1 does not accept --speculative-algorithm DFLASH "
                                              r"\(its methods: EAGLE, EAGLE3, NGRAM\).*Allowed values: none, eagle3, "
                                              r"ngram"):
        resolve(RTX8, "int4", "sglang", speculative="dflash")


def test_an_unpinned_draft_is_a_plan_warning_and_an_unknown_one_is_estimated():
    dep = dm.resolve({"quant": "int4", "engine": "vllm", "speculative": "eagle3",
                      "speculative_draft": "acme/kimi-eagle3"}, RTX8, require_revision=False)
    assert any("kimi_speculative_draft_revision is not set" in w for w in dep["warnings"])
    assert any("acme/kimi-eagle3 is not a draft this collection knows" in w for w in dep["warnings"])
    lines = plan_lines(dep)
    assert "speculative flags (vLLM): --speculative-config " in "\n".join(lines)
    assert any(line.startswith("draft: acme/kimi-eagle3 @ NOT PINNED") for line in lines)


def test_the_fit_counts_the_draft_weights_and_its_kv():
    plain = resolve(RTX8, "int4", "sglang")
    spec = resolve(RTX8, "int4", "sglang", speculative="dflash")
    draft = DRAFTS["z-lab/Kimi-K2.6-DFlash"]
    assert spec["hardware"]["kv_tokens_estimate"] < plain["hardware"]["kv_tokens_estimate"]
    # GQA draft: 6 layers x K and V x one of 8 KV heads a rank (tp 8) x 128 x 1 byte (fp8)
    assert fitm.draft_kv_bytes_per_token(spec["speculative"]["draft"], "fp8_e4m3", 8) == 6 * 2 * 1 * 128
    expected = fitm.kv_capacity_tokens("int4", "sglang", "fp8_e4m3", 0.85, 97887, 8, draft=spec["speculative"]["draft"])
    assert spec["hardware"]["kv_tokens_estimate"] == expected
    assert "plus ~0.9 GB of the ~7.0 GB draft z-lab/Kimi-K2.6-DFlash" in spec["hardware"]["fit_reason"]
    assert draft["weights_bytes"] == spec["speculative"]["draft"]["weights_bytes"]


TARGET = {"text_config": {"hidden_size": 7168, "vocab_size": 163840, "num_hidden_layers": 61}}
EAGLE3 = {"architectures": ["LlamaForCausalLMEagle3"], "hidden_size": 7168, "vocab_size": 163840,
          "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 29, 57]}}


@pytest.mark.parametrize("change, method, message", [
    ({}, "eagle3", None),
    ({"hidden_size": 4096}, "eagle3", "has hidden_size 4096 and Kimi-K2.6 has 7168"),
    ({"hidden_size": 4096, "target_hidden_size": 7168}, "eagle3", None),   # a narrower draft over the target's states
    ({"vocab_size": 128256}, "eagle3", "has vocab_size 128256 and Kimi-K2.6's tokenizer has 163840"),
    ({"architectures": ["DFlashDraftModel"]}, "eagle3", "not an eagle3 draft's"),
    ({"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 40, 79]}}, "eagle3", "reads target layers [79]"),
    ({"architectures": ["DFlashDraftModel"], "mask_token_id": 200000}, "dflash", "mask_token_id 200000 is outside"),
])
def test_draft_mismatch(change, method, message):
    found = draft_mismatch(TARGET, dict(EAGLE3, **change), method, "acme/draft")
    assert found == message if message is None else message in found


def test_acceptance_from_each_engines_metrics():
    vllm = "\n".join([
        "# TYPE vllm:spec_decode_num_drafts_total counter",
        'vllm:spec_decode_num_drafts_total{engine="0",model_name="kimi-k2.6"} 10.0',
        'vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="kimi-k2.6"} 30.0',
        'vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="kimi-k2.6"} 18.0'])
    spec = resolve(RTX8, "int4", "vllm", speculative="eagle3")["speculative"]["metrics"]
    # vLLM's own formulas: 18 / 30 accepted, 1 + 18 / 10 tokens a step
    assert acceptance(vllm, spec) == {"accept_rate": 0.6, "mean_accepted_length": 2.8, "drafts": 10}
    assert acceptance(vllm.replace(" 10.0", " 0.0"), spec) is None
    sglang = ('sglang:spec_accept_length{model_name="kimi-k2.6",engine_type="unified",tp_rank="0"} 2.75\n'
              'sglang:spec_accept_rate{model_name="kimi-k2.6",engine_type="unified",tp_rank="0"} 0.58\n')
    spec = resolve(RTX8, "int4", "sglang", speculative="eagle3")["speculative"]["metrics"]
    assert acceptance(sglang, spec) == {"accept_rate": 0.58, "mean_accepted_length": 2.75, "drafts": None}
    assert acceptance("sglang:num_running_reqs 0\n", spec) is None


@pytest.mark.parametrize("method, why", [("none", "kimi_speculative is none"), ("ngram", "the n-gram method")])
@pytest.mark.parametrize("field, variable", [("speculative_draft", "kimi_speculative_draft"),
                                             ("speculative_draft_revision", "kimi_speculative_draft_revision")])
def test_a_draft_setting_without_a_draft_method_is_refused_alike(method, why, field, variable):
    """kimi_speculative_draft and kimi_speculative_draft_revision are refused alike where no draft is loaded (the
    revision was silently ignored under ngram while the draft was refused under none)."""
    value = DRAFT_SHA if field.endswith("revision") else "AQ-MedAI/Kimi-K26-eagle3"
    with pytest.raises(dm.DeploymentError) as refused:
        resolve(RTX8, "int4", "vllm", speculative=method, **{field: value})
    assert str(refused.value).startswith(variable + "=") and why in str(refused.value), str(refused.value)
