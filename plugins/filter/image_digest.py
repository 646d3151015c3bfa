# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: image_digest
short_description: What identifies the image a reference names - its pinned digest, repository digest or image ID
version_added: 1.0.0
author: kimi.deploy contributors
description:
  - For a reference pinned by digest (C(name@sha256:...)), that digest.
  - Else, from the image's inspect document (C(community.docker.docker_image_info)'s C(images[0])), the repository
    digest the daemon recorded for the reference's repository when it pulled it, else the first one.
  - Else (an image built or loaded on this host, with no repository digest) its image ID.
  - Null when the reference has no digest and the image is not on the host.
  - The same rule kimi.deploy.image_build uses for the base-digest label of the NVFP4 image.
options:
  _input:
    description: The image's inspect document, or null / an empty dict when the image is not on the host.
    type: dict
    required: true
  ref:
    description: The image reference.
    type: str
    required: true
"""

EXAMPLES = r"""
- name: The digest of the base image
  ansible.builtin.debug:
    msg: "{{ base_info.images[0] | default({}) | kimi.deploy.image_digest('vllm/vllm-openai:v0.22.1-cu130') }}"
"""

RETURN = r"""
_value:
  description: A C(sha256:...) digest or image ID, or null.
  type: str
"""

from ansible_collections.kimi.deploy.plugins.module_utils._docker_api import image_digest as _image_digest


def image_digest(inspect, ref):
    return _image_digest(ref, inspect or {})


class FilterModule(object):
    def filters(self):
        return {"image_digest": image_digest}
