# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: plan_lines
short_description: A resolved Kimi-K2.6 deployment as lines for people (identity, why, checkpoint, image, command)
version_added: 1.0.0
author: kimi.deploy contributors
description:
  - "Returns the plan of a resolved deployment (C(kimi_deployment), set by M(kimi.deploy.deployment), or what
    P(kimi.deploy.deployment#filter) returns), one C(key: value) line each:
    identity and engine version, the reasons, the hardware verdict, checkpoint and revision, image, KV/MoE/memory
    settings, the served model name and address, the exact engine command line, and the warnings."
  - playbooks/plan.yml prints it; it formats only, every value comes from the deployment model.
options:
  _input:
    description: The resolved deployment (the C(kimi_deployment) fact).
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: Show the resolved deployment
  ansible.builtin.debug:
    msg: "{{ kimi_deployment | kimi.deploy.plan_lines }}"
"""

RETURN = r"""
_value:
  description: The lines.
  type: list
  elements: str
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.kimi.deploy.plugins.module_utils._model.report import plan_lines


def plan_lines_filter(deployment):
    try:
        return plan_lines(deployment)
    except (KeyError, TypeError, ValueError) as e:
        raise AnsibleFilterError("kimi.deploy.plan_lines: the input is not a resolved deployment (%s)" % e)


class FilterModule(object):
    def filters(self):
        return {"plan_lines": plan_lines_filter}
