# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Kernel caches that travel: publish a verified key's folder as one archive beside it, fetch a matching one from a
fleet peer (or install one from the air-gap bundle). Private to kimi.deploy.

Layout under the kernel cache folder (kimi_deployment.kernel_cache.host_dir, kimi_serve_kernel_cache_dir), one set per
key:
  <key>/           the folder the engine fills (mounted into its container)
  <key>.tar        its archive, written after a verified start (what peers and the bundle carry)
  <key>.verified   the marker: key, identity, parts, and the archive's size and sha256 (written last: a peer that
                   serves a marker serves a complete archive)
A fetch takes the marker, refuses one of another key or without an archive record, streams the archive into a
temporary folder beside the key's, checks its size and sha256, unpacks regular files and folders only, and renames the
tree into place: a key's folder is either absent/empty or complete, never partial, never another key's.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import json
import os
import re
import shutil
import tarfile
import tempfile

from ansible_collections.kimi.deploy.plugins.module_utils._files import atomic_output, atomic_write

ARCHIVE = ".tar"
MARKER = ".verified"
KEY_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
CHUNK = 1 << 20


class TransferError(ValueError):
    pass


def check_key(key):
    if not isinstance(key, str) or not KEY_RE.match(key) or key.endswith((ARCHIVE, MARKER)):
        raise TransferError("kernel cache key %r is not a cache key (letters, digits, . _ -)" % (key,))
    return key


def paths(root, key):
    """(folder, archive, marker) of a key under the kernel cache folder."""
    base = os.path.join(root, check_key(key))
    return base, base + ARCHIVE, base + MARKER


def files_in(path):
    count = 0
    for _dir, _subdirs, names in os.walk(path):
        count += len(names)
    return count


def content_of(folder):
    """A fingerprint of a folder's files (relative path, size, mtime): republish only when it changed."""
    digest = hashlib.sha256()
    for top, dirs, names in os.walk(folder):
        dirs.sort()
        for name in sorted(names):
            full = os.path.join(top, name)
            st = os.lstat(full)
            digest.update(("%s\0%d\0%d\n" % (os.path.relpath(full, folder), st.st_size, int(st.st_mtime))).encode())
    return digest.hexdigest()


def sha256_of(path):
    digest = hashlib.sha256()
    size = 0
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(CHUNK), b""):
            digest.update(block)
            size += len(block)
    return size, digest.hexdigest()


def read_marker(path):
    try:
        with open(path) as handle:
            return json.load(handle)
    except (IOError, OSError, ValueError):
        return None


def marker_json(marker):
    return (json.dumps(marker, indent=2, sort_keys=True) + "\n").encode("utf-8")


def publish(root, key, record):
    """Archive <key>/ into <key>.tar and write <key>.verified (record + the archive's size, sha256 and the folder's
    fingerprint), both atomically, the marker last. Returns (changed, marker). Unchanged when the marker already
    records this content and its archive is there; nothing is written for a folder without files (marker None)."""
    folder, archive, marker_path = paths(root, key)
    if not os.path.isdir(folder):
        raise TransferError("kernel cache folder %s is missing: nothing to publish" % folder)
    if files_in(folder) == 0:
        return False, None  # the engine kept nothing (a release that compiles nothing here): nothing to carry
    content = content_of(folder)
    old = read_marker(marker_path) or {}
    arch = old.get("archive") or {}
    if (old.get("key") == key and arch.get("content") == content and os.path.isfile(archive)
            and os.path.getsize(archive) == arch.get("size")):
        merged = dict(record, key=key, archive=arch)
        if merged == old:
            return False, old
        atomic_write(marker_path, marker_json(merged))
        return True, merged
    with atomic_output(archive) as handle, tarfile.open(fileobj=handle, mode="w") as tar:
        # Sorted and relative: the archive holds the key's files only, named as under its folder.
        for top, dirs, names in os.walk(folder):
            dirs.sort()
            for name in sorted(dirs) + sorted(names):
                full = os.path.join(top, name)
                if os.path.islink(full):
                    continue
                tar.add(full, arcname=os.path.relpath(full, folder), recursive=False)
    size, sha = sha256_of(archive)
    marker = dict(record, key=key, archive={"name": key + ARCHIVE, "size": size, "sha256": sha, "content": content,
                                            "files": files_in(folder)})
    atomic_write(marker_path, marker_json(marker))
    return True, marker


def check_marker(marker, key):
    """The archive record of a peer's (or the bundle's) marker for this key; TransferError when it is not one."""
    if not isinstance(marker, dict) or marker.get("key") != key:
        raise TransferError("its marker is for another key (%s), not %s" % (
            (marker or {}).get("key") if isinstance(marker, dict) else "none", key))
    arch = marker.get("archive")
    if (not isinstance(arch, dict) or not isinstance(arch.get("size"), int)
            or not re.match(r"^[0-9a-f]{64}$", str(arch.get("sha256")))):
        raise TransferError("its marker records no archive (size, sha256): not a published cache")
    return arch


