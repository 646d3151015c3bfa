# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""TensorRT-LLM (trtllm-serve), as data (see _engines/spec.py for the fields). Private to kimi.deploy.

Sources:
- seed 003, NVIDIA's "Deployment Guide for Kimi K2 Thinking on TensorRT LLM - Blackwell" (NVIDIA/TensorRT-LLM
  docs/source/deployment-guide/deployment-guide-for-kimi-k2-thinking-on-trtllm.md): `trtllm-serve <model> --host
  --port --config <yaml>`, the YAML (tensor_parallel_size 8, moe_expert_parallel_size 8, enable_attention_dp,
  kv_cache_config dtype fp8 / free_gpu_memory_fraction 0.75, max_batch_size 128, max_num_tokens 8448,
  trust_remote_code), readiness ("Application startup complete", GET /health 200), and its one failure: a Bus error at
  weight load, fixed with tmpfs /dev/shm of 640G.
- the flag list of the pinned release (tests/fixtures/engine_flags/engine_flags_trtllm-<version>.json, made by
  tools/engine_flags.py from its source: click options of tensorrt_llm/commands/serve.py and the TorchLlmArgs schema
  of tensorrt_llm/llmapi/llm_args.py).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.kimi.deploy.plugins.module_utils._common import GB, GIB
from ansible_collections.kimi.deploy.plugins.module_utils._engines.spec import (
    Arg, model, otlp_url, reasoning_parser, tool_parser, traced)
from ansible_collections.kimi.deploy.plugins.module_utils._engines.flags.trtllm_1_3_0rc17 import (
    LLM_ARGS as LLM_ARGS_1_3_0RC17, LLM_ARGS_CHOICES as CHOICES_1_3_0RC17, LLM_ARGS_CLASS as CLASS_1_3_0RC17,
    LLM_ARGS_EXTRA as EXTRA_1_3_0RC17, OPTIONS as V1_3_0RC17)

# Where the container reads the YAML config the collection writes (kimi_serve mounts it there, read-only).
CONFIG_PATH = "/etc/kimi-k26/engine-config.yaml"


def _never(_deployment):
    """For a CLI option the collection sets in the YAML instead (the YAML wins over the CLI in trtllm-serve): its
    dest is managed, so kimi_engine_extra_args cannot set it behind the config's back, but it is never emitted."""
    return False


def _revision(deployment):
    """The pinned commit: trtllm-serve resolves the repo id at it in the offline Hugging Face cache."""
    return deployment["checkpoint"]["revision"]


def config(deployment):
    """The LLM-API YAML of a resolved deployment: the managed keys (CONFIG_MANAGED), over CONFIG_DEFAULTS, under
    kimi_trtllm_options (already checked against the schema and merged by the resolver)."""
    out = {
        "tensor_parallel_size": deployment["tp"],
        "pipeline_parallel_size": deployment["pp"],
        "max_seq_len": deployment["context_length"],
        "trust_remote_code": True,
        "kv_cache_config": {
            "dtype": deployment["kv_cache_dtype"],
            "free_gpu_memory_fraction": deployment["mem_fraction"],
        },
        # Prometheus text at /prometheus/metrics (its /metrics is JSON iteration stats): what kimi_metrics scrapes;
        # the iteration stats feed its running/waiting/KV-cache gauges (the queue and KV alerts).
        "return_perf_metrics": True,
        "enable_iter_perf_stats": True,
    }
    if deployment.get("kv_offload"):  # the KV host tier (kimi_kv_offload): each rank's secondary pool, in bytes
        out["kv_cache_config"]["host_cache_size"] = int(deployment["kv_offload"]["value"])
    pd = deployment.get("pd")
    if pd:  # seed 003: the KV cache moves between context and generation servers through the cache transceiver
        out["cache_transceiver_config"] = {"backend": pd["transfer_backend"]}
        # TensorRT-LLM's disaggregated examples: the context (prefill) servers run without the overlap scheduler.
        out["disable_overlap_scheduler"] = pd["role"] == "prefill"
    return out


