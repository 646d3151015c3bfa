"""The metrics-exporter doubles (tests/doubles/exporters/gpu_exporter.py): dcgm-exporter 4.5.3-4.8.2 and MindCluster
npu-exporter v26.1.0, run as subprocesses on free ports and read back with a strict Prometheus text-format parser.

The GPUs and NPUs come from the repository's nvidia-smi / npu-smi doubles (put on PATH through small shims) or, without
them, from KIMI_DOUBLE_GPUS / KIMI_DOUBLE_NPUS.
"""
import gzip
import json
import os
import random
import re
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXPORTER = os.path.join(ROOT, "tests", "doubles", "exporters", "gpu_exporter.py")
NVIDIA_SMI = os.path.join(ROOT, "tests", "doubles", "nvidia", "src", "nvidia_smi.py")
NPU_SMI = os.path.join(ROOT, "tests", "doubles", "ascend", "npu_smi.py")
PROFILES = os.path.join(ROOT, "tests", "fixtures", "gpus")

sys.path.insert(0, os.path.dirname(EXPORTER))
import gpu_exporter  # noqa: E402  (the double's own tables: XID texts, the embedded default counters)

# etc/default-counters.csv at 4.5.3-4.8.2: the counters that are not commented out, in DCGM field-id order (the order
# the real exporter renders them), with the Prometheus type and HELP (the CSV's third column)
DCGM_DEFAULT = [
    ("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz)."),
    ("DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz)."),
    ("DCGM_FI_DEV_MEMORY_TEMP", "gauge", "Memory temperature (in C)."),
    ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C)."),
    ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W)."),
    ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter", "Total energy consumption since boot (in mJ)."),
    ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", "Total number of PCIe retries."),
    ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %)."),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %)."),
    ("DCGM_FI_DEV_ENC_UTIL", "gauge", "Encoder utilization (in %)."),
    ("DCGM_FI_DEV_DEC_UTIL", "gauge", "Decoder utilization (in %)."),
    ("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered."),
    ("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB)."),
    ("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB)."),
    ("DCGM_FI_DEV_FB_RESERVED", "gauge", "Framebuffer memory reserved (in MiB)."),
    ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "counter", "Number of remapped rows for uncorrectable errors"),
    ("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "counter", "Number of remapped rows for correctable errors"),
    ("DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "Whether remapping of rows has failed"),
    ("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "counter", "Total number of NVLink bandwidth counters for all lanes."),
    ("DCGM_FI_DEV_VGPU_LICENSE_STATUS", "gauge", "vGPU License status"),
    ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "gauge", "Ratio of time the graphics engine is active."),
    ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "gauge", "Ratio of cycles the tensor (HMMA) pipe is active."),
    ("DCGM_FI_PROF_DRAM_ACTIVE", "gauge",
     "Ratio of cycles the device memory interface is active sending or receiving data."),
    ("DCGM_FI_PROF_PCIE_TX_BYTES", "gauge", "The rate of data transmitted over the PCIe bus - including both protocol "
     "headers and data payloads - in bytes per second."),
    ("DCGM_FI_PROF_PCIE_RX_BYTES", "gauge", "The rate of data received over the PCIe bus - including both protocol "
     "headers and data payloads - in bytes per second."),
]
DCGM_GPU_LABELS = ["gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname", "DCGM_FI_DRIVER_VERSION"]

