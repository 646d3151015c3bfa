"""kimi_serve's replica watchdog (roles/kimi_serve/files/kimi_replica_watchdog.py): its decisions (which signals mean
the group failed, rate limiting, an operator's stop) and the recovery as one, against two in-process watchdogs that
talk over HTTP with fake engine units."""
import importlib.util
import json
import os
import socket
import urllib.error
import urllib.request

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
SPEC = importlib.util.spec_from_file_location(
    "kimi_replica_watchdog", os.path.join(ROOT, "roles", "kimi_serve", "files", "kimi_replica_watchdog.py"))
wd = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(wd)

UP = {"ActiveState": "active", "SubState": "running", "Result": "success", "pid_alive": True}
CRASHED = {"ActiveState": "activating", "SubState": "auto-restart", "Result": "exit-code", "pid_alive": False}
OPERATOR = {"ActiveState": "inactive", "SubState": "dead", "Result": "success", "pid_alive": False}
CONF = {"failure_checks": 2, "max_restarts": 2, "window": 600}


@pytest.mark.parametrize("unit, state", [
    (UP, "up"),
    (dict(UP, pid_alive=False), "dead"),  # active, but its main process is gone
    (CRASHED, "dead"),
    ({"ActiveState": "failed", "SubState": "failed", "Result": "exit-code"}, "dead"),
    ({"ActiveState": "activating", "SubState": "start"}, "starting"),
    ({"ActiveState": "deactivating", "SubState": "stop-sigterm"}, "stopping"),
    (OPERATOR, "stopped_by_operator"),
    (dict(OPERATOR, stopped_by_watchdog=True), "stopped_by_watchdog"),
    (dict(OPERATOR, Result="signal"), "dead"),
])
def test_engine_state(unit, state):
    assert wd.engine_state(unit) == state


def members(**units):
    return {host: ({"reachable": False, "error": "refused", "unit": {}} if unit is None
                   else {"reachable": True, "unit": unit}) for host, unit in units.items()}


ANSWERS = {"health": True, "answered": True}


@pytest.mark.parametrize("group, probe, reason, host", [
    (members(head=UP, worker=None), ANSWERS, "peer_unreachable", "worker"),
    (members(head=UP, worker=CRASHED), ANSWERS, "engine_dead", "worker"),
    # the head fails too when a worker goes (or hangs): the worker is named, the head's own failure comes last
    (members(head=CRASHED, worker=CRASHED), None, "engine_dead", "worker"),
    (members(head=UP, worker=UP), {"health": True, "answered": False, "error": "timed out", "host": "head"},
     "stall", "head"),
])
def test_what_fails_the_group_and_after_how_many_checks(group, probe, reason, host):
    first = wd.decide(group, probe, 0, [], 1000, CONF, "head")
    assert (first["state"], first["reason"], first["host"], first["action"]) == ("suspect", reason, host, None)
    second = wd.decide(group, probe, first["streak"], [], 1001, CONF, "head")
    assert (second["state"], second["reason"], second["action"]) == ("recovering", reason, "recover")


@pytest.mark.parametrize("group, probe, state", [
    (members(head=UP, worker=UP), ANSWERS, "serving"),
    # loading: vLLM does not listen yet, and a health that fails is no stall
    (members(head=UP, worker=UP), {"health": False, "answered": False}, "starting"),
    (members(head={"ActiveState": "activating", "SubState": "start"}, worker=UP), None, "starting"),
])
def test_what_does_not_fail_it(group, probe, state):
    decision = wd.decide(group, probe, 5, [], 1000, CONF, "head")
    assert (decision["state"], decision["action"], decision["streak"]) == (state, None, 0)


def test_an_operators_stop_is_respected_and_reported_even_when_the_head_failed_from_it():
    decision = wd.decide(members(head=CRASHED, worker=OPERATOR), None, 7, [], 1000, CONF, "head")
    assert decision["state"] == "stopped_by_operator" and decision["action"] is None
    assert decision["host"] == "worker" and "systemctl start kimi-k26" in decision["why"]
    # the watchdog's own stop is no operator's: outside a recovery it is one that did not end, a failure
    ours = wd.decide(members(head=UP, worker=dict(OPERATOR, stopped_by_watchdog=True)), ANSWERS, 0, [], 1000, CONF)
    assert (ours["state"], ours["reason"], ours["host"]) == ("suspect", "engine_dead", "worker")


