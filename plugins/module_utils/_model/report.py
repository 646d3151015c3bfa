# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""What a deployment is and how a site run went, as lines for people: the plan (plan.yml, site.yml --check) and
the per-host summary at the end of site.yml. Formatting only: every value comes resolved from the deployment
model and the roles' reports."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import shlex

from ansible_collections.kimi.deploy.plugins.module_utils._model.layout import ranking_lines
from ansible_collections.kimi.deploy.plugins.module_utils._model.platforms import traits

# The site stages in order, each with the tag that selects it (site.yml).
STAGES = ("preflight", "host", "weights", "image", "serve", "metrics", "proxy", "bench", "canary")
# Stages that are off unless asked for (kimi_metrics false, no kimi_bench_min_ratio): left out of the line then.
OPTIONAL_STAGES = ("metrics", "bench", "canary")


def shell_line(argv):
    """A command as one shell-quoted line that pastes and runs: shlex.split of it gives argv back."""
    return shlex.join(str(a) for a in argv)


def plan_lines(d):
    """The resolved deployment `d` (kimi.deploy.deployment) as 'key: value' lines."""
    hw = d.get("hardware")
    if hw:
        nodes = d.get("nodes", 1)
        hardware = "%s%d x %s, %s, %d MiB pool, fits=%s, KV estimate %s tokens" % (
            "%d hosts of " % nodes if nodes > 1 else "", hw["gpu_count"], "/".join(hw["models"]),
            hw[traits(d.get("platform"))["family_key"]],
            hw["vram_total_mib"] * nodes, hw["fits"], hw["kv_tokens_estimate"])
    else:
        hardware = "no accelerator facts given"
    ckpt = d["checkpoint"]
    model = d.get("model") or {}
    # The model line only for another model than the default (Kimi-K2.6's plan is unchanged); its state per sequence
    # for a hybrid one.
    shown = ["model: %s (kimi_model=%s), %s context, thinking %s%s, %s chat format, parsers %s%s" % (
        model["title"], model["name"], model["max_context"], model["thinking"],
        " (reasoning_effort %s)" % "/".join(model["reasoning_efforts"]) if model["reasoning_efforts"] else "",
        model["chat_format"], d.get("tool_parser"), "; %s sequences' state at %.1f MB a sequence a GPU" % (
            hw["sequences_estimate"], hw["state_bytes_per_seq"] / 1e6) if hw and hw.get("state_bytes_per_seq")
        else "")] if model and model["name"] != "kimi-k2.6" else []
    return (["identity: %s (quant=%s, engine=%s %s)" % (d["identity"], d["quant"], d["engine"], d["engine_version"])]
            + shown
            + ["why: " + r for r in d.get("reasons", [])]
            + ["hardware: " + hardware,
               "checkpoint: %s @ %s (%s)" % (ckpt["repo_id"], ckpt["revision"] or "NOT PINNED", ckpt["format"]),
               "image: %s%s" % (d["image"], " (built locally by kimi_image)" if d["image_is_local_build"] else ""),
               "kv_cache_dtype: %s, moe_backend: %s, %s %s, context %s, tp %s%s" % (
                   d["kv_cache_dtype"], d["moe_backend"] or "n/a", d["memory_flag"], d["mem_fraction"],
                   d["context_length"], d["tp"], _parallel(d)),
               "memory knob: %s is %s" % (d["memory_flag"], d.get("memory_meaning", "?")),
               "served model name: %s on %s:%s" % (d["served_model_name"], d["host"], d["port"]),
               "verify checks: %s" % ", ".join(d.get("verify_checks", []))]
            + (["cost: %s per hour (%s)" % (d["hour_cost"]["per_hour"], d["hour_cost"]["why"])]
               if (d.get("hour_cost") or {}).get("per_hour") is not None else [])
            + (["ports on this host: " + ", ".join(
                "%d %s (%s)" % (p["port"], p["what"], p["variable"]) for p in d["ports"])] if d.get("ports") else [])
            + ranking_lines(d.get("layouts"))
            + _speculative_lines(d)
            + _kernel_cache_lines(d)
            + (_pd_lines(d) if d.get("pd") else _replica_lines(d) + _config_lines(d))
            + (["container environment (%s): %s" % (d["engine_title"], " ".join(
                "%s=%s" % item for item in sorted(d["container_env"].items())))] if d.get("container_env") else [])
            + ["warning: " + w for w in d.get("warnings", [])])


