# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""vLLM, as data (see _engine_spec for the fields). Private to kimi.deploy.

Sources: the sm_120 runbook (vLLM 0.22.1: flags, memory knob, KV menu, the NVFP4 patch), the flag lists made from the
released wheels (tests/fixtures/engine_flags/engine_flags_vllm-<version>.json, `make engine-flags`).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.kimi.deploy.plugins.module_utils._model.checkpoints import GB
from ansible_collections.kimi.deploy.plugins.module_utils._engines.spec import (
    Arg, model, multi_node, nvfp4, pd_kv_transfer_config, pipelined, quantization, reasoning_parser, tool_parser,
    worker)
from ansible_collections.kimi.deploy.plugins.module_utils._engines.flags.vllm_0_22_1 import OPTIONS as V0_22_1
from ansible_collections.kimi.deploy.plugins.module_utils._engines.flags.vllm_0_33_0 import OPTIONS as V0_33_0
from ansible_collections.kimi.deploy.plugins.module_utils._model.speculative import (
    never, spec_config, spec_pipelined, speculative, with_draft)

# Speculative decoding, vLLM's form (its docs; seed 004's flags): one --speculative-config JSON with the method, the
# draft (a repo id, resolved in the offline cache as the target's is) and num_speculative_tokens.
SPECULATIVE = {
    "form": "vllm",
    "option": "--speculative-config method",
    "methods_from": ("spec_method", "speculative_config"),
    "names": {"eagle3": "eagle3", "dflash": "dflash", "ngram": "ngram"},
    "drafts": {"eagle3": "lightseekorg/kimi-k2.6-eagle3", "dflash": "z-lab/Kimi-K2.6-DFlash"},
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

# Its serving series (v1/metrics/loggers.py): finished requests, TTFT and inter-token latency (what a canary compares).
SERVING_METRICS = {"requests": "vllm:request_success_total", "ttft": "vllm:time_to_first_token_seconds",
                   "itl": "vllm:inter_token_latency_seconds"}

ENGINE = {
    "name": "vllm",
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
        },
        "0.33.0": {
            "options": V0_33_0,
            "images": {"int4": "vllm/vllm-openai:v0.33.0", "nvfp4": "kimi-k26-nvfp4-vllm:v0.33.0-cu130-mla"},
            # Upstream still launches the TRITON_MLA grouped decode with num_stages=2 on CUDA in 0.33.0 (it lowers it
            # only on ROCm or for BLOCK_DMODEL >= 1024; MLA's is 512: triton_decode_attention.py lines 520-531 of the
            # 0.33.0 wheel), so sm_120 still needs the patched image. Since vLLM 0.20 the unsuffixed tag is CUDA 13.
            "local_build": ("nvfp4",),
            "build_bases": {"nvfp4": "vllm/vllm-openai:v0.33.0"},
            "verified": None,
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
    "tool_parser": ("kimi_k2",),
    "reasoning_parser": ("kimi_k2",),
    "vision": True,
    "image_refusals": (),
    "shm_bytes": None,
    # Prefill/decode disaggregation (vLLM's docs: NixlConnector, kv_role kv_both on both sides; the decode pulls the
    # KV cache through NIXL's side channel), behind vllm-router.
    "disaggregation": {
        "router": "vllm-router",
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
    "args": (
        Arg("--model", "quant", model, positional=True),  # `vllm serve <model>`
        Arg("--tensor-parallel-size", "tp"),
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
        # Speculative decoding (kimi_speculative); the --spec-* shorthands of the same config are the collection's too.
        Arg("--speculative-config", "speculative", spec_config, when=speculative),
        Arg("--spec-method", "speculative", when=never),
        Arg("--spec-model", "speculative_draft", when=never),
        Arg("--spec-tokens", "speculative_tokens", when=never),
    ),
    "config": None,
    "config_path": None,
}
