"""The NVIDIA host-tool test doubles (tests/doubles/nvidia) and their signed apt repository.

The doubles run as subprocesses against the GPU profiles in tests/fixtures/gpus; the h100-x1
profile must reproduce the real captured GPU in the shared fixtures byte for byte.
"""
import gzip
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET

import pytest
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
DOUBLES = os.path.join(ROOT, "tests", "doubles", "nvidia")
SRC = os.path.join(DOUBLES, "src")
PROFILES = os.path.join(ROOT, "tests", "fixtures", "gpus")
# The real H100 capture: the copy kept in the repository (shared/fixtures is not beside every clone).
CAPTURE = os.environ.get("KIMI_GPU_CAPTURE_H100", os.path.join(ROOT, "tests", "fixtures", "gpu-captures", "h100-x1"))

SMI = os.path.join(SRC, "nvidia_smi.py")
CTK = os.path.join(SRC, "nvidia_ctk.py")
PERSISTENCED = os.path.join(SRC, "nvidia_persistenced.py")

# The NVIDIA profiles (the Ascend ones, platform: ascend, belong to the npu-smi double).
ALL_PROFILES = sorted(f[:-5] for f in os.listdir(PROFILES) if f.endswith(".json") and not f.startswith("ascend-"))
REQUIRED_PROFILES = ["b200-x8", "h100-x1", "h100-x4", "h200-x8", "none", "rtx-pro-6000-x8"]
CDI_KEY_ORDER = ["cdiVersion", "kind", "devices", "containerEdits"]


def profile_path(name):
    return os.path.join(PROFILES, name + ".json")


def load_profile(name):
    with open(profile_path(name)) as handle:
        return json.load(handle)


def run(script, args, profile="h100-x1", env=None, python=None):
    environ = dict(os.environ)
    for key in list(environ):
        if key.startswith(("KIMI_DOUBLE_", "NVIDIA_CTK_")):
            del environ[key]
    if profile is not None:
        environ["KIMI_DOUBLE_GPU_PROFILE"] = profile if os.path.isabs(profile) else profile_path(profile)
    environ.update(env or {})
    return subprocess.run([python or sys.executable, script] + list(args), env=environ, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True, timeout=60, check=False)


def read(path):
    with open(path) as handle:
        return handle.read()


# ------------------------------------------------------------------------------------------------
# GPU profiles
# ------------------------------------------------------------------------------------------------

def test_all_required_profiles_exist():
    assert set(REQUIRED_PROFILES) <= set(ALL_PROFILES)


@pytest.mark.parametrize("name", ALL_PROFILES)
def test_profile_shape(name):
    profile = load_profile(name)
    assert profile["kimi_gpu_profile"] == name
    for key in profile:
        assert re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", key), "not an Ansible variable name: %s" % key
    assert profile["kimi_gpu_interconnect"] in ("pcie", "nvlink")
    assert re.match(r"^\d+\.\d+\.\d+$", profile["kimi_gpu_driver"]["version"])
    assert isinstance(profile["kimi_gpu_driver"]["open_kernel_module"], bool)
    gpus = profile["kimi_gpus"]
    assert [g["index"] for g in gpus] == list(range(len(gpus)))
    assert len(set(g["uuid"] for g in gpus)) == len(gpus)
    assert len(set(g["pci_bus_id"] for g in gpus)) == len(gpus)
    for gpu in gpus:
        assert re.match(r"^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$", gpu["uuid"])
        assert re.match(r"^[0-9A-F]{8}:[0-9A-F]{2}:[0-9A-F]{2}\.[0-7]$", gpu["pci_bus_id"])
        assert re.match(r"^\d+\.\d$", gpu["compute_cap"])
        assert isinstance(gpu["memory_mib"], int) and gpu["memory_mib"] > 0
        assert gpu["persistence_mode"] in ("Enabled", "Disabled")


@pytest.mark.parametrize("name, count, model, cc, mib, link", [
    ("rtx-pro-6000-x8", 8, "NVIDIA RTX PRO 6000 Blackwell Server Edition", "12.0", 97887, "pcie"),
    ("h200-x8", 8, "NVIDIA H200", "9.0", 143771, "nvlink"),
    ("h100-x4", 4, "NVIDIA H100 80GB HBM3", "9.0", 81559, "nvlink"),
    ("h100-x1", 1, "NVIDIA H100 80GB HBM3", "9.0", 81559, "pcie"),
    ("b200-x8", 8, "NVIDIA B200", "10.0", 183359, "nvlink"),
    ("none", 0, None, None, None, "pcie"),
])
def test_profile_hardware(name, count, model, cc, mib, link):
    profile = load_profile(name)
    assert len(profile["kimi_gpus"]) == count
    assert profile["kimi_gpu_interconnect"] == link
    for gpu in profile["kimi_gpus"]:
        assert (gpu["name"], gpu["compute_cap"], gpu["memory_mib"]) == (model, cc, mib)


