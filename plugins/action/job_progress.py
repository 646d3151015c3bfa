# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Wait for an async job and print a progress line from the JSON file it keeps (see the job_progress module docs).

async_status in an until-loop only prints "FAILED - RETRYING"; a 595 GB download takes an hour and users must see
it move. This polls the job and the progress file and prints one line per poll.
"""

from __future__ import annotations

import base64
import json
import time

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display
from ansible_collections.kimi.deploy.plugins.module_utils._files import human_size

display = Display()


def human_seconds(seconds):
    if seconds is None:
        return "?"
    seconds = int(seconds)
    if seconds >= 3600:
        return "%dh%02dm" % (seconds // 3600, seconds % 3600 // 60)
    if seconds >= 60:
        return "%dm%02ds" % (seconds // 60, seconds % 60)
    return "%ds" % seconds


def progress_line(progress):
    """One human line from a progress document: a download (keys of kimi.deploy.hf_snapshot's progress_file) or the
    generic form (kind "serve" of kimi.deploy.serve_ready, or any document with a "line")."""
    if not progress:
        return "starting"
    if progress.get("kind") == "serve" or ("line" in progress and "bytes_total" not in progress):
        return generic_line(progress)
    total = progress.get("bytes_total") or 0
    done = progress.get("bytes_done") or 0
    pct = 100.0 * done / total if total else 0.0
    return "%s %s / %s (%.1f%%), %s/s, ETA %s, files %s/%s" % (
        progress.get("state", "?"), human_size(done), human_size(total), pct,
        human_size(progress.get("rate_bytes_per_s")), human_seconds(progress.get("eta_s")),
        progress.get("files_done", "?"), progress.get("files_total", "?"))


def generic_line(progress):
    """"<state> <elapsed>, <line>", e.g. "loading 4m10s, Loading weights took 612.34 seconds"."""
    text = str(progress.get("state") or "running")
    if progress.get("elapsed_s") is not None:
        text += " " + human_seconds(progress["elapsed_s"])
    line = " ".join(str(progress.get("line") or "").split())
    return text + ", " + line if line else text


class ActionModule(ActionBase):

    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("jid", "progress_file", "interval", "timeout", "label"))

    def _status(self, jid, async_dir, task_vars):
        return self._execute_module(module_name="ansible.legacy.async_status", task_vars=task_vars,
                                    module_args={"jid": jid, "mode": "status", "_async_dir": async_dir})

    def _progress(self, path, task_vars):
        if not path:
            return None
        res = self._execute_module(module_name="ansible.legacy.slurp", module_args={"src": path}, task_vars=task_vars)
        if res.get("failed") or "content" not in res:
            return None
        try:
            return json.loads(base64.b64decode(res["content"]).decode("utf-8"))
        except (ValueError, TypeError):
            return None

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        unused, args = self.validate_argument_spec(argument_spec={
            "jid": {"type": "str", "required": True},
            "progress_file": {"type": "path"},
            "interval": {"type": "int", "default": 15},
            "timeout": {"type": "int", "default": 86400},
            "label": {"type": "str", "default": "progress"},
        })
        if args["interval"] < 1 or args["timeout"] < 1:
            raise AnsibleActionFail("interval and timeout must be >= 1 second, got %d and %d" % (args["interval"], args["timeout"]))
        async_dir = self._remote_expand_user(self.get_shell_option("async_dir", default="~/.ansible_async"))
        host = task_vars.get("inventory_hostname", "?") if task_vars else "?"
        deadline = time.monotonic() + args["timeout"]
        delay = 0.25  # short first polls: a re-run over a complete snapshot ends in well under a second
        last = None
        while True:
            status = self._status(args["jid"], async_dir, task_vars)
            if status.get("finished") or (status.get("failed") and not status.get("started")):
                break
            if time.monotonic() > deadline:
                raise AnsibleActionFail("job %s still running after %d s (timeout); it keeps running on the host"
                                        % (args["jid"], args["timeout"]))
            if delay >= 1:
                line = progress_line(self._progress(args["progress_file"], task_vars))
                if line != last:
                    display.display("%s | %s: %s" % (host, args["label"], line))
                    last = line
            time.sleep(delay)
            delay = min(args["interval"], delay * 2)
        self._execute_module(module_name="ansible.legacy.async_status", task_vars=task_vars,
                             module_args={"jid": args["jid"], "mode": "cleanup", "_async_dir": async_dir})
        for key in ("started", "finished", "results_file", "stdout", "stderr", "stdout_lines", "stderr_lines"):
            status.pop(key, None)
        result.update(status)
        return result
