"""Every role's defaults and meta/argument_specs.yml stay in step (names, defaults, docs)."""
import os
import re

import pytest
import yaml

from ansible_collections.kimi.deploy.plugins.module_utils._model import site as _site
from ansible_collections.kimi.deploy.plugins.module_utils._model.inputs import VARIABLES

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
ROLES = sorted(d for d in os.listdir(os.path.join(ROOT, "roles")) if not d.startswith("."))


def load(role, *parts):
    with open(os.path.join(ROOT, "roles", role, *parts)) as handle:
        return yaml.safe_load(handle) or {}


HOST_ROLES = ("nvidia_host", "ascend_host")  # generic accelerator hosts: no Kimi knowledge
# Private roles (a leading underscore, as prometheus.prometheus._common): what the host roles share, each given its
# variables by the role that includes it; no Kimi knowledge either.
PRIVATE_ROLES = ("_image_archive",)
# The monitoring host's role reads the other hosts' deployments (hostvars), not one of its own; the gateway's, the
# fleet's (kimi_gateway, resolved from every serving host's inputs).
MONITOR_ROLES = ("kimi_monitoring", "kimi_gateway")
# The air-gapped host's apt source: the bundle's repository for the host's release, whatever it serves.
SITE_ROLES = ("kimi_bundle",)


def _computed(value):
    return isinstance(value, str) and value.strip().startswith("{{") and value.strip().endswith("}}")


def test_the_thirteen_roles_and_the_private_one_exist():
    assert ROLES == ["_image_archive", "ascend_host", "caddy_proxy", "kimi_bundle", "kimi_gateway", "kimi_image",
                     "kimi_metrics", "kimi_monitoring", "kimi_probes", "kimi_router", "kimi_serve", "kimi_switch",
                     "kimi_weights", "nvidia_host"]


@pytest.mark.parametrize("role", PRIVATE_ROLES)
def test_a_private_role_is_included_by_roles_that_pass_it_every_variable(role):
    """No defaults: each role that includes it names every option, from its own variables."""
    assert load(role, "defaults", "main.yml") == {}
    options = load(role, "meta", "argument_specs.yml")["argument_specs"]["main"]["options"]
    assert all(option.get("required") for option in options.values())
    callers = 0
    for folder, _dirs, files in os.walk(os.path.join(ROOT, "roles")):
        for name in files:
            if not name.endswith(".yml") or folder.startswith(os.path.join(ROOT, "roles", role)):
                continue
            for task in load(os.path.relpath(folder, os.path.join(ROOT, "roles")), name) or []:
                include = task.get("ansible.builtin.include_role") or task.get("ansible.builtin.import_role") or {} \
                    if isinstance(task, dict) else {}
                if include.get("name") == "kimi.deploy." + role:
                    callers += 1
                    assert set(task.get("vars", {})) == set(options), "%s/%s" % (folder, name)
    assert callers >= 2  # shared, or it belongs in its one user


@pytest.mark.parametrize("role", ROLES)
def test_defaults_and_argument_specs_agree(role):
    """Every default is documented by the entry points that read it (main, or one of its tasks_from), with the same
    default; every documented option with a default has it in defaults/main.yml."""
    defaults = load(role, "defaults", "main.yml")
    entries = load(role, "meta", "argument_specs.yml")["argument_specs"]
    documented = set()
    for entry in entries.values():
        for name, option in entry["options"].items():
            if option.get("required"):
                continue  # an input the caller always gives (site.yml), never defaulted
            documented.add(name)
            if name in defaults and _computed(defaults[name]) and "default" not in option:
                # A default computed at run time (per distribution) for an option of dicts: antsibull-docs refuses a
                # template as a list of dicts, so the spec leaves it out and says it in words.
                assert "default" in " ".join(option.get("description", [])).lower(), \
                    "%s: %s's computed default must be described" % (role, name)
            elif name in defaults:
                assert option.get("default") == defaults[name], "%s: default of %s differs" % (role, name)
            assert option.get("description"), "%s: %s is undocumented" % (role, name)
    # Set where the deployment is resolved (the kimi.deploy.deployment action), not defaulted by a role.
    assert set(defaults) == documented - {"kimi_deployment", "kimi_replica_members"}
    for name in defaults:
        assert name.startswith(role + "_"), "%s: variable %s lacks the role prefix" % (role, name)


