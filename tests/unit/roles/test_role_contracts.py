"""Roles by contract (issue 53): a value several roles need has one owner, and the others receive it as a documented
input (their meta/argument_specs.yml). No role, playbook or action plugin reads another role's registers or private
variables (_<role>_..., __<role>_...) or its files by path; no plugin opens a role's files at all. Each check is a
function over one file's text, shown below to report a synthetic violation, then run over roles/**, playbooks/** and
plugins/."""
import ast
import json
import os
import re

import pytest
import yaml

from ansible_collections.kimi.deploy.plugins.module_utils._model import gateway as _gateway
from ansible_collections.kimi.deploy.plugins.module_utils._model import host_values as _host_values
from ansible_collections.kimi.deploy.plugins.module_utils._model import ports as _ports

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
ROLES = sorted(d for d in os.listdir(os.path.join(ROOT, "roles")) if not d.startswith("."))
# a role's private prefix: its name without a private role's leading underscore (_image_archive -> image_archive)
PREFIXES = sorted(set(r.lstrip("_") for r in ROLES), key=len, reverse=True)
PRIVATE = re.compile(r"(?<![\w.])(_{1,2})(%s)_\w*" % "|".join(PREFIXES))
SET_FACT = ("set_fact", "ansible.builtin.set_fact", "ansible.legacy.set_fact")

# By-path reads that are justified, (file, the text read): the contract itself, or the collection's own files.
ALLOWED_PATHS = [
    # bundle.yml documents every input the bundle carries from the roles' contracts (their argument_specs)
    ("playbooks/bundle.yml", "playbook_dir ~ '/../roles/*/meta/argument_specs.yml'"),
    # the serving-time probe's scoring code is the collection's module_utils (the gate's own), not a role's
    ("roles/kimi_probes/tasks/main.yml", "{{ role_path }}/../../plugins/module_utils/_accuracy.py"),
    # ... and the chat formats it imports (the markup it scores)
    ("roles/kimi_probes/tasks/main.yml", "{{ role_path }}/../../plugins/module_utils/_chat_format.py"),
]
# Playbook-private names (playbooks/vars/site.yml, playbooks/tasks/*): the playbooks' own, whose prefix happens to be a
# role's (kimi_bundle: the bundle playbook's release loop).
PLAYBOOK_PRIVATE = ("_kimi_bundle_release",)


def own_role(path):
    """The role a file belongs to (a private role's name without its underscore), or None."""
    parts = path.split("/")
    return parts[1].lstrip("_") if parts[0] == "roles" and len(parts) > 2 else None


# A private role's own inputs take its name with its underscore (_image_archive_images): public, its options.
INPUT_PREFIXES = tuple(r + "_" for r in ROLES if r.startswith("_"))


def _foreign(name, role):
    found = PRIVATE.match(name)
    return (bool(found) and found.group(2) != role and not name.startswith(PLAYBOOK_PRIVATE)
            and not (len(found.group(1)) == 1 and name.startswith(INPUT_PREFIXES)))


def _text_lines(text, path):
    """(number, line) without YAML comments (a comment may name anything)."""
    for number, line in enumerate(text.splitlines(), 1):
        if path.endswith((".yml", ".yaml")):
            line = re.sub(r"(^|\s)#.*$", "", line)
        elif path.endswith(".py"):
            line = re.sub(r"(^|\s)#.*$", "", line)
        yield number, line


def hostvars_reads(path, text):
    """(1) hostvars[...].__<r>_ / hostvars[...]['__<r>_ of another role."""
    role, hits = own_role(path), []
    pattern = re.compile(r"hostvars\[(?:[^\[\]]|\[[^\]]*\])*\]\s*(?:\.|\[\s*['\"])(_{1,2}\w+)")
    for number, line in _text_lines(text, path):
        hits += ["%s:%d: %s" % (path, number, m.group(1)) for m in pattern.finditer(line) if _foreign(m.group(1), role)]
    return hits


