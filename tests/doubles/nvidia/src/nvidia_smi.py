# TEST DOUBLE of NVIDIA's nvidia-smi (kimi.deploy test suite). No GPU, no NVML: every answer comes
# from a GPU profile JSON (tests/fixtures/gpus/<profile>.json), chosen by $KIMI_DOUBLE_GPU_PROFILE or
# /etc/kimi-double/gpu-profile.json. Python 3 standard library only.
#
# Implemented: plain table, -L, --version, --query-gpu, --query-compute-apps, -i/--id, topo -m,
# -q -x (a subset of the real elements), -pm/--persistence-mode (state kept in $KIMI_DOUBLE_STATE_DIR).
# Failure modes: no GPU ("No devices were found", exit 6), no driver ($KIMI_DOUBLE_NO_DRIVER=1 or
# kimi_gpu_driver.loaded=false or no profile file: exit 9), unknown query field (exit 2).
import json
import os
import sys
import time

DEFAULT_PROFILE = "/etc/kimi-double/gpu-profile.json"
DEFAULT_STATE_DIR = "/var/lib/kimi-double"

NO_DRIVER = ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
             "Make sure that the latest NVIDIA driver is installed and running.\n\n")
NO_DEVICES = "No devices were found\n"
BAD_ARGS = "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\n\n"

EXIT_INVALID_ARGUMENT = 2
EXIT_NO_PERMISSION = 4
EXIT_NOT_FOUND = 6
EXIT_DRIVER_NOT_LOADED = 9

NA = "[N/A]"


class SmiExit(Exception):
    def __init__(self, code, out="", err=""):
        Exception.__init__(self, code)
        self.code = code
        self.out = out
        self.err = err


# ------------------------------------------------------------------------------------------------
# Profile
# ------------------------------------------------------------------------------------------------

def load_profile():
    path = os.environ.get("KIMI_DOUBLE_GPU_PROFILE") or DEFAULT_PROFILE
    if os.environ.get("KIMI_DOUBLE_NO_DRIVER", "") not in ("", "0"):
        raise SmiExit(EXIT_DRIVER_NOT_LOADED, NO_DRIVER)
    try:
        with open(path) as handle:
            profile = json.load(handle)
    except (IOError, OSError):
        raise SmiExit(EXIT_DRIVER_NOT_LOADED, NO_DRIVER,
                      "kimi-double: no GPU profile at %s (set KIMI_DOUBLE_GPU_PROFILE)\n" % path)
    driver = profile.get("kimi_gpu_driver") or {}
    if driver.get("loaded", True) is False:
        raise SmiExit(EXIT_DRIVER_NOT_LOADED, NO_DRIVER)
    # An Ascend profile (platform: ascend) has no NVIDIA GPU: npu-smi's double reads it.
    gpus = [dict(g) for g in profile.get("kimi_gpus") or [] if g.get("platform") != "ascend"]
    gpus.sort(key=lambda g: int(g.get("index", 0)))
    for position, gpu in enumerate(gpus):
        gpu.setdefault("minor_number", int(gpu.get("index", position)))
    overlay = _read_state().get("persistence_mode", {})
    for gpu in gpus:
        if gpu.get("uuid") in overlay:
            gpu["persistence_mode"] = overlay[gpu["uuid"]]
    gpus = _cdi_visible(gpus)
    for position, gpu in enumerate(gpus):
        gpu["index"] = position
    profile["kimi_gpus"] = gpus
    return profile


def _cdi_visible(gpus):
    """Inside a container that got GPUs from the nvidia-ctk double's CDI spec, only those GPUs exist
    (renumbered from 0, as the real nvidia-smi does in a container)."""
    if os.environ.get("KIMI_DOUBLE_CDI") != "1":
        return gpus
    return [g for g in gpus if os.environ.get("KIMI_DOUBLE_GPU_%d" % g["minor_number"]) == g.get("uuid")]


def _state_path():
    return os.path.join(os.environ.get("KIMI_DOUBLE_STATE_DIR") or DEFAULT_STATE_DIR, "nvidia-smi-state.json")


def _read_state():
    try:
        with open(_state_path()) as handle:
            return json.load(handle)
    except (IOError, OSError, ValueError):
        return {}


