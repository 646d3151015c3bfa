"""The weights peer cache belongs to kimi_weights: its tasks, templates and variables live in that role; caddy_proxy
only installs the Caddy it runs (tasks_from=install) and knows nothing of it."""
import os
import re

import jinja2
import jinja2.meta
import yaml

from ansible_collections.kimi.deploy.plugins.module_utils._model.ports import ROLE_PORTS

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
WEIGHTS = os.path.join(ROOT, "roles", "kimi_weights")
CADDY = os.path.join(ROOT, "roles", "caddy_proxy")


def read(*parts):
    with open(os.path.join(*parts)) as handle:
        return handle.read()


def test_the_peer_cache_templates_read_only_kimi_weights_variables():
    env = jinja2.Environment()
    for name in ("kimi-peer-cache.Caddyfile.j2", "kimi-peer-cache.service.j2"):
        used = jinja2.meta.find_undeclared_variables(env.parse(read(WEIGHTS, "templates", name)))
        assert used and all(re.match(r"^_?kimi_weights_", v) or v == "ansible_managed" for v in used), (name, used)
    defaults = yaml.safe_load(read(WEIGHTS, "defaults", "main.yml"))
    role_vars = yaml.safe_load(read(WEIGHTS, "vars", "main.yml"))
    for variable in ("kimi_weights_peer_port", "kimi_weights_peer_address", "kimi_weights_peer_allow",
                     "kimi_weights_peer_key"):
        assert variable in defaults, variable
    for variable in ("_kimi_weights_peer_config", "_kimi_weights_peer_unit", "_kimi_weights_peer_root",
                     "_kimi_weights_peer_internal_root"):
        assert variable in role_vars, variable
    assert ROLE_PORTS["kimi_weights_peer_port"][0] == "kimi_weights"


def test_kimi_weights_runs_its_own_peer_cache_and_asks_caddy_proxy_only_for_the_package():
    download = yaml.safe_load(read(WEIGHTS, "tasks", "download.yml"))
    [serve] = [t for t in download if t["name"].startswith("Serve this host's verified blobs")]
    assert serve["ansible.builtin.include_tasks"] == "peer_cache.yml"
    tasks = yaml.safe_load(read(WEIGHTS, "tasks", "peer_cache.yml"))
    includes = [t["ansible.builtin.include_role"] for t in tasks if "ansible.builtin.include_role" in t]
    assert includes == [{"name": "kimi.deploy.caddy_proxy", "tasks_from": "install"}]
    specs = yaml.safe_load(read(CADDY, "meta", "argument_specs.yml"))["argument_specs"]
    assert list(specs["install"]["options"]) == ["caddy_proxy_package"] and "peer_cache" not in specs


def test_caddy_proxy_knows_nothing_of_the_peer_cache():
    hits = []
    for folder, _dirs, files in os.walk(CADDY):
        for name in files:
            assert "peer" not in name, name
            for number, line in enumerate(read(folder, name).splitlines(), 1):
                if re.search(r"caddy_proxy_peer|peer_cache|peer_report", line):
                    hits.append("%s:%d" % (os.path.relpath(os.path.join(folder, name), ROOT), number))
    assert hits == []


def test_the_peer_cache_serves_published_kernel_caches_only():
    """Issue 39: <key>.verified and <key>.tar from kimi_serve's kernel folder; the live key folders, temporary archives
    and fetches are not served."""
    caddyfile = read(WEIGHTS, "templates", "kimi-peer-cache.Caddyfile.j2")
    [pattern] = re.findall(r"@kernels path_regexp (\S+)", caddyfile)
    key = "vllm-0.11.0-0123456789abcdef01234567"
    for served in ("/kernels/%s.tar" % key, "/kernels/%s.verified" % key):
        assert re.match(pattern, served), served
    for hidden in ("/kernels/%s/torch_compile_cache/x" % key, "/kernels/.%s.tar.abc" % key, "/kernels/%s" % key,
                   "/kernels/.bundle/%s.tar" % key, "/kernels/.%s.fetch-x/archive" % key, "/kernels/../x.tar"):
        assert not re.match(pattern, hidden), hidden
    role_vars = read(WEIGHTS, "vars", "main.yml")
    assert "roles/kimi_serve/defaults/main.yml" not in role_vars  # read relative to the role, as installed
    assert "/../kimi_serve/defaults/main.yml" in role_vars and "kimi_serve_kernel_cache_dir" in role_vars


def test_kimi_serve_fetches_kernel_caches_from_the_peers_kimi_weights_keeps():
    download = yaml.safe_load(read(WEIGHTS, "tasks", "download.yml"))
    [keep] = [t for t in download if "__kimi_weights_kernel_peers" in str(t.get("ansible.builtin.set_fact"))]
    assert keep["no_log"] is True and set(keep["ansible.builtin.set_fact"]["__kimi_weights_kernel_peers"]) == {
        "peers", "ca_file", "key"}
    configure = yaml.safe_load(read(ROOT, "roles", "kimi_serve", "tasks", "configure.yml"))
    [fetch] = [t for t in configure if "kimi.deploy.kernel_cache" in t and t["kimi.deploy.kernel_cache"].get(
        "state") == "fetched"]
    args = fetch["kimi.deploy.kernel_cache"]
    assert "__kimi_weights_kernel_peers.peers" in args["peers"]
    assert "__kimi_weights_kernel_peers.key" in args["peer_key"]
