# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""kimi.deploy.bundle_inputs: the non-secret inputs of one host, for an air-gap bundle's inventory copy."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: bundle_inputs
short_description: The non-secret inputs of one host, for an air-gap bundle's inventory copy
version_added: 1.0.0
author: kimi.deploy contributors
description:
  - Keeps the collection's inputs (C(quant), C(engine), C(kimi_*), C(nvidia_host_*), C(ascend_host_*),
    C(caddy_proxy_*)) of a host's variables and drops every secret - the options the argument specs mark C(no_log)
    and any name that says it holds a token, key, password or secret. The offline side gives its secrets again.
options:
  _input:
    description: The host's variables (C(hostvars[host])).
    type: dict
    required: true
  argument_specs:
    description: Parsed argument spec documents whose C(no_log) options are secrets.
    type: list
    elements: dict
    default: []
"""

EXAMPLES = r"""
- name: The non-secret inputs of each host
  ansible.builtin.set_fact:
    _inputs: "{{ hostvars[item] | kimi.deploy.bundle_inputs(_specs) }}"
  loop: "{{ groups['kimi_servers'] }}"
"""

RETURN = r"""
_value:
  description: The kept variables, by name.
  type: dict
"""

from ansible_collections.kimi.deploy.plugins.module_utils._bundle.layout import inputs, secret_names


def bundle_inputs(host_vars, argument_specs=None):
    return inputs(dict(host_vars or {}), secret_names(argument_specs or []))


class FilterModule(object):
    def filters(self):
        return {"bundle_inputs": bundle_inputs}