def _write_state(state):
    path = _state_path()
    directory = os.path.dirname(path)
    if not os.path.isdir(directory):
        os.makedirs(directory)
    tmp = path + ".tmp"
    with open(tmp, "w") as handle:
        json.dump(state, handle, indent=2, sort_keys=True)
    os.rename(tmp, path)


def driver_version(profile):
    return str(profile["kimi_gpu_driver"]["version"])


def cuda_version(profile):
    return str(profile["kimi_gpu_driver"].get("cuda_version", "N/A"))


def nvml_version(profile):
    return ".".join(driver_version(profile).split(".")[:2])


# ------------------------------------------------------------------------------------------------
# Per-GPU values
# ------------------------------------------------------------------------------------------------

def mem_total(g):
    return int(g["memory_mib"])


def mem_reserved(g):
    return int(g.get("memory_reserved_mib") or 0)


def mem_used(g):
    used = g.get("memory_used_mib")
    if used is None or (int(used) == 0 and g.get("processes")):
        used = sum(int(p.get("used_memory_mib", 0)) for p in g.get("processes") or [])
    return int(used)


def mem_free(g):
    return max(mem_total(g) - mem_reserved(g) - mem_used(g), 0)


def power_draw(g):
    return float(g.get("power_draw_w") or 0)


def power_limit(g):
    return float(g.get("power_limit_w") or 0)


def bus_parts(g):
    """00000000:1B:00.0 -> (domain '00000000', bus '1B', device '00', function '0')."""
    domain, bus, devfn = g["pci_bus_id"].split(":")
    device, function = devfn.split(".")
    return domain, bus, device, function


def short_bus_id(g):
    """The 0000:1b:00.0 spelling used by the kernel and nvidia-persistenced."""
    domain, bus, device, function = bus_parts(g)
    return "%s:%s:%s.%s" % (domain[-4:], bus.lower(), device.lower(), function)


def _na(value, fmt="%s"):
    return NA if value is None else fmt % value


def _watts(value):
    return _na(None if value is None else float(value), "%.2f W")


QUERY_GPU_FIELDS = {}
QUERY_GPU_ALIASES = {"gpu_name": "name", "gpu_uuid": "uuid", "gpu_serial": "serial", "gpu_bus_id": "pci.bus_id"}


def _field(name, header, unit=None):
    def register(func):
        QUERY_GPU_FIELDS[name] = (header, unit, func)
        return func
    return register


_field("timestamp", "timestamp")(
    lambda p, g, n: time.strftime("%Y/%m/%d %H:%M:%S.") + "%03d" % (time.time() % 1 * 1000))
_field("driver_version", "driver_version")(lambda p, g, n: driver_version(p))
_field("vgpu_driver_capability.heterogenous_multivGPU", "vgpu_driver_capability.heterogenous_multivGPU")(
    lambda p, g, n: "No")
