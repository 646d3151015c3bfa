#!/usr/bin/env python
# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Gateway benchmark: what the fleet endpoint's token path costs per streamed token, on loopback, in one run.

Two upstream doubles (this file, --serve-double: asyncio, one SSE chat.completion.chunk event per token, --tokens per
request, --interval between tokens, usage event when stream_options.include_usage, then [DONE]) are the fleet. One
asyncio client (this process: one kept-alive connection per stream, each stream asks again as soon as an answer ends)
holds N streams for --warmup + --duration seconds on each path:
  straight  client -> the doubles directly (stream i on double i % 2), the peer every other path is compared with;
  smg       client -> SMG (smg launch --policy cache_aware) -> doubles: the gateway's router alone;
  whole     client -> Caddy (TLS, key check, the gateway site's reverse_proxy options) -> the usage tap in the tree
            (roles/kimi_gateway/files/kimi_usage_tap.py) -> SMG -> doubles: the fleet endpoint as deployed;
  before    client -> Caddy -> the tap of --before-rev -> sglang-router 0.3.2 -> doubles: the previous gateway.
The runs are interleaved (each concurrency, then each path) so that drift on a shared machine hits every path alike.

Figures (events = token events that arrive inside the --duration window, after the warm-up):
  - events/s, and its ratio to straight and to smg at the same concurrency;
  - per-event delay: each double writes its CLOCK_MONOTONIC send time into every event ("t", shared by the processes
    of one machine), and the client takes arrival - send for each event. The ADDED delay is this delay's p50/p99 on
    the path minus straight's at the same concurrency (straight's figure holds the kernel and the client's own event
    loop lag, which every path has). Gaps between events would hide a proxy that delays every event alike;
  - added time to the first event (p50/p99 minus straight's), from the request's write (after the connect and TLS
    handshake) to its first token event, for every request of the run, warm-up included: at 1024 streams one
    answer outlasts the window;
  - failed requests over the whole level, warm-up included: connect errors, resets, non-200, truncated streams
    (no [DONE], missing usage, or fewer events than --tokens);
  - CPU seconds per 1000 events of each process (and its children) from /proc/<pid>/stat utime+stime over the window:
    Caddy, tap, router, the doubles and the client; 'other' is the machine's busy time less all of these;
  - capacity: events/s divided by the cores that the gateway's processes (Caddy, tap, router) used in the window, i.e.
    fleet output tokens/s one gateway core carries when client and engines are on other hosts.
Everything shares this machine's cores: when they are saturated (see 'busy'), each process gets a share and the
figures are of that share, not of a dedicated gateway host.

    make bench-gateway ARGS="--duration 4 --streams 16,256 --paths straight,whole"
"""

import argparse
import asyncio
import datetime
import glob
import json
import os
import re
import resource
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CACHE = os.path.join(ROOT, ".cache", "bench-gateway")
TAP = os.path.join(ROOT, "roles", "kimi_gateway", "files", "kimi_usage_tap.py")
DEB_CACHE = os.path.expanduser("~/.cache/kimi-deploy/apt")
MODEL = "kimi-k2.6"
KEY = "bench-gateway-key"  # a loopback-only Caddy started by this run; not a secret
PATHS = ("straight", "smg", "whole", "before")
TITLES = {"straight": "client -> doubles", "smg": "SMG -> doubles", "whole": "Caddy -> tap -> SMG -> doubles",
          "before": "Caddy -> old tap -> sglang-router -> doubles"}
GATEWAY_ROLES = {"straight": (), "smg": ("smg",), "whole": ("caddy", "tap", "smg"),
                 "before": ("caddy", "old tap", "sglang-router")}
TICK = os.sysconf("SC_CLK_TCK")
# The gateway before SMG: the thread-per-connection tap of this commit in front of sglang-router 0.3.2 (its last
# release; no longer in requirements-router.txt, so the pin below is the fallback).
BEFORE_REV = "00a1425"


# ---------------------------------------------------------------- upstream double (a subprocess of the bench)

async def serve_double(port, tokens, interval):
    served = {"requests": 0, "events": 0}
    info = {"/health": b"", "/health_generate": b"",
            "/v1/models": json.dumps({"object": "list", "data": [{"id": MODEL, "object": "model"}]}).encode(),
            "/get_model_info": json.dumps({"model_path": MODEL, "tokenizer_path": MODEL,
                                           "is_generation": True}).encode(),
            "/get_server_info": json.dumps({"model_path": MODEL, "tokenizer_path": MODEL, "served_model_name": MODEL,
                                            "dp_size": 1, "tp_size": 1, "version": "bench-double"}).encode()}

    async def stream(writer, rid, usage):
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
                     b"Transfer-Encoding: chunked\r\n\r\n")
        for i in range(tokens):
            if writer.transport.is_closing():
                return
            data = (b'data: {"id":"chatcmpl-%d","object":"chat.completion.chunk","created":0,"model":"%s","t":%.6f,'
                    b'"choices":[{"index":0,"delta":{"content":"tok "},"finish_reason":%s}]}\n\n'
                    % (rid, MODEL.encode(), time.monotonic(), b'"length"' if i == tokens - 1 else b"null"))
            writer.write(b"%x\r\n%s\r\n" % (len(data), data))
            served["events"] += 1
            if writer.transport.get_write_buffer_size() > 65536:
                await writer.drain()
            # One write per token, as an engine flushes each; yielding lets the other streams' tokens interleave.
            await asyncio.sleep(interval)
        tail = [b'data: {"id":"chatcmpl-%d","object":"chat.completion.chunk","created":0,"model":"%s","choices":[],'
                b'"usage":{"prompt_tokens":32,"completion_tokens":%d,"total_tokens":%d}}\n\n'
                % (rid, MODEL.encode(), tokens, tokens + 32)] if usage else []
        for data in tail + [b"data: [DONE]\n\n"]:
            writer.write(b"%x\r\n%s\r\n" % (len(data), data))
        writer.write(b"0\r\n\r\n")
        await writer.drain()

    async def handle(reader, writer):
        try:
            while True:
                head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
                method, target = head[0].split(" ")[:2]
                headers = {k.strip().lower(): v.strip() for k, sep, v in (line.partition(":") for line in head[1:]) if sep}
                body = b""
                if headers.get("transfer-encoding", "").lower() == "chunked":
                    while True:
                        size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
                        body += (await reader.readexactly(size + 2))[:size]
                        if size == 0:
                            break
                elif headers.get("content-length"):
                    body = await reader.readexactly(int(headers["content-length"]))
                path = target.split("?", 1)[0]
                if method == "POST" and path in ("/v1/chat/completions", "/v1/completions"):
                    request = json.loads(body or b"{}")
                    served["requests"] += 1
                    if request.get("stream"):
                        usage = (request.get("stream_options") or {}).get("include_usage")
                        await stream(writer, served["requests"], usage)
                        continue
                    out = json.dumps({"id": "chatcmpl-%d" % served["requests"], "object": "chat.completion",
                                      "model": MODEL, "choices": [{"index": 0, "finish_reason": "length", "message": {
                                          "role": "assistant", "content": "tok " * tokens}}],
                                      "usage": {"prompt_tokens": 32, "completion_tokens": tokens,
                                                "total_tokens": tokens + 32}}).encode()
                elif path == "/bench_stats":
                    out = json.dumps(served).encode()
                elif path in info:
                    out = info[path]
                else:
                    sys.stderr.write("double: %s %s -> 200 {}\n" % (method, target))  # shows what a router asks
                    out = b"{}"
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                             % (len(out), out))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, ValueError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", port, backlog=4096)
    async with server:
        await server.serve_forever()


# ---------------------------------------------------------------- client

class Level:
    """What one (path, concurrency) run records."""

    def __init__(self, t0, t1, tokens):
        self.t0, self.t1, self.tokens = t0, t1, tokens
        self.events, self.ok, self.stopping = 0, 0, False
        self.delays, self.ttft, self.failures, self.conns = [], [], {}, []

    def fail(self, why):
        if not self.stopping:
            self.failures[why] = self.failures.get(why, 0) + 1


class Stream(asyncio.Protocol):
    """One kept-alive connection; parses one chunked SSE answer at a time."""

    def __init__(self, level):
        self.level, self.transport, self.done, self.closed = level, None, None, False
        self.buf = self.ev = b""
        self.sent = self.first = self.status = self.need = self.length = 0
        self.head = self.chunked = self.last = False
        self.tokens, self.saw = 0, set()

    def connection_made(self, transport):
        self.transport = transport

    def connection_lost(self, exc):
        self.closed = True
        if self.done is not None and not self.done.done():
            self.done.set_result("reset")

    def request(self, payload):
        self.done = asyncio.get_running_loop().create_future()
        self.ev, self.head, self.last, self.tokens, self.saw, self.first = b"", False, False, 0, set(), 0
        self.sent = time.monotonic()
        self.transport.write(payload)
        return self.done

    def data_received(self, data):
        now = time.monotonic()
        buf = self.buf + data
        if not self.head:
            buf = buf.lstrip(b"\r\n")  # the CRLF after the previous answer's last chunk
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                self.buf = buf
                return
            head, buf = buf[:end].lower(), buf[end + 4:]
            self.head, self.status, self.need = True, int(head[9:12]), 0
            self.chunked = b"transfer-encoding: chunked" in head
            match = re.search(rb"content-length: *(\d+)", head)
            self.length = int(match.group(1)) if match else 0
        parts = []
        if not self.chunked:
            parts.append(buf)
            self.length -= len(buf)
            self.last, buf = self.length <= 0, b""
        while buf and not self.last:
            if self.need:  # inside a chunk: its data, then CRLF
                take = buf[:self.need]
                parts.append(take[:max(0, self.need - 2)])
                self.need -= len(take)
                buf = buf[len(take):]
                continue
            end = buf.find(b"\r\n")
            if end < 0:
                break
            size = int(buf[:end].split(b";")[0], 16)
            buf = buf[end + 2:]
            self.need, self.last = size + 2, size == 0
        self.buf = b"" if self.last else buf
        self.ev += b"".join(parts)
        if b"\n\n" in self.ev:
            *events, self.ev = self.ev.split(b"\n\n")
            self.parse(events, now)
        if self.last and not self.done.done():
            ok = self.status == 200 and self.tokens == self.level.tokens and self.saw == {"usage", "done"}
            self.done.set_result("ok" if ok else "HTTP %d" % self.status if self.status != 200 else "truncated")

    def parse(self, events, now):
        level = self.level
        for event in events:
            if b'"delta"' in event:
                self.tokens += 1
                if not self.first:
                    self.first = now
                    if now <= level.t1:
                        level.ttft.append(now - self.sent)
                if level.t0 <= now <= level.t1:
                    level.events += 1
                    at = event.find(b'"t":')
                    if at >= 0:
                        level.delays.append(now - float(event[at + 4:event.index(b",", at)]))
            elif b"[DONE]" in event:
                self.saw.add("done")
            elif b'"usage"' in event:
                self.saw.add("usage")


async def client_stream(i, level, target, opts):
    host, port, tls, headers = target[i % len(target)]
    body = json.dumps({"model": MODEL, "stream": True, "stream_options": {"include_usage": True},
                       "max_tokens": opts.tokens,
                       "messages": [{"role": "user", "content": "stream %d: %s" % (i, "hello " * 24)}]}).encode()
    payload = ("POST /v1/chat/completions HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"
               "Accept: text/event-stream\r\nContent-Length: %d\r\n%s\r\n" % (host, len(body), headers)).encode() + body
    loop = asyncio.get_running_loop()
    await asyncio.sleep(i * min(1.0, opts.warmup / 2) / opts.current_streams)  # clients arrive over a second
    conn = None
    while not level.stopping:
        if conn is None or conn.closed:
            try:
                conn = (await asyncio.wait_for(loop.create_connection(
                    lambda: Stream(level), "127.0.0.1", port, ssl=tls, server_hostname=host if tls else None), 10))[1]
                level.conns.append(conn)
            except (OSError, asyncio.TimeoutError) as error:
                level.fail("connect: %s" % type(error).__name__)
                await asyncio.sleep(0.1)
                continue
        try:
            result = await asyncio.wait_for(conn.request(payload), 120)
        except asyncio.TimeoutError:
            result = "timeout"
        if result == "ok":
            level.ok += 1
        else:
            level.fail(result)
            conn.transport.close()
            await asyncio.sleep(0.05)


async def run_level(target, streams, pids, opts):
    start = time.monotonic()
    level = Level(start + opts.warmup, start + opts.warmup + opts.duration, opts.tokens)
    opts.current_streams = streams
    tasks = [asyncio.create_task(client_stream(i, level, target, opts)) for i in range(streams)]
    await asyncio.sleep(level.t0 - time.monotonic())
    before, began = cpu_snapshot(pids), time.monotonic()
    await asyncio.sleep(level.t1 - time.monotonic())
    after, ended = cpu_snapshot(pids), time.monotonic()
    # A busy event loop wakes late: the CPU figures are scaled from the snapshots' interval to the window's.
    scale = opts.duration / (ended - began)
    level.stopping = True
    for conn in level.conns:
        conn.transport.close()
    await asyncio.gather(*tasks)
    return level, {role: (after[role] - before[role]) * scale for role in after}


# ---------------------------------------------------------------- processes, CPU, parts

def cpu_of(pid):
    with open("/proc/%d/stat" % pid, encoding="utf-8") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def cpu_snapshot(pids):
    """CPU seconds per role (each role's processes and their descendants), and the machine's busy seconds."""
    parents = {}
    for stat in glob.glob("/proc/[0-9]*/stat"):
        try:
            with open(stat, encoding="utf-8") as handle:
                parents[int(stat.split("/")[2])] = int(handle.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            pass
    out = {}
    for role, roots in pids.items():
        family, todo = set(), list(roots) if role != "client" else []  # the client's children are the parts
        family.update(roots)
        while todo:
            pid = todo.pop()
            family.add(pid)
            todo += [child for child, parent in parents.items() if parent == pid and child not in family]
        total = 0.0
        for pid in family:
            try:
                total += cpu_of(pid)
            except (OSError, ValueError):
                pass
        out[role] = total
    with open("/proc/stat", encoding="utf-8") as handle:
        ticks = [int(x) for x in handle.readline().split()[1:]]
    out["busy"] = (sum(ticks[:8]) - ticks[3] - ticks[4]) / TICK
    return out


class Procs:
    """Every process the run starts, each in its own session so that a kill takes its children too."""

    def __init__(self, logs, gateway_cpus=None):
        self.logs, self.started, self.gateway_cpus = logs, [], gateway_cpus

    def start(self, role, argv, env=None, gateway=False):
        """gateway: a process of the gateway's path (Caddy, a tap, a router), on --pin's gateway cores if given (taskset
        sets them before it starts, so that every thread it spawns inherits them); the rest inherit the client's."""
        name = os.path.join(self.logs, role.replace(" ", "-") + ".log")
        log = open(name, "ab")  # pylint: disable=consider-using-with
        if gateway and self.gateway_cpus:
            argv = ["taskset", "--cpu-list", ",".join(str(c) for c in sorted(self.gateway_cpus))] + list(argv)
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        log.close()
        self.started.append((role, proc))
        return proc

    def stop(self, proc):
        for sig, wait in ((signal.SIGTERM, 5), (signal.SIGKILL, 5)):
            try:
                os.killpg(proc.pid, sig)
                proc.wait(timeout=wait)
                return
            except ProcessLookupError:
                return
            except subprocess.TimeoutExpired:
                continue

    def stop_all(self):
        for _role, proc in reversed(self.started):
            self.stop(proc)


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def pinned(name, default):
    try:
        with open(os.path.join(ROOT, "requirements-router.txt"), encoding="utf-8") as handle:
            match = re.search(r"^%s==(\S+)" % re.escape(name), handle.read(), re.M)
        return match.group(1) if match else default
    except OSError:
        return default


def venv(package, version):
    """A venv of its own per router: sglang-router and smg both install a console script `smg`."""
    path = os.path.join(CACHE, "%s-%s" % (package, version))
    if not os.path.exists(os.path.join(path, ".stamp")):
        print("installing %s==%s into %s" % (package, version, path), flush=True)
        subprocess.run([sys.executable, "-m", "venv", "--clear", path], check=True)
        subprocess.run([os.path.join(path, "bin", "pip"), "install", "-q", "--disable-pip-version-check",
                        "--no-compile", "%s==%s" % (package, version)], check=True)
        open(os.path.join(path, ".stamp"), "w", encoding="utf-8").close()  # pylint: disable=consider-using-with
    return os.path.join(path, "bin")


def caddy_binary():
    """Debian's caddy package, unpacked without root: the harness's cached .deb, else apt-get download."""
    exe = os.path.join(CACHE, "caddy", "usr", "bin", "caddy")
    if not os.path.exists(exe):
        debs = sorted(glob.glob(os.path.join(DEB_CACHE, "*", "caddy_*.deb")))
        tmp = tempfile.mkdtemp(prefix="caddy-deb.", dir=CACHE)
        if not debs:
            subprocess.run(["apt-get", "download", "caddy"], cwd=tmp, check=True, stdout=subprocess.DEVNULL)
            debs = glob.glob(os.path.join(tmp, "caddy_*.deb"))
        subprocess.run(["dpkg", "-x", debs[-1], os.path.join(CACHE, "caddy")], check=True)
        shutil.rmtree(tmp, ignore_errors=True)
    return exe


CADDY_SITE = """
https://localhost:%(port)d {
    tls internal
    log {
        output file %(log)s-%(port)d.log
        format filter {
            wrap json
            fields {
                request>headers>Authorization delete
            }
        }
    }
    @key header Authorization "Bearer %(key)s"
    handle @key {
        request_body {
            max_size 33554432
        }
        # The gateway site's options (roles/caddy_proxy/templates/Caddyfile.j2): no flush_interval -1 there, as
        # text/event-stream is flushed at once.
        reverse_proxy 127.0.0.1:%(upstream)d {
            lb_try_duration 10s
            lb_try_interval 250ms
            header_up -Authorization
            header_up -X-Api-Key
            header_up X-LLM-Client demo
            transport http {
                dial_timeout 5s
                response_header_timeout 15m
                read_timeout 15m
                write_timeout 15m
            }
        }
    }
    handle {
        respond 401
    }
}
"""


def caddyfile(run, sites):
    head = ("{\n admin off\n skip_install_trust\n auto_https disable_redirects\n default_sni localhost\n"
            " servers {\n  protocols h1 h2\n  metrics\n  timeouts {\n   read_header 30s\n   idle 5m\n  }\n }\n}\n")
    return head + "".join(CADDY_SITE % dict(port=port, upstream=upstream, key=KEY, log=os.path.join(run, "access"))
                          for port, upstream in sites)


def smoke(host, port, tls, headers):
    """One streamed answer through a path: the body, or None while the path is not up yet."""
    url = "%s://%s:%d/v1/chat/completions" % ("https" if tls else "http", host, port)
    body = json.dumps({"model": MODEL, "stream": True, "messages": [{"role": "user", "content": "hi"}]}).encode()
    request = urllib.request.Request(url, data=body, headers=dict(headers, **{"Content-Type": "application/json"}))
    try:
        with urllib.request.urlopen(request, timeout=10, context=tls) as answer:
            data = answer.read()
        return data if b"[DONE]" in data else None
    except (OSError, ValueError):
        return None


def wait_for(what, check, timeout=90):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = check()
        if result:
            return result
        time.sleep(0.25)
    raise SystemExit("%s is not up after %d s (logs in %s)" % (what, timeout, os.path.join(CACHE, "run")))


# ---------------------------------------------------------------- report

def pct(values, q):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q / 100.0 * (len(ordered) - 1))))] if ordered else float("nan")


