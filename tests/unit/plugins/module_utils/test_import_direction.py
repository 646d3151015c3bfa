"""The import between the deployment model and the engine data goes one way: _model reads _engines, and no _engines
module imports _model (nor does _common, which both stand on). Imports are read with ast, every form: import x.y,
from x.y import z, from x import y, and relative imports."""
import ast
import os

import pytest

PREFIX = "ansible_collections.kimi.deploy.plugins.module_utils"
UTILS = os.path.abspath(os.path.join(os.path.dirname(__file__), *([os.pardir] * 4), "plugins", "module_utils"))


def package_of(path):
    """The dotted package a file under plugins/module_utils is in."""
    folder = os.path.relpath(os.path.dirname(path), UTILS)
    return PREFIX if folder == os.curdir else PREFIX + "." + folder.replace(os.sep, ".")


def imported(source, package):
    """Every module (and module.name for `from module import name`) the source imports, absolute."""
    names = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[:len(parts) - (node.level - 1)]
                base = ".".join(parts + ([base] if base else []))
            names.extend("%s.%s" % (base, alias.name) for alias in node.names)
    return names


def forbidden(source, package, layers):
    """The imports of `source` that reach one of `layers` (sub-packages of module_utils, e.g. "_model")."""
    roots = tuple("%s.%s" % (PREFIX, layer) for layer in layers)
    return [name for name in imported(source, package)
            if any(name == root or name.startswith(root + ".") for root in roots)]


def sources(folder):
    for top, _dirs, files in os.walk(os.path.join(UTILS, folder)):
        for name in sorted(files):
            if name.endswith(".py"):
                yield os.path.join(top, name)


def offenders(paths, layers, package=None):
    out = []
    for path in paths:
        with open(path) as handle:
            hits = forbidden(handle.read(), package or package_of(path), layers)
        out.extend("%s imports %s" % (os.path.relpath(path, UTILS), hit) for hit in hits)
    return out


def test_no_engines_module_imports_the_model():
    paths = list(sources("_engines"))
    assert len(paths) > 5  # the registry, the engine files, the generated flag lists
    assert offenders(paths, ["_model"]) == []


def test_common_imports_neither_layer():
    assert offenders([os.path.join(UTILS, "_common.py")], ["_model", "_engines"]) == []


def test_the_model_may_import_the_engines():
    """The allowed direction is in use (the registry); the check is not vacuous about what it reads."""
    with open(os.path.join(UTILS, "_model", "deployment.py")) as handle:
        assert forbidden(handle.read(), PREFIX + "._model", ["_engines"])


ENGINES_PACKAGE = PREFIX + "._engines"


@pytest.mark.parametrize("source", [
    "from ansible_collections.kimi.deploy.plugins.module_utils._model.inputs import fail\n",
    "from ansible_collections.kimi.deploy.plugins.module_utils._model import kv_offload\n",
    "from ansible_collections.kimi.deploy.plugins.module_utils import _model\n",
    "import ansible_collections.kimi.deploy.plugins.module_utils._model.loader\n",
    "from .._model.speculative import spec_config\n",
    "from .. import _model\n",
    "def late():\n    from ansible_collections.kimi.deploy.plugins.module_utils._model.checkpoints import GB\n"
    "    return GB\n",
])
def test_a_synthetic_import_of_the_model_is_caught(source, tmp_path):
    assert forbidden(source, ENGINES_PACKAGE, ["_model"])
    engine_file = tmp_path / "fake_engine.py"
    engine_file.write_text("from ansible_collections.kimi.deploy.plugins.module_utils._common import GB\n" + source)
    # read as an _engines module: the check the real files go through reports it, and only it
    hits = offenders([str(engine_file)], ["_model"], package=ENGINES_PACKAGE)
    assert len(hits) == 1 and "._model" in hits[0], hits


@pytest.mark.parametrize("source", [
    "from ansible_collections.kimi.deploy.plugins.module_utils._common import DeploymentError\n",
    "from ansible_collections.kimi.deploy.plugins.module_utils._engines.spec import Arg\n",
    "from .spec import Arg\n",
    "import json\n",
    "from ansible_collections.kimi.deploy.plugins.module_utils._modelx import y\n",  # another name, not the layer
])
def test_allowed_imports_pass(source):
    assert forbidden(source, ENGINES_PACKAGE, ["_model"]) == []
