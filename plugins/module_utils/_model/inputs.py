# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The deployment inputs: the variables users set, the one error type, and the value checks. Private to kimi.deploy.

Every part of the deployment model (_deployment, _engines, _fit, the engine files) refuses a bad input through fail(),
so every message has one shape: "<variable>=<value> is not allowed: <why>. Allowed values: ...".
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# The model's modules and the filters take the error, the refusal and the control-character rule from here; they are
# _common's, which the engine data uses too (it never imports the model).
# pylint: disable=unused-import
from ansible_collections.kimi.deploy.plugins.module_utils._common import (  # noqa: F401 (re-exported)
    CONTROL_RE, DeploymentError, check_no_control, control_name, fail, fmt, full_match, name_variables, text, var)
# pylint: enable=unused-import
from ansible_collections.kimi.deploy.plugins.module_utils._model.site_inputs import INPUTS

# Variable names users set (inventory or -e), by field, from the one table of site inputs; errors name both. The
# rest name what the inventory implies (the replica's size and a host's place in it) or a family (a revision per quant).
# Declared to _common, whose var() every refusal (the engines' too) names them by.
VARIABLES = name_variables(dict((item.field, item.variable) for item in INPUTS if item.field))
VARIABLES.update({
    "revision": "kimi_<quant>_revision",
    "nodes": "kimi_replica (the hosts that share it)",
    "node_rank": "kimi_replica (the host's place among the replica's hosts, in inventory order)",
})


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
