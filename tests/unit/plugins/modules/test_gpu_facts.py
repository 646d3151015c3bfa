"""kimi.deploy.gpu_facts end to end: the module runs as a subprocess (as Ansible runs it) against the nvidia-smi
test double and its GPU profiles, against a replay of the real captures, and against broken tools."""
import json
import os
import sys

import pytest

from module_runner import run_module

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
MODULE = os.path.join(ROOT, "plugins", "modules", "gpu_facts.py")
SMI_DOUBLE = os.path.join(ROOT, "tests", "doubles", "nvidia", "src", "nvidia_smi.py")
PROFILES = os.path.join(ROOT, "tests", "fixtures", "gpus")
CAPTURE = os.path.join(ROOT, "tests", "fixtures", "gpu-captures", "nvidia-h100-x1")

OPEN_VERSION = ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  %s  Release Build  "
                "(dvs-builder@U22-I3-AF03-09-1)  Thu Oct 30 12:00:00 UTC 2025\nGCC version:  gcc version 13.3.0 \n")
PROPRIETARY_VERSION = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  %s  Sun May 12 19:39:15 UTC 2024\n"


def load_profile(name):
    with open(os.path.join(PROFILES, name + ".json")) as handle:
        return json.load(handle)


def short_bus_id(bus_id):
    domain, bus, devfn = bus_id.split(":")
    return "%s:%s:%s" % (domain[-4:], bus.lower(), devfn.lower())


def script(path, body):
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return str(path)


class Host:
    """A fake host under tmp_path: bin/nvidia-smi, proc/ and sys/ for the module's options."""

    def __init__(self, tmp_path):
        self.root = tmp_path
        self.proc = tmp_path / "proc"
        self.sys = tmp_path / "sys"
        self.bin = tmp_path / "bin"
        for path in (self.proc, self.sys, self.bin):
            path.mkdir()
        self.smi = str(self.bin / "nvidia-smi")
        self.env = {}

    def double(self, profile):
        """nvidia-smi is the test double, answering from PROFILE (a name or None for "no profile file")."""
        script(self.bin / "nvidia-smi", 'exec "%s" "%s" "$@"\n' % (sys.executable, SMI_DOUBLE))
        self.env["KIMI_DOUBLE_GPU_PROFILE"] = os.path.join(PROFILES, profile + ".json")
        self.env["KIMI_DOUBLE_STATE_DIR"] = str(self.root / "state")

    def driver(self, version, is_open=True):
        path = self.proc / "driver" / "nvidia"
        path.mkdir(parents=True)
        (path / "version").write_text((OPEN_VERSION if is_open else PROPRIETARY_VERSION) % version)

    def pci(self, addresses, vendor="0x10de", klass="0x030200"):
        for address in addresses:
            path = self.sys / "bus" / "pci" / "devices" / address
            path.mkdir(parents=True)
            (path / "vendor").write_text(vendor + "\n")
            (path / "class").write_text(klass + "\n")

    def process(self, pid, comm):
        path = self.proc / str(pid)
        path.mkdir()
        (path / "comm").write_text(comm + "\n")
        (path / "stat").write_text("%d (%s) S 1 1 1 0 -1\n" % (pid, comm))

    def run(self, check_mode=False, **args):
        params = {"nvidia_smi": self.smi, "proc_root": str(self.proc), "sys_root": str(self.sys)}
        params.update(args)
        env = dict((k, v) for k, v in os.environ.items() if not k.startswith("KIMI_DOUBLE_"))
        env.update(self.env)
        return run_module(MODULE, params, env=env, check_mode=check_mode)


def double_host(tmp_path, profile):
    host = Host(tmp_path)
    host.double(profile)
    data = load_profile(profile)
    driver = data["kimi_gpu_driver"]
    host.driver(driver["version"], driver.get("open_kernel_module", True))
    host.pci(short_bus_id(g["pci_bus_id"]) for g in data["kimi_gpus"])
    return host, data


PROFILE_NAMES = ["rtx-pro-6000-x8", "h200-x8", "h100-x4", "h100-x1", "b200-x8"]


