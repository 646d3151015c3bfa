#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: serve_bench
short_description: Benchmark an OpenAI-compatible Kimi-K2.6 endpoint with aiperf - a bounded concurrency sweep
description:
  - The post-deploy benchmark. Runs NVIDIA's aiperf (C(aiperf profile)) on the controller (C(delegate_to
    localhost)) against O(url), one run per concurrency in O(levels), each with a fixed number of requests
    (the larger of O(requests_per_level) and twice the concurrency) and a time limit, all within O(timeout).
  - Synthetic prompts of about O(input_tokens) tokens are made with the checkpoint's own tokenizer (O(tokenizer), a
    local folder); streaming is on, token counts come from the server's C(usage), and C(ignore_eos) asks the engine
    for the full O(output_tokens), so that runs compare.
  - The API key reaches aiperf only through its environment (C(KIMI_BENCH_API_KEY)), named as
    C(${KIMI_BENCH_API_KEY}) in aiperf's config file; it is never on a command line or in a file written here.
  - "Writes C(<result_dir>/<host>-<identity>-<UTC time>.json) (the summary: per concurrency requests ok and failed,
    output tokens/s, requests/s, TTFT, ITL and end-to-end latency p50 and p99), a C(.png) plot beside it, and aiperf's
    own files in C(<same name>.aiperf/)."
  - "O(workload=multi_turn) replays agent-like sessions instead: the module writes C(sessions.jsonl) into aiperf's
    folder (deterministic: O(sessions_per_level) sessions per level of O(turns) turns, one system prompt of about
    O(system_tokens) tokens shared by every session, about O(input_tokens) new tokens per turn), and aiperf sends each
    turn with the session's whole history and its live answers (a file dataset of format C(multi_turn)), so that
    each turn's prompt starts with the previous one's - what a KV host tier (C(kimi_kv_offload)) turns into hits. Each
    level stops after its sessions; its summary counts C(sessions) and requests (sessions x turns)."
  - Compares the output throughput with O(baseline), or when none is given with the newest earlier complete result
    in O(result_dir) for the same O(host) and O(identity) (the last run). The ratio is the geometric mean of the
    per-concurrency ratios over the concurrencies both runs measured.
  - Fails when aiperf does not finish within O(timeout) (it is killed), when no request was answered at any level,
    or when O(min_ratio) is set and the ratio is below it.
version_added: 1.0.0
author: kimi.deploy maintainers (@kimi-deploy)
requirements:
  - aiperf 0.13.0 on the controller (requirements-bench.txt, C(make bench-client)); matplotlib for the plot (aiperf
    brings it; the plot is drawn with aiperf's interpreter when the module's has no matplotlib).
