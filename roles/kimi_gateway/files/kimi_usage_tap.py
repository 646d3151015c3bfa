# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""kimi-usage-tap: tokens in and out per client key name, on the fleet gateway (stdlib only, asyncio).

Caddy's gateway site checks the client key and sends the key's NAME (never the key) in X-LLM-Client; this tap sits
between Caddy and the router on loopback, passes every request and answer through unchanged, and counts what the
engines report in `usage`: from the JSON body of a plain answer, and from the last event of a stream (it asks for it
with stream_options.include_usage, and drops that extra event again when the client did not ask for it). Every
completions request is counted, errors included: no header a client could send exempts one.

HTTP/1.1 keep-alive on both sides, idle router connections pooled (--upstream-pool); a stream is relayed as bytes as
they come, cut only at event boundaries: only an event holding a "usage" object is parsed as JSON.

    kimi_usage_tap.py --listen 127.0.0.1:30091 --upstream 127.0.0.1:30090 --metrics 127.0.0.1:29011 --retry-seconds 10 \
        --clients /etc/kimi-k26-gateway/clients.json

--clients FILE (optional, read once at start-up; a bad one is a start-up error naming the problem): JSON written by the
collection, {"header": the header holding the client name (default X-LLM-Client), "priority_header": a header name or
null, "clients": {name: {"limits": {requests_per_minute, tokens_per_minute, concurrent: positive ints},
"priority": a value or null}}}. Per client name, on the counted paths: at most requests_per_minute requests admitted in
any WINDOW (60 s), none while the tokens of its answers of the last WINDOW reach tokens_per_minute, at most concurrent
in flight (streams until their end); a request over a limit is answered by the tap (429, Retry-After, an OpenAI-like
JSON error) and never reaches the router. Every request forwarded (all paths) loses any priority_header the client sent
and gets the client's priority when it has one, so no client picks its own class. Without the file nothing is limited
and no priority header is set or stripped.