def figures(path, streams, level, cpu, opts):
    events = level.events
    own = {role: round(seconds, 3) for role, seconds in cpu.items() if role != "busy"}
    gateway = sum(cpu.get(role, 0.0) for role in GATEWAY_ROLES[path])
    return {"path": path, "streams": streams, "events": events, "events_per_s": events / opts.duration,
            "requests_ok": level.ok, "failures": level.failures, "failed": sum(level.failures.values()),
            "delay_ms": {"p50": pct(level.delays, 50) * 1e3, "p99": pct(level.delays, 99) * 1e3,
                         "n": len(level.delays)},
            "ttft_ms": {"p50": pct(level.ttft, 50) * 1e3, "p99": pct(level.ttft, 99) * 1e3, "n": len(level.ttft)},
            "cpu_s": own, "busy_cores": cpu["busy"] / opts.duration,
            "other_cpu_s": round(cpu["busy"] - sum(own.values()), 3),
            "cpu_s_per_1000_events": {role: 1000.0 * s / events if events else None for role, s in own.items()},
            "gateway_cores": gateway / opts.duration,
            "tokens_per_s_per_gateway_core": events / gateway if gateway else None}


def compare(rows):
    by = {(r["path"], r["streams"]): r for r in rows}
    for row in rows:
        base, smg = by.get(("straight", row["streams"])), by.get(("smg", row["streams"]))
        row["x_straight"] = row["events_per_s"] / base["events_per_s"] if base and base["events_per_s"] else None
        row["x_smg"] = row["events_per_s"] / smg["events_per_s"] if smg and smg["events_per_s"] else None
        for key in ("delay_ms", "ttft_ms"):
            row["added_" + key] = {q: row[key][q] - base[key][q] for q in ("p50", "p99")} if base else None


