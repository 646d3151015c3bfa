# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""SGLang, as data (see _engine_spec for the fields). Private to kimi.deploy.

Sources: the sm_120 runbook (SGLang 0.5.12.post1: flags, memory knob, KV menu, the NVFP4 NaN), the flag lists made
from the released wheels (tests/fixtures/engine_flags/engine_flags_sglang-<version>.json, `make engine-flags`).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.kimi.deploy.plugins.module_utils._engines.spec import (
    Arg, dist_init_addr, model, multi_node, pd_bootstrap_port, pd_prefill, pd_rdma_devices, pd_role,
    pd_transfer_backend, pipelined, quantization, reasoning_parser, tool_parser)
from ansible_collections.kimi.deploy.plugins.module_utils._engines.flags.sglang_0_5_12_post1 import OPTIONS as V0_5_12_POST1
from ansible_collections.kimi.deploy.plugins.module_utils._engines.flags.sglang_0_5_23 import OPTIONS as V0_5_23
from ansible_collections.kimi.deploy.plugins.module_utils._model.speculative import (
    spec_algorithm, spec_draft, spec_draft_revision, spec_draft_tokens, spec_pipelined, spec_steps, spec_topk,
    speculative)

# Speculative decoding, SGLang's form (its docs; seed 001's flags): --speculative-algorithm, the draft's path (a repo id
# resolves in the offline cache as the target's does), and the EAGLE tree's steps, topk and verified draft tokens.
SPECULATIVE = {
    "form": "sglang",
    "option": "--speculative-algorithm",
    "methods_from": ("speculative_algorithm",),
    "names": {"eagle3": "EAGLE3", "dflash": "DFLASH", "ngram": "NGRAM"},
    "drafts": {"eagle3": "AQ-MedAI/Kimi-K26-eagle3", "dflash": "z-lab/Kimi-K2.6-DFlash"},
    "refused": (
        (spec_pipelined,
         "pipeline parallelism is not compatible with speculative decoding (server_args.py of 0.5.12.post1 asserts it; "
         "0.5.23 allows EAGLE on prefill nodes only): serve the replica with kimi_pipeline_parallel unset, or "
         "kimi_speculative none"),
    ),
    # Gauges of the scheduler (with --enable-metrics), averaged over each decode log interval (metrics_collector.py).
    "metrics": {"kind": "gauges", "accept_length": "sglang:spec_accept_length", "accept_rate": "sglang:spec_accept_rate"},
}
SPECULATIVE_ARGS = (
    Arg("--speculative-algorithm", "speculative", spec_algorithm, when=speculative),
    Arg("--speculative-draft-model-path", "speculative_draft", spec_draft, when=spec_draft),
    Arg("--speculative-draft-model-revision", "speculative_draft_revision", spec_draft_revision,
        when=spec_draft_revision),
    Arg("--speculative-num-steps", "speculative_tokens", spec_steps, when=spec_steps),
    Arg("--speculative-eagle-topk", "speculative_topk", spec_topk, when=spec_topk),
    Arg("--speculative-num-draft-tokens", "speculative_draft_tokens", spec_draft_tokens, when=spec_draft_tokens),
)

# Its serving series (observability/metrics_collector.py, with --enable-metrics): requests, TTFT, inter-token latency.
SERVING_METRICS = {"requests": "sglang:num_requests_total", "ttft": "sglang:time_to_first_token_seconds",
                   "itl": "sglang:inter_token_latency_seconds"}

