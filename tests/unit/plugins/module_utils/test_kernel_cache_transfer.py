"""Kernel caches that travel (issue 39): a verified key's folder is published as an archive and a marker; a host
fetches the matching key only, checks the archive against the marker, and puts the folder in place whole."""
import json
import os
import shutil
import tarfile

import pytest

from ansible_collections.kimi.deploy.plugins.module_utils._model import kernel_cache_transfer as kt

KEY = "vllm-0.11.0-0123456789abcdef01234567"
OTHER = "vllm-0.11.0-fedcba9876543210fedcba98"


def compiled(root, key=KEY, files=3):
    folder = os.path.join(str(root), key)
    os.makedirs(os.path.join(folder, "torch_compile_cache", "rank_0_0"))
    for i in range(files):
        with open(os.path.join(folder, "torch_compile_cache", "rank_0_0", "k%d.bin" % i), "wb") as out:
            out.write(b"kernel %d" % i * 100)
    return folder


def peer_get(peer_root, calls=None):
    """A peer's site: /kernels/<name> served from peer_root, 404 for what it lacks."""
    def get(url, dest):
        name = url.rsplit("/kernels/", 1)[1]
        if calls is not None:
            calls.append(name)
        path = os.path.join(str(peer_root), name)
        if not os.path.isfile(path):
            return 404
        shutil.copyfile(path, dest)
        return 200
    return get


def leftovers(root):
    return [n for n in os.listdir(str(root)) if n.startswith(".")]


@pytest.fixture
def fleet(tmp_path):
    peer, here = tmp_path / "peer", tmp_path / "here"
    peer.mkdir()
    here.mkdir()
    return peer, here


def test_publish_writes_archive_and_marker_last_and_is_idempotent(fleet):
    peer, _here = fleet
    compiled(peer)
    changed, marker = kt.publish(str(peer), KEY, {"identity": "int4-vllm"})
    assert changed
    assert marker["key"] == KEY and marker["identity"] == "int4-vllm"
    size, sha = kt.sha256_of(str(peer / (KEY + ".tar")))
    assert marker["archive"]["size"] == size and marker["archive"]["sha256"] == sha and marker["archive"]["files"] == 3
    assert json.loads((peer / (KEY + ".verified")).read_text()) == marker
    assert kt.publish(str(peer), KEY, {"identity": "int4-vllm"}) == (False, marker)
    assert leftovers(peer) == []


def test_an_empty_folder_is_not_published(fleet):
    peer, _here = fleet
    os.makedirs(str(peer / KEY))
    assert kt.publish(str(peer), KEY, {}) == (False, None)
    assert sorted(os.listdir(str(peer))) == [KEY]


def test_publish_again_after_the_folder_changed(fleet):
    peer, _here = fleet
    folder = compiled(peer)
    _changed, first = kt.publish(str(peer), KEY, {})
    with open(os.path.join(folder, "new.bin"), "wb") as out:
        out.write(b"x")
    changed, second = kt.publish(str(peer), KEY, {})
    assert changed and second["archive"]["sha256"] != first["archive"]["sha256"] and second["archive"]["files"] == 4


def test_fetch_of_the_matching_key(fleet):
    peer, here = fleet
    compiled(peer)
    kt.publish(str(peer), KEY, {})
    os.makedirs(str(here / KEY))  # kimi_serve created it empty: still a first start
    calls = []
    result = kt.fetch(str(here), KEY, [{"name": "gpu-1", "url": "https://gpu-1:8444/"}], peer_get(peer, calls))
    assert result["fetched"] and result["source"] == "gpu-1" and result["files"] == 3
    assert calls == [KEY + ".verified", KEY + ".tar"]
    got = here / KEY / "torch_compile_cache" / "rank_0_0" / "k1.bin"
    assert got.read_bytes() == b"kernel 1" * 100
    assert leftovers(here) == []
    assert not (here / (KEY + ".verified")).exists()  # verified here only by this host's own start


