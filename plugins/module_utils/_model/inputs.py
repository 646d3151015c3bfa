# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The deployment inputs: the variables users set, the one error type, and the value checks. Private to kimi.deploy.

Every part of the deployment model (_deployment, _engines, _fit, the engine files) refuses a bad input through fail(),
so every message has one shape: "<variable>=<value> is not allowed: <why>. Allowed values: ...".
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.kimi.deploy.plugins.module_utils._model.site_inputs import INPUTS
from ansible_collections.kimi.deploy.plugins.module_utils._model.validate import full_match


class DeploymentError(ValueError):
    """An input that cannot be deployed. The message names the variable and the allowed values."""


# Variable names users set (inventory or -e), by field, from the one table of site inputs; errors name both. The
# rest name what the inventory implies (the replica's size and a host's place in it) or a family (a revision per quant).
VARIABLES = dict((item.field, item.variable) for item in INPUTS if item.field)
VARIABLES.update({
    "revision": "kimi_<quant>_revision",
    "nodes": "kimi_replica (the hosts that share it)",
    "node_rank": "kimi_replica (the host's place among the replica's hosts, in inventory order)",
})


def var(field):
    """The variable a user sets for `field`."""
    return VARIABLES.get(field, field)


def fail(field, value, allowed, why=None):
    msg = "%s=%r is not allowed" % (var(field), value)
    if why:
        msg += ": %s" % why
    if allowed:
        msg += ". Allowed values: %s" % ", ".join(str(a) for a in allowed)
    raise DeploymentError(msg)


# Characters that would split or bend what a string is written into (an argv element in the args file, a unit line, a
# YAML value, a line of a file): C0 (newline, carriage return, tab, NUL, ...), DEL, C1 (NEL among them) and the
# Unicode line and paragraph separators.
CONTROL_RE = re.compile(u"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def control_name(char):
    names = {"\n": "a newline", "\r": "a carriage return", "\t": "a tab", "\x00": "a NUL",
             u"\u2028": "a Unicode line separator", u"\u2029": "a Unicode paragraph separator", u"\x85": "a NEL"}
    return names.get(char, "the control character U+%04X" % ord(char))


def check_no_control(field, value, where=""):
    """Refuse a control character anywhere in `value` (a string, or strings inside lists and dicts, keys too),
    naming the variable and the element (`where`, e.g. "element 2")."""
    if isinstance(value, dict):
        for key, item in value.items():
            check_no_control(field, key, "%skey %r" % (where + " " if where else "", key))
            check_no_control(field, item, "%s%r" % (where + " " if where else "", key))
    elif isinstance(value, (list, tuple)):
        for number, item in enumerate(value):
            check_no_control(field, item, "%selement %d" % (where + " " if where else "", number))
    elif isinstance(value, str):
        match = CONTROL_RE.search(value)
        if match:
            fail(field, value, None, "%s holds %s at character %d: no control character may be in a value that "
                 "becomes an argument, a unit line, a YAML value or a line of a file"
                 % (where or "the value", control_name(match.group()), match.start()))
    return value


def is_unset(value):
    return value is None or (isinstance(value, str) and value.strip() in ("", "auto"))


def check_choice(field, value, allowed, why=None):
    if value not in allowed:
        fail(field, value, allowed, why)
    return value


def check_int(field, value, low, high):
    allowed = ["an integer from %d to %d" % (low, high)]
    if isinstance(value, bool):
        fail(field, value, allowed)
    try:
        number = int(str(value).strip())
    except (TypeError, ValueError):
        fail(field, value, allowed)
    if not low <= number <= high:
        fail(field, value, allowed)
    return number


def check_text(field, value, pattern, allowed, default):
    """A string setting matched in full (a trailing newline is refused); unset -> default."""
    if is_unset(value):
        return default
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if not full_match(pattern, value):
        fail(field, value, allowed)
    return value


def fmt(number):
    """A float as the engines' flags take it: 0.85, 0.9, 1.0 (no trailing zeros but one)."""
    text = ("%.3f" % number).rstrip("0")
    return text + "0" if text.endswith(".") else text


def text(value):
    if isinstance(value, float):
        return fmt(value)
    return str(value)
