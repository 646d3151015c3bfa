# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Accelerator platforms and families, and the identity recommended for each, with the reasons. Private to kimi.deploy.

A host is NVIDIA or Ascend from its facts: summarize() reads the accelerator list (gpu_facts's nvidia_gpus, npu_facts's
ascend_npus, or the kimi_gpus input, whose Ascend entries say platform: ascend) with _model.gpu.summarize_gpus or
_model.npu.summarize_npus, and adds the platform. A family is the summary's `arch`. RECOMMENDED holds, per family, the
(quant, engine) the collection picks when the user leaves them to it, the MoE backend where it matters, and why, with
the evidence cited; ALTERNATIVES the engine it would pick for the other quant. A new family is a new entry here.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.kimi.deploy.plugins.module_utils._model.gpu import GpuListError, summarize_gpus
from ansible_collections.kimi.deploy.plugins.module_utils._model.npu import NpuListError, summarize_npus
from ansible_collections.kimi.deploy.plugins.module_utils._model.platforms import ORDER, PLATFORMS as PLATFORM_DATA

PLATFORMS = ORDER
PLATFORM_TITLES = dict((name, entry["title"]) for name, entry in PLATFORM_DATA.items())

RECOMMENDED = {
    "blackwell-rtx": {
        "quant": "int4", "engine": "sglang", "moe_backend": None,
        "why": (
            "%(arch_name)s (sm_120): INT4 QAT is the official checkpoint, verified on both engines with stock images; "
            "NVFP4 buys no throughput on a PCIe-only box (Marlin of INT4 ~= Marlin of NVFP4; native FP4 measured ~12%% "
            "slower) and needs a patched CUDA-13 image.",
            "SGLang over vLLM on sm_120: faster at every concurrency (+34% at c1, +29% at c128) and serves the full "
            "256K context at --mem-fraction-static 0.85.",
        ),
    },
    "blackwell-dc": {
        "quant": "nvfp4", "engine": "vllm", "moe_backend": "flashinfer_cutedsl",
        "why": (
            "%(arch_name)s (%(sm)s): NVFP4 uses the native FP4 tensor cores through FlashInfer CuTe-DSL (the tuned "
            "upstream path; unverified by this collection's reference runs).",
            "vLLM over TensorRT-LLM here: NVIDIA's own guide serves Kimi K2 NVFP4 with TensorRT-LLM on B200 (seed 003: "
            "attention data parallel 8 + expert parallel 8), but no stable TensorRT-LLM release has Kimi-K2.6's "
            "architecture yet (1.2.1 predates it; the pinned 1.3.0rc17 is a release candidate, NVIDIA/TensorRT-LLM#15179), "
            "and this collection runs it on one host only; engine=trtllm is the alternative on one 8-GPU B200/GB200 host.",
            "NVFP4 is not served by SGLang (its NVFP4 path produces NaN, sgl-project/sglang#18954).",
        ),
    },
    "hopper": {
        "quant": "int4", "engine": "vllm", "moe_backend": None,
        "why": (
            "%(arch_name)s (%(sm)s) has no FP4 tensor cores: NVFP4 would only dequantize, so INT4 QAT (Marlin) is the "
            "pick.",
            "vLLM on non-sm_120 hardware: the model card's primary path, precompiled kernels, no JIT dependency.",
        ),
    },
    "unsupported": {
        "quant": "int4", "engine": "vllm", "moe_backend": None,
        "why": ("%(arch_name)s (%(sm)s) is older than Ampere: the INT4 Marlin MoE kernels need sm_80 or newer.",),
    },
    # Seed 004 (vLLM-Ascend) is the model's Ascend guide for both servers: one A3 node, or two A2 nodes.
    "ascend-a3": {
        "quant": "w4a8", "engine": "vllm", "moe_backend": None,
        "why": (
            "%(arch_name)s: W4A8 (Eco-Tech/Kimi-K2.6-W4A8, msModelSlim) is the checkpoint the Ascend engines serve; "
            "the INT4 and NVFP4 checkpoints need CUDA kernels.",
            "vLLM-Ascend over SGLang on Ascend: its Kimi-K2.6 guide (vLLM-Ascend v0.20.0rc1, the first release with the "
            "model) serves one A3 at tensor parallel 4 x data parallel 4 with expert parallel, and two A2 as one "
            "replica; SGLang-Ascend (v0.5.13.post1, engine=sglang) is the alternative on the A3.",
        ),
    },
    "ascend-a2": {
        "quant": "w4a8", "engine": "vllm", "moe_backend": None,
        "why": (
            "%(arch_name)s: W4A8 (Eco-Tech/Kimi-K2.6-W4A8, msModelSlim) is the checkpoint the Ascend engines serve; "
            "the INT4 and NVFP4 checkpoints need CUDA kernels.",
            "vLLM-Ascend: its Kimi-K2.6 guide serves the W4A8 checkpoint on two Atlas 800 A2 (8 x 64 GB each) as one "
            "replica; the pinned SGLang-Ascend image is the A3 build.",
        ),
    },
    None: {
        "quant": "int4", "engine": "vllm", "moe_backend": None,
        "why": ("No NVIDIA GPU or Ascend NPU was found: nothing can serve the model on this host.",),
    },
}
RECOMMENDED["ada"] = RECOMMENDED["ampere"] = RECOMMENDED["hopper"]

# The engine for the quant the user picked when it is not the family's recommended one.
ALTERNATIVES = {
    ("blackwell-rtx", "nvfp4"): "vllm",
    ("blackwell-dc", "int4"): "vllm",
}


def is_ascend(entry):
    """An accelerator list entry that is an Ascend NPU (npu_facts's ascend_npus, or kimi_gpus with platform: ascend)."""
    return isinstance(entry, dict) and (entry.get("platform") == "ascend" or "chip" in entry)


def summarize(accelerators):
    """The one accelerator summary (summarize_gpus's keys + platform) of an NVIDIA or an Ascend list; a list of both is
    refused. Raises GpuListError or NpuListError (ValueError both)."""
    accelerators = accelerators or []
    if not isinstance(accelerators, (list, tuple)):
        return summarize_gpus(accelerators)  # raises its own "must be a list" error
    ascend = [entry for entry in accelerators if is_ascend(entry)]
    if ascend and len(ascend) != len(accelerators):
        raise NpuListError("the accelerator list mixes %d Ascend NPU(s) with %d other device(s): one host is NVIDIA "
                           "or Ascend, not both" % (len(ascend), len(accelerators) - len(ascend)))
    if ascend:
        return summarize_npus(ascend)
    return dict(summarize_gpus(accelerators), platform="nvidia")


def platform_of(summary):
    """nvidia or ascend for a summary; None for an empty one (no accelerator found)."""
    return summary.get("platform", "nvidia") if summary and summary["count"] else None


SUMMARY_ERRORS = (GpuListError, NpuListError)


def recommended(summary):
    """{quant, engine, moe_backend, why} for a GPU summary (summarize_gpus)."""
    entry = RECOMMENDED.get(summary["arch"] if summary["count"] else None, RECOMMENDED[None])
    values = {"arch_name": summary.get("arch_name"), "sm": summary.get("sm")}
    return dict(entry, why=[line % values if "%(" in line else line for line in entry["why"]])


def engine_for(summary, quant):
    """The engine for `quant` on this family when the user chose the quant and left the engine to the collection."""
    pick = recommended(summary)
    if quant == pick["quant"]:
        return pick["engine"]
    return ALTERNATIVES.get((summary["arch"], quant), "vllm")
