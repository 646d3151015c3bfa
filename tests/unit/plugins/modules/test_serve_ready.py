"""kimi.deploy.serve_ready as Ansible runs it, against the engine double (a real process on loopback) whose log file
a fake journalctl serves, and a fake systemctl whose unit state the test scripts."""
import json
import os
import subprocess
import sys
import time

import pytest

from ansible_collections.kimi.deploy.plugins.action.job_progress import progress_line
from ansible_collections.kimi.deploy.plugins.modules import serve_ready

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
MODULE = os.path.join(ROOT, "plugins", "modules", "serve_ready.py")
COLLECTIONS = os.path.join(ROOT, ".collections")
sys.path.insert(0, os.path.join(ROOT, "tests", "doubles", "engine"))

from kimi_engine_double.process import DoubleProcess, free_port  # noqa: E402

NAME = "kimi-k2.6"

# journalctl -u UNIT -o cat --no-pager -q --show-cursor (--since @N | --after-cursor C): the complete lines of the
# log file, the cursor being the number of lines already shown. Every call is recorded.
FAKE_JOURNALCTL = r'''#!%(python)s
import json, sys
argv = sys.argv[1:]
with open(%(calls)r, "a") as f:
    f.write(json.dumps(argv) + "\n")
start = int(argv[argv.index("--after-cursor") + 1].split("=")[1]) if "--after-cursor" in argv else 0
try:
    text = open(%(log)r, encoding="utf-8", errors="replace").read()
except IOError:
    text = ""
lines = text.split("\n")[:-1]  # complete lines only
new = lines[start:]
for line in new:
    print(line)
if new and "--show-cursor" in argv:
    print("-- cursor: n=%%d" %% len(lines))
'''

# systemctl show UNIT --property=...: the next state of a scripted list (the last one repeats).
FAKE_SYSTEMCTL = r'''#!%(python)s
import json, os, sys
states = json.load(open(%(states)r))
count_file = %(states)r + ".count"
n = int(open(count_file).read()) if os.path.exists(count_file) else 0
open(count_file, "w").write(str(n + 1))
state = states[min(n, len(states) - 1)]
assert sys.argv[1] == "show", sys.argv
for key in sys.argv[3].split("=", 1)[1].split(","):
    print("%%s=%%s" %% (key, state.get(key, "")))
'''

RUNNING = {"LoadState": "loaded", "ActiveState": "active", "SubState": "running", "NRestarts": 0, "Result": "success"}


