# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The checks of the verify gate (kimi.deploy.serve_verify), declared once. Private to kimi.deploy.

Everything that names the checks reads this table: the module (its choices and default), the deployment model
(_deployment: the checks an engine version can pass), the verify_checks lookup (the roles' preflights), and the
kimi_serve and caddy_proxy role defaults, whose YAML copies tests/unit/plugins/module_utils/test_verify_checks.py
compares with this table.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# In the module's order. on: where a role runs the check - 'engine' (kimi_serve's gate, against the engine) and/or
# 'proxy' (caddy_proxy's, through Caddy; no_key and metrics are the proxy's own, added by the role, not chosen).
# needs: what the engine version (or the deployment) must have, else the model leaves the check out. module_default:
# in serve_verify's default; proxy_default: in caddy_proxy_verify_checks' default.
TABLE = (
    {"name": "health", "on": ("engine", "proxy"), "needs": None, "module_default": True, "proxy_default": True},
    {"name": "models", "on": ("engine", "proxy"), "needs": None, "module_default": True, "proxy_default": True},
    {"name": "text", "on": ("engine", "proxy"), "needs": None, "module_default": True, "proxy_default": True},
    {"name": "text_no_thinking", "on": ("engine", "proxy"), "needs": None, "module_default": True,
     "proxy_default": False},
    {"name": "tool", "on": ("engine", "proxy"), "needs": "a Kimi tool-call parser", "module_default": True,
     "proxy_default": True},
    {"name": "vision", "on": ("engine", "proxy"), "needs": "vision", "module_default": True, "proxy_default": True},
    {"name": "no_key", "on": (), "needs": "a proxy that checks keys", "module_default": False,
     "proxy_default": False},
    {"name": "metrics", "on": (), "needs": "a proxy that serves metrics to a metrics key", "module_default": False,
     "proxy_default": False},
    {"name": "speculative", "on": ("engine",), "needs": "speculative decoding, on a host whose engine serves the API",
     "module_default": False, "proxy_default": False},
)

# Every check, in the module's order (serve_verify's choices).
ALL = tuple(c["name"] for c in TABLE)
# serve_verify's default checks.
MODULE_DEFAULT = tuple(c["name"] for c in TABLE if c["module_default"])
# The checks against the engine: what an engine version can pass at most (_deployment) and kimi_serve's default.
ENGINE = tuple(c["name"] for c in TABLE if "engine" in c["on"])
# The checks caddy_proxy_verify_checks may name, and its default.
PROXY = tuple(c["name"] for c in TABLE if "proxy" in c["on"])
PROXY_DEFAULT = tuple(c["name"] for c in TABLE if c["proxy_default"])

# The lists by the name the verify_checks lookup takes.
LISTS = {"all": ALL, "module_default": MODULE_DEFAULT, "engine": ENGINE, "proxy": PROXY, "proxy_default": PROXY_DEFAULT}
