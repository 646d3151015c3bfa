# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: replica_batches
short_description: The batches of a rolling switch, a replica at a time (never part of a replica)
version_added: 1.0.0
author: kimi.deploy contributors
description:
  - site.yml switches a fleet C(kimi_fleet_serial) at a time. A replica over several hosts is one engine, so it is one
    unit of that count - its hosts are switched together, in one batch.
  - Takes the play's hosts in order, each with the members of its replica (the fact C(kimi_replica_members) set by
    the deployment's resolution; a host alone is a replica of one), and returns the batches as lists of hosts.
  - Fails, saying what to change, when a replica's hosts are not listed one after the other (a batch would split it)
    or when one of them is not in the run (C(--limit)).
options:
  _input:
    description: The play's hosts, in order (C(ansible_play_hosts_all)).
    type: list
    elements: str
    required: true
  hostvars:
    description: C(hostvars); each host's C(kimi_replica_members) is read, when it has one.
    type: dict
    required: true
  serial:
    description: Replicas per batch - a count, or a percentage of the replicas (rounded down, at least 1).
    type: raw
    default: 100%
  canary:
    description:
      - C(kimi_canary) - the first batch is the canary, this many replicas (a count, or a percentage rounded up),
        leaving at least one replica outside it; then C(serial) at a time. Unset - no canary.
    type: raw
"""

EXAMPLES = r"""
- name: Note the batch of each host
  ansible.builtin.group_by:
    key: "kimi_site_batch_{{ '%04d' | format(_index) }}"
  vars:
    _batches: "{{ ansible_play_hosts_all | kimi.deploy.replica_batches(hostvars, kimi_fleet_serial | default('100%')) }}"
"""

RETURN = r"""
_value:
  description: The batches, each a list of hosts, in the play's order.
  type: list
  elements: list
"""


from ansible.errors import AnsibleFilterError
from ansible_collections.kimi.deploy.plugins.module_utils._model import site_inputs as _site_inputs
from ansible_collections.kimi.deploy.plugins.module_utils._model.canary import canary_count
from ansible_collections.kimi.deploy.plugins.module_utils._model.constraints import count_or_share
from ansible_collections.kimi.deploy.plugins.module_utils._model.inputs import DeploymentError


def replicas_in_order(hosts, hostvars):
    """The replicas (lists of hosts) in the order of `hosts`; fails when one is split or partly out of the run."""
    replicas, seen_at = [], {}
    for host in hosts:
        facts = hostvars.get(host) or {}
        # A disaggregated deployment (kimi_pd_members) is switched as one, as a replica is.
        members = list(facts.get("kimi_pd_members") or facts.get("kimi_replica_members") or [host])
        key = tuple(members)
        if key in seen_at and seen_at[key] != len(replicas) - 1:
            between = [h for replica in replicas[seen_at[key] + 1:] for h in replica]
            raise AnsibleFilterError(
                "the hosts of one replica (%s) must be listed one after the other in kimi_servers, but %s come between "
                "them: move them together in the inventory, so that a rolling switch takes the replica at once"
                % (", ".join(members), ", ".join(between)))
        if key not in seen_at:
            missing = [member for member in members if member not in hosts]
            if missing:
                raise AnsibleFilterError(
                    "%s belong(s) to the replica of %s but not to this run (--limit?): a replica (or a disaggregated "
                    "deployment) is deployed whole; add them to --limit" % (", ".join(missing), host))
            seen_at[key] = len(replicas)
            replicas.append(members)
    return replicas


def replica_count(serial, total):
    """Replicas per batch: `serial` as Ansible reads a play's serial (a count, or a percentage rounded down, >= 1).
    The one check of kimi_fleet_serial (site.yml's preflight calls this filter before any change)."""
    try:
        _site_inputs.check_input(_site_inputs.by_variable()["kimi_fleet_serial"], serial)
    except DeploymentError as refused:
        raise AnsibleFilterError("kimi.deploy: %s" % refused)
    number, share = count_or_share(serial)
    return max(1, number * total // 100 if share else number)


def replica_batches(hosts, hostvars, serial="100%", canary=None):
    replicas = replicas_in_order(list(hosts), hostvars)
    size = replica_count(serial, len(replicas))
    first = 0
    if canary not in (None, ""):
        try:
            first = canary_count(canary, len(replicas))
        except DeploymentError as refused:
            raise AnsibleFilterError("kimi.deploy: %s" % refused)
    batches = [replicas[:first]] if first else []
    batches += [replicas[at:at + size] for at in range(first, len(replicas), size)]
    return [[host for replica in batch for host in replica] for batch in batches]


class FilterModule(object):
    def filters(self):
        return {"replica_batches": replica_batches}
