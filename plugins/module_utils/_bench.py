# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The post-deploy benchmark (kimi.deploy.serve_bench) without the running: the aiperf config of a bounded
concurrency sweep, aiperf's per-level results read into our summary, the comparison with a baseline, and the plot.

Two workloads (WORKLOADS): `chat`, aiperf's synthetic single-turn prompts; `multi_turn`, a replay of agent-like
sessions from a JSONL file this module writes (session_records: one system prompt shared by every session, then turns
whose history aiperf resends with its live answers, so each turn's prompt starts with the previous one's - the prefixes
a KV host tier turns into hits). aiperf 0.13.0 reads it as a file dataset of format multi_turn (aiperf/config/dataset/
config.py FileDataset; aiperf/dataset/loader/multi_turn.py: {session_id, turns: [{text, role, delay, output_length}]},
a leading system turn hoisted into every request), and stops a level after a number of sessions (phases[].sessions).

aiperf (NVIDIA, pinned in requirements-bench.txt: 0.13.0) is driven by one config file (`aiperf profile --config
FILE`): a zip sweep pairs each concurrency with its request count. For N levels it writes, under the artifact dir,
one folder per level, `concurrency_<c>__requests_<n>/` (with one level: the artifact dir itself), holding
`profile_export_aiperf.json` (the summary: one entry per metric with unit, avg and percentiles), `.csv` beside it,
`profile_export.jsonl` (one record per request, errors included), `inputs.json`, `run_config.json`,
`profile_export_console.txt` and `logs/aiperf.log`; and, with more than one level, `aggregate/` and
`sweep_aggregate/`. A level whose requests all failed has no `profile_export_aiperf.json`: its errors are counted
from `profile_export.jsonl`. Standard library only, except the plot (matplotlib, which aiperf depends on)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import glob
import hashlib
import json
import math
import os
import re
import sys

from ansible_collections.kimi.deploy.plugins.module_utils._model.cost import per_million_tokens
from ansible_collections.kimi.deploy.plugins.module_utils._model.models import DEFAULT_MODEL


CLIENT = "aiperf"
SCHEMA = "kimi.deploy/bench/1"
API_KEY_ENV = "KIMI_BENCH_API_KEY"  # the only way the key reaches aiperf: its environment, named in the config
RANDOM_SEED = 42
# aiperf starts its services, loads the tokenizer and exports for each level: seconds kept aside per level when the
# total timeout is shared out between the levels.
LEVEL_OVERHEAD_S = 20
MIN_LEVEL_S = 5
WORKLOADS = ("chat", "multi_turn")
SESSIONS_FILE = "sessions.jsonl"
SUMMARY_FILE = "profile_export_aiperf.json"
RECORDS_FILE = "profile_export.jsonl"
MAX_ERRORS = 5  # distinct error messages kept per level
# Our name -> (aiperf metric, statistic). Throughputs are whole-run averages; latencies are per-request percentiles.
METRICS = (
    ("output_tokens_per_s", "output_token_throughput", "avg"),
    ("total_tokens_per_s", "total_token_throughput", "avg"),
    ("requests_per_s", "request_throughput", "avg"),
    ("ttft_p50_ms", "time_to_first_token", "p50"),
    ("ttft_p99_ms", "time_to_first_token", "p99"),
    ("itl_p50_ms", "inter_token_latency", "p50"),
    ("itl_p99_ms", "inter_token_latency", "p99"),
    ("e2e_p50_ms", "request_latency", "p50"),
    ("e2e_p99_ms", "request_latency", "p99"),
    # The prompt tokens the server says it served from its prefix cache (usage.prompt_tokens_details.cached_tokens,
    # where the engine reports it): what a KV host tier should raise on the multi_turn workload.
    ("cached_prompt_tokens_avg", "usage_prompt_cache_read_tokens", "avg"),
)


class BenchError(Exception):
    """A benchmark input or result that cannot be used; the message says why."""


# ---- the sweep ------------------------------------------------------------------------------------------------
def requests_for_level(level, requests_per_level):
    """Requests sent at one concurrency: at least requests_per_level, and at least two per concurrent stream."""
    return max(int(requests_per_level), 2 * int(level))


