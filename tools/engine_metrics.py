"""Record the Prometheus series every pinned engine and router release defines (tests/fixtures/engine_metrics/*.json),
read from its RELEASED package.

Usage::

    python3 tools/engine_metrics.py                                # every pinned release (make engine-metrics)
    python3 tools/engine_metrics.py --engine vllm --version 0.33.0
    python3 tools/engine_metrics.py --list                         # the pinned releases and how each is read
    python3 tools/engine_metrics.py --engine sglang --version 0.5.23 --out-dir /tmp/m

Why: the dashboard, the alert rules, the canary's TTFT/ITL histograms and the engine double name engine series; a
release that renames one leaves a panel empty, an alert that never fires, or a canary that compares nothing (it skips
a missing histogram). tests/unit/test_engine_metrics.py checks every name the collection uses against these files.

The pinned releases: every version of every build in plugins/module_utils/_engines/registry.py (ENGINES) and of every
router in _engines/routers.py (ROUTERS), and every flag list in tests/fixtures/engine_flags/. One file a package
release: SGLang-Ascend is the sglang package of the same version (its flag list is that wheel's), vLLM-Ascend a
platform plugin over the vLLM release its versions entry names (`parser_of`), TensorRT-LLM's disaggregated router the
trtllm-serve of the engine image.

The wheel comes as `make engine-flags` gets it: ``pip download --no-deps --only-binary :all:`` into
``.cache/engine-flags/wheels`` (tools/engine_flags.py's pip_download, the same cache; a wheel already there is used as
it is). vllm-ascend publishes aarch64 wheels only (cp310/cp311, the Atlas hosts' CPUs): it is fetched with pip's
``--platform``/``--python-version``. Nothing is installed or imported; the files are read inside the zip.

Method:

* Python packages (vllm, sglang, vllm-ascend): ``ast`` over every ``.py`` file of the wheel that mentions
  prometheus_client or calls a ``_<kind>_cls``. A metric is a call of prometheus_client's Counter, Gauge, Histogram,
  Summary, Info or Enum (as imported in that file, through ``prometheus_client.X``, or through a name or class
  attribute bound to one: vLLM's ``self._gauge_cls(...)``, SGLang's ``Counter = self._counter_cls or _PromCounter``)
  or of a known pass-through wrapper (SGLang's GaugeHistogram, a Gauge with gt/le labels), with a ``documentation``
  (so ``collections.Counter`` never counts). A ``self._<kind>_cls`` bound in a base class of another file (vLLM's KV
  connector metrics) is taken as that kind, and says so in ``via``. Its name is the ``name`` argument when it is a
  literal or resolves to one (a constant or an f-string of constants in the function, the class, ``self.x`` set in
  the class, or the module; a loop variable over a literal table, as vLLM 0.33's spec-decode counters);
  ``namespace``, ``subsystem`` and ``unit`` are applied as prometheus_client does. Calls whose name does not resolve
  are listed under ``unresolved`` (file:line and the expression), never guessed; strings with the engine's prefix
  that no resolved call defines (a metric a factory makes from a table, as vLLM 0.33's KV offload
  ``metric_cls(**kwargs)``; PromQL in a docstring) are listed under ``other_literals``, not as metrics.
  Labels: ``labelnames`` resolved the same way; when part of it is a parameter (``labels.keys()`` of the caller's
  dict) the literal part is kept and ``labels_complete`` is false.
* Exposed names, as prometheus_client writes them: a counter's name loses a ``_total`` suffix and its samples are
  ``<name>_total`` and ``<name>_created``; a histogram ``_bucket``, ``_count``, ``_sum``, ``_created``; a summary
  ``_count``, ``_sum``, ``_created``; an info ``<name>_info``; a gauge and an enum their name. ``_created`` is absent in
  multiprocess mode (SGLang, TensorRT-LLM, vLLM with several API servers); it is listed all the same.
* Routers (smg, vllm-router: Rust, compiled into ``smg_rs``/``vllm_router_rs``): the names are
  read from the binary's string table. Rust stores its literals back to back without terminators, so a name is
  recorded only where its end is certain: the metrics crate's ``describe_*!(name, description)`` puts the
  description, which starts with a capital, right after the name (``description_run``: the text there, which may run
  into the next literal). A lowercase literal glued to a name before a capitalised string that is no description
  would make a longer false name (vllm-router 0.1.17's ``vllm_router_workflow_return_nllmissing``): such a name
  only widens the list. Other runs that start with the router's prefix are listed under ``unresolved`` as they
  appear, never recorded as names. The metrics crate adds no suffix to counters or gauges; whether a
  name is a histogram (rendered with quantiles or buckets by metrics-exporter-prometheus) and its labels are not in
  the string table: ``type`` and ``labels`` are null.
* A release whose package cannot be had is recorded with ``read: false`` and the reason (TensorRT-LLM: not on PyPI).

Output: ``tests/fixtures/engine_metrics/engine_metrics_<engine>-<version>.json`` (``--out-dir`` to write elsewhere),
indent 1: source (wheel, sha256, commit id), method, ``metrics`` {name: {type, labels, labels_complete, exposed,
where}}, ``exposed`` (every sample name), ``unresolved``, ``other_literals``, and for a plugin ``serves`` (the
release whose series its server writes). The seconds each release took go to the terminal, not the file.
"""

