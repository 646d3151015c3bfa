#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: serve_ready
short_description: Wait until a (re)started engine unit serves, failing fast with the cause and the fix
description:
  - Polls a systemd unit that runs vLLM or SGLang until the engine is ready - its journal shows the engine's
    readiness line (SGLang C(The server is fired up and ready to roll!), vLLM C(Application startup complete.)),
    C(GET /health) answers 200 and C(GET /v1/models) lists O(served_model_name).
  - Reads only the journal lines logged since O(since) (C(journalctl -u UNIT -o cat --since @SINCE), then only the
    new lines after the last cursor) and the unit's state (C(systemctl show)).
  - Fails at once when a known start-up failure appears in the log (NCCL shared memory, an image without kernels for
    the GPU, a KV cache that does not fit, GPUs not free, remote code under C(blobs/), the CUDA-13 image, missing
    weights, ...), when the unit restarted automatically since O(since) (its C(NRestarts) grew, it is in
    C(auto-restart), or systemd logged a scheduled restart) or when the unit is C(failed). The message names the
    cause and the fix, and carries the last O(log_lines) log lines.
  - On every poll it rewrites O(progress_file) (JSON - C(kind=serve), C(state), C(elapsed_s) and C(line), the
    engine's latest load-progress line), which M(kimi.deploy.job_progress) prints as one line per poll when this
    module runs with C(async) and C(poll) 0.
  - For vLLM, reports which NVFP4 MoE path the engine dispatched (native FP4 or the Marlin fallback), as read
    from its log.
  - Changes nothing on the host; RV(ignore:changed) is always false.
version_added: 1.0.0
author: kimi.deploy maintainers (@kimi-deploy)
options:
  engine:
    description: The engine the unit runs; it decides the readiness line.
    type: str
    required: true
    choices: [sglang, trtllm, vllm]
  unit:
    description: The systemd unit that runs the engine.
    type: str
    default: kimi-k26
  since:
    description:
      - Epoch seconds of the host's clock; only journal lines from then on count. Pass the time just before the unit
        was (re)started, read on the host (C(date +%s.%N)), not on the controller.
      - Of those, only the lines after systemd's latest start line for the unit (C(Started ...)) count - the previous
        engine's stop does not - except an automatic restart (C(Scheduled restart job)), which always fails the wait.
      - Default - when the module starts.
    type: float
  url:
    description: Base URL of the engine's OpenAI-compatible API on the host.
    type: str
    default: http://127.0.0.1:30000
  served_model_name:
    description: The model id C(/v1/models) must list. When unset, any listed model will do.
    type: str
  timeout:
    description: Seconds to wait in all (a load takes 10 to 15 minutes from NVMe, 4 to 5 with a warm page cache).
    type: int
    default: 1800
  interval:
    description: Seconds between two polls.
    type: float
    default: 5
  progress_file:
    description:
      - JSON file rewritten (atomically) on every poll - C(kind), C(state), C(elapsed_s), C(line), C(unit),
        C(engine), C(updated).
      - Its folder must exist; a file that cannot be written is skipped silently (progress is advisory).
    type: path
  log_lines:
    description: Log lines returned in RV(log_tail) and put into the failure message.
    type: int
    default: 30
  journalctl:
    description: The C(journalctl) to run, a command name or a path.
    type: str
    default: journalctl
  systemctl:
    description: The C(systemctl) to run, a command name or a path.
    type: str
    default: systemctl
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: partial
    details: Returns at once with RV(ignore:skipped=true), without reading the journal or asking the engine.
  diff_mode:
    support: none
  platform:
    platforms: posix
notes:
  - Run it with C(async) and C(poll) 0, and wait with M(kimi.deploy.job_progress) on the same O(progress_file), to
    print the load's progress while it runs.
  - HTTP goes straight to O(url); proxy variables of the environment are ignored.
seealso:
  - module: kimi.deploy.serve_verify
  - module: kimi.deploy.job_progress
"""

EXAMPLES = r"""
- name: Note the host's time before the restart
  ansible.builtin.command: date +%s.%N
  register: _kimi_since
  changed_when: false

- name: Restart the engine
  ansible.builtin.systemd_service:
    name: kimi-k26
    state: restarted

- name: Wait for it to be ready, in the background
  kimi.deploy.serve_ready:
    engine: sglang
    unit: kimi-k26
    since: "{{ _kimi_since.stdout }}"
    served_model_name: kimi-k2.6
    timeout: 1800
    progress_file: /var/lib/kimi-k26/.serve-progress.json
  async: 1900
  poll: 0
  register: _kimi_ready_job

- name: Print one progress line per poll until it is ready
  kimi.deploy.job_progress:
    jid: "{{ _kimi_ready_job.ansible_job_id }}"
    progress_file: /var/lib/kimi-k26/.serve-progress.json
    label: kimi-k26 int4-sglang
    interval: 10
  register: _kimi_ready

- name: Warn when vLLM dispatched another NVFP4 MoE path than asked for
  ansible.builtin.debug:
    msg: "MoE dispatch: {{ _kimi_ready.moe_dispatch.path }} ({{ _kimi_ready.moe_dispatch.backend }})"
  when: _kimi_ready.moe_dispatch is not none
"""

RETURN = r"""
state:
  description: V(ready), or on a failure V(failed) or V(timeout).
  returned: always except in check mode
  type: str
  sample: ready
elapsed_s:
  description: Seconds waited.
  returned: always
  type: float
  sample: 612.4
ready_line:
  description: The engine's readiness line as logged (prefix removed), or null.
  returned: always
  type: str
  sample: "INFO:     Application startup complete."
compile:
  description:
    - The engine's kernel compile phase as its log says (the engine data's compile lines), or null when the log says
      nothing of it. V(compiling) (torch.compile, DeepGEMM JIT or autotuning under way), V(compiled), or V(cached)
      (the kernels came from the kernel cache).
  returned: always
  type: dict
  contains:
    phase:
      description: V(compiling), V(compiled) or V(cached).
      type: str
      sample: compiled
    line:
      description: The log line it was read from (prefix removed).
      type: str
      sample: torch.compile takes 45.30 s in total
