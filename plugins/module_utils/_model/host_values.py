# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The host values several roles need, each owned by one role: where its owner declares it and its default, in one
table. The deployment action resolves a host's values (the owner's variable where the host sets it, else the table's
default) into kimi_deployment.host_paths and kimi_deployment.proxy; the other roles receive them as documented inputs
whose defaults read kimi_deployment, never the owner's variables or files. The owners keep their variables with the same
literal defaults (tests/unit/roles/test_role_contracts.py holds them equal to this table). Private to kimi.deploy.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# key of kimi_deployment.host_paths: (the owner's variable, the owner role, its default). A variable with a leading
# underscore is the owner's constant (its vars/main.yml), which no host sets: the default is the value.
HOST_PATHS = {
    # caddy_proxy answers 503 while it exists (a drain); the replica watchdog (kimi_serve) sets it too
    "drain_file": ("caddy_proxy_drain_file", "caddy_proxy", "/etc/caddy/kimi-draining"),
    # the node exporter's textfile folder: the replica watchdog's and the probes' series go there too
    "textfile_dir": ("kimi_metrics_textfile_dir", "kimi_metrics", "/var/lib/prometheus/node-exporter"),
    # where Caddy's `tls internal` keeps its root certificate: what a client of a proxy without its own certificate
    # trusts (the benchmark, Prometheus)
    "ca_root": ("_caddy_proxy_internal_root", "caddy_proxy",
                "/var/lib/caddy/.local/share/caddy/pki/authorities/local/root.crt"),
    # the host's environment file: what serves (the probes and the benchmark read it)
    "env_file": ("kimi_serve_env_file", "kimi_serve", "/etc/kimi-k26.env"),
}

# The host's proxy (caddy_proxy): its site address (default: the inventory name) and its HTTPS port (ports.ROLE_PORTS).
PROXY_ADDRESS = "caddy_proxy_site_address"
PROXY_PORT = "caddy_proxy_https_port"


def is_unset(value):
    return value is None or value == ""


def host_paths(values):
    """{key: path} of HOST_PATHS: `values` are the owners' variables' values where the host sets them."""
    paths = {}
    for key, (variable, _role, default) in HOST_PATHS.items():
        value = None if variable.startswith("_") else (values or {}).get(variable)
        paths[key] = default if is_unset(value) else value
    return paths


def proxy(hostname, address, port):
    """The host's proxy: {address, https_port, url} (address unset: the inventory name)."""
    address = hostname if is_unset(address) else address
    return {"address": address, "https_port": port, "url": "https://%s:%d" % (address, port)}
