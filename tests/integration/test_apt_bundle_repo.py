"""kimi.deploy.apt_bundle on real apt, dpkg-deb, apt-ftparchive and gpg, offline: a signed local flat repository of
tiny .debs (one depends on another) is the source; the module bundles a package's closure from it, and a second
private apt root reads the bundle as an offline host would. (The file is not test_apt_bundle.py: pytest cannot collect
two test modules of one basename, and tests/unit/plugins/test_apt_bundle.py has it.)"""
import hashlib
import json
import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODULE = os.path.join(ROOT, "plugins", "modules", "apt_bundle.py")
BIN = os.path.dirname(sys.executable)
KEY_FILE = "kimi-bundle-archive-keyring"
TOOLS = ("apt-get", "apt-ftparchive", "dpkg-deb", "gpg", "gpgv", "gpgconf")

pytestmark = pytest.mark.skipif(not all(shutil.which(t) for t in TOOLS),
                                reason="needs %s" % ", ".join(TOOLS))

PACKAGES = {  # name: (version, architecture, depends)
    "kimi-bundle-a": ("1.0-1", "all", "kimi-bundle-b (>= 2.0)"),
    "kimi-bundle-b": ("1:2.0-1", "amd64", ""),
    "kimi-bundle-c": ("3.0-1", "all", ""),
    "kimi-bundle-arm": ("1.0-1", "arm64", ""),
}


def sh(argv, **kwargs):
    proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, check=False,
                          **kwargs)
    assert proc.returncode == 0, (argv, proc.stdout, proc.stderr)
    return proc.stdout


def make_signed_flat_repo(base):
    """base/repo: pool/*.deb, Packages(.gz), Release, InRelease signed by a throwaway key; base/vendor.pub (armored,
    a name apt would not take as is) and base/vendor.gpg (binary)."""
    repo, stage, home = base / "repo", base / "stage", base / "vendor-gnupg"
    (repo / "pool").mkdir(parents=True)
    home.mkdir(mode=0o700)
    for name, (version, arch, depends) in PACKAGES.items():
        (stage / name / "DEBIAN").mkdir(parents=True)
        (stage / name / "usr" / "share" / "doc" / name).mkdir(parents=True)
        (stage / name / "usr" / "share" / "doc" / name / "README").write_text("kimi.deploy apt_bundle test\n")
        control = ["Package: " + name, "Version: " + version, "Architecture: " + arch,
                   "Maintainer: kimi.deploy test suite <apt-bundle@invalid>"]
        if depends:
            control.append("Depends: " + depends)
        control.append("Description: TEST package for kimi.deploy.apt_bundle")
        (stage / name / "DEBIAN" / "control").write_text("\n".join(control) + "\n")
        deb = repo / "pool" / ("%s_%s_%s.deb" % (name, version.rsplit(":", maxsplit=1)[-1], arch))
        sh(["dpkg-deb", "--root-owner-group", "-Zxz", "--build", str(stage / name), str(deb)])
    packages = sh(["apt-ftparchive", "packages", "pool"], cwd=str(repo))
    (repo / "Packages").write_text(packages)
    sh(["gzip", "-9nk", str(repo / "Packages")])
    release = sh(["apt-ftparchive", "-o", "APT::FTPArchive::Release::Origin=kimi-test-vendor", "release", "."],
                 cwd=str(repo))
    (repo / "Release").write_text(release)
    gpg = ["gpg", "--homedir", str(home), "--batch", "--quiet", "--pinentry-mode", "loopback", "--passphrase", ""]
    try:
        sh(gpg + ["--quick-gen-key", "kimi test vendor (throwaway)", "ed25519", "sign", "never"])
        sh(gpg + ["--clearsign", "--output", str(repo / "InRelease"), str(repo / "Release")])
        sh(gpg + ["--armor", "--output", str(base / "vendor.pub"), "--export"])
        sh(gpg + ["--output", str(base / "vendor.gpg"), "--export"])
    finally:
        subprocess.run(["gpgconf", "--homedir", str(home), "--kill", "gpg-agent"], check=False)
    shutil.rmtree(str(stage))
    return repo