CARD_LABELS = ["container_name", "id", "model_name", "namespace", "pcie_bus_info", "pod_name", "vdie_id"]
NPU_CHIP_FAMILIES = [
    "npu_chip_info_aicore_current_freq", "npu_chip_info_cube_utilization", "npu_chip_info_hbm_bandwidth_utilization",
    "npu_chip_info_hbm_ecc_double_bit_error_cnt", "npu_chip_info_hbm_ecc_double_bit_isolated_pages_cnt",
    "npu_chip_info_hbm_ecc_enable_flag", "npu_chip_info_hbm_ecc_single_bit_error_cnt",
    "npu_chip_info_hbm_ecc_single_bit_isolated_pages_cnt", "npu_chip_info_hbm_ecc_total_double_bit_error_cnt",
    "npu_chip_info_hbm_ecc_total_single_bit_error_cnt", "npu_chip_info_hbm_temperature",
    "npu_chip_info_hbm_total_memory", "npu_chip_info_hbm_used_memory", "npu_chip_info_hbm_utilization",
    "npu_chip_info_health_status", "npu_chip_info_network_status", "npu_chip_info_overall_utilization",
    "npu_chip_info_power", "npu_chip_info_process_info_num", "npu_chip_info_temperature",
    "npu_chip_info_utilization", "npu_chip_info_vector_utilization", "npu_chip_info_voltage",
]
NPU_FAMILIES = sorted(NPU_CHIP_FAMILIES + [
    "machine_card_nums", "machine_npu_nums", "node_base_info", "npu_chip_info_name", "npu_chip_info_process_info",
    "npu_chip_info_serial_number", "npu_exporter_version_info"])


# ------------------------------------------------------------------------------------------------
# A strict parser of the Prometheus text exposition format 0.0.4
# ------------------------------------------------------------------------------------------------

METRIC_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
LABEL_NAME = r"[a-zA-Z_][a-zA-Z0-9_]*"
LABEL_VALUE = r'"(?:[^"\\\n]|\\\\|\\"|\\n)*"'
VALUE = r"(?:[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?|NaN|[+-]Inf)"
SAMPLE = re.compile(r"^(%s)(?:\{((?:%s=%s)(?:,%s=%s)*)?\})? (%s)(?: (-?\d+))?$"
                    % (METRIC_NAME, LABEL_NAME, LABEL_VALUE, LABEL_NAME, LABEL_VALUE, VALUE))
LABEL_PAIR = re.compile(r"(%s)=(%s)" % (LABEL_NAME, LABEL_VALUE))
HELP = re.compile(r"^# HELP (%s) (.*)$" % METRIC_NAME)
TYPE = re.compile(r"^# TYPE (%s) (counter|gauge|histogram|summary|untyped)$" % METRIC_NAME)


def parse_prometheus(text):
    """Families in order: name -> {"help", "type", "samples": [([(label, value), ...], float, timestamp|None)]}.
    Fails the test on anything the text format does not allow: a line that is none of HELP/TYPE/sample, a
    sample before its TYPE or away from its family, HELP/TYPE twice, duplicate label names or label sets."""
    assert text.endswith("\n"), "the exposition must end with a newline"
    families, current, closed = {}, None, set()
    for number, line in enumerate(text[:-1].split("\n"), 1):
        where = "line %d: %r" % (number, line)
        help_match, type_match = HELP.match(line), TYPE.match(line)
        if help_match or type_match:
            name = (help_match or type_match).group(1)
            if current and current != name:
                closed.add(current)
            assert name not in closed, "family %s comes back after another one (%s)" % (name, where)
            family = families.setdefault(name, {"help": None, "type": None, "samples": []})
            key = "help" if help_match else "type"
            assert family[key] is None, "%s given twice (%s)" % (key, where)
            assert not family["samples"], "%s after the samples (%s)" % (key, where)
            family[key] = help_match.group(2) if help_match else type_match.group(2)
            current = name
            continue
        match = SAMPLE.match(line)
        assert match, "not a Prometheus text line (%s)" % where
        name = match.group(1)
        assert name == current and families[name]["type"], "sample outside its family's block (%s)" % where
        pairs = LABEL_PAIR.findall(match.group(2) or "")
        names = [pair[0] for pair in pairs]
        assert len(names) == len(set(names)), "duplicate label (%s)" % where
        labels = [(key, json.loads(value)) for key, value in pairs]
        assert labels not in [s[0] for s in families[name]["samples"]], "duplicate series (%s)" % where
        stamp = match.group(4)
        families[name]["samples"].append((labels, float(match.group(3)), int(stamp) if stamp else None))
    return families


