# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""What Huawei's tools say about a host's Ascend NPUs, as data. Private to kimi.deploy (underscore module).

Parsers for `npu-smi info` (the chip table and the process table), the driver's and firmware's version.info files and
the Ascend device nodes; the chip table (chip_of) and the NPU summary (summarize_npus), which the npu_facts module and
the deployment model (through _model.accelerators.summarize) both use. The summary has the keys of
_model.gpu.summarize_gpus (count, models, vram_total_mib, vram_min_mib, arch, arch_name, sm, homogeneous), HBM standing
for VRAM and the chip name for sm, so that the fit and the plan read NPUs and GPUs alike.

Output shapes, from published `npu-smi info` output (tests/doubles/ascend/npu-smi cites each):
- Atlas 800 A2 (Ascend 910B): one chip per NPU, named after the chip ("910B3"), header "Chip | Bus-Id".
- Atlas 800 A3 (Ascend 910C): two chips (dies) per NPU, named "Ascend910", header "Chip  Phy-ID | Bus-Id"; the
  16 chips are the 16 devices (/dev/davinci0-15) that engines count.
Malformed input raises NpuParseError, whose message quotes the offending text.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re


class NpuParseError(ValueError):
    """Output of an Ascend tool that cannot be read. The message quotes the text."""


class NpuListError(ValueError):
    """An NPU list without the specs a summary needs. The message names the NPU and the field."""


# Chip name -> (family, human name, chips per NPU card). The collection's one Ascend table.
CHIP_FAMILIES = (
    # (regex on the chip name, family, human name)
    (r"(Ascend)?910B\d*$", "ascend-a2", "Ascend 910B (Atlas 800 A2)"),
    (r"(Ascend)?910C\d*$|Ascend910(_93\d*)?$", "ascend-a3", "Ascend 910C (Atlas 800 A3)"),
)
STATUSES = ("ok", "no_driver", "no_npu", "no_npu_smi", "error")
# The device nodes every container that uses the NPUs needs besides /dev/davinci<N> (seeds 001 and 004).
CONTROL_DEVICES = ("/dev/davinci_manager", "/dev/devmm_svm", "/dev/hisi_hdc")
DAVINCI_RE = re.compile(r"^davinci(\d+)$")

# What a container that uses the NPUs mounts from the host, read-only (seed 004's `docker run`; seed 001 mounts the
# whole driver folder and runs --privileged, which this collection does not): the DCMI library npu-smi needs, hccn_tool
# (the NPU network's settings), npu-smi, the driver's libraries and version, and the install record.
CONTAINER_MOUNTS = (
    "/usr/local/dcmi",
    "/usr/local/Ascend/driver/tools/hccn_tool",
    "/usr/local/bin/npu-smi",
    "/usr/local/Ascend/driver/lib64",
    "/usr/local/Ascend/driver/version.info",
    "/etc/ascend_install.info",
)
VERSION_PART_RE = re.compile(r"(\d+)|([A-Za-z]+)")

VERSION_LINE_RE = re.compile(r"npu-smi\s+(\S+)\s+Version:\s*(\S+)")
ROW_RE = re.compile(r"^\|(.*)\|(.*)\|(.*)\|\s*$")
USAGE_RE = re.compile(r"(\d+)\s*/\s*(\d+)")
PROCESS_RE = re.compile(r"^\|\s*(\d+)\s+(\d+)\s*\|\s*(\d+)\s*\|\s*(\S.*?)\s*\|\s*(\d+)\s*\|")
NO_PROCESS_RE = re.compile(r"No running processes found in NPU (\d+)")


def _excerpt(text, limit=200):
    text = (text or "").strip()
    return text if len(text) <= limit else text[:limit] + "..."


def chip_of(name):
    """(family, human name) of a chip name as npu-smi prints it ("910B3", "Ascend910"); (None, None) if unknown."""
    name = str(name or "").strip()
    for pattern, family, human in CHIP_FAMILIES:
        if re.match(pattern, name):
            return family, human
    return None, None


