"""Tests of the fake Hugging Face hub (tests/doubles/hub/fake_hub.py).

The real huggingface_hub client is the judge: it runs in a subprocess (its env vars are read at import time)
with HF_ENDPOINT pointing at the fake hub, HF_HUB_DISABLE_XET=1 and HF_HOME in tmp_path.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit

import pytest

HUB_DIR = Path(__file__).resolve().parents[2] / "doubles" / "hub"
sys.path.insert(0, str(HUB_DIR))
import fake_hub as fh  # noqa: E402

KIMI = "moonshotai/Kimi-K2.6"
BIG = "kimi-test/Big"
PRIVATE = "kimi-test/Private"
TOKEN = "hf_fake_token_0123456789"
PAGE_SIZE = 8
MiB = 1 << 20
SPECS = [
    f"{KIMI}:shards=2,shard_size=3MiB,extra=5",
    f"{BIG}:shards=1,shard_size=12MiB",
    f"{PRIVATE}:shards=1,shard_size=1536KiB,private=true",
]


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    h = fh.start_fake_hub(SPECS, tokens=[TOKEN], page_size=PAGE_SIZE,
                          cache_dir=str(tmp_path_factory.mktemp("fake-hub-cache")))
    yield h
    h.stop()


@pytest.fixture(autouse=True)
def _clean(request):
    if "hub" in request.fixturenames:
        request.getfixturevalue("hub").reset()
    yield


# ---------------------------------------------------------------------------------------------- helpers
def manifest(hub, repo_id=KIMI):
    return {f["path"]: f for f in hub.repos[repo_id].manifest()["files"]}


def run_client(hub, home, code, *, offline=False, check=True, extra_env=None):
    """Run `code` with the real huggingface_hub in a subprocess; its last stdout line must be JSON."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env.update(HF_ENDPOINT=hub.url, HF_HUB_DISABLE_XET="1", HF_HOME=str(home), HF_HUB_DISABLE_PROGRESS_BARS="1",
               HF_HUB_DISABLE_TELEMETRY="1", PYTHONDONTWRITEBYTECODE="1")
    if offline:
        env["HF_HUB_OFFLINE"] = "1"
    env.update(extra_env or {})
    prog = "import json, huggingface_hub as hh\nfrom huggingface_hub import errors\n" + textwrap.dedent(code)
    r = subprocess.run([sys.executable, "-c", prog], env=env, capture_output=True, text=True, timeout=120,
                       check=False)
    if check:
        assert r.returncode == 0, f"client failed:\n{r.stdout}\n{r.stderr[-4000:]}"
    lines = r.stdout.strip().splitlines()
    return json.loads(lines[-1]) if lines else None


def sha256_file(p) -> str:
    h = hashlib.sha256()
    with open(p, "rb") as f:
        for chunk in iter(lambda: f.read(MiB), b""):
            h.update(chunk)
    return h.hexdigest()


def api_requests(hub, **kw):
    """Logged requests, without the client's once-a-day telemetry call."""
    return [r for r in hub.requests(**kw) if r["path"] != "/api/agent-harnesses"]


def conn(url):
    u = urlsplit(url)
    return http.client.HTTPConnection(u.hostname, u.port, timeout=30)


def request(url, method="GET", headers=None, body=None):
    """One request on a fresh connection; returns (status, headers, body)."""
    u = urlsplit(url)
    c = conn(url)
    try:
        c.request(method, u.path + (f"?{u.query}" if u.query else ""), body=body, headers=headers or {})
        r = c.getresponse()
        return r.status, r.headers, r.read()
    finally:
        c.close()


def resolve_url(hub, path, repo=KIMI, rev="main"):
    return f"{hub.url}/{repo}/resolve/{rev}/{path}"


def cdn_location(hub, path, repo=KIMI):
    status, headers, _body = request(resolve_url(hub, path, repo), "HEAD")
    assert status == 302, status
    return headers["Location"]


def shard_name(i, n):
    return f"model-{i:05d}-of-{n:05d}.safetensors"


