# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The throughput-aware layout of one host: which tensor-parallel x instances layouts fit, ranked by the throughput
per GPU they are expected to serve for the workload (kimi_workload). Private to kimi.deploy.

"Does it fit" is not the question once two instances fit on one host: the published benchmark of this model family
(ANCHORS) found two TP4 instances beat one TP8 on 8 x B200 with NVFP4. Each layout is judged by the nearest published
anchor (same quant and layout, same GPU model first, then the same architecture; the same engine first); a layout with
no anchor is judged by the fit numbers only (KV room per instance), and ranks below every anchored one: without
evidence the collection keeps one instance over every GPU, as before. Several instances on one host are served by the
engine's own data parallelism (its data's `data_parallel`), under the one unit; an engine without it is offered the
single-instance layout only.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.kimi.deploy.plugins.module_utils._engines.registry import ENGINES
from ansible_collections.kimi.deploy.plugins.module_utils._model.fit import fit
from ansible_collections.kimi.deploy.plugins.module_utils._model.memory import DEFAULT_WORKLOAD
from ansible_collections.kimi.deploy.plugins.module_utils._model.models import DEFAULT_MODEL
from ansible_collections.kimi.deploy.plugins.module_utils._model.inputs import check_int, fail, is_unset, var

SOURCE = ("SemiAnalysis InferenceX, Kimi-K2.6 family, 8K in / 1K out, May 2026, as quoted in kimi.deploy issue 39 "
          "(total tok/s per GPU)")
# The workload the InferenceX points were measured at (8K in / 1K out).
INFERENCEX = {"input_tokens": 8192, "output_tokens": 1024}

# The published throughput anchors, one table keyed by (GPU model, architecture family, quant, engine, tp, instances):
# engine None where the source does not name it; concurrency None where it is not stated for that point.
ANCHORS = (
    {"gpu": "NVIDIA B200", "arch": "blackwell-dc", "quant": "nvfp4", "engine": None, "tp": 4, "instances": 2,
     "tok_s_per_gpu": 3879, "concurrency": 64, "tok_s_per_user": 32, "workload": INFERENCEX, "source": SOURCE},
    {"gpu": "NVIDIA B200", "arch": "blackwell-dc", "quant": "int4", "engine": None, "tp": 8, "instances": 1,
     "tok_s_per_gpu": 1791, "concurrency": None, "tok_s_per_user": None, "workload": INFERENCEX, "source": SOURCE},
    {"gpu": "NVIDIA H200", "arch": "hopper", "quant": "int4", "engine": "vllm", "tp": 8, "instances": 1,
     "tok_s_per_gpu": 1175, "concurrency": None, "tok_s_per_user": None, "workload": INFERENCEX, "source": SOURCE},
)

# kimi_workload unset: a chat workload (short prompts, medium answers, a few dozen users at once).
WORKLOAD_KEYS = ("input_tokens", "output_tokens", "concurrency")
# (DEFAULT_WORKLOAD, imported from _model/memory.py, where a hybrid model's state is sized for its concurrency.)


def check_workload(workload):
    """kimi_workload as {input_tokens, output_tokens, concurrency}, each key optional (the chat default's value)."""
    allowed = ["a dict of %s (positive integers), e.g. %s" % (", ".join(WORKLOAD_KEYS), DEFAULT_WORKLOAD)]
    if is_unset(workload) or workload == {}:
        return dict(DEFAULT_WORKLOAD)
    if not isinstance(workload, dict):
        fail("workload", workload, allowed)
    unknown = sorted(str(k) for k in workload if k not in WORKLOAD_KEYS)
    if unknown:
        fail("workload", workload, allowed, "unknown key %s" % ", ".join(unknown))
    out = dict(DEFAULT_WORKLOAD)
    for key in WORKLOAD_KEYS:
        if key in workload:
            limit = 100000 if key == "concurrency" else 262144
            out[key] = check_int("workload", workload[key], 1, limit)
    return out


