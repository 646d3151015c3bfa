"""The bundle manifest's pure parts (_bundle_manifest): unfinished names, ignore globs, symlinks that leave the
bundle, the manifest's parser, the structure check and the failure message. Real bundles on disk:
tests/integration/test_bundle_manifest.py."""
import hashlib
import json
import os

import pytest

from ansible_collections.kimi.deploy.plugins.module_utils._bundle import manifest as bm

SHA_A = "a" * 64
SHA_B = "b" * 64


class Stat(object):
    """What check_structure reads of an lstat result."""

    def __init__(self, size, mtime_ns=1, ino=1):
        self.st_size = size
        self.st_mtime_ns = mtime_ns
        self.st_ino = ino


@pytest.mark.parametrize("name", ["x.tar.zst.tmp-1234", ".manifest.json.tmp-abc", "model.safetensors.incomplete",
                                  "pool.deb.part", "abc.kimi-partial"])
def test_unfinished_names(name):
    assert bm.unfinished(name)


@pytest.mark.parametrize("name", ["x.tar.zst", "tmp", "partition.img", "x.parts", "incomplete.txt", "a.tmp"])
def test_finished_names(name):
    assert not bm.unfinished(name)


def test_ignore_matches_the_path_a_folder_above_or_the_file_name():
    assert bm.ignored("logs/run/1.txt", ["logs"])
    assert bm.ignored("a/b/c.log", ["*.log"])
    assert bm.ignored("hf/models--m/.kimi-snapshot/c.json", ["*/.kimi-snapshot/*"])
    assert bm.ignored("deep/x/NOTES", ["NOTES"])
    assert not bm.ignored("images/x.tar.zst", ["logs", "*.log"])
    assert not bm.ignored("catalogs/x", ["logs"])
    assert not bm.ignored("anything", [])


@pytest.mark.parametrize("relpath", ["a", "a/b.json", "models--x/blobs/abc", ".hidden/x"])
def test_safe_relpaths(relpath):
    assert bm.safe_relpath(relpath)


@pytest.mark.parametrize("relpath", ["", "/etc/passwd", "../x", "a/../../x", "a//b", "./a", "a/./b", "a/", 3, None])
def test_unsafe_relpaths(relpath):
    assert not bm.safe_relpath(relpath)


def test_link_escapes_on_paper():
    assert bm.link_escapes("snap/c/config.json", "../../blobs/abc") is None
    assert bm.link_escapes("a.json", "b.json") is None
    assert "outside the bundle" in bm.link_escapes("snap/config.json", "../../outside")
    assert "outside the bundle" in bm.link_escapes("x", "..")
    assert "absolute" in bm.link_escapes("x", "/srv/bundle/blobs/abc")


def test_stat_key_and_record_name():
    assert bm.stat_key(Stat(5, 7, 9)) == [5, 7, 9]
    name = bm.record_name("/")
    assert name == hashlib.sha256(b"/").hexdigest() + ".json"


def test_manifest_document_counts_files_and_links():
    files = {"a": {"size": 3, "sha256": SHA_A}, "b": {"link": "a"}, "c": {"size": 4, "sha256": SHA_B}}
    document = bm.manifest_document({"images": ["x"]}, files, "2025-01-01T00:00:00Z")
    assert document["format"] == bm.FORMAT and document["bytes"] == 7 and document["count"] == 3
    data = bm.manifest_bytes(document)
    assert data.endswith(b"\n") and json.loads(data.decode()) == document
    assert bm.manifest_bytes(document) == data  # stable bytes: sorted keys


def test_same_manifest_needs_the_same_files_and_components():
    files = {"a": {"size": 3, "sha256": SHA_A}}
    old = bm.manifest_document({"k": 1}, files, "then")
    assert bm.same_manifest(old, files, {"k": 1})
    assert not bm.same_manifest(old, files, {"k": 2})
    assert not bm.same_manifest(old, {"a": {"size": 3, "sha256": SHA_B}}, {"k": 1})
    assert not bm.same_manifest(dict(old, format="other"), files, {"k": 1})
    assert not bm.same_manifest(None, files, {"k": 1})


def test_components_compare_as_json_gives_them_back():
    assert bm.normalized({"images": ("a", "b"), "n": 1}) == {"images": ["a", "b"], "n": 1}


def test_files_delta():
    old = {"a": {"size": 1, "sha256": SHA_A}, "b": {"link": "a"}, "gone": {"link": "a"}}
    new = {"a": {"size": 1, "sha256": SHA_B}, "b": {"link": "a"}, "new": {"size": 0, "sha256": SHA_A}}
    assert bm.files_delta(old, new) == (["new"], ["gone"], ["a"])
    assert bm.files_delta(None, new) == (["a", "b", "new"], [], [])


def test_parse_manifest_accepts_what_manifest_bytes_writes():
    document = bm.manifest_document({}, {"a/b": {"size": 1, "sha256": SHA_A}, "c": {"link": "a/b"}}, "now")
    assert bm.parse_manifest(bm.manifest_bytes(document), "/b/manifest.json") == document