def table(rows, host):
    fmt = "%-8s %5s %8s %6s %6s %8s %8s %8s %8s %6s %19s %7s %6s %6s %7s"
    lines = ["gateway token path on %s; client, doubles and proxies share these cores" % host,
             fmt % ("path", "strms", "ev/s", "x str", "x smg", "+ev p50", "+ev p99", "+1st p50", "+1st p99", "failed",
                    "CPU s/1k ev c/t/r", "doubles", "client", "busy", "tok/s/c"),
             fmt % ("", "", "", "", "", "ms", "ms", "ms", "ms", "", "caddy/tap/router", "", "", "cores", "gw core")]

    def num(value, form="%.2f"):
        return "-" if value is None else form % value
    for row in rows:
        per = row["cpu_s_per_1000_events"]
        roles = GATEWAY_ROLES[row["path"]]
        caddy = per.get("caddy") if "caddy" in roles else None
        tap = per.get("tap" if "tap" in roles else "old tap") if row["path"] in ("whole", "before") else None
        router = per.get(roles[-1]) if roles else None
        added = row["added_delay_ms"] or {}
        first = row["added_ttft_ms"] or {}
        lines.append(fmt % (row["path"], row["streams"], num(row["events_per_s"], "%.0f"), num(row["x_straight"]),
                            num(row["x_smg"]), num(added.get("p50")), num(added.get("p99")), num(first.get("p50")),
                            num(first.get("p99")), row["failed"],
                            "/".join(num(v, "%.3f") for v in (caddy, tap, router)), num(per.get("doubles"), "%.3f"),
                            num(per.get("client"), "%.3f"), num(row["busy_cores"]),
                            num(row["tokens_per_s_per_gateway_core"], "%.0f")))
    return "\n".join(lines)