_field("count", "count")(lambda p, g, n: str(n))
_field("name", "name")(lambda p, g, n: g["name"])
_field("serial", "serial")(lambda p, g, n: g.get("serial") or NA)
_field("uuid", "uuid")(lambda p, g, n: g["uuid"])
_field("pci.bus_id", "pci.bus_id")(lambda p, g, n: g["pci_bus_id"])
_field("pci.domain", "pci.domain")(lambda p, g, n: "0x" + bus_parts(g)[0][-4:])
_field("pci.bus", "pci.bus")(lambda p, g, n: "0x" + bus_parts(g)[1])
_field("pci.device", "pci.device")(lambda p, g, n: "0x" + bus_parts(g)[2])
_field("pci.device_id", "pci.device_id")(lambda p, g, n: _na(g.get("pci_device_id"), "0x%s"))
_field("pci.sub_device_id", "pci.sub_device_id")(lambda p, g, n: _na(g.get("pci_sub_system_id"), "0x%s"))
_field("index", "index")(lambda p, g, n: str(g["index"]))
_field("display_mode", "display_mode")(lambda p, g, n: "Requested functionality has been deprecated")
_field("display_active", "display_active")(lambda p, g, n: "Disabled")
_field("persistence_mode", "persistence_mode")(lambda p, g, n: g.get("persistence_mode", "Disabled"))
_field("addressing_mode", "addressing_mode")(lambda p, g, n: "None")
_field("accounting.mode", "accounting.mode")(lambda p, g, n: "Disabled")
_field("driver_model.current", "driver_model.current")(lambda p, g, n: NA)
_field("driver_model.pending", "driver_model.pending")(lambda p, g, n: NA)
_field("vbios_version", "vbios_version")(lambda p, g, n: g.get("vbios_version") or NA)
_field("compute_cap", "compute_cap")(lambda p, g, n: str(g["compute_cap"]))
_field("pstate", "pstate")(lambda p, g, n: g.get("pstate", "P0"))
_field("fan.speed", "fan.speed [%]", " %")(lambda p, g, n: _na(g.get("fan_speed_pct"), "%d %%"))
_field("memory.total", "memory.total [MiB]", " MiB")(lambda p, g, n: "%d MiB" % mem_total(g))
_field("memory.reserved", "memory.reserved [MiB]", " MiB")(lambda p, g, n: "%d MiB" % mem_reserved(g))
_field("memory.used", "memory.used [MiB]", " MiB")(lambda p, g, n: "%d MiB" % mem_used(g))
_field("memory.free", "memory.free [MiB]", " MiB")(lambda p, g, n: "%d MiB" % mem_free(g))
_field("compute_mode", "compute_mode")(lambda p, g, n: g.get("compute_mode", "Default"))
_field("utilization.gpu", "utilization.gpu [%]", " %")(lambda p, g, n: "%d %%" % int(g.get("utilization_gpu_pct") or 0))
_field("utilization.memory", "utilization.memory [%]", " %")(
    lambda p, g, n: "%d %%" % int(g.get("utilization_memory_pct") or 0))
_field("ecc.mode.current", "ecc.mode.current")(lambda p, g, n: g.get("ecc_mode", "Enabled"))
_field("ecc.mode.pending", "ecc.mode.pending")(lambda p, g, n: g.get("ecc_mode", "Enabled"))
_field("temperature.gpu", "temperature.gpu")(lambda p, g, n: _na(g.get("temperature_c"), "%d"))
_field("temperature.memory", "temperature.memory")(lambda p, g, n: _na(g.get("memory_temperature_c"), "%d"))
_field("power.draw", "power.draw [W]", " W")(lambda p, g, n: _watts(g.get("power_draw_w")))
_field("power.draw.average", "power.draw.average [W]", " W")(lambda p, g, n: _watts(g.get("power_draw_w")))
_field("power.draw.instant", "power.draw.instant [W]", " W")(lambda p, g, n: _watts(g.get("power_draw_w")))
_field("power.limit", "power.limit [W]", " W")(lambda p, g, n: _watts(g.get("power_limit_w")))
_field("enforced.power.limit", "enforced.power.limit [W]", " W")(lambda p, g, n: _watts(g.get("power_limit_w")))
_field("power.default_limit", "power.default_limit [W]", " W")(lambda p, g, n: _watts(g.get("power_limit_w")))
_field("power.min_limit", "power.min_limit [W]", " W")(lambda p, g, n: _watts(g.get("power_min_limit_w")))
_field("power.max_limit", "power.max_limit [W]", " W")(
    lambda p, g, n: _watts(g.get("power_max_limit_w", g.get("power_limit_w"))))
_field("mig.mode.current", "mig.mode.current")(lambda p, g, n: g.get("mig_mode", "Disabled"))
_field("mig.mode.pending", "mig.mode.pending")(lambda p, g, n: g.get("mig_mode", "Disabled"))
_field("gpu_operation_mode.current", "gpu_operation_mode.current")(lambda p, g, n: NA)
_field("clocks.max.sm", "clocks.max.sm [MHz]", " MHz")(lambda p, g, n: _na(g.get("clocks_max_sm_mhz"), "%d MHz"))

QUERY_APPS_FIELDS = {
    "timestamp": ("timestamp", None, lambda p, g, a: time.strftime("%Y/%m/%d %H:%M:%S.000")),
    "gpu_name": ("gpu_name", None, lambda p, g, a: g["name"]),
    "gpu_bus_id": ("gpu_bus_id", None, lambda p, g, a: g["pci_bus_id"]),
    "gpu_serial": ("gpu_serial", None, lambda p, g, a: g.get("serial") or NA),
    "gpu_uuid": ("gpu_uuid", None, lambda p, g, a: g["uuid"]),
    "pid": ("pid", None, lambda p, g, a: str(a["pid"])),
    "process_name": ("process_name", None, lambda p, g, a: a.get("process_name", a.get("name", ""))),
    "used_gpu_memory": ("used_gpu_memory [MiB]", " MiB", lambda p, g, a: "%d MiB" % int(a.get("used_memory_mib", 0))),
}
QUERY_APPS_ALIASES = {"name": "process_name", "used_memory": "used_gpu_memory"}


