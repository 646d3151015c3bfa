"""Linters read no git-ignored path (issue 50): `make demo` then `make test` failed in yamllint, which read the demo's
.demo/molecule/molecule.yml (written with this checkout's absolute path in it, 144 > 140 columns).

.yamllint takes its ignores from .gitignore (ignore-from-file, with .yamllint-ignore's checked-in non-YAML beside it);
.ansible-lint's exclude_paths name every folder .gitignore names (ansible-lint applies the root .gitignore to the root's
own entries only). Each test builds a small git repository from the checkout's own config files, in seconds.
"""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[3]
YAMLLINT = [sys.executable, "-m", "yamllint"]  # the virtualenv's yamllint, as make lint and tests/run-all.sh run it
LONG = "---\nkey: " + "x" * 195 + "\n"  # a 200-column line: line-length's maximum is 140
CLEAN = "---\nkey: value\n"
# hermetic git: no user or system config (a global excludes file would ignore more than the checkout's .gitignore)
GIT_ENV = dict(os.environ, GIT_CONFIG_GLOBAL=os.devnull, GIT_CONFIG_NOSYSTEM="1")


def run(cmd, cwd):
    return subprocess.run(cmd, cwd=cwd, env=GIT_ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          universal_newlines=True, timeout=120, check=False)


def write(base, relpath, text):
    path = base / relpath
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def repo(tmp_path):
    """A git repository with the checkout's .gitignore, .yamllint and .yamllint-ignore and one clean YAML file."""
    for name in (".gitignore", ".yamllint", ".yamllint-ignore"):
        shutil.copy(ROOT / name, tmp_path / name)
    assert run(["git", "init", "-q", "."], tmp_path).returncode == 0
    write(tmp_path, "roles/r/tasks/main.yml", CLEAN)
    return tmp_path


def gitignored_folders():
    """The folder patterns of the checkout's .gitignore (those ending in /), e.g. .demo/, build/, tests/output/."""
    lines = (ROOT / ".gitignore").read_text(encoding="utf-8").splitlines()
    folders = sorted({line.strip() for line in lines if line.strip().endswith("/") and not line.startswith(("#", "!"))})
    assert ".demo/" in folders and "build/" in folders, folders
    return folders


def planted(folders):
    """A YAML file in every git-ignored folder: at the root, and deeper for a pattern that matches at any depth."""
    paths = []
    for folder in folders:
        paths.append(folder + "planted.yml")
        if "/" not in folder.rstrip("/"):
            paths.append("roles/r/" + folder + "planted.yml")
    return paths


def not_ignored_by_git(base):
    out = run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], base)
    assert out.returncode == 0, out.stdout
    return set(out.stdout.split())


def test_yamllint_passes_beside_the_demo_state_and_fails_on_the_same_file_elsewhere(tmp_path):
    base = repo(tmp_path)
    write(base, ".demo/molecule/molecule.yml", LONG)
    assert run(["git", "check-ignore", "-q", ".demo/molecule/molecule.yml"], base).returncode == 0
    proc = run(YAMLLINT + ["--strict", "."], base)
    assert proc.returncode == 0, proc.stdout
    # the same file where git does not ignore it: yamllint reads it and fails
    write(base, "molecule/demo/molecule.yml", LONG)
    proc = run(YAMLLINT + ["--strict", "."], base)
    assert proc.returncode == 1, proc.stdout
    assert "./molecule/demo/molecule.yml" in proc.stdout and "line too long (200 > 140 characters)" in proc.stdout
    assert ".demo" not in proc.stdout


def test_yamllint_lists_no_file_git_ignores(tmp_path):
    """A YAML file in every folder .gitignore names: yamllint lists exactly the YAML files git does not ignore."""
    base = repo(tmp_path)
    for path in planted(gitignored_folders()):
        write(base, path, LONG)
    write(base, "molecule/demo/molecule.yml", CLEAN)
    proc = run(YAMLLINT + ["--list-files", "."], base)
    assert proc.returncode == 0, proc.stdout
    listed = {line[2:] if line.startswith("./") else line for line in proc.stdout.split()}
    expected = {path for path in not_ignored_by_git(base) if path.endswith((".yml", ".yaml")) or path == ".yamllint"}
    assert listed == expected == {".yamllint", "roles/r/tasks/main.yml", "molecule/demo/molecule.yml"}, listed


def test_yamllint_lists_no_git_ignored_file_of_this_checkout():
    """The checkout itself (a demo's .demo/, the virtualenvs, build/ as they are here): what yamllint reads, git
    does not ignore."""
    proc = run(YAMLLINT + ["--list-files", "."], ROOT)
    assert proc.returncode == 0, proc.stdout
    listed = {line[2:] if line.startswith("./") else line for line in proc.stdout.split()}
    ignored = listed - not_ignored_by_git(ROOT)
    assert listed and not ignored, sorted(ignored)


DISCOVER = """
import json, sys
from pathlib import Path
from ansiblelint.file_utils import get_all_files
print(json.dumps([str(path) for path in get_all_files(Path("."), exclude_paths=json.loads(sys.argv[1]))]))
"""


def test_ansible_lint_discovers_no_file_in_a_folder_gitignore_names(tmp_path):
    """ansible-lint's discovery (file_utils.get_all_files, what ansible-lint runs on ".") with .ansible-lint's
    exclude_paths and no .gitignore to help: it finds exactly the files git does not ignore."""
    base = repo(tmp_path)
    for path in planted(gitignored_folders()):
        write(base, path, LONG)
    expected = not_ignored_by_git(base) - {".gitignore"}
    (base / ".gitignore").unlink()
    exclude = yaml.safe_load((ROOT / ".ansible-lint").read_text(encoding="utf-8"))["exclude_paths"]
    proc = run([sys.executable, "-c", DISCOVER, json.dumps(exclude)], base)
    assert proc.returncode == 0, proc.stdout
    found = set(json.loads(proc.stdout.splitlines()[-1]))
    assert found == expected, sorted(found ^ expected)