def test_h100_x1_profile_is_the_captured_gpu():
    gpu = load_profile("h100-x1")["kimi_gpus"][0]
    real = ET.parse(os.path.join(CAPTURE, "nvidia-smi-q.xml")).getroot()
    card = real.find("gpu")
    assert gpu["uuid"] == card.findtext("uuid")
    assert gpu["pci_bus_id"] == card.get("id")
    assert gpu["name"] == card.findtext("product_name")
    assert "%d MiB" % gpu["memory_mib"] == card.findtext("fb_memory_usage/total")
    assert "%d MiB" % gpu["memory_reserved_mib"] == card.findtext("fb_memory_usage/reserved")
    assert load_profile("h100-x1")["kimi_gpu_driver"]["version"] == real.findtext("driver_version")


# ------------------------------------------------------------------------------------------------
# nvidia-smi
# ------------------------------------------------------------------------------------------------

def test_table_is_byte_compatible_with_capture():
    result = run(SMI, [])
    assert result.returncode == 0, result.stderr
    real = read(os.path.join(CAPTURE, "nvidia-smi.txt"))
    mine_lines, real_lines = result.stdout.split("\n"), real.split("\n")
    assert mine_lines[1:] == real_lines[1:]
    stamp = r"^[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \d{4} {7}$"
    assert re.match(stamp, mine_lines[0]) and re.match(stamp, real_lines[0])


def test_query_csv_is_byte_compatible_with_capture():
    result = run(SMI, ["--query-gpu=index,name,compute_cap,memory.total,driver_version,persistence_mode",
                       "--format=csv"])
    assert result.returncode == 0
    assert result.stdout == read(os.path.join(CAPTURE, "query.csv"))


def test_query_all_fields_agree_with_captured_xml():
    card = ET.parse(os.path.join(CAPTURE, "nvidia-smi-q.xml")).getroot().find("gpu")
    fields = ("index,name,uuid,pci.bus_id,compute_cap,memory.total,memory.used,memory.free,driver_version,"
              "persistence_mode,pstate,temperature.gpu,power.limit,count")
    result = run(SMI, ["--query-gpu=" + fields, "--format=csv"])
    assert result.returncode == 0
    header, row = result.stdout.splitlines()
    assert header == ("index, name, uuid, pci.bus_id, compute_cap, memory.total [MiB], memory.used [MiB], "
                      "memory.free [MiB], driver_version, persistence_mode, pstate, temperature.gpu, "
                      "power.limit [W], count")
    assert row.split(", ") == [
        "0", card.findtext("product_name"), card.findtext("uuid"), card.get("id"), "9.0",
        card.findtext("fb_memory_usage/total"), card.findtext("fb_memory_usage/used"),
        card.findtext("fb_memory_usage/free"), "580.159.04", card.findtext("persistence_mode"),
        card.findtext("performance_state"), card.findtext("temperature/gpu_temp").replace(" C", ""),
        card.findtext("gpu_power_readings/current_power_limit"), "1"]


@pytest.mark.parametrize("fmt, expected", [
    ("csv,noheader", "0, NVIDIA H100 80GB HBM3, 81559 MiB, 0 MiB, 700.00 W\n"),
    ("csv,nounits", "index, name, memory.total [MiB], memory.used [MiB], power.limit [W]\n"
                    "0, NVIDIA H100 80GB HBM3, 81559, 0, 700.00\n"),
    ("csv,noheader,nounits", "0, NVIDIA H100 80GB HBM3, 81559, 0, 700.00\n"),
])
def test_query_format_variants(fmt, expected):
    result = run(SMI, ["--query-gpu=index,gpu_name,memory.total,memory.used,power.limit", "--format=" + fmt])
    assert (result.returncode, result.stdout) == (0, expected)


def test_query_space_separated_option_values():
    result = run(SMI, ["--query-gpu", "uuid", "--format", "csv,noheader"])
    assert result.stdout == "GPU-e9156040-59cd-e1e5-ffbb-bd63bcc90a6f\n"


@pytest.mark.parametrize("fields", ["foo", "index,foo", "compute_capability"])
def test_unknown_field_is_refused_like_the_real_one(fields):
    result = run(SMI, ["--query-gpu=" + fields, "--format=csv"])
    bad = [f for f in fields.split(",") if f not in ("index",)][0]
    assert result.returncode == 2
    assert result.stdout == 'Field "%s" is not a valid field to query.\n\n' % bad


