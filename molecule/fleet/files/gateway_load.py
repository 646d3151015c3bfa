"""A bounded client load through the fleet gateway, for molecule/fleet's verify (stdlib only; it runs on the gateway
host). N threads each send a short chat request, wait PAUSE seconds and send the next, until the stop file appears or the
time runs out; then one JSON document on stdout: every request's start time, latency, HTTP status (0: no answer) and
which engine answered (the engine doubles name themselves in the content). Each prompt starts with its own random text, so a cache-aware
router has no shared prefix to follow and spreads them. The client key comes on stdin.
With WORKERS_URL (the router's own worker list, GET /workers), one more thread reads it every 0.2 s and records each
change of the listed worker URLs ("workers": null while the router does not answer): the proof that a switching
instance left the gateway is the router's list, not the switch's own words.

    python3 gateway_load.py URL STOP_FILE [THREADS] [MAX_SECONDS] [PAUSE_SECONDS] [WORKERS_URL] < key
"""
import json
import os
import ssl
import sys
import threading
import time
import uuid
import urllib.error
import urllib.request


def main():
    url, stop_file = sys.argv[1], sys.argv[2]
    threads = int(sys.argv[3]) if len(sys.argv) > 3 else 4
    max_seconds = float(sys.argv[4]) if len(sys.argv) > 4 else 600
    pause = float(sys.argv[5]) if len(sys.argv) > 5 else 0.05
    workers_url = sys.argv[6] if len(sys.argv) > 6 else None
    key = sys.stdin.read().strip()
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE  # Caddy's internal CA; TLS is not under test
    records, listed, lock = [], [], threading.Lock()
    deadline = time.time() + max_seconds

    def worker(index):
        n = 0
        while time.time() < deadline and not os.path.exists(stop_file):
            n += 1
            body = json.dumps({"model": "kimi-k2.6", "max_tokens": 32,
                               "messages": [{"role": "user", "content": "%s load %d-%d" % (uuid.uuid4().hex, index, n)}]}).encode()
            request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json",
                                                                      "Authorization": "Bearer " + key})
            started = time.time()
            status, engine, error = 0, None, None
            try:
                with urllib.request.urlopen(request, timeout=60, context=context) as response:
                    status = response.status
                    content = json.loads(response.read())["choices"][0]["message"].get("content") or ""
                    engine = "vllm" if "(vllm)" in content else "sglang" if "(sglang)" in content else "other"
            except urllib.error.HTTPError as failed:
                status, error = failed.code, failed.read()[:200].decode("utf-8", "replace")
            except (OSError, ValueError, KeyError) as failed:
                error = str(failed)[:200]
            with lock:
                records.append({"at": started, "seconds": time.time() - started, "status": status, "engine": engine,
                                "error": error})
            time.sleep(pause)

    def watch():
        last = ()
        while time.time() < deadline and not os.path.exists(stop_file):
            try:
                with urllib.request.urlopen(workers_url, timeout=5) as response:
                    now = sorted(w["url"] for w in json.loads(response.read()).get("workers") or [])
            except (OSError, ValueError, KeyError, TypeError):
                now = None
            if now != last:
                listed.append({"at": time.time(), "workers": now})
                last = now
            time.sleep(0.2)

    pool = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(threads)]
    if workers_url:
        pool.append(threading.Thread(target=watch, daemon=True))
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    json.dump({"records": records, "listed": listed}, sys.stdout)


if __name__ == "__main__":
    main()