moe_dispatch:
  description:
    - vLLM only (null for SGLang, and when the log names no NVFP4 MoE backend, as for INT4) - the NVFP4 MoE path the
      engine dispatched.
  returned: always
  type: dict
  contains:
    path:
      description: V(native_fp4), V(marlin) (the weight-only Marlin fallback) or V(emulation).
      type: str
      sample: marlin
    backend:
      description: vLLM's name of the backend.
      type: str
      sample: MARLIN
    moe_backend:
      description: The C(--moe-backend) value (C(kimi_moe_backend)) that selects that backend.
      type: str
      sample: marlin
    native_fp4:
      description: True when the FP4 tensor-core path runs.
      type: bool
    line:
      description: The log line it was read from.
      type: str
log_tail:
  description: The last O(log_lines) lines of the unit's journal since O(since).
  returned: always
  type: list
  elements: str
diagnosis:
  description: The known failures found in the log, likeliest first (empty when none).
  returned: always
  type: list
  elements: dict
  contains:
    name:
      description: A short id of the failure, such as V(nccl_shm), V(kv_cache_memory), V(engine_core_init).
      type: str
    cause:
      description: What went wrong.
      type: str
    fix:
      description: What fixes it, in terms of the collection's variables.
      type: str
    line:
      description: The log line that shows it.
      type: str
unit_state:
  description: The unit's C(ActiveState), C(SubState) and C(NRestarts) at the last poll.
  returned: always except in check mode
  type: dict
  sample: {"ActiveState": "active", "SubState": "running", "NRestarts": 0}
