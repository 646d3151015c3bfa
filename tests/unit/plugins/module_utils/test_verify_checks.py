"""The verify gate's checks are declared once (module_utils/_model/verify_checks.TABLE): the module, the model, the filter
the preflights read and the role defaults' YAML copies all match it, and no other file spells the list."""
import os
import re

import pytest
import yaml

from ansible.errors import AnsibleFilterError
from ansible_collections.kimi.deploy.plugins.filter.verify_checks import verify_checks
from ansible_collections.kimi.deploy.plugins.module_utils._model import deployment as _deployment
from ansible_collections.kimi.deploy.plugins.module_utils._model import verify_checks as vc
from ansible_collections.kimi.deploy.plugins.modules import serve_verify
from test_deployment import RTX8, SHA

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))


def role_file(role, *parts):
    with open(os.path.join(ROOT, "roles", role, *parts)) as handle:
        return yaml.safe_load(handle)


def test_the_table_names_each_check_once_and_the_lists_come_from_it():
    assert len(set(vc.ALL)) == len(vc.ALL) == len(vc.TABLE)
    assert vc.ENGINE == ("health", "models", "text", "text_no_thinking", "tool", "vision", "speculative")
    assert vc.PROXY == vc.ENGINE[:6] and set(vc.PROXY_DEFAULT) <= set(vc.PROXY)
    assert set(vc.MODULE_DEFAULT) <= set(vc.ALL) and "no_key" not in vc.MODULE_DEFAULT
    for name, names in vc.LISTS.items():
        assert verify_checks(name) == list(names)
        assert [n for n in vc.ALL if n in names] == list(names), name  # in the table's order


def test_the_module_takes_its_choices_and_default_from_the_table_and_documents_them():
    assert serve_verify.CHECKS == vc.ALL and serve_verify.DEFAULT_CHECKS == vc.MODULE_DEFAULT
    option = yaml.safe_load(serve_verify.DOCUMENTATION)["options"]["checks"]
    assert option["choices"] == list(vc.ALL)
    assert option["default"] == list(vc.MODULE_DEFAULT)
    for name in vc.ALL:
        assert hasattr(serve_verify.Verifier, "check_" + name), name


def test_the_model_offers_the_engine_checks_less_what_the_engine_lacks():
    assert _deployment.VERIFY_CHECKS is vc.ENGINE
    dep = _deployment.resolve({"quant": "int4", "engine": "sglang", "revisions": {"int4": SHA}}, RTX8)
    assert dep["verify_checks"] == [c for c in vc.ENGINE if c != "speculative"]


@pytest.mark.parametrize(("role", "variable", "names"), [
    ("kimi_serve", "kimi_serve_verify_checks", vc.ENGINE),
    ("caddy_proxy", "caddy_proxy_verify_checks", vc.PROXY_DEFAULT),
])
def test_the_role_defaults_are_copies_of_the_table(role, variable, names):
    """Role defaults cannot import Python: the YAML default (and the argument spec's, which test_argument_specs holds
    to the defaults) is a copy, held to the table here."""
    assert role_file(role, "defaults", "main.yml")[variable] == list(names)
    spec = role_file(role, "meta", "argument_specs.yml")["argument_specs"]["main"]["options"][variable]
    assert spec["default"] == list(names)


def test_the_filter_refuses_an_unknown_list():
    with pytest.raises(AnsibleFilterError, match="input must be one of all, engine, module_default"):
        verify_checks("everything")


# The one place of the list, the module that runs the checks, and the YAML copies tested above.
ALLOWED = {"plugins/module_utils/_model/verify_checks.py", "plugins/modules/serve_verify.py",
           "roles/kimi_serve/defaults/main.yml", "roles/kimi_serve/meta/argument_specs.yml",
           "roles/caddy_proxy/defaults/main.yml", "roles/caddy_proxy/meta/argument_specs.yml"}
# Three check names in one line, quoted or not, in a list: a second spelling of the list (a task's name or a comment
# that says what is checked is prose, not a list).
PROSE_RE = re.compile(r"^\s*(#|- name:|name:)")
LIST_RE = re.compile(r"""['"]?\b(health|models|text|text_no_thinking|tool|vision)\b['"]?\s*,\s*['"]?\b(%s)\b['"]?\s*,"""
                     % "|".join(vc.ALL))


def test_no_other_collection_file_spells_the_list():
    hits = []
    for top in ("plugins", "roles", "playbooks"):
        for folder, _dirs, files in os.walk(os.path.join(ROOT, top)):
            for name in files:
                path = os.path.relpath(os.path.join(folder, name), ROOT)
                if not name.endswith((".py", ".yml", ".j2")) or path in ALLOWED:
                    continue
                with open(os.path.join(ROOT, path)) as handle:
                    hits += ["%s:%d" % (path, n) for n, line in enumerate(handle, 1) if LIST_RE.search(line) and not PROSE_RE.match(line)]
    assert hits == []
