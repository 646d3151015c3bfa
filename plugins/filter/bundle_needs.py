# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""kimi.deploy.bundle_needs: what one host needs from an air-gap bundle."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: bundle_needs
short_description: What one host needs from an air-gap bundle
version_added: 1.0.0
author: kimi.deploy contributors
description:
  - The images, pinned checkpoints (and speculative draft) and Debian packages of one host, from its resolved
    deployment and the packages and images its roles name. C(playbooks/bundle.yml) makes a bundle of every host's
    needs; C(site.yml -e kimi_bundle=DIR) compares them with the bundle (M(kimi.deploy.bundle_manifest)) before any
    change, through P(kimi.deploy.bundle_lacks#filter).
options:
  _input:
    description: The host's C(kimi_deployment), or null for a host that runs no engine (a monitoring host).
    type: raw
    required: true
  images:
    description: The other images the host's roles run (the host check's, the exporters').
    type: list
    elements: str
    default: []
  apt_packages:
    description: The Debian packages the host's roles install (each role's C(tasks/apt_packages.yml)).
    type: list
    elements: str
    default: []
  release:
    description: The host's release, C(ansible_distribution_release).
    type: str
    required: true
  architecture:
    description: The host's architecture, C(ansible_architecture) (C(x86_64) or C(aarch64)).
    type: str
    required: true
"""

EXAMPLES = r"""
- name: What this host needs from the bundle
  ansible.builtin.set_fact:
    kimi_bundle_need: >-
      {{ kimi_deployment | kimi.deploy.bundle_needs(['ubuntu:24.04'], ['caddy'], 'noble', 'x86_64') }}
"""

RETURN = r"""
_value:
  description: C(images), C(checkpoints) (C(repo_id), C(revision)), C(apt) (C(release), C(architecture), C(packages))
    and C(disaggregated).
  type: dict
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.kimi.deploy.plugins.module_utils._bundle.layout import BundleError, needs


def bundle_needs(deployment, images=None, apt_packages=None, release=None, architecture=None):
    if not release or not architecture:
        raise AnsibleFilterError("kimi.deploy.bundle_needs: the host's release and architecture are required")
    try:
        return needs(deployment or None, list(images or []), list(apt_packages or []), release, architecture)
    except BundleError as exc:
        raise AnsibleFilterError("kimi.deploy.bundle_needs: %s" % exc)


class FilterModule(object):
    def filters(self):
        return {"bundle_needs": bundle_needs}
