"""hf_snapshot with peers: hashes from the hub, bytes from hosts that hold a verified cache. The fake hub lists and
logs; the peer double (tests/doubles/peer, the interface of the kimi_weights role's peer cache server) serves a seed's
cache with the faults Caddy cannot make on demand: a flipped byte, a death mid-transfer. The real huggingface_hub
reads what the receiving host wrote.
"""
import os
import sys
import threading

import pytest

from hfsnap_helpers import (
    MiB, ROOT, assert_snapshot_matches, body_requests, expected_etag, fake_hub, leftovers, manifest, run_client,
    run_module,
)

sys.path.insert(0, os.path.join(ROOT, "tests", "doubles", "peer"))
from peer_server import PeerServer  # noqa: E402  pylint: disable=wrong-import-position

KIMI = "moonshotai/Kimi-K2.6"
SPECS = [KIMI + ":shards=3,shard_size=6MiB"]
SHARD1, SHARD2, SHARD3 = ["model-%05d-of-00003.safetensors" % i for i in (1, 2, 3)]
PEER_KEY = "kimi-peer-key-0123456789abcdef0123"


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    handle = fake_hub.start_fake_hub(SPECS, cache_dir=str(tmp_path_factory.mktemp("fake-hub-cache")))
    yield handle
    handle.stop()


@pytest.fixture(scope="module")
def seed(hub, tmp_path_factory):
    """A host that downloaded from the hub: its HF_HOME, which the peers serve."""
    folder = tmp_path_factory.mktemp("seed")
    run_module(folder, args(hub, folder))
    return folder / "hf"


@pytest.fixture
def peers(seed):
    started = []

    def start(**faults):
        server = PeerServer(str(seed / "hub"), key=PEER_KEY, **faults)
        started.append(server)
        return server
    yield start
    for server in started:
        if not server.dead:
            server.stop()


@pytest.fixture(autouse=True)
def clean_hub(hub):
    hub.reset()


def args(hub, folder, **extra):
    out = {"repo_id": KIMI, "revision": hub.commits[KIMI], "hf_home": str(folder / "hf"), "endpoint": hub.url,
           "chunk_size": MiB, "connections": 8}
    out.update(extra)
    return out


def with_peers(hub, tmp_path, servers, **extra):
    return args(hub, tmp_path, peers=[{"name": "peer%d" % i, "url": s.url} for i, s in enumerate(servers)],
                peer_key=PEER_KEY, **extra)


def by_name(result):
    return {s["name"]: s for s in result["sources"]}


def total_size(hub):
    return sum(f["size"] for f in manifest(hub, KIMI).values())


def etag(hub, path):
    return expected_etag(hub, KIMI, path)


def test_peers_send_every_byte_the_hub_only_lists_and_huggingface_hub_reads_the_cache(hub, tmp_path, peers):
    first, second = peers(bps=8 * MiB), peers(bps=8 * MiB)  # slow enough for transfers to overlap
    result, stdout = run_module(tmp_path, with_peers(hub, tmp_path, [first, second], peer_connections=2))
    log = hub.requests()
    assert body_requests(log) == [], "the hub sent file bytes"
    assert [r for r in log if "/resolve/" in r["path"]] == [], "nothing is resolved at the hub"
    assert [r for r in log if "/tree/" in r["path"]], "the listing (hashes) comes from the hub"
    assert result["bytes_from_hub"] == 0 and result["bytes_downloaded"] == total_size(hub)
    sources = by_name(result)
    assert sources["peer0"]["bytes"] > 0 and sources["peer1"]["bytes"] > 0, "both peers share the work"
    assert sources["peer0"]["bytes"] + sources["peer1"]["bytes"] == total_size(hub)
    assert sources["peer0"]["dropped"] is None and sources["peer1"]["dropped"] is None
    assert first.max_active <= 2 and second.max_active <= 2, "peer_connections bounds each peer"
    assert first.max_active == 2, "the cap is reached (with a cap of 1 it would prove nothing)"
    assert all(r["status"] == 206 for r in first.requests + second.requests)
    assert PEER_KEY not in stdout
    assert_snapshot_matches(hub, tmp_path / "hf", KIMI)
    assert leftovers(tmp_path / "hf", KIMI) == []
    files = run_client(hub, tmp_path / "hf", """
        path = hh.snapshot_download(%r, revision=%r)
        print(json.dumps(sorted(hh.scan_cache_dir().repos.__iter__().__next__().refs)))
    """ % (KIMI, hub.commits[KIMI]))
    assert files == ["main"]


def test_a_peer_without_the_key_is_refused_and_the_hub_sends_instead(hub, tmp_path, peers):
    server = peers()
    spec = args(hub, tmp_path, peers=[{"name": "wrongkey", "url": server.url}], peer_key="not-the-key")
    result, unused = run_module(tmp_path, spec)
    assert {r["status"] for r in server.requests} == {401}
    assert "refuses the peer key" in by_name(result)["wrongkey"]["dropped"]
    assert result["bytes_from_hub"] == total_size(hub)
    assert_snapshot_matches(hub, tmp_path / "hf", KIMI)


def test_without_hub_bytes_a_refusing_peer_fails_naming_it(hub, tmp_path, peers):
    server = peers()
    spec = args(hub, tmp_path, peers=[{"name": "wrongkey", "url": server.url}], peer_key="nope", hub_bytes=False)
    result, unused = run_module(tmp_path, spec, expect_ok=False)
    assert "no source left" in result["msg"] and "wrongkey" in result["msg"] and "401" in result["msg"], result["msg"]
    assert body_requests(hub.requests()) == []


