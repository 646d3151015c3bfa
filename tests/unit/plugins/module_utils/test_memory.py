"""The hybrid-attention memory model (_model/memory.py): MLA KV per token, the linear layers' state per sequence, and
how each engine takes the state out of its pool. Kimi-K3's numbers are the worked values of the issue 54 research
(section 10), from vLLM 0.33.0's kda_state_shape/kda_state_dtype and SGLang 0.5.23's KimiLinearStateShape."""
import pytest

from ansible_collections.kimi.deploy.plugins.module_utils._common import GB, MIB
from ansible_collections.kimi.deploy.plugins.module_utils._engines.registry import ENGINES
from ansible_collections.kimi.deploy.plugins.module_utils._model import fit as fitm
from ansible_collections.kimi.deploy.plugins.module_utils._model import memory
from ansible_collections.kimi.deploy.plugins.module_utils._model.checkpoints import KV_BYTES_PER_TOKEN
from ansible_collections.kimi.deploy.plugins.module_utils._model.gpu import summarize_gpus
from ansible_collections.kimi.deploy.plugins.module_utils._model.models import model

from test_deployment import RTX8

K3 = model("kimi-k3")
K26 = model("kimi-k2.6")


@pytest.mark.parametrize("element, pp, expected", [("bf16", 1, 27648), ("fp8", 1, 13824), ("bf16", 2, 13824)])
def test_k3_kv_bytes_per_token_are_its_24_mla_layers_only(element, pp, expected):
    assert memory.kv_bytes_per_token(K3, element, pp) == expected  # 24 x (512 + 64) x element / pp


@pytest.mark.parametrize("tp, pp, expected", [(1, 1, 449372160), (8, 1, 56171520), (16, 1, 28085760),
                                              (8, 2, 28085760)])
def test_k3_state_per_sequence_is_conv_plus_fp32_recurrent_split_over_tp_and_pp(tp, pp, expected):
    # per KDA layer at TP1: conv 36864 x 3 x 2 B = 221,184; recurrent 96 x 128 x 128 x 4 B = 6,291,456; x 69 layers
    assert memory.state_bytes_per_seq(K3, tp, pp) == expected


def test_k3_state_with_a_bf16_ssm_cache_and_speculative_tokens():
    assert memory.state_bytes_per_seq(K3, ssm="bf16") == 232316928  # --mamba-ssm-cache-dtype bfloat16
    # each speculative token widens the conv window by one step: 36864 x 2 B more a layer
    assert memory.state_bytes_per_seq(K3, spec_tokens=1) - memory.state_bytes_per_seq(K3) == 69 * 36864 * 2


def test_the_k2_family_has_no_state_and_its_kv_is_unchanged():
    assert (memory.state_bytes_per_seq(K26, 8), memory.state_bytes_per_seq(model("kimi-k2.7-code"), 8)) == (0, 0)
    assert KV_BYTES_PER_TOKEN == {"bf16": 61 * 576 * 2, "fp8": 61 * 576}
    assert memory.kv_bytes_per_token(K26, "bf16") == 70272


def test_split_pool_per_engine_rule():
    free, per_token, state = 10 * GB, 27648, 56171520
    assert memory.split_pool(free, per_token, 0, "ratio", 32, 0.9) == (int(free // per_token), None)  # no state
    tokens, seqs = memory.split_pool(free, per_token, state, "shared", 32)
    assert seqs == 32 and tokens == int((free - 32 * state) // per_token)
    tokens, seqs = memory.split_pool(free, per_token, state, "ratio", 32, 0.9)  # SGLang: r / (1 + r) to state
    assert tokens == int((free / 1.9) // per_token) and seqs == int((free - free / 1.9) // state)
    assert memory.split_pool(-1, per_token, state, "shared", 32) == (0, 0)


def test_the_engines_declare_how_they_hold_the_state():
    rules = dict((key, spec["hybrid_state"]["rule"]) for key, spec in ENGINES.items())
    assert rules == {"vllm": "shared", "vllm-ascend": "shared", "sglang": "ratio", "sglang-ascend": "ratio",
                     "trtllm": "outside"}
    assert ENGINES["sglang"]["hybrid_state"]["ratio"] == 0.9  # --mamba-full-memory-ratio's default


def test_k26_capacity_is_the_formula_it_always_was():
    # vLLM: VRAM x knob - weights (595 GB / tp + 4.7 GB replicated) - 7.65 GB runtime, over 61 x 576 x element
    vram = 97887 * MIB
    free = vram * 0.95 - (595 * GB / 8 + 4.7 * GB) - 7.65 * GB
    assert fitm.kv_capacity_tokens("int4", "vllm", "fp8", 0.95, 97887, 8) == int(free // (61 * 576))
    assert fitm.pool("int4", "sglang", "fp8_e4m3", 0.85, 97887, 8)[1] is None
    verdict = fitm.fit("int4", "sglang", "fp8_e4m3", 0.85, 8, summarize_gpus(RTX8))
    assert verdict["sequences"] is None and verdict["state_bytes_per_seq"] == 0


def test_k3_fit_on_b300_counts_the_state_of_the_workloads_sequences():
    b300 = summarize_gpus([{"index": i, "name": "NVIDIA B300 SXM6 AC", "memory_mib": 275040, "compute_cap": "10.3"}
                           for i in range(8)])
    verdict = fitm.fit("mxfp4", "vllm", "fp8", 0.95, 8, b300, model="kimi-k3", seqs=32)
    assert verdict["fits"] and verdict["sequences"] == 32 and verdict["state_bytes_per_seq"] == 56171520
    free = 275040 * MIB * 0.95 - (1561 * GB / 8 + 10 * GB) - 7.65 * GB
    assert verdict["kv_tokens"] == int((free - 32 * 56171520) // 13824)
    assert "fixed state of 32 sequences (Kimi-K3's 69 linear-attention layers: 56.2 MB" in verdict["reason"]
    # more sequences, fewer tokens: the state comes out of the same pool
    assert fitm.fit("mxfp4", "vllm", "fp8", 0.95, 8, b300, model="kimi-k3", seqs=512)["kv_tokens"] < \
        verdict["kv_tokens"]
    sglang = fitm.fit("mxfp4", "sglang", "fp8_e4m3", 0.85, 8, b300, model="kimi-k3")
    assert sglang["fits"] and sglang["sequences"] > 32  # SGLang sizes its state slots by ratio, not by a count
