# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""SGLang on Ascend NPUs (engine=sglang on Ascend), as data (see _engines/spec.py for the fields). Private to
kimi.deploy.

Sources: seed 001 (SGLang's Kimi-K2.6 guide for Ascend, v0.5.13: the image, --quantization modelslim, TP/DP/EP 16 with
the DeepEP all-to-all, the NPU feature switches, the ready line); the flag list of the released wheel, which is the
same package as SGLang on CUDA (tests/fixtures/engine_flags/engine_flags_sglang-0.5.13.post1.json, `make engine-flags
ENGINE=sglang VERSION=0.5.13.post1`: its --quantization has modelslim, --moe-a2a-backend deepep and ascend_fuseep,
--attention-backend ascend).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.kimi.deploy.plugins.module_utils._common import GIB
from ansible_collections.kimi.deploy.plugins.module_utils._engines.spec import (
    Arg, model, pd_bootstrap_port, pd_prefill, pd_rdma_devices, pd_role, pd_transfer_backend, reasoning_parser,
    spec_draft_quantization, tool_parser)
from ansible_collections.kimi.deploy.plugins.module_utils._engines.sglang import SPECULATIVE as SGLANG_SPECULATIVE
from ansible_collections.kimi.deploy.plugins.module_utils._engines.sglang import SPECULATIVE_ARGS, TRACE_ARGS
from ansible_collections.kimi.deploy.plugins.module_utils._engines.flags.sglang_0_5_13_post1 import OPTIONS as V0_5_13_POST1
from ansible_collections.kimi.deploy.plugins.module_utils._engines.sglang import SERVING_METRICS

# Kernel caches (_model/kernel_cache.py): DeepGEMM is CUDA-only, so of SGLang's caches (sglang/srt/environ.py) the
# Ascend build keeps torch.compile's (TORCHINDUCTOR_CACHE_DIR); its NPU graph caches were not read in the released
# package: unverified, not carried.
KERNEL_CACHE = {
    "primary": "TORCHINDUCTOR_CACHE_DIR",
    "env": {"TORCHINDUCTOR_CACHE_DIR": "inductor"},
    "precompile": None,
    "sources": "sglang/srt/environ.py, docs/references/torch_compile_cache.md; the NPU graph caches not read",
}

