# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: recommend
short_description: Recommend the Kimi-K2.6 quantization, engine and KV dtype for a set of GPUs
version_added: 0.1.0
author: kimi.deploy contributors
description:
  - Applies the field-tested rules to the GPUs of one host and says why.
  - sm_120 (RTX PRO 6000 Blackwell) gets C(int4) on C(sglang) with C(fp8_e4m3) KV; sm_100 (B200) gets C(nvfp4)
    on C(vllm) with the C(flashinfer_cutedsl) MoE backend (marked unverified; C(trtllm) named as the alternative, with
    why); Hopper, Ada and Ampere get C(int4) on C(vllm).
  - O(_input) is judged by its weakest GPU. C(fits) is false, with the numbers, when the VRAM pool cannot hold the
    ~595 GB checkpoint plus KV headroom (an estimate calibrated on the reference host's measurements) with the
    recommended settings (every GPU in one tensor-parallel group, the engine's default memory knob). The
    C(kimi.deploy.deployment) filter gives the same verdict, from the same function, for the settings chosen.
options:
  _input:
    description:
      - List of GPUs, each a dict with at least C(name), C(compute_cap) (like C("12.0")) and C(memory_mib).
      - The C(nvidia_gpus) fact of M(kimi.deploy.gpu_facts) has this shape.
    type: list
    elements: dict
    required: true
  min_kv_tokens:
    description: KV-cache tokens the pool must hold besides the weights for C(fits) to be true.
    type: int
    default: 65536
"""

EXAMPLES = r"""
- name: Recommend a deployment for the GPUs found on the host
  ansible.builtin.debug:
    msg: "{{ ansible_facts.nvidia_gpus | kimi.deploy.recommend }}"

- name: Print only the reasons
  ansible.builtin.debug:
    msg: "{{ (ansible_facts.nvidia_gpus | kimi.deploy.recommend).reasons }}"
"""

RETURN = r"""
_value:
  description: The recommendation.
  type: dict
  contains:
    quant:
      description: C(int4) or C(nvfp4).
      type: str
    engine:
      description: C(sglang), C(vllm) or C(trtllm).
      type: str
    kv_cache_dtype:
      description: Recommended KV-cache dtype for that engine and quant (first entry of its menu).
      type: str
    moe_backend:
      description: NVFP4 MoE backend, null for int4.
      type: str
    fits:
      description: Whether the VRAM pool holds the checkpoint with KV headroom.
      type: bool
    kv_tokens:
      description: Estimated KV-cache tokens per engine instance with the recommended settings.
      type: int
    fit_reason:
      description: The fit verdict as a sentence with the numbers (the last of C(reasons) when GPUs were given).
      type: str
    gpu_count:
      description: Number of GPUs.
      type: int
    vram_total_mib:
      description: Sum of the GPUs' memory in MiB.
      type: int
    arch:
      description: Architecture family of the weakest GPU, null without GPUs.
      type: str
    sm:
      description: The weakest GPU's compute capability as an sm string, null without GPUs.
      type: str
    reasons:
      description: Human sentences explaining the choice and the fit verdict.
      type: list
      elements: str
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.kimi.deploy.plugins.module_utils._deployment import DeploymentError, MIN_KV_TOKENS, recommend


def recommend_filter(gpus, min_kv_tokens=MIN_KV_TOKENS):
    try:
        return recommend(gpus, min_kv_tokens=int(min_kv_tokens))
    except (DeploymentError, TypeError, ValueError) as exc:
        raise AnsibleFilterError("kimi.deploy.recommend: %s" % exc)


class FilterModule(object):
    def filters(self):
        return {"recommend": recommend_filter}