def _var_keys(node):
    """Every key of a vars: block or a set_fact in a parsed YAML document."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "vars" and isinstance(value, dict) or key in SET_FACT and isinstance(value, dict):
                yield from value
            yield from _var_keys(value)
    elif isinstance(node, list):
        for item in node:
            yield from _var_keys(item)


def foreign_vars(path, text):
    """(2) a vars:/set_fact: key _<r>_/__<r>_ of another role (and a role's vars/ or defaults/ file's keys)."""
    if not path.endswith((".yml", ".yaml")):
        return []
    role = own_role(path)
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError:
        return []
    names = list(_var_keys(doc))
    if role and re.match(r"roles/[^/]+/(vars|defaults)/", path) and isinstance(doc, dict):
        names += list(doc)
    return ["%s: sets %s" % (path, name) for name in names if isinstance(name, str) and _foreign(name, role)]


BY_PATH = re.compile(r"role_path\s*~\s*['\"]/\.\./[^'\"]*['\"]|\{\{\s*role_path\s*\}\}/\.\./[^\s'\"]*"
                     r"|playbook_dir\s*~\s*['\"]/\.\./roles/[^'\"]*['\"]")


def path_reads(path, text):
    """(3) role_path ~ '/../...' / {{ role_path }}/../ and playbook_dir ~ '/../roles/' (a folded line too), but for
    ALLOWED_PATHS."""
    plain = "\n".join(line for _number, line in _text_lines(text, path))
    hits = []
    for found in BY_PATH.finditer(plain):
        read = re.sub(r"\s+", " ", found.group(0))
        if (path, read) not in ALLOWED_PATHS:
            hits.append("%s:%d: %s" % (path, plain.count("\n", 0, found.start()) + 1, read))
    return hits


def plugin_role_paths(path, text):
    """(4) a roles/ path in a plugin: a string (not a docstring) that is "roles" or names roles/ as a folder."""
    if not path.endswith(".py"):
        return []
    tree = ast.parse(text)
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body \
                and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant):
            docstrings.add(id(node.body[0].value))
    hits = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            if re.search(r"(^|/)roles($|/)", node.value) and "\n" not in node.value:
                hits.append("%s:%d: %r" % (path, node.lineno, node.value))
    return hits


def bare_reads(path, text):
    """(5) any read of another role's _<r>_/__<r>_ variable (comments aside)."""
    role, hits = own_role(path), []
    for number, line in _text_lines(text, path):
        hits += ["%s:%d: %s" % (path, number, m.group(0)) for m in PRIVATE.finditer(line) if _foreign(m.group(0), role)]
    return hits


CHECKS = [hostvars_reads, foreign_vars, path_reads, plugin_role_paths, bare_reads]


def files():
    """roles/**, playbooks/** (text files), plugins/**/*.py."""
    for top in ("roles", "playbooks", "plugins"):
        for folder, dirs, names in os.walk(os.path.join(ROOT, top)):
            dirs[:] = [d for d in dirs if d not in ("__pycache__", "molecule")]
            for name in names:
                path = os.path.relpath(os.path.join(folder, name), ROOT)
                if top == "plugins" and not name.endswith(".py"):
                    continue
                if not name.endswith((".yml", ".yaml", ".j2", ".py", ".sh", ".cfg", ".conf", ".json")):
                    continue
                with open(os.path.join(ROOT, path)) as handle:
                    yield path, handle.read()


# --- each check reports a synthetic violation (and leaves the file's own role alone) -------------------------------


