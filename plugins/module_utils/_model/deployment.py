# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The Kimi-K2.6 deployment model's resolver: inputs (+ the host's accelerators) -> one deployment. Private to
kimi.deploy.

The deployment action (plugins/action/deployment.py, which makes kimi_deployment), the filter plugins and the tests all
go through resolve() and recommend(); nothing else derives checkpoints, images, menus or engine flags. The model is
split by concern, and this file only combines them:
- _model/checkpoints.py:  the checkpoints (repo, format, size) and the model geometry;
- _engines/:              the engines and their versions (one data file each, _engines/<name>.py, with the flag lists
                          generated from the released packages in _engines/flags/), the command line and config file
                          (_engines/registry.py);
- _model/accelerators.py: the accelerator families and the identity recommended for each;
- _model/fit.py:          the VRAM fit, the KV estimate and the replica layout;
- _model/inputs.py:       the variables, the error type and the value checks.
resolve() is the only validator of deployment inputs: the layers after it trust what it returns.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.kimi.deploy.plugins.module_utils._model.accelerators import (
    PLATFORM_TITLES, SUMMARY_ERRORS, engine_for, platform_of, recommended, summarize)
from ansible_collections.kimi.deploy.plugins.module_utils._model.checkpoints import (
    CHECKPOINTS, KV_ELEMENT, MAX_CONTEXT, QUANTS)
from ansible_collections.kimi.deploy.plugins.module_utils._engines.registry import (
    ENGINE_NAMES, ENGINES, build_of, builds_of, check_extra_args, command_for, engine_argv, engine_config, engine_slots,
    managed, parser_name, pinned_image, select_version)
from ansible_collections.kimi.deploy.plugins.module_utils._engines.registry import options as eng_options
from ansible_collections.kimi.deploy.plugins.module_utils._model.cost import check_costs, hour_cost
from ansible_collections.kimi.deploy.plugins.module_utils._model.kv_offload import resolve_kv_offload
from ansible_collections.kimi.deploy.plugins.module_utils._model.kernel_cache import entry as kernel_cache_entry
from ansible_collections.kimi.deploy.plugins.module_utils._model.fit import (
    MAX_NODES, MIN_KV_TOKENS, fit, replica_advice, replica_layout)
from ansible_collections.kimi.deploy.plugins.module_utils._model.layout import choose_layout
from ansible_collections.kimi.deploy.plugins.module_utils._model.pd import for_instance, resolve_pd
from ansible_collections.kimi.deploy.plugins.module_utils._model.platforms import DEFAULT as DEFAULT_PLATFORM, ORDER, traits
from ansible_collections.kimi.deploy.plugins.module_utils._model.ports import check as check_ports, deployment_ports
from ansible_collections.kimi.deploy.plugins.module_utils._model.speculative import resolve_speculative
from ansible_collections.kimi.deploy.plugins.module_utils._model.loader import choose as choose_loader
from ansible_collections.kimi.deploy.plugins.module_utils._model.inputs import (
    VARIABLES, DeploymentError, check_choice, check_int, check_no_control, check_text, fail, is_unset, var)
from ansible_collections.kimi.deploy.plugins.module_utils._model.validate import ValueRuleError, check_revision
from ansible_collections.kimi.deploy.plugins.module_utils._model.verify_checks import ENGINE as VERIFY_CHECKS

# A replica over several hosts: the engines' own rendezvous (SGLang --dist-init-addr, vLLM --master-addr/port) on the
# head, at this port unless kimi_replica_port says otherwise.
DEFAULT_DIST_PORT = 29500
DEFAULT_PORT = 30000
# --network host: Caddy reaches the engine over loopback, and the raw port answers unauthenticated to whoever can
# reach it (the runbook's warning), so loopback is the default and 0.0.0.0 an explicit, warned opt-in.
DEFAULT_HOST = "127.0.0.1"
WILDCARD_HOSTS = ("0.0.0.0", "::", "[::]")
DEFAULT_SERVED_MODEL_NAME = "kimi-k2.6"

KV_NOTES = {
    "fp8_e4m3": "doubles the KV pool (116K -> 232K tokens on 8x96 GB), verified 5/5 incl. vision",
    "fp8": "about 2x the KV pool; needed for 256K-class context on 96 GB cards (NVFP4 ships FP8 KV scales)",
    "auto": "bf16 KV, the engine default: most conservative numerics, half the KV pool",
    "fp8_e5m2": "more exponent range, less mantissa; accepted by SGLang's Triton MLA backend, runtime-unverified",
}

# Values checked with full-match semantics (no trailing newline slips through).
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}")
HOST_RE = re.compile(r"[A-Za-z0-9.:\[\]-]{1,253}")
IMAGE_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/:@+-]{0,254}")
VERSION_RE = re.compile(r"[0-9][0-9A-Za-z.+-]{0,31}")


def _summary(gpus):
    """_model.accelerators.summarize (the one summary shape, NVIDIA or Ascend), its errors as DeploymentError."""
    try:
        return summarize(gpus)
    except SUMMARY_ERRORS as exc:
        raise DeploymentError(str(exc))


def _quant_platform(quant):
    """The platform a checkpoint runs on when no accelerator facts say: the one platform that serves it, else the
    default one."""
    platforms = set(spec["platform"] for spec in ENGINES.values() if quant in spec["quants"])
    return platforms.pop() if len(platforms) == 1 else DEFAULT_PLATFORM


def _kv_note(kv):
    return "KV cache %s: %s." % (kv, KV_NOTES[kv])


