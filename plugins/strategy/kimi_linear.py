# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Ansible's linear strategy, with less work per task in the controller (strategy name kimi_linear).

Ansible forks a worker process per task and host; on a no-op converge most of a run's CPU goes there, not into the
modules (measured on the demo host: ~280 workers, ~25 s of user CPU). This strategy removes what those workers did
for nothing, and kimi_mitogen_linear (same folder) adds the same to Mitogen's linear strategy:
- a task that needs no connection runs in the controller, without a worker: set_fact, assert, debug, fail,
  validate_argument_spec, include_tasks and include_role, and any task whose conditional is false (its module never
  runs). It runs on a copy of the task, through ansible-core's own TaskExecutor, and its result goes through the same
  queue a worker's does. ~190 of the ~280 tasks of a no-op converge of the demo host: 41 s -> 29 s.
  KIMI_INLINE_TASKS=0 forks a worker for every task, as Ansible does;
- what every worker loaded again for itself and threw away is loaded once in the controller before the first task
  (workers inherit it at the fork): the Jinja filters and tests shipped with ansible-core, its action plugins, the
  Jinja lexer;
- Python's cyclic garbage collector walked the objects a worker inherited, copying the pages it touched: the
  controller freezes what it holds before the play's first fork (gc.freeze) and a worker, which lives for one task,
  does not collect at all; the controller collects every 20000 allocations instead of 700;
- each worker compiled again the Jinja templates and conditionals of its task, and the role defaults they read
  (~1100 compiles of 550 distinct templates per no-op converge of the demo host): the compiled code is kept on disk,
  keyed by the template, the environment's settings and the Jinja, ansible-core and Python versions, and read back
  by the next worker or run that compiles the same template. The folder is $KIMI_JINJA_CODE_CACHE (default
  ~/.cache/kimi-deploy/jinja-code; empty: off); it is used only when it is the user's own and no one else may write
  to it, since its files are run as code.

