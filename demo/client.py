#!/usr/bin/env python
"""The demo's client: what a user's OpenAI client does against the endpoint make demo built, from this machine,
through Caddy over TLS. Standard library only.

    python3 demo/client.py --endpoint https://localhost:8443/v1 --api-key-file .demo/client-key --ca .demo/ca.crt

Asks for the model list, a chat completion (its reasoning must come back apart from the answer: reasoning_content,
not think markup in content), a tool call and a vision answer with the client key, then the model list without a key
(it must be refused with 401). Prints one line per request; exits 1 when any of them is wrong.
The key is read from its file and sent in a header: it is never printed and never in a process's arguments.
"""
import argparse
import base64
import json
import ssl
import struct
import sys
import time
import urllib.error
import urllib.request
import zlib


def png(width, height, rgb):
    """A solid-colour 8-bit RGB PNG."""
    def chunk(kind, body):
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
    rows = b"".join(b"\x00" + bytes(rgb) * width for _row in range(height))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


# Think markup that must never reach content once the engine splits the reasoning out (Kimi K2's and K3's formats:
# plugins/module_utils/_chat_format.py).
THINK_MARKUP = ("<think>", "</think>", "<|open|>think<|sep|>", "<|close|>think<|sep|>")


class Client:
    def __init__(self, endpoint, key, ca, timeout=60):
        self.endpoint = endpoint.rstrip("/")
        self.key = key
        self.context = ssl.create_default_context(cafile=ca) if ca else ssl.create_default_context()
        self.timeout = timeout

    def call(self, path, body=None, key=True):
        """(status, decoded JSON or text, seconds)."""
        headers = {"Content-Type": "application/json"}
        if key:
            headers["Authorization"] = "Bearer " + self.key
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.endpoint + path, data=data, headers=headers)
        start = time.monotonic()
        try:
            with urllib.request.urlopen(req, context=self.context, timeout=self.timeout) as resp:
                status, raw = resp.status, resp.read()
        except urllib.error.HTTPError as e:
            status, raw = e.code, e.read()
        took = time.monotonic() - start
        try:
            return status, json.loads(raw), took
        except ValueError:
            return status, raw.decode("utf-8", "replace"), took


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    ap.add_argument("--endpoint", required=True, help="the OpenAI base URL, https://host:port/v1")
    ap.add_argument("--api-key-file", required=True, help="a file holding one client key")
    ap.add_argument("--ca", help="the CA certificate to trust (Caddy's internal root)")
    ap.add_argument("--model", default="kimi-k2.6")
    ap.add_argument("--no-reasoning-split", dest="reasoning_split", action="store_false",
                    help="the deployment has no Kimi reasoning parser: report where the thinking is, do not require it "
                         "in reasoning_content")
    args = ap.parse_args()
    with open(args.api_key_file) as f:
        key = f.read().strip()
    client = Client(args.endpoint, key, args.ca)
    problems = []

    def check(label, ok, text):
        print("%-12s %s" % (label + ":", text))
        if not ok:
            problems.append(label)

    status, body, took = client.call("/models")
    ids = [m.get("id") for m in body.get("data", [])] if isinstance(body, dict) else []
    owner = next((m.get("owned_by") for m in body.get("data", []) if m.get("id") == args.model), "?") \
        if isinstance(body, dict) else "?"
    check("models", status == 200 and args.model in ids,
          "HTTP %d in %.0f ms: %s (served by %s)" % (status, took * 1000, ", ".join(map(str, ids)) or body, owner))

    status, body, took = client.call("/chat/completions", {
        "model": args.model, "max_tokens": 200,
        "messages": [{"role": "user", "content": "Say hello to the demo in one sentence."}]})
    message = body["choices"][0]["message"] if status == 200 else {}
    content = message.get("content") or ""
    check("completion", status == 200 and bool(content.strip()),
          "HTTP %d in %.0f ms: %s" % (status, took * 1000, content or body))
    # The reasoning split: the engine's reasoning parser puts the thinking in reasoning_content (vLLM also: reasoning)
    # and only the answer in content, with no think markup left in it (K2's <think>, K3's <|open|>think<|sep|>).
    # --no-reasoning-split: a deployment without a Kimi reasoning parser (its plan warns that the thinking comes back
    # inside content): what clients see is reported, not failed.
    reasoning = message.get("reasoning_content") or message.get("reasoning") or ""
    leaked = [m for m in THINK_MARKUP if m in content]
    if not args.reasoning_split:
        print("%-12s %s" % ("reasoning:", "not split (the deployment has no Kimi reasoning parser): %s" % (
            "inside content (%s)" % ", ".join(leaked) if leaked else reasoning.strip() or "none")))
    else:
        check("reasoning", status == 200 and bool(reasoning.strip()) and not leaked,
              "%s (apart from the answer)" % reasoning.strip() if reasoning.strip() and not leaked else
              "the thinking is %s, not in reasoning_content" % (
                  "inside content (%s)" % ", ".join(leaked) if leaked else "missing"))

    weather = {"type": "function", "function": {
        "name": "get_weather", "description": "Current weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
    status, body, took = client.call("/chat/completions", {
        "model": args.model, "max_tokens": 200, "tools": [weather], "tool_choice": "auto",
        "messages": [{"role": "user", "content": "What is the weather in Paris?"}]})
    calls = body["choices"][0]["message"].get("tool_calls") or [] if status == 200 else []
    check("tool call", status == 200 and bool(calls) and calls[0]["function"]["name"] == "get_weather",
          "HTTP %d in %.0f ms: %s" % (status, took * 1000, ", ".join(
              "%s(%s)" % (c["function"]["name"], c["function"]["arguments"]) for c in calls) or body))

    image = "data:image/png;base64," + base64.b64encode(png(32, 32, (20, 40, 220))).decode()
    status, body, took = client.call("/chat/completions", {
        "model": args.model, "max_tokens": 200,
        "messages": [{"role": "user", "content": [{"type": "text", "text": "What colour is this image?"},
                                                  {"type": "image_url", "image_url": {"url": image}}]}]})
    answer = body["choices"][0]["message"].get("content") or "" if status == 200 else ""
    check("vision", status == 200 and "blue" in answer.lower(),
          "HTTP %d in %.0f ms: a blue PNG -> %s" % (status, took * 1000, answer or body))

    status, body, took = client.call("/models", key=False)
    check("no key", status == 401, "HTTP %d (a request without a key is refused)" % status)

    if problems:
        print("demo client: FAILED: %s" % ", ".join(problems))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
