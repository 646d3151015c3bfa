# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""A signed flat apt repository holding some packages and their whole dependency closure for one target release,
built on a connected machine for an air-gapped one (the apt_bundle module). Private to kimi.deploy.

apt itself resolves the closure, in a private apt root (a temporary folder): its own sources (deb822, Signed-By a
copy of the given keyring), an empty dpkg status (nothing is installed, so the closure is complete down to libc6),
the target's architecture only, no locking. `--print-uris` with an empty archives folder lists every .deb of the
closure with its size and SHA256; `--download-only` fills the cache folder. The repository is then:

    <path>/pool/<name>_<version without epoch>_<arch>.deb   hard links into the cache where possible
    <path>/Packages, Packages.gz                             apt-ftparchive packages, sorted
    <path>/Release, InRelease, Release.gpg                   apt-ftparchive release; gpg --clearsign, --detach-sign
    <path>/kimi-bundle-archive-keyring.asc, .gpg             the public signing key, armored and binary

built beside <path> in <path>.tmp-XXXX and swapped in by renames. Every program runs from an argv list through the
`run(argv, cwd=None, env=None) -> (rc, stdout, stderr)` callable the caller gives (AnsibleModule.run_command in the
module, subprocess in tests).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import calendar
import errno
import gzip
import hashlib
import os
import re
import shutil
import tempfile
import time

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX
    fcntl = None

try:
    from urllib.parse import unquote, urlsplit
except ImportError:  # pragma: no cover - Python 2
    from urllib import unquote  # pylint: disable=ansible-bad-import-from
    from urlparse import urlsplit  # pylint: disable=ansible-bad-import-from

from ansible_collections.kimi.deploy.plugins.module_utils._files import atomic_output, fsync_folder

ORIGIN = "kimi.deploy bundle"
KEY_FILE = "kimi-bundle-archive-keyring"
DEFAULT_KEY_NAME = "kimi.deploy air-gap bundle"
READ_SIZE = 1 << 20
TMP_MARK = ".tmp-"  # bundle_manifest refuses a bundle holding such a name: a crashed build cannot be shipped
APT_ENV = {"LC_ALL": "C", "LANG": "C", "LANGUAGE": "C", "DEBIAN_FRONTEND": "noninteractive"}

# The programs, and the Debian package that ships each.
TOOLS = (("apt-get", "apt"), ("apt-ftparchive", "apt-utils"), ("gpg", "gpg"), ("gpgv", "gpgv"),
         ("gpgconf", "gpgconf"))

# Keyrings of the distributions' archives, by file name: the Debian package that ships them.
KEYRING_PACKAGES = (
    (re.compile(r"^debian-archive-"), "debian-archive-keyring"),
    (re.compile(r"^debian-ports-archive-"), "debian-ports-archive-keyring"),
    (re.compile(r"^ubuntu-cloudimage-"), "ubuntu-cloudimage-keyring"),
    (re.compile(r"^ubuntu-(archive|master)-"), "ubuntu-keyring"),
)

# A package as apt-get install takes it: name, optional :arch, then =version or /release.
PACKAGE_RE = re.compile(r"^(?P<name>[a-z0-9][a-z0-9+.-]*)(?::(?P<arch>[a-z0-9][a-z0-9-]*))?"
                        r"(?:=(?P<version>[A-Za-z0-9.+~:-]+)|/(?P<release>[A-Za-z0-9.+~_-]+))?$")
ARCH_RE = re.compile(r"^[a-z0-9][a-z0-9-]*$")
RELEASE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.+~_-]*$")
URI_RE = re.compile(r"^[a-z][a-z0-9+.-]*:\S+$")
PRINT_URI_RE = re.compile(r"^'(?P<uri>[^']+)' (?P<store>\S+) (?P<size>\d+)(?: (?P<hash>\S*))?\s*$")
SHA256_RE = re.compile(r"^[0-9a-f]{64}$")

# What apt-get install prints about a package it cannot give.
UNKNOWN_RES = (
    (re.compile(r"^E: Unable to locate package (?P<pkg>\S+)"), "is not in the sources"),
    (re.compile(r"^E: Package '(?P<pkg>[^']+)' has no installation candidate"),
     "has no installation candidate (a virtual or obsolete package: name one that provides it)"),
    (re.compile(r"^E: Version '(?P<version>[^']+)' for '(?P<pkg>[^']+)' was not found"), "has no such version"),
    (re.compile(r"^E: Release '(?P<version>[^']+)' for '(?P<pkg>[^']+)' was not found"), "is not in that release"),
    (re.compile(r"^E: Couldn't find any package by (glob|regex) '(?P<pkg>[^']+)'"), "matches no package"),
)
# apt-get update lines that mean an index is missing (it may still exit 0): the closure would be wrong.
UPDATE_FAILURE_RE = re.compile(r"^(E: |W: (Failed to fetch|GPG error|The repository|Some index files failed|"
                               r"An error occurred during the signature|.*NO_PUBKEY|.*is not signed))")


class AptBundleError(Exception):
    """A failure the module reports as is; `option` names the option at fault."""

    def __init__(self, message, option=None):
        super(AptBundleError, self).__init__(message)
        self.option = option