Series (Prometheus text at /metrics on --metrics): kimi_usage_requests_total{client,code} (429 included),
kimi_usage_prompt_tokens_total{client}, kimi_usage_completion_tokens_total{client},
kimi_usage_refused_total{client,limit} (limit: requests_per_minute, tokens_per_minute or concurrent).
"""

import argparse
import asyncio
import collections
import json
import math
import re
import threading
import time

# caddy_proxy_clients' names (plugins/filter/caddy_clients.py NAME_RE; a unit test compares the two)
CLIENT_RE = re.compile(r"[a-z0-9_-]+")
COUNTED = ("/v1/chat/completions", "/v1/completions")
HOP_BY_HOP = {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailers",
              "transfer-encoding", "upgrade", "content-length"}
USAGE_OBJECT = re.compile(rb'"usage"\s*:\s*\{')  # the only events parsed as JSON
HEAD_LIMIT = 65536  # bytes of a request or response head
TAIL_LIMIT = 1 << 20  # an unfinished event longer than this is passed on unscanned
READ_AHEAD = 1 << 20  # what a client may send ahead (pipelined) while its answer is under way
CLIENT_GONE = 499  # the code counted for a client that left before its answer began (nginx's)
# framing of an answer's body
NONE, LENGTH, CHUNKED, UNTIL_CLOSE = range(4)
CLIENT_HEADER = "X-LLM-Client"  # where Caddy puts the client key name, unless --clients names another
LIMITS = ("requests_per_minute", "tokens_per_minute", "concurrent")  # the order a refusal names the first over
WINDOW = 60.0  # seconds of the per-minute limits' sliding windows (a unit test makes it shorter)
clock = time.monotonic  # the limits' clock (a unit test replaces it)
TOKEN_RE = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")  # a header name (RFC 9110 token)
VALUE_RE = re.compile(r"[\x21-\x7e]([\x20-\x7e]*[\x21-\x7e])?")  # a header value the tap sets


class Usage:
    """The counters, per client name."""

    def __init__(self):
        self.lock = threading.Lock()
        self.requests = {}
        self.prompt = {}
        self.completion = {}
        self.refused = {}

    def count(self, client, code, usage):
        with self.lock:
            self.requests[(client, code)] = self.requests.get((client, code), 0) + 1
            if usage:
                self.prompt[client] = self.prompt.get(client, 0) + int(usage.get("prompt_tokens") or 0)
                self.completion[client] = self.completion.get(client, 0) + int(usage.get("completion_tokens") or 0)

    def refuse(self, client, limit):
        """A request the tap refused for a limit (its 429 is counted by count())."""
        with self.lock:
            self.refused[(client, limit)] = self.refused.get((client, limit), 0) + 1

    def text(self):
        with self.lock:
            lines = ["# HELP kimi_usage_requests_total Requests through the gateway, by client key name and HTTP code.",
                     "# TYPE kimi_usage_requests_total counter"]
            lines += ['kimi_usage_requests_total{client="%s",code="%s"} %d' % (c, k, n)
                      for (c, k), n in sorted(self.requests.items())]
            for name, table, what in (("prompt", self.prompt, "Prompt tokens"),
                                      ("completion", self.completion, "Completion tokens")):
                lines += ["# HELP kimi_usage_%s_tokens_total %s the engines reported, by client key name."
                          % (name, what),
                          "# TYPE kimi_usage_%s_tokens_total counter" % name]
                lines += ['kimi_usage_%s_tokens_total{client="%s"} %d' % (name, c, n) for c, n in sorted(table.items())]
            lines += ["# HELP kimi_usage_refused_total Requests the tap refused (429) for a limit of the client key "
                      "name, by client key name and limit.",
                      "# TYPE kimi_usage_refused_total counter"]
            lines += ['kimi_usage_refused_total{client="%s",limit="%s"} %d' % (c, k, n)
                      for (c, k), n in sorted(self.refused.items())]
            return "\n".join(lines) + "\n"


def load_clients(source):
    """The --clients file's content, checked: {"header", "priority_header", "clients": {name: {"limits",
    "priority"}}}, from a path or an already parsed dict; ValueError (one line, naming the problem) when it is bad."""
    if not isinstance(source, dict):
        try:
            with open(source, encoding="utf-8") as handle:
                source = json.load(handle)
        except OSError as error:
            raise ValueError("cannot read it: %s" % (error.strerror or error)) from None
        except ValueError as error:
            raise ValueError("not JSON: %s" % error) from None
    if not isinstance(source, dict):
        raise ValueError("must be a JSON object of header, priority_header, clients, got %s" % type(source).__name__)
    for key in source:
        if key not in ("header", "priority_header", "clients"):
            raise ValueError("unknown key %r (allowed: header, priority_header, clients)" % key)
    header = source.get("header", CLIENT_HEADER)
    if not isinstance(header, str) or not TOKEN_RE.fullmatch(header):
        raise ValueError("header must be a header name, got %r" % (header,))
    priority_header = source.get("priority_header")
    if priority_header is not None and (not isinstance(priority_header, str) or not TOKEN_RE.fullmatch(priority_header)
                                        or priority_header.lower() in HOP_BY_HOP | {"host", "expect", header.lower()}):
        raise ValueError("priority_header must be a header name (not %s's, not one of HTTP's own) or null, got %r"
                         % (header, priority_header))
    clients = source.get("clients")
    if not isinstance(clients, dict):
        raise ValueError("clients must be an object of client key name: {limits, priority}, got %r" % (clients,))
    checked = {}
    for name, entry in clients.items():
        if not isinstance(name, str) or not CLIENT_RE.fullmatch(name):
            raise ValueError("clients: %r is not a client key name (%s)" % (name, CLIENT_RE.pattern))
        if not isinstance(entry, dict):
            raise ValueError("clients.%s must be an object of limits, priority, got %r" % (name, entry))
        for key in entry:
            if key not in ("limits", "priority"):
                raise ValueError("clients.%s: unknown key %r (allowed: limits, priority)" % (name, key))
        limits = entry.get("limits") or {}
        if not isinstance(limits, dict):
            raise ValueError("clients.%s.limits must be an object, got %r" % (name, limits))
        for limit, value in limits.items():
            if limit not in LIMITS:
                raise ValueError("clients.%s.limits: unknown limit %r (allowed: %s)" % (name, limit, ", ".join(LIMITS)))
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError("clients.%s.limits.%s must be a positive integer, got %r" % (name, limit, value))
        priority = entry.get("priority")
        if priority is not None and (not isinstance(priority, str) or not VALUE_RE.fullmatch(priority)):
            raise ValueError("clients.%s.priority must be a header value or null, got %r" % (name, priority))
        checked[name] = {"limits": dict(limits), "priority": priority}
    return {"header": header, "priority_header": priority_header, "clients": checked}


class Limiter:
    """One client key name's limits and what they count (on the tap's loop, no lock). requests_per_minute: a sliding
    window, the admission times of the last WINDOW seconds; tokens_per_minute: (time, tokens) of the answers that
    ended in the last WINDOW seconds, and their sum; concurrent: the requests admitted and not finished."""

    __slots__ = ("name", "requests", "tokens", "concurrent", "admitted", "answers", "spent", "in_flight")

    def __init__(self, name, limits):
        self.name = name
        self.requests = limits.get("requests_per_minute")
        self.tokens = limits.get("tokens_per_minute")
        self.concurrent = limits.get("concurrent")
        self.admitted = collections.deque()
        self.answers = collections.deque()
        self.spent = 0  # the tokens in answers
        self.in_flight = 0

    def admit(self):
        """None when a request is admitted (it is counted in flight until release()), else (limit, Retry-After
        seconds, message) of the first limit it is over."""
        now = clock()
        window = WINDOW
        if self.requests:
            admitted, since = self.admitted, now - window
            while admitted and admitted[0] <= since:
                admitted.popleft()
            if len(admitted) >= self.requests:  # one more is admitted when this one leaves the window
                return ("requests_per_minute", wait(admitted[len(admitted) - self.requests] + window - now),
                        "client %s is over its limit of %d requests a minute" % (self.name, self.requests))
        if self.tokens:
            self.expire(now - window)
            if self.spent >= self.tokens:
                left, until = self.spent, now + window
                for at, tokens in self.answers:
                    left -= tokens
                    if left < self.tokens:
                        until = at + window
                        break
                return ("tokens_per_minute", wait(until - now),
                        "client %s is over its limit of %d tokens a minute" % (self.name, self.tokens))
        if self.concurrent and self.in_flight >= self.concurrent:
            return ("concurrent", 1,
                    "client %s is over its limit of %d concurrent requests" % (self.name, self.concurrent))
        if self.requests:
            self.admitted.append(now)
        self.in_flight += 1
        return None

    def expire(self, since):
        answers = self.answers
        while answers and answers[0][0] <= since:
            self.spent -= answers.popleft()[1]

    def release(self, usage):
        """An admitted request finished (answered, failed, or its client left), with the usage of its answer."""
        self.in_flight -= 1
        if not self.tokens or not usage:
            return
        try:
            tokens = int(usage.get("prompt_tokens") or 0) + int(usage.get("completion_tokens") or 0)
        except (TypeError, ValueError):
            return
        if tokens > 0:
            now = clock()
            self.expire(now - WINDOW)
            self.answers.append((now, tokens))
            self.spent += tokens


def wait(seconds):
    """Retry-After: whole seconds, at least 1."""
    return max(1, int(math.ceil(seconds)))


def client_of(headers, header="x-llm-client"):
    """The client key name from the request's headers (names in lower case), "unknown" when it is not one."""
    name = (headers.get(header) or "").strip()
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


