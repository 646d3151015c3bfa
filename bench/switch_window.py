#!/usr/bin/env python
# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Switch window benchmark: stop to first answer, with the target shards cold on disk against warm in the page cache.

A fleet switch stops the serving engine and starts the target one, which loads the checkpoint (the runbook: 10-15 min
cold from NVMe, 4-5 min from a warm page cache, for ~595 GB). The prefetch (kimi_weights tasks_from=warm, the
kimi.deploy.page_cache module) reads the shards into the page cache while the current identity still serves.

Here: hf_snapshot downloads a --size checkpoint from the fake hub onto --disk-dir (a real disk); then, --rounds times
each, alternating: the shards are dropped from the page cache (cold: posix_fadvise DONTNEED, no root needed) or read
into it (warm: the module's own code, _page_cache.warm); the engine double (tests/doubles/engine, which reads every
snapshot file once at start-up, as an engine loads its weights) serving the previous identity is stopped, the target
one is started, and the window is timed from the stop to the first 200 answer of /v1/chat/completions.
Prints both windows and the ratio. `.venv/bin/python bench/switch_window.py [--size 4GiB]`.
"""

from __future__ import absolute_import, division, print_function

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COLLECTIONS = os.path.join(ROOT, ".collections")
sys.path.insert(0, COLLECTIONS)
sys.path.insert(0, os.path.join(ROOT, "tests", "doubles", "hub"))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import fake_hub  # noqa: E402  pylint: disable=import-error,wrong-import-position
from hf_download import human, log, parse_size  # noqa: E402  pylint: disable=import-error,wrong-import-position
from ansible_collections.kimi.deploy.plugins.module_utils._hf import page_cache as _page_cache  # noqa: E402  pylint: disable=import-error,wrong-import-position

REPO_ID = "moonshotai/Kimi-K2.6"
MODULE = os.path.join(ROOT, "plugins", "modules", "hf_snapshot.py")


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Engine(object):
    """The engine double as vLLM, serving the checkpoint from HF_HOME offline."""

    def __init__(self, home, commit):
        self.port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
        env.update(HF_HOME=home, HF_HUB_OFFLINE="1", PYTHONPATH=os.path.join(ROOT, "tests", "doubles", "engine"))
        argv = [sys.executable, "-m", "kimi_engine_double", "vllm", "serve", REPO_ID, "--revision", commit,
                "--host", "127.0.0.1", "--port", str(self.port), "--served-model-name", "kimi-k2.6", "--trust-remote-code"]
        self.proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def first_answer(self, timeout=600):
        body = json.dumps({"model": "kimi-k2.6", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}).encode()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit("the engine double exited: %s" % self.proc.stderr.read().decode()[-2000:])
            try:
                req = urllib.request.Request("http://127.0.0.1:%d/v1/chat/completions" % self.port, data=body,
                                             headers={"Content-Type": "application/json"})
                with urllib.request.urlopen(req, timeout=5) as resp:
                    if resp.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, socket.timeout):
                pass
            time.sleep(0.02)
        raise SystemExit("no answer in %d s" % timeout)

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=60)


def download(hub, home, opts):
    args = {"repo_id": REPO_ID, "revision": hub.commits[REPO_ID], "hf_home": home, "endpoint": hub.url, "connections": 8}
    path = home + ".args.json"
    with open(path, "w") as handle:
        json.dump({"ANSIBLE_MODULE_ARGS": args}, handle)
    env = dict(os.environ, PYTHONPATH=COLLECTIONS)
    out = subprocess.run([sys.executable, MODULE, path], env=env, capture_output=True, check=False)
    result = json.loads(out.stdout)
    if result.get("failed"):
        raise SystemExit(result["msg"])
    return result["snapshot_path"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--size", type=parse_size, default=parse_size("2GiB"))
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--disk-dir", default=os.path.join(ROOT, ".cache"), help="a folder on a real disk")
    parser.add_argument("--json", action="store_true")
    opts = parser.parse_args()
    os.makedirs(opts.disk_dir, exist_ok=True)
    base = tempfile.mkdtemp(prefix="kimi-switch-bench.", dir=opts.disk_dir)
    spec = "%s:shards=%d,shard_size=%d" % (REPO_ID, opts.shards, opts.size // opts.shards)
    hub = fake_hub.start_fake_hub([spec], cache_dir=os.path.join(base, "fake-hub-cache"))
    windows = {"cold": [], "warm": []}
    try:
        home = os.path.join(base, "hf")
        log("downloading a %s checkpoint onto %s" % (human(opts.size), opts.disk_dir))
        snapshot = download(hub, home, opts)
        files = _page_cache.snapshot_files(snapshot, patterns=("",))  # every file the double reads
        subprocess.run(["sync"], check=False)
        engine = Engine(home, hub.commits[REPO_ID])
        engine.first_answer()
        for _round in range(opts.rounds):
            for mode in ("cold", "warm"):
                if mode == "cold":
                    for path in files:
                        _page_cache.evict(path)
                else:
                    _page_cache.warm(files, reserve_bytes=0)
                resident = sum(_page_cache.resident_bytes(p) or 0 for p in files)
                began = time.monotonic()
                engine.stop()
                engine = Engine(home, hub.commits[REPO_ID])
                engine.first_answer()
                took = time.monotonic() - began
                windows[mode].append(took)
                log("%s (%s resident): stop to first answer %.2f s" % (mode, human(resident), took))
        engine.stop()
    finally:
        hub.stop()
        shutil.rmtree(base, ignore_errors=True)
    cold, warm = min(windows["cold"]), min(windows["warm"])
    out = {"size": opts.size, "cold_s": windows["cold"], "warm_s": windows["warm"], "ratio_cold_over_warm": cold / warm}
    if opts.json:
        print(json.dumps(out, indent=1))
        return 0
    print("switch window, stop to first answer, %s checkpoint on %s (engine double reading every shard once):" % (
        human(opts.size), opts.disk_dir))
    print("  cold (shards dropped from the page cache)  %6.2f s  (best of %d: %s)" % (cold, opts.rounds, windows["cold"]))
    print("  warm (prefetch read them in)               %6.2f s  (best of %d: %s)" % (warm, opts.rounds, windows["warm"]))
    print("  ratio cold / warm                          %6.2fx" % (cold / warm))
    return 0


if __name__ == "__main__":
    sys.exit(main())
