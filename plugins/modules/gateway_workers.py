#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: gateway_workers
short_description: Take instances out of the fleet gateway's router, put them back, or wait until it lists them
description:
  - Runs on a gateway host against the fleet's router on loopback (SMG, vllm-router) through its worker
    API (C(GET /workers), C(POST /workers), C(DELETE /workers/<id or URL>)), read from the released packages.
  - V(absent) - each worker of O(workers) the router lists is removed, and the module waits until the router no
    longer lists it (SMG applies a removal in the background). A rolling switch runs this before it drains
    an instance, so the gateway sends it nothing new.
  - V(present) - each worker not listed is added, and the module waits until the router lists every one as healthy
    (after the instance passed verify).
  - V(listed) - adds nothing; waits until the router answers and lists every worker as healthy (after a start).
  - V(present) and V(listed) also give each worker its O(max_running_requests) label where SMG lists it without that
    value (C(PATCH /workers/<id>)), and wait until SMG lists it with it.
  - Changed when a worker was added, removed or labelled. In check mode it says what it would do and changes nothing.
version_added: 1.0.0
author: kimi.deploy maintainers (@kimi-deploy)
options:
  router_url:
    description: The router's base URL on this host, e.g. C(http://127.0.0.1:30090).
    type: str
    required: true
  remove_by:
    description:
      - What the router's C(DELETE /workers/...) takes - its worker C(id) (SMG) or the C(url) (vllm-router).
      - V(auto) reads it off the router that runs - its worker list has ids or not - so a switch that also changes the
        fleet's router talks to the one still running.
    type: str
    choices: [auto, id, url]
    default: auto
  workers:
    description: The worker URLs, e.g. C(http://10.0.1.11:30000).
    type: list
    elements: str
    required: true
  state:
    description: absent, present or listed (above).
    type: str
    choices: [absent, present, listed]
    default: present
  max_running_requests:
    description:
      - Worker URL -> the requests its engine runs at once (the fleet gateway's C(workers[].max_running_requests)),
        given to SMG as the worker's C(max_running_requests) label - its slots in SMG's priority scheduler, whose pool
        is their sum. SMG reads that count only off SGLang's C(/server_info) and counts any other worker as 64 slots.
      - A worker added gets it with C(POST /workers); a listed worker without it (one from the router's
        C(--worker-urls) after a start, or with another value) gets it with C(PATCH /workers/<id>), which SMG applies
        in place, the worker staying in the rotation (no restart, no removal). A null count leaves the label alone (an
        SGLang worker's own); a router that lists no worker ids (vllm-router) has no such label and ignores it.
    type: dict
    default: {}
  timeout:
    description: Seconds to wait for the router to apply the change (or, for V(listed), to list every worker).
    type: int
    default: 60
  router_down:
    description:
      - What to do when the router does not answer - V(fail), or V(skip) (nothing to take out of a gateway that
        does not run yet, on a first deployment; the result says so).
    type: str
    choices: [fail, skip]
    default: fail
"""

EXAMPLES = r"""
- name: Take this host's engine out of every gateway before draining it
  kimi.deploy.gateway_workers:
    router_url: http://127.0.0.1:30090
    workers: [http://10.0.1.11:30000]
    state: absent
    router_down: skip
"""

RETURN = r"""
workers:
  description: The router's workers after the change, as [{url, healthy, max_running_requests}] (the label, or
    null).
  returned: when the router answered
  type: list
  elements: dict
added:
  description: The workers added.
  type: list
  elements: str
  returned: always
removed:
  description: The workers removed.
  type: list
  elements: str
  returned: always
labelled:
  description: The workers given their O(max_running_requests) label (added with it, or updated).
  type: list
  elements: str
  returned: always
not_listed:
  description:
    - V(absent) - the workers of O(workers) the router did not list (nothing to take out; a URL the router knows by
      another spelling shows here, not as removed).
  type: list
  elements: str
  returned: always
router_down:
  description: True when the router did not answer and router_down=skip.
  type: bool
  returned: always
"""

import json
import time

from urllib.error import HTTPError, URLError
from urllib.parse import quote
from urllib.request import ProxyHandler, Request, build_opener

from ansible.module_utils.basic import AnsibleModule

# The router is on this host's loopback: never through a proxy from the environment.
OPENER = build_opener(ProxyHandler({}))


class RouterError(Exception):
    pass


def call(base, method, path, body=None):
    data = None if body is None else json.dumps(body).encode()
    request = Request(base.rstrip("/") + path, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with OPENER.open(request, timeout=10) as response:
            text = response.read().decode("utf-8", "replace")
            return response.status, text
    except HTTPError as error:
        return error.code, error.read().decode("utf-8", "replace")


LABEL = "max_running_requests"  # SMG's worker label for its slots (model_gateway/src/worker/worker.rs)


def listed(base):
    """{url: {"id", "healthy", "slots"}} of the router's workers; slots: SMG's max_running_requests label, or None."""
    status, text = call(base, "GET", "/workers")
    if status != 200:
        raise RouterError("GET /workers answered %d: %s" % (status, text[:300]))
    workers = json.loads(text).get("workers") or []
    return dict((w["url"], {"id": w.get("id"), "healthy": w.get("is_healthy", True),
                            "slots": (w.get("labels") or {}).get(LABEL)}) for w in workers)


def unlabelled(current, counts):
    """The listed workers SMG counts otherwise than `counts` says (only a router that lists worker ids takes labels)."""
    return [u for u, n in sorted(counts.items()) if u in current and current[u]["id"] and current[u]["slots"] != str(n)]


def label(base, current, urls, counts):
    """PATCH each worker's label; SMG rebuilds the worker with it in place (update_worker_properties.rs)."""
    for url in urls:
        key = current[url]["id"]
        status, text = call(base, "PATCH", "/workers/" + quote(key, safe=""), {"labels": {LABEL: str(counts[url])}})
        if status not in (200, 202, 204):
            raise RouterError("PATCH /workers/%s answered %d: %s" % (key, status, text[:300]))


def wait(base, until, timeout, what):
    deadline = time.time() + timeout
    while True:
        current = listed(base)
        if until(current):
            return current
        if time.time() >= deadline:
            raise RouterError("the router did not %s within %d s; it lists %s" % (
                what, timeout, ", ".join("%s (%s)" % (u, "healthy" if w["healthy"] else "unhealthy")
                                         for u, w in sorted(current.items())) or "no worker"))
        time.sleep(0.5)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            router_url=dict(type="str", required=True),
            remove_by=dict(type="str", default="auto", choices=["auto", "id", "url"]),
            workers=dict(type="list", elements="str", required=True),
            state=dict(type="str", default="present", choices=["absent", "present", "listed"]),
            max_running_requests=dict(type="dict", default={}),
            timeout=dict(type="int", default=60),
            router_down=dict(type="str", default="fail", choices=["fail", "skip"]),
        ),
        supports_check_mode=True,
    )
    p = module.params
    base, wanted, state = p["router_url"], p["workers"], p["state"]
    try:
        counts = dict((u, int(n)) for u, n in p["max_running_requests"].items() if n is not None and u in wanted)
    except (TypeError, ValueError):
        module.fail_json(msg="max_running_requests takes a whole number (or null) per worker URL, got %r"
                         % p["max_running_requests"])
    out = dict(changed=False, added=[], removed=[], not_listed=[], labelled=[], router_down=False)
    try:
        if state == "listed":
            deadline = time.time() + p["timeout"]
            while True:  # a router that was just (re)started answers after a moment
                try:
                    current = listed(base)
                    break
                except (URLError, OSError, ValueError):
                    if time.time() >= deadline:
                        raise
                    time.sleep(0.5)
            current = wait(base, lambda c: all(u in c and c[u]["healthy"] for u in wanted),
                           max(1, int(deadline - time.time())), "list every worker as healthy")
        else:
            current = listed(base)
            if state == "absent":
                out["removed"] = [u for u in wanted if u in current]
                out["not_listed"] = [u for u in wanted if u not in current]
                if out["removed"] and not module.check_mode:
                    by = p["remove_by"]
                    if by == "auto":
                        by = "id" if all(current[u]["id"] for u in out["removed"]) else "url"
                    for url in out["removed"]:
                        key = current[url]["id"] if by == "id" else url
                        status, text = call(base, "DELETE", "/workers/" + quote(key, safe=""))
                        if status not in (200, 202, 204):
                            raise RouterError("DELETE /workers/%s answered %d: %s" % (key, status, text[:300]))
                    current = wait(base, lambda c: not any(u in c for u in wanted), p["timeout"],
                                   "drop %s" % ", ".join(out["removed"]))
            else:
                out["added"] = [u for u in wanted if u not in current]
                if not module.check_mode:
                    for url in out["added"]:
                        body = {"url": url}
                        if url in counts:  # SMG registers the worker with it: counted right from the start
                            body["labels"] = {LABEL: str(counts[url])}
                        status, text = call(base, "POST", "/workers", body)
                        if status not in (200, 201, 202):
                            raise RouterError("POST /workers %s answered %d: %s" % (url, status, text[:300]))
                    current = wait(base, lambda c: all(u in c and c[u]["healthy"] for u in wanted), p["timeout"],
                                   "list %s as healthy" % ", ".join(wanted))
        if state != "absent":
            # a worker of --worker-urls (after a start) has no label: SMG applies the PATCH in the background
            stale = unlabelled(current, counts)
            if stale and not module.check_mode:
                label(base, current, stale, counts)
                current = wait(base, lambda c: not unlabelled(c, counts), p["timeout"],
                               "list %s with its %s label" % (", ".join(stale), LABEL))
            # said from the router's list (a router without labels, vllm-router, lists none): added with it, or given it
            out["labelled"] = sorted(set(stale) | set(u for u in out["added"] if u in counts and (
                module.check_mode or current[u]["slots"] == str(counts[u]))))
        out["changed"] = bool(out["added"] or out["removed"] or out["labelled"])
        out["workers"] = [{"url": u, "healthy": w["healthy"], "max_running_requests": w["slots"]}
                          for u, w in sorted(current.items())]
    except (URLError, OSError) as error:
        if p["router_down"] == "skip" and state != "listed":
            out["router_down"] = True
            module.exit_json(msg="the gateway's router at %s does not answer (%s): nothing to change" % (base, error),
                             **out)
        module.fail_json(msg="the gateway's router at %s does not answer: %s" % (base, error), **out)
    except (RouterError, ValueError, KeyError) as error:
        module.fail_json(msg="the gateway's router at %s: %s" % (base, error), **out)
    module.exit_json(**out)


if __name__ == "__main__":
    main()
