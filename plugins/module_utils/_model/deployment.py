# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The Kimi-K2.6 deployment model's resolver: inputs (+ the host's accelerators) -> one deployment. Private to
kimi.deploy.

The deployment action (plugins/action/deployment.py, which makes kimi_deployment), the filter plugins and the tests all
go through resolve() and recommend(); nothing else derives checkpoints, images, menus or engine flags. The model is
split by concern, and this file only combines them:
- _model/models.py:       the models (kimi_model): checkpoints (repo, format, size), geometry, parsers, drafts, the
                          engine releases that serve each (_model/checkpoints.py: the default model's view);
- _model/memory.py:       the memory model (MLA KV per token, a hybrid model's state per sequence);
- _engines/:              the engines and their versions (one data file each, _engines/<name>.py, with the flag lists
                          generated from the released packages in _engines/flags/), the command line and config file
                          (_engines/registry.py);
- _model/accelerators.py: the accelerator families and the identity recommended for each;
- _model/fit.py:          the VRAM fit, the KV estimate and the replica layout;
- _model/inputs.py:       the variables, the error type and the value checks (their base, shared with _engines, is
                          _common.py: _engines never imports _model);
- _model/checks.py:       the per-input checks the seams call;
- the features (FEATURES below: _model/cost.py, kv_offload.py, loader.py, the kernel cache), each resolve(ctx) ->
                          its fragment of the deployment, hooked after a seam.
resolve() is the only validator of deployment inputs: the layers after it trust what it returns.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.kimi.deploy.plugins.module_utils._model.accelerators import (
    SUMMARY_ERRORS, platform_of, recommended, summarize)
from ansible_collections.kimi.deploy.plugins.module_utils._model.models import model as model_entry
from ansible_collections.kimi.deploy.plugins.module_utils._engines.registry import (
    ENGINES, build_of, check_extra_args, command_for, engine_argv, engine_config, engine_slots, managed, pinned_image,
    select_version)
from ansible_collections.kimi.deploy.plugins.module_utils._engines.registry import options as eng_options
from ansible_collections.kimi.deploy.plugins.module_utils._model import cost, kv_offload, loader
# pylint: disable=unused-import
from ansible_collections.kimi.deploy.plugins.module_utils._model.checks import (  # noqa: F401 (re-exported)
    DEFAULT_DIST_PORT, DEFAULT_HOST, DEFAULT_PORT, HOST_RE, IMAGE_RE, KV_NOTES, VERIFY_CHECKS, VERSION_RE,
    WILDCARD_HOSTS,
    capabilities, check_family, check_identity, check_inputs, check_kv, check_mem, check_model, check_model_build,
    check_moe, check_platform, check_replica, context_length, model_version, pick_identity, pinned_revision,
    ranks_layouts, served_model_name)
# pylint: enable=unused-import
from ansible_collections.kimi.deploy.plugins.module_utils._model.checks import check_driver
from ansible_collections.kimi.deploy.plugins.module_utils._model.kernel_cache import entry as kernel_cache_entry
from ansible_collections.kimi.deploy.plugins.module_utils._model.fit import (
    MIN_KV_TOKENS, fit, replica_advice, replica_layout)
from ansible_collections.kimi.deploy.plugins.module_utils._model.layout import check_workload, choose_layout
from ansible_collections.kimi.deploy.plugins.module_utils._model.pd import for_instance, resolve_pd
from ansible_collections.kimi.deploy.plugins.module_utils._model.platforms import DEFAULT as DEFAULT_PLATFORM, traits
from ansible_collections.kimi.deploy.plugins.module_utils._model.ports import check as check_ports, deployment_ports
from ansible_collections.kimi.deploy.plugins.module_utils._model.speculative import resolve_speculative
from ansible_collections.kimi.deploy.plugins.module_utils._model.inputs import (
    DeploymentError, check_int, check_text, fail, is_unset, var)


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


def _identity(inputs, r):
    """Seam 1, identity and version: the model (kimi_model), quant and engine (given or recommended from the
    accelerators), the platform and the engine's build for it, the release (kimi_engine_version, the image's tag, the
    verified default, or the oldest pinned one that serves the model)."""
    r["model"] = name = check_model(inputs.get("model"))
    r["entry"] = entry = model_entry(name)
    quant = "auto" if is_unset(inputs.get("quant")) else str(inputs["quant"]).strip().lower()
    engine = "auto" if is_unset(inputs.get("engine")) else str(inputs["engine"]).strip().lower()
    check_identity(quant, engine, entry)
    r["summary"] = summary = _summary(r["gpus"]) if r["gpus"] else None
    r["advice"] = advice = _advice(summary) if summary else None
    platform = platform_of(summary) if summary else None
    quant, engine, r["auto"] = pick_identity(quant, engine, summary, advice, r["reasons"], platform, entry)
    r["platform"] = platform = platform or _quant_platform(quant)
    # A build that serves the model in no release is refused before its quants are (the model is the reason).
    build = build_of(engine, platform)
    if build:
        check_model_build(entry, build, quant)
    # From here on `key` is the engine's build for this platform (vllm-ascend is engine=vllm on Ascend).
    r["key"] = key = check_platform(quant, engine, platform, summary, tuple(entry["checkpoints"]))
    r["spec"] = spec = ENGINES[key]
    check_family(quant, key, summary)
    r["family"] = summary["arch"] if summary else None
    r["quant"], r["engine"] = quant, engine
    version = check_text("engine_version", inputs.get("engine_version"), VERSION_RE, ["a release, e.g. 0.22.1"], None)
    r["image"] = check_text("image", inputs.get("image"), IMAGE_RE, ["an image reference, e.g. registry.local/vllm:1"],
                            None)
    r["version"], version_why = select_version(key, version, r["image"])
    r["version"], model_why = model_version(entry, key, r["version"], version is not None or r["image"] is not None)
    r["reasons"].append(model_why or version_why)
    r["release"] = release = spec["versions"][r["version"]]
    if quant not in release["images"]:
        fail("engine_version", r["version"], sorted(v for v, x in spec["versions"].items() if quant in x["images"]),
             "%s %s has no pinned image for quant=%s" % (spec["title"], r["version"], quant))
    r["reasons"].extend(release["notes"])


def _layout_and_fit(inputs, r):
    """Seam 2, layout and fit: KV dtype, MoE backend, the replica's layout, the memory knob, the engine's own options
    (their layout keys change the fit), speculative decoding (its draft counts in the fit), the fit of the settings
    chosen, and the context length."""
    key, quant, summary, spec, version = r["key"], r["quant"], r["summary"], r["spec"], r["version"]
    r["kv"] = kv = check_kv(quant, key, inputs.get("kv_cache_dtype"))
    if r["auto"]:
        r["reasons"].append(_kv_note(kv))
    r["moe"] = check_moe(quant, key, inputs.get("moe_backend"), r["family"])
    layout = check_replica(key, inputs, summary, r["reasons"])
    nodes, r["node_rank"], r["head_address"], r["dist_port"], tp, pp, dp = layout
    r["nodes"], r["tp"], r["pp"], r["dp"] = nodes, tp, pp, dp
    r["mem"] = mem = check_mem(key, inputs.get("mem_fraction"))
    min_kv = inputs.get("min_kv_tokens")
    entry, name = r["entry"], r["model"]
    min_kv = MIN_KV_TOKENS if is_unset(min_kv) else check_int("min_kv_tokens", min_kv, 0, 64 * entry["max_context"])
    # The sequences a hybrid model's state is reserved for (kimi_workload's concurrency; nothing for the K2 family).
    r["seqs"] = seqs = check_workload(inputs.get("workload"))["concurrency"]
    r["user_options"] = inputs.get("engine_options") or {}
    probe = engine_config(key, version, {"tp": tp, "pp": pp, "context_length": entry["max_context"],
                                         "kv_cache_dtype": kv, "mem_fraction": mem}, r["user_options"])
    r["attention_dp"] = bool(probe and probe.get("enable_attention_dp")) or bool(spec.get("attention_dp"))
    r["layouts"] = None
    if ranks_layouts(spec, inputs, summary, nodes, pp):
        tp, dp, r["layouts"], why = choose_layout(inputs, quant, key, kv, mem, summary, min_kv, r["attention_dp"],
                                                  model=name)
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
         "platform": r["platform"], "family": r["family"]}, r["require_revision"], r["warnings"], model=name)
    if speculative:
        r["reasons"].append("Speculative decoding: %s; %s." % (speculative["summary"], speculative["why"]))
    # The fit of the settings chosen (not the recommended ones); more hosts only when no setting of the user's fits.
    # Instances that each hold the whole checkpoint (SGLang's data-parallel controller) fit as one instance each.
    r["verdict"] = verdict = fit(quant, key, kv, mem, tp, summary, min_kv, pp=pp, nodes=nodes,
                                 attention_dp=r["attention_dp"],
                                 dp=dp if (spec.get("data_parallel") or {}).get("experts", "all") == "all" else 1,
                                 draft=speculative["draft"] if speculative else None, model=name,
                                 seqs=seqs) if summary else None
    if verdict:
        r["reasons"].append(verdict["reason"])
    r["replica"] = None
    if verdict and not verdict["fits"] and nodes == 1 and not verdict["settings_advice"]:
        r["replica"] = replica_advice(quant, key, kv, mem, summary, min_kv, model=name, seqs=seqs)
    if r["replica"]:
        r["reasons"].append(r["replica"])
    r["ctx"] = context_length(key, quant, inputs, kv, mem, verdict, summary, r["warnings"], entry)


