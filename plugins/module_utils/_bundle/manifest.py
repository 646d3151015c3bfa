# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The manifest of an air-gapped bundle (stdlib only). Private to kimi.deploy: the bundle_manifest module uses it.

A bundle is one folder made on a connected machine and carried to an offline one: engine images (.tar.zst), Hugging
Face cache folders (blobs and relative symlinks), a signed apt repository per release, the collection tarball, a copy
of the inventory. Its manifest, <bundle>/manifest.json, lists every file with its size and sha256 and every symlink
with its target, so the offline side can prove the copy is exactly what was made before it uses any of it:

    {"format": "kimi.deploy/bundle-manifest/1", "created": "2025-01-31T12:00:00Z", "components": {...},
     "files": {"images/x.tar.zst": {"size": 123, "sha256": "..."}, "hf/.../snapshots/c/config.json": {"link": "..."}},
     "bytes": 123, "count": 2}

Folders are implied by the paths. Hashing a 600 GB bundle takes minutes, so a verification record outside the bundle
(<record_dir>/<sha256 of the bundle's real path>.json) keeps, per file, [size, mtime_ns, inode, sha256]: a file whose
size, mtime and inode still match is trusted without being read again, unless verify=full. The record cannot see a
change that keeps the size and puts the old mtime back (os.utime): verify=full re-reads every byte.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import fnmatch
import hashlib
import json
import os
import posixpath
import re
import stat
import time

from concurrent.futures import ThreadPoolExecutor

from ansible_collections.kimi.deploy.plugins.module_utils._files import atomic_write

FORMAT = "kimi.deploy/bundle-manifest/1"
RECORD_FORMAT = "kimi.deploy/bundle-record/1"
MANIFEST = "manifest.json"
MANIFEST_TMP_PREFIX = "." + MANIFEST + ".tmp-"  # refused as unfinished if a crash leaves it behind
DEFAULT_RECORD_DIR = "~/.cache/kimi-deploy/bundle-records"
READ_BLOCK = 8 << 20
MAX_LISTED = 20
MAX_WORKERS = 256
# Names of files still being written: "x.tmp-123" (temporary names), ".incomplete" (huggingface_hub), ".part"
# (curl, browsers, wget), ".kimi-partial" (hf_snapshot).
UNFINISHED_INFIXES = (".tmp-",)
UNFINISHED_SUFFIXES = (".incomplete", ".part", ".kimi-partial")
# A file whose mtime is this close to the moment it was hashed is not recorded: a write in the same timestamp tick
# right after the hash would keep size and mtime (git's "racily clean" problem). It is hashed again next time.
RACY_NS = 2 * 10 ** 9
SHA256_RE = re.compile(r"[0-9a-f]{64}\Z")
CATEGORIES = ("changed", "missing", "extra")


class BundleError(Exception):
    """A failure: the message, the option whose value caused it (or None), and result keys to return with it."""

    def __init__(self, msg, option=None, result=None):
        Exception.__init__(self, msg)
        self.option = option
        self.result = result or {}


# ---------------------------------------------------------------------------------------------------- pure helpers

def unfinished(name):
    """True when a file name says the file is still being written (a bundle with one is unfinished)."""
    return any(infix in name for infix in UNFINISHED_INFIXES) or name.endswith(UNFINISHED_SUFFIXES)


def ignored(relpath, patterns):
    """True when a glob of `patterns` matches the relative path or one of the folders above it (fnmatch: * also
    matches /). So "inventory" skips the whole folder, "*.log" every log file, "*/.kimi-snapshot/*" hf_snapshot's
    records."""
    if not patterns:
        return False
    parts = relpath.split("/")
    candidates = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)] + [parts[-1]]
    return any(fnmatch.fnmatchcase(c, p) for p in patterns for c in candidates)


def safe_relpath(relpath):
    """True for a relative POSIX path that stays inside its root: no leading /, no empty, '.' or '..' parts."""
    if not isinstance(relpath, str) or not relpath or relpath.startswith("/") or "\0" in relpath:
        return False
    return all(part not in ("", ".", "..") for part in relpath.split("/"))


