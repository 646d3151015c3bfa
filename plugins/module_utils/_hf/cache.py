# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The Hugging Face hub cache: its layout, the verification record, and CacheWriter, the one writer of a repo's
cache folder (stdlib only). Private to kimi.deploy.

The layout is the one huggingface_hub reads with HF_HUB_OFFLINE=1 (docs: HF_HUB.md in the project notes):

    <hf_home>/hub/models--<org>--<name>/
        blobs/<etag>                       etag = lfs sha256 for LFS files, git blob sha1 otherwise
        snapshots/<commit>/<path>          relative symlink to ../../blobs/<etag> (one ../ per directory level)
        refs/main                          exactly the 40-hex commit, no newline
        trees/<commit>.json                only when the full file set is present (clients check completeness)
        .kimi-snapshot/<commit>.json       our verification record (huggingface_hub ignores the folder)

Everything lands atomically: a temporary name in the same directory, then os.replace().
Also here, because they are questions about the cache: is hf_home usable (check_hf_home) and is there room for what
is missing (disk_report, the one weights-disk rule). Files land through _files (atomic_write).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import fnmatch
import hashlib
import json
import os
import stat
import threading
import time

from ansible_collections.kimi.deploy.plugins.module_utils._files import TMP_PREFIX, atomic_write, human_size

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX
    fcntl = None

RECORD_DIR = ".kimi-snapshot"
RECORD_FORMAT = 1
PARTIAL_SUFFIX = ".kimi-partial"
# Temporary names of atomic writes (_files): .kimi-<name>.<random>.tmp (a later run removes those a kill left behind).
HASH_BLOCK = 1 << 20  # stays in L2: 16 threads hash 11-18% faster than with 8 MiB reads (bench/README.md)


class CacheError(Exception):
    """A problem with the cache or the inputs that the caller reports as is; `option` names the input at fault."""

    def __init__(self, message, option=None):
        super(CacheError, self).__init__(message)
        self.option = option


def default_hf_home():
    """Where huggingface_hub puts its home when HF_HOME is not set."""
    import pwd
    home = os.environ.get("HOME") or pwd.getpwuid(os.getuid()).pw_dir
    return os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.join(home, ".cache"), "huggingface")


def repo_folder_name(repo_id, repo_type="model"):
    return "%ss--%s" % (repo_type, repo_id.replace("/", "--"))


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


def materialize_matches(path, patterns):
    return bool(patterns) and any(fnmatch.fnmatch(path, p) or fnmatch.fnmatch(os.path.basename(path), p) for p in patterns)


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


def hash_kind(entry):
    """The hash that names a blob: sha256 (LFS files) or the git blob sha1; and its expected hex digest."""
    kind = "sha256" if entry["hash_kind"] == "sha256" else "sha1"
    return kind, entry["lfs_sha256"] if kind == "sha256" else entry["oid"]


def verify_blob(path, entry, mode, digest=None):
    """None when the file at path is the blob the listing describes, else the reason it is not.

    digest: the hex digest of the file's bytes computed while they were received (_hf_download); the file is then
    not read again."""
    try:
        size = os.path.getsize(path)
    except OSError as exc:
        return "cannot read: %s" % exc
    if size != entry["size"]:
        return "size %d, expected %d" % (size, entry["size"])
    if mode == "size":
        return None
    kind, expected = hash_kind(entry)
    if digest is None:
        digest = hash_file(path, kind, entry["size"])
    if digest != expected:
        return "%s %s, expected %s" % (kind, digest, expected)
    return None


class BlobChecker(object):
    """Checks blobs against the listing (verify_blob) in the mode of the verify option, and counts the work."""

    def __init__(self, verify):
        self.mode = "size" if verify == "size" else "sha256"
        self.lock = threading.Lock()
        self.hashed_files = self.hashed_bytes = 0
        self.repaired = []
        self.warnings = []

    def check(self, path, entry, digest=None):
        reason = verify_blob(path, entry, self.mode, digest)
        if self.mode != "size":
            with self.lock:
                self.hashed_files += 1
                self.hashed_bytes += entry["size"]
        return reason

    def failed(self, entry, reason, what):
        with self.lock:
            self.warnings.append("%s: %s blob failed the check (%s); fetching it again" % (entry["path"], what, reason))
            if entry["path"] not in self.repaired:
                self.repaired.append(entry["path"])

    def check_cached(self, layout, entries, pool, delete):
        """Blobs already in the cache that the record does not cover: (etag -> stat key of good ones, bad entries).
        Bad ones are deleted when `delete` (not in check mode)."""
        good, bad = {}, []
        for entry, reason in pool.map(lambda e: (e, self.check(layout.blob(e["etag"]), e)), entries):
            if reason is None:
                good[entry["etag"]] = stat_key(layout.blob(entry["etag"]))
                continue
            self.failed(entry, reason, "cached")
            if delete:
                os.unlink(layout.blob(entry["etag"]))
            bad.append(entry)
        return good, bad


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

    def nearest_existing(self):
        """The repo folder, or its nearest ancestor that exists (what the next write lands in)."""
        folder = self.repo_dir
        while not os.path.lexists(folder) and os.path.dirname(folder) != folder:
            folder = os.path.dirname(folder)
        return folder


