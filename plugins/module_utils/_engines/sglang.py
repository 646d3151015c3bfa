# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""SGLang, as data (see _engines/spec.py for the fields). Private to kimi.deploy.

Sources: the sm_120 runbook (SGLang 0.5.12.post1: flags, memory knob, KV menu, the NVFP4 NaN), the flag lists made
from the released wheels (tests/fixtures/engine_flags/engine_flags_sglang-<version>.json, `make engine-flags`).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.kimi.deploy.plugins.module_utils._engines.spec import (
    Arg, data_parallel, dist_init_addr, load_format, loader_extra_config, model, multi_node, pd_bootstrap_port,
    pd_prefill, pd_rdma_devices, pd_role, pd_transfer_backend, pipelined, prefetch_threads, present, quantization,
    reasoning_parser, resolved, spec_algorithm, spec_draft, spec_draft_revision, spec_draft_tokens, spec_pipelined,
    spec_steps, spec_topk, speculative, tool_parser, traced)
from ansible_collections.kimi.deploy.plugins.module_utils._engines.flags.sglang_0_5_12_post1 import OPTIONS as V0_5_12_POST1
from ansible_collections.kimi.deploy.plugins.module_utils._engines.flags.sglang_0_5_23 import OPTIONS as V0_5_23

# Speculative decoding, SGLang's form (its docs; seed 001's flags): --speculative-algorithm, the draft's path (a repo id
# resolves in the offline cache as the target's does), and the EAGLE tree's steps, topk and verified draft tokens.
SPECULATIVE = {
    "form": "sglang",
    "option": "--speculative-algorithm",
    "methods_from": ("speculative_algorithm",),
    "names": {"eagle3": "EAGLE3", "dflash": "DFLASH", "ngram": "NGRAM"},
    "refused": (
        (spec_pipelined,
         "pipeline parallelism is not compatible with speculative decoding (server_args.py of 0.5.12.post1 asserts it; "
         "0.5.23 allows EAGLE on prefill nodes only): serve the replica with kimi_pipeline_parallel unset, or "
         "kimi_speculative none"),
    ),
    # Gauges of the scheduler (with --enable-metrics), averaged over each decode log interval (metrics_collector.py).
    "metrics": {"kind": "gauges", "accept_length": "sglang:spec_accept_length", "accept_rate": "sglang:spec_accept_rate"},
}
# Traces (kimi_otlp_endpoint): SGLang's exporter takes host:port (sglang/srt/tracing; the wheel lists opentelemetry
# under its `tracing` extra, which the image must carry).
TRACE_ARGS = (
    Arg("--enable-trace", when=traced),
    Arg("--otlp-traces-endpoint", "otlp_endpoint", when=traced),
)
SPECULATIVE_ARGS = (
    Arg("--speculative-algorithm", "speculative", spec_algorithm, when=speculative),
    Arg("--speculative-draft-model-path", "speculative_draft", spec_draft, when=spec_draft),
    Arg("--speculative-draft-model-revision", "speculative_draft_revision", spec_draft_revision,
        when=spec_draft_revision),
    Arg("--speculative-num-steps", "speculative_tokens", spec_steps, when=spec_steps),
    Arg("--speculative-eagle-topk", "speculative_topk", spec_topk, when=spec_topk),
    Arg("--speculative-num-draft-tokens", "speculative_draft_tokens", spec_draft_tokens, when=spec_draft_tokens),
)

# Weight loaders (kimi_load_format; _model/loader.py chooses). The formats are the parser's --load-format choices in
# each version's flag list. SGLang's default loader reads the shards with threads when --model-loader-extra-config has
# enable_multithread_load (model_loader/loader.py, DefaultModelLoader: use_multithread, num_threads), and
# --weight-loader-prefetch-checkpoints reads them into the page cache ahead, each rank a share ("recommended for models
# on network storage", its help in server_args.py), both in 0.5.12.post1 and 0.5.23. Whether lmsysorg/sglang's images
# carry runai-model-streamer and fastsafetensors (optional imports of model_loader/) was not checked: never picked.


