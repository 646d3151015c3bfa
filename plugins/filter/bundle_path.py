# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""kimi.deploy.bundle_path: where an image, a checkpoint or an apt repository lives in an air-gap bundle."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: bundle_path
short_description: Where an image, a checkpoint or an apt repository lives in an air-gap bundle
version_added: 1.0.0
author: kimi.deploy contributors
description:
  - The one naming rule of a bundle's folders, for C(playbooks/bundle.yml) which writes them and C(site.yml) which
    reads them. V(image) - C(images/<reference made safe>.tar.zst); V(archive) - the host roles' C({name, src}) of
    that archive in the bundle folder O(bundle) (C(nvidia_host_image_archives)); V(checkpoint) - the repo's hub cache folder
    C(hf/hub/models--org--name); V(apt) - C(apt/<release>-<Debian architecture>); V(architecture) - the Debian name
    of an architecture (C(x86_64) is C(amd64)).
options:
  _input:
    description: The image reference, repo id, release or architecture.
    type: str
    required: true
  kind:
    description: What the input is.
    type: str
    required: true
    choices: [image, archive, checkpoint, apt, architecture]
  architecture:
    description: The host's architecture, for V(apt).
    type: str
    default: x86_64
  bundle:
    description: The bundle's folder, for V(archive).
    type: str
"""

EXAMPLES = r"""
- name: The archive of the SGLang image in the bundle
  ansible.builtin.debug:
    msg: "{{ 'lmsysorg/sglang:v0.5.12.post1-cu130' | kimi.deploy.bundle_path('image') }}"
"""

RETURN = r"""
_value:
  description: The path inside the bundle (or the Debian architecture name; for V(archive) a dict).
  type: raw
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.kimi.deploy.plugins.module_utils._bundle.layout import BundleError, path_of


def bundle_path(value, kind, architecture="x86_64", bundle=None):
    try:
        return path_of(kind, value, architecture, bundle)
    except BundleError as exc:
        raise AnsibleFilterError("kimi.deploy.bundle_path: %s" % exc)


class FilterModule(object):
    def filters(self):
        return {"bundle_path": bundle_path}
