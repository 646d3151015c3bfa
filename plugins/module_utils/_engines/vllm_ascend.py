# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""vLLM-Ascend (engine=vllm on Ascend NPUs), as data (see _engines/spec.py for the fields). Private to kimi.deploy.

Sources: seed 004 (vLLM-Ascend's Kimi-K2.6 guide, v0.20.0rc1: images, devices, mounts, environment, host tuning, the
TP 4 x DP 4 + expert-parallel layout, --quantization ascend); the flag list of the vLLM release vLLM-Ascend runs on.
vLLM-Ascend is a platform plugin of vLLM and adds no command-line option (its 0.20.2rc1 wheel has no add_argument and
checks vllm_version_is("0.20.2") 23 times): its parser is vLLM 0.20.2's, generated from that wheel
(tests/fixtures/engine_flags/engine_flags_vllm-0.20.2.json, `make engine-flags ENGINE=vllm VERSION=0.20.2`).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

from ansible_collections.kimi.deploy.plugins.module_utils._common import GB, GIB
from ansible_collections.kimi.deploy.plugins.module_utils._engines.spec import (
    Arg, data_parallel, data_parallel_local, data_parallel_start_rank, model, multi_node, otlp_url,
    pd_kv_transfer_config, reasoning_parser, spec_config, speculative, tool_parser, traced, worker)
from ansible_collections.kimi.deploy.plugins.module_utils._engines.vllm import SPECULATIVE as VLLM_SPECULATIVE
from ansible_collections.kimi.deploy.plugins.module_utils._engines.flags.vllm_0_20_2 import OPTIONS as VLLM_0_20_2
from ansible_collections.kimi.deploy.plugins.module_utils._engines.vllm import SERVING_METRICS, slots

# Kernel caches (_model/kernel_cache.py): vLLM's own VLLM_CACHE_ROOT (vllm/envs.py; vllm-ascend runs vLLM's
# compilation under it) and TORCHINDUCTOR_CACHE_DIR. The torchair / ACL graph caches of vllm-ascend were not read in
# the released package: unverified, not carried.
KERNEL_CACHE = {
    "primary": "VLLM_CACHE_ROOT",
    "env": {"VLLM_CACHE_ROOT": "vllm", "TORCHINDUCTOR_CACHE_DIR": "inductor"},
    "precompile": None,
    "sources": "vllm/envs.py (the vLLM release vllm-ascend builds on); torchair's cache not read",
}