def parse_head(head):
    """(first line's three parts, [(name, value)], {lower-case name: value}) of an HTTP head (latin-1 text)."""
    lines = head.split("\r\n")
    first = lines[0].split(" ", 2)
    if len(first) != 3:
        raise ValueError("bad first line")
    fields, named = [], {}
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if not colon or not name or name != name.strip():
            raise ValueError("bad header line")
        value = value.strip()
        fields.append((name, value))
        named[name.lower()] = value
    return first, fields, named


class Dechunker:
    """Decodes a chunked body as its bytes arrive: feed() returns (payload so far, done); `rest` follows the body."""

    __slots__ = ("rest", "left", "crlf", "trailer", "done")

    def __init__(self):
        self.rest = b""
        self.left = 0  # bytes of the current chunk still to come
        self.crlf = False  # the CRLF after a chunk's data is due
        self.trailer = False
        self.done = False

    def feed(self, data):
        if not (self.rest or self.left or self.crlf or self.trailer):  # the usual read: one whole chunk
            eol = data.find(b"\r\n", 0, 18)
            size = int(data[:eol], 16) if 0 < eol < 17 and data[0] != 48 and data[:eol].isalnum() else 0
            end = eol + 2 + size
            if size and len(data) == end + 2 and data.endswith(b"\r\n"):
                return data[eol + 2:end], False
        buf = self.rest + data if self.rest else data
        pos, end, out = 0, len(buf), []
        while not self.done:
            if self.left:
                take = min(self.left, end - pos)
                if not take:
                    break
                out.append(buf[pos:pos + take])
                pos += take
                self.left -= take
                if self.left:
                    break
                self.crlf = True
            if self.crlf:
                if end - pos < 2:
                    break
                if buf[pos:pos + 2] != b"\r\n":
                    raise ValueError("no CRLF after a chunk")
                pos += 2
                self.crlf = False
            eol = buf.find(b"\r\n", pos)
            if eol < 0:
                if end - pos > 4096:
                    raise ValueError("chunk line too long")
                break
            if self.trailer:  # trailer fields up to an empty line, dropped
                self.done = eol == pos
                pos = eol + 2
                continue
            size = int(buf[pos:eol].split(b";", 1)[0], 16)
            if size < 0:
                raise ValueError("negative chunk size")
            pos = eol + 2
            if size:
                self.left = size
            else:
                self.trailer = True
        self.rest = buf[pos:] if pos < end else b""
        return (out[0] if len(out) == 1 else b"".join(out)), self.done


