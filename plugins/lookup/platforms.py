# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""kimi.deploy.platforms: the accelerator platforms' entries, as data, in the order hosts are read."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: platforms
short_description: The accelerator platforms kimi.deploy serves on, as data
version_added: 1.0.0
description:
  - Returns one dict per accelerator platform (NVIDIA GPUs, Huawei Ascend NPUs), in the order hosts are read - the
    platform's host role, the facts its facts module sets, how it names its accelerators, the processes probe, the
    container device arguments, the collective library's environment of a multi-host replica, and its metrics
    exporter.
  - The playbooks and roles read these fields instead of asking which platform a host is on; a resolved deployment
    carries its own platform's entry as C(kimi_deployment.platform_traits).
author: kimi.deploy maintainers (@kimi-deploy)
options:
  _terms:
    description: Platform names to return (default - all of them).
    type: list
    elements: str
    required: false
"""

EXAMPLES = r"""
- name: Say which host roles exist
  ansible.builtin.debug:
    msg: "{{ lookup('kimi.deploy.platforms', wantlist=True) | map(attribute='host_role') | list }}"
"""

RETURN = r"""
_raw:
  description: One dict per platform, with its C(name).
  type: list
  elements: dict
"""

from ansible.errors import AnsibleError
from ansible.plugins.lookup import LookupBase
from ansible_collections.kimi.deploy.plugins.module_utils._model.platforms import ORDER, entries


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        unknown = [term for term in terms if term not in ORDER]
        if unknown:
            raise AnsibleError("kimi.deploy.platforms: unknown platform(s) %s; known: %s"
                               % (", ".join(unknown), ", ".join(ORDER)))
        return [entry for entry in entries() if not terms or entry["name"] in terms]
