#!/usr/bin/env python3
# TEST DOUBLE of two accelerator metrics exporters for the kimi.deploy tests. Not NVIDIA or Huawei software: no
# DCGM, no NVML, no DCMI. Python 3 standard library only. The mode is the name it runs under (argv[0], or a first
# argument `dcgm-exporter` / `npu-exporter`):
#
# dcgm-exporter: NVIDIA DCGM Exporter 4.5.3-4.8.2 (DCGM 4.5.3, exporter 4.8.2)
#   repo github.com/NVIDIA/dcgm-exporter, tag 4.5.3-4.8.2, commit 691c92762eb551313c825f6efe4ceeee20982801 (2026-05-06)
#   pkg/cmd/app.go                              flags (urfave/cli v2.27.7), defaults, env vars, start-up order
#   etc/default-counters.csv                    the default counters (embedded below, verbatim)
#   internal/pkg/rendermetrics/render_metrics.go  the text format and the label order
#   internal/pkg/collector/gpu_collector.go    labels, blank values skipped, XID err_code/err_msg
#   internal/pkg/collector/xid_errors.go       err_msg texts (embedded below)
#   internal/pkg/counters/counter_config.go    CSV parsing, DCP fields only when profiling is available
#   internal/pkg/hostname/hostname.go          Hostname label (NODE_NAME, else the host name; -r: the remote host)
#   docker/Dockerfile, docker/dcgm-exporter-entrypoint.sh   the image (entrypoint execs /usr/bin/dcgm-exporter)
#   DCGM field ids: github.com/NVIDIA/go-dcgm pkg/dcgm/dcgm_fields.h at ec245c09fe3e (the go.mod pin)
#   real image: nvcr.io/nvidia/k8s/dcgm-exporter:4.5.3-4.8.2-ubuntu22.04
#
# npu-exporter: Huawei MindCluster NPU Exporter v26.1.0
#   repo github.com/Ascend/mind-cluster (mirror of gitcode.com/Ascend/mind-cluster), tag v26.1.0,
#   commit 9e132e216bb7b81f4a2742a4ac6d3b50754e8a77 (2026-07-29)
#   component/npu-exporter/cmd/npu-exporter/main.go         flags (Go flag package), checks, start-up, HTTP server
#   component/npu-exporter/collector/metrics/collector_for_{npu,utilization,hbm,version,node_base}.go   metrics
#   component/npu-exporter/collector/common/{constants,metrics_collector}.go   labels
#   component/npu-exporter/collector/config/metrics_config.go   metricConfiguration.json (groups ON/OFF)
#   component/ascend-common/common-utils/{agreement,healthz}   the banner, --enable-healthz
#   docker/npu-exporter/v26.1.0/Dockerfile.ubuntu (master 45d56dbd)   the image (bash entrypoint that ignores args)
#   real image: swr.cn-south-1.myhuaweicloud.com/ascendhub/npu-exporter:v26.1.0-ubuntu22.04
#
# What is and is not reproduced: tests/doubles/exporters/README.md.
import csv
import gzip
import ipaddress
import json
import math
import os
import platform
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer
from socketserver import ThreadingMixIn

START = time.time()


# ================================================================================================
# Shared: Go's flag package, Go number formatting, the HTTP server
# ================================================================================================

class FlagError(Exception):
    pass


class HelpRequested(Exception):
    pass


class Flag(object):
    """One command-line flag, as Go's flag package (and urfave/cli v2 on top of it) declares it."""

    def __init__(self, name, kind, default, usage, aliases=(), env=()):
        self.name, self.kind, self.default, self.usage = name, kind, default, usage
        self.aliases, self.env = tuple(aliases), tuple(env)

    def convert(self, text):
        if self.kind == "int":
            return go_int(text)
        if self.kind == "bool":
            return go_bool(text)
        if self.kind == "duration":
            return go_duration(text)
        if self.kind == "slice":
            return list(text.split(","))
        return text


def go_int(text):
    if text != text.strip() or not text:
        raise ValueError(text)
    if re.match(r"^[+-]?0[0-7]+$", text):
        return int(text, 8)
    return int(text, 0)


def go_bool(text):
    if text in ("1", "t", "T", "TRUE", "true", "True"):
        return True
    if text in ("0", "f", "F", "FALSE", "false", "False"):
        return False
    raise ValueError(text)


_DURATION_UNITS = {"ns": 1e-9, "us": 1e-6, "\u00b5s": 1e-6, "\u03bcs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0,
                   "h": 3600.0}


def go_duration(text):
    """time.ParseDuration, in seconds."""
    if text in ("0", "+0", "-0"):
        return 0.0
    match = re.match(r"^([-+]?)((?:(?:\d+\.?\d*|\.\d+)(?:ns|us|\u00b5s|\u03bcs|ms|s|m|h))+)$", text)
    if not match:
        raise ValueError(text)
    total = sum(float(num) * _DURATION_UNITS[unit]
                for num, unit in re.findall(r"(\d+\.?\d*|\.\d+)(ns|us|\u00b5s|\u03bcs|ms|s|m|h)", match.group(2)))
    return -total if match.group(1) == "-" else total


def go_quote(text):
    """strconv.Quote for the texts these errors carry."""
    return json.dumps(text, ensure_ascii=False)


def go_parse(args, flags, values, seen):
    """flag.FlagSet.Parse: single or double dash, -name=value or -name value (not for bools), stops at the first
    non-flag argument or at "--". Returns what is left. Raises FlagError with Go's messages."""
    args = list(args)
    while args:
        arg = args[0]
        if len(arg) < 2 or arg[0] != "-":
            break
        minuses = 1
        if arg[1] == "-":
            minuses = 2
            if len(arg) == 2:
                args.pop(0)
                break
        name = arg[minuses:]
        if not name or name[0] in "-=":
            raise FlagError("bad flag syntax: %s" % arg)
        args.pop(0)
        value, has_value = None, False
        if "=" in name[1:]:
            cut = name.index("=", 1)
            name, value, has_value = name[:cut], name[cut + 1:], True
        flag = flags.get(name)
        if flag is None:
            if name in ("help", "h"):
                raise HelpRequested()
            raise FlagError("flag provided but not defined: -%s" % name)
        if flag.kind == "bool":
            if has_value:
                try:
                    converted = go_bool(value)
                except ValueError:
                    raise FlagError("invalid boolean value %s for -%s: parse error" % (go_quote(value), name))
            else:
                converted = True
        else:
            if not has_value:
                if not args:
                    raise FlagError("flag needs an argument: -%s" % name)
                value = args.pop(0)
            try:
                converted = flag.convert(value)
            except ValueError:
                raise FlagError("invalid value %s for flag -%s: parse error" % (go_quote(value), name))
        if flag.kind == "slice":
            converted = (values[flag.name] if flag.name in seen else []) + converted
        values[flag.name] = converted
        seen.add(flag.name)
    return args


def go_float(value):
    """strconv.FormatFloat(v, 'g', -1, 64), as Prometheus' Go client (expfmt) writes sample values: the shortest
    digits, exponent form when the decimal exponent is < -4 or >= 6 (1e+06, 1.5e-05)."""
    value = float(value)
    if math.isnan(value):
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "+Inf" if value > 0 else "-Inf"
    if value == 0:
        return "0"
    sign = "-" if value < 0 else ""
    digits, exp = _shortest_digits(abs(value))
    if exp < -4 or exp >= 6:
        body = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        return "%s%se%s%02d" % (sign, body, "-" if exp < 0 else "+", abs(exp))
    if exp >= 0:
        if len(digits) <= exp + 1:
            return sign + digits + "0" * (exp + 1 - len(digits))
        return sign + digits[:exp + 1] + "." + digits[exp + 1:]
    return sign + "0." + "0" * (-exp - 1) + digits


def _shortest_digits(value):
    """The shortest decimal digits that round-trip (Python's repr), and the decimal exponent of the first one."""
    text = "%r" % value
    if "e" in text or "E" in text:
        mant, exp = text.lower().split("e")
        exp = int(exp)
    else:
        mant, exp = text, 0
    if "." in mant:
        whole, frac = mant.split(".")
    else:
        whole, frac = mant, ""
    digits = (whole + frac).lstrip("0")
    leading = len(whole + frac) - len((whole + frac).lstrip("0"))
    point = len(whole) - leading + exp      # digits before the decimal point
    digits = digits.rstrip("0") or "0"
    return digits, point - 1


class _Server(ThreadingMixIn, HTTPServer):
    daemon_threads = True
    request_queue_size = 128   # a real listen backlog (Go uses somaxconn), not socketserver's 5
    allow_reuse_address = True


def make_server(host, port, handler, dual_stack=False):
    """A threaded HTTP server on host:port. host "" listens on every address (IPv6 dual stack when the kernel
    has IPv6, else 0.0.0.0), like Go's net.Listen("tcp", ":port"). Raises OSError like a failed bind."""
    if host == "":
        try:
            server = _bind(socket.AF_INET6, "::", port, handler, v6only=False)
            return server
        except OSError:
            return _bind(socket.AF_INET, "0.0.0.0", port, handler)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    return _bind(family, host, port, handler)


def _bind(family, host, port, handler, v6only=None):
    class Server(_Server):
        address_family = family

        def server_bind(self):
            if v6only is not None and family == socket.AF_INET6:
                self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1 if v6only else 0)
            HTTPServer.server_bind(self)

    return Server((host, port), handler)


class GoHandler(BaseHTTPRequestHandler):
    """A request handler that answers like Go's net/http: HTTP/1.1, Date, no Server header, no access log."""
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def send_response(self, code, message=None):
        self.send_response_only(code, message)
        self.send_header("Date", self.date_time_string())

    def reply(self, code, body, content_type="text/plain; charset=utf-8", headers=()):
        data = body.encode("utf-8") if isinstance(body, str) else body
        self.send_response(code)
        for name, value in headers:
            self.send_header(name, value)
        if content_type:
            self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)


def cap_sys_admin():
    """CAP_SYS_ADMIN (21) in CapEff of /proc/self/status, as internal/pkg/capabilities reads it."""
    try:
        with open("/proc/self/status") as handle:
            for line in handle:
                if line.startswith("CapEff:"):
                    return bool(int(line.split()[1], 16) & (1 << 21))
    except (IOError, OSError, ValueError, IndexError):
        pass
    return False


def env_int(name, default):
    text = os.environ.get(name, "")
    if text.strip() == "":
        return default
    try:
        return int(text.strip(), 0)
    except ValueError:
        sys.stderr.write("kimi exporter double: %s=%r is not an integer\n" % (name, text))
        sys.exit(2)


# ================================================================================================
# dcgm-exporter
# ================================================================================================

DCGM_VERSION = "4.5.3-4.8.2"
DCGM_COLLECTORS_DEFAULT = "/etc/dcgm-exporter/default-counters.csv"
DCGM_LOG_LEVELS = ("NONE", "FATAL", "ERROR", "WARN", "INFO", "DEBUG", "VERB")