# ------------------------------------------------------------------------------------------------ inputs
def parse_package(spec):
    """'name', 'name:arch', 'name=version' or 'name/release' as apt-get takes them -> dict, or AptBundleError."""
    match = PACKAGE_RE.match(spec or "")
    if not match:
        raise AptBundleError("packages: %r is not a package name (name, name=version or name/release, as apt-get "
                             "install takes them; no globs or patterns)" % (spec,), "packages")
    return match.groupdict()


def check_inputs(params):
    """Refuse malformed values before anything runs; names the option."""
    if not params.get("packages"):
        raise AptBundleError("packages: name at least one package", "packages")
    for spec in params["packages"]:
        parse_package(spec)
    if not RELEASE_RE.match(params.get("release") or ""):
        raise AptBundleError("release: %r is not a release name (letters, digits, . + ~ _ -)"
                             % (params.get("release"),), "release")
    if not ARCH_RE.match(params.get("architecture") or ""):
        raise AptBundleError("architecture: %r is not a Debian architecture (amd64, arm64, ...)"
                             % (params.get("architecture"),), "architecture")
    key_name = params.get("key_name") or ""
    if not key_name.strip() or "\n" in key_name or key_name.startswith("-"):
        raise AptBundleError("key_name: %r cannot be a key's user ID" % (key_name,), "key_name")
    for option in ("path", "signing_home", "cache_dir"):
        if params.get(option) and not os.path.isabs(params[option]):
            raise AptBundleError("%s: %s must be an absolute path" % (option, params[option]), option)
    path = os.path.normpath(params["path"])
    if path == os.sep:
        raise AptBundleError("path: / cannot be the repository folder", "path")
    for option in ("signing_home", "cache_dir"):
        if params.get(option) and inside(params[option], path):
            raise AptBundleError("%s: %s is inside path %s, which is replaced on every change%s" % (
                option, params[option], path,
                " (and the private signing key must never be in the bundle)" if option == "signing_home" else ""),
                option)
    normalize_sources(params.get("sources"))


def inside(child, parent):
    child, parent = os.path.realpath(child), os.path.realpath(parent)
    return child == parent or child.startswith(parent.rstrip(os.sep) + os.sep)


def normalize_sources(sources):
    """Check the sources and give each its components: default [main], none for flat suites (ending in /)."""
    if not sources:
        raise AptBundleError("sources: give at least one source (uris, suites, signed_by)", "sources")
    result = []
    for index, source in enumerate(sources):
        where = "sources[%d]" % index
        uris, suites = source.get("uris") or [], source.get("suites") or []
        components = source.get("components")
        if not uris or not suites:
            raise AptBundleError("%s: give uris and suites (a flat repository has suites: ['./'])" % where, "sources")
        for uri in uris:
            if not URI_RE.match(uri):
                raise AptBundleError("%s.uris: %r is not a URI (http://..., https://..., file:/path)" % (where, uri),
                                     "sources")
        for value in list(suites) + list(components or []):
            if not value or re.search(r"\s", value) or value.startswith("#"):
                raise AptBundleError("%s: %r is not a suite or component name" % (where, value), "sources")
        flat = [suite.endswith("/") for suite in suites]
        if any(flat) and not all(flat):
            raise AptBundleError("%s.suites: %s mixes flat suites (ending in /) and named ones: give them as two "
                                 "sources" % (where, suites), "sources")
        if all(flat):
            if components:
                raise AptBundleError("%s.components: a flat suite (%s) has no components; leave components out or "
                                     "give []" % (where, ", ".join(suites)), "sources")
            components = []
        elif components is None:
            components = ["main"]
        elif not components:
            raise AptBundleError("%s.components: suites %s need at least one component" % (where, suites), "sources")
        if not source.get("signed_by"):
            raise AptBundleError("%s.signed_by: give the keyring file that signs %s" % (where, uris[0]), "sources")
        result.append({"uris": list(uris), "suites": list(suites), "components": list(components),
                       "signed_by": source["signed_by"]})
    return result


def keyring_package(path):
    """The Debian package that ships a distribution's archive keyring file, or None."""
    name = os.path.basename(path)
    for pattern, package in KEYRING_PACKAGES:
        if pattern.match(name):
            return package
    return None


def missing_keyring_message(index, path):
    msg = "sources[%d].signed_by: the keyring file %s does not exist on this host" % (index, path)
    package = keyring_package(path)
    if package:
        msg += "; the Debian package %s ships it (apt-get install %s)" % (package, package)
    return msg


def key_format(data):
    """'asc' (armored), 'gpg' (binary OpenPGP), 'kbx' (a GnuPG keybox, which apt cannot read) or None (empty)."""
    if not data.strip():
        return None
    if data.lstrip()[:36].startswith(b"-----BEGIN PGP PUBLIC KEY BLOCK-----"):
        return "asc"
    if data[4:8] == b"KBXf":
        return "kbx"
    return "gpg"


def render_source(source, keyring):
    """One deb822 .sources stanza; keyring is the path apt reads (named .asc or .gpg by its format)."""
    lines = ["Types: deb", "URIs: " + " ".join(source["uris"]), "Suites: " + " ".join(source["suites"])]
    if source["components"]:
        lines.append("Components: " + " ".join(source["components"]))
    lines.append("Signed-By: " + keyring)
    return "\n".join(lines) + "\n"


