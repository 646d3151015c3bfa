"""A slow-generating engine for one test: streams 6 SSE events 0.5 s apart (or the request's "delay") on
127.0.0.1:30000, and records in /run/kimi-sse-stub.log how many events each stream sent and whether the client went
away mid-stream (the engine must see a disconnect, so that it stops generating), before the stream stops counting as
running. /metrics says how many streams run, in SGLang's gauge, so that a drain has something to wait for; while
/run/kimi-sse-stub.metrics-status holds a status code, /metrics answers that instead (an engine whose metrics cannot
be read). A request with "hold": true keeps its stream open after its events until Ansible (the drain's uri, user
agent ansible-httpget) has read /metrics while it ran, at most 120 s: the drain must find it running however slow the
machine is, and the stream ends only after that. Each request's X-LLM-Client values, as received, are appended to
/run/kimi-sse-stub.clients (one JSON list a line) before its answer starts."""
import http.server
import json
import os
import threading
import time

EVENTS = 6
RUNNING = [0]
LOCK = threading.Lock()
SEEN_RUNNING = threading.Event()  # Ansible read /metrics while a stream ran (Prometheus's scrapes do not count)
METRICS_STATUS = "/run/kimi-sse-stub.metrics-status"


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        body, status = b'{"status":"ok"}', 200
        if self.path == "/metrics" and os.path.exists(METRICS_STATUS):
            with open(METRICS_STATUS) as handle:
                body, status = b"metrics unavailable (test)\n", int(handle.read().strip())
        elif self.path == "/metrics":
            body = (b"# TYPE sglang:num_running_reqs gauge\n"
                    b'sglang:num_running_reqs{model_name="kimi-k2.6"} %d.0\n' % RUNNING[0])
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        running = status == 200 and self.path == "/metrics" and b" 0.0" not in body
        if running and self.headers.get("User-Agent", "").startswith("ansible"):
            SEEN_RUNNING.set()

    def do_POST(self):
        with open("/run/kimi-sse-stub.clients", "a") as clients:
            clients.write(json.dumps(self.headers.get_all("X-LLM-Client") or []) + "\n")
        try:
            request = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
            delay, hold = float(request.get("delay", 0.5)), bool(request.get("hold"))
        except (ValueError, AttributeError):
            delay, hold = 0.5, False
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        sent, outcome = 0, "complete"
        with LOCK:
            RUNNING[0] += 1
        try:
            for i in range(EVENTS + 1):
                data = b"data: [DONE]\n\n" if i == EVENTS else b'data: {"i": %d}\n\n' % i
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()
                sent += 1
                if i < EVENTS:
                    time.sleep(delay)
                if i == EVENTS - 1 and hold:
                    outcome = "complete, held until the drain read /metrics" if SEEN_RUNNING.wait(120) else \
                        "complete, held 120 s: no drain read /metrics"
            self.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            outcome = "client gone"
        finally:
            with open("/run/kimi-sse-stub.log", "a") as log:  # before the gauge drops: a drain that saw 0 finds it
                log.write("%s after %d events\n" % (outcome, sent))
            with LOCK:
                RUNNING[0] -= 1

    def log_message(self, *args):
        pass


http.server.ThreadingHTTPServer(("127.0.0.1", 30000), Handler).serve_forever()