# etc/default-counters.csv at tag 4.5.3-4.8.2, verbatim (the image has it as /etc/dcgm-exporter/default-counters.csv)
DEFAULT_COUNTERS_CSV = """\
# Format
# If line starts with a '#' it is considered a comment
# DCGM FIELD, Prometheus metric type, help message

# Clocks
DCGM_FI_DEV_SM_CLOCK,  gauge, SM clock frequency (in MHz).
DCGM_FI_DEV_MEM_CLOCK, gauge, Memory clock frequency (in MHz).

# Temperature
DCGM_FI_DEV_MEMORY_TEMP, gauge, Memory temperature (in C).
DCGM_FI_DEV_GPU_TEMP,    gauge, GPU temperature (in C).

# Power
DCGM_FI_DEV_POWER_USAGE,              gauge, Power draw (in W).
DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION, counter, Total energy consumption since boot (in mJ).

# PCIE
# DCGM_FI_PROF_PCIE_TX_BYTES,  counter, Total number of bytes transmitted through PCIe TX via NVML.
# DCGM_FI_PROF_PCIE_RX_BYTES,  counter, Total number of bytes received through PCIe RX via NVML.
DCGM_FI_DEV_PCIE_REPLAY_COUNTER, counter, Total number of PCIe retries.

# Utilization (the sample period varies depending on the product)
DCGM_FI_DEV_GPU_UTIL,      gauge, GPU utilization (in %).
DCGM_FI_DEV_MEM_COPY_UTIL, gauge, Memory utilization (in %).
DCGM_FI_DEV_ENC_UTIL,      gauge, Encoder utilization (in %).
DCGM_FI_DEV_DEC_UTIL ,     gauge, Decoder utilization (in %).

# Errors and violations
DCGM_FI_DEV_XID_ERRORS,              gauge,   Value of the last XID error encountered.
# DCGM_FI_DEV_POWER_VIOLATION,       counter, Throttling duration due to power constraints (in ns).
# DCGM_FI_DEV_THERMAL_VIOLATION,     counter, Throttling duration due to thermal constraints (in ns).
# DCGM_FI_DEV_SYNC_BOOST_VIOLATION,  counter, Throttling duration due to sync-boost constraints (in ns).
# DCGM_FI_DEV_BOARD_LIMIT_VIOLATION, counter, Throttling duration due to board limit constraints (in ns).
# DCGM_FI_DEV_LOW_UTIL_VIOLATION,    counter, Throttling duration due to low utilization (in ns).
# DCGM_FI_DEV_RELIABILITY_VIOLATION, counter, Throttling duration due to reliability constraints (in ns).

# DCGM Exporter fields

# DCGM_EXP_CLOCK_EVENTS_COUNT, counter, reported clock events
# DCGM_EXP_XID_ERRORS_COUNT, counter, reported XIDs during last window
# DCGM_EXP_GPU_HEALTH_STATUS, counter, DCGM reported health status
# DCGM_EXP_P2P_STATUS, counter, P2P NvLink status

# Memory usage
DCGM_FI_DEV_FB_FREE, gauge, Framebuffer memory free (in MiB).
DCGM_FI_DEV_FB_USED, gauge, Framebuffer memory used (in MiB).
DCGM_FI_DEV_FB_RESERVED, gauge, Framebuffer memory reserved (in MiB).

# ECC
# DCGM_FI_DEV_ECC_SBE_VOL_TOTAL, counter, Total number of single-bit volatile ECC errors.
# DCGM_FI_DEV_ECC_DBE_VOL_TOTAL, counter, Total number of double-bit volatile ECC errors.
# DCGM_FI_DEV_ECC_SBE_AGG_TOTAL, counter, Total number of single-bit persistent ECC errors.
# DCGM_FI_DEV_ECC_DBE_AGG_TOTAL, counter, Total number of double-bit persistent ECC errors.

# Retired pages
# DCGM_FI_DEV_RETIRED_SBE,     counter, Total number of retired pages due to single-bit errors.
# DCGM_FI_DEV_RETIRED_DBE,     counter, Total number of retired pages due to double-bit errors.
# DCGM_FI_DEV_RETIRED_PENDING, counter, Total number of pages pending retirement.

# NVLink
# DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL, counter, Total number of NVLink flow-control CRC errors.
# DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL, counter, Total number of NVLink data CRC errors.
# DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL,   counter, Total number of NVLink retries.
# DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL, counter, Total number of NVLink recovery errors.
DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL,            counter, Total number of NVLink bandwidth counters for all lanes.
# DCGM_FI_DEV_NVLINK_BANDWIDTH_L0,               counter, The number of bytes of active NVLink rx or tx data including both header and payload.

# VGPU License status
DCGM_FI_DEV_VGPU_LICENSE_STATUS, gauge, vGPU License status

# Remapped rows
DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS, counter, Number of remapped rows for uncorrectable errors
DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS,   counter, Number of remapped rows for correctable errors
DCGM_FI_DEV_ROW_REMAP_FAILURE,           gauge,   Whether remapping of rows has failed

# Static configuration information. These appear as labels on the other metrics
DCGM_FI_DRIVER_VERSION,        label, Driver Version
# DCGM_FI_NVML_VERSION,          label, NVML Version
# DCGM_FI_DEV_BRAND,             label, Device Brand
# DCGM_FI_DEV_SERIAL,            label, Device Serial Number
# DCGM_FI_DEV_OEM_INFOROM_VER,   label, OEM inforom version
# DCGM_FI_DEV_ECC_INFOROM_VER,   label, ECC inforom version
# DCGM_FI_DEV_POWER_INFOROM_VER, label, Power management object inforom version
# DCGM_FI_DEV_INFOROM_IMAGE_VER, label, Inforom image version
# DCGM_FI_DEV_VBIOS_VERSION,     label, VBIOS version of the device

# Datacenter Profiling (DCP) metrics
# NOTE: supported on Nvidia datacenter Volta GPUs and newer
DCGM_FI_PROF_GR_ENGINE_ACTIVE,   gauge, Ratio of time the graphics engine is active.
# DCGM_FI_PROF_SM_ACTIVE,          gauge, The ratio of cycles an SM has at least 1 warp assigned.
# DCGM_FI_PROF_SM_OCCUPANCY,       gauge, The ratio of number of warps resident on an SM.
DCGM_FI_PROF_PIPE_TENSOR_ACTIVE, gauge, Ratio of cycles the tensor (HMMA) pipe is active.
DCGM_FI_PROF_DRAM_ACTIVE,        gauge, Ratio of cycles the device memory interface is active sending or receiving data.
# DCGM_FI_PROF_PIPE_FP64_ACTIVE,   gauge, Ratio of cycles the fp64 pipes are active.
# DCGM_FI_PROF_PIPE_FP32_ACTIVE,   gauge, Ratio of cycles the fp32 pipes are active.
# DCGM_FI_PROF_PIPE_FP16_ACTIVE,   gauge, Ratio of cycles the fp16 pipes are active.
DCGM_FI_PROF_PCIE_TX_BYTES,      gauge, The rate of data transmitted over the PCIe bus - including both protocol headers and data payloads - in bytes per second.
DCGM_FI_PROF_PCIE_RX_BYTES,      gauge, The rate of data received over the PCIe bus - including both protocol headers and data payloads - in bytes per second.
"""

# DCGM fields the double knows: every field of etc/default-counters.csv, etc/dcp-metrics-included.csv and
# etc/1.x-compatibility-metrics.csv (commented or not). name: (field id from dcgm_fields.h, DCGM value type:
# i = int64 printed "%d", d = double printed "%f", s = string).
DCGM_FIELDS = {
    "DCGM_FI_DRIVER_VERSION": (1, "s"), "DCGM_FI_NVML_VERSION": (2, "s"), "DCGM_FI_DEV_BRAND": (51, "s"),
    "DCGM_FI_DEV_SERIAL": (53, "s"), "DCGM_FI_DEV_OEM_INFOROM_VER": (56, "s"),
    "DCGM_FI_DEV_ECC_INFOROM_VER": (80, "s"), "DCGM_FI_DEV_POWER_INFOROM_VER": (81, "s"),
    "DCGM_FI_DEV_INFOROM_IMAGE_VER": (82, "s"), "DCGM_FI_DEV_VBIOS_VERSION": (85, "s"),
    "DCGM_FI_DEV_SM_CLOCK": (100, "i"), "DCGM_FI_DEV_MEM_CLOCK": (101, "i"), "DCGM_FI_DEV_MEMORY_TEMP": (140, "i"),
    "DCGM_FI_DEV_GPU_TEMP": (150, "i"), "DCGM_FI_DEV_POWER_USAGE": (155, "d"),
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": (156, "i"), "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": (202, "i"),
    "DCGM_FI_DEV_GPU_UTIL": (203, "i"), "DCGM_FI_DEV_MEM_COPY_UTIL": (204, "i"), "DCGM_FI_DEV_ENC_UTIL": (206, "i"),
    "DCGM_FI_DEV_DEC_UTIL": (207, "i"), "DCGM_FI_DEV_XID_ERRORS": (230, "i"), "DCGM_FI_DEV_POWER_VIOLATION": (240, "i"),
    "DCGM_FI_DEV_THERMAL_VIOLATION": (241, "i"), "DCGM_FI_DEV_SYNC_BOOST_VIOLATION": (242, "i"),
    "DCGM_FI_DEV_BOARD_LIMIT_VIOLATION": (243, "i"), "DCGM_FI_DEV_LOW_UTIL_VIOLATION": (244, "i"),
    "DCGM_FI_DEV_RELIABILITY_VIOLATION": (245, "i"), "DCGM_FI_DEV_FB_FREE": (251, "i"), "DCGM_FI_DEV_FB_USED": (252, "i"),
    "DCGM_FI_DEV_FB_RESERVED": (253, "i"), "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": (310, "i"),
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": (311, "i"), "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL": (312, "i"),
    "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL": (313, "i"), "DCGM_FI_DEV_RETIRED_SBE": (390, "i"),
    "DCGM_FI_DEV_RETIRED_DBE": (391, "i"), "DCGM_FI_DEV_RETIRED_PENDING": (392, "i"),
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": (393, "i"), "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": (394, "i"),
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": (395, "i"), "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL": (409, "i"),
    "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL": (419, "i"),
    "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL": (429, "i"),
    "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL": (439, "i"), "DCGM_FI_DEV_NVLINK_BANDWIDTH_L0": (440, "i"),
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL": (449, "i"), "DCGM_FI_DEV_VGPU_LICENSE_STATUS": (526, "i"),
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": (1001, "d"), "DCGM_FI_PROF_SM_ACTIVE": (1002, "d"),
    "DCGM_FI_PROF_SM_OCCUPANCY": (1003, "d"), "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": (1004, "d"),
    "DCGM_FI_PROF_DRAM_ACTIVE": (1005, "d"), "DCGM_FI_PROF_PIPE_FP64_ACTIVE": (1006, "d"),
    "DCGM_FI_PROF_PIPE_FP32_ACTIVE": (1007, "d"), "DCGM_FI_PROF_PIPE_FP16_ACTIVE": (1008, "d"),
    "DCGM_FI_PROF_PCIE_TX_BYTES": (1009, "i"), "DCGM_FI_PROF_PCIE_RX_BYTES": (1010, "i"),
}
DCGM_EXPORTER_FIELDS = ("DCGM_EXP_CLOCK_EVENTS_COUNT", "DCGM_EXP_XID_ERRORS_COUNT", "DCGM_EXP_GPU_HEALTH_STATUS",
                        "DCGM_EXP_P2P_STATUS")
PROM_TYPES = ("gauge", "counter", "histogram", "summary", "label")
DCP_FIELDS_START, CPU_FIELDS_START = 1000, 1100

