# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The Hugging Face hub protocol over curl (stdlib + curl only). Private to kimi.deploy.

How it talks to the hub (protocol notes: HF_HUB.md in the project notes):
- list files with the paginated tree API at the commit (follow Link rel="next");
- resolve each file once (HEAD, no redirect following): a 302 gives the signed CDN URL;
- honour 429 Retry-After / RateLimit for every worker (Gate); retry 5xx and dropped connections with backoff;
- fail at once on what no retry can fix (curl exits in CURL_PERMANENT: a malformed URL, a host that does not resolve,
  a TLS certificate that does not verify); Hub(connect_retries=1) lets the plan give up on an unreachable endpoint
  after one retry, while the download keeps its patient retries for transient faults.

The token goes only to the hub's origin, in curl's config on stdin: never in argv, never to the CDN, never logged.
The byte transfer itself (ranges, partial blobs, resume) is _hf_download's.

CacheListing is the offline stand-in for Hub.list_files: the same entries, read from the cache's own
trees/<commit>.json (hf_snapshot offline=true, an air-gapped host fed a bundle); it makes no request.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import random
import re
import subprocess
import threading
import time

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX
    fcntl = None

try:
    from urllib.parse import quote, urljoin, urlsplit
except ImportError:  # pragma: no cover - Python 2 is not supported by this collection
    from urlparse import urljoin, urlsplit  # type: ignore
    from urllib import quote  # type: ignore

from ansible_collections.kimi.deploy.plugins.module_utils._hf.cache import CacheError, safe_relpath
from ansible_collections.kimi.deploy.plugins.module_utils._model.validate import SHA256_RE, SHA_RE, full_match

USER_AGENT = "kimi.deploy-hf_snapshot/1.0 (curl)"
RETRY_STATUSES = (408, 429, 500, 502, 503, 504)
# curl's stdout pipe: 1 MiB (the default fs.pipe-max-size, no privilege needed) instead of 64 KiB: fewer reads,
# wake-ups and GIL hand-offs per byte (bench/README.md measured 10-25% less client CPU).
PIPE_SIZE = 1 << 20
# curl exits that no retry can fix: the URL or the site's configuration is wrong (curl's man page, EXIT CODES).
CURL_PERMANENT = {
    1: "curl does not support the URL's protocol",
    3: "the URL is malformed",
    5: "cannot resolve the proxy's host",
    6: "cannot resolve the host",
    58: "the TLS client certificate is unusable",
    60: "the server's TLS certificate cannot be verified (set ca_bundle for a private CA)",
    77: "cannot read the CA bundle (ca_bundle)",
}


class HubError(CacheError):
    """The hub refused in a way retrying will not fix (not found, access denied, bad data)."""


class TransientError(Exception):
    """A failure worth retrying. wait_s is the server's requested delay, if any; pos is how far a range got;
    connection is True when curl got no answer at all (refused, timed out, TLS handshake, cut)."""

    def __init__(self, message, wait_s=None, expired=False, pos=None, connection=False):
        super(TransientError, self).__init__(message)
        self.wait_s = wait_s
        self.expired = expired
        self.pos = pos
        self.connection = connection


class Response(object):
    def __init__(self, status, reason, headers, body=b""):
        self.status = status
        self.reason = reason
        self.headers = headers
        self.body = body

    def header(self, name, default=None):
        return self.headers.get(name.lower(), default)


def parse_head_block(lines):
    """Status and lower-cased headers from the lines of one response head (status line first)."""
    if not lines:
        raise TransientError("empty response")
    status_line = lines[0].decode("latin-1").strip()
    match = re.match(r"^HTTP/[0-9.]+\s+(\d{3})\s*(.*)$", status_line)
    if not match:
        raise TransientError("malformed status line %r" % status_line[:80])
    headers = {}
    for raw in lines[1:]:
        line = raw.decode("latin-1").rstrip("\r\n")
        if not line or ":" not in line:
            continue
        name, value = line.split(":", 1)
        name = name.strip().lower()
        value = value.strip()
        # Keep every Link header; for the rest the last one wins.
        if name == "link" and name in headers:
            headers[name] = headers[name] + ", " + value
        else:
            headers[name] = value
    return int(match.group(1)), match.group(2), headers