def label_dict(sample):
    return dict(sample[0])


# ------------------------------------------------------------------------------------------------
# Running the double
# ------------------------------------------------------------------------------------------------

def free_port(low=20000, high=39999):
    """A port nobody listens on, below the kernel's ephemeral range: npu-exporter takes only [1025, 40000]."""
    for _attempt in range(200):
        port = random.randint(low, high)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("0.0.0.0", port))
            except OSError:
                continue
        if not listening(port):
            return port
    raise RuntimeError("no free port in [%d, %d]" % (low, high))


def listening(port):
    """The local addresses that listen on TCP port `port` (from /proc/net/tcp and tcp6, hex as the kernel writes)."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as handle:
                rows = handle.read().splitlines()[1:]
        except IOError:
            continue
        for row in rows:
            local, state = row.split()[1], row.split()[3]
            address, hex_port = local.split(":")
            if state == "0A" and int(hex_port, 16) == port:
                found.append(address)
    return found


class Runner(object):
    def __init__(self, tmp_path):
        self.tmp = tmp_path
        self.procs = []
        self.bin = tmp_path / "bin"
        self.bin.mkdir()
        for mode in ("dcgm-exporter", "npu-exporter"):
            (tmp_path / mode).symlink_to(EXPORTER)

    def shim(self, name, script):
        path = self.bin / name
        path.write_text("#!/bin/sh\nexec %s %s \"$@\"\n" % (sys.executable, script))
        path.chmod(0o755)

    def env(self, extra=None):
        env = dict((k, v) for k, v in os.environ.items()
                   if not k.startswith(("KIMI_DOUBLE_", "DCGM_", "NVIDIA_", "KUBERNETES_", "NODE_NAME")))
        env["PATH"] = str(self.bin)   # only the shims: no real nvidia-smi / npu-smi can leak in
        env.update(extra or {})
        return env

    def argv(self, mode, args):
        return [sys.executable, str(self.tmp / mode)] + list(args)

    def run(self, mode, args, env=None, timeout=30):
        return subprocess.run(self.argv(mode, args), env=self.env(env), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, universal_newlines=True, timeout=timeout, check=False)

    def start(self, mode, args, env=None, port=None):
        proc = subprocess.Popen(self.argv(mode, args), env=self.env(env), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, universal_newlines=True)
        self.procs.append(proc)
        deadline = time.time() + 20
        while time.time() < deadline:
            if proc.poll() is not None:
                out, err = proc.communicate()
                pytest.fail("%s exited %s before listening:\n%s\n%s" % (mode, proc.returncode, out, err))
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                return proc
            except OSError:
                time.sleep(0.1)
        pytest.fail("%s did not listen on %d" % (mode, port))

    def stop(self):
        for proc in self.procs:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            proc.stdout.close()
            proc.stderr.close()


@pytest.fixture
def runner(tmp_path):
    r = Runner(tmp_path)
    yield r
    r.stop()


def fetch(port, path="/metrics", headers=None):
    request = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path), headers=headers or {})
    with urllib.request.urlopen(request, timeout=20) as response:
        return response.status, dict(response.headers), response.read()


def scrape(port):
    status, headers, body = fetch(port)
    assert status == 200
    return headers, parse_prometheus(body.decode("utf-8"))


def dcgm(runner, args=(), env=None, profile=None):
    """Start dcgm-exporter on a free loopback port; with a GPU profile, the nvidia-smi double is on PATH."""
    port = free_port()
    extra = {"KIMI_DOUBLE_DCP": "1"}
    if profile:
        runner.shim("nvidia-smi", NVIDIA_SMI)
        extra["KIMI_DOUBLE_GPU_PROFILE"] = os.path.join(PROFILES, profile + ".json")
    extra.update(env or {})
    runner.start("dcgm-exporter", ["-a", "127.0.0.1:%d" % port] + list(args), extra, port)
    return port


def npu(runner, args=(), env=None, profile=None):
    port = free_port()
    extra = {}
    if profile:
        runner.shim("npu-smi", NPU_SMI)
        extra["KIMI_DOUBLE_GPU_PROFILE"] = os.path.join(PROFILES, profile + ".json")
        extra["KIMI_DOUBLE_NPU_PROCS"] = str(runner.tmp / "npu-processes")
    extra.update(env or {})
    runner.start("npu-exporter", ["-ip=127.0.0.1", "-port=%d" % port, "-logFile=%s" % (runner.tmp / "npu.log")]
                 + list(args), extra, port)
    return port


def nvidia_smi_rows(profile):
    proc = subprocess.run([sys.executable, NVIDIA_SMI, "--query-gpu=index,uuid,name,pci.bus_id,driver_version,"
                           "memory.total,temperature.gpu", "--format=csv,noheader,nounits"],
                          env={"KIMI_DOUBLE_GPU_PROFILE": os.path.join(PROFILES, profile + ".json"), "PATH": ""},
                          stdout=subprocess.PIPE, universal_newlines=True, check=True)
    return [line.split(", ") for line in proc.stdout.splitlines()]


# ------------------------------------------------------------------------------------------------
# dcgm-exporter
# ------------------------------------------------------------------------------------------------

def test_dcgm_default_counters_names_help_types_and_labels(runner):
    port = dcgm(runner, env={"KIMI_DOUBLE_GPUS": "3", "NODE_NAME": "gpu-node-7"})
    headers, families = scrape(port)
    assert headers["Content-Type"] == "text/plain; charset=utf-8"
    assert [(name, f["type"], f["help"]) for name, f in families.items()] == DCGM_DEFAULT
    for name, family in families.items():
        assert len(family["samples"]) == 3, name
        for index, sample in enumerate(family["samples"]):
            keys = [key for key, _value in sample[0]]
            expected = DCGM_GPU_LABELS + (["err_code", "err_msg"] if name == "DCGM_FI_DEV_XID_ERRORS" else [])
            assert keys == expected, name
            labels = label_dict(sample)
            assert labels["gpu"] == str(index) and labels["device"] == "nvidia%d" % index
            assert re.match(r"^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$", labels["UUID"])
            assert re.match(r"^[0-9A-F]{8}:[0-9A-F]{2}:[0-9A-F]{2}\.[0-7]$", labels["pci_bus_id"])
            assert labels["Hostname"] == "gpu-node-7"
            assert labels["DCGM_FI_DRIVER_VERSION"] == "580.159.04"
    xid = families["DCGM_FI_DEV_XID_ERRORS"]["samples"][0]
    assert xid[1] == 0 and label_dict(xid)["err_code"] == "0" and label_dict(xid)["err_msg"] == "No Error"


def test_dcgm_expected_list_is_the_embedded_csv():
    """The test's list above is the image's default-counters.csv: not commented, not a label, sorted by field id."""
    rows = []
    for line in gpu_exporter.DEFAULT_COUNTERS_CSV.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        name, prom_type, help_text = [cell.strip(" ") for cell in line.split(",", 2)]
        if prom_type != "label":
            rows.append((gpu_exporter.DCGM_FIELDS[name][0], name, prom_type, help_text))
    assert [row[1:] for row in sorted(rows)] == DCGM_DEFAULT


def test_dcgm_gpus_come_from_the_nvidia_smi_double(runner):
    port = dcgm(runner, profile="h100-x4")
    _headers, families = scrape(port)
    rows = nvidia_smi_rows("h100-x4")
    assert len(rows) == 4
    temps = families["DCGM_FI_DEV_GPU_TEMP"]["samples"]
    for row, sample in zip(rows, temps):
        labels = label_dict(sample)
        assert [labels["gpu"], labels["UUID"], labels["modelName"], labels["pci_bus_id"],
                labels["DCGM_FI_DRIVER_VERSION"]] == row[:5]
        assert sample[1] == float(row[6])
    for gpu in range(4):
        used, free, reserved = (families[name]["samples"][gpu][1] for name in
                                ("DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_RESERVED"))
        assert used + free + reserved == float(rows[gpu][5])
    assert re.match(r"^\d+\.\d{6}$", "%s" % fetch(port)[2].decode().split("DCGM_FI_DEV_POWER_USAGE{")[1]
                    .split("\n")[0].split("} ")[1])   # DCGM doubles print with %f


def test_dcgm_blank_memory_temperature_is_skipped(runner):
    """nvidia-smi says [N/A] for the RTX PRO 6000's memory temperature: DCGM has a blank value, no series."""
    port = dcgm(runner, profile="rtx-pro-6000-x8")
    _headers, families = scrape(port)
    assert "DCGM_FI_DEV_MEMORY_TEMP" not in families
    assert len(families["DCGM_FI_DEV_GPU_TEMP"]["samples"]) == 8