def level_time_limit(timeout, levels):
    """(duration, grace) seconds for each level out of the total `timeout`: after `duration` aiperf sends no new
    request at that level and waits `grace` for those in flight, so a slow level ends with partial results instead
    of the whole run being killed. Raises BenchError when the timeout cannot cover the levels."""
    n = len(levels)
    share = (float(timeout) - LEVEL_OVERHEAD_S * n) / n
    if share < MIN_LEVEL_S / 0.8:
        raise BenchError("timeout %s s is too short for %d concurrency levels: give at least %d s (%d s per level "
                         "for aiperf to start and stop, plus %d s of requests)" % (
                             timeout, n, int(math.ceil(n * (LEVEL_OVERHEAD_S + MIN_LEVEL_S / 0.8))),
                             LEVEL_OVERHEAD_S, int(math.ceil(MIN_LEVEL_S / 0.8))))
    duration = int(share * 0.8)
    return duration, max(1, int(share - duration))


def check_levels(levels):
    if not levels:
        raise BenchError("levels is empty: give at least one concurrency, e.g. [1, 4, 16]")
    bad = [lv for lv in levels if not isinstance(lv, int) or isinstance(lv, bool) or lv < 1]
    if bad:
        raise BenchError("levels must be positive integers, got %s" % bad)
    if len(set(levels)) != len(levels):
        raise BenchError("levels has duplicates: %s" % levels)
    return sorted(levels)


# ---- the multi-turn sessions ----------------------------------------------------------------------------------
# Plain English words, one token each in Kimi's (tiktoken-style) vocabulary, so that a word count approximates tokens.
VOCABULARY = tuple(
    "the of and to in is was for on that with as by at from this be are or an which not have it but all they "
    "one had can has were their more will other would some time new these two may first any only also after "
    "into over such where most made between each well many before must through back years much your way down "
    "should because long used both work under never same another life while last might great old year off "
    "come since against right take three state small large number place point group world house system "
    "program water service table order value result market report level field".split())


def _words(seed, count):
    """`count` deterministic words (about one token each for Kimi's tokenizer) drawn from `seed` with SHA-256: the
    same file on every Python and host, so that runs compare."""
    out, block = [], 0
    while len(out) < count:
        digest = hashlib.sha256(("%s/%d" % (seed, block)).encode()).digest()
        out.extend(VOCABULARY[b % len(VOCABULARY)] for b in digest)
        block += 1
    return " ".join(out[:count])


def session_records(sessions, turns, input_tokens, output_tokens, system_tokens=2048, turn_delay_ms=0):
    """The multi_turn dataset: `sessions` sessions of `turns` user turns, each asking for `output_tokens`. Every
    session starts with the same system prompt of about `system_tokens` tokens (an agent's instructions and tool
    definitions: a prefix shared across sessions); each user turn adds about `input_tokens` tokens of its own, and
    aiperf sends each turn with the whole history before it (a prefix shared within the session). turn_delay_ms: the
    think time before each turn after the first. Deterministic: the same arguments give the same records."""
    for name, value, low in (("sessions", sessions, 1), ("turns", turns, 1), ("input_tokens", input_tokens, 1),
                             ("output_tokens", output_tokens, 1), ("system_tokens", system_tokens, 0),
                             ("turn_delay_ms", turn_delay_ms, 0)):
        if not isinstance(value, int) or isinstance(value, bool) or value < low:
            raise BenchError("%s must be an integer of at least %d, got %r" % (name, low, value))
    system = ("You are a coding agent. Follow the instructions and use the tools described. "
              + _words("system", system_tokens))
    records = []
    for session in range(sessions):
        items = [{"role": "system", "text": system}] if system_tokens else []
        for turn in range(turns):
            item = {"text": "Step %d. %s" % (turn + 1, _words("s%d/t%d" % (session, turn), input_tokens)),
                    "output_length": int(output_tokens)}
            if turn and turn_delay_ms:
                item["delay"] = int(turn_delay_ms)
            items.append(item)
        records.append({"session_id": "kimi-bench-%04d" % session, "turns": items})
    return records


def render_sessions(records):
    """The JSONL text of the records (one session a line, keys sorted)."""
    return "".join(json.dumps(r, sort_keys=True, separators=(",", ":")) + "\n" for r in records)