from __future__ import annotations

import argparse
import ast
import datetime
import json
import os
import re
import subprocess
import sys
import time
import zipfile
from pathlib import Path

TOOLS = Path(__file__).resolve().parent
if str(TOOLS) not in sys.path:
    sys.path.insert(0, str(TOOLS))
import engine_flags  # noqa: E402  pylint: disable=wrong-import-position

REPO_ROOT = engine_flags.REPO_ROOT
TOOL = "tools/engine_metrics.py"
OUT_DIR = REPO_ROOT / "tests/fixtures/engine_metrics"
FLAGS_DIR = REPO_ROOT / "tests/fixtures/engine_flags"
CACHE = REPO_ROOT / ".cache/engine-flags"

# How each engine's package is had and read. `pip_args`: for a package without a wheel for this machine.
ENGINES = {
    "vllm": {"package": "vllm", "module": "vllm", "reader": "python", "prefix": "vllm:"},
    "sglang": {"package": "sglang", "module": "sglang", "reader": "python", "prefix": "sglang:"},
    "vllm-ascend": {"package": "vllm-ascend", "module": "vllm_ascend", "reader": "python", "prefix": "vllm:",
                    "pip_args": ["--platform", "manylinux_2_34_aarch64", "--python-version", "3.11"]},
    "trtllm": {"package": "tensorrt-llm", "module": "tensorrt_llm", "reader": "python", "prefix": "trtllm_",
               # `pip download --no-binary :all:` lists PyPI's versions (source distributions only): no 1.3.0rc17
               "unavailable_why": "TensorRT-LLM's wheels are on NVIDIA's own package index, which this project's "
                                  "machines cannot reach; PyPI holds only source distributions of tensorrt-llm (no "
                                  "wheel for any platform), and none of this version"},
    "smg": {"package": "smg", "module": "smg", "reader": "binary", "prefix": "smg_", "binary": "smg/smg_rs"},
    "vllm-router": {"package": "vllm-router", "module": "vllm_router", "reader": "binary", "prefix": "vllm_router_",
                    "binary": "vllm_router_rs"},
}
# Registry builds (plugins/module_utils/_engines/registry.py keys) -> the engine package read for them.
BUILD_PACKAGES = {"vllm": "vllm", "sglang": "sglang", "trtllm": "trtllm", "vllm-ascend": "vllm-ascend",
                  "sglang-ascend": "sglang"}  # SGLang-Ascend: the sglang wheel of the same version
# Routers without a package of their own (ROUTERS entries whose package is None) -> the engine they come with.
IMAGE_ROUTERS = {"trtllm-disaggregated": "trtllm"}

PROM_KINDS = {"Counter": "counter", "Gauge": "gauge", "Histogram": "histogram", "Summary": "summary",
              "Info": "info", "Enum": "enum"}
# Classes of an engine that create one prometheus_client metric from their own name/documentation/labelnames
# arguments: (module the class is imported from, ends with) -> (kind, labels the wrapper adds, why).
WRAPPERS = {
    "GaugeHistogram": ("gauge_histogram", "gauge", ["gt", "le"],
                       "sglang/srt/utils/gauge_histogram.py: a prometheus_client Gauge with gt/le bucket labels"),
}
# vLLM's convention for the class a metric is made with (prometheus_client's, or Ray's wrappers of it): _gauge_cls, ...
METRIC_CLS = re.compile(r"^_(counter|gauge|histogram|summary)_cls$")
SUFFIXES = {"counter": ["_total", "_created"], "histogram": ["_bucket", "_count", "_sum", "_created"],
            "summary": ["_count", "_sum", "_created"], "info": ["_info"], "gauge": [""], "enum": [""]}


# --------------------------------------------------------------------------- the pinned releases


