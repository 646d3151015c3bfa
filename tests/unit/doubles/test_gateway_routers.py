"""The fleet gateway's worker control (plugins/modules/gateway_workers.py) against the REAL routers in regular mode
(SMG 1.13.0 and vllm-router 0.1.17 from .venv-router) in front of two engine doubles: both engines behind
either router, an instance taken out (the router sends it nothing more) and put back, check mode, a router that does
not answer; and the canary comparison (plugins/modules/canary_compare.py) on the routers' real per-worker outcomes. No
Docker needed."""
import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.request

import pytest

import test_engine_double
from test_engine_double import chat, free_port
from test_engine_double_pd import ROUTER_VENV, post_raw

cache, start = test_engine_double.cache, test_engine_double.start  # its fixtures: HF cache, in-process doubles

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
sys.path.insert(0, os.path.join(REPO, "tests", "unit", "plugins", "modules"))
from module_runner import run_module  # noqa: E402

MODULE = os.path.join(REPO, "plugins", "modules", "gateway_workers.py")
ROUTERS = {"smg": ([os.path.join(ROUTER_VENV, "bin", "python"), "-m", "smg.launch_router"], "id"),
           "vllm-router": ([os.path.join(ROUTER_VENV, "bin", "vllm-router")], "url")}


def router_missing(router):
    """Why the router cannot run here, or None."""
    exe = ROUTERS[router][0][0]
    if not os.access(exe, os.X_OK):
        return "no %s: make router-client (requirements-router.txt into %s)" % (exe, ROUTER_VENV)
    return None


def served(double):
    return double.out.getvalue().count("POST /v1/chat/completions")


@pytest.fixture
def gateway(start, tmp_path):
    """start(router, engine, envs, extra) -> (router URL, remove_by, [double, double], its Prometheus port): two doubles
    (each with its env of `envs`) behind the real router (its options and `extra`), round robin, once it answers
    /health. The router's log: tmp_path/<router>.log."""
    routers = []

    def _start(router, engine, envs=({}, {}), extra=()):
        reason = router_missing(router)
        if reason:
            pytest.skip(reason)
        doubles = [start(engine, env=env) for env in envs]
        port, metrics_port = free_port(), free_port()
        argv = ROUTERS[router][0] + [
            "--worker-urls"] + ["http://127.0.0.1:%d" % d.double.port for d in doubles] + [
            "--policy", "round_robin", "--host", "127.0.0.1", "--port", str(port), "--prometheus-host", "127.0.0.1",
            "--prometheus-port", str(metrics_port)] + list(extra)
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
        return url, ROUTERS[router][1], doubles, metrics_port
    yield _start
    for proc in routers:  # SMG drains for seconds on SIGTERM: nothing here needs it
        proc.terminate()
        try:
            proc.wait(2)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def workers(url, remove_by, urls, state, **extra):
    return run_module(MODULE, dict({"router_url": url, "remove_by": remove_by, "workers": urls, "state": state,
                                    "timeout": 30}, **extra))


@pytest.mark.parametrize("router, engine", [("smg", "sglang"), ("smg", "vllm"),
                                            ("vllm-router", "vllm"), ("vllm-router", "sglang")])
def test_an_instance_taken_out_gets_nothing_and_comes_back(gateway, router, engine):
    url, remove_by, (a, b), _metrics_port = gateway(router, engine)
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
    again = workers(url, remove_by, [ua], "absent")  # idempotent, and says the router did not list it
    assert not again["changed"] and again["removed"] == [] and again["not_listed"] == [ua]
    before = served(a)
    for i in range(4):
        assert post_raw(url + "/v1/chat/completions", chat("out %d" % i))[0] == 200
    assert served(a) == before  # taken out: nothing new

    back = workers(url, remove_by, [ua], "present", max_running_requests={ua: 8})
    assert back["changed"] and back["added"] == [ua]
    assert back["labelled"] == ([ua] if router == "smg" else [])  # vllm-router has no worker labels: none said
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


CANARY = os.path.join(REPO, "plugins", "modules", "canary_compare.py")


