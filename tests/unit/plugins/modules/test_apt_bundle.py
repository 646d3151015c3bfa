"""kimi.deploy.apt_bundle's pure parts (_apt_bundle): inputs, the deb822 sources, apt's and gpg's output, Release
files, the idempotence decision. No network, no apt run: the run-time path is in
tests/integration/test_apt_bundle_repo.py."""
import os
import re
import shutil

import pytest

from ansible_collections.kimi.deploy.plugins.module_utils._bundle import apt as ab

SHA_A = "a" * 64
SHA_B = "b" * 64
FPR = "E2A48D59A956DB3DBF146BD9FD6CFAFE5888F950"
DEBIAN = {"uris": ["http://deb.debian.org/debian"], "suites": ["trixie", "trixie-updates"], "components": None,
          "signed_by": "/usr/share/keyrings/debian-archive-keyring.gpg"}
FLAT = {"uris": ["file:/srv/repo"], "suites": ["./"], "components": None, "signed_by": "/srv/repo/key.asc"}


def params(tmp_path, **over):
    p = {"path": str(tmp_path / "bundle" / "apt" / "trixie"), "release": "trixie", "architecture": "amd64",
         "sources": [dict(DEBIAN)], "packages": ["caddy"], "signing_home": str(tmp_path / "gnupg"),
         "key_name": ab.DEFAULT_KEY_NAME, "cache_dir": str(tmp_path / "cache")}
    p.update(over)
    return p


# ------------------------------------------------------------------------------------------------ inputs
@pytest.mark.parametrize("spec,expect", [
    ("caddy", {"name": "caddy", "arch": None, "version": None, "release": None}),
    ("libc6:amd64=2.41-12", {"name": "libc6", "arch": "amd64", "version": "2.41-12", "release": None}),
    ("docker.io=1:26.1.5+dfsg1-9+b9", {"name": "docker.io", "arch": None, "version": "1:26.1.5+dfsg1-9+b9",
                                       "release": None}),
    ("python3-venv/trixie-backports", {"name": "python3-venv", "arch": None, "version": None,
                                       "release": "trixie-backports"}),
])
def test_package_specs_apt_get_takes(spec, expect):
    assert ab.parse_package(spec) == expect


@pytest.mark.parametrize("spec", ["", "-o", "--allow-unauthenticated", "caddy*", "?name(caddy)", "Caddy", "a b",
                                  "caddy=", "caddy;rm"])
def test_package_specs_that_are_not_names_are_refused_naming_the_option(spec):
    with pytest.raises(ab.AptBundleError, match="packages: ") as info:
        ab.parse_package(spec)
    assert info.value.option == "packages"


def test_components_default_to_main_and_flat_suites_take_none():
    named, flat = ab.normalize_sources([DEBIAN, FLAT])
    assert named["components"] == ["main"] and flat["components"] == []
    assert ab.normalize_sources([dict(FLAT, components=[])])[0]["components"] == []
    assert ab.normalize_sources([dict(DEBIAN, components=["main", "contrib"])])[0]["components"] == ["main", "contrib"]


@pytest.mark.parametrize("source,match", [
    (dict(FLAT, components=["main"]), r"sources\[0\]\.components: a flat suite \(\./\) has no components"),
    (dict(DEBIAN, suites=["./", "trixie"]), r"sources\[0\]\.suites: .* mixes flat suites"),
    (dict(DEBIAN, components=[]), r"sources\[0\]\.components: suites .* need at least one component"),
    (dict(DEBIAN, signed_by=None), r"sources\[0\]\.signed_by: give the keyring file"),
    (dict(DEBIAN, uris=["deb.debian.org/debian"]), r"sources\[0\]\.uris: 'deb.debian.org/debian' is not a URI"),
    (dict(DEBIAN, suites=[]), r"sources\[0\]: give uris and suites"),
    (dict(DEBIAN, suites=["trixie main"]), r"is not a suite or component name"),
])
def test_malformed_sources_are_refused_naming_the_entry(source, match):
    with pytest.raises(ab.AptBundleError, match=match) as info:
        ab.normalize_sources([source])
    assert info.value.option == "sources"


