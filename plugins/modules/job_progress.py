#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: job_progress
short_description: Wait for an async job, printing a progress line from its progress file
description:
  - "Polls an async job started with C(async) and C(poll: 0) until it finishes, and on every poll prints one line
    read from the JSON progress file the job keeps, for example the O(kimi.deploy.hf_snapshot#module:progress_file)
    of a download (bytes, percent, rate, ETA, files) or the O(kimi.deploy.serve_ready#module:progress_file) of an
    engine load (state, elapsed time, the engine's latest load-progress line)."
  - Returns the job's own result, as RV(ignore:async_status) does once the job has finished, and fails when the job failed.
  - This is an action plugin; it runs on the controller and calls C(async_status) and C(slurp) on the host.
version_added: 1.0.0
author: kimi.deploy maintainers (@kimi-deploy)
options:
  jid:
    description: The C(ansible_job_id) of the async task.
    type: str
    required: true
  progress_file:
    description:
      - JSON progress file on the host, in one of two forms.
      - A download - keys C(state), C(bytes_done), C(bytes_total), C(rate_bytes_per_s), C(eta_s), C(files_done), C(files_total).
      - The generic form - C(kind=serve) or a C(line) key, with C(state), C(elapsed_s) and C(line); printed as
        C(<state> <elapsed>, <line>), for example C(loading 4m10s, Loading weights took 612.34 seconds).
    type: path
  interval:
    description: Longest time between two polls, seconds (the first polls come sooner).
    type: int
    default: 15
  timeout:
    description: Give up waiting after this many seconds (the job keeps running).
    type: int
    default: 86400
  label:
    description: Word printed before each progress line.
    type: str
    default: progress
attributes:
  action:
    support: full
    description: Runs on the controller.
  async:
    support: none
    description: It is what waits for an async job.
  check_mode:
    support: none
    description: Only meaningful for a job that runs.
  diff_mode:
    support: none
    description: No diff.
  platform:
    support: full
    platforms: posix
    description: POSIX hosts.
"""

EXAMPLES = r"""
- name: Start the download
  kimi.deploy.hf_snapshot:
    repo_id: moonshotai/Kimi-K2.6
    revision: "{{ kimi_int4_revision }}"
    progress_file: /var/lib/kimi-k26/huggingface/.progress.json
  async: 86400
  poll: 0
  register: kimi_job

- name: Wait for it, one progress line per poll
  kimi.deploy.job_progress:
    jid: "{{ kimi_job.ansible_job_id }}"
    progress_file: /var/lib/kimi-k26/huggingface/.progress.json
    label: weights
  register: kimi_download

- name: Wait for an engine load started with kimi.deploy.serve_ready (async, poll 0)
  kimi.deploy.job_progress:
    jid: "{{ kimi_ready_job.ansible_job_id }}"
    progress_file: /var/lib/kimi-k26/.serve-progress.json
    label: kimi-k26 int4-sglang
    interval: 10
  register: kimi_ready
"""

RETURN = r"""
ansible_job_id:
  description: The job waited for.
  returned: always
  type: str
"""
