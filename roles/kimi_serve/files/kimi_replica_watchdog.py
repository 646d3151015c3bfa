# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
# Installed by kimi.deploy.kimi_serve: the watchdog of a replica over several hosts (kimi-k26-watchdog.service).
"""A replica over several hosts is one engine: when one rank dies the others hang in their collectives (or fail), and
systemd restarts each host's unit alone. This watchdog runs on every member. Each few seconds it reads its own
engine unit, asks its peers' watchdogs for theirs (HTTP on the private network, a per-replica secret), and on the head
sends a tiny chat request with a deadline. decide() turns that into the group's state; the head's watchdog recovers
the group as one: drain the head at its proxy, stop every member's engine, start them in rank order (the launcher
waits for free GPUs), wait until the head answers, undrain. An operator's `systemctl stop` is respected. Stdlib only.
"""
import hmac
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# The group's states (one gauge series each) and the failures that restart it (the counter's reason label).
STATES = ("starting", "serving", "suspect", "failed", "recovering", "stopping", "stopped_by_operator", "down")
REASONS = ("engine_dead", "peer_unreachable", "stall")
# Seconds after its start during which a peer's watchdog that does not answer is not counted (they start together).
STARTUP_GRACE = 30


def log(message):
    """One journal line per decision (stdout of a systemd service goes to the journal)."""
    print(message, flush=True)


# ---- decisions: pure functions, unit-tested -------------------------------------------------------------------
def engine_state(unit):
    """What one member's engine unit says: up, starting, stopping, dead, stopped_by_operator or stopped_by_watchdog.
    `unit`: ActiveState, SubState, Result (systemctl show), pid_alive (MainPID is a live process), and
    stopped_by_watchdog (this watchdog stopped it for a recovery). A stop that ended cleanly and was not ours is the
    operator's (`systemctl stop`, or a converge's restart in progress)."""
    active, sub, result = unit.get("ActiveState"), unit.get("SubState"), unit.get("Result", "success")
    if active == "active":
        return "up" if unit.get("pid_alive") else "dead"
    if active in ("activating", "reloading"):
        return "dead" if sub == "auto-restart" else "starting"
    if active == "deactivating":
        return "stopping"
    if unit.get("stopped_by_watchdog"):
        return "stopped_by_watchdog"
    if active == "inactive" and result == "success":
        return "stopped_by_operator"
    return "dead"  # failed, or inactive after a failure


def failures(members, head_probe, head=None, starting_up=False):
    """[(reason, host, why)] of this check, the head's own last (it fails when a worker goes). members: {host:
    {"reachable": bool, "unit": {...}, "error": str}}; head_probe: None (not the head, or its engine is not up) or
    {"health": bool, "answered": bool, "error": str}. starting_up: this watchdog just started, and its peers'
    watchdogs may not listen yet (they start together): one that does not answer is not counted."""
    found = []
    for host in sorted(members, key=lambda h: (h == head, h)):
        member = members[host]
        if not member.get("reachable", True):
            if starting_up:
                continue
            found.append(("peer_unreachable", host, member.get("error") or "its watchdog does not answer"))
        elif engine_state(member["unit"]) == "dead":
            found.append(("engine_dead", host, "%s (%s/%s, result %s)" % (
                member.get("why") or "its engine is not running", member["unit"].get("ActiveState"),
                member["unit"].get("SubState"), member["unit"].get("Result"))))
        elif engine_state(member["unit"]) == "stopped_by_watchdog":  # outside a recovery: one that did not end
            found.append(("engine_dead", host, "left stopped by an interrupted recovery"))
    if head_probe and head_probe.get("health") and not head_probe.get("answered"):
        found.append(("stall", head_probe.get("host", "head"), "/health answers but a request did not complete: %s"
                      % head_probe.get("error", "deadline passed")))
    return found


def allowed(restarts, now, max_restarts, window):
    """Whether another recovery fits the rate limit: fewer than max_restarts started in the last window seconds."""
    return len([t for t in restarts if now - t < window]) < max_restarts


