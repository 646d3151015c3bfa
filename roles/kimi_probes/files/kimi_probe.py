# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""kimi-probe: the serving-time accuracy probe (kimi-k26-probe.timer, every kimi_probe_interval), stdlib only.

Asks the engine on the host a small sample of the accuracy probes (a different slice each run, the needle left out),
scores them with the gate's own code (_accuracy.py and _chat_format.py beside this file, the collection's module_utils),
asking in the deployment's model's format (model.json: thinking, reasoning efforts) and writes, for the
node exporter's textfile collector:

    kimi_probe_accuracy{identity}          share of this run's answered sample that passed (0..1)
    kimi_probe_failures_total{identity}    probe cases that failed since the probes were installed
    kimi_probe_last_run_timestamp_seconds  when it last ran

The probes ask the engine on loopback directly: they never pass a fleet gateway, so the usage per client key does
not count them. A run whose requests all got no answer (the engine is down: KimiEngineDown says so) leaves the
accuracy as it was.
"""

import argparse
import json
import os
import sys
import tempfile
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _accuracy as acc  # noqa: E402  (roles/kimi_probes copies the collection's module_utils/_accuracy.py here)


def atomic_write(path, text):
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".kimi-probe-")
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    os.chmod(tmp, 0o644)
    os.rename(tmp, path)


def read_json(path, default):
    try:
        with open(path) as handle:
            return json.load(handle)
    except (IOError, OSError, ValueError):
        return default


def sample(cases, size, offset):
    """`size` cases from `offset` on (wrapping), the needle left out: over the runs every case is asked."""
    pool = [c for c in cases if c["category"] != "needle"]
    return [pool[(offset + i) % len(pool)] for i in range(min(size, len(pool)))], (offset + size) % max(len(pool), 1)


def textfile(identity, accuracy, failures, now):
    label = identity.replace("\\", "\\\\").replace('"', '\\"')
    lines = ["# HELP kimi_probe_accuracy Share of the last serving-time accuracy probe sample that passed (0..1).",
             "# TYPE kimi_probe_accuracy gauge"]
    if accuracy is not None:
        lines.append('kimi_probe_accuracy{identity="%s"} %s' % (label, repr(round(accuracy, 4))))
    lines += ["# HELP kimi_probe_failures_total Serving-time accuracy probe cases that failed.",
              "# TYPE kimi_probe_failures_total counter",
              'kimi_probe_failures_total{identity="%s"} %d' % (label, failures),
              "# HELP kimi_probe_last_run_timestamp_seconds When the serving-time accuracy probe last ran.",
              "# TYPE kimi_probe_last_run_timestamp_seconds gauge",
              "kimi_probe_last_run_timestamp_seconds %d" % now]
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--url", required=True, help="the engine's API on the host")
    parser.add_argument("--env-file", required=True, help="the host's environment file: what serves now")
    parser.add_argument("--probes", required=True, help="a JSON list of probe files' contents")
    parser.add_argument("--sample", type=int, default=8, help="cases a run")
    parser.add_argument("--state", required=True, help="where the rotation and the failure count are kept")
    parser.add_argument("--textfile", required=True, help="the .prom file the node exporter reads")
    parser.add_argument("--max-tokens", type=int, default=2048)
    parser.add_argument("--timeout", type=int, default=120)
    parser.add_argument("--no-tool-calls", action="store_true", help="the engine has no Kimi tool-call parser")
    parser.add_argument("--no-reasoning-split", action="store_true", help="the engine has no Kimi reasoning parser")
    parser.add_argument("--model-file", help="the deployment's model (JSON: chat_format, thinking, reasoning_efforts), "
                                             "whose format the requests follow; absent: Kimi-K2.6's")
    args = parser.parse_args(argv)
    with open(args.env_file) as handle:
        env = dict(line.strip().split("=", 1) for line in handle if "=" in line and not line.startswith("#"))
    args.identity, args.model = "%s-%s" % (env.get("QUANT", "?"), env.get("FRAMEWORK", "?")), env.get("MODEL_NAME")
    with open(args.probes) as handle:
        cases = acc.applicable(acc.load_all(json.load(handle)), not args.no_tool_calls,
                               read_json(args.model_file, None) if args.model_file else None)
    state = read_json(args.state, {})
    if state.get("identity") != args.identity:
        state = {"identity": args.identity, "offset": 0, "failures": 0, "accuracy": None}
    chosen, state["offset"] = sample(cases, args.sample, state.get("offset", 0))
    outcomes, _seconds = acc.run(chosen, args.url, args.model, workers=4, timeout=args.timeout,
                                 max_tokens=args.max_tokens, reasoning_split=not args.no_reasoning_split)
    answered = [o for o in outcomes if not any(p.startswith(("no answer", "HTTP 5")) for p in o["problems"])]
    if answered:
        state["accuracy"] = sum(1 for o in answered if o["ok"]) / float(len(answered))
        state["failures"] = state.get("failures", 0) + sum(1 for o in answered if not o["ok"])
    atomic_write(args.state, json.dumps(state, sort_keys=True) + "\n")
    atomic_write(args.textfile, textfile(args.identity, state["accuracy"], state["failures"], int(time.time())))
    bad = [o for o in answered if not o["ok"]]
    print("kimi-probe: %s: %d of %d answered cases passed%s" % (
        args.identity, len(answered) - len(bad), len(answered),
        "; failing: " + " | ".join("%s: %s" % (o["id"], "; ".join(o["problems"])[:120]) for o in bad[:3]) if bad else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
