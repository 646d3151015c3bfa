# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""kimi.deploy.pd_layout_mismatch: what differs between the hosts of a disaggregated deployment, or ''."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: pd_layout_mismatch
short_description: What differs between the hosts of a prefill/decode disaggregated deployment
version_added: 0.1.0
author: kimi.deploy contributors
description:
  - The decode instances of a disaggregated deployment read the KV cache the prefill instances send, as it is sent, so
    every host of it must run the same identity, engine version, checkpoint revision, KV cache dtype, transfer backend,
    model name and context length. Reads each host's resolved C(kimi_deployment.pd.layout).
  - Returns the first difference as a sentence naming the variable, both values, and both hosts with their roles; an
    empty string when they agree. site.yml's preflight fails with it before any host is changed.
options:
  _input:
    description: The hosts of the deployment (the fact C(kimi_pd_members)).
    type: list
    elements: str
    required: true
  hostvars:
    description: C(hostvars); each host's C(kimi_deployment) is read.
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: Check prefill and decode agree on the KV layout
  ansible.builtin.assert:
    that: kimi_pd_members | kimi.deploy.pd_layout_mismatch(hostvars) == ''
"""

RETURN = r"""
_value:
  description: The first difference, or an empty string.
  type: str
"""

from ansible_collections.kimi.deploy.plugins.module_utils._pd import layout_mismatch


def pd_layout_mismatch(members, hostvars):
    layouts = []
    for host in members or []:
        pd = ((hostvars.get(host) or {}).get("kimi_deployment") or {}).get("pd")
        if pd:
            layouts.append({"host": host, "role": pd["role"], "layout": pd["layout"]})
    return layout_mismatch(layouts)


class FilterModule(object):
    def filters(self):
        return {"pd_layout_mismatch": pd_layout_mismatch}