def candidates(count):
    """(tp, instances) with tp a power of two and tp x instances = count, widest tensor parallel first."""
    out = []
    tp = 1
    while tp <= count:
        if count % tp == 0:
            out.append((tp, count // tp))
        tp *= 2
    return sorted(out, reverse=True)


def nearest_anchor(summary, quant, engine, tp, instances):
    """The published point nearest this layout (same quant and layout; same GPU model, then architecture; the same
    engine, then one the source does not name, then another), or None."""
    def distance(anchor):
        engine_rank = 0 if anchor["engine"] == engine else 1 if anchor["engine"] is None else 2
        return (0 if anchor["gpu"] in summary["models"] else 1, engine_rank)

    near = [a for a in ANCHORS if a["quant"] == quant and (a["tp"], a["instances"]) == (tp, instances)
            and a["arch"] == summary["arch"]]
    return min(near, key=distance) if near else None


def _anchor_words(anchor, engine, summary, workload):
    point = "%s %s %s TP%d x %d: ~%d tok/s per GPU" % (
        anchor["gpu"], anchor["quant"].upper(), ENGINES[anchor["engine"]]["title"] if anchor["engine"] else
        "(engine not named)", anchor["tp"], anchor["instances"], anchor["tok_s_per_gpu"])
    if anchor["concurrency"]:
        point += " at %d concurrent" % anchor["concurrency"]
    if anchor["tok_s_per_user"]:
        point += " (~%d tok/s per user)" % anchor["tok_s_per_user"]
    notes = []
    if anchor["gpu"] not in summary["models"]:
        notes.append("measured on %s, the same architecture" % anchor["gpu"])
    if anchor["engine"] and anchor["engine"] != engine:
        notes.append("measured on %s" % ENGINES[anchor["engine"]]["title"])
    measured = anchor["workload"]
    if (measured["input_tokens"], measured["output_tokens"]) != (workload["input_tokens"], workload["output_tokens"]) \
            or (anchor["concurrency"] and anchor["concurrency"] != workload["concurrency"]):
        notes.append("at %d in / %d out, not this workload's %d / %d at %d concurrent" % (
            measured["input_tokens"], measured["output_tokens"], workload["input_tokens"], workload["output_tokens"],
            workload["concurrency"]))
    return "published anchor %s (%s)%s" % (point, anchor["source"], "; " + "; ".join(notes) if notes else "")


def rank_layouts(quant, engine, kv_cache_dtype, mem_fraction, summary, workload, min_kv_tokens, attention_dp=False,
                 model=DEFAULT_MODEL):
    """Every (tp, instances) layout of one host of `summary`, best first: {tp, instances, fits, kv_tokens (one
    instance's), tok_s_per_gpu (the anchor's, or None), basis ("anchor", "fit" or "refused"), requests_held (requests of
    the workload's length the KV pools of all instances hold, per GPU), reason}."""
    spec = ENGINES[engine]
    dp_data = spec.get("data_parallel")
    per_request = workload["input_tokens"] + workload["output_tokens"]
    count = summary["count"]
    out = []
    for tp, instances in candidates(count):
        layout = {"tp": tp, "instances": instances, "fits": False, "kv_tokens": 0, "tok_s_per_gpu": None,
                  "basis": "refused", "requests_held": 0.0, "anchor": None}
        name = "TP%d x %d instance%s" % (tp, instances, "s" if instances > 1 else "")
        if instances > 1 and not dp_data:
            layout["reason"] = "%s: not offered: %s" % (name, spec.get(
                "data_parallel_why", "%s has no data parallelism of its own" % spec["title"]))
            out.append(layout)
            continue
        shared = instances > 1 and dp_data["experts"] == "all"
        verdict = fit(quant, engine, kv_cache_dtype, mem_fraction, tp, summary, min_kv_tokens,
                      attention_dp=attention_dp and instances == 1, dp=instances if shared else 1, model=model,
                      seqs=-(-workload["concurrency"] // instances))
        kv = verdict["kv_tokens"] * (tp if attention_dp and instances == 1 else 1)
        layout["fits"], layout["kv_tokens"] = verdict["fits"], kv
        held = kv // per_request
        layout["requests_held"] = held * instances / float(count)
        room = ("KV room per instance ~%dK tokens: %d requests of %d+%d tokens (%d concurrent wanted, %d an "
                "instance)" % (kv // 1024, held, workload["input_tokens"], workload["output_tokens"],
                               workload["concurrency"], -(-workload["concurrency"] // instances)))
        serving = ""
        if instances > 1:
            serving = "; served by %s" % dp_data["how"]
        if not verdict["fits"]:
            layout["reason"] = "%s: %s" % (name, verdict["reason"])
            out.append(layout)
            continue
        anchor = nearest_anchor(summary, quant, engine, tp, instances)
        if anchor:
            layout.update(basis="anchor", tok_s_per_gpu=anchor["tok_s_per_gpu"], anchor=anchor)
            layout["reason"] = "%s: %s; %s%s" % (name, _anchor_words(anchor, engine, summary, workload), room,
                                                 serving)
        else:
            layout["basis"] = "fit"
            layout["reason"] = ("%s: no published anchor for this GPU, quant and layout: judged by the fit numbers "
                                "only (%s%s), ranked below anchored layouts" % (name, room, serving))
        out.append(layout)
    order = {"anchor": 0, "fit": 1, "refused": 2}
    # Anchored first, by throughput; then (no evidence) the single instance over every GPU, then KV room per GPU.
    out.sort(key=lambda item: (not item["fits"], order[item["basis"]], -(item["tok_s_per_gpu"] or 0),
                               item["instances"] != 1, -item["requests_held"]))
    return out


def choose_layout(inputs, quant, engine, kv_cache_dtype, mem_fraction, summary, min_kv_tokens, attention_dp=False,
                  model=DEFAULT_MODEL):
    """(tp, instances, ranking, why) for one host: the user's kimi_tensor_parallel / kimi_instances win; else the best
    of rank_layouts that fits (none fits: one instance over every GPU, whose fit says why)."""
    spec = ENGINES[engine]
    count = summary["count"]
    workload = check_workload(inputs.get("workload"))
    ranking = rank_layouts(quant, engine, kv_cache_dtype, mem_fraction, summary, workload, min_kv_tokens,
                           attention_dp, model)
    tp = None if is_unset(inputs.get("tp")) else check_int("tp", inputs["tp"], 1, 64)
    instances = None if is_unset(inputs.get("instances")) else check_int("instances", inputs["instances"], 1, count)
    if instances is not None:
        if instances > 1 and not spec.get("data_parallel"):
            fail("instances", instances, [1],
                 spec.get("data_parallel_why", "%s has no data parallelism" % spec["title"]))
        if tp is None:
            allowed = [n for _tp, n in candidates(count)]
            if instances not in allowed:
                fail("instances", instances, allowed, "each instance gets the same power-of-two number of the %d "
                     "GPUs (or set %s too)" % (count, var("tp")))
            tp = count // instances
        if tp * instances > count:
            fail("instances", instances, ["%s x %s up to %d GPUs" % (var("tp"), var("instances"), count)],
                 "more ranks than GPUs (tp %d x %d instances)" % (tp, instances))
        return tp, instances, ranking, "Layout TP%d x %d instance(s): set by the user (%s)." % (
            tp, instances, var("instances"))
    if tp is not None:
        # The existing rule: the tp GPUs asked for, one instance.
        return tp, 1, ranking, "Layout TP%d x 1 instance: set by the user (%s; the ranking is for reference)." % (
            tp, var("tp"))
    best = ranking[0] if ranking and ranking[0]["fits"] else None
    if best is None:
        return count, 1, ranking, None
    why = "Layout TP%d x %d instance(s): the best-ranked for the workload (%d in / %d out, %d concurrent; %s)." % (
        best["tp"], best["instances"], workload["input_tokens"], workload["output_tokens"], workload["concurrency"],
        var("workload"))
    wanted = -(-workload["concurrency"] // best["instances"])
    held = best["kv_tokens"] // (workload["input_tokens"] + workload["output_tokens"])
    if held < wanted:
        why += (" Its KV room holds %d requests of this length an instance, fewer than the %d concurrent each gets: "
                "requests will queue." % (held, wanted))
    return best["tp"], best["instances"], ranking, why


def ranking_lines(ranking):
    """The ranking as plan lines, best first."""
    return ["layout %d: %s" % (i + 1, layout["reason"]) for i, layout in enumerate(ranking or ())]