def parse_npu_smi_info(text):
    """`npu-smi info` -> {"version": str or None, "chips": [...], "processes": [...]}.

    chips: one dict per chip (the unit engines and /dev/davinci<N> count): npu (card id), chip (chip id on the card),
    phy_id (physical id = device number, or None where npu-smi prints none: A2, where it is the card id), name,
    health, bus_id, hbm_used_mib, hbm_total_mib. processes: npu, chip, pid, name, memory_mib.
    """
    lines = (text or "").splitlines()
    version = None
    chips, processes = [], []
    pending = None
    in_processes = False
    for number, line in enumerate(lines, 1):
        match = VERSION_LINE_RE.search(line)
        if match:
            version = match.group(2)
            continue
        if "Process id" in line:
            in_processes = True
            continue
        if in_processes:
            match = PROCESS_RE.match(line)
            if match:
                processes.append({"npu": int(match.group(1)), "chip": int(match.group(2)), "pid": int(match.group(3)),
                                  "name": match.group(4), "memory_mib": int(match.group(5))})
            continue
        row = ROW_RE.match(line)
        if not row or line.startswith("+"):
            continue
        left, bus, right = (cell.strip() for cell in row.groups())
        first = left.split()
        if not first or not first[0].isdigit():
            continue  # the header rows ("NPU Name", "Chip Phy-ID")
        if pending is None:
            # "| 0     910B3  | OK  | 97.5  41  0 / 0 |": NPU id, chip name, health
            if len(first) < 2:
                raise NpuParseError("npu-smi info line %d: expected '<NPU> <name> | <health> | ...', got %r"
                                    % (number, line.strip()))
            pending = {"npu": int(first[0]), "name": " ".join(first[1:]), "health": bus}
            continue
        # "| 0  [Phy-ID] | 0000:C1:00.0 | 0  0 / 0  3379 / 65536 |": chip id, physical id, bus id, usage
        usages = USAGE_RE.findall(right)
        if not usages:
            raise NpuParseError("npu-smi info line %d: no HBM usage 'used / total' in %r" % (number, line.strip()))
        used, total = usages[-1]
        pending.update({"chip": int(first[0]), "phy_id": int(first[1]) if len(first) > 1 and first[1].isdigit()
                        else None, "bus_id": bus, "hbm_used_mib": int(used), "hbm_total_mib": int(total)})
        chips.append(pending)
        pending = None
    if pending is not None:
        raise NpuParseError("npu-smi info: NPU %d (%s) has no second row (chip, bus id, HBM)"
                            % (pending["npu"], pending["name"]))
    if not chips and text and "NPU" not in text:
        raise NpuParseError("npu-smi info printed no NPU table: %r" % _excerpt(text))
    return {"version": version, "chips": chips, "processes": processes}


def busy_chips(processes):
    """The process table as one line per process, '<npu>/<chip> pid <pid> <name> <MiB> MiB' (the NPU-free wait)."""
    return ["%d/%d pid %d %s %d MiB" % (p["npu"], p["chip"], p["pid"], p["name"], p["memory_mib"]) for p in processes]


def parse_version_info(text):
    """A version.info (`Version=24.1.rc3`, `package_version=...`) -> its key/value pairs, and `version`."""
    values = {}
    for line in (text or "").splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip():
            values[key.strip()] = value.strip()
    values["version"] = values.get("Version") or values.get("package_version") or values.get("version")
    return values


def device_nodes(dev_root="/dev"):
    """{"davinci": [N, ...] sorted, "control": {path: present}} for the Ascend device nodes under dev_root."""
    try:
        entries = os.listdir(dev_root)
    except (IOError, OSError):
        entries = []
    davinci = sorted(int(m.group(1)) for m in (DAVINCI_RE.match(e) for e in entries) if m)
    control = dict((path, os.path.exists(os.path.join(dev_root, os.path.basename(path)))) for path in CONTROL_DEVICES)
    return {"davinci": davinci, "control": control}


def npu_entries(chips):
    """The chip table as the deployment model's accelerator list (the kimi_gpus shape): index (the device number the
    engines and /dev/davinci<N> use), name, chip, platform, memory_mib (HBM), health, bus_id."""
    out = []
    for position, chip in enumerate(chips):
        index = chip["phy_id"] if chip.get("phy_id") is not None else position
        out.append({"index": index, "name": "Ascend %s" % chip["name"] if not chip["name"].startswith("Ascend")
                    else chip["name"], "chip": chip["name"], "platform": "ascend",
                    "memory_mib": chip["hbm_total_mib"], "health": chip["health"], "bus_id": chip["bus_id"],
                    "chips_per_npu": sum(1 for c in chips if c["npu"] == chip["npu"])})
    return sorted(out, key=lambda e: e["index"])


