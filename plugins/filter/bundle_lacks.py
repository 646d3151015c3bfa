# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""kimi.deploy.bundle_lacks: what an air-gap bundle lacks for one host."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: bundle_lacks
short_description: What an air-gap bundle lacks for one host
version_added: 1.0.0
author: kimi.deploy contributors
description:
  - Compares a host's needs (P(kimi.deploy.bundle_needs#filter)) with the components of a bundle's manifest (as
    M(kimi.deploy.bundle_manifest) returns them) and says what is missing, one sentence each. C(site.yml) fails with
    them before any host is changed.
options:
  _input:
    description: The bundle's components.
    type: dict
    required: true
  need:
    description: The host's needs.
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: Refuse a bundle that lacks what this host needs
  ansible.builtin.assert:
    that: _lacks | length == 0
    fail_msg: "The bundle lacks {{ _lacks | join('; ') }}"
  vars:
    _lacks: "{{ kimi_site_bundle.components | kimi.deploy.bundle_lacks(kimi_bundle_need) }}"
"""

RETURN = r"""
_value:
  description: One sentence per missing image, checkpoint, apt repository or package; empty when nothing lacks.
  type: list
  elements: str
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.kimi.deploy.plugins.module_utils._bundle.layout import lacks


def bundle_lacks(components, need):
    if not isinstance(need, dict) or "images" not in need:
        raise AnsibleFilterError("kimi.deploy.bundle_lacks: need must be what kimi.deploy.bundle_needs returns")
    return lacks(components if isinstance(components, dict) else {}, need)


class FilterModule(object):
    def filters(self):
        return {"bundle_lacks": bundle_lacks}
