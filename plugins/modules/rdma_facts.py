#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: rdma_facts
short_description: Gather the RDMA devices of a host
version_added: 1.0.0
description:
  - Lists the RDMA devices the kernel exposes (the entries of C(/sys/class/infiniband), e.g. C(mlx5_0)), sorted.
  - Sets the fact C(rdma_devices), which C(kimi.deploy.deployment) reads for each host of a disaggregated deployment
    (the KV transfer backend is chosen from whether every host has RDMA devices). Returns the same as C(devices).
  - A host without the folder (no RDMA driver) has none; that is not an error.
  - Changes nothing on the host; C(changed) is always false.
author:
  - kimi.deploy maintainers (@kimi-deploy)
options:
  sys_root:
    description: Where the kernel's C(class/infiniband) folder is (a test points it elsewhere).
    type: path
    default: /sys
notes:
  - Supports check mode (it only reads).
seealso:
  - module: kimi.deploy.gpu_facts
"""

EXAMPLES = r"""
- name: Read the RDMA devices
  kimi.deploy.rdma_facts:
"""

RETURN = r"""
devices:
  description: The RDMA device names, sorted; empty when there are none.
  returned: always
  type: list
  elements: str
  sample: [mlx5_0, mlx5_1]
ansible_facts:
  description: C(rdma_devices), the same list.
  returned: always
  type: dict
  contains:
    rdma_devices:
      description: The RDMA device names, sorted.
      type: list
      elements: str
      returned: always
"""

import os

from ansible.module_utils.basic import AnsibleModule


def devices(sys_root):
    folder = os.path.join(sys_root, "class", "infiniband")
    try:
        return sorted(os.listdir(folder))
    except OSError:  # no RDMA driver loaded: no devices
        return []


def main():
    module = AnsibleModule(argument_spec={"sys_root": {"type": "path", "default": "/sys"}}, supports_check_mode=True)
    found = devices(module.params["sys_root"])
    module.exit_json(changed=False, devices=found, ansible_facts={"rdma_devices": found})


if __name__ == "__main__":
    main()
