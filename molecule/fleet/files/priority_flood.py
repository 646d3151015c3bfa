"""An interactive client's time to first token through a gateway, idle and while a batch client floods it (stdlib
only). molecule/fleet's verify runs it on the gateway host through Caddy, with the two keys on stdin (interactive
first); tests/unit/doubles/test_gateway_priority.py imports flood() and p90() and runs them against SMG directly.

Idle: `chats` streamed chats as the interactive client, one every CHAT_EVERY seconds (open loop: the same arrivals in
both phases), each to its first content or reasoning delta. Then FLOOD threads stream as the batch client back to back
(each answer BULK_TOKENS long), and after `fill` seconds the same chats again. One JSON document on stdout: both
phases' times and p90s, the batch requests finished during the flooded phase, and every failed request's status.

    python3 priority_flood.py URL < keys
"""
import json
import ssl
import sys
import threading
import time
import urllib.error
import urllib.request

CHATS, CHAT_EVERY, CHAT_TOKENS = 30, 0.15, 3
FLOOD, FILL, BULK_TOKENS = 16, 2.0, 25


def stream(url, headers, text, max_tokens, context=None):
    """One streamed chat: (seconds to the first content or reasoning delta or None, HTTP status or the error)."""
    body = json.dumps({"model": "kimi-k2.6", "messages": [{"role": "user", "content": text}], "stream": True,
                       "max_tokens": max_tokens}).encode()
    request = urllib.request.Request(url, data=body, headers=dict(headers, **{"Content-Type": "application/json"}))
    started, first = time.time(), None
    try:
        with urllib.request.urlopen(request, timeout=60, context=context) as response:
            for raw in response:
                line = raw.decode().strip()
                if first is None and line.startswith("data: {") and any(
                        (c.get("delta") or {}).get("content") or (c.get("delta") or {}).get("reasoning_content")
                        for c in json.loads(line[6:]).get("choices") or []):
                    first = time.time() - started
            return first, response.status
    except urllib.error.HTTPError as failed:
        return None, failed.code
    except (OSError, ValueError) as failed:  # refused or cut (the flood's last requests as a test ends): kept
        return None, repr(failed)[:200]


def p90(values):
    """Nearest rank: the ceil(0.9 n)-th of the times (a failed request has none)."""
    ordered = sorted(v for v in values if v is not None)
    return ordered[-(-9 * len(ordered) // 10) - 1] if ordered else None


def flood(url, interactive, batch, chats=CHATS, fill=FILL, context=None):
    """The two phases; interactive and batch: each client's request headers."""
    def phase(name):
        results = [None] * chats
        threads = []
        for index in range(chats):
            def one(index=index):
                results[index] = stream(url, interactive, "Hello %s %d" % (name, index), CHAT_TOKENS, context)
            threads.append(threading.Thread(target=one, daemon=True))
            threads[-1].start()
            time.sleep(CHAT_EVERY)
        for thread in threads:
            thread.join(60)
        return [r or (None, "no answer in 60 s") for r in results]

    idle = phase("idle")
    state = {"stop": False, "done": 0, "failed": []}
    text = " ".join("row%d" % index for index in range(60))  # an answer longer than BULK_TOKENS: each is cut at it

    def bulk():
        while not state["stop"]:
            first, status = stream(url, batch, text, BULK_TOKENS, context)
            if status == 200 and first is not None:
                state["done"] += 1
            else:
                state["failed"].append(status)
    for _index in range(FLOOD):
        threading.Thread(target=bulk, daemon=True).start()
    try:
        time.sleep(fill)
        done_before = state["done"]
        flooded = phase("flooded")
        done_during = state["done"] - done_before
    finally:
        state["stop"] = True  # the flood's threads end after their request (daemons: nobody waits for them)
    return {"idle": [r[0] for r in idle], "flooded": [r[0] for r in flooded],
            "idle_p90": p90(r[0] for r in idle), "flooded_p90": p90(r[0] for r in flooded),
            "chat_failed": [r[1] for r in idle + flooded if r[1] != 200 or r[0] is None],
            "batch_failed": list(state["failed"]), "batch_done_during": done_during}


def main():
    url = sys.argv[1]
    interactive, batch = sys.stdin.read().split()[:2]
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE  # Caddy's internal CA; TLS is not under test
    json.dump(flood(url, {"Authorization": "Bearer " + interactive}, {"Authorization": "Bearer " + batch},
                    context=context), sys.stdout)


if __name__ == "__main__":
    main()
