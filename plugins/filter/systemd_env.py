# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: systemd_env
short_description: Render a systemd EnvironmentFile of bare values, refusing any value systemd would read otherwise
version_added: 1.0.0
author: kimi.deploy contributors
description:
  - Returns the text of an C(EnvironmentFile), one C(NAME=value) line per entry, in the order given.
  - systemd reads such a file its own way. An inline C(# comment) becomes part of the value, and the runbook lost
    C(HF_HOME) like that. Quotes are removed and backslashes are escapes, a newline ends the value, and leading or
    trailing blanks are dropped.
  - So a value holding C(#), a quote, a backtick, a backslash, a control character such as a newline, or leading
    or trailing space is refused. The error names the variable that set it and the allowed characters, and comes
    before anything is written.
options:
  _input:
    description:
      - The entries, each a dict with C(name) (the environment name, C([A-Z_][A-Z0-9_]*)), C(value) (a string,
        number or boolean; booleans become C(1)/C(0)) and C(variable) (the Ansible variable the value came from,
        for the error message).
      - Or a dict of C(NAME => value), whose values are then named C(<variable>.<NAME>) in errors.
    type: raw
    required: true
  variable:
    description: With a dict input, the variable that holds it.
    type: str
"""

EXAMPLES = r"""
- name: Write the environment file
  ansible.builtin.copy:
    dest: /etc/kimi-k26.env
    mode: "0644"
    content: >-
      {{ [{'name': 'QUANT', 'value': kimi_deployment.quant, 'variable': 'quant'},
          {'name': 'HF_HOME', 'value': kimi_serve_hf_home, 'variable': 'kimi_serve_hf_home'}]
         | kimi.deploy.systemd_env }}
"""

RETURN = r"""
_value:
  description: The file's text, ending with a newline.
  type: str
"""

import re

from ansible.errors import AnsibleFilterError
from ansible_collections.kimi.deploy.plugins.module_utils._model.inputs import CONTROL_RE, control_name

NAME_RE = re.compile(r"[A-Z_][A-Z0-9_]*")
FORBIDDEN = "#'\"`\\"


def _value_problem(value):
    for char in value:
        if char in FORBIDDEN:
            return "holds %r" % char
    control = CONTROL_RE.search(value)  # the collection's one rule: C0, DEL, C1 and the Unicode line separators
    if control:
        return "holds %s, a control character" % control_name(control.group())
    if value != value.strip():
        return "has leading or trailing space"
    return None


def systemd_env(entries, variable=None):
    if isinstance(entries, dict):
        entries = [{"name": name, "value": value, "variable": "%s.%s" % (variable or "env", name)}
                   for name, value in entries.items()]
    if not isinstance(entries, (list, tuple)):
        raise AnsibleFilterError("kimi.deploy.systemd_env: input must be a list of {name, value, variable} or a dict, got %s"
                                 % type(entries).__name__)
    lines = []
    seen = set()
    for entry in entries:
        if not isinstance(entry, dict) or "name" not in entry or "value" not in entry:
            raise AnsibleFilterError("kimi.deploy.systemd_env: each entry needs name and value, got %r" % (entry,))
        name, value, variable = entry["name"], entry["value"], entry.get("variable") or entry["name"]
        if not isinstance(name, str) or NAME_RE.fullmatch(name) is None or name in seen:
            raise AnsibleFilterError("kimi.deploy.systemd_env: %r is not a valid or unique environment name" % (name,))
        seen.add(name)
        if isinstance(value, bool):
            value = "1" if value else "0"
        elif value is None:
            value = ""
        elif isinstance(value, (int, float)):
            value = str(value)
        elif not isinstance(value, str):
            raise AnsibleFilterError("%s=%r is not allowed in %s: the environment file takes a string, number or "
                                     "boolean, got %s" % (variable, value, name, type(value).__name__))
        problem = _value_problem(value)
        if problem:
            raise AnsibleFilterError(
                "%s=%r is not allowed: it becomes %s in the systemd environment file and %s, which systemd would not "
                "read as written (an inline '# comment' becomes part of the value, quotes and backslashes are "
                "interpreted, a newline ends it). Allowed: a bare value without # ' \" ` \\, control characters or "
                "leading/trailing space." % (variable, value, name, problem))
        lines.append("%s=%s" % (name, value))
    return "\n".join(lines) + "\n"


class FilterModule(object):
    def filters(self):
        return {"systemd_env": systemd_env}
