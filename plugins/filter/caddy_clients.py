# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: caddy_clients
short_description: Check the proxy's named clients and metrics keys, and render Caddy's key map from them
version_added: 1.0.0
author: kimi.deploy contributors
description:
  - The one place where the caddy_proxy role's key rules live. C(caddy_clients) checks and normalizes, C(caddy_key_map)
    renders the file the Caddyfile imports.
  - "A client is C({name, keys}): the name matches C(^[a-z0-9_-]+$) in full (it is what the access log and the
    C(X-LLM-Client) upstream header show), and it has one or two keys (two while it rotates)."
  - "It may also carry C(priority) (C(interactive) or C(batch)) and C(limits) (C(requests_per_minute),
    C(tokens_per_minute), C(concurrent): whole numbers of at least 1), which the fleet gateway enforces per client name."
  - A key has at least 32 characters from C([A-Za-z0-9._~+/=-]); it can then be written inside a quoted Caddyfile
    token without escaping, and holds no C({placeholder}). An empty or short key would be an open door (an empty
    C(Authorization) header matches an empty key).
  - No key belongs to two clients, or to a client and the metrics keys; no key is one published in this repository
    (compared by sha256 digest).
  - The legacy C(caddy_proxy_api_keys) list becomes the client C(default); setting both is refused.
  - Error messages name the client and the key's position, never a key.
  - C(caddy_key) checks one key by the same rule (the fleet's peer key, which the peer cache's Caddyfile holds) and
    returns it; its error names the variable given, never the key.
options:
  _input:
    description: C(caddy_proxy_clients), a list of C({name, keys}).
    type: list
    elements: dict
    required: true
  legacy_keys:
    description: C(caddy_proxy_api_keys), the deprecated list of keys of one unnamed client.
    type: list
    elements: str
  metrics_keys:
    description: C(caddy_proxy_metrics_keys), the keys that may read C(/metrics) (and nothing else).
    type: list
    elements: str
  published_digests:
    description: sha256 hex digests of keys published in this repository, refused.
    type: list
    elements: str
"""

EXAMPLES = r"""
- name: Check the clients
  ansible.builtin.set_fact:
    _clients: "{{ caddy_proxy_clients | kimi.deploy.caddy_clients(legacy_keys=caddy_proxy_api_keys,
                  metrics_keys=caddy_proxy_metrics_keys) }}"
  no_log: true

- name: Write the key map
  ansible.builtin.copy:
    dest: /etc/caddy/kimi-api-keys.caddy
    content: "{{ _clients | kimi.deploy.caddy_key_map }}"
  no_log: true
"""

RETURN = r"""
_value:
  description:
    - "C(caddy_clients): C({clients: [{name, keys, priority, limits}], metrics_keys: [...], legacy: bool})."
    - C(caddy_key_map) returns the text of the imported Caddyfile snippet.
    - C(caddy_key) returns the key it checked.
  type: raw
