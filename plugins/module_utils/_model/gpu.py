# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""What the NVIDIA tools say about a host's GPUs, as data. Private to kimi.deploy (underscore module).

Parsers for `nvidia-smi --query-gpu=... --format=csv,noheader,nounits`, `nvidia-smi topo -m`,
`nvidia-smi --version` and /proc/driver/nvidia/version, readers for sysfs (NVIDIA PCI display devices) and
procfs (a running nvidia-persistenced), and the summary the kimi.deploy.gpu_facts module returns.
Malformed input raises GpuParseError, whose message names the field and quotes the offending text.

Also the collection's one architecture table (arch_of) and its one GPU summary shape (summarize_gpus), which
gpu_facts's summary and the deployment model (_model.deployment.recommend/resolve) both use.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import csv
import os
import re


class GpuParseError(ValueError):
    """Output of an NVIDIA tool that cannot be read. The message names the field and quotes the text."""


class GpuListError(ValueError):
    """A GPU list without the specs a summary needs. The message names the GPU and the field."""


# The --query-gpu fields gpu_facts asks for, in order, and the nvidia_gpus key each one fills.
QUERY_FIELDS = (
    ("index", "index"),
    ("name", "name"),
    ("uuid", "uuid"),
    ("pci.bus_id", "pci_bus_id"),
    ("compute_cap", "compute_cap"),
    ("memory.total", "memory_mib"),
    ("persistence_mode", "persistence_mode"),
    ("driver_version", "driver_version"),
)
QUERY_GPU = ",".join(field for field, _key in QUERY_FIELDS)
FIELD_KEYS = dict(QUERY_FIELDS)
REQUIRED_FIELDS = ("index", "name")
# Keys of every nvidia_gpus entry (driver_version is summary-level only).
GPU_KEYS = ("index", "name", "uuid", "pci_bus_id", "compute_cap", "memory_mib", "persistence_mode")

# nvidia-smi exit codes (NVML return codes) that are states of the host, not failures of the tool.
EXIT_NO_GPU = 6            # "No devices were found"
EXIT_NO_DRIVER = 9         # "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver"
EXIT_LIBRARY_MISSING = 12  # "NVIDIA-SMI couldn't find libnvidia-ml.so library in your system"
EXIT_VERSION_MISMATCH = 18  # "Failed to initialize NVML: Driver/library version mismatch"

# Compute capability -> architecture family (the collection's one table).
ARCH_FAMILIES = (
    # (min cc, max cc (exclusive), family, human name)
    (12.0, 13.0, "blackwell-rtx", "Blackwell RTX PRO / GeForce"),
    # sm_100 (B200, GB200) and Blackwell Ultra's sm_103 (B300 "NVIDIA B300 SXM6 AC", GB300): one family, the same
    # native FP4 kernels (vLLM and SGLang's K3 paths test SM 100 and 103 alike).
    (10.0, 11.0, "blackwell-dc", "datacenter Blackwell (B200/B300)"),
    (9.0, 10.0, "hopper", "Hopper"),
    (8.9, 9.0, "ada", "Ada Lovelace"),
    (8.0, 8.9, "ampere", "Ampere"),
)

STATUSES = ("ok", "no_driver", "no_gpu", "no_nvidia_smi", "error")
INTERCONNECTS = ("nvlink", "pcie", "none")

NVIDIA_PCI_VENDOR = "0x10de"
GPU_PCI_CLASSES = ("0x0300", "0x0302")  # VGA-compatible controller, 3D controller
PERSISTENCED_COMM = "nvidia-persiste"  # /proc/<pid>/comm keeps 15 characters of "nvidia-persistenced"
PERSISTENCED_PID_FILES = ("/run/nvidia-persistenced/nvidia-persistenced.pid",
                          "/var/run/nvidia-persistenced/nvidia-persistenced.pid")

CC_RE = re.compile(r"^\d+\.\d+$")
CC_VALUE_RE = re.compile(r"(\d+)(?:\.(\d))?")  # a compute capability as given: "12.0", 9.0, "9"
INT_RE = re.compile(r"^\d+$")
ANSI_RE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
UNIT_RE = re.compile(r"\s*\[[^\]]*\]$")
NV_RE = re.compile(r"^NV(\d+)$")
GPU_LABEL_RE = re.compile(r"^GPU(\d+)$")
NVRM_RE = re.compile(r"NVRM version:\s*(?P<desc>.*?)\s+(?P<version>\d+\.\d+(?:\.\d+)*)(?:\s|$)")
CUDA_RE = re.compile(r"CUDA Version\s*:?\s*(\d+\.\d+)")
DRIVER_RE = re.compile(r"(?:DRIVER version|Driver Version)\s*:?\s*(\d+\.\d+(?:\.\d+)*)")


