# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""A host's site variables as the deployment model's inputs, and the groups it serves in (stdlib only). Private to
kimi.deploy.

The one map from the variables users set (inventory or -e) to the resolver's input fields is _inputs.VARIABLES; this
module reads them for one host, and derives what only the inventory knows: the hosts of its replica (kimi_replica:
members in inventory order, the first is the head) and of its disaggregated deployment (kimi_pd, each host with its
kimi_pd_role). `get(host, variable)` returns a host's value of a variable, or MISSING.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import posixpath

from ansible_collections.kimi.deploy.plugins.module_utils._checkpoints import QUANTS
from ansible_collections.kimi.deploy.plugins.module_utils._inputs import VARIABLES, check_int

MISSING = object()

# Input fields read as the variable of the same field in VARIABLES; unset, the value here (None: derived).
FIELDS = {
    "quant": "auto", "engine": "auto", "engine_version": None, "engine_options": {}, "kv_cache_dtype": None,
    "moe_backend": None, "context_length": None, "mem_fraction": None, "tp": None, "host": None, "port": None,
    "served_model_name": None, "extra_args": [], "image": None, "pp": None, "dist_port": None, "speculative": None,
    "speculative_draft": None, "speculative_draft_revision": None, "speculative_tokens": None,
    "speculative_topk": None, "speculative_draft_tokens": None,
}
# The disaggregated deployment's settings: input pd.<key> from the variable of field pd_<key>.
PD_SETTINGS = {"router": None, "transfer_backend": None, "bootstrap_port": None, "router_port": None,
               "router_metrics_port": None, "router_extra_args": []}
# Where a host's RDMA devices are read when kimi_pd_rdma_devices is not set (the find that site.yml registers).
RDMA_FOUND = "_kimi_pd_rdma_found"
# The deprecated name of kimi_engine_image (also the name of the role that builds the NVFP4 image).
OLD_IMAGE = "kimi_image"


def value(get, host, variable, default=None):
    found = get(host, variable)
    return default if found is MISSING else found


def _sharing(get, host, servers, variable):
    """The servers whose `variable` has `host`'s value, in inventory order; None when `host` does not set it."""
    name = get(host, variable)
    return None if name is MISSING else [h for h in servers if get(h, variable) == name]


def replica_members(get, host, servers):
    """The hosts of `host`'s replica in inventory order (the first is the head); a host without kimi_replica is a
    replica of one, itself."""
    return _sharing(get, host, servers, "kimi_replica") or [host]


def pd_members(get, host, servers):
    """The hosts of `host`'s disaggregated deployment in inventory order ([] when it has none)."""
    return _sharing(get, host, servers, "kimi_pd") or []


def pd_member(get, host):
    """What the model reads of one host of a disaggregated deployment (_pd.instances validates it)."""
    devices = value(get, host, VARIABLES["pd_rdma_devices"])
    if devices is None:
        found = (value(get, host, RDMA_FOUND) or {}).get("files") or []
        devices = sorted(posixpath.basename(f["path"]) for f in found)
    return {"host": host, "role": value(get, host, VARIABLES["pd_role"]),
            "address": value(get, host, VARIABLES["pd_address"]) or value(get, host, "ansible_host") or host,
            "replica": value(get, host, "kimi_replica"), "port": value(get, host, VARIABLES["port"]),
            "rdma_devices": devices}


def inputs(get, host, replica, pd, plan_hosts=None, pd_plan=None):
    """The resolver's inputs for `host`, the hosts of its replica and of its disaggregated deployment given
    (replica_members, pd_members). plan_hosts and pd_plan are plan.yml's previews (a replica of N example hosts; a
    1P1D-style disaggregated deployment) for a host that is in no such group."""
    out = dict((field, value(get, host, VARIABLES[field], default)) for field, default in FIELDS.items())
    if out["image"] is None:
        out["image"] = value(get, host, OLD_IMAGE)
    out["revisions"] = dict((quant, value(get, host, "kimi_%s_revision" % quant)) for quant in QUANTS)
    if get(host, "kimi_replica") is not MISSING:
        head = replica[0]
        out["nodes"] = len(replica)
        out["node_rank"] = replica.index(host)
        out["head_address"] = value(get, host, VARIABLES["head_address"]) or value(get, head, "ansible_host") or head
    elif plan_hosts is not None:
        if isinstance(plan_hosts, str) and plan_hosts.strip().isdigit():  # -e gives a string
            plan_hosts = int(plan_hosts)
        nodes = check_int("kimi_replica_plan_hosts", plan_hosts, 1, 16)
        out["nodes"] = nodes
        out["head_address"] = value(get, host, VARIABLES["head_address"]) or (
            "head.replica.example" if nodes > 1 else None)
    settings = dict((key, value(get, host, VARIABLES["pd_" + key], default)) for key, default in PD_SETTINGS.items())
    if get(host, "kimi_pd") is not MISSING:
        out["pd"] = dict(settings, name=value(get, host, "kimi_pd"), me=host,
                         members=[pd_member(get, h) for h in pd])
    elif pd_plan is not None:
        out["pd"] = dict(settings, plan=pd_plan, rdma_devices=value(get, host, VARIABLES["pd_rdma_devices"]))
    return out
