"""The cache layout and CacheWriter (_hf/cache.py): pointers, patterns, hashing, hf_home, the disk rule, owner and mode
(its files land through _files: test_files.py)."""
import hashlib
import os

import pytest

from ansible_collections.kimi.deploy.plugins.module_utils._hf import cache

SHA = "0123456789abcdef0123456789abcdef01234567"


def test_pointer_targets_are_relative_per_depth():
    assert cache.pointer_target("config.json", "e") == "../../blobs/e"
    assert cache.pointer_target("docs/a/b.md", "e") == "../../../../blobs/e"


def test_filter_paths_matches_huggingface_hub_rules():
    paths = ["a.json", "docs/x.md", "m.safetensors", "sub/b.json"]
    assert cache.filter_paths(paths, ["*.json"]) == ["a.json", "sub/b.json"]
    assert cache.filter_paths(paths, None, ["docs/"]) == ["a.json", "m.safetensors", "sub/b.json"]


def test_git_blob_hash_matches_git(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"hello\n")
    # `printf 'hello\n' | git hash-object --stdin`
    assert cache.hash_file(str(path), "sha1", 6) == "ce013625030ba8dba906f756967f9e9ca394464a"


# ------------------------------------------------------------------------------------------------ hf_home
def layout(home):
    return cache.Layout(str(home), "org/name", SHA)


def test_hf_home_must_be_absolute():
    with pytest.raises(cache.CacheError, match="hf_home='rel/hf' must be an absolute path") as info:
        cache.check_hf_home(layout("rel/hf"))
    assert info.value.option == "hf_home"


def test_hf_home_under_a_file_is_refused(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(cache.CacheError, match="hf_home=.*/file/hf: .*/file is not a directory"):
        cache.check_hf_home(layout(tmp_path / "file" / "hf"), writable=False)


def test_hf_home_writable_is_proven_on_the_nearest_existing_parent_and_nothing_is_created(tmp_path, monkeypatch):
    home = tmp_path / "a" / "b" / "hf"
    assert cache.check_hf_home(layout(home)) == str(tmp_path)
    assert os.listdir(str(tmp_path)) == [], "check_hf_home must not create anything"
    asked = []

    def no_write(path, mode):
        asked.append((path, mode))
        return False
    monkeypatch.setattr(cache.os, "access", no_write)
    with pytest.raises(cache.CacheError, match=r"hf_home=%s is not writable: %s belongs to uid \d+" % (home, tmp_path)) as info:
        cache.check_hf_home(layout(home))
    assert info.value.option == "hf_home"
    assert asked == [(str(tmp_path), os.W_OK | os.X_OK)]


# ------------------------------------------------------------------------------------------------ the disk rule
def fake_statvfs(free):
    class Result(object):
        f_bavail = free
        f_frsize = 1
    return lambda path: Result()


@pytest.mark.parametrize("need, min_free, ok", [(0, 10 ** 15, True), (400, 600, True), (401, 600, False), (2000, 0, False)])
def test_disk_report_keeps_min_free_bytes_free_after_the_download(tmp_path, monkeypatch, need, min_free, ok):
    monkeypatch.setattr(cache.os, "statvfs", fake_statvfs(1000))
    disk = cache.disk_report(layout(tmp_path / "hf"), need, min_free)
    assert disk == {"path": str(tmp_path), "free_bytes": 1000, "need_bytes": need, "min_free_bytes": min_free, "ok": ok}


def test_disk_message_names_hf_home_and_the_numbers():
    disk = {"path": "/var/lib", "free_bytes": 300 * 10 ** 9, "need_bytes": 595 * 10 ** 9, "min_free_bytes": 10 ** 10, "ok": False}
    assert cache.disk_message(disk, "/var/lib/kimi-k26/huggingface") == (
        "not enough disk space for hf_home=/var/lib/kimi-k26/huggingface: 595.0 GB missing to download, 300.0 GB free on "
        "/var/lib, min_free_bytes=10.0 GB must stay free after the download. Free 305.0 GB or point hf_home at a bigger disk.")


# ------------------------------------------------------------------------------------------------ owner, mode, writer
@pytest.mark.parametrize("mode, value", [("0644", 0o644), ("640", 0o640), (0o600, 0o600)])
def test_parse_mode(mode, value):
    assert cache.parse_mode(mode) == value


@pytest.mark.parametrize("mode", ["rw-r--r--", "0200", "17777", -1])
def test_parse_mode_refuses_what_is_not_a_readable_octal_mode(mode):
    with pytest.raises(cache.CacheError, match="mode must be an octal file mode") as info:
        cache.parse_mode(mode)
    assert info.value.option == "mode"


def test_owner_ids_name_the_option():
    assert cache.owner_ids(None, None) == (-1, -1)
    assert cache.owner_ids("0", "0") == (0, 0)
    with pytest.raises(cache.CacheError, match="owner='no-such-user-kimi': no such user") as info:
        cache.owner_ids("no-such-user-kimi", None)
    assert info.value.option == "owner"


def entry(path, etag, size=3):
    return {"path": path, "etag": etag, "size": size, "hash_kind": "git-sha1", "oid": etag, "lfs_sha256": None}


def test_writer_plans_then_applies_pointers_refs_and_record(tmp_path):
    lay = layout(tmp_path / "hf")
    writer = cache.CacheWriter(lay, file_mode=0o640, materialize=["*.py"])
    abc = hashlib.sha1(b"blob 3\0abc").hexdigest()  # git's blob id of b"abc": a real file is checked by content
    selected = [entry("config.json", "a" * 40), entry("sub/m.py", abc)]
    assert writer.snapshot_changes(selected, apply=False) and writer.refs_changes(["main"], apply=False)
    assert not os.path.exists(str(tmp_path / "hf")), "planning writes nothing"
    writer.prepare()
    for item in selected:
        with open(lay.blob(item["etag"]), "wb") as handle:
            handle.write(b"abc")
    assert writer.snapshot_changes(selected, apply=True) and writer.refs_changes(["main"], apply=True)
    assert os.readlink(lay.pointer("config.json")) == "../../blobs/" + "a" * 40
    assert not os.path.islink(lay.pointer("sub/m.py"))
    with open(os.path.join(lay.refs, "main"), "rb") as handle:
        assert handle.read() == SHA.encode()
    stats = dict((e["etag"], cache.stat_key(lay.blob(e["etag"]))) for e in selected)
    writer.save_record("org/name", "sel", "size", selected, stats, stats)
    record = cache.load_record(lay, "sel")
    assert record["complete"] and [f["path"] for f in record["files"]] == ["config.json", "sub/m.py"]
    assert cache.fast_check(lay, record, ["*.py"], ["main"], "size")
    assert writer.fix_permissions() and not writer.fix_permissions(dry_run=True)
    assert oct(os.stat(lay.blobs).st_mode & 0o777) == "0o750" and oct(os.stat(lay.blob("a" * 40)).st_mode & 0o777) == "0o640"
    assert not writer.snapshot_changes(selected, apply=False) and not writer.refs_changes(["main"], apply=False)


def test_writer_lock_is_exclusive(tmp_path):
    writer = cache.CacheWriter(layout(tmp_path / "hf"))
    writer.prepare()
    fd = writer.lock()
    try:
        with pytest.raises(cache.CacheError, match="another hf_snapshot run holds"):
            writer.lock(wait_s=0)
    finally:
        os.close(fd)
    os.close(writer.lock(wait_s=0))
