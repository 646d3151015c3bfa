# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""What a client key's entry may carry besides its name and keys: a priority class and limits. Private to kimi.deploy.

The one rule for both readers: the caddy_clients filter (caddy_proxy, every host) and the fleet gateway's resolution
(kimi.deploy.gateway, in site.yml's preflight and the plan), which turns them into the gateway's admission and rate
limits per key name. Nothing here sees a key.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# interactive: admitted ahead of batch when the gateway's slots are short; batch: waits behind it.
PRIORITIES = ("interactive", "batch")
# limits: the most a key may use; a request past one is answered 429 with Retry-After.
LIMITS = {"requests_per_minute": "requests a minute", "tokens_per_minute": "tokens a minute (prompt and completion)",
          "concurrent": "requests at once"}
FIELDS = ("name", "keys", "priority", "limits")


def client_policy(client, where):
    """({priority, limits} of the client entry `client`, None) or (None, the reason it is refused, naming `where`)."""
    unknown = sorted(set(client) - set(FIELDS))
    if unknown or not {"name", "keys"} <= set(client):
        return None, ("%s must be a dict with the keys name and keys, and optionally priority and limits, got %s"
                      % (where, sorted(client)))
    priority = client.get("priority")
    if priority is not None and priority not in PRIORITIES:
        return None, "%s.priority=%r is not allowed. Allowed values: %s" % (where, priority, ", ".join(PRIORITIES))
    limits = client.get("limits")
    if limits is None:
        limits = {}
    if not isinstance(limits, dict):
        return None, "%s.limits must be a dict of %s, got %r" % (where, ", ".join(LIMITS), limits)
    for name in sorted(limits):
        value = limits[name]
        if name not in LIMITS:
            return None, "%s.limits.%s is not allowed. Allowed keys: %s" % (where, name, ", ".join(LIMITS))
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            return None, "%s.limits.%s=%r is not allowed: a whole number of %s, at least 1" % (
                where, name, value, LIMITS[name])
    return {"priority": priority, "limits": dict((k, int(v)) for k, v in sorted(limits.items()))}, None