def build_config(url, model, tokenizer, artifact_dir, levels, requests_per_level, input_tokens, output_tokens,
                 timeout, api_key=True, ignore_eos=True, workload="chat", sessions_path=None):
    """aiperf's config (a dict; JSON is valid YAML for its loader) for one bounded sweep. With api_key true, the
    endpoint's key is the reference ${KIMI_BENCH_API_KEY}: the value itself is never in the file.
    workload multi_turn: the dataset is the sessions file at sessions_path (session_records) and each level stops
    after its number of sessions (requests_per_level then counts sessions, at least one per concurrent stream)."""
    if workload not in WORKLOADS:
        raise BenchError("workload must be one of %s, got %r" % (", ".join(WORKLOADS), workload))
    if workload == "multi_turn" and not sessions_path:
        raise BenchError("the multi_turn workload needs its sessions file (sessions_path)")
    levels = check_levels(list(levels))
    count = "sessions" if workload == "multi_turn" else "requests"
    requests = [requests_for_level(lv, requests_per_level) if count == "requests" else max(int(requests_per_level), lv)
                for lv in levels]
    duration, grace = level_time_limit(timeout, levels)
    endpoint = {"url": url.rstrip("/"), "type": "chat", "streaming": True, "useServerTokenCount": True,
                "timeout": float(timeout)}
    if api_key:
        endpoint["apiKey"] = "${%s}" % API_KEY_ENV
    if ignore_eos:
        endpoint["extra"] = {"ignore_eos": True}
    benchmark = {
        "model": model,
        "endpoint": endpoint,
        "tokenizer": {"name": tokenizer, "trustRemoteCode": True},
        "dataset": ({"type": "synthetic", "entries": max(requests),
                     "prompts": {"isl": int(input_tokens), "osl": int(output_tokens)}} if count == "requests" else
                    {"type": "file", "path": sessions_path, "format": "multi_turn", "sampling": "sequential"}),
        "phases": [{"name": "profiling", "type": "concurrency", "concurrency": levels[0], count: requests[0],
                    "duration": duration, "gracePeriod": grace}],
        "serverMetrics": {"enabled": False},
        "gpuTelemetry": {"enabled": False},
        "artifacts": {"dir": artifact_dir},
        "runtime": {"ui": "none"},
    }
    config = {"schemaVersion": "2.0", "randomSeed": RANDOM_SEED, "benchmark": benchmark}
    if len(levels) > 1:
        config["sweep"] = {"type": "zip", "parameters": {"phases.profiling.concurrency": levels,
                                                         "phases.profiling.%s" % count: requests}}
    return config


def render_config(config):
    return json.dumps(config, indent=2, sort_keys=True) + "\n"


def build_argv(aiperf, config_path):
    """aiperf's command line: the config file only (nothing secret, nothing that varies with the run)."""
    return [aiperf, "profile", "--config", config_path]


def sweep_plan(config):
    """[(concurrency, requests)] in the order aiperf runs them; with the multi_turn workload, (concurrency,
    sessions)."""
    count = "sessions" if "sessions" in config["benchmark"]["phases"][0] else "requests"
    sweep = (config.get("sweep") or {}).get("parameters")
    if sweep:
        return list(zip(sweep["phases.profiling.concurrency"], sweep["phases.profiling.%s" % count]))
    phase = config["benchmark"]["phases"][0]
    return [(phase["concurrency"], phase[count])]


# ---- aiperf's results -----------------------------------------------------------------------------------------
def _level_dirs(artifact_dir, plan):
    """{concurrency: folder with that level's results}."""
    if len(plan) == 1:
        return {plan[0][0]: artifact_dir} if os.path.isdir(artifact_dir) else {}
    found = {}
    for path in glob.glob(os.path.join(artifact_dir, "concurrency_*")):
        m = re.match(r"concurrency_(\d+)__", os.path.basename(path))
        if m and os.path.isdir(path):
            found[int(m.group(1))] = path
    return found


def _find(folder, name):
    """`name` in `folder`, else in a trial folder under it (profile_runs/run_0001/...)."""
    direct = os.path.join(folder, name)
    if os.path.isfile(direct):
        return direct
    nested = sorted(p for p in glob.glob(os.path.join(folder, "**", name), recursive=True)
                    if os.sep + "aggregate" not in p[len(folder):])
    return nested[0] if nested else None


def _stat(export, metric, stat):
    value = (export.get(metric) or {}).get(stat)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _record_errors(path):
    """(ok, failed, [distinct error messages]) counted from profile_export.jsonl."""
    ok = failed = 0
    messages = []
    with open(path) as handle:
        for line in handle:
            line = line.strip()
            if not line:
                continue
            try:
                record = json.loads(line)
            except ValueError:
                continue
            error = record.get("error")
            if error:
                failed += 1
                text = _error_text(error)
                if text not in messages and len(messages) < MAX_ERRORS:
                    messages.append(text)
            else:
                ok += 1
    return ok, failed, messages


