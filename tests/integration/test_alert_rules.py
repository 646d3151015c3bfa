"""kimi_monitoring's alert rules: the template rendered from the role's defaults, checked and unit-tested by promtool.

promtool runs in the harness image (kimi-test/debian-systemd:trixie-docker carries Debian's `prometheus` package, as
the hosts kimi_monitoring installs it on): `promtool check rules` on the rendered file, then `promtool test rules` on
tests/fixtures/prometheus/kimi-alerts-test.yml (a firing and a quiet case for every alert). Skipped only where there
is no `docker` command; an image without promtool is a failure (build it with tests/harness/prepare.sh).
"""
import json
import os
import shutil
import subprocess

import jinja2
import jinja2.meta
import pytest
import yaml

from ansible_collections.kimi.deploy.plugins.module_utils._model import platforms as _platforms

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ROLE = os.path.join(ROOT, "roles", "kimi_monitoring")
TEMPLATE = os.path.join(ROLE, "templates", "kimi-alerts.yml.j2")
DEFAULTS = os.path.join(ROLE, "defaults", "main.yml")
UNIT_TESTS = os.path.join(ROOT, "tests", "fixtures", "prometheus", "kimi-alerts-test.yml")
DASHBOARD = os.path.join(ROLE, "files", "kimi-k26-dashboard.json")
# Grafana's variables, as Grafana would interpolate them, so that promtool can parse the dashboard's queries.
GRAFANA_VARIABLES = {"$__rate_interval": "1m", "$instance": "gpu1|gpu2", "${datasource}": "prometheus"}
IMAGE = os.environ.get("KIMI_PROMTOOL_IMAGE", "kimi-test/debian-systemd:trixie-docker")
ALERTS = ["KimiEngineDown", "KimiVerifyFailing", "KimiAnswersWrong", "KimiKVCacheAlmostFull", "KimiQueueGrowing", "KimiGPUXidErrors",
          "KimiGPUMemoryErrors", "KimiGPUTooHot", "KimiWeightsDiskAlmostFull", "KimiReplicaMemberLost",
          "KimiReplicaRecovering", "KimiReplicaDown", "KimiRouterDown", "KimiPDWorkerDown", "KimiHostDown"]
PREFIX = "kimi_monitoring_alert_"


def defaults():
    with open(DEFAULTS, encoding="utf-8") as handle:
        return yaml.safe_load(handle) or {}


def source():
    with open(TEMPLATE, encoding="utf-8") as handle:
        return handle.read()


def render(trim_blocks=False):
    """Plain jinja2 with the role's defaults only (StrictUndefined: any other variable fails); trim_blocks as
    Ansible's template module sets it."""
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, trim_blocks=trim_blocks, keep_trailing_newline=True)
    values = defaults()
    # The role's vars/main.yml as Ansible makes them: the platforms' entries and each exporter's temperature limit.
    platforms = _platforms.entries()
    limits = dict((p["exporter"]["temperature"], values[p["exporter"]["temperature_threshold"]]) for p in platforms)
    return env.from_string(source()).render(_kimi_monitoring_platforms=platforms,
                                            _kimi_monitoring_temperature_limits=limits, **values)


def rules():
    groups = yaml.safe_load(render())["groups"]
    assert [g["name"] for g in groups] == ["kimi-k26"]
    return groups[0]["rules"]


def promtool(workdir, *args):
    """promtool in the harness image, with workdir mounted read-only at /w."""
    if shutil.which("docker") is None:
        pytest.skip("no docker command: promtool runs in %s" % IMAGE)
    probe = subprocess.run(["docker", "run", "--rm", "--entrypoint", "promtool", IMAGE, "--version"],
                           capture_output=True, text=True, check=False, timeout=120)
    assert probe.returncode == 0, (
        "promtool is not in %s (rc %d): rebuild it with tests/harness/prepare.sh (it adds Debian's prometheus "
        "package)\n%s%s" % (IMAGE, probe.returncode, probe.stdout, probe.stderr))
    return subprocess.run(["docker", "run", "--rm", "-v", "%s:/w:ro" % workdir, "-w", "/w", "--entrypoint", "promtool",
                           IMAGE] + list(args), capture_output=True, text=True, check=False, timeout=300)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """The rendered rules beside the unit-test file, as `rule_files: [kimi-alerts.yml]` expects."""
    path = tmp_path_factory.mktemp("kimi-alerts")
    (path / "kimi-alerts.yml").write_text(render(), encoding="utf-8")
    shutil.copy(UNIT_TESTS, str(path / "kimi-alerts-test.yml"))
    (path / "dashboard-queries.yml").write_text(yaml.safe_dump(dashboard_queries_as_rules()), encoding="utf-8")
    os.chmod(str(path), 0o755)  # the container's promtool reads it whatever its user
    return str(path)