class Tap:
    """The listeners, the counters and the pool of idle router connections of one tap (all on one event loop)."""

    def __init__(self, loop, upstream, usage, retry, pool_size, clients=None):
        self.loop = loop
        self.host, port = upstream.rsplit(":", 1)
        self.port = int(port)
        self.usage = usage
        self.retry = retry
        self.pool_size = pool_size
        self.pool = {}  # idle Upstream -> None, the newest last (dicts keep order)
        self.clients = {}  # open Downstream -> None
        self.servers = []
        # load_clients()'s content, or None: no limits, no priority header
        self.header = (clients["header"] if clients else CLIENT_HEADER).lower()
        self.priority_header = clients["priority_header"] if clients else None
        self.priorities = dict((name, entry["priority"]) for name, entry in clients["clients"].items()
                               if entry["priority"]) if self.priority_header else {}
        self.limiters = dict((name, Limiter(name, entry["limits"])) for name, entry in clients["clients"].items()
                             if entry["limits"]) if clients else {}
        self.dropped = HOP_BY_HOP | {"expect"} | ({self.priority_header.lower()} if self.priority_header else set())

    def idle(self):
        """An idle router connection from the pool, or None."""
        while self.pool:
            upstream = self.pool.popitem()[0]
            if not upstream.closed and not upstream.transport.is_closing():
                return upstream
        return None

    def release(self, upstream):
        if upstream.closed:
            return
        if len(self.pool) >= self.pool_size:
            upstream.transport.close()
        else:
            self.pool[upstream] = None

    async def close(self):
        for server in self.servers:
            server.close()
        for client in list(self.clients):
            client.transport.abort()
        for upstream in list(self.pool):
            upstream.transport.abort()
        self.pool.clear()
        await asyncio.sleep(0.01)  # their connection_lost run


class Upstream(asyncio.Protocol):
    """One connection to the router: reads one answer at a time for its owner (a Downstream), then goes idle."""

    def __init__(self, tap):
        self.tap = tap
        self.transport = None
        self.owner = None
        self.closed = False
        self.paused = False
        self.buffer = b""
        self.framing = None  # None: the head is still to come
        self.left = 0
        self.dechunker = None
        self.head_only = False
        self.keep = False
        self.answered = False  # a byte of the answer came

    def connection_made(self, transport):
        self.transport = transport

    def begin(self, owner, request, head_only):
        self.owner = owner
        self.framing = None
        self.head_only = head_only
        self.answered = False
        self.buffer = b""
        self.transport.write(request)

    def pause(self, paused):
        if paused != self.paused and not self.closed:
            self.paused = paused
            if paused:
                self.transport.pause_reading()
            else:
                self.transport.resume_reading()

    def data_received(self, data):
        owner = self.owner
        if owner is None:  # nothing was asked: a router that talks out of turn is not reused
            self.transport.abort()
            return
        self.answered = True
        framing = self.framing
        if framing == CHUNKED:
            try:
                payload, done = self.dechunker.feed(data)
            except ValueError:
                self.transport.abort()
                return
            if done:
                self.buffer = self.dechunker.rest
                self.finish(payload)
            elif payload:
                owner.up_body(payload, False)
        elif framing == LENGTH:
            if len(data) >= self.left:
                self.buffer = data[self.left:]
                self.finish(data[:self.left] if self.buffer else data)
            else:
                self.left -= len(data)
                owner.up_body(data, False)
        elif framing == UNTIL_CLOSE:
            owner.up_body(data, False)
        else:
            self.buffer = self.buffer + data if self.buffer else data
            self.head()

    def head(self):
        while True:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                if len(self.buffer) > HEAD_LIMIT:
                    self.transport.abort()
                return
            try:
                (version, code, reason), fields, named = parse_head(self.buffer[:end].decode("latin-1"))
                status = int(code)
                length = int(named["content-length"]) if "content-length" in named else None
            except ValueError:
                self.transport.abort()
                return
            self.buffer = self.buffer[end + 4:]
            if 100 <= status < 200 and status != 101:  # 100 Continue, 103 Early Hints: not passed on
                continue
            break
        connection = named.get("connection", "").lower()
        self.keep = "close" not in connection if version == "HTTP/1.1" else "keep-alive" in connection
        chunked = named.get("transfer-encoding", "").lower().endswith("chunked")
        if self.head_only or status in (204, 304) or status < 200:
            framing = NONE
        elif chunked:
            framing = CHUNKED
            self.dechunker = Dechunker()
        elif length is not None and length >= 0:
            framing = LENGTH
            self.left = length
        else:
            framing = UNTIL_CLOSE
            self.keep = False
        self.owner.up_head(status, reason, fields, framing)
        self.framing = framing
        rest, self.buffer = self.buffer, b""
        if framing == NONE or (framing == LENGTH and not length):
            self.buffer = rest
            self.finish(b"")
        elif rest and self.owner is not None:
            self.data_received(rest)

    def finish(self, payload):
        """The answer is complete: its last bytes go to the owner, the connection back to the pool if it can."""
        owner, self.owner = self.owner, None
        self.framing = None
        if self.keep and not self.buffer:
            self.pause(False)
            self.tap.release(self)
        else:
            self.transport.close()
        owner.up_body(payload, True)

    def eof_received(self):
        return False  # the transport closes; connection_lost tells the owner

    def connection_lost(self, exc):
        self.closed = True
        self.tap.pool.pop(self, None)
        owner, self.owner = self.owner, None
        if owner is None:
            return
        if self.framing == UNTIL_CLOSE:
            owner.up_body(b"", True)
        else:
            owner.up_lost(exc, self.answered)


