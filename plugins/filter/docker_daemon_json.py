# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: docker_daemon_json
short_description: Merge required settings into an existing Docker daemon.json without losing the site's own keys
version_added: 1.0.0
author: kimi.deploy contributors
description:
  - Returns O(_input) (the parsed C(/etc/docker/daemon.json), or an empty dict) with O(required) merged in.
  - Dicts merge key by key, recursively; a scalar in O(required) replaces the existing value; any other list is
    the union of both, existing entries first.
  - C(exec-opts) entries are C(name=value) options; a required option replaces an existing entry with the same
    name (for example C(native.cgroupdriver=cgroupfs) replaces C(native.cgroupdriver=systemd)), so the list never
    holds two values for one option.
  - Nothing is removed otherwise, so the result equals O(_input) when the file already has every required setting;
    compare the two to write the file only when it changes.
options:
  _input:
    description:
      - The existing configuration (C(from_json) of the file); null or an empty string means no file.
    type: dict
    required: true
  required:
    description:
      - 'The settings that must be present, for example C({"features": {"cdi": true}}).'
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: Merge CDI and the cgroupfs driver into the daemon configuration
  ansible.builtin.set_fact:
    docker_config: >-
      {{ existing | kimi.deploy.docker_daemon_json({'features': {'cdi': true},
                                                    'exec-opts': ['native.cgroupdriver=cgroupfs']}) }}
"""

RETURN = r"""
_value:
  description: The merged configuration.
  type: dict
"""

from ansible.errors import AnsibleFilterError
from ansible.module_utils.common.collections import is_sequence

OPTION_LISTS = ("exec-opts",)  # lists of name=value options: one value per name


def _option_name(entry):
    return entry.split("=", 1)[0].strip() if isinstance(entry, str) else None


def _merge(existing, required, path):
    # A new dict at every level that changes; untouched values are shared, never modified (no deepcopy: it
    # would copy Ansible's lazy template containers).
    merged = dict(existing)
    for key, want in required.items():
        where = "%s.%s" % (path, key) if path else key
        have = merged.get(key)
        if isinstance(want, dict):
            if have is None:
                have = {}
            if not isinstance(have, dict):
                raise AnsibleFilterError("kimi.deploy.docker_daemon_json: %s is a %s in daemon.json, expected an object"
                                         % (where, type(have).__name__))
            merged[key] = _merge(have, want, where)
        elif is_sequence(want):
            if have is None:
                have = []
            if not is_sequence(have):
                raise AnsibleFilterError("kimi.deploy.docker_daemon_json: %s is a %s in daemon.json, expected a list"
                                         % (where, type(have).__name__))
            result = list(have)
            for item in want:
                if key in OPTION_LISTS:
                    name = _option_name(item)
                    result = [entry for entry in result if _option_name(entry) != name or entry == item]
                if item not in result:
                    result.append(item)
            merged[key] = result
        else:
            merged[key] = want
    return merged


def docker_daemon_json(existing, required):
    if existing is None or (isinstance(existing, str) and not existing.strip()):
        existing = {}
    if not isinstance(existing, dict):
        raise AnsibleFilterError("kimi.deploy.docker_daemon_json: daemon.json must hold a JSON object, got %s"
                                 % type(existing).__name__)
    if not isinstance(required, dict):
        raise AnsibleFilterError("kimi.deploy.docker_daemon_json: required must be a dict, got %s"
                                 % type(required).__name__)
    return _merge(existing, required, "")


class FilterModule(object):
    def filters(self):
        return {"docker_daemon_json": docker_daemon_json}