# ---- hf_home and the weights disk ------------------------------------------------------------------------------
def check_hf_home(layout, writable=True):
    """hf_home is absolute, a folder where it exists, and (writable) the user may create the repo folder in it.

    Creates nothing, so check mode proves the path as the download will find it. Errors name hf_home.
    """
    hf_home = layout.hf_home
    if not os.path.isabs(hf_home):
        raise CacheError("hf_home=%r must be an absolute path" % (hf_home,), "hf_home")
    folder = layout.nearest_existing()
    if not os.path.isdir(folder):
        raise CacheError("hf_home=%s: %s is not a directory" % (hf_home, folder), "hf_home")
    if writable and not os.access(folder, os.W_OK | os.X_OK):
        raise CacheError("hf_home=%s is not writable: %s belongs to uid %d (mode %s) and this run is uid %d. Run as its "
                         "owner (become) or point hf_home at a writable folder." % (
                             hf_home, folder, os.stat(folder).st_uid, oct(stat.S_IMODE(os.stat(folder).st_mode)), os.getuid()), "hf_home")
    return folder


def disk_report(layout, need_bytes, min_free_bytes):
    """The weights-disk rule (its only copy): after fetching what is missing, min_free_bytes must stay free.

    Returns {path, free_bytes, need_bytes, min_free_bytes, ok}; nothing missing is always ok.
    """
    folder = layout.nearest_existing()
    while not os.path.isdir(folder):
        folder = os.path.dirname(folder)
    st = os.statvfs(folder)
    free = st.f_bavail * st.f_frsize
    return {"path": folder, "free_bytes": free, "need_bytes": need_bytes, "min_free_bytes": min_free_bytes,
            "ok": need_bytes <= 0 or free - need_bytes >= min_free_bytes}


def other_repos_bytes(layout):
    """Bytes of the blobs of the other repos in the same hub cache (the checkpoint being served, in a switch)."""
    total = 0
    try:
        folders = [os.path.join(layout.hub, n) for n in os.listdir(layout.hub)]
    except OSError:
        return 0
    for folder in folders:
        if folder == layout.repo_dir or not os.path.basename(folder).startswith("models--"):
            continue
        try:
            total += sum(e.stat().st_size for e in os.scandir(os.path.join(folder, "blobs")) if e.is_file())
        except OSError:
            pass
    return total


def disk_message(disk, hf_home, layout=None):
    text = ("not enough disk space for hf_home=%s: %s missing to download, %s free on %s, min_free_bytes=%s must stay "
            "free after the download. Free %s or point hf_home at a bigger disk." % (
                hf_home, human_size(disk["need_bytes"]), human_size(disk["free_bytes"]), disk["path"],
                human_size(disk["min_free_bytes"]), human_size(disk["need_bytes"] + disk["min_free_bytes"] - disk["free_bytes"])))
    others = other_repos_bytes(layout) if layout is not None else 0
    if others:
        text += (" The other checkpoints in this cache take %s: a switch keeps the one being served until the new one is"
                 " verified, so the disk must hold both; remove a checkpoint that is not served to make room." % human_size(others))
    return text


# ---- the verification record -----------------------------------------------------------------------------------
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


