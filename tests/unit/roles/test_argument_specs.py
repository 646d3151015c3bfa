"""Every role's defaults and meta/argument_specs.yml stay in step (names, defaults, docs)."""
import os

import pytest
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
ROLES = sorted(d for d in os.listdir(os.path.join(ROOT, "roles")) if not d.startswith("."))


def load(role, *parts):
    with open(os.path.join(ROOT, "roles", role, *parts)) as handle:
        return yaml.safe_load(handle) or {}


def test_the_five_roles_exist():
    assert ROLES == ["caddy_proxy", "kimi_image", "kimi_serve", "kimi_weights", "nvidia_host"]


@pytest.mark.parametrize("role", ROLES)
def test_defaults_and_argument_specs_agree(role):
    defaults = load(role, "defaults", "main.yml")
    options = load(role, "meta", "argument_specs.yml")["argument_specs"]["main"]["options"]
    assert set(defaults) == set(options) - {"kimi_deployment"}
    for name, value in defaults.items():
        assert name.startswith(role + "_"), "%s: variable %s lacks the role prefix" % (role, name)
        assert options[name].get("default") == value, "%s: default of %s differs" % (role, name)
        assert options[name].get("description"), "%s: %s is undocumented" % (role, name)
    assert options["kimi_deployment"]["required"] is True


@pytest.mark.parametrize("role", ROLES)
def test_secrets_are_no_log(role):
    options = load(role, "meta", "argument_specs.yml")["argument_specs"]["main"]["options"]
    for name, spec in options.items():
        if any(word in name for word in ("token", "api_key", "password", "secret")):
            assert spec.get("no_log") is True, "%s: %s must be no_log" % (role, name)