def test_no_sources_is_refused():
    with pytest.raises(ab.AptBundleError, match="sources: give at least one source"):
        ab.normalize_sources([])


def test_inputs_are_checked_naming_the_option(tmp_path):
    ab.check_inputs(params(tmp_path))
    cases = [
        (dict(release="trixie updates"), "release"),
        (dict(architecture="AMD64"), "architecture"),
        (dict(packages=[]), "packages"),
        (dict(key_name="  "), "key_name"),
        (dict(path="rel/apt"), "path"),
        (dict(path="/"), "path"),
        (dict(signing_home=str(tmp_path / "bundle" / "apt" / "trixie" / ".gnupg")), "signing_home"),
        (dict(cache_dir=str(tmp_path / "bundle" / "apt" / "trixie")), "cache_dir"),
    ]
    for over, option in cases:
        with pytest.raises(ab.AptBundleError) as info:
            ab.check_inputs(params(tmp_path, **over))
        assert info.value.option == option, (over, str(info.value))
    with pytest.raises(ab.AptBundleError, match="the private signing key must never be in the bundle"):
        ab.check_inputs(params(tmp_path, signing_home=str(tmp_path / "bundle" / "apt" / "trixie" / "k")))


# ------------------------------------------------------------------------------------------------ keys and sources
def test_the_distributions_keyrings_name_their_package():
    msg = ab.missing_keyring_message(0, "/usr/share/keyrings/debian-archive-keyring.gpg")
    assert msg == ("sources[0].signed_by: the keyring file /usr/share/keyrings/debian-archive-keyring.gpg does not "
                   "exist on this host; the Debian package debian-archive-keyring ships it "
                   "(apt-get install debian-archive-keyring)")
    assert "ubuntu-keyring" in ab.missing_keyring_message(2, "/usr/share/keyrings/ubuntu-archive-keyring.gpg")
    assert ab.keyring_package("/usr/share/keyrings/debian-archive-trixie-stable.gpg") == "debian-archive-keyring"
    assert ab.keyring_package("/usr/share/keyrings/ubuntu-cloudimage-keyring.gpg") == "ubuntu-cloudimage-keyring"
    other = ab.missing_keyring_message(1, "/etc/kimi/nvidia.asc")
    assert other == "sources[1].signed_by: the keyring file /etc/kimi/nvidia.asc does not exist on this host"


def test_key_format_tells_armored_binary_and_keybox_apart():
    assert ab.key_format(b"\n-----BEGIN PGP PUBLIC KEY BLOCK-----\n\nmDMEZ...") == "asc"
    assert ab.key_format(b"\x98\x33\x04\x65") == "gpg"
    assert ab.key_format(b"\x00\x00\x00\x20KBXf\x00\x00") == "kbx"
    assert ab.key_format(b"  \n") is None


def test_sources_render_as_deb822():
    named, flat = ab.normalize_sources([DEBIAN, FLAT])
    assert ab.render_source(named, "/tmp/r/keys/source-0.gpg") == (
        "Types: deb\n"
        "URIs: http://deb.debian.org/debian\n"
        "Suites: trixie trixie-updates\n"
        "Components: main\n"
        "Signed-By: /tmp/r/keys/source-0.gpg\n")
    assert ab.render_source(flat, "/tmp/r/keys/source-1.asc") == (
        "Types: deb\nURIs: file:/srv/repo\nSuites: ./\nSigned-By: /tmp/r/keys/source-1.asc\n")