class Host:
    """A fake host: the double's log as the unit's journal, a scripted unit state, and the module run against them."""

    def __init__(self, tmp_path, states=None):
        self.tmp = tmp_path
        self.log = tmp_path / "engine.log"
        self.log.write_text("")
        self.calls = tmp_path / "journalctl.calls"
        self.states = tmp_path / "states.json"
        self.set_states(states or [RUNNING])
        self.journalctl = self.script("journalctl", FAKE_JOURNALCTL % {"python": sys.executable, "calls": str(self.calls),
                                                                       "log": str(self.log)})
        self.systemctl = self.script("systemctl", FAKE_SYSTEMCTL % {"python": sys.executable, "states": str(self.states)})
        self.progress = tmp_path / "progress.json"
        self.model = tmp_path / "model"
        self.model.mkdir()
        self.double = None

    def script(self, name, text):
        path = self.tmp / name
        path.write_text(text)
        path.chmod(0o755)
        return str(path)

    def set_states(self, states):
        self.states.write_text(json.dumps(states))

    def start(self, engine, extra=(), env=None, quant="compressed-tensors", wait_ready=False):
        (self.model / "config.json").write_text(json.dumps({"model_type": "kimi_k25",
                                                            "quantization_config": {"quant_method": quant}}))
        (self.model / "model-00001-of-00001.safetensors").write_bytes(b"\0" * 4096)
        model = str(self.model)
        argv = (["--model-path", model] if engine == "sglang" else [model]) + [
            "--served-model-name", NAME, "--tool-call-parser", "kimi_k2", "--reasoning-parser", "kimi_k2"] + list(extra)
        self.double = DoubleProcess(engine, argv, self.log, env).start(wait_ready=wait_ready)
        return self.double

    def params(self, engine, **kw):
        p = {"engine": engine, "unit": "kimi-k26", "since": time.time() - 1,
             "url": self.double.url if self.double else "http://127.0.0.1:%d" % free_port(),
             "served_model_name": NAME, "timeout": 30, "interval": 0.2, "progress_file": str(self.progress),
             "journalctl": self.journalctl, "systemctl": self.systemctl}
        p.update(kw)
        return p

    def command(self, engine, check_mode=False, **kw):
        params = self.params(engine, **kw)
        if check_mode:
            params["_ansible_check_mode"] = True
        return [sys.executable, MODULE, json.dumps({"ANSIBLE_MODULE_ARGS": params})]

    def env(self):
        return dict(os.environ, PYTHONPATH=os.pathsep.join([COLLECTIONS] + [p for p in sys.path if p]))

    def run(self, engine, check_mode=False, **kw):
        started = time.time()
        result = subprocess.run(self.command(engine, check_mode, **kw), env=self.env(), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, universal_newlines=True, timeout=120, check=False)
        try:
            out = json.loads(result.stdout)
        except ValueError:
            raise AssertionError("no JSON (rc %d): %s %s" % (result.returncode, result.stdout, result.stderr))
        assert ("failed" in out) == (result.returncode != 0), out
        out["_took"] = time.time() - started
        return out

    def journal_calls(self):
        return [json.loads(line) for line in self.calls.read_text().splitlines()]

    def stop(self):
        if self.double:
            self.double.stop()


@pytest.fixture
def host(tmp_path):
    h = Host(tmp_path)
    yield h
    h.stop()


def read_progress(host):
    return json.loads(host.progress.read_text())


# ---- ready ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_ready_after_a_slow_start(host, engine):
    host.start(engine, env={"KIMI_DOUBLE_START_DELAY": "1.5"})
    out = host.run(engine)
    assert out["changed"] is False and out["state"] == "ready"
    assert out["ready_line"].endswith("The server is fired up and ready to roll!" if engine == "sglang"
                                      else "Application startup complete.")
    assert 1.0 <= out["elapsed_s"] < 20 and out["diagnosis"] == [] and out["moe_dispatch"] is None
    assert any("Loading weights took" in line for line in out["log_tail"]) and len(out["log_tail"]) <= 30
    assert out["unit_state"] == {"ActiveState": "active", "SubState": "running", "NRestarts": 0}
    progress = read_progress(host)
    assert progress["kind"] == "serve" and progress["state"] == "ready" and progress["unit"] == "kimi-k26"
    calls = host.journal_calls()
    assert calls[0][:5] == ["-u", "kimi-k26", "-o", "cat", "--no-pager"] and "--since" in calls[0]
    assert calls[0][calls[0].index("--since") + 1].startswith("@")
    assert any("--after-cursor" in call and "--since" not in call for call in calls[1:])  # only new lines after that


def test_progress_file_while_loading_prints_as_one_line(host):
    host.start("sglang", env={"KIMI_DOUBLE_START_DELAY": "3"})
    proc = subprocess.Popen(host.command("sglang"), env=host.env(), stdout=subprocess.PIPE, universal_newlines=True)
    try:
        seen = None
        deadline = time.time() + 20
        while time.time() < deadline and proc.poll() is None:
            if host.progress.exists():
                doc = read_progress(host)
                if doc["state"] == "loading" and doc["line"]:
                    seen = doc
                    break
            time.sleep(0.1)
        assert seen, "no loading progress written"
        assert set(seen) == {"kind", "state", "elapsed_s", "line", "unit", "engine", "updated"}
        line = progress_line(seen)
        assert line.startswith("loading %ds, " % int(seen["elapsed_s"]))
        assert "Loading weights took" in line or "Uvicorn running on" in line
        assert json.loads(proc.communicate(timeout=30)[0])["state"] == "ready"
    finally:
        if proc.poll() is None:
            proc.kill()