def _excerpt(text, limit=200):
    text = (text or "").strip()
    return text if len(text) <= limit else text[:limit] + "..."


def _unavailable(value):
    """nvidia-smi spells a missing value "[N/A]", "N/A", "[Not Supported]", "[Unknown Error]", ..."""
    return value == "" or value == "N/A" or (value.startswith("[") and value.endswith("]"))


# ---------------------------------------------------------------------------------------------------
# nvidia-smi --query-gpu
# ---------------------------------------------------------------------------------------------------

def _header_fields(row):
    """A header row ("index, name, memory.total [MiB]") -> field names, or None if the row is data."""
    names = [UNIT_RE.sub("", cell.strip()) for cell in row]
    if "index" in names or "name" in names:
        if not any(INT_RE.match(cell.strip()) for cell in row):
            return names
    return None


def _strip_unit(value):
    """A value printed without nounits ("81559 MiB") -> "81559"."""
    parts = value.split()
    if len(parts) == 2 and parts[1] in ("MiB", "W", "%", "MHz", "C"):
        return parts[0]
    return value


def _gpu_value(field, raw, row_number):
    value = _strip_unit(raw.strip())
    if _unavailable(value):
        if field in REQUIRED_FIELDS:
            raise GpuParseError("nvidia-smi --query-gpu row %d: field %r is unavailable (%r)" % (row_number, field, raw))
        return None
    if field == "index":
        if not INT_RE.match(value):
            raise GpuParseError("nvidia-smi --query-gpu row %d: field 'index' is not an integer: %r" % (row_number, raw))
        return int(value)
    if field == "memory.total":
        if not INT_RE.match(value):
            raise GpuParseError("nvidia-smi --query-gpu row %d: field 'memory.total' is not a number of MiB: %r"
                                % (row_number, raw))
        return int(value)
    if field == "compute_cap":
        if not CC_RE.match(value):
            raise GpuParseError("nvidia-smi --query-gpu row %d: field 'compute_cap' is not like '9.0': %r"
                                % (row_number, raw))
    return value


def parse_query_gpu(text, fields=None):
    """Rows of `nvidia-smi --query-gpu=FIELDS --format=csv,noheader,nounits` -> list of GPU dicts.

    `fields` defaults to QUERY_GPU's fields. A header row, if present, names the fields instead (so the
    `--format=csv` spelling, with units, reads too). Each dict has the keys of the fields asked for
    (index, name, uuid, pci_bus_id, compute_cap, memory_mib, persistence_mode, driver_version); values
    nvidia-smi reports as unavailable are None. Sorted by index. Raises GpuParseError on rows with a
    wrong number of columns, unusable index/memory.total/compute_cap values, or duplicate indexes.
    """
    if fields is None:
        fields = [field for field, _key in QUERY_FIELDS]
    fields = list(fields)
    rows = [row for row in csv.reader((text or "").splitlines(), skipinitialspace=True) if any(c.strip() for c in row)]
    if rows:
        header = _header_fields(rows[0])
        if header is not None:
            fields = header
            rows = rows[1:]
    for required in REQUIRED_FIELDS:
        if required not in fields:
            raise GpuParseError("nvidia-smi --query-gpu output has no %r column (fields: %s)"
                                % (required, ", ".join(fields)))
    gpus = []
    seen = set()
    for number, row in enumerate(rows, 1):
        if len(row) != len(fields):
            raise GpuParseError("nvidia-smi --query-gpu row %d has %d fields, expected %d (%s): %r"
                                % (number, len(row), len(fields), ", ".join(fields), _excerpt(", ".join(row))))
        gpu = {}
        for field, raw in zip(fields, row):
            gpu[FIELD_KEYS.get(field, field.replace(".", "_"))] = _gpu_value(field, raw, number)
        if gpu["index"] in seen:
            raise GpuParseError("nvidia-smi --query-gpu row %d: field 'index' repeats GPU %d" % (number, gpu["index"]))
        seen.add(gpu["index"])
        gpus.append(gpu)
    gpus.sort(key=lambda g: g["index"])
    return gpus


def gpu_entries(gpus):
    """Parsed rows -> nvidia_gpus entries: exactly GPU_KEYS, in that order (missing fields are None)."""
    return [dict((key, gpu.get(key)) for key in GPU_KEYS) for gpu in gpus]


