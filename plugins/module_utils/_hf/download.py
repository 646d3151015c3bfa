# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Parallel, resumable byte transfer of the blobs of one Hugging Face repo commit (stdlib + curl only).

- fetch byte ranges of each file from its sources with parallel curl processes, each writing into the partial blob at
  its offset. The sources are the hub (the file's CDN URL, resolved by _hf.hub.Hub) and peers: hosts of the fleet
  whose verified cache is served read-only over HTTP(S) (Caddy's file_server, with a peer key) as
  <peer URL>/<repo folder>/blobs/<etag>. Hashes come from the hub's listing only, so a peer cannot pass a wrong byte:
  the blob fails its hash and is fetched again without the sources that sent it (Source, Downloader.acquire);
- peers are preferred, each with its own connection cap; a blob no live peer holds yet waits for one (the peers fetch
  at the same time, so receivers trail them); the hub serves bytes only where no peer can (hub_source);
  a peer that refuses, cuts a transfer or is unreachable is dropped for the run, and its ranges go elsewhere from the
  byte reached;
- hash each blob while it arrives (the contiguous prefix, read back from the page cache) and start its write-back as
  ranges complete (sync_file_range), so that little is left after the last byte: the final fsync is short and the
  file is not read again;
- re-resolve on 403/410 from the CDN (expired signature); retry 5xx and cut connections from the exact byte reached;
- a partial blob keeps a list of completed byte intervals beside it, so a run killed at any point resumes with
  nothing re-fetched but the bytes since the last state save;
- hand each complete blob to the caller's hash pool (PartialBlob.land), which checks it and puts it in place;
- keep the progress document that kimi.deploy.job_progress prints (Progress).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ctypes
import ctypes.util
import json
import os
import random
import re
import threading
import time

from ansible_collections.kimi.deploy.plugins.module_utils._files import atomic_write
from ansible_collections.kimi.deploy.plugins.module_utils._hf.cache import CacheError, hash_kind, hasher_for
from ansible_collections.kimi.deploy.plugins.module_utils._hf.hub import (
    CURL_PERMANENT, RETRY_STATUSES, HubError, TransientError, backoff_s, origin, read_head, redact, retry_after_s,
)

READ_BLOCK = 1 << 20
# Start the write-back of a blob's received bytes every this many bytes (sync_file_range, without waiting for it).
WRITEBACK_STEP = 16 << 20
# A peer that answers 5xx this many times in a row is dropped.
PEER_MAX_ERRORS = 3
# A peer that lacked a blob is asked again after this long: a host that fetches at the same time may hold it by then.
PEER_MISSING_RETRY_S = 0.25
# usable() answers this while every live peer lacks a blob that one of them is expected to hold soon.
WAIT = "wait"
_SYNC_FILE_RANGE_WRITE = 2


def _load_sync_file_range():
    """libc's sync_file_range (Linux), or None: the write-back then starts at the final fsync, as before."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        func = libc.sync_file_range
    except (OSError, AttributeError):
        return None
    func.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    func.restype = ctypes.c_int
    return func


_sync_file_range = _load_sync_file_range()
# A kill -9 re-fetches at most this many seconds of each blob's progress (the state file is small and not fsynced).
STATE_SAVE_INTERVAL = 0.25


def merge_intervals(intervals):
    out = []
    for start, end in sorted(intervals):
        if out and start <= out[-1][1]:
            out[-1][1] = max(out[-1][1], end)
        else:
            out.append([start, end])
    return out


def missing_intervals(done, size):
    out = []
    pos = 0
    for start, end in merge_intervals(done):
        if start > pos:
            out.append((pos, start))
        pos = max(pos, end)
    if pos < size:
        out.append((pos, size))
    return out


def partial_bytes(layout, entry):
    """Bytes of this blob a killed or failed run left in its partial file (the next download keeps them)."""
    etag = entry["etag"]
    return sum(b - a for a, b in recorded_intervals(layout.partial(etag), layout.partial_state(etag), entry))


def recorded_intervals(path, state_path, entry):
    """Byte intervals an earlier run saved for this partial blob; [] unless the state and the file still agree."""
    size = entry["size"]
    try:
        with open(state_path) as handle:
            state = json.load(handle)
        if (not isinstance(state, dict) or state.get("size") != size or state.get("etag") != entry["etag"]
                or os.path.getsize(path) != size):
            return []
        return merge_intervals([(int(a), int(b)) for a, b in state.get("done", []) if 0 <= a < b <= size])
    except (IOError, OSError, ValueError, TypeError):
        return []


class PartialBlob(object):
    """blobs/<etag>.kimi-partial plus a JSON list of completed byte intervals beside it."""

    def __init__(self, layout, entry, hash_on_receive=True):
        self.entry = entry
        self.path = layout.partial(entry["etag"])
        self.state_path = layout.partial_state(entry["etag"])
        self.lock = threading.Lock()
        self.done = []
        self.dirty = False
        self.saved_at = 0.0
        self.fd = None
        self.url = None
        self.url_lock = threading.Lock()
        self.url_epoch = 0
        self.pending = 0
        self.failed = None
        self.finished = False
        self.resumed_bytes = 0
        self.sources = set()  # names of the sources that sent bytes of this blob in this run
        self.pin = None  # the one source that sends all of it (a blob that failed with several senders)
        self.wait_started = None  # when every live peer first lacked it
        # The digest of the contiguous prefix [0, hashed_to), advanced as ranges land (hash_on_receive).
        self.hash_lock = threading.Lock()
        self.hasher = hasher_for(hash_kind(entry)[0], entry["size"]) if hash_on_receive else None
        self.hashed_to = 0

    def open(self):
        """Open or create the partial file; keep recorded intervals only if the file still holds them."""
        size = self.entry["size"]
        self.done = recorded_intervals(self.path, self.state_path, self.entry)
        flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0)
        self.fd = os.open(self.path, flags, 0o600)
        if not self.done:
            os.ftruncate(self.fd, 0)
        os.ftruncate(self.fd, size)  # sparse; ranges land at their offsets
        self.resumed_bytes = self.done_bytes()
        self.save(force=True)

    def done_bytes(self):
        return sum(b - a for a, b in self.done)

    def missing(self):
        with self.lock:
            return missing_intervals(self.done, self.entry["size"])

    def write(self, offset, data):
        view = memoryview(data)
        while view:
            written = os.pwrite(self.fd, view, offset)
            offset += written
            view = view[written:]

    def add(self, start, end):
        with self.lock:
            self.done = merge_intervals(self.done + [[start, end]])
            self.dirty = True
        self.save()

    def start_writeback(self, start, end):
        """Ask the kernel to start writing [start, end) to disk now, without waiting (the tail at fsync stays short)."""
        if _sync_file_range is not None and self.fd is not None and end > start:
            _sync_file_range(self.fd, start, end - start, _SYNC_FILE_RANGE_WRITE)

    def advance_hash(self, wait=False):
        """Hash what the contiguous prefix gained since the last call. Reads the bytes back with pread: they were just
        written and are in the page cache. One thread hashes at a time; the others go on receiving (wait=False)."""
        if self.hasher is None or not self.hash_lock.acquire(wait):
            return
        try:
            while True:
                with self.lock:
                    upto = self.done[0][1] if self.done and self.done[0][0] == 0 else 0
                if upto <= self.hashed_to or self.fd is None:
                    return
                while self.hashed_to < upto:
                    data = os.pread(self.fd, min(READ_BLOCK * 8, upto - self.hashed_to), self.hashed_to)
                    if not data:
                        return
                    self.hasher.update(data)
                    self.hashed_to += len(data)
        finally:
            self.hash_lock.release()

    def digest(self):
        """The hex digest when every byte was hashed while it arrived, else None (the checker reads the file)."""
        self.advance_hash(wait=True)
        if self.hasher is None or self.hashed_to != self.entry["size"]:
            return None
        return self.hasher.hexdigest()

    def save(self, force=False):
        with self.lock:
            now = time.time()
            if self.finished or (not force and (not self.dirty or now - self.saved_at < STATE_SAVE_INTERVAL)):
                return
            payload = json.dumps({"etag": self.entry["etag"], "size": self.entry["size"], "done": self.done}).encode()
            self.dirty = False
            self.saved_at = now
            # Not fsynced: after a crash the final hash catches bytes the state claims but the disk lost.
            atomic_write(self.state_path, payload, mode=0o600, durable=False)

    def close(self):
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def mark_finished(self):
        with self.lock:
            self.finished = True

    def discard(self):
        self.mark_finished()
        self.close()
        for path in (self.path, self.state_path):
            try:
                os.unlink(path)
            except OSError:
                pass

    def land(self, check, install):
        """The blob is complete: check(path, digest) it (None or the reason it is wrong), then install(path) it in place.

        Returns install's answer, or the reason; a wrong file is discarded, so the next round fetches it again.
        """
        digest = self.digest() if self.fd is not None else None
        if self.fd is not None:
            os.fsync(self.fd)  # the bytes are on disk before the name says the blob is complete
        reason = check(self.path, digest)
        if reason is not None:
            self.failed = reason
            self.discard()
            return reason
        self.mark_finished()
        self.close()
        landed = install(self.path)
        try:
            os.unlink(self.state_path)
        except OSError:
            pass
        return landed


class Source(object):
    """One place bytes come from. The hub: each file's resolved CDN URL. A peer: <url>/<repo folder>/blobs/<etag> on a
    host of the fleet that holds a verified cache, read with its key (a header sent to that peer only).

    cap bounds the transfers from this source at once, so that one seed is not overrun; a dropped source gets none.
    """

    def __init__(self, name, cap, url=None, headers=(), ca_bundle=None, is_hub=False):
        self.name = name
        self.cap = max(1, cap)
        self.url = (url or "").rstrip("/")
        self.headers = tuple(headers)
        self.ca_bundle = ca_bundle
        self.is_hub = is_hub
        self.active = 0
        self.bytes = 0
        self.requests = 0
        self.errors = 0  # 5xx in a row
        self.dropped = None  # why this source is no longer used
        self.missing = {}  # etag -> when it answered 404 for it

    def blob_url(self, repo_folder, etag):
        return "%s/%s/blobs/%s" % (self.url, repo_folder, etag)

    def report(self):
        return {"name": self.name, "url": None if self.is_hub else self.url, "bytes": self.bytes,
                "requests": self.requests, "dropped": self.dropped, "missing_files": len(self.missing)}

    def lacks(self, etag, now):
        return now - self.missing.get(etag, -PEER_MISSING_RETRY_S) < PEER_MISSING_RETRY_S


class NoSource(CacheError):
    """No source left that may send this blob."""


class Downloader(object):
    """Fetches the missing byte ranges of a set of blobs with `connections` curl processes in parallel, from the peers
    (each at most its cap at once) and from the hub where no peer can serve a blob.

    peers and hub_source are Source objects the caller keeps across rounds (a dropped peer stays dropped, the byte
    counts add up); hub_source None: the hub sends no bytes."""

    def __init__(self, hub, layout, connections=16, chunk_size=64 << 20, retries=10, on_blob_done=None,
                 sleep=time.sleep, log=None, peers=(), hub_source=None, exclude=None, suspect=None,
                 hash_on_receive=True, peer_wait=600):
        self.hub = hub
        self.curl = hub.curl
        self.layout = layout
        self.repo_folder = os.path.basename(layout.repo_dir)
        self.connections = max(1, connections)
        self.chunk_size = max(1 << 20, chunk_size)
        self.retries = retries
        self.on_blob_done = on_blob_done
        self.sleep = sleep
        self.log = log or (lambda msg: None)
        self.gate = hub.gate
        self.lock = threading.Lock()
        self.queue = []
        self.error = None
        self.bytes_downloaded = 0
        self.requests = 0
        self.retried = 0
        self.reresolved = 0
        self.resumed_bytes = 0
        self.peers = list(peers)
        self.hub_source = hub_source
        # etag -> peers that alone sent a copy of this blob that failed its hash: not asked for it again.
        self.exclude = exclude or {}
        # etag -> peers that together sent a copy that failed: one source sends it whole this round (usable()).
        self.suspect = suspect or {}
        self.hash_on_receive = hash_on_receive
        self.peer_wait = peer_wait
        self.slots = threading.Condition()

    def plan(self, blobs):
        for blob in blobs:
            for start, end in blob.missing():
                pos = start
                while pos < end:
                    stop = min(end, pos + self.chunk_size)
                    self.queue.append([blob, pos, stop])
                    blob.pending += 1
                    pos = stop
        self.queue.reverse()  # pop() from the end: files complete in listing order

    def fetch(self, entries, land=None, pool=None):
        """Open (or resume) a partial blob per listing entry and fetch what each lacks. Each complete blob goes to
        land(blob) in `pool` (the hash pool) as soon as its last range is in; returns those futures, in completion order.
        The partial states are saved on the way out, also after a failure: a rerun resumes from them."""
        futures = []
        if land is not None:
            def done(blob):
                future = pool.submit(land, blob)
                with self.lock:
                    futures.append(future)
            self.on_blob_done = done
        partials = []
        try:
            for entry in entries:
                blob = PartialBlob(self.layout, entry, hash_on_receive=self.hash_on_receive)
                blob.open()
                partials.append(blob)
            self.resumed_bytes = sum(b.resumed_bytes for b in partials)
            self.run(partials)
        finally:
            for blob in partials:
                blob.save(force=True)
                if blob.pending:
                    blob.close()  # complete ones are closed by land()
        return futures

    def counters(self):
        return {"range_requests": self.requests, "retries": self.retried, "reresolved": self.reresolved}

    def run(self, blobs):
        self.plan(blobs)
        for blob in blobs:
            if blob.pending == 0 and self.on_blob_done:
                self.on_blob_done(blob)
        workers = [threading.Thread(target=self.worker, name="kimi-fetch-%d" % i) for i in range(min(self.connections, len(self.queue)))]
        for worker in workers:
            worker.daemon = True
            worker.start()
        for worker in workers:
            worker.join()
        if self.error:
            raise self.error

    def next_chunk(self):
        with self.lock:
            if self.error is not None or not self.queue:
                return None
            return self.queue.pop()

    def worker(self):
        while True:
            chunk = self.next_chunk()
            if chunk is None:
                return
            blob, start, end = chunk
            try:
                self.fetch_chunk(blob, start, end)
            except Exception as exc:  # pylint: disable=broad-except
                with self.lock:
                    if self.error is None:
                        self.error = exc if isinstance(exc, CacheError) else HubError("%s: %s" % (blob.entry["path"], exc))
                with self.slots:
                    self.slots.notify_all()  # workers waiting for a source see the error and stop
                return
            with self.lock:
                blob.pending -= 1
                last = blob.pending == 0
            if last:
                blob.save(force=True)
                if self.on_blob_done:
                    self.on_blob_done(blob)

    def usable(self, blob):
        """The sources that may send this blob now, or WAIT.

        - The peers that hold it (one that answered 404 is asked again after PEER_MISSING_RETRY_S), were not dropped,
          and were not the only sender of a copy that failed its hash.
        - When every live peer lacks it: WAIT, at most peer_wait seconds for this blob. The peers fetch at the same
          time (a seed from the hub, the others from each other) and serve each blob once it is verified, so a
          receiver trails them by a blob or so instead of waiting for whole downloads.
        - The hub only where no live peer is left, or the wait ran out: with peers holding the checkpoint it sends no
          byte.
        - A blob that failed its hash after several peers sent parts of it (suspects) is sent whole by one source this
          round (blob.pin): a peer that did not send it, else the hub, else one of the suspects. A copy that fails
          again then names its sender, which is excluded next round (three rounds at most, hf_snapshot).
        """
        etag = blob.entry["etag"]
        now = time.time()
        alive = [s for s in self.peers if s.dropped is None and s.name not in self.exclude.get(etag, ())]
        holding = [s for s in alive if not s.lacks(etag, now)]
        hub = [self.hub_source] if self.hub_source else []
        if etag in self.suspect:
            if blob.pin is not None and blob.pin.dropped is None:
                return [blob.pin]
            suspects = self.suspect[etag]
            choice = [s for s in holding if s.name not in suspects][:1] or hub or holding[:1]
        else:
            choice = holding
        if choice:
            return choice
        if alive:
            if blob.wait_started is None:
                blob.wait_started = now
            if now - blob.wait_started < self.peer_wait:
                return WAIT
        return hub

    def acquire(self, blob):
        """A source with a free slot for this blob (peers first, the least loaded); waits while all are busy, or while
        the peers do not hold it yet (usable())."""
        with self.slots:
            while True:
                if self.error is not None:
                    return None
                usable = self.usable(blob)
                if usable == WAIT:
                    self.slots.wait(0.25)
                    continue
                if not usable:
                    raise NoSource("%s: no source left for it: %s%s" % (
                        blob.entry["path"], "; ".join("%s %s" % (s.name, self.why_not(s, blob)) for s in self.peers) or "no peers",
                        "" if self.hub_source else " (hub_bytes is off: the hub sends no bytes)"))
                free = [s for s in usable if s.active < s.cap]
                if free:
                    source = min(free, key=lambda s: (s.is_hub, float(s.active) / s.cap))
                    source.active += 1
                    if blob.entry["etag"] in self.suspect:
                        blob.pin = source
                    return source
                self.slots.wait(0.5)

    def why_not(self, source, blob):
        if source.dropped:
            return source.dropped
        if source.name in self.exclude.get(blob.entry["etag"], ()):
            return "sent a copy that failed its hash"
        return "did not get it within peer_wait"

    def release(self, source):
        with self.slots:
            source.active -= 1
            self.slots.notify_all()

    def drop(self, source, reason):
        with self.slots:
            if source.dropped is None:
                source.dropped = reason
                self.log("peer %s dropped: %s" % (source.name, reason))
            self.slots.notify_all()

    def fetch_chunk(self, blob, start, end):
        pos = start
        attempt = 0
        while pos < end:
            source = self.acquire(blob)
            if source is None:
                return  # another worker failed: the run stops
            try:
                if source.is_hub:
                    pos, attempt = self.fetch_from_hub(blob, source, pos, end, attempt)
                else:
                    pos = self.fetch_from_peer(blob, source, pos, end)
            finally:
                self.release(source)

    def fetch_from_peer(self, blob, source, pos, end):
        """One try at a peer; returns the position reached. A peer that fails is dropped or marked as lacking the
        blob, and the caller picks another source for the rest."""
        url = source.blob_url(self.repo_folder, blob.entry["etag"])
        config = self.curl.config(url, byte_range=(pos, end - 1), headers=source.headers, ca_bundle=source.ca_bundle)
        try:
            pos = self.fetch_range(blob, source, url, config, pos, end)
            source.errors = 0
        except PeerMissing:
            with self.slots:
                source.missing[blob.entry["etag"]] = time.time()
        except TransientError as exc:
            if exc.pos is not None and exc.pos > pos:
                pos = exc.pos
            source.errors += 1
            if exc.connection or exc.pos is not None or source.errors >= PEER_MAX_ERRORS:
                self.drop(source, str(exc))
            else:
                self.sleep(backoff_s(source.errors))
        except HubError as exc:  # refused (key), a size that differs from the hub's listing: never this peer again
            self.drop(source, str(exc))
        return pos

    def fetch_from_hub(self, blob, source, pos, end, attempt):
        self.gate.wait()
        url, epoch = self.data_url(blob)
        try:
            return self.fetch_range(blob, source, url, self.curl.config(url, byte_range=(pos, end - 1)), pos, end), 0
        except TransientError as exc:
            if exc.pos is not None and exc.pos > pos:
                pos = exc.pos  # keep the bytes the cut transfer delivered; the retry asks for the rest only
                attempt = 0  # progress resets the count
            attempt += 1
            with self.lock:
                self.retried += 1
            if attempt > self.retries:
                raise HubError("%s bytes %d-%d: giving up after %d attempts: %s" % (blob.entry["path"], pos, end - 1, attempt, exc))
            if exc.expired:
                self.data_url(blob, stale_epoch=epoch)
                return pos, attempt
            delay = exc.wait_s if exc.wait_s is not None else backoff_s(attempt)
            if exc.wait_s is not None:
                self.gate.hold(delay)
            self.log("%s: %s; retry %d in %.1fs" % (blob.entry["path"], exc, attempt, delay))
            self.sleep(delay)
            return pos, attempt

    def data_url(self, blob, stale_epoch=None):
        with blob.url_lock:
            if blob.url is None or (stale_epoch is not None and stale_epoch == blob.url_epoch):
                if blob.url is not None:
                    self.reresolved += 1
                blob.url = self.hub.with_retries("resolving %s" % blob.entry["path"], lambda: self.hub.resolve(blob.entry))
                blob.url_epoch += 1
            return blob.url, blob.url_epoch

    def status_error(self, blob, source, url, status, headers, start, end):
        """The exception for a non-2xx answer to a range request."""
        path = blob.entry["path"]
        if not source.is_hub:
            if status == 404:
                return PeerMissing(path)
            if status in RETRY_STATUSES:
                return TransientError("HTTP %d from peer %s" % (status, source.name))
            if status in (401, 403):
                return HubError("HTTP %d from peer %s: it refuses the peer key" % (status, source.name))
            return HubError("HTTP %d from peer %s for %s" % (status, source.name, path))
        if status in (403, 410) and origin(url) != self.curl.hub_origin:
            return TransientError("HTTP %d from the CDN (signed URL expired?)" % status, expired=True)
        if 300 <= status < 400:
            return TransientError("HTTP %d on the data URL" % status, expired=True)
        if status == 429:
            return TransientError("HTTP 429", wait_s=retry_after_s(headers, 5.0) + random.uniform(0, 1))
        if status in RETRY_STATUSES:
            return TransientError("HTTP %d" % status, wait_s=retry_after_s(headers))
        if status == 416:
            return HubError("%s: HTTP 416 for bytes %d-%d: the file is smaller than the listing says" % (path, start, end - 1))
        return HubError("%s: HTTP %d from %s" % (path, status, redact(url)))

    def fetch_range(self, blob, source, url, config, start, end):
        """GET bytes [start, end) of url into the blob; returns the new position (== end when done)."""
        size = blob.entry["size"]
        with self.lock:
            self.requests += 1
            source.requests += 1
        proc = self.curl.spawn(config)
        pos = start
        try:
            status, _reason, headers = read_head(proc.stdout)
        except TransientError as exc:
            if proc.poll() is None:
                proc.kill()
            code, err = self.curl.finish(proc)
            raise self.curl.failure("GET", url, code, err[0] or str(exc))
        synced = start
        try:
            if status == 206:
                match = re.match(r"^bytes\s+(\d+)-(\d+)/(\d+|\*)$", headers.get("content-range", ""))
                if not match or int(match.group(1)) != start or int(match.group(2)) != end - 1:
                    raise TransientError("unexpected Content-Range %r for bytes %d-%d" % (headers.get("content-range"), start, end - 1))
                if match.group(3) != "*" and int(match.group(3)) != size:
                    raise HubError("%s: %s says size %s, the listing %d" % (blob.entry["path"], source.name, match.group(3), size))
                skip = 0
            elif status == 200:
                if headers.get("content-length", "").isdigit() and int(headers["content-length"]) != size:
                    raise HubError("%s: %s sent %s bytes, the listing says %d" % (blob.entry["path"], source.name, headers["content-length"], size))
                skip = start  # the server ignored Range: read past what we have
            else:
                raise self.status_error(blob, source, url, status, headers, start, end)
            buf = bytearray(READ_BLOCK)
            view = memoryview(buf)
            while pos < end:
                want = min(READ_BLOCK, end - pos + skip) if skip else min(READ_BLOCK, end - pos)
                count = proc.stdout.readinto(view[:want])
                if not count:
                    break
                if skip:
                    drop = min(skip, count)
                    skip -= drop
                    if drop == count:
                        continue
                    data = view[drop:count]
                else:
                    data = view[:count]
                blob.write(pos, data)
                blob.add(pos, pos + len(data))
                blob.sources.add(source.name)
                pos += len(data)
                with self.lock:
                    self.bytes_downloaded += len(data)
                    source.bytes += len(data)
                if pos - synced >= WRITEBACK_STEP:
                    blob.start_writeback(synced, pos)
                    blob.advance_hash()
                    synced = pos
        finally:
            if proc.poll() is None:
                # Done reading (a 200 stream we stop early), or an error mid-stream: curl may block on the pipe.
                proc.kill()
            code, err = self.curl.finish(proc)
            blob.start_writeback(synced, pos)
            blob.advance_hash()
        if pos < end:
            if code in CURL_PERMANENT:
                raise self.curl.failure("GET", url, code, err[0])
            raise TransientError("connection dropped at byte %d of %d-%d (curl exit %d %s)" % (pos, start, end - 1, code, err[0]),
                                 pos=pos)
        return pos


class PeerMissing(Exception):
    """The peer answered 404: it does not hold this blob (yet)."""


class Progress(object):
    """Counters shared by the workers; a thread rewrites progress_file from them about once a second.

    The document's keys (state, files_*, bytes_*, rate_bytes_per_s, eta_s) are what kimi.deploy.job_progress prints.
    """

    def __init__(self, path, repo_id, commit):
        self.path = path
        self.lock = threading.Lock()
        self.data = {"repo_id": repo_id, "commit": commit, "state": "starting", "files_total": 0, "files_done": 0,
                     "bytes_total": 0, "bytes_done": 0, "bytes_downloaded": 0, "rate_bytes_per_s": 0.0, "eta_s": None,
                     "started": time.time(), "pid": os.getpid()}
        self.samples = []
        self.downloader = None
        self.base_done = 0
        self.stop_event = threading.Event()
        self.thread = None

    def set(self, **kwargs):
        with self.lock:
            self.data.update(kwargs)

    def add(self, key, value):
        with self.lock:
            self.data[key] += value

    def snapshot(self):
        with self.lock:
            data = dict(self.data)
        if self.downloader is not None:
            data["bytes_downloaded"] = self.downloader.bytes_downloaded
            data["bytes_done"] = self.base_done + self.downloader.bytes_downloaded
        now = time.time()
        self.samples.append((now, data["bytes_downloaded"]))
        self.samples = [s for s in self.samples if now - s[0] <= 10.0]
        if len(self.samples) > 1 and self.samples[-1][0] > self.samples[0][0]:
            rate = (self.samples[-1][1] - self.samples[0][1]) / (self.samples[-1][0] - self.samples[0][0])
        else:
            rate = 0.0
        data["rate_bytes_per_s"] = round(rate, 1)
        left = max(0, data["bytes_total"] - data["bytes_done"])
        data["eta_s"] = round(left / rate, 1) if rate > 0 else None
        data["updated"] = now
        data["elapsed_s"] = round(now - data["started"], 1)
        return data

    def write(self):
        if not self.path:
            return
        try:
            atomic_write(self.path, json.dumps(self.snapshot(), sort_keys=True).encode("utf-8"))
        except (IOError, OSError):
            pass  # progress is advisory; the download must not fail because of it

    def start(self):
        if not self.path:
            return
        folder = os.path.dirname(self.path)
        if folder and not os.path.isdir(folder):
            os.makedirs(folder, 0o755)

        def loop():
            while not self.stop_event.wait(1.0):
                self.write()
        self.thread = threading.Thread(target=loop, name="kimi-progress")
        self.thread.daemon = True
        self.thread.start()

    def stop(self, state):
        self.set(state=state)
        self.stop_event.set()
        if self.thread:
            self.thread.join()
        self.write()
