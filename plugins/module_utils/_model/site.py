# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""A host's site variables as the deployment model's inputs, and the groups it serves in (stdlib only). Private to
kimi.deploy.

The site inputs are declared once, in _model.site_inputs.INPUTS (the map to the resolver's fields,
_model.inputs.VARIABLES, is derived from it); this module reads them for one host, and derives what only the inventory
knows: the hosts of its replica (kimi_replica: members in inventory order, the first is the head) and of its
disaggregated deployment (kimi_pd, each host with its kimi_pd_role). `get(host, variable)` returns a host's value of a
variable, or MISSING.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.kimi.deploy.plugins.module_utils._model.models import QUANTS
from ansible_collections.kimi.deploy.plugins.module_utils._model.inputs import VARIABLES, is_unset
from ansible_collections.kimi.deploy.plugins.module_utils._model.kv_offload import memory_bytes_from_facts
from ansible_collections.kimi.deploy.plugins.module_utils._model.pd import layout_mismatch
from ansible_collections.kimi.deploy.plugins.module_utils._model.platforms import DEFAULT, ORDER, PLATFORMS
from ansible_collections.kimi.deploy.plugins.module_utils._model.site_inputs import INPUTS, by_variable, check_input

MISSING = object()

# Input fields read as the variable of the same field (the table's read="field"); unset, the table's default (None:
# derived by the model).
FIELDS = dict((item.field, item.default) for item in INPUTS if item.read == "field")
# The disaggregated deployment's settings (read="pd"): input pd.<key> from the variable of field pd_<key>.
PD_SETTINGS = dict((item.field[len("pd_"):], item.default) for item in INPUTS if item.read == "pd")
# The accelerator lists the platforms' facts modules set (each entry's `facts`), the last platform of ORDER first: the
# playbooks read a platform only where the ones before it found none (tasks/read_accelerators.yml), so a later list
# that is set is what the host has (a host with NPUs is an Ascend host).
ACCELERATOR_FACTS = tuple(PLATFORMS[name]["facts"] for name in reversed(ORDER))
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
    """What the model reads of one host of a disaggregated deployment (_model.pd._members validates it)."""
    devices = value(get, host, VARIABLES["pd_rdma_devices"])
    if devices is None:  # what kimi.deploy.rdma_facts read on that host
        devices = (value(get, host, "ansible_facts") or {}).get("rdma_devices") or []
    return {"host": host, "role": value(get, host, VARIABLES["pd_role"]),
            "address": value(get, host, VARIABLES["pd_address"]) or value(get, host, "ansible_host") or host,
            "replica": value(get, host, "kimi_replica"), "port": value(get, host, VARIABLES["port"]),
            "rdma_devices": devices}


def replica_read_rate(get, replica):
    """The slowest weights disk of a replica's hosts (kimi_weights_read_mbps; _model/loader picks the weight loader from
    it): one figure for every member, so that they pick one loader, as one engine must. A member not measured leaves
    the replica without a figure (the default loader)."""
    rates = [value(get, h, VARIABLES["weights_read_mbps"]) for h in replica]
    if any(is_unset(r) for r in rates):
        return None
    numbers = []
    for rate in rates:
        try:
            numbers.append(float(rate))
        except (TypeError, ValueError):
            return rate  # not a number: the loader's check refuses it, naming the variable
    return min(numbers)


def fleet_address(get, host, replica):
    """Where the gateways reach `host`'s instance: its replica head's kimi_fleet_address, else ansible_host, else
    the head's name."""
    head = replica[0] if replica else host
    return value(get, head, VARIABLES["fleet_address"]) or value(get, head, "ansible_host") or head


