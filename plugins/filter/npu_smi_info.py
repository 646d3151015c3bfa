# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: npu_smi_info
short_description: The chips and processes of C(npu-smi info) text
version_added: 1.0.0
author: kimi.deploy contributors
description:
  - Reads the text C(npu-smi info) prints (Atlas 800 A2 and A3 layouts) with the parser kimi.deploy.npu_facts uses.
  - For output that was not read by npu_facts, such as C(npu-smi info) run inside a container (ascend_host's container
    check) or in a launcher's log.
options:
  _input:
    description: The text of C(npu-smi info).
    type: str
    required: true
"""

EXAMPLES = r"""
- name: The container sees every NPU
  ansible.builtin.assert:
    that: (container_check.stdout | kimi.deploy.npu_smi_info).chips | length == 16
"""

RETURN = r"""
_value:
  description: "version (npu-smi's), chips (npu, chip, phy_id, name, health, bus_id, hbm_used_mib, hbm_total_mib) and
    processes (npu, chip, pid, name, memory_mib)."
  type: dict
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.kimi.deploy.plugins.module_utils._model.npu import NpuParseError, parse_npu_smi_info


def npu_smi_info(text):
    if not isinstance(text, str):
        raise AnsibleFilterError("kimi.deploy.npu_smi_info: input must be the text of npu-smi info, got %s"
                                 % type(text).__name__)
    try:
        return parse_npu_smi_info(text)
    except NpuParseError as exc:
        raise AnsibleFilterError("kimi.deploy.npu_smi_info: %s" % exc)


class FilterModule(object):
    def filters(self):
        return {"npu_smi_info": npu_smi_info}
