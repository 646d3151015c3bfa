#!/usr/bin/env python
"""Latency Caddy adds in front of the engine, on loopback, in one run: direct vs through the proxy.

Runs on the serving host (standard library only), e.g. inside the molecule caddy_proxy instance (`make bench-proxy`):

    python3 bench/caddy_latency.py [--requests 300] [--direct http://127.0.0.1:30000]
        [--proxy https://localhost:8443] [--ca /var/lib/caddy/.local/share/caddy/pki/authorities/local/root.crt]
        [--key-map /etc/caddy/kimi-api-keys.caddy]

Two measurements, each over one kept-alive connection per path (as an SDK client does), direct and proxied
requests interleaved so that drift on a shared machine hits both alike:
  - a small non-streaming chat completion (max_tokens 8): time to the complete response;
  - a streaming chat completion: time to the first `data:` event (TTFE).
The API key is read from the key map the role wrote (first client), so it never appears in argv.
Prints p50/p99 per path, the added latency (proxy - direct) and the ratio proxy/direct.
"""
import argparse
import http.client
import json
import re
import ssl
import statistics
import sys
import time
import urllib.parse

BODY = {"model": "kimi-k2.6", "max_tokens": 8, "messages": [{"role": "user", "content": "Say hi"}],
        "chat_template_kwargs": {"thinking": False}}


def connect(url, ca):
    parts = urllib.parse.urlsplit(url)
    if parts.scheme == "https":
        context = ssl.create_default_context(cafile=ca)
        return http.client.HTTPSConnection(parts.hostname, parts.port or 443, context=context, timeout=60)
    return http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=60)


def one(conn, headers, stream):
    body = json.dumps(dict(BODY, stream=stream)).encode()
    start = time.perf_counter()
    conn.request("POST", "/v1/chat/completions", body=body, headers=headers)
    response = conn.getresponse()
    if response.status != 200:
        raise SystemExit("HTTP %d: %s" % (response.status, response.read()[:200]))
    if not stream:
        response.read()
        return time.perf_counter() - start
    first = None
    while True:
        line = response.readline()
        if not line:
            break
        if first is None and line.startswith(b"data:"):
            first = time.perf_counter() - start
    return first


def pct(values, q):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q / 100.0 * (len(ordered) - 1))))]


def read_key(path):
    with open(path) as handle:
        match = re.search(r'"Bearer ([^"]+)" [a-z0-9_-]+\s', handle.read())
    if not match:
        raise SystemExit("no client key in %s" % path)
    return match.group(1)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n", maxsplit=1)[0])
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--direct", default="http://127.0.0.1:30000")
    parser.add_argument("--proxy", default="https://localhost:8443")
    parser.add_argument("--ca", default="/var/lib/caddy/.local/share/caddy/pki/authorities/local/root.crt")
    parser.add_argument("--key-map", default="/etc/caddy/kimi-api-keys.caddy")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON too")
    args = parser.parse_args()

    key = read_key(args.key_map)
    paths = {"direct": (connect(args.direct, None), {"Content-Type": "application/json"}),
             "proxy": (connect(args.proxy, args.ca), {"Content-Type": "application/json",
                                                      "Authorization": "Bearer " + key})}
    results = {}
    for kind, stream in (("non-streaming", False), ("stream TTFE", True)):
        samples = {"direct": [], "proxy": []}
        for i in range(args.warmup + args.requests):
            for name in ("direct", "proxy") if i % 2 == 0 else ("proxy", "direct"):
                conn, headers = paths[name]
                value = one(conn, headers, stream)
                if i >= args.warmup:
                    samples[name].append(value * 1000.0)
        results[kind] = {name: {"p50": statistics.median(v), "p99": pct(v, 99), "n": len(v)}
                         for name, v in samples.items()}

    print("Caddy added latency on loopback, %d requests per path (after %d warm-up), kept-alive TLS"
          % (args.requests, args.warmup))
    print("%-14s %-7s %9s %9s" % ("request", "path", "p50 ms", "p99 ms"))
    for kind, paths_ in results.items():
        for name in ("direct", "proxy"):
            print("%-14s %-7s %9.3f %9.3f" % (kind, name, paths_[name]["p50"], paths_[name]["p99"]))
        added50 = paths_["proxy"]["p50"] - paths_["direct"]["p50"]
        added99 = paths_["proxy"]["p99"] - paths_["direct"]["p99"]
        print("%-14s %-7s %9.3f %9.3f   ratio proxy/direct p50 %.2fx, p99 %.2fx; goal <= 1 ms added at p50: %s"
              % (kind, "added", added50, added99, paths_["proxy"]["p50"] / paths_["direct"]["p50"],
                 paths_["proxy"]["p99"] / paths_["direct"]["p99"], "PASS" if added50 <= 1.0 else "MISS"))
        paths_["added_p50"], paths_["added_p99"] = added50, added99
    if args.json:
        print(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