Use: `strategy = kimi.deploy.kimi_linear` in ansible.cfg (this checkout's does) or ANSIBLE_STRATEGY. It rests on
ansible-core's internals, so it is tested against the one ansible-core minor the collection supports
(meta/runtime.yml's requires_ansible); on another layout it falls back to linear's behaviour.
"""

from __future__ import annotations

DOCUMENTATION = r"""
name: kimi_linear
short_description: Ansible's linear strategy with less controller work per task
version_added: 1.1.0
description:
  - Ansible's C(linear) strategy, with the same results, for any connection.
  - A task that needs no connection (set_fact, assert, debug, fail, validate_argument_spec, include_tasks, include_role,
    kimi.deploy.deployment, and any task whose conditional is false) runs in the controller through ansible-core's own
    TaskExecutor instead of a forked worker.
  - Plugins every worker loaded again are loaded once before the first fork; workers do not run Python's cyclic
    garbage collector.
  - Compiled Jinja code is kept on disk in E(KIMI_JINJA_CODE_CACHE) (default C(~/.cache/kimi-deploy/jinja-code); empty
    turns it off), used only when the folder is the user's own and no one else may write to it.
  - E(KIMI_INLINE_TASKS=0) forks a worker for every task, as C(linear) does.
  - It uses ansible-core internals and is tested with the ansible-core minor in meta/runtime.yml only. ansible-core
    2.21 prints a deprecation for every strategy outside ansible.builtin.
author: kimi.deploy maintainers (@kimi-deploy)
"""

import contextvars
import gc
import hashlib
import marshal
import os
import stat
import sys

from ansible import constants as C
from ansible import release
from ansible.executor.process import worker
from ansible.executor.task_executor import TaskExecutor
from ansible.plugins import loader as plugin_loader
from ansible.plugins.strategy.linear import StrategyModule as LinearStrategyModule
from ansible.utils.fqcn import add_internal_fqcns

try:
    from ansible._internal._task import TaskContext
except ImportError:  # another ansible-core layout: every task forks its worker
    TaskContext = None

_warmed = False
GC_THRESHOLD = (20000, 20, 20)


def warm():
    """Load in the controller what each task worker would load again (see the module's docstring). A failure here only
    leaves the loading to the workers, as without this."""
    global _warmed
    if _warmed:
        return
    _warmed = True
    from ansible.plugins.loader import action_loader, filter_loader, test_loader
    try:
        for loader in (filter_loader, test_loader):
            loader._ensure_non_collection_wrappers()
        from ansible.template import Templar
        templar = Templar()
        # The engine's environment where there is one (ansible-core 2.19+ deprecates Templar.environment and says so)
        getattr(templar, "_engine", templar).environment.lexer  # pylint: disable=expression-not-assigned  # cached once
        for _plugin in action_loader.all(class_only=True):
            pass
    except Exception:  # pylint: disable=broad-except
        pass


def _patch(owner, name, wrap):
    """Replace owner.name with wrap(the original); again from the original when this file is loaded twice (as
    kimi_linear and through kimi_mitogen_linear), so that nothing is wrapped twice."""
    current = getattr(owner, name)
    original = getattr(current, "kimi_wrapped", current)
    patched = wrap(original)
    patched.kimi_wrapped = original
    setattr(owner, name, patched)


def _without_gc(run):
    def run_without_gc(self):
        """A task worker lives for one task: it does not collect cycles (which copies the pages of every object it
        inherited from the controller)."""
        gc.disable()
        return run(self)
    return run_without_gc


_patch(worker.WorkerProcess, "run", _without_gc)


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
        from ansible_collections.kimi.deploy.plugins.module_utils._files import atomic_write
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
    _patch(_jinja_bits.AnsibleEnvironment, "compile", _cached_compile)
    _patch(_jinja_bits.AnsibleEnvironment, "compile_expression", _cached_compile_expression)


# Actions that run whole in the controller: they never open a connection nor call back into the strategy (add_host
# and group_by do, through the inventory RPC that the strategy loop serves, so they are not here).
CONTROLLER_ACTIONS = frozenset(
    C._ACTION_SET_FACT + C._ACTION_DEBUG + C._ACTION_ALL_INCLUDE_ROLE_TASKS
    + add_internal_fqcns(("assert", "fail", "validate_argument_spec"))
    + ["kimi.deploy.deployment"])  # the collection's resolver: an action that reads variables and sets facts


class _NeedsWorker(BaseException):
    """The task passed its conditional and runs a module: it goes to a forked worker. A BaseException, so that
    TaskExecutor's own `except Exception` does not turn it into a failed result."""


def _needs_worker(*_args, **_kwargs):
    raise _NeedsWorker()


def inline_copy(task):
    """The task and its chain of enclosing blocks, copied (TaskExecutor finalizes the task's block in place). The copied
    blocks' task lists still hold the play's own tasks: safe, as a block's task lists are never post-validated (Block
    is not a _post_validate_object). Task.copy() duplicated every task of every enclosing block: ~0.25 s per task in
    kimi_switch's main.yml, ~4 s of a no-op converge of the demo host."""
    return task.copy(exclude_tasks=True)


def run_inline(strategy, host, task, task_vars, play_context):
    """Run a task in the controller when it needs no worker: a controller-only action, or any task whose conditional
    is false. Returns False, having changed nothing the strategy sees, when the task needs a worker after all.

    A worker is a fork of the controller (~0.05 s of CPU each on the demo host, before the task does anything): a no-op
    converge of the demo host forked ~280 of them, ~190 for tasks that ran no module. Here the task runs on a copy
    (TaskExecutor finalizes the task's and its block's fields in place, which a worker does on its own copy) and its
    result goes through the same queue a worker's does."""
    controller_only = task.action in CONTROLLER_ACTIONS
    # A module task is tried here only for its conditional; one with a loop goes to a worker before any lookup runs.
    if not (controller_only or (task.when and not task.loop_with and task.loop is None)):
        return False
    inline_task = inline_copy(task)
    if not controller_only:
        # The conditional is evaluated before the task's final validation: reaching it means the module runs.
        inline_task.post_validate = _needs_worker
    inline_vars = dict(task_vars)
    # A loop's items reach the results thread while the task runs, and it looks the task up here.
    strategy._queued_task_cache[(host.name, task._uuid)] = {
        "host": host, "task": task, "task_vars": task_vars, "play_context": play_context}
    if controller_only:  # runs here for sure: announced first, as a worker's task is
        strategy._tqm.send_callback("v2_runner_on_start", host, task)
    try:
        with TaskContext.create(task=inline_task, task_vars=inline_vars, host_name=host.name):
            inline_task.squash()
            executor = TaskExecutor(host, play_context, strategy._loader, plugin_loader.get_plugin_loader_namespace(),
                                    strategy._final_q, strategy._variable_manager)
            utr = executor.run()
            utr.finalize_registered_values()
    except _NeedsWorker:
        return False
    inline_task.__dict__.pop("post_validate", None)
    inline_task.ignore_errors = utr.ignore_errors
    inline_task.ignore_unreachable = utr.ignore_unreachable
    if not controller_only:
        strategy._tqm.send_callback("v2_runner_on_start", host, task)
    strategy._final_q.send_task_result(host, inline_task, utr)
    strategy._pending_results += 1
    return True


class ControllerSpeedups(object):
    """The strategy's part of the above; a mixin, so that kimi_mitogen_linear puts it before Mitogen's linear."""

    def run(self, iterator, play_context, *args, **kwargs):
        self._kimi_inline = TaskContext is not None and os.environ.get("KIMI_INLINE_TASKS", "1") != "0"
        warm()
        # What the controller holds before the play's first fork is never collected in the workers (see above).
        gc.collect()
        gc.freeze()
        # The controller collects young objects every GC_THRESHOLD allocations, not Python's 700: a no-op converge of
        # the demo host made ~1300 collections (0.7-0.8 s), and makes ~40 (0.55 s).
        gc.set_threshold(*GC_THRESHOLD)
        return super(ControllerSpeedups, self).run(iterator, play_context, *args, **kwargs)

    def _queue_task(self, host, task, task_vars, play_context):
        if getattr(self, "_kimi_inline", False) and run_inline(self, host, task, task_vars, play_context):
            return None
        return super(ControllerSpeedups, self)._queue_task(host, task, task_vars, play_context)


class StrategyModule(ControllerSpeedups, LinearStrategyModule):
    pass
