# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: prometheus_scrape
short_description: Prometheus scrape configurations for the hosts kimi.deploy serves, through their proxies
version_added: 1.0.0
author: kimi.deploy contributors
description:
  - One scrape job per kind of series - C(kimi-engine) (C(/metrics)), C(kimi-node) (C(/metrics/node)),
    C(kimi-accelerator) (C(/metrics/accelerator)), C(kimi-caddy) (C(/metrics/caddy)), C(kimi-router) (C(/metrics/router),
    a disaggregated deployment's router host) - over HTTPS to each host's
    Caddy, with a bearer metrics key read from a file (never in the configuration itself).
  - The paths and jobs come from the one table of metrics routes, as the routes of P(kimi.deploy.metrics_routes#filter)
    do.
  - Every target is labelled C(instance) (the inventory name) and C(replica) (C("") for a host alone).
  - Hosts whose metrics keys differ get one job per key (C(kimi-engine-<digest>)), relabelled to the same C(job).
options:
  _input:
    description: The targets, C({host, address, port, replica, key, paths, engine}); C(paths) are the metrics paths the
      host's proxy serves (C(kimi_metrics_routes)' paths); the engine's C(/metrics) is scraped on every target but one
      with C(engine) false (a fleet gateway's site).
    type: list
    elements: dict
    required: true
  key_dir:
    description: The folder on the Prometheus host where each key is a file C(kimi-metrics-<digest>.key).
    type: str
    required: true
  ca_file:
    description: The CA bundle that verifies the proxies' certificates; empty for the system's trust store.
    type: str
    default: ""
  interval:
    description: The scrape interval.
    type: str
    default: 15s
"""

EXAMPLES = r"""
- name: Render the scrape configuration
  ansible.builtin.copy:
    content: "{{ {'scrape_configs': _targets | kimi.deploy.prometheus_scrape(key_dir='/etc/prometheus')} | to_nice_yaml }}"
    dest: /tmp/scrape.yml
    mode: "0644"
"""

RETURN = r"""
_value:
  description: C({scrape_configs, keys}); C(keys) maps each key file's path to its key (write it with no_log).
  type: dict
"""

import hashlib

from ansible.errors import AnsibleFilterError
from ansible_collections.kimi.deploy.plugins.module_utils._model.metrics_routes import ENGINE_PATH, JOBS


def prometheus_scrape(targets, key_dir, ca_file="", interval="15s"):
    if not isinstance(targets, list):
        raise AnsibleFilterError("kimi.deploy.prometheus_scrape: input must be a list of targets, got %s"
                                 % type(targets).__name__)
    by_key, keys, key_files = {}, {}, {}
    for t in targets:
        for field in ("host", "address", "port", "key"):
            if not t.get(field):
                raise AnsibleFilterError(
                    "kimi.deploy.prometheus_scrape: target %s has no %s (a host Prometheus scrapes needs "
                    "caddy_proxy_metrics_keys, the metrics key its proxy accepts)" % (t.get("host", "?"), field))
        digest = hashlib.sha256(str(t["key"]).encode()).hexdigest()[:12]
        key_files[digest] = "%s/kimi-metrics-%s.key" % (key_dir.rstrip("/"), digest)
        keys[key_files[digest]] = str(t["key"])
        by_key.setdefault(digest, []).append(t)
    configs = []
    for metrics_path, job in JOBS:
        for digest in sorted(by_key):
            hosts = [t for t in by_key[digest]
                     if metrics_path in ([ENGINE_PATH] if t.get("engine", True) else []) + list(t.get("paths") or [])]
            if not hosts:
                continue
            config = {
                "job_name": job if len(by_key) == 1 else "%s-%s" % (job, digest),
                "scheme": "https",
                "metrics_path": metrics_path,
                "scrape_interval": interval,
                "authorization": {"type": "Bearer", "credentials_file": key_files[digest]},
                "static_configs": [{"targets": ["%s:%s" % (t["address"], t["port"])],
                                    "labels": {"instance": t["host"], "replica": t.get("replica") or ""}}
                                   for t in hosts],
            }
            if ca_file:
                config["tls_config"] = {"ca_file": ca_file}
            if len(by_key) > 1:
                config["relabel_configs"] = [{"target_label": "job", "replacement": job}]
            configs.append(config)
    return {"scrape_configs": configs, "keys": keys}


class FilterModule(object):
    def filters(self):
        return {"prometheus_scrape": prometheus_scrape}
