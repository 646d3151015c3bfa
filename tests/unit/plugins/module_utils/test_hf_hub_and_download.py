"""The pure parts of the curl downloader: HTTP heads, Link, Retry-After, intervals, curl config, which failures are
retried and how often (the cache layout and its writer: test_hf_cache.py)."""
import io
import shutil

import pytest

from ansible_collections.kimi.deploy.plugins.module_utils._hf import cache
from ansible_collections.kimi.deploy.plugins.module_utils._hf import download as dl
from ansible_collections.kimi.deploy.plugins.module_utils._hf import hub as hf_hub

SHA = "0123456789abcdef0123456789abcdef01234567"


def test_read_head_skips_interim_responses_and_keeps_every_link():
    raw = (b"HTTP/1.1 100 Continue\r\n\r\n"
           b"HTTP/2 206 \r\ncontent-range: bytes 0-9/100\r\nLink: <a>; rel=\"prev\"\r\nLink: <b>; rel=\"next\"\r\n\r\nBODY")
    stream = io.BytesIO(raw)
    status, unused, headers = hf_hub.read_head(stream)
    assert status == 206
    assert headers["content-range"] == "bytes 0-9/100"
    assert hf_hub.next_link(headers["link"]) == "b"
    assert stream.read() == b"BODY"


@pytest.mark.parametrize("raw", [b"", b"garbage\r\n\r\n"])
def test_read_head_refuses_what_is_not_http(raw):
    with pytest.raises(hf_hub.TransientError):
        hf_hub.read_head(io.BytesIO(raw))


@pytest.mark.parametrize("header,expected", [
    ('<https://hub/api/models/a/b/tree/x?cursor=5>; rel="next"', "https://hub/api/models/a/b/tree/x?cursor=5"),
    ('<https://x/1>; rel="prev", <https://x/3>; rel=next', "https://x/3"),
    ('<https://x/1>; rel="prev"', None),
    (None, None),
])
def test_next_link(header, expected):
    assert hf_hub.next_link(header) == expected


@pytest.mark.parametrize("headers,expected", [
    ({"retry-after": "7"}, 7.0),
    ({"ratelimit": '"api";r=0;t=55'}, 55.0),
    ({"retry-after": "soon"}, 3.0),
    ({}, 3.0),
])
def test_retry_after(headers, expected):
    assert hf_hub.retry_after_s(headers, 3.0) == expected


def test_retry_after_http_date_is_in_the_future():
    assert 0 <= hf_hub.retry_after_s({"retry-after": "Wed, 21 Oct 2099 07:28:00 GMT"}) > 3600


def test_intervals_merge_and_complement():
    done = dl.merge_intervals([[10, 20], [0, 5], [5, 8], [19, 30]])
    assert done == [[0, 8], [10, 30]]
    assert dl.missing_intervals(done, 40) == [(8, 10), (30, 40)]
    assert dl.missing_intervals([], 4) == [(0, 4)]
    assert dl.missing_intervals([[0, 4]], 4) == []


def test_the_token_goes_to_the_hub_origin_only_and_never_to_argv():
    curl = hf_hub.Curl("/usr/bin/curl", "https://huggingface.co", token='hf_"x\\')
    hub = curl.config("https://huggingface.co/api/models/a/b/tree/" + SHA).decode()
    assert 'header = "Authorization: Bearer hf_\\"x\\\\"' in hub
    for other in ("https://cdn-lfs.hf.co/repos/x", "http://huggingface.co/x", "https://huggingface.co:8443/x"):
        assert "Authorization" not in curl.config(other).decode()
    assert hf_hub.Curl("/usr/bin/curl", "https://huggingface.co").config("https://huggingface.co/x").count(b"Authorization") == 0


def test_curl_config_quotes_and_ranges():
    curl = hf_hub.Curl("/usr/bin/curl", "http://127.0.0.1:1")
    text = curl.config('http://localhost:2/a"b', byte_range=(5, 9)).decode()
    assert 'url = "http://localhost:2/a\\"b"' in text
    assert 'header = "Range: bytes=5-9"' in text
    assert "globoff" in text and "include" in text


