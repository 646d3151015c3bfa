"""kimi.deploy.disk_read: a bounded read of the weights disk on temp files, its figure, its bound, the probe, check
mode, what it reports when there is nothing to read, and the kept figure (reused, refreshed, re-keyed)."""
import json
import os

from module_runner import run_module

from ansible_collections.kimi.deploy.plugins.module_utils._hf import disk_read as dr

MODULE = os.path.join(os.path.dirname(__file__), *([os.pardir] * 4 + ["plugins", "modules", "disk_read.py"]))
MIB = 1 << 20


def shard(folder, name, size):
    path = os.path.join(str(folder), name)
    with open(path, "wb") as handle:
        handle.write(os.urandom(size))
    return path


def test_reads_the_largest_files_up_to_the_bound_and_reports_mbps(tmp_path):
    blobs = tmp_path / "hub" / "models--x" / "blobs"
    blobs.mkdir(parents=True)
    big, mid = shard(blobs, "a", 6 * MIB), shard(blobs, "b", 4 * MIB)
    shard(blobs, "small", MIB // 2)  # below min_file_bytes: metadata, never read
    os.symlink(big, str(tmp_path / "link"))  # snapshot symlinks are not read twice
    result = run_module(MODULE, {"path": str(tmp_path), "size_bytes": 8 * MIB, "min_file_bytes": MIB})
    assert result["changed"] is False and result["source"] == "files"
    assert [f["path"] for f in result["files"]] == [big, mid]
    assert [f["bytes"] for f in result["files"]] == [6 * MIB, 2 * MIB]
    assert result["bytes"] == 8 * MIB
    assert result["method"] in ("o_direct", "fadvise") and result["read_mbps"] > 0


def test_nothing_to_read_gives_no_figure_and_says_why(tmp_path):
    shard(tmp_path, "config.json", 100)
    shard(tmp_path, "other-disk-image", 2 * MIB)  # the parent of a missing path is never searched, only probed
    result = run_module(MODULE, {"path": str(tmp_path / "not" / "yet"), "min_file_bytes": MIB})
    assert result["read_mbps"] is None and result["source"] is None and result["bytes"] == 0
    assert result["path"] == str(tmp_path) and "not there yet" in result["reason"]
    assert str(tmp_path / "not" / "yet") in result["reason"]


def test_the_probe_is_written_read_and_removed(tmp_path):
    result = run_module(MODULE, {"path": str(tmp_path), "size_bytes": 3 * MIB, "write_probe": True})
    assert result["source"] == "probe" and result["bytes"] == 3 * MIB and result["read_mbps"] > 0
    assert os.listdir(str(tmp_path)) == []


def test_check_mode_writes_no_probe(tmp_path):
    result = run_module(MODULE, {"path": str(tmp_path), "size_bytes": 3 * MIB, "write_probe": True}, check_mode=True)
    assert result["read_mbps"] is None and "check mode" in result["reason"] and os.listdir(str(tmp_path)) == []


def test_check_mode_reads_only_where_o_direct_changes_nothing(tmp_path):
    shard(tmp_path, "a", 2 * MIB)
    result = run_module(MODULE, {"path": str(tmp_path), "min_file_bytes": MIB}, check_mode=True)
    if result["method"] == "o_direct":
        assert result["bytes"] == 2 * MIB and result["read_mbps"] > 0
    else:  # tmpfs and some overlays refuse O_DIRECT: dropping the cache would change the host
        assert result["method"] is None and result["read_mbps"] is None and "check mode" in result["reason"]


def test_a_bad_size_is_refused_naming_the_option(tmp_path):
    result = run_module(MODULE, {"path": str(tmp_path), "size_bytes": 0})
    assert result["failed"] and "size_bytes" in result["msg"]


def test_the_fadvise_path_reads_a_file_o_direct_refuses(tmp_path, monkeypatch):
    path = shard(tmp_path, "a", 3 * MIB + 123)  # not a whole number of pages: the last read is short
    monkeypatch.setattr(dr, "_open_direct", lambda _path: None)
    out = dr.measure([(path, 3 * MIB + 123)])
    assert out["method"] == "fadvise" and out["bytes"] == 3 * MIB + 123 and out["read_mbps"] > 0
    assert dr.measure([(path, MIB)], allow_evict=False)["method"] is None


def test_pick_bounds_the_read():
    files = [(10, "a"), (5, "b"), (5, "c")]
    assert dr.pick(files, 12) == [("a", 10), ("b", 2)]
    assert dr.pick(files, 100) == [("a", 10), ("b", 5), ("c", 5)]
    assert dr.pick([], 100) == []


# The kept figure (state_file): measured once, reused until the key (folder, device, size) changes or refresh.
def _kept_args(folder, state):
    return {"path": str(folder), "size_bytes": 2 * MIB, "min_file_bytes": MIB, "state_file": str(state)}


def test_a_second_run_reuses_the_kept_figure_without_reading(tmp_path):
    weights, state = tmp_path / "hf", tmp_path / "state" / "read.json"
    weights.mkdir()
    shard(weights, "a", 2 * MIB)
    first = run_module(MODULE, _kept_args(weights, state))
    assert first["changed"] is True and first["kept"] is False and first["read_mbps"] > 0
    assert first["measured_at"] and state.is_file()  # its missing folder was created
    written = state.read_bytes()
    os.unlink(str(weights / "a"))  # a read now would find nothing: only the kept figure can answer
    second = run_module(MODULE, _kept_args(weights, state))
    assert second["changed"] is False and second["kept"] is True
    assert (second["read_mbps"], second["measured_at"], second["files"]) == (
        first["read_mbps"], first["measured_at"], first["files"])
    assert state.read_bytes() == written


def test_refresh_measures_again_and_replaces_the_figure(tmp_path):
    weights, state = tmp_path / "hf", tmp_path / "read.json"
    weights.mkdir()
    shard(weights, "a", 2 * MIB)
    run_module(MODULE, _kept_args(weights, state))
    bigger = shard(weights, "b", 3 * MIB)  # the largest file now: a new read picks it
    assert run_module(MODULE, _kept_args(weights, state))["kept"] is True
    again = run_module(MODULE, dict(_kept_args(weights, state), refresh=True))
    assert again["changed"] is True and again["kept"] is False and again["files"][0]["path"] == bigger
    assert json.loads(state.read_text())["result"]["files"][0]["path"] == bigger


def test_another_folder_device_or_size_measures_again(tmp_path):
    one, two, state = tmp_path / "one", tmp_path / "two", tmp_path / "read.json"
    for folder in (one, two):
        folder.mkdir()
        shard(folder, "a", 2 * MIB)
    run_module(MODULE, _kept_args(one, state))
    other = run_module(MODULE, _kept_args(two, state))
    assert other["kept"] is False and other["changed"] is True and other["path"] == str(two)
    record = json.loads(state.read_text())
    assert record["key"]["path"] == str(two) and record["key"]["device"] == os.stat(str(two)).st_dev
    record["key"]["device"] += 1  # the folder is on another disk now (a new mount at the same path)
    state.write_text(json.dumps(record))
    assert run_module(MODULE, _kept_args(two, state))["kept"] is False
    assert run_module(MODULE, _kept_args(two, state))["kept"] is True
    assert run_module(MODULE, dict(_kept_args(two, state), size_bytes=MIB))["kept"] is False


def test_check_mode_writes_no_kept_file_but_reuses_one(tmp_path):
    weights, state = tmp_path / "hf", tmp_path / "state" / "read.json"
    weights.mkdir()
    shard(weights, "a", 2 * MIB)
    planned = run_module(MODULE, _kept_args(weights, state), check_mode=True)
    assert not (tmp_path / "state").exists() and planned["kept"] is False
    assert planned["changed"] is (planned["read_mbps"] is not None)  # it would write the figure it read (O_DIRECT)
    first = run_module(MODULE, _kept_args(weights, state))
    again = run_module(MODULE, dict(_kept_args(weights, state), refresh=True), check_mode=True)
    assert json.loads(state.read_text())["measured_at"] == first["measured_at"] and again["kept"] is False
    kept = run_module(MODULE, _kept_args(weights, state), check_mode=True)
    assert kept["kept"] is True and kept["changed"] is False and kept["read_mbps"] == first["read_mbps"]


def test_no_figure_is_not_kept(tmp_path):
    state = tmp_path / "read.json"
    result = run_module(MODULE, _kept_args(tmp_path / "not" / "yet", state))
    assert result["read_mbps"] is None and result["changed"] is False and not state.exists()


def test_run_kept_reads_once_and_keeps_no_page_cache_figure(tmp_path, monkeypatch):
    calls = []

    def fake_run(path, size_bytes, min_file_bytes, probe=False, check_mode=False):
        calls.append(path)
        return {"path": path, "files": [], "source": "files", "read_mbps": 2100.0, "bytes": size_bytes, "seconds": 1.0,
                "method": "fadvise", "cached_share": share[0], "reason": None if share[0] == 0.0 else "partly memory's"}

    monkeypatch.setattr(dr, "run", fake_run)
    state, share = str(tmp_path / "read.json"), [0.5]
    # A figure that was partly the page cache's is used, not kept: the next run measures again.
    flagged = dr.run_kept(str(tmp_path), MIB, MIB, state)
    assert flagged["changed"] is False and "not kept" in flagged["reason"] and not os.path.exists(state)
    share[0] = 0.0
    assert dr.run_kept(str(tmp_path), MIB, MIB, state, now=0)["measured_at"] == "1970-01-01T00:00:00Z"
    kept = dr.run_kept(str(tmp_path), MIB, MIB, state)
    assert len(calls) == 2 and kept["kept"] is True and kept["measured_at"] == "1970-01-01T00:00:00Z"
    with open(state, "w") as handle:
        handle.write("{not json")  # a damaged record is measured again, not an error
    assert dr.run_kept(str(tmp_path), MIB, MIB, state)["kept"] is False and len(calls) == 3