def test_query_without_format_is_an_argument_error():
    assert run(SMI, ["--query-gpu=index"]).returncode == 2


@pytest.mark.parametrize("name", [p for p in ALL_PROFILES if p != "none"])
def test_every_gpu_of_a_profile_is_reported(name):
    gpus = load_profile(name)["kimi_gpus"]
    rows = run(SMI, ["--query-gpu=index,uuid,memory.total", "--format=csv,noheader,nounits"], profile=name)
    assert rows.stdout.splitlines() == ["%d, %s, %d" % (g["index"], g["uuid"], g["memory_mib"]) for g in gpus]
    listing = run(SMI, ["-L"], profile=name).stdout.splitlines()
    assert listing == ["GPU %d: %s (UUID: %s)" % (g["index"], g["name"], g["uuid"]) for g in gpus]
    table = run(SMI, [], profile=name).stdout.splitlines()
    assert len(table[0]) == 31  # the timestamp line, with its trailing blanks
    assert all(len(line) == 91 for line in table[1:] if line)
    assert sum(1 for line in table if g_row(line)) == len(gpus)
    assert [g_row(line) for line in table if g_row(line)] == [g["pci_bus_id"] for g in gpus]


def g_row(line):
    match = re.match(r"^\|\s+\d+\s+.+\|\s+([0-9A-F]{8}:[0-9A-F]{2}:[0-9A-F]{2}\.\d) ", line)
    return match.group(1) if match else None


def test_long_names_are_truncated_in_the_table():
    table = run(SMI, [], profile="rtx-pro-6000-x8").stdout
    assert "|   7  NVIDIA RTX PRO 6000 Blac...    On  |   00000000:E1:00.0 Off |                    0 |" in table


def test_count_is_all_gpus_and_id_selects():
    result = run(SMI, ["--query-gpu=index,count", "--format=csv,noheader", "-i", "1,GPU-7c2e9b41-3d5a-4f8e-b1c6-"
                       "000000000006"], profile="h200-x8")
    assert result.stdout == "1, 8\n6, 8\n"
    assert run(SMI, ["-i", "9", "-L"], profile="h200-x8").returncode == 6


def test_version():
    result = run(SMI, ["--version"], profile="b200-x8")
    assert result.stdout == ("NVIDIA-SMI version  : 580.159.04\nNVML version        : 580.159\n"
                             "DRIVER version      : 580.159.04\nCUDA Version        : 13.0\n")


def test_no_gpu_and_no_driver():
    for args in ([], ["-L"], ["--query-gpu=index", "--format=csv"], ["topo", "-m"]):
        none = run(SMI, args, profile="none")
        assert (none.returncode, none.stdout) == (6, "No devices were found\n")
    no_driver = ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
                 "Make sure that the latest NVIDIA driver is installed and running.\n\n")
    for result in (run(SMI, [], profile="h200-x8", env={"KIMI_DOUBLE_NO_DRIVER": "1"}),
                   run(SMI, ["-L"], profile="/nonexistent/profile.json")):
        assert (result.returncode, result.stdout) == (9, no_driver)


def test_no_driver_profile_flag(tmp_path):
    profile = load_profile("h100-x4")
    profile["kimi_gpu_driver"]["loaded"] = False
    path = tmp_path / "nodriver.json"
    path.write_text(json.dumps(profile))
    assert run(SMI, ["--query-gpu=index", "--format=csv"], profile=str(path)).returncode == 9


def test_compute_apps(tmp_path):
    empty = run(SMI, ["--query-compute-apps=pid,process_name,used_memory", "--format=csv,noheader"])
    assert (empty.returncode, empty.stdout) == (0, "")
    header = run(SMI, ["--query-compute-apps=pid,process_name,used_memory", "--format=csv"])
    assert header.stdout == "pid, process_name, used_gpu_memory [MiB]\n"
    profile = load_profile("h100-x4")
    profile["kimi_gpus"][2]["processes"] = [{"pid": 4242, "process_name": "/usr/bin/python3",
                                             "used_memory_mib": 70000}]
    path = tmp_path / "busy.json"
    path.write_text(json.dumps(profile))
    busy = run(SMI, ["--query-compute-apps=pid,process_name,used_memory,gpu_uuid", "--format=csv,noheader,nounits"],
               profile=str(path))
    assert busy.stdout == "4242, /usr/bin/python3, 70000, %s\n" % profile["kimi_gpus"][2]["uuid"]
    used = run(SMI, ["--query-gpu=memory.used,memory.free", "--format=csv,noheader", "-i", "2"], profile=str(path))
    assert used.stdout == "70000 MiB, %d MiB\n" % (81559 - 480 - 70000)
    table = run(SMI, [], profile=str(path)).stdout
    assert "|    2   N/A  N/A            4242      C   /usr/bin/python3                      70000MiB |" in table
    assert "No running processes found" not in table
    assert run(SMI, ["--query-compute-apps=pid,bogus", "--format=csv"]).returncode == 2


