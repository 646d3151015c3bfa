"""The pure parts of the curl downloader and the cache layout: HTTP heads, Link, Retry-After, intervals, curl config."""
import io
import os

import pytest

from ansible_collections.kimi.deploy.plugins.module_utils import _hf_cache as cache
from ansible_collections.kimi.deploy.plugins.module_utils import _hf_download as dl

SHA = "0123456789abcdef0123456789abcdef01234567"


def test_read_head_skips_interim_responses_and_keeps_every_link():
    raw = (b"HTTP/1.1 100 Continue\r\n\r\n"
           b"HTTP/2 206 \r\ncontent-range: bytes 0-9/100\r\nLink: <a>; rel=\"prev\"\r\nLink: <b>; rel=\"next\"\r\n\r\nBODY")
    stream = io.BytesIO(raw)
    status, unused, headers = dl.read_head(stream)
    assert status == 206
    assert headers["content-range"] == "bytes 0-9/100"
    assert dl.next_link(headers["link"]) == "b"
    assert stream.read() == b"BODY"


@pytest.mark.parametrize("raw", [b"", b"garbage\r\n\r\n"])
def test_read_head_refuses_what_is_not_http(raw):
    with pytest.raises(dl.TransientError):
        dl.read_head(io.BytesIO(raw))


@pytest.mark.parametrize("header,expected", [
    ('<https://hub/api/models/a/b/tree/x?cursor=5>; rel="next"', "https://hub/api/models/a/b/tree/x?cursor=5"),
    ('<https://x/1>; rel="prev", <https://x/3>; rel=next', "https://x/3"),
    ('<https://x/1>; rel="prev"', None),
    (None, None),
])
def test_next_link(header, expected):
    assert dl.next_link(header) == expected


@pytest.mark.parametrize("headers,expected", [
    ({"retry-after": "7"}, 7.0),
    ({"ratelimit": '"api";r=0;t=55'}, 55.0),
    ({"retry-after": "soon"}, 3.0),
    ({}, 3.0),
])
def test_retry_after(headers, expected):
    assert dl.retry_after_s(headers, 3.0) == expected


def test_retry_after_http_date_is_in_the_future():
    assert 0 <= dl.retry_after_s({"retry-after": "Wed, 21 Oct 2099 07:28:00 GMT"}) > 3600


def test_intervals_merge_and_complement():
    done = dl.merge_intervals([[10, 20], [0, 5], [5, 8], [19, 30]])
    assert done == [[0, 8], [10, 30]]
    assert dl.missing_intervals(done, 40) == [(8, 10), (30, 40)]
    assert dl.missing_intervals([], 4) == [(0, 4)]
    assert dl.missing_intervals([[0, 4]], 4) == []


def test_the_token_goes_to_the_hub_origin_only_and_never_to_argv():
    curl = dl.Curl("/usr/bin/curl", "https://huggingface.co", token='hf_"x\\')
    hub = curl.config("https://huggingface.co/api/models/a/b/tree/" + SHA).decode()
    assert 'header = "Authorization: Bearer hf_\\"x\\\\"' in hub
    for other in ("https://cdn-lfs.hf.co/repos/x", "http://huggingface.co/x", "https://huggingface.co:8443/x"):
        assert "Authorization" not in curl.config(other).decode()
    assert dl.Curl("/usr/bin/curl", "https://huggingface.co").config("https://huggingface.co/x").count(b"Authorization") == 0


def test_curl_config_quotes_and_ranges():
    curl = dl.Curl("/usr/bin/curl", "http://127.0.0.1:1")
    text = curl.config('http://localhost:2/a"b', byte_range=(5, 9)).decode()
    assert 'url = "http://localhost:2/a\\"b"' in text
    assert 'header = "Range: bytes=5-9"' in text
    assert "globoff" in text and "include" in text


def test_file_entry_takes_the_lfs_sha256_as_etag_and_refuses_bad_entries():
    lfs = dl.file_entry({"type": "file", "path": "m.safetensors", "size": 3, "oid": SHA, "lfs": {"oid": "a" * 64, "size": 3}})
    assert (lfs["etag"], lfs["hash_kind"]) == ("a" * 64, "sha256")
    git = dl.file_entry({"type": "file", "path": "c.json", "size": 3, "oid": SHA})
    assert (git["etag"], git["hash_kind"]) == (SHA, "git-sha1")
    for bad in ({"path": "../x", "size": 1, "oid": SHA}, {"path": "x", "size": -1, "oid": SHA},
                {"path": "x", "size": 1, "oid": "nothex"}, {"path": "x", "size": 1, "oid": SHA, "lfs": {"oid": "short"}}):
        with pytest.raises(cache.CacheError):
            dl.file_entry(dict(bad, type="file"))


def test_redact_drops_signed_query_strings():
    assert dl.redact("https://cdn/x?Expires=1&Signature=s") == "https://cdn/x"


@pytest.mark.parametrize("revision", ["main", "v1.0", SHA[:12], SHA.upper(), SHA + "0"])
def test_only_a_full_commit_is_a_revision(revision):
    with pytest.raises(cache.CacheError, match="40-hex.*api/models/org/name/revision/main"):
        cache.check_revision(revision, "org/name")


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


def test_atomic_write_leaves_no_temporary_file(tmp_path):
    cache.atomic_write(str(tmp_path / "refs"), b"x" * 40, mode=0o640)
    assert os.listdir(str(tmp_path)) == ["refs"]
    assert oct(os.stat(str(tmp_path / "refs")).st_mode & 0o777) == "0o640"
