"""The release: the built collection holds only what a user installs (an allow-list, not a deny-list, so that a new
top-level file or folder in the repository must be placed on one side or the other), every reference to the
collection's version is galaxy.yml's, and every version_added names a release of the changelog."""
import glob
import os
import re
import subprocess
import sys
import tarfile

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# What the tarball holds at its top: the content (plugins, roles, playbooks, meta), the docs site's pages and the
# changelog (changelog.yaml and its CHANGELOG.md), the README and its LICENSE, the EE's system packages (bindep.txt, read by ansible-builder from the
# collection) and the benchmark client's pin (playbooks/bench.yml's aiperf). Galaxy writes MANIFEST.json and FILES.json.
TOP = {"FILES.json", "MANIFEST.json", "CHANGELOG.md", "LICENSE", "README.md", "bindep.txt", "requirements-bench.txt", "changelogs",
       "docs", "meta", "playbooks", "plugins", "roles"}


def galaxy():
    with open(os.path.join(ROOT, "galaxy.yml"), encoding="utf-8") as handle:
        return yaml.safe_load(handle)


def checkout_strategies():
    """The strategies the checkout's own runs name: kimi.deploy.* FQCNs only (a short name would be a checkout file)."""
    found = []
    for path, pattern in (("ansible.cfg", r"^strategy *= *(\S+)"),
                          (".config/molecule/config.yml", r"ANSIBLE_STRATEGY: \$\{KIMI_ANSIBLE_STRATEGY:-([^}]+)\}"),
                          ("bench/converge.py", r'"KIMI_ANSIBLE_STRATEGY", "([^"]+)"')):
        with open(os.path.join(ROOT, path), encoding="utf-8") as handle:
            names = re.findall(pattern, handle.read(), re.M)
        assert names, (path, pattern)
        found += names
    assert all(name.startswith("kimi.deploy.") for name in found), found
    assert not re.search(r"^strategy_plugins", open(os.path.join(ROOT, "ansible.cfg"), encoding="utf-8").read(), re.M)
    return found


def test_the_built_collection_holds_only_what_a_user_installs(tmp_path):
    galaxy_bin = os.path.join(os.path.dirname(sys.executable), "ansible-galaxy")
    subprocess.run([galaxy_bin, "collection", "build", "--force", "--output-path", str(tmp_path), ROOT], check=True,
                   capture_output=True)
    built = tmp_path / ("kimi-deploy-%s.tar.gz" % galaxy()["version"])
    with tarfile.open(built) as tar:
        names = tar.getnames()
    assert {n.split("/")[0] for n in names} == TOP
    unwanted = [n for n in names if re.search(r"(__pycache__|\.pyc$|\.whl$|\.tar\.gz$|\.orig$|\.rej$|~$)", n)]
    assert not unwanted, unwanted
    assert "docs/demo-bench.png" not in names and "changelogs/.plugin-cache.yaml" not in names
    assert "changelogs/changelog.yaml" in names
    # Installed = cloned: every strategy this checkout runs (ansible.cfg, the molecule harness, the converge benchmark)
    # is a plugin of the built collection, not a file of the checkout.
    for strategy in checkout_strategies():
        assert "plugins/strategy/%s.py" % strategy.split(".")[-1] in names, strategy
    assert os.path.getsize(built) < 2 * 2 ** 20, "the collection tarball grew past 2 MiB: %d bytes" % (
        os.path.getsize(built))


def test_every_reference_to_the_collections_version_is_galaxys():
    version = galaxy()["version"]
    found = []
    for path in ("execution-environment.yml", "ansible-navigator.yml", "Makefile", "docs/docsite/rst/awx.rst",
                 "README.md"):
        with open(os.path.join(ROOT, path), encoding="utf-8") as handle:
            found += [(path, v) for v in re.findall(r"kimi-deploy-ee:([0-9][0-9A-Za-z.+-]*)", handle.read())]
    assert found and all(v == version for _path, v in found), (version, found)


def test_galaxy_names_every_engine_and_platform_the_collection_serves():
    from ansible_collections.kimi.deploy.plugins.module_utils._engines.registry import ENGINES
    description = galaxy()["description"]
    for build in ENGINES.values():
        assert build["title"] in description, build["title"]


def test_every_version_added_is_a_release_of_the_changelog():
    with open(os.path.join(ROOT, "changelogs", "changelog.yaml"), encoding="utf-8") as handle:
        releases = set((yaml.safe_load(handle).get("releases") or {}).keys())
    assert galaxy()["version"] in releases, "galaxy.yml's version has no release in changelogs/changelog.yaml"
    stray = []
    for path in glob.glob(os.path.join(ROOT, "plugins", "**", "*.py"), recursive=True) + glob.glob(
            os.path.join(ROOT, "roles", "*", "meta", "argument_specs.yml")):
        with open(path, encoding="utf-8") as handle:
            stray += [(os.path.relpath(path, ROOT), v) for v in re.findall(r"version_added: *['\"]?([0-9.]+)",
                                                                           handle.read()) if v not in releases]
    assert not stray, stray
