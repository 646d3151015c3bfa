# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""kimi.deploy.deployment: the one way `kimi_deployment` is made. Reads this host's site variables and its groups'
hostvars, resolves the deployment on the controller and sets the facts kimi_deployment, kimi_replica_members and
kimi_pd_members; a refusal is the task's one clean message."""

from __future__ import annotations

import functools
import os

import yaml
from ansible.plugins.action import ActionBase, VariableLayer
from ansible_collections.kimi.deploy.plugins.module_utils._model import ports as _ports
from ansible_collections.kimi.deploy.plugins.module_utils._model import role_inputs as _role_inputs
from ansible_collections.kimi.deploy.plugins.module_utils._model import site as _site
from ansible_collections.kimi.deploy.plugins.module_utils._model import site_inputs as _site_inputs
from ansible_collections.kimi.deploy.plugins.module_utils._model.canary import canary_count
from ansible_collections.kimi.deploy.plugins.module_utils._model.deployment import DeploymentError, resolve

ROLES = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "roles")


@functools.lru_cache(maxsize=None)
def role_defaults(role):
    """The role's defaults/main.yml (where its variables are declared), read once per run, not per host and port."""
    with open(os.path.join(ROLES, role, "defaults", "main.yml")) as handle:
        return yaml.safe_load(handle) or {}


def role_default(role, variable):
    return role_defaults(role).get(variable)


def role_ports(values, groups):
    """[(port, variable, what)] of the roles on this host: `values` are the variables' values where set (else None:
    the role's default); a port of a group's role only on that group's hosts."""
    uses = []
    for variable, (role, what, group) in _ports.ROLE_PORTS.items():
        if group and group not in groups:
            continue
        value = (values or {}).get(variable)
        uses.append((_ports.role_port(variable, role_default(role, variable) if value in (None, "") else value),
                     variable, what))
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
        of _role_inputs; then what one input allows given others: the one check path of plan.yml, site.yml and bundle.yml, before any host changes."""
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

    def role_values(self, host):
        """The roles' port variables set for `host` (unset ones are left to the roles' defaults)."""
        return dict((variable, self.get(host, variable)) for variable in _ports.ROLE_PORTS
                    if self.get(host, variable) is not _site.MISSING)


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False
    _VALID_ARGS = frozenset(("gpus", "require_revision", "plan_hosts", "pd_plan", "changed_so_far", "inputs_only"))

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        args = self._task.args
        unknown = sorted(set(args) - self._VALID_ARGS)
        if unknown:
            return dict(result, failed=True, msg="kimi.deploy.deployment: unknown argument(s) %s" % unknown)
        site = Site(self._templar, task_vars, args.get("require_revision"))
        me, get = site.me, site.get
        warnings = []
        if get(me, _site.OLD_IMAGE) is not _site.MISSING and get(me, "kimi_engine_image") is _site.MISSING:
            warnings.append("DEPRECATION: kimi_image is deprecated (it is also the name of the role that builds the "
                            "NVFP4 image) and will be removed in kimi.deploy 1.0.0; set kimi_engine_image instead. "
                            "Using kimi_image=%s for now." % get(me, _site.OLD_IMAGE))
        try:
            site.check_inputs(me)
            if args.get("inputs_only"):
                return dict(result, changed=False, warnings=warnings)
            replica, pd = site.replica(me), site.pd(me)
            deployment = site.resolve_host(me, args.get("gpus"), plan_hosts=args.get("plan_hosts"),
                                           pd_plan=args.get("pd_plan"))
            # The hosts that serve as one agree: each resolved from its own inputs and facts, on every call.
            for kind, group, name in (("replica", replica, "kimi_replica"), ("pd", pd, "kimi_pd")):
                if len(group) > 1:
                    resolved = [(h, deployment if h == me else site.resolve_member(h)) for h in group]
                    refused = _site.group_disagreement(kind, get(me, name), resolved)
                    if refused:
                        raise DeploymentError(refused)
            # The roles' ports beside the deployment's, one table: no two users of one port on this host.
            uses = [(p["port"], p["variable"], p["what"]) for p in deployment["ports"]]
            uses = _ports.check(uses + role_ports(site.role_values(me), task_vars.get("group_names", [])))
            deployment["ports"] = [{"port": p, "variable": v, "what": w} for p, v, w in uses]
        except DeploymentError as refused:
            # One line, first: the refusal names the variable, the reason and the allowed values.
            note = (" " + args["changed_so_far"]) if args.get("changed_so_far") else ""
            return dict(result, failed=True, msg="kimi.deploy: %s%s" % (refused, note),
                        warnings=warnings)
        facts = {"kimi_deployment": deployment, "kimi_replica_members": replica, "kimi_pd_members": pd}
        self.register_host_variables(facts, VariableLayer.EPHEMERAL_FACT)  # as set_fact does
        return dict(result, changed=False, deployment=deployment, warnings=warnings)