def _sglang_loading(options):
    return {
        "known": options["values"]["load_format"],
        "packages": {"runai_streamer": ("runai-model-streamer", None), "fastsafetensors": ("fastsafetensors", None),
                     "instanttensor": ("instanttensor", None)},
        "fast": {"format": None, "extra_config": {"enable_multithread_load": True, "num_threads": 16},
                 "why": "SGLang's default loader reads the shards with 16 threads per rank "
                        "(enable_multithread_load), which a disk this fast keeps fed"},
        "slow": {"format": None, "prefetch_threads": 8,
                 "why": "each rank reads a share of the shards into the page cache ahead (--weight-loader-prefetch-"
                        "checkpoints, 8 threads), so the disk is read once, not once per rank"},
    }


# Its serving series (observability/metrics_collector.py, with --enable-metrics): requests, TTFT, inter-token latency.
SERVING_METRICS = {"requests": "sglang:num_requests_total", "ttft": "sglang:time_to_first_token_seconds",
                   "itl": "sglang:inter_token_latency_seconds"}

# The KV host tier (_model/kv_offload.py, kimi_kv_offload): SGLang's hierarchical cache, --enable-hierarchical-cache
# with --hicache-size GB (both in the 0.5.12.post1 and 0.5.23 lists; --hicache-size wins over --hicache-ratio).
# sglang/srt/mem_cache/memory_pool_host.py: each rank's HostKVCache holds host_size * 1e9 // size_per_token tokens,
# and MLATokenToKVPoolHost is the MLA pool (kv_lora_rank + qk_rope_head_dim per token and layer): the size is per rank,
# and the host pool must be larger than the device pool. write_through (in both lists' choices) backs every prefix up
# as it is computed: the policy for multi-turn reuse. Its hits: sglang:cached_tokens_total{cache_source="host"} over
# sglang:prompt_tokens_total (observability/metrics_collector.py).
KV_OFFLOAD = {
    "mechanism": "SGLang's hierarchical cache (--enable-hierarchical-cache, write_through)",
    "split": "rank",
    "unit": "GB",
    "host_larger_than_device": True,
    "source": "sglang/srt/mem_cache/memory_pool_host.py (HostKVCache, MLATokenToKVPoolHost)",
    "metrics": {"hits": 'sglang:cached_tokens_total{cache_source="host"}', "queries": "sglang:prompt_tokens_total"},
}

# Kernel caches (_model/kernel_cache.py): sglang/srt/environ.py SGLANG_DG_CACHE_DIR (DeepGEMM's JIT kernels, default
# ~/.cache/deep_gemm; deep_gemm_wrapper/compile_utils.py points DeepGEMM's own DG_JIT_CACHE_DIR at it), Triton's
# TRITON_CACHE_DIR, TORCHINDUCTOR_CACHE_DIR (--enable-torch-compile; docs/references/torch_compile_cache.md) and
# FlashInfer's FLASHINFER_WORKSPACE_BASE (flashinfer/jit/env.py). DeepGEMM's JIT is the long one ("typically 10-20
# mins", compile_utils.py's warning) and `python3 -m sglang.compile_deep_gemm <launch_server args>` compiles it ahead
# of time (sglang/compile_deep_gemm.py): the precompile entry point.
KERNEL_CACHE = {
    "primary": "SGLANG_DG_CACHE_DIR",
    "env": {"SGLANG_DG_CACHE_DIR": "deep_gemm", "DG_JIT_CACHE_DIR": "deep_gemm", "TRITON_CACHE_DIR": "triton",
            "TORCHINDUCTOR_CACHE_DIR": "inductor", "FLASHINFER_WORKSPACE_BASE": "flashinfer"},
    "precompile": ("python3", "-m", "sglang.compile_deep_gemm"),
    "sources": "sglang/srt/environ.py, sglang/srt/layers/deep_gemm_wrapper/compile_utils.py, "
               "sglang/compile_deep_gemm.py, flashinfer/jit/env.py",
}

