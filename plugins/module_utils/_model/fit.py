# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The VRAM fit: one verdict, from the settings actually chosen. Private to kimi.deploy.

fit() is the collection's one answer to "can these GPUs serve this deployment": recommend() and resolve() both use it.
The engine's memory knob is read with that engine's meaning (its data's `memory`):
- "total":  the knob caps the whole per-GPU footprint (vLLM --gpu-memory-utilization, SGLang --mem-fraction-static):
            KV = VRAM x knob - weights - the engine's runtime reserve;
- "free":   the knob is a share of what is free once the weights and the runtime are in place (TensorRT-LLM
            kv_cache_config.free_gpu_memory_fraction): KV = (VRAM - weights - runtime reserve) x knob.
With attention data parallel (TensorRT-LLM enable_attention_dp) every rank holds the non-expert weights whole and
its own KV for its own requests, so a replica holds `ranks` times the per-rank tokens, while one request is bounded
by one rank's.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import itertools

from ansible_collections.kimi.deploy.plugins.module_utils._model.platforms import traits
from ansible_collections.kimi.deploy.plugins.module_utils._model.checkpoints import GB, MIB, non_expert_bytes
from ansible_collections.kimi.deploy.plugins.module_utils._model.memory import (
    DEFAULT_WORKLOAD, ELEMENT_BYTES, KV_ELEMENT, kv_bytes_per_token, split_pool, state_bytes_per_seq)
from ansible_collections.kimi.deploy.plugins.module_utils._model.models import DEFAULT_MODEL, model as model_entry
from ansible_collections.kimi.deploy.plugins.module_utils._engines.registry import ENGINES
from ansible_collections.kimi.deploy.plugins.module_utils._model.inputs import fmt, var

MIN_KV_TOKENS = 65536  # below this the pool cannot serve a useful request: "does not fit"
MAX_NODES = 16
# What a too-small pool is told to use instead (per-GPU memory that holds the checkpoint at 8-way TP).
FITTING_POOLS = "8 x 96 GB (RTX PRO 6000 Blackwell), 8 x 141 GB (H200) or 8 x 180 GB (B200)"
# How each engine's hybrid_state rule takes a sequence's state out of the pool, as the fit's reason says it.
HYBRID_RULES = {"shared": "drawn per running request from the KV pool, sized for the workload's concurrency",
                "ratio": "the engine's --mamba-full-memory-ratio share of the pool",
                "outside": "held outside the KV pool, per max_batch_size request"}


def weights_per_gpu(quant, tp, pp=1, attention_dp=False, dp=1, draft=None, model=DEFAULT_MODEL):
    """Bytes of the checkpoint each accelerator holds: split by tp x pp; or (attention DP) the experts split by the
    expert parallel size (tp) and the rest whole on every rank; or (data parallel dp, experts over all) the experts
    split by tp x dp and the rest by tp. A speculative draft runs at the target's tensor parallel size in every
    replica (and data-parallel rank): its weights split by tp."""
    entry = model_entry(model)
    total = entry["checkpoints"][quant]["weights_bytes"]
    rest = non_expert_bytes(quant, model)
    extra = draft["weights_bytes"] / float(tp) if draft else 0.0
    if attention_dp:
        return (total - rest) / float(tp * pp) + rest / float(pp) + extra
    if dp > 1:
        return (total - rest) / float(tp * dp * pp) + rest / float(tp * pp) + extra
    return total / float(tp * pp) + entry["replicated_weight_bytes"] + extra


def draft_kv_bytes_per_token(draft, kv_cache_dtype, tp):
    """The bytes one token of a speculative draft's own KV cache takes on each rank: an MLA latent (576 values a layer)
    on every rank, or K and V of the draft's KV heads split over tp (at least one head a rank). In the target's KV
    dtype."""
    if not draft:
        return 0
    kv = draft["kv"]
    element = ELEMENT_BYTES[KV_ELEMENT[kv_cache_dtype]]
    if kv.get("kv_heads") is None:
        return kv["layers"] * 576 * element
    heads = max(1, -(-kv["kv_heads"] // tp))
    return kv["layers"] * 2 * heads * kv["head_dim"] * element


def per_token_bytes(kv_cache_dtype, tp, pp=1, draft=None, model=DEFAULT_MODEL):
    """KV bytes one token takes on each rank: the target's MLA layers (1/pp of them a stage) and a draft's own KV."""
    return (kv_bytes_per_token(model_entry(model), KV_ELEMENT[kv_cache_dtype]) / float(pp)
            + draft_kv_bytes_per_token(draft, kv_cache_dtype, tp))


def pool(quant, engine, kv_cache_dtype, mem_fraction, gpu_memory_mib, tp, pp=1, attention_dp=False, dp=1, draft=None,
         model=DEFAULT_MODEL, seqs=None):
    """(KV tokens, sequences) of one rank of `engine` (an estimate, calibrated on the runbook for the K2 family). With
    pipeline parallel each stage holds 1/pp of the layers, and so 1/pp of each token's KV. A speculative draft's
    weights come out of the pool, and each token holds the draft's KV too. A hybrid model's linear layers hold a fixed
    state per sequence (_model/memory.py): `seqs` of them (the workload's concurrency unless given) are taken out of
    the pool as the engine's `hybrid_state` rule says; sequences is None for a model without state."""
    memory = ENGINES[engine]["memory"]
    hybrid = ENGINES[engine].get("hybrid_state") or {"rule": "shared"}
    seqs = DEFAULT_WORKLOAD["concurrency"] if seqs is None else seqs
    state = state_bytes_per_seq(model_entry(model), tp, pp)
    vram = gpu_memory_mib * MIB
    weights = weights_per_gpu(quant, tp, pp, attention_dp, dp, draft, model)
    if memory["of"] == "free":
        outside = seqs * state if hybrid["rule"] == "outside" else 0
        free = (vram - weights - memory["runtime_reserve_bytes"] - outside) * mem_fraction
    else:
        free = vram * mem_fraction - weights - memory["runtime_reserve_bytes"]
    return split_pool(free, per_token_bytes(kv_cache_dtype, tp, pp, draft, model), state, hybrid["rule"], seqs,
                      hybrid.get("ratio"))


def kv_capacity_tokens(quant, engine, kv_cache_dtype, mem_fraction, gpu_memory_mib, tp, pp=1, attention_dp=False,
                       dp=1, draft=None, model=DEFAULT_MODEL, seqs=None):
    """Estimated KV-cache tokens of one rank of `engine` (pool()'s tokens)."""
    return pool(quant, engine, kv_cache_dtype, mem_fraction, gpu_memory_mib, tp, pp, attention_dp, dp, draft, model,
                seqs)[0]


def _gb(count):
    return count / float(GB)


def settings_that_fit(quant, engine, kv_cache_dtype, mem_fraction, tp, gpus, min_kv_tokens, attention_dp=False, dp=1,
                      draft=None, model=DEFAULT_MODEL, seqs=None):
    """The smallest change of the user's own settings (tp, memory knob, KV dtype) that fits, as a sentence, or None."""
    memory = ENGINES[engine]["memory"]
    kv_menu = ENGINES[engine]["quants"][quant]["kv_menu"]
    changes = []
    wider = [t for t in (2, 4, 8, 16, 32, 64) if tp < t <= gpus["count"]] if dp == 1 else []
    if wider:
        changes.append(("tp", wider[-1]))
    if mem_fraction < memory["max"]:
        changes.append(("mem_fraction", memory["max"]))
    fp8 = kv_menu[0]
    if KV_ELEMENT[kv_cache_dtype] != KV_ELEMENT[fp8]:
        changes.append(("kv_cache_dtype", fp8))
    for size in range(1, len(changes) + 1):
        for combo in itertools.combinations(changes, size):
            settings = {"tp": tp, "mem_fraction": mem_fraction, "kv_cache_dtype": kv_cache_dtype}
            settings.update(combo)
            tokens, sequences = pool(quant, engine, settings["kv_cache_dtype"], settings["mem_fraction"],
                                     gpus["vram_min_mib"], settings["tp"], attention_dp=attention_dp, dp=dp,
                                     draft=draft, model=model, seqs=seqs)
            if tokens >= min_kv_tokens and sequences != 0:
                return "With %s it would fit (~%dK KV tokens)." % (
                    " and ".join("%s=%s" % (var(field), value) for field, value in combo), tokens // 1024)
    return None


def fit(quant, engine, kv_cache_dtype, mem_fraction, tp, gpus, min_kv_tokens=MIN_KV_TOKENS, pp=1, nodes=1,
        attention_dp=False, dp=1, draft=None, model=DEFAULT_MODEL, seqs=None):
    """Can `gpus` (a summarize_gpus summary of one host; a replica is `nodes` such hosts) serve the `quant`
    checkpoint on `engine` with these settings (tp x pp ranks)?

    The one VRAM verdict of the collection: {"fits": bool, "kv_tokens": int (one rank's with attention DP),
    "settings_advice": the user's own settings that would fit, or None, "sequences": the sequences whose fixed state
    (a hybrid model's linear layers) the pool holds, None without such layers, "state_bytes_per_seq", "reason": a
    sentence with the numbers (GPUs, per-GPU share of the weights, KV tokens against the minimum, and what would fit)}.
    A mixed pool is judged by its smallest GPU.
    """
    memory = ENGINES[engine]["memory"]
    entry = model_entry(model)
    checkpoint = entry["checkpoints"][quant]
    state = state_bytes_per_seq(entry, tp, pp)
    unknown = [what for what, value in (
        ("the checkpoint's size", checkpoint["weights_bytes"]),
        ("the weights held whole on every rank", entry["replicated_weight_bytes"]),
        ("the weights outside the routed experts", non_expert_bytes(quant, model) if attention_dp or dp > 1 else 0))
        if value is None]
    if unknown:
        return {"fits": False, "kv_tokens": 0, "settings_advice": None, "sequences": None,
                "state_bytes_per_seq": state, "reason": (
                    "Does not fit: not published for %s %s (%s): %s (%s), so the fit cannot be estimated; refused "
                    "until it is." % (entry["title"], quant, checkpoint["repo_id"], " and ".join(unknown),
                                      checkpoint["source"]))}
    if not gpus["count"]:
        return {"fits": False, "kv_tokens": 0, "settings_advice": None, "sequences": None,
                "state_bytes_per_seq": state, "reason": "Does not fit: no NVIDIA GPU or Ascend NPU was found."}
    platform = traits(gpus.get("platform"))
    unit, memory_name = platform["unit"], platform["memory"]
    what = "%d x %s" % (gpus["count"], ", ".join(gpus["models"]))
    if nodes > 1:
        what = "%d hosts of %s" % (nodes, what)
    if gpus["arch"] == "unsupported":
        reason = ("Does not fit: %s (%s) is older than Ampere; the INT4 and NVFP4 MoE kernels need sm_80 or newer."
                  % (what, gpus["sm"]))
        return {"fits": False, "kv_tokens": 0, "settings_advice": None, "sequences": None,
                "state_bytes_per_seq": state, "reason": reason}
    tokens, sequences = pool(quant, engine, kv_cache_dtype, mem_fraction, gpus["vram_min_mib"], tp, pp, attention_dp,
                             dp, draft, model, seqs)
    share = weights_per_gpu(quant, tp, pp, attention_dp, dp, draft, model)
    target_share = weights_per_gpu(quant, tp, pp, attention_dp, dp, model=model)
    vram = gpus["vram_min_mib"] * MIB
    if memory["of"] == "free":
        usable = (vram - share - memory["runtime_reserve_bytes"]) * mem_fraction
        room = "; KV gets %s %s of the ~%.0f GB left after the weights and runtime, ~%.0f GB" % (
            memory["flag"], fmt(mem_fraction), _gb(vram - share - memory["runtime_reserve_bytes"]), _gb(usable))
    else:
        room = " in the ~%.0f GB that %s %s %s gives it" % (
            _gb(vram * mem_fraction), engine, memory["flag"], fmt(mem_fraction))
    layout = "tensor parallel %d" % tp + (" x pipeline parallel %d" % pp if pp > 1 else "")
    if attention_dp:
        layout = "attention data parallel %d + expert parallel %d" % (tp, tp)
    elif dp > 1:
        layout = "tensor parallel %d x data parallel %d + expert parallel %d" % (tp, dp, tp * dp)
    split = ""
    if attention_dp:
        split = " (the experts split, the rest whole on every rank)"
    elif dp > 1:
        split = " (the experts split %d ways, the rest %d ways)" % (tp * dp, tp)
    with_draft = ""
    if draft:
        with_draft = (" plus ~%.1f GB of the ~%.1f GB draft %s (its KV: %d bytes a token a rank, beside the target's "
                      "%d)" % (_gb(draft["weights_bytes"] / float(tp)), _gb(draft["weights_bytes"]), draft["repo_id"],
                               draft_kv_bytes_per_token(draft, kv_cache_dtype, tp),
                               kv_bytes_per_token(entry, KV_ELEMENT[kv_cache_dtype]) // pp))
    holds = ("%s on %s with %d MiB %s each (%.0f GB in all): each %s %%s ~%.0f GB of the ~%.0f GB %s checkpoint "
             "(%s)%s%s%s" % (layout, what, gpus["vram_min_mib"], memory_name,
                             _gb(gpus["vram_total_mib"] * MIB * nodes), unit, _gb(target_share),
                             _gb(checkpoint["weights_bytes"]), quant, checkpoint["repo_id"], split, with_draft, room))
    per = "per replica"
    if attention_dp:
        per = "per rank (x%d ranks with attention DP; one request fits in one rank's)" % tp
    elif dp > 1:
        per = "per data-parallel rank (x%d ranks; one request fits in one rank's)" % dp
    hybrid = ""
    if state:
        hybrid = (" and the fixed state of %d sequences (%s's %d linear-attention layers: %.1f MB a sequence a %s, "
                  "%s)" % (sequences or (seqs if seqs is not None else DEFAULT_WORKLOAD["concurrency"]),
                           entry["title"], entry["geometry"]["linear"]["layers"], state / 1e6, unit,
                           HYBRID_RULES[(ENGINES[engine].get("hybrid_state") or {"rule": "shared"})["rule"]]))
    if tokens >= min_kv_tokens and sequences != 0:
        return {"fits": True, "kv_tokens": tokens, "settings_advice": None, "sequences": sequences,
                "state_bytes_per_seq": state, "reason": (
                    "Fits: " + holds % "holds"
                    + ", leaving room for ~%dK KV tokens %s with %s KV%s (at least %dK needed; estimate)."
                    % (tokens // 1024, per, kv_cache_dtype, hybrid, min_kv_tokens // 1024))}
    kv_bytes = min_kv_tokens * per_token_bytes(kv_cache_dtype, tp, pp, draft, model) + (
        (seqs if seqs is not None else DEFAULT_WORKLOAD["concurrency"]) * state)
    if memory["of"] == "free":
        needed = share + memory["runtime_reserve_bytes"] + kv_bytes / mem_fraction
    else:
        needed = (share + memory["runtime_reserve_bytes"] + kv_bytes) / mem_fraction
    advice = None
    if nodes == 1:
        advice = settings_that_fit(quant, engine, kv_cache_dtype, mem_fraction, tp, gpus, min_kv_tokens,
                                   attention_dp, dp, draft, model, seqs)
    fitting = FITTING_POOLS if model == DEFAULT_MODEL or not entry.get("layouts") else "; ".join(
        "%s (%s)" % (layout_["gpus"], layout_["source"]) for layout_ in entry["layouts"])
    other = advice or ("Add hosts to the replica, or use larger %ss." % unit if nodes > 1
                       else "Use more or larger GPUs, e.g. %s." % fitting if unit == "GPU"
                       else "Use more NPUs: one Atlas 800 A3 (16 x 64 GB).")
    return {"fits": False, "kv_tokens": tokens, "settings_advice": advice, "sequences": sequences,
            "state_bytes_per_seq": state, "reason": (
                "Does not fit: " + holds % "would hold"
                + ", leaving room for %dK KV tokens with %s KV%s (estimate), below the %dK minimum. It needs about "
                "%.0f GB per %s at %s. %s" % (tokens // 1024, kv_cache_dtype, hybrid, min_kv_tokens // 1024,
                                              _gb(needed), unit, layout, other))}


def replica_layout(engine, gpus_per_host, nodes, tp=None, pp=None):
    """(tp, pp, dp, reason) for a replica of `nodes` hosts of `gpus_per_host` accelerators; tp/pp given by the user win.

    One host: tensor parallel over its GPUs. Several: the engine's data says how it spans hosts (`multi_node`):
    "pipeline" keeps tensor parallel inside each host and pipelines across hosts (vLLM: only the activations between
    stages cross the host link, which is Ethernet or PCIe class, not NVLink); "tensor" runs one tensor-parallel group
    over the whole replica (SGLang's multi-node mode); "data" (vLLM-Ascend) runs tensor parallel `attention_tp` inside
    each data-parallel rank and the ranks over every accelerator of the replica, one host or several, the experts
    over all of them.
    """
    spec = ENGINES[engine]
    world = gpus_per_host * nodes
    if spec["multi_node"] == "data":
        tp = spec["attention_tp"] if tp is None else tp
        dp = max(1, world // tp)
        why = ("%s: tensor parallel %d x data parallel %d + expert parallel %d over %s%d accelerators (seed 004's "
               "layout)." % (spec["title"], tp, dp, tp * dp, "%d hosts, " % nodes if nodes > 1 else "", world))
        return tp, 1 if pp is None else pp, dp, why
    if nodes == 1:
        auto_tp, auto_pp, why = world, 1, None
    elif spec["multi_node"] == "pipeline":
        auto_tp, auto_pp = gpus_per_host, nodes
        why = ("%s across %d hosts: tensor parallel %d inside each host, pipeline parallel %d across them (only "
               "activations cross the host link between stages; tensor parallel all-reduces stay on NVLink/PCIe)."
               % (spec["title"], nodes, gpus_per_host, nodes))
    else:
        auto_tp, auto_pp = world, 1
        why = ("%s across %d hosts: tensor parallel %d over the whole replica (%s's multi-node mode, one "
               "tensor-parallel group, --nnodes %d)." % (spec["title"], nodes, world, spec["title"], nodes))
    tp = auto_tp if tp is None else tp
    if pp is None:  # one host: the tp GPUs asked for; several: every GPU of the replica once
        pp = auto_pp if tp == auto_tp or nodes == 1 else max(1, world // tp)
    return tp, pp, 1, why


def published_layouts(model):
    """The model's published layouts as a sentence ("" for none)."""
    layouts = model_entry(model).get("layouts") or ()
    return "; ".join("%s%s (%s)" % (item["gpus"], ", tp %s x pp %s" % (item["tp"], item["pp"]) if item["tp"] else "",
                                    item["source"]) for item in layouts)


def replica_advice(quant, engine, kv_cache_dtype, mem_fraction, gpus, min_kv_tokens=MIN_KV_TOKENS,
                   model=DEFAULT_MODEL, seqs=None):
    """For a host that cannot hold the deployment alone: the smallest replica of such hosts that can, as a sentence
    with the numbers (and, for a model with published layouts, those and their sources), or None (also for an engine
    this collection does not run over several hosts)."""
    if not gpus["count"] or gpus["arch"] == "unsupported" or not ENGINES[engine]["multi_node"]:
        return None
    for nodes in range(2, MAX_NODES + 1):
        tp, pp, dp, _why = replica_layout(engine, gpus["count"], nodes)
        if tp & (tp - 1):
            continue
        verdict = fit(quant, engine, kv_cache_dtype, mem_fraction, tp, gpus, min_kv_tokens, pp=pp, nodes=nodes,
                      attention_dp=bool(ENGINES[engine].get("attention_dp")), dp=dp, model=model, seqs=seqs)
        if verdict["fits"]:
            published = published_layouts(model) if model != DEFAULT_MODEL else ""
            return ("Does not fit alone; fits as a %d-host replica of such hosts (set kimi_replica to one name on "
                    "each): %s%s" % (nodes, verdict["reason"], " Published layouts of %s: %s." % (
                        model_entry(model)["title"], published) if published else ""))
    return None
