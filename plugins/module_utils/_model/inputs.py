# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The deployment inputs: the variables users set, the one error type, and the value checks. Private to kimi.deploy.

Every part of the deployment model (_deployment, _engines, _fit, the engine files) refuses a bad input through fail(),
so every message has one shape: "<variable>=<value> is not allowed: <why>. Allowed values: ...".
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.kimi.deploy.plugins.module_utils._model import constraints as _constraints
from ansible_collections.kimi.deploy.plugins.module_utils._model.constraints import refuse
from ansible_collections.kimi.deploy.plugins.module_utils._model.site_inputs import INPUTS
from ansible_collections.kimi.deploy.plugins.module_utils._model.validate import full_match


# The model's modules and the filters take the error and the control-character rule from here.
DeploymentError = _constraints.DeploymentError
CONTROL_RE, control_name = _constraints.CONTROL_RE, _constraints.control_name

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
    refuse(var(field), value, allowed, why)


def check_no_control(field, value, where=""):
    """Refuse a control character anywhere in `value` (strings inside lists and dicts, keys too), naming the variable of
    `field` and the element (`where`, e.g. "element 2")."""
    return _constraints.check_no_control(var(field), value, where)


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