"""

import json
import os
import time

from urllib.request import ProxyHandler, Request, build_opener

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.kimi.deploy.plugins.module_utils._engines import log as _engine_log
from ansible_collections.kimi.deploy.plugins.module_utils._files import atomic_write

HTTP_TIMEOUT = 5
CURSOR_PREFIX = "-- cursor: "
UNIT_PROPERTIES = ("LoadState", "ActiveState", "SubState", "NRestarts", "Result")


class ServeReady(object):
    """One wait. run_command(argv) -> (rc, stdout, stderr), as AnsibleModule.run_command; clock and sleep can be
    replaced by a test. run() returns (failed, result)."""

    def __init__(self, params, run_command, clock=time.time, sleep=time.sleep):
        self.p = params
        self.run_command = run_command
        self.clock = clock
        self.sleep = sleep
        self.started = clock()
        self.since = params["since"] if params["since"] is not None else self.started
        self.watch = _engine_log.LogWatch(params["engine"], params["log_lines"])
        self.cursor = None
        self.journal_error = None
        self.unit_state = {}
        self.restarts_at_start = None
        self.http = build_opener(ProxyHandler({}))
        self.last_http = None  # what the last readiness request saw, for the timeout message
        self.inactive_polls = 0

    # ---- the host ---------------------------------------------------------------------------------------
    def show_unit(self):
        argv = [self.p["systemctl"], "show", self.p["unit"], "--property=" + ",".join(UNIT_PROPERTIES)]
        rc, out, err = self.run_command(argv)
        if rc != 0:
            return None, "systemctl show %s failed (exit %d): %s" % (self.p["unit"], rc, (err or out).strip()[:300])
        state = {}
        for line in out.splitlines():
            key, sep, value = line.partition("=")
            if sep:
                state[key.strip()] = value.strip()
        try:
            state["NRestarts"] = int(state.get("NRestarts") or 0)
        except ValueError:
            state["NRestarts"] = 0
        return state, None

    def read_journal(self):
        argv = [self.p["journalctl"], "-u", self.p["unit"], "-o", "cat", "--no-pager", "-q", "--show-cursor"]
        if self.cursor:
            argv += ["--after-cursor", self.cursor]
        else:
            argv += ["--since", "@%.3f" % self.since]
        rc, out, err = self.run_command(argv)
        if rc != 0:  # a silent non-zero exit is "no entries yet" (no journal file has lines of the unit)
            text = (err or out or "").strip()
            self.journal_error = "journalctl failed (exit %d): %s" % (rc, text[:300]) if text else None
            return []
        self.journal_error = None
        lines = out.splitlines()
        while lines and lines[-1].startswith(CURSOR_PREFIX):
            self.cursor = lines.pop()[len(CURSOR_PREFIX):].strip()
        return [line for line in lines if not line.startswith("-- No entries --")]

    def get(self, path):
        """(status, parsed JSON or None, error text or None) of GET url+path."""
        url = self.p["url"].rstrip("/") + path
        try:
            response = self.http.open(Request(url, headers={"Accept": "application/json"}), timeout=HTTP_TIMEOUT)
            status, body = response.getcode(), response.read()
        except Exception as exc:  # HTTPError carries a status; anything else means no answer yet
            status = getattr(exc, "code", None)
            if status is None:
                return None, None, "%s: %s" % (url, getattr(exc, "reason", exc))
            return status, None, "%s answered %s" % (url, status)
        try:
            return status, json.loads(body.decode("utf-8") or "null"), None
        except ValueError:
            return status, None, None

    def engine_answers(self):
        """True when /health is 200 and /v1/models lists the served model name."""
        status, _body, error = self.get("/health")
        if status != 200:
            self.last_http = error or "GET /health answered %s" % status
            return False
        status, body, error = self.get("/v1/models")
        ids = [m.get("id") for m in (body or {}).get("data") or [] if isinstance(m, dict)] if isinstance(body, dict) else []
        name = self.p["served_model_name"]
        if status != 200 or not ids or (name and name not in ids):
            self.last_http = error or "GET /v1/models answered %s listing %s, not %r" % (status, ids, name or "a model")
            return False
        self.last_http = None
        return True

    def write_progress(self, state, line=None):
        if not self.p["progress_file"]:
            return
        doc = {"kind": "serve", "state": state, "elapsed_s": round(self.clock() - self.started, 1),
               "line": line if line is not None else (self.watch.progress_line or ""),
               "unit": self.p["unit"], "engine": self.p["engine"], "updated": round(self.clock(), 1)}
        try:
            atomic_write(self.p["progress_file"], json.dumps(doc, sort_keys=True).encode("utf-8"), durable=False)
        except (IOError, OSError):
            pass  # progress is advisory; the wait must not fail because of it

    # ---- the wait ---------------------------------------------------------------------------------------
    def result(self, state):
        return {
            "changed": False, "state": state, "elapsed_s": round(self.clock() - self.started, 1),
            "ready_line": self.watch.ready_line,
            "moe_dispatch": self.watch.moe_dispatch if self.p["engine"] == "vllm" else None,
            "compile": self.watch.compile,
            "log_tail": list(self.watch.tail), "diagnosis": self.watch.diagnosis,
            "unit_state": dict((k, self.unit_state.get(k)) for k in ("ActiveState", "SubState", "NRestarts")),
        }

    def failure(self, state, reason):
        result = self.result(state)
        text = "%s (%s) %s" % (self.p["unit"], self.p["engine"], reason)
        diagnosis = result["diagnosis"]
        if diagnosis:
            first = diagnosis[0]
            if first["cause"] not in reason:
                text += "\nCause: %s." % first["cause"]
            text += "\nFix: %s.\nLog line: %s" % (first["fix"], first["line"])
            for other in diagnosis[1:]:
                text += "\nAlso (%s): %s - %s." % (other["name"], other["cause"], other["fix"])
        tail = result["log_tail"]
        if tail:
            text += "\nLast %d log lines of %s since the start:\n%s" % (len(tail), self.p["unit"], "\n".join(tail))
        else:
            text += "\nNo log lines from %s since the start%s." % (
                self.p["unit"], " (%s)" % self.journal_error if self.journal_error else "")
        result["msg"] = text
        self.write_progress(state, diagnosis[0]["cause"] if diagnosis else reason)
        return True, result

    def unit_problem(self):
        """A reason string when the unit is failed, restarted since `since`, or stopped; else None."""
        state = self.unit_state
        if state.get("LoadState") == "not-found":
            return "is not a loaded unit (systemctl show: LoadState=not-found)"
        restarts = state.get("NRestarts", 0)
        if restarts > self.restarts_at_start or state.get("SubState") == "auto-restart" or self.watch.restart:
            what = self.watch.restart or "ActiveState=%s SubState=%s NRestarts=%s (was %s)" % (
                state.get("ActiveState"), state.get("SubState"), restarts, self.restarts_at_start)
            return "crashed and was restarted by systemd while starting: %s" % what
        if state.get("ActiveState") == "failed":
            return "failed (ActiveState=failed, Result=%s)" % state.get("Result")
        self.inactive_polls = self.inactive_polls + 1 if state.get("ActiveState") == "inactive" else 0
        if self.inactive_polls >= 2:
            return "is not running (ActiveState=inactive): it stopped, or was never started"
        return None

    def run(self):
        first, error = self.show_unit()
        if error:
            return self.failure("failed", "cannot be inspected: " + error)
        self.unit_state = first
        self.restarts_at_start = first["NRestarts"]
        deadline = self.started + self.p["timeout"]
        self.write_progress("starting")
        while True:
            state, error = self.show_unit()
            if state is not None:
                self.unit_state = state
            self.watch.feed(self.read_journal())
            if self.watch.diagnosis:
                return self.failure("failed", "failed to start: %s." % self.watch.diagnosis[0]["cause"])
            problem = self.unit_problem() if state is not None else None
            if problem:
                return self.failure("failed", problem)
            if self.watch.ready_line and self.engine_answers():
                self.write_progress("ready", self.watch.ready_line)
                return False, self.result("ready")
            if self.clock() >= deadline:
                return self.failure("timeout", "is not ready after %d s (timeout): %s" % (self.p["timeout"], self.waiting_for()))
            self.write_progress("loading" if self.watch.lines_seen else "starting")
            self.sleep(max(0.0, min(self.p["interval"], deadline - self.clock())))

    def waiting_for(self):
        if not self.watch.ready_line:
            what = "no readiness line (%r) in the log yet" % _engine_log.READY_LINES[self.p["engine"]][0]
            if self.watch.progress_line:
                what += "; latest progress: %s" % self.watch.progress_line
            return what
        return "the readiness line was logged, but %s" % (self.last_http or "the API did not answer")


def check_params(module):
    p = module.params
    for name, low, high in (("timeout", 1, 7 * 86400), ("log_lines", 1, 10000)):
        if not low <= p[name] <= high:
            module.fail_json(msg="%s must be between %d and %d, got %s" % (name, low, high, p[name]), option=name)
    if not 0 < p["interval"] <= 3600:
        module.fail_json(msg="interval must be more than 0 and at most 3600 seconds, got %s" % p["interval"], option="interval")
    if not p["url"].startswith(("http://", "https://")):
        module.fail_json(msg="url must be an http(s) URL such as http://127.0.0.1:30000, got %r" % p["url"], option="url")
    for name in ("journalctl", "systemctl"):
        if "/" not in p[name]:
            p[name] = module.get_bin_path(p[name], required=True)
        elif not os.access(p[name], os.X_OK):
            module.fail_json(msg="%s: %s is not an executable file" % (name, p[name]), option=name)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            engine=dict(type="str", required=True, choices=list(_engine_log.ENGINES)),
            unit=dict(type="str", default="kimi-k26"),
            since=dict(type="float"),
            url=dict(type="str", default="http://127.0.0.1:30000"),
            served_model_name=dict(type="str"),
            timeout=dict(type="int", default=1800),
            interval=dict(type="float", default=5),
            progress_file=dict(type="path"),
            log_lines=dict(type="int", default=30),
            journalctl=dict(type="str", default="journalctl"),
            systemctl=dict(type="str", default="systemctl"),
        ),
        supports_check_mode=True,
    )
    if module.check_mode:
        module.exit_json(changed=False, skipped=True, msg="check mode: not waiting for %s" % module.params["unit"],
                         elapsed_s=0.0, ready_line=None, moe_dispatch=None, compile=None, log_tail=[], diagnosis=[])
    check_params(module)
    failed, result = ServeReady(module.params, lambda argv: module.run_command(argv, environ_update={"LC_ALL": "C"})).run()
    if failed:
        module.fail_json(**result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
