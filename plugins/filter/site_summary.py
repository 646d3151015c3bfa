# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: site_summary
short_description: One host's summary at the end of site.yml, or its plan in check mode
version_added: 1.0.0
author: kimi.deploy contributors
description:
  - Returns the lines site.yml prints per host when it ends, from the resolved deployment and the roles' reports
    (C(kimi_serve_report), C(caddy_proxy_report), C(kimi_weights_report), C(kimi_image_report)) and the stage marks
    site.yml notes.
  - The GPUs; the identity, its checkpoint and revision, and why it was chosen; the image; the endpoint URL and the
    served model name; each verify check with its latency, on the engine and through the proxy; the time each stage
    took (or why it did not run).
  - In check mode it is the plan instead, with the exact engine command line and the files that would change.
options:
  _input:
    description: The resolved deployment (the C(kimi_deployment) fact).
    type: dict
    required: true
  host:
    description: The host's inventory name.
    type: str
    required: true
  gpus:
    description: One line about the GPUs (the C(nvidia_gpu_summary) fact's message).
    type: str
  serve:
    description: C(kimi_serve_report), when the serve stage ran.
    type: dict
  proxy:
    description: C(caddy_proxy_report), when the proxy stage ran.
    type: dict
  weights:
    description: C(kimi_weights_report), when the weights stage ran.
    type: dict
  draft_weights:
    description: C(kimi_weights_draft_report), when the weights stage fetched a speculative draft.
    type: dict
  image:
    description: C(kimi_image_report), when the image stage ran (NVFP4) - built, loaded or current, and the proof.
    type: dict
  marks:
    description: C(kimi_switch_stage_marks), a list of C({stage, at}) with C(at) in epoch seconds, C(start) first.
    type: list
    elements: dict
  run_tags:
    description: C(ansible_run_tags), to tell a stage skipped by tags from one that ran.
    type: list
    elements: str
  skip_tags:
    description: C(ansible_skip_tags).
    type: list
    elements: str
  check_mode:
    description: C(ansible_check_mode).
    type: bool
    default: false
"""

EXAMPLES = r"""
- name: Summarize each host
  ansible.builtin.debug:
    msg: >-
      {{ kimi_deployment | kimi.deploy.site_summary(host=inventory_hostname, serve=kimi_serve_report | default(none),
         proxy=caddy_proxy_report | default(none), marks=kimi_switch_stage_marks, check_mode=ansible_check_mode) }}
"""

RETURN = r"""
_value:
  description: The lines, the first naming the host and what it serves.
  type: list
  elements: str
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.kimi.deploy.plugins.module_utils._model.report import site_summary


def site_summary_filter(deployment, host, gpus=None, serve=None, proxy=None, weights=None, marks=None,
                        run_tags=None, skip_tags=None, check_mode=False, image=None, draft_weights=None):
    try:
        return site_summary(deployment, host, gpus=gpus, serve=serve, proxy=proxy, weights=weights, marks=marks,
                            run_tags=run_tags or ["all"], skip_tags=skip_tags or [], check_mode=bool(check_mode),
                            image=image, draft_weights=draft_weights)
    except (KeyError, TypeError, ValueError) as e:
        raise AnsibleFilterError("kimi.deploy.site_summary: %s" % e)


class FilterModule(object):
    def filters(self):
        return {"site_summary": site_summary_filter}
