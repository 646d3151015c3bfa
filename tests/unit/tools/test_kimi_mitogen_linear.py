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


def render(template, conditional):
    from ansible.template import Templar, trust_as_template
    templar = Templar(variables={"x": 2, "names": ["a", "b"]})
    return templar.template(trust_as_template(template)), templar.evaluate_conditional(trust_as_template(conditional))


def cached_files(folder):
    return sorted(os.path.join(d, f) for d, _dirs, files in os.walk(folder) for f in files)


def test_compiled_jinja_is_kept_and_read_back_with_the_same_results(strategy, tmp_path, monkeypatch):
    """Templates and conditionals compile once into the cache folder; a second compile reads the code back (a file
    removed from the folder is written again) and renders the same."""
    monkeypatch.setenv("KIMI_JINJA_CODE_CACHE", str(tmp_path / "code"))
    template, conditional = "{{ (x * 3) ~ '-' ~ (names | join(',')) }}", "x == 2 and 'b' in names"
    assert render(template, conditional) == ("6-a,b", True)
    files = cached_files(str(tmp_path / "code"))
    assert len(files) == 2 and oct(os.stat(str(tmp_path / "code")).st_mode & 0o777) == "0o700"
    assert render(template, conditional) == ("6-a,b", True)
    assert cached_files(str(tmp_path / "code")) == files
    for path in files:  # a damaged file is compiled again, and replaced
        with open(path, "wb") as handle:
            handle.write(b"\x00garbage")
    assert render(template, conditional) == ("6-a,b", True)
    os.remove(files[0])
    assert render(template, conditional) == ("6-a,b", True)
    assert cached_files(str(tmp_path / "code")) == files


def test_a_cache_folder_others_may_write_is_not_used(strategy, tmp_path, monkeypatch):
    """Its files run as code: a folder that is not private to the user is left alone, and templates still render."""
    folder = tmp_path / "shared"
    folder.mkdir()
    folder.chmod(0o777)
    monkeypatch.setenv("KIMI_JINJA_CODE_CACHE", str(folder))
    assert strategy.code_cache_dir() is None
    assert render("{{ x + 40 }}", "x > 1") == (42, True)
    assert cached_files(str(folder)) == []
    monkeypatch.setenv("KIMI_JINJA_CODE_CACHE", "")
    assert strategy.code_cache_dir() is None
