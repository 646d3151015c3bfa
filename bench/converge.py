#!/usr/bin/env python
# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Converge benchmark: the real site.yml on the test harness's container GPU hosts, timed by Ansible itself.

Two fleets, one after the other, each created and prepared first (not timed): one host (molecule/demo, as make demo
runs it) and N hosts (--hosts, default 8: molecule/converge_bench, the same inputs and converge, its platforms
written into a base config of its own). For each it times, with the profile_tasks callback:

1. the first converge (nothing of the deployment on the hosts: driver, weights, engine, proxy all to do);
2. the second converge, which must change nothing (changed=0 on every host), and whose time is the waste to remove
   (one host: three no-op runs, the median counts; the machine is shared and one run can be 10-20 % off);
3. an identity switch (int4-sglang -> int4-vllm, same weights): its Ansible time is the run's time less the time spent
   waiting for the engine to load (the readiness task; on a real host that is the model load, not Ansible).

It prints the figures, the time per stage from site.yml's own per-host summary, the ten slowest tasks of each run,
and the ratios against their goals (issue 34): one host's no-op <= 10 s, first <= 50 s, switch's Ansible time
<= 20 s; N hosts' no-op <= 2x one host's. It exits 0 whatever the ratios say (1 when a run fails) and writes the
figures to bench/results/converge-<date>-<sizes>-host(s).json (e.g. -1-and-8-hosts). `make bench-converge [HOSTS=N]` runs it.
"""

from __future__ import absolute_import, division, print_function

import argparse
import copy
import datetime
import json
import os
import re
import subprocess
import sys
import time

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORK = os.path.join(ROOT, "build", "bench-converge")
STAGES = ("preflight", "host", "weights", "image", "serve", "proxy")


BASE_CONFIG = os.path.join(ROOT, ".config", "molecule", "config.yml")
# The readiness wait: the engine loading, which Ansible only watches (kimi_serve's wait.yml)
ENGINE_WAIT_TASKS = ("Print the load progress until the engine is ready",)


def fleet_base_config(hosts):
    """The shared molecule config with `hosts` demo hosts as its platforms (converge_bench lists none of its own)."""
    with open(BASE_CONFIG) as f:
        config = yaml.safe_load(f)
    config = copy.deepcopy(config)
    image = "${KIMI_TEST_IMAGE_DOCKER:-kimi-test/debian-systemd:trixie-docker}"
    config["platforms"] = [{"name": "kimi-bench-%d" % i, "image": image,
                            "groups": ["kimi_servers", "nested_docker", "engine_images", "gpu_host", "fake_hub"]}
                           for i in range(1, hosts + 1)]
    path = os.path.join(WORK, "base-config-%d-hosts.yml" % hosts)
    os.makedirs(WORK, exist_ok=True)
    with open(path, "w") as f:
        yaml.safe_dump(config, f, sort_keys=False)
    return path


def molecule(scenario, command, env, extra=()):
    args = [os.path.join(ROOT, ".venv", "bin", "molecule"), "--base-config",
            env.get("KIMI_BENCH_BASE_CONFIG", BASE_CONFIG), command, "-s", scenario]
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


def task_seconds(out):
    """Every task's time from profile_tasks' recap (PROFILE_TASKS_TASK_OUTPUT_LIMIT=all), slowest first."""
    block = out[out.rindex("TASKS RECAP"):] if "TASKS RECAP" in out else ""
    rows = re.findall(r"^(.+?) -+ (\d+\.\d+)s$", block, re.M)
    return [(name.strip(), float(s)) for name, s in rows]


def slowest_tasks(out, n):
    return task_seconds(out)[:n]


def engine_wait_seconds(out):
    return sum(t for name, t in task_seconds(out) if name.split(" : ", 1)[-1] in ENGINE_WAIT_TASKS)


def run_fleet(name, scenario, hosts, env, keep, noop_runs=1, switch=True):
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
    labels = ["first"] + ["noop"] * noop_runs + (["switch"] if switch else [])
    for n, label in enumerate(labels):
        extra = ("-e", "quant=int4", "-e", "engine=vllm") if label == "switch" else ()
        rc, out, took = molecule(scenario, "converge", env, extra)
        with open(os.path.join(WORK, name, "converge-%s%s.log" % (label, "-%d" % n if n > 1 else "")), "w") as f:
            f.write(out)
        if rc != 0:
            print(out[-3000:])
            raise SystemExit("%s converge (%s) failed" % (scenario, label))
        run = {"seconds": ansible_seconds(out), "wall_s": round(took, 1), "changed": changed_per_host(out),
               "stages": stage_seconds(out), "slowest": slowest_tasks(out, 10),
               "engine_wait_s": round(engine_wait_seconds(out), 1)}
        run["ansible_s"] = round(run["seconds"] - run["engine_wait_s"], 1)
        runs.setdefault(label + "_runs", []).append(run)
        print("  %-8s %s converge: %.1f s, %.1f s of it waiting on the engine (changed: %s)"
              % (name, label, run["seconds"], run["engine_wait_s"], run["changed"]), flush=True)
    # The median no-op run (the machine is shared: one run can be 10-20 % off)
    noops = sorted(runs["noop_runs"], key=lambda r: r["seconds"])
    runs["first"], runs["noop"] = runs["first_runs"][0], noops[len(noops) // 2]
    runs["noop_seconds_all"] = [r["seconds"] for r in runs["noop_runs"]]
    if switch:
        runs["switch"] = runs["switch_runs"][0]
    if len(runs["first"]["changed"]) != hosts:
        raise SystemExit("%s: expected %d hosts in the recap, got %s" % (name, hosts, runs["first"]["changed"]))
    if not keep:
        molecule(scenario, "destroy", env)
    return runs


GOALS = {"noop": 10.0, "first": 50.0, "switch": 20.0, "fleet_noop_ratio": 2.0}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    ap.add_argument("--keep", action="store_true", help="keep the instances (molecule login -s ... to look)")
    ap.add_argument("--hosts", type=int, default=8, help="hosts in the fleet (default 8)")
    ap.add_argument("--only", choices=["1", "fleet"], help="only the one-host or only the N-host fleet")
    ap.add_argument("--noop-runs", type=int, default=3, help="no-op converges of the one host; the median counts")
    args = ap.parse_args()
    if not 2 <= args.hosts <= 16:
        ap.error("--hosts (HOSTS=) must be 2 to 16, got %d" % args.hosts)
    os.makedirs(WORK, exist_ok=True)
    # The demo's site inputs read the client key and the metrics key (the host is its own monitoring host) from
    # these files, as make demo's do.
    key_files = {}
    for name, prefix in (("client-key", "kimi-bench-"), ("metrics-key", "kimi-bench-metrics-")):
        key_files[name] = os.path.join(WORK, name)
        if not os.path.exists(key_files[name]):
            with os.fdopen(os.open(key_files[name], os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
                f.write(prefix + os.urandom(24).hex() + "\n")
    env = dict(os.environ, PATH=os.path.join(ROOT, ".venv", "bin") + os.pathsep + os.environ["PATH"],
               KIMI_DEMO_KEY_FILE=key_files["client-key"], KIMI_DEMO_METRICS_KEY_FILE=key_files["metrics-key"],
               KIMI_DEMO_INSTANCE="kimi-bench-solo", KIMI_DEMO_PORT="18502",
               ANSIBLE_CALLBACKS_ENABLED="ansible.posix.profile_tasks", PROFILE_TASKS_TASK_OUTPUT_LIMIT="all",
               ANSIBLE_CALLBACK_RESULT_FORMAT="json", PY_COLORS="0", ANSIBLE_FORCE_COLOR="0", NO_COLOR="1")
    env.pop("ANSIBLE_CONFIG", None)
    if subprocess.run([os.path.join(ROOT, "tests", "harness", "prepare.sh"), "demo"], cwd=ROOT,
                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False).returncode != 0:
        raise SystemExit("tests/harness/prepare.sh failed")
    strategy = env.get("KIMI_ANSIBLE_STRATEGY", "kimi.deploy.kimi_mitogen_linear")
    results = {"date": datetime.date.today().isoformat(), "cpus": os.cpu_count(), "strategy": strategy,
               "hosts": args.hosts, "fleets": {}}
    print("converge benchmark (site.yml on the harness; %d CPUs; strategy %s)" % (os.cpu_count(), strategy),
          flush=True)
    n = args.hosts
    if args.only != "fleet":
        results["fleets"]["1"] = run_fleet("1-host", "demo", 1, env, args.keep, noop_runs=args.noop_runs)
    if args.only != "1":
        fleet_env = dict(env, KIMI_BENCH_BASE_CONFIG=fleet_base_config(n))
        results["fleets"][str(n)] = run_fleet("%d-hosts" % n, "converge_bench", n, fleet_env, args.keep)

    print()
    one, many = results["fleets"].get("1"), results["fleets"].get(str(n))

    def verdict(ok):
        return "PASS" if ok else "MISS"

    rows = []
    for name, fleet in (("1 host", one), ("%d hosts" % n, many)):
        if not fleet:
            continue
        noop_changed = any(c for r in fleet["noop_runs"] for c in r["changed"].values())
        rows.append(("%s, first converge" % name, fleet["first"]["seconds"],
                     "goal <= %.0f s: %s" % (GOALS["first"], verdict(fleet["first"]["seconds"] <= GOALS["first"]))
                     if fleet is one else ""))
        rows.append(("%s, no-op converge" % name, fleet["noop"]["seconds"],
                     "changed=0: %s%s" % (verdict(not noop_changed), "; goal <= %.0f s: %s; median of %s s" % (
                         GOALS["noop"], verdict(fleet["noop"]["seconds"] <= GOALS["noop"]), fleet["noop_seconds_all"])
                         if fleet is one else "")))
        sw = fleet["switch"]
        rows.append(("%s, switch (Ansible)" % name, sw["ansible_s"],
                     "%.1f s in all, %.1f s waiting on the engine%s" % (
                         sw["seconds"], sw["engine_wait_s"], "; goal <= %.0f s: %s" % (
                             GOALS["switch"], verdict(sw["ansible_s"] <= GOALS["switch"])) if fleet is one else "")))
    if one and many:
        ratio = many["noop"]["seconds"] / one["noop"]["seconds"]
        rows.append(("%d hosts / 1 host, no-op" % n, None, "%.2fx (goal <= %.0fx): %s" % (
            ratio, GOALS["fleet_noop_ratio"], verdict(ratio <= GOALS["fleet_noop_ratio"]))))
        results["fleet_noop_ratio"] = round(ratio, 3)
    for label, seconds, note in rows:
        print("%-30s %8s  %s" % (label, "%.1f s" % seconds if seconds is not None else "", note))
    print()
    print("time per stage (site.yml's summary; a fleet: its slowest host)")
    print("%-30s " % "" + " ".join("%11s" % s for s in STAGES))
    for name, fleet in (("1 host", one), ("%d hosts" % n, many)):
        if not fleet:
            continue
        for label in ("first", "noop", "switch"):
            per_host = fleet[label]["stages"].values()
            cells = [max((h.get(s, 0.0) for h in per_host), default=0.0) for s in STAGES]
            print("%-30s " % ("%s, %s" % (name, label)) + " ".join("%9.1f s" % c for c in cells))
    for name, fleet in (("1 host", one), ("%d hosts" % n, many)):
        for label in ("first", "noop", "switch") if fleet else ():
            print()
            print("ten slowest tasks, %s, %s converge (profile_tasks)" % (name, label))
            for task, seconds in fleet[label]["slowest"]:
                print("  %6.2f s  %s" % (seconds, task[:100]))
    # Named by the fleets it holds: a run with --only does not overwrite another run's figures of the same day.
    sizes = sorted(int(k) for k in results["fleets"])
    out = os.path.join(ROOT, "bench", "results", "converge-%s-%s-host%s.json" % (
        results["date"], "-and-".join(str(k) for k in sizes), "s" if sizes[-1] > 1 else ""))
    with open(out, "w") as f:
        json.dump(results, f, indent=1, sort_keys=True)
    print("\nfigures: %s" % os.path.relpath(out, ROOT))
    return 0


if __name__ == "__main__":
    sys.exit(main())
