"""hf_snapshot against the fake hub with real parts: the module runs as Ansible runs it (a subprocess on an
argument file), downloads with the real curl, and the real huggingface_hub 2.4.0 (offline) is the judge of the
cache it leaves. The fake hub's request log proves what went over the wire; its fault switches make the failures.
"""
import json
import os
import signal
import stat
import threading
import time

import pytest

from ansible_collections.kimi.deploy.plugins.module_utils._files import human_size

from hfsnap_helpers import (
    MiB, assert_snapshot_matches, blob_path, body_requests, expected_etag, fake_hub, flip_byte, leftovers, manifest,
    parse_range, parse_result, repo_dir, run_client, run_module, sha256_file, snapshot_dir, snapshot_files, start_module,
)

KIMI = "moonshotai/Kimi-K2.6"
RESUME = "kimi-test/Resume"
PRIVATE = "kimi-test/Private"
TOKEN = "hf_kimi_secret_token_0123456789abcdef"
SPECS = [
    KIMI + ":shards=3,shard_size=4MiB",
    RESUME + ":shards=3,shard_size=20MiB",
    PRIVATE + ":shards=2,shard_size=4MiB,private=1",
]
SHARD1, SHARD2, SHARD3 = ["model-%05d-of-00003.safetensors" % i for i in (1, 2, 3)]


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    handle = fake_hub.start_fake_hub(SPECS, tokens=[TOKEN], cache_dir=str(tmp_path_factory.mktemp("fake-hub-cache")))
    yield handle
    handle.stop()


@pytest.fixture(autouse=True)
def clean_hub(request):
    if "hub" in request.fixturenames:
        request.getfixturevalue("hub").reset()


def module_args(hub, tmp_path, repo=KIMI, **extra):
    """The module's arguments against the fake hub (hub=None: the test gives endpoint and revision)."""
    args = {"repo_id": repo, "revision": hub and hub.commits[repo], "hf_home": str(tmp_path / "hf"), "endpoint": hub and hub.url,
            "chunk_size": MiB, "connections": 4, "progress_file": str(tmp_path / "progress.json")}
    args.update(extra)
    return args


def download(hub, tmp_path, repo=KIMI, **extra):
    result, unused = run_module(tmp_path, module_args(hub, tmp_path, repo, **extra))
    return result


def total_size(hub, repo=KIMI):
    return sum(f["size"] for f in manifest(hub, repo).values())


def warnings(result):
    """The module's warnings as text (ansible-core 2.19+ returns them as structured summaries)."""
    out = []
    for item in result.get("warnings", []):
        if isinstance(item, dict):
            item = (item.get("event") or {}).get("msg") or json.dumps(item)
        out.append(item)
    return out


def fired(log, fault_type):
    return [r for r in log if fault_type in r["faults"]]


# ------------------------------------------------------------------------------------------------ the real client
def test_real_client_resolves_every_file_offline_and_scan_cache_dir_is_clean(hub, tmp_path):
    home = tmp_path / "hf"
    sha = hub.commits[KIMI]
    man = manifest(hub, KIMI)
    result = download(hub, tmp_path)
    assert result["changed"] and result["verified"] and result["commit"] == sha
    assert result["files"] == sorted(man) and result["files_fetched"] == sorted(man)
    assert result["bytes_total"] == result["bytes_downloaded"] == total_size(hub)
    assert result["snapshot_path"] == snapshot_dir(home, KIMI, sha)

    hub.reset()
    out = run_client(hub, home, """
        def sha256(path):
            with open(path, "rb") as handle:
                return hashlib.sha256(handle.read()).hexdigest()
        repo, sha, paths = %r, %r, %r
        res = {"by_sha": hh.snapshot_download(repo, revision=sha, local_files_only=True),
               "by_main": hh.snapshot_download(repo, revision="main"),
               "default": hh.snapshot_download(repo),
               "files": {}}
        for path in paths:
            res["files"][path] = [sha256(hh.hf_hub_download(repo, path, revision=sha)),
                                  sha256(hh.hf_hub_download(repo, path, revision="main")),
                                  sha256(hh.hf_hub_download(repo, path, local_files_only=True))]
        info = hh.scan_cache_dir()
        res["warnings"] = [repr(w) for w in info.warnings]
        res["repos"] = [{
            "repo_id": r.repo_id, "repo_type": r.repo_type, "nb_files": r.nb_files, "size": r.size_on_disk,
            "revisions": [{"commit": v.commit_hash, "refs": sorted(v.refs), "nb_files": v.nb_files,
                           "files": sorted(str(f.file_path.relative_to(v.snapshot_path)) for f in v.files)}
                          for v in r.revisions]} for r in info.repos]
        print(json.dumps(res))""" % (KIMI, sha, sorted(man)))
    assert hub.requests() == [], "HF_HUB_OFFLINE=1: nothing may reach the hub"
    assert out["by_sha"] == out["by_main"] == out["default"] == result["snapshot_path"]
    for path, hashes in out["files"].items():
        assert hashes == [man[path]["sha256"]] * 3, path
    assert sorted(out["files"]) == sorted(man)
    assert out["warnings"] == []
    etags = set(expected_etag(hub, KIMI, p) for p in man)
    assert out["repos"] == [{"repo_id": KIMI, "repo_type": "model", "nb_files": len(etags),
                             "size": sum(man[p]["size"] for p in man),
                             "revisions": [{"commit": sha, "refs": ["main"], "nb_files": len(man), "files": sorted(man)}]}]

    # huggingface_hub's own verifier (what `hf cache verify` does): lists the tree online, hashes the cache
    verdict = run_client(hub, home, """
        v = hh.HfApi().verify_repo_checksums(%r, revision=%r)
        print(json.dumps({"checked": v.checked_count, "mismatches": [str(m) for m in v.mismatches],
                          "missing": list(v.missing_paths), "extra": list(v.extra_paths)}))""" % (KIMI, sha),
                         offline=False)
    assert verdict == {"checked": len(man), "mismatches": [], "missing": [], "extra": []}