ENGINE = {
    "name": "sglang",
    "platform": "nvidia",
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
            "loading": _sglang_loading(V0_5_12_POST1),
        },
        "0.5.23": {
            "options": V0_5_23,
            # mxfp4: Kimi-K3's checkpoint (0.5.23 has models/kimi_k3.py).
            "images": {"int4": "lmsysorg/sglang:v0.5.23-cu130", "mxfp4": "lmsysorg/sglang:v0.5.23-cu130"},
            "local_build": (),
            "verified": None,
            "notes": (),
            "loading": _sglang_loading(V0_5_23),
        },
    },
    "quants": {
        # SGLang refuses plain `fp8`; fp8_e4m3 doubles the pool (116K -> 232K tokens on 8 x 96 GB).
        "int4": {"kv_menu": ("fp8_e4m3", "auto", "fp8_e5m2"), "families": None},
        "mxfp4": {"kv_menu": ("fp8_e4m3", "auto"), "families": None},
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
    # Several instances on one host: --dp-size without --enable-dp-attention starts SGLang's data-parallel controller,
    # which launches one whole tensor-parallel group per rank on the next tp GPUs and round-robins requests to them
    # behind the one server (python/sglang/srt/managers/data_parallel_controller.py, launch_dp_schedulers); each
    # instance holds the whole checkpoint. Flag list: --dp-size (dest data_parallel_size / dp_size).
    "data_parallel": {"experts": "instance", "how": "SGLang's --dp-size data-parallel controller (independent "
                                                    "replicas behind one server and one unit, no DP attention)"},
    # A hybrid model's linear-attention state (_model/memory.py): --mamba-full-memory-ratio (default 0.9) of the full
    # KV budget goes to state slots, state = rest x r / (1 + r) (0.5.23 arg_groups/fields/schedule.py,
    # mem_cache/kv_cache_configurator.py).
    "hybrid_state": {"rule": "ratio", "ratio": 0.9},
    "vision": True,
    "image_refusals": (
        (r"[^@]*-runtime(@.*)?$", "the -runtime images lack ninja and nvcc, which SGLang's Marlin MoE JIT needs to "
                                  "build its kernels at start-up"),
    ),
    "shm_bytes": None,
    # Prefill/decode disaggregation (seed 001's flags; SGLang's docs): Mooncake over RDMA, else NIXL, whose UCX
    # transport falls back to TCP (0.5.12.post1 has no TCP Mooncake backend; mooncake_tcp comes in 0.5.13).
    "disaggregation": {
        "router": "smg",
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
    "kernel_cache": KERNEL_CACHE,
    "kv_offload": KV_OFFLOAD,
    "args": (
        Arg("--model-path", "quant", model),
        Arg("--tp-size", "tp"),
        Arg("--dp-size", "dp", when=data_parallel),  # instances on one host (kimi_instances)
        Arg("--trust-remote-code"),
        Arg("--host", "host"),
        Arg("--port", "port"),
        Arg("--served-model-name", "served_model_name"),
        Arg("--tool-call-parser", value=tool_parser, when=tool_parser),
        Arg("--reasoning-parser", value=reasoning_parser, when=reasoning_parser),
        Arg("--mem-fraction-static", "mem_fraction"),
        Arg("--kv-cache-dtype", "kv_cache_dtype"),
        Arg("--context-length", "context_length"),
        # The weight loader (kimi_load_format, or the preflight's read test): nothing where the default serves.
        Arg("--load-format", "load_format", load_format, when=load_format),
        Arg("--model-loader-extra-config", "load_format", loader_extra_config, when=loader_extra_config),
        Arg("--weight-loader-prefetch-checkpoints", when=prefetch_threads),
        Arg("--weight-loader-prefetch-num-threads", "load_format", prefetch_threads, when=prefetch_threads),
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
        # The KV host tier (kimi_kv_offload): each rank's host pool in GB; the ratio is the collection's too.
        Arg("--enable-hierarchical-cache", when=present("kv_offload")),
        Arg("--hicache-size", "kv_offload_gb", resolved("kv_offload", "value"), when=present("kv_offload")),
        Arg("--hicache-ratio", "kv_offload_gb", when=lambda deployment: False),
        Arg("--hicache-write-policy", "kv_offload", value="write_through", when=present("kv_offload")),
    ) + SPECULATIVE_ARGS + TRACE_ARGS,
    "config": None,
    "config_path": None,
}