def test_progress_line_generic_form():
    assert progress_line({"kind": "serve", "state": "loading", "elapsed_s": 250,
                          "line": "Loading safetensors checkpoint shards:  45% Completed | 29/64"}) == \
        "loading 4m10s, Loading safetensors checkpoint shards: 45% Completed | 29/64"
    assert progress_line({"kind": "serve", "state": "starting", "elapsed_s": 0, "line": ""}) == "starting 0s"
    assert progress_line({"state": "pulling", "line": "layer 3/9"}) == "pulling, layer 3/9"


@pytest.mark.parametrize("backend,path", [("marlin", "marlin"), ("flashinfer_b12x", "native_fp4")])
def test_vllm_nvfp4_reports_the_moe_dispatch(host, backend, path):
    host.start("vllm", extra=["--quantization", "modelopt_fp4", "--moe-backend", backend, "--tensor-parallel-size", "8"],
               quant="modelopt")
    out = host.run("vllm")
    assert out["state"] == "ready"
    assert out["moe_dispatch"]["path"] == path and out["moe_dispatch"]["moe_backend"] == backend
    assert out["moe_dispatch"]["native_fp4"] is (path == "native_fp4")


def test_the_compile_phase_is_read_from_the_engines_log(host, tmp_path):
    """Kernel caches (issue 39): an empty cache compiles, the next start finds it."""
    env = {"KIMI_DOUBLE_COMPILE_SECONDS": "0.5", "VLLM_CACHE_ROOT": str(tmp_path / "kernels")}
    host.start("vllm", env=env)
    out = host.run("vllm")
    assert out["state"] == "ready" and out["compile"]["phase"] == "compiled", out
    assert out["compile"]["line"].startswith("torch.compile takes")
    host.stop()
    host.log.write_text("")
    host.start("vllm", env=env)
    out = host.run("vllm", since=time.time() - 0.5)
    assert out["state"] == "ready" and out["compile"]["phase"] == "cached", out


# ---- known failures: fast, with the fix ------------------------------------------------------------------------
def test_engine_core_failure_fails_fast_with_the_fix(host):
    host.start("vllm", env={"KIMI_DOUBLE_CRASH": "startup"})
    out = host.run("vllm", timeout=120)
    assert out["failed"] and out["state"] == "failed" and out["_took"] < 20
    assert [d["name"] for d in out["diagnosis"]] == ["engine_core_init"]
    assert out["msg"].startswith("kimi-k26 (vllm) failed to start: the engine's workers failed at initialization")
    assert "\nCause: " not in out["msg"]  # said once
    assert "Fix: wait for the GPUs to be free" in out["msg"] and "WAIT_GPU_FREE" in out["msg"]
    assert "RuntimeError: Engine core initialization failed." in out["msg"].split("Log line: ")[1].splitlines()[0]
    assert "Last %d log lines of kimi-k26 since the start:" % len(out["log_tail"]) in out["msg"]
    assert out["log_tail"][-1] in out["msg"]
    assert read_progress(host)["state"] == "failed"


def test_missing_weights_fail_fast_naming_kimi_weights(host, tmp_path):
    (tmp_path / "hub").mkdir()
    host.double = DoubleProcess("sglang", ["--model-path", "moonshotai/Kimi-K2.6"], host.log,
                                {"HF_HUB_CACHE": str(tmp_path / "hub"), "HF_HUB_OFFLINE": "1"}).start(wait_ready=False)
    out = host.run("sglang", timeout=120)
    assert out["failed"] and out["_took"] < 20
    assert out["diagnosis"][0]["name"] == "weights_missing" and "kimi_weights" in out["diagnosis"][0]["fix"]
    assert "LocalEntryNotFoundError" in out["msg"]


