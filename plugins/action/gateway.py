# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""kimi.deploy.gateway: the fleet gateway on a host of kimi_gateways. Resolves every kimi_servers host's deployment
from its own inputs and accelerators (as kimi.deploy.deployment resolves a group's members), takes the serving
instances (hosts alone and replica heads), and sets the fact kimi_gateway: the router, its policy and why, every worker
URL and the router's command, checked against the pinned router's flag list. With plan_fleet (plan.yml, make plan
FLEET=N) it previews N example hosts resolved as this host is; a refusal is the task's one clean message."""

from __future__ import annotations

from ansible.plugins.action import ActionBase, VariableLayer
from ansible_collections.kimi.deploy.plugins.module_utils._model import gateway as _gateway
from ansible_collections.kimi.deploy.plugins.module_utils._model import ports as _ports
from ansible_collections.kimi.deploy.plugins.module_utils._model import site as _site
from ansible_collections.kimi.deploy.plugins.module_utils._model.deployment import resolve
from ansible_collections.kimi.deploy.plugins.module_utils._model.gateway import resolve_gateway
from ansible_collections.kimi.deploy.plugins.module_utils._model.inputs import DeploymentError
from ansible_collections.kimi.deploy.plugins.module_utils._model.site_inputs import by_variable, check_input
from ansible_collections.kimi.deploy.plugins.plugin_utils._site import Site, role_ports

# The gateway's settings: kimi_gateway's role variables (their defaults in the model's table, _model/gateway.SETTINGS).
SETTINGS = dict((key, variable) for key, (variable, _default) in _gateway.SETTINGS.items())


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False
    _VALID_ARGS = frozenset(("plan_fleet", "changed_so_far"))

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        args = self._task.args
        unknown = sorted(set(args) - self._VALID_ARGS)
        if unknown:
            return dict(result, failed=True, msg="kimi.deploy.gateway: unknown argument(s) %s" % unknown)
        site = Site(self._templar, task_vars, False if args.get("plan_fleet") else None)
        me, get = site.me, site.get
        settings = {}
        for key, (variable, default) in _gateway.SETTINGS.items():
            found = get(me, variable)
            settings[key] = default if found is _site.MISSING else found
        # caddy_proxy's client entries on this host: their names, priority classes and limits (never their keys)
        clients = get(me, "caddy_proxy_clients")
        settings["clients"] = None if clients is _site.MISSING else clients
        otlp = get(me, "kimi_otlp_endpoint")
        try:
            # the site input's own rule (the deployments of the fleet read it the same way)
            settings["otlp_endpoint"] = check_input(by_variable()["kimi_otlp_endpoint"],
                                                    None if otlp is _site.MISSING else otlp)
            if args.get("plan_fleet"):
                # the table's rule for kimi_fleet_plan, its one owner
                instances = self._preview(site, check_input(by_variable()["kimi_fleet_plan"], args["plan_fleet"]))
            else:
                instances = []
                for host in site.servers:
                    deployment = site.resolve_member(host, "the fleet behind the gateway %s" % me)
                    if deployment.get("pd") or deployment["serves_api"]:
                        instances.append({"host": host, "deployment": deployment})
            gateway = resolve_gateway(me, instances, settings)
            uses = [(gateway["port"], SETTINGS["port"], _ports.ROLE_PORTS[SETTINGS["port"]][1]),
                    (gateway["metrics_port"], SETTINGS["metrics_port"], _ports.ROLE_PORTS[SETTINGS["metrics_port"]][1]),
                    (gateway["https_port"], SETTINGS["https_port"], _ports.ROLE_PORTS[SETTINGS["https_port"]][1]),
                    (gateway["usage_port"], SETTINGS["usage_port"], _ports.ROLE_PORTS[SETTINGS["usage_port"]][1]),
                    (gateway["usage_metrics_port"], SETTINGS["usage_metrics_port"],
                     _ports.ROLE_PORTS[SETTINGS["usage_metrics_port"]][1])]
            mine = [i["deployment"] for i in instances if i["host"] == me]
            if mine:  # a serving host that is a gateway too: its deployment's and roles' ports beside the gateway's
                uses += [(p["port"], p["variable"], p["what"]) for p in mine[0]["ports"]]
                uses += [u for u in role_ports(site.role_values(me), task_vars.get("group_names", []))
                         if u[1] not in SETTINGS.values()]
            _ports.check(uses)
        except DeploymentError as refused:
            note = (" " + args["changed_so_far"]) if args.get("changed_so_far") else ""
            return dict(result, failed=True, msg="kimi.deploy: %s%s" % (refused, note))
        gateway["serves_here"] = bool(mine)
        # Caddy's gateway site on this host: its address (caddy_proxy_site_address, else the inventory name) and the
        # CA root a client of it trusts (caddy_proxy's, the model's table _model/host_values)
        shared = site.host_values(me)
        gateway["site"].update(address=shared["proxy"]["address"], ca_root=shared["host_paths"]["ca_root"])
        self.register_host_variables({"kimi_gateway": gateway}, VariableLayer.EPHEMERAL_FACT)
        return dict(result, changed=False, gateway=gateway, warnings=list(gateway["warnings"]))

    @staticmethod
    def _preview(site, count):
        """`count` example hosts (fleet-1.., 10.0.1.11..) resolved from this host's inputs and GPUs."""
        me, get = site.me, site.get
        instances = []
        for index in range(count):
            inputs = _site.inputs(get, me, [me], [], gateways=[me])
            inputs["fleet_address"] = "10.0.1.%d" % (11 + index)
            deployment = resolve(inputs, _site.accelerators(get, me), require_revision=False)
            instances.append({"host": "fleet-%d" % (index + 1), "deployment": deployment})
        return instances