def _error_text(error):
    if not isinstance(error, dict):
        return str(error)[:300]
    message = str(error.get("message") or "")
    try:  # the server's JSON error body, as aiperf keeps it
        inner = json.loads(message)
        inner = inner.get("error", inner) if isinstance(inner, dict) else inner
        message = inner.get("message", message) if isinstance(inner, dict) else message
    except ValueError:
        pass
    head = " ".join(str(error[k]) for k in ("code", "type") if error.get(k) not in (None, ""))
    return ("%s: %s" % (head, message) if head else message)[:300]


def _summary_error(item):
    """One entry of aiperf's error_summary ({error_details, count}) as text."""
    if not isinstance(item, dict):
        return str(item)[:300]
    text = _error_text(item.get("error_details", item))
    count = item.get("count")
    return "%s (%d request%s)" % (text, count, "" if count == 1 else "s") if isinstance(count, int) else text


def parse_level(folder, concurrency, requests, base=None):
    """One level's entry of the summary from aiperf's files in `folder` (None: the level did not run)."""
    entry = dict({"concurrency": concurrency, "requests": requests, "requests_ok": 0, "requests_failed": 0,
                  "errors": [], "artifacts": None}, **dict((name, None) for name, _m, _s in METRICS))
    if folder is None:
        entry["errors"] = ["not run (no results from aiperf for this level)"]
        return entry
    entry["artifacts"] = os.path.relpath(folder, base) if base else folder
    export_path = _find(folder, SUMMARY_FILE)
    records_path = _find(folder, RECORDS_FILE)
    if export_path:
        with open(export_path) as handle:
            export = json.load(handle)
        entry["requests_ok"] = int(_stat(export, "request_count", "avg") or 0)
        entry["requests_failed"] = int(_stat(export, "error_request_count", "avg") or 0)
        for name, metric, stat in METRICS:
            entry[name] = _stat(export, metric, stat)
        entry["errors"] = [_summary_error(e) for e in export.get("error_summary") or []][:MAX_ERRORS]
        entry["client_version"] = export.get("aiperf_version")
        if export.get("was_cancelled"):
            entry["errors"].append("aiperf cancelled this level")
    if records_path and (not export_path or (entry["requests_failed"] and not entry["errors"])):
        ok, failed, messages = _record_errors(records_path)
        if not export_path:
            entry["requests_ok"], entry["requests_failed"] = ok, failed
        entry["errors"] = entry["errors"] or messages
    if not export_path and not records_path:
        entry["errors"] = ["no results from aiperf for this level"]
    return entry


def parse_results(artifact_dir, plan, base=None, turns=None):
    """[level entry] for the (concurrency, requests) plan, from aiperf's artifact dir. turns: the plan counts
    sessions of that many turns (multi_turn); each entry then has `sessions` and requests = sessions x turns."""
    folders = _level_dirs(artifact_dir, plan)
    levels = [parse_level(folders.get(c), c, n * turns if turns else n, base) for c, n in plan]
    if turns:
        for level, (_c, n) in zip(levels, plan):
            level["sessions"] = n
    return levels


def client_version(levels):
    for level in levels:
        if level.get("client_version"):
            return level["client_version"]
    return None


def summarize(levels, identity, host, timestamp, url, model, settings, label="", client_version_=None,
              duration_s=None, exit_code=None, hour_cost=None, kimi_model=None):
    """Our summary of one sweep (what the result JSON holds). With the host's `hour_cost` (kimi_gpu_hour_cost), each
    level also says what a million output tokens cost at its throughput. `kimi_model`: the model served (kimi_model;
    None: the default model), what a baseline must have served too (summary_model)."""
    clean = [dict((k, v) for k, v in lv.items() if k != "client_version") for lv in levels]
    for lv in clean:
        lv["cost_per_million_output_tokens"] = per_million_tokens(hour_cost, lv.get("output_tokens_per_s"))
        # prompt and output tokens together: the multi_turn workload's prompts are most of its tokens
        lv["cost_per_million_tokens"] = per_million_tokens(hour_cost, lv.get("total_tokens_per_s"))
    return {
        "hour_cost": hour_cost,
        "schema": SCHEMA, "identity": identity, "kimi_model": kimi_model or DEFAULT_MODEL, "host": host,
        "label": label or "", "timestamp": timestamp,
        "client": {"name": CLIENT, "version": client_version_ or client_version(levels)},
        "endpoint": {"url": url, "model": model},
        "config": settings,
        "levels": clean,
        "duration_s": duration_s,
        "client_exit_code": exit_code,
    }


