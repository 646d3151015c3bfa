# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: engine_flags
short_description: Build the vLLM or SGLang server command line for a Kimi-K2.6 deployment
version_added: 0.1.0
author: kimi.deploy contributors
description:
  - Returns the container command, as a list of strings, exactly as C(docker run IMAGE <command>) takes it.
  - For C(sglang) (whose image has no entry point) it starts with C(python3 -m sglang.launch_server), for C(trtllm)
    with C(trtllm-serve); for C(vllm) (whose image's entry point is C(vllm serve)) it starts with the model.
  - Always emits full option names that exist in the selected engine release's flag list (C(engine_version)),
    C(--trust-remote-code), the Kimi tool-call and reasoning parsers that release has, and for vLLM C(--enable-auto-tool-choice)
    and C(--mm-encoder-tp-mode data). NVFP4 adds C(--quantization modelopt_fp4), C(--moe-backend) and
    C(--disable-custom-all-reduce); INT4 has no C(--quantization) (compressed-tensors is auto-detected).
  - Refusals (bad values, invalid combinations such as C(nvfp4) on C(sglang), extra arguments that repeat a flag
    the collection manages or that the pinned engine does not have) come from the one validator, the
    C(kimi.deploy.deployment) filter's resolver, with the variable name and the allowed values.
options:
  _input:
    description:
      - A resolved deployment (the C(kimi_deployment) fact, or any result of the C(kimi.deploy.deployment) filter);
        its C(argv) is returned as it is.
      - Or deployment inputs, the keys the C(kimi.deploy.deployment) filter takes (C(quant) and C(engine) required;
        C(kv_cache_dtype), C(moe_backend), C(tp), C(host), C(port), C(served_model_name), C(context_length),
        C(mem_fraction), C(extra_args) optional). They are resolved without GPU facts and without a pinned
        revision (tensor parallel 8 unless C(tp) is given) and the command of that deployment is returned.
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: Show the engine command line
  ansible.builtin.debug:
    msg: "{{ {'quant': 'int4', 'engine': 'sglang', 'tp': 8} | kimi.deploy.engine_flags | join(' ') }}"

- name: Use it as a container command
  community.docker.docker_container:
    name: kimi-k26
    image: "{{ kimi_deployment.image }}"
    command: "{{ kimi_deployment | kimi.deploy.engine_flags }}"
"""

RETURN = r"""
_value:
  description: The engine server's arguments, one string per element.
  type: list
  elements: str
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.kimi.deploy.plugins.module_utils._deployment import DeploymentError, resolve


def engine_flags_filter(deployment):
    try:
        if isinstance(deployment, dict) and "argv" in deployment:
            return list(deployment["argv"])
        return resolve(deployment, gpus=[], require_revision=False)["argv"]
    except DeploymentError as exc:
        raise AnsibleFilterError("kimi.deploy.engine_flags: %s" % exc)


class FilterModule(object):
    def filters(self):
        return {"engine_flags": engine_flags_filter}
