# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: running_requests
short_description: How many requests an engine is running, from its Prometheus /metrics text
version_added: 1.0.0
author: kimi.deploy contributors
description:
  - Sums the engine's running-request gauges - vLLM's C(vllm:num_requests_running) and SGLang's
    C(sglang:num_running_reqs) - over all their label sets (one per model name or engine rank).
  - "Requests waiting in the queue count too (C(vllm:num_requests_waiting), C(sglang:num_queue_reqs)): they are in
    flight for the client."
  - Used by caddy_proxy's drain to wait until a host has nothing in flight before it is switched.
  - "No gauge in the text (metrics off, another program on the port) gives C(None), not 0: an engine that does not
    say how many requests it runs is not known to be idle."
options:
  _input:
    description: The text of C(GET /metrics).
    type: str
    required: true
"""

EXAMPLES = r"""
- name: Wait until nothing runs
  ansible.builtin.uri:
    url: http://127.0.0.1:30000/metrics
    return_content: true
  register: metrics
  until: metrics.content | kimi.deploy.running_requests == 0
  retries: 60
  delay: 2
"""

RETURN = r"""
_value:
  description: The number of requests running or queued; C(None) when the text has none of the gauges.
  type: int
"""

import re

from ansible.errors import AnsibleFilterError

GAUGES = ("vllm:num_requests_running", "vllm:num_requests_waiting", "sglang:num_running_reqs", "sglang:num_queue_reqs",
          "trtllm_num_requests_running", "trtllm_num_requests_waiting")
LINE_RE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{[^}]*\})?\s+(?P<value>[-+0-9.eEInfa]+)(?:\s+\d+)?$")


def running_requests(text):
    if text is None:
        return None
    if not isinstance(text, str):
        raise AnsibleFilterError("kimi.deploy.running_requests: input must be the /metrics text, got %s"
                                 % type(text).__name__)
    total, seen = 0.0, False
    for line in text.splitlines():
        match = LINE_RE.match(line.strip())
        if match and match.group("name") in GAUGES:
            try:
                total += float(match.group("value"))
            except ValueError:
                continue
            seen = True
    return int(round(total)) if seen else None


class FilterModule(object):
    def filters(self):
        return {"running_requests": running_requests}