def test_dcgm_temperature_and_xid_knobs(runner):
    port = dcgm(runner, env={"KIMI_DOUBLE_GPU_TEMP": "95", "KIMI_DOUBLE_XID": "79"}, profile="h100-x4")
    _headers, families = scrape(port)
    assert [s[1] for s in families["DCGM_FI_DEV_GPU_TEMP"]["samples"]] == [95.0] * 4
    xids = families["DCGM_FI_DEV_XID_ERRORS"]["samples"]
    assert [s[1] for s in xids] == [79.0, 0.0, 0.0, 0.0]
    assert label_dict(xids[0])["err_code"] == "79"
    assert label_dict(xids[0])["err_msg"] == gpu_exporter.XID_ERR_MSG[79] == "GPU has fallen off the bus"
    assert label_dict(xids[1])["err_msg"] == "No Error"


def test_dcgm_profiling_metrics_need_cap_sys_admin(runner):
    """Without profiling (no CAP_SYS_ADMIN in a default container) the DCP fields are skipped, as the real one."""
    port = dcgm(runner, env={"KIMI_DOUBLE_DCP": "0", "KIMI_DOUBLE_GPUS": "2"})
    _headers, families = scrape(port)
    assert not [name for name in families if name.startswith("DCGM_FI_PROF_")]
    assert len(families) == 20


