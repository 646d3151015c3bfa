"""Every series name the collection reads or writes, checked against what the RELEASED engines and routers define.

The releases' names are data: tests/fixtures/engine_metrics/engine_metrics_<engine>-<version>.json, one a pinned
release, written by tools/engine_metrics.py from the release's wheel (`make engine-metrics`). Until these tests the
names were checked only against the engine double (tests/fixtures/prometheus/scraped-series.txt is made from it), so
a rename in a real release would have gone unseen: an empty panel, an alert that never fires, a canary that skips the
TTFT/ITL comparison because the histogram is missing (_model/canary.py).

What is checked, and against what:
- the Grafana dashboard (roles/kimi_monitoring/files/kimi-k26-dashboard.json), the alert rules
  (roles/kimi_monitoring/templates/kimi-alerts.yml.j2, rendered from the role's defaults), the engines' declared
  series (serving_metrics: what the canary compares, the TTFT and ITL ones as histograms; the speculative and KV
  offload series) and the routers' outcome counters (_engines/routers.py), and the engine double's /metrics text:
  an engine or router series (vllm:, sglang:, trtllm_, smg_, vllm_router_) must be in the data of EVERY pinned
  release of its engine (any of them may be deployed), its selector labels among the release's labels where the
  release's label list is complete;
- the collection's own series (kimi_*) against the `# TYPE` lines of the files that write them (roles/*: the textfile
  collectors, the usage tap, the probe, the watchdog), as make_scraped_series.own_series() reads them (the one reader:
  scraped-series.txt's kimi_* part comes from it too), and the other exporters' (dcgm-exporter, npu-exporter, node
  exporter, Caddy, Prometheus's own) against the lists tests/fixtures/prometheus/make_scraped_series.py declares with
  their upstream sources;
- every series the dashboard and the alert rules use against scraped-series.txt (what a host's scrape jobs expose).
A release that could not be read (the JSON says `read: false` and why: TensorRT-LLM 1.3.0rc17, whose wheel is not on
PyPI) checks nothing; test_only_trtllm_is_unread keeps that list from growing unseen.
"""
import copy
import glob
import json
import os
import re
import sys
import zipfile

import jinja2
import pytest
import yaml

from ansible_collections.kimi.deploy.plugins.module_utils._engines.registry import ENGINES
from ansible_collections.kimi.deploy.plugins.module_utils._engines.routers import ROUTERS
from ansible_collections.kimi.deploy.plugins.module_utils._model import platforms as _platforms

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
DATA = os.path.join(ROOT, "tests", "fixtures", "engine_metrics")
PROMETHEUS_FIXTURES = os.path.join(ROOT, "tests", "fixtures", "prometheus")
ROLES = os.path.join(ROOT, "roles")
DASHBOARD = os.path.join(ROLES, "kimi_monitoring", "files", "kimi-k26-dashboard.json")
ALERTS = os.path.join(ROLES, "kimi_monitoring", "templates", "kimi-alerts.yml.j2")
ALERT_DEFAULTS = os.path.join(ROLES, "kimi_monitoring", "defaults", "main.yml")
ENGINE_DOUBLE = os.path.join(ROOT, "tests", "doubles", "engine")
TOOLS = os.path.join(ROOT, "tools")

for _path in (HERE, PROMETHEUS_FIXTURES, ENGINE_DOUBLE, TOOLS):
    if _path not in sys.path:
        sys.path.insert(0, _path)
# pylint: disable=wrong-import-position,wrong-import-order
import engine_metrics  # noqa: E402  tools/engine_metrics.py
import make_scraped_series  # noqa: E402
from kimi_engine_double import metrics as double_metrics  # noqa: E402
from test_dashboard import dashboard_metric_names, promql_metric_names, scraped_series, tokens  # noqa: E402

# Series prefix -> the engine (or router) whose releases define it. Engine families: a registry build's `name`
# (vLLM-Ascend and SGLang-Ascend are vllm and sglang builds).
PREFIXES = (("vllm_router_", "vllm-router"), ("smg_", "smg"), ("vllm:", "vllm"), ("sglang:", "sglang"),
            ("trtllm_", "trtllm"))