def link_escapes(relpath, target):
    """Why the symlink at `relpath` with `target` does not stay inside the bundle on paper, or None.
    (The file system check - does it resolve, inside - is link_problem's.)"""
    if target.startswith("/"):
        return "is an absolute symlink (to %s): it breaks when the bundle moves" % target
    joined = posixpath.normpath(posixpath.join(posixpath.dirname(relpath), target))
    if joined == ".." or joined.startswith("../"):
        return "is a symlink to %s, outside the bundle" % target
    return None


def short(digest):
    return (digest or "?")[:12] + "..."


def stat_key(st):
    """What the record keys a hashed file on: a write changes the size or the mtime, a replacement the inode."""
    return [st.st_size, st.st_mtime_ns, st.st_ino]


def record_name(root):
    """The record's file name: the sha256 of the bundle's absolute real path."""
    return hashlib.sha256(os.path.realpath(os.path.abspath(root)).encode("utf-8", "surrogateescape")).hexdigest() \
        + ".json"


def normalized(value):
    """The value as JSON gives it back (tuples become lists), to compare options with a manifest read from disk."""
    return json.loads(json.dumps(value))


def manifest_document(components, files, created):
    return {
        "format": FORMAT,
        "created": created,
        "components": components,
        "files": files,
        "bytes": sum(entry.get("size", 0) for entry in files.values()),
        "count": len(files),
    }


def manifest_bytes(document):
    return (json.dumps(document, indent=2, sort_keys=True) + "\n").encode("utf-8")


def same_manifest(old, files, components):
    """True when an existing manifest already lists exactly these files and components (its 'created' is kept)."""
    return isinstance(old, dict) and old.get("format") == FORMAT and old.get("files") == files \
        and old.get("components") == components


def files_delta(old_files, files):
    """(added, removed, changed) paths between two 'files' maps."""
    old_files = old_files if isinstance(old_files, dict) else {}
    added = sorted(set(files) - set(old_files))
    removed = sorted(set(old_files) - set(files))
    changed = sorted(p for p in set(files) & set(old_files) if files[p] != old_files[p])
    return added, removed, changed


def parse_manifest(data, name):
    """The manifest document from its bytes; BundleError naming the file when it is not a valid one."""
    try:
        document = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise BundleError("manifest %s is not valid JSON (%s): write it again with state=written" % (name, exc))
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        found = document.get("format") if isinstance(document, dict) else type(document).__name__
        raise BundleError("manifest %s is not a kimi.deploy bundle manifest: format %r, expected %r"
                          % (name, found, FORMAT))
    files = document.get("files")
    if not isinstance(files, dict):
        raise BundleError("manifest %s is malformed: 'files' is not a mapping" % name)
    for relpath, entry in files.items():
        problem = entry_problem(relpath, entry)
        if problem:
            raise BundleError("manifest %s is malformed: %r %s" % (name, relpath, problem))
    if not isinstance(document.get("components", {}), dict):
        raise BundleError("manifest %s is malformed: 'components' is not a mapping" % name)
    document.setdefault("components", {})
    return document


def entry_problem(relpath, entry):
    if not safe_relpath(relpath):
        return "is not a relative path inside the bundle"
    if not isinstance(entry, dict):
        return "has no size and sha256 or link"
    if "link" in entry:
        return None if isinstance(entry["link"], str) and entry["link"] else "has an empty link target"
    size = entry.get("size")
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        return "has no valid size"
    if not isinstance(entry.get("sha256"), str) or not SHA256_RE.match(entry["sha256"]):
        return "has no valid sha256"
    return None


def describe(kind, target):
    if kind == "link":
        return "a symlink to %s" % target
    if kind == "file":
        return "a file"
    return "a %s" % kind