def decide(members, head_probe, streak, restarts, now, conf, head=None, starting_up=False):
    """The group's state from one check: {"state", "reason", "host", "why", "streak", "action"}; action is "recover"
    (the head's watchdog restarts the group), "keep_drained" (down: rate limited) or None. A failure must be seen
    conf["failure_checks"] checks in a row (a converge's restart or a unit's own restart is brief); a member
    stopped by its operator means no recovery at all."""
    by_operator = sorted(h for h, m in members.items()
                         if m.get("reachable", True) and engine_state(m["unit"]) == "stopped_by_operator")
    if by_operator:
        return {"state": "stopped_by_operator", "reason": None, "host": ", ".join(by_operator), "streak": 0,
                "why": "kimi-k26 was stopped on %s (not by the watchdog): respected, no recovery; "
                       "`systemctl start kimi-k26` there brings the replica back" % ", ".join(by_operator),
                "action": None}
    # A unit being stopped may be an operator's stop that has not ended yet (an engine takes 30-60 s to drain):
    # nothing is decided until it ended, and what failed meanwhile is counted neither way.
    stopping = sorted(h for h, m in members.items()
                      if m.get("reachable", True) and engine_state(m["unit"]) == "stopping")
    if stopping:
        return {"state": "stopping", "reason": None, "host": ", ".join(stopping), "streak": streak, "action": None,
                "why": "kimi-k26 is stopping on %s" % ", ".join(stopping)}
    found = failures(members, head_probe, head, starting_up)
    if not found:
        starting = sorted(h for h, m in members.items()
                          if not m.get("reachable", True) or engine_state(m["unit"]) != "up")
        serving = not starting and (head_probe is None or head_probe.get("answered"))
        return {"state": "serving" if serving else "starting", "reason": None, "streak": 0, "action": None,
                "host": ", ".join(starting), "why": "" if serving else "not all ranks are up and answering yet"}
    reason, host, why = found[0]
    streak += 1
    if streak < conf["failure_checks"]:
        return {"state": "suspect", "reason": reason, "host": host, "why": why, "streak": streak, "action": None}
    if not allowed(restarts, now, conf["max_restarts"], conf["window"]):
        return {"state": "down", "reason": reason, "host": host, "streak": streak, "action": "keep_drained",
                "why": "%s; not restarted: %d restarts in %d s already (kimi_serve_replica_max_restarts)" % (
                    why, conf["max_restarts"], conf["window"])}
    return {"state": "recovering", "reason": reason, "host": host, "why": why, "streak": streak, "action": "recover"}


def metrics_text(state, counters, last_recovery):
    """The node exporter textfile series: the restart counter by reason, the state gauge, the last recovery's time.
    No replica label: Prometheus's target for this host carries it (kimi_monitoring)."""
    lines = ["# HELP kimi_replica_restarts_total Restarts of the whole replica by its watchdog, by the failure seen.",
             "# TYPE kimi_replica_restarts_total counter"]
    lines += ['kimi_replica_restarts_total{reason="%s"} %d' % (r, counters.get(r, 0)) for r in REASONS]
    lines += ["# HELP kimi_replica_state The replica's state as this member's watchdog sees it (1: the current one).",
              "# TYPE kimi_replica_state gauge"]
    lines += ['kimi_replica_state{state="%s"} %d' % (s, s == state) for s in STATES]
    lines += ["# HELP kimi_replica_last_recovery_seconds Seconds from the failure seen to serving, last recovery.",
              "# TYPE kimi_replica_last_recovery_seconds gauge",
              "kimi_replica_last_recovery_seconds %.1f" % last_recovery]
    return "\n".join(lines) + "\n"