def inputs(get, host, replica, pd, plan_hosts=None, pd_plan=None, gateways=None):
    """The resolver's inputs for `host`, the hosts of its replica and of its disaggregated deployment given
    (replica_members, pd_members). plan_hosts and pd_plan are plan.yml's previews (a replica of N example hosts; a
    1P1D-style disaggregated deployment) for a host that is in no such group. gateways: the hosts of kimi_gateways
    (the engine then listens on the fleet address)."""
    out = dict((field, value(get, host, VARIABLES[field], default)) for field, default in FIELDS.items())
    if gateways and get(host, "kimi_pd") is MISSING:
        out["fleet_address"] = fleet_address(get, host, replica)
        out["gateways"] = list(gateways)
    if out["image"] is None:
        out["image"] = value(get, host, OLD_IMAGE)
    # The host's RAM (ansible_memtotal_mb, read in site.yml's preflight): what sizes the KV host tier.
    out["host_memory_bytes"] = memory_bytes_from_facts(value(get, host, "ansible_facts"))
    out["revisions"] = dict((quant, value(get, host, "kimi_%s_revision" % quant)) for quant in QUANTS)
    # The host's NVIDIA driver (gpu_facts reads it from nvidia-smi): a model's image floor is judged against it before
    # any host changes. nvidia_host_replace_driver lets nvidia_host replace it first: then judged after the host
    # stage, where site.yml resolves again (kimi_site_after_host_stage) with the driver it installed.
    out["driver_version"] = driver_version(value(get, host, "ansible_facts"))
    out["driver_branch"] = value(get, host, "nvidia_host_driver_branch")  # the branch nvidia_host installs, if set
    out["driver_upgrade"] = (truthy(value(get, host, "nvidia_host_replace_driver"))
                             and not truthy(value(get, host, "kimi_site_after_host_stage")))
    if get(host, "kimi_replica") is not MISSING:
        head = replica[0]
        out["nodes"] = len(replica)
        out["node_rank"] = replica.index(host)
        out["head_address"] = value(get, host, VARIABLES["head_address"]) or value(get, head, "ansible_host") or head
        out["weights_read_mbps"] = replica_read_rate(get, replica)
    elif plan_hosts is not None:
        if isinstance(plan_hosts, str) and plan_hosts.strip().isdigit():  # -e gives a string
            plan_hosts = int(plan_hosts)
        nodes = check_input(by_variable()["kimi_replica_plan_hosts"], plan_hosts)  # the table's rule, its one owner
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


def truthy(flag):
    """An Ansible boolean as inventories and -e give it (true, "yes", "1", ...)."""
    return flag is True or (isinstance(flag, (int, str)) and str(flag).strip().lower() in ("1", "true", "yes", "on"))


def driver_version(facts):
    """The accelerator driver's version the host's facts read (the driver_version of a platform's summary fact), or
    None."""
    for name in ORDER:
        summary = facts.get(PLATFORMS[name]["summary_fact"]) if isinstance(facts, dict) else None
        if isinstance(summary, dict) and summary.get("driver_version"):
            return str(summary["driver_version"])
    return None


def accelerators(get, host):
    """A host's GPU or NPU list: kimi_gpus where given (inventory, -e), else what its facts modules read."""
    given = get(host, "kimi_gpus")
    if given is not MISSING:
        return given or []
    facts = value(get, host, "ansible_facts") or {}
    for name in ACCELERATOR_FACTS:
        if facts.get(name):
            return facts[name]
    return []


# What the hosts of one replica must agree on besides their accelerators, shown when they do not (the command is
# what is compared).
_REPLICA_SHOWN = (("identity", "quant/engine"), ("engine_version", "kimi_engine_version"),
                  ("tp", "kimi_tensor_parallel"), ("pp", "kimi_pipeline_parallel"),
                  ("context_length", "kimi_context_length"), ("kv_cache_dtype", "kimi_kv_cache_dtype"),
                  ("mem_fraction", "kimi_mem_fraction"))
MIB_PER_GIB = 1024.0


def _gib(mib):
    return int(round((mib or 0) / MIB_PER_GIB))


def _architecture(hardware):
    """What a host's accelerators run kernels for: the platform, the family and the compute capability (NVIDIA sm_XY)
    or the chip (Ascend)."""
    return hardware.get("platform"), hardware.get("arch"), hardware.get("sm")


def _per_device_gib(hardware):
    """The memory of one accelerator in GiB: the smallest, and the mean (the same on a host of one model); GiB, not MiB,
    so that a driver's few MiB more or less are not a difference."""
    count = hardware.get("gpu_count") or 0
    return _gib(hardware.get("vram_min_mib")), _gib((hardware.get("vram_total_mib") or 0) / count if count else 0)


# What the ranks of one engine share, in the order a refusal names them: (name, the value compared).
_ACCELERATORS = (("architecture", _architecture),
                 ("model", lambda hardware: sorted(hardware.get("models") or [])),
                 ("memory", _per_device_gib),
                 ("count", lambda hardware: hardware.get("gpu_count")))


def _accelerator_text(hardware):
    """8 x NVIDIA H100 80GB HBM3 (sm_90, 80 GiB each): a host's accelerators as the refusals show them."""
    details = [hardware["sm"]] if hardware.get("sm") else []
    if hardware.get("vram_min_mib"):
        smallest, mean = _per_device_gib(hardware)
        details.append(("%d GiB each" if smallest == mean else "at least %d GiB each") % smallest)
    return "%d x %s%s" % (hardware.get("gpu_count") or 0, "/".join(hardware.get("models") or ["unknown"]),
                          " (%s)" % ", ".join(details) if details else "")


