"""kimi_gateway's usage tap (roles/kimi_gateway/files/kimi_usage_tap.py) between a client and an engine double: tokens
in and out per client key name from plain answers and from streams (asked for with include_usage, the extra event
dropped again when the client did not ask), every request counted, everything passed through unchanged; a router that
restarts is waited for (kimi_gateway_retry), one that stays down is a 502; with --clients, per client limits (a 429 of
the tap's own) and the router's priority header. No Docker needed."""
import importlib.util
import json
import os
import re
import sys
import time
import urllib.request

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "unit", "doubles"))
import test_engine_double  # noqa: E402
from test_engine_double import chat, free_port  # noqa: E402

cache, start = test_engine_double.cache, test_engine_double.start  # its fixtures

TAP = os.path.join(ROOT, "roles", "kimi_gateway", "files", "kimi_usage_tap.py")
SPEC = importlib.util.spec_from_file_location("kimi_usage_tap", TAP)
tap = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(tap)


@pytest.fixture
def tapped(start):
    double = start("sglang")
    listen, metrics = "127.0.0.1:%d" % free_port(), "127.0.0.1:%d" % free_port()
    servers = tap.serve(listen, "127.0.0.1:%d" % double.double.port, metrics)
    yield "http://" + listen, "http://" + metrics
    for server in servers:
        server.shutdown()


def post(url, body, client=None, **more):
    headers = dict({"Content-Type": "application/json"}, **more)
    if client:
        headers["X-LLM-Client"] = client
    request = urllib.request.Request(url + "/v1/chat/completions", data=json.dumps(body).encode(), headers=headers)
    with urllib.request.urlopen(request, timeout=20) as response:
        return response.status, response.read().decode()


def series(metrics_url, want=None):
    """The tap's series {name{labels}: value}. The tap counts a request after its answer went out, so with `want`
    ({series: value}) they are read again, up to 10 s, until each has its value (on a loaded machine the first read
    came before the count)."""
    deadline = time.time() + 10
    while True:
        text = urllib.request.urlopen(metrics_url + "/metrics", timeout=5).read().decode()
        got = dict(line.rsplit(" ", 1) for line in text.splitlines() if line and not line.startswith("#"))
        if not want or all(got.get(k) == v for k, v in want.items()) or time.time() > deadline:
            return got
        time.sleep(0.1)


