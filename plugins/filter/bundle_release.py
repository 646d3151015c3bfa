# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""kimi.deploy.bundle_release: a target release of an air-gap bundle, with its archive's apt sources."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: bundle_release
short_description: A target release of an air-gap bundle, with its archive's apt sources
version_added: 1.0.0
author: kimi.deploy contributors
description:
  - A release named as the collection knows it (C(bookworm), C(trixie), C(jammy), C(noble)) gets its
    distribution's archive, updates and security suites, and the keyring file that signs them on the connected
    machine. A mapping C({name, distribution, version, sources}) names its own (version as Ubuntu's
    C(ansible_distribution_version) has it, Debian's major version).
options:
  _input:
    description: The release, a name or a mapping.
    type: raw
    required: true
"""

EXAMPLES = r"""
- name: The sources of trixie
  ansible.builtin.debug:
    msg: "{{ 'trixie' | kimi.deploy.bundle_release }}"
"""

RETURN = r"""
_value:
  description: C(name), C(distribution), C(version), C(sources) (apt_bundle's) and C(keyring_package).
  type: dict
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.kimi.deploy.plugins.module_utils._bundle.layout import BundleError, release_spec


def bundle_release(release):
    try:
        return release_spec(release)
    except BundleError as exc:
        raise AnsibleFilterError(str(exc))


class FilterModule(object):
    def filters(self):
        return {"bundle_release": bundle_release}