def sandbox_possible(sources):
    """apt downloads as the _apt user when run as root; a file: source in a private folder cannot be read so."""
    return not any(uri.split(":", 1)[0] in ("file", "copy") for source in sources for uri in source["uris"])


# ------------------------------------------------------------------------------------------------ apt's output
def parse_print_uris(text):
    """`apt-get --print-uris install` lines -> [{uri, store, size, algo, digest}] in apt's order."""
    items = []
    for line in text.splitlines():
        match = PRINT_URI_RE.match(line)
        if not match:
            continue
        algo, _sep, digest = (match.group("hash") or "").partition(":")
        items.append({"uri": match.group("uri"), "store": match.group("store"), "size": int(match.group("size")),
                      "algo": algo.upper() if digest else None, "digest": digest.lower() if digest else None})
    return items


def split_store_name(store):
    """apt's archive file name, QuoteString(name)_QuoteString(version)_QuoteString(arch).deb -> (name, version, arch)."""
    base = store[:-4] if store.endswith(".deb") else store
    parts = base.split("_")
    if len(parts) != 3:
        raise ValueError("not an apt archive name: %s" % store)
    return tuple(unquote(part) for part in parts)


def pool_name(name, version, arch):
    """The name Debian's archive gives the file: name_version-without-epoch_arch.deb."""
    return "%s_%s_%s.deb" % (name, version.split(":", 1)[1] if ":" in version else version, arch)


def closure_items(text):
    """The closure from --print-uris: [{name, version, architecture, filename, size, sha256, uri, store}], by name."""
    items = []
    for item in parse_print_uris(text):
        name, version, arch = split_store_name(item["store"])
        if item["algo"] != "SHA256" or not SHA256_RE.match(item["digest"] or ""):
            raise AptBundleError("the sources give no SHA256 for %s (%s): apt_bundle needs it"
                                 % (item["store"], item["uri"]), "sources")
        items.append({"name": name, "version": version, "architecture": arch,
                      "filename": "pool/" + pool_name(name, version, arch), "size": item["size"],
                      "sha256": item["digest"], "uri": item["uri"], "store": item["store"]})
    items.sort(key=lambda i: (i["name"], i["architecture"]))
    return items


def apt_messages(*texts):
    """The E: and W: lines apt printed, in order."""
    return [line.strip() for text in texts for line in (text or "").splitlines()
            if line.startswith(("E: ", "W: "))]


def package_error(out, err, release, arch):
    """The AptBundleError for apt-get install output that names packages it cannot give, else a general one."""
    problems = []
    for line in apt_messages(out, err):
        for pattern, why in UNKNOWN_RES:
            match = pattern.match(line)
            if match:
                version = match.groupdict().get("version")
                problems.append("%s%s %s" % (match.group("pkg"), "=" + version if version and "version" in why
                                             else ("/" + version if version else ""), why))
    if problems:
        return AptBundleError("packages: %s, for %s (%s) in the given sources" % (
            "; ".join(problems), release, arch), "packages")
    unmet = [line.strip() for line in (out or "").splitlines() if re.match(r"^ *\S+ : (Pre)?Depends|^ +(Pre)?Depends|"
                                                                           r"^ *\S+ : (Breaks|Conflicts)", line)]
    detail = "; ".join(unmet[:20]) or "; ".join(apt_messages(out, err)) or (err or out or "").strip()[-2000:]
    return AptBundleError("packages: apt cannot resolve them for %s (%s): %s" % (release, arch, detail), "packages")


def update_failures(out, err):
    """Lines of apt-get update that mean an index was not fetched or not verified."""
    return [line for line in apt_messages(out, err) if UPDATE_FAILURE_RE.match(line)]


# ------------------------------------------------------------------------------------------------ control files
def parse_control(text):
    """Deb822 paragraphs -> [dict]; continuation lines are joined with newlines (Release's hash lists)."""
    paragraphs, current, key = [], {}, None
    for line in text.splitlines():
        if not line.strip():
            if current:
                paragraphs.append(current)
            current, key = {}, None
        elif line[0] in " \t" and key:
            current[key] += "\n" + line.strip()
        elif ":" in line:
            key, _sep, value = line.partition(":")
            key = key.strip()
            current[key] = value.strip()
    if current:
        paragraphs.append(current)
    return paragraphs


def release_hashes(fields, section="SHA256"):
    """{file: (hash, size)} of a Release's hash section."""
    result = {}
    for line in (fields.get(section) or "").splitlines():
        parts = line.split()
        if len(parts) == 3:
            result[parts[2]] = (parts[0].lower(), int(parts[1]))
    return result


def sort_packages(text):
    """apt-ftparchive's Packages in a stable order (by package, architecture, file)."""
    stanzas = [s.strip("\n") for s in re.split(r"\n\s*\n", text) if s.strip()]

    def key(stanza):
        fields = parse_control(stanza)[0]
        return fields.get("Package", ""), fields.get("Architecture", ""), fields.get("Filename", "")
    return "".join(s + "\n\n" for s in sorted(stanzas, key=key))


def set_release_date(text, date):
    """The Release text with its Date line replaced (apt-ftparchive writes now)."""
    return re.sub(r"(?m)^Date: .*$", lambda _m: "Date: " + date, text, count=1)