@pytest.fixture(scope="module")
def vendor(tmp_path_factory):
    base = tmp_path_factory.mktemp("apt-bundle-vendor")  # under pytest's 0700 folder: apt's _apt cannot read it
    repo = make_signed_flat_repo(base)
    return {"repo": str(repo), "asc": str(base / "vendor.pub"), "gpg": str(base / "vendor.gpg")}


@pytest.fixture
def args(tmp_path, vendor):
    return {"path": str(tmp_path / "bundle" / "apt" / "testrel"), "release": "testrel",
            "sources": [{"uris": ["file:" + vendor["repo"]], "suites": ["./"], "signed_by": vendor["asc"]}],
            "packages": ["kimi-bundle-a"], "signing_home": str(tmp_path / "signing-gnupg"),
            "cache_dir": str(tmp_path / "cache")}


def run_module(args, check_mode=False):
    """The module as Ansible runs it: a Python process on the ANSIBLE_MODULE_ARGS JSON."""
    params = dict(args, _ansible_check_mode=check_mode)
    proc = subprocess.run([sys.executable, MODULE, json.dumps({"ANSIBLE_MODULE_ARGS": params})],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, check=False,
                          env=dict(os.environ, PYTHONPATH=os.path.join(ROOT, ".collections")), timeout=300)
    try:
        result = json.loads(proc.stdout)
    except ValueError:
        raise AssertionError("no JSON (rc %d): %s %s" % (proc.returncode, proc.stdout, proc.stderr))
    assert ("failed" in result) == (proc.returncode != 0), result
    return result


def run_ansible(args):
    """The module through `ansible localhost -m kimi.deploy.apt_bundle` (the collection from .collections)."""
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
               ANSIBLE_STDOUT_CALLBACK="json", ANSIBLE_LOCALHOST_WARNING="0", ANSIBLE_INVENTORY_UNPARSED_WARNING="0")
    proc = subprocess.run([os.path.join(BIN, "ansible"), "localhost", "-m", "kimi.deploy.apt_bundle",
                           "-a", json.dumps(args)], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, check=False, timeout=300)
    try:
        report = json.loads(proc.stdout)
    except ValueError:
        raise AssertionError("ansible printed no JSON (rc %d): %s %s" % (proc.returncode, proc.stdout, proc.stderr))
    return report["plays"][0]["tasks"][0]["hosts"]["localhost"]


def gpgv_signer(keyring, signed, tmp_path):
    home = tmp_path / "gpgv-home"
    home.mkdir(mode=0o700, exist_ok=True)
    proc = subprocess.run(["gpgv", "--homedir", str(home), "--status-fd", "1", "--keyring", keyring, signed],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, check=False)
    if proc.returncode != 0:
        return None
    return [line.split()[-1] for line in proc.stdout.splitlines() if line.startswith("[GNUPG:] VALIDSIG")][0]


def offline_host_installs(path, packages, tmp_path, keyring_suffix=".asc"):
    """A second private apt root that uses only the bundle, as the offline host's sources would:
    deb [signed-by=KEY] file:PATH ./ -> what `apt-get -s install` would install."""
    root = tmp_path / "offline-host"
    shutil.rmtree(str(root), ignore_errors=True)
    for folder in ("etc/apt/sources.list.d", "etc/apt/preferences.d", "var/lib/apt/lists/partial",
                   "var/cache/apt/archives/partial"):
        (root / folder).mkdir(parents=True)
    (root / "status").write_text("")
    (root / "etc/apt/sources.list").write_text("deb [signed-by=%s] file:%s ./\n" % (
        os.path.join(path, KEY_FILE + keyring_suffix), path))
    apt = ["apt-get", "-q", "-o", "Dir=%s" % root, "-o", "Dir::State::status=%s" % (root / "status"),
           "-o", "APT::Architecture=amd64", "-o", "APT::Architectures=amd64", "-o", "Debug::NoLocking=1",
           "-o", "APT::Sandbox::User=root", "-o", "Acquire::AllowInsecureRepositories=false"]
    out = sh(apt + ["update"])
    assert "W:" not in out and "E:" not in out, out
    out = sh(apt + ["-s", "--no-install-recommends", "install"] + packages)
    return sorted(line.split()[1] for line in out.splitlines() if line.startswith("Inst "))


