"""hf_snapshot offline=true: an air-gapped host adopts a bundle, the repo's cache folder made on a connected host.

A connected host downloads from the fake hub (cache A; and the real huggingface_hub makes a second bundle); then the
hub is stopped. Each test copies a bundle with `cp -a` (symlinks kept, inodes new) into a fresh hf_home and runs the
module offline with the dead hub as endpoint and no curl on PATH: whatever it does, it does from the cache alone.
The real huggingface_hub (HF_HUB_OFFLINE=1) is the judge of what it leaves.
"""
import json
import os
import shutil
import subprocess

import pytest

from hfsnap_helpers import (
    MiB, assert_snapshot_matches, blob_path, expected_etag, fake_hub, flip_byte, manifest, repo_dir, run_client,
    run_module, sha256_file,
)

KIMI = "moonshotai/Kimi-K2.6"
SPECS = [KIMI + ":shards=3,shard_size=2MiB"]
SHARD1, SHARD2, SHARD3 = ["model-%05d-of-00003.safetensors" % i for i in (1, 2, 3)]
TOKEN = "hf_kimi_offline_token_0123456789abcdef"


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    """The connected host's caches (ours and the real client's), made while the hub ran; the hub is stopped after."""
    hub = fake_hub.start_fake_hub(SPECS, tokens=[TOKEN], cache_dir=str(tmp_path_factory.mktemp("fake-hub-cache")))
    try:
        folder = tmp_path_factory.mktemp("connected")
        sha = hub.commits[KIMI]
        run_module(folder, {"repo_id": KIMI, "revision": sha, "hf_home": str(folder / "hf"), "endpoint": hub.url,
                            "chunk_size": MiB, "connections": 4})
        run_client(hub, folder / "client", "print(json.dumps(hh.snapshot_download(%r, revision=%r)))" % (KIMI, sha),
                   offline=False)
        etags = dict((path, expected_etag(hub, KIMI, path)) for path in manifest(hub, KIMI))
    finally:
        hub.stop()
    return {"hub": hub, "ours": folder / "hf", "client": folder / "client", "sha": sha, "etags": etags}


def adopt(bundle, tmp_path, source="ours"):
    """cp -a the bundle's repo folder into a fresh hf_home, as an operator would; returns that hf_home."""
    home = tmp_path / "hf"
    os.makedirs(str(home / "hub"))
    subprocess.run(["cp", "-a", repo_dir(bundle[source], KIMI), str(home / "hub") + "/"], check=True)
    return home


def offline_args(bundle, home, **extra):
    """offline=true with everything a connected run would use pointing nowhere: the stopped hub, a token, a peer."""
    args = {"repo_id": KIMI, "revision": bundle["sha"], "hf_home": str(home), "offline": True,
            "endpoint": bundle["hub"].url, "token": TOKEN, "peers": [{"name": "gone", "url": "https://127.0.0.1:1"}],
            "peer_key": "kimi-peer-key-0123456789abcdef0123", "hub_bytes": False}
    args.update(extra)
    return args


def run_offline(tmp_path, args, check_mode=False, expect_ok=True):
    """The module with no curl on PATH: an offline run needs none."""
    no_bin = tmp_path / "no-bin"
    no_bin.mkdir(exist_ok=True)
    return run_module(tmp_path, args, check_mode=check_mode, expect_ok=expect_ok, env={"PATH": str(no_bin)})[0]


def tree_file(home, sha):
    return os.path.join(repo_dir(home, KIMI), "trees", sha + ".json")


def record_file(home, sha):
    return os.path.join(repo_dir(home, KIMI), ".kimi-snapshot", sha + ".json")


def read_bytes(path):
    with open(path, "rb") as handle:
        return handle.read()


def client_reads(bundle, home):
    """The real huggingface_hub, offline, on home: the snapshot path and each file's sha256 (by sha and by main)."""
    hub, sha = bundle["hub"], bundle["sha"]
    return run_client(hub, home, """
        def sha256(path):
            with open(path, "rb") as handle:
                return hashlib.sha256(handle.read()).hexdigest()
        repo, sha, paths = %r, %r, %r
        res = {"by_sha": hh.snapshot_download(repo, revision=sha, local_files_only=True),
               "by_main": hh.snapshot_download(repo, revision="main"), "files": {}}
        for path in paths:
            res["files"][path] = [sha256(hh.hf_hub_download(repo, path, revision=sha)),
                                  sha256(hh.hf_hub_download(repo, path, local_files_only=True))]
        print(json.dumps(res))""" % (KIMI, sha, sorted(bundle["etags"])))


