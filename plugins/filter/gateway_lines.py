# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: gateway_lines
short_description: The fleet gateway as lines for people (router, policy and why, every worker, the command)
version_added: 1.0.0
author: kimi.deploy contributors
description:
  - Formats the C(kimi_gateway) fact that the M(kimi.deploy.gateway) action sets on a host of kimi_gateways;
    site.yml's preflight and playbooks/plan.yml (C(make plan FLEET=2)) print it.
options:
  _input:
    description: The resolved gateway (the C(kimi_gateway) fact).
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: Say what the gateway routes and why
  ansible.builtin.debug:
    msg: "{{ kimi_gateway | kimi.deploy.gateway_lines }}"
"""

RETURN = r"""
_value:
  description: The lines.
  type: list
  elements: str
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.kimi.deploy.plugins.module_utils._model.gateway import gateway_lines


def gateway_lines_filter(gateway):
    try:
        return gateway_lines(gateway)
    except (KeyError, TypeError, ValueError) as e:
        raise AnsibleFilterError("kimi.deploy.gateway_lines: the input is not a resolved gateway (%s)" % e)


class FilterModule(object):
    def filters(self):
        return {"gateway_lines": gateway_lines_filter}
