# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The Kimi-K2.6 deployment model: one table, one resolver.

Private to kimi.deploy (underscore module). The filter plugins, the plan playbook, the roles and the
tests all go through this module; nothing else derives checkpoints, images, menus or engine flags.

Where each rule lives: resolve() is the only validator of deployment inputs (with _check_* helpers that only
it calls); fit() is the one VRAM verdict (recommend() and resolve() both use it); ENGINE_ARGS declares each
engine flag once, engine_argv() renders a resolved deployment from it and the managed set is derived from it;
_check_extra() reads kimi_engine_extra_args the way the pinned parser would (_engine_options, generated from the
parser dumps). The GPU summary comes from _gpu.summarize_gpus, the revision rule from _validate.check_revision.

Sources: the field-tested sm_120 runbook (8x RTX PRO 6000 Blackwell) and the engine parsers of the
pinned versions (tests/fixtures/engine_flags/*.json). Numbers that come from measurements say so.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import itertools
import re

from ansible_collections.kimi.deploy.plugins.module_utils._engine_options import ENGINE_OPTIONS
from ansible_collections.kimi.deploy.plugins.module_utils._gpu import GpuListError, summarize_gpus
from ansible_collections.kimi.deploy.plugins.module_utils._validate import ValueRuleError, check_revision, full_match

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
    "image": "kimi_engine_image",
    "pp": "kimi_pipeline_parallel",
    "nodes": "kimi_replica (the hosts that share it)",
    "node_rank": "kimi_replica_rank",
    "head_address": "kimi_replica_head_address",
    "dist_port": "kimi_replica_port",
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
# A replica over several hosts: the engines' own rendezvous (SGLang --dist-init-addr, vLLM --master-addr/port) on the
# head, at this port unless kimi_replica_port says otherwise. Up to MAX_NODES hosts.
DEFAULT_DIST_PORT = 29500
MAX_NODES = 16
DEFAULT_PORT = 30000
# --network host: Caddy reaches the engine over loopback, and the raw port answers unauthenticated to whoever can
# reach it (the runbook's warning), so loopback is the default and 0.0.0.0 an explicit, warned opt-in.
DEFAULT_HOST = "127.0.0.1"
WILDCARD_HOSTS = ("0.0.0.0", "::", "[::]")
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
# What a too-small pool is told to use instead (per-GPU memory that holds the checkpoint at 8-way TP).
FITTING_POOLS = "8 x 96 GB (RTX PRO 6000 Blackwell), 8 x 141 GB (H200) or 8 x 180 GB (B200)"

# Values checked with full-match semantics (no trailing newline slips through).
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}")
HOST_RE = re.compile(r"[A-Za-z0-9.:\[\]-]{1,253}")
IMAGE_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/:@+-]{0,254}")
NEGATIVE_NUMBER_RE = re.compile(r"-\d+|-\d*\.\d+")  # argparse reads these as values, not options
OPTION_RE = re.compile(r"(-[^=\s]*)(?:(=)|\s+)?(.*)", re.S)  # option, then "=value" or " value" (one string)


def _var(field):
    return VARIABLES.get(field, field)


def _fail(field, value, allowed, why=None):
    msg = "%s=%r is not allowed" % (_var(field), value)
    if why:
        msg += ": %s" % why
    if allowed:
        msg += ". Allowed values: %s" % ", ".join(str(a) for a in allowed)
    raise DeploymentError(msg)


def _summary(gpus):
    """_gpu.summarize_gpus (the one summary shape), its errors as DeploymentError."""
    try:
        return summarize_gpus(gpus)
    except GpuListError as exc:
        raise DeploymentError(str(exc))


# ---------------------------------------------------------------------------------------------------
# The VRAM fit: one verdict, from the settings actually chosen
# ---------------------------------------------------------------------------------------------------

def kv_capacity_tokens(quant, engine, kv_cache_dtype, mem_fraction, gpu_memory_mib, tp, pp=1):
    """Estimated KV-cache tokens per engine instance (an estimate, calibrated on the runbook). With pipeline
    parallel each stage holds 1/pp of the layers, and so 1/pp of the weights and of each token's KV."""
    free = gpu_memory_mib * MIB * mem_fraction - _weights_per_gpu(quant, tp, pp) - RUNTIME_RESERVE_BYTES[engine]
    if free <= 0:
        return 0
    return int(free // (KV_BYTES_PER_TOKEN[KV_ELEMENT[kv_cache_dtype]] / float(pp)))


def _weights_per_gpu(quant, tp, pp=1):
    return CHECKPOINTS[quant]["weights_bytes"] / float(tp * pp) + REPLICATED_WEIGHT_BYTES


def _gb(count):
    return count / float(GB)


def _what_would_fit(quant, engine, kv_cache_dtype, mem_fraction, tp, gpus, min_kv_tokens):
    """The smallest change of the user's own settings (tp, memory knob, KV dtype) that fits, as a sentence."""
    changes = []
    wider = [t for t in (2, 4, 8, 16, 32, 64) if tp < t <= gpus["count"]]
    if wider:
        changes.append(("tp", wider[-1]))
    if mem_fraction < MEMORY_KNOBS[engine]["max"]:
        changes.append(("mem_fraction", MEMORY_KNOBS[engine]["max"]))
    fp8 = KV_MENUS[(quant, engine)][0]
    if KV_ELEMENT[kv_cache_dtype] != KV_ELEMENT[fp8]:
        changes.append(("kv_cache_dtype", fp8))
    for size in range(1, len(changes) + 1):
        for combo in itertools.combinations(changes, size):
            settings = {"tp": tp, "mem_fraction": mem_fraction, "kv_cache_dtype": kv_cache_dtype}
            settings.update(combo)
            tokens = kv_capacity_tokens(quant, engine, settings["kv_cache_dtype"], settings["mem_fraction"],
                                        gpus["vram_min_mib"], settings["tp"])
            if tokens >= min_kv_tokens:
                return "With %s it would fit (~%dK KV tokens)." % (
                    " and ".join("%s=%s" % (_var(field), value) for field, value in combo), tokens // 1024)
    return "Use more or larger GPUs, e.g. %s." % FITTING_POOLS


def fit(quant, engine, kv_cache_dtype, mem_fraction, tp, gpus, min_kv_tokens=MIN_KV_TOKENS, pp=1, nodes=1):
    """Can `gpus` (a summarize_gpus summary of one host; a replica is `nodes` such hosts) serve the `quant`
    checkpoint on `engine` with these settings (tp x pp ranks)?

    The one VRAM verdict of the collection: {"fits": bool, "kv_tokens": int, "reason": a sentence with the
    numbers (GPUs, per-GPU share of the weights, KV tokens against the minimum, and what would fit)}.
    A mixed pool is judged by its smallest GPU.
    """
    checkpoint = CHECKPOINTS[quant]
    if not gpus["count"]:
        return {"fits": False, "kv_tokens": 0, "reason": "Does not fit: no NVIDIA GPU was found."}
    what = "%d x %s" % (gpus["count"], ", ".join(gpus["models"]))
    if nodes > 1:
        what = "%d hosts of %s" % (nodes, what)
    if gpus["arch"] == "unsupported":
        return {"fits": False, "kv_tokens": 0, "reason": (
            "Does not fit: %s (%s) is older than Ampere; the INT4 and NVFP4 MoE kernels need sm_80 or newer."
            % (what, gpus["sm"]))}
    knob = MEMORY_KNOBS[engine]["flag"]
    tokens = kv_capacity_tokens(quant, engine, kv_cache_dtype, mem_fraction, gpus["vram_min_mib"], tp, pp)
    share = _weights_per_gpu(quant, tp, pp)
    usable = gpus["vram_min_mib"] * MIB * mem_fraction
    layout = "tensor parallel %d" % tp + (" x pipeline parallel %d" % pp if pp > 1 else "")
    numbers = (layout, what, gpus["vram_min_mib"], _gb(gpus["vram_total_mib"] * MIB * nodes), _gb(share),
               _gb(checkpoint["weights_bytes"]), quant, checkpoint["repo_id"], _gb(usable), engine, knob,
               _fmt(mem_fraction))
    setting = ("%s on %s with %d MiB each (%.0f GB in all): each GPU %s ~%.0f GB of the ~%.0f GB "
               "%s checkpoint (%s) in the ~%.0f GB that %s %s %s gives it")
    if tokens >= min_kv_tokens:
        return {"fits": True, "kv_tokens": tokens, "reason": (
            "Fits: " + setting % (numbers[:4] + ("holds",) + numbers[4:])
            + ", leaving room for ~%dK KV tokens per replica with %s KV (at least %dK needed; estimate)."
            % (tokens // 1024, kv_cache_dtype, min_kv_tokens // 1024))}
    needed = (share + RUNTIME_RESERVE_BYTES[engine]
              + min_kv_tokens * KV_BYTES_PER_TOKEN[KV_ELEMENT[kv_cache_dtype]] / float(pp))
    advice = (_what_would_fit(quant, engine, kv_cache_dtype, mem_fraction, tp, gpus, min_kv_tokens) if nodes == 1
              else "Add hosts to the replica, or use larger GPUs.")
    return {"fits": False, "kv_tokens": tokens, "reason": (
        "Does not fit: " + setting % (numbers[:4] + ("would hold",) + numbers[4:])
        + ", leaving room for %dK KV tokens with %s KV (estimate), below the %dK minimum. It needs about %.0f GB "
        "per GPU at %s. %s"
        % (tokens // 1024, kv_cache_dtype, min_kv_tokens // 1024, _gb(needed / mem_fraction), layout, advice))}


def replica_layout(engine, gpus_per_host, nodes, tp=None, pp=None):
    """(tp, pp, reason) for a replica of `nodes` hosts of `gpus_per_host` GPUs; tp/pp given by the user win.

    One host: tensor parallel over its GPUs. Several: vLLM keeps tensor parallel inside each host and pipelines
    across hosts (only the activations between stages cross the host link, which is Ethernet or PCIe class, not
    NVLink); SGLang runs tensor parallel across the whole replica (its multi-node mode, --nnodes with one TP group).
    """
    world = gpus_per_host * nodes
    if nodes == 1:
        auto_tp, auto_pp, why = world, 1, None
    elif engine == "vllm":
        auto_tp, auto_pp = gpus_per_host, nodes
        why = ("vLLM across %d hosts: tensor parallel %d inside each host, pipeline parallel %d across them (only "
               "activations cross the host link between stages; tensor parallel all-reduces stay on NVLink/PCIe)."
               % (nodes, gpus_per_host, nodes))
    else:
        auto_tp, auto_pp = world, 1
        why = ("SGLang across %d hosts: tensor parallel %d over the whole replica (SGLang's multi-node mode, one "
               "tensor-parallel group, --nnodes %d)." % (nodes, world, nodes))
    tp = auto_tp if tp is None else tp
    if pp is None:  # one host: the tp GPUs asked for; several: every GPU of the replica once
        pp = auto_pp if tp == auto_tp or nodes == 1 else max(1, world // tp)
    return tp, pp, why


def replica_advice(quant, engine, kv_cache_dtype, mem_fraction, gpus, min_kv_tokens=MIN_KV_TOKENS):
    """For a host that cannot hold the deployment alone: the smallest replica of such hosts that can, as a sentence
    with the numbers, or None."""
    if not gpus["count"] or gpus["arch"] == "unsupported":
        return None
    for nodes in range(2, MAX_NODES + 1):
        tp, pp, _why = replica_layout(engine, gpus["count"], nodes)
        if tp & (tp - 1):
            continue
        verdict = fit(quant, engine, kv_cache_dtype, mem_fraction, tp, gpus, min_kv_tokens, pp=pp, nodes=nodes)
        if verdict["fits"]:
            return ("Does not fit alone; fits as a %d-host replica of such hosts (set kimi_replica to one name on "
                    "each): %s" % (nodes, verdict["reason"]))
    return None


# ---------------------------------------------------------------------------------------------------
# Recommendation
# ---------------------------------------------------------------------------------------------------

def _recommended_identity(summary):
    """(quant, engine, moe_backend, why) for a GPU summary; None family -> no GPU."""
    family = summary["arch"]
    if family == "blackwell-rtx":
        return ("int4", "sglang", None, [
            "%s (sm_120): INT4 QAT is the official checkpoint, verified on both engines with stock images; "
            "NVFP4 buys no throughput on a PCIe-only box (Marlin of INT4 ~= Marlin of NVFP4; native FP4 measured "
            "~12%% slower) and needs a patched CUDA-13 image." % summary["arch_name"],
            "SGLang over vLLM on sm_120: faster at every concurrency (+34% at c1, +29% at c128) and serves the "
            "full 256K context at --mem-fraction-static 0.85.",
        ])
    if family == "blackwell-dc":
        return ("nvfp4", "vllm", "flashinfer_cutedsl", [
            "%s (%s): NVFP4 uses the native FP4 tensor cores through FlashInfer CuTe-DSL (the tuned upstream "
            "path; unverified by this collection's reference runs)." % (summary["arch_name"], summary["sm"]),
            "NVFP4 is vLLM-only (SGLang NVFP4 produces NaN, sgl-project/sglang#18954).",
        ])
    if family in ("hopper", "ada", "ampere"):
        return ("int4", "vllm", None, [
            "%s (%s) has no FP4 tensor cores: NVFP4 would only dequantize, so INT4 QAT (Marlin) is the pick."
            % (summary["arch_name"], summary["sm"]),
            "vLLM on non-sm_120 hardware: the model card's primary path, precompiled kernels, no JIT dependency.",
        ])
    if family == "unsupported":
        return ("int4", "vllm", None, [
            "%s (%s) is older than Ampere: the INT4 Marlin MoE kernels need sm_80 or newer."
            % (summary["arch_name"], summary["sm"]),
        ])
    return ("int4", "vllm", None, ["No NVIDIA GPU was found: nothing can serve the model on this host."])


def _advice(summary):
    """The recommended identity and why, with the mixed-pool note."""
    quant, engine, moe_backend, why = _recommended_identity(summary)
    why = list(why)
    if summary["count"] and not summary["homogeneous"]:
        why.append("Mixed GPUs (%s): judged by the weakest one." % ", ".join(summary["models"]))
    return {"quant": quant, "engine": engine, "kv_cache_dtype": KV_MENUS[(quant, engine)][0],
            "moe_backend": moe_backend, "why": why}


def _kv_note(kv):
    return "KV cache %s: %s." % (kv, KV_NOTES[kv])


def recommend(gpus, min_kv_tokens=MIN_KV_TOKENS):
    """Recommend quant, engine, KV dtype and MoE backend for a GPU list, with reasons and the fit verdict of
    those recommended settings (fit(), all GPUs in one tensor-parallel group, the engine's default knob)."""
    summary = _summary(gpus)
    advice = _advice(summary)
    quant, engine, kv = advice["quant"], advice["engine"], advice["kv_cache_dtype"]
    verdict = fit(quant, engine, kv, MEMORY_KNOBS[engine]["default"], max(summary["count"], 1), summary,
                  min_kv_tokens)
    reasons = list(advice["why"])
    if summary["count"]:
        reasons += [_kv_note(kv), verdict["reason"]]
    return {
        "quant": quant,
        "engine": engine,
        "kv_cache_dtype": kv,
        "moe_backend": advice["moe_backend"],
        "fits": verdict["fits"],
        "kv_tokens": verdict["kv_tokens"],
        "fit_reason": verdict["reason"],
        "gpu_count": summary["count"],
        "vram_total_mib": summary["vram_total_mib"],
        "arch": summary["arch"],
        "sm": summary["sm"],
        "reasons": reasons,
    }


# ---------------------------------------------------------------------------------------------------
# Resolution: inputs (+ optional GPUs) -> one deployment dict. The only validator of deployment inputs.
# ---------------------------------------------------------------------------------------------------

def _is_unset(value):
    return value is None or (isinstance(value, str) and value.strip() in ("", "auto"))


def _check_choice(field, value, allowed, why=None):
    if value not in allowed:
        _fail(field, value, allowed, why)
    return value


def _check_int(field, value, low, high):
    allowed = ["an integer from %d to %d" % (low, high)]
    if isinstance(value, bool):
        _fail(field, value, allowed)
    try:
        number = int(str(value).strip())
    except (TypeError, ValueError):
        _fail(field, value, allowed)
    if not low <= number <= high:
        _fail(field, value, allowed)
    return number


def _check_text(field, value, pattern, allowed, default):
    """A string setting matched in full (a trailing newline is refused); unset -> default."""
    if _is_unset(value):
        return default
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if not full_match(pattern, value):
        _fail(field, value, allowed)
    return value


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
    if _is_unset(mem):
        return knob["default"]
    if isinstance(mem, bool):
        _fail("mem_fraction", mem, allowed)
    try:
        mem = float(mem)
    except (TypeError, ValueError):
        _fail("mem_fraction", mem, allowed)
    if not 0.0 < mem <= knob["max"]:
        why = ("SGLang's --mem-fraction-static covers weights + KV; transients live outside it, and 0.90 OOM-crashes "
               "the server" if engine == "sglang" else "vLLM's --gpu-memory-utilization caps the whole footprint")
        _fail("mem_fraction", mem, allowed, why)
    return mem


def _check_identity(quant, engine):
    _check_choice("quant", quant, QUANTS + ("auto",))
    _check_choice("engine", engine, ENGINES + ("auto",))
    if quant == "nvfp4" and engine == "sglang":
        raise DeploymentError(
            "engine=sglang with quant=nvfp4 is refused: SGLang's NVFP4 path produces NaN on sm_120 "
            "(sgl-project/sglang#18954). NVFP4 runs on engine=vllm only; for SGLang use quant=int4. "
            "Allowed pairs: int4+sglang, int4+vllm, nvfp4+vllm")


def _check_revision(quant, revisions, require_revision, warnings):
    """The checkpoint's pinned commit (_validate.check_revision, the one revision rule); None in preview mode."""
    checkpoint = CHECKPOINTS[quant]
    if revisions is None:
        revisions = {}
    if not isinstance(revisions, dict):
        _fail("revisions", revisions, ["a dict {int4: <sha>, nvfp4: <sha>}"])
    revision = revisions.get(quant)
    if not require_revision and (revision is None or (isinstance(revision, str) and revision.strip() == "")):
        warnings.append("%s is not set: site.yml will refuse to run until the checkpoint is pinned to a commit."
                        % checkpoint["revision_variable"])
        return None
    try:
        return check_revision(revision, checkpoint["repo_id"], checkpoint["revision_variable"])
    except ValueRuleError as exc:
        raise DeploymentError(str(exc))


def _option_index(engine):
    """Every option string of the pinned `engine` -> (dest, values) (see _engine_options)."""
    index = {}
    for dest, entry in ENGINE_OPTIONS[engine]["dests"].items():
        for option in entry[1:]:
            index[option] = (dest, entry[0])
    return index


def _looks_like_value(text):
    return not text.startswith("-") or text == "-" or full_match(NEGATIVE_NUMBER_RE, text)


def _extra_option(engine, name, spelling):
    """An option as written in kimi_engine_extra_args -> (dest, values, implied value or None, refusal or None),
    the way the pinned parser reads it: exact names (no prefix abbreviations), aliases and short options,
    vLLM's --foo_bar and --opt.key spellings and -O<n>. Refuses unknown options, naming the engine version.
    The refusal is for a spelling the engine would refuse although its dest is known (SGLang's --foo_bar):
    _check_extra raises it unless the dest is managed, which it reports first."""
    table = ENGINE_OPTIONS[engine]
    index = OPTION_INDEX[engine]
    version = "%s %s" % (engine, table["version"])
    given = name
    if name.startswith("--") and table["underscores"]:
        base, dot, key = name.partition(".")
        name = base.replace("_", "-") + dot + key  # FlexibleArgumentParser rewrites the name before any dot
    if name in index:
        return index[name] + (None, None)
    if table["optimization_level"] and re.match(r"-O\d+$", name):
        return index[table["optimization_level"]] + (name[2:], None)
    if table["optimization_level"] and name == "-O":
        return index[table["optimization_level"]] + (None, None)
    base, dot, key = name.partition(".")
    if dot and base in table["dotted"]:
        if not re.match(r"[A-Za-z0-9_]+(\.[A-Za-z0-9_]+)*\+?$", key):
            _fail("extra_args", spelling, None, "%s takes --%s.KEY VALUE with a dotted key of letters, digits "
                  "and _" % (version, base.lstrip("-")))
        return index[base][0], 1, None, None
    dashed = name.replace("_", "-")
    if name.startswith("--") and dashed in index:
        return index[dashed] + (None, "%s does not accept underscores in option names (plain argparse): write %s"
                                % (version, dashed))
    why = "%s is not an option of %s, the pinned engine version" % (
        given if given == name else "%s (read as %s)" % (given, name), version)
    prefixed = sorted(o for o in index if o.startswith(name)) if name.startswith("--") and len(name) > 2 else []
    if prefixed:
        why += " (argparse would take it as an abbreviation of %s; kimi.deploy requires full option names)" % (
            " or ".join(prefixed[:3]))
    _fail("extra_args", spelling, None, why)


def _check_extra(engine, extra):
    """kimi_engine_extra_args, read the way the pinned parser reads argv, returned as argv elements.

    Elements are `--flag`, `--flag=value`, `--flag value` as one string (split on the first whitespace), a flag
    followed by its values as separate elements, aliases and short options (`-tp 4`), vLLM's underscore, dotted
    and -O<n> spellings. Refused: an option whose dest the collection manages (any spelling), an option the
    pinned engine does not have, a value for a switch, a missing value, a value that follows no option.
    """
    extra = [] if extra is None or extra == "" else extra
    if isinstance(extra, str) or not isinstance(extra, (list, tuple)) or not all(isinstance(a, str) for a in extra):
        _fail("extra_args", extra, ["a list of strings, e.g. ['--max-running-requests', '64']"])
    elements = [element.strip() for element in extra]
    argv = []
    position = 0
    while position < len(elements):
        spelling = elements[position]
        position += 1
        if _looks_like_value(spelling):
            _fail("extra_args", spelling, None, "it is not an option and follows no option that takes a value "
                  "(give options as '--flag', '--flag=value', '--flag value' or '--flag', 'value')")
        name, equals, rest = OPTION_RE.match(spelling).groups()
        dest, values, implied, refusal = _extra_option(engine, name, spelling)
        if dest in MANAGED[engine]:  # the managed-flag rule: by dest, so every spelling of a managed flag
            arg = MANAGED[engine][dest]
            instead = ("use %s instead" % _var(arg.field)) if arg.field else "the collection fixes it for Kimi-K2.6"
            _fail("extra_args", spelling, None, "%s is set by the collection (%s's %s, emitted as %s); %s"
                  % (name, engine, dest, "the model argument" if arg.positional else arg.option, instead))
        if refusal:
            _fail("extra_args", spelling, None, refusal)
        given = [rest.strip()] if equals or rest.strip() else []
        if implied is not None:  # -O3
            if given:
                _fail("extra_args", spelling, None, "%s already carries its value" % name)
            given = [implied]
        if values == 0:
            if given:
                _fail("extra_args", spelling, None, "%s is a switch and takes no value" % name)
            argv.append(spelling)
            continue
        if not given:
            limit = 1 if values in (1, "?") else len(elements)
            while position < len(elements) and len(given) < limit and _looks_like_value(elements[position]):
                given.append(elements[position])
                position += 1
        if not given and values in (1, "+"):
            _fail("extra_args", spelling, None, "%s needs a value, e.g. '%s=VALUE' or '%s', 'VALUE'"
                  % (name, name, name))
        argv.extend([spelling] if equals or implied is not None else [name] + given)
    return argv


def resolve(inputs, gpus=None, require_revision=True):
    """Resolve user inputs (+ GPU facts when known) into the deployment every role consumes.

    inputs: quant, engine, kv_cache_dtype, moe_backend, context_length, mem_fraction, tp, host, port,
    served_model_name, extra_args, revisions ({quant: sha}), image, min_kv_tokens. Missing -> derived.
    The one validator of these inputs: a bad one raises DeploymentError naming its variable. A GPU pool that
    cannot hold the deployment does not raise: hardware.fits is false and hardware.fit_reason says why.
    """
    if inputs is None:
        inputs = {}
    if not isinstance(inputs, dict):
        raise DeploymentError("deployment inputs must be a dict, got %s" % type(inputs).__name__)
    quant = "auto" if _is_unset(inputs.get("quant")) else str(inputs["quant"]).strip().lower()
    engine = "auto" if _is_unset(inputs.get("engine")) else str(inputs["engine"]).strip().lower()
    _check_identity(quant, engine)

    summary = _summary(gpus) if gpus else None
    advice = _advice(summary) if summary else None
    reasons = []
    if quant == "auto" or engine == "auto":
        if not summary:
            raise DeploymentError(
                "quant=%s engine=%s needs GPU facts to recommend from, and none were given. Set quant (int4, nvfp4) "
                "and engine (sglang, vllm), or run against a GPU host (or pass -e @tests/fixtures/gpus/<profile>.json)."
                % (quant, engine))
        if quant == "auto":
            quant = "int4" if engine == "sglang" else advice["quant"]
            reasons.append("quant=%s: %s" % (quant, "SGLang serves INT4 only (its NVFP4 path gives NaN on sm_120)."
                                             if engine == "sglang" else "recommended for this hardware."))
        if engine == "auto":
            if quant == advice["quant"]:
                engine = advice["engine"]
            else:  # the user picked the other quant: NVFP4 is vLLM-only; INT4 prefers SGLang on sm_120 only
                engine = "sglang" if quant == "int4" and summary["arch"] == "blackwell-rtx" else "vllm"
            reasons.append("engine=%s: %s" % (engine, "NVFP4 is vLLM-only." if quant == "nvfp4"
                                              else "recommended for this hardware."))
        reasons.extend(advice["why"])
        auto = True
    else:
        auto = False
        reasons.append("quant=%s engine=%s: set by the user." % (quant, engine))
        if advice and (advice["quant"], advice["engine"]) != (quant, engine):
            reasons.append("Note: for this hardware the collection would recommend quant=%s engine=%s (%s)"
                           % (advice["quant"], advice["engine"], advice["why"][0]))
    identity = (quant, engine)

    kv = _check_kv(identity, inputs.get("kv_cache_dtype"))
    if auto:
        reasons.append(_kv_note(kv))
    moe = _check_moe(quant, inputs.get("moe_backend"), summary["arch"] if summary else None)

    # The replica: this host alone, or `nodes` hosts (kimi_replica) of which this one has node_rank.
    nodes = _check_int("nodes", 1 if _is_unset(inputs.get("nodes")) else inputs["nodes"], 1, MAX_NODES)
    node_rank = _check_int("node_rank", 0 if _is_unset(inputs.get("node_rank")) else inputs["node_rank"], 0, nodes - 1)
    head_address = None
    if nodes > 1:
        head_address = _check_text("head_address", inputs.get("head_address"), HOST_RE,
                                   ["the head host's address on the replica's network, e.g. 10.0.0.11"], None)
        if head_address is None:
            _fail("head_address", None, ["the head host's address (kimi_replica_head_address, or its ansible_host)"],
                  "a replica of %d hosts meets at its head" % nodes)
    dist_port = _check_int("dist_port", DEFAULT_DIST_PORT if _is_unset(inputs.get("dist_port")) else inputs["dist_port"],
                           1, 65535)

    # Tensor and pipeline parallel: every GPU of the replica once (replica_layout, overridable).
    tp = None if _is_unset(inputs.get("tp")) else _check_int("tp", inputs["tp"], 1, 64 * MAX_NODES)
    pp = None if _is_unset(inputs.get("pp")) else _check_int("pp", inputs["pp"], 1, 61)
    if summary is None and tp is None:
        reasons.append("tensor parallel 8: no GPU facts, assuming the 8-GPU reference pool.")
    tp, pp, layout_why = replica_layout(engine, summary["count"] if summary else 8, nodes, tp, pp)
    if layout_why:
        reasons.append(layout_why)
    if tp & (tp - 1):
        _fail("tp", tp, [1, 2, 4, 8, 16, 32, 64], "MLA's 64 attention heads split over a power of two")
    if summary and tp * pp > summary["count"] * nodes:
        if nodes == 1 and pp == 1:
            _fail("tp", tp, ["1..%d (GPUs found)" % summary["count"]], "more ranks than GPUs")
        _fail("tp", tp, ["tp x pp up to %d (GPUs in the replica: %d host(s) x %d)" % (
            summary["count"] * nodes, nodes, summary["count"])], "more ranks than GPUs (pp %d)" % pp)
    if summary and nodes > 1 and tp * pp != summary["count"] * nodes:
        _fail("pp", pp, ["tp x pp = %d, every GPU of the %d hosts" % (summary["count"] * nodes, nodes)],
              "a multi-host replica gives each engine process all the GPUs of its host (tp %d)" % tp)

    mem = _check_mem(engine, inputs.get("mem_fraction"))
    min_kv = inputs.get("min_kv_tokens")
    min_kv = MIN_KV_TOKENS if _is_unset(min_kv) else _check_int("min_kv_tokens", min_kv, 0, 64 * MAX_CONTEXT)

    # The fit of the settings chosen (not the recommended ones).
    verdict = fit(quant, engine, kv, mem, tp, summary, min_kv, pp=pp, nodes=nodes) if summary else None
    kv_tokens = verdict["kv_tokens"] if verdict else None
    if verdict:
        reasons.append(verdict["reason"])
    replica = replica_advice(quant, engine, kv, mem, summary, min_kv) if verdict and not verdict["fits"] and nodes == 1 else None
    if replica:
        reasons.append(replica)

    # Context length: vLLM with bf16 KV tops out ~131K on 96 GB cards; 256K needs fp8 KV.
    ctx = inputs.get("context_length")
    if _is_unset(ctx):
        ctx = MAX_CONTEXT
        if engine == "vllm" and KV_ELEMENT[kv] == "bf16":
            ctx = 131072
        if engine == "vllm" and kv_tokens is not None:
            while ctx > 4096 and ctx > kv_tokens:
                ctx //= 2
    ctx = _check_int("context_length", ctx, 4096, MAX_CONTEXT)
    warnings = []
    # Only for a pool that fits: an unfit one is reported by the fit verdict (hardware.fits and fit_reason, with the
    # GPUs found and what fits), which site.yml's preflight turns into the error; this message would only confuse it.
    if engine == "vllm" and verdict and verdict["fits"] and ctx > kv_tokens:
        values = (_var("context_length"), ctx, kv_tokens, _var("kv_cache_dtype"), kv, _var("mem_fraction"), mem,
                  summary["count"], summary["vram_min_mib"], _var("mem_fraction"))
        raise DeploymentError(
            "%s=%d is larger than the estimated KV cache (%d tokens with %s=%s, %s=%s on %d x %d MiB): vLLM "
            "refuses to start ('larger than the available KV cache memory'). Lower the context length, use "
            "kv_cache_dtype fp8, or raise %s." % values)
    # SGLang starts whatever the pool; with bf16 KV a 256K request cannot fit (runbook: 116K-token pool).
    if engine == "sglang" and kv_tokens is not None and ctx > kv_tokens and KV_ELEMENT[kv] == "bf16":
        warnings.append("context %d exceeds the estimated KV pool (%d tokens): one request that long would not fit; "
                        "kv_cache_dtype fp8_e4m3 doubles the pool." % (ctx, kv_tokens))

    port = _check_int("port", DEFAULT_PORT if _is_unset(inputs.get("port")) else inputs["port"], 1, 65535)
    host = _check_text("host", inputs.get("host"), HOST_RE, ["an IP address or host name, e.g. 0.0.0.0 or 127.0.0.1"],
                       DEFAULT_HOST)
    name = _check_text("served_model_name", inputs.get("served_model_name"), NAME_RE,
                       ["1-128 characters of letters, digits and . _ : / -"], DEFAULT_SERVED_MODEL_NAME)
    if host in WILDCARD_HOSTS:
        warnings.append("%s=%s: the engine port %d answers without authentication to every network this host is on; "
                        "the proxy only needs 127.0.0.1." % (_var("host"), host, port))
    image = _check_text("image", inputs.get("image"), IMAGE_RE, ["an image reference, e.g. registry.local/vllm:1"],
                        IMAGES[identity])
    if engine == "sglang" and image.rsplit("/", 1)[-1].split("@")[0].endswith("-runtime"):
        _fail("image", image, ["a full SGLang tag, e.g. %s" % IMAGES[identity]],
              "the -runtime images lack ninja and nvcc, which SGLang's Marlin MoE JIT needs to build its kernels at "
              "start-up")
    extra = _check_extra(engine, inputs.get("extra_args"))
    checkpoint = CHECKPOINTS[quant]
    revision = _check_revision(quant, inputs.get("revisions"), require_revision, warnings)

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
            "revision_variable": checkpoint["revision_variable"],
            "format": checkpoint["format"],
            "weights_bytes": checkpoint["weights_bytes"],
            "disk_bytes_required": DEFAULT_DISK_BYTES,
        },
        "image": image,
        "image_is_local_build": quant == "nvfp4",
        # NVFP4's image (transformers >= 5.10) loads trust_remote_code modules offline through the file a snapshot
        # symlink points to, in blobs/, and then misses their relative imports: its *.py must be real files.
        "remote_code_real_files": quant == "nvfp4",
        "entrypoint": list(ENGINE_ENTRYPOINTS[engine]),
        "kv_cache_dtype": kv,
        "moe_backend": moe,
        "tp": tp,
        "pp": pp,
        # The replica: nodes hosts meeting at head_address:dist_port; rank 0 (the head) serves the API.
        "nodes": nodes,
        "node_rank": node_rank,
        "head_address": head_address,
        "dist_port": dist_port,
        "serves_api": node_rank == 0,
        "host": host,
        "port": port,
        # Where a client on the host reaches the engine (a wildcard bind is reached over loopback).
        "local_url": "http://%s:%d" % ("127.0.0.1" if host in WILDCARD_HOSTS else host, port),
        "served_model_name": name,
        "context_length": ctx,
        "mem_fraction": mem,
        "memory_flag": MEMORY_KNOBS[engine]["flag"],
        "extra_args": extra,
        "hardware": None,
    }
    if summary:
        deployment["hardware"] = {
            "gpu_count": summary["count"],
            "models": summary["models"],
            "arch": summary["arch"],
            "sm": summary["sm"],
            "vram_total_mib": summary["vram_total_mib"],
            "vram_min_mib": summary["vram_min_mib"],
            "kv_tokens_estimate": kv_tokens,
            "fits": verdict["fits"],
            "fit_reason": verdict["reason"],
            "replica_advice": replica,
            "recommended": dict((k, advice[k]) for k in ("quant", "engine", "kv_cache_dtype", "moe_backend")),
        }
    deployment["argv"] = engine_argv(deployment)
    deployment["command"] = command_for(deployment)
    # Every member's command (the same but for its rank), for the plan and for checking a replica agrees.
    deployment["member_commands"] = [command_for(dict(deployment, node_rank=rank)) for rank in range(nodes)]
    return deployment


# ---------------------------------------------------------------------------------------------------
# Engine command line: each flag declared once; argv and the managed set both come from ENGINE_ARGS
# ---------------------------------------------------------------------------------------------------

class Arg:
    """One engine flag the collection emits.

    option:     the option string emitted (for a positional, the option with the same dest, e.g. vLLM's --model).
    field:      the deployment key its value comes from, and so the variable (VARIABLES) a user sets instead;
                None for what the collection fixes for Kimi-K2.6.
    value:      a constant string, or a function of the deployment; default: the deployment's `field`;
                neither value nor field: a switch.
    when:       a function of the deployment: emit only when true (the dest is managed either way).
    positional: emit the value alone (vLLM's `vllm serve <model>`).
    """

    def __init__(self, option, field=None, value=None, when=None, positional=False):
        self.option = option
        self.field = field
        self.value = value
        self.when = when
        self.positional = positional

    def render(self, deployment):
        if self.when is not None and not self.when(deployment):
            return []
        if callable(self.value):
            value = self.value(deployment)
        elif self.value is not None:
            value = self.value
        elif self.field is not None:
            value = _text(deployment[self.field])
        else:
            return [self.option]
        return [value] if self.positional else [self.option, value]


def _model(deployment):
    return deployment["checkpoint"]["repo_id"]


def _quantization(deployment):
    return CHECKPOINTS[deployment["quant"]]["quantization_flag"]


def _nvfp4(deployment):
    return deployment["quant"] == "nvfp4"


def _multi_node(deployment):
    return deployment["nodes"] > 1


def _pipelined(deployment):
    return deployment["pp"] > 1


def _worker(deployment):
    return deployment["nodes"] > 1 and deployment["node_rank"] > 0


def _dist_init_addr(deployment):
    return "%s:%d" % (deployment["head_address"], deployment["dist_port"])


ENGINE_ARGS = {
    "sglang": (
        Arg("--model-path", "quant", _model),
        Arg("--tp-size", "tp"),
        Arg("--trust-remote-code"),
        Arg("--host", "host"),
        Arg("--port", "port"),
        Arg("--served-model-name", "served_model_name"),
        Arg("--tool-call-parser", value=PARSER),
        Arg("--reasoning-parser", value=PARSER),
        Arg(MEMORY_KNOBS["sglang"]["flag"], "mem_fraction"),
        Arg("--kv-cache-dtype", "kv_cache_dtype"),
        Arg("--context-length", "context_length"),
        Arg("--enable-metrics"),  # vLLM always serves /metrics; SGLang only with this flag
        Arg("--quantization", "quant", _quantization, when=_quantization),  # INT4: auto-detected, never emitted
        Arg("--pp-size", "pp", when=_pipelined),
        # A replica over several hosts: every member runs this with its rank; rank 0 serves HTTP.
        Arg("--nnodes", "nodes", when=_multi_node),
        Arg("--node-rank", "node_rank", when=_multi_node),
        Arg("--dist-init-addr", "head_address", _dist_init_addr, when=_multi_node),
    ),
    "vllm": (
        Arg("--model", "quant", _model, positional=True),  # `vllm serve <model>`
        Arg("--tensor-parallel-size", "tp"),
        Arg("--trust-remote-code"),
        Arg("--host", "host"),
        Arg("--port", "port"),
        Arg("--served-model-name", "served_model_name"),
        Arg("--tool-call-parser", value=PARSER),
        Arg("--enable-auto-tool-choice"),  # without it vLLM returns no tool_calls
        Arg("--reasoning-parser", value=PARSER),
        Arg("--mm-encoder-tp-mode", value="data"),
        Arg(MEMORY_KNOBS["vllm"]["flag"], "mem_fraction"),
        Arg("--kv-cache-dtype", "kv_cache_dtype"),
        Arg("--max-model-len", "context_length"),
        Arg("--quantization", "quant", _quantization, when=_quantization),
        Arg("--moe-backend", "moe_backend", when=_nvfp4),
        Arg("--disable-custom-all-reduce", when=_nvfp4),
        Arg("--pipeline-parallel-size", "pp", when=_pipelined),
        # A replica over several hosts: the head (rank 0) serves the API; the others run headless.
        Arg("--nnodes", "nodes", when=_multi_node),
        Arg("--node-rank", "node_rank", when=_multi_node),
        Arg("--master-addr", "head_address", when=_multi_node),
        Arg("--master-port", "dist_port", when=_multi_node),
        Arg("--headless", when=_worker),
    ),
}

OPTION_INDEX = dict((engine, _option_index(engine)) for engine in ENGINES)
# The managed set, by dest (every spelling of a dest is refused in kimi_engine_extra_args): derived from ENGINE_ARGS.
MANAGED = dict((engine, dict((OPTION_INDEX[engine][arg.option][0], arg) for arg in ENGINE_ARGS[engine]))
               for engine in ENGINES)
# Engines whose image's entry point is ENGINE_ENTRYPOINTS[engine]; the others get it at the head of argv.
IMAGE_ENTRYPOINT_ENGINES = ("vllm",)


def engine_argv(deployment):
    """The container command after the image, for a deployment resolve() returned: `docker run IMAGE <argv>`.

    Renders only (resolve() validated every value): ENGINE_ARGS in order, then the extra args. SGLang's image has
    no entry point, so argv starts with `python3 -m sglang.launch_server`; the vLLM image's entry point is
    `vllm serve`, so argv starts with the model.
    """
    engine = deployment["engine"]
    argv = [] if engine in IMAGE_ENTRYPOINT_ENGINES else list(ENGINE_ENTRYPOINTS[engine])
    for arg in ENGINE_ARGS[engine]:
        argv.extend(arg.render(deployment))
    return argv + list(deployment["extra_args"])


def command_for(deployment):
    """The full process command line of a resolved deployment (image entry point included)."""
    argv = engine_argv(deployment)
    if deployment["engine"] in IMAGE_ENTRYPOINT_ENGINES:
        return list(ENGINE_ENTRYPOINTS[deployment["engine"]]) + argv
    return argv


def _text(value):
    if isinstance(value, float):
        return _fmt(value)
    return str(value)


def _fmt(number):
    text = ("%.3f" % number).rstrip("0")
    return text + "0" if text.endswith(".") else text