def config_defaults(deployment):
    """Seed 003's layout and batch limits, each overridable through kimi_trtllm_options: expert parallel over every
    GPU of the tensor-parallel group, attention data parallel, 128 sequences and 8448 tokens per rank and step."""
    return {
        "moe_expert_parallel_size": deployment["tp"],
        "enable_attention_dp": True,
        "max_batch_size": 128,
        "max_num_tokens": 8448,
        "print_iter_log": False,
    }


def slots(deployment, _given):
    """The requests trtllm-serve runs at once: max_batch_size of its config (the YAML wins over --max_batch_size),
    per pipeline stage (PyTorchModelEngine.get_max_num_sequences), and per rank with attention data parallel (the
    executor admits tp_size x max_num_active_requests: py_executor.py _fetch_new_requests)."""
    config = deployment["engine_config"]
    if not config.get("max_batch_size"):  # kimi_trtllm_options max_batch_size: null leaves it to the engine
        return None
    per_rank = deployment["tp"] if config.get("enable_attention_dp") else 1
    return int(config["max_batch_size"]) * deployment["pp"] * per_rank


VERSION_1_3_0RC17 = {
    "options": V1_3_0RC17,
    "llm_args": {"class": CLASS_1_3_0RC17, "extra": EXTRA_1_3_0RC17, "keys": LLM_ARGS_1_3_0RC17,
                 "choices": CHOICES_1_3_0RC17},
    "images": {"nvfp4": "nvcr.io/nvidia/tensorrt-llm/release:1.3.0rc17"},
    "local_build": (),
    "verified": None,
    "notes": (
        "TensorRT-LLM 1.3.0rc17: the release NVIDIA/TensorRT-LLM#15179 serves nvidia/Kimi-K2.6-NVFP4 with (trtllm-serve "
        "--tp_size --ep_size --trust_remote_code --extra_llm_api_options); 1.2.1, the newest stable release, predates "
        "Kimi-K2.5/K2.6's architecture (KimiK25ForConditionalGeneration, NVIDIA/TensorRT-LLM#12788, merged 2026-05-14).",
    ),
}

# Its serving series (tensorrt_llm/metrics/collector.py, at /prometheus/metrics): requests, TTFT, time per output token.
SERVING_METRICS = {"requests": "trtllm_request_success_total", "ttft": "trtllm_time_to_first_token_seconds",
                   "itl": "trtllm_time_per_output_token_seconds"}

# Kernel caches (_model/kernel_cache.py): the PyTorch backend's torch.compile/Triton caches (TORCHINDUCTOR_CACHE_DIR,
# TRITON_CACHE_DIR) and FlashInfer's JIT/autotune cache (FLASHINFER_WORKSPACE_BASE, flashinfer/jit/env.py; its
# "[Autotuner]: Autotuning process starts" runs at warm-up). Not read in the 1.3.0rc17 wheel: which of them this
# release fills on sm_100 is unverified; an unused variable costs an empty folder.
KERNEL_CACHE = {
    "primary": "TRITON_CACHE_DIR",
    "env": {"TRITON_CACHE_DIR": "triton", "TORCHINDUCTOR_CACHE_DIR": "inductor",
            "FLASHINFER_WORKSPACE_BASE": "flashinfer"},
    "precompile": None,
    "sources": "flashinfer/jit/env.py, triton/knobs.py (TensorRT-LLM 1.3.0rc17 itself not read)",
}