# ------------------------------------------------------------------------------------------------
# Argument parsing (nvidia-smi style: -x, --long=value, --long value)
# ------------------------------------------------------------------------------------------------

def parse_args(argv):
    opts = {"format": None, "id": None}
    rest = []
    takes_value = {"--query-gpu": "query_gpu", "--query-compute-apps": "query_apps", "--format": "format",
                   "-i": "id", "--id": "id", "-pm": "persistence_mode", "--persistence-mode": "persistence_mode",
                   "-f": "filename", "--filename": "filename"}
    flags = {"-L": "list", "--list-gpus": "list", "--version": "version", "-q": "query", "--query": "query",
             "-x": "xml", "--xml-format": "xml", "-h": "help", "--help": "help", "-m": "matrix", "--matrix": "matrix"}
    i = 0
    while i < len(argv):
        arg = argv[i]
        key, value = arg, None
        if arg.startswith("--") and "=" in arg:
            key, value = arg.split("=", 1)
        if key in takes_value:
            if value is None:
                i += 1
                if i >= len(argv):
                    raise SmiExit(EXIT_INVALID_ARGUMENT, BAD_ARGS)
                value = argv[i]
            opts[takes_value[key]] = value
        elif key in flags and value is None:
            opts[flags[key]] = True
        elif arg.startswith("-") and len(arg) > 2 and not arg.startswith("--") and all(
                ("-" + c) in flags for c in arg[1:]):
            for c in arg[1:]:
                opts[flags["-" + c]] = True
        elif arg.startswith("-"):
            raise SmiExit(EXIT_INVALID_ARGUMENT, BAD_ARGS)
        else:
            rest.append(arg)
        i += 1
    return opts, rest


def select_gpus(gpus, selector):
    if selector is None:
        return gpus
    chosen = []
    for token in selector.split(","):
        token = token.strip()
        match = [g for g in gpus if token == str(g["index"]) or token == g["uuid"]
                 or token.upper() in (g["pci_bus_id"].upper(), g["pci_bus_id"][4:].upper())]
        if not match:
            raise SmiExit(EXIT_NOT_FOUND, NO_DEVICES)
        chosen.extend(g for g in match if g not in chosen)
    return chosen


# ------------------------------------------------------------------------------------------------
# Output renderers
# ------------------------------------------------------------------------------------------------

def parse_format(fmt):
    if fmt is None:
        raise SmiExit(EXIT_INVALID_ARGUMENT, BAD_ARGS)
    parts = [x.strip() for x in fmt.split(",") if x.strip()]
    if "csv" not in parts or any(x not in ("csv", "noheader", "nounits") for x in parts):
        raise SmiExit(EXIT_INVALID_ARGUMENT, BAD_ARGS)
    return "noheader" not in parts, "nounits" not in parts


def _resolve_fields(spec, table, aliases):
    fields = []
    for raw in spec.split(","):
        name = raw.strip()
        if not name:
            continue
        canonical = aliases.get(name, name)
        if canonical not in table:
            raise SmiExit(EXIT_INVALID_ARGUMENT, 'Field "%s" is not a valid field to query.\n\n' % name)
        fields.append(canonical)
    if not fields:
        raise SmiExit(EXIT_INVALID_ARGUMENT, BAD_ARGS)
    return fields


def _strip_unit(value, unit, units):
    if units or unit is None or value == NA or not value.endswith(unit):
        return value
    return value[:-len(unit)]


def _csv(profile, table, fields, fmt, subjects):
    """CSV the way --query-* prints it: optional header, one row per (gpu, subject) pair, units unless nounits.
    Each field's function takes (profile, gpu, subject): the GPU count for --query-gpu, the process for apps."""
    header, units = parse_format(fmt)
    lines = []
    if header:
        lines.append(", ".join(table[f][0] for f in fields))
    for gpu, subject in subjects:
        row = []
        for f in fields:
            _header, unit, func = table[f]
            row.append(_strip_unit(func(profile, gpu, subject), unit, units))
        lines.append(", ".join(row))
    return "".join(line + "\n" for line in lines)


