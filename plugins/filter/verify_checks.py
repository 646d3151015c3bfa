# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""kimi.deploy.verify_checks: the verify gate's checks, from the one table (module_utils/_model/verify_checks.py)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: verify_checks
short_description: The checks of the verify gate (M(kimi.deploy.serve_verify)), by where they run
version_added: 1.0.0
author: kimi.deploy contributors
description:
  - The one list of the verify gate's checks, which the module, the deployment model and the roles' preflights read.
  - V(engine) - the checks against the engine (C(kimi_serve_verify_checks) may name them; an engine version passes
    those of C(kimi_deployment.verify_checks)); V(proxy) - those C(caddy_proxy_verify_checks) may name;
    V(proxy_default) - C(caddy_proxy_verify_checks)' default; V(module_default) - the module's default; V(all) -
    every check the module knows.
options:
  _input:
    description: Which list.
    type: str
    required: true
    choices: [all, module_default, engine, proxy, proxy_default]
"""

EXAMPLES = r"""
- name: Refuse a check the engine gate does not know
  ansible.builtin.assert:
    that: kimi_serve_verify_checks | difference('engine' | kimi.deploy.verify_checks) | length == 0
"""

RETURN = r"""
_value:
  description: The check names, in the module's order.
  type: list
  elements: str
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.kimi.deploy.plugins.module_utils._model.verify_checks import LISTS


def verify_checks(which):
    if which not in LISTS:
        raise AnsibleFilterError("kimi.deploy.verify_checks: input must be one of %s, got %r"
                                 % (", ".join(sorted(LISTS)), which))
    return list(LISTS[which])


class FilterModule(object):
    def filters(self):
        return {"verify_checks": verify_checks}
