"""Prose names the private modules where they are. Every `_name.py`, `_name.attr` (or `_pkg.module.attr`) and
`_model/...` / `_engines/...` path in plugins/, roles/, docs/docsite/rst/ and README.md resolves under
plugins/module_utils: a module moved or renamed (module_utils/_hf_cache.py is _hf/cache.py now, _engine_spec.py is
_engines/spec.py, _site_inputs.py is _model/site_inputs.py) leaves comments and docs naming the old one, and this test
finds them. A flat `_name` is a module or package directly under module_utils (the layout before _model/ and
_engines/), unless the file binds that name itself: an import alias (`import site as _site`) or another Python name,
or an Ansible variable (`register: _kimi_x`, a role's private variable, read in other files of the role)."""
import ast
import glob
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODULE_UTILS = os.path.join(ROOT, "plugins", "module_utils")
SCANNED = ("plugins", "roles", os.path.join("docs", "docsite", "rst"), "README.md")
EXTENSIONS = (".py", ".yml", ".yaml", ".j2", ".rst", ".md", ".sh", ".cfg", ".txt")
# Generated flag tables: an engine's own option names and choices (sglang's mxfp_w4a8), not prose about modules.
SKIPPED = (os.path.join("plugins", "module_utils", "_engines", "flags") + os.sep,)

WORD = r"_[a-z][a-z0-9_]*(?:<[a-z_]+>[a-z0-9_]*)*"  # a `<name>` placeholder matches any name: _engines/<name>.py
# Not inside a longer name, path or attribute chain (kimi_x, self._x, x._y.z, tensorrt_llm/_torch/...): a path is one
# from module_utils, written from there or from the collection's root.
START = r"(?<![\w./<>-])(?:plugins/module_utils/|module_utils/)?"
FILE = re.compile(START + r"(" + WORD + r")\.py\b")
PATH = re.compile(START + r"(" + WORD + r")/((?:[\w<>]+/)*[\w<>]+)(?:\.py\b)?")
DOTTED = re.compile(START + r"(" + WORD + r")((?:\.[A-Za-z_]\w*)+)")
# Names that Ansible and Jinja bind: a registered result, a loop variable, a Jinja set or for (in a module's EXAMPLES
# too); in YAML and Jinja files, a fact or var key as well (in Python, `- _name:` is a docstring's list).
ANSIBLE_NAME = re.compile(r"(?:register|loop_var|index_var):\s*(_\w+)|\{%-?\s*(?:set|for)\s+(_\w+)")
YAML_KEY = re.compile(r"^\s*-?\s*(_\w+):", re.M)
YAML = (".yml", ".yaml", ".j2")
RST_TARGET = re.compile(r"^\.\. _")  # `.. _ansible_collections.kimi.deploy.docsite.x:` is a label


def module(parts):
    """The file or folder of module_utils that the path `parts` names (a `<...>` placeholder matches any name), or
    None."""
    pattern = os.path.join(MODULE_UTILS, *(re.sub(r"<[^>]*>", "*", part) for part in parts))
    for candidate in (pattern + ".py", os.path.join(pattern, "__init__.py")):
        found = sorted(glob.glob(candidate))
        if found:
            return found[0]
    return None


def top_level_names(path):
    with open(path, encoding="utf-8") as handle:
        return python_names(handle.read(), top=True)


def python_names(text, top=False):
    """The names a Python file binds (imports and their aliases, definitions, arguments, assignments); `top`: those
    of its module namespace only."""
    names = set()
    tree = ast.parse(text)
    for node in (tree.body if top else ast.walk(tree)):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(name.id for target in targets for name in ast.walk(target) if isinstance(name, ast.Name))
    return names


def resolves(first, rest):
    """Whether `first` + the dotted or slashed names `rest` name a module of module_utils (then perhaps a name it
    defines)."""
    found = module([first])
    if found is None:
        return False
    for index, part in enumerate(rest):
        if found.endswith("__init__.py"):
            deeper = module([first] + rest[:index + 1])
            if deeper is not None:
                found = deeper
                continue
        # a name of that module: its functions, classes, constants and imports
        return "<" in part or part in top_level_names(found)
    return True


def ansible_bound(path, text):
    names = set(name for match in ANSIBLE_NAME.finditer(text) for name in match.groups() if name)
    if path.endswith(YAML):
        names.update(YAML_KEY.findall(text))
    return names


