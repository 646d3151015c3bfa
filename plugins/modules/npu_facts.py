#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: npu_facts
short_description: Gather facts about the Huawei Ascend NPUs, driver and firmware of a host
version_added: 1.0.0
description:
  - Runs C(npu-smi info) and reads the driver's and the firmware's C(version.info) and the Ascend device nodes
    (C(/dev/davinci<N>), C(/dev/davinci_manager), C(/dev/devmm_svm), C(/dev/hisi_hdc)).
  - Sets the facts C(ascend_npus), one dict per chip (the unit engines and C(/dev/davinci<N>) count; an Atlas 800 A3
    card holds two), in the accelerator-list shape the C(kimi.deploy.deployment) filter reads, and
    C(ascend_npu_summary), the host summary in the shape of C(kimi.deploy.gpu_facts)'s (count, models, HBM as
    C(vram_total_mib)/C(vram_min_mib), family V(ascend-a2) or V(ascend-a3) as C(arch), the chip name as C(sm)) with
    the driver, firmware and C(npu-smi) versions, health, device nodes and the processes on the NPUs.
  - Returns the same two as C(npus) and C(summary).
  - Generic Ascend facts, nothing model-specific. A host without C(npu-smi), without the driver or without NPUs is not
    an error; C(ascend_npu_summary.status) says which (V(no_npu_smi), V(no_driver), V(no_npu)).
  - Changes nothing on the host; C(changed) is always false.
author:
  - kimi.deploy maintainers (@kimi-deploy)
options:
  npu_smi:
    description: The C(npu-smi) to run, a command name looked up on E(PATH) (and C(/usr/local/sbin), C(/usr/local/bin)).
    type: str
    default: npu-smi
  driver_version_file:
    description: The driver package's version file (C(Version=...)).
    type: path
    default: /usr/local/Ascend/driver/version.info
  firmware_version_file:
    description: The firmware package's version file (C(Version=...)).
    type: path
    default: /usr/local/Ascend/firmware/version.info
  dev_root:
    description: Where the device nodes are.
    type: path
    default: /dev
  driver_min_version:
    description:
      - The oldest driver version that is good enough; C(summary.driver_ok) says whether the installed one is (a
        release candidate sorts before its release, C(24.1.rc3) < C(24.1.0)). Unset, C(driver_ok) is null.
    type: str
  firmware_min_version:
    description: The same for the firmware, C(summary.firmware_ok).
    type: str
notes:
  - Supports check mode (it only reads).
seealso:
  - module: kimi.deploy.gpu_facts
"""

EXAMPLES = r"""
- name: Read the Ascend NPUs
  kimi.deploy.npu_facts:

- name: Say what the host has
  ansible.builtin.debug:
    msg: "{{ ascend_npu_summary.message }}"
"""

RETURN = r"""
npus:
  description: One dict per chip, by device number (C(index) = the N of C(/dev/davinci<N>)).
  returned: always
  type: list
  elements: dict
  sample:
    - {index: 0, name: "Ascend 910B3", chip: 910B3, platform: ascend, memory_mib: 65536, health: OK,
       bus_id: "0000:C1:00.0", chips_per_npu: 1}
summary:
  description: >-
    The host summary: count, models, vram_total_mib, vram_min_mib (HBM), arch (ascend-a2, ascend-a3), arch_name, sm
    (chip), homogeneous, platform (ascend), unhealthy (chips whose health is not OK), status (ok, no_npu_smi,
    no_driver, no_npu, error), message, driver_version, firmware_version, npu_smi_version, driver_ok and firmware_ok
    (against the minimum versions given, else null), devices (davinci numbers and the control nodes present),
    missing_devices, processes (npu, chip, pid, name, memory_mib), container_args (the C(docker run) devices and
    read-only mounts that give a container every NPU of the host, seed 004's list).
  returned: always
  type: dict
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.kimi.deploy.plugins.module_utils._model.npu import (
    CONTAINER_MOUNTS, NpuListError, NpuParseError, container_args, device_nodes, npu_entries, parse_npu_smi_info,
    parse_version_info, summarize_npus, version_at_least)

SEARCH_PATHS = ["/usr/local/sbin", "/usr/local/bin", "/usr/local/Ascend/driver/tools"]


def _read(path):
    try:
        with open(path) as handle:
            return handle.read()
    except (IOError, OSError):
        return None


def gather(module):
    p = module.params
    driver = parse_version_info(_read(p["driver_version_file"]))
    firmware = parse_version_info(_read(p["firmware_version_file"]))
    devices = device_nodes(p["dev_root"])
    base = {"status": "ok", "message": None, "driver_version": driver["version"],
            "firmware_version": firmware["version"], "npu_smi_version": None, "devices": devices,
            "driver_ok": version_at_least(driver["version"], p["driver_min_version"]),
            "firmware_ok": version_at_least(firmware["version"], p["firmware_min_version"]),
            "missing_devices": [], "processes": [], "container_args": []}
    empty = summarize_npus([])
    binary = p["npu_smi"] if os.path.isabs(p["npu_smi"]) else module.get_bin_path(p["npu_smi"], opt_dirs=SEARCH_PATHS)
    if not binary or not os.path.exists(binary):
        return [], dict(empty, **dict(base, status="no_npu_smi", message="npu-smi was not found (PATH, %s): the Ascend "
                                      "driver package installs it" % ", ".join(SEARCH_PATHS)))
    rc, out, err = module.run_command([binary, "info"])
    if rc != 0:
        text = (err or out or "").strip()
        status = "no_driver" if "dcmi" in text.lower() or "driver" in text.lower() else "error"
        return [], dict(empty, **dict(base, status=status, message="npu-smi info exited %d: %s" % (rc, text[:300])))
    try:
        table = parse_npu_smi_info(out)
        npus = npu_entries(table["chips"])
        summary = summarize_npus(npus)
    except (NpuParseError, NpuListError) as exc:
        return [], dict(empty, **dict(base, status="error", message=str(exc)))
    summary.update(base)
    summary["npu_smi_version"] = table["version"]
    summary["processes"] = table["processes"]
    summary["missing_devices"] = (
        ["/dev/davinci%d" % n["index"] for n in npus if n["index"] not in devices["davinci"]]
        + [path for path, present in sorted(devices["control"].items()) if not present])
    summary["container_args"] = container_args(
        [n["index"] for n in npus], set(path for path in CONTAINER_MOUNTS if os.path.exists(path)))
    if not npus:
        summary["status"] = "no_npu"
        summary["message"] = "npu-smi info lists no NPU"
    else:
        summary["message"] = "%d x %s (%s), %d MiB HBM in all, driver %s, firmware %s" % (
            summary["count"], "/".join(summary["models"]), summary["arch"], summary["vram_total_mib"],
            summary["driver_version"] or "unknown", summary["firmware_version"] or "unknown")
    return npus, summary


def main():
    module = AnsibleModule(
        argument_spec=dict(
            npu_smi=dict(type="str", default="npu-smi"),
            driver_version_file=dict(type="path", default="/usr/local/Ascend/driver/version.info"),
            firmware_version_file=dict(type="path", default="/usr/local/Ascend/firmware/version.info"),
            dev_root=dict(type="path", default="/dev"),
            driver_min_version=dict(type="str"),
            firmware_min_version=dict(type="str"),
        ),
        supports_check_mode=True,
    )
    npus, summary = gather(module)
    module.exit_json(changed=False, npus=npus, summary=summary,
                     ansible_facts={"ascend_npus": npus, "ascend_npu_summary": summary})


if __name__ == "__main__":
    main()