@pytest.mark.parametrize("name, link", [("h200-x8", "NV18"), ("b200-x8", "NV18"), ("h100-x4", "NV6"),
                                        ("rtx-pro-6000-x8", None), ("h100-x1", None)])
def test_topo_matrix(name, link):
    gpus = load_profile(name)["kimi_gpus"]
    result = run(SMI, ["topo", "-m"], profile=name)
    assert result.returncode == 0
    text = result.stdout
    matrix, legend = text.split("\nLegend:\n")
    lines = matrix.rstrip("\n").split("\n")
    assert lines[0] == "\t" + "".join("GPU%d\t" % i for i in range(len(gpus))) + \
        "CPU Affinity\tNUMA Affinity\tGPU NUMA ID"
    assert len(lines) == 1 + len(gpus)
    cells = set()
    for i, line in enumerate(lines[1:]):
        parts = line.split("\t")
        assert parts[0] == "GPU%d" % i and parts[1 + i] == " X " and parts[-2:] == ["", "N/A"]
        cells.update(p for j, p in enumerate(parts[1:1 + len(gpus)]) if j != i)
    if link:
        assert cells == {link}
    else:
        assert not any(c.startswith("NV") for c in cells)
        assert cells <= {"PIX", "PXB", "PHB", "NODE", "SYS"}
    if name == "rtx-pro-6000-x8":
        assert cells == {"PIX", "NODE", "SYS"}
    assert "  NV#  = Connection traversing a bonded set of # NVLinks" in legend


def test_xml_query_agrees_with_captured_xml():
    result = run(SMI, ["-q", "-x"])
    mine = ET.fromstring(result.stdout)
    real = ET.parse(os.path.join(CAPTURE, "nvidia-smi-q.xml")).getroot()

    def leaves(element, path=""):
        for child in element:
            here = path + "/" + child.tag
            if len(child):
                yield from leaves(child, here)
            else:
                yield here, (child.text or "").strip()

    real_leaves = dict(leaves(real))
    checked = 0
    for path, value in leaves(mine):
        if path != "/timestamp":
            assert real_leaves.get(path) == value, path
            checked += 1
    assert checked >= 30
    assert mine.find("gpu").get("id") == real.find("gpu").get("id")
    assert result.stdout.split("\n")[:2] == read(os.path.join(CAPTURE, "nvidia-smi-q.xml")).split("\n")[:2]


def test_persistence_mode_switch(tmp_path):
    env = {"KIMI_DOUBLE_STATE_DIR": str(tmp_path)}
    if os.geteuid() != 0:
        assert run(SMI, ["-pm", "1"], profile="h100-x4", env=env).returncode == 4
        return
    off = run(SMI, ["-pm", "0", "-i", "0"], profile="h100-x4", env=env)
    assert (off.returncode, off.stdout) == (0, "Disabled persistence mode for GPU 00000000:19:00.0.\nAll done.\n")
    modes = run(SMI, ["--query-gpu=persistence_mode", "--format=csv,noheader"], profile="h100-x4", env=env)
    assert modes.stdout == "Disabled\nEnabled\nEnabled\nEnabled\n"
    again = run(SMI, ["--persistence-mode=1"], profile="h100-x4", env=env)
    assert again.stdout.splitlines() == ["Enabled persistence mode for GPU 00000000:19:00.0.",
                                         "Persistence mode is already Enabled for GPU 00000000:3B:00.0.",
                                         "Persistence mode is already Enabled for GPU 00000000:4C:00.0.",
                                         "Persistence mode is already Enabled for GPU 00000000:5D:00.0.",
                                         "All done."]


def test_container_sees_only_its_cdi_gpus():
    gpus = load_profile("h200-x8")["kimi_gpus"]
    env = {"KIMI_DOUBLE_CDI": "1", "KIMI_DOUBLE_GPU_3": gpus[3]["uuid"], "KIMI_DOUBLE_GPU_5": gpus[5]["uuid"]}
    result = run(SMI, ["--query-gpu=index,uuid,count", "--format=csv,noheader"], profile="h200-x8", env=env)
    assert result.stdout == "0, %s, 2\n1, %s, 2\n" % (gpus[3]["uuid"], gpus[5]["uuid"])


