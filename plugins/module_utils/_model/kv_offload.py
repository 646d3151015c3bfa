# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The KV cache's host-memory tier (kimi_kv_offload, kimi_kv_offload_gb): whether the engine build has one for MLA,
and how large it is on this host. Private to kimi.deploy.

Each engine data file declares `kv_offload` (None, with kv_offload_why naming the source, where the build has no tier
for Kimi-K2.6's MLA): {mechanism: what the plan calls it, split: how the engine divides its size ("replica": one total
over every rank of the replica, vLLM's --kv-offloading-size; "rank": each rank's own pool, SGLang's --hicache-size,
TensorRT-LLM's host_cache_size), unit: the unit its value is written in ("GiB", "GB" or "bytes"), source: where the
release says so, metrics: its hit-rate series}. This module sizes the tier during resolve() (resolve(ctx), a feature
of _model/deployment.py's FEATURES) into deployment["kv_offload"]; the engine files emit their flags from that dict's
resolved `value` (Args with _engines.spec.present("kv_offload") and resolved("kv_offload", "value")) and import
nothing from here.

The sizing rule: the tier is pinned memory that the kernel cannot reclaim, so it gets what is left of the host's RAM
after HOST_RESERVE (the OS, the container, the engine's own processes: the larger of a floor and a share of RAM), the
share of the checkpoint this host loads (weight loading streams it through the page cache, and a fleet switch keeps
the next identity's shards there: kimi_weights' warm stage), and the engine's /dev/shm staging (tmpfs is RAM).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.kimi.deploy.plugins.module_utils._model.checkpoints import (
    GB, GIB, KV_ELEMENT)
from ansible_collections.kimi.deploy.plugins.module_utils._model.memory import kv_bytes_per_token
from ansible_collections.kimi.deploy.plugins.module_utils._model.models import DEFAULT_MODEL, model
from ansible_collections.kimi.deploy.plugins.module_utils._model.constraints import number
from ansible_collections.kimi.deploy.plugins.module_utils._model.inputs import DeploymentError, check_choice, fail, var

CHOICES = ("none", "host")
# What the tier leaves to the host: max(64 GiB, 10% of RAM). The floor is kimi_weights_warm_reserve_bytes (the
# MemAvailable its page-cache warming keeps; a unit test compares them), the share scales it on larger hosts.
HOST_RESERVE = {"floor_bytes": 64 * GIB, "share": 0.10}
MIB = 1024 ** 2


def reserve_bytes(memory_bytes):
    return max(HOST_RESERVE["floor_bytes"], int(memory_bytes * HOST_RESERVE["share"]))


def host_budget(memory_bytes, weights_bytes, nodes, shm_bytes):
    """(the largest tier this host can hold in bytes, the rule as a sentence)."""
    reserve = reserve_bytes(memory_bytes)
    weights = int(weights_bytes / max(nodes, 1))
    room = int(memory_bytes) - reserve - weights - int(shm_bytes or 0)
    why = ("%.0f GiB of RAM less %.0f GiB kept for the host (max(%d GiB, %d%% of RAM)), %.0f GiB of page cache for "
           "this host's share of the checkpoint (weight loading streams it through the page cache)%s" % (
               memory_bytes / GIB, reserve / GIB, HOST_RESERVE["floor_bytes"] // GIB, HOST_RESERVE["share"] * 100,
               weights / GIB, (", %.0f GiB of /dev/shm the engine stages the weights in" % (shm_bytes / GIB))
               if shm_bytes else ""))
    return max(room, 0), why


def _size_gib(value):
    """kimi_kv_offload_gb as its site input's constraint reads it (site_inputs.py: a whole number of GiB from 1)."""
    size = number(value, int)
    if size is None or size < 1:
        fail("kv_offload_gb", value, ["a whole number of GiB >= 1 (the host's total), or unset (sized from the host's "
                                      "memory)"])
    return size


def resolve_kv_offload(inputs, spec, deployment, warnings):
    """deployment["kv_offload"]: None, or {size_bytes (the host's tier), value (the engine's flag value), unit,
    mechanism, ranks_here, tokens (one rank's tier in tokens), why (for the plan), metrics}.

    inputs: kv_offload, kv_offload_gb, host_memory_bytes (Ansible's ansible_memtotal_mb, read by _site); deployment: the
    resolved deployment (engine, tp, pp, dp, nodes, kv_cache_dtype, checkpoint, shm_bytes_required, pd)."""
    mode = inputs.get("kv_offload")
    mode = "none" if mode is None or (isinstance(mode, str) and mode.strip() == "") else mode
    mode = check_choice("kv_offload", str(mode).strip().lower() if isinstance(mode, str) else mode, CHOICES)
    given = inputs.get("kv_offload_gb")
    given = None if given is None or (isinstance(given, str) and given.strip() == "") else _size_gib(given)
    if mode == "none":
        if given is not None:
            warnings.append("%s=%s is ignored: %s is none." % (var("kv_offload_gb"), given, var("kv_offload")))
        return None
    tier = spec.get("kv_offload")
    title = "%s %s" % (spec["title"], deployment["engine_version"])
    if not tier:
        fail("kv_offload", mode, ["none"], "%s has no host-memory KV tier for Kimi-K2.6's MLA attention: %s"
             % (title, spec.get("kv_offload_why", "none is declared")))
    refused = tier.get("refused_versions", {}).get(deployment["engine_version"])
    if refused:
        fail("kv_offload", mode, ["none"], "%s: %s" % (title, refused))
    if deployment.get("pd") and tier.get("pd_why"):
        fail("kv_offload", mode, ["none"], tier["pd_why"])
    nodes = deployment["nodes"]
    ranks = deployment["tp"] * deployment["pp"] * deployment.get("dp", 1)
    ranks_here = max(ranks // max(nodes, 1), 1)
    memory = inputs.get("host_memory_bytes")
    budget, rule = (host_budget(memory, deployment["checkpoint"]["weights_bytes"], nodes,
                                deployment.get("shm_bytes_required")) if memory else (None, None))
    if given is None:
        if budget is None:
            raise DeploymentError(
                "%s=host needs the size of the tier: %s is unset and this host's memory is not known here (no "
                "ansible_memtotal_mb fact; site.yml's preflight reads it). Set %s (GiB for the whole host), or run "
                "site.yml" % (var("kv_offload"), var("kv_offload_gb"), var("kv_offload_gb")))
        size_gib = int(budget // GIB)
        if size_gib < 1:
            fail("kv_offload", mode, ["none"], "this host's memory leaves no room for a host KV tier: %s" % rule)
        why = "sized from the host's memory: %s" % rule
    else:
        size_gib = given
        if budget is not None and given * GIB > budget:
            fail("kv_offload_gb", given, ["1..%d (GiB; or unset: sized from the host's memory)" % (budget // GIB)],
                 "more than this host can pin beside what it needs: %s" % rule)
        why = "set by %s%s" % (var("kv_offload_gb"), "" if budget is not None else (
            " (not checked against the host's memory: no ansible_memtotal_mb fact here; site.yml's preflight "
            "checks it)"))
    size_bytes = size_gib * GIB
    per_rank = size_bytes // ranks_here
    if tier["split"] == "replica":  # one total over every rank of the replica, each host holding its share
        value_bytes = size_bytes * nodes
    else:
        value_bytes = per_rank
    unit = tier["unit"]
    value = {"GiB": lambda b: b // GIB, "GB": lambda b: b // GB, "bytes": lambda b: b}[unit](value_bytes)
    if value < 1:
        fail("kv_offload_gb", size_gib, ["at least %d (GiB)" % (ranks_here * (GB if unit == "GB" else 1) // GIB + 1)],
             "%s sizes each of the %d ranks on this host in whole %s" % (spec["title"], ranks_here, unit))
    # MLA keeps one latent vector per token and layer on every rank; a pipeline stage holds its layers only.
    entry = model((deployment.get("model") or {}).get("name", DEFAULT_MODEL))
    per_token = kv_bytes_per_token(entry, KV_ELEMENT[deployment["kv_cache_dtype"]]) / float(deployment["pp"])
    tokens = int(per_rank // per_token)
    device = (deployment.get("hardware") or {}).get("kv_tokens_estimate")
    if tier.get("host_larger_than_device") and device and tokens <= device:
        warnings.append("%s=%d GiB gives each rank about %d tokens in host memory, no more than its GPU KV pool (about "
                        "%d): %s wants the host pool larger than the device pool (%s); give the tier more, or none."
                        % (var("kv_offload_gb"), size_gib, tokens, device, spec["title"], tier["source"]))
    return {"mode": mode, "size_bytes": size_bytes, "value": str(int(value)), "unit": unit,
            "mechanism": tier["mechanism"], "ranks_here": ranks_here, "tokens": tokens, "metrics": tier["metrics"],
            "why": "KV host tier (%s): %d GiB on this host (%d rank(s), about %d tokens each), %s. Source: %s" % (
                tier["mechanism"], size_gib, ranks_here, tokens, why, tier["source"])}


def resolve(ctx):
    """The feature's fragment of the deployment: {"kv_offload": the tier or None}, its reason added (the plan's)."""
    tier = resolve_kv_offload(ctx["inputs"], ctx["spec"], ctx["deployment"], ctx["warnings"])
    if tier:
        ctx["reasons"].append(tier["why"])
    return {"kv_offload": tier}


def memory_bytes_from_facts(facts):
    """The host's RAM from Ansible's facts (ansible_memtotal_mb, the hardware subset), or None."""
    total = (facts or {}).get("memtotal_mb")
    try:
        return int(total) * MIB if total else None
    except (TypeError, ValueError):
        return None