@pytest.mark.parametrize("check, path, text", [
    (hostvars_reads, "roles/kimi_serve/tasks/x.yml", "- debug: {msg: \"{{ hostvars[h].__kimi_probes_gate }}\"}\n"),
    (hostvars_reads, "roles/kimi_serve/tasks/x.yml", "- debug: {msg: \"{{ hostvars[h]['__kimi_probes_gate'] }}\"}\n"),
    (hostvars_reads, "playbooks/site.yml", "- debug: {msg: \"{{ hostvars[groups.x[0]].__kimi_serve_verify }}\"}\n"),
    (foreign_vars, "roles/kimi_gateway/tasks/x.yml",
     "- ansible.builtin.include_role: {name: kimi.deploy.kimi_router}\n  vars:\n    _kimi_router_pinned: 1\n"),
    (foreign_vars, "playbooks/tasks/x.yml", "- ansible.builtin.set_fact:\n    __nvidia_host_x: 1\n"),
    (foreign_vars, "roles/kimi_serve/vars/main.yml", "_caddy_proxy_thing: 1\n"),
    (path_reads, "roles/kimi_serve/vars/main.yml",
     "x: \"{{ lookup('file', role_path ~ '/../caddy_proxy/defaults/main.yml') }}\"\n"),
    (path_reads, "roles/kimi_image/vars/main.yml", "x: \"{{ lookup('file', role_path ~ '/../../galaxy.yml') }}\"\n"),
    (path_reads, "playbooks/bundle.yml",
     "x: \"{{ lookup('file', playbook_dir ~ '/../roles/kimi_serve/defaults/main.yml') }}\"\n"),
    (path_reads, "roles/kimi_probes/tasks/main.yml", "- {src: \"{{ role_path }}/../kimi_serve/files/x.py\"}\n"),
    (path_reads, "playbooks/bundle.yml", "x: >-\n  {{ lookup('ansible.builtin.file', playbook_dir\n     ~ "
     "'/../roles/kimi_serve/defaults/main.yml') }}\n"),
    (plugin_role_paths, "plugins/action/x.py",
     "import os\nROLES = os.path.join(os.path.dirname(__file__), '..', '..', 'roles')\n"),
    (plugin_role_paths, "plugins/action/x.py", "def f():\n    return open('roles/kimi_gateway/defaults/main.yml')\n"),
    (bare_reads, "roles/kimi_gateway/tasks/x.yml", "- debug: {msg: \"{{ __kimi_router_package is changed }}\"}\n"),
    (bare_reads, "roles/kimi_monitoring/templates/x.j2", "{{ _caddy_proxy_internal_root }}\n"),
    (bare_reads, "plugins/action/x.py", "X = task_vars['_kimi_serve_url']\n"),
    (bare_reads, "roles/nvidia_host/tasks/x.yml", "- debug: {msg: \"{{ __image_archive_loaded }}\"}\n"),
])
def test_each_check_reports_a_violation(check, path, text):
    assert check(path, text), "%s missed %r" % (check.__name__, text)


@pytest.mark.parametrize("check, path, text", [
    (hostvars_reads, "roles/kimi_serve/tasks/x.yml", "- debug: {msg: \"{{ hostvars[h].__kimi_serve_gate }}\"}\n"),
    (hostvars_reads, "roles/kimi_switch/tasks/x.yml", "- debug: {msg: \"{{ hostvars[h].kimi_gateway }}\"}\n"),
    (foreign_vars, "roles/kimi_gateway/tasks/x.yml",
     "- ansible.builtin.include_role: {name: kimi.deploy.kimi_router}\n  vars:\n    kimi_router_pinned: 1\n"),
    (foreign_vars, "roles/_image_archive/tasks/x.yml", "- ansible.builtin.set_fact:\n    __image_archive_x: 1\n"),
    (foreign_vars, "roles/nvidia_host/tasks/x.yml",
     "- ansible.builtin.include_role: {name: kimi.deploy._image_archive}\n  vars:\n    _image_archive_dir: /x\n"),
    (path_reads, "playbooks/bundle.yml",
     "x: \"{{ query('fileglob', playbook_dir ~ '/../roles/*/meta/argument_specs.yml') }}\"\n"),
    (plugin_role_paths, "plugins/action/x.py", "def f():\n    \"\"\"Reads no roles/ file.\"\"\"\n    return 1\n"),
    (bare_reads, "roles/kimi_gateway/tasks/x.yml", "# once __kimi_router_package, now kimi_router_report\n- x: 1\n"),
    (bare_reads, "roles/kimi_serve/tasks/x.yml", "- debug: {msg: \"{{ _kimi_serve_url }}\"}\n"),
])
def test_a_role_s_own_names_and_the_allowed_reads_pass(check, path, text):
    assert check(path, text) == []