def _endpoint(inputs, r):
    """Seam 3, the endpoint: the engine's address and port, the model name clients send, the image, the extra
    arguments, the parsers and verify checks this release has, the checkpoint revision."""
    key, spec, version, quant, warnings = r["key"], r["spec"], r["version"], r["quant"], r["warnings"]
    r["port"] = port = check_int("port", DEFAULT_PORT if is_unset(inputs.get("port")) else inputs["port"], 1, 65535)
    r["host"] = host = check_text("host", inputs.get("host"), HOST_RE,
                                  ["an IP address or host name, e.g. 0.0.0.0 or 127.0.0.1"], DEFAULT_HOST)
    r["name"] = served_model_name(spec, version, quant, inputs.get("served_model_name"), warnings, r["entry"],
                                  r["model"])
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
    r["tool"], r["reasoning"], r["checks"] = capabilities(key, version, r["reasons"], warnings, r["entry"])
    floor = r["entry"]["image_floor"]
    if floor:
        r["reasons"].append("%s on %s %s: the host driver must be r%d or newer (%s)." % (
            r["entry"]["title"], spec["title"], version, floor["driver"], floor["why"]))
        # the host's driver where the GPU facts know it (driver_version): an older one is refused here, before any
        # host changes; none yet, or one nvidia_host replaces (driver_upgrade) - judged when site.yml resolves again
        upgrading = check_driver(r["entry"], r["platform"], inputs.get("driver_version"),
                                 bool(inputs.get("driver_upgrade")), inputs.get("driver_branch"))
        if upgrading:
            warnings.append(upgrading)
    if eng_options(key, version)["provenance"] != "release":
        warnings.append("%s %s's flag list is approximate: it was read from upstream source files that are not the "
                        "release's (tests/fixtures/engine_flags/engine_flags_%s-%s.json names them); regenerate it "
                        "from the release with make engine-flags ENGINE=%s VERSION=%s."
                        % (spec["title"], version, r["engine"], version, r["engine"], version))
    r["revision"] = pinned_revision(quant, inputs.get("revisions"), r["require_revision"], warnings, r["entry"])


