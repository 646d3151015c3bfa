"""CacheListing, hf_snapshot's offline lister: Hub.list_files' entries read back from trees/<commit>.json."""
import json
import os

import pytest

from ansible_collections.kimi.deploy.plugins.module_utils._hf import cache
from ansible_collections.kimi.deploy.plugins.module_utils._hf import hub as hf_hub

REPO = "org/name"
COMMIT = "0123456789abcdef0123456789abcdef01234567"
OID1, OID2, OID3 = ("%040x" % n for n in (1, 2, 3))
API = [  # the /tree API's entries, as Hub.list_files receives them
    {"type": "file", "path": "model.safetensors", "size": 10, "oid": OID1, "lfs": {"oid": "a" * 64, "size": 10},
     "xetHash": "b" * 64},
    {"type": "file", "path": "config.json", "size": 3, "oid": OID2},
    {"type": "file", "path": "docs/guide.md", "size": 0, "oid": OID3, "xetHash": "c" * 64},
]


def layout(tmp_path):
    return cache.Layout(str(tmp_path / "hf"), REPO, COMMIT)


def write_tree(tmp_path, data):
    lay = layout(tmp_path)
    os.makedirs(lay.trees, exist_ok=True)
    with open(os.path.join(lay.trees, COMMIT + ".json"), "wb") as handle:
        handle.write(data if isinstance(data, bytes) else json.dumps(data).encode("utf-8"))
    return lay


def test_entries_are_those_hub_list_files_builds(tmp_path):
    from_hub = sorted((hf_hub.file_entry(e) for e in API), key=lambda f: f["path"])
    lay = write_tree(tmp_path, cache.tree_cache_json(from_hub))
    listing = hf_hub.CacheListing(lay, REPO)
    assert listing.list_files() == from_hub
    assert [e["etag"] for e in from_hub] == [OID2, OID3, "a" * 64]
    assert [e["hash_kind"] for e in from_hub] == ["git-sha1", "git-sha1", "sha256"]
    listing.list_files()[0]["etag"] = "changed"  # each call returns copies
    assert listing.list_files() == from_hub


def test_huggingface_hub_style_tree_is_read_too(tmp_path):
    """huggingface_hub writes indent=1 and lfs_size; an LFS file's size is its content's size."""
    data = {"format_version": 1, "files": {
        "w.bin": {"size": 5, "blob_id": OID1, "lfs_sha256": "d" * 64, "lfs_size": 5},
        "a.txt": {"size": 2, "blob_id": OID2}}}
    lay = write_tree(tmp_path, json.dumps(data, indent=1).encode("utf-8"))
    files = hf_hub.CacheListing(lay, REPO).list_files()
    assert [(f["path"], f["size"], f["etag"], f["hash_kind"]) for f in files] == [
        ("a.txt", 2, OID2, "git-sha1"), ("w.bin", 5, "d" * 64, "sha256")]


def test_missing_tree_says_what_to_copy(tmp_path):
    lay = layout(tmp_path)
    with pytest.raises(hf_hub.HubError) as err:
        hf_hub.CacheListing(lay, REPO).list_files()
    assert str(err.value) == (
        "offline: %s@%s has no listing in %s (trees/%s.json); copy the bundle's folder of this repo into hf_home first"
        % (REPO, COMMIT, lay.repo_dir, COMMIT))


@pytest.mark.parametrize("data,words", [
    (b"{", "not JSON"),
    (b"\xff\xfe", "not JSON"),
    ([], "format_version"),
    ({"format_version": 2, "files": {}}, "format_version"),
    ({"format_version": 1, "files": []}, "format_version"),
    ({"format_version": 1, "files": {}}, "lists no files"),
    ({"format_version": 1, "files": {"a": 3}}, "'a' is not an object"),
    ({"format_version": 1, "files": {"a": {"size": 1, "blob_id": "xyz"}}}, "bad entry for a"),
    ({"format_version": 1, "files": {"a": {"size": -1, "blob_id": OID1}}}, "bad entry for a"),
    ({"format_version": 1, "files": {"../a": {"size": 1, "blob_id": OID1}}}, "unsafe path"),
    ({"format_version": 1, "files": {"a": {"size": 1, "blob_id": OID1, "lfs_sha256": "nope"}}}, "bad lfs oid"),
    ({"format_version": 1, "files": {"a": {"size": 1, "blob_id": OID1, "lfs_sha256": "a" * 64, "lfs_size": 2}}},
     "lfs_size 2 differs"),
])
def test_malformed_tree_fails_clearly(tmp_path, data, words):
    lay = write_tree(tmp_path, data)
    with pytest.raises(hf_hub.HubError) as err:
        hf_hub.CacheListing(lay, REPO).list_files()
    text = str(err.value)
    assert text.startswith("offline: %s@%s has no listing in %s (trees/%s.json is malformed: " % (
        REPO, COMMIT, lay.repo_dir, COMMIT)), text
    assert words in text and text.endswith("; copy the bundle's folder of this repo into hf_home first")