def unresolved(path, text, ansible_names=frozenset()):
    """[(line, reference)] of the module references in `text` that name nothing under module_utils."""
    local = ansible_bound(path, text)
    if path.endswith(".py"):
        local |= python_names(text)
    elif path.endswith(YAML):
        local |= ansible_names  # a role's private `_<role>_x` is set in one file and read in others
    misses = []
    for number, line in enumerate(text.splitlines(), 1):
        if RST_TARGET.match(line):
            continue
        spans = []
        for match in PATH.finditer(line):
            spans.append(match.span())
            if match.group(1) not in local and not resolves(match.group(1), match.group(2).split("/")):
                misses.append((number, match.group(0)))
        for match in FILE.finditer(line):
            # `_name.py` is a file: the package _engines/ is not `_engines.py`
            if not any(start <= match.start() < end for start, end in spans) and match.group(1) not in local \
                    and not glob.glob(os.path.join(MODULE_UTILS, re.sub(r"<[^>]*>", "*", match.group(1)) + ".py")):
                misses.append((number, match.group(0)))
        for match in DOTTED.finditer(line):
            rest = match.group(2).split(".")[1:]
            if rest[0] != "py" and match.group(1) not in local and not resolves(match.group(1), rest):
                misses.append((number, match.group(0)))
    return misses


def scanned_files():
    for top in SCANNED:
        start = os.path.join(ROOT, top)
        if os.path.isfile(start):
            yield top
            continue
        for folder, _dirs, files in os.walk(start):
            for name in sorted(files):
                path = os.path.relpath(os.path.join(folder, name), ROOT)
                if name.endswith(EXTENSIONS) and "__pycache__" not in path and not path.startswith(SKIPPED):
                    yield path


def read(path):
    with open(os.path.join(ROOT, path), encoding="utf-8") as handle:
        return handle.read()


def all_ansible_names():
    """The variables the roles and playbooks bind (YAML and Jinja files)."""
    names = set()
    for top in ("roles", "playbooks"):
        for folder, _dirs, files in os.walk(os.path.join(ROOT, top)):
            for name in files:
                if name.endswith(YAML):
                    path = os.path.join(folder, name)
                    names.update(ansible_bound(path, read(path)))
    return frozenset(names)


def test_every_module_named_in_prose_exists():
    ansible_names = all_ansible_names()
    misses = ["%s:%d: %s" % (path, number, reference) for path in scanned_files()
              for number, reference in unresolved(path, read(path), ansible_names)]
    assert not misses, "names of modules that are not under plugins/module_utils:\n" + "\n".join(misses)


def test_the_scan_finds_the_old_names():
    assert unresolved("x.py", '"""The disk rule (_hf_cache.disk_report)."""\n') == [(1, "_hf_cache.disk_report")]
    assert unresolved("x.py", "# _hf.cache.disk_report, _hf/cache.py\n") == []
    assert unresolved("x.py", "# _hf.cache.no_such_rule\n") == [(1, "_hf.cache.no_such_rule")]
    assert unresolved("x.rst", "``_engine_spec.py`` and ``_engines/spec.py``\n") == [(1, "_engine_spec.py")]
    assert unresolved("x.rst", "``_engines.py`` is the registry, ``_engines.registry``\n") == [(1, "_engines.py")]
    assert unresolved("x.rst", "``plugins/module_utils/_engine_<name>.py``; ``_engines/<name>.py``\n") == [
        (1, "plugins/module_utils/_engine_<name>.py")]
    assert unresolved("x.rst", "``_model/site_input.py``, ``_site_inputs.INPUTS``\n") == [
        (1, "_model/site_input.py"), (1, "_site_inputs.INPUTS")]
    assert unresolved("x.rst", "``_model.site_inputs.INPUTS``, ``_model/site_inputs.py``\n") == []


def test_the_scan_keeps_what_a_file_binds_and_what_is_not_a_module():
    alias = "from a import site_inputs as _site_inputs\n# see _site_inputs.INPUTS\n_site_inputs.check(x)\n"
    assert unresolved("x.py", alias) == []
    assert unresolved("x.py", "def f(_gpus):\n    return _gpus.count  # _gpus.count\n") == []
    assert unresolved("x.yml", "- register: _kimi_x\n- debug: {msg: '{{ _kimi_x.stdout }}'}\n") == []
    assert unresolved("x.yml", "msg: '{{ _kimi_y.stdout }}'\n", frozenset(["_kimi_y"])) == []
    assert unresolved("x.py", "# _kimi_y.stdout\n", frozenset(["_kimi_y"])) == [(1, "_kimi_y.stdout")]
    assert unresolved("x.py", '"""\n- _checkpoints: the checkpoints, in _checkpoints.DRAFTS"""\n') == [
        (2, "_checkpoints.DRAFTS")]
    assert unresolved("x.py", "# kimi_site.x, self._cache.get, tensorrt_llm/_torch/ops.py, a_b.py\n") == []
    assert unresolved("x.rst", ".. _ansible_collections.kimi.deploy.docsite.x:\n") == []
