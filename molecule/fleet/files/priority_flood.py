"""An interactive key's time to first token through the fleet gateway, idle and while a batch key floods it, for
molecule/fleet's verify (stdlib only; it runs on the gateway host). The two keys come on stdin, interactive first.

Idle: CHATS streamed chats with the interactive key, one every CHAT_EVERY seconds (open loop: the same arrivals in
both phases), each to its first content or reasoning delta. Then FLOOD threads stream with the batch key back to back
(each answer BULK_TOKENS long), and after FILL seconds the same chats again. One JSON document on stdout: both phases'
times, the batch requests finished during the flooded phase and every failed request's status.

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


def main():
    url = sys.argv[1]
    interactive, batch = sys.stdin.read().split()[:2]
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE  # Caddy's internal CA; TLS is not under test

    def stream(key, text, max_tokens):
        """(seconds to the first content or reasoning delta or None, HTTP status or the error)."""
        body = json.dumps({"model": "kimi-k2.6", "messages": [{"role": "user", "content": text}], "stream": True,
                           "max_tokens": max_tokens}).encode()
        request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json",
                                                                  "Authorization": "Bearer " + key})
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
        except (OSError, ValueError) as failed:
            return None, repr(failed)[:200]

    def chats(phase):
        results = [None] * CHATS
        threads = []
        for index in range(CHATS):
            def one(index=index):
                results[index] = stream(interactive, "Hello %s %d" % (phase, index), CHAT_TOKENS)
            threads.append(threading.Thread(target=one, daemon=True))
            threads[-1].start()
            time.sleep(CHAT_EVERY)
        for thread in threads:
            thread.join(60)
        return results

    idle = chats("idle")
    flood = {"stop": False, "done": 0, "failed": []}
    text = " ".join("row%d" % index for index in range(60))  # an answer longer than BULK_TOKENS: each is cut at it

    def bulk():
        while not flood["stop"]:
            first, status = stream(batch, text, BULK_TOKENS)
            if status == 200 and first is not None:
                flood["done"] += 1
            else:
                flood["failed"].append(status)
    threads = [threading.Thread(target=bulk, daemon=True) for index in range(FLOOD)]
    for thread in threads:
        thread.start()
    time.sleep(FILL)
    done_before = flood["done"]
    flooded = chats("flooded")
    done_during = flood["done"] - done_before
    flood["stop"] = True
    for thread in threads:
        thread.join(60)
    json.dump({"idle": [r[0] for r in idle], "flooded": [r[0] for r in flooded],
               "failed": [r[1] for r in idle + flooded if r[1] != 200 or r[0] is None] + flood["failed"],
               "batch_done_during": done_during, "batch_done": flood["done"]}, sys.stdout)


if __name__ == "__main__":
    main()
