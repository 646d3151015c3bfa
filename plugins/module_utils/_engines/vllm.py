# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""vLLM, as data (see _engines/spec.py for the fields). Private to kimi.deploy.

Sources: the sm_120 runbook (vLLM 0.22.1: flags, memory knob, KV menu, the NVFP4 patch), the flag lists made from the
released wheels (tests/fixtures/engine_flags/engine_flags_vllm-<version>.json, `make engine-flags`).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.kimi.deploy.plugins.module_utils._common import GB
from ansible_collections.kimi.deploy.plugins.module_utils._engines.spec import (
    Arg, data_parallel, load_format, load_strategy, loader_extra_config, model, multi_node, never, nvfp4, otlp_url,
    pd_kv_transfer_config, pipelined, present, quantization, reasoning_parser, resolved, spec_config, spec_pipelined,
    speculative, tool_parser, traced, with_draft, worker)
from ansible_collections.kimi.deploy.plugins.module_utils._engines.flags.vllm_0_22_1 import OPTIONS as V0_22_1
from ansible_collections.kimi.deploy.plugins.module_utils._engines.flags.vllm_0_33_0 import OPTIONS as V0_33_0

# Speculative decoding, vLLM's form (its docs; seed 004's flags): one --speculative-config JSON with the method, the
# draft (a repo id, resolved in the offline cache as the target's is) and num_speculative_tokens.
SPECULATIVE = {
    "form": "vllm",
    "option": "--speculative-config method",
    "methods_from": ("spec_method", "speculative_config"),
    "names": {"eagle3": "eagle3", "dflash": "dflash", "ngram": "ngram"},
    "refused": (
        (lambda method, quant, deployment: with_draft(method, quant, deployment) and spec_pipelined(method, quant, deployment),
         "EAGLE-3 and DFlash drafts need the target's aux hidden states on one stage, and vLLM refuses them with "
         "pipeline parallel (0.22.1 gpu/model_runner.py: 'EAGLE3 with pipeline parallel is not supported'; 0.33.0: "
         "DeepseekV2 has no aux hidden states over pipeline stages): use kimi_speculative ngram on a pipelined "
         "replica, or one host"),
    ),
    # Counters (with a _total suffix) that exist only with a speculative config (v1/spec_decode/metrics.py).
    "metrics": {"kind": "counters", "drafts": "vllm:spec_decode_num_drafts_total",
                "draft_tokens": "vllm:spec_decode_num_draft_tokens_total",
                "accepted": "vllm:spec_decode_num_accepted_tokens_total"},
}

# Weight loaders (kimi_load_format; _model/loader.py chooses). The formats: vllm/config/load.py's load_format Literal as
# the 0.22.1 flag list's source records them (tests/fixtures/engine_flags/engine_flags_vllm-0.22.1.json, load_format
# known_values; its parser takes any string); the 0.33.0 list records none, so 0.22.1's are assumed. The Run:ai
# streamer imports runai_model_streamer, which the vllm-openai image installs (docker/Dockerfile, stage
# vllm-openai-base: runai-model-streamer); fastsafetensors is only the vllm[fastsafetensors] extra (setup.py
# extras_require), not in the image; instanttensor's package was not checked. Its concurrency: vLLM's docs
# (models/extensions/runai_model_streamer.md, --model-loader-extra-config '{"concurrency":16}'). A slow disk: 0.33.0's
# --safetensors-load-strategy choices have prefetch ("checkpoint files are read into the OS page cache before workers
# load them... useful on network or high-latency storage", vllm/config/load.py; the default already does it on NFS
# only); 0.22.1's list records no choices for it, so it is not used there.
LOAD_FORMATS = ("auto", "hf", "bitsandbytes", "dummy", "fastsafetensors", "gguf", "instanttensor", "mistral",
                "modelexpress", "npcache", "pt", "runai_streamer", "runai_streamer_sharded", "safetensors",
                "sharded_state", "tensorizer")
LOADING_0_22 = {
    "known": LOAD_FORMATS,
    "packages": {"runai_streamer": ("runai-model-streamer", True), "fastsafetensors": ("fastsafetensors", False),
                 "instanttensor": ("instanttensor", None)},
    "fast": {"format": "runai_streamer", "extra_config": {"concurrency": 16},
             "why": "the Run:ai streamer reads the shards with 16 concurrent readers into host buffers and overlaps "
                    "the copy to the GPUs, where the default loader maps and copies one tensor at a time"},
    "slow": None,
}
LOADING_0_33 = dict(LOADING_0_22, slow={
    "format": None, "load_strategy": "prefetch",
    "why": "vLLM reads the checkpoint files into the page cache before the workers load them "
           "(--safetensors-load-strategy prefetch)"})

