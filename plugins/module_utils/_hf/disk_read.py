# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""A short sequential read test of the weights disk (stdlib only), for the weight loader's choice (_model/loader.py).
Private to kimi.deploy: the disk_read module uses it.

It reads up to a bounded number of bytes from the largest files under a folder (the checkpoint's blobs where they
are), past the page cache: with O_DIRECT where the file system takes it (the read then changes nothing, so check mode
measures too), else after dropping the files' clean pages (posix_fadvise DONTNEED); a read that still finds pages
resident says so, since its figure is then the memory's, not the disk's. Nothing to read: an optional probe file of
the same size is written (fsync'd, dropped from the cache), read and removed.

A figure is kept on the host (run_kept, a small JSON file) keyed by the folder, its device (st_dev) and the size read,
and reused until that key changes or a refresh is asked: a disk's rate varies from run to run, and a figure measured
on every converge would flip the loader near its thresholds (restarting the engine for nothing), re-read up to
size_bytes and, through the fadvise fallback, drop weight pages from the page cache each time.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import json
import mmap
import os
import time

from ansible_collections.kimi.deploy.plugins.module_utils._files import atomic_write
from ansible_collections.kimi.deploy.plugins.module_utils._hf.page_cache import evict, resident_bytes

BLOCK = 16 << 20  # one read; a multiple of every logical block size O_DIRECT asks alignment to
PROBE_NAME = ".kimi-disk-read-probe"
# A read from files this much resident in the page cache measures memory: the figure is flagged.
CACHED_SHARE = 0.10
# What a kept record holds of a result (the rest - kept, measured_at, state_file - says where the figure came from).
KEPT_FIELDS = ("path", "files", "source", "read_mbps", "bytes", "seconds", "method", "cached_share", "reason")
STATE_FORMAT = 1


def nearest_folder(path):
    """`path`, or its nearest existing parent (the disk it will be on)."""
    path = os.path.abspath(path)
    while not os.path.isdir(path):
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return path


def candidates(folder, min_bytes):
    """[(size, path)] of the regular files (not symlinks) under `folder` of at least min_bytes, largest first."""
    found = []
    for root, _dirs, files in os.walk(folder):
        for name in files:
            path = os.path.join(root, name)
            if name == PROBE_NAME or os.path.islink(path) or not os.path.isfile(path):
                continue
            size = os.path.getsize(path)
            if size >= min_bytes:
                found.append((size, path))
    return sorted(found, key=lambda item: (-item[0], item[1]))


def pick(files, size_bytes):
    """The files to read, in order, until size_bytes are covered: [(path, bytes to read)]."""
    out, left = [], size_bytes
    for size, path in files:
        if left <= 0:
            break
        take = min(size, left)
        out.append((path, take))
        left -= take
    return out


def _open_direct(path):
    """An fd opened with O_DIRECT, or None where the file system refuses it (tmpfs, some overlays)."""
    flag = getattr(os, "O_DIRECT", 0)
    if not flag:
        return None
    try:
        return os.open(path, os.O_RDONLY | flag)
    except OSError as exc:
        if exc.errno in (errno.EINVAL, errno.EOPNOTSUPP, getattr(errno, "ENOTSUP", errno.EOPNOTSUPP)):
            return None
        raise


def _read(fd, count, buf):
    """Read `count` bytes from fd's start into the page-aligned buffer, block by block; returns the bytes read.
    O_DIRECT reads whole pages: the last read asks for whole pages and counts only what was wanted."""
    done = 0
    view = memoryview(buf)
    try:
        while done < count:
            want = min(BLOCK, count - done)
            got = os.preadv(fd, [view[:_round(want)]], done)
            if got <= 0:
                break
            done += min(got, want)
    finally:
        view.release()
    return done


def _round(count):
    page = mmap.PAGESIZE
    return ((count + page - 1) // page) * page


def measure(plan, allow_evict=True):
    """Read the plan [(path, bytes)] past the page cache. Returns {bytes, seconds, read_mbps, method, cached_share}.
    method: "o_direct", "fadvise" (dropped first), or None when nothing was read (O_DIRECT refused and allow_evict
    false, as in check mode)."""
    buf = mmap.mmap(-1, BLOCK)  # page-aligned, as O_DIRECT wants
    total, seconds, methods, resident, planned = 0, 0.0, set(), 0, 0
    try:
        for path, count in plan:
            fd = _open_direct(path)
            if fd is None:
                if not allow_evict:
                    continue
                evict(path)
                resident += min(resident_bytes(path) or 0, count)
                fd = os.open(path, os.O_RDONLY)
                methods.add("fadvise")
            else:
                methods.add("o_direct")
            planned += count
            try:
                started = time.monotonic()
                total += _read(fd, count, buf)
                seconds += time.monotonic() - started
            finally:
                os.close(fd)
    finally:
        buf.close()
    method = None if not methods else ("o_direct" if methods == {"o_direct"} else "fadvise")
    return {"bytes": total, "seconds": round(seconds, 4), "method": method,
            "read_mbps": round(total / seconds / 1e6, 1) if total and seconds > 0 else None,
            "cached_share": round(float(resident) / planned, 3) if planned else 0.0}


def write_probe(folder, size_bytes):
    """Write a probe file of size_bytes (incompressible, fsync'd) in `folder`; returns its path."""
    path = os.path.join(folder, PROBE_NAME)
    block = os.urandom(1 << 20)
    with open(path, "wb") as handle:
        left = size_bytes
        while left > 0:
            handle.write(block[:min(left, len(block))])
            left -= len(block)
        handle.flush()
        os.fsync(handle.fileno())
    return path


def run(path, size_bytes, min_file_bytes, probe=False, check_mode=False):
    """The test: {path (the folder read), files [(path, bytes)], source ("files", "probe" or None), read_mbps, bytes,
    seconds, method, cached_share, reason (why there is no figure, or a caveat)}."""
    # Only `path` itself is searched: its parent (e.g. /var/lib) holds other things (container images) on other disks.
    folder = nearest_folder(path)
    plan = pick(candidates(path, min_file_bytes), size_bytes) if os.path.isdir(path) else []
    out = {"path": folder, "files": [{"path": p, "bytes": n} for p, n in plan], "source": "files" if plan else None,
           "read_mbps": None, "bytes": 0, "seconds": 0.0, "method": None, "cached_share": 0.0, "reason": None}
    if not plan:
        if not probe:
            out["reason"] = ("no file of %d bytes or more under %s to read (the checkpoint is not there yet); set the "
                             "probe option (kimi_weights_read_test_write) to write one" % (min_file_bytes, path))
            return out
        if check_mode:
            out["reason"] = "check mode: a %d-byte probe file would be written in %s and read" % (size_bytes, folder)
            return out
        probe_path = write_probe(folder, size_bytes)
        try:
            out.update(measure([(probe_path, size_bytes)]), source="probe",
                       files=[{"path": probe_path, "bytes": size_bytes}])
        finally:
            os.unlink(probe_path)
    else:
        out.update(measure(plan, allow_evict=not check_mode))
    if out["method"] is None:
        out["reason"] = ("check mode: the file system refuses O_DIRECT, and dropping the files from the page cache "
                         "changes the host, so nothing was read")
    elif out["cached_share"] > CACHED_SHARE:
        out["reason"] = ("%.0f%% of what was read stayed in the page cache (dirty or locked pages): the figure is "
                         "partly memory's" % (100 * out["cached_share"]))
    return out


def stamp(now=None):
    """A time (default now) as the module reports it: UTC, ISO 8601, to the second."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now))


def state_key(path, size_bytes):
    """What a kept figure is valid for: the folder asked for, the device it is (or will be) on, the bytes read."""
    return {"path": os.path.abspath(path), "device": os.stat(nearest_folder(path)).st_dev, "size_bytes": size_bytes}


def load_state(state_file):
    """The kept record, or None (missing, unreadable, another format: measured again)."""
    try:
        with open(state_file, "rb") as handle:
            record = json.loads(handle.read().decode("utf-8"))
    except (IOError, OSError, ValueError):
        return None
    if isinstance(record, dict) and record.get("format") == STATE_FORMAT and isinstance(record.get("result"), dict):
        return record
    return None


def keepable(result):
    """A figure worth keeping: one there is, and not partly the page cache's (that one is measured again next run)."""
    return result["read_mbps"] is not None and result["cached_share"] <= CACHED_SHARE


def run_kept(path, size_bytes, min_file_bytes, state_file, probe=False, check_mode=False, refresh=False, now=None):
    """run(), through the kept record in state_file: reused when its key matches (and not refresh), else measured and,
    when keepable, written atomically (never in check mode). Adds kept (bool), measured_at (UTC, ISO 8601), state_file
    and changed (the record was, or in check mode would be, written)."""
    key = state_key(path, size_bytes)
    record = None if refresh else load_state(state_file)
    if record is not None and record.get("key") == key and record["result"].get("read_mbps") is not None:
        out = dict((f, record["result"].get(f)) for f in KEPT_FIELDS)
        out.update(kept=True, measured_at=record.get("measured_at"), state_file=state_file, changed=False)
        return out
    out = run(path, size_bytes, min_file_bytes, probe=probe, check_mode=check_mode)
    measured_at = stamp(now)
    out.update(kept=False, measured_at=measured_at if out["read_mbps"] is not None else None, state_file=state_file,
               changed=False)
    if not keepable(out):
        if out["read_mbps"] is not None:
            out["reason"] += "; not kept, so the next run measures again"
        return out
    if not check_mode:
        folder = os.path.dirname(os.path.abspath(state_file))
        if not os.path.isdir(folder):
            os.makedirs(folder, 0o755)
        record = {"format": STATE_FORMAT, "key": key, "measured_at": measured_at,
                  "result": dict((f, out[f]) for f in KEPT_FIELDS)}
        atomic_write(state_file, json.dumps(record, indent=2, sort_keys=True) + "\n", sync_folder=True)
    out["changed"] = True
    return out