def release_date_of(text):
    """The Date of a Release text as a Unix time, or None."""
    fields = (parse_control(strip_clearsign(text)) or [{}])[0]
    value = fields.get("Date")
    if not value:
        return None
    for fmt in ("%a, %d %b %Y %H:%M:%S UTC", "%a, %d %b %Y %H:%M:%S +0000", "%a, %d %b %Y %H:%M:%S GMT"):
        try:
            return int(calendar.timegm(time.strptime(value, fmt)))
        except ValueError:
            continue
    return None


def strip_clearsign(text):
    """The signed text of a clearsigned message, unverified (for reading a Date); dash-escapes removed."""
    if not text.startswith("-----BEGIN PGP SIGNED MESSAGE-----"):
        return text
    body = text.split("\n\n", 1)[1] if "\n\n" in text else ""
    body = body.split("\n-----BEGIN PGP SIGNATURE-----", 1)[0]
    return "\n".join(line[2:] if line.startswith("- ") else line for line in body.splitlines()) + "\n"


def rfc2822(stamp):
    return time.strftime("%a, %d %b %Y %H:%M:%S UTC", time.gmtime(stamp))


# ------------------------------------------------------------------------------------------------ gpg output
def parse_secret_keys(text):
    """`gpg --with-colons --list-secret-keys` -> [{fpr, uids, usable}] (usable: may sign, not expired or revoked)."""
    keys, current, want_fpr = [], None, False
    for line in text.splitlines():
        fields = line.split(":")
        if fields[0] == "sec":
            capabilities = fields[11] if len(fields) > 11 else ""
            current = {"fpr": None, "uids": [], "usable": fields[1] not in ("r", "e", "i", "d") and "S" in capabilities}
            keys.append(current)
            want_fpr = True
        elif fields[0] in ("ssb", "sub"):
            want_fpr = False
        elif fields[0] == "fpr" and current is not None and want_fpr and len(fields) > 9:
            current["fpr"] = fields[9].upper()
            want_fpr = False
        elif fields[0] == "uid" and current is not None and len(fields) > 9:
            current["uids"].append(unescape_colons(fields[9]))
    return [k for k in keys if k["fpr"]]


def unescape_colons(value):
    return re.sub(r"\\x([0-9a-fA-F]{2})", lambda m: chr(int(m.group(1), 16)), value)


def choose_key(keys, key_name):
    """The key to sign with: the usable one named key_name, else the only usable one; None when there is none;
    AptBundleError when several could be meant."""
    usable = [k for k in keys if k["usable"]]
    named = [k for k in usable if key_name in k["uids"]]
    if len(named) >= 1:
        return named[0]
    if len(usable) == 1:
        return usable[0]
    if usable:
        raise AptBundleError("signing_home holds %d signing keys and none is named %r: %s; name one with key_name" % (
            len(usable), key_name, ", ".join("%s (%s)" % (k["fpr"], "; ".join(k["uids"])) for k in usable)),
            "signing_home")
    if keys:
        raise AptBundleError("signing_home holds secret keys that cannot sign (expired, revoked or without a "
                             "signing capability): %s" % ", ".join(k["fpr"] for k in keys), "signing_home")
    return None


def valid_signer(status):
    """The primary key fingerprint of a VALIDSIG line in gpgv's --status-fd output, or None."""
    for line in status.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[0] == "[GNUPG:]" and parts[1] == "VALIDSIG":
            return (parts[11] if len(parts) > 11 else parts[2]).upper()
    return None


# ------------------------------------------------------------------------------------------------ the decision
def decide(wanted, current, fingerprint, fields):
    """Whether the repository at path must be (re)written.

    wanted: {pool filename: sha256}. current: what inspect() found - exists, signer (InRelease's key), detached_ok,
    fields (of the signed Release), indexes_ok, packages ({filename: sha256} from Packages), pool ({filename: sha256}
    on disk), keys_ok. fingerprint: the signing key (None when one would be generated). fields: the wanted Release
    fields. -> {changed, added, removed, reasons}."""
    if not current.get("exists"):
        return {"changed": True, "added": sorted(wanted), "removed": [], "reasons": ["the repository does not exist"]}
    reasons = []
    pool = current.get("pool") or {}
    if fingerprint is None:  # nothing signed can be checked against a key that does not exist yet
        reasons.append("a signing key will be generated")
    else:
        if current.get("signer") != fingerprint:
            reasons.append("InRelease is not signed by %s%s" % (
                fingerprint, " (it is signed by %s)" % current["signer"] if current.get("signer") else
                " (it is missing or does not verify)"))
        if not current.get("detached_ok"):
            reasons.append("Release.gpg is missing, does not verify or does not sign what InRelease holds")
        have = current.get("fields") or {}
        for key in sorted(fields):
            if have.get(key) != fields[key]:
                reasons.append("Release has %s: %s, want %s" % (key, have.get(key), fields[key]))
        if not current.get("indexes_ok"):
            reasons.append("Packages or Packages.gz do not match the hashes in Release")
        if (current.get("packages") or {}) != pool:
            reasons.append("Packages does not list exactly the files in pool/")
        if not current.get("keys_ok"):
            reasons.append("the public key files are missing or differ from the signing key")
    added = sorted(f for f in wanted if pool.get(f) != wanted[f])
    removed = sorted(f for f in pool if f not in wanted)
    return {"changed": bool(reasons or added or removed), "added": added, "removed": removed, "reasons": reasons}