def check_structure(expected, found, ignore):
    """Compare the manifest's files with what the walk found, without reading any file.

    expected: the manifest's 'files'. found: walk()'s {relpath: (kind, link target, lstat)}.
    Returns (problems, to_hash): problems as (category, relpath, line); to_hash: the listed regular files whose size
    is as recorded, for the sha256 check."""
    problems, to_hash = [], []
    for relpath in sorted(expected):
        entry = expected[relpath]
        if relpath not in found:
            problems.append(("missing", relpath, "%s is missing" % relpath))
            continue
        kind, target, st = found[relpath]
        if "link" in entry:
            if kind != "link":
                problems.append(("changed", relpath, "%s is %s, recorded as a symlink to %s"
                                 % (relpath, describe(kind, target), entry["link"])))
            elif target != entry["link"]:
                problems.append(("changed", relpath, "%s changed (a symlink to %s instead of %s)"
                                 % (relpath, target, entry["link"])))
        elif kind != "file":
            problems.append(("changed", relpath, "%s is %s, recorded as a file" % (relpath, describe(kind, target))))
        elif st.st_size != entry["size"]:
            problems.append(("changed", relpath, "%s changed (size %d instead of %d)"
                             % (relpath, st.st_size, entry["size"])))
        else:
            to_hash.append(relpath)
    for relpath in sorted(set(found) - set(expected)):
        if relpath == MANIFEST or ignored(relpath, ignore):
            continue
        kind, target, _st = found[relpath]
        what = "" if kind == "file" else describe(kind, target) + ", "
        problems.append(("extra", relpath, "%s is extra (%snot in the manifest)" % (relpath, what)))
    return problems, to_hash


def sorted_problems(problems):
    return sorted(problems, key=lambda p: (CATEGORIES.index(p[0]) if p[0] in CATEGORIES else len(CATEGORIES), p[1]))


def problem_lines(lines, limit=MAX_LISTED):
    """At most `limit` lines, then 'and N more'."""
    shown = list(lines[:limit])
    if len(lines) > limit:
        shown.append("and %d more" % (len(lines) - limit))
    return "\n".join(shown)


def problems_message(root, problems, limit=MAX_LISTED):
    """'bundle /b is not as made: <one line per problem>', changed first, then missing, then extra."""
    return "bundle %s is not as made: %s" % (root, problem_lines([p[2] for p in sorted_problems(problems)], limit))


# ------------------------------------------------------------------------------------------------- the file system

def file_kind(mode):
    for test, name in ((stat.S_ISFIFO, "fifo"), (stat.S_ISSOCK, "socket"), (stat.S_ISCHR, "character device"),
                       (stat.S_ISBLK, "block device")):
        if test(mode):
            return name
    return "special file"


def walk(root, prune=None):
    """Every regular file, symlink and other non-folder under root: {relpath: (kind, link target or None, lstat)}.
    Symlinks are not followed (a symlink to a folder is one entry). Folders matching `prune` are not entered."""
    found = {}
    stack = [("", root)]
    while stack:
        prefix, folder = stack.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError as exc:
            raise BundleError("cannot list %s: %s" % (folder, exc.strerror or exc))
        for entry in entries:
            relpath = prefix + entry.name
            try:
                st = entry.stat(follow_symlinks=False)
                if stat.S_ISLNK(st.st_mode):
                    found[relpath] = ("link", os.readlink(entry.path), st)
                elif stat.S_ISDIR(st.st_mode):
                    if not ignored(relpath, prune):
                        stack.append((relpath + "/", entry.path))
                elif stat.S_ISREG(st.st_mode):
                    found[relpath] = ("file", None, st)
                else:
                    found[relpath] = (file_kind(st.st_mode), None, st)
            except OSError as exc:
                raise BundleError("cannot read %s: %s" % (entry.path, exc.strerror or exc))
    return dict((k, found[k]) for k in sorted(found))


def link_problem(root_real, root, relpath, target):
    """Why a symlink is not fit for a bundle (absolute, outside, dangling), or None."""
    problem = link_escapes(relpath, target)
    if problem:
        return problem
    resolved = os.path.realpath(os.path.join(root, *relpath.split("/")))
    if resolved != root_real and not resolved.startswith(root_real.rstrip(os.sep) + os.sep):
        return "is a symlink to %s, which leads outside the bundle (%s)" % (target, resolved)
    if not os.path.exists(resolved):
        return "is a dangling symlink (to %s)" % target
    return None