# internal/pkg/collector/xid_errors.go, index = XID
XID_ERR_MSG = (
    "No Error", "Invalid or corrupted push buffer stream", "Invalid or corrupted push buffer stream",
    "Invalid or corrupted push buffer stream", "Invalid or corrupted push buffer stream", "Unused",
    "Invalid or corrupted push buffer stream", "Invalid or corrupted push buffer address", "GPU stopped processing",
    "Driver error programming GPU", "Unused", "Invalid or corrupted push buffer stream",
    "Driver error handling GPU exception", "Graphics Engine Exception", "Unused", "Unused", "Display engine hung",
    "Unused", "Bus mastering disabled in PCI Config Space", "Display Engine error",
    "Invalid or corrupted Mpeg push buffer", "Invalid or corrupted Motion Estimation push buffer",
    "Invalid or corrupted Video Processor push buffer", "Unused", "GPU semaphore timeout",
    "Invalid or illegal push buffer stream", "Framebuffer timeout", "Video processor exception",
    "Video processor exception", "Video processor exception", "GPU semaphore access error", "GPU memory page fault",
    "Invalid or corrupted push buffer stream", "Internal micro-controller error", "Video processor exception",
    "Video processor exception", "Video processor exception", "Driver firmware error", "Driver firmware error",
    "Unused", "Unused", "Unused", "Video processor exception", "GPU stopped processing",
    "Graphics Engine fault during context switch",
    "Preemptive cleanup, due to previous errors -- Most likely to see when running multiple cuda",
    "GPU stopped processing", "Video processor exception", "Double Bit ECC Error", "Unused", "Unused", "Unused",
    "Unused", "Unused", "Auxiliary power is not connected to the GPU board", "Unused", "Display Engine error",
    "Error programming video memory interface", "Unstable video memory interface detected",
    "Internal micro-controller error", "Video processor exception", "Internal micro-controller breakpoint/warning",
    "Internal micro-controller halt", "ECC page retirement or row remapping recording event",
    "ECC page retirement or row remapper recording failure", "Video processor exception", "Illegal access by driver",
    "Illegal access by driver", "NVDEC0 Exception", "Graphics Engine class error", "CE3: Unknown Error",
    "CE4: Unknown Error", "CE5: Unknown Error", "NVENC2 Error", "NVLINK Error", "CE6: Unknown Error",
    "CE7: Unknown Error", "CE8: Unknown Error", "vGPU Start Error", "GPU has fallen off the bus",
    "Corrupted data sent to GPU", "VGA Subsystem Error", "NVJPG0 Error", "NVDEC1 Error", "NVDEC2 Error",
    "CE9: Unknown Error", "OFA Exception", "Reserved", "NVDEC3 Error", "NVDEC4 Error", "Reserved", "Reserved",
    "High single-bit ECC error rate", "Non-fatal violation of provisioned InfoROM wear limit", "Contained ECC error",
    "Uncontained ECC error", "NVDEC5 Error", "NVDEC6 Error", "NVDEC7 Error", "NVJPG1 Error", "NVJPG2 Error",
    "NVJPG3 Error", "NVJPG4 Error", "NVJPG5 Error", "NVJPG6 Error", "NVJPG7 Error", "SMBPBI Test Message",
    "SMBPBI Test Message Silent", "Reserved", "Context Switch Timeout Error", "Security Fault Error",
    "Display Bundle Error Event", "Display Supervisor Error", "DP Link Training Error",
    "Display Pipeline Underflow Error", "Display Core Channel Error", "Display Window Channel Error",
    "Display Cursor Channel Error", "Display Pixel Pipeline Error", "GSP RPC Timeout", "GSP Error", "C2C Link Error",
    "SPI PMU RPC Read Failure", "SPI PMU RPC Write Failure", "SPI PMU RPC Erase Failure", "Inforom FS Failure",
    "Robust Channel CE10 Error", "Robust Channel CE11 Error", "Robust Channel CE12 Error",
    "Robust Channel CE13 Error", "Robust Channel CE14 Error", "Robust Channel CE15 Error",
    "Robust Channel CE16 Error", "Robust Channel CE17 Error", "Robust Channel CE18 Error",
    "Robust Channel CE19 Error", "ALI Training Fail", "NVLink Privilege Error", "Robust Channel DLA Error",
    "Robust Channel OFA1 Error", "Unrecovered ECC Error", "Robust Channel Fast Path Error",
    "Robust Channel NVENVC3 Error", "GPU Initialization Failure", "NVLINK: Saw Error", "NVLINK: RLW Error",
    "NVLINK: TLW Error", "NVLINK: TREX Error", "NVLINK: NVLPW_CTRL Error", "NVLINK: NETIR Error",
    "NVLINK: MSE Error", "Robust Channel Key rotation Error", "Robust Channel DLA SMMU Error",
    "Robust Channel DLA timeout Error", "GPU Recovery Action Changed", "NVLINK: SW Defined Error",
    "Resource Retirement Event", "Resource Retirement Failure", "GPU Fatal Timeout",
    "Robust Channel CHI Non-Data Error", "Channel Retirement Event", "Channel Retirement Failure",
    "Power Smoothing HW Circuitry Reengaged", "Power Smoothing HW Circuitry Disengaged",
    "Power Smoothing HW Circuitry Low Lifetime", "Power Smoothing HW Circuitry Lifetime Exhausted",
    "NVLINK Secure Crypto Error", "PCIE Fatal Timeout",
    "Reduced GPU Memory Capacity (Errors found in write protection region)", "Internal micro-controller halt",
    "NVLINK: Interrupt seen in CC mode", "Uncorrectable DRAM Error", "Uncorrectable SRAM Error",
)

# the nvidia-smi query: the fields the brief names first, then the ones that sharpen the values
SMI_BASE_FIELDS = ["index", "uuid", "name", "pci.bus_id", "driver_version", "memory.total", "temperature.gpu"]
SMI_EXTRA_FIELDS = ["temperature.memory", "memory.used", "memory.free", "memory.reserved", "power.draw",
                    "utilization.gpu", "utilization.memory", "serial", "vbios_version"]

DCGM_FLAGS = [
    Flag("collectors", "string", DCGM_COLLECTORS_DEFAULT, "Path to the file, that contains the DCGM fields to collect",
         ["f"], ["DCGM_EXPORTER_COLLECTORS"]),
    Flag("address", "string", ":9400", 'Listen address as <HOST>:<PORT>. For IPv6, use "[<IPv6_ADDR>]:<PORT>" '
         '(e.g., "[::]:9400")', ["a"], ["DCGM_EXPORTER_LISTEN"]),
    Flag("collect-interval", "int", 30000, "Interval of time at which point metrics are collected. Unit is "
         "milliseconds (ms).", ["c"], ["DCGM_EXPORTER_INTERVAL"]),
    Flag("kubernetes", "bool", False, "Enable kubernetes mapping metrics to kubernetes pods", ["k"],
         ["DCGM_EXPORTER_KUBERNETES"]),
    Flag("use-old-namespace", "bool", False, "Use old 1.x namespace", ["o"], ["DCGM_EXPORTER_USE_OLD_NAMESPACE"]),
    Flag("cpu-devices", "string", "f", "Specify which devices dcgm-exporter monitors.", ["p"],
         ["DCGM_EXPORTER_CPU_DEVICES_STR"]),
    Flag("configmap-data", "string", "none", "ConfigMap <NAMESPACE>:<NAME> for metric data", ["m"],
         ["DCGM_EXPORTER_CONFIGMAP_DATA"]),
    Flag("remote-hostengine-info", "string", "localhost:5555", 'Connect to remote hostengine at <HOST>:<PORT>. For '
         'IPv6, use "[<IPv6_ADDR>]:<PORT>" (e.g., "[::1]:5555")', ["r"], ["DCGM_REMOTE_HOSTENGINE_INFO"]),
    Flag("kubernetes-enable-pod-labels", "bool", False, "Enable kubernetes pod labels in metrics. This parameter is "
         "effective only when the '--kubernetes' option is set to 'true'.", (),
         ["DCGM_EXPORTER_KUBERNETES_ENABLE_POD_LABELS"]),
    Flag("kubernetes-enable-pod-uid", "bool", False, "Enable kubernetes pod UID in metrics. This parameter is "
         "effective only when the '--kubernetes' option is set to 'true'.", (),
         ["DCGM_EXPORTER_KUBERNETES_ENABLE_POD_UID"]),
    Flag("kubernetes-gpu-id-type", "string", "uid", "Choose Type of GPU ID to use to map kubernetes resources to "
         "pods. Possible values: 'uid', 'device-name'", (), ["DCGM_EXPORTER_KUBERNETES_GPU_ID_TYPE"]),
    Flag("kubernetes-pod-label-allowlist-regex", "slice", [], "Regex patterns for filtering pod labels to include "
         "in metrics (comma-separated). Empty means include all labels. This parameter is effective only when "
         "'--kubernetes-enable-pod-labels' is true.", (), ["DCGM_EXPORTER_KUBERNETES_POD_LABEL_ALLOWLIST_REGEX"]),
    Flag("devices", "string", "f", "Specify which devices dcgm-exporter monitors.", ["d"],
         ["DCGM_EXPORTER_DEVICES_STR"]),
    Flag("no-hostname", "bool", False, "Omit the hostname information from the output, matching older versions.",
         ["n"], ["DCGM_EXPORTER_NO_HOSTNAME"]),
    Flag("switch-devices", "string", "f", "Specify which devices dcgm-exporter monitors.", ["s"],
         ["DCGM_EXPORTER_OTHER_DEVICES_STR"]),
    Flag("fake-gpus", "bool", False, "Accept GPUs that are fake, for testing purposes only", (),
         ["DCGM_EXPORTER_USE_FAKE_GPUS"]),
    Flag("web-config-file", "string", "", "Web configuration file following webConfig spec: https://github.com/"
         "prometheus/exporter-toolkit/blob/master/docs/web-configuration.md.", (), ["DCGM_EXPORTER_WEB_CONFIG_FILE"]),
    Flag("xid-count-window-size", "int", 300000, "Set time window size in milliseconds (ms) for counting active XID "
         "errors in DCGM Exporter.", ["x"], ["DCGM_EXPORTER_XID_COUNT_WINDOW_SIZE"]),
    Flag("replace-blanks-in-model-name", "bool", False, "Replace every blank space in the GPU model name with a "
         "dash, ensuring a continuous, space-free identifier.", ["rbmn"],
         ["DCGM_EXPORTER_REPLACE_BLANKS_IN_MODEL_NAME"]),
    Flag("debug", "bool", False, "Enable debug output", (), ["DCGM_EXPORTER_DEBUG"]),
    Flag("clock-events-count-window-size", "int", 300000, "Set time window size in milliseconds (ms) for counting "
         "clock events in DCGM Exporter.", (), ["DCGM_EXPORTER_CLOCK_EVENTS_COUNT_WINDOW_SIZE"]),
    Flag("enable-dcgm-log", "bool", False, "Enable writing DCGM logs to standard output (stdout).", (),
         ["DCGM_EXPORTER_ENABLE_DCGM_LOG"]),
    Flag("dcgm-log-level", "string", "NONE", "Specify the DCGM log verbosity level. This parameter is effective only "
         "when the '--enable-dcgm-log' option is set to 'true'. Possible values: NONE, FATAL, ERROR, WARN, INFO, "
         "DEBUG and VERB", (), ["DCGM_EXPORTER_DCGM_LOG_LEVEL"]),
    Flag("log-format", "string", "text", "Specify the log output format. Possible values: text, json", (),
         ["DCGM_EXPORTER_LOG_FORMAT"]),
    Flag("pod-resources-kubelet-socket", "string", "/var/lib/kubelet/pod-resources/kubelet.sock",
         "Path to the kubelet pod-resources socket file.", (), ["DCGM_POD_RESOURCES_KUBELET_SOCKET"]),
    Flag("hpc-job-mapping-dir", "string", "", "Path to HPC job mapping file directory used for mapping GPUs to jobs.",
         (), ["DCGM_HPC_JOB_MAPPING_DIR"]),
    Flag("nvidia-resource-names", "slice", [], "Nvidia resource names for specified GPU type like nvidia.com/a100, "
         "nvidia.com/a10.", (), ["NVIDIA_RESOURCE_NAMES"]),
    Flag("kubernetes-virtual-gpus", "bool", False, "Capture metrics associated with virtual GPUs exposed by "
         "Kubernetes device plugins when using GPU sharing strategies, e.g. time-sharing or MPS.", (),
         ["KUBERNETES_VIRTUAL_GPUS"]),
    Flag("dump-enabled", "bool", False, "Enable file-based debugging dumps for troubleshooting", (),
         ["DCGM_EXPORTER_DUMP_ENABLED"]),
    Flag("dump-directory", "string", "/tmp/dcgm-exporter-debug", "Directory to store debug dump files", (),
         ["DCGM_EXPORTER_DUMP_DIRECTORY"]),
    Flag("dump-retention", "int", 24, "Retention period for debug dump files in hours (0 = no cleanup)", (),
         ["DCGM_EXPORTER_DUMP_RETENTION"]),
    Flag("dump-compression", "bool", True, "Use gzip compression for debug dump files", (),
         ["DCGM_EXPORTER_DUMP_COMPRESSION"]),
    Flag("kubernetes-enable-dra", "bool", False, "Capture metrics associated with GPUs managed by Kubernetes Dynamic "
         "Resource Allocation (DRA) API.", (), ["KUBERNETES_ENABLE_DRA"]),
    Flag("disable-startup-validate", "bool", False, "Disable validation checks during startup. Can be useful for "
         "running in minimal environments or testing", (), ["DISABLE_STARTUP_VALIDATE"]),
    Flag("enable-gpu-bind-unbind-watch", "bool", False, "Enable watching for GPU bind/unbind events to trigger "
         "automatic reloads (requires DCGM 4.5+)", (), ["DCGM_EXPORTER_ENABLE_GPU_BIND_UNBIND_WATCH"]),
    Flag("gpu-bind-unbind-poll-interval", "string", "1s", "Interval for polling GPU bind/unbind events (DCGM "
         "recommends 1s)", (), ["DCGM_EXPORTER_GPU_BIND_UNBIND_POLL_INTERVAL"]),
    Flag("enable-pprof", "bool", False, "Enable /debug/pprof/ HTTP endpoints for profiling and debugging", (),
         ["DCGM_EXPORTER_ENABLE_PPROF"]),
    Flag("web-systemd-socket", "bool", False, "Use systemd socket activation listeners instead of port listeners "
         "(Linux only).", (), ["DCGM_EXPORTER_SYSTEMD_SOCKET"]),
    Flag("help", "bool", False, "show help", ["h"]),
    Flag("version", "bool", False, "print the version", ["v"]),
]


