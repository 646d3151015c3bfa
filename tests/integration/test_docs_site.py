"""make docs: the collection's documentation site (antsibull-docs, Sphinx with warnings as errors) has a page for
every module, filter and role, each role page showing its argument specs."""
import os
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VENV = os.path.join(ROOT, ".venv-docs")


def plugins(kind):
    folder = os.path.join(ROOT, "plugins", kind)
    return sorted(f[:-3] for f in os.listdir(folder) if f.endswith(".py") and not f.startswith("_"))


def test_the_docs_site_has_a_page_for_every_module_filter_and_role(tmp_path):
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
    serve = (pages / "kimi_serve_role.html").read_text()
    assert "kimi_serve_verify_checks" in serve and "speculative" in serve
    assert "draft_mismatch" in (pages / "draft_mismatch_filter.html").read_text()