def test_dcgm_binds_loopback_when_told(runner):
    port = dcgm(runner, env={"KIMI_DOUBLE_GPUS": "1"})
    assert listening(port) == ["0100007F"]


def test_dcgm_default_address_is_every_interface(runner):
    port = free_port()
    runner.start("dcgm-exporter", [], {"DCGM_EXPORTER_LISTEN": ":%d" % port, "KIMI_DOUBLE_GPUS": "1"}, port)
    assert set(listening(port)) <= {"00000000", "00000000000000000000000000000000"} and listening(port)
    assert [flag.default for flag in gpu_exporter.DCGM_FLAGS if flag.name == "address"] == [":9400"]


def test_dcgm_unknown_flag_fails_like_urfave_cli(runner):
    """urfave/cli v2: 'Incorrect Usage' and the help on stdout; main logs the error and exits 1 (not 2)."""
    result = runner.run("dcgm-exporter", ["--no-such-flag"])
    assert result.returncode == 1
    assert result.stdout.startswith("Incorrect Usage: flag provided but not defined: -no-such-flag\n\nNAME:\n")
    assert "--address value, -a value" in result.stdout
    assert re.search(r"^\d{4}/\d\d/\d\d \d\d:\d\d:\d\d ERROR flag provided but not defined: -no-such-flag$",
                     result.stderr, re.M)
    assert runner.run("dcgm-exporter", ["-c", "soon"]).returncode == 1
    assert runner.run("dcgm-exporter", ["-a"]).returncode == 1