ENGINE = {
    "name": "trtllm",
    "platform": "nvidia",
    "serving_metrics": SERVING_METRICS,
    "title": "TensorRT-LLM",
    "entrypoint": ("trtllm-serve",),
    "image_entrypoint": False,  # the NGC image's entry point only sets up the environment: the command is ours
    "default_version": "1.3.0rc17",
    "versions": {"1.3.0rc17": VERSION_1_3_0RC17},
    "quants": {
        # The NVFP4 MoE and fp8 KV with MLA run on datacenter Blackwell (seed 003: DGX B200, GB200): the CuTe DSL
        # NVFP4 kernels check `get_sm_version() not in [100, 103]` (tensorrt_llm/_torch/custom_ops/cute_dsl_custom_ops.py)
        # and NVIDIA's Kimi guide lists Blackwell only.
        "nvfp4": {"kv_menu": ("fp8", "auto"), "families": ("blackwell-dc",),
                  "families_why": "TensorRT-LLM's NVFP4 MoE path for Kimi is verified by NVIDIA on datacenter Blackwell "
                                  "(sm_100/sm_103: B200, GB200; seed 003, NVIDIA's Kimi K2 guide) only; its CuTe DSL "
                                  "NVFP4 kernels refuse other SM versions (cute_dsl_custom_ops.py)"},
    },
    "refused_quants": {
        "int4": "TensorRT-LLM reads compressed-tensors checkpoints only as FP8 (per-channel or block; "
                "tensorrt_llm/models/quant_config_utils.py update_quant_config_from_compressed_tensors), not the INT4 "
                "pack-quantized experts of moonshotai/Kimi-K2.6; NVIDIA serves Kimi on TensorRT-LLM from its NVFP4 "
                "checkpoint (seed 003). Use quant=nvfp4 with engine=trtllm, or engine=sglang/vllm for int4",
    },
    # kv_cache_config.free_gpu_memory_fraction is a share of what is free after the weights and buffers are allocated
    # (trtllm-serve's --free_gpu_memory_fraction help: "Free GPU memory fraction reserved for KV Cache, after
    # allocating model weights and buffers"), not of the whole card; seed 003 uses 0.75, TensorRT-LLM defaults to 0.9.
    # The runtime reserve (activations at max_num_tokens 8448, CUDA graphs, NCCL/UCX buffers) is an estimate.
    "memory": {"flag": "kv_cache_config.free_gpu_memory_fraction", "default": 0.75, "max": 0.9, "of": "free",
               "runtime_reserve_bytes": 8 * GB,
               "why_max": "TensorRT-LLM's free_gpu_memory_fraction is a share of the memory left after the weights; "
                          "above its default 0.9 activation peaks and CUDA graphs run out",
               "meaning": "the share of each GPU's memory left after the weights and runtime buffers that becomes KV "
                          "cache"},
    "context": "warn",
    # No instances side by side under one trtllm-serve: 1.3.0rc17's flag list has --tp_size, --pp_size, --ep_size and
    # --cluster_size but no data-parallel size; its attention data parallel (enable_attention_dp) runs inside the one
    # tensor-parallel group. The layout ranking offers it one instance over every GPU.
    "data_parallel": None,
    "data_parallel_why": "trtllm-serve 1.3.0rc17 serves one model instance per process (its flags have no "
                         "data-parallel size; enable_attention_dp is attention data parallel inside one "
                         "tensor-parallel group), so only single-instance layouts are offered for TensorRT-LLM",
    "multi_node": None,
    "multi_node_why": "TensorRT-LLM runs a model over several hosts as one MPI world (srun or mpirun with "
                      "trtllm-llmapi-launch, or NVIDIA's SLURM scripts, seed 003), which this collection's one-unit-per-"
                      "host service does not launch yet. Serve it on one host of 8 x B200/GB200, or use engine=vllm or "
                      "engine=sglang for a replica over several hosts",
    # A hybrid model's linear-attention state would live outside the KV pool (NVIDIA's K3 guide: "KDA layers keep
    # per-request FP32 recurrent state outside the paged KV pool"), per max_batch_size request.
    "hybrid_state": {"rule": "outside"},
    "vision": True,
    "image_refusals": (),
    # --ipc host: the engine uses the host's /dev/shm, which must hold the weights while they load (seed 003: Bus
    # error at weight load, fixed with tmpfs /dev/shm size=640G for Kimi K2's ~595 GB).
    "shm_bytes": 640 * GIB,
    # trtllm-serve's Prometheus text (with return_perf_metrics); /metrics is its JSON iteration stats.
    "metrics_path": "/prometheus/metrics",
    "shm_why": "TensorRT-LLM stages the weights through /dev/shm while it loads them; with less, it dies with 'Caught "
               "signal 7 (Bus error: nonexistent physical address)' (seed 003, NVIDIA's Kimi K2 guide: tmpfs "
               "/dev/shm size=640G)",
    # Prefill/decode disaggregation (seed 003: context and generation servers with cache_transceiver_config backend
    # UCX), behind the engine image's own router, trtllm-serve disaggregated.
    # Speculative decoding: refused until its keys can be checked. The pinned release's schema was read from upstream
    # files (approximate) whose speculative_config records one member of the union, DraftTargetDecodingConfig:
    # EAGLE-3's keys (decoding_type Eagle3, speculative_model_dir, max_draft_len) are not in it.
    "kernel_cache": KERNEL_CACHE,
    # What it runs at once (SMG's priority scheduler counts it per worker: TensorRT-LLM reports none to it).
    "slots": slots,
    # The KV host tier (_model/kv_offload.py, kimi_kv_offload): kv_cache_config.host_cache_size, bytes of host memory
    # for each rank's secondary block pool, where evicted reusable blocks go and are onboarded back (the pinned
    # release's TorchLlmArgs schema, plugins/module_utils/_engines/flags/trtllm_1_3_0rc17.py, KvCacheConfig
    # host_cache_size Optional[int]; block reuse is on by default). Its hit rate: trtllm_kv_cache_hit_rate, an
    # iteration-stats gauge over every tier (tensorrt_llm/metrics/collector.py). Runtime-unverified for Kimi's MLA.
    "kv_offload": {
        "mechanism": "TensorRT-LLM's secondary (host) KV block pool (kv_cache_config.host_cache_size)",
        "split": "rank",
        "unit": "bytes",
        "source": "TorchLlmArgs KvCacheConfig.host_cache_size (the 1.3.0rc17 schema, "
                  "_engines/flags/trtllm_1_3_0rc17.py)",
        "metrics": {"rate": "trtllm_kv_cache_hit_rate"},
    },
    "speculative": None,
    "speculative_why": "speculative decoding is not offered on TensorRT-LLM yet: its flag list records only the "
                       "Draft_Target member of speculative_config (an approximate schema), so EAGLE-3's keys cannot be "
                       "checked. Use engine=vllm or engine=sglang for kimi_speculative",
    "disaggregation": {
        "router": "trtllm-disaggregated",
        "bootstrap": False,
        "rdma": "UCX",
        "tcp": "UCX",
        "backends": {
            "UCX": {"rdma": False, "why": "the cache transceiver over UCX (seed 003), on RDMA or NVLink where UCX finds "
                                          "them and TCP otherwise."},
            "NIXL": {"rdma": False, "why": "the cache transceiver over NIXL."},
        },
    },
    "args": (
        Arg("--model", "quant", model, positional=True),  # `trtllm-serve <model>`
        Arg("--revision", "revision", _revision, when=_revision),
        Arg("--host", "host"),
        Arg("--port", "port"),
        Arg("--config", value=CONFIG_PATH),  # the YAML, as seed 003 passes it (also spelled --extra_llm_api_options)
        Arg("--tool_parser", value=tool_parser, when=tool_parser),
        Arg("--reasoning_parser", value=reasoning_parser, when=reasoning_parser),
        Arg("--otlp_traces_endpoint", "otlp_endpoint", otlp_url, when=traced),  # kimi_otlp_endpoint
        # Set in the YAML, which wins over the CLI: managed here so extra args cannot contradict the config.
        Arg("--tensor_parallel_size", "tp", when=_never),
        Arg("--pipeline_parallel_size", "pp", when=_never),
        Arg("--max_seq_len", "context_length", when=_never),
        Arg("--free_gpu_memory_fraction", "mem_fraction", when=_never),
        Arg("--trust_remote_code", when=_never),
    ),
    "config": config,
    "config_path": CONFIG_PATH,
    # Config keys the collection owns (dotted) -> the deployment field, and so the variable, a user sets instead.
    "config_managed": {
        "tensor_parallel_size": "tp",
        "pipeline_parallel_size": "pp",
        "max_seq_len": "context_length",
        "trust_remote_code": None,
        "kv_cache_config.dtype": "kv_cache_dtype",
        "kv_cache_config.free_gpu_memory_fraction": "mem_fraction",
        "kv_cache_config.host_cache_size": "kv_offload_gb",
        "backend": None,
        "return_perf_metrics": None,
        "enable_iter_perf_stats": None,
        "cache_transceiver_config.backend": "pd_transfer_backend",
        "disable_overlap_scheduler": "pd_role",
    },
    "config_defaults": config_defaults,
}