def driver_version_of(gpus):
    """The driver version the rows report (one per host), or None."""
    versions = sorted(set(g.get("driver_version") for g in gpus if g.get("driver_version")))
    if len(versions) > 1:
        raise GpuParseError("nvidia-smi --query-gpu: field 'driver_version' differs between GPUs: %s" % ", ".join(versions))
    return versions[0] if versions else None


# ---------------------------------------------------------------------------------------------------
# Other nvidia-smi outputs and exit codes
# ---------------------------------------------------------------------------------------------------

def classify_failure(rc, stdout, stderr=""):
    """A failed nvidia-smi call -> (status, message) for states of the host, or None for a real failure.

    "no_driver": the kernel driver does not answer (exit 9); "no_gpu": no devices (exit 6);
    "error": NVML is there but unusable (exit 18, version mismatch after an upgrade: reboot; exit 12,
    libnvidia-ml missing: reinstall the driver's user-space packages).
    """
    text = "%s\n%s" % (stdout or "", stderr or "")
    first = _excerpt(text, 300)
    if rc == EXIT_NO_DRIVER or "couldn't communicate with the NVIDIA driver" in text:
        return "no_driver", "nvidia-smi cannot talk to the NVIDIA driver (exit %s)" % rc
    if rc == EXIT_NO_GPU or "No devices were found" in text:
        return "no_gpu", "nvidia-smi found no GPU (exit %s: No devices were found)" % rc
    if rc == EXIT_VERSION_MISMATCH or "version mismatch" in text:
        return "error", ("nvidia-smi cannot initialize NVML (exit %s: %s); the loaded kernel module and the installed "
                         "driver libraries differ, reboot (or reload the nvidia modules) after a driver change" % (rc, first))
    if rc == EXIT_LIBRARY_MISSING or "couldn't find libnvidia-ml.so" in text:
        return "error", ("nvidia-smi cannot find NVML (exit %s: %s); the driver's user-space libraries are missing"
                         % (rc, first))
    return None


def parse_cuda_version(text):
    """`nvidia-smi --version` (or the plain table's header) -> the CUDA version the driver supports, or None."""
    match = CUDA_RE.search(text or "")
    return match.group(1) if match else None


def parse_proc_version(text):
    """/proc/driver/nvidia/version -> {"driver_version": "580.95.05", "open_kernel_module": True}.

    "NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  Release Build ..." is the open module,
    "NVIDIA UNIX x86_64 Kernel Module  535.183.01  ..." the proprietary one. Empty text -> None values.
    Raises GpuParseError if there is text but no NVRM version line.
    """
    if not (text or "").strip():
        return {"driver_version": None, "open_kernel_module": None}
    for line in text.splitlines():
        match = NVRM_RE.search(line)
        if match:
            return {"driver_version": match.group("version"),
                    "open_kernel_module": "open kernel module" in match.group("desc").lower()}
    raise GpuParseError("/proc/driver/nvidia/version has no 'NVRM version: ... <driver version>' line: %r" % _excerpt(text))


def parse_topology(text):
    """`nvidia-smi topo -m` -> {"gpus": N, "interconnect": ..., "nvlink_links": int, "nvlink_all_pairs": bool}.

    interconnect: "nvlink" if any GPU pair's cell is NV# (a bonded set of # NVLinks, direct or through
    NVSwitch), "pcie" if GPUs are connected only through PCIe/the CPU (X, PIX, PXB, PHB, NODE, SYS),
    "none" for a single GPU (nothing to connect). nvlink_links: the largest NV# between two GPUs (links per
    GPU pair; 18 on an H100/H200 HGX board), 0 without NVLink. nvlink_all_pairs: every GPU pair is NV#.
    NIC columns and rows are ignored. Raises GpuParseError without a GPU header, or on a short or missing row.
    """
    lines = [ANSI_RE.sub("", line).rstrip() for line in (text or "").splitlines()]
    columns = None
    rows = {}
    for line in lines:
        tokens = line.split()
        if not tokens:
            continue
        if columns is None:
            if "GPU0" in tokens and "X" not in tokens:  # every GPU row has its X (self) cell
                columns = [t for t in tokens if GPU_LABEL_RE.match(t)]
            continue
        label = GPU_LABEL_RE.match(tokens[0])
        if label:
            cells = tokens[1:1 + len(columns)]
            if len(cells) < len(columns):
                raise GpuParseError("nvidia-smi topo -m: row %s has %d GPU cells, expected %d: %r"
                                    % (tokens[0], len(cells), len(columns), _excerpt(line)))
            rows[tokens[0]] = cells
        elif line.startswith("Legend"):
            break
    if not columns:
        raise GpuParseError("nvidia-smi topo -m: no header row naming GPU0: %r" % _excerpt(text))
    links = []
    pairs = 0
    for i, row_label in enumerate(columns):
        if row_label not in rows:
            raise GpuParseError("nvidia-smi topo -m: no row for %s" % row_label)
        for j in range(i + 1, len(columns)):
            pairs += 1
            match = NV_RE.match(rows[row_label][j])
            if match:
                links.append(int(match.group(1)))
    if len(columns) == 1:
        interconnect = "none"
    elif links:
        interconnect = "nvlink"
    else:
        interconnect = "pcie"
    return {"gpus": len(columns), "interconnect": interconnect, "nvlink_links": max(links) if links else 0,
            "nvlink_all_pairs": bool(pairs) and len(links) == pairs}