@pytest.mark.skipif(not os.path.exists("/usr/bin/python3"), reason="no system python3")
def test_doubles_run_on_the_system_python():
    result = run(SMI, ["-L"], profile="h200-x8", python="/usr/bin/python3")
    assert result.returncode == 0 and len(result.stdout.splitlines()) == 8
    assert run(CTK, ["cdi", "generate"], profile="h200-x8", python="/usr/bin/python3").returncode == 0


# ------------------------------------------------------------------------------------------------
# nvidia-ctk
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["h200-x8", "h100-x1", "rtx-pro-6000-x8"])
def test_cdi_generate_stdout_is_a_valid_spec(name):
    gpus = load_profile(name)["kimi_gpus"]
    result = run(CTK, ["cdi", "generate"], profile=name)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("---\ncdiVersion: 0.5.0\nkind: nvidia.com/gpu\n")
    spec = yaml.safe_load(result.stdout)
    assert list(spec) == CDI_KEY_ORDER
    assert spec["cdiVersion"] == "0.5.0" and spec["kind"] == "nvidia.com/gpu"
    names = [d["name"] for d in spec["devices"]]
    assert all(isinstance(n, str) for n in names)
    assert set(names) == set([str(i) for i in range(len(gpus))] + [g["uuid"] for g in gpus] + ["all"])
    assert len(names) == 2 * len(gpus) + 1
    nodes = [n for d in spec["devices"] for n in d["containerEdits"]["deviceNodes"]]
    nodes += spec["containerEdits"]["deviceNodes"]
    assert nodes and all(n["hostPath"] == "/dev/null" for n in nodes)
    assert {n["path"] for n in spec["containerEdits"]["deviceNodes"]} >= {"/dev/nvidiactl", "/dev/nvidia-uvm"}
    assert "NVIDIA_VISIBLE_DEVICES=void" in spec["containerEdits"]["env"]
    everything = [d for d in spec["devices"] if d["name"] == "all"][0]["containerEdits"]
    assert "KIMI_DOUBLE_GPUS=%d" % len(gpus) in everything["env"]
    assert sorted(n["path"] for n in everything["deviceNodes"]) == sorted("/dev/nvidia%d" % i for i in range(len(gpus)))
    one = [d for d in spec["devices"] if d["name"] == "0"][0]["containerEdits"]
    assert one["env"] == ["KIMI_DOUBLE_GPU_0=%s" % gpus[0]["uuid"]]
    assert 'level=info msg="Generated CDI spec with version 0.5.0"' in result.stderr
    assert 'level=info msg="Selecting /dev/nvidia0 as /dev/nvidia0"' in result.stderr


def test_cdi_generate_to_files_and_list(tmp_path):
    spec_dir = tmp_path / "cdi"
    for args in (["--output=%s" % (spec_dir / "nvidia.yaml")], ["--output", str(spec_dir / "nvidia.yaml")]):
        result = run(CTK, ["cdi", "generate"] + args, profile="h200-x8")
        assert (result.returncode, result.stdout) == (0, "")
        assert oct(os.stat(str(spec_dir / "nvidia.yaml")).st_mode & 0o777) == "0o644"
    spec = yaml.safe_load((spec_dir / "nvidia.yaml").read_text())
    assert len(spec["devices"]) == 17
    listing = run(CTK, ["cdi", "list", "--spec-dir=%s" % spec_dir], profile="h200-x8")
    assert listing.returncode == 0
    assert 'level=info msg="Found 17 CDI devices"' in listing.stderr
    gpus = load_profile("h200-x8")["kimi_gpus"]
    expected = sorted(["nvidia.com/gpu=%d" % i for i in range(8)] + ["nvidia.com/gpu=" + g["uuid"] for g in gpus]
                      + ["nvidia.com/gpu=all"])
    assert listing.stdout.splitlines() == expected
    assert listing.stdout.splitlines()[:2] == ["nvidia.com/gpu=0", "nvidia.com/gpu=1"]
    assert listing.stdout.splitlines()[-1] == "nvidia.com/gpu=all"
    # JSON spec, chosen by --format (the file name gets the extension, as with the real tool)
    result = run(CTK, ["cdi", "generate", "--format=json", "--device-name-strategy=index", "--vendor=example.com",
                       "--output=%s" % (tmp_path / "json" / "nvidia")], profile="h100-x4")
    assert result.returncode == 0
    data = json.loads((tmp_path / "json" / "nvidia.json").read_text())
    assert [d["name"] for d in data["devices"]] == ["0", "1", "2", "3", "all"]
    both = run(CTK, ["cdi", "list"], profile="h100-x4",
               env={"NVIDIA_CTK_CDI_SPEC_DIRS": "%s,%s" % (spec_dir, tmp_path / "json")})
    assert 'msg="Found 22 CDI devices"' in both.stderr
    assert "example.com/gpu=all" in both.stdout.splitlines()
    empty = run(CTK, ["cdi", "list", "--spec-dir", str(tmp_path / "missing")])
    assert (empty.returncode, empty.stdout) == (0, "")
    assert 'msg="Found 0 CDI devices"' in empty.stderr