# Labels Prometheus puts on every series it scrapes (kimi_monitoring's targets: prometheus_scrape's instance and
# replica, the job), and a histogram bucket's bound: never the release's to define.
TARGET_LABELS = {"__name__", "job", "instance", "replica"}
UNREAD = {"trtllm-1.3.0rc17"}


# ---- the releases' data --------------------------------------------------------------------------------------------
def load_releases(directory=DATA):
    """{"vllm-0.22.1": document} of every recorded release."""
    out = {}
    for path in sorted(glob.glob(os.path.join(directory, "engine_metrics_*.json"))):
        with open(path, encoding="utf-8") as handle:
            doc = json.load(handle)
        out["%s-%s" % (doc["engine"], doc["version"])] = doc
    return out


RELEASES = load_releases()


def pinned():
    """{(engine, version): {why, serves}} of every release the collection pins, as the tool finds them."""
    return engine_metrics.pinned_releases()


def releases_of(engine):
    """The release ids of every pinned release that serves `engine`'s series ("vllm" -> vllm's and vLLM-Ascend's)."""
    if engine in ("smg", "vllm-router"):
        return ["%s-%s" % (key, router["version"]) for key, router in ROUTERS.items() if key == engine]
    out = []
    for key, spec in ENGINES.items():
        if spec["name"] != engine:
            continue
        for version in spec["versions"]:
            out.append("%s-%s" % (engine_metrics.BUILD_PACKAGES[key], version))
    return sorted(set(out))


def families(release_id):
    """{family: entry} of a release, with the release its plugin runs on (vLLM-Ascend: vLLM's)."""
    doc = RELEASES[release_id]
    out = dict(RELEASES[doc["serves"]]["metrics"]) if doc.get("serves") else {}
    out.update(doc["metrics"])
    return out


def exposed(release_id):
    return {name for entry in families(release_id).values() for name in entry["exposed"]}


def family_of(release_id, name):
    """(family, entry) of the family whose exposed names include `name`, else (None, None)."""
    for fam, entry in families(release_id).items():
        if name in entry["exposed"]:
            return fam, entry
    return None, None


def engine_of(name):
    return next((engine for prefix, engine in PREFIXES if name.startswith(prefix)), None)


def check_release_names(uses, histograms=()):
    """Problems of {name: ({label, ...}, where)} against every pinned release of each name's engine: a name not in a
    release's exposed names, a label not among the release's labels (where its list is complete); each name in
    `histograms` must be a histogram family (what the canary reads `<name>_bucket` of)."""
    problems = []
    for name, (labels, where) in sorted(uses.items()):
        engine = engine_of(name)
        if engine is None:
            continue
        for release in releases_of(engine):
            doc = RELEASES.get(release)
            if doc is None:
                problems.append("%s (%s): release %s has no recorded data (make engine-metrics)"
                                % (name, where, release))
                continue
            if not doc["read"]:
                continue
            if name in histograms:
                entry = families(release).get(name)
                if not entry or entry["type"] != "histogram":
                    problems.append("%s (%s): not a histogram in %s (%s)" % (
                        name, where, release, "a %s" % entry["type"] if entry else "no such family"))
                continue
            fam, entry = family_of(release, name)
            if fam is None:
                problems.append("%s (%s): not a series of %s" % (name, where, release))
                continue
            allowed = set(entry["labels"] or ()) | TARGET_LABELS | ({"le"} if name.endswith("_bucket") else set())
            for label in sorted(labels - allowed):
                if entry["labels_complete"]:
                    problems.append("%s (%s): label %r, not one of %s's %s" % (
                        name, where, label, release, sorted(entry["labels"])))
    return problems