class DcgmLog(object):
    """log/slog: the text handler (time=... level=... msg=...) or JSON, on stderr; --debug adds DEBUG."""

    def __init__(self):
        self.format, self.debug_on, self.configured = "text", False, False

    @staticmethod
    def _stamp():
        now = time.time()
        local = time.localtime(now)
        offset = local.tm_gmtoff or 0
        sign = "+" if offset > 0 else "-"
        zone = "Z" if offset == 0 else "%s%02d:%02d" % (sign, abs(offset) // 3600, abs(offset) % 3600 // 60)
        return time.strftime("%Y-%m-%dT%H:%M:%S", local) + ".%03d" % (now % 1 * 1000) + zone

    @staticmethod
    def _value(text):
        text = str(text)
        if text == "" or any(c in text for c in ' ="\\') or any(ord(c) < 0x21 or ord(c) == 0x7f for c in text):
            return go_quote(text)
        return text

    def log(self, level, msg, **attrs):
        if level == "DEBUG" and not self.debug_on:
            return
        if not self.configured:   # slog's default handler, before configureLogger: the log package's format
            line = time.strftime("%Y/%m/%d %H:%M:%S") + " %s %s" % (level, msg)
            line += "".join(" %s=%s" % (k, self._value(v)) for k, v in attrs.items())
        elif self.format == "json":
            record = {"time": self._stamp(), "level": level, "msg": msg}
            record.update(attrs)
            line = json.dumps(record, separators=(",", ":"))
        else:
            line = "time=%s level=%s msg=%s" % (self._stamp(), level, self._value(msg))
            line += "".join(" %s=%s" % (k, self._value(v)) for k, v in attrs.items())
        sys.stderr.write(line + "\n")
        sys.stderr.flush()

    def info(self, msg, **attrs):
        self.log("INFO", msg, **attrs)

    def warn(self, msg, **attrs):
        self.log("WARN", msg, **attrs)

    def error(self, msg, **attrs):
        self.log("ERROR", msg, **attrs)

    def debug(self, msg, **attrs):
        self.log("DEBUG", msg, **attrs)


class DcgmExit(Exception):
    """app.Run returned an error: main logs it with slog.Error and exits 1."""

    def __init__(self, message):
        Exception.__init__(self, message)
        self.message = message


def dcgm_help(prog):
    """urfave/cli v2's app help (AppHelpTemplate), flag lines as the v2 FlagStringer prints them."""
    rows = []
    for flag in DCGM_FLAGS:
        names = [flag.name] + list(flag.aliases)
        parts = []
        for name in names:
            dash = "--" if len(name) > 1 else "-"
            parts.append(dash + name + ("" if flag.kind == "bool" else " value"))
        text = flag.usage
        if flag.kind != "bool" and flag.default not in ("", [], None):
            default = go_quote(flag.default) if flag.kind == "string" else str(flag.default)
            text += " (default: %s)" % default
        elif flag.kind == "bool" and flag.default is True:
            text += " (default: true)"
        if flag.env:
            text += " [%s]" % ", ".join("$" + e for e in flag.env)
        rows.append((", ".join(parts), text))
    width = max(len(r[0]) for r in rows) + 2
    lines = ["NAME:", "   %s - Generates GPU metrics in the prometheus format" % prog, "", "USAGE:",
             "   %s [global options] command [command options] " % prog, "", "VERSION:", "   " + DCGM_VERSION, "",
             "COMMANDS:", "   help, h  Shows a list of commands or help for one command", "", "GLOBAL OPTIONS:"]
    lines += ["   " + left.ljust(width) + right for left, right in rows]
    return "\n".join(lines) + "\n"


def dcgm_args(argv):
    """urfave/cli v2 on Go's flag package: env vars first (EnvVars), then the command line."""
    prog = os.path.basename(argv[0]) if argv else "dcgm-exporter"
    flags, values, seen = {}, {}, set()
    for flag in DCGM_FLAGS:
        values[flag.name] = flag.default
        for name in (flag.name,) + flag.aliases:
            flags[name] = flag
        for env in flag.env:
            if env in os.environ:
                text = os.environ[env]
                if flag.kind in ("bool", "int") and text == "":
                    break
                try:
                    values[flag.name] = flag.convert(text)
                except ValueError:
                    raise DcgmExit("could not parse %s as %s value from environment variable %s for flag %s: "
                                   "parse error" % (go_quote(text), flag.kind, go_quote(env), flag.name))
                break
    try:
        go_parse(argv[1:], flags, values, seen)
    except (FlagError, HelpRequested) as err:
        sys.stdout.write("Incorrect Usage: %s\n\n" % err)
        sys.stdout.write(dcgm_help(prog))
        sys.stdout.flush()
        raise DcgmExit(str(err))
    return prog, values, seen


def parse_device_options(text):
    """pkg/cmd/app.go parseDeviceOptions: f | g[:ids] | i[:ids]; ids 0,2-4."""
    parts = text.split(":")
    if len(parts) > 2:
        raise DcgmExit("Invalid ranged device option '%s': there can only be one specified range" % text)
    letter = parts[0]
    if letter == "f":
        if len(parts) > 1:
            raise DcgmExit("no range can be specified with the flex option 'f'")
        return ("f", None)
    if letter not in ("g", "i"):
        raise DcgmExit("the only valid options preceding ':<range>' are 'g' or 'i', but found '%s'" % letter)
    if len(parts) == 1:
        return (letter, None)
    ids = []
    for token in parts[1].split(","):
        ends = token.split("-")
        try:
            if len(ends) == 1:
                ids.append(int(ends[0]))
            elif len(ends) == 2:
                ids.extend(range(int(ends[0]), int(ends[1]) + 1))
            else:
                raise DcgmExit("range can only be '<number>-<number>', but found '%s'" % token)
        except ValueError:
            raise DcgmExit('strconv.Atoi: parsing %s: invalid syntax' % go_quote(ends[0]))
    return (letter, ids)


def read_counters(path, dcp, log):
    """counters.ReadCSVFile + ExtractCounters: '#' comments, fields trimmed, 3 per record, known DCGM fields,
    DCP (profiling) fields only when profiling is available. Returns [(name, field_id, prom_type, help)]."""
    if path == DCGM_COLLECTORS_DEFAULT and not os.path.exists(path):
        text = DEFAULT_COUNTERS_CSV   # run from the repository: the image's file, embedded
    else:
        try:
            with open(path) as handle:
                text = handle.read()
        except (IOError, OSError) as err:
            log.error("Could not read metrics file '%s'; err: open %s: %s" % (path, path, _errno_text(err)))
            raise DcgmExit("open %s: %s" % (path, _errno_text(err)))
    records, width = [], None
    for number, line in enumerate(text.splitlines(), 1):
        if line.startswith("#") or line.strip() == "":
            continue
        record = next(csv.reader([line]))
        if width is None:
            width = len(record)
        elif len(record) != width:
            raise DcgmExit("record on line %d: wrong number of fields" % number)
        records.append(record)
    counters = []
    for index, record in enumerate(records):
        record = [field.strip(" ") for field in record]
        if len(record) != 3:
            raise DcgmExit("malformed CSV record; err: failed to parse line %d (`[%s]`), expected 3 fields"
                           % (index, " ".join(record)))
        name, prom_type, help_text = record
        if name not in DCGM_FIELDS:
            if name in DCGM_EXPORTER_FIELDS:
                raise DcgmExit("kimi exporter double: exporter field %s is not implemented" % name)
            raise DcgmExit("could not find DCGM field; err: unknown ExporterCounter field '%s'" % name)
        field_id = DCGM_FIELDS[name][0]
        if DCP_FIELDS_START <= field_id < CPU_FIELDS_START and not dcp:
            log.warn("Skipping line %d ('%s'): metric not enabled" % (index, name))
            continue
        if prom_type not in PROM_TYPES:
            raise DcgmExit("could not find Prometheus metric type '%s'" % prom_type)
        counters.append((name, field_id, prom_type, help_text))
    return counters


def _errno_text(err):
    return (err.strerror or str(err)).lower()


def _num(text, kind=float):
    text = (text or "").strip()
    if text in ("", "[N/A]", "N/A", "[Not Supported]", "Not Supported", "[Unknown Error]"):
        return None
    try:
        return kind(float(text))
    except ValueError:
        return None


def query_nvidia_smi(smi):
    """One row per GPU from `nvidia-smi --query-gpu=... --format=csv,noheader,nounits`; the extra fields when this
    nvidia-smi knows them. Raises DcgmExit (like a failed DCGM init) when nvidia-smi fails."""
    for fields in (SMI_BASE_FIELDS + SMI_EXTRA_FIELDS, SMI_BASE_FIELDS):
        proc = subprocess.run([smi, "--query-gpu=" + ",".join(fields), "--format=csv,noheader,nounits"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, check=False)
        if proc.returncode == 2 and fields is not SMI_BASE_FIELDS:
            continue
        if proc.returncode == 6 or "No devices were found" in proc.stdout:
            return []
        if proc.returncode != 0:
            first = ((proc.stdout + proc.stderr).strip().splitlines() or [""])[0]
            raise DcgmExit("Error: DCGM failed to initialize (kimi double: nvidia-smi exit %d: %s)"
                           % (proc.returncode, first))
        gpus = []
        for line in proc.stdout.splitlines():
            if not line.strip():
                continue
            cells = [cell.strip() for cell in line.split(", ")]
            row = dict(zip(fields, cells))
            gpus.append({
                "index": int(row["index"]), "uuid": row["uuid"], "name": row["name"], "bus": row["pci.bus_id"],
                "driver": row["driver_version"], "mem_total": _num(row["memory.total"], int),
                "temp": _num(row["temperature.gpu"], int), "mem_temp": _num(row.get("temperature.memory"), int),
                "mem_used": _num(row.get("memory.used"), int), "mem_free": _num(row.get("memory.free"), int),
                "mem_reserved": _num(row.get("memory.reserved"), int), "power": _num(row.get("power.draw")),
                "util": _num(row.get("utilization.gpu"), int), "mem_util": _num(row.get("utilization.memory"), int),
                "serial": row.get("serial"), "vbios": row.get("vbios_version"),
                "smi_extra": "temperature.memory" in row})
        return gpus
    return []


FAKE_BUSES = (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB)


def fake_gpus(count):
    """KIMI_DOUBLE_GPUS made-up H100s: stable, well-formed UUIDs and bus ids."""
    gpus = []
    for i in range(count):
        bus = FAKE_BUSES[i] if i < len(FAKE_BUSES) else 0x10 + i
        gpus.append({"index": i, "uuid": "GPU-%08x-4b1d-4e6f-8a2c-%012x" % (0x6b1d0000 + i, 0xd0b1e0000000 + i),
                     "name": "NVIDIA H100 80GB HBM3", "bus": "00000000:%02X:00.0" % bus, "driver": "580.159.04",
                     "mem_total": 81559, "temp": 30 + i % 5, "mem_temp": None, "mem_used": None, "mem_free": None,
                     "mem_reserved": None, "power": 69.0 + i, "util": 0, "mem_util": 0,
                     "serial": "165242%07d" % (1000000 + i), "vbios": "96.00.99.00.01", "smi_extra": False})
    return gpus


def discover_gpus():
    smi = shutil.which("nvidia-smi")
    if smi:
        return query_nvidia_smi(smi), "nvidia-smi"
    return fake_gpus(env_int("KIMI_DOUBLE_GPUS", 8)), "KIMI_DOUBLE_GPUS"


def dcgm_values(gpu, state):
    """Field name -> value for one GPU (None = blank: DCGM has no value, the series is skipped)."""
    total = gpu["mem_total"] or 0
    reserved = gpu["mem_reserved"] if gpu["mem_reserved"] is not None else int(round(total * 0.0066))
    used = gpu["mem_used"] if gpu["mem_used"] is not None else 0
    free = gpu["mem_free"] if gpu["mem_free"] is not None else max(total - reserved - used, 0)
    temp = gpu["temp"]
    override = os.environ.get("KIMI_DOUBLE_GPU_TEMP", "").strip()
    if override:
        temp = env_int("KIMI_DOUBLE_GPU_TEMP", 0)
    mem_temp = gpu["mem_temp"] if gpu["smi_extra"] else (None if temp is None else temp + 3)
    power = gpu["power"] if gpu["power"] is not None else 70.0
    util = gpu["util"] or 0
    xid = env_int("KIMI_DOUBLE_XID", 0) if gpu["index"] == 0 else 0
    uptime = time.time() - START
    return {
        "DCGM_FI_DRIVER_VERSION": gpu["driver"], "DCGM_FI_NVML_VERSION": "12." + gpu["driver"],
        "DCGM_FI_DEV_BRAND": "NVIDIA", "DCGM_FI_DEV_SERIAL": gpu["serial"] or None,
        "DCGM_FI_DEV_OEM_INFOROM_VER": "1.0", "DCGM_FI_DEV_ECC_INFOROM_VER": "7.0",
        "DCGM_FI_DEV_POWER_INFOROM_VER": None, "DCGM_FI_DEV_INFOROM_IMAGE_VER": "G520.0200.00.05",
        "DCGM_FI_DEV_VBIOS_VERSION": gpu["vbios"] or None,
        "DCGM_FI_DEV_SM_CLOCK": 1980 if util else 345, "DCGM_FI_DEV_MEM_CLOCK": 2619,
        "DCGM_FI_DEV_MEMORY_TEMP": mem_temp, "DCGM_FI_DEV_GPU_TEMP": temp, "DCGM_FI_DEV_POWER_USAGE": float(power),
        # mJ since the driver loaded: a day at this power, plus what the double has been up
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": int(power * (86400 + uptime) * 1000),
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": 0, "DCGM_FI_DEV_GPU_UTIL": util,
        "DCGM_FI_DEV_MEM_COPY_UTIL": gpu["mem_util"] or 0, "DCGM_FI_DEV_ENC_UTIL": 0, "DCGM_FI_DEV_DEC_UTIL": 0,
        "DCGM_FI_DEV_XID_ERRORS": xid, "DCGM_FI_DEV_FB_FREE": free, "DCGM_FI_DEV_FB_USED": used,
        "DCGM_FI_DEV_FB_RESERVED": reserved, "DCGM_FI_DEV_VGPU_LICENSE_STATUS": 0,
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE": util / 100.0, "DCGM_FI_PROF_SM_ACTIVE": util / 100.0 * 0.9,
        "DCGM_FI_PROF_SM_OCCUPANCY": util / 100.0 * 0.4, "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": util / 100.0 * 0.3,
        "DCGM_FI_PROF_DRAM_ACTIVE": util / 100.0 * 0.5, "DCGM_FI_PROF_PIPE_FP64_ACTIVE": 0.0,
        "DCGM_FI_PROF_PIPE_FP32_ACTIVE": util / 100.0 * 0.05, "DCGM_FI_PROF_PIPE_FP16_ACTIVE": util / 100.0 * 0.02,
        "DCGM_FI_PROF_PCIE_TX_BYTES": 2400000 + util * 1000000, "DCGM_FI_PROF_PCIE_RX_BYTES": 3100000 + util * 1000000,
    }


def dcgm_format(name, value):
    kind = DCGM_FIELDS[name][1]
    if kind == "d":
        return "%f" % value
    if kind == "i":
        return "%d" % int(value)
    return str(value)


def dcgm_render(state):
    """render_metrics.go gpuMetricsFormat: counters by field id, one series per GPU in GPU order, labels
    gpu, UUID, pci_bus_id, device, modelName, Hostname, then the label fields (sorted), then attributes (sorted)."""
    counters, gpus, opts = state["counters"], state["gpus"], state["opts"]
    uuid_label = "uuid" if opts["use-old-namespace"] else "UUID"
    per_gpu = [dcgm_values(gpu, state) for gpu in gpus]
    label_fields = [c for c in counters if c[2] == "label"]
    metric_fields = sorted((c for c in counters if c[2] != "label"), key=lambda c: (c[1], c[0], c[2], c[3]))
    out = []
    seen_ids = set()
    for name, field_id, prom_type, help_text in metric_fields:
        if field_id in seen_ids:   # findCounterField: the first counter with the id gets the values
            continue
        seen_ids.add(field_id)
        lines = []
        for gpu, values in zip(gpus, per_gpu):
            value = values.get(name, 0)
            if value is None:
                continue
            model = gpu["name"]
            if opts["replace-blanks-in-model-name"]:
                model = "-".join(model.split())
            labels = '%s{gpu="%d",%s="%s",pci_bus_id="%s",device="nvidia%d",modelName="%s"' % (
                name, gpu["index"], uuid_label, gpu["uuid"], gpu["bus"], gpu["index"], model)
            if state["hostname"]:
                labels += ',Hostname="%s"' % state["hostname"]
            extra = {}
            for label_name, _fid, _t, _h in label_fields:
                label_value = values.get(label_name)
                if label_value is not None:
                    extra[label_name] = label_value
            attrs = {}
            if name == "DCGM_FI_DEV_XID_ERRORS":
                code = int(value)
                attrs = {"err_code": str(code),
                         "err_msg": XID_ERR_MSG[code] if 0 <= code < len(XID_ERR_MSG) else "Unknown Error"}
            for key in sorted(extra):
                labels += ',%s="%s"' % (key, extra[key])
            for key in sorted(attrs):
                labels += ',%s="%s"' % (key, attrs[key])
            lines.append("%s} %s\n" % (labels, dcgm_format(name, value)))
        if lines:
            out.append("# HELP %s %s\n# TYPE %s %s\n" % (name, help_text, name, prom_type))
            out.extend(lines)
    return "".join(out)


def split_host_port(address):
    """net.SplitHostPort for a listen address."""
    if address.startswith("["):
        end = address.find("]")
        if end < 0:
            raise ValueError("address %s: missing ']' in address" % address)
        host, rest = address[1:end], address[end + 1:]
        if not rest.startswith(":"):
            raise ValueError("address %s: missing port in address" % address)
        return host, rest[1:]
    if ":" not in address:
        raise ValueError("address %s: missing port in address" % address)
    host, port = address.rsplit(":", 1)
    if ":" in host:
        raise ValueError("address %s: too many colons in address" % address)
    return host, port


def resolve_port(port):
    if port == "":
        return 0
    if port.isdigit():
        return int(port)
    try:
        return socket.getservbyname(port, "tcp")
    except OSError:
        raise ValueError("lookup tcp/%s: unknown port" % port)


def resolve_host(host):
    if host == "":
        return ""
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        pass
    infos = socket.getaddrinfo(host, None, 0, socket.SOCK_STREAM)
    infos.sort(key=lambda info: 0 if info[0] == socket.AF_INET else 1)
    return infos[0][4][0]


def dcgm_main(argv):
    log = DcgmLog()
    try:
        return _dcgm_main(argv, log)
    except DcgmExit as err:
        log.error(err.message)
        return 1


def _dcgm_main(argv, log):
    prog, opts, seen = dcgm_args(argv)
    if opts["help"]:
        sys.stdout.write(dcgm_help(prog))
        return 0
    if opts["version"]:
        sys.stdout.write("DCGM Exporter version %s\n" % DCGM_VERSION)
        return 0
    if opts["log-format"] not in ("text", "json"):
        raise DcgmExit("invalid log-format parameter values: %s" % opts["log-format"])
    log.format, log.debug_on, log.configured = opts["log-format"], opts["debug"], True
    if opts["debug"]:
        log.debug("Debug output is enabled")
    log.info("Starting dcgm-exporter", Version=DCGM_VERSION)
    for key in ("devices", "switch-devices", "cpu-devices"):
        parse_device_options(opts[key])
    devices = parse_device_options(opts["devices"])
    if opts["dcgm-log-level"] not in DCGM_LOG_LEVELS:
        raise DcgmExit("invalid dcgm-log-level parameter value: %s" % opts["dcgm-log-level"])
    if opts["web-config-file"]:
        raise DcgmExit("kimi exporter double: --web-config-file (TLS/basic auth) is not implemented")
    if opts["web-systemd-socket"]:
        raise DcgmExit("kimi exporter double: --web-systemd-socket is not implemented")
    if opts["configmap-data"] != "none":
        raise DcgmExit("kimi exporter double: --configmap-data (Kubernetes ConfigMap) is not implemented")
    remote = "remote-hostengine-info" in seen or "DCGM_REMOTE_HOSTENGINE_INFO" in os.environ
    if remote:
        log.info("Attempting to connect to remote hostengine at " + opts["remote-hostengine-info"])
        try:
            host, port = split_host_port(opts["remote-hostengine-info"])
            socket.create_connection((host or "localhost", resolve_port(port)), timeout=3).close()
        except (ValueError, OSError) as err:
            log.error("Failed to connect to remote hostengine", address=opts["remote-hostengine-info"],
                      error="Host engine connection invalid: %s" % err,
                      hint="Verify nv-hostengine is running and listening on the expected address. For IPv6, use "
                           'bracket notation: [<IPv6_ADDR>]:<PORT> (e.g., "[::1]:5555")')
            return 1
    else:
        if opts["enable-dcgm-log"]:
            os.environ["__DCGM_DBG_FILE"], os.environ["__DCGM_DBG_LVL"] = "-", opts["dcgm-log-level"]
        log.info("Attempting to initialize DCGM.")
    gpus, source = discover_gpus()
    log.info("Initialized DCGM Fields module.")
    if opts["kubernetes"]:
        log.info("NVML provider successfully initialized for Kubernetes MIG support")
    else:
        log.info("NVML provider skipped (not running in Kubernetes mode)")
    log.info("DCGM successfully initialized!")
    dcp_env = os.environ.get("KIMI_DOUBLE_DCP", "").strip()
    dcp = go_bool(dcp_env) if dcp_env in ("0", "1", "true", "false") else cap_sys_admin()
    if gpus and dcp:
        log.info("Successfully queried DCGM profiling metric groups", reload_id=0, count=13,
                 gpu_model=gpus[0]["name"])
    else:
        log.info("Not collecting DCP metrics: Error getting supported metrics: This request is serviced by a module "
                 "of DCGM that is not currently loaded")
    if devices[0] == "i":
        raise DcgmExit("cannot monitor GPU instances (-d i): MIG mode is not enabled on any GPU")
    if devices[0] == "g" and devices[1] is not None:
        known = set(g["index"] for g in gpus)
        for wanted in devices[1]:
            if wanted not in known:
                raise DcgmExit("GPU %d was specified in the GPU device options, but it does not exist" % wanted)
        gpus = [g for g in gpus if g["index"] in devices[1]]
    log.info("Building registry for current GPU topology")
    log.info("Falling back to metric file '%s'" % opts["collectors"])
    counters = read_counters(opts["collectors"], dcp and bool(gpus), log)
    if any(c[0].startswith("DCGM_FI_PROF_") for c in counters) and not cap_sys_admin():
        log.warn("dcgm-exporter doesn't have sufficient privileges to expose profiling metrics. To get profiling "
                 "metrics with dcgm-exporter, use --cap-add SYS_ADMIN")
    if remote and not opts["kubernetes"]:   # hostname.GetHostname: the remote host engine's host
        try:
            hostname = split_host_port(opts["remote-hostengine-info"])[0]
        except ValueError:
            hostname = opts["remote-hostengine-info"]
    else:
        hostname = os.environ.get("NODE_NAME") or socket.gethostname()
    if not gpus:
        log.warn("No GPUs found (%s): /metrics stays empty" % source)
    log.info("Registry built successfully", collector_count=1 if gpus else 0)
    state = {"counters": counters, "gpus": gpus, "opts": opts, "hostname": hostname, "lock": threading.Lock()}

    try:
        host, port = split_host_port(opts["address"])
        bind_host, bind_port = resolve_host(host), resolve_port(port)
    except (ValueError, OSError) as err:
        log.error("Failed to Listen and Server HTTP server.", error="listen tcp %s: %s" % (opts["address"], err))
        return 1

    class Handler(GoHandler):
        def do_GET(self):
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                if opts["kubernetes"]:
                    log.warn("Failed to get pod mappings", error="failure connecting to '%s': no pod resources "
                             "socket (kimi exporter double)" % opts["pod-resources-kubelet-socket"])
                with state["lock"]:
                    refresh_values(state)
                    body = dcgm_render(state)
                self.reply(200, body, headers=[("X-Content-Type-Options", "nosniff")])
            elif path == "/health":
                self.reply(200, "OK", headers=[("X-Content-Type-Options", "nosniff"),
                                               ("X-Registry-Available", "true")])
            elif path == "/":
                self.reply(200, "<html>\n\t\t\t<head><title>GPU Exporter</title></head>\n\t\t\t<body>\n\t\t\t"
                           "<h1>GPU Exporter</h1>\n\t\t\t<p><a href=\"./metrics\">Metrics</a></p>\n\t\t\t"
                           "<p><a href=\"./health\">Health</a></p>\n\t\t\t</body>\n\t\t\t</html>",
                           content_type="text/html; charset=utf-8", headers=[("X-Content-Type-Options", "nosniff")])
            else:
                self.reply(404, "404 page not found\n", headers=[("X-Content-Type-Options", "nosniff")])

        do_HEAD = do_GET

    log.info("Starting webserver")
    try:
        server = make_server(bind_host, bind_port, Handler)
    except OSError as err:
        log.error("Failed to Listen and Server HTTP server.",
                  error="listen tcp %s: bind: %s" % (opts["address"], _errno_text(err)))
        return 1
    log.info("Listening on", address=opts["address"])
    log.info("TLS is disabled.", http2="false", address=opts["address"])

    stop = threading.Event()

    def on_stop(signum, _frame):
        log.info("Received signal", signal=signal.Signals(signum).name)
        stop.set()

    def on_hup(_signum, _frame):
        log.info("Hot reload triggered - building new registry in background", reload_id=1)
        try:
            with state["lock"]:
                state["counters"] = read_counters(opts["collectors"], dcp and bool(state["gpus"]), log)
        except DcgmExit as err:
            log.error("Hot reload failed", error=err.message)

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGQUIT):
        signal.signal(sig, on_stop)
    signal.signal(signal.SIGHUP, on_hup)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2})
    thread.daemon = True
    thread.start()
    while not stop.wait(0.5):
        pass
    server.shutdown()
    server.server_close()
    log.info("Shutting down dcgm-exporter")
    return 0


