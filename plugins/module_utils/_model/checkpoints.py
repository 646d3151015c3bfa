# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Kimi-K2.6's checkpoints and the model geometry the fit needs. Private to kimi.deploy.

Which engine serves which checkpoint is the engines' data (_engines/<name>.py), not this file's.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# pylint: disable=unused-import
from ansible_collections.kimi.deploy.plugins.module_utils._common import GB, GIB, MIB  # noqa: F401 (re-exported)
# pylint: enable=unused-import

CHECKPOINTS = {
    "int4": {
        "repo_id": "moonshotai/Kimi-K2.6",
        "format": "compressed-tensors INT4 QAT (Marlin MoE kernels, auto-detected)",
        "quant_method": "compressed-tensors",
        # Released size of the checkpoint (~595 GB of safetensors). hf_snapshot reads exact sizes.
        "weights_bytes": 595 * GB,
        "revision_variable": "kimi_int4_revision",
    },
    "nvfp4": {
        "repo_id": "nvidia/Kimi-K2.6-NVFP4",
        "format": "ModelOpt NVFP4 (FP8 KV scales shipped)",
        "quant_method": "modelopt",
        "weights_bytes": 595 * GB,
        "revision_variable": "kimi_nvfp4_revision",
    },
    # Seed 004 (vLLM-Ascend --quantization ascend) and seed 001 (SGLang-Ascend --quantization modelslim): INT4 weights,
    # INT8 activations, made with msModelSlim; the Ascend engines' own kernels, no CUDA path.
    "w4a8": {
        "repo_id": "Eco-Tech/Kimi-K2.6-W4A8",
        "format": "msModelSlim W4A8 (INT4 weights, INT8 activations; Ascend kernels only)",
        "quant_method": "ascend",
        # An estimate: the INT4 experts of the QAT checkpoint, the rest INT8 instead of BF16, so at most its 595 GB
        # (hf_snapshot reads the exact sizes from the hub when it downloads).
        "weights_bytes": 595 * GB,
        "revision_variable": "kimi_w4a8_revision",
        "non_expert_bytes": 15 * GB,
    },
}
QUANTS = tuple(sorted(CHECKPOINTS))

MAX_CONTEXT = 262144  # the model's 256K window

# --- KV per token (MLA's latent KV: replicated on every tensor-parallel rank) ------------------------------------
# Kimi-K2 geometry: 61 layers x (kv_lora_rank 512 + rope 64) latent values per token.
KV_BYTES_PER_TOKEN = {"bf16": 61 * 576 * 2, "fp8": 61 * 576 * 1}
KV_ELEMENT = {"auto": "bf16", "bf16": "bf16", "fp8": "fp8", "fp8_e4m3": "fp8", "fp8_e5m2": "fp8"}

# --- Weights that tensor parallel does not split ----------------------------------------------------------------
# Calibrated on the runbook's 8x97887 MiB measurements (SGLang 0.85 bf16 -> ~116K tokens; vLLM 0.95 bf16 -> ~131K
# usable): embeddings, vision tower and dense layers, held whole on every rank.
REPLICATED_WEIGHT_BYTES = 4.7 * GB
# The weights outside the routed experts, which attention data parallel (TensorRT-LLM's enable_attention_dp) holds
# whole on every rank while expert parallel splits only the experts. From Kimi-K2's config (hidden 7168, 61 layers,
# 64 MLA heads, q_lora 1536, kv_lora 512, vocab 163840, 1 dense layer, 1 shared expert of 2048) in BF16: attention
# ~101M params x 61 = 6.2B, embeddings + LM head 2.35B, shared experts 2.6B, dense MLP 0.4B, vision tower 0.4B:
# ~12B params, ~24 GB. An estimate: the NVFP4 checkpoint keeps them in BF16 (ModelOpt quantizes the experts).
NON_EXPERT_WEIGHT_BYTES = 24 * GB
# W4A8 quantizes the attention and shared-expert projections to INT8 as well (~6.2B + 2.6B params at 1 byte) and keeps
# the embeddings, LM head and vision tower in BF16 (~2.75B x 2): ~15 GB, the checkpoint's `non_expert_bytes`.


def non_expert_bytes(quant):
    """The bytes of `quant`'s checkpoint outside the routed experts."""
    return CHECKPOINTS[quant].get("non_expert_bytes", NON_EXPERT_WEIGHT_BYTES)


# --- Speculative decoding: the known drafts for Kimi-K2.6 (_speculative) ------------------------------------------
# A draft is a small model that proposes tokens the target checks in one forward pass. Each entry: the method it is
# trained for, its architecture and the geometry the fit and the compatibility check read (hidden size and vocabulary
# must be the target's; its own KV cache: layers x KV heads x head dim, or an MLA latent), its size (exact where the
# hub page gives it, else an estimate from the architecture: hf_snapshot's plan reports the exact bytes before
# download), the knobs its authors publish, and where it is named. The revision is the user's pin
# (kimi_speculative_draft_revision), as the checkpoints' are.
TARGET_HIDDEN_SIZE = 7168
TARGET_VOCAB_SIZE = 163840
TARGET_LAYERS = 61
DRAFTS = {
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
# A draft not listed above: its size is estimated as the largest known one's until hf_snapshot reads the real one.
UNKNOWN_DRAFT_BYTES = 7 * GB