def classify(layout, selected, record, verify):
    """Split the unique blobs of `selected` into (blobs, ok, to_check, missing).

    ok: etag -> stat of blobs the record proves verified; to_check: present but unproven; missing: absent.
    """
    trusted = {}
    if record is not None and verify != "full" and (verify != "sha256" or record.get("verify") == "sha256"):
        trusted = dict((e["etag"], e["stat"]) for e in record.get("blobs", record["files"]))
    blobs = {}
    for entry in selected:
        blobs.setdefault(entry["etag"], entry)
    ok, to_check, missing = {}, [], []
    for etag, entry in sorted(blobs.items(), key=lambda kv: kv[1]["path"]):
        try:
            key = stat_key(layout.blob(etag))
        except OSError:
            missing.append(entry)
            continue
        if trusted.get(etag) == key:
            ok[etag] = key
        else:
            to_check.append(entry)
    return blobs, ok, to_check, missing


# ---- owner and mode -------------------------------------------------------------------------------------------
def parse_mode(mode):
    """An octal file mode readable by its owner ('0644' or 420); CacheError naming `mode` otherwise."""
    try:
        value = mode if isinstance(mode, int) else int(str(mode), 8)
    except ValueError:
        value = -1
    if value < 0 or value & ~0o7777 or not value & 0o400:
        raise CacheError("mode must be an octal file mode readable by its owner such as '0644', got %r" % (mode,), "mode")
    return value


def owner_ids(owner, group):
    """(uid, gid) of names or numbers; -1 leaves it as it is."""
    import grp
    import pwd
    uid = gid = -1
    try:
        if owner is not None:
            uid = int(owner) if owner.isdigit() else pwd.getpwnam(owner).pw_uid
    except KeyError:
        raise CacheError("owner=%r: no such user on the host" % (owner,), "owner")
    try:
        if group is not None:
            gid = int(group) if group.isdigit() else grp.getgrnam(group).gr_gid
    except KeyError:
        raise CacheError("group=%r: no such group on the host" % (group,), "group")
    return uid, gid