def test_apt_runs_sandboxed_unless_a_source_is_a_local_folder(tmp_path):
    bundle = ab.AptBundle(params(tmp_path), None, {"apt-get": "/usr/bin/apt-get", "gpg": "gpg"}, is_root=True)
    bundle.root = "/tmp/root"
    bundle.sources = ab.normalize_sources([DEBIAN])
    argv = bundle.apt_argv("/tmp/root/empty", "update")
    for option in ("Dir=/tmp/root", "Dir::State::status=/tmp/root/status", "Dir::Cache::archives=/tmp/root/empty",
                   "APT::Architecture=amd64", "APT::Architectures=amd64", "Debug::NoLocking=1",
                   "APT::Default-Release=", "Acquire::AllowInsecureRepositories=false"):
        assert argv[argv.index(option) - 1] == "-o", option
    assert argv[0] == "/usr/bin/apt-get" and argv[-1] == "update"
    assert "APT::Sandbox::User=root" not in argv
    bundle.sources = ab.normalize_sources([DEBIAN, FLAT])
    assert "APT::Sandbox::User=root" in bundle.apt_argv("/tmp/root/empty", "update")
    bundle.is_root = False
    assert "APT::Sandbox::User=root" not in bundle.apt_argv("/tmp/root/empty", "update")


def test_a_missing_keyring_fails_before_apt_runs(tmp_path):
    calls = []

    def run(argv, cwd=None, env=None):
        calls.append(argv)
        return 0, "", ""
    p = params(tmp_path, sources=[dict(DEBIAN, signed_by=str(tmp_path / "debian-archive-keyring.gpg"))])
    with pytest.raises(ab.AptBundleError, match=r"sources\[0\]\.signed_by: the keyring file .*/debian-archive-keyring"
                                                r"\.gpg does not exist on this host; the Debian package "
                                                r"debian-archive-keyring ships it") as info:
        ab.AptBundle(p, run, {"apt-get": "apt-get", "gpg": "gpg", "gpgconf": "gpgconf"}).run()
    assert info.value.option == "sources" and calls == []


def test_an_armored_key_is_copied_with_the_asc_name_apt_needs(tmp_path):
    key = tmp_path / "vendor.pub"
    key.write_text("-----BEGIN PGP PUBLIC KEY BLOCK-----\n\nxyz\n-----END PGP PUBLIC KEY BLOCK-----\n")
    bundle = ab.AptBundle(params(tmp_path), None, {})
    bundle.sources = ab.normalize_sources([dict(FLAT, signed_by=str(key))])
    try:
        bundle.make_root()
        sources = open(os.path.join(bundle.root, "etc/apt/sources.list.d/kimi-bundle-0.sources")).read()
        copy = os.path.join(bundle.root, "keys", "source-0.asc")
        assert "Signed-By: %s\n" % copy in sources
        assert open(copy).read() == key.read_text()
        assert os.path.getsize(os.path.join(bundle.root, "status")) == 0
    finally:
        shutil.rmtree(bundle.root)


def test_tools_missing_are_named_with_their_packages():
    with pytest.raises(ab.AptBundleError, match=r"missing on this host: apt-ftparchive, gpgv; install them: "
                                                r"apt-get install apt-utils gpgv"):
        ab.find_tools(lambda name: None if name in ("apt-ftparchive", "gpgv") else "/usr/bin/" + name)


# ------------------------------------------------------------------------------------------------ apt's output
PRINT_URIS = """Reading package lists...
Building dependency tree...
The following NEW packages will be installed:
  caddy libc6
%s
'file:/srv/repo/pool/kimi-a_1.0-1_all.deb' kimi-a_1%%3a1.0-1_all.deb 660 SHA256:1807bc1c4c7097c3c620a54f2b5478edabfd235bba66d2184bc1921fc8d760f7
'http://deb.debian.org/debian/pool/main/c/caddy/caddy_2.6.2-5_amd64.deb' caddy_2.6.2-5_amd64.deb 13543056 SHA256:%s
""" % ("'http://deb.debian.org/debian/pool/main/g/glibc/libc6_2.41-12%2bdeb13u5_amd64.deb' "
       "libc6_2.41-12+deb13u5_amd64.deb 2850108 SHA256:B59B0625CD1A791375D40DAB23A4D5D3D0641E3D0A773501BECDC3725B7F99CF",
       SHA_A)