@pytest.mark.parametrize("profile", PROFILE_NAMES)
def test_summary_agrees_with_the_profile(tmp_path, profile):
    host, data = double_host(tmp_path, profile)
    out = host.run()
    assert out["changed"] is False and "warnings" not in out
    facts = out["ansible_facts"]
    summary, gpus = facts["nvidia_gpu_summary"], facts["nvidia_gpus"]
    expected = data["kimi_gpus"]
    assert summary["status"] == "ok" and summary["driver_loaded"] and summary["nvidia_smi_found"]
    assert summary["count"] == len(expected) == summary["pci_gpu_count"]
    assert summary["pci_gpus"] == sorted(short_bus_id(g["pci_bus_id"]) for g in expected)
    assert summary["interconnect"] == ("none" if len(expected) == 1 else data["kimi_gpu_interconnect"])
    assert summary["nvlink_links"] == data["kimi_gpu_nvlink_links"]
    assert summary["nvlink_all_pairs"] == (data["kimi_gpu_interconnect"] == "nvlink")
    assert summary["driver_version"] == data["kimi_gpu_driver"]["version"]
    assert summary["cuda_version"] == data["kimi_gpu_driver"]["cuda_version"]
    assert summary["open_kernel_module"] is data["kimi_gpu_driver"]["open_kernel_module"]
    assert summary["models"] == sorted(set(g["name"] for g in expected))
    assert summary["vram_total_mib"] == sum(g["memory_mib"] for g in expected)
    assert summary["vram_min_mib"] == min(g["memory_mib"] for g in expected)
    assert summary["compute_caps"] == sorted(set(g["compute_cap"] for g in expected))
    assert summary["persistence_mode_all"] is all(g["persistence_mode"] == "Enabled" for g in expected)
    assert summary["persistenced_active"] is False
    keys = ("index", "name", "uuid", "pci_bus_id", "compute_cap", "memory_mib", "persistence_mode")
    for got, want in zip(gpus, expected):
        assert got == dict((k, want[k]) for k in keys)


@pytest.mark.parametrize("profile, arch, sm", [("rtx-pro-6000-x8", "blackwell-rtx", "sm_120"), ("h200-x8", "hopper", "sm_90"),
                                               ("b200-x8", "blackwell-dc", "sm_100")])
def test_arch(tmp_path, profile, arch, sm):
    summary = double_host(tmp_path, profile)[0].run()["ansible_facts"]["nvidia_gpu_summary"]
    assert (summary["arch"], summary["sm"]) == (arch, sm)


def test_check_mode_gathers_the_same(tmp_path):
    host = double_host(tmp_path, "h200-x8")[0]
    normal, checked = host.run(), host.run(check_mode=True)
    assert checked["changed"] is False
    assert checked["ansible_facts"] == normal["ansible_facts"]


def test_no_topology_query(tmp_path):
    summary = double_host(tmp_path, "h200-x8")[0].run(query_topology=False)["ansible_facts"]["nvidia_gpu_summary"]
    assert summary["interconnect"] is None and summary["nvlink_links"] == 0 and summary["count"] == 8


def test_persistenced_running(tmp_path):
    host = double_host(tmp_path, "h100-x1")[0]
    host.process(1, "init")
    host.process(777, "nvidia-persiste")
    assert host.run()["ansible_facts"]["nvidia_gpu_summary"]["persistenced_active"] is True


def test_driver_version_file_apart_from_procfs(tmp_path):
    host = double_host(tmp_path, "h100-x1")[0]
    host.process(777, "nvidia-persiste")
    elsewhere = tmp_path / "version"
    elsewhere.write_text(PROPRIETARY_VERSION % "575.57.08")
    summary = host.run(driver_version_file=str(elsewhere))["ansible_facts"]["nvidia_gpu_summary"]
    assert summary["open_kernel_module"] is False and summary["persistenced_active"] is True


