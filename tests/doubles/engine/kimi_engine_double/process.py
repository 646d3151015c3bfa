"""For tests: run the engine double as a process on a free loopback port, its log in a file (like a journal)."""
import os
import signal
import socket
import subprocess
import sys
import time

from .server import READY_LINE

PACKAGE_PARENT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class DoubleProcess:
    """`python3 -m kimi_engine_double ENGINE [serve] ARGV --host 127.0.0.1 --port <free>`, output appended to log_path.

    start(wait_ready=True) waits for the readiness line (or the process's end); stop() sends SIGTERM."""

    def __init__(self, engine, argv, log_path, env=None):
        self.engine = engine
        self.port = free_port()
        command = ["serve"] if engine == "vllm" else []
        self.argv = [sys.executable, "-m", "kimi_engine_double", engine] + command + list(argv) + [
            "--host", "127.0.0.1", "--port", str(self.port)]
        self.log_path = str(log_path)
        self.env = dict((k, v) for k, v in os.environ.items() if not k.startswith("KIMI_DOUBLE_"))
        self.env.update(env or {})
        self.env["PYTHONPATH"] = os.pathsep.join([PACKAGE_PARENT] + [p for p in [self.env.get("PYTHONPATH")] if p])
        self.env["PYTHONUNBUFFERED"] = "1"
        self.proc = None
        self.url = "http://127.0.0.1:%d" % self.port

    def start(self, wait_ready=True, timeout=20):
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(self.argv, env=self.env, stdout=log, stderr=subprocess.STDOUT, cwd="/")
        if wait_ready:
            deadline = time.time() + timeout
            while time.time() < deadline:
                if READY_LINE[self.engine] in self.log():
                    return self
                if self.proc.poll() is not None:
                    raise RuntimeError("engine double exited %s before ready:\n%s" % (self.proc.returncode, self.log()))
                time.sleep(0.05)
            raise RuntimeError("engine double not ready after %s s:\n%s" % (timeout, self.log()))
        return self

    def wait_exit(self, timeout=20):
        return self.proc.wait(timeout)

    def log(self):
        with open(self.log_path, encoding="utf-8", errors="replace") as f:
            return f.read()

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