def _kernel_cache_lines(d):
    """The compile caches kimi_serve keeps per key (issue 39), and the engine's ahead-of-time compile where it has one."""
    cache = d.get("kernel_cache")
    if not cache:
        return ["kernel cache: none (this release keeps no compile cache the collection carries)"]
    line = "kernel cache: %s, one host folder per key (kimi_serve_kernel_cache_dir) mounted at %s" % (
        " ".join(sorted(cache["env"])), cache["container_dir"])
    if cache.get("precompile"):
        line += "; ahead of time: %s <the engine's arguments>" % " ".join(cache["precompile"])
    return [line]


def _speculative_lines(d):
    spec = d.get("speculative")
    if not spec:
        return ["speculative: none (kimi_speculative)"]
    lines = ["speculative: " + spec["summary"]]
    draft = spec["draft"]
    if draft:
        lines.append("draft: %s @ %s (%s, ~%.1f GB%s; %s)" % (
            draft["repo_id"], draft["revision"] or "NOT PINNED", draft["architecture"] or "architecture read from its "
            "config.json", draft["weights_bytes"] / 1e9, "" if draft["known"] else ", estimated", draft["source"]))
    lines.append("speculative flags (%s): %s" % (d["engine_title"], " ".join(spec["flags"])))
    return lines


def _parallel(d):
    if d.get("attention_dp"):
        return ", attention data parallel"
    if d.get("dp", 1) > 1:
        return ", data parallel %d, expert parallel %d" % (d["dp"], d["tp"] * d["dp"])
    return ""


def _layout(d):
    return "tensor parallel %s x %s" % (d["tp"], "data parallel %s" % d["dp"] if d.get("dp", 1) > 1
                                        else "pipeline parallel %s" % d["pp"])


def _config_lines(d):
    """The engine's config file (TensorRT-LLM's YAML), key by key, as the file says it (YAML of scalars: JSON's)."""
    if d.get("engine_config") is None:
        return []

    def walk(node, indent):
        for key in sorted(node):
            value = node[key]
            if isinstance(value, dict):
                yield "  %s%s:" % ("  " * indent, key)
                yield from walk(value, indent + 1)
            else:
                yield "  %s%s: %s" % ("  " * indent, key, value if isinstance(value, str) else json.dumps(value))

    return ["config %s, from <kimi_serve_config_dir>/%s.yaml on the host:" % (
        d["engine_config_path"], d["identity"])] + list(walk(d["engine_config"], 0))


def _replica_lines(d):
    """The command; for a replica over several hosts, one per member (rank 0, the head, serves the API)."""
    nodes = d.get("nodes", 1)
    if nodes <= 1:
        return ["command: " + shell_line(d["command"])]
    lines = ["replica: %d hosts meeting at %s:%s, %s; host 0 (the head) serves the API and Caddy runs there"
             % (nodes, d["head_address"], d["dist_port"], _layout(d))]
    for rank, command in enumerate(d["member_commands"]):
        lines.append("command on host %d%s: %s" % (rank, " (head)" if rank == 0 else "", shell_line(command)))
    return lines


def _pd_lines(d):
    """A disaggregated deployment: its instances, each one's command (and config file), the router's."""
    pd = d["pd"]
    router = pd["router"]
    roles = [i["role"] for i in pd["instances"]]
    lines = ["disaggregated: kimi_pd %s, %dP%dD (%s); KV transfer %s: %s" % (
        pd["name"], roles.count("prefill"), roles.count("decode"), ", ".join(
            "%s %s at %s" % (i["role"], i["head"], i["url"]) for i in pd["instances"]), pd["transfer_backend"],
        pd["transfer_why"])]
    if pd.get("bootstrap_port"):
        lines.append("bootstrap: each prefill serves its bootstrap server on port %d (the decode asks it for the KV)"
                     % pd["bootstrap_port"])
    lines.append("KV layout that must match on every host: " + ", ".join(
        "%s=%s" % item for item in sorted(pd["layout"].items())))
    for instance in pd["instances"]:
        lines.append("command of %s instance %s%s: %s" % (instance["role"], instance["head"], (
            " (hosts %s)" % ", ".join(instance["hosts"])) if len(instance["hosts"]) > 1 else "",
            shell_line(instance["command"])))
        if instance.get("engine_config") is not None:
            lines.extend(line for line in _config_lines(dict(d, engine_config=instance["engine_config"]))[1:])
    lines.append("router on %s: %s %s (%s), Caddy in front of it at %s, Prometheus text at %s" % (
        router["host"], router["title"], router["version"], "the pinned wheel in a virtualenv" if router["install"] ==
        "venv" else "from the engine image", router["url"], router["metrics_url"]))
    if router.get("why"):
        lines.append("router: %s" % router["why"])
    lines.append("command of the router: " + shell_line(router["command"]))
    if router.get("config"):
        lines.append("router config %s: %s" % (router["config_path"], json.dumps(router["config"], sort_keys=True)))
    return lines