# ------------------------------------------------------------------------------------------------ adopting a bundle
def test_offline_adopts_a_copied_bundle_then_reruns_stat_only(bundle, tmp_path):
    hub, sha = bundle["hub"], bundle["sha"]
    man = manifest(hub, KIMI)
    home = adopt(bundle, tmp_path)
    tree_before = read_bytes(tree_file(home, sha))
    stale_record = json.loads(read_bytes(record_file(home, sha)))

    first = run_offline(tmp_path, offline_args(bundle, home))
    assert first["changed"], "the record of the copy is rewritten for this host's inodes"
    assert first["verified"] and first["commit"] == sha and first["files"] == sorted(man)
    assert first["files_fetched"] == [] and first["bytes_downloaded"] == 0 and first["bytes_from_hub"] == 0
    assert first["sources"] == [], "offline: no hub, no peers"
    assert first["bytes_total"] == sum(f["size"] for f in man.values())
    unique = set(bundle["etags"].values())
    verification = first["verification"]
    assert verification["from_record"] is False and verification["repaired"] == []
    assert verification["hashed_files"] == len(unique)
    assert verification["hashed_bytes"] == sum(dict((e, man[p]["size"]) for p, e in bundle["etags"].items()).values())
    assert read_bytes(tree_file(home, sha)) == tree_before, "the listing it read is kept as it is"
    record = json.loads(read_bytes(record_file(home, sha)))
    assert record["complete"] and record["verify"] == "sha256"
    assert [b["stat"] for b in record["blobs"]] != [b["stat"] for b in stale_record["blobs"]]
    assert_snapshot_matches(hub, home, KIMI)

    out = client_reads(bundle, home)
    assert out["by_sha"] == out["by_main"] == first["snapshot_path"]
    for path, hashes in out["files"].items():
        assert hashes == [man[path]["sha256"]] * 2, path

    again = run_offline(tmp_path, offline_args(bundle, home))
    assert not again["changed"] and again["verification"]["from_record"] is True
    assert again["verification"]["hashed_bytes"] == 0 and again["files_fetched"] == []


def test_offline_rewrites_missing_links_and_refs(bundle, tmp_path):
    sha = bundle["sha"]
    home = adopt(bundle, tmp_path)
    repo = repo_dir(home, KIMI)
    shutil.rmtree(os.path.join(repo, "snapshots"))
    shutil.rmtree(os.path.join(repo, "refs"))
    result = run_offline(tmp_path, offline_args(bundle, home, set_refs=["main", "release"]))
    assert result["changed"] and result["files_fetched"] == []
    assert_snapshot_matches(bundle["hub"], home, KIMI)
    for ref in ("main", "release"):
        assert read_bytes(os.path.join(repo, "refs", ref)) == sha.encode("ascii")
    assert not run_offline(tmp_path, offline_args(bundle, home, set_refs=["main", "release"]))["changed"]


def test_offline_adopts_a_bundle_made_by_huggingface_hub(bundle, tmp_path):
    """A bundle with huggingface_hub's own trees/<commit>.json and no record of ours."""
    sha = bundle["sha"]
    home = adopt(bundle, tmp_path, source="client")
    assert not os.path.exists(record_file(home, sha))
    tree_before = read_bytes(tree_file(home, sha))
    result = run_offline(tmp_path, offline_args(bundle, home))
    assert result["changed"] and result["verified"] and result["files_fetched"] == []
    assert result["verification"]["hashed_files"] == len(set(bundle["etags"].values()))
    assert read_bytes(tree_file(home, sha)) == tree_before
    assert_snapshot_matches(bundle["hub"], home, KIMI)
    assert not run_offline(tmp_path, offline_args(bundle, home))["changed"]


def test_offline_plan_reports_and_writes_nothing(bundle, tmp_path):
    sha = bundle["sha"]
    home = adopt(bundle, tmp_path)
    record_before = read_bytes(record_file(home, sha))
    plan = run_offline(tmp_path, offline_args(bundle, home), check_mode=True)
    assert plan["changed"] and plan["verified"] and plan["files_fetched"] == [] and plan["bytes_downloaded"] == 0
    assert read_bytes(record_file(home, sha)) == record_before
    run_offline(tmp_path, offline_args(bundle, home))
    plan = run_offline(tmp_path, offline_args(bundle, home), check_mode=True)
    assert not plan["changed"] and plan["verification"]["from_record"] is True