def hash_file(path, block=READ_BLOCK):
    """(sha256 hex digest, fstat before, fstat after) of a regular file; symlinks are not followed.
    hashlib releases the GIL on large updates, so threads hash in parallel."""
    digest = hashlib.sha256()
    buf = bytearray(block)
    view = memoryview(buf)
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    with os.fdopen(fd, "rb", buffering=0) as handle:
        before = os.fstat(fd)
        while True:
            count = handle.readinto(buf)
            if not count:
                break
            digest.update(view[:count])
        after = os.fstat(fd)
    return digest.hexdigest(), before, after


def read_manifest_bytes(root):
    """The bytes of <root>/manifest.json; BundleError naming it when it is missing, not a file or unreadable."""
    path = os.path.join(root, MANIFEST)
    try:
        st = os.lstat(path)
    except OSError:
        raise BundleError("bundle %s has no manifest: %s is missing (make it with state=written where the bundle "
                          "was made)" % (root, path))
    if not stat.S_ISREG(st.st_mode):
        raise BundleError("manifest %s is not a regular file" % path)
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError as exc:
        raise BundleError("cannot read manifest %s: %s" % (path, exc.strerror or exc))


def load_record(path, root_real):
    """The record's {relpath: [size, mtime_ns, inode, sha256]}; {} when it is missing, unreadable or another's."""
    try:
        with open(path, encoding="utf-8") as handle:
            document = json.load(handle)
    except (OSError, ValueError):
        return {}
    if not isinstance(document, dict) or document.get("format") != RECORD_FORMAT or document.get("path") != root_real \
            or not isinstance(document.get("files"), dict):
        return {}
    return dict((k, v) for k, v in document["files"].items() if valid_record_entry(v))


def valid_record_entry(entry):
    return isinstance(entry, list) and len(entry) == 4 and all(isinstance(x, int) for x in entry[:3]) \
        and isinstance(entry[3], str) and SHA256_RE.match(entry[3]) is not None


class Hasher(object):
    """sha256 of bundle files, in parallel, through the stat-keyed record."""

    def __init__(self, record, full, workers):
        self.old = record
        self.new = {}
        self.full = full
        self.workers = workers
        self.hashed_files = 0
        self.hashed_bytes = 0
        self.trusted_files = 0
        self.trusted_bytes = 0

    def digests(self, root, items):
        """items: [(relpath, lstat from the walk)]. Returns ({relpath: sha256}, {relpath: why it has none or it is
        not to be believed}). Files whose record entry matches their stat are trusted unless full."""
        digests, failed, work = {}, {}, []
        for relpath, st in items:
            entry = self.old.get(relpath)
            if not self.full and entry is not None and entry[:3] == stat_key(st):
                digests[relpath] = entry[3]
                self.new[relpath] = entry
                self.trusted_files += 1
                self.trusted_bytes += st.st_size
            else:
                work.append((relpath, st))
        if not work:
            return digests, failed
        work.sort(key=lambda item: -item[1].st_size)  # the big ones first: the pool ends together
        with ThreadPoolExecutor(max_workers=max(1, min(self.workers, len(work)))) as pool:
            for relpath, size, digest, problem, entry in pool.map(lambda item: self.hash_one(root, *item), work):
                if digest is not None:
                    self.hashed_files += 1
                    self.hashed_bytes += size
                if problem:
                    failed[relpath] = problem
                else:
                    digests[relpath] = digest
                if entry:
                    self.new[relpath] = entry
        return digests, failed

    @staticmethod
    def hash_one(root, relpath, st):
        started = time.time_ns()
        try:
            digest, before, after = hash_file(os.path.join(root, *relpath.split("/")))
        except OSError as exc:
            return relpath, 0, None, "cannot be read (%s)" % (exc.strerror or exc), None
        key = stat_key(before)
        if key != stat_key(st) or key != stat_key(after):
            return relpath, before.st_size, digest, "changed while it was being hashed", None
        entry = key + [digest] if after.st_mtime_ns < started - RACY_NS else None
        return relpath, before.st_size, digest, None, entry


