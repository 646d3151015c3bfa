# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The memory model of hybrid attention: KV bytes per token for the layers with a KV cache (MLA), and a fixed state
per sequence for the linear-attention layers (Kimi Delta Attention). Private to kimi.deploy.

Per rank of a replica of tp x pp ranks (a model's geometry from _model/models.py):
  kv_bytes_per_token  = mla.layers x (kv_lora_rank + qk_rope_head_dim) x element / pp   (MLA's latent is replicated
                        on every tensor-parallel rank)
  state_bytes_per_seq = linear.layers / pp x (conv + recurrent), split over tp:
                        conv      = (num_heads x head_dim + 2 x num_k_heads x head_k_dim) / tp x (conv_kernel - 1 +
                                    speculative tokens) x the conv element (the model dtype, BF16)
                        recurrent = num_heads / tp x head_dim x head_dim x the SSM element (FP32: both engines' default)
Sources: vLLM 0.33.0 model_executor/layers/mamba/mamba_utils.py (kda_state_shape, kda_state_dtype: the recurrent state
in float32 unless --mamba-ssm-cache-dtype says otherwise), SGLang 0.5.23 configs/mamba_utils.py (KimiLinearStateShape;
SGLANG_MAMBA_SSM_DTYPE else float32). A model without linear layers (the K2 family) has no state: its numbers are the
MLA ones alone.

How an engine takes the state out of its pool is the engine data's `hybrid_state` (_engines/spec.py): "shared" (vLLM:
one block pool for attention and state, a state block per running request, v1/core/kv_cache_utils.py
get_max_concurrency_for_kv_cache_config), "ratio" (SGLang: --mamba-full-memory-ratio r of the full KV budget goes to
state slots, mem_cache/kv_cache_configurator.py: state = rest x r / (1 + r)), "outside" (TensorRT-LLM: the FP32
recurrent state lives outside the KV pool, per max_batch_size request). Page padding and prefix-cache checkpoints are
not modelled (a few %).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

KV_ELEMENT = {"auto": "bf16", "bf16": "bf16", "fp8": "fp8", "fp8_e4m3": "fp8", "fp8_e5m2": "fp8"}
ELEMENT_BYTES = {"bf16": 2, "fp8": 1, "fp32": 4}
# The state's elements at the engines' defaults: conv in the model dtype, the recurrent (SSM) state in float32.
CONV_ELEMENT = "bf16"
SSM_ELEMENT = "fp32"
# The requests a "shared" pool is sized for when the caller gives none: the chat workload's concurrency
# (kimi_workload's default; _model/layout.py reads it from here).
DEFAULT_WORKLOAD = {"input_tokens": 2048, "output_tokens": 512, "concurrency": 32}


def latent_width(entry):
    """The values one MLA layer keeps per token (the compressed KV latent and the rope key): 576 for Kimi."""
    mla = entry["geometry"]["mla"]
    return mla["kv_lora_rank"] + mla["qk_rope_head_dim"]


def kv_bytes_per_token(entry, element, pp=1):
    """KV bytes one token takes on each rank: the MLA layers' latent (1/pp of the layers per stage), replicated over
    tensor parallel. `element` is "bf16" or "fp8" (KV_ELEMENT of a KV dtype)."""
    mla = entry["geometry"]["mla"]
    total = mla["layers"] * latent_width(entry) * ELEMENT_BYTES[element]
    return total if pp == 1 else total / float(pp)


def state_bytes_per_seq(entry, tp=1, pp=1, spec_tokens=0, ssm=SSM_ELEMENT, conv=CONV_ELEMENT):
    """The fixed state one sequence holds on each rank in the linear-attention layers (0 without any)."""
    linear = entry["geometry"]["linear"]
    if not linear:
        return 0
    conv_dim = linear["num_heads"] * linear["head_dim"] + 2 * linear["num_k_heads"] * linear["head_k_dim"]
    conv_bytes = conv_dim / float(tp) * (linear["conv_kernel"] - 1 + spec_tokens) * ELEMENT_BYTES[conv]
    recurrent = linear["num_heads"] / float(tp) * linear["head_dim"] * linear["head_dim"] * ELEMENT_BYTES[ssm]
    return linear["layers"] / float(pp) * (conv_bytes + recurrent)


def split_pool(free, per_token, state, rule, seqs, ratio=None):
    """(KV tokens, sequences) a pool of `free` bytes per rank holds: `state` bytes per sequence and `per_token` bytes
    per token, taken as the engine's `rule` says ("shared": `seqs` sequences' state reserved from the pool; "ratio":
    the state gets ratio/(1+ratio) of it; "outside": the caller took it out already). Without state: all tokens."""
    if free <= 0:
        return 0, 0
    if not state:
        return int(free // per_token), None
    if rule == "ratio":
        kv = free / (1.0 + ratio)
        return int(kv // per_token), int((free - kv) // state)
    if rule == "shared":
        return int(max(0, free - seqs * state) // per_token), seqs
    return int(free // per_token), seqs
