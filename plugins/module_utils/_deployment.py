# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The Kimi-K2.6 deployment model: one table, one resolver.

Private to kimi.deploy (underscore module). The filter plugins, the plan playbook, the roles and the
tests all go through this module; nothing else derives checkpoints, images, menus or engine flags.

Sources: the field-tested sm_120 runbook (8x RTX PRO 6000 Blackwell) and the engine parsers of the
pinned versions (tests/fixtures/engine_flags/*.json). Numbers that come from measurements say so.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

GIB = 1024 ** 3
MIB = 1024 ** 2
GB = 1000 ** 3


class DeploymentError(ValueError):
    """An input that cannot be deployed. The message names the variable and the allowed values."""


# ---------------------------------------------------------------------------------------------------
# The table
# ---------------------------------------------------------------------------------------------------

QUANTS = ("int4", "nvfp4")
ENGINES = ("sglang", "vllm")

# Variable names users set (inventory or -e), by field. Errors name both.
VARIABLES = {
    "quant": "quant",
    "engine": "engine",
    "kv_cache_dtype": "kimi_kv_cache_dtype",
    "moe_backend": "kimi_moe_backend",
    "context_length": "kimi_context_length",
    "mem_fraction": "kimi_mem_fraction",
    "tp": "kimi_tensor_parallel",
    "host": "kimi_engine_host",
    "port": "kimi_engine_port",
    "served_model_name": "kimi_served_model_name",
    "extra_args": "kimi_engine_extra_args",
    "revision": "kimi_<quant>_revision",
    "image": "kimi_image",
}

CHECKPOINTS = {
    "int4": {
        "repo_id": "moonshotai/Kimi-K2.6",
        "format": "compressed-tensors INT4 QAT (Marlin MoE kernels, auto-detected)",
        # Released size of the checkpoint (~595 GB of safetensors). hf_snapshot reads exact sizes.
        "weights_bytes": 595 * GB,
        "quantization_flag": None,  # auto-detected; a mismatching --quantization fails at start-up
        "engines": ("sglang", "vllm"),
        "revision_variable": "kimi_int4_revision",
    },
    "nvfp4": {
        "repo_id": "nvidia/Kimi-K2.6-NVFP4",
        "format": "ModelOpt NVFP4 (FP8 KV scales shipped)",
        "weights_bytes": 595 * GB,
        "quantization_flag": "modelopt_fp4",
        "engines": ("vllm",),
        "revision_variable": "kimi_nvfp4_revision",
    },
}

# Pinned images per identity. NVFP4 needs the locally built, patched CUDA-13 image (kimi_image role).
IMAGES = {
    ("int4", "sglang"): "lmsysorg/sglang:v0.5.12.post1-cu130",
    ("int4", "vllm"): "vllm/vllm-openai:v0.22.1",
    ("nvfp4", "vllm"): "kimi-k26-nvfp4-vllm:cu130-mla",
}
ENGINE_VERSIONS = {"sglang": "0.5.12.post1", "vllm": "0.22.1"}

# Container entry points: the SGLang image has none (we run the module); vllm/vllm-openai's is `vllm serve`.
ENGINE_ENTRYPOINTS = {
    "sglang": ["python3", "-m", "sglang.launch_server"],
    "vllm": ["vllm", "serve"],
}

# KV-cache dtype menus (runbook step 3c), recommended first. Narrower than the parsers on purpose:
# vLLM serves Kimi's MLA through TRITON_MLA on sm_120, whose menu is auto/fp8 only; SGLang refuses `fp8`.
KV_MENUS = {
    ("int4", "sglang"): ("fp8_e4m3", "auto", "fp8_e5m2"),
    ("int4", "vllm"): ("fp8", "auto"),
    ("nvfp4", "vllm"): ("fp8", "auto"),
}
KV_NOTES = {
    "fp8_e4m3": "doubles the KV pool (116K -> 232K tokens on 8x96 GB), verified 5/5 incl. vision",
    "fp8": "about 2x the KV pool; needed for 256K-class context on 96 GB cards (NVFP4 ships FP8 KV scales)",
    "auto": "bf16 KV, the engine default: most conservative numerics, half the KV pool",
    "fp8_e5m2": "more exponent range, less mantissa; accepted by SGLang's Triton MLA backend, runtime-unverified",
}

# NVFP4 MoE backends (vLLM --moe-backend). marlin is the measured throughput pick on PCIe-only sm_120.
MOE_BACKENDS = ("marlin", "flashinfer_b12x", "flashinfer_cutedsl")

# Memory knobs are different knobs (measured on 8x96 GB):
#   SGLang --mem-fraction-static = weights + KV pool, transients outside it: 0.85 works, 0.90 OOM-crashes.
#   vLLM --gpu-memory-utilization = the whole footprint: 0.95 works, 0.85 leaves no KV (won't start).
MEMORY_KNOBS = {
    "sglang": {"flag": "--mem-fraction-static", "default": 0.85, "max": 0.85},
    "vllm": {"flag": "--gpu-memory-utilization", "default": 0.95, "max": 0.98},
}

MAX_CONTEXT = 262144  # the model's 256K window
DEFAULT_PORT = 30000
DEFAULT_HOST = "0.0.0.0"  # --network host: Caddy reaches it over loopback; SGLang's own default is 127.0.0.1
DEFAULT_SERVED_MODEL_NAME = "kimi-k2.6"
DEFAULT_DISK_BYTES = 650 * GB  # free space the weights disk needs for one variant plus slack
PARSER = "kimi_k2"

# --- KV capacity estimate (per GPU: MLA's latent KV is replicated on every TP rank) -----------------
# Kimi-K2 geometry: 61 layers x (kv_lora_rank 512 + rope 64) latent values per token.
KV_BYTES_PER_TOKEN = {"bf16": 61 * 576 * 2, "fp8": 61 * 576 * 1}
KV_ELEMENT = {"auto": "bf16", "bf16": "bf16", "fp8": "fp8", "fp8_e4m3": "fp8", "fp8_e5m2": "fp8"}
# Calibrated on the runbook's 8x97887 MiB measurements (SGLang 0.85 bf16 -> ~116K tokens; vLLM 0.95 bf16
# -> ~131K usable, 0.85 -> ~0.5 GB KV): weights not split by TP (embeddings, vision tower, dense layers)
# and vLLM's non-KV runtime share (activations, CUDA graphs, encoder cache) inside its utilization cap.
REPLICATED_WEIGHT_BYTES = 4.7 * GB
RUNTIME_RESERVE_BYTES = {"sglang": 0.0, "vllm": 7.65 * GB}
MIN_KV_TOKENS = 65536  # below this the pool cannot serve a useful request: "does not fit"

# Compute capability -> architecture family and recommendation.
ARCH_FAMILIES = (
    # (min cc, max cc (exclusive), family, human name)
    (12.0, 13.0, "blackwell-rtx", "Blackwell RTX PRO / GeForce"),
    (10.0, 11.0, "blackwell-dc", "datacenter Blackwell (B200/B300)"),
    (9.0, 10.0, "hopper", "Hopper"),
    (8.9, 9.0, "ada", "Ada Lovelace"),
    (8.0, 8.9, "ampere", "Ampere"),
)

SHA_RE = re.compile(r"^[0-9a-f]{40}$")
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}$")
HOST_RE = re.compile(r"^[A-Za-z0-9.:\[\]-]+$")


def _var(field):
    return VARIABLES.get(field, field)


def _fail(field, value, allowed, why=None):
    msg = "%s=%r is not allowed" % (_var(field), value)
    if why:
        msg += ": %s" % why
    if allowed:
        msg += ". Allowed values: %s" % ", ".join(str(a) for a in allowed)
    raise DeploymentError(msg)


# ---------------------------------------------------------------------------------------------------
# Hardware
# ---------------------------------------------------------------------------------------------------

def _cc(gpu, position):
    raw = gpu.get("compute_cap")
    try:
        return float(str(raw).strip())
    except (TypeError, ValueError):
        raise DeploymentError("GPU %s has no usable compute_cap (got %r; expected like '12.0')" % (position, raw))


def _memory_mib(gpu, position):
    raw = gpu.get("memory_mib")
    try:
        value = int(str(raw).split()[0])
    except (TypeError, ValueError, IndexError):
        raise DeploymentError("GPU %s has no usable memory_mib (got %r; expected an integer MiB)" % (position, raw))
    if value <= 0:
        raise DeploymentError("GPU %s has no usable memory_mib (got %r)" % (position, raw))
    return value


def arch_of(compute_cap):
    """Family name and sm string for a compute capability such as 12.0."""
    for low, high, family, human in ARCH_FAMILIES:
        if low <= compute_cap < high:
            break
    else:
        family, human = "unsupported", "pre-Ampere or unknown"
    major = int(compute_cap)
    minor = int(round((compute_cap - major) * 10))
    return {"family": family, "name": human, "sm": "sm_%d%d" % (major, minor)}


def summarize_gpus(gpus):
    """Reduce a GPU list to what the rules need. A mixed pool is judged by its weakest GPU."""
    if gpus is None:
        gpus = []
    if not isinstance(gpus, (list, tuple)):
        raise DeploymentError("GPU list must be a list of dicts with name, compute_cap and memory_mib, got %s"
                              % type(gpus).__name__)
    entries = []
    for position, gpu in enumerate(gpus):
        if not isinstance(gpu, dict):
            raise DeploymentError("GPU %d must be a dict with name, compute_cap and memory_mib, got %r"
                                  % (position, gpu))
        label = gpu.get("index", position)
        entries.append((str(gpu.get("name", "unknown GPU")), _cc(gpu, label), _memory_mib(gpu, label)))
    if not entries:
        return {"count": 0, "models": [], "min_compute_cap": None, "min_memory_mib": 0, "pool_mib": 0,
                "arch": None, "homogeneous": True}
    min_cc = min(e[1] for e in entries)
    models = sorted(set(e[0] for e in entries))
    return {
        "count": len(entries),
        "models": models,
        "min_compute_cap": min_cc,
        "min_memory_mib": min(e[2] for e in entries),
        "pool_mib": sum(e[2] for e in entries),
        "arch": arch_of(min_cc),
        "homogeneous": len(models) == 1 and len(set(e[1] for e in entries)) == 1,
    }


def kv_capacity_tokens(quant, engine, kv_cache_dtype, mem_fraction, gpu_memory_mib, tp):
    """Estimated KV-cache tokens per engine instance (an estimate, calibrated on the runbook)."""
    usable = gpu_memory_mib * MIB * mem_fraction
    weights_per_gpu = CHECKPOINTS[quant]["weights_bytes"] / float(tp) + REPLICATED_WEIGHT_BYTES
    free = usable - weights_per_gpu - RUNTIME_RESERVE_BYTES[engine]
    if free <= 0:
        return 0
    return int(free // KV_BYTES_PER_TOKEN[KV_ELEMENT[kv_cache_dtype]])


# ---------------------------------------------------------------------------------------------------
# Recommendation
# ---------------------------------------------------------------------------------------------------

def _recommended_identity(summary):
    """(quant, engine, moe_backend, why) for a GPU summary; None family -> no GPU."""
    family = summary["arch"]["family"] if summary["arch"] else None
    if family == "blackwell-rtx":
        return ("int4", "sglang", None, [
            "%s (sm_120): INT4 QAT is the official checkpoint, verified on both engines with stock images; "
            "NVFP4 buys no throughput on a PCIe-only box (Marlin of INT4 ~= Marlin of NVFP4; native FP4 measured "
            "~12%% slower) and needs a patched CUDA-13 image." % summary["arch"]["name"],
            "SGLang over vLLM on sm_120: faster at every concurrency (+34% at c1, +29% at c128) and serves the "
            "full 256K context at --mem-fraction-static 0.85.",
        ])
    if family == "blackwell-dc":
        return ("nvfp4", "vllm", "flashinfer_cutedsl", [
            "%s (%s): NVFP4 uses the native FP4 tensor cores through FlashInfer CuTe-DSL (the tuned upstream "
            "path; unverified by this collection's reference runs)." % (summary["arch"]["name"], summary["arch"]["sm"]),
            "NVFP4 is vLLM-only (SGLang NVFP4 produces NaN, sgl-project/sglang#18954).",
        ])
    if family in ("hopper", "ada", "ampere"):
        return ("int4", "vllm", None, [
            "%s (%s) has no FP4 tensor cores: NVFP4 would only dequantize, so INT4 QAT (Marlin) is the pick."
            % (summary["arch"]["name"], summary["arch"]["sm"]),
            "vLLM on non-sm_120 hardware: the model card's primary path, precompiled kernels, no JIT dependency.",
        ])
    if family == "unsupported":
        return ("int4", "vllm", None, [
            "%s (%s) is older than Ampere: the INT4 Marlin MoE kernels need sm_80 or newer."
            % (summary["arch"]["name"], summary["arch"]["sm"]),
        ])
    return ("int4", "vllm", None, ["No NVIDIA GPU was found: nothing can serve the model on this host."])


def recommend(gpus, min_kv_tokens=MIN_KV_TOKENS):
    """Recommend quant, engine, KV dtype and MoE backend for a GPU list, with reasons and a fit verdict."""
    summary = summarize_gpus(gpus)
    quant, engine, moe_backend, reasons = _recommended_identity(summary)
    kv = KV_MENUS[(quant, engine)][0]
    result = {
        "quant": quant,
        "engine": engine,
        "kv_cache_dtype": kv,
        "moe_backend": moe_backend,
        "fits": False,
        "kv_tokens": 0,
        "gpu_count": summary["count"],
        "vram_pool_mib": summary["pool_mib"],
        "arch": summary["arch"]["family"] if summary["arch"] else None,
        "sm": summary["arch"]["sm"] if summary["arch"] else None,
        "reasons": list(reasons),
    }
    if not summary["count"]:
        return result
    if not summary["homogeneous"]:
        result["reasons"].append("Mixed GPUs (%s): judged by the weakest one." % ", ".join(summary["models"]))
    result["reasons"].append("KV cache %s: %s." % (kv, KV_NOTES[kv]))
    if summary["arch"]["family"] == "unsupported":
        return result

    tp = summary["count"]
    knob = MEMORY_KNOBS[engine]["default"]
    weights = CHECKPOINTS[quant]["weights_bytes"]
    tokens = kv_capacity_tokens(quant, engine, kv, knob, summary["min_memory_mib"], tp)
    result["kv_tokens"] = tokens
    pool_gb = summary["pool_mib"] * MIB / float(GB)
    if tokens >= min_kv_tokens:
        result["fits"] = True
        result["reasons"].append(
            "Fits: %d x %d MiB = %.0f GB of VRAM holds the ~%.0f GB %s checkpoint with room for ~%dK KV tokens "
            "per replica (%s %s, estimate)." % (summary["count"], summary["min_memory_mib"], pool_gb,
                                                weights / float(GB), quant, tokens // 1024, engine, knob))
    else:
        per_gpu_needed = (weights / float(tp) + REPLICATED_WEIGHT_BYTES + RUNTIME_RESERVE_BYTES[engine]
                          + min_kv_tokens * KV_BYTES_PER_TOKEN[KV_ELEMENT[kv]]) / knob
        result["reasons"].append(
            "Does not fit: %d x %s with %d MiB each (%.0f GB pool) cannot hold the ~%.0f GB %s checkpoint plus "
            "%dK tokens of KV cache at %s %s (estimate: %dK tokens). It needs about %.0f GB per GPU at this GPU "
            "count, e.g. 8 x 96 GB (RTX PRO 6000 Blackwell), 8 x 141 GB (H200) or 8 x 180 GB (B200)."
            % (summary["count"], ", ".join(summary["models"]), summary["min_memory_mib"], pool_gb,
               weights / float(GB), quant, min_kv_tokens // 1024, engine, knob, tokens // 1024,
               per_gpu_needed / GB))
    return result


# ---------------------------------------------------------------------------------------------------
# Resolution: inputs (+ optional GPUs) -> one deployment dict
# ---------------------------------------------------------------------------------------------------

def _is_unset(value):
    return value is None or (isinstance(value, str) and value.strip() in ("", "auto"))


def _check_choice(field, value, allowed, why=None):
    if value not in allowed:
        _fail(field, value, allowed, why)
    return value


def _check_int(field, value, low, high):
    if isinstance(value, bool):
        _fail(field, value, ["an integer from %d to %d" % (low, high)])
    try:
        number = int(str(value))
    except (TypeError, ValueError):
        _fail(field, value, ["an integer from %d to %d" % (low, high)])
    if not low <= number <= high:
        _fail(field, value, ["an integer from %d to %d" % (low, high)])
    return number


def _check_kv(identity, kv):
    """KV dtype from the (quant, engine) menu; unset -> the recommended first entry."""
    menu = KV_MENUS[identity]
    kv = menu[0] if kv is None or str(kv).strip() == "" else str(kv).strip()
    return _check_choice("kv_cache_dtype", kv, menu, "the KV menu for quant=%s engine=%s" % identity)


def _check_moe(quant, moe, family=None):
    """NVFP4 only; unset -> marlin (the measured pick on sm_120), flashinfer_cutedsl on datacenter Blackwell."""
    if quant == "int4":
        if not _is_unset(moe):
            _fail("moe_backend", moe, ["null (unset)"], "quant=int4 uses the Marlin MoE kernels chosen by the "
                  "checkpoint; the MoE backend is an NVFP4 choice")
        return None
    if _is_unset(moe):
        moe = "flashinfer_cutedsl" if family == "blackwell-dc" else "marlin"
    return _check_choice("moe_backend", moe, MOE_BACKENDS)


def _check_mem(engine, mem):
    """The engine's own memory knob (they are different knobs); unset -> its measured working value."""
    knob = MEMORY_KNOBS[engine]
    allowed = ["a number in (0, %s] for %s" % (knob["max"], knob["flag"])]
    if mem in (None, "", "auto"):
        return knob["default"]
    try:
        mem = float(mem)
    except (TypeError, ValueError):
        _fail("mem_fraction", mem, allowed)
    if not 0.0 < mem <= knob["max"]:
        why = ("SGLang's --mem-fraction-static covers weights + KV; transients live outside it, and 0.90 OOM-crashes "
               "the server" if engine == "sglang" else "vLLM's --gpu-memory-utilization caps the whole footprint")
        _fail("mem_fraction", mem, allowed, why)
    return mem


def _check_extra(engine, extra):
    """Extra engine arguments: a list of strings that does not repeat a flag the collection manages."""
    extra = extra or []
    if isinstance(extra, str) or not isinstance(extra, (list, tuple)) or not all(isinstance(a, str) for a in extra):
        _fail("extra_args", extra, ["a list of strings, e.g. ['--max-running-requests', '64']"])
    for arg in extra:
        flag = arg.split("=", 1)[0]
        if flag in MANAGED_FLAGS[engine]:
            _fail("extra_args", arg, None, "%s is set by the collection; use its variable instead" % flag)
    return list(extra)


def _check_identity(quant, engine):
    _check_choice("quant", quant, QUANTS + ("auto",))
    _check_choice("engine", engine, ENGINES + ("auto",))
    if quant == "nvfp4" and engine == "sglang":
        raise DeploymentError(
            "engine=sglang with quant=nvfp4 is refused: SGLang's NVFP4 path produces NaN on sm_120 "
            "(sgl-project/sglang#18954). NVFP4 runs on engine=vllm only; for SGLang use quant=int4. "
            "Allowed pairs: int4+sglang, int4+vllm, nvfp4+vllm")


def check_revision(quant, revision):
    """A pinned 40-hex commit, or an error that says how to look it up."""
    checkpoint = CHECKPOINTS[quant]
    variable = checkpoint["revision_variable"]
    lookup = ("Look it up with: curl -s https://huggingface.co/api/models/%s/revision/main | "
              "python3 -c 'import json,sys; print(json.load(sys.stdin)[\"sha\"])'  (or the commit list on the "
              "model page), then set %s in your inventory." % (checkpoint["repo_id"], variable))
    if revision is None or str(revision).strip() == "":
        raise DeploymentError("%s is not set: the %s checkpoint (%s) must be pinned to a 40-hex commit sha; there "
                              "is no safe default. %s" % (variable, quant, checkpoint["repo_id"], lookup))
    if not SHA_RE.match(str(revision)):
        raise DeploymentError("%s=%r is not a 40-hex commit sha (branches and tags move; a deployment must not). "
                              "%s" % (variable, revision, lookup))
    return str(revision)


def resolve(inputs, gpus=None, require_revision=True):
    """Resolve user inputs (+ GPU facts when known) into the deployment every role consumes.

    inputs: quant, engine, kv_cache_dtype, moe_backend, context_length, mem_fraction, tp, host, port,
    served_model_name, extra_args, revisions ({quant: sha}), image, min_kv_tokens. Missing -> derived.
    """
    if inputs is None:
        inputs = {}
    if not isinstance(inputs, dict):
        raise DeploymentError("deployment inputs must be a dict, got %s" % type(inputs).__name__)
    quant = "auto" if _is_unset(inputs.get("quant")) else str(inputs["quant"]).strip().lower()
    engine = "auto" if _is_unset(inputs.get("engine")) else str(inputs["engine"]).strip().lower()
    _check_identity(quant, engine)

    have_gpus = bool(gpus)
    advice = recommend(gpus, min_kv_tokens=int(inputs.get("min_kv_tokens") or MIN_KV_TOKENS)) if have_gpus else None
    reasons = []
    if quant == "auto" or engine == "auto":
        if not have_gpus:
            raise DeploymentError(
                "quant=%s engine=%s needs GPU facts to recommend from, and none were given. Set quant (int4, nvfp4) "
                "and engine (sglang, vllm), or run against a GPU host (or pass -e @tests/fixtures/gpus/<profile>.json)."
                % (quant, engine))
        family = advice["arch"]
        if quant == "auto":
            quant = "int4" if engine == "sglang" else advice["quant"]
            reasons.append("quant=%s: %s" % (quant, "SGLang serves INT4 only (its NVFP4 path gives NaN on sm_120)."
                                             if engine == "sglang" else "recommended for this hardware."))
        if engine == "auto":
            if quant == advice["quant"]:
                engine = advice["engine"]
            else:  # the user picked the other quant: NVFP4 is vLLM-only; INT4 prefers SGLang on sm_120 only
                engine = "sglang" if quant == "int4" and family == "blackwell-rtx" else "vllm"
            reasons.append("engine=%s: %s" % (engine, "NVFP4 is vLLM-only." if quant == "nvfp4"
                                              else "recommended for this hardware."))
        reasons.extend(advice["reasons"])
    else:
        reasons.append("quant=%s engine=%s: set by the user." % (quant, engine))
        if advice and (advice["quant"], advice["engine"]) != (quant, engine):
            reasons.append("Note: for this hardware the collection would recommend quant=%s engine=%s (%s)"
                           % (advice["quant"], advice["engine"], advice["reasons"][0]))
    identity = (quant, engine)
    summary = summarize_gpus(gpus) if have_gpus else None
    family = summary["arch"]["family"] if summary else None

    kv = _check_kv(identity, inputs.get("kv_cache_dtype"))
    moe = _check_moe(quant, inputs.get("moe_backend"), family)

    # Tensor parallel: every GPU of the host by default.
    tp = inputs.get("tp")
    if tp in (None, "", "auto"):
        if not have_gpus:
            tp = 8
            reasons.append("tensor parallel 8: no GPU facts, assuming the 8-GPU reference pool.")
        else:
            tp = summary["count"]
    tp = _check_int("tp", tp, 1, 64)
    if tp & (tp - 1):
        _fail("tp", tp, [1, 2, 4, 8, 16, 32, 64], "MLA's 64 attention heads split over a power of two")
    if have_gpus and tp > summary["count"]:
        _fail("tp", tp, ["1..%d (GPUs found)" % summary["count"]], "more ranks than GPUs")

    knob = MEMORY_KNOBS[engine]
    mem = _check_mem(engine, inputs.get("mem_fraction"))

    # Context length: vLLM with bf16 KV tops out ~131K on 96 GB cards; 256K needs fp8 KV.
    kv_tokens = None
    if have_gpus:
        kv_tokens = kv_capacity_tokens(quant, engine, kv, mem, summary["min_memory_mib"], tp)
    ctx = inputs.get("context_length")
    if ctx in (None, "", "auto"):
        ctx = MAX_CONTEXT
        if engine == "vllm" and KV_ELEMENT[kv] == "bf16":
            ctx = 131072
        if engine == "vllm" and kv_tokens is not None:
            while ctx > 4096 and ctx > kv_tokens:
                ctx //= 2
    ctx = _check_int("context_length", ctx, 4096, MAX_CONTEXT)
    warnings = []
    # Only for a pool that fits: an unfit one is reported by the fit verdict (hardware.fits, with the GPUs found and
    # what fits), which nvidia_host's preflight turns into the error; this message would only confuse it.
    if engine == "vllm" and kv_tokens is not None and ctx > kv_tokens and advice["fits"]:
        values = (_var("context_length"), ctx, kv_tokens, _var("kv_cache_dtype"), kv, _var("mem_fraction"), mem,
                  summary["count"], summary["min_memory_mib"], _var("mem_fraction"))
        raise DeploymentError(
            "%s=%d is larger than the estimated KV cache (%d tokens with %s=%s, %s=%s on %d x %d MiB): vLLM "
            "refuses to start ('larger than the available KV cache memory'). Lower the context length, use "
            "kv_cache_dtype fp8, or raise %s." % values)
    # SGLang starts whatever the pool; with bf16 KV a 256K request cannot fit (runbook: 116K-token pool).
    if engine == "sglang" and kv_tokens is not None and ctx > kv_tokens and KV_ELEMENT[kv] == "bf16":
        warnings.append("context %d exceeds the estimated KV pool (%d tokens): one request that long would not fit; "
                        "kv_cache_dtype fp8_e4m3 doubles the pool." % (ctx, kv_tokens))

    port = _check_int("port", inputs.get("port") or DEFAULT_PORT, 1, 65535)
    host = str(inputs.get("host") or DEFAULT_HOST)
    if not HOST_RE.match(host):
        _fail("host", host, ["an IP address or host name, e.g. 0.0.0.0 or 127.0.0.1"])
    name = str(inputs.get("served_model_name") or DEFAULT_SERVED_MODEL_NAME)
    if not NAME_RE.match(name):
        _fail("served_model_name", name, ["1-128 characters of letters, digits and . _ : / -"])
    extra = _check_extra(engine, inputs.get("extra_args"))

    checkpoint = CHECKPOINTS[quant]
    revisions = inputs.get("revisions") or {}
    revision = revisions.get(quant)
    if require_revision or not (revision is None or str(revision).strip() == ""):
        revision = check_revision(quant, revision)
    else:
        revision = None
        warnings.append("%s is not set: site.yml will refuse to run until the checkpoint is pinned to a commit."
                        % checkpoint["revision_variable"])

    image = inputs.get("image") or IMAGES[identity]
    deployment = {
        "identity": "%s-%s" % identity,
        "quant": quant,
        "engine": engine,
        "engine_version": ENGINE_VERSIONS[engine],
        "reasons": reasons,
        "warnings": warnings,
        "checkpoint": {
            "repo_id": checkpoint["repo_id"],
            "revision": revision,
            "format": checkpoint["format"],
            "weights_bytes": checkpoint["weights_bytes"],
            "disk_bytes_required": DEFAULT_DISK_BYTES,
        },
        "image": image,
        "image_is_local_build": quant == "nvfp4",
        "entrypoint": list(ENGINE_ENTRYPOINTS[engine]),
        "kv_cache_dtype": kv,
        "moe_backend": moe,
        "tp": tp,
        "host": host,
        "port": port,
        "served_model_name": name,
        "context_length": ctx,
        "mem_fraction": mem,
        "memory_flag": knob["flag"],
        "extra_args": list(extra),
        "hardware": None,
    }
    if summary:
        deployment["hardware"] = {
            "gpu_count": summary["count"],
            "models": summary["models"],
            "arch": summary["arch"]["family"],
            "sm": summary["arch"]["sm"],
            "vram_pool_mib": summary["pool_mib"],
            "kv_tokens_estimate": kv_tokens,
            "fits": advice["fits"],
            "recommended": {k: advice[k] for k in ("quant", "engine", "kv_cache_dtype", "moe_backend")},
        }
    deployment["argv"] = engine_argv(deployment)
    deployment["command"] = command_for(deployment)
    return deployment


# ---------------------------------------------------------------------------------------------------
# Engine command line
# ---------------------------------------------------------------------------------------------------

# Flags this module emits per engine, so a conflicting extra arg is refused instead of silently doubled.
MANAGED_FLAGS = {
    "sglang": ("--model-path", "--tp-size", "--trust-remote-code", "--host", "--port", "--served-model-name",
               "--tool-call-parser", "--reasoning-parser", "--mem-fraction-static", "--kv-cache-dtype",
               "--context-length", "--enable-metrics", "--quantization"),
    "vllm": ("--tensor-parallel-size", "--trust-remote-code", "--host", "--port", "--served-model-name",
             "--tool-call-parser", "--enable-auto-tool-choice", "--reasoning-parser", "--mm-encoder-tp-mode",
             "--gpu-memory-utilization", "--kv-cache-dtype", "--max-model-len", "--quantization", "--moe-backend",
             "--disable-custom-all-reduce"),
}


def engine_argv(deployment):
    """The container command after the image: what `docker run IMAGE <argv>` takes.

    SGLang's image has no entry point, so argv starts with `python3 -m sglang.launch_server`; the vLLM image's
    entry point is `vllm serve`, so argv starts with the model.
    """
    if not isinstance(deployment, dict):
        raise DeploymentError("engine_flags input must be a deployment dict, got %s" % type(deployment).__name__)
    quant = deployment.get("quant")
    engine = deployment.get("engine")
    _check_choice("quant", quant, QUANTS)
    _check_choice("engine", engine, ENGINES)
    _check_identity(quant, engine)
    identity = (quant, engine)
    kv = _check_kv(identity, deployment.get("kv_cache_dtype"))
    moe = _check_moe(quant, deployment.get("moe_backend"))
    tp = _check_int("tp", deployment.get("tp") or 8, 1, 64)
    port = _check_int("port", deployment.get("port") or DEFAULT_PORT, 1, 65535)
    host = str(deployment.get("host") or DEFAULT_HOST)
    name = str(deployment.get("served_model_name") or DEFAULT_SERVED_MODEL_NAME)
    ctx = _check_int("context_length", deployment.get("context_length") or MAX_CONTEXT, 4096, MAX_CONTEXT)
    knob = MEMORY_KNOBS[engine]
    mem = _check_mem(engine, deployment.get("mem_fraction"))
    extra = _check_extra(engine, deployment.get("extra_args"))
    model = deployment.get("model") or CHECKPOINTS[quant]["repo_id"]

    if engine == "sglang":
        argv = list(ENGINE_ENTRYPOINTS["sglang"]) + [
            "--model-path", model,
            "--tp-size", str(tp),
            "--trust-remote-code",
            "--host", host,
            "--port", str(port),
            "--served-model-name", name,
            "--tool-call-parser", PARSER,
            "--reasoning-parser", PARSER,
            knob["flag"], _fmt(mem),
            "--kv-cache-dtype", kv,
            "--context-length", str(ctx),
            "--enable-metrics",  # vLLM always serves /metrics; SGLang only with this flag
        ]
    else:
        argv = [
            model,
            "--tensor-parallel-size", str(tp),
            "--trust-remote-code",
            "--host", host,
            "--port", str(port),
            "--served-model-name", name,
            "--tool-call-parser", PARSER,
            "--enable-auto-tool-choice",  # without it vLLM returns no tool_calls
            "--reasoning-parser", PARSER,
            "--mm-encoder-tp-mode", "data",
            knob["flag"], _fmt(mem),
            "--kv-cache-dtype", kv,
            "--max-model-len", str(ctx),
        ]
        if quant == "nvfp4":
            argv += ["--quantization", CHECKPOINTS[quant]["quantization_flag"], "--moe-backend", moe,
                     "--disable-custom-all-reduce"]
    return argv + list(extra)


def command_for(deployment):
    """The full process command line (image entry point included), for display and the double's tests."""
    argv = engine_argv(deployment)
    if deployment.get("engine") == "vllm":
        return list(ENGINE_ENTRYPOINTS["vllm"]) + argv
    return argv


def _fmt(number):
    text = ("%.3f" % number).rstrip("0")
    return text + "0" if text.endswith(".") else text