def test_print_uris_gives_the_closure_with_sizes_and_hashes():
    items = ab.closure_items(PRINT_URIS)
    assert [(i["name"], i["version"], i["architecture"], i["filename"], i["size"]) for i in items] == [
        ("caddy", "2.6.2-5", "amd64", "pool/caddy_2.6.2-5_amd64.deb", 13543056),
        ("kimi-a", "1:1.0-1", "all", "pool/kimi-a_1.0-1_all.deb", 660),
        ("libc6", "2.41-12+deb13u5", "amd64", "pool/libc6_2.41-12+deb13u5_amd64.deb", 2850108)]
    assert items[2]["sha256"] == "b59b0625cd1a791375d40dab23a4d5d3d0641e3d0a773501becdc3725b7f99cf"
    assert items[1]["store"] == "kimi-a_1%3a1.0-1_all.deb" and items[1]["uri"] == "file:/srv/repo/pool/kimi-a_1.0-1_all.deb"


def test_a_source_without_sha256_is_refused():
    with pytest.raises(ab.AptBundleError, match="the sources give no SHA256 for zstd_1.5.6_amd64.deb"):
        ab.closure_items("'http://x/zstd.deb' zstd_1.5.6_amd64.deb 10 MD5Sum:%s\n" % ("0" * 32))


def test_store_names_and_pool_names():
    assert ab.split_store_name("libfoo_1%3a2.0~rc1-1_arm64.deb") == ("libfoo", "1:2.0~rc1-1", "arm64")
    assert ab.pool_name("libfoo", "1:2.0~rc1-1", "arm64") == "libfoo_2.0~rc1-1_arm64.deb"
    with pytest.raises(ValueError):
        ab.split_store_name("weird.deb")


def test_local_paths_of_file_uris():
    assert ab.local_path("file:/srv/my%20repo/pool/a_1_all.deb") == "/srv/my repo/pool/a_1_all.deb"
    assert ab.local_path("file:///srv/repo/a.deb") == "/srv/repo/a.deb"
    assert ab.local_path("http://deb.debian.org/debian/pool/a.deb") is None


@pytest.mark.parametrize("err,match", [
    ("E: Unable to locate package kimi-nope\n", r"packages: kimi-nope is not in the sources, for trixie \(amd64\)"),
    ("E: Package 'mail-transport-agent' has no installation candidate\n",
     "packages: mail-transport-agent has no installation candidate"),
    ("E: Version '9.9' for 'caddy' was not found\n", r"packages: caddy=9\.9 has no such version, for trixie"),
    ("E: Release 'sid' for 'caddy' was not found\n", r"packages: caddy/sid is not in that release"),
    ("E: Unable to locate package a\nE: Unable to locate package b\n",
     r"packages: a is not in the sources; b is not in the sources, for trixie"),
])
def test_unknown_packages_are_named_with_the_release(err, match):
    error = ab.package_error("Reading package lists...\n", err, "trixie", "amd64")
    assert error.option == "packages"
    assert re.search(match, str(error)), str(error)


def test_unmet_dependencies_are_reported():
    out = ("Some packages could not be installed. This may mean that you have\n"
           "The following packages have unmet dependencies:\n"
           " kimi-a : Depends: kimi-b (>= 3.0) but 2.0-1 is to be installed\n")
    error = ab.package_error(out, "E: Unable to correct problems, you have held broken packages.\n", "trixie", "amd64")
    assert str(error) == ("packages: apt cannot resolve them for trixie (amd64): kimi-a : Depends: kimi-b (>= 3.0) "
                          "but 2.0-1 is to be installed")


def test_update_failures_include_warnings_that_drop_an_index():
    err = ("W: GPG error: http://x trixie InRelease: NO_PUBKEY 0E98404D386FA1D9\n"
           "E: The repository 'http://x trixie InRelease' is not signed.\n"
           "N: Updating from such a repository can't be done securely\n"
           "W: Unable to read /tmp/r/etc/apt/preferences.d/ - DirectoryExists\n")
    assert ab.update_failures("", err) == [
        "W: GPG error: http://x trixie InRelease: NO_PUBKEY 0E98404D386FA1D9",
        "E: The repository 'http://x trixie InRelease' is not signed."]
    assert ab.update_failures("W: Failed to fetch http://x/dists/trixie-updates/InRelease  Could not resolve\n", "")
    assert ab.update_failures("Get:1 http://x trixie InRelease\nReading package lists...\n", "") == []