# ---------------------------------------------------------------------------------------------------
# sysfs and procfs
# ---------------------------------------------------------------------------------------------------

def _read(path):
    try:
        with open(path) as handle:
            return handle.read()
    except (IOError, OSError, UnicodeDecodeError):
        return None


def pci_gpus(sys_root="/sys"):
    """PCI addresses of NVIDIA display/3D controllers under SYS_ROOT/bus/pci/devices (no driver needed)."""
    base = os.path.join(sys_root, "bus", "pci", "devices")
    try:
        names = sorted(os.listdir(base))
    except (IOError, OSError):
        return []
    found = []
    for name in names:
        vendor = (_read(os.path.join(base, name, "vendor")) or "").strip().lower()
        klass = (_read(os.path.join(base, name, "class")) or "").strip().lower()
        if vendor == NVIDIA_PCI_VENDOR and klass.startswith(GPU_PCI_CLASSES):
            found.append(name)
    return found


def _alive(proc_root, pid):
    stat = _read(os.path.join(proc_root, str(pid), "stat"))
    if stat is None:
        return os.path.isdir(os.path.join(proc_root, str(pid)))
    # "pid (comm) S ...": the state follows the last ')'; zombies do not count.
    return stat.rpartition(")")[2].split()[:1] != ["Z"]


def persistenced_active(proc_root="/proc", pid_files=PERSISTENCED_PID_FILES):
    """True if an nvidia-persistenced process runs: a PROC_ROOT/<pid>/comm names it, or a pid file
    names a live PROC_ROOT/<pid>. No systemctl: hosts and containers without systemd answer too."""
    for pid_file in pid_files:
        pid = (_read(pid_file) or "").strip()
        if INT_RE.match(pid) and _alive(proc_root, pid):
            return True
    try:
        entries = os.listdir(proc_root)
    except (IOError, OSError):
        return False
    for entry in entries:
        if not INT_RE.match(entry):
            continue
        comm = (_read(os.path.join(proc_root, entry, "comm")) or "").strip()
        if comm.startswith(PERSISTENCED_COMM) and _alive(proc_root, entry):
            return True
    return False


# ---------------------------------------------------------------------------------------------------
# Summary
# ---------------------------------------------------------------------------------------------------

def arch_of(compute_cap):
    """Family, human name and sm string for a compute capability such as 12.0 or "9.0"."""
    major, minor = _cc_pair(compute_cap, "compute_cap")
    number = major + minor / 10.0
    for low, high, family, human in ARCH_FAMILIES:
        if low <= number < high:
            break
    else:
        family, human = "unsupported", "pre-Ampere or unknown"
    return {"family": family, "name": human, "sm": "sm_%d%d" % (major, minor)}


def _cc_pair(raw, where):
    match = CC_VALUE_RE.fullmatch(str(raw).strip()) if raw is not None and not isinstance(raw, bool) else None
    if not match:
        raise GpuListError("%s has no usable compute_cap (got %r; expected like '12.0')" % (where, raw))
    return int(match.group(1)), int(match.group(2) or 0)


def _memory_mib(raw, where):
    """memory_mib as a number of MiB; nvidia-smi's "97887 MiB" spelling reads too."""
    try:
        value = int(str(raw).split()[0]) if not isinstance(raw, bool) else 0
    except (TypeError, ValueError, IndexError):
        raise GpuListError("%s has no usable memory_mib (got %r; expected an integer MiB)" % (where, raw))
    if value <= 0:
        raise GpuListError("%s has no usable memory_mib (got %r)" % (where, raw))
    return value