def _advice(summary):
    """The recommended identity and why, with the mixed-pool note."""
    pick = recommended(summary)
    why = list(pick["why"])
    if summary["count"] and not summary["homogeneous"]:
        why.append("Mixed %s (%s): judged by the weakest one." % (
            traits(platform_of(summary))["units"], ", ".join(summary["models"])))
    key = build_of(pick["engine"], platform_of(summary) or DEFAULT_PLATFORM)
    return {"quant": pick["quant"], "engine": pick["engine"], "build": key,
            "kv_cache_dtype": ENGINES[key]["quants"][pick["quant"]]["kv_menu"][0],
            "moe_backend": pick["moe_backend"], "why": why}


def recommend(gpus, min_kv_tokens=MIN_KV_TOKENS):
    """Recommend quant, engine, KV dtype and MoE backend for a GPU list, with reasons and the fit verdict of
    those recommended settings (fit(), all GPUs in one tensor-parallel group, the engine's default knob)."""
    summary = _summary(gpus)
    advice = _advice(summary)
    quant, engine, kv, key = advice["quant"], advice["engine"], advice["kv_cache_dtype"], advice["build"]
    tp, pp, dp, _why = replica_layout(key, max(summary["count"], 1), 1)
    verdict = fit(quant, key, kv, ENGINES[key]["memory"]["default"], tp, summary, min_kv_tokens, pp=pp, dp=dp,
                  attention_dp=bool(ENGINES[key].get("attention_dp")))
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
        "platform": platform_of(summary),
        "reasons": reasons,
    }


# ---------------------------------------------------------------------------------------------------
# Checks that only resolve() calls
# ---------------------------------------------------------------------------------------------------

def _allowed_pairs(platform=None):
    """quant+engine pairs served on `platform`, or on each platform ("...; on Ascend: ...") when None."""
    if platform is None:
        return "; ".join("%s%s" % ("" if p == DEFAULT_PLATFORM else "on %s: " % PLATFORM_TITLES[p], _allowed_pairs(p))
                         for p in ORDER)
    return ", ".join("%s+%s" % (quant, ENGINES[key]["name"]) for key in sorted(
        (k for k in ENGINES if ENGINES[k]["platform"] == platform), key=lambda k: ENGINES[k]["name"])
        for quant in sorted(ENGINES[key]["quants"]))


def _check_identity(quant, engine):
    check_choice("quant", quant, QUANTS + ("auto",))
    check_choice("engine", engine, ENGINE_NAMES + ("auto",))
    if quant != "auto" and engine != "auto" and not any(quant in ENGINES[k]["quants"] for k in builds_of(engine)):
        key = builds_of(engine)[0]
        why = ENGINES[key]["refused_quants"].get(quant, "%s does not serve %s" % (engine, quant))
        raise DeploymentError("engine=%s with quant=%s is refused: %s. Allowed pairs: %s"
                              % (engine, quant, why, _allowed_pairs()))


def _check_platform(quant, engine, platform, summary):
    """The build of `engine` for the host's platform, serving `quant`; a CUDA-only identity on Ascend (or the
    reverse) is refused with the reason."""
    where = PLATFORM_TITLES[platform]
    if summary and summary["count"]:
        where = "%d x %s (%s)" % (summary["count"], ", ".join(summary["models"]), PLATFORM_TITLES[platform])
    key = build_of(engine, platform)
    if key is None:
        other = ENGINES[builds_of(engine)[0]]
        raise DeploymentError(
            "engine=%s is refused on %s: %s runs on %s only. Allowed here: %s"
            % (engine, where, other["title"], PLATFORM_TITLES[other["platform"]], _allowed_pairs(platform)))
    if quant not in ENGINES[key]["quants"]:
        why = ENGINES[key]["refused_quants"].get(quant, "%s does not serve %s" % (ENGINES[key]["title"], quant))
        raise DeploymentError("quant=%s engine=%s is refused on %s: %s. Allowed here: %s"
                              % (quant, engine, where, why, _allowed_pairs(platform)))
    return key


def _check_family(quant, engine, summary):
    """A quant that the engine runs only on some accelerator families, on a host of another family."""
    spec = ENGINES[engine]["quants"][quant]
    if summary is None or not summary["count"] or spec["families"] is None or summary["arch"] in spec["families"]:
        return
    raise DeploymentError(
        "quant=%s engine=%s is refused on %d x %s (%s, %s): %s. Allowed here: %s"
        % (quant, ENGINES[engine]["name"], summary["count"], ", ".join(summary["models"]), summary["arch"],
           summary["sm"], spec["families_why"], ", ".join(
               "%s+%s" % (q, e["name"]) for e in ENGINES.values() for q, s in sorted(e["quants"].items())
               if e["platform"] == platform_of(summary) and (s["families"] is None or summary["arch"] in s["families"]))))


def _check_kv(quant, engine, kv):
    """KV dtype from the (quant, engine) menu; unset -> the recommended first entry."""
    menu = ENGINES[engine]["quants"][quant]["kv_menu"]
    kv = menu[0] if kv is None or str(kv).strip() == "" else str(kv).strip()
    return check_choice("kv_cache_dtype", kv, menu, "the KV menu for quant=%s engine=%s" % (quant, engine))