def query_gpu(profile, gpus, spec, fmt, total):
    fields = _resolve_fields(spec, QUERY_GPU_FIELDS, QUERY_GPU_ALIASES)
    return _csv(profile, QUERY_GPU_FIELDS, fields, fmt, ((gpu, total) for gpu in gpus))


def query_apps(profile, gpus, spec, fmt):
    fields = _resolve_fields(spec, QUERY_APPS_FIELDS, QUERY_APPS_ALIASES)
    # Compute apps only: graphics-only processes are not listed, as in the real tool.
    apps = ((gpu, app) for gpu in gpus for app in gpu.get("processes") or [] if app.get("type", "C") in ("C", "C+G"))
    return _csv(profile, QUERY_APPS_FIELDS, fields, fmt, apps)


def list_gpus(gpus):
    return "".join("GPU %d: %s (UUID: %s)\n" % (g["index"], g["name"], g["uuid"]) for g in gpus)


def version_text(profile):
    return ("NVIDIA-SMI version  : %s\nNVML version        : %s\nDRIVER version      : %s\nCUDA Version        : %s\n"
            % (driver_version(profile), nvml_version(profile), driver_version(profile), cuda_version(profile)))


SEP = "+-----------------------------------------+------------------------+----------------------+"
WIDE = "+-----------------------------------------------------------------------------------------+"


def _name_cell(name):
    return name if len(name) <= 27 else name[:24] + "..."


def _on_off(value):
    return "On" if str(value).lower() in ("enabled", "on", "1") else "Off"


def table(profile, gpus):
    out = [time.asctime() + "       "]
    out.append(WIDE)
    out.append("| NVIDIA-SMI %-23sDriver Version: %-15sCUDA Version: %-9s|"
               % (driver_version(profile), driver_version(profile), cuda_version(profile)))
    out.append(SEP)
    out.append("| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |")
    out.append("| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |")
    out.append("|                                         |                        |               MIG M. |")
    out.append("|=========================================+========================+======================|")
    for g in gpus:
        ecc = "0" if g.get("ecc_mode", "Enabled") == "Enabled" else "Off"
        fan = "N/A" if g.get("fan_speed_pct") is None else "%d%%" % int(g["fan_speed_pct"])
        temp = "N/A" if g.get("temperature_c") is None else "%dC" % int(g["temperature_c"])
        out.append("| %3d  %-29s  %-3s |   %s %3s | %20s |" % (
            g["index"], _name_cell(g["name"]), _on_off(g.get("persistence_mode")), g["pci_bus_id"], "Off", ecc))
        out.append("| %3s %5s %5s %15s / %5s |%11s / %9s | %7s %12s |" % (
            fan, temp, g.get("pstate", "P0"), "%dW" % int(round(power_draw(g))), "%dW" % int(round(power_limit(g))),
            "%dMiB" % mem_used(g), "%dMiB" % mem_total(g), "%d%%" % int(g.get("utilization_gpu_pct") or 0),
            g.get("compute_mode", "Default")))
        out.append("|                                         |                        | %20s |"
                   % g.get("mig_mode", "Disabled"))
        out.append(SEP)
    out.append("")
    out.append(WIDE)
    out.append("| Processes:                                                                              |")
    out.append("|  GPU   GI   CI              PID   Type   Process name                        GPU Memory |")
    out.append("|        ID   ID                                                               Usage      |")
    out.append("|=========================================================================================|")
    procs = [(g, p) for g in gpus for p in g.get("processes") or []]
    if not procs:
        out.append("|  No running processes found                                                             |")
    for g, p in procs:
        name = p.get("process_name", p.get("name", ""))
        if len(name) > 32:
            name = "..." + name[-29:]
        out.append("| %4d   N/A  N/A%16d %6s   %-32s%14s |" % (
            g["index"], int(p["pid"]), p.get("type", "C"), name, "%dMiB" % int(p.get("used_memory_mib", 0))))
    out.append(WIDE)
    return "\n".join(out) + "\n"


