"""The GPU parsers: real captures (tests/fixtures/gpu-captures), synthetic multi-GPU outputs, malformed input."""
import json
import os

import pytest

from ansible_collections.kimi.deploy.plugins.module_utils._model import gpu as _gpu

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
CAPTURES = os.path.join(ROOT, "tests", "fixtures", "gpu-captures")

H100_ROW = "0, NVIDIA H100 80GB HBM3, GPU-521d52b3-3302-8435-3857-401ad2fdbfa9, 00000000:00:06.0, 9.0, 81559, Enabled, 580.159.04"
OPEN_580 = ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  Release Build  "
            "(dvs-builder@U22-I3-AF03-09-1)  Thu Oct 30 12:00:00 UTC 2025\nGCC version:  gcc version 13.3.0 \n")
PROPRIETARY_535 = ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.183.01  Sun May 12 19:39:15 UTC 2024\n"
                   "GCC version:  gcc version 12.3.0 (Ubuntu 12.3.0-1ubuntu1~22.04) \n")
NO_DRIVER_TEXT = ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
                  "Make sure that the latest NVIDIA driver is installed and running.\n\n")


def real_legend():
    """The legend block as the real nvidia-smi prints it under `topo -m` (captured on an H100 host)."""
    with open(os.path.join(CAPTURES, "nvidia-h100-x1", "topo.txt")) as handle:
        text = handle.read()
    return text[text.index("\nLegend:"):]


LEGEND = real_legend()


def capture(*parts):
    with open(os.path.join(CAPTURES, *parts)) as handle:
        return handle.read()


def rows(name, cc, mib, count, persistence="Enabled", driver="580.159.04", start=0):
    """--query-gpu rows (the module's fields, noheader, nounits) for COUNT GPUs numbered from START."""
    return "".join("%d, %s, GPU-%08d-0000-0000-0000-000000000000, 00000000:%02X:00.0, %s, %d, %s, %s\n"
                   % (i, name, i, 0x18 + i * 0x20, cc, mib, persistence, driver) for i in range(start, start + count))


