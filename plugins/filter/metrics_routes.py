# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""kimi.deploy.metrics_routes: the metrics routes Caddy serves, their paths from the one table
(module_utils/_model/metrics_routes.py)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: metrics_routes
short_description: The metrics routes a host's Caddy serves to a metrics key, with their paths
version_added: 1.0.0
author: kimi.deploy contributors
description:
  - The one table of the metrics paths - C(engine) (C(/metrics)), C(node) (C(/metrics/node)), C(accelerator)
    (C(/metrics/accelerator)), C(caddy) (C(/metrics/caddy)), C(router) (C(/metrics/router)) - gives each route its
    path; the scrape jobs of P(kimi.deploy.prometheus_scrape#filter) come from the same table.
  - caddy_proxy makes its engine route with it, kimi_metrics the others (C(kimi_metrics_routes)).
options:
  _input:
    description:
      - The upstream of each route this host serves, by the route's name - C({upstream, upstream_path}), where
        C(upstream) is C(host:port) (or C(caddy) for Caddy's own metrics) and C(upstream_path) the path there.
      - A route whose value is empty or null is not served here.
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: The routes of the node exporter and Caddy's own metrics
  ansible.builtin.debug:
    msg: >-
      {{ {'node': {'upstream': '127.0.0.1:9100', 'upstream_path': '/metrics'},
          'caddy': {'upstream': 'caddy', 'upstream_path': '/metrics'}} | kimi.deploy.metrics_routes }}
"""

RETURN = r"""
_value:
  description: The routes, C({name, path, upstream, upstream_path}), in the table's order.
  type: list
  elements: dict
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.kimi.deploy.plugins.module_utils._model.metrics_routes import RouteError, routes


def metrics_routes(upstreams):
    if not isinstance(upstreams, dict):
        raise AnsibleFilterError("kimi.deploy.metrics_routes: input must be a dict of upstreams by route name, got %s"
                                 % type(upstreams).__name__)
    try:
        return routes(upstreams)
    except RouteError as exc:
        raise AnsibleFilterError("kimi.deploy.metrics_routes: %s" % exc)


class FilterModule(object):
    def filters(self):
        return {"metrics_routes": metrics_routes}
