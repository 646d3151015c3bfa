# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""kimi.deploy.deployment: the one way `kimi_deployment` is made. Reads this host's site variables and its groups'
hostvars, resolves the deployment on the controller and sets the facts kimi_deployment, kimi_replica_members and
kimi_pd_members; a refusal is the task's one clean message."""

from __future__ import annotations

from ansible.plugins.action import ActionBase, VariableLayer
from ansible_collections.kimi.deploy.plugins.module_utils._model import ports as _ports
from ansible_collections.kimi.deploy.plugins.module_utils._model import site as _site
from ansible_collections.kimi.deploy.plugins.module_utils._model.deployment import DeploymentError
from ansible_collections.kimi.deploy.plugins.plugin_utils._site import Site, collection_version, role_ports


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
            # The host values several roles share (drain file, textfile folder, CA root, env file, the proxy's URL):
            # one owner each (_model/host_values), the other roles' inputs default to these.
            deployment.update(site.host_values(me))
            # the collection's version (kimi_image labels its image with it)
            deployment["collection_version"] = collection_version()
        except DeploymentError as refused:
            # One line, first: the refusal names the variable, the reason and the allowed values.
            note = (" " + args["changed_so_far"]) if args.get("changed_so_far") else ""
            return dict(result, failed=True, msg="kimi.deploy: %s%s" % (refused, note),
                        warnings=warnings)
        facts = {"kimi_deployment": deployment, "kimi_replica_members": replica, "kimi_pd_members": pd}
        self.register_host_variables(facts, VariableLayer.EPHEMERAL_FACT)  # as set_fact does
        return dict(result, changed=False, deployment=deployment, warnings=warnings)
