# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: deployment
short_description: Resolve one Kimi-K2.6 deployment from the inputs and accelerator list given (the model's resolver)
version_added: 1.0.0
author: kimi.deploy contributors
description:
  - The deployment model's resolver as a filter, for a preview or an ad hoc expression. Combines the choices given
    (C(quant), C(engine), KV dtype, ...) with the accelerator list given, applies the recommendation for anything left
    C(auto), validates every field and returns the deployment dict, in the shape of C(kimi_deployment).
  - It is not how C(kimi_deployment) is made. The M(kimi.deploy.deployment) action makes it (site.yml, plan.yml,
    bundle.yml) with this same resolver, and also reads the host's site variables, checks every site and role input
    against its constraint, resolves the other hosts of its replica and disaggregated deployment and checks the ports;
    this filter reads only its arguments and does none of that.
  - Refuses bad input with the variable name and the allowed values.
options:
  _input:
    description:
      - User inputs. Keys C(quant), C(engine), C(engine_version), C(kv_cache_dtype), C(moe_backend),
        C(context_length), C(mem_fraction), C(tp), C(pp), C(host), C(port), C(served_model_name), C(extra_args),
        C(engine_options) (TensorRT-LLM's LLM-API options), C(image), C(revisions) (a dict
        C({int4 => sha, nvfp4 => sha, w4a8 => sha})), C(min_kv_tokens), C(nodes), C(node_rank), C(head_address),
        C(dist_port).
        Empty, null or C(auto) values are derived.
      - C(extra_args) is read the way the selected engine version's parser reads it (aliases, short options, C(--flag=value),
        C(--flag value) as one string, vLLM's underscore and dotted spellings); an option the collection manages
        (in any spelling), an option the pinned engine does not have, or a missing value is refused.
    type: dict
    required: true
  gpus:
    description:
      - Accelerator list as in M(kimi.deploy.gpu_facts)'s C(nvidia_gpus) or M(kimi.deploy.npu_facts)'s
        C(ascend_npus) fact (or the C(kimi_gpus) site input of a profile). Needed when quant or engine is C(auto); with
        it the deployment gets its C(hardware) verdict.
      - Each GPU entry needs C(name), C(compute_cap) and C(memory_mib).
    type: list
    elements: dict
    default: []
  require_revision:
    description: Fail when the checkpoint revision is not set. The plan playbook turns it off to preview.
    type: bool
    default: true
"""

EXAMPLES = r"""
- name: Preview the deployment of an accelerator profile (kimi_gpus, e.g. -e @tests/fixtures/gpus/<profile>.json)
  ansible.builtin.debug:
    msg: >-
      {{ ({'quant': quant, 'engine': engine, 'revisions': {'int4': kimi_int4_revision}}
          | kimi.deploy.deployment(kimi_gpus)).identity }}
"""

RETURN = r"""
_value:
  description: The resolved deployment.
  type: dict
  contains:
    identity:
      description: C(<quant>-<engine>), e.g. C(int4-sglang).
      type: str
    reasons:
      description: Why this identity (recommendation and fit).
      type: list
      elements: str
    checkpoint:
      description: C(repo_id), C(revision), C(revision_variable) (e.g. C(kimi_int4_revision)), C(format),
        C(weights_bytes).
      type: dict
    image:
      description: Pinned engine image (vLLM's NVFP4 is the locally built patched image), or C(kimi_engine_image).
      type: str
    engine_version:
      description: The engine release whose flag list checked the command (C(kimi_engine_version), the image tag's,
        or the verified default).
      type: str
    engine_config:
      description: The engine's config file as a dict (TensorRT-LLM's LLM-API YAML), or null; C(engine_config_path) is
        where the container reads it.
      type: dict
    verify_checks:
      description: The checks of M(kimi.deploy.serve_verify) this engine version can pass.
      type: list
      elements: str
    warnings:
      description: What clients will see that differs (no Kimi parser, the model id), and inputs to fix.
      type: list
      elements: str
    extra_args:
      description: The extra engine arguments, as argv elements (C(--flag value) given as one string is split).
      type: list
      elements: str
    local_url:
      description: Where a client on the host reaches the engine, e.g. C(http://127.0.0.1:30000) (a wildcard bind is
        reached over loopback).
      type: str
    instances:
      description: Engine instances on this host (the engine's data-parallel ranks under its one unit; C(dp)); the fit
        is per instance.
      type: int
    layouts:
      description: The layouts of this host ranked by expected throughput per GPU for C(kimi_workload), best first
        (C(tp), C(instances), C(fits), C(kv_tokens), C(tok_s_per_gpu), C(basis), C(reason)), or null (a replica over
        several hosts, a disaggregated deployment, an engine whose layout is fixed by its data).
      type: list
      elements: dict
    argv:
      description: Container command (see the engine_flags filter).
      type: list
      elements: str
    command:
      description: Full process command line including the image entry point.
      type: list
      elements: str
    hardware:
      description:
        - The GPUs and the fit verdict of the settings chosen (tensor parallel size, memory knob, engine, KV dtype);
          null without GPU facts.
        - Keys C(gpu_count), C(models), C(arch), C(sm), C(vram_total_mib), C(vram_min_mib), C(kv_tokens_estimate),
          C(fits), C(fit_reason) (a sentence with the numbers and what would fit) and C(recommended).
        - An unfit pool is not an error here; site.yml's preflight refuses it with C(fit_reason).
      type: dict
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.kimi.deploy.plugins.module_utils._model.deployment import DeploymentError, resolve


def deployment_filter(inputs, gpus=None, require_revision=True):
    try:
        return resolve(inputs, gpus or [], require_revision=bool(require_revision))
    except DeploymentError as exc:
        raise AnsibleFilterError("kimi.deploy.deployment: %s" % exc)


class FilterModule(object):
    def filters(self):
        return {"deployment": deployment_filter}