def listing(path):
    return sorted(os.path.relpath(os.path.join(d, f), path) for d, _dirs, files in os.walk(path) for f in files)


def test_bundle_the_closure_sign_it_and_change_nothing_the_second_time(tmp_path, args):
    path = args["path"]
    plan = run_module(args, check_mode=True)
    assert plan["changed"] and plan["fingerprint"] is None and plan["key_generated"], plan
    assert [(p["name"], p["version"], p["filename"]) for p in plan["packages"]] == [
        ("kimi-bundle-a", "1.0-1", "pool/kimi-bundle-a_1.0-1_all.deb"),
        ("kimi-bundle-b", "1:2.0-1", "pool/kimi-bundle-b_2.0-1_amd64.deb")]
    assert plan["added"] == ["pool/kimi-bundle-a_1.0-1_all.deb", "pool/kimi-bundle-b_2.0-1_amd64.deb"]
    assert not os.path.exists(os.path.dirname(path)), "check mode wrote the bundle"
    assert not os.path.exists(args["cache_dir"]) and not os.path.exists(args["signing_home"]), "check mode wrote"

    built = run_ansible(args)
    assert built["changed"] and not built.get("failed"), built
    fpr = built["fingerprint"]
    assert len(fpr) == 40 and int(fpr, 16) and built["key_generated"]
    assert built["requested"] == ["kimi-bundle-a"] and built["release"] == "testrel"
    assert built["architecture"] == "amd64" and built["path"] == path
    assert built["packages"] == plan["packages"] and built["bytes"] == sum(p["size"] for p in plan["packages"])
    assert listing(path) == sorted(["InRelease", "Packages", "Packages.gz", "Release", "Release.gpg",
                                    KEY_FILE + ".asc", KEY_FILE + ".gpg", "pool/kimi-bundle-a_1.0-1_all.deb",
                                    "pool/kimi-bundle-b_2.0-1_amd64.deb"])
    for package in built["packages"]:
        with open(os.path.join(path, package["filename"]), "rb") as handle:
            assert hashlib.sha256(handle.read()).hexdigest() == package["sha256"]
    # the cache holds the files, the pool links them; the private key stays in signing_home (0700)
    assert os.stat(os.path.join(path, "pool/kimi-bundle-b_2.0-1_amd64.deb")).st_ino == \
        os.stat(os.path.join(args["cache_dir"], "kimi-bundle-b_1%3a2.0-1_amd64.deb")).st_ino
    assert os.stat(args["signing_home"]).st_mode & 0o777 == 0o700
    assert gpgv_signer(os.path.join(path, KEY_FILE + ".gpg"), os.path.join(path, "InRelease"), tmp_path) == fpr
    with open(os.path.join(path, "Release")) as handle:
        release = handle.read()
    for line in ("Origin: kimi.deploy bundle", "Label: testrel", "Suite: testrel", "Codename: testrel",
                 "Architectures: amd64"):
        assert line + "\n" in release
    assert not [e for e in os.listdir(os.path.dirname(path)) if e != "testrel"], "a temporary folder was left"
    assert offline_host_installs(path, ["kimi-bundle-a"], tmp_path) == ["kimi-bundle-a", "kimi-bundle-b"]
    assert offline_host_installs(path, ["kimi-bundle-a"], tmp_path, ".gpg") == ["kimi-bundle-a", "kimi-bundle-b"]

    inrelease = os.stat(os.path.join(path, "InRelease"))
    again = run_module(args)
    assert not again["changed"] and again["fingerprint"] == fpr and not again["key_generated"], again
    assert again["added"] == [] and again["removed"] == [] and again["reasons"] == []
    assert os.stat(os.path.join(path, "InRelease")) == inrelease, "an unchanged repository was rewritten"
    assert not run_module(args, check_mode=True)["changed"]

    # another closure: the new package in, the old ones out of the pool; the key is reused
    other = run_module(dict(args, packages=["kimi-bundle-c=3.0-1"]))
    assert other["changed"] and other["fingerprint"] == fpr, other
    assert other["added"] == ["pool/kimi-bundle-c_3.0-1_all.deb"]
    assert other["removed"] == ["pool/kimi-bundle-a_1.0-1_all.deb", "pool/kimi-bundle-b_2.0-1_amd64.deb"]
    assert sorted(os.listdir(os.path.join(path, "pool"))) == ["kimi-bundle-c_3.0-1_all.deb"]
    assert gpgv_signer(os.path.join(path, KEY_FILE + ".gpg"), os.path.join(path, "InRelease"), tmp_path) == fpr
    assert offline_host_installs(path, ["kimi-bundle-c"], tmp_path) == ["kimi-bundle-c"]
    assert not [e for e in os.listdir(os.path.dirname(path)) if e != "testrel"], "the old folder was left"


