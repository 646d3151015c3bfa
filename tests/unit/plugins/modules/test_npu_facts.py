"""kimi.deploy.npu_facts end to end: the module runs as a subprocess (as Ansible runs it) against the npu-smi test
double (published A2 and A3 output) and its profiles, with version.info files and device nodes under tmp_path."""
import os
import sys

import pytest

from module_runner import run_module

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
MODULE = os.path.join(ROOT, "plugins", "modules", "npu_facts.py")
DOUBLE = os.path.join(ROOT, "tests", "doubles", "ascend", "npu_smi.py")
PROFILES = os.path.join(ROOT, "tests", "fixtures", "gpus")


def host(tmp_path, profile, devices=16, processes=""):
    smi = tmp_path / "npu-smi"
    smi.write_text("#!/bin/sh\nexec %s %s \"$@\"\n" % (sys.executable, DOUBLE))
    smi.chmod(0o755)
    dev = tmp_path / "dev"
    dev.mkdir()
    for n in range(devices):
        (dev / ("davinci%d" % n)).write_text("")
    for name in ("davinci_manager", "devmm_svm", "hisi_hdc"):
        (dev / name).write_text("")
    (tmp_path / "driver.info").write_text("Version=24.1.rc3\nascendhal_version=7.35.23\npackage_version=24.1.rc3\n")
    (tmp_path / "firmware.info").write_text("Version=7.5.0.1.129\n")
    (tmp_path / "procs").write_text(processes)
    env = dict(os.environ, KIMI_DOUBLE_GPU_PROFILE=os.path.join(PROFILES, profile + ".json"),
               KIMI_DOUBLE_NPU_PROCS=str(tmp_path / "procs"))
    params = {"npu_smi": str(smi), "driver_version_file": str(tmp_path / "driver.info"),
              "firmware_version_file": str(tmp_path / "firmware.info"), "dev_root": str(dev)}
    return params, env


@pytest.mark.parametrize("profile, count, family, chip, phys", [
    ("ascend-a3-x16", 16, "ascend-a3", "Ascend910", list(range(16))),
    ("ascend-a2-x8", 8, "ascend-a2", "910B3", list(range(8))),
])
def test_the_chips_family_hbm_and_versions_are_read(tmp_path, profile, count, family, chip, phys):
    params, env = host(tmp_path, profile)
    out = run_module(MODULE, params, env=env, check_mode=True)
    summary = out["summary"]
    assert out["changed"] is False
    assert (summary["status"], summary["count"], summary["arch"], summary["sm"]) == ("ok", count, family, chip)
    assert summary["vram_min_mib"] == 65536 and summary["vram_total_mib"] == 65536 * count
    assert [n["index"] for n in out["npus"]] == phys
    assert summary["driver_version"] == "24.1.rc3" and summary["firmware_version"] == "7.5.0.1.129"
    assert summary["npu_smi_version"] in ("25.2.1", "24.1.0.3")
    assert summary["missing_devices"] == [] and summary["processes"] == []
    assert out["ansible_facts"]["ascend_npus"] == out["npus"]


def test_a3_chips_are_two_per_card(tmp_path):
    params, env = host(tmp_path, "ascend-a3-x16")
    npus = run_module(MODULE, params, env=env)["npus"]
    assert set(n["chips_per_npu"] for n in npus) == {2}
    assert npus[3]["bus_id"] == "0000:9B:00.0"


def test_processes_and_missing_device_nodes_are_reported(tmp_path):
    params, env = host(tmp_path, "ascend-a2-x8", devices=6, processes="3 632268 python3.1 197\n")
    summary = run_module(MODULE, params, env=env)["summary"]
    assert summary["processes"] == [{"npu": 3, "chip": 0, "pid": 632268, "name": "python3.1", "memory_mib": 197}]
    assert summary["missing_devices"] == ["/dev/davinci6", "/dev/davinci7"]


def test_no_driver_and_no_npu_smi_are_states_not_failures(tmp_path):
    params, env = host(tmp_path, "ascend-a2-x8")
    env["KIMI_DOUBLE_GPU_PROFILE"] = str(tmp_path / "absent.json")  # the double's "dcmi module initialize failed"
    summary = run_module(MODULE, params, env=env)["summary"]
    assert summary["status"] == "no_driver" and "dcmi" in summary["message"]
    params["npu_smi"] = str(tmp_path / "nowhere" / "npu-smi")
    summary = run_module(MODULE, params, env=env)["summary"]
    assert summary["status"] == "no_npu_smi" and summary["count"] == 0
