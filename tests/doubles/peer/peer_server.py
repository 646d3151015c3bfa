"""Peer cache server double: what the kimi_weights role's peer cache server (Caddy file_server) answers, for tests
that need faults Caddy cannot make on demand.

Interface, as the real one (roles/caddy_proxy/templates/kimi-peers.Caddyfile.j2):
- GET <root>/<repo folder>/blobs/<40 or 64 hex>, with Range: 206 and Content-Range (200 without Range);
- 404 for anything else or a missing blob; 401 without `Authorization: Bearer <key>` when a key is set.

Faults (constructor arguments): corrupt={etag: [offsets]} flips the bytes it sends at those file offsets; die_after_bytes=N
closes the connection after N body bytes in all and stops answering (connections are then refused), as a killed
peer; bps caps each response's rate. Every request is logged in .requests (path, range, status, bytes).
"""
import os
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

BLOB_PATH = re.compile(r"^/(models--[^/]+)/blobs/([0-9a-f]{40}|[0-9a-f]{64})$")


class PeerServer(object):
    def __init__(self, hub_dir, key=None, corrupt=None, die_after_bytes=None, bps=None, host="127.0.0.1"):
        self.hub_dir = hub_dir
        self.key = key
        self.corrupt = dict(corrupt or {})
        self.die_after_bytes = die_after_bytes
        self.bps = bps
        self.lock = threading.Lock()
        self.sent = 0
        self.dead = False
        self.requests = []
        self.active = 0
        self.max_active = 0  # most answers at once: the client's per-peer cap must bound it
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                server.answer(self)

        self.httpd = ThreadingHTTPServer((host, 0), Handler)
        self.httpd.daemon_threads = True
        self.url = "http://%s:%d" % (host, self.httpd.server_address[1])
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def stop(self):
        self.dead = True
        self.httpd.shutdown()
        self.httpd.server_close()

    def log(self, **entry):
        with self.lock:
            self.requests.append(entry)

    def answer(self, req):
        if self.dead:
            req.close_connection = True
            return
        entry = {"path": req.path, "range": req.headers.get("Range"), "status": None, "bytes": 0}
        with self.lock:
            self.active += 1
            self.max_active = max(self.max_active, self.active)
        try:
            self._answer(req, entry)
        finally:
            with self.lock:
                self.active -= 1
            self.log(**entry)

    def _reply(self, req, entry, status, body=b""):
        entry["status"] = status
        req.send_response(status)
        req.send_header("Content-Length", str(len(body)))
        req.end_headers()
        req.wfile.write(body)

    def _answer(self, req, entry):
        if self.key and req.headers.get("Authorization") != "Bearer " + self.key:
            return self._reply(req, entry, 401, b"unauthorized\n")
        match = BLOB_PATH.match(req.path)
        path = os.path.join(self.hub_dir, match.group(1), "blobs", match.group(2)) if match else None
        if not path or not os.path.isfile(path):
            return self._reply(req, entry, 404, b"not found\n")
        size = os.path.getsize(path)
        start, end = 0, size
        rng = re.match(r"^bytes=(\d+)-(\d*)$", req.headers.get("Range") or "")
        status = 200
        if rng:
            start, end = int(rng.group(1)), min(size, int(rng.group(2)) + 1 if rng.group(2) else size)
            if start >= size:
                return self._reply(req, entry, 416)
            status = 206
        entry["status"] = status
        req.send_response(status)
        req.send_header("Content-Length", str(end - start))
        req.send_header("Accept-Ranges", "bytes")
        if status == 206:
            req.send_header("Content-Range", "bytes %d-%d/%d" % (start, end - 1, size))
        req.end_headers()
        flips = self.corrupt.get(match.group(2)) or []
        began = time.time()
        if not flips and not self.bps and self.die_after_bytes is None:
            # No fault on this answer: the kernel copies the file to the socket (sendfile), as Caddy's file_server does
            # on Linux, so that the double is not what a benchmark measures.
            with open(path, "rb") as handle:
                req.wfile.flush()
                entry["bytes"] = req.connection.sendfile(handle, start, end - start)
            return
        with open(path, "rb") as handle:
            handle.seek(start)
            pos = start
            while pos < end:
                data = bytearray(handle.read(min(256 << 10, end - pos)))
                for flip in flips:
                    if pos <= flip < pos + len(data):
                        data[flip - pos] ^= 0xFF
                        entry["corrupted"] = flip
                if self.bps:  # pace before sending: nothing is held open after the last byte
                    ahead = (entry["bytes"] + len(data)) / float(self.bps) - (time.time() - began)
                    if ahead > 0:
                        time.sleep(ahead)
                with self.lock:
                    if self.die_after_bytes is not None and self.sent + len(data) > self.die_after_bytes:
                        data = data[:max(0, self.die_after_bytes - self.sent)]
                        self.dead = True
                    self.sent += len(data)
                req.wfile.write(data)
                entry["bytes"] += len(data)
                pos += len(data)
                if self.dead:
                    entry["killed"] = True
                    req.close_connection = True
                    threading.Thread(target=self.stop, daemon=True).start()
                    return
