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
    """Issue 39: <key>.verified and <key>.tar from the deployment's kernel cache folder; the live key folders,
    temporary archives and fetches are not served."""
    caddyfile = read(WEIGHTS, "templates", "kimi-peer-cache.Caddyfile.j2")
    [pattern] = re.findall(r"@kernels path_regexp (\S+)", caddyfile)
    key = "vllm-0.11.0-0123456789abcdef01234567"
    for served in ("/kernels/%s.tar" % key, "/kernels/%s.verified" % key):
        assert re.match(pattern, served), served
    for hidden in ("/kernels/%s/torch_compile_cache/x" % key, "/kernels/.%s.tar.abc" % key, "/kernels/%s" % key,
                   "/kernels/.bundle/%s.tar" % key, "/kernels/.%s.fetch-x/archive" % key, "/kernels/../x.tar"):
        assert not re.match(pattern, hidden), hidden


def render_peer_cache(kernel_dir):
    text = read(WEIGHTS, "templates", "kimi-peer-cache.Caddyfile.j2")
    template = jinja2.Environment(trim_blocks=True).from_string(text)  # as ansible.builtin.template renders
    return template.render(ansible_managed="managed", kimi_weights_peer_address="gpu-1", kimi_weights_peer_port=8444,
                           kimi_weights_peer_allow=["10.0.0.0/8"], kimi_weights_peer_key="k" * 40,
                           _kimi_weights_peer_root="/hf/hub", kimi_weights_peer_kernel_dir=kernel_dir)


def test_the_peer_cache_serves_the_kernel_folder_it_is_given_and_none_without_one():
    """Issue 53: kimi_weights only transports. Its input kimi_weights_peer_kernel_dir defaults to the deployment's
    kimi_deployment.kernel_cache.host_dir (the model's), never to kimi_serve's variables or files; empty (a release
    that keeps no kernel cache) leaves the /kernels/ handler out (404, as any other name)."""
    served = render_peer_cache("/var/cache/kimi-k26/kernels")
    assert "handle @kernels {" in served and "root * /var/cache/kimi-k26/kernels\n" in served
    assert "@kernels" not in render_peer_cache("") and "handle @blob {" in render_peer_cache("")
    defaults = yaml.safe_load(read(WEIGHTS, "defaults", "main.yml"))
    assert defaults["kimi_weights_peer_kernel_dir"] == "{{ kimi_deployment.kernel_cache.host_dir | default('') }}"
    for folder in ("defaults", "vars", "tasks", "templates"):
        for name in os.listdir(os.path.join(WEIGHTS, folder)):
            text = read(WEIGHTS, folder, name)
            code = yaml.safe_load(text) if name.endswith(".yml") else text
            assert "kimi_serve" not in str(code), (folder, name)  # comments aside
            assert "role_path" not in text, (folder, name)


def test_kimi_serve_fetches_kernel_caches_from_the_peers_kimi_weights_publishes():
    """Issue 53: kimi_weights publishes the documented fact kimi_weights_peers (no_log: the fleet's key); kimi_serve
    takes it as its input kimi_serve_kernel_cache_peers (kimi_switch passes it) and reads no kimi_weights variable."""
    main = yaml.safe_load(read(WEIGHTS, "tasks", "main.yml"))
    [keep] = [t for t in main if "kimi_weights_peers" in (t.get("ansible.builtin.set_fact") or {})]
    published = set(keep["ansible.builtin.set_fact"]["kimi_weights_peers"])
    assert keep["no_log"] is True and published == {"peers", "ca_file", "key"}
    described = " ".join(yaml.safe_load(read(WEIGHTS, "meta", "argument_specs.yml"))["argument_specs"]["main"][
        "description"])
    assert "C(kimi_weights_peers)" in described and "C(kimi_serve_kernel_cache_peers)" in described
    serve = os.path.join(ROOT, "roles", "kimi_serve")
    option = yaml.safe_load(read(serve, "meta", "argument_specs.yml"))["argument_specs"]["main"]["options"][
        "kimi_serve_kernel_cache_peers"]
    assert option["type"] == "dict" and option["default"] == {} and set(option["options"]) == published
    assert option["options"]["key"]["no_log"] is True
    assert yaml.safe_load(read(serve, "defaults", "main.yml"))["kimi_serve_kernel_cache_peers"] == {}
    tasks = yaml.safe_load(read(serve, "tasks", "kernel_cache.yml"))
    [fetch] = [t for t in tasks if (t.get("kimi.deploy.kernel_cache") or {}).get("state") == "fetched"]
    args = fetch["kimi.deploy.kernel_cache"]
    assert (args["peers"], args["peer_key"], args["peer_ca_bundle"]) == (
        "{{ kimi_serve_kernel_cache_peers.peers }}", "{{ kimi_serve_kernel_cache_peers.key }}",
        "{{ kimi_serve_kernel_cache_peers.ca_file }}")
    assert fetch["when"] == "kimi_serve_kernel_cache_peers.peers | default([]) | length > 0"
    for folder, dirs, files in os.walk(serve):
        dirs[:] = [d for d in dirs if d != "__pycache__"]  # other tests import the role's Python files
        for name in files:
            assert not re.search(r"\b_{1,2}kimi_weights_", read(folder, name)), name  # none of its private names
