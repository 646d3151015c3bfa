"""Every plugin's DOCUMENTATION, EXAMPLES and RETURN parse as YAML, as ansible-doc and ansible-lint read them (a colon in a
plain scalar made a filter's documentation unreadable, which only ansible-lint's log showed)."""
import ast
import glob
import os

import pytest
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PLUGINS = sorted(p for p in glob.glob(os.path.join(ROOT, "plugins", "*", "*.py"))
                 if os.path.basename(os.path.dirname(p)) not in ("module_utils", "plugin_utils")
                 and not p.endswith("__init__.py"))


def docs(path):
    """{name: text} of the module-level DOCUMENTATION, EXAMPLES and RETURN strings."""
    tree = ast.parse(open(path).read(), path)
    return dict((node.targets[0].id, node.value.value) for node in tree.body
                if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id in ("DOCUMENTATION", "EXAMPLES", "RETURN")
                and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str))


@pytest.mark.parametrize("path", PLUGINS, ids=lambda p: os.path.relpath(p, ROOT))
def test_the_documentation_parses(path):
    found = docs(path)
    for name, text in found.items():
        try:
            yaml.safe_load(text)
        except yaml.YAMLError as exc:
            pytest.fail("%s: %s does not parse: %s" % (os.path.relpath(path, ROOT), name, exc))
    kind = os.path.basename(os.path.dirname(path))
    if kind in ("modules", "filter", "lookup", "callback", "strategy", "inventory", "test"):
        assert "DOCUMENTATION" in found, "%s has no DOCUMENTATION" % os.path.relpath(path, ROOT)
        assert isinstance(yaml.safe_load(found["DOCUMENTATION"]), dict)