"""

import hashlib
import re

from ansible.errors import AnsibleFilterError
from ansible_collections.kimi.deploy.plugins.module_utils._clients import client_policy

NAME_RE = re.compile(r"[a-z0-9_-]+")
KEY_RE = re.compile(r"[A-Za-z0-9._~+/=-]{32,}")
# What the metrics keys map to: a value no client name can take (a dot), so the client routes never match it.
METRICS_ID = "metrics.scraper"
# The placeholders the map sets. A plain {name} destination: {vars.x} silently never mapped in 2.6 (CADDY.md P2).
CLIENT_PLACEHOLDER = "http.auth.user.id"
KEY_RULE = "at least 32 characters from A-Z a-z 0-9 . _ ~ + / = - (e.g. from: openssl rand -hex 32)"


def _kind(value):
    """The plain type name (Ansible passes tagged subclasses such as _AnsibleTaggedStr)."""
    for types, name in ((str, "str"), (dict, "dict"), ((list, tuple), "list"), (bool, "bool"), (int, "int")):
        if isinstance(value, types):
            return name
    return type(value).__name__


def _err(message):
    return AnsibleFilterError("kimi.deploy.caddy_clients: " + message)


def _keys(value, where):
    if isinstance(value, str) or not isinstance(value, (list, tuple)):
        raise _err("%s must be a list of keys (got a %s, not a list): a string would be read as one key per "
                   "character. Keep keys in a vault, as a YAML list." % (where, _kind(value)))
    for index, key in enumerate(value):
        if not isinstance(key, str) or KEY_RE.fullmatch(key) is None:
            raise _err("%s[%d] is not a usable key: it needs %s. Keep keys in a vault." % (where, index, KEY_RULE))
    return list(value)


def caddy_key(key, variable):
    """One key by the key rule (KEY_RE), for a key that is not a client's: the peer cache's. Returns it."""
    if not isinstance(key, str) or KEY_RE.fullmatch(key) is None:
        raise _err("%s is not a usable key: it needs %s. Keep it in a vault, or leave it unset where a default is "
                   "generated." % (variable, KEY_RULE))
    return key


def caddy_clients(clients, legacy_keys=None, metrics_keys=None, published_digests=None):
    clients = clients or []
    legacy_keys = legacy_keys or []
    if isinstance(clients, str) or not isinstance(clients, (list, tuple)):
        raise _err("caddy_proxy_clients must be a list of {name, keys}, got a %s" % _kind(clients))
    legacy_keys = _keys(legacy_keys, "caddy_proxy_api_keys")
    if clients and legacy_keys:
        raise _err("set caddy_proxy_clients or the deprecated caddy_proxy_api_keys, not both: move the old keys into "
                   "a client of caddy_proxy_clients (e.g. {name: default, keys: [...]}) and empty caddy_proxy_api_keys")
    legacy = bool(legacy_keys)
    if legacy:
        clients = [{"name": "default", "keys": legacy_keys}]
    if not clients:
        raise _err("no client: set caddy_proxy_clients to at least one {name, keys} (keys from your vault)")

    normalized = []
    owner = {}
    for index, client in enumerate(clients):
        where = "caddy_proxy_api_keys" if legacy else "caddy_proxy_clients[%d]" % index
        if not isinstance(client, dict):
            raise _err("%s must be a dict with the keys name and keys, got %s" % (where, _kind(client)))
        policy, refused = client_policy(client, where)
        if refused:
            raise _err(refused)
        name = client["name"]
        if not isinstance(name, str) or NAME_RE.fullmatch(name) is None:
            raise _err("%s.name=%r is not allowed: a client name matches ^[a-z0-9_-]+$ (the access log and the "
                       "X-LLM-Client header show it)" % (where, name))
        if name in [c["name"] for c in normalized]:
            raise _err("client name %r is used twice" % name)
        keys = _keys(client["keys"], "%s (client %s).keys" % (where, name))
        if not 1 <= len(keys) <= 2:
            raise _err("client %s has %d keys: give one, or two while it rotates to a new one" % (name, len(keys)))
        for position, key in enumerate(keys):
            if key in owner:
                raise _err("client %s key %d is also %s: a key belongs to one client, so the log names who used it"
                           % (name, position + 1, owner[key]))
            owner[key] = "client %s key %d" % (name, position + 1)
        normalized.append(dict(policy, name=name, keys=keys))

    metrics = _keys(metrics_keys or [], "caddy_proxy_metrics_keys")
    for position, key in enumerate(metrics):
        if key in owner:
            raise _err("caddy_proxy_metrics_keys[%d] is also %s: the metrics key must only read /metrics"
                       % (position, owner[key]))
        owner[key] = "caddy_proxy_metrics_keys[%d]" % position

    digests = set(published_digests or [])
    for key, where in owner.items():
        if hashlib.sha256(key.encode("utf-8")).hexdigest() in digests:
            raise _err("%s is a key published in this repository's example inventory (inventories/example, whose "
                       "vault password is public too): anyone could use it. Generate your own (openssl rand -hex 32) "
                       "and keep it in your vault." % where)
    return {"clients": normalized, "metrics_keys": metrics, "legacy": legacy}


def caddy_key_map(checked):
    """The Caddyfile snippet the site imports: one map from the exact Authorization header to the client name.

    Exact string match: a lowercase scheme, Basic, an empty bearer or a key prefix map to the default "", which the
    site's positive match (a client name) does not accept, so it fails closed."""
    if not isinstance(checked, dict) or "clients" not in checked:
        raise _err("caddy_key_map takes the output of caddy_clients")
    lines = [
        "# Managed by Ansible (kimi.deploy.caddy_proxy). Mode 0640 root:caddy: it holds the API keys.",
        "# Authorization header -> client name ({%s}); the access log records the name as user_id." % CLIENT_PLACEHOLDER,
        "map {http.request.header.Authorization} {%s} {" % CLIENT_PLACEHOLDER,
    ]
    for client in checked["clients"]:
        for position, key in enumerate(client["keys"]):
            lines.append('\t"Bearer %s" %s  # key %d' % (key, client["name"], position + 1))
    for key in checked.get("metrics_keys", []):
        lines.append('\t"Bearer %s" %s' % (key, METRICS_ID))
    lines.append('\tdefault ""')
    lines.append("}")
    return "\n".join(lines) + "\n"


class FilterModule(object):
    def filters(self):
        return {"caddy_clients": caddy_clients, "caddy_key_map": caddy_key_map, "caddy_key": caddy_key}