ENGINE = {
    "name": "vllm",
    "serving_metrics": SERVING_METRICS,  # its engine's own server: the same series
    "key": "vllm-ascend",
    "platform": "ascend",
    "title": "vLLM-Ascend",
    "entrypoint": ("vllm", "serve"),
    # quay.io/ascend/vllm-ascend's entry point is a shell: the command is ours (seed 004 runs `vllm serve` in it).
    "image_entrypoint": False,
    "default_version": "0.20.2rc1",
    "versions": {
        "0.20.2rc1": {
            "options": VLLM_0_20_2,
            "parser_of": ("vllm", "0.20.2"),  # the flag list is this vLLM release's
            # The -a3 build for the Atlas 800 A3, the plain tag for the A2 (seed 004, 4.1).
            "images": {"w4a8": {"ascend-a3": "quay.io/ascend/vllm-ascend:v0.20.2rc1-a3",
                                "ascend-a2": "quay.io/ascend/vllm-ascend:v0.20.2rc1"}},
            "local_build": (),
            "verified": None,
            "notes": ("vLLM-Ascend 0.20.2rc1: the first release with a wheel on PyPI after v0.20.0rc1, which seed 004 "
                      "validated Kimi-K2.6 W4A8 on; its flags are vLLM 0.20.2's (a platform plugin adds none).",),
        },
    },
    "quants": {
        # MLA's KV in BF16: the seed's commands set no KV dtype, and vLLM-Ascend's MLA backend has no FP8 KV for it.
        "w4a8": {"kv_menu": ("auto",), "families": ("ascend-a2", "ascend-a3"),
                 "families_why": "vLLM-Ascend serves Kimi-K2.6 W4A8 on the Atlas 800 A3 and A2 (seed 004)"},
    },
    "refused_quants": {
        "int4": "moonshotai/Kimi-K2.6's INT4 (compressed-tensors, Marlin MoE kernels) needs CUDA; on Ascend the "
                "checkpoint is Eco-Tech/Kimi-K2.6-W4A8: use quant=w4a8",
        "nvfp4": "NVFP4 needs NVIDIA's FP4 tensor cores (Blackwell); on Ascend use quant=w4a8",
    },
    # Seed 004 runs 0.9 on one A3 (0.95 / 0.91 on disaggregated prefill / decode nodes); the reserve for the NPU
    # runtime (graphs, HCCL buffers: HCCL_BUFFSIZE 800 MB) is an estimate.
    "memory": {"flag": "--gpu-memory-utilization", "default": 0.9, "max": 0.95, "of": "total",
               "runtime_reserve_bytes": 8 * GB,
               "why_max": "vLLM-Ascend's --gpu-memory-utilization caps the whole footprint; seed 004 goes to 0.95 only "
                          "on prefill nodes",
               "meaning": "the share of each NPU's HBM vLLM-Ascend may use in all (weights, KV, activations, graphs)"},
    "context": "strict",
    # Tensor parallel 4 inside each group, data parallel over the rest, the experts over all (seed 004: TP 4 x DP 4 +
    # --enable-expert-parallel on one A3); over several hosts, vLLM's own data-parallel deployment (a DP master on the
    # head, --headless ranks elsewhere).
    "multi_node": "data",
    "attention_tp": 4,
    # A hybrid model's linear-attention state (_model/memory.py): one block pool with the KV cache, a state block per
    # running request (v1/core/kv_cache_utils.py get_max_concurrency_for_kv_cache_config, 0.33.0).
    "hybrid_state": {"rule": "shared"},
    "vision": True,
    "image_refusals": (),
    "shm_bytes": None,
    "container_shm_bytes": 1 * GIB,  # seed 004: --shm-size=1g
    # Seed 004's environment for one node; the HCCL interface settings of a replica come from kimi_serve.
    "container_env": {
        "HCCL_OP_EXPANSION_MODE": "AIV",
        "HCCL_BUFFSIZE": "800",
        "PYTORCH_NPU_ALLOC_CONF": "expandable_segments:True",
        "OMP_PROC_BIND": "false",
        "OMP_NUM_THREADS": "1",
        "TASK_QUEUE_ENABLE": "1",
        "VLLM_ASCEND_ENABLE_MLAPO": "1",
        "VLLM_ASCEND_ENABLE_FLASHCOMM1": "1",
        "VLLM_ASCEND_BALANCE_SCHEDULING": "1",
    },
    "container_env_multi_node": {"VLLM_RPC_TIMEOUT": "3600000", "VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS": "30000"},
    # Prefill/decode disaggregation (seed 004: MooncakeConnectorV1, kv_producer on prefill, kv_consumer on decode, a
    # kv_port and an engine id per instance, both layouts in kv_connector_extra_config), behind vllm-router (seed 004
    # runs vllm-ascend's example proxy; the choice is the engine project's own router). Not SMG: SMG 1.13.0
    # knows only vLLM's NixlConnector and MooncakeConnector by name, and routes any other connector as passthrough,
    # without a KV handoff (routers.py, SMG_VLLM_CONNECTORS, quoting its kv_transfer.rs).
    "disaggregation": {
        "router": "vllm-router",
        "router_why": "SMG 1.13.0 hands the KV cache over only for vLLM's NixlConnector and MooncakeConnector "
                      "(kv_transfer.rs: any other kv_connector is passthrough, the prefill gets no kv_transfer_params "
                      "and the decode recomputes the prompt); vLLM-Ascend's MooncakeConnectorV1 is neither, so "
                      "vllm-router 0.1.17 routes it",
        "bootstrap": False,
        "kv_transfer_config": "mooncake-v1",
        "rdma": "mooncake",
        "tcp": "mooncake",
        "backends": {
            "mooncake": {"rdma": False, "why": "vLLM-Ascend's MooncakeConnectorV1 pushes the KV cache NPU to NPU over "
                                               "the NPUs' own network (seed 004)."},
        },
        "container_env": {"ASCEND_BUFFER_POOL": "4:8"},
    },
    # Speculative decoding as vLLM's (seed 004 serves the EAGLE-3 draft on prefill and decode, and the DFlash draft on
    # one node); vLLM 0.20.2 has no --spec-method shorthand, its methods are --speculative-config's.
    "speculative": VLLM_SPECULATIVE,
    # kimi_kv_offload: vLLM's OffloadingConnector fails on vLLM-Ascend for MLA models, Kimi-K2.5 among them: its
    # register_kv_caches finds no Attention layer (the MLA layers are another class) and indexes an empty dict
    # (vllm-project/vllm-ascend#7971, open); seed 004 serves Kimi-K2.6 without it.
    "kv_offload": None,
    "kv_offload_why": "vLLM's OffloadingConnector does not start on vLLM-Ascend with an MLA model (Kimi-K2.5 and GLM "
                      "reported: register_kv_caches finds no Attention layer among the MLA layers, "
                      "vllm-project/vllm-ascend#7971, open), and seed 004's Kimi-K2.6 guide serves without it",
    "kernel_cache": KERNEL_CACHE,
    "slots": slots,  # vLLM's rule (_engines/vllm.py), the NPUs' memory standing for the GPUs'
    "args": (
        Arg("--model", "quant", model, positional=True),
        Arg("--quantization", "quant", value="ascend"),
        Arg("--tensor-parallel-size", "tp"),
        Arg("--data-parallel-size", "dp", when=data_parallel),
        Arg("--enable-expert-parallel"),
        Arg("--trust-remote-code"),
        Arg("--host", "host"),
        Arg("--port", "port"),
        Arg("--served-model-name", "served_model_name"),
        Arg("--tool-call-parser", value=tool_parser, when=tool_parser),
        Arg("--enable-auto-tool-choice", when=tool_parser),
        Arg("--reasoning-parser", value=reasoning_parser, when=reasoning_parser),
        Arg("--otlp-traces-endpoint", "otlp_endpoint", otlp_url, when=traced),  # kimi_otlp_endpoint
        Arg("--mm-encoder-tp-mode", value="data"),
        Arg("--gpu-memory-utilization", "mem_fraction"),
        Arg("--max-model-len", "context_length"),
        # Seed 004's single-node command: graphs for decode only.
        Arg("--compilation-config", value=json.dumps({"cudagraph_mode": "FULL_DECODE_ONLY"}, separators=(",", ":"))),
        # A replica over several hosts: vLLM's data-parallel deployment; the head (DP master) serves the API.
        Arg("--data-parallel-size-local", "dp", data_parallel_local, when=multi_node),
        Arg("--data-parallel-address", "head_address", when=multi_node),
        Arg("--data-parallel-rpc-port", "dist_port", when=multi_node),
        Arg("--data-parallel-start-rank", "node_rank", data_parallel_start_rank, when=worker),
        Arg("--headless", when=worker),
        # A disaggregated deployment (kimi_pd): the KV connector and this instance's role in it.
        Arg("--kv-transfer-config", "pd_role", pd_kv_transfer_config, when=pd_kv_transfer_config),
        Arg("--speculative-config", "speculative", spec_config, when=speculative),
    ),
    "config": None,
    "config_path": None,
}
