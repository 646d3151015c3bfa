#!/usr/bin/env python
# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Download benchmark: kimi.deploy.hf_snapshot against huggingface_hub.snapshot_download, on loopback.

One run starts the fake hub (tests/doubles/hub) in this process with a repo of --size bytes, puts a per-connection
cap on its CDN (the rate_limit_bps fault, --cap-bps), and measures, in this order:

1. context: --connections workers running one curl per --chunk-size range of every shard into /dev/null, without
   the cap (what loopback, the fake hub and curl do on this machine) and with it (the most any client gets here);
2. huggingface_hub.snapshot_download (HF_HUB_DISABLE_XET=1) in a fresh interpreter, max_workers=--hf-workers;
3. the hf_snapshot module into an empty cache; again (the re-run, which must be changed=false from the verification
   record); then with verify=full (every blob re-hashed; the blobs are in the page cache);
4. hash rates: sha256sum of one shard run twice (the second is timed), openssl and hashlib on it, one sha256sum
   process per core at once, and the module's hash_file on one thread per core.

It prints the measurements and one PASS/MISS line per target, and exits 0 whatever they say: 1 when a step fails,
2 on bad options. Run it with the project's virtualenv: `make setup`, then `make bench` or
`.venv/bin/python bench/hf_download.py`. Only one cache is on disk at a time. Nothing is dropped from the page
cache (that needs root); sync() runs between the downloads so that one does not pay for another's writeback.
"""

from __future__ import absolute_import, division, print_function

import argparse
import json
import math
import os
import platform
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time

from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COLLECTIONS = os.path.join(ROOT, ".collections")
MODULE = os.path.join(ROOT, "plugins", "modules", "hf_snapshot.py")
FAKE_HUB_DIR = os.path.join(ROOT, "tests", "doubles", "hub")
REPO_ID = "moonshotai/Kimi-K2.6"
MiB = 1 << 20
GiB = 1 << 30
SHARD_MAX = 512 * MiB  # default shards: at most this size, and at least one per CPU

HF_SCRIPT = r"""
import json, sys, time
t0 = time.monotonic()
from huggingface_hub import snapshot_download, __version__
t1 = time.monotonic()
path = snapshot_download(sys.argv[1], revision=sys.argv[2], max_workers=int(sys.argv[3]))
t2 = time.monotonic()
print(json.dumps({"import_s": t1 - t0, "download_s": t2 - t1, "path": path, "version": __version__}))
"""


class BenchError(Exception):
    pass


def log(msg):
    sys.stderr.write("[bench %s] %s\n" % (time.strftime("%H:%M:%S"), msg))
    sys.stderr.flush()


def parse_size(text):
    """'4GiB' -> 4294967296, '1.5GB' -> 1500000000, '123' -> 123."""
    match = re.match(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([kmgt]?)(i?)b?\s*$", str(text), re.I)
    if not match:
        raise argparse.ArgumentTypeError("bad size %r (examples: 4GiB, 1.5GB, 800MiB, 123456)" % text)
    power = " kmgt".index((match.group(2) or " ").lower())
    return int(float(match.group(1)) * (1024 if match.group(3) else 1000) ** power)


def human(count):
    """The collection's one byte formatter (_files.human_size, decimal units), as the module and job_progress print."""
    if COLLECTIONS not in sys.path:
        sys.path.insert(0, COLLECTIONS)
    from ansible_collections.kimi.deploy.plugins.module_utils._files import human_size  # pylint: disable=import-error
    return human_size(count)


def loadavg():
    return " ".join("%.2f" % x for x in os.getloadavg())


def machine_busy_s():
    """CPU seconds the whole machine has been busy since boot (every process, ours and anyone else's)."""
    try:
        with open("/proc/stat") as handle:
            fields = [int(x) for x in handle.readline().split()[1:]]
    except (IOError, OSError, ValueError):
        return 0.0
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return (sum(fields[:8]) - idle) / float(os.sysconf("SC_CLK_TCK"))