@pytest.mark.parametrize("role", [r for r in ROLES if r not in HOST_ROLES + MONITOR_ROLES + SITE_ROLES + PRIVATE_ROLES])
def test_serving_roles_consume_the_resolved_deployment(role):
    options = load(role, "meta", "argument_specs.yml")["argument_specs"]["main"]["options"]
    # caddy_proxy also fronts a fleet gateway that serves no engine (caddy_proxy_engine_site false): then it has none
    assert options["kimi_deployment"].get("required", False) is (role != "caddy_proxy")


@pytest.mark.parametrize("role", HOST_ROLES + PRIVATE_ROLES)
def test_host_roles_know_nothing_about_kimi(role):
    """A generic accelerator container host: no Kimi deployment variable or fact anywhere in the role (kimi.deploy
    FQCNs and kimi-* file names are the collection's namespace, not deployment knowledge)."""
    options = load(role, "meta", "argument_specs.yml")["argument_specs"]["main"]["options"]
    assert all(name.startswith(role + "_") for name in options)
    hits = []
    for folder, _dirs, files in os.walk(os.path.join(ROOT, "roles", role)):
        for name in files:
            path = os.path.join(folder, name)
            with open(path) as handle:
                for number, line in enumerate(handle, 1):
                    if re.search(r"\bkimi_", line) or "models--" in line:
                        hits.append("%s:%d: %s" % (os.path.relpath(path, ROOT), number, line.strip()))
    assert hits == []


def test_site_inputs_are_documented_in_one_spec():
    with open(os.path.join(ROOT, "playbooks", "vars", "site_argument_specs.yml")) as handle:
        options = yaml.safe_load(handle)["argument_specs"]["site"]["options"]
    # Every variable the deployment action reads for a host (the one map, _inputs.VARIABLES, through _site's fields).
    read = set(VARIABLES[field] for field in list(_site.FIELDS) + ["pd_" + key for key in _site.PD_SETTINGS]
               + ["head_address", "pd_rdma_devices", "pd_role", "pd_address"])
    read |= set("kimi_%s_revision" % quant for quant in _site.QUANTS) | {"kimi_replica", "kimi_pd"}
    assert read <= set(options), "site inputs read but not documented: %s" % sorted(read - set(options))
    for name, spec in options.items():
        assert spec.get("description"), "site input %s is undocumented" % name


@pytest.mark.parametrize("role", ROLES)
def test_secrets_are_no_log(role):
    options = load(role, "meta", "argument_specs.yml")["argument_specs"]["main"]["options"]
    for name, spec in options.items():
        if any(word in name for word in ("token", "api_key", "password", "secret")):
            assert spec.get("no_log") is True, "%s: %s must be no_log" % (role, name)


@pytest.mark.parametrize("role", ROLES)
def test_registers_take_the_roles_one_prefix(role):
    """Every register inside a role is __<role>_... (a private role's name without its leading underscore), never
    another role's or a one-underscore one: what a task registers is the role's own, and one prefix says so."""
    prefix = "__%s_" % role.lstrip("_")
    wrong = []
    for folder, _dirs, files in os.walk(os.path.join(ROOT, "roles", role)):
        for name in files:
            if not name.endswith(".yml"):
                continue
            with open(os.path.join(folder, name)) as handle:
                for number, line in enumerate(handle, 1):
                    found = re.match(r"\s*register:\s*(\S+)", line)
                    if found and not found.group(1).startswith(prefix):
                        wrong.append("%s:%d: %s" % (os.path.relpath(handle.name, ROOT), number, found.group(1)))
    assert wrong == []
