# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: dpkg_packages
short_description: The installed packages from one dpkg-query call, shaped like package_facts' result
version_added: 1.0.0
author: kimi.deploy contributors
description:
  - Parses the output of C(dpkg-query -W) with the format C(${db:Status-Abbrev}|${Package}|${Version}|${Architecture})
    and a newline, one package per line, into a dict of package name to a list of C(name), C(version), C(arch) and
    C(source) - the shape of C(ansible_facts.packages) - plus C(held), true when the package is on hold.
  - Only installed packages (second status letter C(i)), held ones included.
  - C(ansible.builtin.package_facts) opens the whole apt cache, about 1.4 s per call on a small host, and nvidia_host
    reads the packages on every run; one dpkg-query takes about 0.3 s.
options:
  _input:
    description: The command's stdout.
    type: str
    required: true
"""

EXAMPLES = r"""
- name: Read the installed packages
  ansible.builtin.command:
    argv: [dpkg-query, -W, -f, "${db:Status-Abbrev}|${Package}|${Version}|${Architecture}\n"]
  register: dpkg
  changed_when: false

- name: Keep them
  ansible.builtin.set_fact:
    packages: "{{ dpkg.stdout | kimi.deploy.dpkg_packages }}"
"""

RETURN = r"""
_value:
  description: Package name to a list of its installed versions (one per architecture).
  type: dict
"""

from ansible.errors import AnsibleFilterError


def dpkg_packages(text):
    if not isinstance(text, str):
        raise AnsibleFilterError("kimi.deploy.dpkg_packages: input must be dpkg-query's stdout, got %s"
                                 % type(text).__name__)
    packages = {}
    for line in text.splitlines():
        fields = line.split("|")
        if len(fields) != 4:
            continue
        status, name, version, arch = [f.strip() for f in fields]
        if len(status) < 2 or status[1] != "i":
            continue
        packages.setdefault(name, []).append({"name": name, "version": version, "arch": arch, "source": "dpkg",
                                              "held": status[0] == "h"})
    return packages


class FilterModule(object):
    def filters(self):
        return {"dpkg_packages": dpkg_packages}
