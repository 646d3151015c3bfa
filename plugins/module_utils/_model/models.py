# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The Kimi models the collection serves, one data entry each (kimi_model selects one). Private to kimi.deploy.

Adding the next Kimi is an entry here; where its engines need a newer release, that release's flag list (make
engine-flags, then its `versions` entry in _engines/<name>.py); a new quant also needs its kimi_<quant>_revision input
(_model/site_inputs.py, then make site-specs) and the engines' `quants` and `images` that serve it. Every
fact carries its source; a number nobody published is None, and what needs it refuses with the reason (never a guess).
An entry with `base` inherits the base's fields, its own replacing them (a shallow merge: a field given is whole).

Fields:
  title, architecture (the model class the engines register), source: where the entry's facts come from;
  checkpoints: {quant: {repo_id (None: not published), format, quant_method, weights_bytes (None: unknown),
               revision_variable, [non_expert_bytes], source}};
  replicated_weight_bytes: what tensor parallel does not split (held whole on every rank); non_expert_weight_bytes:
               the weights outside the routed experts (attention data parallel holds them whole);
  geometry:    layers, hidden, vocab, mla {layers, kv_lora_rank, qk_rope_head_dim} (the layers with a KV cache per
               token), linear None | {kind "kda", layers, num_heads, head_dim, num_k_heads, head_k_dim, conv_kernel}
               (the layers with a fixed state per sequence: _model/memory.py);
  max_context, vision, thinking ("optional" | "always"), reasoning_efforts (None | the reasoning_effort values),
  chat_format ("k2" | "k3": the output format the engine double and the probes speak);
  parsers:     {engine build: {"tool": names, "reasoning": names}} (first choice first; the first the release's flag
               list has is used), a build absent: no parser for it;
  engines:     {engine build: {"min": the first release that serves the model ("0": any), or None where no release
               does; "why": the source, or why none does (the refusal names it)}};
  image_floor: None | {"platform": the accelerator platform whose driver it is, "driver": the host driver branch the
               engine images need, "why"};
  drafts:      {repo_id: draft} (the speculative drafts known for it), default_drafts: {engine: {method: repo_id}};
  sampling:    the card's recommended sampling defaults, or None where the card gives none;
  layouts:     the published layouts [{gpus, hosts, tp, pp, engine, source}].
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.kimi.deploy.plugins.module_utils._common import GB

DEFAULT_MODEL = "kimi-k2.6"

# --- Kimi-K2.6 (the collection's first model; the values checkpoints.py used to declare) -------------------------
_K2_SOURCE = ("moonshotai/Kimi-K2.6 config.json (DeepseekV3 class: 61 layers, hidden 7168, kv_lora_rank 512, "
              "qk_rope_head_dim 64, vocab 163840) and the sm_120 runbook")
