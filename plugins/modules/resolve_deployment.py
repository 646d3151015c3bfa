#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: resolve_deployment
short_description: Resolve the Kimi-K2.6 deployment, or refuse it in one line
description:
  - The same resolution as the P(kimi.deploy.deployment#filter) filter (the deployment model's one validator), as a
    task. It returns the deployment as RV(deployment); a C(set_fact) of it makes C(kimi_deployment).
  - "A bad input fails the task with one clean line, C(kimi.deploy: <variable>=<value> is not allowed: <reason>.
    Allowed values: <...>), printed first, instead of a filter exception inside C(set_fact)."
  - "Every port the host will open is checked in one table: the deployment's (the engine, the replica's rendezvous
    on its head, the PD bootstrap server and router) and the roles' (C(caddy_proxy_https_port),
    C(kimi_weights_peer_port), C(kimi_metrics_node_exporter_port), C(kimi_metrics_accelerator_exporter_port), and
    C(kimi_monitoring_listen_address) on a C(kimi_monitoring) host; unset, the role's default). Two users of one port
    are refused, naming both."
  - This is an action plugin; it runs on the controller and changes nothing.
version_added: 0.3.0
author: kimi.deploy maintainers (@kimi-deploy)
options:
  inputs:
    description: The user inputs, as the filter's input (C(quant), C(engine), C(extra_args), ...).
    type: dict
    required: true
  gpus:
    description: The GPU or NPU list (the C(nvidia_gpus) or C(ascend_npus) fact, or C(kimi_gpus)).
    type: list
    elements: dict
    default: []
  require_revision:
    description: Fail when the checkpoint revision is not set (the plan playbook turns it off).
    type: bool
    default: true
attributes:
  action:
    support: full
    description: Runs on the controller.
  async:
    support: none
    description: Nothing to wait for.
  check_mode:
    support: full
    description: Changes nothing, so it runs in check mode too.
  diff_mode:
    support: none
    description: No diff.
  platform:
    support: full
    platforms: posix
    description: Any host; nothing runs on it.
"""

EXAMPLES = r"""
- name: Resolve the deployment from the inputs and the GPUs
  kimi.deploy.resolve_deployment:
    inputs:
      quant: int4
      engine: sglang
      revisions:
        int4: "{{ kimi_int4_revision }}"
    gpus: "{{ ansible_facts.nvidia_gpus }}"
  register: resolved

- name: Keep it
  ansible.builtin.set_fact:
    kimi_deployment: "{{ resolved.deployment }}"
"""

RETURN = r"""
deployment:
  description:
    - The resolved deployment (what the P(kimi.deploy.deployment#filter) filter returns).
    - Its C(ports) lists every port this host opens, each with its C(port), C(variable) and C(what).
  returned: success
  type: dict
"""