def _listed(words):
    return words[0] if len(words) == 1 else "%s and %s" % (", ".join(words[:-1]), words[-1])


def hardware_differences(first, other):
    """The names of what differs between two hosts' hardware dicts (_deployment's `hardware`): architecture, model,
    memory, count, in that order; [] when they agree."""
    return [name for name, key in _ACCELERATORS if key(other) != key(first)]


def _pd_architecture(hardware):
    """What the KV cache's layout depends on across a disaggregated deployment's instances: the platform and, on NVIDIA,
    the compute capability (the engines pick their attention kernels by it), on Ascend the family."""
    platform = hardware.get("platform")
    traits = PLATFORMS.get(platform) or PLATFORMS[DEFAULT]  # a summary without a platform is the default one's
    return platform, hardware.get(traits["family_key"])


def _pd_hardware(name, first_host, first, known):
    """The hosts of a disaggregated deployment whose accelerators are of another platform or architecture than the
    first host's, as one message, or ''."""
    mine = first.get("hardware")
    if not mine:
        return ""
    differs = ["%s (%s) has %s, %s (%s) %s: %s differs" % (
        host, d["pd"]["role"], _accelerator_text(d["hardware"]), first_host, first["pd"]["role"],
        _accelerator_text(mine), "platform" if d["hardware"].get("platform") != mine.get("platform") else
        "architecture") for host, d in known if _pd_architecture(d["hardware"]) != _pd_architecture(mine)]
    if not differs:
        return ""
    return ("kimi_pd %s: %s. The decode instances read the KV cache the prefill instances "
            "send, as it is sent, and each engine lays it out for the kernels of its own architecture (vLLM picks its "
            "attention backend by compute capability, and its NIXL connector requires the same one on both sides): "
            "every host of a disaggregated deployment needs accelerators of one architecture (their number and memory "
            "may differ between instances; the hosts of one instance's replica need the same ones)."
            % (name, "; ".join(differs)))


def group_disagreement(kind, name, resolved):
    """resolved: [(host, deployment)] of one group (kind "replica" or "pd") in inventory order, each resolved from that
    host's own inputs and facts -> one message naming the hosts that differ from the first (a replica's head), or ''.
    The accelerators are compared first (a replica: model, memory, count and architecture; a disaggregated deployment:
    the architecture), then the command (a replica) or the KV layout (a disaggregated deployment). Hosts whose
    accelerators are not read yet are compared with the others once they are (site.yml resolves again after the host
    stage)."""
    if len(resolved) < 2:
        return ""
    first_host, first = resolved[0]
    known = [(host, d) for host, d in resolved[1:] if bool(d.get("hardware")) == bool(first.get("hardware"))]
    if kind == "pd":
        refused = _pd_hardware(name, first_host, first, known)
        if refused:
            return refused
        mismatch = layout_mismatch([{"host": host, "role": d["pd"]["role"], "layout": d["pd"]["layout"]}
                                    for host, d in [(first_host, first)] + known])
        return "kimi_pd %s: %s." % (name, mismatch) if mismatch else ""
    if first.get("hardware"):
        other_gpus = []
        for host, deployment in known:
            what = hardware_differences(first["hardware"], deployment["hardware"])
            if what:
                other_gpus.append("%s has %s, its head %s %s: %s differ%s" % (
                    host, _accelerator_text(deployment["hardware"]), first_host, _accelerator_text(first["hardware"]),
                    _listed(what), "s" if len(what) == 1 else ""))
        if other_gpus:
            return ("kimi_replica %s: %s. A replica over several hosts is one engine: its ranks run kernels built "
                    "for one architecture, each holds an equal share of the model, and the smallest accelerator's "
                    "memory bounds every rank's KV cache; every host of it needs the same accelerators (model, memory, "
                    "count and architecture): serve the other hosts as replicas of their own." % (name, "; ".join(
                        other_gpus)))
    differs = []
    for host, deployment in known:
        if deployment["member_commands"] != first["member_commands"]:
            what = ["%s %s (%s: %s)" % (label, deployment.get(field), first_host, first.get(field))
                    for field, label in _REPLICA_SHOWN if deployment.get(field) != first.get(field)]
            differs.append("%s resolves another command than its head %s%s" % (
                host, first_host, (": " + ", ".join(what)) if what else " (another site input differs)"))
    if not differs:
        return ""
    return ("kimi_replica %s: %s. A replica over several hosts is one engine: every host of it needs the same GPUs "
            "and the same site inputs (quant, engine, kimi_* settings); set them for the replica, not per host."
            % (name, "; ".join(differs)))