def _collection_data():
    """ENGINES and ROUTERS of the collection, imported as the collection's own modules import them."""
    collections = REPO_ROOT / ".collections"
    link = collections / "ansible_collections/kimi/deploy"
    if not link.exists():
        link.parent.mkdir(parents=True, exist_ok=True)
        os.symlink("../../..", link)
    if str(collections) not in sys.path:
        sys.path.insert(0, str(collections))
    # pylint: disable=import-outside-toplevel
    from ansible_collections.kimi.deploy.plugins.module_utils._engines.registry import ENGINES as BUILDS
    from ansible_collections.kimi.deploy.plugins.module_utils._engines.routers import ROUTERS
    return BUILDS, ROUTERS


def pinned_releases() -> dict:
    """{(engine, version): {"why": [...], "serves": (engine, version) or None}}: every release the collection pins."""
    builds, routers = _collection_data()
    out = {}

    def add(engine, version, why, serves=None):
        entry = out.setdefault((engine, version), {"why": [], "serves": None})
        entry["why"].append(why)
        entry["serves"] = entry["serves"] or serves

    for key, spec in builds.items():
        engine = BUILD_PACKAGES[key]
        for version, entry in spec["versions"].items():
            base = entry.get("parser_of")
            serves = tuple(base) if base and key == "vllm-ascend" else None
            add(engine, version, f"_engines registry {key} {version}", serves)
            if serves:
                add(serves[0], serves[1], f"the vLLM release {key} {version} runs on (parser_of)")
    for key, router in routers.items():
        engine = key if router["package"] else IMAGE_ROUTERS[key]
        add(engine, router["version"], f"_engines/routers.py {key}")
    for path in sorted(FLAGS_DIR.glob("engine_flags_*.json")):
        match = re.match(r"engine_flags_(.+?)-(\d.*)\.json$", path.name)
        if match and match.group(1) in ENGINES:
            add(match.group(1), match.group(2), f"flag list {path.name}")
    return dict(sorted(out.items()))


# --------------------------------------------------------------------------- download


def fetch_wheel(engine: str, version: str, cache: Path) -> tuple[Path | None, str | None]:
    """(wheel, None) from the cache or PyPI, or (None, why not). engine_flags.pip_download's command and cache; a
    package with `pip_args` (another platform's wheel) is fetched into the same cache first."""
    spec = ENGINES[engine]
    dest = cache / "wheels"
    dest.mkdir(parents=True, exist_ok=True)
    stem = spec["package"].replace("-", "_")
    if not sorted(dest.glob(f"{stem}-{version}-*.whl")):
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:", "-q", "-d", str(dest),
               *spec.get("pip_args", []), f"{spec['package']}=={version}"]
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if done.returncode:
            said = [line for line in done.stderr.splitlines() if line.startswith("ERROR")]
            why = f"`pip download --no-deps --only-binary :all: {spec['package']}=={version}`: " + \
                  (" ".join(said) or done.stderr.strip()[-300:])
            if spec.get("unavailable_why"):
                why = f"{spec['unavailable_why']} ({why})"
            return None, why
    return engine_flags.pip_download(spec["package"], version, dest), None


# --------------------------------------------------------------------------- Python: prometheus_client calls


