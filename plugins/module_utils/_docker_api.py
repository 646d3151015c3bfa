# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""A small Docker Engine API client over the daemon's unix socket, for the jobs that must stream (stdlib only).
Private to kimi.deploy.

community.docker's build, pull, export and load modules return the daemon's output when the job ends. A vLLM base is
many GB: kimi.deploy.image_build and kimi.deploy.image_archive read the daemon's JSON stream line by line instead,
to write a build log and a progress file while the job runs. kimi.deploy.image_present reads (and pulls) an image every
converge through it: community.docker's image modules import the Docker SDK on the host, ~0.5-1.3 s a task against
~0.15 s. The rest (tag, remove, run) stays with community.docker.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import http.client
import json
import os
import socket
import time
from urllib.parse import quote, urlencode

DEFAULT_SOCKET = "/var/run/docker.sock"
# The daemon option of every module that uses this API (its documentation: doc_fragments/docker_daemon.py).
DAEMON_ARGUMENT_SPEC = {"docker_host": {"type": "str"}}
READ_SIZE = 1 << 20


class DockerAPIError(Exception):
    """The daemon answered an error (status and its message), or could not be reached."""

    def __init__(self, message, status=None):
        super(DockerAPIError, self).__init__(message)
        self.status = status


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path, timeout):
        http.client.HTTPConnection.__init__(self, "localhost", timeout=timeout)
        self._socket_path = path

    def connect(self):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        sock.connect(self._socket_path)
        self.sock = sock


def socket_path(docker_host=None):
    """The daemon's socket from a DOCKER_HOST-style value (unix:// only), else $DOCKER_HOST, else the default."""
    host = docker_host or os.environ.get("DOCKER_HOST") or "unix://" + DEFAULT_SOCKET
    if not host.startswith("unix://"):
        raise DockerAPIError("only a unix socket is supported for the Docker daemon (got %s)" % host)
    return host[len("unix://"):]


def image_path(ref):
    """The URL path segment of an image reference (name:tag, name@sha256:..., or an ID)."""
    return quote(ref, safe="")


class DockerAPI:
    """One HTTP connection per request; the daemon's default API version."""

    def __init__(self, docker_host=None, timeout=300):
        self.path = socket_path(docker_host)
        self.timeout = timeout

    def request(self, method, url, params=None, body=None, headers=None):
        """Send a request; returns the open response (the caller reads it). DockerAPIError on status >= 400."""
        if params:
            url += "?" + urlencode(dict((k, v) for k, v in params.items() if v is not None))
        conn = _UnixConnection(self.path, self.timeout)
        try:
            conn.request(method, url, body=body, headers=headers or {})
            response = conn.getresponse()
        except (OSError, http.client.HTTPException) as exc:
            conn.close()
            raise DockerAPIError("the Docker daemon at %s did not answer %s %s: %s" % (self.path, method, url, exc))
        if response.status >= 400:
            text = response.read().decode("utf-8", "replace")
            conn.close()
            try:
                text = json.loads(text).get("message", text)
            except ValueError:
                pass
            raise DockerAPIError("%s %s: %s %s" % (method, url.split("?")[0], response.status, text.strip()),
                                 status=response.status)
        return response

    def json(self, method, url, params=None):
        response = self.request(method, url, params=params)
        data = response.read()
        return json.loads(data.decode("utf-8")) if data else None

    def image(self, ref):
        """The image's inspect document, or None when the daemon has no such image."""
        try:
            return self.json("GET", "/images/%s/json" % image_path(ref))
        except DockerAPIError as exc:
            if exc.status == 404:
                return None
            raise


def json_stream(response):
    """The JSON documents of a streaming answer (build, pull, load), however the chunks cut them."""
    decoder = json.JSONDecoder()
    buffer = ""
    while True:
        chunk = response.read1(READ_SIZE) if hasattr(response, "read1") else response.read(READ_SIZE)
        if not chunk:
            break
        buffer += chunk.decode("utf-8", "replace")
        while True:
            buffer = buffer.lstrip()
            if not buffer:
                break
            try:
                document, end = decoder.raw_decode(buffer)
            except ValueError:
                break  # incomplete: wait for more
            buffer = buffer[end:]
            yield document
    if buffer.strip():
        raise DockerAPIError("the daemon's answer ended inside a JSON document: %r" % buffer[:200])


def stream_error(document):
    """The error message of a stream document, or None."""
    if document.get("errorDetail"):
        return document["errorDetail"].get("message") or document.get("error") or "error"
    return document.get("error")


class PullProgress:
    """Layer byte counts of an image pull, from the daemon's progress documents."""

    def __init__(self):
        self.layers = {}
        self.started = time.monotonic()

    def add(self, document):
        layer = document.get("id")
        status = document.get("status") or ""
        detail = document.get("progressDetail") or {}
        if not layer or status.startswith(("Pulling from", "Digest", "Status")):
            return
        entry = self.layers.setdefault(layer, {"done": 0, "total": 0, "complete": False})
        if status == "Downloading" and detail.get("total"):
            entry["done"], entry["total"] = detail.get("current", 0), detail["total"]
        elif status in ("Download complete", "Pull complete", "Already exists"):
            entry["complete"] = True
            entry["done"] = entry["total"] = max(entry["total"], entry["done"])

    def line(self):
        done = sum(entry["done"] for entry in self.layers.values())
        total = sum(entry["total"] for entry in self.layers.values())
        complete = sum(1 for entry in self.layers.values() if entry["complete"])
        elapsed = max(time.monotonic() - self.started, 1e-6)
        return "%.2f / %.2f GB of the layers seen, %d/%d layers complete, %.0f MB/s" % (
            done / 1e9, total / 1e9, complete, len(self.layers), done / elapsed / 1e6)


def pull(api, ref, on_document=None):
    """Pull ref through the daemon (POST /images/create), calling on_document(document, progress) for each
    document of its stream; returns the PullProgress. DockerAPIError on the stream's first error."""
    name, tag = ref, None
    if "@" not in ref and ":" in ref.rsplit("/", 1)[-1]:
        name, tag = ref.rsplit(":", 1)
    progress = PullProgress()
    response = api.request("POST", "/images/create", params={"fromImage": name, "tag": tag})
    for document in json_stream(response):
        error = stream_error(document)
        if error:
            raise DockerAPIError("pulling %s: %s" % (ref, error))
        progress.add(document)
        if on_document:
            on_document(document, progress)
    return progress


def image_digest(ref, inspect):
    """What identifies the image a reference names: the digest it pins (name@sha256:...), else the repository digest
    the daemon recorded when it pulled it, else (built or loaded locally) its image ID."""
    if "@" in ref:
        return ref.split("@", 1)[1]
    digests = (inspect or {}).get("RepoDigests") or []
    repository = ref.rsplit(":", 1)[0] if ":" in ref.rsplit("/", 1)[-1] else ref
    for entry in digests:
        if entry.split("@", 1)[0] == repository:
            return entry.split("@", 1)[1]
    if digests:
        return digests[0].split("@", 1)[1]
    return (inspect or {}).get("Id")
