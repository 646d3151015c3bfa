# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: hour_cost
short_description: What a host's accelerators cost per hour at kimi_gpu_hour_cost's prices
version_added: 1.0.0
author: kimi.deploy contributors
description:
  - The figure C(kimi_deployment.hour_cost) holds after site.yml's preflight, for a play that did not resolve the
    deployment (playbooks/bench.yml's cost per million output tokens). The host's accelerators are read as the
    deployment reads them (O(given) where set, else the facts its platform's facts module set).
options:
  _input:
    description: The host's C(ansible_facts).
    type: dict
    required: true
  costs:
    description: C(kimi_gpu_hour_cost), a price per accelerator-hour for each model.
    type: dict
    required: true
  given:
    description: C(kimi_gpus) where the inventory or C(-e) gives the accelerator list.
    type: list
    elements: dict
"""

EXAMPLES = r"""
- name: Say what the host costs per hour
  ansible.builtin.debug:
    msg: "{{ (ansible_facts | kimi.deploy.hour_cost(kimi_gpu_hour_cost, given=kimi_gpus | default(none))).why }}"
"""

RETURN = r"""
_value:
  description: C(per_hour) (null without a price for the host's model), C(accelerators) (e.g. C(8 x NVIDIA H200)) and
    C(why).
  type: dict
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.kimi.deploy.plugins.module_utils._model import site as _site
from ansible_collections.kimi.deploy.plugins.module_utils._model.accelerators import summarize
from ansible_collections.kimi.deploy.plugins.module_utils._model.cost import check_costs, hour_cost
from ansible_collections.kimi.deploy.plugins.module_utils._model.inputs import DeploymentError


def hour_cost_filter(facts, costs, given=None):
    try:
        host_vars = {"ansible_facts": dict(facts or {})}
        if given is not None:
            host_vars["kimi_gpus"] = given
        listed = _site.accelerators(lambda _host, variable: host_vars.get(variable, _site.MISSING), None)
        return hour_cost(summarize(listed) if listed else None, check_costs(costs))
    except (DeploymentError, ValueError) as e:
        raise AnsibleFilterError("kimi.deploy.hour_cost: %s" % e)


class FilterModule(object):
    def filters(self):
        return {"hour_cost": hour_cost_filter}