@pytest.mark.parametrize("data, words", [
    (b"{not json", "is not valid JSON"),
    (b"\xff\xfe", "is not valid JSON"),
    (b"[]", "is not a kimi.deploy bundle manifest"),
    (b'{"format": "kimi.deploy/bundle-manifest/0", "files": {}}', "format 'kimi.deploy/bundle-manifest/0'"),
    (b'{"format": "kimi.deploy/bundle-manifest/1", "files": []}', "'files' is not a mapping"),
    (b'{"format": "kimi.deploy/bundle-manifest/1", "files": {"../x": {"link": "a"}}}', "not a relative path"),
    (b'{"format": "kimi.deploy/bundle-manifest/1", "files": {"x": {"size": -1, "sha256": "%s"}}}' % SHA_A.encode(),
     "no valid size"),
    (b'{"format": "kimi.deploy/bundle-manifest/1", "files": {"x": {"size": 1, "sha256": "abc"}}}', "no valid sha256"),
    (b'{"format": "kimi.deploy/bundle-manifest/1", "files": {"x": {"link": ""}}}', "empty link target"),
    (b'{"format": "kimi.deploy/bundle-manifest/1", "files": {}, "components": []}', "'components' is not a mapping"),
])
def test_parse_manifest_refuses_naming_the_file(data, words):
    with pytest.raises(bm.BundleError) as err:
        bm.parse_manifest(data, "/b/manifest.json")
    assert "/b/manifest.json" in str(err.value) and words in str(err.value)


def test_check_structure_finds_each_kind_of_difference():
    expected = {
        "same": {"size": 3, "sha256": SHA_A},
        "resized": {"size": 3, "sha256": SHA_A},
        "gone": {"size": 3, "sha256": SHA_A},
        "now_a_link": {"size": 3, "sha256": SHA_A},
        "link": {"link": "same"},
        "relinked": {"link": "same"},
        "now_a_file": {"link": "same"},
        "ignored_but_listed": {"size": 1, "sha256": SHA_A},
    }
    found = {
        "same": ("file", None, Stat(3)),
        "resized": ("file", None, Stat(4)),
        "now_a_link": ("link", "same", Stat(4)),
        "link": ("link", "same", Stat(4)),
        "relinked": ("link", "resized", Stat(7)),
        "now_a_file": ("file", None, Stat(4)),
        "ignored_but_listed": ("file", None, Stat(1)),
        "new": ("file", None, Stat(1)),
        "pipe": ("fifo", None, Stat(0)),
        "logs/x.log": ("file", None, Stat(1)),
        bm.MANIFEST: ("file", None, Stat(100)),
    }
    problems, to_hash = bm.check_structure(expected, found, ["logs", "ignored_but_listed"])
    assert to_hash == ["ignored_but_listed", "same"]  # listed paths are checked whatever ignore says
    lines = dict((p[1], (p[0], p[2])) for p in problems)
    assert lines["resized"] == ("changed", "resized changed (size 4 instead of 3)")
    assert lines["gone"] == ("missing", "gone is missing")
    assert lines["now_a_link"] == ("changed", "now_a_link is a symlink to same, recorded as a file")
    assert lines["relinked"] == ("changed", "relinked changed (a symlink to resized instead of same)")
    assert lines["now_a_file"] == ("changed", "now_a_file is a file, recorded as a symlink to same")
    assert lines["new"] == ("extra", "new is extra (not in the manifest)")
    assert lines["pipe"] == ("extra", "pipe is extra (a fifo, not in the manifest)")
    assert set(lines) == {"resized", "gone", "now_a_link", "relinked", "now_a_file", "new", "pipe"}


def test_problems_message_lists_twenty_then_how_many_more():
    problems = [("extra", "x%02d" % i, "x%02d is extra (not in the manifest)" % i) for i in range(30)]
    problems.append(("changed", "zz", "zz changed (size 1 instead of 2)"))
    message = bm.problems_message("/b", problems)
    lines = message.split("\n")
    assert lines[0] == "bundle /b is not as made: zz changed (size 1 instead of 2)"  # changed first
    assert len(lines) == 21 and lines[-1] == "and 11 more"
    assert bm.problems_message("/b", problems[:1]) == "bundle /b is not as made: x00 is extra (not in the manifest)"


def test_hash_file_reads_across_the_block_size(tmp_path):
    data = os.urandom(3 * 1000 + 17)
    path = tmp_path / "f"
    path.write_bytes(data)
    digest, before, after = bm.hash_file(str(path), block=1000)
    assert digest == hashlib.sha256(data).hexdigest() and before.st_size == after.st_size == len(data)


def test_hash_file_does_not_follow_a_symlink(tmp_path):
    (tmp_path / "f").write_bytes(b"x")
    os.symlink("f", str(tmp_path / "l"))
    with pytest.raises(OSError):
        bm.hash_file(str(tmp_path / "l"))


def test_load_record_ignores_another_bundles_or_a_broken_record(tmp_path):
    path = tmp_path / "r.json"
    entry = [1, 2, 3, SHA_A]
    path.write_text(json.dumps({"format": bm.RECORD_FORMAT, "path": "/b", "files": {"a": entry, "bad": [1, 2, SHA_A]}}))
    assert bm.load_record(str(path), "/b") == {"a": entry}
    assert bm.load_record(str(path), "/other") == {}
    path.write_text("{")
    assert bm.load_record(str(path), "/b") == {}
    assert bm.load_record(str(tmp_path / "none.json"), "/b") == {}


def test_hasher_trusts_a_matching_record_entry_unless_full():
    record = {"a": [3, 5, 7, SHA_A]}
    hasher = bm.Hasher(record, full=False, workers=2)
    digests, failed = hasher.digests("/nonexistent", [("a", Stat(3, 5, 7))])
    assert digests == {"a": SHA_A} and not failed and hasher.trusted_files == 1 and hasher.hashed_files == 0
    full = bm.Hasher(record, full=True, workers=2)
    digests, failed = full.digests("/nonexistent", [("a", Stat(3, 5, 7))])
    assert not digests and "cannot be read" in failed["a"] and full.trusted_files == 0
