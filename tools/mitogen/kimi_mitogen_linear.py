# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Mitogen's linear strategy, with the async jobs of collection modules fixed (strategy name kimi_mitogen_linear).

Mitogen runs an async task (`async:` with `poll: 0`) in a forked child that detaches from the controller before the
module runs. Before detaching it imports what the module needs, but its scan only lists `ansible.module_utils`
imports: a collection module's own `ansible_collections.*` module_utils are imported after the detach, over a
connection that no longer answers, and the job hangs with "started" in its job file (kimi.deploy.hf_snapshot and
kimi.deploy.serve_ready did). This adds the collection imports, followed transitively, to the scan's result, so the
child imports them before it detaches.

It also loads, once in the controller before the first task, what every forked task worker otherwise loads again for
itself and throws away when it exits (a worker is forked per task and host): the Jinja filters and tests shipped
with ansible-core (each worker scanned them at its first filter), ansible-core's action plugins, and the list of
installed collection folders that Mitogen reads before it runs a collection module (a scan of every installed
collection, ~0.5 s, in each worker that ran one). Workers inherit all of it at the fork. With facts not injected as
top-level variables (ansible.cfg), a no-op converge of the demo host went from ~50 s to ~42 s (README, "Converge
time").

Two more costs of each worker (measured on a no-op converge of the demo host, 279 workers, ~25 s of user CPU):
- Python's cyclic garbage collector walked the objects the worker inherited, copying the pages it touched: the
  controller freezes what it holds before the play's first fork (gc.freeze) and a worker, which lives for one task,
  does not collect at all (~2.5 s of CPU);
- each worker compiled again the Jinja templates and conditionals of its task, and the role defaults they read (550
  distinct ones in that run, ~1100 compiles): the compiled code is kept on disk, keyed by the template, the
  environment's settings and the Jinja, ansible-core and Python versions, and read back by the next worker or run that
  compiles the same template (~2.5 s of CPU). The folder is $KIMI_JINJA_CODE_CACHE (default
  ~/.cache/kimi-deploy/jinja-code; empty: off); it is used only when it is the user's own and no one else may write
  to it, since its files are run as code.

Use: ANSIBLE_STRATEGY_PLUGINS=<this folder>:<ansible_mitogen>/plugins/strategy ANSIBLE_STRATEGY=kimi_mitogen_linear
(the README's "Converge time" section).
"""

from __future__ import annotations

import contextvars
import gc
import hashlib
import importlib.util
import marshal
import os
import stat
import sys

import ansible.collections.list
import ansible_mitogen.loaders
import ansible_mitogen.module_finder
import ansible_mitogen.planner
import ansible_mitogen.strategy
import mitogen.imports
from ansible import release
from ansible.executor.process import worker

_mitogen_scan = ansible_mitogen.module_finder.scan


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


ansible_mitogen.module_finder.scan = scan

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


ansible_mitogen.planner._load_collections = _load_collections

_warmed = False


def warm():
    """Load in the controller what each task worker would load again (see the module's docstring). A failure here only
    leaves the loading to the workers, as without this."""
    global _warmed
    if _warmed:
        return
    _warmed = True
    from ansible.plugins.loader import action_loader, filter_loader, test_loader
    try:
        collection_dirs()
        for loader in (filter_loader, test_loader):
            loader._ensure_non_collection_wrappers()
        from ansible.template import Templar
        Templar().environment.lexer  # pylint: disable=expression-not-assigned  # built once, kept in a class cache
        for _plugin in action_loader.all(class_only=True):
            pass
    except Exception:  # pylint: disable=broad-except
        pass


_worker_run = worker.WorkerProcess.run


def _worker_run_without_gc(self):
    """A task worker lives for one task: it does not collect cycles (which copies the pages of every object it
    inherited from the controller)."""
    gc.disable()
    return _worker_run(self)


worker.WorkerProcess.run = _worker_run_without_gc


_code_cache_dirs = {}


def code_cache_dir():
    """The folder of compiled Jinja code, or None when it is off or not private to this user (its files run as code).
    Checked once per process and setting, not at every compile (workers inherit the controller's answer)."""
    default = os.path.join(os.path.expanduser("~"), ".cache", "kimi-deploy", "jinja-code")
    path = os.environ.get("KIMI_JINJA_CODE_CACHE", default)
    if path not in _code_cache_dirs:
        _code_cache_dirs[path] = _private_folder(path) if path else None
    return _code_cache_dirs[path]


def _private_folder(path):
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        info = os.stat(path)
    except OSError:
        return None
    if info.st_uid != os.getuid() or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return None
    return path


try:
    import jinja2
    from jinja2 import nodes as _jinja_nodes
    from ansible._internal._templating import _jinja_bits
except ImportError:  # another ansible-core layout: compile as usual
    _jinja_bits = None

_expression = contextvars.ContextVar("kimi_jinja_expression", default=None)


def _code_key(env, what, name, filename, defer_init):
    compile_context = _jinja_bits._TemplateCompileContext.current(optional=True)
    settings = tuple(getattr(env, field) for field in _jinja_bits._TEMPLATE_OVERRIDE_FIELD_NAMES)
    raw = repr((jinja2.__version__, release.__version__, sys.version_info[:3], type(env).__qualname__, settings,
                env.optimized, env.autoescape, compile_context.escape_backslashes if compile_context else None,
                what, name, filename, defer_init))
    return hashlib.sha256(raw.encode("utf-8", "surrogatepass")).hexdigest()


def _read_code(folder, key):
    try:
        with open(os.path.join(folder, key[:2], key), "rb") as handle:
            return marshal.loads(handle.read())
    except (OSError, EOFError, ValueError, TypeError):
        return None


def _write_code(folder, key, code):
    """The collection's atomic write (a temporary file, renamed): a reader sees all of the code or none of it. Without
    the collection importable, nothing is kept."""
    path = os.path.join(folder, key[:2], key)
    try:
        from ansible_collections.kimi.deploy.plugins.module_utils._hf_cache import atomic_write
        data = marshal.dumps(code)
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        atomic_write(path, data, mode=0o600, durable=False)
    except (ImportError, OSError, ValueError):
        pass


def _cached_compile(compile_):
    def compile_cached(self, source, name=None, filename=None, raw=False, defer_init=False):
        folder = None if raw else code_cache_dir()
        if isinstance(source, str):
            what = ("template", source)
        elif isinstance(source, _jinja_nodes.Template) and _expression.get() is not None:
            what = _expression.get()  # compile_expression hands over a parsed tree: keyed by its source
        else:
            folder = None
        if folder is None:
            return compile_(self, source, name, filename, raw, defer_init)
        key = _code_key(self, what, name, filename, defer_init)
        code = _read_code(folder, key)
        if code is None:
            code = compile_(self, source, name, filename, raw, defer_init)
            _write_code(folder, key, code)
        return code
    return compile_cached


def _cached_compile_expression(compile_expression):
    def compile_expression_(self, source, undefined_to_none=True):
        what = ("expression", source)
        folder = code_cache_dir()
        code = _read_code(folder, _code_key(self, what, None, None, False)) if folder else None
        if code is not None:  # what Jinja's compile_expression makes of the code, without parsing the source again
            template = self.template_class.from_code(self, code, self.make_globals(None), None)
            return jinja2.environment.TemplateExpression(template, undefined_to_none)
        token = _expression.set(what)
        try:
            return compile_expression(self, source, undefined_to_none)
        finally:
            _expression.reset(token)
    return compile_expression_


if _jinja_bits is not None and hasattr(_jinja_bits, "_TEMPLATE_OVERRIDE_FIELD_NAMES"):
    _jinja_bits.AnsibleEnvironment.compile = _cached_compile(_jinja_bits.AnsibleEnvironment.compile)
    _jinja_bits.AnsibleEnvironment.compile_expression = _cached_compile_expression(
        _jinja_bits.AnsibleEnvironment.compile_expression)

Base = ansible_mitogen.loaders.strategy_loader.get("linear", class_only=True)


class StrategyModule(ansible_mitogen.strategy.StrategyMixin, Base):
    def run(self, iterator, play_context, *args, **kwargs):
        warm()
        # What the controller holds before the play's first fork is never collected in the workers (see above).
        gc.collect()
        gc.freeze()
        return super(StrategyModule, self).run(iterator, play_context, *args, **kwargs)
