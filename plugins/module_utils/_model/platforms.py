# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The accelerator platforms, as data: one entry per platform (stdlib only). Private to kimi.deploy.

What differs between an NVIDIA GPU host and a Huawei Ascend NPU host is declared here and nowhere else: the roles,
templates and playbooks read these fields (a resolved deployment carries its platform's entry as `platform_traits`;
the `kimi.deploy.platforms` lookup gives them all, in the order hosts are read) instead of asking which platform
they are on. Adding a platform is an entry here, a host role (with tasks/facts.yml and tasks/offline_needs.yml) and a
facts module; tests/unit/test_platform_places.py checks no other file names one.

Fields:
  title, unit, units, memory: how messages name the platform, one accelerator, several, and their memory.
  host_role: the role that turns a bare server into a container host for it (site.yml's host stage); its
    tasks/facts.yml runs facts_module.
  facts, summary_fact: the facts its facts module sets (the accelerator list the model reads; the host summary with
    its count and message). present_keys: the summary's counts that say the host has such accelerators (a count of
    the ones found on the PCI bus says so before a driver can read them).
  unread_hint: what to set when accelerators are present but cannot be read yet (no driver): quant and engine.
  family_key: the summary key the plan prints beside the models.
  assumed_units, assumed_host: the reference host assumed when no facts say (plan.yml without -e @profile).
  busy_probe: shell that prints the processes on the accelerators, one "pid, name, memory" line each (the launcher
    waits for none before it starts an engine).
  device_args: the docker run arguments that give a container every accelerator; None: the facts module's
    summary.container_args (device nodes and driver mounts read on the host), checked by device_check_keys.
  services_after: systemd units the engine starts after.
  replica_env: the collective library's environment of a replica over several hosts ({interface}, {address} and
    {ib_hcas} are the replica link's); replica_env_infiniband / replica_env_sockets: added with or without InfiniBand.
  exporter: the accelerator metrics exporter (its image variable of kimi_metrics, entrypoint, device arguments as
    above, arguments with {port}), and its temperature series with the kimi_monitoring variable of its threshold.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

PLATFORMS = {
    "nvidia": {
        "title": "NVIDIA GPUs (CUDA)", "unit": "GPU", "units": "GPUs", "memory": "VRAM",
        "host_role": "nvidia_host", "facts_module": "kimi.deploy.gpu_facts",
        "facts": "nvidia_gpus", "summary_fact": "nvidia_gpu_summary", "present_keys": ["count", "pci_gpu_count"],
        "unread_hint": "8 x RTX PRO 6000 Blackwell: -e quant=int4 -e engine=sglang; H100/H200: int4 + vllm; B200: "
                       "nvfp4 + vllm",
        "family_key": "sm",
        "assumed_units": 8, "assumed_host": "tensor parallel 8",
        "busy_probe": ('nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader 2>&1 ||\n'
                       '  { echo "nvidia-smi --query-compute-apps failed"; return 1; }'),
        "device_args": ["--device", "nvidia.com/gpu=all"],
        "device_check_keys": [],
        "services_after": ["nvidia-persistenced.service"],
        "replica_env": {"NCCL_SOCKET_IFNAME": "{interface}", "GLOO_SOCKET_IFNAME": "{interface}"},
        "replica_env_infiniband": {"NCCL_IB_HCA": "{ib_hcas}"},
        "replica_env_sockets": {"NCCL_IB_DISABLE": "1"},
        "exporter": {
            "title": "NVIDIA GPU (dcgm-exporter)", "image_variable": "kimi_metrics_dcgm_exporter_image",
            # dcgm-exporter's entrypoint script execs dcgm-exporter with the arguments
            "entrypoint": None, "device_args": ["--device", "nvidia.com/gpu=all", "--cap-add", "SYS_ADMIN"],
            "args": ["-a", "127.0.0.1:{port}"],
            "temperature": "DCGM_FI_DEV_GPU_TEMP", "temperature_threshold": "kimi_monitoring_alert_gpu_temperature",
            "inspect": "nvidia-smi -q -d TEMPERATURE,PERFORMANCE",
        },
    },
    "ascend": {
        "title": "Huawei Ascend NPUs (CANN)", "unit": "NPU", "units": "NPUs", "memory": "HBM",
        "host_role": "ascend_host", "facts_module": "kimi.deploy.npu_facts",
        "facts": "ascend_npus", "summary_fact": "ascend_npu_summary", "present_keys": ["count"],
        "unread_hint": "Atlas 800 A2/A3: -e quant=w4a8 -e engine=vllm",
        "family_key": "arch",
        "assumed_units": 16, "assumed_host": "Ascend",
        # npu-smi info's process table: "| <npu> <chip> | <pid> | <name> | <MB> |"
        "busy_probe": ('out=$(npu-smi info 2>&1) || { echo "npu-smi info failed: $out"; return 1; }\n'
                       "printf '%s\\n' \"$out\" | sed -nE 's/^\\|[[:space:]]*[0-9]+[[:space:]]+[0-9]+[[:space:]]*"
                       "\\|[[:space:]]*([0-9]+)[[:space:]]*\\|[[:space:]]*([^|]*[^|[:space:]])[[:space:]]*\\|"
                       "[[:space:]]*([0-9]+).*/\\1, \\2, \\3 MiB/p'"),
        # the NPUs' device nodes and the driver's read-only mounts (seed 004; no --privileged)
        "device_args": None,
        "device_check_keys": ["missing_devices"],
        "services_after": [],
        # seed 004: HCCL_IF_IP and the socket interfaces of HCCL, Gloo and TP
        "replica_env": {"HCCL_IF_IP": "{address}", "HCCL_SOCKET_IFNAME": "{interface}",
                        "GLOO_SOCKET_IFNAME": "{interface}", "TP_SOCKET_IFNAME": "{interface}"},
        "replica_env_infiniband": {},
        "replica_env_sockets": {},
        "exporter": {
            "title": "Ascend NPU (npu-exporter)", "image_variable": "kimi_metrics_npu_exporter_image",
            # the image's entrypoint prints its agreement and ignores the arguments: name the binary
            "entrypoint": "npu-exporter", "device_args": None,
            "args": ["-ip=127.0.0.1", "-port={port}"],
            "temperature": "npu_chip_info_temperature",
            "temperature_threshold": "kimi_monitoring_alert_npu_temperature",
            "inspect": "npu-smi info",
        },
    },
}
# The order hosts are read in (the cheap, common one first); the first is the platform of a checkpoint that more than
# one platform serves when no facts say.
ORDER = ("nvidia", "ascend")
DEFAULT = ORDER[0]


def entries():
    """Every platform's entry with its name, in ORDER (what the kimi.deploy.platforms lookup returns)."""
    return [dict(PLATFORMS[name], name=name) for name in ORDER]


def traits(name):
    """One platform's entry with its name (a deployment's platform_traits)."""
    return dict(PLATFORMS[name or DEFAULT], name=name or DEFAULT)