options:
  url:
    description: Base URL of the API (without C(/v1)), usually the proxy in front of the engine.
    type: str
    required: true
  model:
    description: The served model name to send requests to.
    type: str
    default: kimi-k2.6
  api_key:
    description: "Sent as C(Authorization: Bearer <api_key>) by aiperf. Never returned, written or put on a command line."
    type: str
  ca_file:
    description: CA bundle (PEM) that aiperf verifies the server's certificate with (C(SSL_CERT_FILE) in its
      environment), for a proxy with a private CA.
    type: path
  levels:
    description: The concurrencies to run, one aiperf run each, lowest first.
    type: list
    elements: int
    default: [1, 4, 16]
  requests_per_level:
    description: Requests sent at each concurrency (at least twice the concurrency).
    type: int
    default: 32
  input_tokens:
    description: Mean prompt length in tokens (of O(tokenizer)).
    type: int
    default: 1024
  output_tokens:
    description: Output tokens asked for per request (C(max_completion_tokens)).
    type: int
    default: 1024
  workload:
    description: V(chat) (synthetic single-turn prompts) or V(multi_turn) (a replay of multi-turn sessions with
      shared prefixes). A last run only counts as a baseline for the same workload.
    type: str
    choices: [chat, multi_turn]
    default: chat
  sessions_per_level:
    description: V(multi_turn) - sessions run at each concurrency (at least the concurrency).
    type: int
    default: 16
  turns:
    description: V(multi_turn) - user turns per session.
    type: int
    default: 4
  system_tokens:
    description: V(multi_turn) - about how many tokens the system prompt every session shares has (0 - none).
    type: int
    default: 2048
  turn_delay_ms:
    description: V(multi_turn) - think time before each turn after the first, milliseconds.
    type: int
    default: 0
  ignore_eos:
    description: Send C(ignore_eos) so that the engine writes the full O(output_tokens) (vLLM, SGLang, TensorRT-LLM).
    type: bool
    default: true
  timeout:
    description:
      - Seconds the whole sweep may take. After it aiperf is killed and the module fails.
      - It is shared out between the levels (about 20 s each is kept for aiperf to start and stop); a level that
        reaches its share sends no new request and ends with what it has.
    type: int
    default: 1800
  tokenizer:
    description: Local folder with the checkpoint's tokenizer (C(tokenizer_config.json), C(tokenization_kimi.py),
      C(tiktoken.model)); loaded with C(trust_remote_code).
    type: path
    required: true
  aiperf:
    description: The aiperf executable (a path, or a name looked up in C(PATH)).
    type: str
    default: aiperf
  result_dir:
    description: Folder on the controller for the results; created when missing.
    type: path
    required: true
  baseline:
    description: A result JSON of this module to compare with. Empty - the last run of this host and identity in
      O(result_dir).
    type: path
  hour_cost:
    description: What the host's accelerators cost per hour (C(kimi_deployment.hour_cost), from kimi_gpu_hour_cost).
      Each level of the summary then has C(cost_per_million_output_tokens), and the message says it.
    type: float
  min_ratio:
    description: Fail when the throughput ratio against the baseline is below this (e.g. V(0.9)). Not set - never
      fails on the ratio. With an explicit O(baseline) that has no concurrency in common with this run, it fails
      too (the gate cannot be evaluated); with no baseline at all (a first run) it passes and says so.
    type: float
  host:
    description: The host benchmarked (in the file name, the summary and the plot title).
    type: str
    required: true
  identity:
    description: What the host serves (e.g. V(int4-vllm)); a last run only counts as a baseline for the same identity.
    type: str
    required: true
  kimi_model:
    description: The model the host serves (C(kimi_model), e.g. V(kimi-k3)), recorded in the summary. A last run only
      counts as a baseline for the same model, and an O(baseline) taken on another model (a result without the field
      served V(kimi-k2.6)) is not compared with - the A/B compares like with like. Unset - V(kimi-k2.6).
    type: str
  label:
    description: A free note stored in the summary and shown in the plot title.
    type: str
    default: ""
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: In check mode nothing runs and nothing is written; it returns the command, the config and the paths
      it would use, and the baseline it would compare with.
  diff_mode:
    support: none
  platform:
    platforms: posix
notes:
  - aiperf 0.13.0 cannot load a local tokenizer folder with C(HF_HUB_OFFLINE) set, so the module removes
    C(HF_HUB_OFFLINE) and C(TRANSFORMERS_OFFLINE) from its environment; the folder is read locally anyway.
seealso:
  - module: kimi.deploy.serve_verify
"""

EXAMPLES = r"""
- name: Benchmark a host through its proxy and compare with its last run
  kimi.deploy.serve_bench:
    url: https://gpu-01.example.internal
    model: kimi-k2.6
    api_key: "{{ kimi_api_key }}"
    ca_file: /etc/kimi/ca.crt
    tokenizer: "{{ playbook_dir }}/bench/results/tokenizer/gpu-01"
    aiperf: "{{ playbook_dir }}/.venv-bench/bin/aiperf"
    result_dir: "{{ playbook_dir }}/bench/results"
    host: gpu-01
    identity: int4-vllm
  delegate_to: localhost
  register: kimi_bench

- name: A gate - fail below 90 % of a known-good run
  kimi.deploy.serve_bench:
    url: https://gpu-01.example.internal
    api_key: "{{ kimi_api_key }}"
    tokenizer: /srv/bench/tokenizer
    result_dir: /srv/bench/results
    baseline: /srv/bench/baselines/8xB200-int4-vllm.json
    min_ratio: 0.9
    levels: [1, 8, 32]
    requests_per_level: 64
    host: gpu-01
    identity: int4-vllm
  delegate_to: localhost
"""

RETURN = r"""
message:
  description: One line - the throughput at each level and the ratio against the baseline, or why there is none.
  returned: always
  type: str
  sample: "output tokens/s 512.0 @1, 1630.2 @4, 3890.7 @16; ratio 0.97 against the last run (/r/gpu-01-int4-vllm-20261124T101500Z.json)"