class Downstream(asyncio.Protocol):
    """One connection from Caddy: requests read one at a time, each answered through an Upstream."""

    def __init__(self, tap):
        self.tap = tap
        self.transport = None
        self.buffer = b""
        self.closed = False
        self.reading = True
        self.writing = True
        # the request being read
        self.head = None
        self.need = 0
        self.dechunker = None
        # the request being answered
        self.busy = False
        self.up = None
        self.task = None
        self.request = b""
        self.head_only = False
        self.named = None
        self.counted = False
        self.stream = False
        self.asked = True
        self.keep = True
        self.http11 = True
        self.reused = False
        self.status = None
        self.chunked = False
        self.body = None
        self.tail = b""
        self.found = None
        self.client = None
        self.limiter = None  # the admitted request's Limiter, released when it is counted
        self.held = False  # the next pipelined request waits for more() (after an answer of the tap's own)

    # ---- the client's side
    def connection_made(self, transport):
        self.transport = transport
        self.tap.clients[self] = None

    def data_received(self, data):
        self.buffer = self.buffer + data if self.buffer else data
        if not self.busy and not self.held:
            self.read()
        elif len(self.buffer) > READ_AHEAD and self.reading:
            self.reading = False
            self.transport.pause_reading()

    def eof_received(self):
        return False  # a client that leaves mid-answer is gone: connection_lost lets its router connection go

    def connection_lost(self, exc):
        self.closed = True
        self.tap.clients.pop(self, None)
        if self.task is not None:
            self.task.cancel()
            self.task = None
        if self.up is not None:  # mid-answer: that connection is not reused
            self.up.owner = None
            self.up.transport.abort()
            self.up = None
        if self.busy:
            self.busy = False
            self.count(self.status or CLIENT_GONE)

    def pause_writing(self):
        self.writing = False
        if self.up is not None:
            self.up.pause(True)

    def resume_writing(self):
        self.writing = True
        if self.up is not None:
            self.up.pause(False)
        if self.held:
            self.tap.loop.call_soon(self.more)

    def more(self):
        """The next pipelined request after an answer of the tap's own (a refusal): read on a later turn of the
        loop, not recursively, and only while the client takes its answers."""
        if self.held and self.writing and not self.closed:
            self.held = False
            if not self.busy:
                self.read()

    def read(self):
        """Reads the next request from the buffer, and sends it on once it is complete."""
        if self.head is None:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                if len(self.buffer) > HEAD_LIMIT:
                    self.refuse(431, "Request Header Fields Too Large")
                elif self.buffer.startswith(b"\r\n"):  # empty lines before a request are ignored (RFC 9112)
                    self.buffer = self.buffer.lstrip(b"\r\n")
                return
            try:
                (method, target, version), fields, named = parse_head(
                    self.buffer[:end].lstrip(b"\r\n").decode("latin-1"))
                if not version.startswith("HTTP/1."):
                    raise ValueError(version)
                chunked = named.get("transfer-encoding", "").lower().endswith("chunked")
                if "transfer-encoding" in named and not chunked:
                    raise ValueError("transfer coding")
                self.need = 0 if chunked else int(named.get("content-length") or 0)
                if self.need < 0:
                    raise ValueError("length")
            except ValueError:
                self.refuse(400, "Bad Request")
                return
            self.buffer = self.buffer[end + 4:]
            self.head = (method, target, version, fields, named)
            self.dechunker = Dechunker() if chunked else None
            if named.get("expect", "").lower() == "100-continue" and (chunked or self.need) and \
                    len(self.buffer) < max(self.need, 1):
                self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            self.body = []
        if self.dechunker is not None:
            try:
                payload, done = self.dechunker.feed(self.buffer)
            except ValueError:
                self.refuse(400, "Bad Request")
                return
            self.buffer = b""
            if payload:
                self.body.append(payload)
            if not done:
                return
            self.buffer = self.dechunker.rest
        else:
            if len(self.buffer) < self.need:
                return
            self.body.append(self.buffer[:self.need])
            self.buffer = self.buffer[self.need:]
        self.send(b"".join(self.body))

    def refuse(self, code, reason):
        """A request that cannot be read: answered, and the connection closed."""
        body = b"%d %s\n" % (code, reason.encode())
        self.transport.write(b"HTTP/1.1 %d %s\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n"
                             b"Connection: close\r\n\r\n%s" % (code, reason.encode(), len(body), body))
        self.transport.close()
        self.buffer = b""

    def send(self, body):
        method, target, version, fields, named = self.head
        self.head = self.dechunker = self.body = None
        self.busy = True
        self.named = named
        tap = self.tap
        connection = named.get("connection", "").lower()
        self.http11 = version == "HTTP/1.1"
        self.keep = "close" not in connection if self.http11 else "keep-alive" in connection
        self.head_only = method == "HEAD"
        self.status, self.found, self.tail, self.reused = None, None, b"", False
        self.counted = counted = target.split("?", 1)[0] in COUNTED
        client = self.client = client_of(named, tap.header) if counted or tap.priority_header else None
        if counted and tap.limiters:
            limiter = tap.limiters.get(client)
            refused = limiter.admit() if limiter is not None else None
            if refused:
                self.limited(*refused)
                return
            self.limiter = limiter
        body, self.stream, self.asked = prepare(target, body) if counted else (body, False, True)
        dropped = tap.dropped
        lines = ["%s %s HTTP/1.1" % (method, target)]
        lines += ["%s: %s" % (name, value) for name, value in fields if name.lower() not in dropped]
        if tap.priority_header:  # the client's class is the file's, never what the client sent
            priority = tap.priorities.get(client)
            if priority:
                lines.append("%s: %s" % (tap.priority_header, priority))
        if "host" not in named:
            lines.append("Host: %s:%d" % (tap.host, tap.port))
        lines.append("Content-Length: %d\r\n\r\n" % len(body))
        self.request = "\r\n".join(lines).encode("latin-1") + body
        upstream = self.tap.idle()
        if upstream is not None:
            self.attach(upstream, True)
        else:
            self.task = self.tap.loop.create_task(self.connect())

    def limited(self, limit, retry_after, message):
        """A request over a limit of its client: a 429 of the tap's own, counted, never sent to the router."""
        self.tap.usage.refuse(self.client, limit)
        body = json.dumps({"error": {"type": "rate_limit_error", "code": limit + "_exceeded", "message": message,
                                     "param": None}}).encode()
        close = b"" if self.keep else b"Connection: close\r\n"
        self.transport.write(b"HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\n"
                             b"Retry-After: %d\r\nContent-Length: %d\r\n%s\r\n%s"
                             % (retry_after, len(body), close, b"" if self.head_only else body))
        self.status = 429
        self.done(True)

    async def connect(self):
        """A new router connection; one the router refuses (it restarts) is retried for --retry-seconds."""
        tap = self.tap
        deadline = tap.loop.time() + tap.retry
        while True:
            try:
                upstream = (await tap.loop.create_connection(lambda: Upstream(tap), tap.host, tap.port))[1]
                break
            except ConnectionRefusedError as error:
                if tap.loop.time() >= deadline:
                    self.fail(error)
                    return
                await asyncio.sleep(0.25)
            except OSError as error:
                self.fail(error)
                return
        self.task = None
        if self.closed:
            tap.release(upstream)
        else:
            self.attach(upstream, False)

    def attach(self, upstream, reused):
        self.up = upstream
        self.reused = reused
        upstream.pause(not self.writing)
        upstream.begin(self, self.request, self.head_only)

    def fail(self, error):
        """The router does not answer: a 502, counted."""
        self.task = None
        body = ("the gateway's router does not answer: %s\n" % error).encode()
        close = b"" if self.keep else b"Connection: close\r\n"
        self.transport.write(b"HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/plain; charset=utf-8\r\n"
                             b"Content-Length: %d\r\n%s\r\n%s" % (len(body), close, body))
        self.status = 502
        self.done()

    # ---- the router's side (called by the Upstream)
    def up_head(self, status, reason, fields, framing):
        self.status = status
        lines = ["HTTP/1.1 %d %s" % (status, reason)]
        lines += ["%s: %s" % (name, value) for name, value in fields if name.lower() not in HOP_BY_HOP]
        self.stream = self.stream and status == 200 and framing != NONE
        self.chunked = False
        if framing == NONE:  # HEAD, 204, 304: the router's Content-Length (of what a GET would get) as it is
            lines += ["Content-Length: %s" % value for name, value in fields if name.lower() == "content-length"]
        elif framing == LENGTH and not self.stream:
            lines.append("Content-Length: %d" % self.up.left)
        elif self.http11:  # a stream (it may lose its usage event), or an answer of unknown length
            lines.append("Transfer-Encoding: chunked")
            self.chunked = True
        else:
            self.keep = False
        if not self.keep:
            lines.append("Connection: close")
        self.body = [] if self.counted and status == 200 and not self.stream else None
        self.transport.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))

    def up_body(self, payload, last):
        if self.stream:
            payload = self.events(payload, last)
        elif self.body is not None:
            self.body.append(payload)
        if self.chunked:
            if payload:
                self.transport.write(b"%x\r\n%b\r\n0\r\n\r\n" % (len(payload), payload) if last else
                                     b"%x\r\n%b\r\n" % (len(payload), payload))
            elif last:
                self.transport.write(b"0\r\n\r\n")
        elif payload:
            self.transport.write(payload)
        if last:
            self.up = None
            if self.body:
                try:
                    found = json.loads(b"".join(self.body))
                except ValueError:
                    found = None
                self.found = found.get("usage") if isinstance(found, dict) else None
            self.done()

    def events(self, payload, last):
        """What of a stream's bytes goes to the client now: whole events (the rest waits for its end); only an
        event with a usage object is parsed, and the usage-only one dropped when the client did not ask for it."""
        if self.tail:
            payload = self.tail + payload
            self.tail = b""
        if not last and not payload.endswith(b"\n\n"):
            lf, crlf = payload.rfind(b"\n\n"), payload.rfind(b"\n\r\n")
            cut = max(lf + 2 if lf >= 0 else 0, crlf + 3 if crlf >= 0 else 0)
            if len(payload) - cut < TAIL_LIMIT:
                self.tail = payload[cut:]
                payload = payload[:cut]
        if b'"usage"' not in payload or USAGE_OBJECT.search(payload) is None:
            return payload
        kept, event = [], []
        for line in payload.splitlines(True):
            event.append(line)
            if line not in (b"\n", b"\r\n"):
                continue
            text = b"".join(event)
            event = []
            if USAGE_OBJECT.search(text):
                data = b"".join(part[5:].strip() for part in text.splitlines() if part.startswith(b"data:"))
                got, usage_only = usage_of_event(data)
                if got:
                    self.found = got
                if usage_only and not self.asked:
                    continue
            kept.append(text)
        kept += event
        return b"".join(kept)

    def up_lost(self, error, answered):
        """The router's connection closed before the answer was complete."""
        self.up = None
        if self.status is None:
            if self.reused and not answered:  # an idle connection the router had just closed: once more, anew
                self.reused = False
                self.task = self.tap.loop.create_task(self.connect())
            else:
                self.fail(error or "it closed the connection")
            return
        self.keep = False
        self.done()
        self.transport.abort()  # the client sees a cut answer

    def done(self, own=False):
        """The answer went out: it is counted, and the next request read (after an answer of the tap's own, own:
        on a later turn of the loop, see more())."""
        self.busy = False
        self.count(self.status)
        self.tail, self.body, self.named = b"", None, None
        if not self.keep:
            self.transport.close()
            return
        if not self.reading:
            self.reading = True
            self.transport.resume_reading()
        if self.buffer:
            if not own:
                self.read()
                return
            self.held = True
            if self.writing:
                self.tap.loop.call_soon(self.more)

    def count(self, code):
        if self.counted:
            self.counted = False
            usage = self.found if isinstance(self.found, dict) else None
            limiter, self.limiter = self.limiter, None
            if limiter is not None:  # first: a request seen counted in the series has left the limits too
                limiter.release(usage)
            self.tap.usage.count(self.client, code, usage)


