# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The checks of the deployment inputs that only resolve() (_model/deployment.py) calls, one per input or pair, and
the defaults they fall back to. Private to kimi.deploy.

Each refuses through _model.inputs (the variable named, the allowed values listed) or returns the value resolved:
identity (quant, engine, the platform's build and the accelerator family), KV dtype, MoE backend, the memory knob, the
pinned revision, the replica's layout, the context length, the served model name, the parsers and verify checks, and
the inputs' shape. deployment.py's seams call them in order; nothing else does.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.kimi.deploy.plugins.module_utils._model.constraints import number
from ansible_collections.kimi.deploy.plugins.module_utils._model.accelerators import (
    PLATFORM_TITLES, engine_for, platform_of)
from ansible_collections.kimi.deploy.plugins.module_utils._model.memory import KV_ELEMENT
from ansible_collections.kimi.deploy.plugins.module_utils._model.models import DEFAULT_MODEL, MODEL_NAMES, model
from ansible_collections.kimi.deploy.plugins.module_utils._common import release_key as version_key
from ansible_collections.kimi.deploy.plugins.module_utils._engines.registry import (
    ENGINE_NAMES, ENGINES, build_of, builds_of, parser_name)
from ansible_collections.kimi.deploy.plugins.module_utils._model.fit import MAX_NODES, replica_layout
from ansible_collections.kimi.deploy.plugins.module_utils._model.platforms import (
    DEFAULT as DEFAULT_PLATFORM, ORDER, traits)
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


def _allowed_pairs(platform=None, quants=None):
    """quant+engine pairs served on `platform`, or on each platform ("...; on Ascend: ...") when None; only the
    model's `quants` (the default model's when None)."""
    quants = quants or tuple(model(DEFAULT_MODEL)["checkpoints"])
    if platform is None:
        return "; ".join("%s%s" % ("" if p == DEFAULT_PLATFORM else "on %s: " % PLATFORM_TITLES[p],
                                   _allowed_pairs(p, quants)) for p in ORDER)
    return ", ".join("%s+%s" % (quant, ENGINES[key]["name"]) for key in sorted(
        (k for k in ENGINES if ENGINES[k]["platform"] == platform), key=lambda k: ENGINES[k]["name"])
        for quant in sorted(ENGINES[key]["quants"]) if quant in quants) or "none"


def check_model(name):
    """kimi_model: one entry of the models table; unset -> the default model."""
    name = DEFAULT_MODEL if is_unset(name) else str(name).strip().lower()
    return check_choice("model", name, MODEL_NAMES, "the models table (plugins/module_utils/_model/models.py)")


def driver_branch(version):
    """The branch of a driver version ("580.95.05" -> 580), or None when it is not one."""
    match = re.match(r"^\s*(\d{3,4})(\.|$)", str(version or ""))
    return int(match.group(1)) if match else None


def check_driver(entry, platform, driver_version, upgrade=False, branch_to_install=None):
    """The model's image floor (image_floor.driver, of image_floor.platform) against the host's driver, where it is known
    (its platform's summary fact): an older one is refused before any host changes, naming the floor, its reason and the
    models this driver serves. Unknown (no driver yet: nvidia_host installs one) - judged when site.yml resolves
    again after the host stage. upgrade: nvidia_host will replace the driver in the host stage
    (nvidia_host_replace_driver, before that stage): judged after it too. branch_to_install: the inventory's
    nvidia_host_driver_branch where it sets one (its default, 580, meets every model's floor: test_models pins it): a
    branch below the floor is refused too, as nvidia_host would install a driver the images cannot use.
    Returns a reason line, or None."""
    floor = (entry.get("image_floor") or {}).get("driver")
    if not floor or platform not in (None, entry["image_floor"]["platform"]):
        return None
    wanted = driver_branch(branch_to_install)
    if branch_to_install not in (None, "") and (wanted is None or wanted < floor):
        fail("nvidia_host_driver_branch", branch_to_install, ["%d or newer (its default, 580)" % floor],
             "%s's engine images need the host driver r%d or newer (%s)" % (
                 entry["title"], floor, entry["image_floor"]["why"]))
    branch = driver_branch(driver_version)
    if branch is None or branch >= floor:
        return None
    if upgrade:
        return ("%s needs the host driver r%d or newer and this host has %s: nvidia_host replaces it in the host stage "
                "(nvidia_host_replace_driver), and the deployment is judged again after it." % (
                    entry["title"], floor, driver_version))
    served = [name for name in MODEL_NAMES if (model(name).get("image_floor") or {}).get("driver", 0) <= branch]
    fail("model", entry["name"], served,
         "%s's engine images need the host driver r%d or newer (%s), and this host's driver is %s: upgrade it - "
         "nvidia_host_driver_branch %d or newer, with nvidia_host_replace_driver=true to let nvidia_host replace "
         "the loaded one - or serve a model this driver runs" % (
             entry["title"], floor, entry["image_floor"]["why"], driver_version, floor))


def check_model_build(entry, key, quant):
    """A model the engine build serves in no release (TensorRT-LLM and the Ascend builds for Kimi-K3), or a checkpoint
    of it that is not published, is refused with the reason; the builds that do serve it are named."""
    served = entry["engines"].get(key) or {"min": None, "why": "%s is not known to serve %s" % (
        ENGINES[key]["title"], entry["title"])}
    if served["min"] is None:
        others = [
            "%s (%s >= %s, on %s)" % (ENGINES[k]["name"], ENGINES[k]["title"], v["min"],
                                      PLATFORM_TITLES[ENGINES[k]["platform"]])
            for k, v in sorted(entry["engines"].items()) if v["min"] is not None]
        fail("engine", ENGINES[key]["name"], others, "%s on %s: %s" % (entry["title"], ENGINES[key]["title"],
                                                                       served["why"]))
    checkpoint = entry["checkpoints"][quant]
    if checkpoint["repo_id"] is None or checkpoint["weights_bytes"] is None:
        known = [q for q, c in sorted(entry["checkpoints"].items())
                 if c["repo_id"] is not None and c["weights_bytes"] is not None]
        if not known:  # no checkpoint of the model at all (Kimi-K3.1-Pro): the model is what is refused
            fail("model", entry["name"], [n for n in MODEL_NAMES if any(
                c["repo_id"] and c["weights_bytes"] for c in model(n)["checkpoints"].values())],
                "%s has no published checkpoint this collection can pin (%s)" % (entry["title"], checkpoint["source"]))
        fail("quant", quant, known, "%s's %s checkpoint: %s is not published (%s)" % (
            entry["title"], quant, "the repository" if checkpoint["repo_id"] is None else "its size",
            checkpoint["source"]))


def model_version(entry, key, version, given):
    """(version, reason or None): a release older than the model's minimum is refused when the user named it; left
    unset, the oldest pinned release that serves the model is chosen instead of the default."""
    spec = ENGINES[key]
    minimum = entry["engines"][key]["min"]
    if version_key(version) >= version_key(minimum):
        return version, None
    newer = sorted((v for v in spec["versions"] if version_key(v) >= version_key(minimum)), key=version_key)
    if given or not newer:
        fail("engine_version", version, newer or ["none pinned yet: %s >= %s (make engine-flags ENGINE=%s VERSION=)"
                                                  % (spec["title"], minimum, spec["name"])],
             "%s needs %s %s or newer (%s)" % (entry["title"], spec["title"], minimum, entry["engines"][key]["why"]))
    return newer[0], "%s %s: the oldest pinned release that serves %s (it needs %s; %s)." % (
        spec["title"], newer[0], entry["title"], minimum, entry["engines"][key]["why"])


def check_identity(quant, engine, entry=None):
    entry = entry or model(DEFAULT_MODEL)
    quants = tuple(sorted(entry["checkpoints"]))
    check_choice("quant", quant, quants + ("auto",))
    check_choice("engine", engine, ENGINE_NAMES + ("auto",))
    builds = builds_of(engine, ORDER) if engine != "auto" else ()
    if quant != "auto" and engine != "auto" and not any(quant in ENGINES[k]["quants"] for k in builds):
        key = builds_of(engine, ORDER)[0]
        why = ENGINES[key]["refused_quants"].get(quant, "%s does not serve %s" % (engine, quant))
        raise DeploymentError("engine=%s with quant=%s is refused: %s. Allowed pairs: %s"
                              % (engine, quant, why, _allowed_pairs(None, quants)))


def check_platform(quant, engine, platform, summary, quants=None):
    """The build of `engine` for the host's platform, serving `quant`; a CUDA-only identity on Ascend (or the
    reverse) is refused with the reason."""
    where = PLATFORM_TITLES[platform]
    if summary and summary["count"]:
        where = "%d x %s (%s)" % (summary["count"], ", ".join(summary["models"]), PLATFORM_TITLES[platform])
    key = build_of(engine, platform)
    if key is None:
        other = ENGINES[builds_of(engine, ORDER)[0]]
        raise DeploymentError(
            "engine=%s is refused on %s: %s runs on %s only. Allowed here: %s"
            % (engine, where, other["title"], PLATFORM_TITLES[other["platform"]], _allowed_pairs(platform, quants)))
    if quant not in ENGINES[key]["quants"]:
        why = ENGINES[key]["refused_quants"].get(quant, "%s does not serve %s" % (ENGINES[key]["title"], quant))
        raise DeploymentError("quant=%s engine=%s is refused on %s: %s. Allowed here: %s"
                              % (quant, engine, where, why, _allowed_pairs(platform, quants)))
    return key


def check_family(quant, engine, summary):
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


def check_kv(quant, engine, kv):
    """KV dtype from the (quant, engine) menu; unset -> the recommended first entry."""
    menu = ENGINES[engine]["quants"][quant]["kv_menu"]
    kv = menu[0] if kv is None or str(kv).strip() == "" else str(kv).strip()
    return check_choice("kv_cache_dtype", kv, menu, "the KV menu for quant=%s engine=%s" % (quant, engine))


def check_moe(quant, engine, moe, family=None):
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


def check_mem(engine, mem):
    """The engine's own memory knob (they are different knobs); unset -> its measured working value."""
    knob = ENGINES[engine]["memory"]
    allowed = ["a number in (0, %s] for %s" % (knob["max"], knob["flag"])]
    if is_unset(mem):
        return knob["default"]
    value, mem = mem, number(mem, float)
    if mem is None:
        fail("mem_fraction", value, allowed)
    if not 0.0 < mem <= knob["max"]:
        fail("mem_fraction", mem, allowed, knob["why_max"])
    return mem


def pinned_revision(quant, revisions, require_revision, warnings, entry=None):
    """The checkpoint's pinned commit (_model.validate.check_revision, the one revision rule); None in preview mode."""
    checkpoint = (entry or model(DEFAULT_MODEL))["checkpoints"][quant]
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


def pick_identity(quant, engine, summary, advice, reasons, platform, entry=None):
    """quant and engine with `auto` resolved from the accelerators; the reasons appended. A model that does not ship
    the checkpoint recommended for the hardware gets its own first published one (Kimi-K3: mxfp4)."""
    entry = entry or model(DEFAULT_MODEL)
    quants = tuple(sorted(entry["checkpoints"]))
    own = [q for q, c in entry["checkpoints"].items() if c["weights_bytes"] is not None] or list(quants)
    if advice and advice["quant"] not in own:
        # The hardware's advice was for the K2 family's checkpoint: its reasons do not apply to this one.
        advice = dict(advice, quant=own[0], why=["%s publishes %s (of %s), not the %s recommended for the K2 family "
                                                 "here: quant=%s." % (entry["title"], ", ".join(own),
                                                                      ", ".join(quants), advice["quant"], own[0])])
    if quant == "auto" or engine == "auto":
        if not summary:
            raise DeploymentError(
                "quant=%s engine=%s needs GPU facts to recommend from, and none were given. Set quant (%s) and engine "
                "(%s), or run against a GPU host (or pass -e @tests/fixtures/gpus/<profile>.json)."
                % (quant, engine, ", ".join(quants), ", ".join(ENGINE_NAMES)))
        if quant == "auto":
            key = build_of(engine, platform) if engine != "auto" else None
            if engine != "auto" and key is None:
                return quant, engine, True  # check_platform refuses the engine here, with the reason
            served = sorted(q for q in ENGINES[key]["quants"] if q in quants) if key else [advice["quant"]]
            served = served or sorted(ENGINES[key]["quants"])
            quant = advice["quant"] if advice["quant"] in served else served[0]
            if len(served) == 1 and key:
                other = [q for q in quants if q != quant]
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


def check_replica(engine, inputs, summary, reasons):
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


def ranks_layouts(spec, inputs, summary, nodes, pp):
    """The layout of one host, not disaggregated, is ranked (_layout) for an engine whose data says how it serves
    several instances (data_parallel, None where it cannot); a replica's and a disaggregated layout are not."""
    return ("data_parallel" in spec and nodes == 1 and pp == 1 and is_unset(inputs.get("pd")) and bool(summary)
            and bool(summary["count"]) and summary["arch"] != "unsupported")


def context_length(engine, quant, inputs, kv, mem, verdict, summary, warnings, entry=None):
    """The context length: the model's 256K unless the engine's KV pool says otherwise (vLLM refuses a context above
    its pool; the others start and cannot serve one request that long)."""
    strict = ENGINES[engine]["context"] == "strict"
    max_context = (entry or model(DEFAULT_MODEL))["max_context"]
    kv_tokens = verdict["kv_tokens"] if verdict else None
    ctx = inputs.get("context_length")
    if is_unset(ctx):
        ctx = min(max_context, 262144)  # the 256K window (also for a 1M model: the pool rarely holds more)
        if strict and KV_ELEMENT[kv] == "bf16":
            ctx = 131072  # vLLM with bf16 KV tops out ~131K on 96 GB cards; 256K needs fp8 KV
        if strict and kv_tokens is not None:
            while ctx > 4096 and ctx > kv_tokens:
                ctx //= 2
    ctx = check_int("context_length", ctx, 4096, max_context)
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


def served_model_name(spec, version, quant, given, warnings, entry=None, default=DEFAULT_SERVED_MODEL_NAME):
    """The model id clients send: kimi_served_model_name (default kimi-k2.6), or, for an engine version without a
    served-name option (trtllm-serve), the model argument itself, the checkpoint's repo id."""
    if isinstance(given, str) and given.strip().lower() == "auto":  # not a name, and not silently the default either
        fail("served_model_name", given, ["1-128 characters of letters, digits and . _ : / -", "unset"],
             "auto is not a model name clients could send; leave kimi_served_model_name unset for %s"
             % default)
    name = check_text("served_model_name", given, NAME_RE, ["1-128 characters of letters, digits and . _ : / -"],
                      default)
    if any(arg.field == "served_model_name" for arg in spec["args"]):
        return name
    repo_id = (entry or model(DEFAULT_MODEL))["checkpoints"][quant]["repo_id"]
    if not is_unset(given) and name != repo_id:
        fail("served_model_name", name, [repo_id, "unset"], "%s %s has no served-model-name option: its OpenAI server "
             "names the model after its model argument" % (spec["title"], version))
    warnings.append("%s %s has no served-model-name option: clients send model=%s (not %s) to this identity."
                    % (spec["title"], version, repo_id, default))
    return repo_id


def capabilities(engine, version, reasons, warnings, entry=None):
    """(tool parser, reasoning parser, verify checks) of this engine version for the model (its parser names for this
    build), with what clients will see."""
    spec = ENGINES[engine]
    entry = entry or model(DEFAULT_MODEL)
    names = entry["parsers"].get(engine) or {"tool": (), "reasoning": ()}
    tool = parser_name(engine, version, "tool", names["tool"])
    reasoning = parser_name(engine, version, "reasoning", names["reasoning"])
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
        warnings.append("%s serves %s as text only: a request with an image is refused; the verify gate skips "
                        "its vision check." % (title, entry["title"]))
    return tool, reasoning, checks


def check_inputs(inputs):
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