def _deployment(_inputs, r):
    """Seam 4, the deployment: what every role reads, from the three seams above."""
    quant, spec, release, entry = r["quant"], r["spec"], r["release"], r["entry"]
    checkpoint = entry["checkpoints"][quant]
    host, port = r["host"], r["port"]
    deployment = {
        "identity": "%s-%s" % (quant, r["engine"]),
        # The model served (kimi_model) and what clients, probes and the engine double read of it.
        "model": {"name": r["model"], "title": entry["title"], "chat_format": entry["chat_format"],
                  "parsers": entry["parsers"].get(r["key"]), "thinking": entry["thinking"],
                  "reasoning_efforts": entry["reasoning_efforts"], "max_context": entry["max_context"],
                  "vision": entry["vision"], "driver_floor": (entry["image_floor"] or {}).get("driver")},
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
            "quant_method": checkpoint["quant_method"],
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
            # A hybrid model's sequences whose fixed state the pool holds, and the state's bytes a sequence a GPU
            # (None and 0 for the K2 family).
            "sequences_estimate": verdict["sequences"],
            "state_bytes_per_seq": verdict["state_bytes_per_seq"],
            "fits": verdict["fits"],
            "fit_reason": verdict["reason"],
            "replica_advice": r["replica"],
            "recommended": dict((k, advice[k]) for k in ("quant", "engine", "kv_cache_dtype", "moe_backend")),
        }
    r["deployment"] = deployment