def _check_moe(quant, engine, moe, family=None):
    """Only where the (quant, engine) has a MoE backend menu (NVFP4 on vLLM); unset -> marlin (the measured pick on
    sm_120), flashinfer_cutedsl on datacenter Blackwell."""
    menu = ENGINES[engine]["quants"][quant].get("moe_backends")
    if not menu:
        if not is_unset(moe):
            fail("moe_backend", moe, ["null (unset)"], "quant=%s engine=%s has no MoE backend choice (INT4 uses the "
                 "Marlin MoE kernels chosen by the checkpoint; the MoE backend is an NVFP4 choice, on vLLM)"
                 % (quant, engine))
        return None
    if is_unset(moe):
        moe = "flashinfer_cutedsl" if family == "blackwell-dc" else "marlin"
    return check_choice("moe_backend", moe, menu)


def _check_mem(engine, mem):
    """The engine's own memory knob (they are different knobs); unset -> its measured working value."""
    knob = ENGINES[engine]["memory"]
    allowed = ["a number in (0, %s] for %s" % (knob["max"], knob["flag"])]
    if is_unset(mem):
        return knob["default"]
    if isinstance(mem, bool):
        fail("mem_fraction", mem, allowed)
    try:
        mem = float(mem)
    except (TypeError, ValueError):
        fail("mem_fraction", mem, allowed)
    if not 0.0 < mem <= knob["max"]:
        fail("mem_fraction", mem, allowed, knob["why_max"])
    return mem


def _check_revision(quant, revisions, require_revision, warnings):
    """The checkpoint's pinned commit (_model.validate.check_revision, the one revision rule); None in preview mode."""
    checkpoint = CHECKPOINTS[quant]
    if revisions is None:
        revisions = {}
    if not isinstance(revisions, dict):
        fail("revisions", revisions, ["a dict {int4: <sha>, nvfp4: <sha>}"])
    revision = revisions.get(quant)
    if not require_revision and (revision is None or (isinstance(revision, str) and revision.strip() == "")):
        warnings.append("%s is not set: site.yml will refuse to run until the checkpoint is pinned to a commit."
                        % checkpoint["revision_variable"])
        return None
    try:
        return check_revision(revision, checkpoint["repo_id"], checkpoint["revision_variable"])
    except ValueRuleError as exc:
        raise DeploymentError(str(exc))


def _pick_identity(quant, engine, summary, advice, reasons, platform):
    """quant and engine with `auto` resolved from the accelerators; the reasons appended."""
    if quant == "auto" or engine == "auto":
        if not summary:
            raise DeploymentError(
                "quant=%s engine=%s needs GPU facts to recommend from, and none were given. Set quant (%s) and engine "
                "(%s), or run against a GPU host (or pass -e @tests/fixtures/gpus/<profile>.json)."
                % (quant, engine, ", ".join(QUANTS), ", ".join(ENGINE_NAMES)))
        if quant == "auto":
            key = build_of(engine, platform) if engine != "auto" else None
            if engine != "auto" and key is None:
                return quant, engine, True  # _check_platform refuses the engine here, with the reason
            served = sorted(ENGINES[key]["quants"]) if key else [advice["quant"]]
            quant = advice["quant"] if advice["quant"] in served else served[0]
            if len(served) == 1 and key:
                other = [q for q in QUANTS if q != quant]
                why = "%s serves %s only (%s)." % (ENGINES[key]["title"], quant, "; ".join(
                    ENGINES[key]["refused_quants"][q] for q in other if q in ENGINES[key]["refused_quants"]))
            else:
                why = "recommended for this hardware."
            reasons.append("quant=%s: %s" % (quant, why))
        if engine == "auto":
            engine = advice["engine"] if quant == advice["quant"] else engine_for(summary, quant)
            reasons.append("engine=%s: %s" % (engine, "recommended for this hardware." if quant == advice["quant"]
                                              else "the engine for quant=%s on this hardware." % quant))
        reasons.extend(advice["why"])
        return quant, engine, True
    reasons.append("quant=%s engine=%s: set by the user." % (quant, engine))
    if advice and (advice["quant"], advice["engine"]) != (quant, engine):
        reasons.append("Note: for this hardware the collection would recommend quant=%s engine=%s (%s)"
                       % (advice["quant"], advice["engine"], advice["why"][0]))
    return quant, engine, False


