"""kimi_probes: the gate's thresholds fall back to the site inputs' defaults (declared once, in site_inputs.py), and
the role's defaults are its argument specs' (derived copies that must match)."""
import os
import re

import yaml

from ansible_collections.kimi.deploy.plugins.module_utils._model.site_inputs import INPUTS

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
ROLE = os.path.join(ROOT, "roles", "kimi_probes")


def load(*parts):
    with open(os.path.join(ROLE, *parts)) as handle:
        return yaml.safe_load(handle)


def test_the_thresholds_fall_back_to_the_site_inputs_defaults():
    defaults = dict((i.variable, i.default) for i in INPUTS)
    found = {}
    for value in list(load("vars", "main.yml")["_kimi_probes_thresholds"].values()) + [
            load("vars", "main.yml")["_kimi_probes_max_drop"]]:
        variable, fallback = re.search(r"(kimi_verify_[a-z_]+) \| default\(([0-9.]+)\)", value).groups()
        found[variable] = float(fallback)
    assert found and all(found[v] == defaults[v] for v in found), (found, defaults)
    assert set(found) == set(v for v in defaults if re.match(r"kimi_verify_(min|max)_", v))


def test_the_role_defaults_are_its_argument_specs():
    defaults = load("defaults", "main.yml")
    options = load("meta", "argument_specs.yml")["argument_specs"]["gate"]["options"]
    assert dict((k, options[k]["default"]) for k in defaults) == defaults