ENGINE = {
    "name": "sglang",
    "serving_metrics": SERVING_METRICS,  # its engine's own server: the same series
    "key": "sglang-ascend",
    "platform": "ascend",
    "title": "SGLang-Ascend",
    "entrypoint": ("python3", "-m", "sglang.launch_server"),
    "image_entrypoint": False,
    "default_version": "0.5.13.post1",
    "versions": {
        "0.5.13.post1": {
            "options": V0_5_13_POST1,
            "images": {"w4a8": {"ascend-a3": "quay.io/ascend/sglang:v0.5.13.post1-cann9.0.0-a3"}},
            "local_build": (),
            "verified": None,
            "notes": (),
        },
    },
    "quants": {
        "w4a8": {"kv_menu": ("auto",), "families": ("ascend-a3",),
                 "families_why": "SGLang-Ascend's Kimi-K2.6 guide (seed 001) and its pinned image "
                                 "(quay.io/ascend/sglang:v0.5.13.post1-cann9.0.0-a3) are for the Atlas 800 A3; on the "
                                 "A2 use engine=vllm (vLLM-Ascend serves two A2 as one replica)"},
    },
    "refused_quants": {
        "int4": "moonshotai/Kimi-K2.6's INT4 (compressed-tensors, Marlin MoE kernels) needs CUDA; on Ascend the "
                "checkpoint is Eco-Tech/Kimi-K2.6-W4A8: use quant=w4a8",
        "nvfp4": "NVFP4 needs NVIDIA's FP4 tensor cores (Blackwell); on Ascend use quant=w4a8",
    },
    # The same knob as on CUDA (weights + KV pool; transients outside it); 0.85 leaves each A3 chip ~7 GB of KV at
    # attention DP 16 (estimate); seed 001 sets none and leaves it to the engine.
    "memory": {"flag": "--mem-fraction-static", "default": 0.85, "max": 0.9, "of": "total",
               "runtime_reserve_bytes": 0.0,
               "why_max": "SGLang's --mem-fraction-static covers weights + KV; the NPU graphs and DeepEP buffers live "
                          "outside it",
               "meaning": "the share of each NPU's HBM for the weights and the KV pool (transients outside it)"},
    "context": "warn",
    "multi_node": None,
    "multi_node_why": "SGLang-Ascend's Kimi-K2.6 guide (seed 001) serves one Atlas 800 A3 in this mode (PD mixed); its "
                      "multi-node layouts are prefill/decode disaggregated. Use engine=vllm for a replica over hosts",
    # Attention data parallel 16 (every rank its own requests and KV) with the experts over all 16 (seed 001).
    "attention_dp": True,
    # A hybrid model's linear-attention state (_model/memory.py): --mamba-full-memory-ratio (default 0.9) of the full
    # KV budget goes to state slots, state = rest x r / (1 + r) (0.5.23 arg_groups/fields/schedule.py,
    # mem_cache/kv_cache_configurator.py).
    "hybrid_state": {"rule": "ratio", "ratio": 0.9},
    "vision": True,
    "image_refusals": (),
    "shm_bytes": None,
    "container_shm_bytes": 16 * GIB,  # seed 001: --shm-size=16g
    "container_env": {
        "PYTORCH_NPU_ALLOC_CONF": "expandable_segments:True",
        # Seed 001's feature switches: the overlap schedule, the MLAPO fused operator, multistream MoE.
        "SGLANG_ENABLE_OVERLAP_PLAN_STREAM": "1",
        "SGLANG_NPU_USE_MLAPO": "1",
        "SGLANG_NPU_USE_MULTI_STREAM": "1",
    },
    # Prefill/decode disaggregation (seed 001: --disaggregation-mode prefill|decode --disaggregation-transfer-backend
    # ascend): the NPUs move the KV cache over their own RoCE ports, so no host RDMA device is needed.
    "disaggregation": {
        "router": "smg",
        "bootstrap": True,
        "rdma": "ascend",
        "tcp": "ascend",
        "backends": {
            "ascend": {"rdma": False, "why": "the Ascend transfer backend moves the KV cache NPU to NPU over the NPUs' "
                                             "own RoCE network (seed 001)."},
            "mooncake": {"rdma": False, "why": "Mooncake's transfer engine on Ascend (memfabric), over the NPUs' "
                                               "network."},
        },
    },
    # Speculative decoding as SGLang's, and the draft loaded unquantized: otherwise SGLang applies the target's
    # --quantization modelslim to the BF16 draft too (seed 001: --speculative-draft-model-quantization unquant).
    # DFlash and n-gram are refused: with DP attention SGLang rejects both (server_args.py of 0.5.12.post1; only 0.5.23
    # admits DFlash with --enable-dp-lm-head), and its n-gram drafter is CUDA-only. Seed 001 names EAGLE3 only.
    "kernel_cache": KERNEL_CACHE,
    # kimi_kv_offload: the 0.5.13.post1 list has --enable-hierarchical-cache and a kernel_ascend I/O backend, but the
    # MLA host pool's NPU copy path for Kimi-K2.6's W4A8 MLA is not shown by seed 001 (its SGLang-Ascend commands run
    # without a host tier) nor by this collection: refused until a run proves it.
    "kv_offload": None,
    "kv_offload_why": "SGLang-Ascend 0.5.13.post1's hierarchical cache (--enable-hierarchical-cache, "
                      "--hicache-io-backend kernel_ascend) is not shown to serve Kimi-K2.6's W4A8 MLA: seed 001's "
                      "SGLang-Ascend commands run without it, and no run here proved it",
    "speculative": dict(SGLANG_SPECULATIVE, draft_quantization="unquant", refused=SGLANG_SPECULATIVE["refused"] + (
        (lambda method, _quant, _deployment: method == "dflash",
         "DFlash is refused with DP attention, which this layout runs (--enable-dp-attention, seed 001); SGLang admits "
         "it only from 0.5.23 with --enable-dp-lm-head. Use kimi_speculative eagle3 (seed 001's method)"),
        (lambda method, _quant, _deployment: method == "ngram",
         "SGLang's n-gram drafter runs on CUDA only, and not with DP attention. Use kimi_speculative eagle3"),
    )),
    "args": (
        Arg("--model-path", "quant", model),
        Arg("--quantization", "quant", value="modelslim"),
        Arg("--tp-size", "tp"),
        Arg("--dp-size", "tp"),
        Arg("--enable-dp-attention"),
        Arg("--ep-size", "tp"),
        Arg("--moe-a2a-backend", value="deepep"),
        Arg("--deepep-mode", value="auto"),
        Arg("--attention-backend", value="ascend"),
        Arg("--trust-remote-code"),
        Arg("--host", "host"),
        Arg("--port", "port"),
        Arg("--served-model-name", "served_model_name"),
        Arg("--tool-call-parser", value=tool_parser, when=tool_parser),
        Arg("--reasoning-parser", value=reasoning_parser, when=reasoning_parser),
        Arg("--mem-fraction-static", "mem_fraction"),
        Arg("--context-length", "context_length"),
        Arg("--enable-metrics"),
        # A disaggregated deployment (kimi_pd): this instance's role, the KV transfer backend, the prefill's
        # bootstrap server (the decode asks it where each request's KV cache is) and the RDMA devices to move it on.
        Arg("--disaggregation-mode", "pd_role", pd_role, when=pd_role),
        Arg("--disaggregation-transfer-backend", "pd_transfer_backend", pd_transfer_backend, when=pd_role),
        Arg("--disaggregation-bootstrap-port", "pd_bootstrap_port", pd_bootstrap_port, when=pd_prefill),
        Arg("--disaggregation-ib-device", "pd_rdma_devices", pd_rdma_devices, when=pd_rdma_devices),
    ) + SPECULATIVE_ARGS + TRACE_ARGS + (
        Arg("--speculative-draft-model-quantization", "speculative_draft", spec_draft_quantization,
            when=spec_draft_quantization),
    ),
    "config": None,
    "config_path": None,
}