def test_cdi_generate_failures():
    none = run(CTK, ["cdi", "generate"], profile="none")
    assert none.returncode == 1 and "level=error" in none.stderr and none.stdout == ""
    no_driver = run(CTK, ["cdi", "generate"], profile="h100-x1", env={"KIMI_DOUBLE_NO_DRIVER": "1"})
    assert no_driver.returncode == 1
    assert 'msg="failed to generate CDI spec: failed to create device CDI specs: failed to initialize NVML: ' \
        'ERROR_LIBRARY_NOT_FOUND"' in no_driver.stderr
    assert run(CTK, ["cdi", "generate", "--format=xml"]).returncode == 1
    assert run(CTK, ["cdi", "generate", "--bogus"]).returncode == 1


def test_ctk_version_and_runtime_configure(tmp_path):
    version = run(CTK, ["--version"])
    assert version.stdout.startswith("NVIDIA Container Toolkit CLI version 1.18.0\ncommit: ")
    daemon_json = tmp_path / "daemon.json"
    daemon_json.write_text('{"log-driver": "journald"}')
    result = run(CTK, ["runtime", "configure", "--runtime=docker", "--config=%s" % daemon_json, "--cdi.enabled"])
    assert result.returncode == 0, result.stderr
    assert json.loads(daemon_json.read_text()) == {
        "log-driver": "journald", "features": {"cdi": True},
        "runtimes": {"nvidia": {"args": [], "path": "nvidia-container-runtime"}}}
    assert "It is recommended that docker daemon be restarted." in result.stderr
    assert run(CTK, ["runtime", "configure", "--runtime=containerd"]).returncode == 1


# ------------------------------------------------------------------------------------------------
# nvidia-persistenced
# ------------------------------------------------------------------------------------------------

def _gone(pid):
    try:
        with open("/proc/%d/stat" % pid) as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except (IOError, OSError):
        return True


def test_persistenced_forks_writes_pid_and_stops_on_sigterm(tmp_path):
    rundir = tmp_path / "run"
    env = {"KIMI_DOUBLE_PERSISTENCED_RUNDIR": str(rundir)}
    started = run(PERSISTENCED, ["--verbose"], profile="h100-x4", env=env)
    assert started.returncode == 0, started.stderr
    pid = int((rundir / "nvidia-persistenced.pid").read_text())
    try:
        assert not _gone(pid)
        assert (rundir / "socket").exists()
        second = run(PERSISTENCED, [], profile="h100-x4", env=env)
        assert second.returncode == 1
    finally:
        os.kill(pid, signal.SIGTERM)
    deadline = time.time() + 10
    while not _gone(pid) and time.time() < deadline:
        time.sleep(0.1)
    assert _gone(pid)
    assert not (rundir / "nvidia-persistenced.pid").exists()


def test_persistenced_fails_without_driver(tmp_path):
    env = {"KIMI_DOUBLE_PERSISTENCED_RUNDIR": str(tmp_path), "KIMI_DOUBLE_NO_DRIVER": "1"}
    result = run(PERSISTENCED, [], profile="h100-x1", env=env)
    assert result.returncode == 1
    assert "nvidia-persistenced failed to initialize. Check syslog for more details." in result.stderr
    assert not (tmp_path / "nvidia-persistenced.pid").exists()


def test_persistenced_unit_is_the_ubuntu_one():
    unit = read(os.path.join(DOUBLES, "files", "nvidia-persistenced.service"))
    assert "Type=forking\n" in unit
    assert "ExecStart=/usr/bin/nvidia-persistenced --user nvidia-persistenced --no-persistence-mode --verbose\n" in unit
    assert "ExecStopPost=/bin/rm -rf /var/run/nvidia-persistenced\n" in unit
    assert "[Install]" not in unit  # static on Ubuntu: a role has to override it to enable it


# ------------------------------------------------------------------------------------------------
# The apt repository
# ------------------------------------------------------------------------------------------------