def _checks(checks):
    if not checks:
        return "not run"
    return ", ".join("%s %s %s" % (c.get("name"), "ok" if c.get("ok") else "FAILED",
                                   "%.0f ms" % (float(c["latency_s"]) * 1000) if c.get("latency_s") is not None
                                   else "-") for c in checks)


def stage_times(marks, run_tags=("all",), skip_tags=(), local_build=False):
    """[(stage, text)] from the marks site.yml notes at the end of each stage ([{stage, at}], 'start' first)."""
    at = {}
    order = []
    for mark in marks or []:
        at[mark["stage"]] = float(mark["at"])
        order.append(mark["stage"])
    run_tags, skip_tags = set(run_tags or ["all"]), set(skip_tags or [])
    out = []
    prev = at.get("start")
    for stage in STAGES:
        if stage not in at and stage in OPTIONAL_STAGES:
            continue
        if stage not in at:
            out.append((stage, "not reached"))
            continue
        took = at[stage] - prev if prev is not None else None
        prev = at[stage]
        selected = stage == "preflight" or (("all" in run_tags or stage in run_tags) and stage not in skip_tags)
        if not selected:
            out.append((stage, "skipped (tags)"))
        elif stage == "image" and not local_build:
            out.append((stage, "not needed"))
        else:
            out.append((stage, "%.1f s" % took if took is not None else "?"))
    return out


def image_line(d, image):
    """The image line: the stock image, or the local build (and, when the image stage ran, where it came from)."""
    if not d["image_is_local_build"]:
        return "image: %s" % d["image"]
    if not image:
        return "image: %s (built locally by kimi_image)" % d["image"]
    source = image.get("source")
    how = {"current": "current, nothing built", "loaded": "loaded from %s" % image.get("archive"),
           "built": "built in %s s" % image.get("duration_s")}.get(source, source)
    why = ", because %s changed" % ", ".join(image["rebuilt_because"]) if source != "current" and image.get(
        "rebuilt_because") else ""
    proof = image.get("proof") or {}
    proved = "; patch proved in the image: num_stages %s" % proof["num_stages"] if proof.get("patched") else ""
    return "image: %s %s (%s%s, FROM %s%s)" % (
        d["image"], str(image.get("id", ""))[:19], how, why, image.get("base"), proved)


def _weights_line(weights):
    """A download report (kimi_weights_report or kimi_weights_draft_report) as one line."""
    peers = [s for s in weights.get("sources") or [] if s.get("name") != "hub" and s.get("bytes")]
    fetched = float(weights.get("bytes_downloaded") or 0) / 1e9
    if peers:  # weights from peers: how much each sent, and what the hub still had to
        fetched_from = "%.2f GB fetched: %s, %.2f GB from the hub" % (fetched, ", ".join(
            "%.2f GB from %s" % (s["bytes"] / 1e9, s["name"]) for s in peers),
            float(weights.get("bytes_from_hub") or 0) / 1e9)
    else:
        fetched_from = "%.2f GB fetched" % fetched
    return "%s files, %.1f GB in %s (%s, verified: %s)" % (
        weights.get("files", "?"), float(weights.get("bytes_total") or 0) / 1e9, weights.get("snapshot_path"),
        fetched_from, weights.get("verified"))


