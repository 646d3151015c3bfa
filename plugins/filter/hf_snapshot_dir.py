# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: hf_snapshot_dir
short_description: The snapshot folder of a pinned commit in a Hugging Face hub cache
version_added: 1.0.0
author: kimi.deploy contributors
description:
  - C(<hf_home>/hub/models--<org>--<name>/snapshots/<revision>), the layout huggingface_hub reads and
    kimi.deploy.hf_snapshot writes (the rule lives in the collection's C(_hf/cache.py) module_utils).
options:
  _input:
    description: HF_HOME.
    type: path
    required: true
  repo_id:
    description: The repository, C(org/name).
    type: str
    required: true
  revision:
    description: The pinned commit (40 hex).
    type: str
    required: true
"""

EXAMPLES = r"""
- name: The NVFP4 snapshot
  ansible.builtin.debug:
    msg: "{{ '/var/lib/kimi-k26/huggingface' | kimi.deploy.hf_snapshot_dir('nvidia/Kimi-K2.6-NVFP4', revision) }}"
"""

RETURN = r"""
_value:
  description: The snapshot folder.
  type: path
"""

import os

from ansible_collections.kimi.deploy.plugins.module_utils._hf.cache import repo_folder_name


def hf_snapshot_dir(hf_home, repo_id, revision):
    return os.path.join(hf_home, "hub", repo_folder_name(repo_id), "snapshots", revision)


class FilterModule(object):
    def filters(self):
        return {"hf_snapshot_dir": hf_snapshot_dir}