# The K2 family's drafts (Kimi-K2.6's: EAGLE-3 and DFlash), the fit's geometry of each (its own KV cache: layers x KV
# heads x head dim, or an MLA latent when kv_heads is None), its size (exact where the hub page gives it, else an
# estimate from the architecture: hf_snapshot's plan reports the exact bytes before download), its authors' knobs.
_K26_DRAFTS = {
    "lightseekorg/kimi-k2.6-eagle3": {
        "method": "eagle3",
        "architecture": "LlamaForCausalLMEagle3",
        # One Llama decoder layer over the target's aux hidden states: embeddings 163840 x 7168, fc 3 x 7168 -> 7168,
        # attention (64 heads, 8 KV heads of 128) over 2 x 7168 inputs, MLP 18432, LM head over a 32000-token draft
        # vocabulary: ~2.16B parameters in BF16 (an estimate).
        "weights_bytes": 4.3 * GB,
        "kv": {"layers": 1, "kv_heads": 8, "head_dim": 128},
        "tokens": 3,
        "source": "seed 004 (vLLM-Ascend's Kimi-K2.6 guide: --speculative-config method eagle3, "
                  "num_speculative_tokens 3, on prefill and decode)",
    },
    "AQ-MedAI/Kimi-K26-eagle3": {
        "method": "eagle3",
        "architecture": "LlamaForCausalLMEagle3",
        "weights_bytes": 4.3 * GB,  # the same Llama EAGLE-3 layout (an estimate)
        "kv": {"layers": 1, "kv_heads": 8, "head_dim": 128},
        "tokens": 3,
        "topk": 1,
        "draft_tokens": 4,
        "source": "its model card (huggingface.co/AQ-MedAI/Kimi-K26-eagle3: SGLang --speculative-num-steps 3 "
                  "--speculative-eagle-topk 1 --speculative-num-draft-tokens 4; mean accepted length 2.6-3.2)",
    },
    "z-lab/Kimi-K2.6-DFlash": {
        "method": "dflash",
        "architecture": "DFlashDraftModel",
        # Six decoder layers (64 heads, 8 KV heads of 128, MLP 18432) conditioned on target layers: ~6.96 GB in BF16,
        # as z-lab's Kimi-K2.5 DFlash (13.9 GB as float32 GGUF) and NVIDIA's Kimi-K2.7-Code-DFlash (6.96 GB).
        "weights_bytes": 6.96 * GB,
        "kv": {"layers": 6, "kv_heads": 8, "head_dim": 128},
        "tokens": 15,
        "gated": True,
        "source": "seed 004 (vLLM-Ascend's Kimi-K2.6 guide: --speculative-config method dflash, "
                  "num_speculative_tokens 15); gated on the hub: kimi_weights_hf_token must have access",
    },
}
_K2_PARSERS = {
    "vllm": {"tool": ("kimi_k2",), "reasoning": ("kimi_k2",)},
    "sglang": {"tool": ("kimi_k2",), "reasoning": ("kimi_k2",)},
    # TensorRT-LLM names K2.5/K2.6's reasoning parser kimi_k25 in releases that have it.
    "trtllm": {"tool": ("kimi_k2",), "reasoning": ("kimi_k25", "kimi_k2")},
    "vllm-ascend": {"tool": ("kimi_k2",), "reasoning": ("kimi_k2",)},
    "sglang-ascend": {"tool": ("kimi_k2",), "reasoning": ("kimi_k2",)},
}
# "0": every release this collection pins serves the K2 family (its flag lists were made for it).
_K2_ENGINES = dict((key, {"min": "0", "why": "every pinned release serves the K2 family"}) for key in _K2_PARSERS)

_K3_SOURCE = ("the vLLM 0.33.0 and SGLang 0.5.23 wheels on PyPI (their models/kimi_k3, configs/kimi_linear.py and "
              "mamba_utils.py), NVIDIA's TensorRT-LLM K3 deployment guide (github.com/NVIDIA/TensorRT-LLM, commit "
              "1ce3636a), NeMo AutoModel's Kimi-K3 page and the published config.json (huggingface.co/moonshotai/"
              "Kimi-K3, revision f831ab66)")

