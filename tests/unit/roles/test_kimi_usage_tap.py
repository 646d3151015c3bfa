"""kimi_gateway's usage tap (roles/kimi_gateway/files/kimi_usage_tap.py) between a client and an engine double: tokens in
and out per client key name from plain answers and from streams (asked for with include_usage, the extra event dropped
again when the client did not ask), every request counted, everything passed through unchanged; a router that
restarts is waited for (kimi_gateway_retry), one that stays down is a 502. No Docker needed."""
import importlib.util
import json
import os
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


# ---- the asyncio tap's connections: chunked request bodies, clients that leave, router connections reused, many
# streams at once. A router double of its own: keep-alive, chunked SSE streams (its events, the usage-only event when
# asked, [DONE]) or a plain JSON answer; it counts the connections it accepted and those that ended.
class Router:
    def __init__(self, events=5, pause=0.0):
        import asyncio
        import threading
        self.events, self.pause = events, pause
        self.accepted = self.ended = 0
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
                for event in events + ["[DONE]"]:
                    data = ("data: %s\n\n" % event).encode()
                    writer.write(b"%x\r\n%s\r\n" % (len(data), data))
                    await writer.drain()
                    if self.pause:
                        await asyncio.sleep(self.pause)
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
    """(router double, tap url, metrics url); make(events, pause) sets the router up."""
    made = []

    def make(events=5, pause=0.0):
        router = Router(events, pause)
        listen, metrics = "127.0.0.1:%d" % free_port(), "127.0.0.1:%d" % free_port()
        made.append((router, tap.serve(listen, "127.0.0.1:%d" % router.port, metrics)))
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
