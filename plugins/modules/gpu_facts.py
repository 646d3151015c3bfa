#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: gpu_facts
short_description: Gather facts about the NVIDIA GPUs, driver and GPU interconnect of a host
version_added: 1.0.0
description:
  - Runs C(nvidia-smi --query-gpu=... --format=csv,noheader,nounits), C(nvidia-smi --version) and, on hosts with more
    than one GPU, C(nvidia-smi topo -m); reads C(/proc/driver/nvidia/version) and the PCI devices in sysfs.
  - Sets the facts C(nvidia_gpus), one dict per GPU, and C(nvidia_gpu_summary), a host summary with count, models,
    VRAM, architecture family and C(sm_XY) string (from the collection's architecture table), driver and CUDA
    version, open or proprietary kernel module, persistence mode and daemon, and whether the GPUs talk over NVLink
    or PCIe only (a PCIe-only box is communication-bound for tensor parallelism).
  - Returns the same two as C(gpus) and C(summary), so a role can C(register) them instead of reading facts.
  - Generic NVIDIA facts, nothing model-specific; the summary's GPU keys are the collection's one GPU summary
    shape, which the C(kimi.deploy.recommend) and C(kimi.deploy.deployment) filters use too.
  - A host without the driver, without C(nvidia-smi) or without GPUs is not an error; C(nvidia_gpu_summary.status)
    says which (V(no_driver), V(no_nvidia_smi), V(no_gpu)), and C(pci_gpu_count) still counts the NVIDIA GPUs
    on the PCI bus, so a role can install the driver and then gather again.
  - Changes nothing on the host; C(changed) is always false. Never calls C(systemctl), so it works on hosts and in
    containers without systemd.
author:
  - kimi.deploy maintainers (@kimi-deploy)
options:
  nvidia_smi:
    description:
      - The C(nvidia-smi) to run, a command name looked up on E(PATH) (and C(/usr/local/nvidia/bin)) or a path.
    type: str
    default: nvidia-smi
  proc_root:
    description:
      - Where procfs is mounted. The driver version and kernel module flavour come from
        O(proc_root)C(/driver/nvidia/version); a running C(nvidia-persistenced) is found through
        O(proc_root)C(/<pid>/comm) (or a pid file in C(/run/nvidia-persistenced) naming a live O(proc_root)C(/<pid>)).
    type: path
    default: /proc
  driver_version_file:
    description:
      - The driver's version text, by default O(proc_root)C(/driver/nvidia/version).
      - Tests point it at the copy the NVIDIA test double packages install,
        C(/usr/share/kimi-double/proc/driver/nvidia/version), and keep O(proc_root) on the real procfs so that a
        running C(nvidia-persistenced) is still found.
    type: path
  sys_root:
    description:
      - Where sysfs is mounted. NVIDIA (vendor C(0x10de)) display and 3D controllers (class C(0x0300), C(0x0302))
        under O(sys_root)C(/bus/pci/devices) give C(pci_gpu_count) and C(pci_gpus), with or without the driver.
    type: path
    default: /sys
  query_topology:
    description:
      - Run C(nvidia-smi topo -m) to tell NVLink from PCIe on hosts with more than one GPU.
      - When false, or when the topology cannot be read (a warning says why), C(interconnect) is null for
        several GPUs. A single GPU always has C(interconnect=none).
    type: bool
    default: true
  timeout:
    description:
      - Seconds each C(nvidia-smi) call may take before the module fails (a hung GPU or driver). Needs C(timeout)
        from coreutils on the host; without it the calls are not limited. V(0) disables the limit; a negative
        value is refused.
    type: int
    default: 60
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.facts
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
  facts:
    support: full
  platform:
    platforms: posix
notes:
  - nvidia-smi exit code 9 (driver not loaded) gives C(nvidia_gpu_summary.status=no_driver), exit code 6 (No devices were found) gives
    C(status=no_gpu), exit code 18 (driver/library version mismatch, reboot after a driver change) and 12
    (libnvidia-ml missing) give C(status=error). Other failures and unreadable output fail the module with a message
    that names the field.
  - C(interconnect) is V(nvlink) when any two GPUs are joined by NVLink (an C(NV#) cell of C(nvidia-smi topo -m),
    directly or through NVSwitch), V(pcie) when they only share PCIe or the CPU interconnect, V(none) for one GPU,
    and null when unknown. C(nvlink_links) is the largest C(NV#) between two GPUs (links per pair).
seealso:
  - name: nvidia-smi documentation
    description: The query fields and exit codes.
    link: https://docs.nvidia.com/deploy/nvidia-smi/index.html
"""

EXAMPLES = r"""
- name: Gather GPU facts
  kimi.deploy.gpu_facts:

- name: Install the driver when the host has NVIDIA GPUs but no working driver
  ansible.builtin.include_role:
    name: kimi.deploy.nvidia_host
  when:
    - ansible_facts.nvidia_gpu_summary.pci_gpu_count > 0
    - ansible_facts.nvidia_gpu_summary.status in ['no_driver', 'no_nvidia_smi']

- name: Refuse a PCIe-only box for a plan that needs NVLink
  ansible.builtin.assert:
    that: ansible_facts.nvidia_gpu_summary.interconnect == 'nvlink'
    fail_msg: "{{ ansible_facts.nvidia_gpu_summary.message }}"

- name: Read the GPUs into a registered variable (a role's own, without facts)
  kimi.deploy.gpu_facts:
  register: _gpus

- name: Show the summary
  ansible.builtin.debug:
    msg: "{{ _gpus.summary.message }} ({{ _gpus.gpus | length }} GPUs)"

- name: Read the NVIDIA test double's /proc text instead of the host's
  kimi.deploy.gpu_facts:
    driver_version_file: /usr/share/kimi-double/proc/driver/nvidia/version
    query_topology: false
"""

RETURN = r"""
ansible_facts:
  description: The GPU facts, the same values as C(gpus) and C(summary).
  returned: always
  type: dict
  contains:
    nvidia_gpus:
      description: One dict per GPU (see C(gpus)).
      returned: always
      type: list
      elements: dict
    nvidia_gpu_summary:
      description: The host summary (see C(summary)).
      returned: always
      type: dict
gpus:
  description: One dict per GPU, sorted by index. Values nvidia-smi reports as unavailable are null.
  returned: always
  type: list
  elements: dict
  contains:
    index:
      description: nvidia-smi's GPU index.
      type: int
      returned: always
      sample: 0
    name:
      description: Product name.
      type: str
      returned: always
      sample: NVIDIA H100 80GB HBM3
    uuid:
      description: GPU UUID.
      type: str
      returned: always
      sample: GPU-e9156040-59cd-e1e5-ffbb-bd63bcc90a6f
    pci_bus_id:
      description: PCI bus id as nvidia-smi prints it.
      type: str
      returned: always
      sample: "00000000:00:06.0"
    compute_cap:
      description: CUDA compute capability.
      type: str
      returned: always
      sample: "9.0"
    memory_mib:
      description: Total memory in MiB.
      type: int
      returned: always
      sample: 81559
    persistence_mode:
      description: V(Enabled) or V(Disabled).
      type: str
      returned: always
      sample: Enabled
summary:
  description: The host summary. Every key is always present.
  returned: always
  type: dict
  contains:
    status:
      description:
        - V(ok) (GPUs answer), V(no_driver) (nvidia-smi cannot reach the kernel driver), V(no_gpu) (the driver
          sees no GPU), V(no_nvidia_smi) (no nvidia-smi on the host), V(error) (NVML unusable, see C(message)).
      type: str
      returned: always
      sample: ok
    message:
      description: A sentence explaining the status.
      type: str
      returned: always
      sample: "1 x NVIDIA H100 80GB HBM3, hopper sm_90, 81559 MiB VRAM in all, driver 580.159.04 (open kernel module)"
    driver_loaded:
      description:
        - The NVIDIA kernel driver answers. With nvidia-smi, whether nvidia-smi reached it (false on exit code 9,
          even if the module is loaded but its device files are missing); without nvidia-smi, whether
          O(proc_root)C(/driver/nvidia/version) exists.
      type: bool
      returned: always
    nvidia_smi_found:
      description: nvidia-smi was found.
      type: bool
      returned: always
    count:
      description: Number of GPUs nvidia-smi reports.
      type: int
      returned: always
      sample: 8
    models:
      description: Sorted unique GPU product names.
      type: list
      elements: str
      returned: always
    vram_total_mib:
      description: Sum of the GPUs' memory in MiB.
      type: int
      returned: always
    vram_min_mib:
      description: Memory of the smallest GPU in MiB, 0 without GPUs.
      type: int
      returned: always
    arch:
      description:
        - Architecture family of the weakest GPU, V(blackwell-rtx), V(blackwell-dc), V(hopper), V(ada), V(ampere) or
          V(unsupported); null without GPUs.
      type: str
      returned: always
      sample: hopper
    arch_name:
      description: Human name of C(arch).
      type: str
      returned: always
      sample: Hopper
    sm:
      description: The weakest GPU's compute capability as an sm string; null without GPUs.
      type: str
      returned: always
      sample: sm_90
    compute_caps:
      description: Sorted unique compute capabilities.
      type: list
      elements: str
      returned: always
      sample: ["9.0"]
    homogeneous:
      description: All GPUs are the same model and compute capability.
      type: bool
      returned: always
    driver_version:
      description: Driver version (nvidia-smi, else /proc/driver/nvidia/version), or null.
      type: str
      returned: always
      sample: 580.159.04
    cuda_version:
      description: Highest CUDA version the driver supports (nvidia-smi --version), or null.
      type: str
      returned: always
      sample: "13.0"
    open_kernel_module:
      description: The loaded kernel module is NVIDIA's open one; null when unknown (module not loaded).
      type: bool
      returned: always
    persistence_mode_all:
      description: Every GPU reports persistence mode V(Enabled) (false without GPUs).
      type: bool
      returned: always
    persistenced_active:
      description: An nvidia-persistenced process is running.
      type: bool
      returned: always
    interconnect:
      description: V(nvlink), V(pcie), V(none) (a single GPU), or null when unknown.
      type: str
      returned: always
      sample: pcie
    nvlink_links:
      description: The largest number of NVLinks between two GPUs (C(NV#) of nvidia-smi topo -m), 0 without NVLink.
      type: int
      returned: always
      sample: 18
    nvlink_all_pairs:
      description: Every pair of GPUs is joined by NVLink (false for a single GPU or unknown topology).
      type: bool
      returned: always
    pci_gpu_count:
      description: NVIDIA display/3D controllers on the PCI bus (sysfs), known without a driver.
      type: int
      returned: always
      sample: 8
    pci_gpus:
      description: Their PCI addresses.
      type: list
      elements: str
      returned: always
      sample: ["0000:00:06.0"]
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.kimi.deploy.plugins.module_utils._model import gpu as _gpu

EXTRA_BIN_DIRS = ["/usr/local/nvidia/bin"]
TIMEOUT_EXIT_CODES = (124, 137)


class GpuFacts:
    """One gathering run: the module, the nvidia-smi to call and the timeout wrapper."""

    def __init__(self, module):
        self.module = module
        self.params = module.params
        self.smi = self._find_smi()
        if self.params["timeout"] < 0:
            module.fail_json(msg="timeout=%d is not allowed: use 0 to disable the limit, or a positive number of seconds"
                             % self.params["timeout"])
        self.timeout_bin = module.get_bin_path("timeout") if self.params["timeout"] > 0 else None

    def _find_smi(self):
        name = self.params["nvidia_smi"]
        if "/" in name:
            return name if os.path.isfile(name) and os.access(name, os.X_OK) else None
        return self.module.get_bin_path(name, opt_dirs=EXTRA_BIN_DIRS)

    def run(self, *args):
        argv = [self.smi] + list(args)
        command = argv
        if self.timeout_bin:
            command = [self.timeout_bin, "-k", "5", str(self.params["timeout"])] + argv
        rc, out, err = self.module.run_command(command, environ_update={"LC_ALL": "C"})
        if self.timeout_bin and rc in TIMEOUT_EXIT_CODES:
            self.module.fail_json(msg="%s did not answer within %d seconds (a hung GPU or driver?)"
                                  % (" ".join(argv), self.params["timeout"]), rc=rc, stdout=out, stderr=err)
        return rc, out, err

    def proc_version(self):
        path = self.params["driver_version_file"] or os.path.join(self.params["proc_root"], "driver", "nvidia", "version")
        try:
            with open(path) as handle:
                text = handle.read()
        except (IOError, OSError):
            return False, {"driver_version": None, "open_kernel_module": None}
        try:
            return True, _gpu.parse_proc_version(text)
        except _gpu.GpuParseError as exc:
            self.module.warn(str(exc))
            return True, {"driver_version": None, "open_kernel_module": None}

    def topology(self, count):
        if count < 2 or not self.params["query_topology"]:
            return None
        rc, out, err = self.run("topo", "-m")
        if rc != 0:
            self.module.warn("nvidia-smi topo -m failed (exit %d): %s; interconnect unknown" % (rc, (out + err).strip()[:300]))
            return None
        try:
            topo = _gpu.parse_topology(out)
        except _gpu.GpuParseError as exc:
            self.module.warn("%s; interconnect unknown" % exc)
            return None
        if topo["gpus"] != count:
            self.module.warn("nvidia-smi topo -m shows %d GPUs, --query-gpu %d; interconnect unknown" % (topo["gpus"], count))
            return None
        return topo

    def gather(self):
        pci = _gpu.pci_gpus(self.params["sys_root"])
        module_loaded, proc = self.proc_version()
        context = {
            "pci_addresses": pci,
            "persistenced": _gpu.persistenced_active(self.params["proc_root"]),
            "driver_version": proc["driver_version"],
            "open_kernel_module": proc["open_kernel_module"],
            "nvidia_smi_found": self.smi is not None,
        }
        gpus = []
        if self.smi is None:
            status, message = "no_nvidia_smi", "%s was not found" % self.params["nvidia_smi"]
            context["driver_loaded"] = module_loaded
        else:
            rc, out, err = self.run("--query-gpu=" + _gpu.QUERY_GPU, "--format=csv,noheader,nounits")
            if rc == 0:
                try:
                    gpus = _gpu.parse_query_gpu(out)
                    context["driver_version"] = _gpu.driver_version_of(gpus) or context["driver_version"]
                except _gpu.GpuParseError as exc:
                    self.module.fail_json(msg=str(exc), rc=rc, stdout=out, stderr=err)
                status, message = ("ok", None) if gpus else ("no_gpu", "nvidia-smi reports no GPU")
            else:
                known = _gpu.classify_failure(rc, out, err)
                if known is None:
                    self.module.fail_json(msg="nvidia-smi --query-gpu failed (exit %d): %s"
                                          % (rc, (out + "\n" + err).strip()[:500]), rc=rc, stdout=out, stderr=err)
                status, message = known
            context["driver_loaded"] = {"ok": True, "no_gpu": True, "no_driver": False}.get(status, module_loaded)
            if status in ("ok", "no_gpu"):
                rc, out, err = self.run("--version")
                context["cuda_version"] = _gpu.parse_cuda_version(out) if rc == 0 else None
        if message is not None:
            message = self._explain(message, module_loaded, context)
        summary = _gpu.summarize(gpus, status=status, message=message, topology=self.topology(len(gpus)), **context)
        return _gpu.gpu_entries(gpus), summary

    @staticmethod
    def _explain(message, module_loaded, context):
        if module_loaded:
            message += "; NVIDIA kernel module %s is loaded" % (context["driver_version"] or "(version unknown)")
        else:
            message += "; no NVIDIA kernel module is loaded"
        pci = context["pci_addresses"]
        if pci:
            message += "; %d NVIDIA GPU(s) on the PCI bus (%s)" % (len(pci), ", ".join(pci))
        else:
            message += "; no NVIDIA GPU on the PCI bus"
        return message


def main():
    module = AnsibleModule(
        argument_spec=dict(
            nvidia_smi=dict(type="str", default="nvidia-smi"),
            proc_root=dict(type="path", default="/proc"),
            driver_version_file=dict(type="path"),
            sys_root=dict(type="path", default="/sys"),
            query_topology=dict(type="bool", default=True),
            timeout=dict(type="int", default=60),
        ),
        supports_check_mode=True,
    )
    gpus, summary = GpuFacts(module).gather()
    module.exit_json(changed=False, gpus=gpus, summary=summary,
                     ansible_facts={"nvidia_gpus": gpus, "nvidia_gpu_summary": summary})


if __name__ == "__main__":
    main()