# ---- the unit restarted, failed or stopped ---------------------------------------------------------------------
def test_restart_counter_detected(host):
    host.set_states([RUNNING, RUNNING, dict(RUNNING, ActiveState="activating", SubState="auto-restart", NRestarts=1)])
    host.start("sglang", env={"KIMI_DOUBLE_START_DELAY": "30"})
    out = host.run("sglang", timeout=120)
    assert out["failed"] and out["state"] == "failed" and out["_took"] < 20
    assert "crashed and was restarted by systemd while starting" in out["msg"]
    assert "NRestarts=1 (was 0)" in out["msg"] and out["unit_state"]["NRestarts"] == 1
    assert out["log_tail"] and "Last" in out["msg"]


def test_restart_seen_in_the_journal(host):
    host.start("sglang", env={"KIMI_DOUBLE_START_DELAY": "30"})
    time.sleep(0.5)
    with open(str(host.log), "a") as log:
        log.write("kimi-k26.service: Main process exited, code=exited, status=1/FAILURE\n"
                  "kimi-k26.service: Scheduled restart job, restart counter is at 1.\n")
    out = host.run("sglang", timeout=120)
    assert out["failed"] and "Main process exited, code=exited, status=1/FAILURE" in out["msg"]


def test_the_previous_engine_stop_does_not_count(host):
    """A deliberate restart: the old engine's stop (non-zero exit, an error on the way out) comes before systemd's
    start line of the new one, and only what follows that line counts."""
    host.log.write_text(
        "Stopping kimi-k26.service - Kimi-K2.6 engine...\n"
        "torch.distributed.DistBackendError: NCCL error: unhandled system error (teardown)\n"
        "kimi-k26.service: Main process exited, code=exited, status=143/n/a\n"
        "kimi-k26.service: Failed with result 'exit-code'.\n"
        "Stopped kimi-k26.service - Kimi-K2.6 engine.\n"
        "Started kimi-k26.service - Kimi-K2.6 engine.\n")
    host.start("sglang")
    out = host.run("sglang")
    assert out["state"] == "ready" and out["diagnosis"] == []


def test_restart_before_the_module_started_counts_since_since(host):
    """NRestarts already grew before the first poll: the journal since `since` still shows it."""
    host.set_states([dict(RUNNING, NRestarts=3)])
    host.log.write_text("kimi-k26.service: Scheduled restart job, restart counter is at 3.\n")
    out = host.run("vllm", timeout=120)
    assert out["failed"] and "restart counter is at 3" in out["msg"]


@pytest.mark.parametrize("state,words", [
    (dict(RUNNING, ActiveState="failed", SubState="failed", Result="exit-code"), "failed (ActiveState=failed, Result=exit-code)"),
    (dict(RUNNING, ActiveState="inactive", SubState="dead"), "is not running (ActiveState=inactive)"),
    (dict(RUNNING, LoadState="not-found", ActiveState="inactive", SubState="dead"), "is not a loaded unit"),
])
def test_failed_stopped_or_missing_unit(host, state, words):
    host.set_states([state])
    out = host.run("sglang", timeout=120)
    assert out["failed"] and words in out["msg"] and out["_took"] < 20
    assert "No log lines from kimi-k26 since the start." in out["msg"]


# ---- timeout ----------------------------------------------------------------------------------------------------
def test_timeout_carries_the_log_tail(host):
    host.start("sglang", env={"KIMI_DOUBLE_START_DELAY": "60"})
    out = host.run("sglang", timeout=2, log_lines=3)
    assert out["failed"] and out["state"] == "timeout" and 2 <= out["elapsed_s"] < 10
    assert "kimi-k26 (sglang) is not ready after 2 s (timeout): no readiness line" in out["msg"]
    assert "latest progress: Uvicorn running on http://127.0.0.1:" in out["msg"]
    assert len(out["log_tail"]) == 3 and "Last 3 log lines of kimi-k26 since the start:\n" in out["msg"]
    assert out["msg"].endswith(out["log_tail"][-1])
    assert read_progress(host)["state"] == "timeout"