# ---------------------------------------------------------------------------------------------- real client
def test_snapshot_by_sha_then_main_then_offline(hub, tmp_path):
    sha = hub.commits[KIMI]
    man = manifest(hub)
    path = run_client(hub, tmp_path, f"print(json.dumps(hh.snapshot_download({KIMI!r}, revision={sha!r})))")
    snap = Path(path)
    assert snap.name == sha
    got = sorted(str(p.relative_to(snap)) for p in snap.rglob("*") if not p.is_dir())
    assert got == sorted(man)
    for rel, m in man.items():
        p = snap / rel
        assert sha256_file(p) == m["sha256"], rel
        assert p.stat().st_size == m["size"], rel
        # blobs are named by ETag: sha256 for LFS files, git blob sha1 for the others
        assert os.path.basename(os.readlink(p)) == (m["sha256"] if m["lfs"] else fh.git_blob_sha1(p.read_bytes()))
    assert man["model-00001-of-00002.safetensors"]["lfs"] and man["tiktoken.model"]["lfs"]
    assert not man["config.json"]["lfs"]
    # the shards are valid safetensors files and the index points at them
    index = json.loads((snap / "model.safetensors.index.json").read_text())
    assert sorted(set(index["weight_map"].values())) == [shard_name(1, 2), shard_name(2, 2)]
    body_total = 0
    for i in (1, 2):
        raw = (snap / shard_name(i, 2)).read_bytes()
        hlen = int.from_bytes(raw[:8], "little")
        header = json.loads(raw[8:8 + hlen])
        (tensor,) = [k for k in header if k != "__metadata__"]
        assert 8 + hlen + header[tensor]["data_offsets"][1] == len(raw) == 3 * MiB
        body_total += header[tensor]["data_offsets"][1]
    assert index["metadata"]["total_size"] == body_total
    config = json.loads((snap / "config.json").read_text())
    assert config["quantization_config"]["quant_method"] == "compressed-tensors"
    assert config["auto_map"]["AutoConfig"] == "configuration_kimi_k25.KimiK25Config"

    log = api_requests(hub)
    assert not [r for r in log if "/revision/" in r["path"]], "a sha revision must not be resolved"
    tree_calls = [r for r in log if "/tree/" in r["path"]]
    assert len(tree_calls) >= 3 and all(r["status"] == 200 for r in tree_calls)
    cdn = [r for r in log if r["role"] == "cdn"]
    lfs = [m for m in man.values() if m["lfs"]]
    assert sorted(r["file"] for r in cdn) == sorted(m["path"] for m in lfs)
    assert all(r["status"] == 200 and r["bytes"] == man[r["file"]]["size"] for r in cdn)

    # second run by branch: one revision call, tree from the client's cache, no file byte downloaded again
    hub.reset()
    path2 = run_client(hub, tmp_path, f"print(json.dumps(hh.snapshot_download({KIMI!r}, revision='main')))")
    assert path2 == path
    log = api_requests(hub)
    assert [r["path"] for r in log] == [f"/api/models/{KIMI}/revision/main"]
    assert sum(r["bytes"] for r in log if r["role"] == "cdn" or "/resolve/" in r["path"]) == 0
    ref = tmp_path / "hub" / "models--moonshotai--Kimi-K2.6" / "refs" / "main"
    assert ref.read_text() == sha

    # offline: resolves through refs/main, no request reaches the server
    hub.reset()
    path3 = run_client(hub, tmp_path, f"""
        print(json.dumps(hh.snapshot_download({KIMI!r}, revision="main", local_files_only=True)))""",
                       offline=True)
    assert path3 == path
    assert api_requests(hub) == []


def test_errors_map_to_client_exceptions(hub, tmp_path):
    sha = hub.commits[KIMI]
    out = run_client(hub, tmp_path, f"""
        res = {{}}
        def attempt(name, fn):
            try:
                fn()
                res[name] = "no error"
            except Exception as e:
                res[name] = [type(e).__name__, isinstance(e, errors.RepositoryNotFoundError),
                             isinstance(e, errors.RevisionNotFoundError), isinstance(e, errors.EntryNotFoundError)]
        attempt("repo", lambda: hh.hf_hub_download("nope/nope", "config.json"))
        attempt("repo_info", lambda: hh.HfApi().model_info("nope/nope"))
        attempt("revision", lambda: hh.hf_hub_download({KIMI!r}, "config.json", revision="no-such-branch"))
        attempt("snap_rev", lambda: hh.snapshot_download({KIMI!r}, revision="0" * 40))
        attempt("entry", lambda: hh.hf_hub_download({KIMI!r}, "missing.json", revision={sha!r}))
        print(json.dumps(res))""")
    assert out["repo"] == out["repo_info"] == ["RepositoryNotFoundError", True, False, False]
    assert out["revision"] == out["snap_rev"] == ["RevisionNotFoundError", False, True, False]
    assert out["entry"] == ["RemoteEntryNotFoundError", False, False, True]
    assert (tmp_path / "hub" / "models--moonshotai--Kimi-K2.6" / ".no_exist" / sha / "missing.json").exists()
    codes = {r["path"]: r["status"] for r in api_requests(hub)}
    assert codes["/nope/nope/resolve/main/config.json"] == 404


def test_private_repo_and_token_only_reaches_hub(hub, tmp_path):
    man = manifest(hub, PRIVATE)
    out = run_client(hub, tmp_path, f"""
        res = {{}}
        for name, tok in (("none", False), ("bad", "hf_wrong"), ("good", {TOKEN!r})):
            try:
                res[name] = hh.snapshot_download({PRIVATE!r}, token=tok, cache_dir="{tmp_path}/c-" + name)
            except Exception as e:
                res[name] = [type(e).__name__, getattr(getattr(e, "response", None), "status_code", None)]
        print(json.dumps(res))""")
    assert out["none"] == ["RepositoryNotFoundError", 401]
    assert out["bad"][1] == 401 and out["bad"][0] != "RepositoryNotFoundError"
    snap = Path(out["good"])
    for rel, m in man.items():
        assert sha256_file(snap / rel) == m["sha256"], rel
    log = api_requests(hub)
    good = [r for r in log if r["status"] in (200, 206, 302)]
    hub_ok = [r for r in good if r["role"] == "hub"]
    cdn = [r for r in log if r["role"] == "cdn"]
    assert hub_ok and all(r["auth"] for r in hub_ok)
    assert len(cdn) == sum(m["lfs"] for m in man.values()) == 2
    assert not any(r["auth"] for r in cdn), "the token must never reach the CDN"
    assert all(r["host"].split(":")[0] != urlsplit(hub.url).hostname for r in cdn)