def _safe_members(tar):
    for member in tar.getmembers():
        name = member.name
        if name.startswith("/") or ".." in name.split("/") or not (member.isfile() or member.isdir()):
            raise TransferError("the archive holds %r, which is not a plain file or folder under the key" % name)
        yield member


def install(root, key, archive_path, arch, owner=None):
    """Check an archive against its marker's record and put its tree in place as <key>/ (atomic rename). The key's
    folder must be absent or empty. Returns the number of files. TransferError on a size/hash mismatch or a bad
    member; nothing is left behind then."""
    folder, _archive, _marker = paths(root, key)
    size, sha = sha256_of(archive_path)
    if size != arch["size"] or sha != arch["sha256"]:
        raise TransferError("the archive is %d bytes, sha256 %s; its marker says %d bytes, sha256 %s" % (
            size, sha[:16], arch["size"], arch["sha256"][:16]))
    work = tempfile.mkdtemp(prefix="." + key + ".install-", dir=root)
    try:
        tree = os.path.join(work, "tree")
        os.mkdir(tree, 0o755)
        try:
            with tarfile.open(archive_path, "r:") as tar:
                members = list(_safe_members(tar))
                for member in members:
                    target = os.path.join(tree, member.name)
                    if member.isdir():
                        if not os.path.isdir(target):
                            os.makedirs(target, 0o755)
                        continue
                    parent = os.path.dirname(target)
                    if not os.path.isdir(parent):
                        os.makedirs(parent, 0o755)
                    src = tar.extractfile(member)
                    with open(target, "wb") as out:
                        shutil.copyfileobj(src, out, CHUNK)
                    os.chmod(target, 0o644)
        except tarfile.TarError as exc:
            raise TransferError("the archive cannot be read: %s" % exc)
        if os.path.isdir(folder):
            if os.listdir(folder):
                raise TransferError("%s already holds files: kept" % folder)
            os.rmdir(folder)
        os.rename(tree, folder)
        os.chmod(folder, 0o755)
        return files_in(folder)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def needs_fetch(root, key):
    """Whether a key's folder holds nothing (a first start of that key on this host)."""
    folder = paths(root, key)[0]
    return not (os.path.isdir(folder) and files_in(folder) > 0)


def fetch(root, key, peers, get):
    """Fetch a matching cache from the first peer that has one. peers: [{name, url}]; get(url, dest) -> HTTP status,
    with the body written to dest (a file path) on 200. Returns {fetched, source, files, bytes, tried: [reasons]}."""
    check_key(key)
    tried = []
    for peer in peers:
        base = "%s/kernels/%s" % (peer["url"].rstrip("/"), key)
        work = tempfile.mkdtemp(prefix="." + key + ".fetch-", dir=root)
        try:
            marker_file = os.path.join(work, "marker")
            status = get(base + MARKER, marker_file)
            if status != 200:
                tried.append("%s: no verified cache of this key (HTTP %s)" % (peer["name"], status))
                continue
            arch = check_marker(read_marker(marker_file), key)
            archive_file = os.path.join(work, "archive")
            status = get(base + ARCHIVE, archive_file)
            if status != 200:
                tried.append("%s: its archive is missing (HTTP %s)" % (peer["name"], status))
                continue
            files = install(root, key, archive_file, arch)
            return {"fetched": True, "source": peer["name"], "files": files, "bytes": arch["size"], "tried": tried}
        except TransferError as exc:
            tried.append("%s: refused, %s" % (peer["name"], exc))
        except (IOError, OSError) as exc:
            tried.append("%s: %s" % (peer["name"], exc))
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return {"fetched": False, "source": None, "files": 0, "bytes": 0, "tried": tried}


def _copy_atomic(src, dest):
    with open(src, "rb") as source, atomic_output(dest) as handle:
        shutil.copyfileobj(source, handle)


def collect(src, dest):
    """Copy the verified caches of a kernel cache folder (src: <key>.verified with an archive that matches it) into
    dest (the air-gap bundle's kernels/), the archive first, the marker last. Returns (copied keys, refused: reasons).
    A key whose marker in dest is already the same is kept as it is."""
    copied, refused = [], []
    names = sorted(os.listdir(src)) if os.path.isdir(src) else []
    for name in names:
        if not name.endswith(MARKER) or name.startswith("."):
            continue
        key = name[:-len(MARKER)]
        try:
            check_key(key)
            marker = read_marker(os.path.join(src, name))
            arch = check_marker(marker, key)
            if read_marker(os.path.join(dest, name)) == marker and os.path.isfile(os.path.join(dest, key + ARCHIVE)):
                continue
            archive = os.path.join(src, key + ARCHIVE)
            size, sha = sha256_of(archive)
            if size != arch["size"] or sha != arch["sha256"]:
                raise TransferError("its archive does not match its marker")
            _copy_atomic(archive, os.path.join(dest, key + ARCHIVE))
            _copy_atomic(os.path.join(src, name), os.path.join(dest, name))
            copied.append(key)
        except (TransferError, IOError, OSError) as exc:
            refused.append("%s: refused, %s" % (key, exc))
    return copied, refused