# ---- this host's engine unit ----------------------------------------------------------------------------------
class Unit:
    """The engine's systemd unit on this host (and its container, for a rank that does not stop on SIGTERM)."""

    def __init__(self, conf):
        self.name, self.container, self.marker = conf["unit"], conf["container"], conf["state_dir"] + "/stopped"

    def read(self):
        out = subprocess.run(["systemctl", "show", "-p", "ActiveState,SubState,Result,MainPID", self.name],
                             capture_output=True, text=True, check=False).stdout
        unit = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
        pid = int(unit.get("MainPID") or 0)
        unit["pid_alive"] = pid > 0 and os.path.exists("/proc/%d" % pid)
        unit["stopped_by_watchdog"] = os.path.exists(self.marker)
        return unit

    def why(self):
        """The unit's last log lines, for a member that does not come back (what the launcher or engine said)."""
        out = subprocess.run(["journalctl", "-u", self.name, "-o", "cat", "--no-pager", "-n", "3"],
                             capture_output=True, text=True, check=False).stdout
        return " | ".join(line.strip()[:200] for line in out.splitlines() if line.strip())

    def stop(self, grace, timeout):
        """Stop the engine for a recovery (marked as ours, so it is not taken for the operator's): SIGTERM through the
        unit, then SIGKILL to its container after `grace` seconds (a hung or frozen rank does not exit on SIGTERM)."""
        with open(self.marker, "w") as handle:
            handle.write("%d\n" % time.time())
        subprocess.run(["systemctl", "stop", "--no-block", self.name], check=False)
        deadline, killed = time.time() + timeout, False
        started = time.time()
        while time.time() < deadline:
            if self.read().get("ActiveState") in ("inactive", "failed"):
                return True
            if not killed and time.time() - started >= grace:
                subprocess.run(["docker", "kill", "--signal", "KILL", self.container], capture_output=True, check=False)
                killed = True
            time.sleep(1)
        return False

    def start(self):
        # reset-failed: the restarts of a failure count against StartLimitBurst; this start is a decision.
        subprocess.run(["systemctl", "reset-failed", self.name], capture_output=True, check=False)
        started = subprocess.run(["systemctl", "start", self.name], capture_output=True, check=False,
                                 timeout=120).returncode == 0
        if os.path.exists(self.marker):  # after the start: never seen inactive without it (the operator's stop)
            os.unlink(self.marker)
        return started


# ---- the watchdogs' HTTP: peers' state, and stop/start for the head's recovery -----------------------------------
def secret(conf):
    with open(conf["secret_file"]) as handle:
        return handle.read().strip()


class Peer:
    """Another member's watchdog."""

    def __init__(self, conf, member):
        self.host, self.conf = member["host"], conf
        self.url = "http://%s:%d" % (("[%s]" % member["address"]) if ":" in member["address"] else member["address"],
                                     conf["port"])

    def call(self, method, path, timeout):
        req = urllib.request.Request(self.url + path, method=method, data=b"" if method == "POST" else None,
                                     headers={"Authorization": "Bearer " + secret(self.conf)})
        with urllib.request.urlopen(req, timeout=timeout) as answer:
            return json.loads(answer.read().decode() or "{}")

    def state(self):
        try:
            return dict(self.call("GET", "/state", self.conf["deadline"]), reachable=True)
        except (OSError, ValueError) as exc:
            return {"reachable": False, "error": "%s:%d: %s" % (self.host, self.conf["port"], exc), "unit": {}}

    def stop(self):
        return self.call("POST", "/stop", self.conf["stop_timeout"] + 10).get("stopped", False)

    def start(self):
        return self.call("POST", "/start", self.conf["deadline"] + 5).get("started", False)


def handler_for(watchdog):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):  # the journal gets decisions, not access lines
            pass

        def _answer(self, code, body):
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _authorized(self):
            given = self.headers.get("Authorization", "")
            return hmac.compare_digest(given.encode(), ("Bearer " + secret(watchdog.conf)).encode())

        def do_GET(self):
            if not self._authorized():
                return self._answer(401, {"error": "unauthorized"})
            if self.path == "/state":
                unit = watchdog.unit.read()
                return self._answer(200, {"host": watchdog.conf["me"], "unit": unit, "group": watchdog.last,
                                          "why": watchdog.unit.why() if engine_state(unit) == "dead" else ""})
            return self._answer(404, {"error": "not found"})

        def do_POST(self):
            if not self._authorized():
                return self._answer(401, {"error": "unauthorized"})
            if self.path == "/stop":
                log("recovery: the head's watchdog stops %s here" % watchdog.conf["unit"])
                return self._answer(200, {"stopped": watchdog.unit.stop(watchdog.conf["stop_grace"],
                                                                        watchdog.conf["stop_timeout"])})
            if self.path == "/start":
                log("recovery: the head's watchdog starts %s here" % watchdog.conf["unit"])
                return self._answer(200, {"started": watchdog.unit.start()})
            return self._answer(404, {"error": "not found"})
    return Handler


