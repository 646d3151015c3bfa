# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: probe_cases
short_description: The accuracy probe cases of probe files (each case once per variant), or why a file is refused
version_added: 1.0.0
author: kimi.deploy contributors
description:
  - Loads probe files in the format of roles/kimi_probes/files/kimi-k26-probes.yml as M(kimi.deploy.serve_accuracy)
    does, so that site.yml's preflight refuses a file out of format before any host changes, naming the case and the
    field.
options:
  _input:
    description: The probe files' contents (parsed YAML), a list.
    type: list
    elements: dict
    required: true
"""

EXAMPLES = r"""
- name: Count the probe cases
  ansible.builtin.debug:
    msg: "{{ [lookup('ansible.builtin.file', 'my-probes.yml') | from_yaml] | kimi.deploy.probe_cases | length }}"
"""

RETURN = r"""
_value:
  description: The case ids, one per case and variant (e.g. C(required-weather/think/stream)).
  type: list
  elements: str
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.kimi.deploy.plugins.module_utils import _accuracy as acc


def probe_cases(docs):
    if not isinstance(docs, list):
        raise AnsibleFilterError("kimi.deploy.probe_cases: input must be a list of probe files, got %s"
                                 % type(docs).__name__)
    try:
        return [case["id"] for case in acc.load_all(docs)]
    except acc.ProbeError as exc:
        raise AnsibleFilterError("kimi.deploy.probe_cases: %s" % exc)


class FilterModule(object):
    def filters(self):
        return {"probe_cases": probe_cases}
