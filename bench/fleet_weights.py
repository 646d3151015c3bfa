#!/usr/bin/env python
# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Fleet weights benchmark: N hosts from the hub directly against N hosts with peers (download once per fleet).

The fake hub (tests/doubles/hub) serves a repo of --size bytes with a cap per connection (--cap-bps) and one cap for
all connections (--hub-total-bps), as a real hub or CDN limits one site. Each "host" is the hf_snapshot module (a
subprocess, as Ansible runs it) with its own HF_HOME. The LAN is loopback, faster than the hub; the peers are the
peer double (tests/doubles/peer), which answers as the caddy_proxy role's peer cache does (a Python stand-in: this
machine has no Caddy). The caches live in --workdir, tmpfs by default: what is measured here is the hub and the LAN,
not the disk (all "hosts" would share one disk here, unlike a fleet).

Runs, in this order:
1. one host alone from the hub (the reference, T1);
2. N hosts from the hub at once (they share the hub's total cap);
3. N hosts with peers, as kimi_weights_source=auto does: one seed from the hub and, at the same time, the other N-1
   from the seed and from each other (each serves the files it verified so far; a receiver trails the seed);
4. --disk-dir (a real disk): one host from one peer against `dd conv=fsync` of the same bytes on the same file
   system: the durable write rate is the floor a LAN transfer meets.

Prints the figures and the ratios, and one PASS/MISS line per goal: N with peers <= 1.3 x T1; the hub sends the
bytes once; the peer transfer >= 0.9 of dd. Exits 0 whatever they say (1 when a step fails).
`.venv/bin/python bench/fleet_weights.py [--hosts 4 --size 1GiB]`, or `make bench-fleet`.
"""

from __future__ import absolute_import, division, print_function

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COLLECTIONS = os.path.join(ROOT, ".collections")
MODULE = os.path.join(ROOT, "plugins", "modules", "hf_snapshot.py")
sys.path.insert(0, os.path.join(ROOT, "tests", "doubles", "hub"))
sys.path.insert(0, os.path.join(ROOT, "tests", "doubles", "peer"))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import fake_hub  # noqa: E402  pylint: disable=import-error,wrong-import-position
from peer_server import PeerServer  # noqa: E402  pylint: disable=import-error,wrong-import-position
from hf_download import human, log, parse_size  # noqa: E402  pylint: disable=import-error,wrong-import-position

REPO_ID = "moonshotai/Kimi-K2.6"
MiB = 1 << 20
PEER_KEY = "bench-peer-key-0123456789abcdefghijklmn"


class Host(object):
    """One host: an HF_HOME, its module run, and (once started) its peer cache."""

    def __init__(self, base, name):
        self.name = name
        self.home = os.path.join(base, name)
        self.peer = None
        self.proc = None
        self.started = None

    def args(self, hub, opts, **extra):
        args = {"repo_id": REPO_ID, "revision": hub.commits[REPO_ID], "hf_home": self.home, "endpoint": hub.url,
                "connections": opts.connections, "chunk_size": opts.chunk_size}
        args.update(extra)
        return args

    def start(self, args):
        os.makedirs(self.home, exist_ok=True)
        path = self.home + ".args.json"
        with open(path, "w") as handle:
            json.dump({"ANSIBLE_MODULE_ARGS": args}, handle)
        env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
        env.update(PYTHONPATH=COLLECTIONS, PYTHONDONTWRITEBYTECODE="1")
        self.started = time.monotonic()
        self.proc = subprocess.Popen([sys.executable, MODULE, path], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)

    def wait(self):
        out, err = self.proc.communicate()
        wall = time.monotonic() - self.started
        try:
            result = json.loads(out)
        except ValueError:
            raise SystemExit("%s: the module printed no JSON: %s" % (self.name, err.decode()[-2000:]))
        if result.get("failed"):
            raise SystemExit("%s: the module failed: %s" % (self.name, result.get("msg")))
        result["wall_s"] = wall
        return result

    def serve(self):
        self.peer = PeerServer(os.path.join(self.home, "hub"), key=PEER_KEY)
        return {"name": self.name, "url": self.peer.url}

    def clear(self):
        if self.peer is not None:
            self.peer.stop()
            self.peer = None
        shutil.rmtree(self.home, ignore_errors=True)


def hub_body_bytes(hub):
    return sum(r["bytes"] for r in hub.requests() if r["method"] == "GET" and (r["role"] == "cdn" or "/resolve/" in r["path"]))


def run_hub_only(hub, opts, hosts):
    hub.reset(faults=False)
    began = time.monotonic()
    for host in hosts:
        host.start(host.args(hub, opts))
    results = [host.wait() for host in hosts]
    return time.monotonic() - began, hub_body_bytes(hub), results


def run_with_peers(hub, opts, hosts):
    """As kimi_weights_source=auto does: every host's peer cache is up, the seed fetches from the hub and the others, at
    the same time, from the seed and from each other (each serves the files it verified so far)."""
    hub.reset(faults=False)
    seed, receivers = hosts[0], hosts[1:]
    for host in hosts:
        os.makedirs(os.path.join(host.home, "hub"), exist_ok=True)
    sources = [host.serve() for host in hosts]
    began = time.monotonic()
    seed.start(seed.args(hub, opts))
    for host in receivers:
        peers = [s for s in sources if s["name"] != host.name]
        host.start(host.args(hub, opts, peers=peers, peer_key=PEER_KEY, peer_connections=opts.peer_connections))
    results = [host.wait() for host in hosts]
    total = time.monotonic() - began
    return total, results[0]["wall_s"], hub_body_bytes(hub), results


def dd_fsync_s(folder, size):
    """Seconds dd takes to write size bytes (rounded to 16 MiB blocks) and fsync them: the disk's durable write rate."""
    path = os.path.join(folder, "dd-probe")
    began = time.monotonic()
    subprocess.run(["dd", "if=/dev/zero", "of=" + path, "bs=16M", "count=%d" % max(1, size // (16 * MiB)), "conv=fsync"],
                   check=True, capture_output=True)
    took = time.monotonic() - began
    os.unlink(path)
    return took


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--hosts", type=int, default=4, help="hosts in the fleet (N)")
    parser.add_argument("--size", type=parse_size, default=parse_size("1GiB"), help="repo size (shards in total)")
    parser.add_argument("--shards", type=int, default=16)
    # The hub must be slower than the "LAN": here every host shares 2 cores, which carry N-1 receivers at once.
    parser.add_argument("--cap-bps", type=float, default=10e6, help="hub cap per connection, bytes/s")
    parser.add_argument("--hub-total-bps", type=float, default=40e6, help="hub cap for all connections at once, bytes/s")
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--peer-connections", type=int, default=4)
    # 8 MiB: with 16 connections, 128 MiB are in flight, about two shards of the default repo, so that files complete one
    # after another, as 9 GB shards do with the real 64 MiB chunks (a receiver trails the seed by a file).
    parser.add_argument("--chunk-size", type=parse_size, default=8 * MiB)
    parser.add_argument("--workdir", default="/dev/shm" if os.path.isdir("/dev/shm") else None,
                        help="where the hosts' caches go (default tmpfs: the hub and the LAN are measured, not the disk)")
    parser.add_argument("--disk-dir", default=os.path.join(ROOT, ".cache"), help="a folder on a real disk, for the dd comparison")
    parser.add_argument("--skip-disk", action="store_true")
    parser.add_argument("--json", action="store_true")
    opts = parser.parse_args()
    if opts.hosts < 2:
        parser.error("--hosts must be at least 2")

    base = tempfile.mkdtemp(prefix="kimi-fleet-bench.", dir=opts.workdir)
    spec = "%s:shards=%d,shard_size=%d" % (REPO_ID, opts.shards, opts.size // opts.shards)
    hub = fake_hub.start_fake_hub([spec], cache_dir=os.path.join(base, "fake-hub-cache"))
    out = {"hosts": opts.hosts, "size": opts.size, "cap_bps": opts.cap_bps, "hub_total_bps": opts.hub_total_bps, "workdir": opts.workdir}
    try:
        hub.add_fault(type="rate_limit_bps", role="cdn", bps=opts.cap_bps)
        hub.add_fault(type="rate_limit_total_bps", role="cdn", bps=opts.hub_total_bps)
        hosts = [Host(base, "host%d" % i) for i in range(opts.hosts)]

        log("1. one host alone from the hub")
        out["one_host_s"], one_bytes, one = run_hub_only(hub, opts, hosts[:1])
        out["repo_bytes"] = one[0]["bytes_total"]
        hosts[0].clear()
        log("   %.1f s, hub sent %s" % (out["one_host_s"], human(one_bytes)))

        log("2. %d hosts from the hub at once" % opts.hosts)
        out["hub_only_s"], out["hub_only_hub_bytes"], unused = run_hub_only(hub, opts, hosts)
        for host in hosts:
            host.clear()
        log("   %.1f s, hub sent %s" % (out["hub_only_s"], human(out["hub_only_hub_bytes"])))

        log("3. %d hosts with peers: one seed from the hub, %d from the peers at the same time" % (opts.hosts, opts.hosts - 1))
        out["peers_s"], out["peers_seed_s"], out["peers_hub_bytes"], results = run_with_peers(hub, opts, hosts)
        out["peers_from_peers_bytes"] = sum(s["bytes"] for r in results[1:] for s in r["sources"] if s["name"] != "hub")
        out["peers_receiver_s"] = [round(r["wall_s"], 2) for r in results[1:]]
        out["peers_dropped"] = [s["name"] for r in results for s in r["sources"] if s["dropped"]]
        log("   %.1f s (seed %.1f s), hub sent %s" % (out["peers_s"], out["peers_seed_s"], human(out["peers_hub_bytes"])))

        if not opts.skip_disk:
            # One receiver, one peer, the module's default chunk (64 MiB), every connection on that peer: onto the real
            # disk, then onto tmpfs (what the receiver's CPU manages on this machine), then dd of the same bytes.
            log("4. one host from one peer onto %s and onto %s, against dd conv=fsync on the disk" % (opts.disk_dir, opts.workdir))
            os.makedirs(opts.disk_dir, exist_ok=True)
            source = {"name": hosts[0].name, "url": hosts[0].peer.url}
            for key, folder in (("disk_module_s", opts.disk_dir), ("tmpfs_module_s", opts.workdir)):
                receiver = Host(tempfile.mkdtemp(prefix="kimi-fleet-bench-disk.", dir=folder), "receiver")
                try:
                    subprocess.run(["sync"], check=False)
                    receiver.start(receiver.args(hub, opts, peers=[source], peer_key=PEER_KEY, peer_connections=opts.connections,
                                                 hub_bytes=False, chunk_size=64 * MiB))
                    out[key] = receiver.wait()["duration_s"]
                finally:
                    receiver.clear()
                    shutil.rmtree(os.path.dirname(receiver.home), ignore_errors=True)
            probe = tempfile.mkdtemp(prefix="kimi-fleet-bench-dd.", dir=opts.disk_dir)
            try:
                subprocess.run(["sync"], check=False)
                out["disk_dd_s"] = dd_fsync_s(probe, out["repo_bytes"])
            finally:
                shutil.rmtree(probe, ignore_errors=True)
            out["disk_ratio"] = out["disk_dd_s"] / out["disk_module_s"]
    finally:
        for host in locals().get("hosts", []):
            host.clear()
        hub.stop()
        shutil.rmtree(base, ignore_errors=True)

    out["peers_vs_one"] = out["peers_s"] / out["one_host_s"]
    out["hub_only_vs_peers"] = out["hub_only_s"] / out["peers_s"]
    out["hub_sends_per_size"] = out["peers_hub_bytes"] / float(out["repo_bytes"])
    if opts.json:
        print(json.dumps(out, indent=1, sort_keys=True))
        return 0
    gb = opts.size / 1e9
    print("fleet weights: %d hosts, %s repo, hub capped %.0f MB/s per connection and %.0f MB/s in total; caches in %s" % (
        opts.hosts, human(opts.size), opts.cap_bps / 1e6, opts.hub_total_bps / 1e6, opts.workdir))
    print("  one host from the hub            %7.1f s  (%.0f MB/s)" % (out["one_host_s"], gb * 1e3 / out["one_host_s"]))
    print("  %d hosts from the hub             %7.1f s  hub sent %s" % (opts.hosts, out["hub_only_s"], human(out["hub_only_hub_bytes"])))
    print("  %d hosts with peers               %7.1f s  hub sent %s; seed %.1f s, receivers %s s" % (
        opts.hosts, out["peers_s"], human(out["peers_hub_bytes"]), out["peers_seed_s"], out["peers_receiver_s"]))
    print("  ratio peers / one host            %7.2f   goal <= 1.3   %s" % (out["peers_vs_one"], "PASS" if out["peers_vs_one"] <= 1.3 else "MISS"))
    print("  hub bytes / repo bytes (peers)    %7.2f   goal 1.0      %s" % (out["hub_sends_per_size"], "PASS" if out["hub_sends_per_size"] <= 1.0 else "MISS"))
    print("  speed-up over all from the hub    %7.2fx" % out["hub_only_vs_peers"])
    if "disk_ratio" in out:
        mb = out["repo_bytes"] / 1e6
        print("  one peer -> disk %s: module %.1f s (%.0f MB/s); dd conv=fsync %.1f s (%.0f MB/s)" % (
            opts.disk_dir, out["disk_module_s"], mb / out["disk_module_s"], out["disk_dd_s"], mb / out["disk_dd_s"]))
        print("  one peer -> tmpfs (the receiver's CPU bound here): module %.1f s (%.0f MB/s)" % (
            out["tmpfs_module_s"], mb / out["tmpfs_module_s"]))
        print("  ratio dd / module on the disk     %7.2f   goal >= 0.9   %s" % (out["disk_ratio"], "PASS" if out["disk_ratio"] >= 0.9 else "MISS"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