class Meter(object):
    """One phase: wall time, and CPU seconds of this process (the fake hub's threads; the benchmark itself only
    waits), of the children it reaped (the client and its curl processes) and of the rest of the machine."""

    def __enter__(self):
        self.start = self.sample()
        return self

    def __exit__(self, *exc):
        end = self.sample()
        self.wall = end[0] - self.start[0]
        self.hub_cpu = end[1] - self.start[1]
        self.client_cpu = end[2] - self.start[2]
        self.other_cpu = max(0.0, end[3] - self.start[3] - self.hub_cpu - self.client_cpu)
        return False

    @staticmethod
    def sample():
        own = resource.getrusage(resource.RUSAGE_SELF)
        kids = resource.getrusage(resource.RUSAGE_CHILDREN)
        return time.monotonic(), own.ru_utime + own.ru_stime, kids.ru_utime + kids.ru_stime, machine_busy_s()

    def cpu(self):
        return {"wall_s": round(self.wall, 3), "hub_cpu_s": round(self.hub_cpu, 2), "client_cpu_s": round(self.client_cpu, 2),
                "other_cpu_s": round(self.other_cpu, 2)}


def run_watched(argv, env, cwd):
    """Run a command: (exit code, stdout, stderr, meter, CPU seconds of the process itself, without its children),
    the last from /proc/PID/stat, sampled until it exits."""
    tick = float(os.sysconf("SC_CLK_TCK"))
    own = [0.0]
    with Meter() as meter:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=cwd)
        done = threading.Event()

        def watch():
            while not done.wait(0.05):
                try:
                    with open("/proc/%d/stat" % proc.pid) as handle:
                        fields = handle.read().rsplit(")", 1)[1].split()
                except (IOError, OSError, IndexError):
                    return
                if fields[0] == "Z":
                    return
                own[0] = (int(fields[11]) + int(fields[12])) / tick  # utime + stime
        watcher = threading.Thread(target=watch)
        watcher.start()
        out, err = proc.communicate()
        done.set()
        watcher.join()
    return proc.returncode, out, err, meter, own[0]