# ---- the watchdog ---------------------------------------------------------------------------------------------
class Watchdog:
    def __init__(self, conf, unit=None, peers=None, probe=None, clock=time.time, sleep=time.sleep):
        self.conf, self.clock, self.sleep = conf, clock, sleep
        self.unit = unit or Unit(conf)
        self.head = conf["members"][0]["host"]
        self.is_head = conf["me"] == self.head
        self.peers = peers if peers is not None else {
            m["host"]: Peer(conf, m) for m in conf["members"] if m["host"] != conf["me"]}
        self.probe = probe or self.probe_head
        self.streak, self.last, self.started = 0, {"state": "starting"}, clock()
        saved = self._load()
        # The counters outlive a restart of the watchdog; the rate limit's history does not (a restart of the
        # watchdog is the operator's "try again").
        self.restarts, self.counters = [], saved.get("counters", {})
        self.last_recovery = saved.get("last_recovery", 0.0)

    # state kept across the watchdog's own restarts
    def _path(self, name):
        return os.path.join(self.conf["state_dir"], name)

    def _load(self):
        try:
            with open(self._path("counters.json")) as handle:
                return json.load(handle)
        except (OSError, ValueError):
            return {}

    def _write(self, path, text):
        if not os.path.isdir(os.path.dirname(path)):
            return
        tmp = path + ".tmp"
        with open(tmp, "w") as handle:
            handle.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)

    def publish(self, decision):
        self.last = decision
        self._write(self._path("counters.json"), json.dumps(
            {"counters": self.counters, "last_recovery": self.last_recovery}))
        self._write(self._path("state.json"), json.dumps(dict(decision, member=self.conf["me"], at=self.clock())))
        self._write(os.path.join(self.conf["textfile_dir"], "kimi_replica.prom"),
                    metrics_text(decision["state"], self.counters, self.last_recovery))

    def probe_head(self):
        """/health, then a tiny chat request that must complete within the deadline (a hung collective stalls it)."""
        url, deadline = self.conf["url"], self.conf["deadline"]
        result = {"host": self.head, "health": False, "answered": False}
        try:
            with urllib.request.urlopen(url + "/health", timeout=deadline) as answer:
                result["health"] = answer.status == 200
        except (OSError, ValueError) as exc:
            result["error"] = str(exc)
            return result
        body = json.dumps({"model": self.conf["model"], "max_tokens": 1,
                           "messages": [{"role": "user", "content": "ping"}]}).encode()
        req = urllib.request.Request(url + "/v1/chat/completions", data=body,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=deadline) as answer:
                result["answered"] = answer.status == 200
        except urllib.error.HTTPError as exc:  # an answer: a 4xx (another model name) is no stall, a 5xx a failure
            result["answered"], result["error"] = exc.code < 500, "HTTP %d" % exc.code
        except (OSError, ValueError) as exc:
            result["error"] = "%s (deadline %s s)" % (exc, deadline)
        return result

    def members(self):
        unit = self.unit.read()
        found = {self.conf["me"]: {"reachable": True, "unit": unit,
                                   "why": self.unit.why() if engine_state(unit) == "dead" else ""}}
        for host, peer in self.peers.items():
            found[host] = peer.state()
        return found

    def check(self):
        """One check: decide, log a change, publish; the head recovers when the decision says so."""
        members = self.members()
        probe = None
        if self.is_head and engine_state(members[self.conf["me"]]["unit"]) == "up":
            probe = self.probe()
        decision = decide(members, probe, self.streak, self.restarts, self.clock(), self.conf, self.head,
                          starting_up=self.clock() - self.started < STARTUP_GRACE)
        self.streak = decision["streak"]
        if self.is_head and decision["state"] == "serving":
            self.undrain()  # a head this watchdog took out (and only that) goes back once the replica serves
        if not self.is_head and decision["state"] == "recovering":  # the head's watchdog recovers the group
            decision = dict(decision, state="failed", action=None)
        self._publish_logged(decision)
        if self.is_head and decision["action"] == "recover":
            self.recover(decision)
        elif self.is_head and decision["action"] == "keep_drained":
            self.drain()
        return decision

    def _publish_logged(self, decision):
        if (decision["state"], decision.get("reason"), decision.get("host")) != (
                self.last.get("state"), self.last.get("reason"), self.last.get("host")):
            where = " (%s on %s)" % (decision["reason"], decision["host"]) if decision.get("reason") else ""
            why = (": " + decision["why"]) if decision.get("why") else ""
            log("replica %s: %s%s%s" % (self.conf["replica"], decision["state"], where, why))
        self.publish(decision)
        return decision

    # ---- recovery (the head's watchdog) ----
    def drain(self):
        """Take the head out at its proxy (the caddy_proxy drain flag; only where the proxy is configured), noting
        that this watchdog did: a drain that was there before (a rolling switch, an operator) is not its to undo."""
        path = self.conf["drain_file"]
        if os.path.isdir(os.path.dirname(path)) and not os.path.exists(path):
            with open(self._path("drained"), "w") as handle:
                handle.write("%s\n" % path)
            with open(path, "w") as handle:
                handle.write("Draining: kimi-k26-watchdog is recovering the replica. Removed when it serves again.\n")
            return True
        return False

    def undrain(self):
        """Put the head back at its proxy, if this watchdog took it out."""
        if not os.path.exists(self._path("drained")):
            return False
        if os.path.exists(self.conf["drain_file"]):
            os.unlink(self.conf["drain_file"])
        os.unlink(self._path("drained"))
        log("replica %s: the head is back at its proxy" % self.conf["replica"])
        return True

    def recover(self, decision):
        """Stop every member, start them in rank order, wait until the head answers; undrain only then. A member that
        does not come back keeps the head drained and is named (journal and the state series)."""
        began = self.clock()
        try:
            fd = os.open(self.conf["lock_file"], os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            log("replica %s: not recovering: %s exists (another recovery)" % (
                self.conf["replica"], self.conf["lock_file"]))
            return False
        self.restarts = [t for t in self.restarts if began - t < self.conf["window"]] + [began]
        self.counters[decision["reason"]] = self.counters.get(decision["reason"], 0) + 1
        with os.fdopen(fd, "w") as handle:
            handle.write("%d kimi-k26-watchdog recovering replica %s since %d\n" % (
                os.getpid(), self.conf["replica"], began))
        try:
            return self._recover(decision, began)
        finally:
            os.unlink(self.conf["lock_file"])

    def _recover(self, decision, began):
        replica, members = self.conf["replica"], self.conf["members"]
        drained = self.drain()
        log("replica %s: recovering as one (%s on %s): head drained at its proxy: %s" % (
            replica, decision["reason"], decision["host"], "yes" if drained else "it was already, or has no proxy"))
        for member in reversed(members):  # the workers first: no rank is left waiting for a stopped head
            host = member["host"]
            try:
                stopped = self.unit.stop(self.conf["stop_grace"], self.conf["stop_timeout"]) \
                    if host == self.conf["me"] else self.peers[host].stop()
            except (OSError, ValueError) as exc:
                stopped, exc_text = False, str(exc)
            else:
                exc_text = "it did not stop within %d s" % self.conf["stop_timeout"]
            log("replica %s: stopped %s on %s: %s" % (replica, self.conf["unit"], host, "ok" if stopped else exc_text))
            if not stopped:
                return self._down(host, "cannot stop its engine: " + exc_text, drained)
        for member in members:  # rank order: the head first (its rendezvous listens for the others)
            host = member["host"]
            problem = "systemctl start failed"
            try:
                started = self.unit.start() if host == self.conf["me"] else self.peers[host].start()
            except (OSError, ValueError, subprocess.SubprocessError) as exc:
                started, problem = False, str(exc)
            if not started:
                return self._down(host, "cannot start its engine: " + problem, drained)
            log("replica %s: started %s on %s (rank %d)" % (replica, self.conf["unit"], host, member["rank"]))
        deadline = self.clock() + self.conf["serve_timeout"]
        while self.clock() < deadline:
            self.sleep(self.conf["interval"])
            members_now = self.members()
            for host in [m["host"] for m in members]:
                member = members_now[host]
                if member.get("reachable", True) and engine_state(member["unit"]) in ("dead", "stopped_by_operator"):
                    why = self.unit.why() if host == self.conf["me"] else member.get("why")
                    return self._down(host, "its engine did not come back: %s" % (
                        why or member["unit"].get("Result")), drained)
            if engine_state(members_now[self.conf["me"]]["unit"]) == "up" and self.probe().get("answered"):
                self.last_recovery = self.clock() - began
                self.undrain()
                self.streak = 0
                self._publish_logged({"state": "serving", "reason": None, "host": "", "action": None, "streak": 0,
                                      "why": "recovered in %.0f s (%s), back at its proxy" % (
                                          self.last_recovery, decision["reason"])})
                return True
        return self._down(self.head, "the head did not answer within %d s (kimi_serve_wait_gpu_free + "
                          "kimi_serve_ready_timeout)" % self.conf["serve_timeout"], drained)

    def _down(self, host, why, drained):
        self._publish_logged({"state": "down", "reason": self.last.get("reason"), "host": host, "action": None,
                              "streak": 0, "why": "%s: %s; the head stays drained (out of the gateway)" % (host, why)})
        return False

    def serve(self):
        me = [m for m in self.conf["members"] if m["host"] == self.conf["me"]][0]
        server_class = type("Server", (ThreadingHTTPServer,), {
            "address_family": socket.AF_INET6 if ":" in me["listen"] else socket.AF_INET})
        server = server_class((me["listen"], self.conf["port"]), handler_for(self))
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return server

    def clear_stale_lock(self):
        """A lock left by a watchdog that died mid-recovery (its pid is gone) would block converges for ever."""
        try:
            with open(self.conf["lock_file"]) as handle:
                pid = int(handle.read().split()[0])
        except (OSError, ValueError, IndexError):
            return
        if pid == os.getpid() or not os.path.exists("/proc/%d" % pid):
            # a head it drained stays out until the replica serves again (check() puts it back then)
            log("replica %s: removing %s left by a watchdog that is gone (pid %d)" % (
                self.conf["replica"], self.conf["lock_file"], pid))
            os.unlink(self.conf["lock_file"])

    def run(self):
        self.clear_stale_lock()
        self.serve()
        rank = [m["rank"] for m in self.conf["members"] if m["host"] == self.conf["me"]][0]
        log("replica %s: watching %s as rank %d of %s (every %s s, deadline %s s, %d restarts in %d s at most)" % (
            self.conf["replica"], self.conf["unit"], rank,
            ", ".join(m["host"] for m in self.conf["members"]), self.conf["interval"], self.conf["deadline"],
            self.conf["max_restarts"], self.conf["window"]))
        while True:
            try:
                self.check()
            except Exception as exc:  # pylint: disable=broad-except  # a check that broke must not end the watchdog
                log("replica %s: check failed: %r" % (self.conf["replica"], exc))
            self.sleep(self.conf["interval"])


def main(argv):
    with open(argv[1] if len(argv) > 1 else "/etc/kimi-k26/watchdog.json") as handle:
        conf = json.load(handle)
    os.makedirs(conf["state_dir"], exist_ok=True)
    Watchdog(conf).run()


if __name__ == "__main__":
    main(sys.argv)