def test_dcgm_version_help_and_mode_by_first_argument(runner):
    result = runner.run("dcgm-exporter", ["--version"])
    assert (result.returncode, result.stdout) == (0, "DCGM Exporter version 4.5.3-4.8.2\n")
    assert runner.run("dcgm-exporter", ["-h"]).returncode == 0
    by_arg = subprocess.run([sys.executable, EXPORTER, "dcgm-exporter", "-v"], stdout=subprocess.PIPE,
                            universal_newlines=True, check=False)
    assert by_arg.stdout == "DCGM Exporter version 4.5.3-4.8.2\n"
    assert subprocess.run([sys.executable, EXPORTER], stderr=subprocess.PIPE, check=False).returncode == 2


def test_dcgm_collectors_file_old_namespace_and_device_filter(runner, tmp_path):
    counters = tmp_path / "counters.csv"
    counters.write_text("# mine\nDCGM_FI_DEV_GPU_TEMP, gauge, Temp.\nDCGM_FI_DEV_ECC_DBE_VOL_TOTAL, counter, DBE.\n"
                        "DCGM_FI_DRIVER_VERSION, label, Driver Version\nDCGM_FI_DEV_SERIAL, label, Serial\n")
    port = dcgm(runner, ["-f", str(counters), "--use-old-namespace", "-d", "g:1-2"], profile="h100-x4")
    _headers, families = scrape(port)
    assert list(families) == ["DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"]
    assert families["DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"]["type"] == "counter"
    samples = families["DCGM_FI_DEV_GPU_TEMP"]["samples"]
    assert [label_dict(s)["gpu"] for s in samples] == ["1", "2"]
    assert [key for key, _v in samples[0][0]] == ["gpu", "uuid", "pci_bus_id", "device", "modelName", "Hostname",
                                                  "DCGM_FI_DEV_SERIAL", "DCGM_FI_DRIVER_VERSION"]
    missing = runner.run("dcgm-exporter", ["-f", str(tmp_path / "none.csv"), "-a", "127.0.0.1:%d" % free_port()],
                         {"KIMI_DOUBLE_GPU_PROFILE": os.path.join(PROFILES, "h100-x4.json")})
    assert missing.returncode == 1 and "Could not read metrics file" in missing.stderr


def test_dcgm_no_driver_fails_at_start(runner):
    runner.shim("nvidia-smi", NVIDIA_SMI)
    result = runner.run("dcgm-exporter", ["-a", "127.0.0.1:%d" % free_port()],
                        {"KIMI_DOUBLE_NO_DRIVER": "1", "KIMI_DOUBLE_GPU_PROFILE": os.path.join(PROFILES,
                                                                                               "h100-x1.json")})
    assert result.returncode == 1 and "level=ERROR" in result.stderr


# ------------------------------------------------------------------------------------------------
# npu-exporter
# ------------------------------------------------------------------------------------------------

def test_npu_names_labels_and_types_without_npu_smi(runner):
    port = npu(runner, env={"KIMI_DOUBLE_NPUS": "8"})
    headers, families = scrape(port)
    assert headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8; escaping=underscores"
    assert list(families) == NPU_FAMILIES   # sorted by name, as client_golang gathers them
    assert all(f["type"] == "gauge" for f in families.values())
    assert families["npu_chip_info_temperature"]["help"] == "the npu temperature"
    assert families["npu_chip_info_hbm_used_memory"]["help"] == "the npu hbm used memory"
    assert families["machine_npu_nums"]["samples"] == [([], 8.0, None)]
    assert families["machine_card_nums"]["samples"] == [([], 8.0, None)]
    for name in NPU_CHIP_FAMILIES:
        samples = families[name]["samples"]
        assert len(samples) == 8, name
        assert all([key for key, _v in s[0]] == CARD_LABELS for s in samples), name
        assert all(s[2] is not None for s in samples), name   # NewMetricWithTimestamp
        assert [label_dict(s)["id"] for s in samples] == sorted(str(i) for i in range(8))
        assert all(label_dict(s)["model_name"] == "910B3-Ascend-V1" for s in samples)
        assert all(re.match(r"^([0-9A-F]{8}-){4}[0-9A-F]{8}$", label_dict(s)["vdie_id"]) for s in samples)
        assert all(label_dict(s)["namespace"] == label_dict(s)["pod_name"] == "" for s in samples)
    proc = families["npu_chip_info_process_info"]["samples"][0]
    assert [key for key, _v in proc[0]] == ["container_id", "container_name", "id", "model_name", "namespace",
                                            "pcie_bus_info", "pod_name", "process_id", "vdie_id"]
    assert label_dict(families["npu_chip_info_name"]["samples"][0])["name"] == "910B3-Ascend-V1"
    version = families["npu_exporter_version_info"]["samples"][0]
    assert label_dict(version)["exporterVersion"].startswith("v26.1.0_linux-") and version[2] is None
    assert [key for key, _v in families["node_base_info"]["samples"][0][0]] == ["driverVersion", "exporterVersion"]


