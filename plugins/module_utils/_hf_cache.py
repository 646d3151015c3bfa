# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Hugging Face hub cache layout, hashing and the verification record (stdlib only).

The layout is the one huggingface_hub reads with HF_HUB_OFFLINE=1 (docs: HF_HUB.md in the project notes):

    <hf_home>/hub/models--<org>--<name>/
        blobs/<etag>                       etag = lfs sha256 for LFS files, git blob sha1 otherwise
        snapshots/<commit>/<path>          relative symlink to ../../blobs/<etag> (one ../ per directory level)
        refs/main                          exactly the 40-hex commit, no newline
        trees/<commit>.json                only when the full file set is present (clients check completeness)
        .kimi-snapshot/<commit>.json       our verification record (huggingface_hub ignores the folder)

Everything lands atomically: a temporary name in the same directory, then os.replace().
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import fnmatch
import hashlib
import json
import os
import re
import tempfile

SHA_RE = re.compile(r"^[0-9a-f]{40}$")
SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
REPO_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,95}/[A-Za-z0-9][A-Za-z0-9_.-]{0,95}$")
RECORD_DIR = ".kimi-snapshot"
RECORD_FORMAT = 1
PARTIAL_SUFFIX = ".kimi-partial"
# Temporary names of atomic writes: .kimi-<name>.<random>.tmp (a later run removes those a kill left behind).
TMP_PREFIX = ".kimi-"
HASH_BLOCK = 1 << 20  # stays in L2: 16 threads hash 11-18% faster than with 8 MiB reads (bench/README.md)


class CacheError(Exception):
    """A problem with the cache or the inputs that the caller reports as is."""


def repo_folder_name(repo_id, repo_type="model"):
    return "%ss--%s" % (repo_type, repo_id.replace("/", "--"))


def check_repo_id(repo_id):
    if not isinstance(repo_id, str) or not REPO_ID_RE.match(repo_id) or ".." in repo_id:
        raise CacheError("repo_id must look like 'org/name' (letters, digits, '-', '_', '.'), got %r" % (repo_id,))


def check_revision(revision, repo_id):
    if not isinstance(revision, str) or not SHA_RE.match(revision):
        raise CacheError(
            "revision must be a full 40-hex commit sha, got %r. A branch or tag moves; pin the commit. Look it up with "
            "`curl -s https://huggingface.co/api/models/%s/revision/main | python3 -c 'import json,sys; "
            "print(json.load(sys.stdin)[\"sha\"])'` or `hf download %s --dry-run` / the 'Files and versions' tab."
            % (revision, repo_id, repo_id))


def filter_paths(paths, allow_patterns=None, ignore_patterns=None):
    """Same rule as huggingface_hub.utils.filter_repo_objects: fnmatch, a pattern ending in '/' means the folder."""
    def norm(patterns):
        if not patterns:
            return None
        return [p + "*" if p.endswith("/") else p for p in patterns]
    allow = norm(allow_patterns)
    ignore = norm(ignore_patterns)
    out = []
    for path in paths:
        if allow is not None and not any(fnmatch.fnmatch(path, p) for p in allow):
            continue
        if ignore is not None and any(fnmatch.fnmatch(path, p) for p in ignore):
            continue
        out.append(path)
    return out


def safe_relpath(path):
    """Reject repo paths that would escape the snapshot folder."""
    if not path or path.startswith("/") or "\\" in path or "\0" in path:
        raise CacheError("unsafe path in the repo listing: %r" % (path,))
    parts = path.split("/")
    if any(p in ("", ".", "..") for p in parts):
        raise CacheError("unsafe path in the repo listing: %r" % (path,))
    return path


def pointer_target(path, etag):
    """Relative link target from snapshots/<commit>/<path> to blobs/<etag>."""
    depth = path.count("/")
    return "../" * (depth + 2) + "blobs/" + etag


