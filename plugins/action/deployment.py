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
from ansible_collections.kimi.deploy.plugins.module_utils._model import site as _site
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


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False
    _VALID_ARGS = frozenset(("gpus", "require_revision", "plan_hosts", "pd_plan", "changed_so_far"))

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        args = self._task.args
        unknown = sorted(set(args) - self._VALID_ARGS)
        if unknown:
            return dict(result, failed=True, msg="kimi.deploy.deployment: unknown argument(s) %s" % unknown)
        me = task_vars["inventory_hostname"]
        hostvars = task_vars.get("hostvars") or {}

        seen = {}

        def get(host, variable):
            """A host's value of a variable, templated once per task; this host's from the task's variables (play
            vars too)."""
            key = (host, variable)
            if key not in seen:
                if host == me:
                    found = self._templar.template(task_vars[variable]) if variable in task_vars else _site.MISSING
                else:
                    facts = hostvars[host] if host in hostvars else {}
                    found = facts[variable] if variable in facts else _site.MISSING
                seen[key] = found
            return seen[key]

        servers = list((task_vars.get("groups") or {}).get("kimi_servers") or [])
        require_revision = args.get("require_revision")
        if require_revision is None:
            require_revision = _site.value(get, me, "kimi_require_revision", True)
        warnings = []
        if get(me, _site.OLD_IMAGE) is not _site.MISSING and get(me, "kimi_engine_image") is _site.MISSING:
            warnings.append("DEPRECATION: kimi_image is deprecated (it is also the name of the role that builds the "
                            "NVFP4 image) and will be removed in kimi.deploy 1.0.0; set kimi_engine_image instead. "
                            "Using kimi_image=%s for now." % get(me, _site.OLD_IMAGE))

        def resolve_host(host, gpus=None, **previews):
            """A host's deployment from its own inputs, groups and accelerators."""
            inputs = _site.inputs(get, host, _site.replica_members(get, host, servers),
                                  _site.pd_members(get, host, servers), **previews)
            return resolve(inputs, _site.accelerators(get, host) if gpus is None else gpus,
                           require_revision=bool(require_revision))

        def resolve_member(host):
            try:
                return resolve_host(host)
            except DeploymentError as refused:
                raise DeploymentError("%s, a host of this host's group, is refused: %s" % (host, refused))

        try:
            replica, pd = _site.replica_members(get, me, servers), _site.pd_members(get, me, servers)
            deployment = resolve_host(me, args.get("gpus"), plan_hosts=args.get("plan_hosts"),
                                      pd_plan=args.get("pd_plan"))
            # The hosts that serve as one agree: each resolved from its own inputs and facts, on every call.
            for kind, group, name in (("replica", replica, "kimi_replica"), ("pd", pd, "kimi_pd")):
                if len(group) > 1:
                    resolved = [(h, deployment if h == me else resolve_member(h)) for h in group]
                    refused = _site.group_disagreement(kind, get(me, name), resolved)
                    if refused:
                        raise DeploymentError(refused)
            # The roles' ports beside the deployment's, one table: no two users of one port on this host.
            values = dict((variable, get(me, variable)) for variable in _ports.ROLE_PORTS
                          if get(me, variable) is not _site.MISSING)
            uses = [(p["port"], p["variable"], p["what"]) for p in deployment["ports"]]
            uses = _ports.check(uses + role_ports(values, task_vars.get("group_names", [])))
            deployment["ports"] = [{"port": p, "variable": v, "what": w} for p, v, w in uses]
        except DeploymentError as refused:
            # One line, first: the refusal names the variable, the reason and the allowed values.
            note = (" " + args["changed_so_far"]) if args.get("changed_so_far") else ""
            return dict(result, failed=True, msg="kimi.deploy: %s%s" % (refused, note),
                        warnings=warnings)
        facts = {"kimi_deployment": deployment, "kimi_replica_members": replica, "kimi_pd_members": pd}
        self.register_host_variables(facts, VariableLayer.EPHEMERAL_FACT)  # as set_fact does
        return dict(result, changed=False, deployment=deployment, warnings=warnings)
