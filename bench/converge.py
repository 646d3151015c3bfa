#!/usr/bin/env python
# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Converge benchmark: the real site.yml on the test harness's container GPU hosts, timed by Ansible itself.

Two fleets, one after the other, each created and prepared first (not timed): one host (molecule/demo, as make demo
runs it) and four hosts (molecule/converge_bench, the same inputs and converge). For each it times, with the
profile_tasks callback:

1. the first converge (nothing of the deployment on the hosts: driver, weights, engine, proxy all to do);
2. the second converge, which must change nothing (changed=0 on every host), and whose time is the waste to remove
   (one host: three no-op runs, the median counts; the machine is shared and one run can be 10-20 % off).

It prints the figures, the time per stage from site.yml's own per-host summary, the slowest tasks of the no-op
converge, and these ratios against their goals (issue 12): no-op / first converge of one host <= 0.5; first converge
of four hosts / of one host <= 2.5. It exits 0 whatever the ratios say (1 when a run fails) and writes the figures to
bench/results/converge-<date>.json. About 8 minutes on a 2-core machine. `make bench-converge` runs it.
"""

from __future__ import absolute_import, division, print_function

import argparse
import datetime
import json
import os
import re
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORK = os.path.join(ROOT, "build", "bench-converge")
STAGES = ("preflight", "nvidia_host", "weights", "image", "serve", "proxy")


def molecule(scenario, command, env, extra=()):
    args = [os.path.join(ROOT, ".venv", "bin", "molecule"), "--base-config", ".config/molecule/config.yml", command,
            "-s", scenario]
    if extra:
        args += ["--"] + list(extra)
    start = time.monotonic()
    proc = subprocess.run(args, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          universal_newlines=True, check=False)
    return proc.returncode, proc.stdout, time.monotonic() - start


def ansible_seconds(out):
    """The playbook's own run time: the last profile_tasks header ('... 0:01:02.345 ****')."""
    stamps = re.findall(r"\)\s+(\d+):(\d\d):(\d\d\.\d+) \*+$", out, re.M)
    if not stamps:
        return None
    h, m, s = stamps[-1]
    return int(h) * 3600 + int(m) * 60 + float(s)


def changed_per_host(out):
    recap = out[out.rindex("PLAY RECAP"):] if "PLAY RECAP" in out else ""
    return {h: int(c) for h, c in re.findall(r"^(\S+)\s+: ok=\d+\s+changed=(\d+)", recap, re.M) if h != "localhost"}


def stage_seconds(out):
    """{host: {stage: seconds}} from site.yml's summary lines (printed as JSON by the json result format)."""
    result = {}
    for host, text in re.findall(r'"(\S+): (?:serving|PLAN)[^"]*".*?"stages: ([^"]*)"', out, re.S):
        result[host] = {s: float(v) for s, v in re.findall(r"(\w+) ([\d.]+) s", text) if s in STAGES}
    return result


def slowest_tasks(out, n):
    block = out[out.rindex("TASKS RECAP"):] if "TASKS RECAP" in out else ""
    rows = re.findall(r"^(.+?) -+ (\d+\.\d+)s$", block, re.M)
    return [(name.strip(), float(s)) for name, s in rows[:n]]