def _check_replica(engine, inputs, summary, reasons):
    """(nodes, node_rank, head_address, dist_port, tp, pp, dp) of this host's replica, validated."""
    nodes = check_int("nodes", 1 if is_unset(inputs.get("nodes")) else inputs["nodes"], 1, MAX_NODES)
    node_rank = check_int("node_rank", 0 if is_unset(inputs.get("node_rank")) else inputs["node_rank"], 0, nodes - 1)
    head_address = None
    if nodes > 1:
        if not ENGINES[engine]["multi_node"]:
            fail("nodes", nodes, [1], ENGINES[engine]["multi_node_why"])
        head_address = check_text("head_address", inputs.get("head_address"), HOST_RE,
                                  ["the head host's address on the replica's network, e.g. 10.0.0.11"], None)
        if head_address is None:
            fail("head_address", None, ["the head host's address (kimi_replica_head_address, or its ansible_host)"],
                 "a replica of %d hosts meets at its head" % nodes)
    dist_port = check_int("dist_port", DEFAULT_DIST_PORT if is_unset(inputs.get("dist_port")) else inputs["dist_port"],
                          1, 65535)

    # Tensor and pipeline parallel: every GPU of the replica once (replica_layout, overridable).
    tp = None if is_unset(inputs.get("tp")) else check_int("tp", inputs["tp"], 1, 64 * MAX_NODES)
    pp = None if is_unset(inputs.get("pp")) else check_int("pp", inputs["pp"], 1, 61)
    reference = traits(ENGINES[engine]["platform"])
    assumed = reference["assumed_units"]
    if summary is None and tp is None:
        reasons.append("%s: no accelerator facts, assuming the %d-%s reference host."
                       % (reference["assumed_host"], assumed, reference["unit"]))
    count = summary["count"] if summary else assumed
    tp_given = tp is not None  # a refusal names the variable the user set, not the one derived from it
    tp, pp, dp, layout_why = replica_layout(engine, count, nodes, tp, pp)
    if layout_why:
        reasons.append(layout_why)
    if tp & (tp - 1):
        fail("tp", tp, [1, 2, 4, 8, 16, 32, 64], "MLA's 64 attention heads split over a power of two")
    if summary and tp * pp * dp > count * nodes:
        if nodes == 1 and pp == 1 and dp == 1:
            fail("tp", tp, ["1..%d (GPUs found)" % count], "more ranks than GPUs")
        if not tp_given and pp > 1:
            fail("pp", pp, ["pp up to %d with tensor parallel %d on %d host(s) x %d accelerators" % (
                max(1, count * nodes // (tp * dp)), tp, nodes, count)],
                "more ranks than accelerators (tensor parallel %d, the default, x pipeline parallel %d x data parallel"
                " %d); set kimi_tensor_parallel too, or fewer pipeline stages" % (tp, pp, dp))
        fail("tp", tp, ["tp x pp x dp up to %d (accelerators in the replica: %d host(s) x %d)" % (
            count * nodes, nodes, count)], "more ranks than accelerators (pp %d, dp %d)" % (pp, dp))
    if summary and nodes > 1 and tp * pp * dp != count * nodes:
        fail("pp", pp, ["tp x pp x dp = %d, every accelerator of the %d hosts" % (count * nodes, nodes)],
             "a multi-host replica gives each engine process all the accelerators of its host (tp %d, dp %d)"
             % (tp, dp))
    if dp > 1 and dp % nodes:
        fail("tp", tp, ["a tp that leaves a multiple of %d data-parallel ranks" % nodes],
             "each of the %d hosts runs the same number of data-parallel ranks (dp %d)" % (nodes, dp))
    return nodes, node_rank, head_address, dist_port, tp, pp, dp


def _ranks_layouts(spec, inputs, summary, nodes, pp):
    """The layout of one host, not disaggregated, is ranked (_layout) for an engine whose data says how it serves
    several instances (data_parallel, None where it cannot); a replica's and a disaggregated layout are not."""
    return ("data_parallel" in spec and nodes == 1 and pp == 1 and is_unset(inputs.get("pd")) and bool(summary)
            and bool(summary["count"]) and summary["arch"] != "unsupported")


def _context(engine, quant, inputs, kv, mem, verdict, summary, warnings):
    """The context length: the model's 256K unless the engine's KV pool says otherwise (vLLM refuses a context above
    its pool; the others start and cannot serve one request that long)."""
    strict = ENGINES[engine]["context"] == "strict"
    kv_tokens = verdict["kv_tokens"] if verdict else None
    ctx = inputs.get("context_length")
    if is_unset(ctx):
        ctx = MAX_CONTEXT
        if strict and KV_ELEMENT[kv] == "bf16":
            ctx = 131072  # vLLM with bf16 KV tops out ~131K on 96 GB cards; 256K needs fp8 KV
        if strict and kv_tokens is not None:
            while ctx > 4096 and ctx > kv_tokens:
                ctx //= 2
    ctx = check_int("context_length", ctx, 4096, MAX_CONTEXT)
    # Only for a pool that fits: an unfit one is reported by the fit verdict (hardware.fits and fit_reason, with the
    # GPUs found and what fits), which site.yml's preflight turns into the error; this message would only confuse it.
    if strict and verdict and verdict["fits"] and ctx > kv_tokens:
        values = (var("context_length"), ctx, kv_tokens, var("kv_cache_dtype"), kv, var("mem_fraction"), mem,
                  summary["count"], summary["vram_min_mib"], var("mem_fraction"))
        raise DeploymentError(
            "%s=%d is larger than the estimated KV cache (%d tokens with %s=%s, %s=%s on %d x %d MiB): vLLM "
            "refuses to start ('larger than the available KV cache memory'). Lower the context length, use "
            "kv_cache_dtype fp8, or raise %s." % values)
    # The other engines start anyway (SGLang's default is the model's 262144): say so whatever the KV element.
    if not strict and kv_tokens is not None and ctx > kv_tokens:
        fp8 = [k for k in ENGINES[engine]["quants"][quant]["kv_menu"] if KV_ELEMENT[k] == "fp8"]
        warnings.append("context %d exceeds the estimated KV pool (%d tokens): one request that long would not fit%s."
                        % (ctx, kv_tokens, "; an fp8 KV cache (%s=%s) doubles the pool" % (var("kv_cache_dtype"), fp8[0])
                           if fp8 and KV_ELEMENT[kv] == "bf16" else "; lower %s or raise %s" % (
                               var("context_length"), var("mem_fraction"))))
    return ctx


def _served_model_name(spec, version, quant, given, warnings):
    """The model id clients send: kimi_served_model_name (default kimi-k2.6), or, for an engine version without a
    served-name option (trtllm-serve), the model argument itself, the checkpoint's repo id."""
    if isinstance(given, str) and given.strip().lower() == "auto":  # not a name, and not silently the default either
        fail("served_model_name", given, ["1-128 characters of letters, digits and . _ : / -", "unset"],
             "auto is not a model name clients could send; leave kimi_served_model_name unset for %s"
             % DEFAULT_SERVED_MODEL_NAME)
    name = check_text("served_model_name", given, NAME_RE, ["1-128 characters of letters, digits and . _ : / -"],
                      DEFAULT_SERVED_MODEL_NAME)
    if any(arg.field == "served_model_name" for arg in spec["args"]):
        return name
    repo_id = CHECKPOINTS[quant]["repo_id"]
    if not is_unset(given) and name != repo_id:
        fail("served_model_name", name, [repo_id, "unset"], "%s %s has no served-model-name option: its OpenAI server "
             "names the model after its model argument" % (spec["title"], version))
    warnings.append("%s %s has no served-model-name option: clients send model=%s (not %s) to this identity."
                    % (spec["title"], version, repo_id, DEFAULT_SERVED_MODEL_NAME))
    return repo_id


def _capabilities(engine, version, reasons, warnings):
    """(tool parser, reasoning parser, verify checks) of this engine version, with what clients will see."""
    spec = ENGINES[engine]
    tool = parser_name(engine, version, "tool")
    reasoning = parser_name(engine, version, "reasoning")
    checks = list(VERIFY_CHECKS)  # the checks against the engine (_verify_checks), less what this version lacks
    title = "%s %s" % (spec["title"], version)
    if not tool:
        checks.remove("tool")
        warnings.append("%s has no Kimi tool-call parser: clients get tool calls as raw text in content, not "
                        "tool_calls; the verify gate skips its tool check." % title)
    if not reasoning:
        warnings.append("%s has no Kimi reasoning parser: the thinking comes back inside content as "
                        "<think>...</think>, not in reasoning_content." % title)
    if not spec["vision"]:
        checks.remove("vision")
        warnings.append("%s serves Kimi-K2.6 as text only: a request with an image is refused; the verify gate skips "
                        "its vision check." % title)
    return tool, reasoning, checks


def _check_inputs(inputs):
    """The inputs as a dict, with no control character in any string, nested too (where the inputs enter)."""
    if inputs is None:
        inputs = {}
    if not isinstance(inputs, dict):
        raise DeploymentError("deployment inputs must be a dict, got %s" % type(inputs).__name__)
    for field, value in inputs.items():
        if field == "pd" and isinstance(value, dict):  # the disaggregated inputs: each part names its own variable
            for part, item in value.items():
                check_no_control("pd_%s" % part if "pd_%s" % part in VARIABLES else "pd_members", item)
        elif field == "revisions" and isinstance(value, dict):  # {quant: sha}: kimi_<quant>_revision each
            for quant, item in value.items():
                check_no_control("kimi_%s_revision" % quant, item)
        else:
            check_no_control(field, value)
    return inputs


def _identity(inputs, gpus, r):
    """Seam 1, identity and version: quant and engine (given or recommended from the accelerators), the platform and
    the engine's build for it, the release (kimi_engine_version, the image's tag, or the verified default)."""
    quant = "auto" if is_unset(inputs.get("quant")) else str(inputs["quant"]).strip().lower()
    engine = "auto" if is_unset(inputs.get("engine")) else str(inputs["engine"]).strip().lower()
    _check_identity(quant, engine)
    r["summary"] = summary = _summary(gpus) if gpus else None
    r["advice"] = advice = _advice(summary) if summary else None
    platform = platform_of(summary) if summary else None
    quant, engine, r["auto"] = _pick_identity(quant, engine, summary, advice, r["reasons"], platform)
    r["platform"] = platform = platform or _quant_platform(quant)
    # From here on `key` is the engine's build for this platform (vllm-ascend is engine=vllm on Ascend).
    r["key"] = key = _check_platform(quant, engine, platform, summary)
    r["spec"] = spec = ENGINES[key]
    _check_family(quant, key, summary)
    r["family"] = summary["arch"] if summary else None
    r["quant"], r["engine"] = quant, engine
    version = check_text("engine_version", inputs.get("engine_version"), VERSION_RE, ["a release, e.g. 0.22.1"], None)
    r["image"] = check_text("image", inputs.get("image"), IMAGE_RE, ["an image reference, e.g. registry.local/vllm:1"],
                            None)
    r["version"], version_why = select_version(key, version, r["image"])
    r["reasons"].append(version_why)
    r["release"] = release = spec["versions"][r["version"]]
    if quant not in release["images"]:
        fail("engine_version", r["version"], sorted(v for v, x in spec["versions"].items() if quant in x["images"]),
             "%s %s has no pinned image for quant=%s" % (spec["title"], r["version"], quant))
    r["reasons"].extend(release["notes"])


def _layout_and_fit(inputs, require_revision, r):
    """Seam 2, layout and fit: KV dtype, MoE backend, the replica's layout, the memory knob, the engine's own options
    (their layout keys change the fit), speculative decoding (its draft counts in the fit), the fit of the settings
    chosen, and the context length."""
    key, quant, summary, spec, version = r["key"], r["quant"], r["summary"], r["spec"], r["version"]
    r["kv"] = kv = _check_kv(quant, key, inputs.get("kv_cache_dtype"))
    if r["auto"]:
        r["reasons"].append(_kv_note(kv))
    r["moe"] = _check_moe(quant, key, inputs.get("moe_backend"), r["family"])
    layout = _check_replica(key, inputs, summary, r["reasons"])
    nodes, r["node_rank"], r["head_address"], r["dist_port"], tp, pp, dp = layout
    r["nodes"], r["tp"], r["pp"], r["dp"] = nodes, tp, pp, dp
    r["mem"] = mem = _check_mem(key, inputs.get("mem_fraction"))
    min_kv = inputs.get("min_kv_tokens")
    min_kv = MIN_KV_TOKENS if is_unset(min_kv) else check_int("min_kv_tokens", min_kv, 0, 64 * MAX_CONTEXT)
    r["user_options"] = inputs.get("engine_options") or {}
    probe = engine_config(key, version, {"tp": tp, "pp": pp, "context_length": MAX_CONTEXT, "kv_cache_dtype": kv,
                                         "mem_fraction": mem}, r["user_options"])
    r["attention_dp"] = bool(probe and probe.get("enable_attention_dp")) or bool(spec.get("attention_dp"))
    r["layouts"] = None
    if _ranks_layouts(spec, inputs, summary, nodes, pp):
        tp, dp, r["layouts"], why = choose_layout(inputs, quant, key, kv, mem, summary, min_kv, r["attention_dp"])
        r["tp"], r["dp"] = tp, dp
        if why:
            r["reasons"].append(why)
    elif not is_unset(inputs.get("instances")):
        fail("instances", inputs["instances"], ["unset"], "%s's layout here is %s (tp %d, dp %d), not chosen per "
             "instance" % (spec["title"], "disaggregated" if not is_unset(inputs.get("pd")) else "fixed by its data"
                           if "data_parallel" not in spec else "over several hosts", tp, dp))
    r["speculative"] = speculative = resolve_speculative(
        inputs, spec, version, eng_options(key, version), quant,
        {"tp": tp, "pp": pp, "dp": dp, "nodes": nodes, "pd": not is_unset(inputs.get("pd")),
         "platform": r["platform"], "family": r["family"]}, require_revision, r["warnings"])
    if speculative:
        r["reasons"].append("Speculative decoding: %s; %s." % (speculative["summary"], speculative["why"]))
    # The fit of the settings chosen (not the recommended ones); more hosts only when no setting of the user's fits.
    # Instances that each hold the whole checkpoint (SGLang's data-parallel controller) fit as one instance each.
    r["verdict"] = verdict = fit(quant, key, kv, mem, tp, summary, min_kv, pp=pp, nodes=nodes,
                                 attention_dp=r["attention_dp"],
                                 dp=dp if (spec.get("data_parallel") or {}).get("experts", "all") == "all" else 1,
                                 draft=speculative["draft"] if speculative else None) if summary else None
    if verdict:
        r["reasons"].append(verdict["reason"])
    r["replica"] = None
    if verdict and not verdict["fits"] and nodes == 1 and not verdict["settings_advice"]:
        r["replica"] = replica_advice(quant, key, kv, mem, summary, min_kv)
    if r["replica"]:
        r["reasons"].append(r["replica"])
    r["ctx"] = _context(key, quant, inputs, kv, mem, verdict, summary, r["warnings"])


def _endpoint(inputs, require_revision, r):
    """Seam 3, the endpoint: the engine's address and port, the model name clients send, the image, the extra
    arguments, the parsers and verify checks this release has, the checkpoint revision."""
    key, spec, version, quant, warnings = r["key"], r["spec"], r["version"], r["quant"], r["warnings"]
    r["port"] = port = check_int("port", DEFAULT_PORT if is_unset(inputs.get("port")) else inputs["port"], 1, 65535)
    r["host"] = host = check_text("host", inputs.get("host"), HOST_RE,
                                  ["an IP address or host name, e.g. 0.0.0.0 or 127.0.0.1"], DEFAULT_HOST)
    r["name"] = _served_model_name(spec, version, quant, inputs.get("served_model_name"), warnings)
    if host in WILDCARD_HOSTS:
        warnings.append("%s=%s: the engine port %d answers without authentication to every network this host is on; "
                        "the proxy only needs 127.0.0.1." % (var("host"), host, port))
    pinned = pinned_image(key, version, quant, r["family"])
    r["image"] = image = r["image"] or pinned
    for pattern, why in spec["image_refusals"]:
        if re.match(pattern, image.rsplit("/", 1)[-1]):
            fail("image", image, ["a full %s tag, e.g. %s" % (spec["title"], pinned)], why)
    managed(key, version)  # every flag the collection emits exists in this version's list
    r["extra"] = check_extra_args(key, version, inputs.get("extra_args"))
    r["tool"], r["reasoning"], r["checks"] = _capabilities(key, version, r["reasons"], warnings)
    if eng_options(key, version)["provenance"] != "release":
        warnings.append("%s %s's flag list is approximate: it was read from upstream source files that are not the "
                        "release's (tests/fixtures/engine_flags/engine_flags_%s-%s.json names them); regenerate it "
                        "from the release with make engine-flags ENGINE=%s VERSION=%s."
                        % (spec["title"], version, r["engine"], version, r["engine"], version))
    r["revision"] = _check_revision(quant, inputs.get("revisions"), require_revision, warnings)


def _deployment(r):
    """What every role reads, from the three seams above."""
    quant, spec, release, checkpoint = r["quant"], r["spec"], r["release"], CHECKPOINTS[r["quant"]]
    host, port = r["host"], r["port"]
    deployment = {
        "identity": "%s-%s" % (quant, r["engine"]),
        "quant": quant,
        "engine": r["engine"],
        # The build of the engine for this platform (the registry key of its data), and the platform with what the
        # roles read of it (_platforms: its host role, devices, collective environment, exporter).
        "engine_build": r["key"],
        "platform": r["platform"],
        "platform_traits": traits(r["platform"]),
        "engine_title": spec["title"],
        "engine_version": r["version"],
        "engine_verified": release["verified"],
        "reasons": r["reasons"],
        "warnings": r["warnings"],
        "checkpoint": {
            "repo_id": checkpoint["repo_id"],
            "revision": r["revision"],
            "revision_variable": checkpoint["revision_variable"],
            "format": checkpoint["format"],
            "weights_bytes": checkpoint["weights_bytes"],
        },
        "image": r["image"],
        "image_is_local_build": quant in release["local_build"],
        # The release image a local build starts FROM (kimi_image), or None.
        "image_base": release.get("build_bases", {}).get(quant),
        # NVFP4's image (transformers >= 5.10) loads trust_remote_code modules offline through the file a snapshot
        # symlink points to, in blobs/, and then misses their relative imports: its *.py must be real files.
        "remote_code_real_files": quant == "nvfp4",
        "entrypoint": list(spec["entrypoint"]),
        "kv_cache_dtype": r["kv"],
        "moe_backend": r["moe"],
        "tp": r["tp"],
        "pp": r["pp"],
        "dp": r["dp"],
        # The engine instances on this host (data-parallel ranks; 1 for a replica over several hosts, whose dp ranks
        # are one engine): what the fit is per, and what readiness, the verify gate and the metrics count.
        "instances": r["dp"] if r["nodes"] == 1 else 1,
        # The layouts of this host ranked by expected throughput per GPU (_model.layout.rank_layouts), best first, or
        # None.
        "layouts": r["layouts"],
        "attention_dp": r["attention_dp"],
        # The replica: nodes hosts meeting at head_address:dist_port; rank 0 (the head) serves the API.
        "nodes": r["nodes"],
        "node_rank": r["node_rank"],
        "head_address": r["head_address"],
        "dist_port": r["dist_port"],
        "serves_api": r["node_rank"] == 0,
        "host": host,
        "port": port,
        # Where a client on the host reaches the engine (a wildcard bind is reached over loopback).
        "local_url": "http://%s:%d" % ("127.0.0.1" if host in WILDCARD_HOSTS else host, port),
        # The engine's Prometheus text, under local_url.
        "metrics_path": spec.get("metrics_path", "/metrics"),
        # Its finished-request counter and TTFT/ITL histograms (the engine data's): what a canary compares.
        "serving_metrics": spec["serving_metrics"],
        "served_model_name": r["name"],
        "context_length": r["ctx"],
        "mem_fraction": r["mem"],
        "memory_flag": spec["memory"]["flag"],
        "memory_meaning": spec["memory"]["meaning"],
        "tool_parser": r["tool"],
        "reasoning_parser": r["reasoning"],
        "verify_checks": r["checks"],
        # /dev/shm the engine needs while it loads the weights (site.yml's preflight checks the host's), or None.
        "shm_bytes_required": spec["shm_bytes"],
        "shm_why": spec.get("shm_why"),
        "extra_args": r["extra"],
        # Speculative decoding: method, draft (repo_id, revision, revision_variable, weights_bytes, ...) and knobs, or
        # None; the engine data files emit its flags.
        "speculative": r["speculative"],
        # The engine's environment in the container (Ascend: HCCL, allocator and feature switches, seeds 001/004) and
        # its own /dev/shm size where the container does not share the host's.
        "container_env": dict(spec["container_env"], **(spec["container_env_multi_node"] if r["nodes"] > 1 else {})),
        "container_shm_bytes": spec["container_shm_bytes"],
        "hardware": None,
    }
    summary, verdict, advice = r["summary"], r["verdict"], r["advice"]
    if summary:
        deployment["hardware"] = {
            "gpu_count": summary["count"],
            "platform": r["platform"],
            "models": summary["models"],
            "arch": summary["arch"],
            "sm": summary["sm"],
            "vram_total_mib": summary["vram_total_mib"],
            "vram_min_mib": summary["vram_min_mib"],
            "kv_tokens_estimate": verdict["kv_tokens"],
            "fits": verdict["fits"],
            "fit_reason": verdict["reason"],
            "replica_advice": r["replica"],
            "recommended": dict((k, advice[k]) for k in ("quant", "engine", "kv_cache_dtype", "moe_backend")),
        }
    return deployment


def _disaggregate(inputs, deployment, r):
    """Seam 4, disaggregation and speculation: a disaggregated deployment (kimi_pd) gives this host its role, the
    transfer backend and the router, and the engine binds the host's address on the deployment's network; the
    speculative check reads the engine's own metrics, which a router does not serve."""
    pd = resolve_pd(inputs.get("pd"), r["spec"], r["version"], deployment, r["warnings"])
    deployment["pd"] = pd
    if not r["speculative"] or pd:
        deployment["verify_checks"].remove("speculative")
    if pd:
        if is_unset(inputs.get("host")):
            deployment["host"] = pd["address"]
            deployment["local_url"] = "http://%s:%d" % (pd["address"], r["port"])
        deployment["serves_api"] = r["node_rank"] == 0 and pd["router"]["is_here"]
        deployment["container_env"] = dict(deployment["container_env"], **pd["container_env"])
        instances = ", ".join("%s %s" % (i["role"], i["head"]) for i in pd["instances"])
        r["reasons"].append("Disaggregated (kimi_pd %s): this host is %s instance %d of %s; KV transfer: %s"
                            % (pd["name"], pd["role"], pd["instance"], instances, pd["transfer_why"]))
    elif inputs.get("fleet_address") and is_unset(inputs.get("host")):
        # Behind the fleet gateway: the engine listens where the gateways reach it (Caddy here reaches it there too).
        deployment["host"] = address = inputs["fleet_address"]
        deployment["local_url"] = "http://%s:%d" % (("[%s]" % address) if ":" in address else address, r["port"])
        r["reasons"].append("Behind the fleet gateway (%s): the engine listens on %s, the fleet's network"
                            % (", ".join(inputs["gateways"]), address))
    deployment["gateways"] = list(inputs.get("gateways") or [])
    deployment["otlp_endpoint"] = None if is_unset(inputs.get("otlp_endpoint")) else inputs["otlp_endpoint"]
    # Where the clients' requests go on this host (Caddy's upstream): the router on a disaggregated deployment's
    # router host, else the engine.
    here = pd and pd["router"]["is_here"]
    deployment["api_port"] = pd["router"]["port"] if here else r["port"]
    deployment["api_url"] = pd["router"]["url"] if here else deployment["local_url"]
    # The ports this host opens for the deployment, one table (_ports); the roles' own are added by the action.
    deployment["ports"] = [{"port": p, "variable": v, "what": w}
                           for p, v, w in check_ports(deployment_ports(deployment))]


def _commands(inputs, deployment, r):
    """Seam 5, the commands: the engine's config file, argv and command line, every replica member's command (the
    same but for its rank) and every disaggregated instance's, for the plan and for checking a group agrees."""
    key, version, spec, pd = r["key"], r["version"], r["spec"], deployment["pd"]
    deployment["engine_config"] = engine_config(key, version, deployment, r["user_options"])
    deployment["engine_config_path"] = spec["config_path"] if deployment["engine_config"] is not None else None
    # The requests the engine runs at once, from its options (never declared apart), for a router that cannot ask it:
    # the fleet gateway registers it as the worker's max_running_requests. None: the engine reports it (SGLang) or
    # it is not known here.
    deployment["max_running_requests"] = engine_slots(deployment)
    if r["speculative"]:  # the speculative flags alone, in this engine's form, for the plan
        r["speculative"]["flags"] = [token for arg in spec["args"] if (arg.field or "").startswith("speculative")
                                     for token in arg.render(deployment)]
    deployment["argv"] = engine_argv(deployment)
    deployment["command"] = command_for(deployment)
    deployment["member_commands"] = [command_for(dict(deployment, node_rank=rank)) for rank in range(r["nodes"])]
    for index, instance in enumerate(pd["instances"] if pd else []):
        view = dict(deployment, pd=dict(pd, **for_instance(pd, index, spec["disaggregation"], deployment)))
        if is_unset(inputs.get("host")):
            view["host"] = instance["address"]
        view["engine_config"] = engine_config(key, version, view, r["user_options"])
        instance["command"] = command_for(view)
        instance["engine_config"] = view["engine_config"]


def resolve(inputs, gpus=None, require_revision=True):
    """Resolve user inputs (+ GPU facts when known) into the deployment every role consumes.

    inputs: quant, engine, engine_version, kv_cache_dtype, moe_backend, context_length, mem_fraction, tp, pp, host,
    port, served_model_name, extra_args, engine_options, revisions ({quant: sha}), image, min_kv_tokens, nodes,
    node_rank, head_address, dist_port, pd, speculative, speculative_draft, speculative_draft_revision,
    speculative_tokens, speculative_topk, speculative_draft_tokens. Missing -> derived.
    The one validator of these inputs: a bad one raises DeploymentError naming its variable. A GPU pool that
    cannot hold the deployment does not raise: hardware.fits is false and hardware.fit_reason says why.
    It runs in seams, each a function that reads and adds to one record of what is resolved so far: identity and
    version; layout and fit; the endpoint; then the deployment, disaggregation and speculation; the commands.
    """
    inputs = _check_inputs(inputs)
    resolved = {"reasons": [], "warnings": []}
    _identity(inputs, gpus, resolved)
    _layout_and_fit(inputs, require_revision, resolved)
    _endpoint(inputs, require_revision, resolved)
    deployment = _deployment(resolved)
    # What the host's accelerators cost per hour (kimi_gpu_hour_cost): the node series, dashboard and bench read it.
    costs = check_costs(inputs.get("gpu_hour_cost"))
    deployment["hour_cost"] = hour_cost(resolved["summary"], costs)
    if costs and deployment["hour_cost"]["accelerators"] and deployment["hour_cost"]["per_hour"] is None:
        deployment["warnings"].append("no cost per hour for this host: " + deployment["hour_cost"]["why"])
    _disaggregate(inputs, deployment, resolved)
    # The KV host tier (kimi_kv_offload): the engine's own mechanism, sized from this host's memory (_kv_offload).
    deployment["kv_offload"] = kv_tier = resolve_kv_offload(inputs, resolved["spec"], deployment, resolved["warnings"])
    if kv_tier:
        deployment["reasons"].append(kv_tier["why"])
    # The weight loader: kimi_load_format, else the rule on the preflight's read of the weights disk (_model/loader).
    loader = choose_loader(resolved["spec"], resolved["version"], inputs.get("load_format"),
                           inputs.get("weights_read_mbps"))
    deployment["warnings"].extend(loader.pop("warnings"))
    deployment["reasons"].append(loader["why"])
    deployment["loader"], deployment["load_format"] = loader, loader["format"]
    _commands(inputs, deployment, resolved)
    # The compile/autotune caches kimi_serve keeps per cache key (the deployment's share of the key; the host adds its
    # image digest, architecture and driver), or None where the release keeps none.
    deployment["kernel_cache"] = kernel_cache_entry(resolved["spec"], resolved["version"], deployment)
    return deployment