def test_npu_chips_come_from_the_npu_smi_double_a3(runner):
    procs = runner.tmp / "npu-processes"
    procs.write_text("3 4242 vllm 30000\n")
    port = npu(runner, profile="ascend-a3-x16")
    _headers, families = scrape(port)
    profile = json.load(open(os.path.join(PROFILES, "ascend-a3-x16.json")))
    chips = dict((str(c["index"]), c) for c in profile["kimi_gpus"])
    assert families["machine_npu_nums"]["samples"][0][1] == 16
    assert families["machine_card_nums"]["samples"][0][1] == 8
    used = families["npu_chip_info_hbm_used_memory"]["samples"]
    assert sorted(label_dict(s)["id"] for s in used) == sorted(chips)
    for sample in used:
        labels = label_dict(sample)
        assert labels["pcie_bus_info"] == chips[labels["id"]]["bus_id"]
        assert labels["model_name"] == "Ascend910-Ascend-V1"
        assert sample[1] == 3131 + (30000 if labels["id"] == "3" else 0)
    total = families["npu_chip_info_hbm_total_memory"]["samples"]
    assert set(s[1] for s in total) == {65536.0}
    busy = [s for s in families["npu_chip_info_process_info"]["samples"] if label_dict(s)["process_id"]]
    assert [(label_dict(s)["id"], label_dict(s)["process_id"], s[1]) for s in busy] == [("3", "4242", 30000.0)]
    assert set(s[1] for s in families["npu_chip_info_health_status"]["samples"]) == {1.0}
    assert families["node_base_info"]["samples"][0][0][0] == ("driverVersion", "25.2.1")


def test_npu_a2_profile_and_health_from_npu_smi(runner, tmp_path):
    profile = json.load(open(os.path.join(PROFILES, "ascend-a2-x8.json")))
    profile["kimi_gpus"][5]["health"] = "Warning"
    path = tmp_path / "a2-warning.json"
    path.write_text(json.dumps(profile))
    port = npu(runner, profile="ascend-a2-x8", env={"KIMI_DOUBLE_GPU_PROFILE": str(path)})
    _headers, families = scrape(port)
    health = dict((label_dict(s)["id"], s[1]) for s in families["npu_chip_info_health_status"]["samples"])
    assert health == dict((str(i), 0.0 if i == 5 else 1.0) for i in range(8))
    assert set(label_dict(s)["model_name"] for s in families["npu_chip_info_power"]["samples"]) == {"910B3-Ascend-V1"}


def test_npu_temperature_and_error_code_knobs(runner):
    port = npu(runner, env={"KIMI_DOUBLE_NPUS": "16", "KIMI_DOUBLE_GPU_TEMP": "99",
                            "KIMI_DOUBLE_NPU_ERROR_CODES": "80E01801,80C98008"})
    _headers, families = scrape(port)
    assert set(s[1] for s in families["npu_chip_info_temperature"]["samples"]) == {99.0}
    assert len(families["npu_chip_info_temperature"]["samples"]) == 16
    assert [(label_dict(s)["id"], s[1]) for s in families["npu_chip_info_error_code"]["samples"]] == [
        ("0", float(0x80E01801))]
    assert families["npu_chip_info_error_code_1"]["samples"][0][1] == float(0x80C98008)


