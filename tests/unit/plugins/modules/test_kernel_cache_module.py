"""kimi.deploy.kernel_cache (issue 39) as Ansible runs it: publish after a verified start, fetch from a peer's site
through curl with the fleet's key, and the air-gap bundle's carry (only verified caches) and install."""
import functools
import os
import shutil
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

import pytest

from module_runner import run_module

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
MODULE = os.path.join(ROOT, "plugins", "modules", "kernel_cache.py")
KEY = "sglang-0.5.4-0123456789abcdef01234567"
OTHER = "sglang-0.5.4-fedcba9876543210fedcba98"
PEER_KEY = "fleet-test-key"


def compiled(root, key=KEY):
    folder = os.path.join(str(root), key, "cache")
    os.makedirs(folder)
    for i in range(3):
        with open(os.path.join(folder, "kernel%d.cubin" % i), "wb") as out:
            out.write(os.urandom(2048))
    return os.path.join(str(root), key)


def tree(folder):
    found = {}
    for top, _dirs, names in os.walk(folder):
        for name in names:
            with open(os.path.join(top, name), "rb") as handle:
                found[os.path.relpath(os.path.join(top, name), folder)] = handle.read()
    return found


def publish(root, key=KEY):
    return run_module(MODULE, {"root": str(root), "key": key, "state": "published", "record": {"identity": "x"}})


@pytest.fixture
def peer_site(tmp_path):
    """A peer cache stand-in: /kernels/<name> from a folder, 401 without the fleet's key (as the Caddy site)."""
    served = tmp_path / "peer"
    served.mkdir()

    class Handler(SimpleHTTPRequestHandler):
        def do_GET(self):
            if self.headers.get("Authorization") != "Bearer " + PEER_KEY:
                self.send_error(401)
                return
            if not self.path.startswith("/kernels/"):
                self.send_error(404)
                return
            self.path = self.path[len("/kernels"):]
            SimpleHTTPRequestHandler.do_GET(self)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Handler, directory=str(served)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield served, "http://127.0.0.1:%d" % server.server_address[1]
    server.shutdown()


@pytest.mark.skipif(not shutil.which("curl"), reason="needs curl (the module's client)")
def test_a_host_fetches_the_verified_cache_of_its_key_from_a_peer(peer_site, tmp_path):
    served, url = peer_site
    folder = compiled(served)
    assert publish(served)["changed"]
    here = tmp_path / "here"
    here.mkdir()
    params = {"root": str(here), "key": KEY, "state": "fetched", "peer_key": PEER_KEY,
              "peers": [{"name": "kimi-fleet-1", "url": url}]}
    out = run_module(MODULE, params, keep_stdout=True)
    assert out["changed"] and out["fetched"] and out["source"] == "kimi-fleet-1" and out["files"] == 3
    assert tree(str(here / KEY)) == tree(folder)
    assert PEER_KEY not in out["_stdout"]
    again = run_module(MODULE, params)
    assert not again["changed"] and not again["fetched"]


@pytest.mark.skipif(not shutil.which("curl"), reason="needs curl (the module's client)")
def test_no_peer_has_it_the_engine_compiles(peer_site, tmp_path):
    served, url = peer_site
    compiled(served)  # compiled, but never verified: not published
    here = tmp_path / "here"
    here.mkdir()
    out = run_module(MODULE, {"root": str(here), "key": KEY, "state": "fetched", "peer_key": PEER_KEY,
                              "peers": [{"name": "kimi-fleet-1", "url": url}]})
    assert not out["changed"] and not out["fetched"] and "HTTP 404" in out["tried"][0]
    wrong_key = run_module(MODULE, {"root": str(here), "key": KEY, "state": "fetched", "peer_key": "nope",
                                    "peers": [{"name": "kimi-fleet-1", "url": url}]})
    assert not wrong_key["fetched"] and "HTTP 401" in wrong_key["tried"][0]
    assert os.listdir(str(here)) == []


def test_the_bundle_carries_verified_caches_only_and_installs_them(tmp_path):
    source, bundle, target = tmp_path / "source", tmp_path / "bundle", tmp_path / "target"
    for folder in (source, bundle, target):
        folder.mkdir()
    folder = compiled(source)
    publish(source)
    compiled(source, key=OTHER)  # compiled but never verified
    out = run_module(MODULE, {"root": str(bundle), "src": str(source), "state": "collected"})
    assert out["changed"] and out["installed"] == [KEY]
    assert sorted(os.listdir(str(bundle))) == [KEY + ".tar", KEY + ".verified"]
    assert not run_module(MODULE, {"root": str(bundle), "src": str(source), "state": "collected"})["changed"]

    installed = run_module(MODULE, {"root": str(target), "src": str(bundle), "state": "installed"})
    assert installed["changed"] and installed["installed"] == [KEY]
    assert tree(str(target / KEY)) == tree(folder)
    assert not run_module(MODULE, {"root": str(target), "src": str(bundle), "state": "installed"})["changed"]


def test_the_bundle_refuses_an_archive_that_does_not_match_its_marker(tmp_path):
    source, bundle = tmp_path / "source", tmp_path / "bundle"
    source.mkdir()
    bundle.mkdir()
    compiled(source)
    publish(source)
    with open(str(source / (KEY + ".tar")), "ab") as out:
        out.write(b"\0")
    out = run_module(MODULE, {"root": str(bundle), "src": str(source), "state": "collected"})
    assert not out["changed"] and "does not match" in out["tried"][0]
    assert os.listdir(str(bundle)) == []