def summarize_gpus(gpus, require_specs=True):
    """The collection's one GPU summary: count, models, vram_total_mib, vram_min_mib, compute_caps, arch,
    arch_name, sm, homogeneous. A mixed pool is judged by its weakest GPU (arch, sm, vram_min_mib).

    `gpus`: dicts with name, compute_cap and memory_mib (nvidia_gpus entries, or the kimi_gpus input).
    require_specs: every GPU must have a usable compute_cap and memory_mib (the deployment model);
    False skips the ones nvidia-smi reports as unavailable (None), as gpu_facts does. Raises GpuListError.
    """
    if gpus is None:
        gpus = []
    if not isinstance(gpus, (list, tuple)):
        raise GpuListError("GPU list must be a list of dicts with name, compute_cap and memory_mib, got %s"
                           % type(gpus).__name__)
    names, caps, memories = [], set(), []
    for position, gpu in enumerate(gpus):
        if not isinstance(gpu, dict):
            raise GpuListError("GPU %d must be a dict with name, compute_cap and memory_mib, got %r" % (position, gpu))
        where = "GPU %s" % gpu.get("index", position)
        names.append(str(gpu.get("name", "unknown GPU")))
        if require_specs or gpu.get("compute_cap") is not None:
            caps.add(_cc_pair(gpu.get("compute_cap"), where))
        if require_specs or gpu.get("memory_mib") is not None:
            memories.append(_memory_mib(gpu.get("memory_mib"), where))
    caps = sorted(caps)
    models = sorted(set(names))
    arch = arch_of("%d.%d" % caps[0]) if caps else None
    return {
        "count": len(names),
        "models": models,
        "vram_total_mib": sum(memories),
        "vram_min_mib": min(memories) if memories else 0,
        "compute_caps": ["%d.%d" % cap for cap in caps],
        "arch": arch["family"] if arch else None,
        "arch_name": arch["name"] if arch else None,
        "sm": arch["sm"] if arch else None,
        "homogeneous": len(models) <= 1 and len(caps) <= 1,
    }


def summarize(gpus, status="ok", message=None, driver_loaded=None, nvidia_smi_found=True, driver_version=None,
              cuda_version=None, open_kernel_module=None, persistenced=False, topology=None, pci_addresses=()):
    """nvidia_gpu_summary: summarize_gpus's keys and the driver, topology and PCI keys, every key always present
    (see the gpu_facts module's RETURN for their meaning)."""
    if status not in STATUSES:
        raise ValueError("status must be one of %s, got %r" % (", ".join(STATUSES), status))
    gpus = list(gpus or [])
    if topology is not None:
        interconnect, links, all_pairs = topology["interconnect"], topology["nvlink_links"], topology["nvlink_all_pairs"]
    elif len(gpus) == 1:
        interconnect, links, all_pairs = "none", 0, False
    else:
        interconnect, links, all_pairs = None, 0, False
    if driver_loaded is None:
        driver_loaded = status in ("ok", "no_gpu")
    summary = summarize_gpus(gpus, require_specs=False)
    summary.update({
        "status": status,
        "message": message,
        "driver_loaded": bool(driver_loaded),
        "nvidia_smi_found": bool(nvidia_smi_found),
        "driver_version": driver_version,
        "cuda_version": cuda_version,
        "open_kernel_module": open_kernel_module,
        "persistence_mode_all": bool(gpus) and all(g.get("persistence_mode") == "Enabled" for g in gpus),
        "persistenced_active": bool(persistenced),
        "interconnect": interconnect,
        "nvlink_links": links,
        "nvlink_all_pairs": all_pairs,
        "pci_gpu_count": len(pci_addresses),
        "pci_gpus": list(pci_addresses),
    })
    if summary["message"] is None:
        summary["message"] = describe(summary)
    return summary


def describe(summary):
    """A sentence for an "ok" summary: '8 x NVIDIA H200 (hopper, sm_90, 143771 MiB each), driver ...'."""
    if not summary["count"]:
        return "no GPU reported"
    if summary["homogeneous"]:
        what = "%d x %s" % (summary["count"], summary["models"][0])
    else:
        what = "%d GPUs (mixed: %s)" % (summary["count"], ", ".join(summary["models"]))
    arch = "%s %s" % (summary["arch"], summary["sm"]) if summary["arch"] else "compute capability unknown"
    text = "%s, %s, %d MiB VRAM in all" % (what, arch, summary["vram_total_mib"])
    if summary["driver_version"]:
        kinds = {True: "open kernel module", False: "proprietary kernel module"}
        kind = kinds.get(summary["open_kernel_module"], "kernel module type unknown")
        text += ", driver %s (%s)" % (summary["driver_version"], kind)
    if summary["interconnect"] == "nvlink":
        text += ", NVLink (NV%d)" % summary["nvlink_links"]
    elif summary["interconnect"] == "pcie":
        text += ", PCIe only (no NVLink between GPUs)"
    return text