TOPO_LEGEND = """
Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node
  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)
  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)
  PIX  = Connection traversing at most a single PCIe bridge
  NV#  = Connection traversing a bonded set of # NVLinks
"""


def topo_link(profile, a, b):
    if a is b:
        return " X "
    links = int(profile.get("kimi_gpu_nvlink_links") or 0)
    if profile.get("kimi_gpu_interconnect") == "nvlink" and links:
        return "NV%d" % links
    if a.get("numa_node", 0) != b.get("numa_node", 0):
        return "SYS"
    if a.get("pcie_switch") is not None and a.get("pcie_switch") == b.get("pcie_switch"):
        return "PIX"
    return "NODE"


def topo_matrix(profile, gpus):
    head = "\t" + "".join("GPU%d\t" % g["index"] for g in gpus) + "CPU Affinity\tNUMA Affinity\tGPU NUMA ID"
    lines = [head]
    for a in gpus:
        cells = [topo_link(profile, a, b) for b in gpus]
        row = (a["index"], "\t".join(cells), a.get("cpu_affinity", "N/A"), a.get("numa_node", "N/A"))
        lines.append("GPU%d\t%s\t%s\t%s\t\tN/A" % row)
    return "\n".join(lines) + "\n" + TOPO_LEGEND


def _x(tag, value, depth):
    return "%s<%s>%s</%s>" % ("\t" * depth, tag, value, tag)


def xml_query(profile, gpus):
    """nvidia-smi -q -x: the element order and spelling of the real one (DTD v13), for a subset of elements."""
    lines = ['<?xml version="1.0" ?>', '<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v13.dtd">', "<nvidia_smi_log>",
             _x("timestamp", time.asctime(), 1), _x("driver_version", driver_version(profile), 1),
             _x("cuda_version", cuda_version(profile), 1), _x("attached_gpus", len(gpus), 1)]
    for g in gpus:
        domain, bus, device, _function = bus_parts(g)
        lines.append('\t<gpu id="%s">' % g["pci_bus_id"])
        lines.append(_x("product_name", g["name"], 2))
        lines.append(_x("product_brand", "NVIDIA", 2))
        lines.append(_x("product_architecture", g.get("architecture", "N/A"), 2))
        lines.append(_x("persistence_mode", g.get("persistence_mode", "Disabled"), 2))
        lines += ["\t\t<mig_mode>", _x("current_mig", g.get("mig_mode", "Disabled"), 3),
                  _x("pending_mig", g.get("mig_mode", "Disabled"), 3), "\t\t</mig_mode>"]
        lines.append(_x("serial", g.get("serial", "N/A"), 2))
        lines.append(_x("uuid", g["uuid"], 2))
        lines.append(_x("minor_number", g["minor_number"], 2))
        lines.append(_x("vbios_version", g.get("vbios_version", "N/A"), 2))
        lines += ["\t\t<pci>", _x("pci_bus", bus, 3), _x("pci_device", device, 3), _x("pci_domain", domain[-4:], 3),
                  _x("pci_device_id", g.get("pci_device_id", "N/A"), 3), _x("pci_bus_id", g["pci_bus_id"], 3),
                  _x("pci_sub_system_id", g.get("pci_sub_system_id", "N/A"), 3), "\t\t</pci>"]
        lines.append(_x("fan_speed", "N/A" if g.get("fan_speed_pct") is None else "%d %%" % g["fan_speed_pct"], 2))
        lines.append(_x("performance_state", g.get("pstate", "P0"), 2))
        lines += ["\t\t<fb_memory_usage>", _x("total", "%d MiB" % mem_total(g), 3),
                  _x("reserved", "%d MiB" % mem_reserved(g), 3), _x("used", "%d MiB" % mem_used(g), 3),
                  _x("free", "%d MiB" % mem_free(g), 3), "\t\t</fb_memory_usage>"]
        lines.append(_x("compute_mode", g.get("compute_mode", "Default"), 2))
        lines += ["\t\t<ecc_mode>", _x("current_ecc", g.get("ecc_mode", "Enabled"), 3),
                  _x("pending_ecc", g.get("ecc_mode", "Enabled"), 3), "\t\t</ecc_mode>"]
        lines += ["\t\t<temperature>", _x("gpu_temp", _na(g.get("temperature_c"), "%d C").replace(NA, "N/A"), 3),
                  "\t\t</temperature>"]
        lines += ["\t\t<gpu_power_readings>", _x("power_state", g.get("pstate", "P0"), 3),
                  _x("current_power_limit", "%.2f W" % power_limit(g), 3),
                  _x("requested_power_limit", "%.2f W" % power_limit(g), 3),
                  _x("default_power_limit", "%.2f W" % power_limit(g), 3),
                  _x("min_power_limit", _watts(g.get("power_min_limit_w")).replace(NA, "N/A"), 3),
                  _x("max_power_limit", _watts(g.get("power_max_limit_w", g.get("power_limit_w"))).replace(NA, "N/A"),
                     3),
                  "\t\t</gpu_power_readings>"]
        lines.append("\t\t<processes>")
        for p in g.get("processes") or []:
            lines += ["\t\t\t<process_info>", _x("gpu_instance_id", "N/A", 4), _x("compute_instance_id", "N/A", 4),
                      _x("pid", p["pid"], 4), _x("type", p.get("type", "C"), 4),
                      _x("process_name", p.get("process_name", p.get("name", "")), 4),
                      _x("used_memory", "%d MiB" % int(p.get("used_memory_mib", 0)), 4), "\t\t\t</process_info>"]
        lines.append("\t\t</processes>")
        lines.append("\t</gpu>")
    lines += ["", "</nvidia_smi_log>"]
    return "\n".join(lines) + "\n"