def atomic_write(path, data, mode=0o644, durable=True):
    """Write bytes to path through a temporary file in the same folder and os.replace()."""
    folder = os.path.dirname(path)
    fd, tmp = tempfile.mkstemp(prefix=TMP_PREFIX + os.path.basename(path) + ".", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            if durable:
                os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def read_text(path):
    try:
        with open(path, "rb") as handle:
            return handle.read().decode("utf-8", "replace")
    except (IOError, OSError):
        return None


def hasher_for(kind, size):
    """sha256 for LFS content; git blob sha1 (sha1 over 'blob <size>\\0' + content) for git files."""
    if kind == "sha256":
        return hashlib.sha256()
    digest = hashlib.sha1()
    digest.update(b"blob %d\0" % size)
    return digest


def hash_file(path, kind, size, block=HASH_BLOCK):
    """Hex digest of a file. hashlib releases the GIL on large updates, so threads hash in parallel."""
    digest = hasher_for(kind, size)
    buf = bytearray(block)
    view = memoryview(buf)
    with open(path, "rb", buffering=0) as handle:
        while True:
            count = handle.readinto(buf)
            if not count:
                break
            digest.update(view[:count])
    return digest.hexdigest()


def stat_key(path):
    """What the verification record keys a verified file on: a changed file changes one of these."""
    st = os.stat(path)
    return [st.st_size, st.st_mtime_ns, st.st_ino, st.st_dev]


class Layout(object):
    """Paths of one repo in one hub cache."""

    def __init__(self, hf_home, repo_id, commit):
        self.hf_home = hf_home
        self.hub = os.path.join(hf_home, "hub")
        self.repo_dir = os.path.join(self.hub, repo_folder_name(repo_id))
        self.blobs = os.path.join(self.repo_dir, "blobs")
        self.snapshot = os.path.join(self.repo_dir, "snapshots", commit)
        self.refs = os.path.join(self.repo_dir, "refs")
        self.trees = os.path.join(self.repo_dir, "trees")
        self.record_dir = os.path.join(self.repo_dir, RECORD_DIR)
        self.record = os.path.join(self.record_dir, commit + ".json")
        self.lock = os.path.join(self.record_dir, "lock")
        self.commit = commit

    def blob(self, etag):
        return os.path.join(self.blobs, etag)

    def partial(self, etag):
        return os.path.join(self.blobs, etag + PARTIAL_SUFFIX)

    def partial_state(self, etag):
        return os.path.join(self.blobs, etag + PARTIAL_SUFFIX + ".json")

    def pointer(self, path):
        return os.path.join(self.snapshot, *path.split("/"))


def load_record(layout, selection_key):
    """The verification record, or None when absent, unreadable or for another file selection."""
    text = read_text(layout.record)
    if text is None:
        return None
    try:
        record = json.loads(text)
    except ValueError:
        return None
    if not isinstance(record, dict) or record.get("format") != RECORD_FORMAT or record.get("commit") != layout.commit:
        return None
    if record.get("selection") != selection_key or not isinstance(record.get("files"), list):
        return None
    return record


def save_record(layout, record):
    record = dict(record, format=RECORD_FORMAT, commit=layout.commit)
    atomic_write(layout.record, json.dumps(record, indent=1, sort_keys=True).encode("utf-8"))


def selection_key(allow_patterns, ignore_patterns, materialize):
    return json.dumps({"allow": sorted(allow_patterns or []), "ignore": sorted(ignore_patterns or []),
                       "materialize": sorted(materialize or [])}, sort_keys=True)


def tree_cache_json(entries):
    """trees/<commit>.json exactly as huggingface_hub >= 1.22 writes it (format_version 1)."""
    files = {}
    for entry in entries:
        info = {"size": entry["size"], "blob_id": entry["oid"]}
        if entry.get("lfs_sha256"):
            info["lfs_sha256"] = entry["lfs_sha256"]
            info["lfs_size"] = entry["size"]
        if entry.get("xet_hash"):
            info["xet_hash"] = entry["xet_hash"]
        files[entry["path"]] = info
    return json.dumps({"format_version": 1, "files": files}, indent=2, sort_keys=True).encode("utf-8")


def fast_check(layout, record, materialize_patterns, refs, verify):
    """True when the record proves the snapshot complete and unchanged: stats only, no hashing, no network."""
    if record is None or verify == "full":
        return False
    if not record.get("complete") or record.get("verify") not in ("sha256", "size"):
        return False
    if verify == "sha256" and record.get("verify") != "sha256":
        return False
    try:
        for entry in record["files"]:
            blob = layout.blob(entry["etag"])
            if stat_key(blob) != entry["stat"]:
                return False
            pointer = layout.pointer(entry["path"])
            if materialize_matches(entry["path"], materialize_patterns):
                if stat_key(pointer) != entry.get("pointer_stat"):
                    return False
            elif os.readlink(pointer) != pointer_target(entry["path"], entry["etag"]):
                return False
        for ref in refs:
            if read_text(os.path.join(layout.refs, ref)) != layout.commit:
                return False
    except (OSError, KeyError, TypeError):
        return False
    return True


def materialize_matches(path, patterns):
    return bool(patterns) and any(fnmatch.fnmatch(path, p) or fnmatch.fnmatch(os.path.basename(path), p) for p in patterns)


def human_size(count):
    """Bytes in binary units, for messages (1.5 GiB)."""
    value = float(count)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return "%.1f %s" % (value, unit)
        value /= 1024.0
    return "%d B" % count