def test_file_entry_takes_the_lfs_sha256_as_etag_and_refuses_bad_entries():
    lfs = hf_hub.file_entry({"type": "file", "path": "m.safetensors", "size": 3, "oid": SHA, "lfs": {"oid": "a" * 64, "size": 3}})
    assert (lfs["etag"], lfs["hash_kind"]) == ("a" * 64, "sha256")
    git = hf_hub.file_entry({"type": "file", "path": "c.json", "size": 3, "oid": SHA})
    assert (git["etag"], git["hash_kind"]) == (SHA, "git-sha1")
    for bad in ({"path": "../x", "size": 1, "oid": SHA}, {"path": "x", "size": -1, "oid": SHA},
                {"path": "x", "size": 1, "oid": "nothex"}, {"path": "x", "size": 1, "oid": SHA, "lfs": {"oid": "short"}}):
        with pytest.raises(cache.CacheError):
            hf_hub.file_entry(dict(bad, type="file"))


def test_redact_drops_signed_query_strings():
    assert hf_hub.redact("https://cdn/x?Expires=1&Signature=s") == "https://cdn/x"


# ------------------------------------------------------------------------------------------------ failures and retries
class FakeCurl(object):
    """Stands in for Curl in Hub: every request fails with the given error; counts the attempts."""

    endpoint = "http://hub.test"

    def __init__(self, error):
        self.error = error
        self.calls = 0

    def request(self, url, method="GET", max_time=300):
        self.calls += 1
        raise self.error


def refused():
    return hf_hub.TransientError("no answer (curl exit 7)", connection=True)


@pytest.mark.parametrize("connect_retries, attempts", [(None, 6), (1, 2), (0, 1)])
def test_connection_failures_get_connect_retries_when_set(connect_retries, attempts):
    curl = FakeCurl(refused())
    sleeps = []
    hub = hf_hub.Hub(curl, "org/name", SHA, retries=5, connect_retries=connect_retries, sleep=sleeps.append)
    with pytest.raises(hf_hub.HubError, match="giving up after %d attempts: no answer" % attempts):
        hub.list_files()
    assert curl.calls == attempts
    assert all(delay <= 1.25 for delay in sleeps[:1]), "the first retry comes within about a second"


def test_http_errors_keep_their_retries_in_plan_mode():
    """connect_retries caps only requests that got no answer; a 503 keeps the normal patience."""
    curl = FakeCurl(hf_hub.TransientError("HTTP 503"))
    hub = hf_hub.Hub(curl, "org/name", SHA, retries=3, connect_retries=1, sleep=lambda s: None)
    with pytest.raises(hf_hub.HubError, match="giving up after 4 attempts"):
        hub.list_files()


def test_errors_no_retry_can_fix_are_raised_at_once():
    curl = FakeCurl(hf_hub.HubError("cannot resolve the host"))
    hub = hf_hub.Hub(curl, "org/name", SHA, retries=10, sleep=lambda s: pytest.fail("slept before a retry"))
    with pytest.raises(hf_hub.HubError, match="cannot resolve the host"):
        hub.list_files()
    assert curl.calls == 1


@pytest.mark.parametrize("code, permanent", [(3, True), (6, True), (60, True), (7, False), (28, False), (35, False), (56, False)])
def test_curl_exit_codes_are_classified(code, permanent):
    curl = hf_hub.Curl("/usr/bin/curl", "https://hub.test")
    error = curl.failure("GET", "https://hub.test/api/models/a/b/tree/x?cursor=secret", code, "curl: (%d) boom" % code)
    assert isinstance(error, hf_hub.HubError if permanent else hf_hub.TransientError)
    assert "endpoint https://hub.test" in str(error) and "curl exit %d" % code in str(error)
    assert "secret" not in str(error)
    assert permanent or error.connection
    cdn = curl.failure("GET", "https://cdn.test/blob?Signature=s", code, "x")
    assert "the download host cdn.test" in str(cdn) and "Signature" not in str(cdn)


@pytest.mark.skipif(not shutil.which("curl"), reason="needs curl")
@pytest.mark.parametrize("endpoint, error, words", [
    ("http://127.0.0.1:1", hf_hub.TransientError, ["no answer from endpoint http://127.0.0.1:1", "curl exit 7"]),
    ("http://nonexistent.invalid", hf_hub.HubError,
     ["cannot resolve the host of endpoint http://nonexistent.invalid", "curl exit 6", "Not retried"]),
])
def test_real_curl_failures(endpoint, error, words):
    curl = hf_hub.Curl(shutil.which("curl"), endpoint, connect_timeout=5)
    with pytest.raises(error) as info:
        curl.request(endpoint + "/api/models/a/b/tree/" + SHA)
    for word in words:
        assert word in str(info.value)