def test_timeout_when_ready_but_the_served_name_is_missing(host):
    host.start("vllm", wait_ready=True)
    out = host.run("vllm", timeout=2, served_model_name="kimi-k2.5")
    assert out["state"] == "timeout" and out["ready_line"]
    assert "the readiness line was logged, but GET /v1/models answered 200 listing ['kimi-k2.6'], not 'kimi-k2.5'" \
        in out["msg"]


# ---- check mode, options ---------------------------------------------------------------------------------------
def test_check_mode_returns_at_once(host):
    out = host.run("sglang", check_mode=True)
    assert out["skipped"] is True and out["changed"] is False and out["log_tail"] == [] and out["_took"] < 10
    assert not host.calls.exists() and not host.progress.exists()


def test_bad_options(host):
    assert host.run("sglang", interval=0)["option"] == "interval"
    assert host.run("sglang", url="localhost:30000")["option"] == "url"
    assert host.run("sglang", systemctl="/nonexistent/systemctl")["option"] == "systemctl"


# ---- the class, with a scripted host ----------------------------------------------------------------------------
def test_class_reads_the_journal_incrementally_and_survives_journal_errors():
    journal = [(1, "", "Failed to open journal"), (0, "line one\nLoading weights took 3.2 seconds\n-- cursor: c1\n", ""),
               (0, "", ""), (0, "[2026-06-11 10:00:00] The server is fired up and ready to roll!\n-- cursor: c2\n", "")]
    calls = []

    def run_command(argv):
        calls.append(argv)
        if argv[1] == "show":
            return 0, "LoadState=loaded\nActiveState=active\nSubState=running\nNRestarts=0\nResult=success\n", ""
        return journal.pop(0) if journal else (0, "", "")

    now = [1000.0]
    p = {"engine": "sglang", "unit": "kimi-k26", "since": 999.5, "url": "http://127.0.0.1:1", "served_model_name": NAME,
         "timeout": 60, "interval": 1.0, "progress_file": None, "log_lines": 30, "journalctl": "jc", "systemctl": "sc"}
    waiter = serve_ready.ServeReady(p, run_command, clock=lambda: now[0], sleep=lambda s: now.__setitem__(0, now[0] + s))
    waiter.engine_answers = lambda: True
    failed, result = waiter.run()
    assert not failed and result["state"] == "ready" and result["elapsed_s"] == 3.0
    journal_calls = [c for c in calls if c[0] == "jc"]
    assert journal_calls[0][-2:] == ["--since", "@999.500"] and journal_calls[1][-2:] == ["--since", "@999.500"]
    assert journal_calls[2][-2:] == ["--after-cursor", "c1"] and journal_calls[3][-2:] == ["--after-cursor", "c1"]
    assert result["log_tail"] == ["line one", "Loading weights took 3.2 seconds",
                                  "[2026-06-11 10:00:00] The server is fired up and ready to roll!"]


def test_class_names_a_journal_error_when_there_are_no_lines():
    def run_command(argv):
        if argv[1] == "show":
            return 0, "LoadState=loaded\nActiveState=failed\nSubState=failed\nNRestarts=0\nResult=exit-code\n", ""
        return 1, "", "Failed to open files: Permission denied"

    p = {"engine": "vllm", "unit": "kimi-k26", "since": None, "url": "http://127.0.0.1:1", "served_model_name": NAME,
         "timeout": 60, "interval": 1.0, "progress_file": None, "log_lines": 30, "journalctl": "jc", "systemctl": "sc"}
    failed, result = serve_ready.ServeReady(p, run_command, sleep=lambda s: None).run()
    assert failed and result["state"] == "failed" and result["moe_dispatch"] is None
    assert "(journalctl failed (exit 1): Failed to open files: Permission denied)" in result["msg"]
