# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Files that land whole, and the byte formatter every message uses (stdlib only). Private to kimi.deploy.

A file is written under a temporary name in its own folder and renamed over its path (os.replace), so a reader sees
the old file or the new one, never a part: the weights cache, the image archives, the bundle, the bench results, the
load progress and the Jinja code cache all write through here.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import contextlib
import os
import tempfile

# Temporary files of kimi.deploy start with this (the weights cache removes its own leftovers by it).
TMP_PREFIX = ".kimi-"


def human_size(count):
    """Bytes in decimal units, as disks and the hub count them (595.0 GB): the one byte formatter of kimi.deploy."""
    value = float(count or 0)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(value) < 1000 or unit == "TB":
            return "%.1f %s" % (value, unit)
        value /= 1000.0
    return "%d B" % count  # pragma: no cover - the loop always returns


def fsync_folder(folder):
    """fsync a folder: the renames and creations in it survive a crash."""
    dir_fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


@contextlib.contextmanager
def atomic_output(path, mode=0o644, durable=True, prefix=None, sync_folder=False):
    """A binary file to write `path` through: a temporary file in the same folder, renamed over `path` when the block
    ends without an error (after an fsync, unless durable is false), removed when it raises.

    prefix names the temporary file (default .kimi-<name>.<random>.tmp); sync_folder also fsyncs the folder, so the
    rename itself survives a crash.
    """
    folder = os.path.dirname(path) or "."
    if prefix:
        fd, tmp = tempfile.mkstemp(prefix=prefix, dir=folder)
    else:
        fd, tmp = tempfile.mkstemp(prefix=TMP_PREFIX + os.path.basename(path) + ".", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as handle:
            yield handle
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
    if sync_folder:
        fsync_folder(folder)


def atomic_write(path, data, mode=0o644, durable=True, prefix=None, sync_folder=False):
    """Write bytes (or text, as UTF-8) to path whole: see atomic_output."""
    with atomic_output(path, mode=mode, durable=durable, prefix=prefix, sync_folder=sync_folder) as handle:
        handle.write(data if isinstance(data, bytes) else data.encode("utf-8"))