def run_module(args, params, label):
    """hf_snapshot.py run directly, as Ansible runs it on a target: (its JSON result, meter, its own CPU s)."""
    path = os.path.join(args.run_dir, "args-%s.json" % label)
    with open(path, "w") as handle:
        json.dump({"ANSIBLE_MODULE_ARGS": params}, handle)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [COLLECTIONS, env.get("PYTHONPATH")]))
    code, out, err, meter, own = run_watched([sys.executable, MODULE, path], env, args.run_dir)
    try:
        result = json.loads(out.decode("utf-8", "replace").strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise BenchError("hf_snapshot (%s) exited %d without a JSON result: %s" % (
            label, code, (err or out).decode("utf-8", "replace")[-2000:]))
    if code != 0 or result.get("failed"):
        raise BenchError("hf_snapshot (%s) failed: %s" % (label, result.get("msg", result)))
    return result, meter, own


def run_hf(args, hub, commit):
    """snapshot_download in a fresh interpreter with its own HF_HOME: (its JSON line, meter, its CPU s)."""
    env = dict((k, v) for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE_")))
    env.update(HF_HOME=os.path.join(args.run_dir, "hf"), HF_ENDPOINT=hub.url, HF_HUB_DISABLE_XET="1",
               HF_HUB_DISABLE_TELEMETRY="1", HF_HUB_DISABLE_PROGRESS_BARS="1", HF_HUB_ENABLE_HF_TRANSFER="0")
    argv = [sys.executable, "-c", HF_SCRIPT, REPO_ID, commit, str(args.hf_workers)]
    code, out, err, meter, own = run_watched(argv, env, args.run_dir)
    if code != 0:
        raise BenchError("huggingface_hub run failed (exit %d): %s" % (code, err.decode("utf-8", "replace")[-2000:]))
    return json.loads(out.decode("utf-8").strip().splitlines()[-1]), meter, own


def snapshot_bytes(path):
    total = 0
    for folder, dummy, files in os.walk(path):
        for name in files:
            total += os.path.getsize(os.path.join(folder, name))  # follows the symlinks into blobs/
    return total


def curl_fetch_all(args, hub, repo):
    """Every LFS file in chunk_size ranges from the CDN, by `connections` workers each running one curl per range
    into /dev/null, as the module does minus the module: (bytes, meter)."""
    queue = []
    for item in repo.files:
        if item.lfs:
            url = hub.sign_cdn_url(repo, item)
            for start in range(0, item.size, args.chunk_size):
                queue.append((url, start, min(item.size, start + args.chunk_size)))
    queue.reverse()
    lock = threading.Lock()
    totals = {"bytes": 0, "errors": []}

    def worker():
        while True:
            with lock:
                if not queue or totals["errors"]:
                    return
                url, start, end = queue.pop()
            proc = subprocess.run(["curl", "-sS", "-o", "/dev/null", "-w", "%{http_code} %{size_download}",
                                   "-r", "%d-%d" % (start, end - 1), url], stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=False)
            fields = proc.stdout.decode().split()
            with lock:
                if proc.returncode != 0 or fields[:1] != ["206"] or int(fields[1]) != end - start:
                    totals["errors"].append("curl exit %d, %s %s" % (proc.returncode, proc.stdout.decode(), proc.stderr.decode()[-200:]))
                else:
                    totals["bytes"] += end - start

    threads = [threading.Thread(target=worker) for dummy in range(args.connections)]
    with Meter() as meter:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    if totals["errors"]:
        raise BenchError("curl -> /dev/null: %s" % totals["errors"][0])
    return totals["bytes"], meter


def timed_command(argv):
    """(seconds, first word of stdout)."""
    start = time.monotonic()
    proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=False)
    seconds = time.monotonic() - start
    if proc.returncode != 0:
        raise BenchError("%s failed: %s" % (" ".join(argv), proc.stderr.decode("utf-8", "replace")[-500:]))
    return seconds, proc.stdout.decode("utf-8", "replace").split()[0]


def parallel_sha256sum(paths):
    """One sha256sum per file, all at once: what the cores give together (shared caches, memory bandwidth)."""
    start = time.monotonic()
    procs = [subprocess.Popen(["sha256sum", path], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) for path in paths]
    errors = []
    for proc in procs:
        err = proc.stderr.read()
        proc.stderr.close()
        if proc.wait() != 0:
            errors.append(err.decode("utf-8", "replace")[-300:])
    if errors:
        raise BenchError("sha256sum failed: %s" % errors[0])
    return time.monotonic() - start


def hash_rates(args, blobs, shard_path, shard_size):
    """Hash rates on files in the page cache (the module just hashed them all)."""
    sys.path.insert(0, COLLECTIONS)
    from ansible_collections.kimi.deploy.plugins.module_utils._hf.cache import hash_file  # pylint: disable=import-error
    out = {"file_bytes": shard_size}
    timed_command(["sha256sum", shard_path])
    seconds, digest = timed_command(["sha256sum", shard_path])
    out["sha256sum"] = {"seconds": seconds, "rate": shard_size / seconds}
    if shutil.which("openssl"):
        seconds = timed_command(["openssl", "dgst", "-sha256", "-r", shard_path])[0]
        out["openssl"] = {"seconds": seconds, "rate": shard_size / seconds}
    start = time.monotonic()
    if hash_file(shard_path, "sha256", shard_size) != digest:
        raise BenchError("hashlib and sha256sum disagree on %s" % shard_path)
    seconds = time.monotonic() - start
    out["hashlib"] = {"seconds": seconds, "rate": shard_size / seconds}
    shards = sorted(path for path, size in blobs if size == shard_size)[:args.cores]
    seconds = parallel_sha256sum(shards)
    count = len(shards) * shard_size
    out["sha256sum_parallel"] = {"seconds": seconds, "rate": count / seconds, "bytes": count, "processes": len(shards)}
    start = time.monotonic()
    with ThreadPoolExecutor(max_workers=args.cores) as pool:
        list(pool.map(lambda blob: hash_file(blob[0], "sha256", blob[1]), blobs))
    seconds = time.monotonic() - start
    count = sum(size for path, size in blobs)
    out["hash_pool"] = {"seconds": seconds, "rate": count / seconds, "bytes": count, "threads": args.cores}
    return out


def clean(path):
    if os.path.exists(path):
        shutil.rmtree(path)
    os.sync()


def plan_size(args):
    """(workdir's file system, free bytes, shards, shard size, notes): --size shrunk to a third of the free space."""
    base = args.workdir or tempfile.gettempdir()
    free = shutil.disk_usage(base).free
    notes = []
    size = args.size
    if free < 3 * size:
        size = max(64 * MiB, free // 3 // MiB * MiB)
        notes.append("only %s free on %s: --size shrunk from %s to %s, a third of it" % (human(free), base, human(args.size), human(size)))
    # The module hashes files in parallel, not parts of a file (sha256 is sequential): with fewer files than CPUs, verify
    # cannot use every core. The real repo has 64 shards of about 9 GB; give every CPU one at least.
    shards = args.shards or max(int(math.ceil(size / float(SHARD_MAX))), args.cores)
    return base, free, shards, max(MiB, size // shards // MiB * MiB), notes


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--size", type=parse_size, default=4 * GiB, help="total bytes of the shards (4GiB, 800MiB, 1.5GB...)")
    parser.add_argument("--shards", type=int, default=0, help="number of shards (0: at most 512 MiB each, at least one per CPU)")
    parser.add_argument("--cap-bps", type=float, default=50e6, help="per-connection cap on the CDN, bytes/s (0: no cap)")
    parser.add_argument("--connections", type=int, default=16, help="hf_snapshot connections")
    parser.add_argument("--hf-workers", type=int, default=8, help="huggingface_hub max_workers")
    parser.add_argument("--chunk-size", type=parse_size, default=64 * MiB, help="hf_snapshot chunk_size, bytes per range request")
    parser.add_argument("--hash-workers", type=int, default=0, help="hf_snapshot hash_workers (0: the module's default, the CPUs)")
    parser.add_argument("--workdir", help="folder for the caches (default: a new folder in $TMPDIR)")
    parser.add_argument("--keep", action="store_true", help="keep the caches")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the tables")
    parser.add_argument("--skip-hf", action="store_true", help="skip the huggingface_hub run")
    parser.add_argument("--skip-ceiling", action="store_true", help="skip the curl -> /dev/null runs")
    args = parser.parse_args(argv)
    if min(args.connections, args.hf_workers) < 1 or min(args.shards, args.cap_bps, args.hash_workers) < 0 or args.size < MiB:
        parser.error("--connections and --hf-workers must be >= 1, --size >= 1MiB, the other numbers >= 0")
    if args.chunk_size < MiB:
        parser.error("--chunk-size must be at least 1MiB (the module's minimum)")
    if not os.path.isdir(os.path.join(COLLECTIONS, "ansible_collections", "kimi", "deploy")):
        parser.error("%s/ansible_collections/kimi/deploy is missing: run `make setup` first" % COLLECTIONS)
    args.cores = os.cpu_count() or 1

    started = time.monotonic()
    args.run_dir = None
    try:
        if args.workdir:
            os.makedirs(args.workdir, exist_ok=True)
        base, free, shards, shard_size, notes = plan_size(args)
        args.run_dir = tempfile.mkdtemp(prefix="kimi-bench-", dir=args.workdir)
        report = bench(args, shards, shard_size, notes, free)
    except BenchError as exc:
        log("error: %s" % exc)
        return 1
    finally:
        if args.run_dir and not args.keep:
            shutil.rmtree(args.run_dir, ignore_errors=True)
        elif args.run_dir:
            log("kept %s" % args.run_dir)
    report["workdir_fs"] = base
    report["bench_wall_s"] = round(time.monotonic() - started, 1)
    if args.json:
        print(json.dumps(report, indent=1, sort_keys=True))
    else:
        print_report(report)
    return 0


def bench(args, shards, shard_size, notes, free):
    sys.path.insert(0, FAKE_HUB_DIR)
    import fake_hub  # pylint: disable=import-error

    cap = args.cap_bps
    spec = "%s:shards=%d,shard_size=%d" % (REPO_ID, shards, shard_size)
    log("machine: %d CPUs, %s free, load average %s; workdir %s" % (args.cores, human(free), loadavg(), args.run_dir))
    for note in notes:
        log("note: " + note)
    log("starting the fake hub with %s (the first time, it hashes the shards; then they come from its cache)" % spec)
    with Meter() as meter:
        hub = fake_hub.start_fake_hub([spec])
    try:
        repo = hub.repos[REPO_ID]
        commit = hub.commits[REPO_ID]
        total = repo.total_size
        report = {
            "machine": {"cpus": args.cores, "python": platform.python_version(), "kernel": platform.release(),
                        "free_disk_bytes": free, "loadavg_start": loadavg()},
            "config": {"repo": spec, "repo_bytes": total, "files": len(repo.files), "shards": shards, "shard_bytes": shard_size,
                       "cap_bps_per_connection": cap, "connections": args.connections, "hf_workers": args.hf_workers,
                       "chunk_size": args.chunk_size,
                       "cdn_ranges": sum(int(math.ceil(item.size / float(args.chunk_size))) for item in repo.files if item.lfs)},
            "notes": notes, "hub_start_s": round(meter.wall, 2), "rows": {},
        }
        rows = report["rows"]

        def set_cap():
            hub.faults.remove()  # all of them
            if cap:
                hub.add_fault(type="rate_limit_bps", role="cdn", bps=cap)

        if not args.skip_ceiling:
            hub.faults.remove()
            log("context: curl x%d -> /dev/null, no cap" % args.connections)
            count, meter = curl_fetch_all(args, hub, repo)
            rows["curl_uncapped"] = dict(meter.cpu(), bytes=count, connections=args.connections)
            if cap:
                set_cap()
                log("context: curl x%d -> /dev/null, %.0f MB/s per connection" % (args.connections, cap / 1e6))
                count, meter = curl_fetch_all(args, hub, repo)
                rows["curl_capped"] = dict(meter.cpu(), bytes=count, connections=args.connections)

        set_cap()
        if not args.skip_hf:
            log("huggingface_hub.snapshot_download, max_workers=%d, Xet off" % args.hf_workers)
            info, meter, own = run_hf(args, hub, commit)
            got = snapshot_bytes(info["path"])
            if got != total:
                raise BenchError("the huggingface_hub snapshot holds %d bytes, the repo %d" % (got, total))
            rows["hf"] = dict(meter.cpu(), process_cpu_s=round(own, 2), bytes=total, seconds=info["download_s"],
                              import_s=round(info["import_s"], 2), version=info["version"], streams=min(args.hf_workers, shards))
            clean(os.path.join(args.run_dir, "hf"))  # one cache on disk at a time

        hf_home = os.path.join(args.run_dir, "ours")
        params = {"repo_id": REPO_ID, "revision": commit, "hf_home": hf_home, "endpoint": hub.url,
                  "connections": args.connections, "chunk_size": args.chunk_size}
        if args.hash_workers:
            params["hash_workers"] = args.hash_workers
        log("hf_snapshot, connections=%d, chunk_size=%s" % (args.connections, human(args.chunk_size)))
        result, meter, own = run_module(args, params, "first")
        if result["bytes_downloaded"] != total or not result["verified"] or not result["changed"]:
            raise BenchError("first hf_snapshot run: unexpected result %s" % json.dumps(result)[:1000])
        rate = result["throughput_bytes_per_s"]
        rows["ours"] = dict(meter.cpu(), process_cpu_s=round(own, 2), bytes=total, seconds=result["duration_s"],
                            download_s=round(total / rate, 3) if rate else None, download_rate=rate,
                            requests=result["requests"], streams=min(args.connections, report["config"]["cdn_ranges"]))

        log("hf_snapshot again (the re-run)")
        os.sync()
        result, meter, own = run_module(args, params, "rerun")
        if result["changed"] or result["bytes_downloaded"] or not result["verification"]["from_record"]:
            raise BenchError("the re-run was not a no-op: %s" % json.dumps(result)[:1000])
        rows["rerun"] = dict(meter.cpu(), seconds=result["duration_s"], changed=result["changed"],
                             from_record=result["verification"]["from_record"])

        log("hf_snapshot with verify=full (re-hashes every blob; they are in the page cache)")
        result, meter, own = run_module(args, dict(params, verify="full"), "verify")
        if result["changed"] or result["bytes_downloaded"] or result["verification"]["hashed_bytes"] != total:
            raise BenchError("verify=full run: unexpected result %s" % json.dumps(result)[:1000])
        rows["verify_full"] = dict(meter.cpu(), process_cpu_s=round(own, 2), bytes=total, seconds=result["duration_s"],
                                   hash_workers=args.hash_workers or args.cores)

        blobs_dir = os.path.join(hf_home, "hub", "models--" + REPO_ID.replace("/", "--"), "blobs")
        blobs = [(os.path.join(blobs_dir, item.etag), item.size) for item in repo.files]
        shard = max(repo.files, key=lambda item: item.size)
        log("hash rates (%s shards)" % human(shard.size))
        report["hash"] = hash_rates(args, blobs, os.path.join(blobs_dir, shard.etag), shard.size)
        if not args.keep:
            clean(hf_home)
    finally:
        hub.stop()
    report["machine"]["loadavg_end"] = loadavg()
    report["targets"] = targets(report, args)
    return report


def targets(report, args):
    """The issue's targets, each with target, measured and pass (None: context, not a target)."""
    rows = report["rows"]
    config = report["config"]
    cap = config["cap_bps_per_connection"]
    ours = rows["ours"]
    out = []
    if "hf" in rows:
        hf_rate = rows["hf"]["bytes"] / rows["hf"]["seconds"]
        ratio = ours["bytes"] / ours["seconds"] / hf_rate
        detail = []
        if ours["download_s"]:
            detail.append("download phase %.2fx" % (ours["download_rate"] / hf_rate))
        if cap:
            detail.append("both streams-bound: %.2fx" % (ours["streams"] / float(rows["hf"]["streams"])))
        out.append({"name": "hf_snapshot vs huggingface_hub, end to end", "target": ">= 2.00x", "pass": ratio >= 2.0,
                    "measured": "%.2fx%s" % (ratio, " (%s)" % "; ".join(detail) if detail else "")})
    if cap and ours["download_rate"]:
        aggregate = cap * config["connections"]
        share = ours["download_rate"] / aggregate
        out.append({"name": "download phase vs aggregate cap (%d x %.0f MB/s = %.0f MB/s)" % (config["connections"], cap / 1e6, aggregate / 1e6),
                    "target": ">= 0.90", "pass": share >= 0.9, "measured": "%.2f (%.0f MB/s; end to end %.2f)" % (
                        share, ours["download_rate"] / 1e6, ours["bytes"] / ours["seconds"] / aggregate)})
    single = report["hash"]["sha256sum"]["rate"]
    verify = rows["verify_full"]["bytes"] / rows["verify_full"]["seconds"]
    share = verify / (args.cores * single)
    out.append({"name": "verify=full vs %d cores x single-core sha256sum (%.0f MB/s)" % (args.cores, single / 1e6), "target": ">= 0.80",
                "pass": share >= 0.8, "measured": "%.2f (%.0f MB/s)" % (share, verify / 1e6)})
    par = report["hash"]["sha256sum_parallel"]
    out.append({"name": "(context) verify=full vs %d sha256sum processes at once (%.0f MB/s)" % (par["processes"], par["rate"] / 1e6),
                "target": "-", "pass": None, "measured": "%.2f" % (verify / par["rate"])})
    rerun = rows["rerun"]["wall_s"]
    out.append({"name": "re-run, process wall time (changed=false, no network)", "target": "< 2.0 s", "pass": rerun < 2.0,
                "measured": "%.2f s (module %.3f s)" % (rerun, rows["rerun"]["seconds"])})
    return out


def print_report(report):
    config = report["config"]
    rows = report["rows"]
    machine = report["machine"]
    cap = config["cap_bps_per_connection"]
    ours = rows["ours"]
    width = 56
    print("kimi.deploy download benchmark: hf_snapshot vs huggingface_hub, loopback, fake hub")
    print("machine: %d CPUs, Python %s, kernel %s; load average %s at start, %s at end" % (
        machine["cpus"], machine["python"], machine["kernel"], machine["loadavg_start"], machine["loadavg_end"]))
    print("repo: %s: %d files, %s; cap %s per connection; fake hub start-up %.1f s" % (
        config["repo"], config["files"], human(config["repo_bytes"]), "%.0f MB/s" % (cap / 1e6) if cap else "none", report["hub_start_s"]))
    print("hf_snapshot: %d connections, %d range requests (%d to the CDN, chunk %s); huggingface_hub: %d workers, one stream per file" % (
        config["connections"], ours["requests"].get("range_requests", 0), config["cdn_ranges"], human(config["chunk_size"]),
        config["hf_workers"]))
    for note in report["notes"]:
        print("note: " + note)
    print("")
    print("Downloads. vs HF: MB/s over huggingface_hub's; cap use: MB/s over (capped streams x cap); CPU seconds of the fake hub,")
    print("of the client and its curl processes, and of everything else on the machine")
    header = "%-*s %10s %8s %8s %7s %7s %6s %6s %6s" % (width, "method", "bytes", "seconds", "MB/s", "vs HF", "cap use", "hub", "client", "other")
    print(header)
    print("-" * len(header))
    hf_rate = rows["hf"]["bytes"] / rows["hf"]["seconds"] if "hf" in rows else None

    def line(label, count, seconds, streams, row):
        rate = count / seconds
        print("%-*s %10s %8.2f %8.0f %7s %7s %6.1f %6.1f %6.1f" % (
            width, label, human(count), seconds, rate / 1e6, "%.2fx" % (rate / hf_rate) if hf_rate else "-",
            "%.2f" % (rate / (streams * cap)) if cap and streams else "-", row["hub_cpu_s"], row["client_cpu_s"], row["other_cpu_s"]))

    if "curl_uncapped" in rows:
        row = rows["curl_uncapped"]
        line("curl x%d -> /dev/null, no cap (machine ceiling)" % row["connections"], row["bytes"], row["wall_s"], 0, row)
    if "curl_capped" in rows:
        row = rows["curl_capped"]
        line("curl x%d -> /dev/null, capped (cap ceiling)" % row["connections"], row["bytes"], row["wall_s"],
             min(row["connections"], config["cdn_ranges"]), row)
    if "hf" in rows:
        row = rows["hf"]
        line("huggingface_hub %s snapshot_download, %d workers" % (row["version"], config["hf_workers"]), row["bytes"], row["seconds"],
             row["streams"], row)
    line("hf_snapshot x%d, end to end (list, fetch, sha256, fsync)" % config["connections"], ours["bytes"], ours["seconds"], ours["streams"], ours)
    if ours["download_s"]:
        line("hf_snapshot x%d, download phase" % config["connections"], ours["bytes"], ours["download_s"], ours["streams"], ours)
        print("hf_snapshot outside its download phase: %.2f s (listing before it; after it, hashing the last blobs, fsync, links, record)" % (
            ours["seconds"] - ours["download_s"]))
    if "hf" in rows and cap:
        print("ratio when both keep every capped stream full: min(%d connections, %d CDN ranges) / min(%d workers, %d shards) = %.2fx" % (
            config["connections"], config["cdn_ranges"], config["hf_workers"], config["shards"], ours["streams"] / float(rows["hf"]["streams"])))
    for key, name in (("hf", "huggingface_hub"), ("ours", "hf_snapshot")):
        if key in rows:
            row = rows[key]
            print("CPU during %s (%.1f s wall, %.1f CPU-s on %d cores): its Python process %.1f s (%.0f%% of a core), curl %.1f s, "
                  "fake hub %.1f s, other processes %.1f s" % (
                      name, row["wall_s"], machine["cpus"] * row["wall_s"], machine["cpus"], row["process_cpu_s"],
                      100 * row["process_cpu_s"] / row["wall_s"], max(0.0, row["client_cpu_s"] - row["process_cpu_s"]), row["hub_cpu_s"],
                      row["other_cpu_s"]))
    other = sum(row.get("other_cpu_s", 0) for row in rows.values())
    busy = sum(row.get("wall_s", 0) for row in rows.values()) * machine["cpus"]
    if busy and other > 0.1 * busy:
        print("warning: other processes took %.0f%% of the machine's CPU time during the runs; the numbers are not clean" % (100 * other / busy))
    print("")
    print("Hashing (files in the page cache). vs 1 core: MB/s over single-core sha256sum's")
    hash_info = report["hash"]
    single = hash_info["sha256sum"]["rate"]
    header = "%-*s %10s %8s %8s %10s" % (width, "method", "bytes", "seconds", "MB/s", "vs 1 core")
    print(header)
    print("-" * len(header))
    hash_rows = [("sha256sum, one shard, 2nd run (single core)", hash_info["file_bytes"], hash_info["sha256sum"]["seconds"])]
    if "openssl" in hash_info:
        hash_rows.append(("openssl dgst -sha256, same shard (single core)", hash_info["file_bytes"], hash_info["openssl"]["seconds"]))
    hash_rows.append(("Python hashlib, module's hash_file, same shard, 1 thread", hash_info["file_bytes"], hash_info["hashlib"]["seconds"]))
    par = hash_info["sha256sum_parallel"]
    hash_rows.append(("sha256sum x%d processes at once, a shard each" % par["processes"], par["bytes"], par["seconds"]))
    pool = hash_info["hash_pool"]
    hash_rows.append(("module's hash_file, %d threads, every blob" % pool["threads"], pool["bytes"], pool["seconds"]))
    verify = rows["verify_full"]
    hash_rows.append(("hf_snapshot verify=full, %d hash workers (module run)" % verify["hash_workers"], verify["bytes"], verify["seconds"]))
    for label, count, seconds in hash_rows:
        print("%-*s %10s %8.2f %8.0f %9.2fx" % (width, label, human(count), seconds, count / seconds / 1e6, count / seconds / single))
    print("")
    rerun = rows["rerun"]
    print("Re-run: process wall %.2f s, module %.3f s, changed=%s, from_record=%s" % (
        rerun["wall_s"], rerun["seconds"], rerun["changed"], rerun["from_record"]))
    print("")
    print("Targets")
    for target in report["targets"]:
        verdict = "    " if target["pass"] is None else "PASS" if target["pass"] else "MISS"
        print("  %s  %-72s %-9s measured %s" % (verdict, target["name"], target["target"], target["measured"]))
    print("")
    print("bench wall time %.0f s; page cache not dropped (needs root), sync() between the downloads" % report["bench_wall_s"])


if __name__ == "__main__":
    sys.exit(main())