def test_a_tampered_pool_file_is_rewritten(tmp_path, args):
    assert run_module(args)["changed"]
    deb = os.path.join(args["path"], "pool", "kimi-bundle-a_1.0-1_all.deb")
    os.unlink(deb)  # a hard link into the cache: write a new file, do not edit the cache's
    with open(deb, "wb") as handle:
        handle.write(b"not a deb")
    fixed = run_module(args)
    assert fixed["changed"] and fixed["added"] == ["pool/kimi-bundle-a_1.0-1_all.deb"], fixed
    assert not run_module(args)["changed"]


def test_an_unknown_package_fails_naming_it_and_the_release(tmp_path, args):
    result = run_module(dict(args, packages=["kimi-bundle-a", "kimi-bundle-nope"]))
    assert result["failed"] and result["option"] == "packages", result
    assert "kimi-bundle-nope is not in the sources, for testrel (amd64)" in result["msg"]
    assert not os.path.exists(os.path.dirname(args["path"]))
    result = run_module(dict(args, packages=["kimi-bundle-a=9.9"]), check_mode=True)
    assert result["failed"] and "kimi-bundle-a=9.9 has no such version, for testrel" in result["msg"], result
    result = run_module(dict(args, packages=["kimi-bundle-arm"]))  # arm64 only; the target is amd64
    assert result["failed"] and "kimi-bundle-arm is not in the sources, for testrel (amd64)" in result["msg"]
    result = run_module(dict(args, packages=["kimi-bundle-arm"], architecture="arm64",
                             cache_dir=str(tmp_path / "cache-arm64")))
    assert result["changed"] and [p["name"] for p in result["packages"]] == ["kimi-bundle-arm"], result


def test_a_source_signed_by_another_key_or_a_missing_keyring_fails_naming_sources(tmp_path, args):
    other = tmp_path / "other-gnupg"
    other.mkdir(mode=0o700)
    gpg = ["gpg", "--homedir", str(other), "--batch", "--quiet", "--pinentry-mode", "loopback", "--passphrase", ""]
    try:
        sh(gpg + ["--quick-gen-key", "someone else", "ed25519", "sign", "never"])
        sh(gpg + ["--output", str(tmp_path / "other.gpg"), "--export"])
    finally:
        subprocess.run(["gpgconf", "--homedir", str(other), "--kill", "gpg-agent"], check=False)
    source = dict(args["sources"][0], signed_by=str(tmp_path / "other.gpg"))
    result = run_module(dict(args, sources=[source]))
    assert result["failed"] and result["option"] == "sources", result
    assert "apt-get update for testrel (amd64) failed (is signed_by the keyring" in result["msg"], result
    source = dict(args["sources"][0], signed_by="/nonexistent/keyrings/debian-archive-keyring.gpg")
    result = run_module(dict(args, sources=[source]))
    assert result["failed"] and result["option"] == "sources"
    assert result["msg"] == ("sources[0].signed_by: the keyring file /nonexistent/keyrings/debian-archive-keyring.gpg "
                             "does not exist on this host; the Debian package debian-archive-keyring ships it "
                             "(apt-get install debian-archive-keyring)")


def test_a_binary_source_key_works_too(tmp_path, args, vendor):
    source = dict(args["sources"][0], signed_by=vendor["gpg"])
    result = run_module(dict(args, sources=[source]))
    assert result["changed"] and len(result["packages"]) == 2, result