class CacheWriter(object):
    """Every change under one repo's cache folder: folders, blobs put in place, snapshot pointers, refs, the tree
    cache, the verification record, owner and modes, and the clean-up of what a killed run left.

    The *_changes(apply=False) and fix_permissions(dry_run=True) forms answer "would this change?" for check mode.
    """

    def __init__(self, layout, uid=-1, gid=-1, file_mode=0o644, materialize=None):
        self.layout = layout
        self.uid = uid
        self.gid = gid
        self.file_mode = file_mode
        self.dir_mode = file_mode | ((file_mode & 0o444) >> 2) | 0o700
        self.materialize = materialize or []

    def chown(self, path, follow=True):
        if self.uid != -1 or self.gid != -1:
            (os.chown if follow else os.lchown)(path, self.uid, self.gid)

    def makedirs(self, path):
        if os.path.isdir(path):
            return
        parent = os.path.dirname(path)
        if parent != path:
            self.makedirs(parent)
        os.mkdir(path, self.dir_mode)
        os.chmod(path, self.dir_mode)  # umask
        self.chown(path)

    def prepare(self):
        """The folders of the layout (not the snapshot's subfolders: snapshot_changes makes those)."""
        for path in (self.layout.blobs, self.layout.snapshot, self.layout.refs, self.layout.record_dir):
            self.makedirs(path)

    def lock(self, wait_s=30):
        """An exclusive lock on the repo's cache folder (an open fd: close it to release); concurrent runs queue."""
        fd = os.open(self.layout.lock, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o600)
        deadline = time.time() + wait_s
        while fcntl is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except (IOError, OSError):
                if time.time() > deadline:
                    os.close(fd)
                    raise CacheError("another hf_snapshot run holds %s: wait for it to finish" % self.layout.lock)
                time.sleep(0.5)
        return fd

    def write_if_changed(self, path, data):
        if read_text(path) == data.decode("utf-8"):
            return False
        self.makedirs(os.path.dirname(path))
        atomic_write(path, data, mode=self.file_mode)
        return True

    def write_tree(self, entries):
        return self.write_if_changed(os.path.join(self.layout.trees, self.layout.commit + ".json"), tree_cache_json(entries))

    def install_blob(self, path, etag):
        """Put a verified file in place as blobs/<etag> with the wanted owner and mode; returns its stat key."""
        os.chmod(path, self.file_mode)
        self.chown(path)
        os.replace(path, self.layout.blob(etag))
        return stat_key(self.layout.blob(etag))

    def snapshot_changes(self, selected, apply):
        """Relative symlinks (or real files for `materialize`) in snapshots/<commit>/; True if any changed."""
        changed = False
        for entry in selected:
            pointer = self.layout.pointer(entry["path"])
            target = pointer_target(entry["path"], entry["etag"])
            real = materialize_matches(entry["path"], self.materialize)
            if real:
                if os.path.isfile(pointer) and not os.path.islink(pointer) and self.same_content(pointer, entry):
                    continue
            else:
                try:
                    if os.readlink(pointer) == target:
                        continue
                except OSError:
                    pass
            changed = True
            if not apply:
                continue
            self.makedirs(os.path.dirname(pointer))
            tmp = os.path.join(os.path.dirname(pointer), "%s%s.tmp" % (TMP_PREFIX, os.path.basename(pointer)))
            if os.path.lexists(tmp):
                os.unlink(tmp)
            if real:
                with open(self.layout.blob(entry["etag"]), "rb") as src:
                    data = src.read()
                atomic_write(pointer, data, mode=self.file_mode)
            else:
                os.symlink(target, tmp)
                os.replace(tmp, pointer)
        return changed

    @staticmethod
    def same_content(path, entry):
        return verify_blob(path, entry, "sha256" if entry["size"] < (64 << 20) else "size") is None

    def refs_changes(self, refs, apply):
        changed = False
        for ref in refs:
            path = os.path.join(self.layout.refs, *ref.split("/"))
            if read_text(path) == self.layout.commit:
                continue
            changed = True
            if apply:
                self.makedirs(os.path.dirname(path))
                # exactly the 40-hex commit, no newline: huggingface_hub does not strip it
                atomic_write(path, self.layout.commit.encode("ascii"), mode=self.file_mode)
        return changed

    def save_record(self, repo_id, selection, verify, selected, verified_stats, blobs):
        """The verification record: what a later run trusts while size, mtime and inode are unchanged."""
        files = []
        for entry in selected:
            item = {"path": entry["path"], "etag": entry["etag"], "size": entry["size"], "stat": verified_stats[entry["etag"]]}
            if materialize_matches(entry["path"], self.materialize):
                item["pointer_stat"] = stat_key(self.layout.pointer(entry["path"]))
            files.append(item)
        record = {"repo_id": repo_id, "selection": selection, "complete": True, "verify": verify, "files": files,
                  "bytes_total": sum(e["size"] for e in selected), "saved": time.time(),
                  "blobs": [{"etag": k, "stat": verified_stats[k]} for k in sorted(blobs)],
                  "format": RECORD_FORMAT, "commit": self.layout.commit}
        atomic_write(self.layout.record, json.dumps(record, indent=1, sort_keys=True).encode("utf-8"))

    def wanted_mode(self, path, st):
        if stat.S_ISDIR(st.st_mode):
            return self.dir_mode
        if os.path.basename(path).endswith((PARTIAL_SUFFIX, PARTIAL_SUFFIX + ".json")) or os.path.basename(path) == "lock":
            return None
        return self.file_mode

    def walk_repo(self):
        yield self.layout.repo_dir
        for root, dirs, files in os.walk(self.layout.repo_dir):
            for name in dirs + files:
                yield os.path.join(root, name)

    def fix_permissions(self, dry_run=False):
        """Owner, group and mode of everything in the repo folder; True if something was (or would be) changed."""
        fixed = False
        if not os.path.isdir(self.layout.repo_dir):
            return False
        for path in self.walk_repo():
            st = os.lstat(path)
            link = stat.S_ISLNK(st.st_mode)
            if (self.uid != -1 and st.st_uid != self.uid) or (self.gid != -1 and st.st_gid != self.gid):
                fixed = True
                if not dry_run:
                    self.chown(path, follow=not link)
            mode = None if link else self.wanted_mode(path, st)
            if mode is not None and stat.S_IMODE(st.st_mode) != mode:
                fixed = True
                if not dry_run:
                    os.chmod(path, mode)
        return fixed

    def remove_stale_temporaries(self):
        """Temporary files of atomic writes cut by a kill (the caller holds the lock: no other run is writing)."""
        for root, unused, names in os.walk(self.layout.repo_dir):
            for name in names:
                if name.startswith(TMP_PREFIX) and name.endswith(".tmp"):
                    os.unlink(os.path.join(root, name))

    def remove_stale_partials(self, etags):
        """Partial files of blobs that are complete now (left by a run that lost a race or was killed)."""
        for etag in etags:
            for path in (self.layout.partial(etag), self.layout.partial_state(etag)):
                if os.path.exists(path) and os.path.exists(self.layout.blob(etag)):
                    os.unlink(path)