def _disaggregate(inputs, r):
    """Seam 5, disaggregation and speculation: a disaggregated deployment (kimi_pd) gives this host its role, the
    transfer backend and the router, and the engine binds the host's address on the deployment's network; the
    speculative check reads the engine's own metrics, which a router does not serve."""
    deployment = r["deployment"]
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


def _commands(inputs, r):
    """Seam 6, the commands: the engine's config file, argv and command line, every replica member's command (the
    same but for its rank) and every disaggregated instance's, for the plan and for checking a group agrees."""
    deployment = r["deployment"]
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


def _kernel_cache(ctx):
    """The compile/autotune caches kimi_serve keeps per cache key (the deployment's share of the key; the host adds its
    image digest, architecture and driver), or None where the release keeps none (_model/kernel_cache.py)."""
    return {"kernel_cache": kernel_cache_entry(ctx["spec"], ctx["version"], ctx["deployment"])}


# The seams, in order: each reads and adds to one record of what is resolved so far (the deployment from seam 4 on).
SEAMS = (_identity, _layout_and_fit, _endpoint, _deployment, _disaggregate, _commands)
# The features, each hooked after a seam and run in this order: resolve(ctx) returns the feature's fragment of the
# deployment ({field: value}), adding its reasons and warnings to ctx's. ctx: inputs, spec and version (the engine
# build's data and release), summary (the accelerators, or None), deployment (so far), reasons, warnings. An engine file
# reads a feature's field (_engines.spec: present, resolved), never the feature's module. Speculative decoding is no
# hook: it is part of seam 2, whose fit counts the draft.
FEATURES = (
    (_deployment, cost.resolve),  # kimi_gpu_hour_cost: what the host's accelerators cost per hour
    (_disaggregate, kv_offload.resolve),  # kimi_kv_offload: the engine's KV host tier, sized from the host's memory
    (_disaggregate, loader.resolve),  # kimi_load_format, else the rule on the preflight's read of the weights disk
    (_commands, _kernel_cache),  # the compile/autotune caches kept per cache key
)


def resolve(inputs, gpus=None, require_revision=True):
    """Resolve user inputs (+ GPU facts when known) into the deployment every role consumes.

    inputs: model, quant, engine, engine_version, kv_cache_dtype, moe_backend, context_length, mem_fraction, tp, pp, host,
    port, served_model_name, extra_args, engine_options, revisions ({quant: sha}), image, min_kv_tokens, nodes,
    node_rank, head_address, dist_port, pd, speculative, speculative_draft, speculative_draft_revision,
    speculative_tokens, speculative_topk, speculative_draft_tokens, kv_offload, kv_offload_gb, host_memory_bytes,
    load_format, weights_read_mbps, gpu_hour_cost, driver_version (the host's NVIDIA driver, from its GPU facts),
    driver_upgrade (nvidia_host replaces that driver before the engine runs), driver_branch (the inventory's
    nvidia_host_driver_branch). Missing -> derived.
    The one validator of these inputs: a bad one raises DeploymentError naming its variable. A GPU pool that
    cannot hold the deployment does not raise: hardware.fits is false and hardware.fit_reason says why.
    It runs the SEAMS in order, each followed by the FEATURES hooked after it.
    """
    inputs = check_inputs(inputs)
    resolved = {"reasons": [], "warnings": [], "gpus": gpus, "require_revision": require_revision}
    for seam in SEAMS:
        seam(inputs, resolved)
        for after, feature in FEATURES:
            if after is seam:
                resolved["deployment"].update(feature({
                    "inputs": inputs, "spec": resolved["spec"], "version": resolved["version"],
                    "summary": resolved["summary"], "deployment": resolved["deployment"],
                    "reasons": resolved["reasons"], "warnings": resolved["warnings"]}))
    return resolved["deployment"]
