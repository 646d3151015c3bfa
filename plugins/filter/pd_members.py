# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""kimi.deploy.pd_members: the hosts of a disaggregated deployment as the deployment filter's `pd.members` input."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: pd_members
short_description: The hosts of a prefill/decode disaggregated deployment, as the deployment filter reads them
version_added: 0.1.0
author: kimi.deploy contributors
description:
  - For each host (in inventory order) its C(kimi_pd_role), its address on the deployment's network
    (C(kimi_pd_address), else C(ansible_host), else its inventory name), its C(kimi_replica) (an instance over several
    hosts), its C(kimi_engine_port) and its RDMA devices (C(kimi_pd_rdma_devices), else the names found under
    C(/sys/class/infiniband), registered as C(_kimi_pd_rdma_found)).
  - Reads only; P(kimi.deploy.deployment#filter) validates every value.
options:
  _input:
    description: The hosts (the fact C(kimi_pd_members)).
    type: list
    elements: str
    required: true
  hostvars:
    description: C(hostvars).
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: The members of this host's disaggregated deployment
  ansible.builtin.debug:
    msg: "{{ kimi_pd_members | kimi.deploy.pd_members(hostvars) }}"
"""

RETURN = r"""
_value:
  description: One dict per host, C(host), C(role), C(address), C(replica), C(port), C(rdma_devices).
  type: list
  elements: dict
"""

import posixpath


def pd_members(hosts, hostvars):
    out = []
    for host in hosts or []:
        facts = hostvars.get(host) or {}
        devices = facts.get("kimi_pd_rdma_devices")
        if devices is None:
            found = (facts.get("_kimi_pd_rdma_found") or {}).get("files") or []
            devices = sorted(posixpath.basename(f["path"]) for f in found)
        out.append({"host": host, "role": facts.get("kimi_pd_role"),
                    "address": facts.get("kimi_pd_address") or facts.get("ansible_host") or host,
                    "replica": facts.get("kimi_replica"), "port": facts.get("kimi_engine_port"),
                    "rdma_devices": devices})
    return out


class FilterModule(object):
    def filters(self):
        return {"pd_members": pd_members}
