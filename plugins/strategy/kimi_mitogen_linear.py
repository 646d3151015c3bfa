# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Mitogen's linear strategy, with the async jobs of collection modules fixed and kimi_linear's savings (strategy name
kimi_mitogen_linear).

Mitogen runs an async task (`async:` with `poll: 0`) in a forked child that detaches from the controller before the
module runs. Before detaching it imports what the module needs, but its scan only lists `ansible.module_utils`
imports: a collection module's own `ansible_collections.*` module_utils are imported after the detach, over a
connection that no longer answers, and the job hangs with "started" in its job file (kimi.deploy.hf_snapshot and
kimi.deploy.serve_ready did). This adds the collection imports, followed transitively, to the scan's result, so the
child imports them before it detaches.

Before the first task it also lists, once in the controller, the installed collection folders that Mitogen reads
before it runs a collection module (a scan of every installed collection, ~0.5 s, in each worker that ran one);
workers inherit the list at the fork. The rest of its savings are kimi_linear's (same folder; see its docstring):
tasks that need no connection run in the controller, workers do not collect cycles, compiled Jinja code is kept.

Use: `pip install mitogen` (requirements-demo.txt pins it), then `strategy = kimi.deploy.kimi_mitogen_linear`
(docs/docsite/rst/fleets_and_replicas.rst, "Controller settings for a fleet").
"""

from __future__ import annotations

DOCUMENTATION = r"""
name: kimi_mitogen_linear
short_description: Mitogen's linear strategy with this collection's async jobs fixed, and kimi_linear's savings
version_added: 1.1.0
description:
  - Mitogen's linear strategy (one Python per host for the whole run), plus what P(kimi.deploy.kimi_linear#strategy) saves in
    the controller.
  - Mitogen's own C(mitogen_linear) hangs on an async task that runs a collection module (the weights download, the
    engine's readiness wait) because its async child detaches before it imports the module's C(ansible_collections)
    imports (mitogen-hq/mitogen#835). This strategy adds them, followed transitively, to the list the child imports
    first.
  - Needs the C(mitogen) package in the controller's Python (requirements-demo.txt pins it).
  - It uses ansible-core and Mitogen internals and is tested with the ansible-core minor in meta/runtime.yml and the
    pinned Mitogen only.
author: kimi.deploy maintainers (@kimi-deploy)
requirements:
  - mitogen
"""

import importlib.util

import ansible.collections.list
from ansible.errors import AnsibleError

from ansible_collections.kimi.deploy.plugins.strategy import kimi_linear

try:
    import ansible_mitogen.loaders
    import ansible_mitogen.module_finder
    import ansible_mitogen.planner
    import ansible_mitogen.strategy
    import mitogen.imports
    MITOGEN_IMPORT_ERROR = None
except ImportError as exc:  # a documented requirement: said when the strategy is chosen, not when it is listed
    MITOGEN_IMPORT_ERROR = str(exc)

# Mitogen's own scan, replaced below by one that adds the collection's imports.
_mitogen_scan = None


def _collection_imports(code):
    for _level, name, fromlist in mitogen.imports.codeobj_imports(code):
        if name.startswith("ansible_collections."):
            yield name
            for leaf in fromlist:
                yield "%s.%s" % (name, leaf)


def scan(module_name, module_path, search_path):
    """Mitogen's scan, plus every `ansible_collections.*` module the module imports, directly or not."""
    result = list(_mitogen_scan(module_name, module_path, search_path))
    seen = set(entry[0] for entry in result)
    queue = [module_path]
    while queue:
        path = queue.pop()
        try:
            with open(path, "rb") as handle:
                code = compile(handle.read(), path, "exec")
        except (OSError, SyntaxError, ValueError):
            continue
        for name in _collection_imports(code):
            if name in seen:
                continue
            seen.add(name)
            try:
                spec = importlib.util.find_spec(name)
            except (ImportError, ValueError, AttributeError):
                spec = None  # `from pkg import function`: a name, not a module
            if spec is None or not spec.origin or not spec.origin.endswith(".py"):
                continue
            result.append((name, spec.origin, spec.submodule_search_locations is not None))
            queue.append(spec.origin)
    return sorted(result)


_collection_dirs = None


def collection_dirs():
    """The installed collection folders, listed once per controller process (forked workers inherit the list)."""
    global _collection_dirs
    if _collection_dirs is None:
        _collection_dirs = [path.decode("utf-8") for path in ansible.collections.list.list_collection_dirs()]
    return _collection_dirs


def _load_collections(invocation):
    """Mitogen's _load_collections, from the list above instead of a scan in each worker."""
    invocation._extra_sys_paths.update(collection_dirs())


if MITOGEN_IMPORT_ERROR is None:
    _mitogen_scan = ansible_mitogen.module_finder.scan
    setattr(ansible_mitogen.module_finder, "scan", scan)
    setattr(ansible_mitogen.planner, "_load_collections", _load_collections)
    Base = ansible_mitogen.loaders.strategy_loader.get("linear", class_only=True)

    class StrategyModule(kimi_linear.ControllerSpeedups, ansible_mitogen.strategy.StrategyMixin, Base):
        def run(self, iterator, play_context, *args, **kwargs):
            try:
                collection_dirs()
            except Exception:  # pylint: disable=broad-except  # left to each worker, as without this
                pass
            return super(StrategyModule, self).run(iterator, play_context, *args, **kwargs)

else:

    class StrategyModule(kimi_linear.StrategyModule):
        def __init__(self, *args, **kwargs):  # pylint: disable=super-init-not-called
            raise AnsibleError("kimi.deploy.kimi_mitogen_linear needs the mitogen package (pip install "
                               "mitogen==0.3.54): %s" % MITOGEN_IMPORT_ERROR)