# ---- what the collection names ---------------------------------------------------------------------------------------
def selectors(expr):
    """{metric: {label names of its selector}} of a PromQL expression (promql_metric_names' names)."""
    names, toks, out = promql_metric_names(expr), tokens(expr), {}
    for i, (kind, text) in enumerate(toks):
        if kind != "ident" or text not in names:
            continue
        labels = out.setdefault(text, set())
        if i + 1 < len(toks) and toks[i + 1][1] == "{":
            j = i + 2
            while j < len(toks) and toks[j][1] != "}":
                if toks[j][0] == "ident" and j + 1 < len(toks) and toks[j + 1][1] in ("=", "!=", "=~", "!~"):
                    labels.add(toks[j][1])
                j += 1
    return out


def merge(into, found, where):
    for name, labels in found.items():
        old = into.get(name, (set(), where))
        into[name] = (old[0] | labels, old[1])
    return into


def dashboard_uses(path=DASHBOARD):
    """{name: (labels, where)} of the dashboard's targets and query variables."""
    with open(path, encoding="utf-8") as handle:
        dashboard = json.load(handle)
    uses = {}
    for panel in dashboard.get("panels", []):
        for inner in [panel] + panel.get("panels", []):
            for target in inner.get("targets", []):
                merge(uses, selectors(target.get("expr", "")), "dashboard panel %r" % inner.get("title"))
    for name in dashboard_metric_names(path):  # the query variables too
        uses.setdefault(name, (set(), "dashboard variable"))
    return uses


def render_alerts(path=ALERTS):
    """The rule file as kimi_monitoring writes it, from the role's defaults (tests/integration/test_alert_rules.py
    renders it the same way for promtool)."""
    with open(ALERT_DEFAULTS, encoding="utf-8") as handle:
        values = yaml.safe_load(handle) or {}
    with open(path, encoding="utf-8") as handle:
        source = handle.read()
    platforms = _platforms.entries()
    limits = dict((p["exporter"]["temperature"], values[p["exporter"]["temperature_threshold"]]) for p in platforms)
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    return env.from_string(source).render(_kimi_monitoring_platforms=platforms,
                                          _kimi_monitoring_temperature_limits=limits, **values)


def alert_uses(path=ALERTS):
    uses = {}
    for group in yaml.safe_load(render_alerts(path))["groups"]:
        for rule in group["rules"]:
            merge(uses, selectors(str(rule["expr"])), "alert %s" % rule["alert"])
    return uses


def declared_uses(engines=None, routers=None):
    """{name: (labels, where)} of the series the engine and router data name: serving_metrics (the canary), the
    speculative acceptance series, the KV offload hit series, the routers' per-worker outcome counters; and the
    canary's histograms ({name}) apart."""
    engines, routers = engines or ENGINES, routers or ROUTERS
    uses, histograms = {}, set()
    for key, spec in sorted(engines.items()):
        for role, value in sorted(spec["serving_metrics"].items()):
            where = "_engines %s serving_metrics[%r]" % (key, role)
            merge(uses, selectors(value), where)
            if role != "requests":
                histograms.add(value)
        for part in ("speculative", "kv_offload"):
            for role, value in sorted(((spec.get(part) or {}).get("metrics") or {}).items()):
                if role != "kind":
                    merge(uses, selectors(value), "_engines %s %s metrics[%r]" % (key, part, role))
    for key, router in sorted(routers.items()):
        if router.get("worker_outcomes"):
            # canary_compare reads it by worker and outcome; those labels are not in the router's string table
            uses.setdefault(router["worker_outcomes"], (set(), "_engines/routers.py %s worker_outcomes" % key))
    return uses, histograms


def double_text(engine):
    """The engine double's /metrics with every part on: a request answered, the speculative series, the KV host
    tier, TensorRT-LLM's iteration stats."""
    hist = {kind: double_metrics.Histogram(bounds) for kind, bounds in double_metrics.LATENCY_BUCKETS[engine].items()}
    for histogram in hist.values():
        histogram.observe(0.05)
    counters = {"running": 1, "prompt_tokens": 3, "generation_tokens": 5, "requests": 1, "finished": {"stop": 1}}
    spec = {"engine": engine, "tokens": 3, "stats": {"drafts": 1, "draft_tokens": 3, "accepted": 2, "per_pos": [1, 1]},
            "gauges": {"accept_length": 2.0, "accept_rate": 0.6}}
    return double_metrics.render(engine, "kimi-k2.6", counters, hist, 0, 0.0, 1.0, True, spec, True)