def test_a_wrong_byte_from_a_peer_is_caught_and_the_file_sent_again_by_another_source(hub, tmp_path, peers):
    bad = peers(corrupt={etag(hub, SHARD2): [2 * MiB + 777]})
    result, unused = run_module(tmp_path, with_peers(hub, tmp_path, [bad], peer_connections=4))
    assert any(r.get("corrupted") for r in bad.requests), "the flipped byte was sent"
    assert SHARD2 in result["verification"]["repaired"] and result["requests"]["rounds"] == 2
    # The hub, the only other source, sent that file whole in round 2, and nothing else.
    hub_bytes = body_requests(hub.requests())
    assert {r["file"] for r in hub_bytes} == {SHARD2}
    assert sum(r["bytes"] for r in hub_bytes) == manifest(hub, KIMI)[SHARD2]["size"] == result["bytes_from_hub"]
    assert_snapshot_matches(hub, tmp_path / "hf", KIMI)


def test_a_wrong_byte_among_two_peers_is_pinned_down_without_the_hub(hub, tmp_path, peers):
    # A byte in every MiB of that file: whichever ranges the bad peer sends are wrong.
    bad, good = peers(corrupt={etag(hub, SHARD2): [n * MiB + 5 for n in range(6)]}, bps=16 * MiB), peers(bps=16 * MiB)
    spec = with_peers(hub, tmp_path, [bad, good], peer_connections=2, hub_bytes=False)
    result, unused = run_module(tmp_path, spec)
    assert SHARD2 in result["verification"]["repaired"] and 2 <= result["requests"]["rounds"] <= 3
    assert body_requests(hub.requests()) == [], "the hub sends no byte"
    assert_snapshot_matches(hub, tmp_path / "hf", KIMI)


def test_a_peer_killed_mid_transfer_is_dropped_and_the_others_finish(hub, tmp_path, peers):
    dying = peers(die_after_bytes=5 * MiB + 12345, bps=20 * MiB)
    other = peers(bps=20 * MiB)
    spec = with_peers(hub, tmp_path, [dying, other], peer_connections=3, hub_bytes=False)
    result, unused = run_module(tmp_path, spec)
    killed = [r for r in dying.requests if r.get("killed")]
    assert killed and dying.dead  # the transfers under way are cut at once
    sources = by_name(result)
    assert sources["peer0"]["dropped"] and sources["peer1"]["dropped"] is None
    assert sources["peer0"]["bytes"] == 5 * MiB + 12345, "the bytes it sent before dying are kept"
    assert sources["peer0"]["bytes"] + sources["peer1"]["bytes"] == total_size(hub), "no byte fetched twice"
    assert result["requests"]["rounds"] == 1 and result["verification"]["repaired"] == []
    assert_snapshot_matches(hub, tmp_path / "hf", KIMI)


def test_a_file_no_peer_gets_within_peer_wait_comes_from_the_hub(hub, tmp_path, peers, seed):
    lacking = os.path.join(str(seed), "hub", "models--moonshotai--Kimi-K2.6", "blobs", etag(hub, SHARD3))
    hidden = lacking + ".hidden"
    os.rename(lacking, hidden)
    try:
        server = peers()
        result, unused = run_module(tmp_path, with_peers(hub, tmp_path, [server], peer_wait=2))
    finally:
        os.rename(hidden, lacking)
    asked = [r for r in server.requests if r["path"].endswith(etag(hub, SHARD3))]
    # Asked again every 0.25 s by each of its 4 transfers while it waits for the peer to get it (peer_wait=2), then
    # the hub sends it.
    assert 1 <= len(asked) <= 4 * (2 / 0.25 + 2) and {r["status"] for r in asked} == {404}, len(asked)
    assert {r["file"] for r in body_requests(hub.requests())} == {SHARD3}
    assert by_name(result)["peer0"]["missing_files"] == 1
    assert_snapshot_matches(hub, tmp_path / "hf", KIMI)


def test_a_receiver_trails_a_peer_that_is_still_fetching(hub, tmp_path, peers, seed):
    """The peer lacks a file when the receiver starts and gets it 2 s later (as a seed downloading at the same time):
    the receiver waits for it instead of asking the hub, which sends nothing."""
    lacking = os.path.join(str(seed), "hub", "models--moonshotai--Kimi-K2.6", "blobs", etag(hub, SHARD3))
    hidden = lacking + ".hidden"
    os.rename(lacking, hidden)
    timer = threading.Timer(2.0, os.rename, (hidden, lacking))
    timer.start()
    try:
        server = peers()
        result, unused = run_module(tmp_path, with_peers(hub, tmp_path, [server], peer_wait=60))
    finally:
        timer.join()
    asked = [r for r in server.requests if r["path"].endswith(etag(hub, SHARD3))]
    assert {r["status"] for r in asked} == {404, 206}
    assert body_requests(hub.requests()) == [] and result["bytes_from_hub"] == 0
    assert_snapshot_matches(hub, tmp_path / "hf", KIMI)


@pytest.mark.parametrize("extra, words", [
    ({"hub_bytes": False}, "hub_bytes=false needs peers"),
    ({"peers": [{"name": "p", "url": "ftp://x"}]}, "peers: p's url must be an http(s) URL"),
    ({"peer_connections": 0}, "peer_connections must be between 1 and 64"),
    ({"peer_wait": -1}, "peer_wait must be between 0 and 86400"),
])
def test_refuses_bad_peer_options_naming_them(hub, tmp_path, extra, words):
    result, unused = run_module(tmp_path, args(hub, tmp_path, **extra), expect_ok=False)
    assert words in result["msg"] and result["option"] == list(extra)[0]
    assert hub.requests() == []