def plot(rows, paths, png):
    import matplotlib  # pylint: disable=import-outside-toplevel,import-error
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel,import-error
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    for path in paths:
        mine = [r for r in rows if r["path"] == path]
        xs = [r["streams"] for r in mine]
        left.plot(xs, [r["events_per_s"] for r in mine], marker="o", label=TITLES[path])
        if path != "straight":
            right.plot(xs, [r["added_delay_ms"]["p99"] for r in mine], marker="o", label=path + " per event")
            right.plot(xs, [r["added_ttft_ms"]["p99"] for r in mine], marker="x", linestyle="--",
                       label=path + " first event")
    for axis, title in ((left, "token events/s"), (right, "added p99 delay vs straight (ms)")):
        axis.set_xscale("log", base=2)
        axis.set_xlabel("concurrent streams")
        axis.set_title(title)
        axis.grid(True, alpha=0.3)
        axis.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(png, dpi=110)


# ---------------------------------------------------------------- main

def machine():
    with open("/proc/meminfo", encoding="utf-8") as handle:
        mem = int(handle.readline().split()[1]) / 2 ** 20
    return "%d cores, %.0f GiB" % (os.cpu_count(), mem)


def cpu_list(text):
    """'0-3,8' -> {0, 1, 2, 3, 8}."""
    cpus = set()
    for part in text.split(","):
        first, _sep, last = part.partition("-")
        cpus.update(range(int(first), int(last or first) + 1))
    if not cpus <= set(range(os.cpu_count())):
        raise ValueError(text)
    return cpus