def test_no_gpu_profile(tmp_path):
    host, _data = double_host(tmp_path, "none")
    out = host.run()
    summary = out["ansible_facts"]["nvidia_gpu_summary"]
    assert out["ansible_facts"]["nvidia_gpus"] == []
    assert (summary["status"], summary["driver_loaded"], summary["count"]) == ("no_gpu", True, 0)
    assert summary["driver_version"] == "580.159.04" and summary["cuda_version"] == "13.0"
    assert "No devices were found" in summary["message"] and "no NVIDIA GPU on the PCI bus" in summary["message"]
    assert summary["interconnect"] is None and summary["arch"] is None


def test_no_driver(tmp_path):
    host = Host(tmp_path)
    host.double("rtx-pro-6000-x8")
    host.env["KIMI_DOUBLE_NO_DRIVER"] = "1"
    host.pci(["0000:01:00.0", "0000:21:00.0"], klass="0x030000")
    out = host.run()
    summary = out["ansible_facts"]["nvidia_gpu_summary"]
    assert out["changed"] is False and out["ansible_facts"]["nvidia_gpus"] == []
    assert (summary["status"], summary["driver_loaded"], summary["nvidia_smi_found"]) == ("no_driver", False, True)
    assert (summary["pci_gpu_count"], summary["pci_gpus"]) == (2, ["0000:01:00.0", "0000:21:00.0"])
    assert summary["driver_version"] is None and summary["open_kernel_module"] is None
    assert summary["message"] == ("nvidia-smi cannot talk to the NVIDIA driver (exit 9); no NVIDIA kernel module is "
                                  "loaded; 2 NVIDIA GPU(s) on the PCI bus (0000:01:00.0, 0000:21:00.0)")


def test_no_nvidia_smi(tmp_path):
    host = Host(tmp_path)
    host.driver("580.95.05", is_open=False)
    host.pci(["0000:00:06.0"])
    summary = host.run(nvidia_smi=str(tmp_path / "bin" / "missing"))["ansible_facts"]["nvidia_gpu_summary"]
    assert (summary["status"], summary["nvidia_smi_found"], summary["driver_loaded"]) == ("no_nvidia_smi", False, True)
    assert (summary["driver_version"], summary["open_kernel_module"]) == ("580.95.05", False)
    assert summary["message"].startswith(str(tmp_path / "bin" / "missing") + " was not found; NVIDIA kernel module 580.95.05")


def test_no_nvidia_smi_on_path(tmp_path):
    host = Host(tmp_path)
    summary = host.run(nvidia_smi="kimi-no-such-nvidia-smi")["ansible_facts"]["nvidia_gpu_summary"]
    assert summary["status"] == "no_nvidia_smi" and summary["driver_loaded"] is False
    assert summary["message"] == ("kimi-no-such-nvidia-smi was not found; no NVIDIA kernel module is loaded; "
                                  "no NVIDIA GPU on the PCI bus")


def test_replay_of_the_real_device(tmp_path):
    """nvidia-smi answers with what the real H100 host printed: the module's result is the one recorded there."""
    host = Host(tmp_path)
    script(host.bin / "nvidia-smi", 'case "$1" in\n'
           '  --query-gpu=*) cat "%s/query.csv";;\n'
           '  --version) cat "%s/version.txt";;\n'
           '  topo) cat "%s/topo.txt";;\n'
           '  *) exit 2;;\nesac\n' % (CAPTURE, CAPTURE, CAPTURE))
    (host.proc / "driver" / "nvidia").mkdir(parents=True)
    with open(os.path.join(CAPTURE, "proc-version.txt")) as handle:
        (host.proc / "driver" / "nvidia" / "version").write_text(handle.read())
    with open(os.path.join(CAPTURE, "pci-devices.txt")) as handle:
        for address, vendor, klass in (line.split() for line in handle if line.strip()):
            host.pci([address], vendor, klass)
    with open(os.path.join(CAPTURE, "gpu_facts.json")) as handle:
        recorded = json.load(handle)
    # Captured before the facts were renamed (kimi_gpus, kimi_gpu_summary): same values under the new names, and
    # as the plain return values gpus and summary.
    gpus, summary = recorded["ansible_facts"]["kimi_gpus"], recorded["ansible_facts"]["kimi_gpu_summary"]
    expected = dict(recorded, gpus=gpus, summary=summary,
                    ansible_facts={"nvidia_gpus": gpus, "nvidia_gpu_summary": summary})
    assert host.run() == expected