def site_summary(d, host, gpus=None, serve=None, proxy=None, weights=None, marks=None, run_tags=("all",),
                 skip_tags=(), check_mode=False, image=None, draft_weights=None):
    """One host's summary lines at the end of site.yml (in check mode: its plan and the files that would change)."""
    serve, proxy, weights = serve or {}, proxy or {}, weights or {}
    ckpt = d["checkpoint"]
    endpoint = proxy.get("endpoint")
    if check_mode:
        head = "%s: PLAN (check mode, nothing was changed): %s as %s" % (host, d["identity"], d["served_model_name"])
    elif serve and not d["serves_api"]:  # a host of a replica over several hosts, not its head
        replica = list(serve.get("replica") or [])
        head = "%s: rank %s of %s of a replica running %s (headless); its head %s serves it as %s" % (
            host, d["node_rank"], d["nodes"], d["identity"], replica[0] if replica else "?",
            d["served_model_name"])
    elif endpoint:
        head = "%s: serving %s as %s at %s" % (host, d["identity"], d["served_model_name"], endpoint)
    elif serve:
        head = "%s: serving %s as %s at %s (engine only; the proxy stage did not run)" % (
            host, d["identity"], d["served_model_name"], serve.get("url"))
    else:
        head = "%s: %s resolved; not serving from this run (stages skipped)" % (host, d["identity"])
    lines = [head, "%s: %s" % (traits(d.get("platform"))["units"], gpus or "not read")]
    lines.append("identity: %s (quant=%s, engine=%s %s) from %s@%s" % (
        d["identity"], d["quant"], d["engine"], d["engine_version"], ckpt["repo_id"], ckpt["revision"]))
    lines += ["why: " + r for r in d.get("reasons", [])]
    lines.append(image_line(d, image if not check_mode else None))
    for label, report in (("weights", weights), ("draft weights", draft_weights)):
        if report and not check_mode:
            lines.append("%s: %s" % (label, _weights_line(report)))
    spec = d.get("speculative")
    if spec:
        achieved = (serve or {}).get("speculative")
        lines.append("speculative: %s%s" % (spec["summary"], "; verify saw acceptance rate %s, mean accepted length "
                                            "%.2f" % ("%.0f%%" % (achieved["accept_rate"] * 100)
                                                      if achieved.get("accept_rate") is not None else "not reported",
                                                      achieved["mean_accepted_length"]) if achieved else ""))
    if endpoint:
        lines.append("endpoint: %s (model %s, client keys from caddy_proxy_clients%s)" % (
            endpoint, d["served_model_name"], ", CA " + proxy["ca"] if proxy.get("ca") else ""))
    if d["nodes"] > 1:
        lines.append("replica: %s (rank %s of %s) meeting at %s:%s, %s" % (
            ", ".join(serve.get("replica") or ["?"]), d["node_rank"], d["nodes"], d["head_address"], d["dist_port"],
            _layout(d)))
    if d["serves_api"]:
        lines.append("engine: %s on the host (%s)" % (d["local_url"], d["memory_flag"] + " " + str(d["mem_fraction"])))
    if check_mode:
        lines.append("command: " + shell_line(d["command"]))
        changed = list(serve.get("changed_files") or []) + list(proxy.get("changed_files") or [])
        lines.append("would change: " + (", ".join(changed) if changed else "no file (converged)"))
    else:
        if serve and not d["serves_api"]:
            lines.append("verify: on the head (%s)" % _checks(serve.get("checks")) + (
                "; restarted with the replica" if serve.get("restarted") else "; not restarted"))
        elif serve:
            lines.append("verify on the engine: " + _checks(serve.get("checks")) + (
                "; restarted, ready in %s s" % serve["ready_s"] if serve.get("restarted") and serve.get("ready_s")
                is not None else ("; not restarted" if not serve.get("restarted") else "")))
        if proxy:
            lines.append("verify through the proxy: " + _checks(proxy.get("checks")))
    times = stage_times(marks, run_tags, skip_tags, d["image_is_local_build"])
    total = ""
    stamps = [float(m["at"]) for m in marks or []]
    if len(stamps) > 1:
        total = " (total %.1f s)" % (stamps[-1] - stamps[0])
    lines.append("stages: " + ", ".join("%s %s" % st for st in times) + total)
    # What clients will see that differs from the other engines (no parser, a model id of its own, ...).
    return lines + ["warning: " + w for w in d.get("warnings", [])]
