"""kimi.deploy.caddy_clients / caddy_key_map: the proxy's key rules, refused naming the client, never the key."""
import hashlib

import pytest

from ansible.errors import AnsibleFilterError
from ansible_collections.kimi.deploy.plugins.filter.caddy_clients import FilterModule

FILTERS = FilterModule().filters()
caddy_clients = FILTERS["caddy_clients"]
caddy_key_map = FILTERS["caddy_key_map"]

A = "a" * 40
B1 = "b" * 32
B2 = "B-._~+/=" + "2" * 30
M = "m" * 40


def refused(*args, **kwargs):
    with pytest.raises(AnsibleFilterError) as error:
        caddy_clients(*args, **kwargs)
    return str(error.value)


def test_normalizes_clients_and_metrics_keys():
    checked = caddy_clients([{"name": "alice", "keys": [A]}, {"name": "bob-2_x", "keys": [B1, B2]}], metrics_keys=[M])
    plain = {"priority": None, "limits": {}}
    assert checked == {"clients": [dict(plain, name="alice", keys=[A]), dict(plain, name="bob-2_x", keys=[B1, B2])],
                       "metrics_keys": [M], "legacy": False}


def test_legacy_keys_become_the_default_client():
    expected = {"clients": [{"name": "default", "keys": [A], "priority": None, "limits": {}}], "metrics_keys": [],
                "legacy": True}
    assert caddy_clients([], legacy_keys=[A]) == expected


def test_both_forms_at_once_are_refused():
    assert "not both" in refused([{"name": "alice", "keys": [A]}], legacy_keys=[B1])


def test_no_client_is_refused():
    assert "no client" in refused([])


@pytest.mark.parametrize("name", ["Alice", "al ice", "alice\n", "", "al.ice", "al{ice}", 7])
def test_bad_names_are_refused(name):
    assert "^[a-z0-9_-]+$" in refused([{"name": name, "keys": [A]}])


@pytest.mark.parametrize("key", ["", "short", "x" * 31, "a" * 31 + " ", "a" * 32 + '"', "{env.KEY}" + "a" * 30,
                                 "a" * 32 + "\n", None, 12345678901234567890123456789012345])
def test_weak_or_unsafe_keys_are_refused_without_printing_them(key):
    message = refused([{"name": "alice", "keys": [key]}])
    assert "caddy_proxy_clients[0] (client alice).keys[0]" in message
    if isinstance(key, str) and key:
        assert key not in message


def test_a_string_instead_of_a_list_is_refused():
    assert "a list of keys" in refused([{"name": "alice", "keys": A}])
    assert "a list of keys" in refused([], legacy_keys=A)
    assert "a list of keys" in refused([{"name": "alice", "keys": [A]}], metrics_keys=M)


@pytest.mark.parametrize("keys", [[], [A, B1, B2]])
def test_one_or_two_keys_per_client(keys):
    assert "one, or two while it rotates" in refused([{"name": "alice", "keys": keys}])


def test_a_key_shared_by_two_clients_is_refused():
    message = refused([{"name": "alice", "keys": [A]}, {"name": "bob", "keys": [B1, A]}])
    assert "client bob key 2 is also client alice key 1" in message and A not in message


def test_a_metrics_key_that_is_a_client_key_is_refused():
    assert "must only read /metrics" in refused([{"name": "alice", "keys": [A]}], metrics_keys=[A])


def test_duplicate_names_and_extra_fields_are_refused():
    assert "used twice" in refused([{"name": "alice", "keys": [A]}, {"name": "alice", "keys": [B1]}])
    assert "the keys name and keys, and optionally priority and limits" in refused(
        [{"name": "alice", "keys": [A], "rate": 1}])


def test_a_client_may_carry_a_priority_class_and_limits_checked_by_one_rule():
    checked = caddy_clients([{"name": "alice", "keys": [A], "priority": "interactive",
                              "limits": {"requests_per_minute": 60, "concurrent": 4}}, {"name": "bob", "keys": [B1]}])
    assert checked["clients"][0]["priority"] == "interactive"
    assert checked["clients"][0]["limits"] == {"concurrent": 4, "requests_per_minute": 60}
    assert checked["clients"][1]["priority"] is None and checked["clients"][1]["limits"] == {}
    assert "priority='urgent' is not allowed. Allowed values: interactive, batch" in refused(
        [{"name": "alice", "keys": [A], "priority": "urgent"}])
    assert "limits.rpm is not allowed. Allowed keys: requests_per_minute, tokens_per_minute, concurrent" in refused(
        [{"name": "alice", "keys": [A], "limits": {"rpm": 5}}])
    for bad in (0, -1, "10", True, 1.5):
        assert "limits.concurrent=%r is not allowed: a whole number of requests at once, at least 1" % (bad,) in \
            refused([{"name": "alice", "keys": [A], "limits": {"concurrent": bad}}])


def test_published_keys_are_refused_by_digest():
    digest = hashlib.sha256(B1.encode()).hexdigest()
    message = refused([{"name": "alice", "keys": [A]}], metrics_keys=[B1], published_digests=[digest])
    assert "published" in message and "caddy_proxy_metrics_keys[0]" in message and B1 not in message


def test_the_key_map_maps_exact_bearer_headers_to_names_and_defaults_to_empty():
    text = caddy_key_map(caddy_clients([{"name": "alice", "keys": [A]}, {"name": "bob", "keys": [B1, B2]}],
                                       metrics_keys=[M]))
    lines = [line.strip() for line in text.splitlines()]
    assert "map {http.request.header.Authorization} {http.auth.user.id} {" in lines
    assert '"Bearer %s" alice  # key 1' % A in lines
    assert '"Bearer %s" bob  # key 1' % B1 in lines and '"Bearer %s" bob  # key 2' % B2 in lines
    # the metrics id cannot be a client name, so the client routes never accept a metrics key
    assert '"Bearer %s" metrics.scraper' % M in lines
    assert lines[-2:] == ['default ""', "}"]


def test_the_key_map_takes_only_checked_input():
    with pytest.raises(AnsibleFilterError):
        caddy_key_map([{"name": "alice", "keys": [A]}])


def test_caddy_key_checks_one_key_by_the_same_rule_and_never_shows_it():
    from ansible_collections.kimi.deploy.plugins.filter.caddy_clients import caddy_key
    good = "A" * 32
    assert caddy_key(good, "kimi_weights_peer_key") == good
    for bad in ("", "short", "x" * 31, "a" * 31 + " ", "{http.request}" * 3, None):
        with pytest.raises(AnsibleFilterError) as err:
            caddy_key(bad, "kimi_weights_peer_key")
        assert "kimi_weights_peer_key is not a usable key: it needs at least 32 characters" in str(err.value)
        assert not bad or bad not in str(err.value)