MODELS = {
    "kimi-k2.6": {
        "title": "Kimi-K2.6",
        "architecture": "KimiK25ForConditionalGeneration",
        "source": _K2_SOURCE,
        "checkpoints": {
            "int4": {
                "repo_id": "moonshotai/Kimi-K2.6",
                "format": "compressed-tensors INT4 QAT (Marlin MoE kernels, auto-detected)",
                "quant_method": "compressed-tensors",
                # Released size of the checkpoint (~595 GB of safetensors). hf_snapshot reads exact sizes.
                "weights_bytes": 595 * GB,
                "revision_variable": "kimi_int4_revision",
                "source": "huggingface.co/moonshotai/Kimi-K2.6",
            },
            "nvfp4": {
                "repo_id": "nvidia/Kimi-K2.6-NVFP4",
                "format": "ModelOpt NVFP4 (FP8 KV scales shipped)",
                "quant_method": "modelopt",
                "weights_bytes": 595 * GB,
                "revision_variable": "kimi_nvfp4_revision",
                "source": "huggingface.co/nvidia/Kimi-K2.6-NVFP4",
            },
            # Seed 004 (vLLM-Ascend --quantization ascend) and seed 001 (SGLang-Ascend --quantization modelslim): INT4
            # weights, INT8 activations, made with msModelSlim; the Ascend engines' own kernels, no CUDA path.
            "w4a8": {
                "repo_id": "Eco-Tech/Kimi-K2.6-W4A8",
                "format": "msModelSlim W4A8 (INT4 weights, INT8 activations; Ascend kernels only)",
                "quant_method": "ascend",
                # An estimate: the INT4 experts of the QAT checkpoint, the rest INT8 instead of BF16, so at most its
                # 595 GB (hf_snapshot reads the exact sizes from the hub when it downloads).
                "weights_bytes": 595 * GB,
                "revision_variable": "kimi_w4a8_revision",
                # W4A8 quantizes the attention and shared-expert projections to INT8 as well (~6.2B + 2.6B params at
                # 1 byte) and keeps the embeddings, LM head and vision tower in BF16 (~2.75B x 2): ~15 GB.
                "non_expert_bytes": 15 * GB,
                "source": "seeds 001 and 004 (the Ascend guides)",
            },
        },
        # Calibrated on the runbook's 8x97887 MiB measurements (SGLang 0.85 bf16 -> ~116K tokens; vLLM 0.95 bf16 ->
        # ~131K usable): embeddings, vision tower and dense layers, held whole on every rank.
        "replicated_weight_bytes": 4.7 * GB,
        # From Kimi-K2's config (hidden 7168, 61 layers, 64 MLA heads, q_lora 1536, kv_lora 512, vocab 163840, 1 dense
        # layer, 1 shared expert of 2048) in BF16: attention ~101M params x 61 = 6.2B, embeddings + LM head 2.35B,
        # shared experts 2.6B, dense MLP 0.4B, vision tower 0.4B: ~12B params, ~24 GB. An estimate: the NVFP4
        # checkpoint keeps them in BF16 (ModelOpt quantizes the experts).
        "non_expert_weight_bytes": 24 * GB,
        "geometry": {"layers": 61, "hidden": 7168, "vocab": 163840,
                     "mla": {"layers": 61, "kv_lora_rank": 512, "qk_rope_head_dim": 64, "heads": 64},
                     "linear": None},
        "max_context": 262144,  # the model's 256K window
        "vision": True,
        "thinking": "optional",
        "reasoning_efforts": None,
        "chat_format": "k2",
        "parsers": _K2_PARSERS,
        "engines": _K2_ENGINES,
        "image_floor": None,
        "drafts": _K26_DRAFTS,
        "default_drafts": {
            "vllm": {"eagle3": "lightseekorg/kimi-k2.6-eagle3", "dflash": "z-lab/Kimi-K2.6-DFlash"},
            "sglang": {"eagle3": "AQ-MedAI/Kimi-K26-eagle3", "dflash": "z-lab/Kimi-K2.6-DFlash"},
        },
        "sampling": None,  # the card gives none the collection applies (the engines read generation_config.json)
        "layouts": (
            {"gpus": "8 x RTX PRO 6000 Blackwell", "hosts": 1, "tp": 8, "pp": 1, "engine": "sglang, vllm",
             "source": "the sm_120 runbook"},
        ),
    },
    "kimi-k2.7-code": {
        "base": "kimi-k2.6",
        "title": "Kimi-K2.7-Code",
        "source": "huggingface.co/moonshotai/Kimi-K2.7-Code/raw/main/README.md (61 layers, 384 experts, top-8, MLA, "
                  "256K; tags compressed-tensors); K2.6's architecture (nvidia/Kimi-K2.7-Code-NVFP4: kimi_k25)",
        "checkpoints": {
            "int4": {
                "repo_id": "moonshotai/Kimi-K2.7-Code",
                "format": "compressed-tensors INT4 QAT (Marlin MoE kernels, auto-detected)",
                "quant_method": "compressed-tensors",
                # Unsloth's full-precision size (605 GB; its EN page says 610): no exact byte count was published.
                # hf_snapshot reads the exact sizes before it downloads.
                "weights_bytes": 605 * GB,
                "revision_variable": "kimi_int4_revision",
                "source": "unsloth.ai/docs/models/kimi-k2.7-code (Q8 lossless 605 GB)",
            },
            "nvfp4": {
                "repo_id": "nvidia/Kimi-K2.7-Code-NVFP4",
                "format": "ModelOpt NVFP4",
                "quant_method": "modelopt",
                "weights_bytes": None,  # not published: refused until it is
                "revision_variable": "kimi_nvfp4_revision",
                "source": "huggingface.co/nvidia/Kimi-K2.7-Code-NVFP4 (size not found)",
            },
        },
        "thinking": "always",  # Unsloth: "supports thinking only"; Venice: "always in thinking mode"
        # kimi_k2 parsers: the K2 chat template (kimi_k25 class); no K2.7-specific page was read (an assumption).
        "drafts": {
            "lightseekorg/kimi-k2.7-coder-eagle3.1-mla": {
                "method": "eagle3",
                "architecture": "Eagle3 MLA (one layer)",
                # One MLA layer: its KV is the 576-wide latent (kv_heads None); size not published: the largest
                # known draft's.
                "weights_bytes": 7 * GB,
                "kv": {"layers": 1, "kv_heads": None, "head_dim": None},
                "tokens": 3,
                "topk": 1,
                "draft_tokens": 4,
                "source": "its model card (SGLang 0.5.14 TP8 --speculative-num-steps 3 --speculative-eagle-topk 1)",
            },
            "AQ-MedAI/Kimi-K2.7-Code-eagle3": {
                "method": "eagle3",
                "architecture": "LlamaForCausalLMEagle3",
                "weights_bytes": 4.3 * GB,  # the Llama EAGLE-3 layout of K2.6's (an estimate)
                "kv": {"layers": 1, "kv_heads": 8, "head_dim": 128},
                "tokens": 3,
                "topk": 1,
                "draft_tokens": 4,
                "source": "its model card (steps 3, topk 1, draft tokens 4)",
            },
            "nvidia/Kimi-K2.7-Code-DFlash": {
                "method": "dflash",
                "architecture": "DFlashDraftModel",
                "weights_bytes": 6.96 * GB,  # model.safetensors on the hub page
                "kv": {"layers": 6, "kv_heads": 8, "head_dim": 128},
                "tokens": 15,
                "source": "huggingface.co/nvidia/Kimi-K2.7-Code-DFlash/tree/main (6.96 GB, released 07/09/2026)",
            },
        },
        "default_drafts": {
            "vllm": {"eagle3": "lightseekorg/kimi-k2.7-coder-eagle3.1-mla", "dflash": "nvidia/Kimi-K2.7-Code-DFlash"},
            "sglang": {"eagle3": "AQ-MedAI/Kimi-K2.7-Code-eagle3", "dflash": "nvidia/Kimi-K2.7-Code-DFlash"},
        },
        "layouts": (),  # none published for K2.7-Code beyond its drafts' TP8 benchmarks
    },
    "kimi-k3": {
        "title": "Kimi-K3",
        "architecture": "KimiK3ForConditionalGeneration",
        "source": _K3_SOURCE,
        "checkpoints": {
            "mxfp4": {
                "repo_id": "moonshotai/Kimi-K3",
                "format": "compressed-tensors MXFP4 routed experts (group 32), BF16 attention, shared experts and head",
                "quant_method": "compressed-tensors",
                "weights_bytes": 1561 * GB,
                "revision_variable": "kimi_mxfp4_revision",
                "source": "config.json quantization_config mxfp4-pack-quantized; 1.561 TB decimal, 96 safetensors "
                          "(SemiAnalysisAI/InferenceX PR #2403)",
            },
            "nvfp4": {
                "repo_id": "RedHatAI/Kimi-K3-NVFP4",
                "format": "compressed-tensors NVFP4 MoE (LLM Compressor)",
                "quant_method": "compressed-tensors",
                "weights_bytes": None,  # not published: refused until it is
                "revision_variable": "kimi_nvfp4_revision",
                "source": "huggingface.co/RedHatAI/Kimi-K3-NVFP4 (size not found)",
            },
        },
        # An estimate, to calibrate on a first run: what vLLM >= 0.28 holds whole on every rank (the router gates,
        # 896 x 7168 x 92 layers ~0.6B params, the MoonViT3d vision tower with --mm-encoder-tp-mode data, norms; the
        # shared experts are sharded since vLLM 0.28, #50912), with K2.6's calibrated 4.7 GB as the floor: ~10 GB.
        "replicated_weight_bytes": 10 * GB,
        "non_expert_weight_bytes": None,  # not measured: attention data parallel refuses it
        "geometry": {
            "layers": 93, "hidden": 7168, "vocab": 163840,
            # 24 gated MLA layers (every fourth, and the last two): the 576-wide latent per token.
            "mla": {"layers": 24, "kv_lora_rank": 512, "qk_rope_head_dim": 64, "heads": 96},
            # 69 Kimi Delta Attention layers: a fixed state per sequence (num_k_heads/head_k_dim = the heads', KDA
            # has no separate key heads).
            "linear": {"kind": "kda", "layers": 69, "num_heads": 96, "head_dim": 128, "num_k_heads": 96,
                       "head_k_dim": 128, "conv_kernel": 4},
        },
        "max_context": 1048576,
        "vision": True,
        "thinking": "always",  # Unsloth release notes ("thinking-only"); xorbitsai PR #5417
        "reasoning_efforts": ("low", "high", "max"),  # vLLM renderers/kimi_k3.py _K3_THINKING_EFFORTS
        "chat_format": "k3",
        "parsers": {
            "vllm": {"tool": ("kimi_k3",), "reasoning": ("kimi_k3",)},  # 0.33.0 tool_parsers, reasoning registries
            "sglang": {"tool": ("kimi_k3",), "reasoning": ("kimi_k3",)},  # 0.5.23 function_call_parser, parser names
        },
        "engines": {
            "vllm": {"min": "0.27.0", "why": "vLLM 0.27.0's release notes: Kimi K3 support (#50089, #50000, #50500 "
                                             "compressed-tensors quantized checkpoints)"},
            "sglang": {"min": "0.5.23", "why": "SGLang 0.5.23 has models/kimi_k3.py and the kimi_k3 parsers (the "
                                               "first release this collection read with them)"},
            "trtllm": {"min": None, "why": "no TensorRT-LLM release serves Kimi-K3 yet: NVIDIA's guide builds it "
                                           "from source (Blackwell only, no chat parsers until TRTLLM-14814)"},
            "vllm-ascend": {"min": None, "why": "vLLM-Ascend 0.20.2rc1 has no KDA code; K3 landed on the v0.26.0rc "
                                                "line (vllm-ascend PR #12950), with no release pinned here yet"},
            "sglang-ascend": {"min": None, "why": "SGLang 0.5.23 has Ascend KDA kernels, but no SGLang-Ascend image "
                                                  "or modelslim K3 checkpoint of it is pinned here yet"},
        },
        "image_floor": {"platform": "nvidia", "driver": 580, "why": "vLLM >= 0.27's images are CUDA 13 (torch 2.14, cutlass-dsl cu13 in "
                                              "0.33.0's METADATA), which needs the r580 driver or newer"},
        # DSpark drafts exist (vLLM 0.33.0 K3DSparkModel, --spec-method dspark; SGLang 0.5.23 DSPARK), but
        # kimi_speculative has no dspark method yet, and the checkpoint has no MTP layer (num_nextn_predict_layers 0):
        # no draft the collection can run.
        "drafts": {
            "RedHatAI/Kimi-K3-speculator.dspark": {
                "method": "dspark", "architecture": "K3DSparkModel", "weights_bytes": None,
                "kv": {"layers": 1, "kv_heads": None, "head_dim": None}, "tokens": 8,
                "source": "vllm-project/speculators PR #998 (--spec-method dspark --spec-tokens 8)"},
            "RadixArk/Kimi-K3-DSpark": {
                "method": "dspark", "architecture": "DSpark (GQA)", "weights_bytes": None,
                "kv": {"layers": 1, "kv_heads": 16, "head_dim": 64}, "tokens": None,
                "source": "ai-dynamo/aiconfigurator PR #1435; SGLang --speculative-algorithm DSPARK"},
        },
        "default_drafts": {},
        "sampling": None,  # the card text was not reachable
        "layouts": (
            {"gpus": "8 x B300", "hosts": 1, "tp": 8, "pp": 1, "engine": "sglang",
             "source": "SGLang cookbook, Kimi-K3 (docs.sglang.io/cookbook/autoregressive/Moonshotai/Kimi-K3): B300 1x8, "
                       "TP8"},
            {"gpus": "16 x B200", "hosts": 2, "tp": 1, "pp": 16, "engine": "sglang",
             "source": "SGLang cookbook, Kimi-K3: B200 2x8, --pp-size 16 --tp-size 1"},
            {"gpus": "16 x H200", "hosts": 2, "tp": None, "pp": None, "engine": "sglang",
             "source": "SGLang cookbook, Kimi-K3: H200 2x8 (its flags not read)"},
        ),
    },
    "kimi-k3.1-pro": {
        "base": "kimi-k3",
        "title": "Kimi-K3.1-Pro",
        # Only secondary sources (Apidog 2026-10-26, Venice, Novita): a post-trained K3, same architecture and 1M
        # context. No HF repo, revision, format or size was found: the checkpoint is refused until they are.
        "source": "apidog.com/jp/blog/how-to-use-kimi-k3-1-pro (a post-trained Kimi K3, same 2.8T MoE, 1M context, "
                  "always thinking); no published checkpoint found",
        "checkpoints": {
            "mxfp4": {
                "repo_id": None,
                "format": "K3's MXFP4 (assumed: no checkpoint published)",
                "quant_method": "compressed-tensors",
                "weights_bytes": None,
                "revision_variable": "kimi_mxfp4_revision",
                "source": "no moonshotai/Kimi-K3.1-Pro repository was found (unverified)",
            },
        },
        "drafts": {},
        "layouts": (),
    },
}


def model(name):
    """The entry `name` with its base's fields filled in."""
    entry = MODELS[name]
    out = dict(model(entry["base"])) if "base" in entry else {}
    out.update((k, v) for k, v in entry.items() if k != "base")
    out["name"] = name
    return out


MODEL_NAMES = tuple(sorted(MODELS))
# Every quant any model ships, and its revision variable (one kimi_<quant>_revision each).
QUANTS = tuple(sorted(set(q for name in MODEL_NAMES for q in model(name)["checkpoints"])))