@pytest.mark.parametrize("router", ["smg", "vllm-router"])
def test_canary_compare_reads_the_real_routers_outcomes_and_the_engines_series(gateway, router):
    """A canary instance whose engine fails 1 request in 4 behind the real router (round robin, which retries the
    failures elsewhere: clients see none) is rolled back on its error rate; a sound one is promoted."""
    from ansible_collections.kimi.deploy.plugins.module_utils._engines.routers import ROUTERS as DATA
    from ansible_collections.kimi.deploy.plugins.module_utils._engines.vllm import SERVING_METRICS
    url, _remove_by, doubles, metrics_port = gateway(router, "vllm", envs=({"KIMI_DOUBLE_ERROR_RATE": "0.25"}, {}))
    loaded = {"stop": False, "sent": 0, "failed": []}  # the load thread's outcomes, asserted by the test itself
    try:
        workers = [{"url": "http://127.0.0.1:%d" % d.double.port, "serving_metrics": SERVING_METRICS,
                    "metrics_url": "http://127.0.0.1:%d/metrics" % d.double.port} for d in doubles]

        def load():  # an assert here would end the thread, not fail the test: outcomes are kept and checked below
            while not loaded["stop"]:
                loaded["sent"] += 1
                status = post_raw(url + "/v1/chat/completions", chat("canary %d" % loaded["sent"]))[0]
                if status != 200:
                    loaded["failed"].append(status)
        thread = threading.Thread(target=load, daemon=True)
        thread.start()
        params = {"router_metrics_url": "http://127.0.0.1:%d/metrics" % metrics_port,
                  "worker_outcomes": [DATA[r]["worker_outcomes"] for r in ("smg", "vllm-router")],
                  "engine_metrics": [SERVING_METRICS], "requests": 12, "minutes": 0.5}
        bad = run_module(CANARY, dict(params, canary=workers[:1], rest=workers[1:]))
        good = run_module(CANARY, dict(params, canary=workers[1:], rest=workers[:1]))
        loaded["stop"] = True
        thread.join(10)
    finally:
        loaded["stop"] = True
    assert loaded["sent"] >= 12 and loaded["failed"] == [], loaded  # the router retried every failure: clients saw none
    assert not bad["promote"] and bad["reason"].startswith("error rate: 2") and bad["canary"]["errors"] >= 3, bad
    assert bad["rest"]["errors"] == 0 and bad["canary"]["requests"] >= 9
    assert good["promote"] and good["reason"].startswith("error rate 0.0% against 2"), good


ANSI = re.compile(r"\x1b\[[0-9;]*m")
SLOTS = 6  # each vLLM double's --max-num-seqs, as the collection derives it for the worker


def capacities(log_path):
    """[(capacity, source)] of SMG's priority scheduler, in the order its log says it computed them (WorkerCapacity:
    the sum of its healthy workers' max_running_requests labels, 64 for a worker without one)."""
    return [(int(n), source) for n, source in re.findall(r"backend capacity updated .*?new=(\d+) .*?new_source=(\w+)",
                                                         ANSI.sub("", log_path.read_text(errors="replace")))]


def settled(log_path, capacity, timeout=15):
    """The capacity SMG last computed, once it is `capacity` (or after timeout seconds: the last one, or None)."""
    deadline = time.time() + timeout
    while True:
        last = (capacities(log_path) or [(None, None)])[-1]
        if last[0] == capacity or time.time() >= deadline:
            return last
        time.sleep(0.1)


def test_smg_counts_a_vllm_worker_by_the_slots_the_module_gives_it(gateway, tmp_path):
    """SMG 1.13.0's priority scheduler counts a worker's slots from its max_running_requests label, which it reads
    only off SGLang's /server_info: two vLLM doubles given by --worker-urls (as the gateway starts) count 64 each. The
    module's listed state (kimi_gateway after a start) gives each its label in place (PATCH /workers/<id>): the pool
    is then 2 x SLOTS, every worker reported, and SMG's worker list shows the label. (present, kimi_switch putting an
    instance back, registers it with the label: POST /workers, test_an_instance_taken_out_gets_nothing_and_comes_back;
    SMG's removal drains for 5 s, too slow to repeat here.)"""
    from ansible_collections.kimi.deploy.plugins.module_utils._model.gateway import priority_config
    tenants = [{"name": "chat", "priority": "interactive", "limits": {}}]
    (tmp_path / "priority.yaml").write_text(priority_config(tenants))
    env = {"KIMI_DOUBLE_SLOTS": str(SLOTS)}
    url, remove_by, (a, b), _metrics_port = gateway("smg", "vllm", envs=(env, env), extra=[
        "--priority-scheduler-enabled", "--priority-scheduler-config", str(tmp_path / "priority.yaml")])
    log_path = tmp_path / "smg.log"
    ua, ub = ("http://127.0.0.1:%d" % d.double.port for d in (a, b))
    counts = {ua: SLOTS, ub: SLOTS}
    assert not workers(url, remove_by, [ua, ub], "listed")["changed"]  # healthy, no label asked
    assert settled(log_path, 128) == (128, "Mixed")  # without the label: SMG's 64 per worker

    listed = workers(url, remove_by, [ua, ub], "listed", max_running_requests=counts)
    assert listed["changed"] and listed["labelled"] == sorted([ua, ub]) and listed["added"] == [], listed
    assert [w["max_running_requests"] for w in listed["workers"]] == [str(SLOTS)] * 2
    assert all(w["healthy"] for w in listed["workers"])  # updated in place, never out of the rotation
    assert settled(log_path, 2 * SLOTS) == (2 * SLOTS, "WorkerReported")
    again = workers(url, remove_by, [ua, ub], "listed", max_running_requests=counts)
    assert not again["changed"] and again["labelled"] == []
    shown = json.load(urllib.request.urlopen(url + "/workers", timeout=5))["workers"]
    assert sorted((w["url"], w["labels"]["max_running_requests"]) for w in shown) == sorted(
        [(ua, str(SLOTS)), (ub, str(SLOTS))])
