"""make docs: the collection's documentation site (antsibull-docs, Sphinx with warnings as errors) has a page for
every guide (docs/docsite/extra-docs.yml), module, filter and role, each role page showing its argument specs."""
import os
import subprocess

import pytest
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VENV = os.path.join(ROOT, ".venv-docs")


# The guides the README links to (docs/docsite/rst/<name>.rst), each listed in extra-docs.yml.
GUIDES = ("inventory_and_secrets", "deployment_model", "fleets_and_replicas", "disaggregation", "speculation", "accuracy",
          "tensorrt_llm", "ascend", "operate", "airgap", "awx", "development")


def guides():
    """The toctree entries of docs/docsite/extra-docs.yml."""
    with open(os.path.join(ROOT, "docs", "docsite", "extra-docs.yml"), encoding="utf-8") as handle:
        index = yaml.safe_load(handle)
    return [name for section in index["sections"] for name in section["toctree"]]


def test_every_guide_is_in_the_docs_index_and_the_readme():
    listed = guides()
    assert sorted(listed) == sorted(GUIDES)
    rst = os.path.join(ROOT, "docs", "docsite", "rst")
    assert sorted(f[:-4] for f in os.listdir(rst) if f.endswith(".rst")) == sorted(GUIDES)
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as handle:
        readme = handle.read()
    assert [g for g in GUIDES if "](docs/docsite/rst/%s.rst)" % g not in readme] == []


def plugins(kind):
    folder = os.path.join(ROOT, "plugins", kind)
    return sorted(f[:-3] for f in os.listdir(folder) if f.endswith(".py") and not f.startswith("_"))


def test_the_docs_site_has_a_page_for_every_guide_module_filter_and_role(tmp_path):
    if not os.path.isfile(os.path.join(VENV, ".stamp")):
        pytest.skip("no .venv-docs: run make docs-venv (make test does)")
    env = dict(os.environ, KIMI_DOCS_SRC=str(tmp_path / "src"), KIMI_DOCS_OUT=str(tmp_path / "html"))
    proc = subprocess.run(["tools/build_docs.sh"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
                          check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr  # -W: any warning fails the build
    pages = tmp_path / "html" / "collections" / "kimi" / "deploy"
    roles = sorted(os.listdir(os.path.join(ROOT, "roles")))
    expected = (["%s_module.html" % m for m in plugins("modules")] + ["%s_filter.html" % f for f in plugins("filter")]
                + ["%s_role.html" % r for r in roles])
    missing = [page for page in expected if not (pages / page).is_file()]
    assert not missing, missing
    index = (pages / "index.html").read_text()
    assert all(page in index for page in expected)
    missing_guides = [g for g in guides() if not (pages / "docsite" / ("%s.html" % g)).is_file()]
    assert not missing_guides, missing_guides
    assert all("docsite/%s.html" % g in index for g in guides())
    # a guide's links to the plugin pages resolve (Sphinx -W fails on a broken one; this checks one is there)
    assert "kimi_serve_role.html" in (pages / "docsite" / "operate.html").read_text()
    serve = (pages / "kimi_serve_role.html").read_text()
    assert "kimi_serve_verify_checks" in serve and "speculative" in serve
    assert "draft_mismatch" in (pages / "draft_mismatch_filter.html").read_text()
