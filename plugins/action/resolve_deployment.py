# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Resolve the deployment on the controller, returned as `deployment`; a refusal is the task's one clean message."""

from __future__ import annotations

import functools
import os

import yaml
from ansible.plugins.action import ActionBase
from ansible_collections.kimi.deploy.plugins.module_utils import _ports
from ansible_collections.kimi.deploy.plugins.module_utils._deployment import DeploymentError, resolve

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
    _VALID_ARGS = frozenset(("inputs", "gpus", "require_revision"))

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = self._task.args
        unknown = sorted(set(args) - self._VALID_ARGS)
        if unknown:
            return dict(result, failed=True, msg="kimi.deploy.resolve_deployment: unknown argument(s) %s" % unknown)
        try:
            deployment = resolve(args.get("inputs"), args.get("gpus") or [],
                                 require_revision=bool(args.get("require_revision", True)))
            # The roles' ports beside the deployment's, one table: no two users of one port on this host.
            task_vars = task_vars or {}
            values = {variable: self._templar.template(task_vars[variable])
                      for variable in _ports.ROLE_PORTS if variable in task_vars}
            uses = [(p["port"], p["variable"], p["what"]) for p in deployment["ports"]]
            uses = _ports.check(uses + role_ports(values, task_vars.get("group_names", [])))
            deployment["ports"] = [{"port": p, "variable": v, "what": w} for p, v, w in uses]
        except DeploymentError as refused:
            # One line, first: the refusal names the variable, the reason and the allowed values.
            return dict(result, failed=True, msg="kimi.deploy: %s" % refused)
        # Returned, not a fact: facts injected as variables are deprecated; a set_fact of it follows the task.
        return dict(result, changed=False, deployment=deployment)