# ------------------------------------------------------------------------------------------------ cache layout
def test_cache_layout_matches_what_huggingface_hub_writes(hub, tmp_path):
    home = tmp_path / "hf"
    sha = hub.commits[KIMI]
    man = manifest(hub, KIMI)
    download(hub, tmp_path)
    repo = repo_dir(home, KIMI)

    with open(os.path.join(repo, "refs", "main"), "rb") as handle:
        assert handle.read() == sha.encode("ascii"), "refs/main: exactly the 40-hex commit, no newline"
    assert os.listdir(os.path.join(repo, "refs")) == ["main"]

    expected_blobs = {}
    for path in man:
        etag = expected_etag(hub, KIMI, path)
        assert len(etag) == (64 if man[path]["lfs"] else 40), path
        expected_blobs[etag] = man[path]
        pointer = os.path.join(snapshot_dir(home, KIMI, sha), *path.split("/"))
        assert os.path.islink(pointer), path
        target = os.readlink(pointer)
        assert target == "../" * (2 + path.count("/")) + "blobs/" + etag, (path, target)
        assert not os.path.isabs(target)
    assert os.readlink(os.path.join(snapshot_dir(home, KIMI, sha), "docs", "deploy_guidance.md")).startswith("../../../blobs/")
    assert man[SHARD1]["lfs"] and not man["config.json"]["lfs"]

    blobs = os.path.join(repo, "blobs")
    assert sorted(os.listdir(blobs)) == sorted(expected_blobs), "only the blobs, no partial or temporary files"
    for etag, entry in expected_blobs.items():
        st = os.lstat(os.path.join(blobs, etag))
        assert stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o644, etag
        assert st.st_size == entry["size"]
        assert sha256_file(os.path.join(blobs, etag)) == entry["sha256"]
    assert leftovers(home, KIMI) == []

    # the same layout, tree cache and blob names as a download by the real client
    ref_home = tmp_path / "reference"
    run_client(hub, ref_home, "print(json.dumps(hh.snapshot_download(%r, revision=%r)))" % (KIMI, sha), offline=False)
    ref_repo = repo_dir(ref_home, KIMI)
    assert sorted(os.listdir(os.path.join(ref_repo, "blobs"))) == sorted(expected_blobs)
    for path in man:
        parts = ["snapshots", sha] + path.split("/")
        assert os.readlink(os.path.join(repo, *parts)) == os.readlink(os.path.join(ref_repo, *parts)), path
    tree = os.path.join("trees", sha + ".json")
    with open(os.path.join(repo, tree)) as mine, open(os.path.join(ref_repo, tree)) as theirs:
        assert json.load(mine) == json.load(theirs)


# ------------------------------------------------------------------------------------------------ re-runs
def test_rerun_is_stat_only_and_verify_full_rehashes_everything(hub, tmp_path):
    man = manifest(hub, KIMI)
    first = download(hub, tmp_path)
    assert first["changed"]

    hub.reset()
    again = download(hub, tmp_path)
    assert not again["changed"] and again["files_fetched"] == [] and again["bytes_downloaded"] == 0
    assert again["verification"]["from_record"] is True and again["verification"]["hashed_bytes"] == 0
    assert hub.requests() == [], "a re-run over a complete snapshot makes no request"

    full = download(hub, tmp_path, verify="full")
    assert not full["changed"] and full["files_fetched"] == [] and full["bytes_downloaded"] == 0
    assert full["verification"]["from_record"] is False
    assert full["verification"]["hashed_bytes"] == full["bytes_total"] == total_size(hub)
    assert full["verification"]["hashed_files"] == len(man)
    assert body_requests(hub.requests()) == [], "verify=full hashes the cache; it downloads nothing"
    assert_snapshot_matches(hub, tmp_path / "hf", KIMI)