# ------------------------------------------------------------------------------------------------ files
def sha256_file(path):
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while True:
            chunk = handle.read(READ_SIZE)
            if not chunk:
                break
            digest.update(chunk)
    return digest.hexdigest()


def read_bytes(path):
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except (IOError, OSError):
        return None


def write_file(path, data, mode=0o644):
    with open(path, "wb") as handle:
        handle.write(data if isinstance(data, bytes) else data.encode("utf-8"))
    os.chmod(path, mode)


def link_or_copy(src, dst):
    """Hard link src at dst, or copy it where a link cannot be made (another file system, no permission)."""
    try:
        os.link(src, dst)
    except OSError as exc:
        if exc.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.EACCES, errno.ENOTSUP):
            raise
        shutil.copyfile(src, dst)
        os.chmod(dst, 0o644)


def copy_atomic(src, dst):
    """Copy src to dst whole (through a temporary name in dst's folder)."""
    with atomic_output(dst, durable=False) as out, open(src, "rb") as handle:
        shutil.copyfileobj(handle, out, READ_SIZE)


def local_path(uri):
    """The path of a file: URI, else None."""
    parts = urlsplit(uri)
    if parts.scheme != "file":
        return None
    return unquote(parts.path)


def default_cache_dir(release, arch):
    return os.path.join(os.path.expanduser("~"), ".cache", "kimi-deploy", "apt", "%s-%s" % (release, arch))


def find_tools(which):
    """{program: path} of the programs needed, or AptBundleError naming the missing ones and their packages."""
    found, missing = {}, []
    for program, package in TOOLS:
        path = which(program)
        if path:
            found[program] = path
        else:
            missing.append((program, package))
    if missing:
        raise AptBundleError("missing on this host: %s; install them: apt-get install %s" % (
            ", ".join(p for p, _pkg in missing), " ".join(sorted(set(pkg for _p, pkg in missing)))))
    return found


# ------------------------------------------------------------------------------------------------ gpg
class Gpg(object):
    """gpg in the private home holding the bundle's signing key; gpgv for checks."""

    def __init__(self, run, tools, home):
        self.run_cmd, self.tools, self.home = run, tools, home
        self.used = False

    def gpg(self, *args):
        self.used = True
        argv = [self.tools["gpg"], "--homedir", self.home, "--batch", "--no-tty", "--quiet",
                "--pinentry-mode", "loopback", "--passphrase", ""] + list(args)
        rc, out, err = self.run_cmd(argv, env=APT_ENV)
        if rc != 0:
            raise AptBundleError("gpg %s in signing_home %s failed (rc %d): %s" % (
                args[0] if args else "", self.home, rc, (err or out).strip()[-2000:]), "signing_home")
        return out

    def secret_keys(self):
        return parse_secret_keys(self.gpg("--with-colons", "--fixed-list-mode", "--list-secret-keys"))

    def generate(self, key_name):
        self.gpg("--quick-gen-key", key_name, "ed25519", "sign", "never")

    def export(self, fingerprint, dest, armor):
        self.gpg(*(["--armor"] if armor else []) + ["--yes", "--output", dest, "--export", fingerprint])

    def sign(self, fingerprint, release, inrelease, detached):
        self.gpg("--yes", "--digest-algo", "SHA512", "--local-user", fingerprint, "--clearsign",
                 "--output", inrelease, release)
        self.gpg("--yes", "--digest-algo", "SHA512", "--local-user", fingerprint, "--armor", "--detach-sign",
                 "--output", detached, release)

    def stop_agent(self):
        if self.used:
            self.run_cmd([self.tools["gpgconf"], "--homedir", self.home, "--kill", "gpg-agent"], env=APT_ENV)

    def verify(self, keyring, signature, data=None, output=None, scratch=None):
        """gpgv against one keyring file -> the signer's primary fingerprint, or None."""
        argv = [self.tools["gpgv"], "--homedir", scratch, "--status-fd", "1", "--keyring", keyring]
        if output:
            argv += ["--output", output]
        argv.append(signature)
        if data:
            argv.append(data)
        rc, out, _err = self.run_cmd(argv, env=APT_ENV)
        return valid_signer(out) if rc == 0 else None