class Resolver:
    """Turns an expression into a string or a list of label names, from what one file says: the enclosing function's
    earlier assignments, the class's attributes and `self.x` assignments, the module's constants."""

    def __init__(self, tree: ast.Module):
        self.module = {}
        for node in tree.body:
            for name, value in _assigned(node):
                self.module.setdefault(name, value)
        self.classes = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                attrs, selfs = {}, {}
                for item in node.body:
                    for name, value in _assigned(item):
                        attrs.setdefault(name, value)
                for sub in ast.walk(node):
                    for target, value in _targets(sub):
                        if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) \
                                and target.value.id == "self":
                            selfs.setdefault(target.attr, value)
                bases = [b.id for b in node.bases if isinstance(b, ast.Name)]
                self.classes[node.name] = {"attrs": attrs, "self": selfs, "bases": bases}

    def lookup(self, node, ctx):
        """The expression a Name or attribute stands for, or None (a parameter, an import, a call's result)."""
        func, cls = ctx
        if isinstance(node, ast.Name):
            if func is not None:
                params = {a.arg for a in func.args.args + func.args.kwonlyargs + func.args.posonlyargs}
                line, found = 0, None  # the last assignment before the use
                for sub in ast.walk(func):
                    for target, value in _targets(sub):
                        if isinstance(target, ast.Name) and target.id == node.id and line < sub.lineno < node.lineno:
                            line, found = sub.lineno, value
                if found is not None:
                    return found
                if node.id in params:
                    return None
            if cls is not None:
                value = self._class_attr(cls, node.id, "attrs")
                if value is not None:
                    return value
            return self.module.get(node.id)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            if node.value.id in ("self", "cls") and cls is not None:
                return self._class_attr(cls, node.attr, "attrs") or self._class_attr(cls, node.attr, "self")
            if node.value.id in self.classes:
                return self._class_attr(node.value.id, node.attr, "attrs")
        return None

    def _class_attr(self, cls, name, kind, seen=()):
        info = self.classes.get(cls)
        if info is None or cls in seen:
            return None
        if name in info[kind]:
            return info[kind][name]
        for base in info["bases"]:
            found = self._class_attr(base, name, kind, seen + (cls,))
            if found is not None:
                return found
        return None

    def string(self, node, ctx, depth=0):
        """The string an expression is, or None."""
        if depth > 8 or node is None:
            return None
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        if isinstance(node, ast.JoinedStr):
            parts = []
            for value in node.values:
                if isinstance(value, ast.Constant):
                    parts.append(str(value.value))
                elif isinstance(value, ast.FormattedValue) and value.format_spec is None:
                    part = self.string(value.value, ctx, depth + 1)
                    if part is None:
                        return None
                    parts.append(part)
                else:
                    return None
            return "".join(parts)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            left, right = self.string(node.left, ctx, depth + 1), self.string(node.right, ctx, depth + 1)
            return left + right if left is not None and right is not None else None
        if isinstance(node, (ast.Name, ast.Attribute)):
            return self.string(self.lookup(node, ctx), ctx, depth + 1)
        return None

    def labels(self, node, ctx, depth=0):
        """(label names known, complete): a literal list, tuple, dict's keys, or a sum of them, resolved as far as
        the file says."""
        if node is None or (isinstance(node, ast.Constant) and node.value is None):
            return [], True
        if depth > 8:
            return [], False
        if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
            known, complete = [], True
            for elt in node.elts:
                if isinstance(elt, ast.Starred):
                    more, ok = self.labels(elt.value, ctx, depth + 1)
                    known, complete = known + more, complete and ok
                    continue
                text = self.string(elt, ctx, depth + 1)
                if text is None:
                    complete = False
                else:
                    known.append(text)
            return known, complete
        if isinstance(node, ast.Dict):
            known, complete = [], True
            for key, value in zip(node.keys, node.values):
                if key is None:  # {**other}
                    more, ok = self.labels(value, ctx, depth + 1)
                    known, complete = known + more, complete and ok
                    continue
                text = self.string(key, ctx, depth + 1)
                if text is None:
                    complete = False
                else:
                    known.append(text)
            return known, complete
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            left, lok = self.labels(node.left, ctx, depth + 1)
            right, rok = self.labels(node.right, ctx, depth + 1)
            return left + right, lok and rok
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name) and func.id in ("list", "tuple", "sorted") and len(node.args) == 1:
                return self.labels(node.args[0], ctx, depth + 1)
            if isinstance(func, ast.Attribute) and func.attr == "keys" and not node.args:
                return self.labels(func.value, ctx, depth + 1)
            return [], False
        if isinstance(node, (ast.Name, ast.Attribute)):
            value = self.lookup(node, ctx)
            return self.labels(value, ctx, depth + 1) if value is not None else ([], False)
        return [], False


def _targets(node):
    """(target, value) of an assignment statement, each target apart."""
    if isinstance(node, ast.Assign):
        return [(t, node.value) for t in node.targets]
    if isinstance(node, ast.AnnAssign) and node.value is not None:
        return [(node.target, node.value)]
    return []


def _assigned(node):
    """(name, value) of a statement that binds plain names."""
    return [(t.id, v) for t, v in _targets(node) if isinstance(t, ast.Name)]