def measured(summary):
    """The levels that have an output throughput (at least one request answered)."""
    return [lv for lv in summary.get("levels", [])
            if lv.get("requests_ok") and isinstance(lv.get("output_tokens_per_s"), (int, float))
            and lv["output_tokens_per_s"] > 0]


# ---- comparison -----------------------------------------------------------------------------------------------
def compare(summary, baseline):
    """Output throughput of `summary` against `baseline` (another summary, or None): per common concurrency the
    ratio current / baseline, and overall their geometric mean. `reason` says why there is no ratio, if none."""
    result = {"ratio": None, "levels": [], "reason": None, "common_levels": []}
    if not baseline:
        result["reason"] = "no baseline to compare with"
        return result
    result["baseline"] = dict((k, baseline.get(k)) for k in ("identity", "host", "timestamp", "label"))
    current = dict((lv["concurrency"], lv) for lv in measured(summary))
    before = dict((lv["concurrency"], lv) for lv in measured(baseline))
    common = sorted(set(current) & set(before))
    for level in common:
        ratio = current[level]["output_tokens_per_s"] / before[level]["output_tokens_per_s"]
        result["levels"].append({"concurrency": level, "output_tokens_per_s": current[level]["output_tokens_per_s"],
                                 "baseline_output_tokens_per_s": before[level]["output_tokens_per_s"],
                                 "ratio": round(ratio, 4)})
    result["common_levels"] = common
    if not common:
        result["reason"] = ("nothing comparable: no concurrency with a measured output throughput in both runs "
                            "(this run: %s; baseline: %s)" % (_levels_text(current), _levels_text(before)))
        return result
    ratios = [current[c]["output_tokens_per_s"] / before[c]["output_tokens_per_s"] for c in common]
    result["ratio"] = round(math.exp(sum(math.log(r) for r in ratios) / len(ratios)), 4)
    return result


def _levels_text(levels):
    return ", ".join(str(c) for c in sorted(levels)) or "none"


# ---- result files ---------------------------------------------------------------------------------------------
def safe_name(text):
    return re.sub(r"[^A-Za-z0-9._-]+", "_", str(text)).strip("_") or "x"


def result_stem(host, identity, stamp):
    """`<host>-<identity>-<UTC stamp>` (stamp: 20261124T221911Z)."""
    return "%s-%s-%s" % (safe_name(host), safe_name(identity), stamp)


def summary_model(summary):
    """The model a result was taken on (kimi_model): a result written before models were data served the default."""
    return (summary or {}).get("kimi_model") or DEFAULT_MODEL


def other_model(baseline, kimi_model):
    """Why `baseline` is no baseline for a run of `kimi_model` (another model's throughput: the A/B compares like
    with like), or None when it served the same model."""
    served = summary_model(baseline)
    if baseline and served != (kimi_model or DEFAULT_MODEL):
        return "the baseline served %s, this run %s: another model's throughput is never compared" % (
            served, kimi_model or DEFAULT_MODEL)
    return None


def find_last_run(result_dir, host, identity, before, workload="chat", kimi_model=None):
    """(path, summary) of the newest complete result in result_dir for this host AND identity AND model AND workload
    with a timestamp earlier than `before` (ISO text), or (None, None). The files' contents decide, not their names; a
    run that was killed or missed a level (complete: false) is never a baseline, nor one of another model (the same
    quant-engine of another kimi_model)."""
    best = (None, None)
    for path in glob.glob(os.path.join(result_dir, "*.json")):
        try:
            with open(path) as handle:
                data = json.load(handle)
        except (OSError, ValueError):
            continue
        if not isinstance(data, dict) or data.get("schema") != SCHEMA or data.get("complete") is False:
            continue
        if data.get("host") != host or data.get("identity") != identity:
            continue
        if other_model(data, kimi_model):
            continue
        if ((data.get("config") or {}).get("workload") or "chat") != workload:
            continue
        stamp = str(data.get("timestamp") or "")
        if stamp >= before:
            continue
        if best[1] is None or stamp > best[1]["timestamp"]:
            best = (path, data)
    return best


def load_summary(path):
    with open(path) as handle:
        data = json.load(handle)
    if not isinstance(data, dict) or not isinstance(data.get("levels"), list):
        raise BenchError("%s is not a serve_bench result (no levels list)" % path)
    return data


