#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: deployment
short_description: Resolve this host's Kimi-K2.6 deployment from its site variables and groups, or refuse it in one line
description:
  - The one way C(kimi_deployment) is made (site.yml, plan.yml, bundle.yml and the test scenarios run it). It reads
    this host's site variables (C(quant), C(engine), C(kimi_*); the map is the deployment model's) and the hostvars of
    the hosts of its replica (C(kimi_replica)) and disaggregated deployment (C(kimi_pd)), resolves the deployment with
    the model's resolver (its one validator, which the P(kimi.deploy.deployment#filter) filter calls too) and sets
    the facts C(kimi_deployment), C(kimi_replica_members) (this host's replica in inventory order, the head first; a
    host without C(kimi_replica) is a replica of one) and C(kimi_pd_members) (the hosts of its disaggregated
    deployment, or an empty list).
  - "A bad input fails the task with one clean line, C(kimi.deploy: <variable>=<value> is not allowed: <reason>.
    Allowed values: <...>), printed first."
  - "Every port the host will open is checked in one table: the deployment's (the engine, the replica's rendezvous
    on its head, the PD bootstrap server and router) and the roles' (C(caddy_proxy_https_port),
    C(kimi_weights_peer_port), C(kimi_metrics_node_exporter_port), C(kimi_metrics_accelerator_exporter_port), and
    C(kimi_monitoring_listen_address) on a C(kimi_monitoring) host; unset, the role's default). Two users of one port
    are refused, naming both."
  - "The hosts that serve as one must agree, and are compared on every call: each host of this host's replica and
    disaggregated deployment is resolved from its own site variables and accelerators (its C(kimi_gpus), else its
    facts), and a replica whose hosts resolve another command than its head, or a disaggregated deployment whose hosts
    resolve another KV layout than its first host, is refused, naming the host and what differs. Hosts whose
    accelerators are not read yet (bare, before the driver) are compared once they are."
  - A disaggregated deployment's RDMA devices are C(kimi_pd_rdma_devices) where set, else the C(rdma_devices) fact
    (M(kimi.deploy.rdma_facts)) of that host.
  - C(kimi_image), the old name of C(kimi_engine_image), is still read, with a deprecation warning.
  - This is an action plugin; it runs on the controller and changes nothing.
version_added: 1.0.0
author: kimi.deploy maintainers (@kimi-deploy)
options:
  gpus:
    description:
      - The GPU or NPU list. Default C(kimi_gpus) when it is set, else the C(ascend_npus) fact when it lists NPUs,
        else the C(nvidia_gpus) fact.
    type: list
    elements: dict
  require_revision:
    description:
      - Fail when the checkpoint revision is not set. Default C(kimi_require_revision), else true (plan.yml turns it
        off).
    type: bool
  plan_hosts:
    description:
      - plan.yml's preview of a replica of this many example hosts (1 to 16) for a host that has no C(kimi_replica)
        (C(make plan HOSTS=), C(kimi_replica_plan_hosts)).
    type: int
  pd_plan:
    description:
      - plan.yml's preview of a disaggregated deployment (C(1P1D), C(2P2D), ...) for a host that has no C(kimi_pd)
        (C(make plan PD=), C(kimi_pd_plan)).
    type: str
  changed_so_far:
    description:
      - What has changed on the hosts when this runs, appended to a refusal (site.yml - nothing in preflight; only
        the host stage when it resolves again after the driver).
    type: str
  inputs_only:
    description:
      - Check every site input this host sets against its constraint (and a canary against the fleet) and stop there,
        setting no fact. site.yml's preflight does this first, before any task reads the hosts (the disk read test
        keeps a figure on a host); the full call checks them again on the same path.
    type: bool
    default: false
attributes:
  action:
    support: full
    description: Runs on the controller.
  async:
    support: none
    description: Nothing to wait for.
  check_mode:
    support: full
    description: Changes nothing, so it runs in check mode too.
  diff_mode:
    support: none
    description: No diff.
  platform:
    support: full
    platforms: posix
    description: Any host; nothing runs on it.
"""

EXAMPLES = r"""
- name: Resolve the deployment (sets kimi_deployment, kimi_replica_members and kimi_pd_members)
  kimi.deploy.deployment:

- name: Preview a two-host replica of this host's GPUs, without a pinned revision (what plan.yml does)
  kimi.deploy.deployment:
    gpus: "{{ kimi_gpus }}"
    require_revision: false
    plan_hosts: 2
"""

RETURN = r"""
deployment:
  description:
    - The resolved deployment (what the P(kimi.deploy.deployment#filter) filter returns).
    - Its C(ports) lists every port this host opens, each with its C(port), C(variable) and C(what).
  returned: success
  type: dict
"""