summary:
  description: The result written to RV(json_path) (check mode - null).
  returned: always
  type: dict
  contains:
    identity:
      description: O(identity).
      type: str
    host:
      description: O(host).
      type: str
    timestamp:
      description: UTC start of the run, ISO 8601.
      type: str
    client:
      description: C(name) (aiperf) and C(version) of the benchmark client.
      type: dict
    config:
      description: What was run - levels, requests per level, token lengths, timeouts (no secret).
      type: dict
    complete:
      description: Every level ran and aiperf ended by itself (only complete results count as a last run).
      type: bool
    levels:
      description: Per concurrency - C(concurrency), C(requests), C(requests_ok), C(requests_failed),
        C(output_tokens_per_s), C(total_tokens_per_s) (prompt and output), C(requests_per_s), C(ttft_p50_ms),
        C(ttft_p99_ms), C(itl_p50_ms), C(itl_p99_ms),
        C(e2e_p50_ms), C(e2e_p99_ms), C(cached_prompt_tokens_avg) (where the server reports it),
        C(cost_per_million_output_tokens) and C(cost_per_million_tokens) (with O(hour_cost)), C(errors) (distinct
        messages), C(artifacts) (aiperf's folder) and, for V(multi_turn), C(sessions).
      type: list
      elements: dict
ratio:
  description: Geometric mean over the common concurrencies of this run's output throughput divided by the baseline's;
    null when there is no baseline or nothing in common.
  returned: always
  type: float
  sample: 0.97
comparison:
  description: C(ratio), C(levels) (per common concurrency - both throughputs and their ratio), C(common_levels),
    C(reason) (why there is no ratio) and C(baseline) (its identity, host, timestamp).
  returned: always
  type: dict
baseline:
  description: The baseline file compared with, or null.
  returned: always
  type: str
baseline_source:
  description: V(given) (O(baseline)), V(last run) (found in O(result_dir)) or V(none).
  returned: always
  type: str
json_path:
  description: The summary file written (check mode - the one it would write).
  returned: always
  type: str
png_path:
  description: The plot written (null when it could not be drawn; a warning says why).
  returned: always
  type: str
artifact_dir:
  description: aiperf's own files (its config, its output log, one folder per level).
  returned: always
  type: str
argv:
  description: The aiperf command line (it holds no secret).
  returned: always
  type: list
  elements: str
config:
  description: aiperf's config (the API key is the reference C(${KIMI_BENCH_API_KEY})).
  returned: always
  type: dict
"""

import datetime
import json
import os
import shutil
import signal
import subprocess
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.kimi.deploy.plugins.module_utils._bench import (
    API_KEY_ENV, SESSIONS_FILE, BenchError, build_argv, build_config, compare, find_last_run, load_summary, measured,
    other_model, parse_results, plot_command, plot_png, interpreter_of, render_config, render_sessions, result_stem,
    session_records, summarize, sweep_plan,
)
from ansible_collections.kimi.deploy.plugins.module_utils._files import atomic_write

KILL_GRACE_S = 15
# aiperf runs from its own virtualenv: an inherited PYTHONPATH (the controller's, or a test's) would put another
# environment's packages (a huggingface_hub 2.x that its transformers refuses) ahead of its own.
DROPPED_ENV = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", API_KEY_ENV, "SSL_CERT_FILE", "PYTHONPATH", "PYTHONHOME")


class Bench(object):
    """One benchmark run. params: the module's parameters; now: a datetime (UTC) for the run's name and time."""

    def __init__(self, params, now=None):
        self.p = params
        self.now = now or datetime.datetime.now(datetime.timezone.utc)
        self.timestamp = self.now.strftime("%Y-%m-%dT%H:%M:%SZ")
        stem = result_stem(params["host"], params["identity"], self.now.strftime("%Y%m%dT%H%M%SZ"))
        self.result_dir = os.path.abspath(params["result_dir"])
        self.json_path = os.path.join(self.result_dir, stem + ".json")
        self.png_path = os.path.join(self.result_dir, stem + ".png")
        self.artifact_dir = os.path.join(self.result_dir, stem + ".aiperf")
        self.config_path = os.path.join(self.artifact_dir, "aiperf-config.yaml")
        self.log_path = os.path.join(self.artifact_dir, "aiperf-output.log")
        self.sessions_path = os.path.join(self.artifact_dir, SESSIONS_FILE)
        self.multi_turn = params.get("workload") == "multi_turn"
        self.warnings = []

    # ---- inputs -------------------------------------------------------------------------------------------
    def validate(self):
        """Raises BenchError on an input that cannot work; returns the aiperf executable's path."""
        p = self.p
        if not p["url"].startswith(("http://", "https://")):
            raise BenchError("url must be an http(s) base URL such as https://gpu-01.example.internal, got %r" % p["url"])
        for name in ("requests_per_level", "input_tokens", "output_tokens", "timeout", "sessions_per_level", "turns"):
            if p[name] < 1:
                raise BenchError("%s must be at least 1, got %s" % (name, p[name]))
        if p["min_ratio"] is not None and p["min_ratio"] <= 0:
            raise BenchError("min_ratio must be above 0, got %s" % p["min_ratio"])
        if not os.path.isfile(os.path.join(p["tokenizer"], "tokenizer_config.json")):
            raise BenchError("tokenizer %s is not a tokenizer folder (no tokenizer_config.json)" % p["tokenizer"])
        if p["ca_file"] and not os.path.isfile(p["ca_file"]):
            raise BenchError("ca_file %s does not exist" % p["ca_file"])
        if p["baseline"] and not os.path.isfile(p["baseline"]):
            raise BenchError("baseline %s does not exist" % p["baseline"])
        aiperf = p["aiperf"] if os.sep in p["aiperf"] else shutil.which(p["aiperf"])
        if not aiperf or not os.access(aiperf, os.X_OK):
            raise BenchError("aiperf executable %s not found: install the benchmark client (make bench-client, "
                             "requirements-bench.txt) or set aiperf to its path" % p["aiperf"])
        return os.path.abspath(aiperf)

    def config(self):
        p = self.p
        count = p["sessions_per_level"] if self.multi_turn else p["requests_per_level"]
        return build_config(p["url"], p["model"], os.path.abspath(p["tokenizer"]), self.artifact_dir, p["levels"],
                            count, p["input_tokens"], p["output_tokens"], p["timeout"],
                            api_key=bool(p["api_key"]), ignore_eos=p["ignore_eos"], workload=p["workload"],
                            sessions_path=self.sessions_path if self.multi_turn else None)

    def sessions(self, config):
        """The multi_turn sessions file's text: enough sessions for the largest level (aiperf reads them in order)."""
        p = self.p
        return render_sessions(session_records(max(n for _c, n in sweep_plan(config)), p["turns"], p["input_tokens"],
                                               p["output_tokens"], p["system_tokens"], p["turn_delay_ms"]))

    def settings(self, config):
        """The summary's `config`: what was asked, in our words."""
        p, phase = self.p, config["benchmark"]["phases"][0]
        return {"levels": [c for c, _n in sweep_plan(config)], "requests_per_level": p["requests_per_level"],
                "requests": dict((str(c), n) for c, n in sweep_plan(config)), "input_tokens": p["input_tokens"],
                "output_tokens": p["output_tokens"], "ignore_eos": p["ignore_eos"], "streaming": True,
                "server_token_counts": True, "timeout_s": p["timeout"], "level_duration_s": phase["duration"],
                "level_grace_s": phase["gracePeriod"], "tokenizer": os.path.abspath(p["tokenizer"]),
                "ca_file": p["ca_file"] or None, "random_seed": config["randomSeed"], "workload": p["workload"],
                "multi_turn": ({"sessions": dict((str(c), n) for c, n in sweep_plan(config)), "turns": p["turns"],
                                "system_tokens": p["system_tokens"], "turn_delay_ms": p["turn_delay_ms"],
                                "sessions_file": self.sessions_path} if self.multi_turn else None)}

    def baseline(self):
        """(path, summary, source)."""
        if self.p["baseline"]:
            data = load_summary(self.p["baseline"])
            why = other_model(data, self.p.get("kimi_model"))
            if why:  # another model's baseline is never used (a K2.6 baseline for K3)
                self.warnings.append("baseline %s not compared: %s" % (self.p["baseline"], why))
                return None, None, "none"
            return self.p["baseline"], data, "given"
        path, data = find_last_run(self.result_dir, self.p["host"], self.p["identity"], self.timestamp,
                                   workload=self.p["workload"], kimi_model=self.p.get("kimi_model"))
        return (path, data, "last run") if path else (None, None, "none")

    # ---- running ------------------------------------------------------------------------------------------
    def environment(self):
        env = dict((k, v) for k, v in os.environ.items() if k not in DROPPED_ENV)
        if self.p["api_key"]:
            env[API_KEY_ENV] = self.p["api_key"]
        if self.p["ca_file"]:
            env["SSL_CERT_FILE"] = os.path.abspath(self.p["ca_file"])
        env.update(HF_HUB_DISABLE_TELEMETRY="1", PYTHONUNBUFFERED="1", NO_COLOR="1")
        return env

    def run_aiperf(self, argv):
        """(exit code or None when killed, seconds)."""
        started = time.time()
        with open(self.log_path, "ab") as log:
            # not run_command: aiperf runs in a session of its own, so that a timeout kills its whole process group
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log,  # pylint: disable=ansible-bad-function
                                    stderr=subprocess.STDOUT, cwd=self.artifact_dir, env=self.environment(),
                                    start_new_session=True)
            try:
                code = proc.wait(timeout=self.p["timeout"])
            except subprocess.TimeoutExpired:
                self.kill(proc)
                code = None
        return code, round(time.time() - started, 1)

    @staticmethod
    def kill(proc):
        """SIGTERM to aiperf's whole process group (its services and workers), SIGKILL what is left after a grace."""
        for sig, wait in ((signal.SIGTERM, KILL_GRACE_S), (signal.SIGKILL, 5)):
            try:
                os.killpg(proc.pid, sig)
            except OSError:
                pass
            try:
                proc.wait(timeout=wait)
                break
            except subprocess.TimeoutExpired:
                continue
        try:  # the group may outlive its leader
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass

    def plot(self, summary, baseline):
        """Write the PNG; returns its path, or None with a warning when it cannot be drawn."""
        try:
            try:
                import matplotlib  # noqa: F401  pylint: disable=unused-import
                png = plot_png(summary, baseline)
            except ImportError:
                python = interpreter_of(self.aiperf)
                data = json.dumps({"summary": summary, "baseline": baseline}).encode()
                proc = subprocess.run(plot_command(python), input=data,  # pylint: disable=ansible-bad-function
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120, check=False)
                if proc.returncode != 0 or not proc.stdout.startswith(b"\x89PNG"):
                    raise BenchError("plotting with %s failed (rc %s): %s" % (
                        python, proc.returncode, proc.stderr.decode("utf-8", "replace")[-500:]))
                png = proc.stdout
            atomic_write(self.png_path, png)
            return self.png_path
        except (BenchError, OSError, ValueError, RuntimeError, subprocess.SubprocessError) as exc:
            self.warnings.append("no plot: %s" % exc)
            return None

    # ---- the whole run ------------------------------------------------------------------------------------
    def result(self, check_mode=False):
        """(failed message or None, result dict)."""
        self.aiperf = self.validate()
        config = self.config()
        argv = build_argv(self.aiperf, self.config_path)
        sessions = self.sessions(config) if self.multi_turn else None  # refuses bad session settings in check mode too
        base_path, base, source = self.baseline()
        out = dict(changed=False, argv=argv, config=config, json_path=self.json_path, png_path=None,
                   artifact_dir=self.artifact_dir, baseline=base_path, baseline_source=source, summary=None,
                   ratio=None, comparison=None)
        if check_mode:
            out["png_path"] = self.png_path
            unit = "sessions of %d turns" % self.p["turns"] if self.multi_turn else "requests"
            out["message"] = "would run %s (%s) against %s and compare with %s" % (
                " ".join(argv), ", ".join(("concurrency %%d: %%d %s" % unit) % level for level in sweep_plan(config)),
                self.p["url"], "%s (%s)" % (base_path, source) if base_path else "nothing (no baseline)")
            return None, out

        os.makedirs(self.artifact_dir)
        atomic_write(self.config_path, render_config(config))
        if sessions is not None:
            atomic_write(self.sessions_path, sessions)
        code, seconds = self.run_aiperf(argv)
        plan = sweep_plan(config)
        levels = parse_results(self.artifact_dir, plan, base=self.result_dir,
                               turns=self.p["turns"] if self.multi_turn else None)
        summary = summarize(levels, self.p["identity"], self.p["host"], self.timestamp, self.p["url"],
                            self.p["model"], self.settings(config), label=self.p["label"], duration_s=seconds,
                            exit_code=code, hour_cost=self.p["hour_cost"], kimi_model=self.p.get("kimi_model"))
        summary["complete"] = code is not None and all(lv["artifacts"] for lv in levels)
        comparison = compare(summary, base)
        atomic_write(self.json_path, json.dumps(summary, indent=2, sort_keys=True) + "\n")
        out.update(changed=True, summary=summary, comparison=comparison, ratio=comparison["ratio"],
                   png_path=self.plot(summary, base))
        out["message"] = self.message(summary, comparison, base_path, source)
        if self.warnings:
            out["warnings"] = self.warnings
        return self.failure(code, summary, comparison, base_path, source), out

    def message(self, summary, comparison, base_path, source):
        done = measured(summary)
        figures = ", ".join("%.1f @%d" % (lv["output_tokens_per_s"], lv["concurrency"]) for lv in done)
        text = "output tokens/s %s" % (figures or "none (no level answered)")
        costs = ", ".join("%.4g @%d" % (lv["cost_per_million_output_tokens"], lv["concurrency"]) for lv in done
                          if lv.get("cost_per_million_output_tokens") is not None)
        if costs:
            text += "; cost per million output tokens %s (%g per hour)" % (costs, summary["hour_cost"])
        every = ", ".join("%.4g @%d" % (lv["cost_per_million_tokens"], lv["concurrency"]) for lv in done
                          if lv.get("cost_per_million_tokens") is not None)
        if every:
            text += "; per million tokens (prompt and output) %s" % every
        failed = sum(lv["requests_failed"] for lv in summary["levels"])
        if failed:
            text += "; %d requests failed" % failed
        if comparison["ratio"] is not None:
            text += "; ratio %.4g against %s (%s)" % (comparison["ratio"], "the last run" if source == "last run"
                                                      else "the baseline", base_path)
        else:
            text += "; no ratio: %s%s" % (comparison["reason"], " (%s, %s)" % (base_path, source) if base_path else "")
        return text

    def failure(self, code, summary, comparison, base_path, source):
        p = self.p
        if code is None:
            return ("aiperf did not finish within timeout %d s against %s (host %s): killed; levels with results: "
                    "%s; its output: %s" % (p["timeout"], p["url"], p["host"], ", ".join(
                        str(lv["concurrency"]) for lv in summary["levels"] if lv["artifacts"]) or "none",
                        self.log_path))
        if not measured(summary):
            errors = sorted(set(e for lv in summary["levels"] for e in lv["errors"]))
            return ("no request was answered at any concurrency against %s (host %s, aiperf exit %s): %s; aiperf's "
                    "output: %s" % (p["url"], p["host"], code, "; ".join(errors[:5]) or "no error recorded",
                                    self.log_path))
        if p["min_ratio"] is not None:
            ratio = comparison["ratio"]
            if ratio is not None and ratio < p["min_ratio"]:
                return ("host %s: output throughput ratio %.4g is below min_ratio %s against baseline %s (%s; "
                        "geometric mean over concurrency %s)" % (
                            p["host"], ratio, p["min_ratio"], base_path, source,
                            ", ".join(str(c) for c in comparison["common_levels"])))
            if ratio is None and source == "given":
                return "host %s: min_ratio %s cannot be checked against baseline %s: %s" % (
                    p["host"], p["min_ratio"], base_path, comparison["reason"])
        return None