# ------------------------------------------------------------------------------------------------ control files
RELEASE = """Architectures: amd64
Codename: trixie
Date: Sat, 09 Aug 2025 09:31:48 UTC
Label: trixie
Origin: kimi.deploy bundle
Suite: trixie
SHA256:
 %s              901 Packages
 %s              547 Packages.gz
""" % (SHA_A, SHA_B)


def test_release_fields_and_hashes():
    fields = ab.parse_control(RELEASE)[0]
    assert fields["Suite"] == "trixie" and fields["Origin"] == "kimi.deploy bundle"
    assert ab.release_hashes(fields) == {"Packages": (SHA_A, 901), "Packages.gz": (SHA_B, 547)}
    assert ab.release_date_of(RELEASE) == 1754731908


def test_release_date_is_read_from_a_clearsigned_file_and_can_be_set():
    signed = ("-----BEGIN PGP SIGNED MESSAGE-----\nHash: SHA512\n\n" + RELEASE +
              "-----BEGIN PGP SIGNATURE-----\n\nabc\n-----END PGP SIGNATURE-----\n")
    assert ab.release_date_of(signed) == 1754731908
    assert ab.release_date_of("Origin: x\n") is None
    assert "Date: Thu, 01 Jan 1970 00:00:10 UTC\n" in ab.set_release_date(RELEASE, ab.rfc2822(10))


def test_packages_are_sorted_by_name_and_architecture():
    text = ("Package: zstd\nArchitecture: amd64\nFilename: pool/zstd_1_amd64.deb\n\n"
            "Package: caddy\nArchitecture: amd64\nDescription: web server\n more\nFilename: pool/caddy_2_amd64.deb\n\n")
    assert ab.sort_packages(text) == (
        "Package: caddy\nArchitecture: amd64\nDescription: web server\n more\nFilename: pool/caddy_2_amd64.deb\n\n"
        "Package: zstd\nArchitecture: amd64\nFilename: pool/zstd_1_amd64.deb\n\n")


# ------------------------------------------------------------------------------------------------ gpg output
COLONS = """sec:u:255:22:FD6CFAFE5888F950:1795620543:::u:::scSC:::+::ed25519:::0:
fpr:::::::::E2A48D59A956DB3DBF146BD9FD6CFAFE5888F950:
grp:::::::::F28FD3541199EF7F63E6915A1A000481597C44A1:
uid:u::::1795620543::C0DE46383EB1049F3D6FDAD7C4485AAF848FFE45::kimi.deploy air-gap bundle::::::::::0:
sec:e:255:22:1111111111111111:1600000000:1700000000::u:::scSC:::+::ed25519:::0:
fpr:::::::::1111111111111111111111111111111111111111:
uid:e::::1600000000::AA::old key\\x3a expired::::::::::0:
ssb:u:255:18:2222222222222222:1600000000::::::e:::+::cv25519::
fpr:::::::::2222222222222222222222222222222222222222:
"""


def test_secret_keys_from_gpg_colons():
    keys = ab.parse_secret_keys(COLONS)
    assert keys == [{"fpr": FPR, "uids": ["kimi.deploy air-gap bundle"], "usable": True},
                    {"fpr": "1" * 40, "uids": ["old key: expired"], "usable": False}]


def test_the_key_is_the_one_named_else_the_only_one_else_none():
    keys = ab.parse_secret_keys(COLONS)
    assert ab.choose_key(keys, ab.DEFAULT_KEY_NAME)["fpr"] == FPR
    assert ab.choose_key(keys, "another name")["fpr"] == FPR  # the only usable one
    assert ab.choose_key([], ab.DEFAULT_KEY_NAME) is None
    two = [dict(keys[0], uids=["a"]), {"fpr": "3" * 40, "uids": ["b"], "usable": True}]
    with pytest.raises(ab.AptBundleError, match="signing_home holds 2 signing keys and none is named 'c'") as info:
        ab.choose_key(two, "c")
    assert info.value.option == "signing_home"
    assert ab.choose_key(two, "b")["fpr"] == "3" * 40
    with pytest.raises(ab.AptBundleError, match="cannot sign"):
        ab.choose_key([keys[1]], ab.DEFAULT_KEY_NAME)


