# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: systemd_exec
short_description: A command line for a systemd unit's ExecStart, each argument one quoted word whatever it holds
version_added: 1.0.0
author: kimi.deploy contributors
description:
  - Quotes each argument in double quotes and escapes, the way systemd reads it back (C(systemd.syntax)), everything
    that could change it - a backslash, a double quote, C(%) (a specifier), C($) (an environment expansion) - and writes
    every control character, every non-ASCII character and the Unicode line separators as C(\\xNN), C(\\uNNNN) or
    C(\\UNNNNNNNN). No argument can end the line, the word, or the unit.
  - A NUL is refused (no process argument can hold one; systemd ignores the escape).
options:
  _input:
    description: The arguments, program first.
    type: list
    elements: str
    required: true
"""

EXAMPLES = r"""
- name: Write the router's unit
  ansible.builtin.copy:
    dest: /etc/systemd/system/kimi-k26-router.service
    mode: "0644"
    content: |
      [Service]
      ExecStart={{ ['/usr/bin/docker', 'run', '--rm', image] + argv | kimi.deploy.systemd_exec }}
"""

RETURN = r"""
_value:
  description: The words, separated by one space, each in double quotes.
  type: str
"""

from ansible.errors import AnsibleFilterError

ESCAPES = {"\\": "\\\\", '"': '\\"', "%": "%%", "$": "$$"}


def _word(arg):
    out = []
    for char in arg:
        code = ord(char)
        if char in ESCAPES:
            out.append(ESCAPES[char])
        elif code < 0x20 or code == 0x7F:
            out.append("\\x%02x" % code)
        elif code < 0x80:
            out.append(char)
        elif code <= 0xFFFF:
            out.append("\\u%04x" % code)
        else:
            out.append("\\U%08x" % code)
    return '"%s"' % "".join(out)


def systemd_exec(argv):
    if isinstance(argv, str) or not isinstance(argv, (list, tuple)):
        raise AnsibleFilterError("kimi.deploy.systemd_exec: input must be a list of arguments, got %s"
                                 % type(argv).__name__)
    if not argv:
        raise AnsibleFilterError("kimi.deploy.systemd_exec: no argument")
    for number, arg in enumerate(argv):
        if "\x00" in str(arg):
            raise AnsibleFilterError("kimi.deploy.systemd_exec: argument %d holds a NUL, which no process argument can "
                                     "hold: %r" % (number, arg))
    return " ".join(_word(str(arg)) for arg in argv)


class FilterModule(object):
    def filters(self):
        return {"systemd_exec": systemd_exec}