# Its serving series (v1/metrics/loggers.py): finished requests, TTFT and inter-token latency (what a canary compares).
SERVING_METRICS = {"requests": "vllm:request_success_total", "ttft": "vllm:time_to_first_token_seconds",
                   "itl": "vllm:inter_token_latency_seconds"}

# The KV host tier (_model/kv_offload.py, kimi_kv_offload): vLLM's native CPU offloading, --kv-offloading-backend native
# with --kv-offloading-size GiB (both in the 0.22.1 and 0.33.0 lists). vllm/config/kv_offloading.py turns them into
# kv_transfer_config OffloadingConnector, kv_role kv_both, the size "summed across all TP ranks" (x PP), so the
# replica's total. MLA: the CPU-GPU handlers read each layer's layout from the attention backend's
# get_kv_cache_shape and split K/V only for a (2, num_blocks, ...) shape; MLA's (num_blocks, block_size, 576) cache is
# one region per layer (vllm/v1/kv_offload/worker/cpu_gpu.py). Its hits: the KV connector's prefix-cache counters
# (vllm:external_prefix_cache_{hits,queries}_total, v1/metrics/loggers.py). The option is the same kv_transfer_config
# a disaggregated deployment's NixlConnector takes: one connector per instance.
KV_OFFLOAD = {
    "mechanism": "vLLM's native CPU offloading connector (--kv-offloading-backend native)",
    "split": "replica",
    "unit": "GiB",
    "source": "vllm/config/kv_offloading.py (NativeOffloadingParser), vllm/v1/kv_offload/worker/cpu_gpu.py",
    "pd_why": "vLLM's --kv-offloading-size configures the instance's one kv_transfer_config, which a disaggregated "
              "deployment's NixlConnector already is (vllm/config/kv_offloading.py sets kv_connector "
              "OffloadingConnector): use kimi_kv_offload none with kimi_pd on vLLM",
    "metrics": {"hits": "vllm:external_prefix_cache_hits_total", "queries": "vllm:external_prefix_cache_queries_total"},
}

# Kernel caches (kimi_serve keeps them on the host per cache key, _model/kernel_cache.py): the variables that move them,
# each to a sub-folder of the key's folder. vllm/envs.py: VLLM_CACHE_ROOT (default ~/.cache/vllm; torch.compile's
# artifacts go to <root>/torch_compile_cache/<hash>/rank_<i>_<j>, compilation/backends.py "Using cache directory");
# Triton's TRITON_CACHE_DIR (triton/knobs.py, default ~/.triton/cache); TORCHINDUCTOR_CACHE_DIR (torch/_inductor,
# default /tmp/torchinductor_<user>); FlashInfer's JIT and autotune cache under FLASHINFER_WORKSPACE_BASE/.cache/
# flashinfer (flashinfer/jit/env.py). CUDA graphs are captured again at every start: no release keeps them.
KERNEL_CACHE = {
    "primary": "VLLM_CACHE_ROOT",
    "env": {"VLLM_CACHE_ROOT": "vllm", "TRITON_CACHE_DIR": "triton", "TORCHINDUCTOR_CACHE_DIR": "inductor",
            "FLASHINFER_WORKSPACE_BASE": "flashinfer"},
    "precompile": None,
    "sources": "vllm/envs.py, vllm/compilation/backends.py, flashinfer/jit/env.py, triton/knobs.py",
}

# vLLM's default --max-num-seqs for `vllm serve` (EngineArgs.get_batch_defaults, vllm/engine/arg_utils.py; read in
# 0.10-0.11, not in the pinned wheels): 1024 on a device of 70 GiB or more that is not an A100, else 256, and never
# more than --max-num-batched-tokens (its default is larger than either).
BATCH_DEFAULT_MIB = 70 * 1024


def slots(deployment, given):
    """The requests a vLLM API server runs at once: --max-num-seqs (kimi_engine_extra_args, else vLLM's default for
    the host's accelerators; None without their facts) for each data-parallel rank, each rank's scheduler holding its
    own."""
    seqs = given("max_num_seqs")
    if seqs is None:
        hardware = deployment["hardware"]
        if not hardware or not hardware["vram_min_mib"]:
            return None
        large = hardware["vram_min_mib"] >= BATCH_DEFAULT_MIB and not any("a100" in m.lower()
                                                                          for m in hardware["models"])
        seqs = min(1024 if large else 256, int(given("max_num_batched_tokens") or 1024))
    return int(seqs) * deployment["dp"]