DRIVER = "580.159.04-0ubuntu1"
PACKAGES = {
    "nvidia-driver-580-open": (DRIVER, ["nvidia-utils-580 (= %s)" % DRIVER,
                                        "nvidia-compute-utils-580 (= %s)" % DRIVER], []),
    "nvidia-utils-580": (DRIVER, ["python3"], ["./usr/bin/nvidia-smi"]),
    "nvidia-compute-utils-580": (DRIVER, ["python3"], ["./usr/bin/nvidia-persistenced",
                                                       "./usr/lib/systemd/system/nvidia-persistenced.service"]),
    "nvidia-dkms-580-open": (DRIVER, ["nvidia-kernel-source-580-open (= %s)" % DRIVER],
                             ["./usr/share/kimi-double/proc/driver/nvidia/version"]),
    "nvidia-kernel-source-580-open": (DRIVER, [], []),
    "nvidia-container-toolkit": ("1.18.0-1", ["nvidia-container-toolkit-base (= 1.18.0-1)"], []),
    "nvidia-container-toolkit-base": ("1.18.0-1", ["python3"], ["./usr/bin/nvidia-ctk",
                                                                "./usr/bin/nvidia-container-runtime"]),
}

needs_tools = pytest.mark.skipif(not all(shutil.which(t) for t in ("dpkg-deb", "dpkg-scanpackages", "gpg", "gpgv")),
                                 reason="dpkg-dev and gpg are needed to build the repository")


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("nvidia-repo"))
    build = subprocess.run([os.path.join(DOUBLES, "build-repo.sh"), out], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, universal_newlines=True, timeout=300, check=False)
    assert build.returncode == 0, build.stdout
    return out


def deb(repo_dir, name):
    version = PACKAGES[name][0]
    path = os.path.join(repo_dir, "pool", "%s_%s_all.deb" % (name, version))
    assert os.path.isfile(path), os.listdir(os.path.join(repo_dir, "pool"))
    return path


@needs_tools
def test_repo_second_build_is_cached(repo):
    key = read(os.path.join(repo, ".kimi-double-repo.stamp")).strip()
    assert re.match(r"^[0-9a-f]{16}$", key)
    before = os.stat(os.path.join(repo, "InRelease")).st_mtime_ns
    start = time.time()
    again = subprocess.run([os.path.join(DOUBLES, "build-repo.sh"), repo], stdout=subprocess.PIPE,
                           universal_newlines=True, timeout=60, check=False)
    assert time.time() - start < 1.0
    assert again.returncode == 0 and "up to date" in again.stdout and key in again.stdout
    assert os.stat(os.path.join(repo, "InRelease")).st_mtime_ns == before
    assert stat_mode(os.path.join(repo, ".gnupg")) == 0o700


def stat_mode(path):
    return os.stat(path).st_mode & 0o777


@needs_tools
@pytest.mark.parametrize("name", sorted(PACKAGES))
def test_package_metadata_and_contents(repo, name):
    version, depends, files = PACKAGES[name]
    path = deb(repo, name)
    fields = subprocess.run(["dpkg-deb", "-f", path], stdout=subprocess.PIPE, universal_newlines=True, check=False).stdout
    control = dict(re.findall(r"^([A-Za-z-]+): (.*)$", fields, re.M))
    assert control["Package"] == name and control["Version"] == version
    assert control["Architecture"] == "all"
    assert control["Description"].startswith("TEST DOUBLE")
    for dep in depends:
        assert dep in [d.strip() for d in control.get("Depends", "").split(",")]
    listing = subprocess.run(["dpkg-deb", "-c", path], stdout=subprocess.PIPE, universal_newlines=True, check=False).stdout
    entries = {line.split()[-1]: line.split()[0] for line in listing.splitlines()}
    for wanted in files:
        assert wanted in entries, listing
        if "/bin/" in wanted:
            assert entries[wanted] == "-rwxr-xr-x"
    assert all(" root/root " in line for line in listing.splitlines())


@needs_tools
def test_packaged_scripts_have_the_debian_interpreter(repo, tmp_path):
    subprocess.run(["dpkg-deb", "-x", deb(repo, "nvidia-utils-580"), str(tmp_path)], check=True)
    smi = tmp_path / "usr" / "bin" / "nvidia-smi"
    assert smi.read_text().startswith("#!/usr/bin/python3\n")
    if os.path.exists("/usr/bin/python3"):
        env = dict(os.environ, KIMI_DOUBLE_GPU_PROFILE=profile_path("h100-x1"))
        out = subprocess.run([str(smi), "-L"], env=env, stdout=subprocess.PIPE, universal_newlines=True, check=False)
        assert out.stdout == "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-e9156040-59cd-e1e5-ffbb-bd63bcc90a6f)\n"