# ------------------------------------------------------------------------------------------------ damage on disk
@pytest.mark.parametrize("damage, path", [("flip", SHARD1), ("truncate", SHARD2), ("truncate", "config.json")])
def test_damaged_blob_is_detected_and_only_it_is_fetched_again(hub, tmp_path, damage, path):
    home = tmp_path / "hf"
    man = manifest(hub, KIMI)
    download(hub, tmp_path)
    blob = blob_path(home, KIMI, expected_etag(hub, KIMI, path))
    if damage == "flip":  # same size, new content: the mtime changes, so the record no longer vouches for it
        flip_byte(blob, man[path]["size"] // 2)
    else:
        os.truncate(blob, man[path]["size"] - 1000)
    hub.reset()
    result = download(hub, tmp_path)
    assert result["changed"]
    assert result["files_fetched"] == [path] and result["verification"]["repaired"] == [path]
    assert any(path in w and "failed the check" in w for w in warnings(result)), result.get("warnings")
    assert result["bytes_downloaded"] == man[path]["size"]
    bodies = body_requests(hub.requests())
    assert bodies and set(r["file"] for r in bodies) == {path}
    assert sum(r["bytes"] for r in bodies) == man[path]["size"]
    assert_snapshot_matches(hub, home, KIMI)
    assert leftovers(home, KIMI) == []


def test_same_size_corruption_with_restored_mtime_is_trusted_by_default_known_limit_verify_full_repairs_it(hub, tmp_path):
    """KNOWN LIMIT: the verification record keys a blob on size, mtime and inode. A same-size overwrite whose mtime
    is put back with os.utime() passes that stat check, so the default run trusts it; verify=full re-hashes
    everything and repairs it."""
    home = tmp_path / "hf"
    man = manifest(hub, KIMI)
    download(hub, tmp_path)
    blob = blob_path(home, KIMI, expected_etag(hub, KIMI, SHARD3))
    before = os.stat(blob)
    flip_byte(blob, 12345)
    os.utime(blob, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert sha256_file(blob) != man[SHARD3]["sha256"]

    hub.reset()
    trusted = download(hub, tmp_path)
    assert not trusted["changed"] and trusted["verification"]["from_record"] is True  # the known limit
    assert hub.requests() == []
    assert sha256_file(blob) != man[SHARD3]["sha256"]

    repaired = download(hub, tmp_path, verify="full")
    assert repaired["changed"] and repaired["files_fetched"] == [SHARD3]
    assert repaired["verification"]["repaired"] == [SHARD3]
    assert repaired["verification"]["hashed_bytes"] >= total_size(hub)
    assert any(SHARD3 in w for w in warnings(repaired))
    assert sum(r["bytes"] for r in body_requests(hub.requests())) == man[SHARD3]["size"]
    assert_snapshot_matches(hub, home, KIMI)
    assert not download(hub, tmp_path)["changed"]


# ------------------------------------------------------------------------------------------------ hub faults
def test_fault_5xx_on_tree_listing_is_retried(hub, tmp_path):
    hub.add_fault(type="status_5xx", match="/tree/", count=2, status=500)
    download(hub, tmp_path)
    trees = [r for r in hub.requests() if "/tree/" in r["path"]]
    assert [r["status"] for r in trees] == [500, 500, 200]
    assert len(fired(trees, "status_5xx")) == 2 and hub.faults.list() == []
    assert_snapshot_matches(hub, tmp_path / "hf", KIMI)


def test_fault_5xx_on_cdn_ranges_is_retried(hub, tmp_path):
    hub.add_fault(type="status_5xx", role="cdn", method="GET", count=3)
    result = download(hub, tmp_path)
    log = hub.requests()
    failed = fired(log, "status_5xx")
    assert len(failed) == 3 and all(r["role"] == "cdn" and r["status"] == 503 for r in failed)
    assert result["requests"]["retries"] >= 3
    lfs = sum(f["size"] for f in manifest(hub, KIMI).values() if f["lfs"])
    assert sum(r["bytes"] for r in log if r["role"] == "cdn" and r["status"] == 206) == lfs, "a 503 costs a retry, not bytes"
    assert_snapshot_matches(hub, tmp_path / "hf", KIMI)


def test_fault_429_on_resolve_waits_retry_after(hub, tmp_path):
    hub.add_fault(type="rate_429", method="HEAD", file=SHARD2, retry_after=1, count=1)
    download(hub, tmp_path)
    heads = [r for r in hub.requests() if r["method"] == "HEAD" and r["file"] == SHARD2]
    assert [r["status"] for r in heads] == [429, 302]
    assert fired(heads, "rate_429") == heads[:1]
    assert heads[1]["t"] - heads[0]["t"] >= 1.0, "Retry-After: 1 was not honoured"
    assert_snapshot_matches(hub, tmp_path / "hf", KIMI)


def test_fault_dropped_connection_resumes_at_the_exact_byte(hub, tmp_path):
    size = manifest(hub, KIMI)[SHARD2]["size"]
    hub.add_fault(type="drop_after_bytes", role="cdn", file=SHARD2, bytes=300000, count=1)
    result = download(hub, tmp_path)
    ranges = [r for r in hub.requests() if r["role"] == "cdn" and r["file"] == SHARD2]
    (dropped,) = fired(ranges, "drop_after_bytes")
    assert dropped["aborted"] and dropped["bytes"] == 300000
    start, end = parse_range(dropped["range"])
    retry = [r for r in ranges if r["id"] > dropped["id"] and parse_range(r["range"])[1] == end]
    assert retry, "no retry of the dropped range"
    assert parse_range(retry[0]["range"]) == (start + 300000, end), "the retry must start where the drop happened"
    assert retry[0]["status"] == 206 and retry[0]["bytes"] == end - start - 300000
    assert sum(r["bytes"] for r in ranges) == size, "no byte of the file was fetched twice"
    assert result["requests"]["retries"] >= 1
    assert_snapshot_matches(hub, tmp_path / "hf", KIMI)


def test_fault_corrupt_byte_is_caught_by_the_hash_and_the_file_fetched_again(hub, tmp_path):
    size = manifest(hub, KIMI)[SHARD3]["size"]
    hub.add_fault(type="corrupt_byte", role="cdn", file=SHARD3, offset=MiB + 12345, count=1)
    result = download(hub, tmp_path)
    log = hub.requests()
    assert len(fired(log, "corrupt_byte")) == 1 and hub.faults.list() == []
    assert any(SHARD3 in w and "failed the check" in w for w in warnings(result)), result.get("warnings")
    assert result["requests"]["rounds"] == 2 and SHARD3 in result["verification"]["repaired"]
    per_file = {}
    for r in body_requests(log):
        per_file[r["file"]] = per_file.get(r["file"], 0) + r["bytes"]
    assert per_file.pop(SHARD3) == 2 * size, "the corrupt file is fetched again, whole"
    assert all(n == manifest(hub, KIMI)[p]["size"] for p, n in per_file.items()), "other files are fetched once"
    assert_snapshot_matches(hub, tmp_path / "hf", KIMI)
    assert leftovers(tmp_path / "hf", KIMI) == []


def test_fault_expired_cdn_url_is_resolved_again(hub, tmp_path):
    # after=0: every URL is "expired" as soon as it is used; count=2 lets the third signed URL through (without a
    # count every URL fails and the module rightly gives up after `retries` attempts)
    hub.add_fault(type="expire_urls", role="cdn", file=SHARD1, after=0, count=2)
    result = download(hub, tmp_path)
    log = hub.requests()
    expired = fired(log, "expire_urls")
    assert len(expired) == 2 and all(r["status"] == 403 for r in expired)
    heads = [r for r in log if r["method"] == "HEAD" and r["file"] == SHARD1]
    assert len(heads) > 1 and all(r["status"] == 302 for r in heads), "a 403 from the CDN must re-resolve the file"
    assert result["requests"]["reresolved"] >= 1
    assert_snapshot_matches(hub, tmp_path / "hf", KIMI)


# ------------------------------------------------------------------------------------------------ kill -9 and resume
def read_json(path):
    try:
        with open(path) as handle:
            return json.load(handle)
    except (IOError, OSError, ValueError):
        return None


def settle(hub, quiet_s=0.5, limit_s=30):
    """Wait until the hub has logged no new request for quiet_s and none is in flight."""
    deadline = time.time() + limit_s
    seen = -1
    while time.time() < deadline:
        log = hub.requests(wait=limit_s)
        if len(log) == seen and all(r["done"] for r in log):
            return
        seen = len(log)
        time.sleep(quiet_s)
    raise AssertionError("the hub kept serving after the kill")


def partial_states(home):
    blobs = os.path.join(repo_dir(home, RESUME), "blobs")
    names = os.listdir(blobs) if os.path.isdir(blobs) else []
    return [state for state in (read_json(os.path.join(blobs, n)) for n in names if n.endswith(".kimi-partial.json")) if state]


def test_kill_9_then_rerun_fetches_only_what_the_partial_state_lacks(hub, tmp_path):
    home = tmp_path / "hf"
    man = manifest(hub, RESUME)
    progress = tmp_path / "progress.json"
    # 4 connections x 4 MB/s: about 4 s in all. Kill once the progress file says 40 % and a partial blob's state
    # records some but not all of it (states are saved about once a second, so that is the case within a second).
    hub.add_fault(type="rate_limit_bps", role="cdn", bps=4e6)
    proc = start_module(tmp_path, module_args(hub, tmp_path, RESUME))
    try:
        deadline = time.time() + 60
        while True:
            assert proc.poll() is None, "the download ended before the kill: %s" % (proc.communicate(),)
            state = read_json(progress)
            if state and state["bytes_total"] and state["bytes_done"] >= 0.4 * state["bytes_total"] and any(
                    0 < sum(b - a for a, b in partial["done"]) < partial["size"] for partial in partial_states(home)):
                break
            assert time.time() < deadline, "no progress: %s" % state
            time.sleep(0.02)
        os.killpg(proc.pid, signal.SIGKILL)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
    assert proc.returncode == -signal.SIGKILL

    recorded, expected = {}, 0
    for path, entry in man.items():
        etag = expected_etag(hub, RESUME, path)
        if os.path.exists(blob_path(home, RESUME, etag)):
            continue  # completed (hashed and renamed) before the kill: re-hashed, not fetched
        state = read_json(blob_path(home, RESUME, etag) + ".kimi-partial.json")
        done = state["done"] if state else []
        if state:
            assert state["etag"] == etag and state["size"] == entry["size"]
        recorded[path] = done
        expected += entry["size"] - sum(b - a for a, b in done)
    resumed = sum(b - a for done in recorded.values() for a, b in done)
    assert resumed > 0, "the kill left no recorded progress: the test proves nothing"
    assert any(sum(b - a for a, b in done) < man[p]["size"] for p, done in recorded.items())

    # Requests the killed curls had sent can still be logged by the hub's threads: let it settle, then count
    # only what the rerun asked for.
    settle(hub)
    hub.reset()
    rerun_start = time.time()
    result = download(hub, tmp_path, RESUME)
    bodies = [r for r in body_requests(hub.requests()) if r["t"] >= rerun_start]
    assert all(r["status"] == 206 and not r["aborted"] for r in bodies)
    for r in bodies:
        start, end = parse_range(r["range"])
        for a, b in recorded.get(r["file"], []):
            assert end <= a or start >= b, "%s: bytes %d-%d fetched again, the state said %d-%d were on disk" % (
                r["file"], start, end, a, b)
        assert r["file"] in recorded, "%s was complete before the kill" % r["file"]
    assert sum(r["bytes"] for r in bodies) == expected == result["bytes_downloaded"]
    assert result["bytes_resumed"] == resumed > 0
    assert leftovers(home, RESUME) == []

    sha = hub.commits[RESUME]
    out = run_client(hub, home, """
        snap = hh.snapshot_download(%r, revision=%r, local_files_only=True)
        files = {}
        for path in %r:
            with open(hh.hf_hub_download(%r, path, revision="main"), "rb") as handle:
                files[path] = hashlib.sha256(handle.read()).hexdigest()
        print(json.dumps({"snap": snap, "files": files}))""" % (RESUME, sha, sorted(man), RESUME))
    assert out["snap"] == snapshot_dir(home, RESUME, sha)
    assert out["files"] == dict((p, man[p]["sha256"]) for p in man)


# ------------------------------------------------------------------------------------------------ the token
class ProcSampler(threading.Thread):
    """Scans every process's command line (and curl's environment) while the module runs."""

    def __init__(self, secret, module_pid):
        super().__init__(daemon=True)
        self.secret = secret.encode()
        self.module_pid = str(module_pid).encode()
        self.stop = threading.Event()
        self.curl_pids = set()
        self.curl_cmdlines = set()
        self.leaks = []
        self.scans = 0

    @staticmethod
    def read(pid, what):
        try:
            with open("/proc/%s/%s" % (pid, what), "rb") as handle:
                return handle.read()
        except (IOError, OSError):
            return b""

    def module_child(self, pid):
        """True for a child of the module's process (other work on this machine may run curl too)."""
        fields = self.read(pid, "stat").rsplit(b")", 1)[-1].split()
        return len(fields) > 1 and fields[1] == self.module_pid

    def run(self):
        while not self.stop.is_set():
            for pid in os.listdir("/proc"):
                if not pid.isdigit():
                    continue
                cmdline = self.read(pid, "cmdline")
                blobs = [cmdline]
                if os.path.basename(cmdline.split(b"\0")[0]) == b"curl" and self.module_child(pid):
                    self.curl_pids.add(pid)
                    self.curl_cmdlines.add(cmdline)
                    blobs.append(self.read(pid, "environ"))
                if any(self.secret in blob for blob in blobs):
                    self.leaks.append((pid, cmdline))
            self.scans += 1
            time.sleep(0.002)


def test_token_reaches_only_the_hub_and_never_a_command_line_result_or_file(hub, tmp_path):
    home = tmp_path / "hf"
    # Slow bodies keep each curl alive long enough to be sampled: 1 MiB CDN ranges last about 1 s, and the hub's
    # answers (the listing, the git files: the requests that carry the token) a tenth of a second or more.
    hub.add_fault(type="rate_limit_bps", role="cdn", bps=1e6)
    hub.add_fault(type="rate_limit_bps", role="hub", bps=10000)
    proc = start_module(tmp_path, module_args(hub, tmp_path, PRIVATE, token=TOKEN))
    sampler = ProcSampler(TOKEN, proc.pid)
    sampler.start()
    try:
        stdout, stderr = [out.decode() for out in proc.communicate(timeout=120)]
    finally:
        sampler.stop.set()
        sampler.join()
    result = parse_result(stdout, stderr, proc.returncode)
    assert proc.returncode == 0 and not result.get("failed"), result
    log = hub.requests()
    slow = [r for r in log if r["duration_s"] >= 0.2]
    assert [r for r in slow if r["role"] == "hub" and r["auth"]], "no token-carrying curl lived long enough to be seen"
    assert len(sampler.curl_pids) >= len(slow) >= 9, "the sampler missed curl processes: it proves nothing"
    assert sampler.leaks == [], "the token is on a command line: %s" % sampler.leaks[:3]
    # URLs (signed CDN URLs are credentials too) and headers go to curl on stdin, never in argv
    assert all(c.split(b"\0")[1:] == [b"--disable", b"-K", b"-", b""] for c in sampler.curl_cmdlines), sampler.curl_cmdlines

    assert all(r["auth"] for r in log if r["role"] == "hub"), "every hub request carries the token"
    cdn = [r for r in log if r["role"] == "cdn"]
    assert cdn and not any(r["auth"] for r in cdn), "the token must never reach the CDN"
    assert TOKEN not in stdout and TOKEN not in stderr
    with open(tmp_path / "progress.json") as handle:
        assert TOKEN not in handle.read()
    for folder, unused_dirs, files in os.walk(str(home)):
        for name in files:
            with open(os.path.join(folder, name), "rb") as handle:
                assert TOKEN.encode() not in handle.read(), name
    assert_snapshot_matches(hub, home, PRIVATE)


# ------------------------------------------------------------------------------------------------ refusals
SHA = "0123456789abcdef0123456789abcdef01234567"


@pytest.mark.parametrize("field, value, words", [
    ("revision", "main", ["revision='main' is not a 40-hex commit sha", "/api/models/%s/revision/main" % KIMI]),
    ("revision", "abc123", ["40-hex"]),
    ("revision", "v1.0", ["40-hex"]),
    ("revision", SHA[:12], ["40-hex"]),
    ("revision", SHA + "0", ["40-hex"]),
    ("revision", SHA + "\n", ["revision='%s\\n' is not a 40-hex commit sha" % SHA]),  # full match: no snapshots/<sha>\n
    ("revision", SHA.upper(), ["revision='%s' must be written in lower case" % SHA.upper(), SHA]),
    ("repo_id", "not a repo", ["repo_id", "org/name"]),
    ("repo_id", "../../etc/passwd", ["repo_id"]),
    ("repo_id", KIMI + "\n", ["repo_id=", "org/name"]),
    ("connections", 0, ["connections must be between 1 and 64, got 0"]),
    ("connections", 65, ["connections must be between 1 and 64, got 65"]),
    ("chunk_size", 4096, ["chunk_size must be between 1048576 and 17179869184, got 4096"]),
    ("min_free_bytes", -1, ["min_free_bytes must be between 0 and"]),
    ("endpoint", "ftp://hub.test", ["endpoint must be an http(s) URL", "ftp://hub.test"]),
    ("endpoint", "http://", ["endpoint must be an http(s) URL"]),
    ("endpoint", "https://hub test", ["endpoint must be an http(s) URL"]),
    ("hf_home", "relative/hf", ["hf_home='relative/hf' must be an absolute path"]),
    ("mode", "rw-r--r--", ["mode must be an octal file mode"]),
    ("owner", "no-such-user-kimi", ["owner='no-such-user-kimi': no such user"]),
])
@pytest.mark.parametrize("check_mode", [False, True])
def test_refuses_bad_input_before_any_request_naming_the_option(hub, tmp_path, field, value, words, check_mode):
    result, unused = run_module(tmp_path, module_args(hub, tmp_path, **{field: value}), check_mode=check_mode, expect_ok=False)
    for word in words:
        assert word in result["msg"], result["msg"]
    assert result["option"] == field
    assert hub.requests() == []
    assert not (tmp_path / "hf").exists()


def test_refuses_an_hf_home_under_a_file(hub, tmp_path):
    (tmp_path / "file").write_text("x")
    home = tmp_path / "file" / "hf"
    result, unused = run_module(tmp_path, module_args(hub, tmp_path, hf_home=str(home)), check_mode=True, expect_ok=False)
    assert result["msg"] == "hf_home=%s: %s is not a directory" % (home, tmp_path / "file") and result["option"] == "hf_home"
    assert hub.requests() == []


@pytest.mark.parametrize("check_mode", [False, True])
def test_refuses_when_min_free_bytes_would_not_stay_free(hub, tmp_path, check_mode):
    home = tmp_path / "hf"
    result, unused = run_module(tmp_path, module_args(hub, tmp_path, min_free_bytes=1 << 60), check_mode=check_mode,
                                expect_ok=False)
    disk = result["disk"]
    assert disk["need_bytes"] == total_size(hub) and disk["min_free_bytes"] == 1 << 60 and disk["ok"] is False
    assert disk["path"] == str(tmp_path if check_mode else home / "hub" / ("models--" + KIMI.replace("/", "--")))
    assert result["msg"].startswith("not enough disk space for hf_home=%s: " % home), result["msg"]
    assert "min_free_bytes=" in result["msg"] and "missing to download" in result["msg"]
    log = hub.requests()
    assert [r for r in log if r["role"] == "cdn"] == [] and body_requests(log) == []
    blobs = os.path.join(repo_dir(home, KIMI), "blobs")
    assert not os.path.isdir(blobs) or os.listdir(blobs) == []
    assert check_mode is False or not home.exists()
    assert "disk must hold both" not in result["msg"], "no other checkpoint in this cache"


def test_a_switch_that_cannot_hold_both_checkpoints_says_so(hub, tmp_path):
    download(hub, tmp_path, RESUME)  # the checkpoint being served
    result, unused = run_module(tmp_path, module_args(hub, tmp_path, min_free_bytes=1 << 60), check_mode=True,
                                expect_ok=False)
    served = total_size(hub, RESUME)
    assert "The other checkpoints in this cache take %s" % human_size(served) in result["msg"], result["msg"]
    assert "the disk must hold both" in result["msg"]


# ------------------------------------------------------------------------------------------------ unreachable hubs
def test_plan_fails_fast_on_a_closed_port_with_one_retry(tmp_path):
    started = time.time()
    result, unused = run_module(tmp_path, module_args(None, tmp_path, endpoint="http://127.0.0.1:1", revision=SHA),
                                check_mode=True, expect_ok=False, timeout=60)
    assert time.time() - started < 30, "the plan must fail within seconds"
    assert "giving up after 2 attempts" in result["msg"], result["msg"]
    assert "no answer from endpoint http://127.0.0.1:1" in result["msg"] and "curl exit 7" in result["msg"]
    assert not (tmp_path / "hf").exists()


@pytest.mark.parametrize("check_mode", [False, True])
def test_a_host_that_does_not_resolve_is_not_retried(tmp_path, check_mode):
    started = time.time()
    result, unused = run_module(tmp_path, module_args(None, tmp_path, endpoint="http://nonexistent.invalid", revision=SHA),
                                check_mode=check_mode, expect_ok=False, timeout=60)
    assert time.time() - started < 15, "no retry, no backoff"
    assert "cannot resolve the host of endpoint http://nonexistent.invalid (curl exit 6" in result["msg"], result["msg"]
    assert "Not retried" in result["msg"] and "giving up" not in result["msg"]


def test_plan_without_curl_says_how_to_install_it(hub, tmp_path):
    result, unused = run_module(tmp_path, module_args(hub, tmp_path), check_mode=True, expect_ok=False,
                                env={"PATH": str(tmp_path / "no-bin")})
    assert result["msg"].startswith("curl is missing on the host") and "apt-get install curl" in result["msg"]
    assert "check mode" in result["msg"]
    assert hub.requests() == []


def test_private_repo_without_token_fails_with_a_clear_message(hub, tmp_path):
    result, unused = run_module(tmp_path, module_args(hub, tmp_path, PRIVATE), expect_ok=False)
    assert "token" in result["msg"] and "401" in result["msg"], result["msg"]
    assert body_requests(hub.requests()) == []


# ------------------------------------------------------------------------------------------------ check mode
def test_check_mode_reports_and_writes_nothing(hub, tmp_path):
    home = tmp_path / "hf"
    man = manifest(hub, KIMI)
    plan, unused = run_module(tmp_path, module_args(hub, tmp_path, min_free_bytes=1000), check_mode=True)
    assert plan["changed"] and plan["files_fetched"] == sorted(man)
    assert plan["bytes_downloaded"] == plan["bytes_total"] == total_size(hub)
    assert plan["disk"]["need_bytes"] == total_size(hub) and plan["disk"]["min_free_bytes"] == 1000
    assert plan["disk"]["ok"] is True and plan["disk"]["free_bytes"] > 0 and plan["disk"]["path"] == str(tmp_path)
    assert not home.exists() and not (tmp_path / "progress.json").exists()
    assert body_requests(hub.requests()) == []

    download(hub, tmp_path)
    hub.reset()
    plan, unused = run_module(tmp_path, module_args(hub, tmp_path), check_mode=True)
    assert not plan["changed"] and plan["files_fetched"] == [] and plan["bytes_downloaded"] == 0
    assert hub.requests() == []

    os.unlink(blob_path(home, KIMI, expected_etag(hub, KIMI, SHARD2)))
    plan, unused = run_module(tmp_path, module_args(hub, tmp_path), check_mode=True)
    assert plan["changed"] and plan["files_fetched"] == [SHARD2] and plan["bytes_downloaded"] == man[SHARD2]["size"]
    assert not os.path.exists(blob_path(home, KIMI, expected_etag(hub, KIMI, SHARD2)))
    assert body_requests(hub.requests()) == []


# ------------------------------------------------------------------------------------------------ listing, patterns
def test_paginated_listing_is_followed_to_the_end(tmp_path):
    repo_id = "kimi-test/Paged"
    paged = fake_hub.start_fake_hub([repo_id + ":shards=2,shard_size=2MiB,extra=4"], page_size=3, cache_dir=None)
    try:
        download(paged, tmp_path, repo_id)
        trees = [r for r in paged.requests() if "/tree/" in r["path"]]
        entries = len(paged.repos[repo_id].files) + len(paged.repos[repo_id].dirs)
        assert len(trees) == -(-entries // 3) > 1
        assert all(r["status"] == 200 for r in trees) and all("cursor=" in r["query"] for r in trees[1:])
        assert_snapshot_matches(paged, tmp_path / "hf", repo_id)
    finally:
        paged.stop()


def test_materialize_writes_real_files_for_matching_paths(hub, tmp_path):
    home = tmp_path / "hf"
    man = manifest(hub, KIMI)
    download(hub, tmp_path, materialize=["*.py"])
    snap = snapshot_dir(home, KIMI, hub.commits[KIMI])
    python = [p for p in man if p.endswith(".py")]
    assert len(python) >= 4
    for path in man:
        pointer = os.path.join(snap, *path.split("/"))
        if path in python:
            st = os.lstat(pointer)
            assert stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o644, path
        else:
            assert os.path.islink(pointer), path
    assert_snapshot_matches(hub, home, KIMI)
    hub.reset()
    again = download(hub, tmp_path, materialize=["*.py"])
    assert not again["changed"] and again["verification"]["from_record"] is True
    assert hub.requests() == []


def test_allow_patterns_fetch_only_matching_files_and_write_no_tree_cache(hub, tmp_path):
    home = tmp_path / "hf"
    sha = hub.commits[KIMI]
    man = manifest(hub, KIMI)
    wanted = sorted(p for p in man if p.endswith(".json"))
    result = download(hub, tmp_path, allow_patterns=["*.json"])
    assert result["files"] == wanted and result["files_fetched"] == wanted
    assert snapshot_files(home, KIMI, sha) == wanted
    assert_snapshot_matches(hub, home, KIMI, wanted)
    assert sorted(os.listdir(os.path.join(repo_dir(home, KIMI), "blobs"))) == sorted(
        expected_etag(hub, KIMI, p) for p in wanted)
    assert not os.path.exists(os.path.join(repo_dir(home, KIMI), "trees", sha + ".json")), \
        "a tree cache listing files that are not there breaks offline snapshot_download"
    assert [r for r in hub.requests() if r["role"] == "cdn"] == []

    out = run_client(hub, home, """
        snap = hh.snapshot_download(%r, revision=%r, allow_patterns="*.json", local_files_only=True)
        main = hh.snapshot_download(%r, allow_patterns="*.json")
        print(json.dumps([snap, main]))""" % (KIMI, sha, KIMI))
    assert out == [snapshot_dir(home, KIMI, sha)] * 2
