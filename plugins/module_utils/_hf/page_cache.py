# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The page cache of a set of files (stdlib + libc): how much of them is resident (mincore), reading them in within a
memory budget (warm), and dropping their clean pages (evict, posix_fadvise DONTNEED: no privilege needed).
Private to kimi.deploy: the page_cache module and bench/switch_window.py use it.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ctypes
import ctypes.util
import mmap
import os
import time

READ_BLOCK = 8 << 20
PAGE = mmap.PAGESIZE


def _libc():
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
        libc.mincore.restype = ctypes.c_int
        return libc
    except (OSError, AttributeError):
        return None


_LIBC = _libc()


def meminfo(path="/proc/meminfo"):
    """MemTotal and MemAvailable in bytes (MemAvailable counts reclaimable cache: the kernel's own estimate of what a
    new workload can take without swapping)."""
    out = {}
    with open(path) as handle:
        for line in handle:
            name, _sep, rest = line.partition(":")
            if name in ("MemTotal", "MemAvailable"):
                out[name] = int(rest.split()[0]) * 1024
    return out


def resident_bytes(path):
    """Bytes of the file in the page cache now (mincore over a private mapping), or None where that cannot be read."""
    size = os.path.getsize(path)
    if size == 0:
        return 0
    if _LIBC is None:
        return None
    with open(path, "rb") as handle:
        try:
            mapped = mmap.mmap(handle.fileno(), size, access=mmap.ACCESS_COPY)
        except (ValueError, OSError):
            return None
    try:
        pages = (size + PAGE - 1) // PAGE
        vec = (ctypes.c_ubyte * pages)()
        anchor = ctypes.c_char.from_buffer(mapped)
        try:
            if _LIBC.mincore(ctypes.addressof(anchor), size, vec) != 0:
                return None
        finally:
            del anchor  # the mapping cannot close while a ctypes view holds it
        count = sum(1 for v in vec if v & 1)
    finally:
        mapped.close()
    return min(size, count * PAGE)


def evict(path):
    """Drop the file's clean pages from the page cache (dirty ones stay until written back)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fdatasync(fd)  # dirty pages are written first, so that they can be dropped too
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def read_in(path, limit):
    """Read the file from the start, at most `limit` bytes, so its pages are cached; returns the bytes read."""
    buf = bytearray(READ_BLOCK)
    done = 0
    with open(path, "rb", buffering=0) as handle:
        while done < limit:
            count = handle.readinto(memoryview(buf)[:min(READ_BLOCK, limit - done)])
            if not count:
                break
            done += count
    return done


def budget(info, reserve_bytes, max_bytes=None):
    """(bytes that may be read into the page cache, what limits them: "memory" or "max_bytes"): MemAvailable less the
    reserve, or max_bytes when smaller; never below 0."""
    allowed, reason = info.get("MemAvailable", 0) - reserve_bytes, "memory"
    if max_bytes is not None and max_bytes < allowed:
        allowed, reason = max_bytes, "max_bytes"
    return max(0, allowed), reason


def warm(paths, max_bytes=None, reserve_bytes=0, info=meminfo):
    """Read the files in order into the page cache while MemAvailable stays above reserve_bytes and at most max_bytes
    are read. Files already resident are not read. Returns a report (bytes, seconds, what limited it)."""
    started = time.time()
    before = info()
    allowed, reason = budget(before, reserve_bytes, max_bytes)  # reason: what a cut is blamed on
    limited_by = None
    total = resident_before = warmed = 0
    files = []
    for path in paths:
        size = os.path.getsize(path)
        total += size
        resident = resident_bytes(path)
        resident_before += resident or 0
        if resident is not None and resident >= size - PAGE:
            files.append({"path": path, "size": size, "read": 0})
            continue
        want = min(size, allowed - warmed)
        if want <= 0:
            limited_by = reason
            files.append({"path": path, "size": size, "read": 0})
            continue
        got = read_in(path, want)
        warmed += got
        files.append({"path": path, "size": size, "read": got})
        if got < size:
            limited_by = reason
    resident_after = sum(resident_bytes(f["path"]) or 0 for f in files)
    after = info()
    return {"files": len(files), "bytes_total": total, "bytes_resident_before": resident_before,
            "bytes_resident_after": resident_after, "bytes_read": warmed, "limited_by": limited_by,
            "budget_bytes": allowed, "mem_available_before": before.get("MemAvailable"),
            "mem_available_after": after.get("MemAvailable"), "mem_total": before.get("MemTotal"),
            "duration_s": round(time.time() - started, 3)}


def snapshot_files(folder, patterns=(".safetensors",)):
    """The files of a snapshot folder that the engine loads in bulk (symlinks resolved to the blobs), sorted by name,
    the order the engines read the shards."""
    out = []
    for top, dirs, names in os.walk(folder):
        dirs.sort()
        for name in sorted(names):
            if name.endswith(tuple(patterns)):
                out.append(os.path.realpath(os.path.join(top, name)))
    return out
