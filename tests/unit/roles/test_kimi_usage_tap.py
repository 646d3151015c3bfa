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