def _imports(tree: ast.Module) -> tuple[dict, set, dict]:
    """The file's names for prometheus_client's classes {local: class}, its names for the module itself, and the
    wrapper classes it imports {local: WRAPPERS key}; imports inside functions included (SGLang imports
    prometheus_client late, after setting PROMETHEUS_MULTIPROC_DIR)."""
    classes, modules, wrappers = {}, set(), {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                local = alias.asname or alias.name
                if node.module == "prometheus_client" and alias.name in PROM_KINDS:
                    classes[local] = alias.name
                elif alias.name in WRAPPERS and node.module.endswith(WRAPPERS[alias.name][0]):
                    wrappers[local] = alias.name
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "prometheus_client":
                    modules.add(alias.asname or alias.name)
    return classes, modules, wrappers


class MetricCalls(ast.NodeVisitor):
    """Every metric constructor call of one file, with the function and class around it."""

    def __init__(self, path: str, tree: ast.Module):
        self.path, self.resolver = path, Resolver(tree)
        self.classes, self.modules, self.wrappers = _imports(tree)
        self.stack_func, self.stack_cls = [], []
        self.found, self.unresolved, self.loops = [], [], []

    def visit_ClassDef(self, node):
        """Keep the class a call is in (its attributes and `self.x` resolve names)."""
        self.stack_cls.append(node.name)
        self.generic_visit(node)
        self.stack_cls.pop()

    def visit_FunctionDef(self, node):
        """Keep the function a call is in (its assignments before the call resolve names)."""
        self.stack_func.append(node)
        self.generic_visit(node)
        self.stack_func.pop()

    visit_AsyncFunctionDef = visit_FunctionDef

    def ctx(self):
        """(function, class name) around the node being visited."""
        return (self.stack_func[-1] if self.stack_func else None, self.stack_cls[-1] if self.stack_cls else None)

    def kind_of(self, func, depth=0):
        """(kind, labels a wrapper adds, why) of a callee that makes a prometheus_client metric, else None."""
        if depth > 4 or func is None:
            return None
        if isinstance(func, ast.BoolOp):  # SGLang: Counter = self._counter_cls or _PromCounter
            return next((k for k in (self.kind_of(v, depth + 1) for v in func.values) if k), None)
        if isinstance(func, ast.Subscript):  # vLLM: self._gauge_cls = metric_types[Gauge]
            return self.kind_of(func.slice, depth + 1)
        if not isinstance(func, (ast.Name, ast.Attribute)):
            return None
        bound = self.resolver.lookup(func, self.ctx())
        if bound is not None:  # a local or class attribute bound to one: vLLM's self._gauge_cls
            return self.kind_of(bound, depth + 1)
        if isinstance(func, ast.Name):
            if func.id in self.classes:
                return PROM_KINDS[self.classes[func.id]], [], None
            if func.id in self.wrappers:
                _module, kind, extra, why = WRAPPERS[self.wrappers[func.id]]
                return kind, extra, why
            return None
        if isinstance(func.value, ast.Name) and func.value.id in self.modules:
            return (PROM_KINDS[func.attr], [], None) if func.attr in PROM_KINDS else None
        match = METRIC_CLS.search(func.attr)
        if match:  # bound in a base class of another file (vLLM's KV connector metrics)
            return match.group(1), [], f"{ast.unparse(func)}: vLLM's metric-class attribute, bound outside this file"
        return None

    def visit_For(self, node):
        """Keep the loop's target and table while its body is visited (loop_names reads them)."""
        self.visit(node.iter)
        self.loops.append((node.target, node.iter))
        for item in node.body + node.orelse:
            self.visit(item)
        self.loops.pop()

    def _comprehension(self, node):
        """A comprehension's generators are loops around its element (vLLM 0.33: [Counter(name=name) for name, doc
        in counter_specs])."""
        for gen in node.generators:
            self.visit(gen.iter)
            self.loops.append((gen.target, gen.iter))
        for field in ("elt", "key", "value"):
            if getattr(node, field, None) is not None:
                self.visit(getattr(node, field))
        for _gen in node.generators:
            self.loops.pop()

    visit_ListComp = visit_SetComp = visit_GeneratorExp = visit_DictComp = _comprehension

    def loop_var(self, node):
        """Whether a Name is bound by a loop around the call."""
        return isinstance(node, ast.Name) and any(
            isinstance(sub, ast.Name) and sub.id == node.id for target, _iter in self.loops for sub in ast.walk(target))

    def loop_names(self, node):
        """The strings a loop variable takes when the loop runs over a literal table (vLLM 0.33's
        `for name, doc in counter_specs`, the table assigned in each branch of an if), else None."""
        if not isinstance(node, ast.Name):
            return None
        for target, iterable in reversed(self.loops):
            if isinstance(target, ast.Name) and target.id == node.id:
                index = None
            elif isinstance(target, ast.Tuple) and any(isinstance(e, ast.Name) and e.id == node.id
                                                       for e in target.elts):
                index = next(i for i, e in enumerate(target.elts) if isinstance(e, ast.Name) and e.id == node.id)
            else:
                continue
            tables = [iterable]
            if isinstance(iterable, ast.Name) and self.stack_func:
                tables = [v for sub in ast.walk(self.stack_func[-1]) for t, v in _targets(sub)
                          if isinstance(t, ast.Name) and t.id == iterable.id]
            names = []
            for table in tables:
                if not isinstance(table, (ast.List, ast.Tuple)):
                    return None
                for row in table.elts:
                    item = row if index is None else (row.elts[index] if isinstance(row, ast.Tuple)
                                                      and len(row.elts) > index else None)
                    text = self.resolver.string(item, self.ctx())
                    if text is None:
                        return None
                    names.append(text)
            return names or None
        return None

    def visit_Call(self, node):
        """Record a metric constructor call: its name(s), or the call under `unresolved`."""
        self.generic_visit(node)
        kind = self.kind_of(node.func)
        if kind is None:
            return
        args = {kw.arg: kw.value for kw in node.keywords if kw.arg}
        positional = list(node.args)
        name_node = args.get("name", positional[0] if positional else None)
        doc_node = args.get("documentation", positional[1] if len(positional) > 1 else None)
        if name_node is None or doc_node is None:
            return
        ctx = self.ctx()
        where = f"{self.path}:{node.lineno}"
        if self.loop_var(name_node):  # a loop's variable: the loop's table, never an earlier assignment
            names = self.loop_names(name_node)
        else:
            name = self.resolver.string(name_node, ctx)
            names = [name] if name is not None else None
        if not names:
            self.unresolved.append({"where": where, "name": ast.unparse(name_node)})
            return
        for name in names:
            self.record(kind, args, positional, name, where)

    def record(self, kind, args, positional, name, where):
        """One metric: namespace, subsystem and unit applied, its labels resolved."""
        ctx = self.ctx()
        parts = []
        for key in ("namespace", "subsystem"):
            if key in args:
                part = self.resolver.string(args[key], ctx)
                if part is None:
                    self.unresolved.append({"where": where, "name": f"{key}={ast.unparse(args[key])} + {name}"})
                    return
                parts.append(part)
        name = "_".join(p for p in parts + [name] if p)
        unit = self.resolver.string(args["unit"], ctx) if "unit" in args else ""
        if unit and not name.endswith("_" + unit):
            name += "_" + unit
        label_node = args.get("labelnames", positional[2] if len(positional) > 2 else None)
        labels, complete = self.resolver.labels(label_node, ctx)
        kind_name, extra, why = kind
        entry = {"type": kind_name, "labels": labels + extra, "labels_complete": complete, "where": where}
        if not complete:
            entry["labels_from"] = ast.unparse(label_node)
        if why:
            entry["via"] = why
        self.found.append((name, entry))


def family(name: str, kind: str) -> str:
    """The family name prometheus_client keeps: a counter's `_total` is dropped (and written back on its sample)."""
    return name[:-len("_total")] if kind == "counter" and name.endswith("_total") else name


def exposed_names(name: str, kind: str | None) -> list[str]:
    """The sample names a family writes, as prometheus_client writes them."""
    if kind is None:
        return [name]
    return [name + suffix for suffix in SUFFIXES[kind]]


def read_python(wheel: Path, prefix: str) -> tuple[dict, list, int, dict]:
    """(metrics, unresolved calls, files read, other literals) of a wheel's Python sources. Other literals: strings
    that start with the engine's prefix and name no metric found (a metric a factory makes from a table, as vLLM 0.33's
    KV offload connector's `metric_cls(**kwargs)`; a name in PromQL text or a benchmark's key), {name: [files]}."""
    metrics, unresolved, files, literals = {}, [], 0, {}
    literal = re.compile(r"""["'](""" + re.escape(prefix) + r"""[A-Za-z0-9_:]+)["']""")
    with zipfile.ZipFile(wheel) as archive:
        for member in sorted(archive.namelist()):
            if not member.endswith(".py"):
                continue
            text = archive.read(member).decode("utf-8", "replace")
            for found in literal.findall(text):
                if not found.startswith(prefix + ":"):  # vllm::op_name: a torch custom op
                    literals.setdefault(found, set()).add(member)
            if "prometheus_client" not in text and not re.search(r"\b_(counter|gauge|histogram|summary)_cls\(", text):
                continue
            files += 1
            try:
                tree = ast.parse(text, filename=member)
            except SyntaxError as err:
                unresolved.append({"where": member, "name": f"not parsed: {err}"})
                continue
            calls = MetricCalls(member, tree)
            calls.visit(tree)
            unresolved += calls.unresolved
            for name, entry in calls.found:
                fam = family(name, entry["type"])
                if fam in metrics:
                    _merge(metrics[fam], entry)
                else:
                    metrics[fam] = dict(entry, where=[entry["where"]])
    for fam, entry in metrics.items():
        entry["exposed"] = exposed_names(fam, entry["type"])
    known = set(metrics) | {name for entry in metrics.values() for name in entry["exposed"]}
    other = {name: sorted(where)[:3] for name, where in sorted(literals.items()) if name not in known}
    return dict(sorted(metrics.items())), unresolved, files, other


def _merge(old: dict, new: dict):
    """A family defined in two places (e.g. one class per mode): one entry, every place, the labels of each."""
    old["where"].append(new["where"])
    if new["type"] != old["type"]:
        old.setdefault("other_types", []).append(new["type"])
    if new["labels"] != old["labels"] or new["labels_complete"] != old["labels_complete"]:
        old.setdefault("label_variants", []).append({"labels": new["labels"],
                                                     "labels_complete": new["labels_complete"]})


# --------------------------------------------------------------------------- routers: the binary's string table


RUST_PATH = re.compile(rb"[a-z][0-9]+(?:[a-z_]|$)")


def read_binary(wheel: Path, member_stem: str, prefix: str) -> tuple[dict, list, str]:
    """(metrics, unresolved runs, the member read) of a router's compiled module."""
    with zipfile.ZipFile(wheel) as archive:
        member = next(n for n in archive.namelist() if n.startswith(member_stem) and ".so" in n)
        data = archive.read(member)
    pre = prefix.encode()
    metrics, unresolved = {}, {}
    for match in re.finditer(rb"[a-z0-9_:]*" + re.escape(pre) + rb"[a-z0-9_]*", data):
        pieces = match.group().split(pre)
        for index, rest in enumerate(pieces[1:], start=1):
            if not rest or rest[:1].isdigit() or rest.startswith(b"rs"):  # Rust symbols: vllm_router_rs10middleware...
                continue
            # a Rust path in a mangled symbol: a crate named with the prefix, then length-prefixed segments
            # (smg's crates smg_auth, smg_mesh, ...: _8smg_auth10middleware10check_role), not a series name
            if RUST_PATH.search(rest):
                continue
            name = (pre + rest).decode()
            last = index == len(pieces) - 1
            after = data[match.end():match.end() + 200] if last else b""
            if last and after[:1].isupper():  # the description follows: the name ends here
                help_text = re.match(rb"[\x20-\x7e]*", after).group().split(pre)[0].decode()
                entry = metrics.setdefault(name, {"type": None, "labels": None, "labels_complete": False,
                                                  "exposed": [name], "where": [], "description_run": help_text[:160]})
                offset = match.start() + len(b"".join(pieces[:index])) + len(pre) * (index - 1)
                entry["where"].append(f"{member}+{offset}")
            else:
                unresolved.setdefault(name, {"where": f"{member}+{match.start()}", "name": name,
                                             "run": match.group().decode()[:200],
                                             "followed_by": "another prefixed string" if not last else
                                             repr(data[match.end():match.end() + 12])})
    # A run that is a described name with a lowercase literal glued to it is not another name.
    left = [u for name, u in sorted(unresolved.items()) if name not in metrics]
    return dict(sorted(metrics.items())), left, member


# --------------------------------------------------------------------------- documents


def wheel_source(engine: str, version: str, wheel: Path, sha: str) -> str:
    """The `source` field, as engine_flags writes it."""
    package = ENGINES[engine]["package"]
    commit = None
    with zipfile.ZipFile(wheel) as archive:
        for rel in ("_version.py", "version.py"):
            member = f"{ENGINES[engine]['module']}/{rel}"
            if member in archive.namelist():
                found = re.search(r"commit_id\s*=\s*['\"]([^'\"]+)['\"]", archive.read(member).decode())
                commit = commit or (found and found.group(1))
    where = f"commit_id {commit}" if commit else "wheel records no commit id"
    return f"PyPI wheel {package}=={version}: {wheel.name} sha256:{sha} ({where})"


def document(engine: str, version: str, pins: dict, cache: Path) -> dict:
    """The fixture document of one release."""
    spec = ENGINES[engine]
    info = pins.get((engine, version), {"why": ["asked on the command line"], "serves": None})
    doc = {"engine": engine, "package": spec["package"], "version": version,
           "generated": datetime.date.today().isoformat(), "tool": TOOL, "pinned_by": info["why"]}
    started = time.monotonic()
    wheel, why = fetch_wheel(engine, version, cache)
    if wheel is None:
        doc.update(read=False, reason=why, source=None, method=None, metrics={}, exposed=[], unresolved=[])
        if engine == "trtllm":
            doc["not_used"] = (
                "The code index holds two copies of tensorrt_llm/metrics/collector.py, neither known to be this tag: "
                "NVIDIA/TensorRT-LLM@89fd9b74ab7ae753b4c6b3db25a400dca7ea54a0 (four series, named without a "
                "trtllm_ prefix: request_success_total, e2e_request_latency_seconds, time_to_first_token_seconds, "
                "time_per_output_token_seconds, request_queue_time_seconds) and "
                "@050f80def8df236e326949c8bd9dee10fd896a83 (about sixty trtllm_-prefixed series). They disagree "
                "on the very names the collection uses, so neither is recorded as this release's; regenerate with "
                "the wheel (--wheel PATH) where it can be had.")
        return doc
    sha = engine_flags.sha256_of(wheel)
    doc.update(read=True, source=wheel_source(engine, version, wheel, sha),
               wheel={"file": wheel.name, "sha256": sha, "bytes": wheel.stat().st_size})
    if spec["reader"] == "python":
        metrics, unresolved, files, other = read_python(wheel, spec["prefix"])
        doc["other_literals"] = other
        doc["method"] = (f"static, no import: ast of the {files} .py files of the wheel that mention prometheus_client "
                         "(or call a _<kind>_cls); "
                         "calls of prometheus_client Counter/Gauge/Histogram/Summary/Info/Enum (imported, "
                         "prometheus_client.X, or a class attribute bound to one) and of pass-through wrappers "
                         f"({', '.join(sorted(WRAPPERS))}) with a documentation argument; name and labelnames "
                         "resolved within the file (a loop over a literal table included); exposed names as "
                         "prometheus_client writes them. other_literals: strings with the engine's prefix that no "
                         "resolved call defines (a factory-made metric, PromQL text, a benchmark key), not recorded "
                         "as metrics")
    else:
        metrics, unresolved, member = read_binary(wheel, spec["binary"], spec["prefix"])
        doc["method"] = (f"static, from the string table of the compiled router {member} (Rust; the names are "
                         f"literals there): runs starting with {spec['prefix']!r} that end where a capitalised "
                         "description begins (the metrics crate's describe_*!(name, description)); type, labels "
                         "and histogram rendering are not in the string table (null)")
    if info.get("serves"):
        doc["serves"] = "-".join(info["serves"])
        doc["serves_why"] = ("a platform plugin: the API server and its /metrics are those of the vLLM release it runs "
                             "on; the names it adds are in `metrics`")
    doc.update(metrics=metrics, exposed=sorted({n for m in metrics.values() for n in m["exposed"]}),
               unresolved=unresolved)
    doc["read_seconds"] = round(time.monotonic() - started, 1)
    return doc


def write(doc: dict, out_dir: Path) -> Path:
    """Write one document; the read time goes to the terminal only (the file does not change with the machine)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    out = out_dir / f"engine_metrics_{doc['engine']}-{doc['version']}.json"
    seconds = doc.pop("read_seconds", None)
    out.write_text(json.dumps(doc, indent=1) + "\n")
    shown = out.relative_to(REPO_ROOT) if out.is_relative_to(REPO_ROOT) else out
    if doc["read"]:
        size = doc["wheel"]["bytes"] / 1e6
        print(f"wrote {shown}: "
              f"{len(doc['metrics'])} families, {len(doc['exposed'])} exposed names, {len(doc['unresolved'])} "
              f"unresolved ({doc['wheel']['file']}, {size:.1f} MB, read in {seconds} s)")
    else:
        print(f"wrote {shown}: NOT READ: {doc['reason']}")
    return out


def parse_args(argv: list[str]) -> argparse.Namespace:
    """Command-line arguments."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--engine", choices=sorted(ENGINES))
    parser.add_argument("--version")
    parser.add_argument("--wheel", type=Path, help="with --engine/--version: read this wheel instead of the cache's")
    parser.add_argument("--out-dir", type=Path, default=OUT_DIR)
    parser.add_argument("--cache", type=Path, default=CACHE)
    parser.add_argument("--list", action="store_true", help="print the pinned releases and exit")
    args = parser.parse_args(argv)
    if bool(args.engine) != bool(args.version):
        parser.error("--engine and --version go together")
    if args.wheel and not args.engine:
        parser.error("--wheel needs --engine and --version")
    return args


def main(argv: list[str] | None = None) -> int:
    """Entry point."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    pins = pinned_releases()
    if args.list:
        for (engine, version), info in pins.items():
            print(f"{engine} {version}: {'; '.join(info['why'])}")
        return 0
    wanted = [(args.engine, args.version)] if args.engine else list(pins)
    for engine, version in wanted:
        if args.wheel:
            dest = args.cache / "wheels"
            dest.mkdir(parents=True, exist_ok=True)
            target = dest / args.wheel.name
            if not target.exists():
                target.write_bytes(args.wheel.read_bytes())
        write(document(engine, version, pins, args.cache), args.out_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