def start_parts(procs, opts, run, notes):
    """Doubles, routers, taps and Caddy for the paths asked; returns (targets, pids per role)."""
    py = os.path.realpath(sys.executable)
    doubles = [free_port(), free_port()]
    pids = {"client": [os.getpid()], "doubles": []}
    for port in doubles:
        argv = [py, __file__, "--serve-double", str(port), "--tokens", str(opts.tokens),
                "--interval", str(opts.interval)]
        pids["doubles"].append(procs.start("double-%d" % port, argv).pid)
    for port in doubles:
        wait_for("double :%d" % port, lambda p=port: smoke("127.0.0.1", p, None, {}))
    targets = {"straight": [("127.0.0.1", port, None, "") for port in doubles]}
    workers = ["http://127.0.0.1:%d" % port for port in doubles]
    routers = {}
    need = set(opts.paths)
    for name, package, argv in (("smg", "smg", ["smg", "launch"]),
                                ("sglang-router", "sglang-router", ["python", "-m", "sglang_router.launch_router"])):
        if name == "smg" and not need & {"smg", "whole"} or name == "sglang-router" and "before" not in need:
            continue
        version = pinned(package, "1.13.0" if name == "smg" else "0.3.2")
        notes.append("%s %s" % (package, version))
        port = routers[name] = free_port()
        argv = [os.path.join(venv(package, version), argv[0])] + argv[1:]
        pids[name] = [procs.start(name, argv + ["--worker-urls"] + workers + [
            "--policy", "cache_aware", "--host", "127.0.0.1", "--port", str(port), "--prometheus-host", "127.0.0.1",
            "--prometheus-port", str(free_port())], gateway=True).pid]
        wait_for(name, lambda p=port: smoke("127.0.0.1", p, None, {}))
    targets["smg"] = [("127.0.0.1", routers.get("smg"), None, "")]
    if not need & {"whole", "before"}:
        return targets, pids
    old = os.path.join(run, "kimi_usage_tap-%s.py" % opts.before_rev.replace("/", "_"))
    with open(old, "wb") as handle:
        rev = "%s:%s" % (opts.before_rev, os.path.relpath(TAP, ROOT))
        handle.write(subprocess.run(["git", "-C", ROOT, "show", rev], check=True, capture_output=True).stdout)
    tap_py = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else py
    taps, sites = {}, []
    for path, role, router in (("whole", "tap", "smg"), ("before", "old tap", "sglang-router")):
        if path in need:
            taps[path] = (role, router, free_port())
            sites.append((free_port(), taps[path][2]))
    caddy_home = os.path.join(run, "caddy-home")
    with open(os.path.join(run, "Caddyfile"), "w", encoding="utf-8") as handle:
        handle.write(caddyfile(run, sites))
    env = dict(os.environ, HOME=caddy_home, XDG_DATA_HOME=os.path.join(caddy_home, "data"),
               XDG_CONFIG_HOME=os.path.join(caddy_home, "config"))
    pids["caddy"] = [procs.start("caddy", [caddy_binary(), "run", "--config", os.path.join(run, "Caddyfile"),
                                           "--adapter", "caddyfile"], env=env, gateway=True).pid]
    root_crt = os.path.join(caddy_home, "data", "caddy", "pki", "authorities", "local", "root.crt")
    wait_for("Caddy's internal CA", lambda: os.path.exists(root_crt))
    tls = ssl.create_default_context(cafile=root_crt)
    auth = {"Authorization": "Bearer " + KEY}

    def start_tap(path, source):
        role, router, port = taps[path]
        argv = [tap_py, source, "--listen", "127.0.0.1:%d" % port, "--upstream", "127.0.0.1:%d" % routers[router],
                "--metrics", "127.0.0.1:%d" % free_port(), "--retry-seconds", "10"]
        usage = subprocess.run([tap_py, source, "--help"], capture_output=True, text=True, check=False).stdout
        # The asyncio tap's options; an older tap has neither.
        argv += ["--backlog", "4096"] if "--backlog" in usage else []
        argv += ["--upstream-pool", "1024"] if "--upstream-pool" in usage else []
        pids[role] = [procs.start(role, argv, gateway=True).pid]
        return procs.started[-1][1]

    for (path, (role, _router, _port)), (site, _upstream) in zip(taps.items(), sites):
        source = TAP if path == "whole" else old
        proc = start_tap(path, source)
        targets[path] = [("localhost", site, tls, "Authorization: Bearer %s\r\n" % KEY)]
        try:
            wait_for(TITLES[path], lambda s=site: smoke("localhost", s, tls, auth), timeout=30)
        except SystemExit:
            if path != "whole":
                raise
            notes.append("the tap in the tree did not answer through Caddy: 'whole' runs the %s tap" % opts.before_rev)
            procs.stop(proc)
            start_tap(path, old)
            wait_for(TITLES[path], lambda s=site: smoke("localhost", s, tls, auth), timeout=30)
        else:
            if path == "whole":
                with open(TAP, "rb") as new, open(old, "rb") as before:
                    same = new.read() == before.read()
                notes.append("tap (whole): the working tree's" + (" (= %s)" % opts.before_rev if same else ""))
        if "t" not in json.loads(smoke("localhost", site, tls, auth).split(b"data: ", 2)[1].split(b"\n")[0]):
            notes.append("%s drops the events' send time: no per-event delay" % path)
    notes.append("Caddy %s" % subprocess.run([caddy_binary(), "version"], capture_output=True, text=True,
                                             check=False).stdout.split()[0])
    return targets, pids


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n", maxsplit=1)[0])
    parser.add_argument("--streams", default="16,64,256,1024", help="concurrencies, comma-separated")
    parser.add_argument("--paths", default=",".join(PATHS), help="of: %s" % ", ".join(PATHS))
    parser.add_argument("--duration", type=float, default=10.0, help="measured seconds per run")
    parser.add_argument("--warmup", type=float, default=2.0, help="seconds per run before the window")
    parser.add_argument("--tokens", type=int, default=256, help="token events per answer")
    parser.add_argument("--interval", type=float, default=0.0, help="seconds between a double's tokens (0: none)")
    # the landed main before the gateway moved to SMG and the asyncio tap (issue 52)
    parser.add_argument("--before-rev", default=BEFORE_REV, help="git revision of the tap on the 'before' path")
    parser.add_argument("--out", default=os.path.join(ROOT, "bench", "results",
                                                      "gateway-%s.json" % datetime.date.today().isoformat()),
                        help="the JSON file; the PNG goes beside it")
    parser.add_argument("--pin", metavar="GATEWAY:LOAD",
                        help="CPU lists (e.g. 1:0 or 8-15:0-7): the gateway's processes (Caddy, taps, routers) on the "
                             "first, the client and the doubles on the second, as on a gateway host of its own")
    parser.add_argument("--serve-double", type=int, help=argparse.SUPPRESS)
    opts = parser.parse_args()
    if opts.serve_double:
        asyncio.run(serve_double(opts.serve_double, opts.tokens, opts.interval))
        return 0
    opts.paths = [p for p in PATHS if p in opts.paths.split(",")]
    levels = [int(n) for n in opts.streams.split(",")]
    if not opts.paths or "straight" not in opts.paths:
        parser.error("--paths must include straight (the figures are relative to it)")
    # 1024 streams: the client, each proxy and the doubles hold a socket per stream (two for a proxy).
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 65536)), hard))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # through the finally below
    run = os.path.join(CACHE, "run")
    shutil.rmtree(run, ignore_errors=True)
    os.makedirs(run)
    gateway_cpus = None
    if opts.pin:
        try:
            gateway_cpus, load_cpus = (cpu_list(part) for part in opts.pin.split(":"))
        except ValueError:
            parser.error("--pin takes GATEWAY:LOAD CPU lists, e.g. 1:0")
        os.sched_setaffinity(0, load_cpus)  # the client, and the doubles it starts
    procs, notes, rows = Procs(run, gateway_cpus), [], []
    if opts.pin:
        notes.append("pinned: gateway on CPUs %s, client and doubles on %s" % tuple(opts.pin.split(":")))
    try:
        targets, pids = start_parts(procs, opts, run, notes)
        print("parts: %s; logs in %s" % ("; ".join(notes), run), flush=True)
        for streams in levels:
            for path in opts.paths:
                level, cpu = asyncio.run(run_level(targets[path], streams, pids, opts))
                rows.append(figures(path, streams, level, cpu, opts))
                print("  %-8s %5d streams: %8.0f events/s, %d failed, busy %.2f cores" % (
                    path, streams, rows[-1]["events_per_s"], rows[-1]["failed"], rows[-1]["busy_cores"]), flush=True)
                time.sleep(0.5)  # the closed connections' teardown stays out of the next window
    finally:
        procs.stop_all()
    compare(rows)
    print(table(rows, machine()))
    for row in rows:
        if row["failures"]:
            print("failures %s %d: %s" % (row["path"], row["streams"], row["failures"]))
    os.makedirs(os.path.dirname(os.path.abspath(opts.out)), exist_ok=True)
    result = {"date": datetime.datetime.now().isoformat(timespec="seconds"), "machine": machine(),
              "options": {k: v for k, v in vars(opts).items() if k not in ("serve_double", "current_streams")},
              "parts": notes, "paths": {p: TITLES[p] for p in opts.paths}, "rows": rows}
    with open(opts.out, "w", encoding="utf-8") as handle:
        json.dump(result, handle, indent=1)
    png = os.path.splitext(opts.out)[0] + ".png"
    plot(rows, opts.paths, png)
    print("wrote %s and %s" % (opts.out, png))
    return 0


if __name__ == "__main__":
    sys.exit(main())
