# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The controller's view of the inventory that the collection's action plugins share (kimi.deploy.deployment and
kimi.deploy.gateway): a host's variables templated once, its deployment resolved from its own inputs, groups and
accelerators, and the roles' ports and shared host values with the model tables' defaults (_model/ports.py,
_model/host_values.py). Controller-side only (it templates); never opens a role's files. Private to kimi.deploy."""

from __future__ import annotations

import json
import os

import yaml
from ansible_collections.kimi.deploy.plugins.module_utils._model import host_values as _host_values
from ansible_collections.kimi.deploy.plugins.module_utils._model import ports as _ports
from ansible_collections.kimi.deploy.plugins.module_utils._model import role_inputs as _role_inputs
from ansible_collections.kimi.deploy.plugins.module_utils._model import site as _site
from ansible_collections.kimi.deploy.plugins.module_utils._model import site_inputs as _site_inputs
from ansible_collections.kimi.deploy.plugins.module_utils._model.canary import canary_count
from ansible_collections.kimi.deploy.plugins.module_utils._model.deployment import DeploymentError, resolve


def role_ports(values, groups):
    """[(port, variable, what)] of the roles on this host: `values` are the variables' values where set (else None:
    the table's default, _model/ports.ROLE_PORTS); a port of a group's role only on that group's hosts."""
    uses = []
    for variable, (_role, what, group, default) in _ports.ROLE_PORTS.items():
        if group and group not in groups:
            continue
        value = (values or {}).get(variable)
        uses.append((_ports.role_port(variable, default if value in (None, "") else value), variable, what))
    return uses


class Site:
    """A run's view of the inventory for one task: hosts' variables (templated once), and a host's deployment
    resolved from its own inputs, groups and accelerators (kimi.deploy.gateway resolves the fleet with it too)."""

    def __init__(self, templar, task_vars, require_revision=None):
        self.templar, self.task_vars = templar, task_vars
        self.me = task_vars["inventory_hostname"]
        self.hostvars = task_vars.get("hostvars") or {}
        groups = task_vars.get("groups") or {}
        self.servers = list(groups.get("kimi_servers") or [])
        self.gateways = list(groups.get("kimi_gateways") or [])
        self.seen = {}
        if require_revision is None:
            require_revision = _site.value(self.get, self.me, "kimi_require_revision", True)
        self.require_revision = bool(require_revision)

    def get(self, host, variable):
        """A host's value of a variable, templated once per task; this host's from the task's variables (play vars
        too)."""
        key = (host, variable)
        if key not in self.seen:
            if host == self.me:
                found = (self.templar.template(self.task_vars[variable]) if variable in self.task_vars
                         else _site.MISSING)
            else:
                facts = self.hostvars[host] if host in self.hostvars else {}
                found = facts[variable] if variable in facts else _site.MISSING
            self.seen[key] = found
        return self.seen[key]

    def replica(self, host):
        return _site.replica_members(self.get, host, self.servers)

    def pd(self, host):
        return _site.pd_members(self.get, host, self.servers)

    def resolve_host(self, host, gpus=None, **previews):
        """A host's deployment from its own inputs, groups and accelerators."""
        inputs = _site.inputs(self.get, host, self.replica(host), self.pd(host), gateways=self.gateways, **previews)
        return resolve(inputs, _site.accelerators(self.get, host) if gpus is None else gpus,
                       require_revision=self.require_revision)

    def resolve_member(self, host, group="this host's group"):
        try:
            return self.resolve_host(host)
        except DeploymentError as refused:
            raise DeploymentError("%s, a host of %s, is refused: %s" % (host, group, refused))

    def check_inputs(self, host):
        """Every site input `host` sets, against its constraint in the table (_site_inputs), and every role input
        of _role_inputs; then what one input allows given others: the one check path of plan.yml, site.yml and
        bundle.yml, before any host changes."""
        ctx = {"cwd": os.getcwd(), "playbook_dir": self.task_vars.get("playbook_dir")}
        _site_inputs.check_site(self.get, host, ctx, missing=_site.MISSING)
        _role_inputs.check_roles(self.get, host, missing=_site.MISSING)
        canary = _site.value(self.get, host, "kimi_canary")
        if canary not in (None, ""):
            fleet = _site.value(self.get, host, "kimi_fleet_plan")
            if not self.gateways and fleet in (None, ""):
                raise DeploymentError(
                    "kimi_canary=%r is not allowed: a canary is compared with the rest of the fleet on the traffic of "
                    "the fleet gateway, and the inventory has no host in kimi_gateways. Allowed values: unset, or a "
                    "gateway in the inventory (kimi_gateways)" % (canary,))
            canary_count(canary, int(fleet) if fleet not in (None, "") else self.replica_count())

    def replica_count(self):
        """The fleet's replicas: its hosts alone, replicas and disaggregated deployments, each counted once."""
        return len(set(tuple(self.pd(h) or self.replica(h)) for h in self.servers)) or 1

    def role_values(self, host, variables=None):
        """The roles' variables (their ports, else `variables`) set for `host` (unset ones are left to the tables'
        defaults)."""
        return dict((variable, self.get(host, variable)) for variable in (variables or _ports.ROLE_PORTS)
                    if self.get(host, variable) is not _site.MISSING)

    def host_values(self, host):
        """The host values several roles share (_model/host_values): {host_paths, proxy}, each the owner's variable
        where `host` sets it, else the table's default."""
        variables = [v for v, _r, _d in _host_values.HOST_PATHS.values() if not v.startswith("_")]
        values = self.role_values(host, variables + [_host_values.PROXY_ADDRESS, _host_values.PROXY_PORT])
        port = values.get(_host_values.PROXY_PORT)
        port = _ports.role_port(_host_values.PROXY_PORT, _ports.ROLE_PORTS[_host_values.PROXY_PORT][3]
                                if port in (None, "") else port)
        return {"host_paths": _host_values.host_paths(values),
                "proxy": _host_values.proxy(host, values.get(_host_values.PROXY_ADDRESS), port)}


# The collection's root: plugins/plugin_utils/ is two folders below it.
COLLECTION_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def collection_version(root=COLLECTION_ROOT):
    """The collection's version: MANIFEST.json's in an installed collection, galaxy.yml's in a checkout (the
    collection's own metadata, never a role's files); None where neither is found."""
    manifest, galaxy = os.path.join(root, "MANIFEST.json"), os.path.join(root, "galaxy.yml")
    if os.path.exists(manifest):
        with open(manifest) as handle:
            return json.load(handle)["collection_info"]["version"]
    if os.path.exists(galaxy):
        with open(galaxy) as handle:
            return str((yaml.safe_load(handle) or {}).get("version"))
    return None