def refresh_values(state):
    """Re-read the live values (temperature, memory, power, utilization) of the GPUs found at start-up."""
    smi = shutil.which("nvidia-smi")
    if not smi or not state["gpus"]:
        return
    try:
        fresh = dict((g["uuid"], g) for g in query_nvidia_smi(smi))
    except DcgmExit:
        return
    for gpu in state["gpus"]:
        new = fresh.get(gpu["uuid"])
        if new:
            for key in ("temp", "mem_temp", "mem_used", "mem_free", "mem_reserved", "power", "util", "mem_util"):
                gpu[key] = new[key]


# ================================================================================================
# npu-exporter
# ================================================================================================

NPU_VERSION = "v26.1.0"
NPU_BUILD_VERSION = "%s_linux-%s" % (NPU_VERSION, platform.machine() or "x86_64")
NPU_METRIC_CONFIG = "/user/mind-cluster/npu-exporter-config/metricConfiguration.json"
NPU_DEFAULT_LOG = "/var/log/mindx-dl/npu-exporter/npu-exporter.log"
NPU_AGREEMENT = ("Please read the End User License Agreement carefully. Your use of the Huawei Software\n"
                 "will be deemed as your acceptance of the constraints mentioned in the Agreement.\n"
                 "The full text of the EULA is available at:\nhttps://www.hiascend.com/zh/legal/softlicense\n\n")
