# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: gateway_change
short_description: What one gateway's router did with a switching host's instance, from kimi.deploy.gateway_workers
version_added: 1.0.0
author: kimi.deploy contributors
description:
  - "Says what the router did, read from the module's result (its worker list before and after), not what was asked -
    C(removed <url>), C(added <url>), C(did not list <url>) (nothing to take out: the instance is not a worker of it, or
    is known there by another URL), C(set the slots of <url>) (a listed worker given its max_running_requests label),
    C(listed it already), or C(not running yet) (a first deployment)."
  - "kimi_switch's gateway step says it per gateway, so a switch's output shows a removal only where one happened."
options:
  _input:
    description: One result of C(kimi.deploy.gateway_workers) (a loop item's result).
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: Say what each gateway did
  ansible.builtin.debug:
    msg: "{{ result.results | map('kimi.deploy.gateway_change') | join('; ') }}"
"""

RETURN = r"""
_value:
  description: The change, in words.
  type: str
"""

from ansible.errors import AnsibleFilterError


def gateway_change(result):
    if not isinstance(result, dict):
        raise AnsibleFilterError("kimi.deploy.gateway_change: input must be a gateway_workers result, got %s"
                                 % type(result).__name__)
    if result.get("skipped"):
        return "skipped"
    if result.get("failed"):
        return "failed: %s" % result.get("msg", "")
    if result.get("router_down"):
        return "not running yet (nothing to change)"
    parts = []
    relabelled = [u for u in result.get("labelled") or [] if u not in (result.get("added") or [])]
    for words, urls in (("removed", result.get("removed")), ("added", result.get("added")),
                        ("set the slots of", relabelled), ("did not list", result.get("not_listed"))):
        if urls:
            parts.append("%s %s" % (words, ", ".join(urls)))
    return ", ".join(parts) or "listed it already"


class FilterModule(object):
    def filters(self):
        return {"gateway_change": gateway_change}
