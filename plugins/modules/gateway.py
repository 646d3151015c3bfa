#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: gateway
short_description: Resolve the fleet gateway on a host of kimi_gateways - its router, policy and every worker
description:
  - Resolves every host of C(kimi_servers) from its own site variables and accelerators (as
    M(kimi.deploy.deployment) resolves a group's members), takes the serving instances (a host alone, a replica's
    head) and sets the fact C(kimi_gateway) - the router (SMG with C(cache_aware), whatever the engines) and why, its
    policy, every worker URL and its command, every option checked against the router's pinned flag list, the
    priority classes and limits per client key name (C(caddy_proxy_clients)' C(priority) and C(limits), checked by the
    rule the caddy_proxy role applies), and Caddy's gateway site.
  - The settings are kimi_gateway's role variables (C(kimi_gateway_router), C(kimi_gateway_policy),
    C(kimi_gateway_port), C(kimi_gateway_metrics_port), C(kimi_gateway_https_port),
    C(kimi_gateway_router_extra_args), C(kimi_gateway_retry)) and this host's C(caddy_proxy_clients); unset, the
    role's default.
  - "A bad input fails the task with one clean line, C(kimi.deploy: <variable>=<value> is not allowed: <reason>.
    Allowed values: <...>) - a router that does not serve an engine of the fleet, a policy the router lacks, an
    instance whose engine listens on loopback, two model names, a disaggregated deployment behind the gateway."
  - This is an action plugin; it runs on the controller and changes nothing.
version_added: 1.0.0
author: kimi.deploy maintainers (@kimi-deploy)
options:
  plan_fleet:
    description:
      - plan.yml's preview of a fleet of this many example hosts (1 to 64) resolved as this host is
        (C(make plan FLEET=), C(kimi_fleet_plan)).
    type: int
  changed_so_far:
    description: What has changed on the hosts when this runs, appended to a refusal.
    type: str
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
- name: Resolve the gateway (sets kimi_gateway)
  kimi.deploy.gateway:
"""

RETURN = r"""
gateway:
  description: The resolved gateway (router, title, version, why, policy, workers, port, metrics_port, https_port,
    url, command, served_model_name, verify_checks, site, warnings); each worker with its url, host, identity and
    max_running_requests (its slots for SMG's priority scheduler, or null where the engine reports its own).
  returned: success
  type: dict
"""
