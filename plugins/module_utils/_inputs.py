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

from ansible_collections.kimi.deploy.plugins.module_utils._validate import full_match


class DeploymentError(ValueError):
    """An input that cannot be deployed. The message names the variable and the allowed values."""


# Variable names users set (inventory or -e), by field. Errors name both.
VARIABLES = {
    "quant": "quant",
    "engine": "engine",
    "engine_version": "kimi_engine_version",
    "kv_cache_dtype": "kimi_kv_cache_dtype",
    "moe_backend": "kimi_moe_backend",
    "context_length": "kimi_context_length",
    "mem_fraction": "kimi_mem_fraction",
    "tp": "kimi_tensor_parallel",
    "host": "kimi_engine_host",
    "port": "kimi_engine_port",
    "served_model_name": "kimi_served_model_name",
    "extra_args": "kimi_engine_extra_args",
    "engine_options": "kimi_trtllm_options",
    "revision": "kimi_<quant>_revision",
    "image": "kimi_engine_image",
    "pp": "kimi_pipeline_parallel",
    "nodes": "kimi_replica (the hosts that share it)",
    "node_rank": "kimi_replica (the host's place among the replica's hosts, in inventory order)",
    "head_address": "kimi_replica_head_address",
    "dist_port": "kimi_replica_port",
    # A disaggregated deployment (_pd): the inventory's hosts with kimi_pd, each with kimi_pd_role.
    "pd_members": "kimi_pd",
    "pd_role": "kimi_pd_role",
    "pd_plan": "kimi_pd_plan",
    "pd_address": "kimi_pd_address",
    "pd_router": "kimi_pd_router",
    "pd_transfer_backend": "kimi_pd_transfer_backend",
    "pd_rdma_devices": "kimi_pd_rdma_devices",
    "pd_bootstrap_port": "kimi_pd_bootstrap_port",
    "pd_router_port": "kimi_pd_router_port",
    "pd_router_metrics_port": "kimi_pd_router_metrics_port",
    "pd_router_extra_args": "kimi_pd_router_extra_args",
    # Speculative decoding (_speculative).
    "speculative": "kimi_speculative",
    "speculative_draft": "kimi_speculative_draft",
    "speculative_draft_revision": "kimi_speculative_draft_revision",
    "speculative_tokens": "kimi_speculative_tokens",
    "speculative_topk": "kimi_speculative_topk",
    "speculative_draft_tokens": "kimi_speculative_draft_tokens",
}


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