@pytest.mark.parametrize("body, words", [
    ('echo "0, NVIDIA H100 80GB HBM3, GPU-a, 00000000:00:06.0, 9.0"\n', ["row 1 has 5 fields, expected 8"]),
    ('echo "0, NVIDIA H100 80GB HBM3, GPU-a, 00000000:00:06.0, 9.0, lots, Enabled, 580.1"\n',
     ["field 'memory.total' is not a number of MiB", "lots"]),
    ('echo \'Field "compute_cap" is not a valid field to query.\'; exit 2\n', ["failed (exit 2)", "compute_cap"]),
])
def test_broken_output_fails_naming_the_field(tmp_path, body, words):
    host = Host(tmp_path)
    script(host.bin / "nvidia-smi", body)
    out = host.run()
    assert out["failed"] is True
    for word in words:
        assert word in out["msg"]


def test_version_mismatch_is_an_error_status(tmp_path):
    host = Host(tmp_path)
    host.driver("580.95.05")
    script(host.bin / "nvidia-smi", 'echo "Failed to initialize NVML: Driver/library version mismatch"\n'
                                    'echo "NVML library version: 580.126"\nexit 18\n')
    summary = host.run()["ansible_facts"]["nvidia_gpu_summary"]
    assert (summary["status"], summary["driver_loaded"], summary["driver_version"]) == ("error", True, "580.95.05")
    assert "reboot" in summary["message"]


def test_unreadable_topology_warns(tmp_path):
    host = Host(tmp_path)
    script(host.bin / "nvidia-smi", 'case "$1" in\n'
           '  --query-gpu=*) printf "0, A, GPU-a, 00000000:01:00.0, 12.0, 97887, Enabled, 580.1\\n'
           '1, A, GPU-b, 00000000:02:00.0, 12.0, 97887, Enabled, 580.1\\n";;\n'
           '  topo) echo "ERROR: topology unavailable"; exit 3;;\n  *) exit 2;;\nesac\n')
    out = host.run()
    summary = out["ansible_facts"]["nvidia_gpu_summary"]
    assert summary["status"] == "ok" and summary["interconnect"] is None and summary["cuda_version"] is None
    assert any("topo -m failed (exit 3)" in str(w) for w in out["warnings"])


def test_hung_nvidia_smi_times_out(tmp_path):
    host = Host(tmp_path)
    script(host.bin / "nvidia-smi", "exec sleep 30\n")
    out = host.run(timeout=1)
    assert out["failed"] is True and "did not answer within 1 seconds" in out["msg"]


def test_facts_and_return_values(tmp_path):
    """Generic NVIDIA facts, and the same values as return values a role can register."""
    out = double_host(tmp_path, "h100-x4")[0].run()
    assert set(out["ansible_facts"]) == {"nvidia_gpus", "nvidia_gpu_summary"}
    assert out["gpus"] == out["ansible_facts"]["nvidia_gpus"] and len(out["gpus"]) == 4
    assert out["summary"] == out["ansible_facts"]["nvidia_gpu_summary"] and out["summary"]["count"] == 4


@pytest.mark.parametrize("timeout", [-1, -60])
def test_negative_timeout_is_refused(tmp_path, timeout):
    out = double_host(tmp_path, "h100-x1")[0].run(timeout=timeout)
    assert out["failed"] is True
    assert out["msg"] == ("timeout=%d is not allowed: use 0 to disable the limit, or a positive number of seconds"
                          % timeout)


def test_zero_timeout_disables_the_limit(tmp_path):
    assert double_host(tmp_path, "h100-x1")[0].run(timeout=0)["summary"]["status"] == "ok"