async def answer_metrics(usage, reader, writer):
    """GET /metrics: the series; one request per connection."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
        parts = head.split(b" ", 2)
        if len(parts) == 3 and parts[1].split(b"?", 1)[0] == b"/metrics":
            body, status = usage.text().encode(), b"200 OK"
        else:
            body, status = b"not found\n", b"404 Not Found"
        writer.write(b"HTTP/1.1 %s\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n"
                     b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (status, len(body), body))
        await writer.drain()
    except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
        pass
    finally:
        writer.close()


async def start(listen, upstream, metrics, retry=0.0, backlog=4096, upstream_pool=1024, clients=None):
    """The tap's and its metrics' listeners on the running loop; returns the Tap. clients: see serve()."""
    loop = asyncio.get_running_loop()
    tap = Tap(loop, upstream, Usage(), retry, upstream_pool, load_clients(clients) if clients is not None else None)
    host, port = listen.rsplit(":", 1)
    tap.servers.append(await loop.create_server(lambda: Downstream(tap), host, int(port), backlog=backlog))
    host, port = metrics.rsplit(":", 1)
    tap.servers.append(await asyncio.start_server(lambda reader, writer: answer_metrics(tap.usage, reader, writer),
                                                  host, int(port), backlog=128))
    return tap


class Listener:
    """One of serve()'s listeners: server_address, and shutdown() (the loop stops with the last one)."""

    def __init__(self, running, server):
        self.running = running
        self.server = server
        self.server_address = server.sockets[0].getsockname()[:2]

    def shutdown(self):
        self.running.stop(self)


