"""The metrics paths are declared once (module_utils/_model/metrics_routes.TABLE): caddy_proxy's engine route, kimi_metrics'
routes (filter kimi.deploy.metrics_routes) and kimi_monitoring's scrape jobs (filter kimi.deploy.prometheus_scrape)
are made from it; the job names the alert rules read are the table's; no role spells a route's path."""
import os
import re

import pytest
import yaml

from ansible.errors import AnsibleFilterError
from ansible_collections.kimi.deploy.plugins.filter import prometheus_scrape
from ansible_collections.kimi.deploy.plugins.filter.metrics_routes import metrics_routes
from ansible_collections.kimi.deploy.plugins.module_utils._model import metrics_routes as mr

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
UP = {"upstream": "127.0.0.1:9100", "upstream_path": "/metrics"}


def test_the_table_names_each_route_path_and_job_once_all_under_the_caddyfile_matcher():
    for field in ("name", "path", "job"):
        values = [r[field] for r in mr.TABLE]
        assert len(set(values)) == len(values), field
    assert mr.ENGINE_PATH == "/metrics" and mr.NAMES[0] == "engine"
    for route in mr.TABLE:
        # The Caddyfile refuses an API key on `path /metrics /metrics/*`; the route's matcher is @metrics_<name>.
        assert route["path"] == "/metrics" or route["path"].startswith("/metrics/"), route
        assert re.match(r"^[a-z]+$", route["name"]) and route["job"] == "kimi-" + route["name"], route
    with open(os.path.join(ROOT, "roles", "caddy_proxy", "templates", "Caddyfile.j2")) as handle:
        assert "@metrics_paths path /metrics /metrics/*" in handle.read()


def test_routes_come_in_the_tables_order_with_its_paths_and_absent_ones_left_out():
    out = metrics_routes({"caddy": {"upstream": "caddy", "upstream_path": "/metrics"}, "node": UP,
                          "accelerator": None, "router": {}})
    assert out == [{"name": "node", "path": "/metrics/node", "upstream": "127.0.0.1:9100", "upstream_path": "/metrics"},
                   {"name": "caddy", "path": "/metrics/caddy", "upstream": "caddy", "upstream_path": "/metrics"}]


@pytest.mark.parametrize(("given", "words"), [
    ({"nodes": UP}, "no metrics route named nodes (the routes: " + ", ".join(mr.NAMES) + ")"),
    ({"node": {"upstream": "127.0.0.1:9100"}}, "the node route needs upstream and upstream_path"),
    ([UP], "input must be a dict of upstreams by route name, got list"),
])
def test_a_route_the_table_lacks_or_an_incomplete_one_is_refused(given, words):
    with pytest.raises(AnsibleFilterError, match=re.escape(words)):
        metrics_routes(given)


def test_the_scrape_jobs_are_the_tables_and_the_engine_is_scraped_on_every_target():
    assert prometheus_scrape.JOBS is mr.JOBS
    paths = [r["path"] for r in mr.TABLE if r["name"] != "engine"]
    target = {"host": "gpu1", "address": "gpu1", "port": 443, "key": "k" * 40, "paths": paths}
    configs = prometheus_scrape.prometheus_scrape([target], key_dir="/k")["scrape_configs"]
    assert [(c["metrics_path"], c["job_name"]) for c in configs] == list(mr.JOBS)
    alone = prometheus_scrape.prometheus_scrape([dict(target, paths=[])], key_dir="/k")["scrape_configs"]
    assert [c["job_name"] for c in alone] == ["kimi-engine"]


def test_a_gateway_site_is_scraped_for_its_own_paths_only_beside_the_same_hosts_engine_site():
    """A serving host that is also a fleet gateway (kimi_monitoring's gateway targets: engine false): the engine and
    Caddy through its engine site, the router and the usage tap through its gateway site, one instance label."""
    engine = {"host": "gpu1", "address": "gpu1", "port": 443, "key": "k", "paths": ["/metrics/caddy"]}
    gateway = {"host": "gpu1", "address": "gpu1", "port": 8443, "key": "k", "engine": False,
               "paths": ["/metrics/gateway", "/metrics/usage"]}
    configs = prometheus_scrape.prometheus_scrape([engine, gateway], key_dir="/k")["scrape_configs"]
    jobs = dict((c["job_name"], [t["targets"][0] for t in c["static_configs"]]) for c in configs)
    assert jobs == {"kimi-engine": ["gpu1:443"], "kimi-caddy": ["gpu1:443"], "kimi-gateway": ["gpu1:8443"],
                    "kimi-usage": ["gpu1:8443"]}
    assert set(t["labels"]["instance"] for c in configs for t in c["static_configs"]) == {"gpu1"}


def test_the_alert_rules_and_their_tests_name_only_the_tables_jobs():
    jobs = set(job for _path, job in mr.JOBS)
    named = set()
    for path in (("roles", "kimi_monitoring", "templates", "kimi-alerts.yml.j2"),
                 ("tests", "fixtures", "prometheus", "kimi-alerts-test.yml")):
        with open(os.path.join(ROOT, *path)) as handle:
            named |= set(re.findall(r"""job[=:]\s*"?(kimi-[a-z]+)""", handle.read()))
    assert named and named <= jobs, named - jobs


def test_the_roles_build_their_routes_with_the_filter_and_spell_no_routes_path():
    with open(os.path.join(ROOT, "roles", "kimi_metrics", "tasks", "routes.yml")) as handle:
        text = handle.read()
    assert "kimi.deploy.metrics_routes" in text
    assert set(re.findall(r"'([a-z]+)': \{'upstream'", text)) == set(mr.NAMES) - {"engine", "gateway", "usage"}
    # the gateway's and its usage tap's routes are the gateway's own site (the model builds them with the same table)
    with open(os.path.join(ROOT, "plugins", "module_utils", "_model", "gateway.py")) as handle:
        gateway = handle.read()
    assert 'routes({"gateway": {' in gateway and '"usage": {' in gateway
    with open(os.path.join(ROOT, "roles", "caddy_proxy", "vars", "main.yml")) as handle:
        assert "kimi.deploy.metrics_routes" in yaml.safe_load(handle)["_caddy_proxy_metrics_routes"]
    # A route's path as a value ('/metrics/node', 'path': '/metrics') anywhere but the table: a second declaration.
    literal = re.compile(r"""['"](%s)['"]|['"]path['"]\s*:\s*['"]/metrics""" % "|".join(
        re.escape(r["path"]) for r in mr.TABLE if r["name"] != "engine"))
    hits = []
    for top in ("roles", "playbooks", "plugins"):
        for folder, _dirs, files in os.walk(os.path.join(ROOT, top)):
            for name in files:
                path = os.path.join(folder, name)
                if not name.endswith((".yml", ".j2", ".py")) or os.path.realpath(path) == os.path.realpath(mr.__file__):
                    continue
                with open(path) as handle:
                    hits += ["%s:%d" % (os.path.relpath(path, ROOT), n) for n, line in enumerate(handle, 1)
                             if literal.search(line)]
    assert hits == []
