# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: kernel_cache_key
short_description: The key of a kernel cache - the folder name kimi_serve keeps an engine's compiled kernels under
version_added: 1.0.0
author: kimi.deploy contributors
description:
  - A readable prefix (engine build and version) and a hash of every part that changes the kernels an engine compiles
    at start-up - the deployment's (engine build and version, image reference, quant, KV dtype, MoE backend, layout,
    context, speculative decoding, extra arguments, engine config) and the host's (image digest, accelerator
    architecture, driver version).
  - Any part that differs gives another key, so a cache built for another key is never mounted.
options:
  _input:
    description: The deployment's parts (C(kimi_deployment.kernel_cache.key_parts)).
    type: dict
    required: true
  host:
    description: The host's parts - C(image_digest), C(arch), C(driver_version).
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: The kernel cache's folder
  ansible.builtin.debug:
    msg: "{{ kimi_deployment.kernel_cache.host_dir }}/{{ key }}"
  vars:
    key: "{{ kimi_deployment.kernel_cache.key_parts | kimi.deploy.kernel_cache_key(host) }}"
    host: {image_digest: "sha256:...", arch: sm_90, driver_version: "580.95.05"}
"""

RETURN = r"""
_value:
  description: The key, e.g. C(vllm-0.22.1-0123456789abcdef01234567).
  type: str
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.kimi.deploy.plugins.module_utils._model.kernel_cache import (
    HOST_PARTS, KernelCacheError, cache_key)


def kernel_cache_key(deployment_parts, host):
    parts = dict(deployment_parts or {})
    for name in HOST_PARTS:
        parts[name] = (host or {}).get(name)
    try:
        return cache_key(parts)
    except KernelCacheError as exc:
        raise AnsibleFilterError(str(exc))


class FilterModule(object):
    def filters(self):
        return {"kernel_cache_key": kernel_cache_key}