def test_no_fetch_where_the_folder_holds_files(fleet):
    peer, here = fleet
    compiled(peer)
    compiled(here, files=1)
    assert not kt.needs_fetch(str(here), KEY)


def test_refuses_a_key_without_verified_marker(fleet):
    peer, here = fleet
    compiled(peer)
    kt.publish(str(peer), KEY, {})
    os.unlink(str(peer / (KEY + ".verified")))  # archive there, no verified start behind it
    calls = []
    result = kt.fetch(str(here), KEY, [{"name": "gpu-1", "url": "https://gpu-1:8444"}], peer_get(peer, calls))
    assert not result["fetched"] and "no verified cache" in result["tried"][0]
    assert calls == [KEY + ".verified"]
    assert not (here / KEY).exists() and leftovers(here) == []


def test_refuses_another_keys_marker(fleet):
    peer, here = fleet
    compiled(peer, key=OTHER)
    kt.publish(str(peer), OTHER, {})
    shutil.copyfile(str(peer / (OTHER + ".verified")), str(peer / (KEY + ".verified")))
    shutil.copyfile(str(peer / (OTHER + ".tar")), str(peer / (KEY + ".tar")))
    result = kt.fetch(str(here), KEY, [{"name": "gpu-1", "url": "https://gpu-1:8444"}], peer_get(peer))
    assert not result["fetched"] and "another key" in result["tried"][0]
    assert not (here / KEY).exists()


def test_corrupted_archive_is_rejected_and_the_next_peer_used(fleet, tmp_path):
    peer, here = fleet
    good = tmp_path / "good"
    good.mkdir()
    for root in (peer, good):
        compiled(root)
        kt.publish(str(root), KEY, {})
    data = bytearray((peer / (KEY + ".tar")).read_bytes())
    data[700] ^= 0xFF  # same size, one byte flipped
    (peer / (KEY + ".tar")).write_bytes(bytes(data))

    def get(url, dest):
        host = url.split("//", 1)[1].split(":", 1)[0]
        return peer_get(peer if host == "bad" else good)(url, dest)
    peers = [{"name": "bad", "url": "https://bad:8444"}, {"name": "good", "url": "https://good:8444"}]
    result = kt.fetch(str(here), KEY, peers, get)
    assert result["fetched"] and result["source"] == "good"
    assert "bad: refused" in result["tried"][0] and "sha256" in result["tried"][0]
    assert leftovers(here) == []


def test_a_failed_install_leaves_no_partial_folder(fleet):
    peer, here = fleet
    compiled(peer)
    _c, marker = kt.publish(str(peer), KEY, {})
    arch = dict(marker["archive"], size=marker["archive"]["size"] + 1)
    with pytest.raises(kt.TransferError):
        kt.install(str(here), KEY, str(peer / (KEY + ".tar")), arch)
    assert os.listdir(str(here)) == []


def test_an_archive_with_a_link_or_escape_is_refused(fleet, tmp_path):
    _peer, here = fleet
    evil = tmp_path / "evil.tar"
    payload = tmp_path / "payload"
    payload.write_bytes(b"x")
    with tarfile.open(str(evil), "w") as tar:
        tar.add(str(payload), arcname="../escape")
    size, sha = kt.sha256_of(str(evil))
    with pytest.raises(kt.TransferError, match="not a plain file"):
        kt.install(str(here), KEY, str(evil), {"size": size, "sha256": sha})
    assert os.listdir(str(here)) == [] and not (tmp_path / "escape").exists()


def test_a_marker_without_an_archive_record_is_refused():
    with pytest.raises(kt.TransferError, match="no archive"):
        kt.check_marker({"key": KEY, "identity": "x"}, KEY)


@pytest.mark.parametrize("key", ["", "../x", "a/b", ".hidden", KEY + ".tar"])
def test_bad_keys_are_refused(key):
    with pytest.raises(kt.TransferError):
        kt.check_key(key)
