"""The engine double's generation slots (KIMI_DOUBLE_SLOTS) and time per token (KIMI_DOUBLE_TOKEN_SECONDS): at most
n requests generate at once, the others wait FIFO in the waiting-requests gauge; tokens are streamed as they are made;
the SGLang double reports its slots in /server_info `max_running_requests` (where SMG reads a worker's capacity).
No Docker needed."""
import io
import json
import re
import socket
import threading
import time
import urllib.request

import pytest

import test_engine_double
from test_engine_double import chat
from kimi_engine_double import flags, trtllm  # noqa: E402  (test_engine_double puts the double on sys.path)
from kimi_engine_double.server import EngineDouble  # noqa: E402

cache, start = test_engine_double.cache, test_engine_double.start  # its fixtures: HF cache, in-process doubles

TOKENS = 10  # chat("...", max_tokens=10): the reasoning's 9 words and one word of the answer, finish "length"


def stream(double, text, max_tokens=TOKENS):
    """POST a streamed chat; returns (seconds to the first token, seconds to the end, tokens, finish_reason)."""
    body = chat(text, stream=True, max_tokens=max_tokens)
    req = urllib.request.Request(double.url("/v1/chat/completions"), data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    t0, first, tokens, finish = time.time(), None, 0, None
    with urllib.request.urlopen(req, timeout=30) as r:
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            for choice in json.loads(line[6:])["choices"]:
                delta = choice["delta"]
                if delta.get("reasoning_content") or delta.get("content"):
                    tokens += 1
                    first = first or time.time() - t0
                finish = choice.get("finish_reason") or finish
    return first, time.time() - t0, tokens, finish


def gauge(double, name):
    text = double.get("/metrics")[1]
    return float(re.search(r"^%s\{[^}]*\} (\S+)$" % re.escape(name), text, re.M).group(1))


@pytest.mark.parametrize("name, value", [("KIMI_DOUBLE_SLOTS", "0"), ("KIMI_DOUBLE_SLOTS", "-2"),
                                         ("KIMI_DOUBLE_SLOTS", "two"), ("KIMI_DOUBLE_SLOTS", "1.5"),
                                         ("KIMI_DOUBLE_TOKEN_SECONDS", "-0.1"), ("KIMI_DOUBLE_TOKEN_SECONDS", "fast"),
                                         ("KIMI_DOUBLE_TOKEN_SECONDS", "nan"), ("KIMI_DOUBLE_TOKEN_SECONDS", "inf")])
def test_a_bad_value_stops_the_start_with_exit_1(start, name, value):
    bad = start("vllm", env={name: value}, wait_ready=False)
    bad.thread.join(10)
    assert bad.code == 1 and "bad %s=%r" % (name, value) in bad.err.getvalue()


def test_defaults_no_limit_no_delay_and_no_capacity_reported(start):
    double = start("sglang")
    assert "max_running_requests" not in double.get("/server_info")[1] or \
        double.get("/server_info")[1]["max_running_requests"] is None  # as given on the command line: none
    results = []
    threads = [threading.Thread(target=lambda i=i: results.append(stream(double, "hi %d" % i))) for i in range(6)]
    t0 = time.time()
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(results) == 6 and time.time() - t0 < 2
    assert all(tokens == TOKENS and finish == "length" for _f, _e, tokens, finish in results)


def test_tokens_are_streamed_as_they_are_made(start):
    double = start("vllm", env={"KIMI_DOUBLE_TOKEN_SECONDS": "0.05"})
    first, end, tokens, finish = stream(double, "Hello there")
    assert tokens == TOKENS and finish == "length"
    assert 0.04 <= first < 0.3  # the first token after one token's time ...
    assert TOKENS * 0.05 - 0.02 <= end < TOKENS * 0.05 + 0.5  # ... the last after max_tokens x s
    t0 = time.time()
    status, body = double.post(chat("Hello there", max_tokens=TOKENS))  # not streamed: the whole answer at the end
    assert status == 200 and body["usage"]["completion_tokens"] == TOKENS
    assert time.time() - t0 >= TOKENS * 0.05 - 0.02


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_at_most_n_generate_the_rest_wait_fifo_in_the_waiting_gauge(start, engine):
    double = start(engine, env={"KIMI_DOUBLE_SLOTS": "2", "KIMI_DOUBLE_TOKEN_SECONDS": "0.05"})
    if engine == "sglang":  # where SMG reads a worker's capacity (discover_metadata.rs: ServerInfo)
        assert double.get("/server_info")[1]["max_running_requests"] == 2
        assert double.get("/get_server_info")[1]["max_running_requests"] == 2
        running, waiting = "sglang:num_running_reqs", "sglang:num_queue_reqs"
    else:  # vLLM reports no capacity anywhere (/v1/models has max_model_len only): SMG counts 64 slots for it
        assert "max_running_requests" not in json.dumps(double.get("/v1/models")[1])
        running, waiting = "vllm:num_requests_running", "vllm:num_requests_waiting"
    results, order = {}, []

    def one(i):
        results[i] = stream(double, "request %d" % i)
        order.append(i)
    threads = []
    for i in range(5):  # arrive in order 0..4, 30 ms apart
        threads.append(threading.Thread(target=one, args=(i,)))
        threads[-1].start()
        time.sleep(0.03)
    time.sleep(0.1)
    assert gauge(double, running) == 2 and gauge(double, waiting) == 3  # 2 generate, 3 wait
    for t in threads:
        t.join(30)
    one_request = TOKENS * 0.05
    assert order == [0, 1, 2, 3, 4]  # first come, first served
    assert results[0][0] < 0.3 and results[1][0] < 0.3  # a free slot: the first token at once
    assert results[2][0] >= one_request - 0.1 and results[4][0] >= 2 * one_request - 0.15  # waited for slots
    assert gauge(double, running) == 0 and gauge(double, waiting) == 0


def test_trtllm_iteration_stats_report_the_slots():
    args = trtllm.parse(["moonshotai/Kimi-K2.6"], flags.load_flags("trtllm"))
    args.llm_args = {"enable_iter_perf_stats": True}
    double = EngineDouble("trtllm", args, env={"KIMI_DOUBLE_SLOTS": "3"}, out=io.StringIO(), err=io.StringIO())
    assert double.startup_problems() == []
    assert double.iteration_stats()[0]["maxNumActiveRequests"] == 3  # max_batch_size's place


def test_a_client_that_goes_away_frees_its_slot(start):
    double = start("vllm", env={"KIMI_DOUBLE_SLOTS": "1", "KIMI_DOUBLE_TOKEN_SECONDS": "0.05"})
    body = json.dumps(chat("Hello there", stream=True, max_tokens=200)).encode()  # the whole answer: 19 tokens
    with socket.create_connection(("127.0.0.1", double.double.port)) as s:
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        got = b""
        while b"data: " not in got:  # it holds the slot ...
            got += s.recv(4096)
    time.sleep(0.2)  # ... and is gone: a token's write fails (the first after the close may still go) and frees it
    first, _end, tokens, _finish = stream(double, "next")
    assert first < 0.3 and tokens == TOKENS
    assert "Abort request: the client disconnected" in double.out.getvalue()


def test_server_info_numbers_are_numbers(start):
    """SMG parses /server_info into typed fields (context_length, max_running_requests, ...) and drops the whole answer
    when one is a string, so the double answers the server arguments typed as ServerArgs holds them."""
    info = start("sglang", ["--max-running-requests", "5"]).get("/server_info")[1]
    assert info["context_length"] == 262144 and info["mem_fraction_static"] == 0.85
    assert info["max_running_requests"] == 5  # as given, with no KIMI_DOUBLE_SLOTS (the double then sets no limit)
