"""_model/site_inputs.py: the one table of site inputs, and what is derived from it (the variable map, the fields the
deployment action reads, playbooks/vars/site_argument_specs.yml, whose no_log options are the bundle's secrets)."""
import importlib.util
import os
import re

import yaml

from ansible_collections.kimi.deploy.plugins.module_utils._bundle import layout as _bundle

from ansible_collections.kimi.deploy.plugins.module_utils._engines.registry import ENGINES

from ansible_collections.kimi.deploy.plugins.module_utils._model.checkpoints import QUANTS

from ansible_collections.kimi.deploy.plugins.module_utils._model import inputs as _inputs

from ansible_collections.kimi.deploy.plugins.module_utils._model import site as _site

from ansible_collections.kimi.deploy.plugins.module_utils._model import site_inputs as _site_inputs

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
SPECS = os.path.join(ROOT, "playbooks", "vars", "site_argument_specs.yml")


def generator():
    spec = importlib.util.spec_from_file_location("site_specs", os.path.join(ROOT, "tools", "site_specs.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def spec_file():
    with open(SPECS) as handle:
        return handle.read()


def test_the_spec_file_is_the_table_rendered():
    assert spec_file() == generator().render(_site_inputs), "run make site-specs"


def test_the_spec_file_and_the_table_hold_the_same_inputs_both_ways():
    options = yaml.safe_load(spec_file())["argument_specs"]["site"]["options"]
    table = _site_inputs.by_variable()
    assert sorted(set(options) - set(table)) == [], "in the spec file, not in the table"
    assert sorted(set(table) - set(options)) == [], "in the table, not in the spec file"
    for name, item in table.items():
        option = options[name]
        assert option["type"] == item.type and option.get("default") == item.default, name
        assert option.get("choices") == _site_inputs.choices(item), name
        assert bool(option.get("no_log")) == item.no_log, name
        described = option["description"] if isinstance(option["description"], list) else [option["description"]]
        assert described == list(item.doc) + ["Allowed values: %s." % "; ".join(_site_inputs.allowed(item))], name
        assert all(described), name


def test_each_variable_is_declared_once_and_each_field_has_one_variable():
    variables = [item.variable for item in _site_inputs.INPUTS]
    fields = [item.field for item in _site_inputs.INPUTS if item.field]
    assert len(variables) == len(set(variables)) and len(fields) == len(set(fields))
    assert all(item.read in (None, "field", "pd", "member") for item in _site_inputs.INPUTS)
    assert all(item.field.startswith("pd_") for item in _site_inputs.INPUTS if item.read == "pd")


def test_the_variable_map_and_the_action_fields_are_derived_from_the_table():
    table = _site_inputs.by_variable()
    for field, variable in _inputs.VARIABLES.items():
        if field not in ("revision", "nodes", "node_rank"):
            assert table[variable].field == field
    for field, default in _site.FIELDS.items():
        assert table[_inputs.VARIABLES[field]].default == default
    for key, default in _site.PD_SETTINGS.items():
        assert table[_inputs.VARIABLES["pd_" + key]].default == default
    for quant in _site.QUANTS:  # a revision per checkpoint, each one an input
        assert "kimi_%s_revision" % quant in table


def test_the_bundle_drops_the_tables_secrets():
    secrets = _bundle.secret_names([yaml.safe_load(spec_file())])
    assert secrets == set(item.variable for item in _site_inputs.INPUTS if item.no_log) == {"kimi_bench_api_key"}
    assert _bundle.inputs({"kimi_bench_api_key": "sk-x", "quant": "int4"}, secrets) == {"quant": "int4"}


def test_a_stale_spec_file_is_reported(tmp_path, monkeypatch):
    module = generator()
    stale = tmp_path / "site_argument_specs.yml"
    stale.write_text(spec_file().replace("default: auto", "default: int4", 1))
    monkeypatch.setattr(module, "SPECS", str(stale))
    assert module.main(["--check"]) == 1
    assert module.main([]) == 0 and module.main(["--check"]) == 0 and stale.read_text() == spec_file()


def test_the_quant_and_engine_docs_say_what_the_engine_data_serves():
    """quant's doc names every checkpoint, and engine's says each quant's engines ("C(<quant>) on C(<engine>) or ...",
    the identities), as the engine builds' `quants` do: a checkpoint or a build serving another quant fails this until
    the docs (and the generated site specs) say so."""
    table = _site_inputs.by_variable()
    assert [quant for quant in QUANTS if "C(%s)" % quant not in " ".join(table["quant"].doc)] == []
    served = {}
    for spec in ENGINES.values():
        for quant in spec["quants"]:
            served.setdefault(quant, set()).add(spec["name"])
    said = dict((quant, set(re.findall(r"C\((\w+)\)", engines)))
                for quant, engines in re.findall(r"C\((\w+)\) on ([^;.]*)", " ".join(table["engine"].doc)))
    assert said == served