class Running:
    """A tap on an event loop of its own, in a thread of its own (serve())."""

    def __init__(self, listen, upstream, metrics, retry, backlog, upstream_pool, clients=None):
        clients = load_clients(clients) if clients is not None else None  # a bad one before any thread starts
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        try:
            self.tap = asyncio.run_coroutine_threadsafe(
                start(listen, upstream, metrics, retry, backlog, upstream_pool, clients), self.loop).result(30)
        except BaseException:
            self.loop.call_soon_threadsafe(self.loop.stop)
            raise
        self.listeners = [Listener(self, server) for server in self.tap.servers]
        self.lock = threading.Lock()

    def stop(self, listener):
        with self.lock:
            if listener not in self.listeners:
                return
            self.listeners.remove(listener)
            last = not self.listeners
        if last:
            asyncio.run_coroutine_threadsafe(self.tap.close(), self.loop).result(10)
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)
            if not self.thread.is_alive():
                self.loop.close()
        else:
            self.loop.call_soon_threadsafe(listener.server.close)


def serve(listen, upstream, metrics, retry=0.0, backlog=4096, upstream_pool=1024, clients=None):
    """Start the tap and its metrics listener on a loop in a thread; returns the two listeners (shutdown() each).
    clients: the --clients file's content as a dict, or the path of such a file; None: no limits, no priority
    header. A bad one raises ValueError (the message names the problem)."""
    return Running(listen, upstream, metrics, retry, backlog, upstream_pool, clients).listeners[:]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--listen", required=True, help="host:port the tap listens on (Caddy's upstream)")
    parser.add_argument("--upstream", required=True, help="host:port of the router")
    parser.add_argument("--metrics", required=True, help="host:port of its Prometheus text")
    parser.add_argument("--retry-seconds", type=float, default=0.0,
                        help="how long a connection the router refuses is retried (kimi_gateway_retry)")
    parser.add_argument("--backlog", type=int, default=4096, help="listen backlog of the tap (default 4096)")
    parser.add_argument("--upstream-pool", type=int, default=1024,
                        help="idle keep-alive router connections kept for reuse (default 1024)")
    parser.add_argument("--clients", metavar="FILE",
                        help="JSON of the client key names' limits and priorities (without it: no limits, no "
                             "priority header)")
    args = parser.parse_args()
    clients = None
    if args.clients:
        try:
            clients = load_clients(args.clients)
        except ValueError as error:
            parser.exit(2, "%s: --clients %s: %s\n" % (parser.prog, args.clients, error))

    async def run():
        await start(args.listen, args.upstream, args.metrics, args.retry_seconds, args.backlog, args.upstream_pool,
                    clients)
        await asyncio.Event().wait()

    asyncio.run(run())


if __name__ == "__main__":
    main()