# ------------------------------------------------------------------------------------------------ an incomplete bundle
@pytest.mark.parametrize("check_mode", [False, True])
@pytest.mark.parametrize("path", [SHARD2, "config.json"])
def test_offline_flipped_byte_fails_naming_the_file_and_the_blob(bundle, tmp_path, path, check_mode):
    sha, etag = bundle["sha"], bundle["etags"][path]
    home = adopt(bundle, tmp_path)
    blob = blob_path(home, KIMI, etag)
    flip_byte(blob, 100)
    damaged = sha256_file(blob)
    record_before = read_bytes(record_file(home, sha))
    result = run_offline(tmp_path, offline_args(bundle, home), check_mode=check_mode, expect_ok=False)
    assert result["missing"] == [path]
    assert result["msg"].startswith("offline: 1 of the ")
    assert "%s (blob %s): %s " % (path, etag, "sha256" if len(etag) == 64 else "sha1") in result["msg"], result["msg"]
    assert "nothing is fetched" in result["msg"] and repo_dir(home, KIMI) in result["msg"]
    assert sha256_file(blob) == damaged, "the blob is left as it is: nothing could replace it"
    assert read_bytes(record_file(home, sha)) == record_before


@pytest.mark.parametrize("check_mode", [False, True])
def test_offline_missing_blob_fails_naming_it(bundle, tmp_path, check_mode):
    etag = bundle["etags"][SHARD1]
    home = adopt(bundle, tmp_path)
    os.unlink(blob_path(home, KIMI, etag))
    result = run_offline(tmp_path, offline_args(bundle, home), check_mode=check_mode, expect_ok=False)
    assert result["missing"] == [SHARD1]
    assert "%s (blob %s): absent" % (SHARD1, etag) in result["msg"], result["msg"]
    assert not os.path.exists(blob_path(home, KIMI, etag))


def test_offline_names_every_bad_blob_at_once(bundle, tmp_path):
    home = adopt(bundle, tmp_path)
    os.unlink(blob_path(home, KIMI, bundle["etags"][SHARD1]))
    flip_byte(blob_path(home, KIMI, bundle["etags"][SHARD3]), 0)
    result = run_offline(tmp_path, offline_args(bundle, home), expect_ok=False)
    assert result["missing"] == [SHARD1, SHARD3]
    assert result["msg"].startswith("offline: 2 of the ")


def test_offline_verify_size_checks_sizes_only(bundle, tmp_path):
    home = adopt(bundle, tmp_path)
    blob = blob_path(home, KIMI, bundle["etags"][SHARD2])
    with open(blob, "r+b") as handle:
        handle.truncate(1000)
    result = run_offline(tmp_path, offline_args(bundle, home, verify="size"), expect_ok=False)
    assert result["missing"] == [SHARD2] and "size 1000, expected" in result["msg"]


@pytest.mark.parametrize("check_mode", [False, True])
@pytest.mark.parametrize("damage", ["absent", "malformed", "no-files"])
def test_offline_without_a_tree_listing_says_what_to_copy(bundle, tmp_path, damage, check_mode):
    sha = bundle["sha"]
    home = adopt(bundle, tmp_path)
    if damage == "absent":
        os.unlink(tree_file(home, sha))
    else:
        with open(tree_file(home, sha), "w") as handle:
            handle.write("{" if damage == "malformed" else json.dumps({"format_version": 1, "files": {}}))
    result = run_offline(tmp_path, offline_args(bundle, home), check_mode=check_mode, expect_ok=False)
    head = "offline: %s@%s has no listing in %s (trees/%s.json" % (KIMI, sha, repo_dir(home, KIMI), sha)
    tail = "; copy the bundle's folder of this repo into hf_home first"
    if damage == "absent":
        assert result["msg"] == head + ")" + tail
    else:
        assert result["msg"].startswith(head + " is malformed: ") and result["msg"].endswith(tail), result["msg"]


def test_offline_on_an_empty_hf_home_says_what_to_copy(bundle, tmp_path):
    home = tmp_path / "hf"
    result = run_offline(tmp_path, offline_args(bundle, home), expect_ok=False)
    assert "has no listing in" in result["msg"] and "copy the bundle's folder" in result["msg"]
    assert not os.path.exists(repo_dir(home, KIMI)), "nothing is made before the listing is read"