# ---- the plot -------------------------------------------------------------------------------------------------
def plot_png(summary, baseline=None):
    """PNG bytes: output throughput vs concurrency (left) and TTFT / ITL p50 and p99 vs concurrency (right), titled
    with the identity and host; the baseline, when given, dashed. Needs matplotlib."""
    import io
    import matplotlib
    matplotlib.use("Agg")
    from matplotlib import pyplot

    fig, (left, right) = pyplot.subplots(1, 2, figsize=(12, 4.8))
    runs = [(summary, "-", "this run", "this run")]
    if baseline:
        runs.append((baseline, "--", "baseline", "baseline %s %s" % (baseline.get("host") or "",
                                                                     baseline.get("timestamp") or "")))
    for data, style, name, long_name in runs:
        levels = measured(data)
        x = [lv["concurrency"] for lv in levels]
        left.plot(x, [lv["output_tokens_per_s"] for lv in levels], style, marker="o", color="tab:blue",
                  label=long_name)
        for key, colour, what in (("ttft_p50_ms", "tab:orange", "TTFT p50"), ("ttft_p99_ms", "tab:red", "TTFT p99"),
                                  ("itl_p50_ms", "tab:green", "ITL p50"), ("itl_p99_ms", "tab:olive", "ITL p99")):
            points = [(lv["concurrency"], lv[key]) for lv in levels if isinstance(lv.get(key), (int, float))]
            if points:
                right.plot([p[0] for p in points], [p[1] for p in points], style, marker="o", color=colour,
                           label="%s (%s)" % (what, name))
    for axes, ylabel, title in ((left, "output tokens/s (all streams)", "Output throughput"),
                                (right, "ms", "Time to first token and inter-token latency")):
        axes.set_xscale("log", base=2)
        axes.set_xlabel("concurrency")
        axes.set_ylabel(ylabel)
        axes.set_title(title, fontsize=10)
        axes.grid(True, which="both", alpha=0.3)
        levels = sorted(set(lv["concurrency"] for lv in summary.get("levels", [])))
        if levels:
            axes.set_xticks(levels)
            axes.set_xticklabels([str(lv) for lv in levels])
        if axes.get_legend_handles_labels()[0]:
            axes.legend(fontsize=7)
    left.set_ylim(bottom=0)
    right.set_yscale("symlog", linthresh=1.0)
    right.set_ylim(bottom=0)
    fig.suptitle("%s on %s%s - %s (%s %s)" % (
        summary.get("identity"), summary.get("host"), " [%s]" % summary["label"] if summary.get("label") else "",
        summary.get("timestamp"), (summary.get("client") or {}).get("name"),
        (summary.get("client") or {}).get("version")))
    fig.tight_layout()
    out = io.BytesIO()
    fig.savefig(out, format="png", dpi=100)
    pyplot.close(fig)
    return out.getvalue()


def collection_root():
    """The folder that holds ansible_collections/ (a checkout's .collections, or Ansible's module payload)."""
    path = os.path.abspath(__file__)
    marker = os.sep + "ansible_collections" + os.sep
    return path[:path.index(marker)] if marker in path else None


PLOT_CODE = ("import json, sys\n"
             "sys.path.insert(0, sys.argv[1])\n"
             "from ansible_collections.kimi.deploy.plugins.module_utils._bench import plot_png\n"
             "args = json.load(sys.stdin)\n"
             "sys.stdout.buffer.write(plot_png(args['summary'], args.get('baseline')))\n")


def plot_command(python):
    """argv that makes the PNG in another interpreter (aiperf's, which has matplotlib): summary and baseline as JSON
    on its stdin, the PNG on its stdout."""
    root = collection_root()
    if root is None:
        raise BenchError("cannot find the collection root of %s" % __file__)
    return [python, "-c", PLOT_CODE, root]


def interpreter_of(executable):
    """The Python interpreter a console script such as aiperf runs with (its #! line), else the `python` beside it."""
    try:
        with open(executable, "rb") as handle:
            first = handle.readline(4096).decode("utf-8", "replace").strip()
    except OSError:
        first = ""
    if first.startswith("#!"):
        words = first[2:].split()
        if words and os.path.basename(words[0]) != "env" and os.access(words[0], os.X_OK):
            return words[0]
    beside = os.path.join(os.path.dirname(executable), "python")
    return beside if os.access(beside, os.X_OK) else sys.executable