# collector/common/constants.go + metrics_collector.go CardLabel, in declaration order
CARD_LABELS = ["id", "model_name", "vdie_id", "pcie_bus_info", "namespace", "pod_name", "container_name"]
NPU_GROUPS_IMPLEMENTED = ("version", "utilization", "npu", "hbm", "nodeBase")

NPU_FLAGS = [
    Flag("port", "int", 8082, "The server port of the http service,range[1025-40000]"),
    Flag("ip", "string", "", "The listen ip of the service,0.0.0.0 is not recommended when install on Multi-NIC host"),
    Flag("updateTime", "int", 0, "Interval (seconds) to update the npu metrics cache,range[1-60]. 0 or not set means "
         "use intervalSeconds per metricsGroup"),
    Flag("version", "bool", False, "If true,query the version of the program (default false)"),
    Flag("containerMode", "string", "docker", "Set 'docker' for monitoring docker containers or 'containerd' for "
         "CRI & containerd"),
    Flag("containerd", "string", "", "The endpoint of containerd used for listening containers' events"),
    Flag("endpoint", "string", "", "The endpoint of the CRI  server to which will be connected"),
    Flag("concurrency", "int", 5, "The max concurrency of the http server, range is [1-512]"),
    Flag("logLevel", "int", 0, "Log level, -1-debug, 0-info, 1-warning, 2-error, 3-critical(default 0)"),
    Flag("maxAge", "int", 7, "Maximum number of days for backup log files, range [7, 700] days"),
    Flag("logFile", "string", NPU_DEFAULT_LOG, "Log file path. If the file size exceeds 20MB, will be rotated"),
    Flag("maxBackups", "int", 30, "Maximum number of backup log files, range is (0, 180]"),
    Flag("cacheSize", "int", 102400, "the cacheSize for ip limit,range  is [1,1024000],keep default normally"),
    Flag("limitIPConn", "int", 5, "the tcp connection limit for each Ip,range  is [1,128]"),
    Flag("limitTotalConn", "int", 20, "the tcp connection limit for all request,range  is [1,512]"),
    Flag("limitIPReq", "string", "20/1", "the http request limit counts for each Ip,20/1 means allow 20 request in 1 "
         "seconds"),
    Flag("platform", "string", "Prometheus", "the data reporting platform, just support Prometheus and Telegraf"),
    Flag("textMetricsFilePath", "string", "", "text indicator collection path, support specified multiple file path"),
    Flag("poll_interval", "duration", 1.0, "how often to send metrics when use Telegraf plugin, needs to be used "
         "with -platform=Telegraf, otherwise, it does not take effect"),
    Flag("profilingTime", "int", 200, "config pcie bandwidth profiling time, range is [1, 2000]"),
    Flag("hccsBWProfilingTime", "int", 200, "config hccs bandwidth profiling time, range is [1, 1000]"),
    Flag("deviceResetTimeout", "int", 600, "when npu-exporter starts, if the number of chips is insufficient, the "
         "maximum duration to wait for the driver to report all chips, unit second, range [10, 600]"),
    Flag("enableLegacyMetrics", "bool", False, "enable legacy metrics with _X_Y suffix for Atlas 350 backward "
         "compatibility, only support Prometheus"),
    Flag("enable-healthz", "bool", False, "Whether to enable health check service"),
    Flag("healthz-address", "string", "11251", "Health check service listen port"),
    Flag("tls-cert-file", "string", "", "TLS certificate file path for HTTPS"),
    Flag("tls-private-key-file", "string", "", "TLS private key file path for HTTPS"),
]


def npu_usage(prog):
    """flag.PrintDefaults, flags sorted by name."""
    lines = ["Usage of %s:" % prog]
    zero = {"int": 0, "string": "", "bool": False, "duration": 0.0}
    for flag in sorted(NPU_FLAGS, key=lambda f: f.name):
        head = "  -" + flag.name
        type_name = {"int": "int", "string": "string", "duration": "duration"}.get(flag.kind, "")
        if type_name:
            head += " " + type_name
        text = head + ("\t" if len(head) <= 4 else "\n    \t") + flag.usage.replace("\n", "\n    \t")
        if flag.default != zero[flag.kind]:
            if flag.kind == "string":
                text += " (default %s)" % go_quote(flag.default)
            elif flag.kind == "duration":
                text += " (default %s)" % _go_duration_text(flag.default)
            elif flag.kind == "bool":
                text += " (default true)"
            else:
                text += " (default %s)" % flag.default
        lines.append(text)
    return "\n".join(lines) + "\n"