def test_a_peer_watchdog_that_does_not_answer_yet_is_not_counted_while_this_one_starts_up():
    group = members(head=UP, worker=None)
    early = wd.decide(group, ANSWERS, 1, [], 1000, CONF, "head", starting_up=True)
    assert (early["state"], early["action"], early["streak"]) == ("starting", None, 0)
    later = wd.decide(group, ANSWERS, 1, [], 1000, CONF, "head")
    assert (later["state"], later["reason"]) == ("recovering", "peer_unreachable")


def test_nothing_is_decided_while_a_unit_stops_it_may_be_the_operators_stop():
    stopping = {"ActiveState": "deactivating", "SubState": "stop-sigterm", "Result": "success", "pid_alive": True}
    decision = wd.decide(members(head=CRASHED, worker=stopping), None, 1, [], 1000, CONF, "head")
    assert (decision["state"], decision["action"], decision["streak"]) == ("stopping", None, 1)
    then = wd.decide(members(head=CRASHED, worker=OPERATOR), None, decision["streak"], [], 1002, CONF, "head")
    assert then["state"] == "stopped_by_operator" and then["action"] is None


def test_restarts_are_rate_limited_within_the_window():
    group = members(head=UP, worker=CRASHED)
    assert wd.allowed([100], 500, 2, 600) and not wd.allowed([100, 400], 500, 2, 600)
    assert wd.allowed([100, 400], 800, 2, 600)  # the first fell out of the window
    limited = wd.decide(group, None, 1, [100, 400], 500, CONF, "head")
    assert (limited["state"], limited["action"]) == ("down", "keep_drained")
    assert "2 restarts in 600 s" in limited["why"] and limited["host"] == "worker"


def test_the_metrics_name_every_reason_and_state():
    text = wd.metrics_text("recovering", {"stall": 2}, 42.5)
    assert 'kimi_replica_restarts_total{reason="stall"} 2' in text
    assert 'kimi_replica_restarts_total{reason="engine_dead"} 0' in text
    assert 'kimi_replica_state{state="recovering"} 1' in text and 'kimi_replica_state{state="serving"} 0' in text
    assert "kimi_replica_last_recovery_seconds 42.5" in text
    assert "replica=" not in text  # the scrape target's label (kimi_monitoring), not the series'


