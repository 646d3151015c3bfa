# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The weight loader of a deployment (`--load-format` and its relatives), chosen from the engine version's offer and
the weights disk's sequential read rate measured in preflight (kimi.deploy.disk_read). Private to kimi.deploy.

An engine version offers loaders in its data entry (versions[v]["loading"]):
  known:      the load formats the release's parser accepts (its choices in the generated flag list where the parser
              has them, else the names its source declares; the data file cites which).
  packages:   format -> (the Python package it imports, True / False / None: the engine's image has it / lacks it /
              not checked). A format whose package the image lacks is refused; one not checked is allowed with a
              warning, never picked by the rule.
  fast:       None, or the loader picked on a fast disk (FAST_READ_MBPS or more): {format (None: the engine's
              default format), extra_config (a dict for --model-loader-extra-config, or None), prefetch_threads
              (SGLang's --weight-loader-prefetch-checkpoints with that many threads per rank, or None), load_strategy
              (vLLM's --safetensors-load-strategy, or None), why}.
  slow:       the same, picked on a slow disk (below SLOW_READ_MBPS: network storage, a SATA disk), or None.
An engine build without "loading" data (TensorRT-LLM, the Ascend builds) offers only its default (`auto`).

The rule, declared once (choose): the user's kimi_load_format wins (checked against the version's formats that read
Kimi's safetensors checkpoint); else a weights disk read at FAST_READ_MBPS or more gets the version's fast loader, one
read below SLOW_READ_MBPS its slow one, where the version offers one; else the engine's default (`auto`: safetensors,
memory-mapped; nothing emitted). The rule has no hysteresis and needs none: the figure it is given is measured once
and kept on the host (disk_read's state_file, kimi_weights_read_test_state) until the folder, its device or the size
read changes or a refresh is asked, so a disk whose rate wanders around a threshold does not flip the loader (and
restart the engine) from one converge to the next.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.kimi.deploy.plugins.module_utils._model.inputs import DeploymentError, fail, is_unset, var

# Sequential MB/s (10^6 bytes) from which a streaming/parallel loader pays: a single NVMe drive reads 3-7 GB/s, a
# RAID0 of several more; a SATA SSD ~0.5 GB/s and network disks less, where the engine's default mmap loader, reading
# each shard as the model asks for it, loses little. A rule of thumb, not a measured crossover (no GPU here).
FAST_READ_MBPS = 2000.0
# Below this the disk is most likely network storage (NFS, Lustre, Ceph) or one SATA disk: reading ahead into the page
# cache, each rank a share of the shards, beats every rank mapping every shard on demand.
SLOW_READ_MBPS = 500.0
TIER_FIELDS = ("extra_config", "prefetch_threads", "load_strategy")
# The load formats that read Kimi-K2.6's checkpoint (safetensors shards); the others (dummy: random weights; pt,
# npcache, gguf, bitsandbytes, sharded_state, tensorizer, mistral, ...) expect another checkpoint layout.
SAFETENSORS_FORMATS = ("auto", "safetensors", "fastsafetensors", "runai_streamer", "instanttensor")
DEFAULT_FORMAT = "auto"


def offer(spec, version):
    """The version's loading data (see the module docstring), or the default-only offer."""
    default_only = {"known": (DEFAULT_FORMAT,), "packages": {}, "fast": None, "slow": None}
    return spec["versions"][version].get("loading") or default_only


def allowed_formats(spec, version):
    """kimi_load_format's allowed values for this engine version, in the declared order."""
    loading = offer(spec, version)
    known = set(loading["known"]) | {DEFAULT_FORMAT}
    lacking = set(f for f, (_package, in_image) in loading["packages"].items() if in_image is False)
    return [f for f in SAFETENSORS_FORMATS if f in known and f not in lacking]


def _read_rate(value):
    """The measured MB/s (a number >= 0), or None when there is no figure."""
    if is_unset(value):
        return None
    try:
        rate = float(value)
    except (TypeError, ValueError):
        raise DeploymentError("%s=%r is not allowed: it is the weights disk's sequential read rate in MB/s (a number, "
                              "set by the preflight's read test, kimi.deploy.disk_read). Allowed values: a number "
                              ">= 0, or unset" % (var("weights_read_mbps"), value))
    if rate < 0:
        fail("weights_read_mbps", value, ["a number >= 0", "unset"])
    return rate


def _tier(loading, rate):
    """(the tier's loader or None, its name) for a measured rate."""
    if rate is None:
        return None, None
    if rate >= FAST_READ_MBPS:
        return loading.get("fast"), "fast"
    if rate < SLOW_READ_MBPS:
        return loading.get("slow"), "slow"
    return None, "middle"


def choose(spec, version, choice=None, read_mbps=None):
    """The loader: {format (None: the engine default, nothing emitted), extra_config, prefetch_threads, load_strategy,
    source ("user", "measured" or "default"), read_mbps, why, warnings}."""
    loading, title = offer(spec, version), "%s %s" % (spec["title"], version)
    rate = _read_rate(read_mbps)
    measured = ("the weights disk reads %.0f MB/s sequentially (preflight read test)" % rate if rate is not None
                else "no read figure for the weights disk (the preflight read test did not run or found nothing to "
                     "read)")
    out = dict({"format": None, "read_mbps": rate, "warnings": []}, **dict((f, None) for f in TIER_FIELDS))
    if not is_unset(choice):
        allowed = allowed_formats(spec, version)
        if choice not in allowed:
            package = loading["packages"].get(choice) or (None, None)
            why = ("%s's image lacks the Python package %s, which it needs" % (title, package[0])
                   if package[1] is False else "%s does not offer it for Kimi-K2.6's safetensors checkpoint" % title)
            fail("load_format", choice, allowed, why)
        # The user's format with the settings the data gives it (e.g. the streamer's concurrency), if any.
        tiers = [t for t in (loading.get("fast"), loading.get("slow")) if t and t["format"] == choice]
        out.update(dict((f, tiers[0].get(f)) for f in TIER_FIELDS) if tiers else {})
        out.update(format=None if choice == DEFAULT_FORMAT else choice, source="user",
                   why="Weight loader: %s=%s, set by the user (%s)." % (var("load_format"), choice, measured))
        package = loading["packages"].get(choice)
        if package and package[1] is None:
            out["warnings"].append(
                "%s=%s: whether %s's image carries the Python package %s was not checked; the engine fails at "
                "start-up without it." % (var("load_format"), choice, title, package[0]))
        return out
    tier, name = _tier(loading, rate)
    if tier:
        out.update(dict((f, tier.get(f)) for f in TIER_FIELDS))
        bound = (">= %.0f" if name == "fast" else "< %.0f") % (FAST_READ_MBPS if name == "fast" else SLOW_READ_MBPS)
        out.update(format=tier["format"], source="measured",
                   why="Weight loader: %s; %s (%s MB/s), so %s (%s=%s picks one)." % (
                       tier["format"] or "the default format", measured, bound, tier["why"], var("load_format"),
                       "|".join(allowed_formats(spec, version))))
        return out
    if rate is None:
        reason = measured
    elif name == "middle":
        reason = "%s, between %.0f and %.0f MB/s, where no other loader is known to gain" % (
            measured, SLOW_READ_MBPS, FAST_READ_MBPS)
    else:
        reason = "%s, but %s offers no other loader for such a disk in its image" % (measured, title)
    out.update(source="default", why="Weight loader: the engine's default (safetensors, memory-mapped): %s." % reason)
    return out


def resolve(ctx):
    """The feature's fragment of the deployment: {"loader": choose()'s loader, "load_format": its format}, its
    warnings and reason added."""
    inputs = ctx["inputs"]
    loader = choose(ctx["spec"], ctx["version"], inputs.get("load_format"), inputs.get("weights_read_mbps"))
    ctx["warnings"].extend(loader.pop("warnings"))
    ctx["reasons"].append(loader["why"])
    return {"loader": loader, "load_format": loader["format"]}