def _go_duration_text(seconds):
    if seconds == int(seconds):
        return "%ds" % seconds if seconds < 60 else "%dm%ds" % (seconds // 60, seconds % 60)
    return "%gs" % seconds


class HwLog(object):
    """hwlog's run log: '[INFO]     2026/07/29 08:44:37.646867 1       npu-exporter/main.go:205    msg', to stdout and
    to -logFile."""
    LEVELS = {"DEBUG": -1, "INFO": 0, "WARN": 1, "ERROR": 2, "CRITICAL": 3}

    def __init__(self, level=0):
        self.level, self.handle, self.lock = level, None, threading.Lock()

    def open(self, path):
        if not os.path.isabs(path):
            raise ValueError("the log file path is not an absolute path")
        directory = os.path.dirname(path)
        if not os.path.isdir(directory):
            os.makedirs(directory, 0o750)
        self.handle = open(path, "a")
        os.chmod(path, 0o640)

    def log(self, level, caller, msg):
        if self.LEVELS[level] < self.level:
            return
        now = time.time()
        stamp = time.strftime("%Y/%m/%d %H:%M:%S", time.localtime(now))
        line = "%-11s%s.%06d %-8d%s    %s\n" % ("[%s]" % level, stamp, now % 1 * 1000000, threading.get_ident() % 1000,
                                                caller, msg)
        with self.lock:
            sys.stdout.write(line)
            sys.stdout.flush()
            if self.handle:
                self.handle.write(line)
                self.handle.flush()


def npu_args(argv):
    prog = argv[0] if argv else "npu-exporter"
    flags, values, seen = {}, {}, set()
    for flag in NPU_FLAGS:
        values[flag.name] = flag.default
        flags[flag.name] = flag
    try:
        go_parse(argv[1:], flags, values, seen)
    except HelpRequested:
        sys.stderr.write(npu_usage(prog))
        sys.exit(0)
    except FlagError as err:
        sys.stderr.write("%s\n%s" % (err, npu_usage(prog)))
        sys.exit(2)
    return values


def npu_param_errors(opts, argv):
    """main.go paramValidInPrometheus, in its order. Returns the first error text, or None."""
    port = opts["port"]
    if port < 1025 or port > 40000:
        return "the port is invalid"
    try:
        parsed = ipaddress.ip_address(opts["ip"])
    except ValueError:
        return "the listen ip is invalid"
    opts["ip"] = "[%s]" % parsed if parsed.version == 6 else str(parsed)
    if opts["updateTime"] > 60 or opts["updateTime"] < 0:
        opts["_warn_update_time"] = True
        opts["updateTime"] = 0
    for key in ("endpoint", "containerd"):
        if opts[key] and ".sock" not in opts[key]:
            return "%s file is not sock address" % key
    if not re.match(r"^[1-9]\d{0,2}/[1-9]\d{0,2}$", opts["limitIPReq"]):
        return "limitIPReq format error"
    checks = [("limitIPConn", 1, 128, "limitIPConn is invalid"),
              ("limitTotalConn", 1, 512, "limitTotalConn is invalid"),
              ("cacheSize", 1, 1024000, "cacheSize is invalid"), ("concurrency", 1, 512, "concurrency is invalid"),
              ("profilingTime", 1, 2000, "profilingTime range error"),
              ("hccsBWProfilingTime", 1, 1000, "hccsBWProfilingTime range error"),
              ("deviceResetTimeout", 10, 600, "deviceResetTimeout range error")]
    for key, low, high, message in checks:
        if opts[key] < low or opts[key] > high:
            return message
    if "poll_interval" in "".join(argv[1:]):
        return "poll_interval is not support this scene"
    return None


def parse_npu_smi(text):
    """`npu-smi info`: the chip rows (two lines per chip, A3 with Chip + Phy-ID) and the process table."""
    version, chips, procs = None, [], {}
    match = re.search(r"Version:\s*(\S+)", text)
    if match:
        version = match.group(1)
    in_procs, pending = False, None
    for line in text.splitlines():
        if "Process id" in line:
            in_procs = True
            continue
        if not line.startswith("|"):
            pending = None if line.startswith("+") else pending
            continue
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if in_procs:
            head = cells[0].split()
            if len(cells) >= 4 and len(head) == 2 and head[0].isdigit() and cells[1].isdigit():
                procs.setdefault((int(head[0]), int(head[1])), []).append(
                    {"pid": int(cells[1]), "name": cells[2], "mem": int(float(cells[3]))})
            continue
        if len(cells) != 3 or cells[0].startswith("NPU") or cells[0].startswith("Chip") or not cells[0]:
            continue
        head = cells[0].split()
        if pending is None:
            if len(head) < 2 or not head[0].isdigit():
                continue
            numbers = cells[2].split()
            pending = {"npu": int(head[0]), "name": " ".join(head[1:]), "health": cells[1],
                       "power": numbers[0] if numbers else "-", "temp": numbers[1] if len(numbers) > 1 else "-"}
        else:
            chip = pending
            pending = None
            chip["chip_id"] = int(head[0]) if head and head[0].isdigit() else 0
            chip["phy_id"] = int(head[1]) if len(head) > 1 and head[1].isdigit() else None
            chip["bus_id"] = cells[1]
            usage = re.match(r"^(\S+)\s+(\d+)\s*/\s*(\d+)\s+(\d+)\s*/\s*(\d+)", cells[2])
            if usage:
                chip["aicore"], chip["hbm_used"], chip["hbm_total"] = usage.group(1), int(usage.group(4)), int(
                    usage.group(5))
            chips.append(chip)
    a3 = any(c["phy_id"] is not None for c in chips)
    for position, chip in enumerate(chips):
        chip["phy"] = chip["phy_id"] if a3 and chip["phy_id"] is not None else (chip["npu"] if not a3 else position)
        chip["procs"] = procs.get((chip["npu"], chip["chip_id"]), [])
    return version, chips


def fake_npus(count):
    per_card = 2 if count > 8 and count % 2 == 0 else 1
    name = "Ascend910" if per_card == 2 else "910B3"
    chips = []
    for i in range(count):
        card, chip_id = divmod(i, per_card)
        bus = 0x9D + 2 * i if per_card == 2 else [0xC1, 0xC2, 0x81, 0x82, 0x01, 0x02, 0x41, 0x42][i % 8]
        chips.append({"npu": card, "chip_id": chip_id, "phy": i, "name": name, "health": "OK", "power": "166.5",
                      "temp": "38", "bus_id": "0000:%02X:00.0" % (bus % 256), "aicore": "0", "hbm_used": 3131,
                      "hbm_total": 65536, "procs": []})
    return "25.2.1", chips


def discover_npus():
    smi = shutil.which("npu-smi")
    if not smi:
        return fake_npus(env_int("KIMI_DOUBLE_NPUS", 16)), "KIMI_DOUBLE_NPUS"
    proc = subprocess.run([smi, "info"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
                          check=False)
    if proc.returncode != 0:
        raise RuntimeError("dcmi init failed, error code: -8005 (npu-smi info exit %d: %s)"
                           % (proc.returncode, (proc.stderr or proc.stdout).strip()))
    version, chips = parse_npu_smi(proc.stdout)
    if not chips:
        raise RuntimeError("get chip info failed, no card found")
    return (version or "25.2.1", chips), "npu-smi"


def vdie_id(chip):
    """A stable, well-formed die id (5 groups of 8 hex digits, as dcmi prints it)."""
    seed = "%s/%d/%s" % (chip["bus_id"], chip["phy"], chip["name"])
    value = 0
    for char in seed:
        value = (value * 131 + ord(char)) % (1 << 160)
    text = "%040X" % value
    return "-".join(text[i:i + 8] for i in range(0, 40, 8))


def npu_health_code(text):
    """npu-smi Health -> dcmi health -> getHealthCode: OK=healthy (1); Warning/Alarm/Critical=unhealthy (0)."""
    text = (text or "").strip().upper()
    if text == "OK":
        return 1
    if text in ("WARNING", "ALARM", "CRITICAL", "GENERAL WARNING", "IMPORTANT WARNING", "EMERGENCY WARNING"):
        return 0
    return -1


def _npu_float(text, default):
    try:
        return float(text)
    except (TypeError, ValueError):
        return default


def npu_groups_enabled():
    """metricConfiguration.json in the image (metrics_config.go): groups whose state is not ON are off."""
    try:
        with open(NPU_METRIC_CONFIG) as handle:
            configs = json.load(handle)
    except (IOError, OSError, ValueError):
        return set(NPU_GROUPS_IMPLEMENTED)
    return set(c.get("metricsGroup") for c in configs if str(c.get("state", "")).upper() == "ON")


class PromFamily(object):
    def __init__(self, name, help_text, label_names):
        self.name, self.help, self.label_names, self.samples = name, help_text, label_names, []

    def add(self, values, value, stamp=None):
        self.samples.append((dict(zip(self.label_names, values)), value, stamp))


def _escape_label(text):
    return str(text).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def prom_text(families):
    """expfmt text format 0.0.4 as client_golang writes a gathered registry: families sorted by name, label pairs
    sorted by name, samples sorted by label values, values as Go's %g, optional millisecond timestamps."""
    out = []
    for family in sorted(families, key=lambda f: f.name):
        if not family.samples:
            continue
        escaped = family.help.replace("\\", "\\\\").replace("\n", "\\n")
        out.append("# HELP %s %s\n# TYPE %s gauge\n" % (family.name, escaped, family.name))
        names = sorted(family.label_names)
        rows = sorted(family.samples, key=lambda s: ([s[0][n] for n in names], s[2] or 0))
        for labels, value, stamp in rows:
            text = family.name
            if names:
                text += "{" + ",".join('%s="%s"' % (n, _escape_label(labels[n])) for n in names) + "}"
            text += " " + go_float(value)
            if stamp is not None:
                text += " %d" % stamp
            out.append(text + "\n")
    return "".join(out)


def npu_families(state):
    driver_version, chips = state["driver"], state["chips"]
    groups = state["groups"]
    stamp = int(time.time() * 1000)
    fam = {}

    def family(name, help_text, labels=None):
        fam[name] = PromFamily(name, help_text, CARD_LABELS if labels is None else labels)
        return fam[name]

    temp_override = os.environ.get("KIMI_DOUBLE_GPU_TEMP", "").strip()
    error_codes = [c for c in os.environ.get("KIMI_DOUBLE_NPU_ERROR_CODES", "").replace(" ", "").split(",") if c]
    if "npu" in groups:
        f_nums = family("machine_npu_nums", "Amount of npu installed on the machine.", [])
        f_cards = family("machine_card_nums", "Amount of card installed on the machine.", [])
        f_temp = family("npu_chip_info_temperature", "the npu temperature")
        f_power = family("npu_chip_info_power", "the npu power")
        f_volt = family("npu_chip_info_voltage", "the npu voltage")
        f_freq = family("npu_chip_info_aicore_current_freq", "the npu ai core current frequency, unit is 'MHz'")
        f_health = family("npu_chip_info_health_status", "the npu health status")
        f_net = family("npu_chip_info_network_status", "the npu network health status")
        f_pnum = family("npu_chip_info_process_info_num", "the npu process num")
        f_proc = family("npu_chip_info_process_info", "the npu process info, unit is 'MB'. if process run on host, "
                        "container_id and container_name will be empty", CARD_LABELS + ["process_id", "container_id"])
        f_sn = family("npu_chip_info_serial_number", "the npu serial number information",
                      CARD_LABELS + ["serial_number"])
        name_labels = list(CARD_LABELS)
        name_labels[1] = "name"
        f_name = family("npu_chip_info_name", "the Ascend npu name with value '1'", name_labels)
        f_err = [family("npu_chip_info_error_code" + ("_%d" % i if i else ""), "the npu error code")
                 for i in range(10)]
        f_nums.add([], len(chips))
        f_cards.add([], len(set(c["npu"] for c in chips)))
    if "utilization" in groups:
        f_util = family("npu_chip_info_utilization", "the ai core utilization")
        f_over = family("npu_chip_info_overall_utilization", "the overall utilization of npu")
        f_vec = family("npu_chip_info_vector_utilization", "the vector utilization")
        f_cube = family("npu_chip_info_cube_utilization", "the cube utilization")
    if "hbm" in groups:
        hbm = {}
        for key, name, help_text in (
                ("used", "npu_chip_info_hbm_used_memory", "the npu hbm used memory"),
                ("total", "npu_chip_info_hbm_total_memory", "the npu hbm total memory"),
                ("util", "npu_chip_info_hbm_utilization", "the npu hbm utilization"),
                ("temp", "npu_chip_info_hbm_temperature", "the npu hbm temperature"),
                ("bw", "npu_chip_info_hbm_bandwidth_utilization", "the npu hbm bandwidth util rate"),
                ("ecc_on", "npu_chip_info_hbm_ecc_enable_flag", "whether HBM ecc detection is enabled"),
                ("sbe", "npu_chip_info_hbm_ecc_single_bit_error_cnt", "HBM Single Bit Error Count"),
                ("dbe", "npu_chip_info_hbm_ecc_double_bit_error_cnt", "HBM Double Bit Error Count"),
                ("sbe_total", "npu_chip_info_hbm_ecc_total_single_bit_error_cnt",
                 "HBM Single Bit Aggregate Total Err Cnt"),
                ("dbe_total", "npu_chip_info_hbm_ecc_total_double_bit_error_cnt",
                 "HBM Double Bit Aggregate Total Err Cnt"),
                ("sbe_pages", "npu_chip_info_hbm_ecc_single_bit_isolated_pages_cnt",
                 "HBM Single Bit Isolated Pages Count"),
                ("dbe_pages", "npu_chip_info_hbm_ecc_double_bit_isolated_pages_cnt",
                 "HBM Double Bit Isolated Pages Count")):
            hbm[key] = family(name, help_text)
    for position, chip in enumerate(chips):
        model = "%s-Ascend-V1" % chip["name"]
        labels = [str(chip["phy"]), model, vdie_id(chip), chip["bus_id"], "", "", ""]
        temp = int(_npu_float(chip["temp"], 40)) if not temp_override else env_int("KIMI_DOUBLE_GPU_TEMP", 0)
        aicore = int(_npu_float(chip.get("aicore"), 0))
        used, total = chip.get("hbm_used", 0), chip.get("hbm_total", 65536)
        if "npu" in groups:
            power = _npu_float(chip["power"], None)
            if power is None:   # A3: npu-smi prints the card's power on its first chip only
                power = next((_npu_float(c["power"], 0.0) for c in chips
                              if c["npu"] == chip["npu"] and _npu_float(c["power"], None) is not None), 0.0)
            f_power.add(labels, power, stamp)
            f_volt.add(labels, 0.88, stamp)
            f_freq.add(labels, 1800 if aicore else 800, stamp)
            f_temp.add(labels, temp, stamp)
            f_name.add(labels, 1, stamp)
            f_health.add(labels, npu_health_code(chip["health"]), stamp)
            f_net.add(labels, 1, stamp)
            f_pnum.add(labels, len(chip["procs"]), stamp)
            if chip["procs"]:
                for proc in chip["procs"]:
                    f_proc.add(labels + [str(proc["pid"]), ""], proc["mem"], stamp)
            else:
                f_proc.add(labels + ["", ""], 0, stamp)
            if position == 0:
                for index, code in enumerate(error_codes[:10]):
                    f_err[index].add(labels, int(code, 16), stamp)
            f_sn.add(labels + ["1024%02X%08d" % (chip["npu"], 31000000 + chip["phy"])], 1, stamp)
        if "utilization" in groups:
            f_util.add(labels, aicore, stamp)
            f_over.add(labels, aicore, stamp)
            f_vec.add(labels, 0, stamp)
            f_cube.add(labels, aicore, stamp)
        if "hbm" in groups:
            for key, value in (("util", int(round(used * 100.0 / total)) if total else 0), ("used", used),
                               ("total", total), ("temp", temp + 2), ("bw", 0), ("ecc_on", 1), ("sbe", 0),
                               ("dbe", 0), ("sbe_total", 0), ("dbe_total", 0), ("sbe_pages", 0), ("dbe_pages", 0)):
                hbm[key].add(labels, value, stamp)
    if "version" in groups:
        family("npu_exporter_version_info", "exporter version with value '1'", ["exporterVersion"]).add(
            [NPU_BUILD_VERSION], 1)
    if "nodeBase" in groups:
        family("node_base_info", "the common information of this node", ["exporterVersion", "driverVersion"]).add(
            [NPU_BUILD_VERSION, driver_version], 1, state["node_stamp"])
    return list(fam.values())


def npu_refresh(state):
    """Re-read npu-smi for the live values (HBM usage, temperature, health, processes) of the chips."""
    if state["source"] != "npu-smi":
        return
    try:
        (driver, chips), _source = discover_npus()
    except RuntimeError:
        return
    state["driver"], state["chips"] = driver, chips


def npu_main(argv):
    sys.stdout.write(NPU_AGREEMENT)   # agreement.PrintAgreement() runs in init(), before flag parsing
    sys.stdout.flush()
    opts = npu_args(argv)
    if opts["version"]:
        sys.stdout.write("NPU-exporter version: %s \n" % NPU_BUILD_VERSION)
        return 0
    if opts["platform"] not in ("Prometheus", "Telegraf"):
        sys.stderr.write("platform is not supported:%s" % opts["platform"])
        return 0
    if opts["platform"] == "Telegraf":
        sys.stderr.write("kimi exporter double: -platform=Telegraf is not implemented\n")
        return 1
    log = HwLog(opts["logLevel"] if -1 <= opts["logLevel"] <= 3 else 0)
    try:
        log.open(opts["logFile"])
    except (OSError, ValueError) as err:
        message = _errno_text(err) if isinstance(err, OSError) else str(err)
        sys.stdout.write("hwlog init failed, error is %s\n" % message)
        sys.stderr.write(message)
        return 0
    log.log("INFO", "hwlog/api.go:164", "%s's logger init success" % os.path.basename(opts["logFile"]))
    healthz = None
    if opts["enable-healthz"]:
        port_text = opts["healthz-address"]
        if port_text == "":
            log.log("ERROR", "npu-exporter/main.go:148",
                    "failed to start healthz server: healthzAddress cannot be empty")
            return 0
        if not port_text.isdigit():
            log.log("ERROR", "npu-exporter/main.go:148",
                    "failed to start healthz server: invalid port in healthzAddress: %s" % port_text)
            return 0
        if not 1025 <= int(port_text) <= 65535:
            log.log("ERROR", "npu-exporter/main.go:148", "failed to start healthz server: port %s out of range "
                    "[1025, 65535]" % port_text)
            return 0
        if bool(opts["tls-cert-file"]) != bool(opts["tls-private-key-file"]):
            log.log("ERROR", "npu-exporter/main.go:148", "failed to start healthz server: tlsCertFile and "
                    "tlsPrivateKeyFile must be both set or both empty")
            return 0
        if opts["tls-cert-file"]:
            log.log("ERROR", "npu-exporter/main.go:148", "kimi exporter double: healthz over TLS is not implemented")
            return 1

        class Healthz(GoHandler):
            def do_GET(self):
                if self.path.split("?", 1)[0] != "/":
                    self.reply(404, "", content_type=None)
                else:
                    self.reply(200, "ok")

            def do_POST(self):
                self.reply(405, "", content_type=None)

        try:
            healthz = make_server("", int(port_text), Healthz)   # ":" + port: every address, whatever -ip says
        except OSError as err:
            log.log("ERROR", "npu-exporter/main.go:148", "failed to start healthz server: healthz server failed to "
                    "listen on %s: listen tcp :%s: bind: %s" % (port_text, port_text, _errno_text(err)))
            return 0
        threading.Thread(target=healthz.serve_forever, daemon=True).start()
        log.log("INFO", "healthz/healthz.go:184", "healthz server is listening on :%s (http)" % port_text)
    else:
        log.log("INFO", "healthz/healthz.go:160", "healthz server is disabled")
    error = npu_param_errors(opts, argv)
    if opts.pop("_warn_update_time", False):
        log.log("WARN", "npu-exporter/main.go:371", "the updateTime %d is invalid, it will be ignored and use "
                "intervalSeconds per metricsGroup instead" % opts["updateTime"])
    if error:
        log.log("ERROR", "npu-exporter/main.go:199", error)
        return 0
    try:
        (driver, chips), source = discover_npus()
    except RuntimeError as err:
        log.log("ERROR", "npu-exporter/main.go:157", "new npu collector failed, error is %s" % err)
        return 0
    log.log("INFO", "npu-exporter/main.go:161", "npu exporter starting and the version is %s" % NPU_BUILD_VERSION)
    if not any(os.path.exists(p) for p in ("/var/run/dockershim.sock", "/var/run/cri-dockerd.sock",
                                           "/run/containerd/containerd.sock")):
        log.log("ERROR", "common/npu_collector.go:414", "failed to init devices parser: init CRI client failed, "
                "connecting to CRI server failed: context deadline exceeded->connecting to container runtime failed")
    groups = npu_groups_enabled()
    for group in ("version", "utilization", "npu", "hbm", "nodeBase"):
        state = "on" if group in groups else "off"
        log.log("INFO", "config/metrics_config.go:249", "%-18s [%-13s] is %s" % ("preset config", group, state))
    if error_codes_on_start():
        log.log("WARN", "metrics/collector_for_npu.go:192", "there are error(s) on chip(logicID: 0), errorCodes: [%s]"
                % " ".join(c.upper() for c in error_codes_on_start()))
    state = {"driver": driver, "chips": chips, "source": source, "groups": groups, "lock": threading.Lock(),
             "node_stamp": int(time.time() * 1000)}

    class Handler(GoHandler):
        def do_GET(self):
            path = self.path.split("?", 1)[0]
            started = time.time()
            if path == "/metrics":
                with state["lock"]:
                    npu_refresh(state)
                    body = prom_text(npu_families(state)).encode("utf-8")
                headers = []
                if "gzip" in (self.headers.get("Accept-Encoding") or ""):
                    body = gzip.compress(body)
                    headers.append(("Content-Encoding", "gzip"))
                self.reply(200, body, content_type="text/plain; version=0.0.4; charset=utf-8; escaping=underscores",
                           headers=headers)
            else:
                self.reply(200, "<html>\n\t\t\t<head><title>NPU-Exporter</title></head>\n\t\t\t<body>\n\t\t\t"
                           "<h1 align=\"center\">NPU-Exporter</h1>\n\t\t\t<p align=\"center\">Welcome to use "
                           "NPU-Exporter,the Prometheus metrics url is http://ip:%d/metrics: <a href=\"./metrics\">"
                           "Metrics</a></p>\n\t\t\t</body>\n\t\t\t</html>" % opts["port"],
                           content_type="text/html; charset=utf-8")
            log.log("INFO", "limiter/limit_handler.go:128", "%s %s: %s <200> (%dms) |   %s |%s |0" % (
                self.request_version, self.command, path, (time.time() - started) * 1000, self.client_address[0],
                self.headers.get("User-Agent", "")))

        def do_POST(self):
            self.reply(405, "", content_type=None)

    address = "%s:%d" % (opts["ip"], opts["port"])
    log.log("INFO", "npu-exporter/main.go:263", "listen on: %s" % address)
    host = opts["ip"].strip("[]")
    try:
        server = make_server(host, opts["port"], Handler)
    except OSError as err:
        log.log("ERROR", "npu-exporter/main.go:266", "listen ip and port error: listen tcp %s: bind: %s"
                % (address, _errno_text(err)))
        return 0
    log.log("WARN", "npu-exporter/main.go:420", "enable unsafe http server")

    def die(signum, _frame):   # no signal.Notify in main.go: Go's default action; as PID 1, exit(2)
        if os.getpid() == 1:
            os._exit(2)
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(sig, die)
    server.serve_forever(poll_interval=0.2)
    return 0


def error_codes_on_start():
    return [c for c in os.environ.get("KIMI_DOUBLE_NPU_ERROR_CODES", "").replace(" ", "").split(",") if c]


# ================================================================================================
# Image files (the Dockerfile calls write_image_files; not a command-line option)
# ================================================================================================

# docker/dcgm-exporter-entrypoint.sh at 4.5.3-4.8.2
DCGM_ENTRYPOINT_SH = """#!/usr/bin/env bash
set -euo pipefail

# Entrypoint for dcgm-exporter
# Capability checking is done in Go code (internal/pkg/capabilities)

exec /usr/bin/dcgm-exporter "$@"
"""
# component/npu-exporter/build/metricConfiguration.json and pluginConfiguration.json at v26.1.0
NPU_METRIC_CONFIGURATION = """[
  {"metricsGroup": "version", "state": "ON", "intervalSeconds": -1},
  {"metricsGroup": "utilization", "state": "ON", "intervalSeconds": 1},
  {"metricsGroup": "npu", "state": "ON", "intervalSeconds": 5},
  {"metricsGroup": "ddr", "state": "ON", "intervalSeconds": 10},
  {"metricsGroup": "sio", "state": "ON", "intervalSeconds": 60},
  {"metricsGroup": "hbm", "state": "ON", "intervalSeconds": 60},
  {"metricsGroup": "hccs", "state": "ON", "intervalSeconds": 60},
  {"metricsGroup": "pcie", "state": "ON", "intervalSeconds": 60},
  {"metricsGroup": "vnpu", "state": "ON", "intervalSeconds": 60},
  {"metricsGroup": "nodeBase", "state": "ON", "intervalSeconds": 86400},

  {"metricsGroup": "roce", "state": "ON", "intervalSeconds": 60},
  {"metricsGroup": "optical", "state": "ON", "intervalSeconds": 60},
  {"metricsGroup": "network", "state": "ON", "intervalSeconds": 60},
  {"metricsGroup": "ub", "state": "ON", "intervalSeconds": 60}
]
"""
NPU_PLUGIN_CONFIGURATION = """[
  {"metricsGroup": "text", "state": "ON", "intervalSeconds": 60},
  {"metricsGroup": "myPlugin", "state": "OFF", "intervalSeconds": 60}
]
"""
# component/npu-exporter/build/agreement.txt at v26.1.0 (CRLF, as shipped): the image's entrypoint cats it
NPU_AGREEMENT_TXT = "\r\n".join([
    "==================", "== NPU Exporter ==", "==================", "", "NPU Exporter Version v26.1.0", "",
    "Container image Copyright (c) 2026, Huawei Technologies Co., Ltd. All rights reserved.",
    "This container image and its contents are governed by the Huawei Container License Agreement (\"License\"). "
    "By pulling and using the container, you accept the terms and conditions",
    "of the License.",
    "A copy of this license is made available at: https://www.hiascend.com/en/legal/ascendhub-download",
    "Note: You agree and undertake that when using Huawei or third-party software in this image, you will comply "
    "with the license agreement of the corresponding Huawei or third-party",
    "software.", ""])


def write_image_files(mode, root="/"):
    """The files the real image carries beside the binary, for tests/doubles/exporters/Dockerfile."""
    files = {
        "dcgm-exporter": [("etc/dcgm-exporter/default-counters.csv", DEFAULT_COUNTERS_CSV, 0o644),
                          ("usr/local/dcgm/dcgm-exporter-entrypoint.sh", DCGM_ENTRYPOINT_SH, 0o755)],
        "npu-exporter": [("user/mind-cluster/npu-exporter-config/metricConfiguration.json", NPU_METRIC_CONFIGURATION,
                          0o440),
                         ("user/mind-cluster/npu-exporter-config/pluginConfiguration.json", NPU_PLUGIN_CONFIGURATION,
                          0o440),
                         ("usr/local/agreement.txt", NPU_AGREEMENT_TXT, 0o440)],
    }[mode]
    for relative, text, mode_bits in files:
        path = os.path.join(root, relative)
        if not os.path.isdir(os.path.dirname(path)):
            os.makedirs(os.path.dirname(path))
        with open(path, "w", newline="") as handle:
            handle.write(text)
        os.chmod(path, mode_bits)


# ================================================================================================

def main(argv=None):
    argv = list(sys.argv if argv is None else argv)
    name = os.path.basename(argv[0]) if argv else ""
    if "dcgm-exporter" not in name and "npu-exporter" not in name and len(argv) > 1 and argv[1] in (
            "dcgm-exporter", "npu-exporter"):
        argv = [argv[1]] + argv[2:]
        name = argv[0]
    if "dcgm-exporter" in name:
        return dcgm_main(argv)
    if "npu-exporter" in name:
        return npu_main(argv)
    sys.stderr.write("usage: dcgm-exporter [flags] | npu-exporter [flags]  (run under one of these names, or pass "
                     "the name as the first argument)\n")
    return 2


if __name__ == "__main__":
    sys.exit(main())
