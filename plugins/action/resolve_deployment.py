# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Resolve the deployment on the controller, returned as `deployment`; a refusal is the task's one clean message."""

from __future__ import annotations

from ansible.plugins.action import ActionBase
from ansible_collections.kimi.deploy.plugins.module_utils._deployment import DeploymentError, resolve


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
        except DeploymentError as refused:
            # One line, first: the refusal names the variable, the reason and the allowed values.
            return dict(result, failed=True, msg="kimi.deploy: %s" % refused)
        # Returned, not a fact: facts injected as variables are deprecated; a set_fact of it follows the task.
        return dict(result, changed=False, deployment=deployment)
