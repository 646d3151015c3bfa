"""Write playbooks/vars/site_argument_specs.yml from the site inputs table (plugins/module_utils/_model/site_inputs.py).

    python3 tools/site_specs.py          # (re)write the file (make site-specs)
    python3 tools/site_specs.py --check  # exit 1 when the file differs from the table

The table is the one declaration of the site inputs; tests/unit/plugins/module_utils/test_site_inputs.py compares the
file with it both ways, so the two cannot drift.
"""
import importlib
import os
import sys

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SPECS = os.path.join(ROOT, "playbooks", "vars", "site_argument_specs.yml")


def load_table():
    """The table module, imported through the checkout's collection link (.collections, made by make setup): its
    constraints come from the collection's other modules."""
    sys.path.insert(0, os.path.join(ROOT, ".collections"))
    return importlib.import_module("ansible_collections.kimi.deploy.plugins.module_utils._model.site_inputs")


class _Flow(list):
    """A short list written inline ([1, 4, 16]) as the hand-written specs do."""


class _Dumper(yaml.SafeDumper):
    def increase_indent(self, flow=False, indentless=False):  # sequences indented under their key (yamllint)
        return super().increase_indent(flow, False)


_Dumper.add_representer(_Flow, lambda dumper, data: dumper.represent_sequence(
    "tag:yaml.org,2002:seq", data, flow_style=True))


def render(table):
    document = table.spec()
    for option in document["argument_specs"]["site"]["options"].values():
        for key in ("choices", "default"):
            if isinstance(option.get(key), list):
                option[key] = _Flow(option[key])
    body = yaml.dump(document, Dumper=_Dumper, sort_keys=False, width=100, allow_unicode=True,
                     default_flow_style=False)
    return table.HEADER + body


def main(argv):
    text = render(load_table())
    if "--check" in argv:
        with open(SPECS) as handle:
            if handle.read() != text:
                sys.stderr.write("%s is out of date: run make site-specs\n" % os.path.relpath(SPECS, ROOT))
                return 1
        return 0
    with open(SPECS + ".tmp", "w") as handle:
        handle.write(text)
    os.replace(SPECS + ".tmp", SPECS)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