# --------------------------------------------------------------------------------------------------------- the run

class Bundle(object):
    """One run of the bundle_manifest module on the options (AnsibleModule's params, or a dict a test builds).
    run() returns the result; BundleError carries a failure (and the option to blame)."""

    def __init__(self, params, check_mode=False):
        p = dict(params)
        self.check_mode = check_mode
        self.state = p.get("state") or "verified"
        if self.state not in ("written", "verified"):
            raise BundleError("state must be written or verified, got %r" % self.state, option="state")
        self.verify_mode = p.get("verify") or "sha256"
        if self.verify_mode not in ("sha256", "full"):
            raise BundleError("verify must be sha256 or full, got %r" % self.verify_mode, option="verify")
        if not p.get("path"):
            raise BundleError("path is required", option="path")
        self.root = os.path.abspath(os.path.expanduser(p["path"]))
        if not os.path.isdir(self.root):
            raise BundleError("path=%s is not a folder" % self.root, option="path")
        self.root_real = os.path.realpath(self.root)
        self.manifest_path = os.path.join(self.root, MANIFEST)
        components = p.get("components")
        components = {} if components is None else components
        if not isinstance(components, dict):
            raise BundleError("components must be a mapping, got %s" % type(components).__name__, option="components")
        try:
            self.components = normalized(components)
        except (TypeError, ValueError) as exc:
            raise BundleError("components must be plain data JSON can hold: %s" % exc, option="components")
        workers = p.get("hash_workers")
        if workers is not None and not 1 <= workers <= MAX_WORKERS:
            raise BundleError("hash_workers must be between 1 and %d, got %d" % (MAX_WORKERS, workers),
                              option="hash_workers")
        self.workers = workers or os.cpu_count() or 1
        self.ignore = list(p.get("ignore") or [])
        if not all(isinstance(x, str) and x for x in self.ignore):
            raise BundleError("ignore must be a list of globs, got %r" % (self.ignore,), option="ignore")
        record_dir = os.path.abspath(os.path.expanduser(p.get("record_dir") or DEFAULT_RECORD_DIR))
        record_real = os.path.realpath(record_dir)
        if record_real == self.root_real or record_real.startswith(self.root_real.rstrip(os.sep) + os.sep):
            raise BundleError("record_dir=%s is inside the bundle %s: the record must live outside it (the bundle "
                              "must stay exactly as made)" % (record_dir, self.root), option="record_dir")
        self.record_dir = record_dir
        self.record_path = os.path.join(record_dir, record_name(self.root))
        self.hasher = Hasher(load_record(self.record_path, self.root_real), self.verify_mode == "full", self.workers)
        self.warnings = []
        self.started = time.time()

    def run(self):
        return self.write() if self.state == "written" else self.verify()

    def base_result(self):
        return dict(changed=False, bundle=self.root, manifest=self.manifest_path, record=self.record_path,
                    verify=self.verify_mode)

    def counters(self):
        return dict(hashed_files=self.hasher.hashed_files, hashed_bytes=self.hasher.hashed_bytes,
                    trusted_files=self.hasher.trusted_files, duration_s=round(time.time() - self.started, 3))

    def save_record(self, present):
        """Keep what was hashed or trusted now, for the files still there. A record that cannot be written is a
        warning: the check itself stands."""
        files = dict((k, v) for k, v in self.hasher.new.items() if k in present)
        document = {"format": RECORD_FORMAT, "path": self.root_real, "files": files}
        try:
            if not os.path.isdir(self.record_dir):
                os.makedirs(self.record_dir, 0o700)
            atomic_write(self.record_path, (json.dumps(document, sort_keys=True) + "\n").encode("utf-8"), mode=0o600,
                         sync_folder=True)
        except OSError as exc:
            self.warnings.append("could not save the verification record %s (%s): the next run hashes every file "
                                 "again" % (self.record_path, exc.strerror or exc))

    # ---------------------------------------------------------------------------------------------- state=written

    def write(self):
        found = walk(self.root, prune=self.ignore)
        found.pop(MANIFEST, None)
        found = dict((k, v) for k, v in found.items() if not ignored(k, self.ignore))
        problems = []
        for relpath, (kind, target, _st) in found.items():
            if unfinished(posixpath.basename(relpath)):
                problems.append("%s looks unfinished (a name with %s): finish or remove it" % (
                    relpath, " or ".join(UNFINISHED_INFIXES + UNFINISHED_SUFFIXES)))
            elif kind == "link":
                problem = link_problem(self.root_real, self.root, relpath, target)
                if problem:
                    problems.append("%s %s" % (relpath, problem))
            elif kind != "file":
                problems.append("%s is a %s: a bundle holds only files, folders and symlinks" % (relpath, kind))
        if problems:
            raise BundleError("bundle %s cannot be written: %s" % (self.root, problem_lines(problems)),
                              result=self.base_result())
        digests, failed = self.hasher.digests(self.root, [(k, v[2]) for k, v in found.items() if v[0] == "file"])
        if failed:
            lines = ["%s %s" % (k, failed[k]) for k in sorted(failed)]
            raise BundleError("bundle %s cannot be written: %s (is something still writing the bundle?)"
                              % (self.root, problem_lines(lines)), result=dict(self.base_result(), **self.counters()))
        files = {}
        for relpath, (kind, target, st) in found.items():
            files[relpath] = {"link": target} if kind == "link" else {"size": st.st_size, "sha256": digests[relpath]}
        try:
            old = parse_manifest(read_manifest_bytes(self.root), self.manifest_path)
        except BundleError:
            old = None
        added, removed, modified = files_delta(old and old.get("files"), files)
        result = self.base_result()
        result.update(components=self.components, count=len(files),
                      bytes=sum(e.get("size", 0) for e in files.values()),
                      files_added=added, files_removed=removed, files_changed=modified)
        if same_manifest(old, files, self.components):
            result["created"] = old.get("created")
        else:
            result["changed"] = True
            document = manifest_document(self.components, files, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
            result["created"] = document["created"]
            if not self.check_mode:
                try:
                    atomic_write(self.manifest_path, manifest_bytes(document), prefix=MANIFEST_TMP_PREFIX, sync_folder=True)
                except OSError as exc:
                    raise BundleError("cannot write %s: %s" % (self.manifest_path, exc.strerror or exc),
                                      result=result)
        self.save_record(files)
        result["manifest_sha256"] = None
        if not (result["changed"] and self.check_mode):
            result["manifest_sha256"] = hashlib.sha256(read_manifest_bytes(self.root)).hexdigest()
        result.update(self.counters())
        return result

    # --------------------------------------------------------------------------------------------- state=verified

    def verify(self):
        data = read_manifest_bytes(self.root)
        manifest = parse_manifest(data, self.manifest_path)
        expected = manifest["files"]
        found = walk(self.root)
        found.pop(MANIFEST, None)
        problems, to_hash = check_structure(expected, found, self.ignore)
        digests, failed = self.hasher.digests(self.root, [(k, found[k][2]) for k in to_hash])
        for relpath in to_hash:
            want = expected[relpath]["sha256"]
            if relpath in failed:
                problems.append(("changed", relpath, "%s %s" % (relpath, failed[relpath])))
            elif digests[relpath] != want:
                problems.append(("changed", relpath, "%s changed (sha256 %s instead of %s, size %d as recorded)"
                                 % (relpath, short(digests[relpath]), short(want), expected[relpath]["size"])))
        self.save_record(found)
        result = self.base_result()
        result.update(components=manifest["components"], created=manifest.get("created"), count=len(expected),
                      bytes=sum(e.get("size", 0) for e in expected.values()),
                      manifest_sha256=hashlib.sha256(data).hexdigest())
        result.update(self.counters())
        if problems:
            by_category = dict((c, sorted(p[1] for p in problems if p[0] == c)) for c in CATEGORIES)
            result.update(changed_files=by_category["changed"], missing_files=by_category["missing"],
                          extra_files=by_category["extra"], problems=[p[2] for p in sorted_problems(problems)])
            raise BundleError(problems_message(self.root, problems), result=result)
        return result
