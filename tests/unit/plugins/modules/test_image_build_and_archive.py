"""kimi.deploy.image_build and kimi.deploy.image_archive against a fake Docker daemon on a unix socket (the Engine
API's endpoints and streaming JSON, as dockerd sends them), run as Ansible runs modules. The real daemon runs them in
molecule/kimi_image; here the paths it cannot take there: a base pulled with progress, a daemon error mid-stream,
an archive whose copy is short, a loaded image with another ID."""
import http.server
import io
import json
import os
import socketserver
import tarfile
import threading
from urllib.parse import parse_qs, unquote

import pytest

from ansible_collections.kimi.deploy.plugins.module_utils import _docker_api as api
from module_runner import run_module

MODULES = os.path.join(os.path.dirname(os.path.abspath(__file__)), *([os.pardir] * 4 + ["plugins", "modules"]))
BASE = "vllm/vllm-openai:v0.22.1-cu130"
DIGEST = "sha256:" + "d" * 64


class FakeDaemon(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True

    def __init__(self, path):
        self.images = {}      # ref -> inspect document
        self.requests = []    # (method, path, query)
        self.build_fails = None
        self.loaded_id = None
        socketserver.UnixStreamServer.__init__(self, path, Handler)


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def _body(self):
        if self.headers.get("Transfer-Encoding") == "chunked":
            data = b""
            while True:
                size = int(self.rfile.readline().strip(), 16)
                if not size:
                    self.rfile.readline()
                    return data
                data += self.rfile.read(size)
                self.rfile.readline()
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _stream(self, documents, split=7):
        """Chunked JSON documents, cut at odd places as the daemon's writes can be."""
        data = b"".join(json.dumps(d).encode() + b"\r\n" for d in documents)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for i in range(0, len(data), split):
            piece = data[i:i + split]
            self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
        self.wfile.write(b"0\r\n\r\n")

    def _json(self, status, document):
        data = json.dumps(document).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        path, unused, query = self.path.partition("?")
        self.server.requests.append(("GET", path, query))
        parts = path.split("/")
        ref = unquote(parts[2]) if len(parts) > 2 else ""
        if path.endswith("/json"):
            image = self.server.images.get(ref)
            return self._json(200, image) if image else self._json(404, {"message": "No such image: " + ref})
        if path.endswith("/get"):
            data = b"fake image tar of " + ref.encode() * 1000
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return None
        return self._json(404, {"message": "page not found"})

    def do_POST(self):
        path, unused, query = self.path.partition("?")
        self.server.requests.append(("POST", path, query))
        body = self._body()
        params = dict((key, values[0]) for key, values in parse_qs(query).items())
        if path == "/images/create":
            layers = ["aaa", "bbb"]
            docs = [{"status": "Pulling from vllm/vllm-openai", "id": "v0.22.1-cu130"}]
            for step in (1, 2):
                docs += [{"status": "Downloading", "id": layer, "progressDetail": {"current": step * 500, "total": 1000}}
                         for layer in layers]
            docs += [{"status": "Pull complete", "id": layer} for layer in layers]
            docs.append({"status": "Digest: " + DIGEST})
            self.server.images[BASE] = {"Id": "sha256:" + "b" * 64, "RepoDigests": ["vllm/vllm-openai@" + DIGEST]}
            return self._stream(docs)
        if path == "/build":
            names = tarfile.open(fileobj=io.BytesIO(body)).getnames()
            name = params["t"]
            docs = [{"stream": "Step 1/2 : FROM %s\n" % BASE}, {"stream": " ---> bbbbbbbbbbbb\n"},
                    {"stream": "Step 2/2 : RUN patch (context: %s)\n" % ",".join(sorted(names))}]
            if self.server.build_fails:
                docs += [{"stream": "\x1b[91mPATCH FAILED: %s\n\x1b[0m" % self.server.build_fails},
                         {"errorDetail": {"code": 3, "message": "The command returned a non-zero code: 3"},
                          "error": "The command returned a non-zero code: 3"}]
                return self._stream(docs)
            labels = json.loads(params["labels"])
            self.server.images[name] = {"Id": "sha256:" + "c" * 64, "Config": {"Labels": labels}}
            docs += [{"stream": "Successfully built cccccccccccc\n"}, {"aux": {"ID": "sha256:" + "c" * 64}}]
            return self._stream(docs)
        if path == "/images/load":
            assert body.startswith(b"fake image tar of ")
            self.server.images["kimi:test"] = {"Id": self.server.loaded_id or "sha256:" + "c" * 64}
            return self._stream([{"stream": "Loaded image: kimi:test\n"}])
        return self._json(404, {"message": "page not found"})


@pytest.fixture
def daemon(tmp_path):
    server = FakeDaemon(str(tmp_path / "docker.sock"))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture
def context(tmp_path):
    folder = tmp_path / "context"
    folder.mkdir()
    (folder / "Dockerfile").write_text("FROM x\n")
    (folder / "kimi_vllm_patch.py").write_text("print('patch')\n")
    (folder / ".hidden").write_text("not sent\n")
    return folder


def build_args(tmp_path, context, **more):
    args = {"name": "kimi:test-candidate", "context": str(context), "base": BASE, "base_label": "x.base-digest",
            "buildargs": {"BASE_IMAGE": BASE}, "labels": {"x.recipe": "r1"}, "log_file": str(tmp_path / "build.log"),
            "progress_file": str(tmp_path / "progress.json"), "docker_host": "unix://" + str(tmp_path / "docker.sock")}
    args.update(more)
    return args


def test_a_missing_base_is_pulled_with_progress_then_built_with_the_base_digest_label(tmp_path, daemon, context):
    out = run_module(os.path.join(MODULES, "image_build.py"), build_args(tmp_path, context))
    assert out["changed"] and out["pulled"] and out["steps"] == 2 and out["image_id"] == "sha256:" + "c" * 64
    assert out["base_digest"] == DIGEST
    assert daemon.images["kimi:test-candidate"]["Config"]["Labels"] == {"x.recipe": "r1", "x.base-digest": DIGEST}
    log = (tmp_path / "build.log").read_text()
    assert "pulling %s" % BASE in log and "pulled %s: 0.00 / 0.00 GB of the layers seen" % BASE in log
    assert "2/2 layers complete" in log and "Step 2/2 : RUN patch (context: Dockerfile,kimi_vllm_patch.py)" in log
    assert json.loads((tmp_path / "progress.json").read_text())["state"] == "built"
    build = [q for m, p, q in daemon.requests if p == "/build"][0]
    assert "pull=0" in build and "rm=1" in build and "nocache=0" in build


def test_pull_base_never_refuses_a_missing_base(tmp_path, daemon, context):
    out = run_module(os.path.join(MODULES, "image_build.py"), build_args(tmp_path, context, pull_base="never"))
    assert out["failed"] and "is not on this host and pull_base=never" in out["msg"]
    assert not [p for m, p, q in daemon.requests if p in ("/images/create", "/build")]


def test_a_failed_step_names_the_step_and_its_output_and_tags_nothing(tmp_path, daemon, context):
    daemon.images[BASE] = {"Id": "sha256:" + "b" * 64, "RepoDigests": []}
    daemon.build_fails = "/x/triton_decode_attention.py: looked for one assignment `num_stages = <int>`"
    out = run_module(os.path.join(MODULES, "image_build.py"), build_args(tmp_path, context))
    assert out["failed"] and not out["pulled"]
    assert out["msg"].startswith("building kimi:test-candidate failed at step 2/2 (RUN patch")
    assert "PATCH FAILED: /x/triton_decode_attention.py: looked for one assignment" in out["msg"]
    assert "\x1b" not in out["msg"] and "build log: %s" % (tmp_path / "build.log") in out["msg"]
    assert "kimi:test-candidate" not in daemon.images
    assert json.loads((tmp_path / "progress.json").read_text())["state"] == "failed"


def test_check_mode_builds_nothing(tmp_path, daemon, context):
    out = run_module(os.path.join(MODULES, "image_build.py"), build_args(tmp_path, context), check_mode=True)
    assert out["changed"] and not daemon.requests


def archive_args(tmp_path, **more):
    args = {"name": "kimi:test", "path": str(tmp_path / "kimi.tar.zst"),
            "docker_host": "unix://" + str(tmp_path / "docker.sock")}
    args.update(more)
    return args


def test_save_is_atomic_recorded_and_idempotent_then_load_checks_the_id(tmp_path, daemon):
    module = os.path.join(MODULES, "image_archive.py")
    daemon.images["kimi:test"] = {"Id": "sha256:" + "c" * 64, "Config": {"Labels": {"x.recipe": "r1"}}}
    out = run_module(module, archive_args(tmp_path))
    assert out["changed"] and out["image_id"] == "sha256:" + "c" * 64
    record = json.loads((tmp_path / "kimi.tar.zst.json").read_text())
    assert record["bytes"] == os.path.getsize(str(tmp_path / "kimi.tar.zst")) and record["labels"] == {"x.recipe": "r1"}
    assert (tmp_path / "kimi.tar.zst").read_bytes()[:4] == b"\x28\xb5\x2f\xfd"
    assert not [n for n in os.listdir(str(tmp_path)) if n.endswith(".tmp")]
    assert not run_module(module, archive_args(tmp_path))["changed"]  # the record names the current ID
    assert not run_module(module, archive_args(tmp_path, state="loaded"))["changed"]  # already there
    del daemon.images["kimi:test"]
    out = run_module(module, archive_args(tmp_path, state="loaded"))
    assert out["changed"] and out["messages"] == ["Loaded image: kimi:test"]


def test_load_refuses_a_short_copy_and_an_image_with_another_id(tmp_path, daemon):
    module = os.path.join(MODULES, "image_archive.py")
    daemon.images["kimi:test"] = {"Id": "sha256:" + "c" * 64, "Config": {"Labels": {}}}
    run_module(module, archive_args(tmp_path))
    del daemon.images["kimi:test"]
    daemon.loaded_id = "sha256:" + "e" * 64
    out = run_module(module, archive_args(tmp_path, state="loaded"))
    assert out["failed"] and "is sha256:eeee" in out["msg"] and "not the recorded sha256:cccc" in out["msg"]
    with open(str(tmp_path / "kimi.tar.zst"), "r+b") as handle:
        handle.truncate(10)
    del daemon.images["kimi:test"]
    out = run_module(module, archive_args(tmp_path, state="loaded"))
    assert out["failed"] and "the copy is incomplete" in out["msg"]


def test_load_without_a_record_says_what_to_do(tmp_path, daemon):
    out = run_module(os.path.join(MODULES, "image_archive.py"), archive_args(tmp_path, state="loaded"))
    assert out["failed"] and "save the image with state=saved first" in out["msg"]


class Chunks:
    def __init__(self, data, size):
        self.parts = [data[i:i + size] for i in range(0, len(data), size)]

    def read1(self, unused):
        return self.parts.pop(0) if self.parts else b""


def test_json_stream_reassembles_documents_cut_anywhere():
    docs = [{"stream": "Step 1/2 : FROM x\n"}, {"status": "Downloading", "progressDetail": {"current": 1}}, {"aux": {}}]
    data = b"".join(json.dumps(d).encode() + b"\r\n" for d in docs)
    for size in (1, 3, 17, len(data)):
        assert list(api.json_stream(Chunks(data, size))) == docs
    with pytest.raises(api.DockerAPIError, match="ended inside a JSON document"):
        list(api.json_stream(Chunks(data[:-5], 4)))


@pytest.mark.parametrize("ref, inspect, digest", [
    ("reg.local/vllm@sha256:" + "a" * 64, None, "sha256:" + "a" * 64),
    ("vllm/vllm-openai:v0.22.1-cu130", {"Id": "sha256:i", "RepoDigests": ["mirror/x@sha256:m",
                                                                          "vllm/vllm-openai@sha256:r"]}, "sha256:r"),
    ("reg.local:5000/vllm:v1", {"Id": "sha256:i", "RepoDigests": ["other@sha256:o"]}, "sha256:o"),
    ("local/base:1", {"Id": "sha256:i", "RepoDigests": []}, "sha256:i"),
    ("local/base:1", None, None),
])
def test_image_digest(ref, inspect, digest):
    assert api.image_digest(ref, inspect) == digest


def test_only_a_unix_socket_is_accepted():
    assert api.socket_path("unix:///run/d.sock") == "/run/d.sock"
    with pytest.raises(api.DockerAPIError, match="only a unix socket"):
        api.socket_path("tcp://10.0.0.1:2375")


def present_args(tmp_path, **more):
    args = {"name": BASE, "docker_host": "unix://%s" % (tmp_path / "docker.sock")}
    args.update(more)
    return args


def test_image_present_reads_a_present_image_in_one_request(tmp_path, daemon):
    daemon.images[BASE] = {"Id": "sha256:" + "b" * 64, "RepoDigests": ["vllm/vllm-openai@" + DIGEST]}
    out = run_module(os.path.join(MODULES, "image_present.py"), present_args(tmp_path))
    assert not out["changed"] and out["present"] and not out["pulled"]
    assert out["image_id"] == "sha256:" + "b" * 64 and out["digest"] == DIGEST
    assert [(m, p) for m, p, q in daemon.requests] == [("GET", "/images/%s/json" % api.image_path(BASE))]


def test_image_present_pulls_a_missing_image_and_check_mode_only_says_so(tmp_path, daemon):
    module = os.path.join(MODULES, "image_present.py")
    out = run_module(module, present_args(tmp_path), check_mode=True)
    assert out["changed"] and not out["present"] and BASE not in daemon.images
    out = run_module(module, present_args(tmp_path))
    assert out["changed"] and out["pulled"] and out["present"] and out["digest"] == DIGEST
    assert ("POST", "/images/create", "fromImage=vllm%2Fvllm-openai&tag=v0.22.1-cu130") in daemon.requests
    assert not run_module(module, present_args(tmp_path))["changed"]


def test_image_present_never_pulls_with_pull_never_and_names_the_image_and_the_hint(tmp_path, daemon):
    module = os.path.join(MODULES, "image_present.py")
    out = run_module(module, present_args(tmp_path, pull="never", hint="run site.yml with --tags image first"))
    assert out.get("failed")
    assert out["msg"] == "%s is not on this host and is never pulled: run site.yml with --tags image first" % BASE
    assert not run_module(module, present_args(tmp_path, pull="never"), check_mode=True).get("failed")
    assert not [p for m, p, q in daemon.requests if p == "/images/create"]