def read_head(stream):
    """Read response heads from curl --include output, skipping 1xx interim responses."""
    while True:
        lines = []
        while True:
            line = stream.readline(65536)
            if not line:
                if not lines:
                    raise TransientError("connection closed before a response")
                break
            if line in (b"\r\n", b"\n"):
                break
            lines.append(line)
        status, reason, headers = parse_head_block(lines)
        if 100 <= status < 200:
            continue
        return status, reason, headers


def next_link(link_header):
    """URL of the rel="next" entry of a Link header, or None."""
    if not link_header:
        return None
    for part in re.finditer(r'<([^>]*)>\s*((?:;\s*[^,;]+)*)', link_header):
        params = part.group(2)
        if re.search(r';\s*rel\s*=\s*"?next"?', params):
            return part.group(1)
    return None


def retry_after_s(headers, default=None):
    """Seconds to wait from Retry-After (seconds or HTTP date) or the RateLimit header's t=."""
    value = headers.get("retry-after")
    if value:
        value = value.strip()
        if value.isdigit():
            return float(value)
        try:
            from email.utils import parsedate_to_datetime
            when = parsedate_to_datetime(value)
            return max(0.0, when.timestamp() - time.time())
        except (TypeError, ValueError, IndexError, OverflowError):
            pass
    ratelimit = headers.get("ratelimit")
    if ratelimit:
        match = re.search(r"\bt=(\d+)", ratelimit)
        if match:
            return float(match.group(1))
    return default


def normalize_etag(value):
    if not value:
        return None
    value = value.strip()
    if value.startswith("W/"):
        value = value[2:]
    return value.strip('"')


def origin(url):
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return (parts.scheme, (parts.hostname or "").lower(), port)