def test_npu_binds_the_ip_it_is_given_and_gzips(runner):
    port = npu(runner, env={"KIMI_DOUBLE_NPUS": "2"})
    assert listening(port) == ["0100007F"]
    status, headers, body = fetch(port, headers={"Accept-Encoding": "gzip"})
    assert status == 200 and headers["Content-Encoding"] == "gzip"
    assert "machine_npu_nums 2\n" in gzip.decompress(body).decode()


def test_npu_healthz_listens_on_every_interface(runner):
    hz = free_port()
    npu(runner, ["--enable-healthz=true", "--healthz-address=%d" % hz], {"KIMI_DOUBLE_NPUS": "1"})
    assert fetch(hz, "/")[2] == b"ok"
    assert set(listening(hz)) <= {"00000000", "00000000000000000000000000000000"}


def test_npu_unknown_flag_exits_2_with_go_usage(runner):
    result = runner.run("npu-exporter", ["-no-such-flag"])
    assert result.returncode == 2
    assert result.stdout.startswith("Please read the End User License Agreement carefully.")
    assert result.stderr.startswith("flag provided but not defined: -no-such-flag\nUsage of ")
    port_help = "\n  -port int\n    \tThe server port of the http service,range[1025-40000] (default 8082)\n"
    assert port_help in result.stderr
    assert runner.run("npu-exporter", ["-port=x"]).returncode == 2
    assert runner.run("npu-exporter", ["-h"]).returncode == 0


def test_npu_parameter_errors_log_and_exit_0_like_main_go(runner):
    log = "-logFile=%s" % (runner.tmp / "npu.log")
    no_ip = runner.run("npu-exporter", [log], {"KIMI_DOUBLE_NPUS": "1"})
    assert no_ip.returncode == 0 and "[ERROR]" in no_ip.stdout and "the listen ip is invalid" in no_ip.stdout
    low_port = runner.run("npu-exporter", [log, "-ip=127.0.0.1", "-port=80"], {"KIMI_DOUBLE_NPUS": "1"})
    assert low_port.returncode == 0 and "the port is invalid" in low_port.stdout
    version = runner.run("npu-exporter", ["-version"])
    assert version.returncode == 0 and version.stdout.endswith("NPU-exporter version: %s \n"
                                                               % gpu_exporter.NPU_BUILD_VERSION)
    assert "the listen ip is invalid" in (runner.tmp / "npu.log").read_text()


def test_npu_no_driver_logs_and_exits_0(runner):
    runner.shim("npu-smi", NPU_SMI)
    result = runner.run("npu-exporter", ["-ip=127.0.0.1", "-logFile=%s" % (runner.tmp / "npu.log")],
                        {"KIMI_DOUBLE_GPU_PROFILE": str(runner.tmp / "missing.json")})
    assert result.returncode == 0 and "new npu collector failed" in result.stdout


# ------------------------------------------------------------------------------------------------
# Helpers of the double
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("value, text", [(0, "0"), (1, "1"), (65536, "65536"), (123456, "123456"),
                                         (1000000, "1e+06"), (1234567, "1.234567e+06"), (0.5, "0.5"),
                                         (0.0001, "0.0001"), (0.000015, "1.5e-05"), (-2.25, "-2.25"),
                                         (2160090113, "2.160090113e+09"), (float("nan"), "NaN")])
def test_go_float_formats_like_strconv_g(value, text):
    assert gpu_exporter.go_float(value) == text


def test_parser_rejects_malformed_text():
    for bad in ("x 1\n", "# TYPE x gauge\nx{a=\"1\"} 1\n# TYPE y gauge\ny 1\nx{a=\"2\"} 1\n",
                "# TYPE x gauge\nx{a=1} 1\n", "# TYPE x gauge\nx 1", "# TYPE x gauge\nx{a=\"1\",a=\"2\"} 1\n"):
        with pytest.raises(AssertionError):
            parse_prometheus(bad)