# ------------------------------------------------------------------------------------------------ the build
class AptBundle(object):
    """One run. params: the module's options; run: the command runner; tools: {program: path}."""

    def __init__(self, params, run, tools, check_mode=False, is_root=None):
        self.p = params
        self.run_cmd = run
        self.tools = tools
        self.check_mode = check_mode
        self.is_root = (os.geteuid() == 0) if is_root is None else is_root
        self.path = os.path.normpath(params["path"])
        self.release = params["release"]
        self.arch = params["architecture"]
        self.cache_dir = params.get("cache_dir") or default_cache_dir(self.release, self.arch)
        self.key_name = params.get("key_name") or DEFAULT_KEY_NAME
        self.sources = None
        self.root = None
        self.gpg = Gpg(run, tools, params["signing_home"])
        self.fields = {"Origin": ORIGIN, "Label": self.release, "Suite": self.release, "Codename": self.release,
                       "Architectures": self.arch}

    # -- the private apt root
    def apt_argv(self, archives, *args):
        root = self.root
        argv = [self.tools["apt-get"], "-q",
                "-o", "Dir=" + root,
                "-o", "Dir::State::status=" + os.path.join(root, "status"),
                "-o", "Dir::Cache::archives=" + archives,
                "-o", "APT::Architecture=" + self.arch,
                "-o", "APT::Architectures=" + self.arch,
                "-o", "Debug::NoLocking=1",
                "-o", "APT::Default-Release=",
                "-o", "APT::Install-Recommends=false",
                "-o", "APT::Install-Suggests=false",
                "-o", "APT::Get::AllowUnauthenticated=false",
                "-o", "Acquire::AllowInsecureRepositories=false",
                "-o", "Acquire::AllowDowngradeToInsecureRepositories=false",
                "-o", "Acquire::Retries=3"]
        if self.is_root and not sandbox_possible(self.sources):
            argv += ["-o", "APT::Sandbox::User=root"]
        return argv + list(args)

    def apt(self, archives, *args):
        return self.run_cmd(self.apt_argv(archives, *args), env=APT_ENV)

    def make_root(self):
        self.root = tempfile.mkdtemp(prefix="kimi-apt-bundle-")
        os.chmod(self.root, 0o755)  # apt's _apt user reads the keys and writes lists/partial
        for folder in ("etc/apt/sources.list.d", "etc/apt/apt.conf.d", "etc/apt/preferences.d",
                       "etc/apt/trusted.gpg.d", "var/lib/apt/lists/partial", "var/cache/apt/archives/partial",
                       "keys", "empty/partial", "work"):
            os.makedirs(os.path.join(self.root, folder))
            os.chmod(os.path.join(self.root, folder), 0o755)
        write_file(os.path.join(self.root, "status"), b"")
        for index, source in enumerate(self.sources):
            data = read_bytes(source["signed_by"])
            if data is None:
                if not os.path.exists(source["signed_by"]):
                    raise AptBundleError(missing_keyring_message(index, source["signed_by"]), "sources")
                raise AptBundleError("sources[%d].signed_by: cannot read %s" % (index, source["signed_by"]),
                                     "sources")
            kind = key_format(data)
            if kind is None:
                raise AptBundleError("sources[%d].signed_by: %s is empty" % (index, source["signed_by"]), "sources")
            if kind == "kbx":
                raise AptBundleError("sources[%d].signed_by: %s is a GnuPG keybox, which apt cannot read; export the "
                                     "key with gpg --export (binary) or gpg --armor --export (.asc)"
                                     % (index, source["signed_by"]), "sources")
            # apt reads an armored key only from a file named .asc (apt >= 1.4), a binary one from .gpg
            keyring = os.path.join(self.root, "keys", "source-%d.%s" % (index, kind))
            write_file(keyring, data)
            write_file(os.path.join(self.root, "etc/apt/sources.list.d", "kimi-bundle-%d.sources" % index),
                       render_source(source, keyring))

    def update(self):
        rc, out, err = self.apt(os.path.join(self.root, "empty"), "update")
        failures = update_failures(out, err)
        if rc != 0 or failures:
            detail = "; ".join(failures or apt_messages(out, err)) or (err or out).strip()[-2000:]
            hint = ""
            if "NO_PUBKEY" in detail or "not signed" in detail or "GPG error" in detail:
                hint = " (is signed_by the keyring that signs that repository?)"
            raise AptBundleError("sources: apt-get update for %s (%s) failed%s: %s" % (
                self.release, self.arch, hint, detail), "sources")

    def resolve(self):
        """The closure, from --print-uris into an empty archives folder (so every .deb is listed)."""
        rc, out, err = self.apt(os.path.join(self.root, "empty"), "-o", "Acquire::ForceHash=SHA256", "--print-uris",
                                "-y", "--no-install-recommends", "install", "--", *self.p["packages"])
        if rc != 0:
            raise package_error(out, err, self.release, self.arch)
        items = closure_items(out)
        if not items:
            raise AptBundleError("packages: apt resolved no package to download for %s: %s"
                                 % (self.release, (err or out).strip()[-1000:]), "packages")
        return items

    def source_date(self):
        """The newest Date of the sources' Release files: the bundle's Release says that, not now, so an offline host
        whose clock is behind does not refuse it as 'not valid yet'."""
        lists = os.path.join(self.root, "var/lib/apt/lists")
        dates = []
        for name in os.listdir(lists):
            if name.endswith(("_InRelease", "_Release")):
                with open(os.path.join(lists, name), "rb") as handle:
                    date = release_date_of(handle.read().decode("utf-8", "replace"))
                if date:
                    dates.append(date)
        return max(dates) if dates else None

    # -- the signing key
    def signing_key(self):
        """The fingerprint of the signing key; generated when signing_home holds none (None in check mode)."""
        home = self.p["signing_home"]
        if os.path.exists(home) and not os.path.isdir(home):
            raise AptBundleError("signing_home: %s is not a folder" % home, "signing_home")
        if not os.path.isdir(home):
            if self.check_mode:
                return None, True
            os.makedirs(home, 0o700)
        if not self.check_mode and os.stat(home).st_mode & 0o777 != 0o700:
            os.chmod(home, 0o700)
        key = choose_key(self.gpg.secret_keys(), self.key_name)
        if key:
            return key["fpr"], False
        if self.check_mode:
            return None, True
        self.gpg.generate(self.key_name)
        key = choose_key(self.gpg.secret_keys(), self.key_name)
        if not key:
            raise AptBundleError("signing_home: gpg made no usable key in %s" % home, "signing_home")
        return key["fpr"], True

    def export_keys(self, fingerprint):
        work = os.path.join(self.root, "work")
        binary, armored = os.path.join(work, KEY_FILE + ".gpg"), os.path.join(work, KEY_FILE + ".asc")
        self.gpg.export(fingerprint, binary, armor=False)
        self.gpg.export(fingerprint, armored, armor=True)
        return binary, armored

    # -- what path holds now
    def inspect(self, fingerprint, keyring, armored):
        path = self.path
        current = {"exists": os.path.isdir(path)}
        if not current["exists"]:
            return current
        pool = {}
        pool_dir = os.path.join(path, "pool")
        for name in sorted(os.listdir(pool_dir)) if os.path.isdir(pool_dir) else []:
            full = os.path.join(pool_dir, name)
            pool["pool/" + name] = sha256_file(full) if os.path.isfile(full) and not os.path.islink(full) else None
        current["pool"] = pool
        if fingerprint is None:
            return current
        scratch = tempfile.mkdtemp(dir=os.path.join(self.root, "work"))
        os.chmod(scratch, 0o700)
        plain = os.path.join(scratch, "Release.verified")
        inrelease, release = os.path.join(path, "InRelease"), os.path.join(path, "Release")
        current["signer"] = self.gpg.verify(keyring, inrelease, output=plain, scratch=scratch) \
            if os.path.isfile(inrelease) else None
        text = read_bytes(plain) if current["signer"] else None
        fields = (parse_control(text.decode("utf-8", "replace")) or [{}])[0] if text else {}
        current["fields"] = dict((k, fields.get(k)) for k in self.fields)
        detached = os.path.join(path, "Release.gpg")
        current["detached_ok"] = bool(text) and os.path.isfile(detached) and read_bytes(release) == text and \
            self.gpg.verify(keyring, detached, data=release, scratch=scratch) == fingerprint
        indexes = release_hashes(fields)
        current["indexes_ok"] = bool(indexes) and all(
            name in indexes and os.path.isfile(os.path.join(path, name)) and
            indexes[name] == (sha256_file(os.path.join(path, name)), os.path.getsize(os.path.join(path, name)))
            for name in ("Packages", "Packages.gz"))
        packages = {}
        data = read_bytes(os.path.join(path, "Packages"))
        for stanza in parse_control(data.decode("utf-8", "replace")) if data else []:
            packages[stanza.get("Filename")] = (stanza.get("SHA256") or "").lower()
        current["packages"] = packages
        current["keys_ok"] = read_bytes(os.path.join(path, KEY_FILE + ".gpg")) == read_bytes(keyring) and \
            read_bytes(os.path.join(path, KEY_FILE + ".asc")) == read_bytes(armored)
        return current

    # -- downloading
    def lock_cache(self):
        os.makedirs(os.path.join(self.cache_dir, "partial"), exist_ok=True)
        handle = os.open(os.path.join(self.cache_dir, ".kimi-apt-bundle.lock"), os.O_RDWR | os.O_CREAT, 0o644)
        if fcntl is not None:
            fcntl.flock(handle, fcntl.LOCK_EX)
        return handle

    def cached(self, item):
        """The verified cache file of an item, or None; a cache file with other bytes is removed."""
        path = os.path.join(self.cache_dir, item["store"])
        if not os.path.isfile(path):
            return None
        if os.path.getsize(path) == item["size"] and sha256_file(path) == item["sha256"]:
            return path
        os.unlink(path)
        return None

    def fetch(self, items):
        """Every item's .deb in the cache, verified -> {filename: cache path}; downloads only what is missing."""
        files = {}
        for attempt in (1, 2):
            missing = []
            for item in items:
                path = self.cached(item)
                if path is None:
                    source = local_path(item["uri"])
                    if source and os.path.isfile(source):  # apt does not copy file: sources into the cache
                        if os.path.getsize(source) != item["size"] or sha256_file(source) != item["sha256"]:
                            raise AptBundleError("sources: %s does not match the SHA256 its index gives"
                                                 % source, "sources")
                        copy_atomic(source, os.path.join(self.cache_dir, item["store"]))
                        path = os.path.join(self.cache_dir, item["store"])
                if path is None:
                    missing.append(item)
                else:
                    files[item["filename"]] = path
            if not missing:
                return files
            if attempt == 2:
                raise AptBundleError("sources: after apt-get --download-only, %s are missing or do not match their "
                                     "SHA256 in %s" % (", ".join(i["store"] for i in missing), self.cache_dir),
                                     "sources")
            rc, out, err = self.apt(self.cache_dir, "--download-only", "-y", "--no-install-recommends", "install",
                                    "--", *self.p["packages"])
            if rc != 0:
                detail = "; ".join(apt_messages(out, err)) or (err or out).strip()[-2000:]
                raise AptBundleError("sources: apt-get --download-only for %s failed: %s" % (self.release, detail),
                                     "sources")
        return files  # pragma: no cover

    # -- writing
    def clean_leftovers(self):
        parent, name = os.path.split(self.path)
        for entry in os.listdir(parent):
            if entry.startswith(name + TMP_MARK):
                shutil.rmtree(os.path.join(parent, entry), ignore_errors=True)

    def build(self, staging, items, files, fingerprint, date):
        pool = os.path.join(staging, "pool")
        os.mkdir(pool)
        os.chmod(pool, 0o755)
        for item in items:
            link_or_copy(files[item["filename"]], os.path.join(staging, item["filename"]))
        rc, out, err = self.run_cmd([self.tools["apt-ftparchive"], "packages", "pool"], cwd=staging, env=APT_ENV)
        if rc != 0:
            raise AptBundleError("apt-ftparchive packages failed: %s" % (err or out).strip()[-2000:])
        packages = sort_packages(out).encode("utf-8")
        write_file(os.path.join(staging, "Packages"), packages)
        with open(os.path.join(staging, "Packages.gz"), "wb") as raw:
            with gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=9, mtime=0) as handle:
                handle.write(packages)
        os.chmod(os.path.join(staging, "Packages.gz"), 0o644)
        argv = [self.tools["apt-ftparchive"]]
        for key in ("Origin", "Label", "Suite", "Codename", "Architectures"):
            argv += ["-o", "APT::FTPArchive::Release::%s=%s" % (key, self.fields[key])]
        argv += ["-o", "APT::FTPArchive::Release::Description=kimi.deploy air-gap bundle for %s (%s)" % (
            self.release, self.arch), "release", "."]
        rc, out, err = self.run_cmd(argv, cwd=staging, env=APT_ENV)
        if rc != 0:
            raise AptBundleError("apt-ftparchive release failed: %s" % (err or out).strip()[-2000:])
        if date:
            out = set_release_date(out, rfc2822(date))
        release = os.path.join(staging, "Release")
        write_file(release, out)
        self.gpg.sign(fingerprint, release, os.path.join(staging, "InRelease"), os.path.join(staging, "Release.gpg"))
        for suffix in (".gpg", ".asc"):
            shutil.copyfile(os.path.join(self.root, "work", KEY_FILE + suffix), os.path.join(staging, KEY_FILE + suffix))
            os.chmod(os.path.join(staging, KEY_FILE + suffix), 0o644)
        for name in ("InRelease", "Release.gpg"):
            os.chmod(os.path.join(staging, name), 0o644)
        scratch = tempfile.mkdtemp(dir=os.path.join(self.root, "work"))
        if self.gpg.verify(os.path.join(staging, KEY_FILE + ".gpg"), os.path.join(staging, "InRelease"),
                           scratch=scratch) != fingerprint:
            raise AptBundleError("the InRelease just signed does not verify with %s" % fingerprint, "signing_home")
        os.chmod(staging, 0o755)

    def swap(self, staging):
        """Put staging at path: the old folder is renamed aside first, so a reader sees the old or the new one."""
        parent, name = os.path.split(self.path)
        old = None
        if os.path.lexists(self.path):
            old = tempfile.mkdtemp(prefix=name + TMP_MARK + "old-", dir=parent)
            os.rename(self.path, old)  # over the empty folder mkdtemp made
        try:
            os.rename(staging, self.path)
        except OSError:
            if old:
                os.rename(old, self.path)
            raise
        fsync_folder(parent)
        if old:
            shutil.rmtree(old, ignore_errors=True)

    # -- the run
    def run(self):
        check_inputs(self.p)
        self.sources = normalize_sources(self.p["sources"])
        if os.path.lexists(self.path) and not os.path.isdir(self.path):
            raise AptBundleError("path: %s exists and is not a folder" % self.path, "path")
        result = {"changed": False, "path": self.path, "release": self.release, "architecture": self.arch,
                  "requested": list(self.p["packages"]), "cache_dir": self.cache_dir}
        try:
            self.make_root()
            self.update()
            items = self.resolve()
            result["packages"] = [dict((k, i[k]) for k in ("name", "version", "architecture", "filename", "size",
                                                           "sha256")) for i in items]
            result["bytes"] = sum(i["size"] for i in items)
            fingerprint, generated = self.signing_key()
            result["fingerprint"] = fingerprint
            result["key_generated"] = generated
            keyring = armored = None
            if fingerprint:
                keyring, armored = self.export_keys(fingerprint)
            current = self.inspect(fingerprint, keyring, armored)
            decision = decide(dict((i["filename"], i["sha256"]) for i in items), current, fingerprint, self.fields)
            result.update(added=decision["added"], removed=decision["removed"], reasons=decision["reasons"])
            result["changed"] = decision["changed"] or generated
            if not decision["changed"] or self.check_mode:
                return result
            date = self.source_date()
            parent = os.path.dirname(self.path)
            if not os.path.isdir(parent):
                os.makedirs(parent, 0o755)
            lock = self.lock_cache()
            try:
                files = self.fetch(items)
                self.clean_leftovers()
                staging = tempfile.mkdtemp(prefix=os.path.basename(self.path) + TMP_MARK, dir=parent)
                try:
                    self.build(staging, items, files, fingerprint, date)
                    self.swap(staging)
                except BaseException:
                    shutil.rmtree(staging, ignore_errors=True)
                    raise
            finally:
                os.close(lock)
            return result
        except (OSError, IOError) as exc:
            raise AptBundleError(str(exc))  # pylint: disable=raise-missing-from
        finally:
            try:
                self.gpg.stop_agent()
            finally:
                if self.root:
                    shutil.rmtree(self.root, ignore_errors=True)
