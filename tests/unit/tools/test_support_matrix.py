"""tools/support_matrix.py: the README's support matrix is what the engine data says (make readme writes it)."""
import copy
import importlib.util
import sys
from pathlib import Path

import pytest

from ansible_collections.kimi.deploy.plugins.module_utils._engines.registry import ENGINES
from ansible_collections.kimi.deploy.plugins.module_utils._model.models import MODEL_NAMES, model

ROOT = Path(__file__).resolve().parents[3]
TOOL = ROOT / "tools" / "support_matrix.py"


@pytest.fixture(scope="module", name="sm")
def fixture_sm():
    """The tool, imported as a module."""
    spec = importlib.util.spec_from_file_location("support_matrix", TOOL)
    module = importlib.util.module_from_spec(spec)
    sys.modules["support_matrix"] = module
    spec.loader.exec_module(module)
    return module


def rows(text):
    return [line for line in text.splitlines() if line.startswith("| `")]


def test_the_readme_block_is_the_generated_matrix(sm):
    block = sm.read_block((ROOT / "README.md").read_text(encoding="utf-8"))
    assert block == sm.render(), "README.md's support matrix is out of date: run make readme"


def test_every_engine_build_and_version_has_a_row_for_each_model_it_serves(sm):
    """A row per model, quant, build and release where the release has an image for the quant and the model's entry
    names a first release of the build at or below it; none where the entry says no release serves it."""
    table = rows(sm.render())
    for name in MODEL_NAMES:
        entry = model(name)
        for key, spec in ENGINES.items():
            first = (entry["engines"].get(key) or {}).get("min")
            for quant in set(spec["quants"]) & set(entry["checkpoints"]):
                for version, release in spec["versions"].items():
                    matching = [row for row in table if row.startswith("| `%s` | `%s` " % (name, quant))
                                and "| `%s` (%s) |" % (spec["name"], spec["title"]) in row
                                and ("| %s |" % version in row or "| **%s** (default) |" % version in row)]
                    wanted = quant in release["images"] and first is not None and (
                        sm.version_key(version) >= sm.version_key(first))
                    assert len(matching) == (1 if wanted else 0), (name, spec["title"], quant, version)
                    if wanted:
                        image = release["images"][quant]
                        for ref in (image.values() if isinstance(image, dict) else [image]):
                            assert "`%s`" % ref in matching[0]
    # every build's every quant and release serves some model (a release nobody can use would be a data slip)
    for key, spec in ENGINES.items():
        for quant in spec["quants"]:
            assert any("| `%s` (%s) |" % (spec["name"], spec["title"]) in row and "`%s` (" % quant in row
                       for row in table), (key, quant)


def test_k3_is_refused_by_the_releases_that_do_not_serve_it(sm):
    text = sm.render()
    assert not [row for row in rows(text) if row.startswith("| `kimi-k3` |") and "| `trtllm` " in row]
    assert not [row for row in rows(text) if row.startswith("| `kimi-k3` |") and "| **0.22.1** (default) |" in row]
    line = next(row for row in text.splitlines() if row.startswith("| `kimi-k3` (Kimi-K3) |"))
    assert "k3 (`kimi_k3`)" in line and "reasoning_effort low/high/max" in line and "| no |" in line


def test_each_build_has_a_row_of_its_capabilities(sm):
    text = sm.render()
    for spec in ENGINES.values():
        assert any(line.startswith("| `%s` (%s) | " % (spec["name"], spec["title"])) for line in text.splitlines())


def test_a_new_release_without_make_readme_fails(sm, monkeypatch):
    """An engine release added to the data and not to the README: the generated block differs (the first test fails)."""
    vllm = ENGINES["vllm"]
    release = copy.deepcopy(vllm["versions"][vllm["default_version"]])
    release.update(images={"int4": "vllm/vllm-openai:v9.9.9", "nvfp4": "kimi-k26-nvfp4-vllm:v9.9.9-cu130-mla"},
                   build_bases={"nvfp4": "vllm/vllm-openai:v9.9.9"}, verified=None)
    monkeypatch.setitem(vllm["versions"], "9.9.9", release)
    block = sm.read_block((ROOT / "README.md").read_text(encoding="utf-8"))
    assert block != sm.render()
    assert "`vllm/vllm-openai:v9.9.9`" in sm.render()


def test_write_rewrites_only_the_block_and_check_agrees(sm, tmp_path, capsys):
    readme = tmp_path / "README.md"
    readme.write_text("# title\n\n%s\nstale\n%s\n\nafter\n" % (sm.START, sm.END), encoding="utf-8")
    assert sm.main(["--check", "--readme", str(readme)]) == 1
    assert sm.main(["--write", "--readme", str(readme)]) == 0
    text = readme.read_text(encoding="utf-8")
    assert text.startswith("# title\n\n%s\n| `kimi_model` | quant" % sm.START) and text.endswith("%s\n\nafter\n" % sm.END)
    assert "stale" not in text
    assert sm.main(["--check", "--readme", str(readme)]) == 0
    assert sm.main(["--write", "--readme", str(readme)]) == 0 and readme.read_text(encoding="utf-8") == text
    capsys.readouterr()


def test_a_readme_without_the_markers_is_refused(sm, tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("# no markers\n", encoding="utf-8")
    with pytest.raises(ValueError, match="support-matrix"):
        sm.main(["--write", "--readme", str(readme)])