def test_the_template_uses_only_the_alert_defaults():
    used = jinja2.meta.find_undeclared_variables(jinja2.Environment().parse(source()))
    alert_defaults = {name for name in defaults() if name.startswith(PREFIX)}
    # the platforms' temperature limits are the defaults each platform's exporter names (the role's vars/main.yml)
    platform_vars = {"_kimi_monitoring_platforms", "_kimi_monitoring_temperature_limits"}
    thresholds = {p["exporter"]["temperature_threshold"] for p in _platforms.entries()}
    assert used, "the template should take its thresholds from the defaults"
    assert sorted(used - alert_defaults - platform_vars) == [], "variables that are not kimi_monitoring_alert_* defaults"
    assert thresholds <= alert_defaults, "a platform names a threshold kimi_monitoring does not declare"
    assert sorted(alert_defaults - used - thresholds) == [], "alert defaults the template does not use"


def test_the_alert_defaults_sit_under_the_alerts_heading_each_commented():
    with open(DEFAULTS, encoding="utf-8") as handle:
        lines = handle.read().splitlines()
    heading = lines.index("# Alerts")
    names = [i for i, line in enumerate(lines) if line.startswith(PREFIX)]
    assert names and min(names) > heading
    for i in names:
        above = lines[i - 1]
        assert above.startswith("#") or above.startswith(PREFIX), "%s has no comment above it" % lines[i]


def test_ansible_and_plain_jinja2_render_the_same_rules():
    assert yaml.safe_load(render(trim_blocks=True)) == yaml.safe_load(render())


def test_every_alert_is_there_with_for_severity_summary_and_description():
    found = rules()
    assert [r["alert"] for r in found] == ALERTS
    for rule in found:
        assert rule.get("for"), rule["alert"]
        assert rule["labels"]["severity"] in ("critical", "warning"), rule["alert"]
        annotations = rule["annotations"]
        assert set(annotations) == {"summary", "description"}, rule["alert"]
        assert "{{ $labels.instance }}" in annotations["summary"] + annotations["description"], rule["alert"]
        assert ":" in annotations["description"], "%s: say what to do after the colon" % rule["alert"]


def test_the_engine_alerts_name_every_engine():
    by_name = {r["alert"]: r["expr"] for r in rules()}
    assert all(m in by_name["KimiKVCacheAlmostFull"]
               for m in ("vllm:kv_cache_usage_perc", "sglang:token_usage", "trtllm_kv_cache_utilization"))
    assert all(m in by_name["KimiQueueGrowing"]
               for m in ("vllm:num_requests_waiting", "sglang:num_queue_reqs", "trtllm_num_requests_waiting"))


def test_promtool_checks_the_rendered_rules(workdir):
    result = promtool(workdir, "check", "rules", "/w/kimi-alerts.yml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: %d rules found" % len(ALERTS) in result.stdout


def test_promtool_unit_tests_pass(workdir):
    result = promtool(workdir, "test", "rules", "/w/kimi-alerts-test.yml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_every_alert_has_a_firing_and_a_quiet_case():
    with open(UNIT_TESTS, encoding="utf-8") as handle:
        cases = [c for t in yaml.safe_load(handle)["tests"] for c in t["alert_rule_test"]]
    for name in ALERTS:
        mine = [c for c in cases if c["alertname"] == name]
        assert any(c.get("exp_alerts") for c in mine), "%s never fires in the promtool tests" % name
        assert any(not c.get("exp_alerts") for c in mine), "%s has no quiet case" % name


def dashboard_queries_as_rules():
    """Every query of the Grafana dashboard as a recording rule (Grafana's variables filled in), for promtool."""
    with open(DASHBOARD, encoding="utf-8") as handle:
        dashboard = json.load(handle)
    found = []
    for panel in dashboard["panels"] + [p for row in dashboard["panels"] for p in row.get("panels", [])]:
        for target in panel.get("targets", []):
            expr = target["expr"]
            for name, value in GRAFANA_VARIABLES.items():
                expr = expr.replace(name, value)
            assert "$" not in expr, "a Grafana variable promtool cannot read: %s" % target["expr"]
            found.append({"record": "kimi:dashboard_query_%d" % (len(found) + 1), "expr": expr})
    return {"groups": [{"name": "kimi-k26-dashboard", "rules": found}]}


def test_promtool_parses_every_dashboard_query(workdir):
    result = promtool(workdir, "check", "rules", "/w/dashboard-queries.yml")
    assert result.returncode == 0, result.stdout + result.stderr