ENGINE = {
    "name": "sglang",
    "serving_metrics": SERVING_METRICS,
    "title": "SGLang",
    "entrypoint": ("python3", "-m", "sglang.launch_server"),
    "image_entrypoint": False,  # lmsysorg/sglang has no entry point: argv starts with the module
    "default_version": "0.5.12.post1",
    "versions": {
        "0.5.12.post1": {
            "options": V0_5_12_POST1,
            "images": {"int4": "lmsysorg/sglang:v0.5.12.post1-cu130"},
            "local_build": (),
            "verified": "the sm_120 runbook (8 x RTX PRO 6000): int4 served and verified, 5/5 checks incl. vision",
            "notes": (),
        },
        "0.5.23": {
            "options": V0_5_23,
            "images": {"int4": "lmsysorg/sglang:v0.5.23-cu130"},
            "local_build": (),
            "verified": None,
            "notes": (),
        },
    },
    "quants": {
        # SGLang refuses plain `fp8`; fp8_e4m3 doubles the pool (116K -> 232K tokens on 8 x 96 GB).
        "int4": {"kv_menu": ("fp8_e4m3", "auto", "fp8_e5m2"), "families": None},
    },
    "refused_quants": {
        "nvfp4": "SGLang's NVFP4 path produces NaN on sm_120 (sgl-project/sglang#18954). NVFP4 runs on engine=vllm "
                 "(or engine=trtllm on sm_100); for SGLang use quant=int4",
    },
    # --mem-fraction-static covers weights + KV pool; transients live outside it (measured on 8 x 96 GB: 0.85 works,
    # 0.90 OOM-crashes the server).
    "memory": {"flag": "--mem-fraction-static", "default": 0.85, "max": 0.85, "of": "total",
               "runtime_reserve_bytes": 0.0,
               "why_max": "SGLang's --mem-fraction-static covers weights + KV; transients live outside it, and 0.90 "
                          "OOM-crashes the server",
               "meaning": "the share of each GPU for the weights and the KV pool (transients outside it)"},
    "context": "warn",  # SGLang starts whatever the pool; a request longer than the pool cannot be served
    "multi_node": "tensor",
    "tool_parser": ("kimi_k2",),
    "reasoning_parser": ("kimi_k2",),
    "vision": True,
    "image_refusals": (
        (r"[^@]*-runtime(@.*)?$", "the -runtime images lack ninja and nvcc, which SGLang's Marlin MoE JIT needs to "
                                  "build its kernels at start-up"),
    ),
    "shm_bytes": None,
    # Prefill/decode disaggregation (seed 001's flags; SGLang's docs): Mooncake over RDMA, else NIXL, whose UCX
    # transport falls back to TCP (0.5.12.post1 has no TCP Mooncake backend; mooncake_tcp comes in 0.5.13).
    "disaggregation": {
        "router": "sglang-router",
        "bootstrap": True,
        "rdma": "mooncake",
        "tcp": "nixl",
        "backends": {
            "mooncake": {"rdma": True, "why": "Mooncake's transfer engine moves the KV cache GPU to GPU over RDMA "
                                              "(--disaggregation-ib-device names the devices)."},
            "nixl": {"rdma": False, "why": "NIXL over UCX, which uses RDMA where it finds it and TCP otherwise (at NIC "
                                           "speed: fine for a test or a small deployment, slow for long prompts)."},
        },
    },
    "speculative": SPECULATIVE,
    "args": (
        Arg("--model-path", "quant", model),
        Arg("--tp-size", "tp"),
        Arg("--trust-remote-code"),
        Arg("--host", "host"),
        Arg("--port", "port"),
        Arg("--served-model-name", "served_model_name"),
        Arg("--tool-call-parser", value=tool_parser, when=tool_parser),
        Arg("--reasoning-parser", value=reasoning_parser, when=reasoning_parser),
        Arg("--mem-fraction-static", "mem_fraction"),
        Arg("--kv-cache-dtype", "kv_cache_dtype"),
        Arg("--context-length", "context_length"),
        Arg("--enable-metrics"),  # vLLM always serves /metrics; SGLang only with this flag
        Arg("--quantization", "quant", quantization, when=quantization),  # INT4: auto-detected, never emitted
        Arg("--pp-size", "pp", when=pipelined),
        # A replica over several hosts: every member runs this with its rank; rank 0 serves HTTP.
        Arg("--nnodes", "nodes", when=multi_node),
        Arg("--node-rank", "node_rank", when=multi_node),
        Arg("--dist-init-addr", "head_address", dist_init_addr, when=multi_node),
        # A disaggregated deployment (kimi_pd): this instance's role, the KV transfer backend, the prefill's
        # bootstrap server (the decode asks it where each request's KV cache is) and the RDMA devices to move it on.
        Arg("--disaggregation-mode", "pd_role", pd_role, when=pd_role),
        Arg("--disaggregation-transfer-backend", "pd_transfer_backend", pd_transfer_backend, when=pd_role),
        Arg("--disaggregation-bootstrap-port", "pd_bootstrap_port", pd_bootstrap_port, when=pd_prefill),
        Arg("--disaggregation-ib-device", "pd_rdma_devices", pd_rdma_devices, when=pd_rdma_devices),
    ) + SPECULATIVE_ARGS,
    "config": None,
    "config_path": None,
}