def run_fleet(name, scenario, hosts, env, keep, noop_runs=1):
    env = dict(env, MOLECULE_EPHEMERAL_DIRECTORY=os.path.join(WORK, name, "molecule"))
    os.makedirs(env["MOLECULE_EPHEMERAL_DIRECTORY"], exist_ok=True)
    molecule(scenario, "destroy", env)
    for step in ("create", "prepare"):
        rc, out, took = molecule(scenario, step, env)
        print("  %-8s %s: %.0f s (not timed in the figures)" % (name, step, took), flush=True)
        if rc != 0:
            print(out[-3000:])
            raise SystemExit("%s %s failed" % (scenario, step))
    runs = {}
    labels = ["first"] + ["noop"] * noop_runs
    for n, label in enumerate(labels):
        rc, out, took = molecule(scenario, "converge", env)
        with open(os.path.join(WORK, name, "converge-%s%s.log" % (label, "-%d" % n if n > 1 else "")), "w") as f:
            f.write(out)
        if rc != 0:
            print(out[-3000:])
            raise SystemExit("%s converge (%s) failed" % (scenario, label))
        run = {"seconds": ansible_seconds(out), "wall_s": round(took, 1), "changed": changed_per_host(out),
               "stages": stage_seconds(out), "slowest": slowest_tasks(out, 12)}
        runs.setdefault(label + "_runs", []).append(run)
        print("  %-8s %s converge: %.1f s (changed: %s)" % (name, label, run["seconds"], run["changed"]), flush=True)
    # The median no-op run (the machine is shared: one run can be 10-20 % off)
    noops = sorted(runs["noop_runs"], key=lambda r: r["seconds"])
    runs["first"], runs["noop"] = runs["first_runs"][0], noops[len(noops) // 2]
    runs["noop_seconds_all"] = [r["seconds"] for r in runs["noop_runs"]]
    if len(runs["first"]["changed"]) != hosts:
        raise SystemExit("%s: expected %d hosts in the recap, got %s" % (name, hosts, runs["first"]["changed"]))
    if not keep:
        molecule(scenario, "destroy", env)
    return runs


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    ap.add_argument("--keep", action="store_true", help="keep the instances (molecule login -s ... to look)")
    ap.add_argument("--only", choices=["1", "4"], help="only the one-host or the four-host fleet")
    ap.add_argument("--noop-runs", type=int, default=3, help="no-op converges of the one host; the median counts")
    args = ap.parse_args()
    os.makedirs(WORK, exist_ok=True)
    key_file = os.path.join(WORK, "client-key")
    if not os.path.exists(key_file):
        with os.fdopen(os.open(key_file, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
            f.write("kimi-bench-" + os.urandom(24).hex() + "\n")
    env = dict(os.environ, PATH=os.path.join(ROOT, ".venv", "bin") + os.pathsep + os.environ["PATH"],
               KIMI_DEMO_KEY_FILE=key_file, KIMI_DEMO_INSTANCE="kimi-bench-solo", KIMI_DEMO_PORT="18502",
               ANSIBLE_CALLBACKS_ENABLED="ansible.posix.profile_tasks", PROFILE_TASKS_TASK_OUTPUT_LIMIT="12",
               ANSIBLE_CALLBACK_RESULT_FORMAT="json", PY_COLORS="0", ANSIBLE_FORCE_COLOR="0", NO_COLOR="1")
    env.pop("ANSIBLE_CONFIG", None)
    if subprocess.run([os.path.join(ROOT, "tests", "harness", "prepare.sh")], cwd=ROOT, stdout=subprocess.DEVNULL,
                      stderr=subprocess.DEVNULL, check=False).returncode != 0:
        raise SystemExit("tests/harness/prepare.sh failed")
    results = {"date": datetime.date.today().isoformat(), "cpus": os.cpu_count(), "fleets": {}}
    print("converge benchmark (site.yml on the harness; %d CPUs)" % os.cpu_count(), flush=True)
    if args.only != "4":
        results["fleets"]["1"] = run_fleet("1-host", "demo", 1, env, args.keep, noop_runs=args.noop_runs)
    if args.only != "1":
        results["fleets"]["4"] = run_fleet("4-hosts", "converge_bench", 4, env, args.keep)

    print()
    one, four = results["fleets"].get("1"), results["fleets"].get("4")
    rows = []
    if one:
        rows.append(("1 host, first converge", one["first"]["seconds"], ""))
        ratio = one["noop"]["seconds"] / one["first"]["seconds"]
        ok = ratio <= 0.5 and not any(c for r in one["noop_runs"] for c in r["changed"].values())
        rows.append(("1 host, no-op converge", one["noop"]["seconds"],
                     "%.2fx the first (goal <= 0.5x, changed=0): %s; median of %s s" % (
                         ratio, "PASS" if ok else "MISS", one["noop_seconds_all"])))
        results["noop_ratio"] = round(ratio, 3)
    if four:
        rows.append(("4 hosts, first converge", four["first"]["seconds"], ""))
        rows.append(("4 hosts, no-op converge", four["noop"]["seconds"],
                     "changed=0 on every host: %s" % ("PASS" if not any(four["noop"]["changed"].values()) else "MISS")))
    if one and four:
        ratio = four["first"]["seconds"] / one["first"]["seconds"]
        verdict = "PASS" if ratio <= 2.5 else "MISS"
        rows.append(("4 hosts / 1 host, first", None, "%.2fx (goal <= 2.5x): %s" % (ratio, verdict)))
        results["fleet_ratio"] = round(ratio, 3)
    for label, seconds, note in rows:
        print("%-28s %8s  %s" % (label, "%.1f s" % seconds if seconds is not None else "", note))
    print()
    print("time per stage (site.yml's summary; 4 hosts: the slowest host)")
    print("%-28s " % "" + " ".join("%11s" % s for s in STAGES))
    for name, fleet in (("1 host", one), ("4 hosts", four)):
        if not fleet:
            continue
        for label in ("first", "noop"):
            per_host = fleet[label]["stages"].values()
            cells = [max((h.get(s, 0.0) for h in per_host), default=0.0) for s in STAGES]
            print("%-28s " % ("%s, %s" % (name, label)) + " ".join("%9.1f s" % c for c in cells))
    if one:
        print()
        print("slowest tasks of the no-op converge (1 host, profile_tasks)")
        for task, seconds in one["noop"]["slowest"]:
            print("  %6.2f s  %s" % (seconds, task[:100]))
    out = os.path.join(ROOT, "bench", "results", "converge-%s.json" % results["date"])
    with open(out, "w") as f:
        json.dump(results, f, indent=1, sort_keys=True)
    print("\nfigures: %s" % os.path.relpath(out, ROOT))
    return 0


if __name__ == "__main__":
    sys.exit(main())