def set_persistence(gpus, value):
    if value not in ("0", "1"):
        raise SmiExit(EXIT_INVALID_ARGUMENT, BAD_ARGS)
    wanted = "Enabled" if value == "1" else "Disabled"
    if os.geteuid() != 0:
        return SmiExit(EXIT_NO_PERMISSION, "".join(
            "Unable to set persistence mode for GPU %s: Insufficient Permissions\n" % g["pci_bus_id"] for g in gpus[:1])
            + "Terminating early due to previous errors.\n")
    state = _read_state()
    overlay = state.setdefault("persistence_mode", {})
    out = []
    for g in gpus:
        if g.get("persistence_mode") == wanted:
            out.append("Persistence mode is already %s for GPU %s.\n" % (wanted, g["pci_bus_id"]))
        else:
            out.append("%s persistence mode for GPU %s.\n" % (wanted, g["pci_bus_id"]))
        overlay[g["uuid"]] = wanted
    _write_state(state)
    return SmiExit(0, "".join(out) + "All done.\n")


def run(argv):
    opts, rest = parse_args(argv)
    profile = load_profile()
    if opts.get("version") and not rest:
        return SmiExit(0, version_text(profile))
    gpus = profile["kimi_gpus"]
    if not gpus:
        raise SmiExit(EXIT_NOT_FOUND, NO_DEVICES)
    if rest:
        if rest[0] == "topo" and opts.get("matrix") and len(rest) == 1:
            return SmiExit(0, topo_matrix(profile, gpus))
        raise SmiExit(EXIT_INVALID_ARGUMENT, BAD_ARGS)
    total = len(gpus)
    gpus = select_gpus(gpus, opts.get("id"))
    if opts.get("persistence_mode") is not None:
        return set_persistence(gpus, opts["persistence_mode"])
    if opts.get("query_gpu") is not None:
        return SmiExit(0, query_gpu(profile, gpus, opts["query_gpu"], opts.get("format"), total))
    if opts.get("query_apps") is not None:
        return SmiExit(0, query_apps(profile, gpus, opts["query_apps"], opts.get("format")))
    if opts.get("list"):
        return SmiExit(0, list_gpus(gpus))
    if opts.get("query") and opts.get("xml"):
        return SmiExit(0, xml_query(profile, gpus))
    if opts.get("query") or opts.get("help") or opts.get("xml") or opts.get("matrix"):
        raise SmiExit(EXIT_INVALID_ARGUMENT, BAD_ARGS + "kimi-double: this option is not implemented by the double\n")
    return SmiExit(0, table(profile, gpus))


def main(argv=None):
    try:
        result = run(sys.argv[1:] if argv is None else argv)
    except SmiExit as exc:
        result = exc
    if result.out:
        sys.stdout.write(result.out)
    if result.err:
        sys.stderr.write(result.err)
    sys.stdout.flush()
    return result.code


if __name__ == "__main__":
    sys.exit(main())
