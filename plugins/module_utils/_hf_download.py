# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Parallel, resumable byte transfer of the blobs of one Hugging Face repo commit (stdlib + curl only).

- fetch byte ranges of each file's CDN URL (resolved by _hf_hub.Hub) with parallel curl processes, each writing into
  the partial blob at its offset;
- re-resolve on 403/410 from the CDN (expired signature); retry 5xx and cut connections from the exact byte reached;
- a partial blob keeps a list of completed byte intervals beside it, so a run killed at any point resumes with
  nothing re-fetched but the bytes since the last state save;
- hand each complete blob to the caller's hash pool (PartialBlob.land), which checks it and puts it in place;
- keep the progress document that kimi.deploy.job_progress prints (Progress).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import random
import re
import threading
import time

from ansible_collections.kimi.deploy.plugins.module_utils._hf_cache import CacheError, atomic_write
from ansible_collections.kimi.deploy.plugins.module_utils._hf_hub import (
    CURL_PERMANENT, RETRY_STATUSES, HubError, TransientError, backoff_s, origin, read_head, redact, retry_after_s,
)

READ_BLOCK = 1 << 20
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

    def __init__(self, layout, entry):
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
        """The blob is complete: check(path) it (None or the reason it is wrong), then install(path) it in place.

        Returns install's answer, or the reason; a wrong file is discarded, so the next round fetches it again.
        """
        if self.fd is not None:
            os.fsync(self.fd)  # the bytes are on disk before the name says the blob is complete
        reason = check(self.path)
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


class Downloader(object):
    """Fetches the missing byte ranges of a set of blobs with `connections` curl processes in parallel."""

    def __init__(self, hub, layout, connections=16, chunk_size=64 << 20, retries=10, on_blob_done=None,
                 sleep=time.sleep, log=None):
        self.hub = hub
        self.curl = hub.curl
        self.layout = layout
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
                blob = PartialBlob(self.layout, entry)
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
                return
            with self.lock:
                blob.pending -= 1
                last = blob.pending == 0
            if last:
                blob.save(force=True)
                if self.on_blob_done:
                    self.on_blob_done(blob)

    def data_url(self, blob, stale_epoch=None):
        with blob.url_lock:
            if blob.url is None or (stale_epoch is not None and stale_epoch == blob.url_epoch):
                if blob.url is not None:
                    self.reresolved += 1
                blob.url = self.hub.with_retries("resolving %s" % blob.entry["path"], lambda: self.hub.resolve(blob.entry))
                blob.url_epoch += 1
            return blob.url, blob.url_epoch

    def fetch_chunk(self, blob, start, end):
        pos = start
        attempt = 0
        while pos < end:
            self.gate.wait()
            url, epoch = self.data_url(blob)
            try:
                pos = self.fetch_range(blob, url, pos, end)
                attempt = 0
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
                    continue
                delay = exc.wait_s if exc.wait_s is not None else backoff_s(attempt)
                if exc.wait_s is not None:
                    self.gate.hold(delay)
                self.log("%s: %s; retry %d in %.1fs" % (blob.entry["path"], exc, attempt, delay))
                self.sleep(delay)

    def fetch_range(self, blob, url, start, end):
        """GET bytes [start, end) of url into the blob; returns the new position (== end when done)."""
        size = blob.entry["size"]
        with self.lock:
            self.requests += 1
        proc = self.curl.spawn(self.curl.config(url, byte_range=(start, end - 1)))
        pos = start
        try:
            status, _reason, headers = read_head(proc.stdout)
        except TransientError as exc:
            if proc.poll() is None:
                proc.kill()
            code, err = self.curl.finish(proc)
            raise self.curl.failure("GET", url, code, err[0] or str(exc))
        try:
            if status == 206:
                match = re.match(r"^bytes\s+(\d+)-(\d+)/(\d+|\*)$", headers.get("content-range", ""))
                if not match or int(match.group(1)) != start or int(match.group(2)) != end - 1:
                    raise TransientError("unexpected Content-Range %r for bytes %d-%d" % (headers.get("content-range"), start, end - 1))
                if match.group(3) != "*" and int(match.group(3)) != size:
                    raise HubError("%s: the server says size %s, the listing %d" % (blob.entry["path"], match.group(3), size))
                skip = 0
            elif status == 200:
                if headers.get("content-length", "").isdigit() and int(headers["content-length"]) != size:
                    raise HubError("%s: the server sent %s bytes, the listing says %d" % (blob.entry["path"], headers["content-length"], size))
                skip = start  # the server ignored Range: read past what we have
            elif status in (403, 410) and origin(url) != self.curl.hub_origin:
                raise TransientError("HTTP %d from the CDN (signed URL expired?)" % status, expired=True)
            elif 300 <= status < 400:
                raise TransientError("HTTP %d on the data URL" % status, expired=True)
            elif status == 429:
                raise TransientError("HTTP 429", wait_s=retry_after_s(headers, 5.0) + random.uniform(0, 1))
            elif status in RETRY_STATUSES:
                raise TransientError("HTTP %d" % status, wait_s=retry_after_s(headers))
            elif status == 416:
                raise HubError("%s: HTTP 416 for bytes %d-%d: the file is smaller than the listing says" % (blob.entry["path"], start, end - 1))
            else:
                raise HubError("%s: HTTP %d from %s" % (blob.entry["path"], status, redact(url)))
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
                pos += len(data)
                with self.lock:
                    self.bytes_downloaded += len(data)
        finally:
            if proc.poll() is None:
                # Done reading (a 200 stream we stop early), or an error mid-stream: curl may block on the pipe.
                proc.kill()
            code, err = self.curl.finish(proc)
        if pos < end:
            if code in CURL_PERMANENT:
                raise self.curl.failure("GET", url, code, err[0])
            raise TransientError("connection dropped at byte %d of %d-%d (curl exit %d %s)" % (pos, start, end - 1, code, err[0]),
                                 pos=pos)
        return pos


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