def test_tokens_per_client_from_plain_answers_and_streams(tapped):
    url, metrics = tapped
    status, text = post(url, chat("Hello there"), client="alice")
    plain = json.loads(text)
    assert status == 200 and plain["usage"]["prompt_tokens"] > 0
    status, text = post(url, chat("Stream to me", stream=True), client="bob")
    events = [line[6:] for line in text.splitlines() if line.startswith("data: ")]
    assert status == 200 and events[-1] == "[DONE]"
    # bob did not ask for usage: the event the tap asked for is not passed on
    assert all(json.loads(e).get("choices") for e in events[:-1])
    status, text = post(url, chat("Stream with usage", stream=True, stream_options={"include_usage": True}),
                        client="bob")
    events = [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: ") and line[6:] != "[DONE]"]
    streamed = events[-1]["usage"]
    assert not events[-1]["choices"] and streamed["completion_tokens"] > 0  # bob asked: he gets it
    # no header a client sends keeps its request from being counted (Caddy sets X-LLM-Client from the key)
    post(url, chat("not counted?"), client="alice", **{"X-Kimi-Probe": "1", "X-Usage": "none"})
    got = series(metrics, {'kimi_usage_requests_total{client="alice",code="200"}': "2",
                           'kimi_usage_requests_total{client="bob",code="200"}': "2"})
    assert got['kimi_usage_requests_total{client="alice",code="200"}'] == "2"
    assert got['kimi_usage_requests_total{client="bob",code="200"}'] == "2"
    assert int(got['kimi_usage_prompt_tokens_total{client="alice"}']) > plain["usage"]["prompt_tokens"]
    assert int(got['kimi_usage_completion_tokens_total{client="alice"}']) > plain["usage"]["completion_tokens"]
    assert int(got['kimi_usage_completion_tokens_total{client="bob"}']) > streamed["completion_tokens"]  # both streams


def test_an_error_and_a_name_that_is_not_a_key_name(tapped):
    url, metrics = tapped
    request = urllib.request.Request(url + "/v1/chat/completions", data=b'{"messages": []}',
                                     headers={"Content-Type": "application/json", "X-LLM-Client": "Bad Name!"})
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    assert refused.value.code == 400
    key = 'kimi_usage_requests_total{client="unknown",code="400"}'
    assert series(metrics, {key: "1"}).get(key) == "1"
    # what is not an API call passes through uncounted
    assert urllib.request.urlopen(url + "/health", timeout=5).status == 200


def test_a_router_that_restarts_is_waited_for_and_one_that_stays_down_is_a_502(start):
    """Connections the router refuses are retried for --retry-seconds (the router restarts when its workers change);
    after that the client gets a 502, counted under its name."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Router(BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers["Content-Length"]))
            body = json.dumps({"choices": [], "usage": {"prompt_tokens": 4, "completion_tokens": 2}}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    router_port = free_port()
    listen, metrics = "127.0.0.1:%d" % free_port(), "127.0.0.1:%d" % free_port()
    servers = tap.serve(listen, "127.0.0.1:%d" % router_port, metrics, retry=5.0)
    routers = []

    def serve_late():  # the router's port refuses connections for a second, then it answers
        router = ThreadingHTTPServer(("127.0.0.1", router_port), Router)
        routers.append(router)
        router.serve_forever()

    timer = threading.Timer(1.0, serve_late)
    timer.start()
    try:
        started = time.time()
        status, _text = post("http://" + listen, chat("wait for me"), client="carol")
        assert status == 200 and time.time() - started >= 0.9
        key = 'kimi_usage_prompt_tokens_total{client="carol"}'
        assert series("http://" + metrics, {key: "4"}).get(key) == "4"
        routers[0].shutdown()
        routers[0].server_close()
        down = tap.serve("127.0.0.1:%d" % free_port(), "127.0.0.1:%d" % router_port, "127.0.0.1:%d" % free_port(),
                         retry=0.5)
        servers += down
        with pytest.raises(urllib.error.HTTPError) as refused:
            post("http://%s:%d" % down[0].server_address, chat("nobody home"), client="carol")
        assert refused.value.code == 502
        key = 'kimi_usage_requests_total{client="carol",code="502"}'
        got = series("http://%s:%d" % down[1].server_address, {key: "1"})
        assert got.get(key) == "1", got
    finally:
        timer.cancel()
        for server in servers + routers:
            server.shutdown()


def test_the_tap_takes_the_client_names_caddy_proxy_accepts():
    from ansible_collections.kimi.deploy.plugins.filter.caddy_clients import NAME_RE
    assert tap.CLIENT_RE.pattern == NAME_RE.pattern


def test_the_tap_holds_the_limits_a_client_entry_may_carry():
    """The tap checks clients.json on its own (it runs with the stdlib alone on the gateway host): its limit names are
    the client rule's (_clients.LIMITS), and it reads the file the gateway resolution writes for every priority and
    limit that rule accepts."""
    from ansible_collections.kimi.deploy.plugins.module_utils import _clients
    from ansible_collections.kimi.deploy.plugins.module_utils._model.gateway import PRIORITY_CLASS
    assert set(tap.LIMITS) == set(_clients.LIMITS)
    assert set(PRIORITY_CLASS) == set(_clients.PRIORITIES)
    entries = {"p-%s" % p: {"limits": {}, "priority": PRIORITY_CLASS[p]} for p in _clients.PRIORITIES}
    entries["all-limits"] = {"limits": dict((name, 7) for name in _clients.LIMITS), "priority": None}
    checked = tap.load_clients({"header": "X-LLM-Client", "priority_header": "x-smg-priority", "clients": entries})
    assert checked["clients"]["all-limits"]["limits"] == dict((name, 7) for name in _clients.LIMITS)


# ---- the asyncio tap's connections: chunked request bodies, clients that leave, router connections reused, many
# streams at once. A router double of its own: keep-alive, chunked SSE streams (its events, the usage-only event when
# asked, [DONE]) or a plain JSON answer; it counts the connections it accepted and those that ended.
class Router:
    def __init__(self, events=5, pause=0.0, gate=None):
        import asyncio
        import threading
        self.events, self.pause, self.gate = events, pause, gate  # gate: a threading.Event streams end after
        self.accepted = self.ended = 0
        self.seen = []  # (request head in lower case, its JSON body) of every request the router got
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.server = asyncio.run_coroutine_threadsafe(self._start(), self.loop).result(10)
        self.port = self.server.sockets[0].getsockname()[1]

    async def _start(self):
        import asyncio
        return await asyncio.start_server(self.handle, "127.0.0.1", 0, backlog=1024)

    async def handle(self, reader, writer):
        import asyncio
        self.accepted += 1
        try:
            while True:
                head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").lower()
                length = int(head.split("content-length:", 1)[1].split("\r\n", 1)[0]) if "content-length:" in head \
                    else 0
                request = json.loads(await reader.readexactly(length)) if length else {}
                self.seen.append((head, request))
                usage = {"prompt_tokens": 3, "completion_tokens": self.events}
                if not request.get("stream"):
                    body = json.dumps({"choices": [{"index": 0, "text": "hi"}], "usage": usage}).encode()
                    writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                                 % (len(body), body))
                    await writer.drain()
                    continue
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                             b"Transfer-Encoding: chunked\r\n\r\n")
                events = [json.dumps({"object": "chat.completion.chunk",
                                      "choices": [{"index": 0, "delta": {"content": "tok%d" % n}}]})
                          for n in range(self.events)]
                if (request.get("stream_options") or {}).get("include_usage"):
                    events.append(json.dumps({"object": "chat.completion.chunk", "choices": [], "usage": usage}))
                for number, event in enumerate(events + ["[DONE]"]):
                    data = ("data: %s\n\n" % event).encode()
                    writer.write(b"%x\r\n%s\r\n" % (len(data), data))
                    await writer.drain()
                    if self.pause:
                        await asyncio.sleep(self.pause)
                    while number == 0 and self.gate is not None and not self.gate.is_set():
                        await asyncio.sleep(0.01)
                writer.write(b"0\r\n\r\n")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self.ended += 1
            writer.close()

    async def _stop(self):
        import asyncio
        self.server.close()
        handlers = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
        for task in handlers:
            task.cancel()
        await asyncio.gather(*handlers, return_exceptions=True)

    def stop(self):
        import asyncio
        asyncio.run_coroutine_threadsafe(self._stop(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()


@pytest.fixture
def router_tap():
    """(router double, tap url, metrics url); make(events, pause, clients, gate) sets the router and the tap up."""
    made = []

    def make(events=5, pause=0.0, clients=None, gate=None):
        router = Router(events, pause, gate)
        listen, metrics = "127.0.0.1:%d" % free_port(), "127.0.0.1:%d" % free_port()
        made.append((router, tap.serve(listen, "127.0.0.1:%d" % router.port, metrics, clients=clients)))
        return router, "http://" + listen, "http://" + metrics

    yield make
    for router, servers in made:
        for server in servers:
            server.shutdown()
        router.stop()


def raw_request(address, body, stream=True, chunked=False, close=True):
    """A POST /v1/chat/completions as bytes (its body chunked when asked)."""
    data = json.dumps(dict(chat("hi", stream=stream), **body)).encode()
    framing = b"Transfer-Encoding: chunked" if chunked else b"Content-Length: %d" % len(data)
    if chunked:  # in two chunks, with a chunk extension and a trailer
        data = b"%x;ext=1\r\n%s\r\n%x\r\n%s\r\n0\r\nX-Trailer: 1\r\n\r\n" % (5, data[:5], len(data) - 5, data[5:])
    return (b"POST /v1/chat/completions HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"
            b"X-LLM-Client: dave\r\n%s\r\n%s\r\n%s"
            % (address.encode(), framing, b"Connection: close\r\n" if close else b"", data))


def exchange(url, request, timeout=20):
    """Sends raw bytes to the tap, reads until it closes: (status, body bytes as sent)."""
    import socket
    host, port = url[len("http://"):].rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=timeout) as connection:
        connection.sendall(request)
        answer = b""
        while True:
            data = connection.recv(65536)
            if not data:
                break
            answer += data
    head, _sep, body = answer.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), body


def test_a_chunked_request_body_is_read_and_sent_on(router_tap):
    router, url, metrics = router_tap()
    status, body = exchange(url, raw_request(url[7:], {}, stream=False, chunked=True))
    assert status == 200 and json.loads(body)["usage"]["prompt_tokens"] == 3
    status, body = exchange(url, raw_request(url[7:], {}, stream=True, chunked=True))
    assert status == 200 and body.endswith(b"0\r\n\r\n") and b"data: [DONE]" in body and b'"usage"' not in body
    key = 'kimi_usage_requests_total{client="dave",code="200"}'
    got = series(metrics, {key: "2", 'kimi_usage_completion_tokens_total{client="dave"}': "10"})
    assert got[key] == "2" and got['kimi_usage_completion_tokens_total{client="dave"}'] == "10"
    assert router.accepted == 1  # one router connection for both


def test_a_client_that_leaves_mid_stream_lets_its_router_connection_go(router_tap):
    import socket
    router, url, metrics = router_tap(events=400, pause=0.01)
    host, port = url[len("http://"):].rsplit(":", 1)
    connection = socket.create_connection((host, int(port)), timeout=10)
    connection.sendall(raw_request(url[7:], {}, close=False))
    got = b""
    while got.count(b"data: ") < 3:
        got += connection.recv(65536)
    connection.close()  # mid-stream
    deadline = time.time() + 5
    while router.ended < 1 and time.time() < deadline:
        time.sleep(0.05)
    assert router.ended == 1  # the tap closed that router connection: not read to its end, not pooled
    status, text = post(url, chat("still there?"), client="dave")
    assert status == 200 and json.loads(text)["usage"]["prompt_tokens"] == 3
    assert router.accepted == 2
    got = series(metrics, {'kimi_usage_requests_total{client="dave",code="200"}': "2"})
    assert got['kimi_usage_requests_total{client="dave",code="200"}'] == "2"  # the one that left is counted too


def test_router_connections_are_reused(router_tap):
    router, url, _metrics = router_tap()
    for stream in (False, True, False):
        status, _text = post(url, chat("again", stream=stream), client="dave")  # a new client connection each
        assert status == 200
    assert router.accepted == 1


def test_300_streams_at_once(router_tap):
    import asyncio
    router, url, metrics = router_tap(events=20, pause=0.001)
    host, port = url[len("http://"):].rsplit(":", 1)
    request = raw_request(url[7:], {})

    async def one():
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(request)
        answer = await reader.read(-1)
        writer.close()
        return answer

    async def all_at_once():
        return await asyncio.gather(*(one() for _n in range(300)))

    answers = asyncio.run(all_at_once())
    assert all(a.startswith(b"HTTP/1.1 200 ") and a.count(b"data: ") == 21 and a.endswith(b"0\r\n\r\n")
               for a in answers)
    key = 'kimi_usage_requests_total{client="dave",code="200"}'
    got = series(metrics, {key: "300", 'kimi_usage_completion_tokens_total{client="dave"}': "6000"})
    assert got[key] == "300" and got['kimi_usage_completion_tokens_total{client="dave"}'] == "6000"
    assert router.accepted <= 300


# ---- --clients: per client key name limits (429 of the tap's own, never sent on) and the router's priority header
CLIENTS = {"header": "X-LLM-Client", "priority_header": "x-smg-priority",
           "clients": {"demo": {"limits": {}, "priority": "interactive"},
                       "team-b": {"limits": {"requests_per_minute": 3}, "priority": "bulk"},
                       "plain": {"limits": {}, "priority": None}}}


def limited(**limits):
    """CLIENTS with team-b's limits replaced."""
    return dict(CLIENTS, clients=dict(CLIENTS["clients"], **{"team-b": {"limits": limits, "priority": "bulk"}}))


@pytest.fixture
def clock(monkeypatch):
    """The limits' clock, stopped: now[0] += seconds moves it."""
    now = [1000.0]
    monkeypatch.setattr(tap, "clock", lambda: now[0])
    return now


class Client:
    """One keep-alive connection to the tap (as Caddy holds them): ask() -> (status, {header: value}, body)."""

    def __init__(self, url):
        import http.client
        self.connection = http.client.HTTPConnection(url[len("http://"):], timeout=20)

    def ask(self, client, text="hi", path="/v1/chat/completions", method="POST", headers=None, **more):
        body = json.dumps(chat(text, **more)).encode() if method == "POST" else None
        sent = dict({"Content-Type": "application/json"} if body else {}, **(headers or {}))
        if client:
            sent["X-LLM-Client"] = client
        self.connection.request(method, path, body=body, headers=sent)
        response = self.connection.getresponse()
        body = response.read()
        assert not response.will_close  # keep-alive kept, refusals included
        return response.status, dict((k.lower(), v) for k, v in response.getheaders()), body

    def close(self):
        self.connection.close()


def counted(metrics, client, answered):
    """Waits until the tap counted `answered` 200s of the client: it reads the limits' clock for an answer's tokens
    when it counts it, just after the answer went out (so before the test moves the clock)."""
    key = 'kimi_usage_requests_total{client="%s",code="200"}' % client
    assert series(metrics, {key: str(answered)}).get(key) == str(answered)


def refusal(answer, limit, retry_after, message):
    status, headers, body = answer
    assert status == 429, answer
    assert headers["retry-after"] == str(retry_after) and headers["content-type"] == "application/json", headers
    assert json.loads(body) == {"error": {"type": "rate_limit_error", "code": limit + "_exceeded",
                                          "message": message, "param": None}}


def test_requests_per_minute_refuses_the_fourth_until_the_window_lets_one_more_in(router_tap, clock):
    router, url, metrics = router_tap(clients=CLIENTS)
    client = Client(url)
    for n in range(3):
        assert client.ask("team-b", "admitted %d" % n)[0] == 200
        clock[0] += 10
    # 3 in the last 60 s: the 4th waits until the first leaves the window (at 1060, now 1030)
    refusal(client.ask("team-b", "refused 1"), "requests_per_minute", 30,
            "client team-b is over its limit of 3 requests a minute")
    assert client.ask("demo", "demo is not limited")[0] == 200  # another client, on the same connection too
    assert client.ask("plain", "nor plain")[0] == 200
    clock[0] += 29.5
    refusal(client.ask("team-b", "refused 2"), "requests_per_minute", 1,  # 0.5 s: at least 1
            "client team-b is over its limit of 3 requests a minute")
    clock[0] += 0.5
    assert client.ask("team-b", "admitted again")[0] == 200  # the first left the window
    refusal(client.ask("team-b", "refused 3"), "requests_per_minute", 10,
            "client team-b is over its limit of 3 requests a minute")
    client.close()
    got = series(metrics, {'kimi_usage_requests_total{client="team-b",code="200"}': "4"})
    assert got['kimi_usage_requests_total{client="team-b",code="200"}'] == "4"
    assert got['kimi_usage_requests_total{client="team-b",code="429"}'] == "3"
    assert got['kimi_usage_refused_total{client="team-b",limit="requests_per_minute"}'] == "3"
    assert got['kimi_usage_requests_total{client="demo",code="200"}'] == "1"
    assert not any(k.startswith("kimi_usage_refused_total{client=\"demo\"") for k in got)
    # the refused requests never reached the router
    texts = [request["messages"][-1]["content"] for _head, request in router.seen]
    assert texts == ["admitted 0", "admitted 1", "admitted 2", "demo is not limited", "nor plain", "admitted again"]
    text = urllib.request.urlopen(metrics + "/metrics", timeout=5).read().decode()
    assert "# TYPE kimi_usage_refused_total counter" in text and "# HELP kimi_usage_refused_total " in text


def test_requests_per_minute_with_a_short_window_clears_in_real_time(router_tap, monkeypatch):
    monkeypatch.setattr(tap, "WINDOW", 0.5)
    router, url, _metrics = router_tap(clients=limited(requests_per_minute=1))
    client = Client(url)
    assert client.ask("team-b")[0] == 200
    refusal(client.ask("team-b"), "requests_per_minute", 1, "client team-b is over its limit of 1 requests a minute")
    time.sleep(0.6)
    assert client.ask("team-b")[0] == 200
    client.close()
    assert len(router.seen) == 2


@pytest.mark.usefixtures("clock")
def test_pipelined_requests_over_a_limit_are_answered_in_order(router_tap):
    """A client that sends many requests at once is answered one by one: 3 admitted, the rest 429, none sent on."""
    router, url, metrics = router_tap(clients=CLIENTS)
    one = raw_request(url[7:], {}, stream=False, close=False).replace(b"X-LLM-Client: dave", b"X-LLM-Client: team-b")
    last = raw_request(url[7:], {}, stream=False, close=True).replace(b"X-LLM-Client: dave", b"X-LLM-Client: demo")
    status, body = exchange(url, one * 200 + last)
    statuses = [status] + [int(code) for code in re.findall(rb"HTTP/1\.1 (\d+) ", body)]  # the first's body: the rest
    assert statuses == [200] * 3 + [429] * 197 + [200]
    assert len(router.seen) == 4
    got = series(metrics, {'kimi_usage_refused_total{client="team-b",limit="requests_per_minute"}': "197"})
    assert got['kimi_usage_requests_total{client="team-b",code="429"}'] == "197"


def test_tokens_per_minute_counts_the_answers_usage_streams_included(router_tap, clock):
    router, url, metrics = router_tap(events=5, clients=limited(tokens_per_minute=12))  # 3 + 5 tokens an answer
    client = Client(url)
    assert client.ask("team-b", "plain answer")[0] == 200  # 8 tokens
    counted(metrics, "team-b", 1)
    clock[0] += 20
    status, _headers, body = client.ask("team-b", "a stream", stream=True)  # 8 more, from the stream's usage event
    assert status == 200 and b'"usage"' not in body  # the client did not ask for it
    counted(metrics, "team-b", 2)
    clock[0] += 10
    # 16 >= 12: refused until the first answer's 8 leave the window (at 1060, now 1030)
    refusal(client.ask("team-b", "refused"), "tokens_per_minute", 30,
            "client team-b is over its limit of 12 tokens a minute")
    assert client.ask("demo", "demo is served")[0] == 200
    clock[0] += 30
    assert client.ask("team-b", "admitted again")[0] == 200  # 8 in the window again, then 16
    counted(metrics, "team-b", 3)
    refusal(client.ask("team-b", "refused again"), "tokens_per_minute", 20,
            "client team-b is over its limit of 12 tokens a minute")
    client.close()
    texts = [request["messages"][-1]["content"] for _head, request in router.seen]
    assert texts == ["plain answer", "a stream", "demo is served", "admitted again"]
    got = series(metrics, {'kimi_usage_refused_total{client="team-b",limit="tokens_per_minute"}': "2"})
    assert got['kimi_usage_requests_total{client="team-b",code="429"}'] == "2"
    assert got['kimi_usage_prompt_tokens_total{client="team-b"}'] == "9"
    assert got['kimi_usage_completion_tokens_total{client="team-b"}'] == "15"


def test_concurrent_counts_streams_until_they_end_or_their_client_leaves(router_tap):
    import socket
    import threading
    gate = threading.Event()  # the router's streams wait after their first event until it is set
    router, url, metrics = router_tap(events=3, clients=limited(concurrent=2), gate=gate)
    host, port = url[len("http://"):].rsplit(":", 1)
    request = raw_request(url[7:], {}).replace(b"X-LLM-Client: dave", b"X-LLM-Client: team-b")

    def open_stream():
        connection = socket.create_connection((host, int(port)), timeout=20)
        connection.sendall(request)
        got = b""
        while b"data: " not in got:
            got += connection.recv(65536)
        return connection, got

    def to_the_end(connection, got):
        while True:
            data = connection.recv(65536)
            if not data:
                break
            got += data
        connection.close()
        return got

    first, second = open_stream(), open_stream()
    client = Client(url)
    over = "client team-b is over its limit of 2 concurrent requests"
    refusal(client.ask("team-b", "a third"), "concurrent", 1, over)
    assert client.ask("demo", "demo is served")[0] == 200
    first[0].close()  # its client leaves mid-stream: the tap lets it go
    deadline = time.time() + 10
    while True:
        status = client.ask("team-b", "admitted when one left")[0]
        if status == 200 or time.time() > deadline:
            break
        time.sleep(0.05)
    assert status == 200
    third = open_stream()  # with the second: two in flight again
    refusal(client.ask("team-b", "a fourth"), "concurrent", 1, over)
    gate.set()
    for stream in (second, third):
        assert to_the_end(*stream).endswith(b"0\r\n\r\n")
    assert client.ask("team-b", "admitted after the streams ended")[0] == 200
    client.close()
    texts = [request["messages"][-1]["content"] for _head, request in router.seen]
    assert "a third" not in texts and "a fourth" not in texts and texts.count("admitted when one left") == 1
    got = series(metrics, {'kimi_usage_requests_total{client="team-b",code="200"}': "5"})
    assert got['kimi_usage_requests_total{client="team-b",code="200"}'] == "5"  # the one that left is counted too
    refused = int(got['kimi_usage_refused_total{client="team-b",limit="concurrent"}'])
    assert refused >= 2 and got['kimi_usage_requests_total{client="team-b",code="429"}'] == str(refused)


def test_the_first_limit_over_is_named(router_tap, clock):
    router, url, metrics = router_tap(clients=limited(requests_per_minute=1, tokens_per_minute=1, concurrent=1))
    client = Client(url)
    assert client.ask("team-b")[0] == 200
    counted(metrics, "team-b", 1)
    # over requests_per_minute and tokens_per_minute
    refusal(client.ask("team-b"), "requests_per_minute", 60, "client team-b is over its limit of 1 requests a minute")
    client.close()
    got = series(metrics, {'kimi_usage_refused_total{client="team-b",limit="requests_per_minute"}': "1"})
    assert not any("tokens_per_minute" in k or "concurrent" in k for k in got)
    assert len(router.seen) == 1
    # over requests_per_minute and concurrent (one in flight); tokens_per_minute alone after the window
    limiter = tap.Limiter("x", {"requests_per_minute": 1, "tokens_per_minute": 1, "concurrent": 1})
    assert limiter.admit() is None
    assert limiter.admit()[:2] == ("requests_per_minute", 60)
    clock[0] += 60
    assert limiter.admit()[:2] == ("concurrent", 1)
    limiter.release({"prompt_tokens": 3, "completion_tokens": 2})
    assert limiter.admit()[:2] == ("tokens_per_minute", 60)
    clock[0] += 60
    assert limiter.admit() is None and limiter.in_flight == 1


def sent_priorities(head):
    return [line.split(":", 1)[1].strip() for line in head.split("\r\n") if line.startswith("x-smg-priority:")]


def test_the_priority_header_is_the_files_never_the_clients(router_tap):
    router, url, _metrics = router_tap(clients=dict(CLIENTS, header="X-Team"))
    client = Client(url)
    for name, sent in (("demo", "bulk"), ("team-b", None), ("plain", "interactive"), ("stranger", "interactive")):
        headers = {"X-Team": name, "X-SMG-Priority": sent} if sent else {"X-Team": name}
        assert client.ask(None, name, headers=headers)[0] == 200
    # what is not counted gets it too (GET /v1/models), and a client that spells it otherwise loses it as well
    headers = {"X-Team": "team-b", "x-smg-PRIORITY": "interactive"}
    assert client.ask(None, method="GET", path="/v1/models", headers=headers)[0] == 200
    client.close()
    assert [sent_priorities(head) for head, _request in router.seen] == [
        ["interactive"], ["bulk"], [], [], ["bulk"]]
    assert router.seen[0][0].count("x-team: demo") == 1  # the name header itself passes on


def test_without_a_file_nothing_is_limited_and_no_priority_header_is_set(router_tap):
    router, url, metrics = router_tap()
    client = Client(url)
    for _n in range(20):
        assert client.ask("team-b", stream=True)[0] == 200
    assert client.ask("team-b", headers={"X-SMG-Priority": "interactive"})[0] == 200
    client.close()
    assert [sent_priorities(head) for head, _request in router.seen] == [[]] * 20 + [["interactive"]]
    got = series(metrics, {'kimi_usage_requests_total{client="team-b",code="200"}': "21"})
    assert not any(k.startswith("kimi_usage_refused_total") for k in got)


@pytest.mark.usefixtures("clock")
def test_a_file_without_a_priority_header_limits_and_leaves_the_header_alone(router_tap, tmp_path):
    path = tmp_path / "clients.json"
    path.write_text(json.dumps(dict(CLIENTS, priority_header=None)))
    router, url, _metrics = router_tap(clients=str(path))
    client = Client(url)
    for _n in range(3):
        assert client.ask("team-b", headers={"X-SMG-Priority": "interactive"})[0] == 200
    assert client.ask("team-b")[0] == 429
    client.close()
    assert [sent_priorities(head) for head, _request in router.seen] == [["interactive"]] * 3


@pytest.mark.parametrize("content,problem", [
    ("{not json", "not JSON: Expecting property name"),
    ("[]", "must be a JSON object of header, priority_header, clients, got list"),
    ('{"clients": []}', "clients must be an object"),
    ('{"clients": {}, "limits": {}}', "unknown key 'limits'"),
    ('{"clients": {"Team B": {"limits": {}}}}', "clients: 'Team B' is not a client key name"),
    ('{"clients": {"b": {"limits": {"concurrent": 0}}}}', "clients.b.limits.concurrent must be a positive integer, "
                                                          "got 0"),
    ('{"clients": {"b": {"limits": {"requests_per_minute": "3"}}}}', "requests_per_minute must be a positive integer"),
    ('{"clients": {"b": {"limits": {"tokens_per_minute": true}}}}', "tokens_per_minute must be a positive integer"),
    ('{"clients": {"b": {"limits": {"tokens_per_minute": 1.5}}}}', "tokens_per_minute must be a positive integer"),
    ('{"clients": {"b": {"limits": {"rpm": 3}}}}', "clients.b.limits: unknown limit 'rpm'"),
    ('{"clients": {"b": {"limits": {}, "priority": "a\\nb"}}}', "clients.b.priority must be a header value"),
    ('{"clients": {"b": {"limits": {}, "prio": 1}}}', "clients.b: unknown key 'prio'"),
    ('{"header": "X LLM", "clients": {}}', "header must be a header name"),
    ('{"priority_header": "X-LLM-Client", "clients": {}}', "priority_header must be a header name"),
])
def test_a_bad_clients_file_refuses_to_start_naming_the_problem(tmp_path, content, problem):
    path = tmp_path / "clients.json"
    path.write_text(content)
    with pytest.raises(ValueError) as refused:
        tap.serve("127.0.0.1:%d" % free_port(), "127.0.0.1:1", "127.0.0.1:%d" % free_port(), clients=str(path))
    assert problem in str(refused.value) and "\n" not in str(refused.value)


def test_the_command_refuses_a_bad_file_in_one_line(tmp_path):
    import subprocess
    path = tmp_path / "clients.json"
    path.write_text('{"clients": {"team-b": {"limits": {"concurrent": -2}}}}')
    done = subprocess.run([sys.executable, TAP, "--listen", "127.0.0.1:%d" % free_port(), "--upstream", "127.0.0.1:1",
                           "--metrics", "127.0.0.1:%d" % free_port(), "--clients", str(path)],
                          capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == "kimi_usage_tap.py: --clients %s: clients.team-b.limits.concurrent must be a positive " \
                          "integer, got -2\n" % path
    missing = subprocess.run([sys.executable, TAP, "--listen", "127.0.0.1:1", "--upstream", "127.0.0.1:1",
                              "--metrics", "127.0.0.1:1", "--clients", str(tmp_path / "none.json")],
                             capture_output=True, text=True, timeout=30, check=False)
    assert missing.returncode == 2 and "cannot read it: No such file or directory" in missing.stderr