def topo(count, link, nics=0, affinity="0-55,112-167", ansi=True):
    """A `nvidia-smi topo -m` matrix in the real layout (underlined header, as captured): link(i, j) gives the
    cell between GPUs i and j; NIC columns, rows and legend optional."""
    names = ["GPU%d" % i for i in range(count)] + ["NIC%d" % i for i in range(nics)]
    head = "\t".join(names + ["CPU Affinity", "NUMA Affinity", "GPU NUMA ID"])
    lines = ["\t\x1b[4m%s\x1b[0m" % head if ansi else "\t" + head]
    for i in range(count):
        row = [" X " if i == j else link(i, j) for j in range(count)] + ["PXB"] * nics
        lines.append("GPU%d\t%s\t%s\t%d\t\tN/A" % (i, "\t".join(row), affinity, i * 2 // count))
    for n in range(nics):
        lines.append("NIC%d\t%s" % (n, "\t".join(["PXB"] * count + [" X " if n == m else "SYS" for m in range(nics)])))
    text = "\n".join(lines) + "\n" + LEGEND
    if nics:
        text += "\nNIC Legend:\n\n" + "".join("  NIC%d: mlx5_%d\n" % (n, n) for n in range(nics))
    return text


def rtx_pcie(i, j):
    if i // 4 != j // 4:
        return "SYS"
    return "PIX" if i // 2 == j // 2 else "NODE"


RTX8_TOPO = topo(8, rtx_pcie, affinity="0-47,96-143")
H200_TOPO = topo(8, lambda i, j: "NV18", nics=2)


# --- --query-gpu --------------------------------------------------------------------------------------

def test_real_capture_with_gpu_facts_fields():
    gpus = _gpu.parse_query_gpu(capture("nvidia-h100-x1", "query.csv"))
    assert _gpu.gpu_entries(gpus) == [{
        "index": 0, "name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-521d52b3-3302-8435-3857-401ad2fdbfa9",
        "pci_bus_id": "00000000:00:06.0", "compute_cap": "9.0", "memory_mib": 81559, "persistence_mode": "Enabled"}]
    assert _gpu.driver_version_of(gpus) == "580.159.04"


def test_real_capture_with_header_and_units():
    """The shared capture was taken with --format=csv (header, units) and other fields: the header names them."""
    gpus = _gpu.parse_query_gpu(capture("h100-x1", "query.csv"))
    assert gpus == [{"index": 0, "name": "NVIDIA H100 80GB HBM3", "compute_cap": "9.0", "memory_mib": 81559,
                     "driver_version": "580.159.04", "persistence_mode": "Enabled"}]
    entry = _gpu.gpu_entries(gpus)[0]
    assert entry["uuid"] is None and entry["pci_bus_id"] is None and list(entry) == list(_gpu.GPU_KEYS)


def test_query_field_list_is_the_one_the_module_asks_for():
    assert _gpu.QUERY_GPU == "index,name,uuid,pci.bus_id,compute_cap,memory.total,persistence_mode,driver_version"
    assert len(capture("nvidia-h100-x1", "query.csv").split(",")) == len(_gpu.QUERY_FIELDS)


def test_eight_gpus_sorted_by_index():
    text = rows("NVIDIA H200", "9.0", 143771, 8)
    shuffled = "".join(reversed(text.splitlines(True)))
    gpus = _gpu.parse_query_gpu(shuffled)
    assert [g["index"] for g in gpus] == list(range(8))
    assert gpus[3]["pci_bus_id"] == "00000000:78:00.0"


def test_spaces_quotes_and_blank_lines():
    text = '\n  0 ,  "NVIDIA RTX PRO 6000 Blackwell Server Edition" , GPU-a , 00000000:01:00.0 , 12.0 , 97887 , Enabled , 580.95.05  \n\n'
    gpu = _gpu.parse_query_gpu(text)[0]
    assert gpu["name"] == "NVIDIA RTX PRO 6000 Blackwell Server Edition"
    assert (gpu["compute_cap"], gpu["memory_mib"], gpu["driver_version"]) == ("12.0", 97887, "580.95.05")


def test_quoted_comma_in_name():
    gpu = _gpu.parse_query_gpu('0, "NVIDIA Weird, Inc. GPU", GPU-a, 00000000:01:00.0, 8.9, 46068, Disabled, 550.1\n')[0]
    assert gpu["name"] == "NVIDIA Weird, Inc. GPU"


@pytest.mark.parametrize("value", ["[N/A]", "N/A", "[Not Supported]", "[Unknown Error]", "[Insufficient Permissions]"])
def test_unavailable_values_are_none(value):
    text = "0, NVIDIA GH200 480GB, %s, 00000009:01:00.0, %s, %s, %s, 580.95.05\n" % (value, value, value, value)
    gpu = _gpu.parse_query_gpu(text)[0]
    assert gpu["uuid"] is None and gpu["compute_cap"] is None and gpu["memory_mib"] is None
    assert gpu["persistence_mode"] is None
    summary = _gpu.summarize(_gpu.parse_query_gpu(text))
    assert summary["arch"] is None and summary["sm"] is None and summary["vram_total_mib"] == 0
    assert summary["persistence_mode_all"] is False and "compute capability unknown" in summary["message"]


def test_empty_output_is_no_gpu():
    assert _gpu.parse_query_gpu("") == []
    assert _gpu.parse_query_gpu("\n\n") == []


@pytest.mark.parametrize("text, words", [
    ("0, NVIDIA H100 80GB HBM3, GPU-a, 00000000:00:06.0, 9.0\n", ["row 1 has 5 fields, expected 8", "index, name"]),
    (H100_ROW + ", extra\n", ["row 1 has 9 fields, expected 8"]),
    (H100_ROW + "\n1, NVIDIA H100 80GB HBM3, GPU-b, 00000000:00:07.0, 9.0, 815", ["row 2 has 6 fields"]),  # truncated
    (H100_ROW.replace("0, NVIDIA", "zero, NVIDIA", 1) + "\n", ["field 'index' is not an integer", "'zero'"]),
    (H100_ROW.replace("81559", "81559.5") + "\n", ["field 'memory.total' is not a number of MiB", "81559.5"]),
    (H100_ROW.replace(" 9.0,", " sm90,") + "\n", ["field 'compute_cap'", "sm90"]),
    (H100_ROW.replace("NVIDIA H100 80GB HBM3", "[GPU is lost]") + "\n", ["field 'name' is unavailable"]),
    (H100_ROW + "\n" + H100_ROW + "\n", ["row 2: field 'index' repeats GPU 0"]),
])
def test_malformed_rows_name_the_field(text, words):
    with pytest.raises(_gpu.GpuParseError) as err:
        _gpu.parse_query_gpu(text)
    for word in words:
        assert word in str(err.value)


def test_header_without_index_or_name_is_refused():
    with pytest.raises(_gpu.GpuParseError, match="no 'index' column"):
        _gpu.parse_query_gpu("name, memory.total [MiB]\nNVIDIA H200, 143771 MiB\n")


def test_driver_version_must_agree():
    text = rows("NVIDIA H200", "9.0", 143771, 1) + rows("NVIDIA H200", "9.0", 143771, 1, driver="580.1", start=1)
    with pytest.raises(_gpu.GpuParseError, match="'driver_version' differs"):
        _gpu.driver_version_of(_gpu.parse_query_gpu(text))


# --- exit codes and other outputs ---------------------------------------------------------------------

def test_no_driver_text_and_exit_9():
    status, message = _gpu.classify_failure(9, NO_DRIVER_TEXT)
    assert status == "no_driver" and "exit 9" in message
    assert _gpu.classify_failure(255, NO_DRIVER_TEXT)[0] == "no_driver"


def test_no_devices_exit_6():
    assert _gpu.classify_failure(6, "No devices were found\n")[0] == "no_gpu"
    assert _gpu.classify_failure(0, "No devices were found\n")[0] == "no_gpu"


def test_version_mismatch_and_missing_library_are_errors():
    status, message = _gpu.classify_failure(18, "Failed to initialize NVML: Driver/library version mismatch\n"
                                                "NVML library version: 580.95\n")
    assert status == "error" and "reboot" in message and "version mismatch" in message
    assert _gpu.classify_failure(12, "NVIDIA-SMI couldn't find libnvidia-ml.so library in your system.")[0] == "error"


def test_other_failures_are_not_classified():
    assert _gpu.classify_failure(2, 'Field "compute_cap" is not a valid field to query.\n') is None
    assert _gpu.classify_failure(127, "", "sh: nvidia-smi: not found") is None


def test_cuda_version_from_version_and_table():
    assert _gpu.parse_cuda_version(capture("nvidia-h100-x1", "version.txt")) == "13.0"
    assert _gpu.parse_cuda_version(capture("h100-x1", "nvidia-smi.txt")) == "13.0"
    assert _gpu.parse_cuda_version("NVIDIA-SMI version  : 470.256.02\n") is None


@pytest.mark.parametrize("text, version, is_open", [
    (OPEN_580, "580.95.05", True),
    (PROPRIETARY_535, "535.183.01", False),
    ("NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  580.95.05  Release Build  (dvs-builder@U22)\n",
     "580.95.05", True),
    ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  470.256.02  Thu May  2 14:37:44 UTC 2024\n", "470.256.02", False),
])
def test_proc_version(text, version, is_open):
    assert _gpu.parse_proc_version(text) == {"driver_version": version, "open_kernel_module": is_open}


def test_proc_version_real_capture():
    assert _gpu.parse_proc_version(capture("nvidia-h100-x1", "proc-version.txt")) == {
        "driver_version": "580.159.04", "open_kernel_module": True}


def test_proc_version_empty_and_malformed():
    assert _gpu.parse_proc_version("") == {"driver_version": None, "open_kernel_module": None}
    with pytest.raises(_gpu.GpuParseError, match="NVRM version"):
        _gpu.parse_proc_version("garbage\n")


# --- topo -m ------------------------------------------------------------------------------------------

def test_topology_real_single_gpu_capture_with_ansi_header():
    text = capture("nvidia-h100-x1", "topo.txt")
    assert "\x1b[4m" in text  # the real tool underlines the header even into a pipe
    assert _gpu.parse_topology(text) == {"gpus": 1, "interconnect": "none", "nvlink_links": 0, "nvlink_all_pairs": False}


def test_topology_rtx_pro_pcie_only():
    assert _gpu.parse_topology(RTX8_TOPO) == {"gpus": 8, "interconnect": "pcie", "nvlink_links": 0, "nvlink_all_pairs": False}


def test_topology_h200_nv18_with_nics():
    assert _gpu.parse_topology(H200_TOPO) == {"gpus": 8, "interconnect": "nvlink", "nvlink_links": 18,
                                              "nvlink_all_pairs": True}


def test_topology_without_ansi():
    assert _gpu.parse_topology(topo(4, lambda i, j: "NV6", ansi=False))["nvlink_links"] == 6


def test_topology_partial_nvlink_bridges():
    """PCIe cards with NVLink bridges in pairs: NVLink, but not between every pair."""
    text = topo(4, lambda i, j: "NV4" if i // 2 == j // 2 else "SYS")
    assert _gpu.parse_topology(text) == {"gpus": 4, "interconnect": "nvlink", "nvlink_links": 4, "nvlink_all_pairs": False}


def test_topology_mixed_bond_widths_reports_the_widest():
    text = topo(4, lambda i, j: "NV12" if {i, j} == {0, 1} else "NV2")
    assert _gpu.parse_topology(text)["nvlink_links"] == 12


@pytest.mark.parametrize("text, match", [
    ("", "no header row naming GPU0"),
    ("ERROR: topology not available\n", "no header row naming GPU0"),
    ("\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tNV18\t0-1\n", "no row for GPU1"),
    ("\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \nGPU1\tNV18\t X \t0-1\n", "row GPU0 has 1 GPU cells, expected 2"),
])
def test_topology_malformed(text, match):
    with pytest.raises(_gpu.GpuParseError, match=match):
        _gpu.parse_topology(text)


# --- sysfs / procfs -----------------------------------------------------------------------------------

def make_sys(root, devices):
    for address, vendor, klass in devices:
        path = root / "bus" / "pci" / "devices" / address
        path.mkdir(parents=True)
        (path / "vendor").write_text(vendor + "\n")
        (path / "class").write_text(klass + "\n")
    return str(root)


def test_pci_gpus_real_device_listing(tmp_path):
    listing = [line.split() for line in capture("nvidia-h100-x1", "pci-devices.txt").splitlines()]
    assert _gpu.pci_gpus(make_sys(tmp_path, listing)) == ["0000:00:06.0"]


def test_pci_gpus_vga_and_3d_not_audio(tmp_path):
    root = make_sys(tmp_path, [("0000:01:00.0", "0x10de", "0x030000"), ("0000:01:00.1", "0x10de", "0x040300"),
                               ("0000:21:00.0", "0x10de", "0x030200"), ("0000:41:00.0", "0x1002", "0x030000"),
                               ("0000:05:00.0", "0x10de", "0x068000")])  # NVSwitch bridge: not a GPU
    assert _gpu.pci_gpus(root) == ["0000:01:00.0", "0000:21:00.0"]


def test_pci_gpus_without_sysfs(tmp_path):
    assert _gpu.pci_gpus(str(tmp_path / "missing")) == []


def make_proc(root, processes):
    for pid, comm, state in processes:
        path = root / str(pid)
        path.mkdir(parents=True)
        (path / "comm").write_text(comm + "\n")
        (path / "stat").write_text("%d (%s) %s 1 1 1 0 -1\n" % (pid, comm, state))
    (root / "self").mkdir(exist_ok=True)
    return str(root)


def test_persistenced_by_comm(tmp_path):
    assert _gpu.persistenced_active(make_proc(tmp_path, [(1, "init", "S"), (812, "nvidia-persiste", "S")]), pid_files=())


def test_persistenced_zombie_or_absent(tmp_path):
    assert not _gpu.persistenced_active(make_proc(tmp_path, [(1, "init", "S"), (812, "nvidia-persiste", "Z")]),
                                        pid_files=())
    assert not _gpu.persistenced_active(str(tmp_path / "missing"), pid_files=())


def test_persistenced_by_pid_file(tmp_path):
    proc = make_proc(tmp_path / "proc", [(1, "init", "S"), (4242, "python3", "S")])
    pid_file = tmp_path / "nvidia-persistenced.pid"
    pid_file.write_text("4242\n")
    assert _gpu.persistenced_active(proc, pid_files=[str(pid_file)])
    pid_file.write_text("4343\n")
    assert not _gpu.persistenced_active(proc, pid_files=[str(pid_file)])


# --- summary ------------------------------------------------------------------------------------------

SUMMARY_KEYS = {"status", "message", "driver_loaded", "nvidia_smi_found", "count", "models", "vram_total_mib",
                "vram_min_mib", "arch", "arch_name", "sm", "compute_caps", "homogeneous", "driver_version",
                "cuda_version", "open_kernel_module", "persistence_mode_all", "persistenced_active", "interconnect",
                "nvlink_links", "nvlink_all_pairs", "pci_gpu_count", "pci_gpus"}


def test_summary_of_the_real_device_capture():
    base = "nvidia-h100-x1"
    gpus = _gpu.parse_query_gpu(capture(base, "query.csv"))
    proc = _gpu.parse_proc_version(capture(base, "proc-version.txt"))
    summary = _gpu.summarize(gpus, driver_version=_gpu.driver_version_of(gpus), open_kernel_module=proc["open_kernel_module"],
                             cuda_version=_gpu.parse_cuda_version(capture(base, "version.txt")),
                             topology=_gpu.parse_topology(capture(base, "topo.txt")), pci_addresses=["0000:00:06.0"])
    recorded = json.loads(capture(base, "gpu_facts.json"))["ansible_facts"]  # captured before the facts' rename
    assert summary == recorded["kimi_gpu_summary"]
    assert _gpu.gpu_entries(gpus) == recorded["kimi_gpus"]


def test_summary_rtx_pro_8_pcie():
    summary = _gpu.summarize(_gpu.parse_query_gpu(rows("NVIDIA RTX PRO 6000 Blackwell Server Edition", "12.0", 97887, 8)),
                             topology=_gpu.parse_topology(RTX8_TOPO), driver_version="580.95.05", open_kernel_module=True)
    assert set(summary) == SUMMARY_KEYS
    assert (summary["count"], summary["arch"], summary["sm"], summary["interconnect"]) == (8, "blackwell-rtx", "sm_120", "pcie")
    assert summary["vram_total_mib"] == 8 * 97887 and summary["vram_min_mib"] == 97887
    assert summary["arch_name"] == "Blackwell RTX PRO / GeForce" and summary["homogeneous"]
    assert summary["message"] == ("8 x NVIDIA RTX PRO 6000 Blackwell Server Edition, blackwell-rtx sm_120, 783096 MiB VRAM "
                                  "in all, driver 580.95.05 (open kernel module), PCIe only (no NVLink between GPUs)")


def test_summary_h200_8_nvlink():
    summary = _gpu.summarize(_gpu.parse_query_gpu(rows("NVIDIA H200", "9.0", 143771, 8)),
                             topology=_gpu.parse_topology(H200_TOPO), driver_version="580.95.05", open_kernel_module=False)
    assert (summary["arch"], summary["sm"], summary["interconnect"], summary["nvlink_links"]) == ("hopper", "sm_90", "nvlink", 18)
    assert summary["message"].endswith("driver 580.95.05 (proprietary kernel module), NVLink (NV18)")


def test_summary_mixed_gpus_judged_by_the_weakest():
    text = (rows("NVIDIA RTX PRO 6000 Blackwell Server Edition", "12.0", 97887, 1)
            + "1, NVIDIA L40S, GPU-b, 00000000:21:00.0, 8.9, 46068, Disabled, 580.159.04\n"
            + "2, NVIDIA A100-SXM4-80GB, GPU-c, 00000000:41:00.0, 8.0, 81920, Enabled, 580.159.04\n")
    summary = _gpu.summarize(_gpu.parse_query_gpu(text))
    assert summary["models"] == ["NVIDIA A100-SXM4-80GB", "NVIDIA L40S", "NVIDIA RTX PRO 6000 Blackwell Server Edition"]
    assert summary["compute_caps"] == ["8.0", "8.9", "12.0"]
    assert (summary["arch"], summary["sm"], summary["homogeneous"]) == ("ampere", "sm_80", False)
    assert (summary["vram_min_mib"], summary["vram_total_mib"]) == (46068, 97887 + 46068 + 81920)
    assert summary["persistence_mode_all"] is False
    assert summary["interconnect"] is None  # several GPUs, topology not read
    assert summary["message"].startswith("3 GPUs (mixed: ")


@pytest.mark.parametrize("cc, family, sm", [("10.0", "blackwell-dc", "sm_100"), ("8.9", "ada", "sm_89"),
                                            ("12.1", "blackwell-rtx", "sm_121"), ("7.5", "unsupported", "sm_75")])
def test_summary_arch_families(cc, family, sm):
    summary = _gpu.summarize(_gpu.parse_query_gpu(rows("GPU", cc, 1000, 1)))
    assert (summary["arch"], summary["sm"], summary["interconnect"]) == (family, sm, "none")


def test_compute_caps_sort_numerically():
    text = rows("A", "9.0", 1, 1) + rows("B", "12.0", 1, 1, start=1)
    assert _gpu.summarize(_gpu.parse_query_gpu(text))["compute_caps"] == ["9.0", "12.0"]


def test_summary_without_gpus():
    summary = _gpu.summarize([], status="no_driver", message="nvidia-smi cannot talk to the NVIDIA driver (exit 9)",
                             pci_addresses=["0000:01:00.0"])
    assert set(summary) == SUMMARY_KEYS
    assert summary["driver_loaded"] is False and summary["count"] == 0 and summary["arch"] is None
    assert summary["interconnect"] is None and summary["pci_gpu_count"] == 1 and summary["models"] == []
    with pytest.raises(ValueError):
        _gpu.summarize([], status="bogus")


# --- the one GPU summary shape (gpu_facts's summary and the deployment model) ------------------------------

GPU_SUMMARY_KEYS = {"count", "models", "vram_total_mib", "vram_min_mib", "compute_caps", "arch", "arch_name", "sm",
                    "homogeneous"}


def test_gpu_facts_summary_is_the_gpu_summary_plus_host_keys():
    gpus = _gpu.parse_query_gpu(rows("NVIDIA H200", "9.0", 143771, 8))
    summary = _gpu.summarize(gpus)
    assert GPU_SUMMARY_KEYS < SUMMARY_KEYS and set(summary) == SUMMARY_KEYS
    assert dict((k, summary[k]) for k in GPU_SUMMARY_KEYS) == _gpu.summarize_gpus(gpus)


def test_summarize_gpus_of_a_profile_list():
    """The kimi_gpus input of a GPU profile: strings or numbers, nvidia-smi's "MiB" spelling reads too."""
    summary = _gpu.summarize_gpus([{"name": "x", "compute_cap": "12.0", "memory_mib": "97887 MiB"},
                                   {"name": "x", "compute_cap": 12.0, "memory_mib": 97887}])
    assert set(summary) == GPU_SUMMARY_KEYS
    assert (summary["vram_total_mib"], summary["vram_min_mib"], summary["compute_caps"]) == (2 * 97887, 97887, ["12.0"])
    assert (summary["arch"], summary["arch_name"], summary["sm"], summary["homogeneous"]) == (
        "blackwell-rtx", "Blackwell RTX PRO / GeForce", "sm_120", True)
    assert _gpu.summarize_gpus([]) == {"count": 0, "models": [], "vram_total_mib": 0, "vram_min_mib": 0,
                                       "compute_caps": [], "arch": None, "arch_name": None, "sm": None,
                                       "homogeneous": True}


@pytest.mark.parametrize("gpus, message", [
    ([{"name": "x", "memory_mib": 1}], r"GPU 0 has no usable compute_cap \(got None; expected like '12\.0'\)"),
    ([{"index": 3, "name": "x", "compute_cap": "sm90", "memory_mib": 1}], r"GPU 3 has no usable compute_cap"),
    ([{"name": "x", "compute_cap": "12.0\n1", "memory_mib": 1}], r"no usable compute_cap"),
    ([{"name": "x", "compute_cap": "12.0"}], r"GPU 0 has no usable memory_mib \(got None; expected an integer MiB\)"),
    ([{"name": "x", "compute_cap": "12.0", "memory_mib": 0}], r"GPU 0 has no usable memory_mib \(got 0\)"),
    ([{"name": "x", "compute_cap": "12.0", "memory_mib": True}], r"no usable memory_mib"),
    (["not a dict"], r"GPU 0 must be a dict"),
    ("RTX", r"GPU list must be a list of dicts .*got str"),
])
def test_summarize_gpus_requires_specs(gpus, message):
    with pytest.raises(_gpu.GpuListError, match=message):
        _gpu.summarize_gpus(gpus)


def test_summarize_gpus_without_required_specs_skips_unavailable_values():
    summary = _gpu.summarize_gpus([{"name": "x", "compute_cap": None, "memory_mib": None}], require_specs=False)
    assert (summary["count"], summary["arch"], summary["vram_total_mib"], summary["compute_caps"]) == (1, None, 0, [])


@pytest.mark.parametrize("cc, family, sm", [(12.0, "blackwell-rtx", "sm_120"), ("10.0", "blackwell-dc", "sm_100"),
                                            ("9.0", "hopper", "sm_90"), ("8.9", "ada", "sm_89"), ("8.6", "ampere", "sm_86"),
                                            ("7.0", "unsupported", "sm_70"), ("13.0", "unsupported", "sm_130")])
def test_arch_table(cc, family, sm):
    arch = _gpu.arch_of(cc)
    assert (arch["family"], arch["sm"]) == (family, sm)