def exposition_uses(text, where):
    """{name: (label names, where)} of a Prometheus text exposition's samples."""
    uses = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            match = re.match(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? ", line)
            labels = set(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="', match.group(2) or ""))
            merge(uses, {match.group(1): labels}, where)
    return uses


# ---- the collection's own series ------------------------------------------------------------------------------------
def own_declared(roles=make_scraped_series.ROLES):
    """{name pattern: labels} of the series the collection writes, as make_scraped_series.own_series() reads them from
    their writers (the `# TYPE` lines of roles/ with a sample written beside them; a `%s` in a name is one word, as the
    usage tap's kimi_usage_%s_tokens_total). One reader: scraped-series.txt's kimi_* part comes from it too."""
    return {"^%s$" % re.escape(name).replace("%s", "[a-z0-9]+"): entry["labels"]
            for name, entry in make_scraped_series.own_series(roles).items()}


def exporters_declared():
    """The other exporters' series, as make_scraped_series.py lists them (each list names its upstream source)."""
    return make_scraped_series.exporter_series()


def check_own_names(uses):
    """Problems of the names no engine or router defines: kimi_* against the collection's writers, the rest against
    the exporters' lists."""
    own, others, problems = own_declared(), exporters_declared(), []
    for name, (labels, where) in sorted(uses.items()):
        if engine_of(name):
            continue
        if name.startswith("kimi_"):
            found = [labels_of for pattern, labels_of in own.items() if re.match(pattern, name)]
            if not found:
                problems.append("%s (%s): no file under roles/ declares it (# TYPE)" % (name, where))
            elif labels - TARGET_LABELS - found[0]:
                problems.append("%s (%s): labels %s, its writer writes %s" % (
                    name, where, sorted(labels - TARGET_LABELS - found[0]), sorted(found[0])))
        elif name not in others:
            problems.append("%s (%s): not in make_scraped_series.py's exporter lists" % (name, where))
    return problems


# ---- the data ------------------------------------------------------------------------------------------------------
def test_every_pinned_release_is_recorded():
    wanted = sorted("%s-%s" % key for key in pinned())
    assert sorted(RELEASES) == wanted, "run make engine-metrics"
    for release, doc in RELEASES.items():
        assert doc["tool"] == "tools/engine_metrics.py" and doc["pinned_by"], release
        if doc["read"]:
            assert doc["source"].startswith("PyPI wheel ") and len(doc["wheel"]["sha256"]) == 64, release
            assert doc["metrics"] or doc.get("serves"), release
            assert doc["exposed"] == sorted({n for m in doc["metrics"].values() for n in m["exposed"]}), release
        if doc.get("serves"):
            assert RELEASES[doc["serves"]]["read"], release


def test_only_trtllm_is_unread():
    """A release that could not be read checks nothing: each one is named here, with the reason in its file."""
    unread = {release for release, doc in RELEASES.items() if not doc["read"]}
    assert unread == UNREAD
    for release in unread:
        assert RELEASES[release]["reason"] and not RELEASES[release]["metrics"], release


def test_a_python_release_records_types_labels_and_exposed_names():
    entry = RELEASES["vllm-0.22.1"]["metrics"]["vllm:request_success"]
    assert entry["type"] == "counter" and entry["labels"] == ["model_name", "engine", "finished_reason"]
    assert entry["exposed"] == ["vllm:request_success_total", "vllm:request_success_created"]
    ttft = RELEASES["sglang-0.5.12.post1"]["metrics"]["sglang:time_to_first_token_seconds"]
    assert ttft["type"] == "histogram" and "sglang:time_to_first_token_seconds_bucket" in ttft["exposed"]
    assert not ttft["labels_complete"]  # labels.keys() of the caller's dict


# ---- the checks ----------------------------------------------------------------------------------------------------
def test_the_dashboard_names_only_released_series():
    uses = dashboard_uses()
    assert check_release_names(uses) == []
    assert check_own_names(uses) == []
    assert {"vllm:time_to_first_token_seconds_bucket", "sglang:num_queue_reqs",
            "trtllm_kv_cache_utilization"} <= set(uses)


def test_the_alert_rules_name_only_released_series():
    uses = alert_uses()
    assert check_release_names(uses) == []
    assert check_own_names(uses) == []
    assert {"kimi_probe_accuracy", "kimi_replica_state", "smg_worker_health", "vllm_router_worker_health",
            "vllm:kv_cache_usage_perc", "DCGM_FI_DEV_GPU_TEMP", "npu_chip_info_temperature"} <= set(uses)


def test_every_series_the_alert_rules_and_the_dashboard_use_is_scraped():
    """scraped-series.txt is what a host's scrape jobs expose (make_scraped_series.py: the kimi_* part read from the
    writers, the routers' from their recorded releases): a rule or a panel on a name outside it selects nothing."""
    scraped = scraped_series()
    assert sorted(set(alert_uses()) - scraped) == []
    assert sorted(set(dashboard_uses()) - scraped) == []
    assert {"kimi_probe_accuracy", "kimi_probe_failures_total", "kimi_replica_state", "kimi_replica_restarts_total",
            "kimi_replica_last_recovery_seconds", "smg_worker_health", "vllm_router_worker_health"} <= scraped


def test_the_canary_reads_released_histograms_and_counters():
    """The canary compares TTFT and ITL from `<name>_bucket` and skips a missing histogram: each must be a histogram
    of every pinned release of its engine; the finished-request counters and the routers' outcome counters must be
    there too."""
    uses, histograms = declared_uses()
    assert check_release_names(uses, histograms) == []
    assert check_own_names(uses) == []  # a router's counter renamed to another prefix is no engine's
    assert {"vllm:time_to_first_token_seconds", "sglang:inter_token_latency_seconds",
            "trtllm_time_per_output_token_seconds"} <= histograms
    assert {"smg_worker_cb_outcomes_total", "vllm_router_cb_outcomes_total"} <= set(uses)


def test_the_engine_double_writes_only_released_series():
    for engine in ("vllm", "sglang", "trtllm"):
        uses = exposition_uses(double_text(engine), "the engine double's %s /metrics" % engine)
        assert len(uses) > 10, engine
        assert check_release_names(uses) == [], engine


# ---- the checks find a wrong name ------------------------------------------------------------------------------------
def test_a_renamed_dashboard_series_is_found(tmp_path):
    with open(DASHBOARD, encoding="utf-8") as handle:
        text = handle.read()
    copy_path = tmp_path / "dashboard.json"
    copy_path.write_text(text.replace("vllm:inter_token_latency_seconds_bucket", "vllm:inter_token_latency_bucket")
                         .replace("kimi_verify_success", "kimi_verify_succeeded"), encoding="utf-8")
    uses = dashboard_uses(str(copy_path))
    problems = check_release_names(uses)
    assert [p.split(" (")[0] for p in problems] == ["vllm:inter_token_latency_bucket"] * len(releases_of("vllm"))
    assert "not a series of vllm-0.33.0" in " ".join(problems)
    assert [p.split(" (")[0] for p in check_own_names(uses)] == ["kimi_verify_succeeded"]


def test_a_renamed_alert_series_or_label_is_found(tmp_path):
    with open(ALERTS, encoding="utf-8") as handle:
        text = handle.read()
    copy_path = tmp_path / "kimi-alerts.yml.j2"
    copy_path.write_text(text.replace("(sglang:num_queue_reqs)", "(sglang:num_queued_reqs)")
                         .replace('kimi_replica_state{state="down"}', 'kimi_replica_state{status="down"}'),
                         encoding="utf-8")
    uses = alert_uses(str(copy_path))
    assert "sglang:num_queued_reqs (alert KimiQueueGrowing): not a series of sglang-0.5.23" in check_release_names(uses)
    assert check_own_names(uses) == [
        "kimi_replica_state (alert KimiReplicaRecovering): labels ['status'], its writer writes ['state']"]


def test_a_rule_on_a_kimi_series_no_writer_writes_is_found(tmp_path):
    with open(ALERTS, encoding="utf-8") as handle:
        text = handle.read()
    assert "kimi_probe_accuracy" in text
    copy_path = tmp_path / "kimi-alerts.yml.j2"
    copy_path.write_text(text.replace("kimi_probe_accuracy", "kimi_probe_accuracy_ratio"), encoding="utf-8")
    uses = alert_uses(str(copy_path))
    assert check_own_names(uses) == [
        "kimi_probe_accuracy_ratio (alert KimiAnswersWrong): no file under roles/ declares it (# TYPE)"]
    assert sorted(set(uses) - scraped_series()) == ["kimi_probe_accuracy_ratio"]


def test_the_own_series_are_read_from_their_writers(tmp_path):
    """make_scraped_series.own_series(): a writer's # TYPE line with the labels of its samples; a writer that declares
    a series and writes no sample of it fails the generator (and so the fixture's check)."""
    probe = os.path.join(ROLES, "kimi_probes", "files", "kimi_probe.py")
    with open(probe, encoding="utf-8") as handle:
        source = handle.read()
    roles = tmp_path / "roles"
    (roles / "kimi_probes" / "files").mkdir(parents=True)
    (roles / "kimi_probes" / "files" / "kimi_probe.py").write_text(source, encoding="utf-8")
    found = make_scraped_series.own_series(str(roles))
    assert sorted(found) == ["kimi_probe_accuracy", "kimi_probe_failures_total",
                             "kimi_probe_last_run_timestamp_seconds"]
    assert found["kimi_probe_accuracy"]["labels"] == {"identity"} and found["kimi_probe_accuracy"]["type"] == "gauge"
    assert make_scraped_series.own_exposed(str(roles)) == set(found)
    assert "kimi_probe_accuracy" not in own_declared(str(tmp_path / "none"))
    # the accuracy sample dropped, its # TYPE line kept
    line = [x for x in source.splitlines() if "lines.append('kimi_probe_accuracy{" in x]
    assert len(line) == 1
    (roles / "kimi_probes" / "files" / "kimi_probe.py").write_text(source.replace(line[0], "        pass"),
                                                                   encoding="utf-8")
    with pytest.raises(ValueError, match="kimi_probe.py declares kimi_probe_accuracy [(]# TYPE[)] but writes no "
                                         "sample of it"):
        make_scraped_series.own_series(str(roles))


def test_a_canary_histogram_that_is_a_counter_is_found():
    engines = copy.deepcopy(ENGINES)
    engines["vllm"]["serving_metrics"]["itl"] = "vllm:generation_tokens"  # a counter: no _bucket
    engines["sglang"]["serving_metrics"]["ttft"] = "sglang:first_token_seconds"
    uses, histograms = declared_uses(engines)
    problems = check_release_names(uses, histograms)
    assert "vllm:generation_tokens (_engines vllm serving_metrics['itl']): not a histogram in vllm-0.22.1 (a counter)" \
        in problems
    assert "sglang:first_token_seconds (_engines sglang serving_metrics['ttft']): not a histogram in " \
           "sglang-0.5.12.post1 (no such family)" in problems


def test_a_wrong_double_name_or_label_is_found():
    text = double_text("vllm").replace("vllm:num_requests_waiting{", "vllm:num_requests_queued{")
    text = text.replace('engine="0"', 'engine_index="0"', 1)
    problems = check_release_names(exposition_uses(text, "double"))
    assert "vllm:num_requests_queued (double): not a series of vllm-0.22.1" in problems
    assert "vllm:num_requests_running (double): label 'engine_index', not one of vllm-0.22.1's ['engine', " \
           "'model_name']" in problems


def test_a_router_series_the_release_lacks_is_found():
    routers = copy.deepcopy(ROUTERS)
    routers["smg"]["worker_outcomes"] = "sgl_router_cb_outcomes_total"
    routers["vllm-router"]["worker_outcomes"] = "vllm_router_worker_outcomes_total"
    problems = check_release_names(declared_uses(routers=routers)[0])
    assert "vllm_router_worker_outcomes_total (_engines/routers.py vllm-router worker_outcomes): not a series of " \
           "vllm-router-0.1.17" in problems
    # sgl_router_ is no router's prefix: such a name is the collection's own, and no writer declares it
    assert check_own_names(declared_uses(routers=routers)[0]) == [
        "sgl_router_cb_outcomes_total (_engines/routers.py smg worker_outcomes): not in "
        "make_scraped_series.py's exporter lists"]


@pytest.mark.parametrize("release", sorted(r for r in RELEASES if RELEASES[r]["read"]))
def test_each_read_release_knows_its_engines_core_series(release):
    """A reader that lost a file (a moved module, a new way of making metrics) shows here as an empty release."""
    engine = RELEASES[release]["engine"]
    core = {"vllm": "vllm:num_requests_running", "vllm-ascend": "vllm:num_requests_running",
            "sglang": "sglang:num_running_reqs", "smg": "smg_worker_health",
            "vllm-router": "vllm_router_worker_health"}[engine]
    assert core in exposed(release)


# ---- the reader (tools/engine_metrics.py) on a made-up wheel ---------------------------------------------------------
READER_SOURCE = '''
from collections import Counter
import prometheus_client
from prometheus_client import Gauge as _G, Histogram

PREFIX = "eng:"
Counter("not_a_metric")  # collections.Counter: no documentation


class Stats:
    _counter_cls = prometheus_client.Counter

    def __init__(self, labels):
        self.prefix = PREFIX
        labelnames = ["model_name"]
        _G(name=self.prefix + "queue", documentation="Waiting.", labelnames=labelnames + ["reason"])
        Histogram(f"{PREFIX}ttft_seconds", "TTFT.", list(labels.keys()))
        table = (("eng:a_total", "A."), ("eng:b", "B."))
        made = [self._counter_cls(name=name, documentation=doc) for name, doc in table]
        prometheus_client.Summary(name=labels["x"], documentation="Unknown name.")
'''


def test_the_reader_resolves_names_labels_and_exposed_names(tmp_path):
    wheel = tmp_path / "eng-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("eng/metrics.py", READER_SOURCE)
        archive.writestr("eng/router_rs.so", b"\x00smg_worker_healthWorker health\x00smg_glued_totalassertion failed")
    metrics, unresolved, files, other = engine_metrics.read_python(wheel, "eng:")
    assert files == 1 and sorted(metrics) == ["eng:a", "eng:b", "eng:queue", "eng:ttft_seconds"]
    assert metrics["eng:queue"]["labels"] == ["model_name", "reason"] and metrics["eng:queue"]["labels_complete"]
    assert metrics["eng:ttft_seconds"]["exposed"] == ["eng:ttft_seconds_bucket", "eng:ttft_seconds_count",
                                                      "eng:ttft_seconds_sum", "eng:ttft_seconds_created"]
    assert not metrics["eng:ttft_seconds"]["labels_complete"]
    assert metrics["eng:a"]["exposed"] == ["eng:a_total", "eng:a_created"] and metrics["eng:b"]["type"] == "counter"
    assert [u["name"] for u in unresolved] == ["labels['x']"] and other == {}
    names, uncertain, _member = engine_metrics.read_binary(wheel, "eng/router_rs", "smg_")
    assert list(names) == ["smg_worker_health"] and names["smg_worker_health"]["description_run"] == "Worker health"
    assert [u["name"] for u in uncertain] == ["smg_glued_totalassertion"]