ENGINE = {
    "name": "vllm",
    "platform": "nvidia",
    "serving_metrics": SERVING_METRICS,
    "title": "vLLM",
    "entrypoint": ("vllm", "serve"),
    "image_entrypoint": True,  # vllm/vllm-openai's entry point is `vllm serve`
    "default_version": "0.22.1",
    "versions": {
        "0.22.1": {
            "options": V0_22_1,
            "images": {"int4": "vllm/vllm-openai:v0.22.1", "nvfp4": "kimi-k26-nvfp4-vllm:cu130-mla"},
            # NVFP4 on sm_120: the TRITON_MLA grouped-decode kernel's num_stages patch on the CUDA-13 base (kimi_image).
            "local_build": ("nvfp4",),
            "build_bases": {"nvfp4": "vllm/vllm-openai:v0.22.1-cu130"},
            "verified": "the sm_120 runbook (8 x RTX PRO 6000): int4 and nvfp4 served and verified",
            "notes": (),
            "loading": LOADING_0_22,
        },
        "0.33.0": {
            "options": V0_33_0,
            # mxfp4: Kimi-K3's checkpoint (vLLM >= 0.27.0 registers KimiK3ForConditionalGeneration; the quant_method
            # is rewritten to mxfp4, model_executor/models/config.py).
            "images": {"int4": "vllm/vllm-openai:v0.33.0", "nvfp4": "kimi-k26-nvfp4-vllm:v0.33.0-cu130-mla",
                       "mxfp4": "vllm/vllm-openai:v0.33.0"},
            # Upstream still launches the TRITON_MLA grouped decode with num_stages=2 on CUDA in 0.33.0 (it lowers it
            # only on ROCm or for BLOCK_DMODEL >= 1024; MLA's is 512: triton_decode_attention.py lines 520-531 of the
            # 0.33.0 wheel), so sm_120 still needs the patched image. Since vLLM 0.20 the unsuffixed tag is CUDA 13.
            "local_build": ("nvfp4",),
            "build_bases": {"nvfp4": "vllm/vllm-openai:v0.33.0"},
            "verified": None,
            "loading": LOADING_0_33,
            "notes": ("vLLM 0.33.0 + NVFP4: upstream's TRITON_MLA decode still uses 2 pipeline stages on CUDA "
                      "(triton_decode_attention.py, 0.33.0), too much shared memory for sm_120 with fp8 KV: kimi_image "
                      "patches this release too (kimi_vllm_patch.py APPLIES_TO).",),
        },
    },
    "quants": {
        # TRITON_MLA serves Kimi's MLA on sm_120, whose KV menu is auto/fp8 only.
        "int4": {"kv_menu": ("fp8", "auto"), "families": None},
        # marlin is the measured throughput pick on PCIe-only sm_120; flashinfer_cutedsl the native FP4 path on sm_100.
        "nvfp4": {"kv_menu": ("fp8", "auto"), "families": None,
                  "moe_backends": ("marlin", "flashinfer_b12x", "flashinfer_cutedsl")},
        # MXFP4 experts: native FP4 on sm_100/103, Marlin/Humming on sm_90 and sm_120 (fused_moe/oracle/mxfp4.py).
        "mxfp4": {"kv_menu": ("fp8", "auto"), "families": None},
    },
    "refused_quants": {},
    # --gpu-memory-utilization caps the whole footprint (measured on 8 x 96 GB: 0.95 works, 0.85 leaves no KV and
    # vLLM will not start); 7.65 GB of non-KV runtime (activations, CUDA graphs, encoder cache) live inside it.
    "memory": {"flag": "--gpu-memory-utilization", "default": 0.95, "max": 0.98, "of": "total",
               "runtime_reserve_bytes": 7.65 * GB,
               "why_max": "vLLM's --gpu-memory-utilization caps the whole footprint",
               "meaning": "the share of each GPU vLLM may use in all (weights, KV, activations, CUDA graphs)"},
    "context": "strict",  # vLLM refuses to start with a context larger than its KV cache
    "multi_node": "pipeline",
    # Several instances on one host: vLLM's own data parallelism, tensor parallel inside each rank, one API server
    # in front. For MoE models the expert layers are sharded over all DP x TP ranks, with or without expert parallel
    # ("2 engine instances and the tensors are sharded across 4 devices": FusedMoEParallelConfig.make,
    # vllm/model_executor/layers/fused_moe/config.py, flatten_tp_across_dp), so the ranks step together; flag list:
    # --data-parallel-size. The fit splits the experts over every GPU of the host and the rest over each rank's tp.
    "data_parallel": {"experts": "all", "how": "vLLM's --data-parallel-size (the experts over every GPU, one API "
                                               "server and one unit)"},
    # A hybrid model's linear-attention state (_model/memory.py): one block pool with the KV cache, a state block per
    # running request (v1/core/kv_cache_utils.py get_max_concurrency_for_kv_cache_config, 0.33.0).
    "hybrid_state": {"rule": "shared"},
    "vision": True,
    "image_refusals": (),
    "shm_bytes": None,
    # Prefill/decode disaggregation (vLLM's docs: NixlConnector, kv_role kv_both on both sides; the decode pulls the
    # KV cache through NIXL's side channel), behind SMG: its HTTP PD router takes vLLM sequentially (prefill with
    # do_remote_decode, then the decode with the prefill's kv_transfer_params), each worker's connector from its
    # discovery file (routers.py, _smg_vllm).
    "disaggregation": {
        "router": "smg",
        "router_why": "SMG 1.13.0 routes vLLM's prefill/decode sequentially, relaying the NixlConnector's "
                      "kv_transfer_params from the prefill to the decode (each worker's connector from its discovery "
                      "file)",
        "bootstrap": False,
        "kv_transfer_config": "nixl",
        "rdma": "nixl",
        "tcp": "nixl",
        "backends": {
            "nixl": {"rdma": False, "why": "vLLM's NixlConnector: NIXL over UCX, on RDMA where UCX finds it and TCP "
                                           "otherwise; the decode pulls each request's KV blocks from the prefill."},
        },
    },
    "speculative": SPECULATIVE,
    "kernel_cache": KERNEL_CACHE,
    "kv_offload": KV_OFFLOAD,
    # What one API server runs at once (SMG's priority scheduler counts it per worker: vLLM reports none to it).
    "slots": slots,
    "args": (
        Arg("--model", "quant", model, positional=True),  # `vllm serve <model>`
        Arg("--tensor-parallel-size", "tp"),
        Arg("--data-parallel-size", "dp", when=data_parallel),  # instances on one host (kimi_instances)
        Arg("--trust-remote-code"),
        Arg("--host", "host"),
        Arg("--port", "port"),
        Arg("--served-model-name", "served_model_name"),
        Arg("--tool-call-parser", value=tool_parser, when=tool_parser),
        Arg("--enable-auto-tool-choice", when=tool_parser),  # without it vLLM returns no tool_calls
        Arg("--reasoning-parser", value=reasoning_parser, when=reasoning_parser),
        Arg("--mm-encoder-tp-mode", value="data"),
        Arg("--gpu-memory-utilization", "mem_fraction"),
        Arg("--kv-cache-dtype", "kv_cache_dtype"),
        Arg("--max-model-len", "context_length"),
        # The weight loader (kimi_load_format, or the preflight's read test): nothing where the default serves.
        Arg("--load-format", "load_format", load_format, when=load_format),
        Arg("--model-loader-extra-config", "load_format", loader_extra_config, when=loader_extra_config),
        Arg("--safetensors-load-strategy", "load_format", load_strategy, when=load_strategy),
        Arg("--quantization", "quant", quantization, when=quantization),
        Arg("--moe-backend", "moe_backend", when=nvfp4),
        Arg("--disable-custom-all-reduce", when=nvfp4),
        Arg("--pipeline-parallel-size", "pp", when=pipelined),
        # A replica over several hosts: the head (rank 0) serves the API; the others run headless.
        Arg("--nnodes", "nodes", when=multi_node),
        Arg("--node-rank", "node_rank", when=multi_node),
        Arg("--master-addr", "head_address", when=multi_node),
        Arg("--master-port", "dist_port", when=multi_node),
        Arg("--headless", when=worker),
        # A disaggregated deployment (kimi_pd): the KV connector and this instance's role in it.
        Arg("--kv-transfer-config", "pd_role", pd_kv_transfer_config, when=pd_kv_transfer_config),
        # The KV host tier (kimi_kv_offload): the backend and the replica's total in GiB.
        Arg("--kv-offloading-backend", "kv_offload", value="native", when=present("kv_offload")),
        Arg("--kv-offloading-size", "kv_offload_gb", resolved("kv_offload", "value"), when=present("kv_offload")),
        # Traces (kimi_otlp_endpoint): vLLM's OTLP/gRPC exporter (vllm/tracing; its wheel requires opentelemetry).
        Arg("--otlp-traces-endpoint", "otlp_endpoint", otlp_url, when=traced),
        # Speculative decoding (kimi_speculative); the --spec-* shorthands of the same config are the collection's too.
        Arg("--speculative-config", "speculative", spec_config, when=speculative),
        Arg("--spec-method", "speculative", when=never),
        Arg("--spec-model", "speculative_draft", when=never),
        Arg("--spec-tokens", "speculative_tokens", when=never),
    ),
    "config": None,
    "config_path": None,
}