def test_the_signer_is_the_primary_key_of_validsig():
    status = ("[GNUPG:] GOODSIG FD6CFAFE5888F950 kimi\n"
              "[GNUPG:] VALIDSIG 2222222222222222222222222222222222222222 2026-11-25 1795620543 0 4 0 22 10 01 "
              "%s\n" % FPR)
    assert ab.valid_signer(status) == FPR
    assert ab.valid_signer("[GNUPG:] BADSIG FD6CFAFE5888F950 kimi\n") is None


# ------------------------------------------------------------------------------------------------ the decision
FIELDS = {"Origin": ab.ORIGIN, "Label": "trixie", "Suite": "trixie", "Codename": "trixie", "Architectures": "amd64"}
WANTED = {"pool/caddy_2_amd64.deb": SHA_A, "pool/libc6_2_amd64.deb": SHA_B}


def current(**over):
    state = {"exists": True, "signer": FPR, "detached_ok": True, "fields": dict(FIELDS), "indexes_ok": True,
             "packages": dict(WANTED), "pool": dict(WANTED), "keys_ok": True}
    state.update(over)
    return state


def test_the_same_closure_signed_by_the_same_key_changes_nothing():
    assert ab.decide(WANTED, current(), FPR, FIELDS) == {"changed": False, "added": [], "removed": [], "reasons": []}


def test_a_missing_repository_adds_everything():
    decision = ab.decide(WANTED, {"exists": False}, FPR, FIELDS)
    assert decision["changed"] and decision["added"] == sorted(WANTED) and decision["removed"] == []


def test_pool_differences_are_added_and_removed():
    pool = {"pool/caddy_2_amd64.deb": "c" * 64, "pool/old_1_all.deb": SHA_A}
    decision = ab.decide(WANTED, current(pool=pool, packages=dict(pool)), FPR, FIELDS)
    assert decision == {"changed": True, "added": sorted(WANTED), "removed": ["pool/old_1_all.deb"], "reasons": []}


@pytest.mark.parametrize("state,fingerprint,reason", [
    (current(signer="9" * 40), FPR, "InRelease is not signed by %s (it is signed by %s)" % (FPR, "9" * 40)),
    (current(signer=None), FPR, "InRelease is not signed by %s (it is missing or does not verify)" % FPR),
    (current(detached_ok=False), FPR, "Release.gpg is missing, does not verify or does not sign what InRelease holds"),
    (current(fields=dict(FIELDS, Suite="bookworm")), FPR, "Release has Suite: bookworm, want trixie"),
    (current(indexes_ok=False), FPR, "Packages or Packages.gz do not match the hashes in Release"),
    (current(packages={}), FPR, "Packages does not list exactly the files in pool/"),
    (current(keys_ok=False), FPR, "the public key files are missing or differ from the signing key"),
])
def test_anything_else_that_differs_rewrites_the_repository(state, fingerprint, reason):
    decision = ab.decide(WANTED, state, fingerprint, FIELDS)
    assert decision["changed"] and reason in decision["reasons"], decision
    assert decision["added"] == [] and decision["removed"] == []


def test_a_key_to_generate_rewrites_the_repository_but_the_pool_still_counts():
    state = current(signer=None, detached_ok=False, fields={}, indexes_ok=False, keys_ok=False,
                    pool={"pool/caddy_2_amd64.deb": SHA_A, "pool/old_1_all.deb": SHA_A})
    assert ab.decide(WANTED, state, None, FIELDS) == {
        "changed": True, "added": ["pool/libc6_2_amd64.deb"], "removed": ["pool/old_1_all.deb"],
        "reasons": ["a signing key will be generated"]}
