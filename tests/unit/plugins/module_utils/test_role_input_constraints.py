"""The role inputs users set directly: every scalar option of those roles has a constraint (_role_inputs) or a
reason, of its argument spec's type; the roles' defaults meet them; values past their edges are refused naming the
variable on the site inputs' path (kimi.deploy.deployment checks both)."""
import os

import pytest
import yaml

from ansible_collections.kimi.deploy.plugins.module_utils._model import constraints as _c
from ansible_collections.kimi.deploy.plugins.module_utils._model import role_inputs as _role_inputs
from ansible_collections.kimi.deploy.plugins.module_utils._model.inputs import DeploymentError

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
KINDS = {"int": _c.Number, "float": _c.Number, "str": _c.Text}


def options(role):
    with open(os.path.join(ROOT, "roles", role, "meta", "argument_specs.yml")) as handle:
        entries = yaml.safe_load(handle)["argument_specs"].values()
    return dict((name, spec) for entry in entries for name, spec in (entry.get("options") or {}).items())


def defaults(role):
    with open(os.path.join(ROOT, "roles", role, "defaults", "main.yml")) as handle:
        return yaml.safe_load(handle) or {}


@pytest.mark.parametrize("role", sorted(_role_inputs.CONSTRAINTS))
def test_every_scalar_option_has_a_constraint_of_its_type_or_a_reason(role):
    table = _role_inputs.CONSTRAINTS[role]
    specs = options(role)
    scalar = [n for n, s in specs.items() if s.get("type", "str") in KINDS and not s.get("choices")]
    assert sorted(n for n in scalar if n not in table and n not in _role_inputs.UNCONSTRAINED) == []
    for name, check in table.items():
        assert name in specs, "%s is not an option of %s" % (name, role)
        kind = specs[name].get("type", "str")
        assert isinstance(check, KINDS[kind]), name
        if isinstance(check, _c.Number):
            assert check.type is (int if kind == "int" else float), name


@pytest.mark.parametrize("role", sorted(_role_inputs.CONSTRAINTS))
def test_the_role_defaults_meet_their_constraints(role):
    for name, value in defaults(role).items():
        check = _role_inputs.CONSTRAINTS[role].get(name)
        if check is None or (isinstance(value, str) and "{{" in value) or value is None:
            continue
        check.check(name, value)


@pytest.mark.parametrize("variable", sorted(_role_inputs.by_variable()))
def test_values_past_the_edges_are_refused_naming_the_variable(variable):
    _role, check = _role_inputs.by_variable()[variable]
    good, bad = check.edges()
    for value in bad + ["1\n2", "9" * 5000, ["a"], {"a": 1}] + ([] if check.empty else [""]):
        with pytest.raises(DeploymentError) as refused:
            _role_inputs.check_roles(lambda host, name: value if name == variable else None, "h")
        assert str(refused.value).startswith(variable + "="), refused.value
    for value in good:
        check.check(variable, value)


@pytest.mark.parametrize("variable, value", [
    ("caddy_proxy_https_port", 0), ("caddy_proxy_https_port", 65536), ("kimi_gateway_retry", "10 s"),
    ("kimi_gateway_retry", "10s;"), ("caddy_proxy_generation_timeout", "15min"), ("kimi_monitoring_retention", "15 d"),
    ("kimi_monitoring_alert_kv_cache_usage", 95), ("kimi_serve_service_name", "kimi k26"),
    ("kimi_monitoring_alert_engine_down_for", "1m30"), ("kimi_serve_replica_check_interval", 0),
])
def test_role_values_that_would_break_a_unit_a_caddyfile_or_a_rule_are_refused(variable, value):
    with pytest.raises(DeploymentError) as refused:
        _role_inputs.check_roles(lambda host, name: value if name == variable else None, "h")
    assert str(refused.value).startswith("%s=%r is not allowed" % (variable, value))
