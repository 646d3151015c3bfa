"""tools/mitogen/kimi_mitogen_linear.py: the scan of a module's imports also lists the collection's own module_utils,
followed transitively, so Mitogen's async child imports them before it detaches (else the job hangs, "started")."""
import importlib.util
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
MODULE_UTILS = "ansible_collections.kimi.deploy.plugins.module_utils."

pytest.importorskip("ansible_mitogen", reason="mitogen is in requirements-demo.txt")


@pytest.fixture(scope="module")
def strategy():
    spec = importlib.util.spec_from_file_location("kimi_mitogen_linear",
                                                  os.path.join(ROOT, "tools", "mitogen", "kimi_mitogen_linear.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def scan(strategy, name):
    path = os.path.join(ROOT, "plugins", "modules", name + ".py")
    return {entry[0]: entry for entry in strategy.scan("ansible_module_" + name, path, ())}


def test_the_scan_lists_the_collection_module_utils_a_module_imports(strategy):
    found = scan(strategy, "serve_ready")
    # `from ...module_utils import _engine_log` and `from ...module_utils._hf_cache import atomic_write`
    for name in ("_engine_log", "_hf_cache"):
        assert MODULE_UTILS + name in found
        assert found[MODULE_UTILS + name][1].endswith("plugins/module_utils/%s.py" % name)
    # a name imported from a module is not a module
    assert MODULE_UTILS + "_hf_cache.atomic_write" not in found


def test_the_scan_follows_imports_of_imports(strategy):
    # serve_bench imports _bench, which imports _hf_cache; serve_bench itself does not
    with open(os.path.join(ROOT, "plugins", "modules", "serve_bench.py")) as handle:
        assert "_hf_cache" not in handle.read()
    found = scan(strategy, "serve_bench")
    assert {MODULE_UTILS + "_bench", MODULE_UTILS + "_hf_cache"} <= set(found)


def test_the_strategy_patches_mitogens_scan(strategy):
    import ansible_mitogen.module_finder
    assert ansible_mitogen.module_finder.scan is strategy.scan
