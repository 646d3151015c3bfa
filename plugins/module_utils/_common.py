# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""What the deployment model (_model) and the engine data (_engines) both stand on (stdlib only). Private to
kimi.deploy.

The import between the two goes one way: _model reads _engines (the registry, the routers), and _engines never imports
_model (tests/unit/plugins/module_utils/test_import_direction.py checks it). What both need lives here: the one error
type and the one refusal line ("<variable>=<value> is not allowed: <why>. Allowed values: ..."), the control-character
rule, full-match semantics, the byte units, and how a number is written on a command line.

Variable names: a refusal names the variable a user sets, not the model's field. The names are the site inputs'
(_model/site_inputs.py), which _model.inputs declares here when it is imported (name_variables); every path into the
engines (resolve(), the filters, the action) imports it first. A field no one has named is shown as itself.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

GIB = 1024 ** 3
MIB = 1024 ** 2
GB = 1000 ** 3


class DeploymentError(ValueError):
    """An input that cannot be deployed. The message names the variable and the allowed values."""


def refuse(variable, value, allowed, why=None):
    shown = repr(value)
    if len(shown) > 200:  # a huge value is named by its start
        shown = shown[:160] + "... (%d characters)" % len(shown)
    msg = "%s=%s is not allowed" % (variable, shown)
    if why:
        msg += ": %s" % why
    if allowed:
        msg += ". Allowed values: %s" % ", ".join(str(a) for a in allowed)
    raise DeploymentError(msg)


# Characters that would split or bend what a string is written into (an argv element in the args file, a unit line, a
# YAML value, a line of a file): C0 (newline, carriage return, tab, NUL, ...), DEL, C1 (NEL among them) and the
# Unicode line and paragraph separators.
CONTROL_RE = re.compile(u"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
# The longest string any input takes (a path, a URL, an extra argument): longer is a mistake, not a setting.
MAX_TEXT = 4096


def control_name(char):
    names = {"\n": "a newline", "\r": "a carriage return", "\t": "a tab", "\x00": "a NUL",
             u"\u2028": "a Unicode line separator", u"\u2029": "a Unicode paragraph separator", u"\x85": "a NEL"}
    return names.get(char, "the control character U+%04X" % ord(char))


def refuse_control(variable, value, where=""):
    """Refuse a control character anywhere in `value` (a string, or strings inside lists and dicts, keys too), or a
    string longer than MAX_TEXT, naming the variable and the element (`where`, e.g. "element 2")."""
    if isinstance(value, dict):
        for key, item in value.items():
            refuse_control(variable, key, "%skey %r" % (where + " " if where else "", key))
            refuse_control(variable, item, "%s%r" % (where + " " if where else "", key))
    elif isinstance(value, (list, tuple)):
        for number, item in enumerate(value):
            refuse_control(variable, item, "%selement %d" % (where + " " if where else "", number))
    elif isinstance(value, str):
        match = CONTROL_RE.search(value)
        if match:
            refuse(variable, value, None, "%s holds %s at character %d: no control character may be in a value that "
                   "becomes an argument, a unit line, a YAML value or a line of a file"
                   % (where or "the value", control_name(match.group()), match.start()))
        if len(value) > MAX_TEXT:
            refuse(variable, value, None, "%s is %d characters long, at most %d are taken"
                   % (where or "the value", len(value), MAX_TEXT))
    return value


def full_match(pattern, value):
    """True when `value` is a string and the whole of it matches `pattern` (no trailing newline slips through)."""
    return isinstance(value, str) and pattern.fullmatch(value) is not None


# field -> the variable a user sets for it; declared by _model.inputs (name_variables), read by var().
VARIABLES = {}


def name_variables(names):
    """Declare the variables users set, by field (the model does, from its table of site inputs)."""
    VARIABLES.update(names)
    return VARIABLES


def var(field):
    """The variable a user sets for `field`."""
    return VARIABLES.get(field, field)


def fail(field, value, allowed, why=None):
    refuse(var(field), value, allowed, why)


def check_no_control(field, value, where=""):
    """Refuse a control character anywhere in `value` (strings inside lists and dicts, keys too), naming the variable of
    `field` and the element (`where`, e.g. "element 2")."""
    return refuse_control(var(field), value, where)


def fmt(number):
    """A float as the engines' flags take it: 0.85, 0.9, 1.0 (no trailing zeros but one)."""
    text = ("%.3f" % number).rstrip("0")
    return text + "0" if text.endswith(".") else text


def text(value):
    if isinstance(value, float):
        return fmt(value)
    return str(value)


def release_key(version):
    """An engine release ("0.27.0", "0.5.12.post1", "1.3.0rc17") as a sortable tuple: a release candidate sorts
    before its release, a post release after it."""
    key = []
    for part in re.findall(r"\d+|[a-z]+", str(version).lower()):
        key.append((1, int(part)) if part.isdigit() else (2, 0) if part == "post" else (0, -1))
    return tuple(key) + ((0, 0),)