# ---------------------------------------------------------------------------------------------- protocol
def test_pagination_link_chain(hub):
    repo = hub.repos[KIMI]
    expected = sorted([f.path for f in repo.files] + list(repo.dirs))
    assert len(expected) > 2 * PAGE_SIZE
    url = f"{hub.url}/api/models/{KIMI}/tree/main?recursive=true&expand=false"
    seen, pages = [], 0
    while url:
        with urllib.request.urlopen(url) as r:
            page = json.load(r)
            link = r.headers.get("Link")
        pages += 1
        assert 0 < len(page) <= PAGE_SIZE
        seen += [e["path"] for e in page]
        if link:
            assert link.startswith("<http://") and link.endswith('>; rel="next"')
            url = link[1:link.index(">")]
            assert "recursive=true" in url and "cursor=" in url
        else:
            url = None
    assert pages == -(-len(expected) // PAGE_SIZE)
    assert seen == expected  # sorted, complete, no duplicates
    # the real client follows the same chain
    with urllib.request.urlopen(f"{hub.url}/api/models/{KIMI}/tree/main?recursive=true&limit=3") as r:
        assert len(json.load(r)) == 3 and "cursor=" in r.headers["Link"]
    with urllib.request.urlopen(f"{hub.url}/api/models/{KIMI}/tree/main") as r:
        top = {e["path"]: e["type"] for e in json.load(r)}
    assert top["docs"] == "directory" and "docs/deploy_guidance.md" not in top
    with urllib.request.urlopen(f"{hub.url}/api/models/{KIMI}/tree/main/docs") as r:
        assert [e["path"] for e in json.load(r)] == ["docs/deploy_guidance.md"]
    with pytest.raises(urllib.error.HTTPError) as ei:
        urllib.request.urlopen(f"{hub.url}/api/models/{KIMI}/tree/main/nope")
    assert ei.value.code == 404 and ei.value.headers["X-Error-Code"] == "EntryNotFound"


def test_tree_entry_fields(hub):
    sha = hub.commits[KIMI]
    entries = []
    url = f"{hub.url}/api/models/{KIMI}/tree/{sha}?recursive=true"
    while url:
        with urllib.request.urlopen(url) as r:
            entries += json.load(r)
            link = r.headers.get("Link")
        url = link[1:link.index(">")] if link else None
    files = {e["path"]: e for e in entries if e["type"] == "file"}
    shard = files[shard_name(1, 2)]
    body = request(cdn_location(hub, shard_name(1, 2)))[2]
    assert shard["lfs"]["oid"] == hashlib.sha256(body).hexdigest() and shard["size"] == len(body)
    pointer = fh.lfs_pointer(shard["lfs"]["oid"], len(body))
    assert shard["oid"] == fh.git_blob_sha1(pointer) and shard["lfs"]["pointerSize"] == len(pointer)
    cfg = request(resolve_url(hub, "config.json"))[2]
    assert files["config.json"]["oid"] == hashlib.sha1(b"blob %d\0" % len(cfg) + cfg).hexdigest()
    assert "lfs" not in files["config.json"]
    # model info with blobs=true (0.x clients list files from siblings)
    with urllib.request.urlopen(f"{hub.url}/api/models/{KIMI}/revision/main?blobs=true") as r:
        info = json.load(r)
    assert info["sha"] == sha and info["id"] == KIMI
    sib = {s["rfilename"]: s for s in info["siblings"]}
    assert sorted(sib) == sorted(files)
    assert sib[shard_name(1, 2)]["lfs"]["sha256"] == shard["lfs"]["oid"]


def test_resolve_headers_and_cross_host_redirect(hub):
    sha = hub.commits[KIMI]
    status, h, _body = request(resolve_url(hub, "config.json"), "HEAD")
    _status, _headers, body = request(resolve_url(hub, "config.json"))
    assert status == 200 and h["X-Repo-Commit"] == sha
    assert h["ETag"] == f'"{fh.git_blob_sha1(body)}"' and int(h["Content-Length"]) == len(body)

    status, h, _body = request(resolve_url(hub, shard_name(2, 2), rev=sha), "HEAD")
    assert status == 302 and h["X-Repo-Commit"] == sha and h["Content-Length"] is not None
    loc = urlsplit(h["Location"])
    assert loc.hostname != urlsplit(hub.url).hostname, "the CDN must be another host name, not just a port"
    assert f"{loc.scheme}://{loc.netloc}" == hub.cdn_url
    status, ch, body = request(h["Location"])
    assert status == 200 and len(body) == int(h["X-Linked-Size"]) == 3 * MiB
    assert h["X-Linked-Etag"] == f'"{hashlib.sha256(body).hexdigest()}"'
    assert h["ETag"] != h["X-Linked-Etag"]
    assert "X-Repo-Commit" not in ch and "X-Linked-Etag" not in ch
    # a GET on /resolve of an LFS file redirects too
    assert request(resolve_url(hub, shard_name(2, 2)))[0] == 302


def test_range_requests_and_keep_alive(hub):
    loc = urlsplit(cdn_location(hub, shard_name(1, 2)))
    target = f"{loc.path}?{loc.query}"
    full = request(cdn_location(hub, shard_name(1, 2)))[2]
    size = len(full)
    hub.reset()
    c = conn(hub.cdn_url)
    cases = [("bytes=0-99", 0, 100), (f"bytes={MiB - 10}-{MiB + 9}", MiB - 10, MiB + 10),
             (f"bytes={size - 5}-", size - 5, size), ("bytes=-7", size - 7, size),
             (f"bytes=100-{size + 1000}", 100, size), ("bytes=5-5", 5, 6)]
    for rng, a, b in cases:
        c.request("GET", target, headers={"Range": rng})
        r = c.getresponse()
        data = r.read()
        assert r.status == 206, rng
        assert r.headers["Content-Range"] == f"bytes {a}-{b - 1}/{size}", rng
        assert int(r.headers["Content-Length"]) == b - a and data == full[a:b], rng
    for rng in (f"bytes={size}-", f"bytes={size + 10}-{size + 20}", "bytes=-0"):
        c.request("GET", target, headers={"Range": rng})
        r = c.getresponse()
        assert r.read() == b"" and r.status == 416, rng
        assert r.headers["Content-Range"] == f"bytes */{size}" and r.headers["Content-Length"] == "0"
    c.request("GET", target, headers={"Range": "bytes=0-1,5-6"})  # multi-range: ignored, full body
    r = c.getresponse()
    assert r.status == 200 and r.read() == full
    c.request("HEAD", target, headers={"Range": "bytes=10-19"})
    r = c.getresponse()
    assert r.status == 206 and r.headers["Content-Length"] == "10" and r.read() == b""
    c.close()
    log = hub.requests()
    assert len(log) == len(cases) + 5 and len({r["conn"] for r in log}) == 1, "keep-alive must hold"
    # regular files on /resolve honour Range too (the client resumes there)
    cfg = request(resolve_url(hub, "config.json"))[2]
    status, h, part = request(resolve_url(hub, "config.json"), headers={"Range": "bytes=10-"})
    assert status == 206 and part == cfg[10:] and h["Content-Range"] == f"bytes 10-{len(cfg) - 1}/{len(cfg)}"


def test_keep_alive_across_statuses(hub):
    c = conn(hub.url)
    calls = [("HEAD", f"/{KIMI}/resolve/main/config.json", 200), ("HEAD", f"/{KIMI}/resolve/main/tiktoken.model", 302),
             ("GET", f"/{KIMI}/resolve/main/missing", 404), ("GET", f"/api/models/{KIMI}/tree/main", 200),
             ("GET", f"/{KIMI}/resolve/main/tiktoken.model", 302), ("GET", "/nope/nope/resolve/main/x", 404),
             ("GET", f"/api/models/{KIMI}/revision/main", 200)]
    for method, path, code in calls:
        c.request(method, path)
        r = c.getresponse()
        body = r.read()
        assert r.status == code, path
        assert r.headers["Content-Length"] is not None and (method == "HEAD" or
                                                            int(r.headers["Content-Length"]) == len(body))
    c.close()
    log = hub.requests()
    assert [r["status"] for r in log] == [code for _method, _path, code in calls]
    assert len({r["conn"] for r in log}) == 1


def test_parallel_ranges(hub):
    url = cdn_location(hub, shard_name(1, 1), repo=BIG)
    size = 12 * MiB
    parts, q = {}, size // 4

    def fetch(i):
        a, b = i * q, size if i == 3 else (i + 1) * q
        status, h, data = request(url, headers={"Range": f"bytes={a}-{b - 1}"})
        assert status == 206
        parts[i] = data

    threads = [threading.Thread(target=fetch, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    whole = b"".join(parts[i] for i in range(4))
    assert hashlib.sha256(whole).hexdigest() == manifest(hub, BIG)[shard_name(1, 1)]["sha256"]
    log = hub.requests(role="cdn")
    assert len({r["conn"] for r in log}) == 4
    assert sorted(r["range"] for r in log) == sorted(
        f"bytes={i * q}-{(size if i == 3 else (i + 1) * q) - 1}" for i in range(4))


# ---------------------------------------------------------------------------------------------- faults
def test_fault_status_5xx(hub, tmp_path):
    hub.add_fault(type="status_5xx", match=r"/tree/", count=2, status=500)
    url = f"{hub.url}/api/models/{KIMI}/tree/main"
    codes = []
    for _attempt in range(3):
        try:
            with urllib.request.urlopen(url) as r:
                codes.append(r.status)
        except urllib.error.HTTPError as e:
            codes.append(e.code)
    assert codes == [500, 500, 200]
    assert hub.faults.list() == []  # used up
    # the real client retries a 5xx on the tree listing (backoff 1 s) and succeeds
    hub.reset()
    hub.add_fault({"type": "status_5xx", "match": "/tree/", "count": 1})
    run_client(hub, tmp_path, f"print(json.dumps(hh.snapshot_download({KIMI!r}, allow_patterns=['*.json'])))")
    tree = [r["status"] for r in api_requests(hub) if "/tree/" in r["path"]]
    assert tree[:2] == [503, 200]
    # ... but it does NOT retry a 5xx on the CDN GET (http_get retries 408/429 only): the download fails
    hub.reset()
    hub.add_fault(type="status_5xx", role="cdn", count=1)
    out = run_client(hub, tmp_path / "h2", f"""
        try:
            hh.hf_hub_download({KIMI!r}, 'tiktoken.model')
            print(json.dumps("no error"))
        except errors.HfHubHTTPError as e:
            print(json.dumps(e.response.status_code))""")
    assert out == 503
    assert [r["status"] for r in hub.requests(role="cdn")] == [503]


def test_fault_rate_429(hub, tmp_path):
    hub.add_fault(type="rate_429", file="config.json", count=1, retry_after=0, ratelimit_header=True)
    status, h, _body = request(resolve_url(hub, "config.json"))
    assert status == 429 and h["Retry-After"] == "0" and h["RateLimit"] == '"api";r=0;t=0'
    assert request(resolve_url(hub, "config.json"))[0] == 200
    # the real client honours 429 on the CDN GET and retries
    hub.reset()
    hub.add_fault(type="rate_429", role="cdn", method="GET", count=1, retry_after=0)
    path = run_client(hub, tmp_path, f"print(json.dumps(hh.hf_hub_download({KIMI!r}, 'tiktoken.model')))")
    assert sha256_file(path) == manifest(hub)["tiktoken.model"]["sha256"]
    assert [r["status"] for r in hub.requests(role="cdn")] == [429, 200]


def test_fault_drop_after_bytes(hub, tmp_path):
    hub.add_fault(type="drop_after_bytes", file=shard_name(1, 2), bytes=1000, count=1)
    url = cdn_location(hub, shard_name(1, 2))
    u = urlsplit(url)
    c = conn(url)
    c.request("GET", f"{u.path}?{u.query}")
    r = c.getresponse()
    assert r.status == 200 and int(r.headers["Content-Length"]) == 3 * MiB
    with pytest.raises(http.client.IncompleteRead) as ei:
        r.read()
    assert len(ei.value.partial) == 1000
    c.close()
    rec = hub.requests(role="cdn")[-1]
    assert rec["bytes"] == 1000 and rec["aborted"] and rec["faults"] == ["drop_after_bytes"]
    assert len(request(url)[2]) == 3 * MiB  # count=1: the next one is whole
    # the real client resumes with Range from the last whole 10 MiB block it wrote
    hub.reset()
    hub.add_fault(type="drop_after_bytes", role="cdn", bytes=11 * MiB, count=1)
    path = run_client(hub, tmp_path, f"print(json.dumps(hh.hf_hub_download({BIG!r}, {shard_name(1, 1)!r})))")
    assert sha256_file(path) == manifest(hub, BIG)[shard_name(1, 1)]["sha256"]
    cdn = hub.requests(role="cdn")
    assert [(r["status"], r["range"], r["bytes"]) for r in cdn] == [
        (200, None, 11 * MiB), (206, f"bytes={10 * MiB}-", 2 * MiB)]


def test_fault_corrupt_byte(hub, tmp_path):
    name = shard_name(2, 2)
    url = cdn_location(hub, name)
    good = request(url)[2]
    off = MiB + 12345
    hub.add_fault(type="corrupt_byte", file=name, offset=off)
    bad = request(url)[2]
    assert len(bad) == len(good) and bad[off] == good[off] ^ 0xFF
    assert bad[:off] == good[:off] and bad[off + 1:] == good[off + 1:]
    _status, _headers, part = request(url, headers={"Range": f"bytes={off - 3}-{off + 3}"})
    assert part == good[off - 3:off] + bytes([good[off] ^ 0xFF]) + good[off + 1:off + 4]
    assert request(url, headers={"Range": "bytes=0-99"})[2] == good[:100]  # range without the byte: clean
    assert hub.faults.list()[0]["fired"] == 2
    # the real client does not hash plain-HTTP downloads: it stores the corrupt file silently
    path = run_client(hub, tmp_path, f"print(json.dumps(hh.hf_hub_download({KIMI!r}, {name!r})))")
    assert os.path.getsize(path) == len(good)
    assert sha256_file(path) != manifest(hub)[name]["sha256"]
    assert os.path.basename(os.path.realpath(path)) == manifest(hub)[name]["sha256"]


def test_fault_expire_urls_and_signatures(hub):
    url = cdn_location(hub, "tiktoken.model")
    assert request(url)[0] == 200
    fid = hub.add_fault(type="expire_urls", after=0.2)
    assert request(url)[0] == 200  # younger than 0.2 s
    time.sleep(0.3)
    status, _headers, body = request(url)
    assert status == 403 and b"expired" in body
    assert request(cdn_location(hub, "tiktoken.model"))[0] == 200  # a freshly signed URL works
    hub.faults.remove(fid)
    assert request(url)[0] == 200
    # forged or tampered URLs and the TTL
    assert request(url.replace("sig=", "sig=0"))[0] == 403
    assert request(url.replace("expires=", "expires=9"))[0] == 403
    assert request(url.split("?")[0])[0] == 403
    repo = hub.repos[KIMI]
    old = hub.sign_cdn_url(repo, repo.by_path["tiktoken.model"], now=time.time() - hub.url_ttl - 5)
    assert request(old)[0] == 403


def test_fault_rate_limit_bps(hub):
    url = cdn_location(hub, shard_name(1, 2))
    t = time.monotonic()
    assert len(request(url)[2]) == 3 * MiB
    fast = time.monotonic() - t
    hub.add_fault(type="rate_limit_bps", role="cdn", bps=4_000_000)
    t = time.monotonic()
    assert len(request(url)[2]) == 3 * MiB
    slow = time.monotonic() - t
    assert slow >= 3 * MiB / 4_000_000 * 0.9
    assert fast < slow / 2


def test_fault_selectors(hub):
    hub.add_fault(type="status_5xx", role="cdn", file="tiktoken.model", method="GET", count=1)
    assert request(resolve_url(hub, "tiktoken.model"), "HEAD")[0] == 302  # hub: not selected
    url = cdn_location(hub, "tiktoken.model")
    assert request(url, "HEAD")[0] == 200  # HEAD: not selected
    assert request(cdn_location(hub, shard_name(1, 2)))[0] == 200  # other file
    assert request(url)[0] == 503
    assert request(url)[0] == 200
    with pytest.raises(ValueError):
        hub.add_fault(type="nope")
    with pytest.raises(ValueError):
        hub.add_fault(type="status_5xx", bogus=1)


def test_introspection_endpoints(hub):
    def call(method, path, obj=None):
        body = None if obj is None else json.dumps(obj).encode()
        status, _headers, data = request(hub.url + path, method, {"Content-Type": "application/json"}, body)
        return status, json.loads(data)

    status, res = call("POST", "/_fake/faults", [{"type": "status_5xx", "match": "/revision/", "count": 1},
                                                 {"type": "rate_limit_bps", "bps": 1e9}])
    assert status == 200 and len(res["ids"]) == 2
    assert [f["type"] for f in call("GET", "/_fake/faults")[1]] == ["status_5xx", "rate_limit_bps"]
    assert request(f"{hub.url}/api/models/{KIMI}/revision/main")[0] == 503
    assert call("POST", "/_fake/faults", {"type": "bogus"})[0] == 400
    status, log = call("GET", "/_fake/requests")
    assert status == 200 and len(log) == 1
    rec = log[0]
    assert {"method", "host", "path", "range", "auth", "status", "bytes", "role", "faults", "conn"} <= set(rec)
    assert rec["status"] == 503 and rec["faults"] == ["status_5xx"] and rec["auth"] is False
    assert call("GET", f"/_fake/requests?since={rec['id']}")[1] == []
    assert call("DELETE", f"/_fake/faults/{res['ids'][1]}")[0] == 200
    assert call("GET", "/_fake/faults")[1] == []
    call("POST", "/_fake/faults", {"type": "status_5xx"})
    assert call("POST", "/_fake/reset")[0] == 200
    assert call("GET", "/_fake/requests")[1] == [] and call("GET", "/_fake/faults")[1] == []
    info = call("GET", "/_fake/info")[1]
    assert info["commits"] == hub.commits and info["cdn_url"] == hub.cdn_url
    assert info["manifests"][KIMI]["files"] == hub.repos[KIMI].manifest()["files"]


# ---------------------------------------------------------------------------------------------- generation
def test_spec_parsing_and_determinism(tmp_path, monkeypatch):
    spec = fh.RepoSpec.parse("moonshotai/Kimi-K2.6:shards=3,shard_size=2MiB,extra=2,private=1,seed=a")
    assert (spec.shards, spec.shard_size, spec.extra, spec.private, spec.quant) == (3, 2 * MiB, 2, True, "int4")
    assert fh.RepoSpec.parse("nvidia/Kimi-K2.6-NVFP4").quant == "nvfp4"
    assert fh.parse_size("1.5GB") == 1_500_000_000 and fh.parse_size("8MiB") == 8 * MiB
    for bad in ("noslash", "a/b:shards", "a/b:bogus=1", "a/b:quant=int3"):
        with pytest.raises(ValueError):
            fh.RepoSpec.parse(bad)
    cache = tmp_path / "cache"
    r1 = fh.Repo(spec, str(cache))
    r2 = fh.Repo(fh.RepoSpec.parse("moonshotai/Kimi-K2.6:shards=3,shard_size=2MiB,extra=2,private=1,seed=a"), None)
    assert r1.commit == r2.commit and len(r1.commit) == 40
    assert r1.manifest() == r2.manifest()
    r3 = fh.Repo(fh.RepoSpec.parse("moonshotai/Kimi-K2.6:shards=3,shard_size=2MiB,extra=2,private=1,seed=b"), None)
    assert r3.commit != r1.commit
    assert r3.by_path[shard_name(1, 3)].sha256 != r1.by_path[shard_name(1, 3)].sha256
    shas = {f.sha256 for f in r1.files if f.streamed}
    assert len(shas) == 3  # shards differ from one another
    # the hash table is cached on disk and reused: no re-hash on the next start
    assert len(list(cache.glob("*.json"))) == 1
    monkeypatch.setattr(fh.RepoFile, "compute_sha256", lambda self: pytest.fail("hash cache not used"))
    assert fh.Repo(spec, str(cache)).manifest() == r1.manifest()
    with pytest.raises(pytest.fail.Exception):
        fh.Repo(spec, str(tmp_path / "empty-cache"))


def test_stream_ranges_are_consistent():
    spec = fh.RepoSpec.parse("a/b:shards=1,shard_size=3MiB")
    f = fh.Repo(spec, None).by_path[shard_name(1, 1)]
    full = f.read()
    assert len(full) == f.size and hashlib.sha256(full).hexdigest() == f.sha256
    hlen = len(f.header)
    for a, b in [(0, 1), (0, hlen + 5), (hlen - 1, hlen + 1), (MiB - 1, MiB + 1), (hlen + MiB - 3, hlen + MiB + 40),
                 (5, 2 * MiB + 77), (f.size - 1, f.size), (1234, 1234)]:
        assert f.read(a, b) == full[a:b], (a, b)
    blocks = {full[hlen + i * MiB + 32:hlen + i * MiB + 4096] for i in range(3)}  # past the per-block hash
    assert len(blocks) == 3


# ---------------------------------------------------------------------------------------------- drafts
EAGLE3 = "lightseekorg/kimi-k2.6-eagle3"
DFLASH = "z-lab/Kimi-K2.6-DFlash"
BAD_DRAFT = "acme/bad-draft"
DRAFT_SPECS = [
    f"{EAGLE3}:kind=eagle3,shard_size=1MiB",
    f"{DFLASH}:kind=dflash,shard_size=1536KiB",
    f"{BAD_DRAFT}:kind=eagle3,hidden_size=4096,vocab_size=32000,shard_size=1MiB",
]
# What the drafts' config.json must hold (besides the fake_hub marker), written out here rather than taken from
# the code under test.
EAGLE3_CONFIG = {
    "architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": 7168, "num_hidden_layers": 1,
    "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 18432,
    "vocab_size": 163840, "draft_vocab_size": 32000, "max_position_embeddings": 262144, "rms_norm_eps": 1e-05,
    "rope_theta": 50000.0, "torch_dtype": "bfloat16", "tie_word_embeddings": False,
    "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 29, 57], "use_aux_hidden_state": True},
}
DFLASH_CONFIG = {
    "architectures": ["DFlashDraftModel"], "model_type": "dflash", "hidden_size": 7168, "num_hidden_layers": 5,
    "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 163840, "block_size": 16,
    "mask_token_id": 163838, "target_layer_ids": [1, 15, 29, 43, 57], "torch_dtype": "bfloat16",
}
# Commits of model specs as generated before draft kinds existed: adding `kind`, `hidden_size` and `vocab_size`
# to RepoSpec must not move them (deployed caches and recorded demo state are keyed by them).
PRE_DRAFT_COMMITS = {
    "moonshotai/Kimi-K2.6": "8a9c4001ecad755eb2876d8a2aeed79f47c4c201",
    f"{KIMI}:shards=2,shard_size=3MiB,extra=5": "6207ba79a3da1fbdb22d9a7072901555f5fb198e",
    f"{BIG}:shards=1,shard_size=12MiB": "58454945f142341d12cd65edddd42f1d1bbee741",
    f"{PRIVATE}:shards=1,shard_size=1536KiB,private=true": "66ed0f8c5e07ef8b626f31838df1831bf0a03033",
    "nvidia/Kimi-K2.6-NVFP4:shards=2,shard_size=4MiB,private=1": "c720f6746acd7b6d0ab1f1a6ec7f403fde14b7a3",
    "acme/Kimi-K2.6-W4A8:shards=1,shard_size=1MiB": "b321b5ae2f7c7a1557631dc9d0ad86465184af12",
    "x/y:quant=fp8,seed=q,tiktoken_tokens=500,shard_size=1MiB,shards=3": "cc7c6e2f92b116f9fca9096b51a4f92260acb1ac",
    "a/b:shards=1,shard_size=300": "06d6e0cf979ee6aaf0879be8e00f99ec6d88a406",
}


@pytest.fixture(scope="module")
def draft_hub(tmp_path_factory):
    h = fh.start_fake_hub(DRAFT_SPECS, cache_dir=str(tmp_path_factory.mktemp("fake-hub-draft-cache")))
    yield h
    h.stop()


def parse_safetensors(path):
    """(header dict, header length) of a safetensors file: 8-byte little-endian length, then JSON."""
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        return json.loads(f.read(n)), n


@pytest.mark.parametrize("repo_id,expected,tensor,size", [
    (EAGLE3, EAGLE3_CONFIG, "midlayer.self_attn.q_proj.weight", MiB),
    (DFLASH, DFLASH_CONFIG, "layers.0.self_attn.q_proj.weight", 1536 * 1024),
])
def test_draft_snapshot_download(draft_hub, tmp_path, repo_id, expected, tensor, size):
    sha = draft_hub.commits[repo_id]
    out = run_client(draft_hub, tmp_path, f"""
        path = hh.snapshot_download({repo_id!r})
        info = hh.model_info({repo_id!r})
        print(json.dumps({{"path": path, "pipeline_tag": info.pipeline_tag, "tags": info.tags}}))
    """)
    snap = Path(out["path"])
    assert snap.name == sha
    got = sorted(str(p.relative_to(snap)) for p in snap.rglob("*") if not p.is_dir())
    assert got == [".gitattributes", "README.md", "config.json", "model.safetensors"]
    # no tokenizer: drafts use the target's
    assert not [g for g in got if "token" in g or g.endswith((".jinja", ".model"))]
    for rel, m in manifest(draft_hub, repo_id).items():
        assert sha256_file(snap / rel) == m["sha256"], rel
    config = json.loads((snap / "config.json").read_text())
    marker = config.pop("fake_hub")
    assert config == expected
    assert marker["generator_version"] == fh.GENERATOR_VERSION
    assert marker["spec"] == fh.RepoSpec.parse(next(s for s in DRAFT_SPECS if s.startswith(repo_id + ":"))
                                               ).canonical()
    st = snap / "model.safetensors"
    assert st.stat().st_size == size  # = shard_size
    header, hlen = parse_safetensors(st)
    assert header["__metadata__"] == {"format": "pt"}
    assert set(header) == {"__metadata__", tensor}
    begin, end = header[tensor]["data_offsets"]
    assert begin == 0 and 8 + hlen + end == size and header[tensor]["shape"] == [end]
    assert out["pipeline_tag"] == "text-generation" and "speculative-decoding" in out["tags"]


def test_draft_overrides_show_in_config_and_change_the_commit(draft_hub, tmp_path):
    cfg = run_client(draft_hub, tmp_path, f"""
        print(json.dumps(json.load(open(hh.hf_hub_download({BAD_DRAFT!r}, "config.json")))))
    """)
    assert (cfg["hidden_size"], cfg["vocab_size"]) == (4096, 32000)
    assert cfg["architectures"] == ["LlamaForCausalLMEagle3"]
    assert cfg["fake_hub"]["spec"]["hidden_size"] == 4096 and cfg["fake_hub"]["spec"]["vocab_size"] == 32000
    base = fh.RepoSpec.parse(f"{BAD_DRAFT}:kind=eagle3,shard_size=1MiB")
    assert draft_hub.commits[BAD_DRAFT] != base.commit
    commits = {base.commit}
    for opts in ("hidden_size=4096", "vocab_size=32000", "hidden_size=4096,vocab_size=32000", "kind=dflash"):
        spec = fh.RepoSpec.parse(f"{BAD_DRAFT}:kind=eagle3,shard_size=1MiB,{opts}")
        commits.add(spec.commit)
    assert len(commits) == 5
    # the defaults spelled out are the defaults: same commit, no new canonical field
    same = fh.RepoSpec.parse(f"{BAD_DRAFT}:kind=eagle3,shard_size=1MiB,hidden_size=7168,vocab_size=163840")
    assert same.commit == base.commit and "hidden_size" not in same.canonical()


def test_draft_spec_parsing(tmp_path):
    spec = fh.RepoSpec.parse("acme/Kimi-K2.6-eagle3-NVFP4-w4a8:kind=EAGLE3,shard_size=1MiB")
    assert (spec.kind, spec.shards, spec.quant, spec.hidden_size, spec.vocab_size) == ("eagle3", 1, "bf16", 7168,
                                                                                       163840)
    # shards, quant (even an unknown one) and tiktoken_tokens are ignored for drafts: same bytes, same commit
    loose = fh.RepoSpec.parse("acme/Kimi-K2.6-eagle3-NVFP4-w4a8:kind=eagle3,shard_size=1MiB,shards=4,quant=int3,"
                              "tiktoken_tokens=300")
    assert loose.commit == spec.commit
    r = fh.Repo(loose, None)
    assert [f.path for f in r.files] == [".gitattributes", "README.md", "config.json", "model.safetensors"]
    assert r.manifest() == fh.Repo(spec, None).manifest()
    assert fh.RepoSpec.parse("a/b:kind=dflash,shard_size=1MiB").commit != fh.RepoSpec.parse(
        "a/b:kind=eagle3,shard_size=1MiB").commit
    for bad in ("a/b:kind=medusa", "a/b:hidden_size=4096", "a/b:kind=model,vocab_size=1",
                "a/b:kind=eagle3,hidden_size=0", "a/b:kind=eagle3,vocab_size=x"):
        with pytest.raises(ValueError):
            fh.RepoSpec.parse(bad)
    # tiny drafts are raw bytes, like tiny shards
    assert fh.Repo(fh.RepoSpec.parse("a/b:kind=dflash,shard_size=100"), None).by_path["model.safetensors"].size == 100
    # write_repo lays a draft out as a model folder, for the engine doubles
    folder = Path(fh.write_repo(spec, str(tmp_path / "draft")))
    assert sorted(p.name for p in folder.iterdir()) == [".gitattributes", "README.md", "config.json",
                                                        "model.safetensors"]
    assert json.loads((folder / "config.json").read_text())["architectures"] == ["LlamaForCausalLMEagle3"]
    assert (folder / "model.safetensors").stat().st_size == MiB
    assert parse_safetensors(folder / "model.safetensors")[0]["midlayer.self_attn.q_proj.weight"]["dtype"] == "U8"


def test_model_commits_unchanged_by_draft_kinds(hub):
    for text, commit in PRE_DRAFT_COMMITS.items():
        spec = fh.RepoSpec.parse(text)
        assert spec.kind == "model" and spec.commit == commit, text
        assert not {"kind", "hidden_size", "vocab_size"} & set(spec.canonical())
    assert hub.commits[KIMI] == PRE_DRAFT_COMMITS[SPECS[0]]
    assert json.loads(hub.repos[KIMI].by_path["config.json"].read())["architectures"] == [
        "KimiK25ForConditionalGeneration"]


# ---------------------------------------------------------------------------------------------- CLI
@pytest.mark.parametrize("python", sorted({sys.executable} | ({"/usr/bin/python3"} if os.path.exists(
    "/usr/bin/python3") else set())))
def test_cli_stdlib_only(tmp_path, python):
    tok = tmp_path / "tokens"
    tok.write_text(f"# comment\n{TOKEN}\n")
    spec = "kimi-test/Cli:shards=2,shard_size=1MiB,private=1"
    p = subprocess.Popen([python, "-S", "-I", str(HUB_DIR / "fake_hub.py"), "--port", "0", "--repo", spec,
                          "--repo", "nvidia/Kimi-K2.6-NVFP4:shards=1,shard_size=4096", "--token-file", str(tok),
                          "--repo", "acme/bad-draft:kind=eagle3,hidden_size=4096,shard_size=1MiB",
                          "--page-size", "5", "--cache-dir", str(tmp_path / "c"),
                          "--info-file", str(tmp_path / "info.json")],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = p.stdout.readline()
        assert line, p.stderr.read()
        info = json.loads(line)
        assert json.loads((tmp_path / "info.json").read_text()) == info
        assert info["commits"]["kimi-test/Cli"] == fh.RepoSpec.parse(spec).commit
        assert info["repos"]["acme/bad-draft"]["kind"] == "eagle3" and info["repos"]["kimi-test/Cli"]["kind"] == "model"
        with urllib.request.urlopen(f"{info['hub_url']}/acme/bad-draft/resolve/main/config.json") as r:
            assert json.load(r)["hidden_size"] == 4096
        assert urlsplit(info["hub_url"]).hostname != urlsplit(info["cdn_url"]).hostname
        sha = info["commits"]["nvidia/Kimi-K2.6-NVFP4"]
        with urllib.request.urlopen(f"{info['hub_url']}/{'nvidia/Kimi-K2.6-NVFP4'}/resolve/{sha}/config.json") as r:
            assert json.load(r)["quantization_config"]["quant_algo"] == "NVFP4"
        req = urllib.request.Request(f"{info['hub_url']}/api/models/kimi-test/Cli/tree/main",
                                     headers={"Authorization": f"Bearer {TOKEN}"})
        with urllib.request.urlopen(req) as r:
            assert len(json.load(r)) == 5 and "cursor=" in r.headers["Link"]
        with pytest.raises(urllib.error.HTTPError) as ei:
            urllib.request.urlopen(f"{info['hub_url']}/api/models/kimi-test/Cli/tree/main")
        assert ei.value.code == 401 and ei.value.headers["X-Error-Code"] == "RepoNotFound"
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=10) == 0
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
