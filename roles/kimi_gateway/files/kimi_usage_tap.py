# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""kimi-usage-tap: tokens in and out per client key name, on the fleet gateway (stdlib only).

Caddy's gateway site checks the client key and sends the key's NAME (never the key) in X-LLM-Client; this tap sits
between Caddy and the router on loopback, passes every request and answer through unchanged, and counts what the
engines report in `usage`: from the JSON body of a plain answer, and from the last event of a stream (it asks for it
with stream_options.include_usage, and drops that extra event again when the client did not ask for it). Every
completions request is counted, errors included: no header a client could send exempts one.

    kimi_usage_tap.py --listen 127.0.0.1:30091 --upstream 127.0.0.1:30090 --metrics 127.0.0.1:29011 --retry-seconds 10

Series (Prometheus text at /metrics on --metrics): kimi_usage_requests_total{client,code},
kimi_usage_prompt_tokens_total{client}, kimi_usage_completion_tokens_total{client}.
"""

import argparse
import http.client
import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# caddy_proxy_clients' names (plugins/filter/caddy_clients.py NAME_RE; a unit test compares the two)
CLIENT_RE = re.compile(r"[a-z0-9_-]+")
COUNTED = ("/v1/chat/completions", "/v1/completions")
HOP_BY_HOP = {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailers",
              "transfer-encoding", "upgrade", "content-length"}


class Usage:
    """The counters, per client name."""

    def __init__(self):
        self.lock = threading.Lock()
        self.requests = {}
        self.prompt = {}
        self.completion = {}

    def count(self, client, code, usage):
        with self.lock:
            self.requests[(client, code)] = self.requests.get((client, code), 0) + 1
            if usage:
                self.prompt[client] = self.prompt.get(client, 0) + int(usage.get("prompt_tokens") or 0)
                self.completion[client] = self.completion.get(client, 0) + int(usage.get("completion_tokens") or 0)

    def text(self):
        with self.lock:
            lines = ["# HELP kimi_usage_requests_total Requests through the gateway, by client key name and HTTP code.",
                     "# TYPE kimi_usage_requests_total counter"]
            lines += ['kimi_usage_requests_total{client="%s",code="%s"} %d' % (c, k, n)
                      for (c, k), n in sorted(self.requests.items())]
            for name, table, what in (("prompt", self.prompt, "Prompt tokens"),
                                      ("completion", self.completion, "Completion tokens")):
                lines += ["# HELP kimi_usage_%s_tokens_total %s the engines reported, by client key name." % (name, what),
                          "# TYPE kimi_usage_%s_tokens_total counter" % name]
                lines += ['kimi_usage_%s_tokens_total{client="%s"} %d' % (name, c, n) for c, n in sorted(table.items())]
            return "\n".join(lines) + "\n"


def client_of(headers):
    name = (headers.get("X-LLM-Client") or "").strip()
    return name if CLIENT_RE.fullmatch(name) else "unknown"


def prepare(path, body):
    """(body to send upstream, stream, client asked for usage) - a stream is asked to end with its usage."""
    if path.split("?", 1)[0] not in COUNTED or not body:
        return body, False, True
    try:
        request = json.loads(body)
    except ValueError:
        return body, False, True
    if not isinstance(request, dict) or not request.get("stream"):
        return body, False, True
    options = request.get("stream_options") if isinstance(request.get("stream_options"), dict) else {}
    asked = bool(options.get("include_usage"))
    if not asked:
        request["stream_options"] = dict(options, include_usage=True)
        body = json.dumps(request).encode()
    return body, True, asked


def usage_of_event(data):
    """(usage or None, whether the event is the usage-only one: no choices) of one SSE data line's JSON."""
    try:
        event = json.loads(data)
    except ValueError:
        return None, False
    if not isinstance(event, dict) or not isinstance(event.get("usage"), dict):
        return None, False
    return event["usage"], not event.get("choices")


def make_handler(upstream, usage, retry=0.0):
    host, port = upstream.rsplit(":", 1)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt, *args):  # Caddy logs every request; the tap stays quiet
            pass

        def _relay(self):
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            counted = self.path.split("?", 1)[0] in COUNTED
            body, stream, asked = prepare(self.path, body)
            headers = dict((k, v) for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP)
            headers["Content-Length"] = str(len(body))
            connection = http.client.HTTPConnection(host, int(port), timeout=3600)
            try:
                # A router that restarts (its workers or release changed) refuses connections for a moment: the
                # connection is retried for --retry-seconds, as Caddy's lb_try_duration would; nothing was sent yet.
                deadline = time.time() + retry
                while True:
                    try:
                        connection.connect()
                        break
                    except ConnectionRefusedError:
                        if time.time() >= deadline:
                            raise
                        time.sleep(0.25)
                connection.request(self.command, self.path, body=body if body or self.command == "POST" else None,
                                   headers=headers)
                response = connection.getresponse()
            except OSError as error:
                self.send_error(502, "the gateway's router does not answer: %s" % error)
                if counted:
                    usage.count(client_of(self.headers), 502, None)
                return
            self.send_response(response.status, response.reason)
            for key, value in response.getheaders():
                if key.lower() not in HOP_BY_HOP:
                    self.send_header(key, value)
            found = None
            if stream and response.status == 200:
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                found = self._relay_stream(response, asked)
            else:
                data = response.read()
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                if response.status == 200:
                    try:
                        found = json.loads(data).get("usage")
                    except (ValueError, AttributeError):
                        found = None
            connection.close()
            if counted:
                usage.count(client_of(self.headers), response.status, found if isinstance(found, dict) else None)

        def _relay_stream(self, response, asked):
            """Pass the events on as they come (chunked); the usage event is kept, and dropped when not asked."""
            found, event = None, []
            while True:
                line = response.readline()
                if not line:
                    break
                event.append(line)
                if line not in (b"\n", b"\r\n"):
                    continue
                text = b"".join(event)
                event = []
                data = b"".join(part[5:].strip() for part in text.splitlines() if part.startswith(b"data:"))
                got, usage_only = usage_of_event(data) if data and data != b"[DONE]" else (None, False)
                if got:
                    found = got
                if usage_only and not asked:
                    continue
                self._chunk(text)
            if event:
                self._chunk(b"".join(event))
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
            return found

        def _chunk(self, data):
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

        do_GET = do_POST = do_DELETE = do_PUT = _relay

    return Handler


def make_metrics_handler(usage):
    class Metrics(BaseHTTPRequestHandler):
        def log_message(self, fmt, *args):
            pass

        def do_GET(self):
            if self.path.split("?", 1)[0] != "/metrics":
                self.send_error(404)
                return
            body = usage.text().encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    return Metrics


def serve(listen, upstream, metrics, retry=0.0):
    """Start the tap and its metrics listener; returns the two servers (threads run them)."""
    usage = Usage()
    servers = []
    for address, handler in ((listen, make_handler(upstream, usage, retry)), (metrics, make_metrics_handler(usage))):
        host, port = address.rsplit(":", 1)
        server = ThreadingHTTPServer((host, int(port)), handler)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
    return servers


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--listen", required=True, help="host:port the tap listens on (Caddy's upstream)")
    parser.add_argument("--upstream", required=True, help="host:port of the router")
    parser.add_argument("--metrics", required=True, help="host:port of its Prometheus text")
    parser.add_argument("--retry-seconds", type=float, default=0.0,
                        help="how long a connection the router refuses is retried (kimi_gateway_retry)")
    args = parser.parse_args()
    servers = serve(args.listen, args.upstream, args.metrics, args.retry_seconds)
    threading.Event().wait() if servers else None


if __name__ == "__main__":
    main()