def main():
    module = AnsibleModule(
        argument_spec=dict(
            url=dict(type="str", required=True),
            model=dict(type="str", default="kimi-k2.6"),
            api_key=dict(type="str", no_log=True),
            ca_file=dict(type="path"),
            levels=dict(type="list", elements="int", default=[1, 4, 16]),
            requests_per_level=dict(type="int", default=32),
            input_tokens=dict(type="int", default=1024, no_log=False),
            output_tokens=dict(type="int", default=1024, no_log=False),
            ignore_eos=dict(type="bool", default=True),
            workload=dict(type="str", choices=["chat", "multi_turn"], default="chat"),
            sessions_per_level=dict(type="int", default=16),
            turns=dict(type="int", default=4),
            system_tokens=dict(type="int", default=2048, no_log=False),
            turn_delay_ms=dict(type="int", default=0),
            timeout=dict(type="int", default=1800),
            tokenizer=dict(type="path", required=True, no_log=False),
            aiperf=dict(type="str", default="aiperf"),
            result_dir=dict(type="path", required=True),
            baseline=dict(type="path"),
            min_ratio=dict(type="float"),
            hour_cost=dict(type="float"),
            host=dict(type="str", required=True),
            identity=dict(type="str", required=True),
            kimi_model=dict(type="str"),
            label=dict(type="str", default=""),
        ),
        supports_check_mode=True,
    )
    bench = Bench(module.params)
    try:
        failed, result = bench.result(check_mode=module.check_mode)
    except BenchError as exc:
        module.fail_json(msg=str(exc))
    except OSError as exc:
        module.fail_json(msg="serve_bench: %s" % exc)
    if failed:
        module.fail_json(msg=failed, **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