def _chip_family(entry, where):
    name = entry.get("chip") or entry.get("name")
    family, human = chip_of(str(name or "").replace("Ascend ", ""))
    if family is None:
        raise NpuListError("%s has no known Ascend chip (got %r; expected like 910B3, 910C or Ascend910)"
                           % (where, name))
    # npu-smi names the A3's chips "Ascend910", like older 910 (A1) parts: two chips per NPU card tell the A3.
    if str(name).strip() in ("Ascend910", "Ascend 910") and entry.get("chips_per_npu", 2) != 2:
        raise NpuListError("%s is an Ascend910 with %s chip(s) per NPU card: only the Atlas 800 A3 (910C, 2 chips per "
                           "card) and the A2 (910B) are supported" % (where, entry.get("chips_per_npu")))
    return family, human


def summarize_npus(npus):
    """The NPU summary in the shape of _model.gpu.summarize_gpus: count (chips), models, vram_total_mib and vram_min_mib
    (HBM), arch (ascend-a2 / ascend-a3), arch_name, sm (the chip name), compute_caps ([]), homogeneous, platform,
    unhealthy (chips whose health is not OK). Raises NpuListError."""
    names, families, memories, chips, unhealthy = [], set(), [], set(), []
    for position, npu in enumerate(npus or []):
        if not isinstance(npu, dict):
            raise NpuListError("NPU %d must be a dict with name, chip and memory_mib, got %r" % (position, npu))
        where = "NPU %s" % npu.get("index", position)
        families.add(_chip_family(npu, where))
        chips.add(str(npu.get("chip") or npu.get("name")).replace("Ascend ", ""))
        names.append(str(npu.get("name")))
        try:
            memory = int(str(npu.get("memory_mib")).split()[0])
        except (TypeError, ValueError, IndexError):
            raise NpuListError("%s has no usable memory_mib (got %r; expected an integer MiB)"
                               % (where, npu.get("memory_mib")))
        if memory <= 0:
            raise NpuListError("%s has no usable memory_mib (got %r)" % (where, npu.get("memory_mib")))
        memories.append(memory)
        if str(npu.get("health", "OK")).upper() != "OK":
            unhealthy.append("%s: %s" % (where, npu.get("health")))
    families = sorted(families)
    # A mixed pool is judged by its weakest: the A2 sorts before the A3.
    family, human = families[0] if families else (None, None)
    return {
        "count": len(names),
        "models": sorted(set(names)),
        "vram_total_mib": sum(memories),
        "vram_min_mib": min(memories) if memories else 0,
        "compute_caps": [],
        "arch": family,
        "arch_name": human,
        "sm": "/".join(sorted(chips)) if chips else None,
        "homogeneous": len(set(names)) <= 1,
        "platform": "ascend",
        "unhealthy": unhealthy,
    }


def version_key(version):
    """An Ascend version ("24.1.rc3", "24.1.0.3", "7.5.0.1.129", "25.2.1") as a sortable tuple: a release candidate
    sorts before the release of the same number (24.1.rc3 < 24.1.0)."""
    key = []
    for number, word in VERSION_PART_RE.findall(str(version or "")):
        key.append((1, int(number)) if number else (0, -1 if word.lower() == "rc" else 0))
    return tuple(key)


def version_at_least(version, minimum):
    """True when `version` is `minimum` or newer; None when either is unknown (empty)."""
    if not version or not minimum:
        return None
    return version_key(version) >= version_key(minimum)


def container_args(indexes, present=None):
    """The `docker run` arguments that give a container the NPUs `indexes` (/dev/davinci<N>), the control devices and
    the read-only mounts of CONTAINER_MOUNTS; a mount whose source is not in `present` (a set of paths, when given) is
    left out, so that a host without hccn_tool still starts."""
    args = []
    for index in sorted(indexes):
        args += ["--device", "/dev/davinci%d" % index]
    for path in CONTROL_DEVICES:
        args += ["--device", path]
    for path in CONTAINER_MOUNTS:
        if present is None or path in present:
            args += ["-v", "%s:%s:ro" % (path, path)]
    return args
