"""The fleet gateway's worker control (plugins/modules/gateway_workers.py) against the REAL routers in regular mode
(sglang-router 0.3.2 and vllm-router 0.1.17 from .venv-router) in front of two engine doubles: both engines behind
either router, an instance taken out (the router sends it nothing more) and put back, check mode, a router that does
not answer. No Docker needed."""
import os
import subprocess
import sys
import time
import urllib.request

import pytest

import test_engine_double
from test_engine_double import chat, free_port
from test_engine_double_pd import ROUTER_VENV, post_raw, router_missing

cache, start = test_engine_double.cache, test_engine_double.start  # its fixtures: HF cache, in-process doubles

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
sys.path.insert(0, os.path.join(REPO, "tests", "unit", "plugins", "modules"))
from module_runner import run_module  # noqa: E402

MODULE = os.path.join(REPO, "plugins", "modules", "gateway_workers.py")
ROUTERS = {"sglang-router": ([os.path.join(ROUTER_VENV, "bin", "python"), "-m", "sglang_router.launch_router"], "id"),
           "vllm-router": ([os.path.join(ROUTER_VENV, "bin", "vllm-router")], "url")}


def served(double):
    return double.out.getvalue().count("POST /v1/chat/completions")


@pytest.fixture
def gateway(start, tmp_path):
    """start(router, engine) -> (router URL, remove_by, [double, double])."""
    routers = []

    def _start(router, engine):
        reason = router_missing("sglang" if router == "sglang-router" else "vllm")
        if reason:
            pytest.skip(reason)
        doubles = [start(engine), start(engine)]
        port = free_port()
        argv = ROUTERS[router][0] + [
            "--worker-urls"] + ["http://127.0.0.1:%d" % d.double.port for d in doubles] + [
            "--policy", "round_robin", "--host", "127.0.0.1", "--port", str(port), "--prometheus-host", "127.0.0.1",
            "--prometheus-port", str(free_port())]
        log = open(tmp_path / ("%s.log" % router), "wb")
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=str(tmp_path),
                                env=dict(os.environ, NO_COLOR="1"))
        routers.append(proc)
        url = "http://127.0.0.1:%d" % port
        for _attempt in range(200):
            try:
                if urllib.request.urlopen(url + "/health", timeout=1).status == 200:
                    break
            except OSError:
                pass
            assert proc.poll() is None, (tmp_path / ("%s.log" % router)).read_text(errors="replace")
            time.sleep(0.1)
        return url, ROUTERS[router][1], doubles
    yield _start
    for proc in routers:
        proc.terminate()
        proc.wait(10)


def workers(url, remove_by, urls, state, **extra):
    return run_module(MODULE, dict({"router_url": url, "remove_by": remove_by, "workers": urls, "state": state,
                                    "timeout": 30}, **extra))


@pytest.mark.parametrize("router, engine", [("sglang-router", "sglang"), ("sglang-router", "vllm"),
                                            ("vllm-router", "vllm"), ("vllm-router", "sglang")])
def test_an_instance_taken_out_gets_nothing_and_comes_back(gateway, router, engine):
    url, remove_by, (a, b) = gateway(router, engine)
    ua, ub = ("http://127.0.0.1:%d" % d.double.port for d in (a, b))
    listed = workers(url, remove_by, [ua, ub], "listed")
    assert not listed["changed"] and sorted(w["url"] for w in listed["workers"]) == sorted([ua, ub])
    for i in range(4):
        assert post_raw(url + "/v1/chat/completions", chat("before %d" % i))[0] == 200
    assert served(a) >= 1 and served(b) >= 1  # round robin: both

    preview = run_module(MODULE, {"router_url": url, "remove_by": remove_by, "workers": [ua], "state": "absent"},
                         check_mode=True)
    assert preview["changed"] and preview["removed"] == [ua]
    out = workers(url, "auto", [ua], "absent")  # what kimi_switch passes: read off the router that runs
    assert out["changed"] and out["removed"] == [ua] and [w["url"] for w in out["workers"]] == [ub]
    assert not workers(url, remove_by, [ua], "absent")["changed"]  # idempotent
    before = served(a)
    for i in range(4):
        assert post_raw(url + "/v1/chat/completions", chat("out %d" % i))[0] == 200
    assert served(a) == before  # taken out: nothing new

    back = workers(url, remove_by, [ua], "present")
    assert back["changed"] and back["added"] == [ua]
    assert sorted(w["url"] for w in back["workers"] if w["healthy"]) == sorted([ua, ub])
    assert not workers(url, remove_by, [ua], "present")["changed"]
    for i in range(4):
        assert post_raw(url + "/v1/chat/completions", chat("back %d" % i))[0] == 200
    assert served(a) > before


def test_a_router_that_does_not_answer_is_skipped_or_fails():
    url = "http://127.0.0.1:%d" % free_port()
    skipped = workers(url, "id", ["http://127.0.0.1:1"], "absent", router_down="skip")
    assert skipped["router_down"] and not skipped["changed"] and "does not answer" in skipped["msg"]
    failed = workers(url, "id", ["http://127.0.0.1:1"], "present")
    assert failed["failed"] and "does not answer" in failed["msg"]