# ---- the recovery, two watchdogs over HTTP --------------------------------------------------------------------
class FakeUnit:
    """An engine unit: its state, and what was done to it (in the shared `events`, to check the order)."""

    def __init__(self, host, events, cannot_start=None):
        self.host, self.events, self.cannot_start = host, events, cannot_start
        self.unit = dict(UP)

    def read(self):
        return dict(self.unit)

    def why(self):
        return self.cannot_start or ""

    def stop(self, grace, timeout):
        self.events.append(("stop", self.host))
        self.unit = dict(OPERATOR, stopped_by_watchdog=True)
        return True

    def start(self):
        self.events.append(("start", self.host))
        self.unit = dict(CRASHED, Result="exit-code") if self.cannot_start else dict(UP)
        return True


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def replica(tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("s3cret\n")
    os.chmod(str(secret), 0o600)
    (tmp_path / "caddy").mkdir()
    (tmp_path / "textfile").mkdir()
    port = free_port()
    members_ = [{"host": "head", "address": "127.0.0.1", "listen": "127.0.0.1", "rank": 0},
                {"host": "worker", "address": "127.0.0.2", "listen": "127.0.0.2", "rank": 1}]
    events, dogs, servers = [], {}, []

    def make(cannot_start=None):
        for member in members_:
            state = tmp_path / member["host"]
            state.mkdir(exist_ok=True)
            conf = {"me": member["host"], "replica": "r1", "members": members_, "port": port, "unit": "kimi-k26",
                    "container": "kimi-k26", "url": "http://127.0.0.1:1", "model": "kimi-k2.6", "interval": 0,
                    "deadline": 5, "failure_checks": 2, "max_restarts": 2, "window": 600, "stop_grace": 1,
                    "stop_timeout": 5, "serve_timeout": 30, "drain_file": str(tmp_path / "caddy" / "kimi-draining"),
                    "textfile_dir": str(tmp_path / "textfile"), "lock_file": str(tmp_path / "recovery.lock"),
                    "state_dir": str(state), "secret_file": str(secret)}
            unit = FakeUnit(member["host"], events, cannot_start if member["host"] == "worker" else None)
            dogs[member["host"]] = wd.Watchdog(conf, unit=unit, sleep=lambda s: None)
        # the head's probe: answers when every engine is up
        dogs["head"].probe = lambda: {"host": "head", "health": True, "answered": all(
            wd.engine_state(d.unit.read()) == "up" for d in dogs.values())}
        for dog in dogs.values():
            servers.append(dog.serve())
        return dogs, events, tmp_path
    yield make
    for server in servers:
        server.shutdown()
        server.server_close()


def test_a_dead_worker_restarts_the_whole_replica_in_order_drained_meanwhile(replica):
    dogs, events, tmp = replica()
    head, worker = dogs["head"], dogs["worker"]
    assert head.check()["state"] == "serving"
    worker.unit.unit = dict(CRASHED)  # the worker's engine was killed
    drains = []
    head.undrain = lambda orig=head.undrain: (drains.append(os.path.exists(head.conf["drain_file"])), orig())[1]
    assert head.check()["state"] == "suspect" and not events
    assert head.check()["state"] == "recovering"
    # both stopped (the worker first), then started in rank order, the head first
    assert events == [("stop", "worker"), ("stop", "head"), ("start", "head"), ("start", "worker")]
    assert drains == [True] and not os.path.exists(head.conf["drain_file"])  # drained during, undrained after
    assert head.last["state"] == "serving" and "recovered" in head.last["why"]
    assert not os.path.exists(head.conf["lock_file"])
    prom = (tmp / "textfile" / "kimi_replica.prom").read_text()
    assert 'kimi_replica_restarts_total{reason="engine_dead"} 1' in prom
    assert 'kimi_replica_state{state="serving"} 1' in prom
    state = json.loads((tmp / "head" / "state.json").read_text())
    assert state["state"] == "serving"
    # a worker's watchdog sees the group failed but leaves the recovery to the head's
    worker.unit.unit = dict(CRASHED)
    worker.check()
    assert worker.check()["state"] == "failed" and events[-1] == ("start", "worker")


def test_a_member_that_cannot_come_back_keeps_the_head_drained_and_is_named(replica):
    dogs, events, _tmp = replica(cannot_start="kimi-k26-launch: the GPUs are still busy after 300s")
    head = dogs["head"]
    dogs["worker"].unit.unit = dict(CRASHED)
    head.check()
    head.check()
    assert head.last["state"] == "down" and head.last["host"] == "worker"
    assert "the GPUs are still busy" in head.last["why"] and "stays drained" in head.last["why"]
    assert os.path.exists(head.conf["drain_file"])
    # rate limited: after kimi_replica_max_restarts recoveries it stops trying and keeps the head drained
    head.check()
    head.check()
    assert events.count(("start", "head")) == 2
    head.check()
    assert head.check()["state"] == "down" and events.count(("start", "head")) == 2
    assert os.path.exists(head.conf["drain_file"])


def test_an_operator_stop_is_not_recovered(replica):
    dogs, events, _tmp = replica()
    dogs["worker"].unit.unit = dict(OPERATOR)
    dogs["head"].unit.unit = dict(CRASHED)
    for _check in range(3):
        assert dogs["head"].check()["state"] == "stopped_by_operator"
    assert events == [] and not os.path.exists(dogs["head"].conf["drain_file"])
    state = json.loads((_tmp / "head" / "state.json").read_text())  # what site.yml --tags verify reports
    assert (state["state"], state["host"], state["member"]) == ("stopped_by_operator", "worker", "head")


def test_the_watchdogs_answer_only_with_the_replicas_secret(replica):
    dogs, _events, _tmp = replica()
    url = "http://127.0.0.2:%d/state" % dogs["head"].conf["port"]
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(url, timeout=5)
    assert refused.value.code == 401
    req = urllib.request.Request(url, headers={"Authorization": "Bearer s3cret"})
    with urllib.request.urlopen(req, timeout=5) as answer:
        assert json.loads(answer.read().decode())["host"] == "worker"
    unreachable = wd.Peer(dict(dogs["head"].conf, port=free_port()), {"host": "worker", "address": "127.0.0.2"})
    assert unreachable.state()["reachable"] is False


def test_a_lock_left_by_a_dead_watchdog_is_removed_a_live_ones_kept(replica, tmp_path):
    dogs, _events, _tmp = replica()
    head = dogs["head"]
    with open(head.conf["lock_file"], "w") as handle:
        handle.write("%d kimi-k26-watchdog\n" % os.getppid())  # alive
    head.clear_stale_lock()
    assert os.path.exists(head.conf["lock_file"])
    with open(head.conf["lock_file"], "w") as handle:
        handle.write("999999999 kimi-k26-watchdog\n")
    head.drain()  # the recovery it interrupted had drained the head
    head.clear_stale_lock()
    assert not os.path.exists(head.conf["lock_file"]) and os.path.exists(head.conf["drain_file"])
    assert head.check()["state"] == "serving"
    assert not os.path.exists(head.conf["drain_file"])  # back at its proxy once the replica serves


def test_a_drain_that_was_there_before_is_not_the_watchdogs_to_undo(replica):
    dogs, events, _tmp = replica()
    head = dogs["head"]
    with open(head.conf["drain_file"], "w") as handle:
        handle.write("a rolling switch\n")
    dogs["worker"].unit.unit = dict(CRASHED)
    head.check()
    head.check()
    assert head.last["state"] == "serving" and ("start", "worker") in events
    assert os.path.exists(head.conf["drain_file"])


# ---- this host's unit, against a fake systemctl and docker on PATH ----------------------------------------------
FAKE = """#!/bin/sh
echo "$(basename "$0") $*" >> "$LOG"
case "$(basename "$0") $1" in
  "systemctl show") cat "$STATE" ;;
  "systemctl start") printf 'ActiveState=active\\nSubState=running\\nResult=success\\nMainPID=%s\\n' $PPID > "$STATE" ;;
  "docker kill") printf 'ActiveState=failed\\nSubState=failed\\nResult=exit-code\\nMainPID=0\\n' > "$STATE" ;;
esac
"""


def test_the_unit_stops_as_the_watchdogs_kills_a_rank_that_ignores_sigterm_and_starts_clean(tmp_path, monkeypatch):
    for name in ("systemctl", "docker", "journalctl"):
        (tmp_path / name).write_text(FAKE)
        os.chmod(str(tmp_path / name), 0o755)
    state, log = tmp_path / "state", tmp_path / "log"
    # a frozen rank: the unit stays deactivating after its stop (SIGTERM pending)
    state.write_text("ActiveState=deactivating\nSubState=stop-sigterm\nResult=success\nMainPID=1\n")
    monkeypatch.setenv("PATH", "%s:%s" % (tmp_path, os.environ["PATH"]))
    monkeypatch.setenv("STATE", str(state))
    monkeypatch.setenv("LOG", str(log))
    unit = wd.Unit({"unit": "kimi-k26", "container": "kimi-k26", "state_dir": str(tmp_path)})
    assert unit.stop(grace=0, timeout=10)
    calls = log.read_text().splitlines()
    assert "systemctl stop --no-block kimi-k26" in calls and "docker kill --signal KILL kimi-k26" in calls
    stopped = unit.read()
    assert stopped["stopped_by_watchdog"] and wd.engine_state(stopped) == "stopped_by_watchdog"
    assert unit.start()
    assert "systemctl reset-failed kimi-k26" in log.read_text()
    started = unit.read()
    assert not started["stopped_by_watchdog"] and wd.engine_state(started) == "up"