# What each check covers: the plugins that run on the controller with the task's variables (the action plugins and
# their plugin_utils); every plugin for the roles/ paths. The model's tables (module_utils/_model) name the owners'
# variables, private constants included: that is their job.
CONTROLLER = ("plugins/action/", "plugins/plugin_utils/")


def covered(check, path):
    return not path.startswith("plugins/") or check is plugin_role_paths or path.startswith(CONTROLLER)


@pytest.mark.parametrize("check", CHECKS, ids=[c.__name__ for c in CHECKS])
def test_no_file_reads_another_role_s_privates_or_files(check):
    hits = []
    for path, text in files():
        if covered(check, path):
            hits += check(path, text)
    assert hits == []


# --- one owner, one default: the model's tables equal the owners' literals ------------------------------------------


def _load(role, *parts):
    with open(os.path.join(ROOT, "roles", role, *parts)) as handle:
        return yaml.safe_load(handle) or {}


@pytest.mark.parametrize("variable", sorted(_ports.ROLE_PORTS))
def test_the_port_table_holds_the_owners_defaults(variable):
    role, _what, _group, default = _ports.ROLE_PORTS[variable]
    assert _load(role, "defaults", "main.yml")[variable] == default


@pytest.mark.parametrize("key", sorted(_gateway.SETTINGS))
def test_the_gateway_table_holds_kimi_gateway_s_defaults(key):
    variable, default = _gateway.SETTINGS[key]
    assert _load("kimi_gateway", "defaults", "main.yml")[variable] == default


@pytest.mark.parametrize("key", sorted(_host_values.HOST_PATHS))
def test_the_host_values_table_holds_the_owners_defaults(key):
    variable, role, default = _host_values.HOST_PATHS[key]
    where = "vars" if variable.startswith("_") else "defaults"
    assert _load(role, where, "main.yml")[variable] == default


def test_the_benchmark_s_fallbacks_are_the_tables():
    """playbooks/bench.yml resolves no deployment: kimi_switch's bench then names the owners' defaults, these."""
    with open(os.path.join(ROOT, "roles", "kimi_switch", "tasks", "bench.yml")) as handle:
        text = handle.read()
    for key in ("env_file", "ca_root"):
        assert "else '%s'" % _host_values.HOST_PATHS[key][2] in text, key
    assert "caddy_proxy_https_port | default(%d)" % _ports.ROLE_PORTS[_host_values.PROXY_PORT][3] in text


def test_no_plugin_reads_a_role_s_defaults():
    """The action plugins take every default from the model's tables: none opens roles/ (check 4 above), and the
    helpers they share are controller-side plugin_utils, not another action plugin."""
    for name in os.listdir(os.path.join(ROOT, "plugins", "action")):
        if name.endswith(".py"):
            with open(os.path.join(ROOT, "plugins", "action", name)) as handle:
                assert "plugins.action." not in handle.read(), name


def test_host_paths_and_proxy_from_the_table():
    assert _host_values.host_paths({}) == dict((k, v[2]) for k, v in _host_values.HOST_PATHS.items())
    paths = _host_values.host_paths({"caddy_proxy_drain_file": "/run/drain", "_caddy_proxy_internal_root": "/x"})
    assert paths["drain_file"] == "/run/drain"
    assert paths["ca_root"] == _host_values.HOST_PATHS["ca_root"][2]  # a constant: no host sets it
    assert _host_values.proxy("gpu-01", None, 443) == {
        "address": "gpu-01", "https_port": 443, "url": "https://gpu-01:443"}
    assert json.dumps(_host_values.proxy("gpu-01", "api.example", 8443))