@needs_tools
def test_repo_index_and_signatures(repo, tmp_path):
    packages = read(os.path.join(repo, "Packages"))
    with gzip.open(os.path.join(repo, "Packages.gz"), "rt") as handle:
        assert handle.read() == packages
    for name in PACKAGES:
        assert "\nPackage: %s\n" % name in "\n" + packages
    release = read(os.path.join(repo, "Release"))
    sha256 = release.split("SHA256:\n")[1].split("SHA512:")[0]
    for line in sha256.strip().splitlines():
        digest, size, name = line.split()
        with open(os.path.join(repo, name), "rb") as handle:
            data = handle.read()
        assert (hashlib.sha256(data).hexdigest(), int(size)) == (digest, len(data))
    keyring = os.path.join(repo, "kimi-double-archive-keyring.gpg")
    with open(keyring, "rb") as handle:
        assert handle.read(1)[0] & 0x80  # binary OpenPGP, usable as Signed-By
    assert read(os.path.join(repo, "kimi-double-archive-keyring.asc")).startswith("-----BEGIN PGP PUBLIC KEY BLOCK")
    ok = subprocess.run(["gpgv", "--keyring", keyring, os.path.join(repo, "InRelease")],
                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=False)
    assert ok.returncode == 0, ok.stdout
    detached = subprocess.run(["gpgv", "--keyring", keyring, os.path.join(repo, "Release.gpg"),
                               os.path.join(repo, "Release")], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=False)
    assert detached.returncode == 0
    # a tampered Release must not verify
    tampered = tmp_path / "Release"
    tampered.write_text(release.replace("Origin: kimi-double", "Origin: someone-else"))
    bad = subprocess.run(["gpgv", "--keyring", keyring, os.path.join(repo, "Release.gpg"), str(tampered)],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=False)
    assert bad.returncode != 0


def apt_env(tmp_path, repo_dir, keyring):
    """apt-get options for a private apt configuration that sees only the double repository."""
    parts = tmp_path / "sources.list.d"
    for sub in ("sources.list.d", "lists/partial", "cache/archives/partial"):
        (tmp_path / sub).mkdir(parents=True, exist_ok=True)
    (parts / "kimi-double.sources").write_text(
        "Types: deb\nURIs: file:%s/\nSuites: ./\nSigned-By: %s\n" % (repo_dir, keyring))
    return ["-o", "Dir::Etc::SourceList=/dev/null", "-o", "Dir::Etc::SourceParts=%s" % parts,
            "-o", "Dir::State::Lists=%s" % (tmp_path / "lists"), "-o", "Dir::Cache=%s" % (tmp_path / "cache"),
            "-o", "APT::Sandbox::User=root", "-o", "Debug::NoLocking=1"]


@needs_tools
@pytest.mark.skipif(not shutil.which("apt-get"), reason="apt-get is needed")
def test_apt_reads_the_signed_repository(repo, tmp_path):
    keyring = os.path.join(repo, "kimi-double-archive-keyring.gpg")
    opts = apt_env(tmp_path / "good", repo, keyring)
    update = subprocess.run(["apt-get"] + opts + ["update"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            universal_newlines=True, timeout=120, check=False)
    assert update.returncode == 0, update.stdout
    assert "W:" not in update.stdout and "E:" not in update.stdout, update.stdout
    policy = subprocess.run(["apt-cache"] + opts + ["policy", "nvidia-driver-580-open", "nvidia-container-toolkit"],
                            stdout=subprocess.PIPE, universal_newlines=True, check=False).stdout
    assert "Candidate: 580.159.04-0ubuntu1" in policy and "Candidate: 1.18.0-1" in policy
    sim = subprocess.run(["apt-get"] + opts + ["-s", "install", "nvidia-driver-580-open", "nvidia-container-toolkit"],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True, check=False)
    if sim.returncode == 0:  # needs python3 and passwd installed on this host to resolve
        for name in ("nvidia-utils-580", "nvidia-compute-utils-580", "nvidia-container-toolkit-base"):
            assert re.search(r"^Inst %s " % re.escape(name), sim.stdout, re.M), sim.stdout
    # with another key, apt refuses the repository
    other = tmp_path / "other.gpg"
    other.write_bytes(b"")
    bad_opts = apt_env(tmp_path / "bad", repo, str(other))
    bad = subprocess.run(["apt-get"] + bad_opts + ["update"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         universal_newlines=True, timeout=120, check=False)
    assert bad.returncode != 0 or "not signed" in bad.stdout or "NO_PUBKEY" in bad.stdout, bad.stdout