def curl_quote(value):
    """A double-quoted string in curl's config file syntax."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r") + '"'


class Curl(object):
    """Runs one curl process per request; the request (URL, headers, token) is written to curl's stdin (-K -)."""

    def __init__(self, curl_path, endpoint, token=None, connect_timeout=30, stall_timeout=60, ca_bundle=None,
                 user_agent=USER_AGENT):
        self.curl_path = curl_path
        self.endpoint = endpoint.rstrip("/")
        self.hub_origin = origin(self.endpoint)
        self.token = token or None
        self.connect_timeout = connect_timeout
        self.stall_timeout = stall_timeout
        self.ca_bundle = ca_bundle
        self.user_agent = user_agent

    def sends_token(self, url):
        return self.token is not None and origin(url) == self.hub_origin

    def config(self, url, method="GET", byte_range=None, max_time=None, headers=(), ca_bundle=None):
        """curl's config for one request. headers: extra request headers (a peer's key: only for that peer's URLs);
        ca_bundle: the CA for this request instead of the hub's (a fleet's peer CA)."""
        lines = ["silent", "show-error", "include", "globoff", "suppress-connect-headers",
                 "url = " + curl_quote(url),
                 "user-agent = " + curl_quote(self.user_agent),
                 "connect-timeout = %d" % self.connect_timeout,
                 # A transfer slower than 1 KiB/s for stall_timeout seconds is dead: retry it.
                 "speed-limit = 1024", "speed-time = %d" % self.stall_timeout]
        if method == "HEAD":
            lines.append("head")
        if max_time:
            lines.append("max-time = %d" % max_time)
        if ca_bundle or self.ca_bundle:
            lines.append("cacert = " + curl_quote(ca_bundle or self.ca_bundle))
        if byte_range is not None:
            lines.append("header = " + curl_quote("Range: bytes=%d-%d" % byte_range))
        if self.sends_token(url):
            lines.append("header = " + curl_quote("Authorization: Bearer " + self.token))
        for header in headers:
            lines.append("header = " + curl_quote(header))
        return ("\n".join(lines) + "\n").encode("utf-8")

    def spawn(self, config):
        # Popen, not run_command: the body streams from curl's stdout into the blob at its offset (GBs per range).
        proc = subprocess.Popen([self.curl_path, "--disable", "-K", "-"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,  # pylint: disable=ansible-bad-function
                                stderr=subprocess.PIPE, bufsize=1 << 20, close_fds=True)
        setpipe = getattr(fcntl, "F_SETPIPE_SZ", None) if fcntl is not None else None
        if setpipe is not None:
            try:
                fcntl.fcntl(proc.stdout.fileno(), setpipe, PIPE_SIZE)
            except (IOError, OSError):
                pass  # over fs.pipe-max-size: the default pipe still works
        try:
            proc.stdin.write(config)
            proc.stdin.close()
        except (IOError, OSError):
            pass
        return proc

    @staticmethod
    def finish(proc):
        """Wait for curl; return (exit code, its stderr line)."""
        try:
            err = proc.stderr.read(4096)
        except (IOError, OSError):
            err = b""
        code = proc.wait()
        for handle in (proc.stdout, proc.stderr):
            try:
                handle.close()
            except (IOError, OSError):
                pass
        return code, err.decode("utf-8", "replace").strip().splitlines()[-1:] or [""]

    def request(self, url, method="GET", max_body=64 << 20, max_time=300):
        """A small request (API, HEAD): the whole response in memory."""
        proc = self.spawn(self.config(url, method=method, max_time=max_time))
        try:
            status, reason, headers = read_head(proc.stdout)
            body = b"" if method == "HEAD" else proc.stdout.read(max_body + 1)
        except TransientError as exc:
            code, err = self.finish(proc)
            raise self.failure(method, url, code, err[0] or str(exc))
        code, err = self.finish(proc)
        if code != 0 and method != "HEAD":
            raise self.failure(method, url, code, err[0])
        if len(body) > max_body:
            raise HubError("%s %s: response larger than %d bytes" % (method, redact(url), max_body))
        return Response(status, reason, headers, body)

    def failure(self, method, url, code, err, pos=None):
        """The error for a curl run that got no (whole) answer: HubError when no retry can help, else TransientError."""
        if origin(url) == self.hub_origin:
            where = "endpoint %s" % self.endpoint
        else:
            where = "the download host %s" % urlsplit(url).hostname
        if code in CURL_PERMANENT:
            return HubError("%s %s: %s of %s (curl exit %d: %s). Not retried: fix the URL, DNS, proxy or CA settings." % (
                method, redact(url), CURL_PERMANENT[code], where, code, err))
        return TransientError("%s %s: no answer from %s (curl exit %d: %s)" % (method, redact(url), where, code, err),
                              pos=pos, connection=True)


def redact(url):
    """A URL without its query string (signed CDN URLs carry credentials in it)."""
    return url.split("?", 1)[0]


def hub_error(resp, what):
    code = resp.header("x-error-code") or ""
    message = resp.header("x-error-message") or ""
    text = "%s: HTTP %d %s" % (what, resp.status, code or resp.reason)
    if message:
        text += " (%s)" % message
    if resp.status in (401, 403) or code in ("GatedRepo", "RepoNotFound"):
        text += ". The repo is private, gated or does not exist: check repo_id and give a token with read access."
    elif code == "RevisionNotFound":
        text += ". The commit does not exist in this repo: check revision."
    return HubError(text)


class Hub(object):
    """Hub API calls with retries (tree listing, resolve).

    connect_retries caps the retries of a request that got no answer at all (the plan uses 1: an endpoint it cannot
    reach fails in seconds); None gives those the same patience as the rest.
    """

    def __init__(self, curl, repo_id, commit, retries=8, connect_retries=None, sleep=time.sleep, log=None):
        self.curl = curl
        self.repo_id = repo_id
        self.commit = commit
        self.retries = retries
        self.connect_retries = connect_retries
        self.sleep = sleep
        self.log = log or (lambda msg: None)
        self.gate = Gate(sleep)

    def with_retries(self, what, call):
        attempt = 0
        while True:
            self.gate.wait()
            try:
                return call()
            except TransientError as exc:
                attempt += 1
                limit = self.retries
                if exc.connection and self.connect_retries is not None:
                    limit = min(limit, self.connect_retries)
                if attempt > limit:
                    raise HubError("%s: giving up after %d attempts: %s" % (what, attempt, exc))
                delay = exc.wait_s if exc.wait_s is not None else backoff_s(attempt)
                if exc.wait_s is not None:
                    self.gate.hold(delay)
                self.log("%s: %s; retry %d in %.1fs" % (what, exc, attempt, delay))
                self.sleep(delay)

    def check_status(self, resp, what):
        if resp.status == 429:
            raise TransientError("%s: HTTP 429" % what, wait_s=retry_after_s(resp.headers, 5.0) + random.uniform(0, 1))
        if resp.status in RETRY_STATUSES:
            raise TransientError("%s: HTTP %d" % (what, resp.status), wait_s=retry_after_s(resp.headers))
        if resp.status >= 400:
            raise hub_error(resp, what)

    def tree_url(self):
        return "%s/api/models/%s/tree/%s?recursive=true&expand=false" % (self.curl.endpoint, self.repo_id, self.commit)

    def list_files(self):
        """Every file at the commit: dicts with path, size, oid, lfs_sha256, xet_hash, etag, hash_kind."""
        url = self.tree_url()
        files = []
        pages = 0
        while url:
            pages += 1
            if pages > 100000:
                raise HubError("tree listing does not end (more than 100000 pages)")

            def fetch(url=url):
                resp = self.curl.request(url)
                self.check_status(resp, "listing %s@%s" % (self.repo_id, self.commit[:12]))
                try:
                    entries = json.loads(resp.body.decode("utf-8"))
                except ValueError:
                    raise TransientError("listing: invalid JSON")
                if not isinstance(entries, list):
                    raise HubError("listing: expected a JSON list, got %s" % type(entries).__name__)
                return entries, next_link(resp.header("link"))
            entries, link = self.with_retries("listing", fetch)
            for entry in entries:
                if isinstance(entry, dict) and entry.get("type") == "file":
                    files.append(file_entry(entry))
            url = urljoin(url, link) if link else None
        if not files:
            raise HubError("%s@%s lists no files" % (self.repo_id, self.commit))
        return sorted(files, key=lambda f: f["path"])

    def resolve_url(self, path):
        return "%s/%s/resolve/%s/%s" % (self.curl.endpoint, self.repo_id, self.commit, quote(path))

    def resolve(self, entry):
        """HEAD the file once: (data URL, headers checked against the listing). Redirects are not followed."""
        url = self.resolve_url(entry["path"])
        for _hop in range(5):
            resp = self.curl.request(url, method="HEAD", max_time=60)
            self.check_status(resp, "resolving %s" % entry["path"])
            commit = resp.header("x-repo-commit")
            if commit and commit != self.commit:
                raise HubError("resolving %s: the hub answered for commit %s, not %s" % (entry["path"], commit, self.commit))
            linked_size = resp.header("x-linked-size")
            if linked_size and linked_size.isdigit() and int(linked_size) != entry["size"]:
                raise HubError("resolving %s: size %s differs from the listing's %d" % (entry["path"], linked_size, entry["size"]))
            etag = normalize_etag(resp.header("x-linked-etag"))
            if etag and etag != entry["etag"]:
                raise HubError("resolving %s: etag %s differs from the listing's %s" % (entry["path"], etag, entry["etag"]))
            if 300 <= resp.status < 400:
                location = resp.header("location")
                if not location:
                    raise HubError("resolving %s: HTTP %d without Location" % (entry["path"], resp.status))
                url = urljoin(url, location)
                if origin(url) != self.curl.hub_origin:
                    return url
                continue  # same-origin redirect (e.g. /api/resolve-cache/...): ask again there
            return url
        raise HubError("resolving %s: too many redirects" % entry["path"])


class CacheListing(object):
    """Hub.list_files() offline: the file listing from trees/<commit>.json of the repo's cache folder (written with the
    snapshot, by hf_snapshot or huggingface_hub, only when the full file set is present). No request is made.

    Each file of the tree cache ({size, blob_id, lfs_sha256?, lfs_size?, xet_hash?}, the /tree API's fields) is turned
    back into the API's shape and through file_entry, so etag and hash_kind are built exactly as Hub.list_files builds
    them. A missing or malformed tree cache is a HubError that says how to fix it.
    """

    def __init__(self, layout, repo_id):
        self.layout = layout
        self.repo_id = repo_id
        self.commit = layout.commit
        self.path = os.path.join(layout.trees, layout.commit + ".json")
        self.files = None  # read once

    def error(self, why=None):
        where = "trees/%s.json" % self.commit + (" is malformed: %s" % why if why else "")
        return HubError("offline: %s@%s has no listing in %s (%s); copy the bundle's folder of this repo into hf_home first"
                        % (self.repo_id, self.commit, self.layout.repo_dir, where))

    def list_files(self):
        """Every file at the commit, as Hub.list_files returns them (sorted by path)."""
        if self.files is None:
            self.files = self.read()
        return [dict(f) for f in self.files]

    def read(self):
        try:
            with open(self.path, "rb") as handle:
                data = json.loads(handle.read().decode("utf-8"))
        except (IOError, OSError):
            if os.path.lexists(self.path):
                raise self.error("cannot be read")
            raise self.error()
        except ValueError as exc:  # UnicodeDecodeError too
            raise self.error("not JSON (%s)" % exc)
        if not isinstance(data, dict) or data.get("format_version") != 1 or not isinstance(data.get("files"), dict):
            raise self.error('expected {"format_version": 1, "files": {...}}')
        files = []
        for path, info in data["files"].items():
            if not isinstance(info, dict):
                raise self.error("entry %r is not an object" % (path,))
            lfs_sha256, lfs_size = info.get("lfs_sha256"), info.get("lfs_size")
            if lfs_sha256 is not None and lfs_size is not None and lfs_size != info.get("size"):
                raise self.error("%s: lfs_size %r differs from size %r" % (path, lfs_size, info.get("size")))
            entry = {"type": "file", "path": path, "size": info.get("size"), "oid": info.get("blob_id")}
            if lfs_sha256 is not None:
                entry["lfs"] = {"oid": lfs_sha256, "size": lfs_size}
            if info.get("xet_hash") is not None:
                entry["xetHash"] = info["xet_hash"]
            try:
                files.append(file_entry(entry))
            except CacheError as exc:  # HubError, or an unsafe path
                raise self.error(str(exc))
        if not files:
            raise self.error("it lists no files")
        return sorted(files, key=lambda f: f["path"])


def file_entry(entry):
    path = safe_relpath(entry.get("path"))
    size = entry.get("size")
    oid = entry.get("oid")
    if not isinstance(size, int) or size < 0 or not full_match(SHA_RE, oid):
        raise HubError("listing: bad entry for %s (size %r, oid %r)" % (path, size, oid))
    lfs = entry.get("lfs") or None
    lfs_sha256 = None
    if lfs:
        lfs_sha256 = lfs.get("oid") or lfs.get("sha256")
        if not full_match(SHA256_RE, lfs_sha256):
            raise HubError("listing: bad lfs oid for %s: %r" % (path, lfs_sha256))
    return {
        "path": path,
        "size": size,
        "oid": oid,
        "lfs_sha256": lfs_sha256,
        "xet_hash": entry.get("xetHash"),
        "etag": lfs_sha256 or oid,
        "hash_kind": "sha256" if lfs_sha256 else "git-sha1",
    }


def backoff_s(attempt, cap=30.0):
    return min(cap, 2 ** (attempt - 1)) * random.uniform(0.75, 1.25)


class Gate(object):
    """A shared 'not before' time: a 429 pauses every worker, not only the one that got it."""

    def __init__(self, sleep=time.sleep):
        self.lock = threading.Lock()
        self.until = 0.0
        self.sleep = sleep

    def hold(self, seconds):
        with self.lock:
            self.until = max(self.until, time.time() + seconds)

    def wait(self):
        while True:
            with self.lock:
                delay = self.until - time.time()
            if delay <= 0:
                return
            self.sleep(min(delay, 1.0))
