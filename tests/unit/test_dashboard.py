"""kimi_monitoring's Grafana dashboard (roles/kimi_monitoring/files/kimi-k26-dashboard.json): valid Grafana JSON, a
datasource and a title on every panel, and only series a Kimi host really exposes.

The series list is tests/fixtures/prometheus/scraped-series.txt, written by make_scraped_series.py beside it (the engine
double's /metrics for each engine, dcgm-exporter's default counters, node exporter, Caddy, the PD routers' recorded
series, the kimi_* series read from the files that write them). The e2e test imports dashboard_metric_names() from
here and checks the same names against a live Prometheus.
"""
import json
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DASHBOARD = os.path.join(ROOT, "roles", "kimi_monitoring", "files", "kimi-k26-dashboard.json")
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "prometheus")
SERIES = os.path.join(FIXTURES, "scraped-series.txt")
ENGINE_DIR = os.path.join(ROOT, "tests", "doubles", "engine")

# ---- a small PromQL tokenizer ---------------------------------------------------------------------------------------
TOKEN = re.compile(r"""
    (?P<string>"(?:\\.|[^"\\])*"|'(?:\\.|[^'\\])*'|`[^`]*`)
  | (?P<variable>\$\{[^}]*\}|\$\w+)            # Grafana variables: $instance, ${datasource}, $__rate_interval
  | (?P<number>(?:0[xX][0-9a-fA-F]+|\d+(?:\.\d*)?(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?)(?:ms|[smhdwy])*)
  | (?P<ident>[a-zA-Z_:][a-zA-Z0-9_:]*)
  | (?P<op>=~|!~|!=|==|>=|<=|[-+*/%^<>=,(){}\[\]@])
  | (?P<space>\s+)
""", re.X)
KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "offset", "bool",
            "inf", "nan", "start", "end", "atan2"}
LABEL_LISTS = {"by", "without", "on", "ignoring", "group_left", "group_right"}
AGGREGATORS = {"sum", "avg", "min", "max", "count", "group", "stddev", "stdvar", "topk", "bottomk", "quantile",
               "count_values", "limitk", "limit_ratio"}  # `sum by (x) (...)`: followed by by/without, not `(`


def tokens(expr):
    pos, out = 0, []
    while pos < len(expr):
        match = TOKEN.match(expr, pos)
        if not match:
            raise ValueError("cannot read PromQL at %r" % expr[pos:pos + 30])
        pos = match.end()
        if match.lastgroup != "space":
            out.append((match.lastgroup, match.group()))
    return out


def promql_metric_names(expr):
    """The metric names an expression selects: identifiers that are neither functions or aggregations (followed by `(`,
    or by by/without), keywords, label names (inside `{...}`, or in the list after by/without/on/ignoring/group_left/
    group_right) nor anything in a range or subquery `[...]`."""
    toks, names = tokens(expr), set()
    brace = bracket = 0
    label_list = False  # inside the (...) after by, on, ...
    for i, (kind, text) in enumerate(toks):
        nxt = toks[i + 1][1] if i + 1 < len(toks) else ""
        if text == "{":
            brace += 1
        elif text == "}":
            brace -= 1
        elif text == "[":
            bracket += 1
        elif text == "]":
            bracket -= 1
        elif text == ")" and label_list:
            label_list = False
        elif kind == "ident" and not (brace or bracket or label_list):
            if text in LABEL_LISTS and nxt == "(":
                label_list = True
            elif text.lower() in AGGREGATORS and nxt in ("by", "without"):
                continue
            elif text.lower() not in KEYWORDS and nxt != "(":
                names.add(text)
    return names


def panels(dashboard):
    """Every panel, those inside collapsed rows included."""
    for panel in dashboard.get("panels", []):
        yield panel
        yield from panel.get("panels", [])


def load(path=DASHBOARD):
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def dashboard_metric_names(path=DASHBOARD):
    """The metric names every target and every query variable of the dashboard at path selects."""
    dashboard, names = load(path), set()
    for panel in panels(dashboard):
        for target in panel.get("targets", []):
            names |= promql_metric_names(target.get("expr", ""))
    for variable in dashboard.get("templating", {}).get("list", []):
        query = variable.get("query")
        query = query.get("query", "") if isinstance(query, dict) else query or ""
        match = re.match(r"^\s*label_values\((.*),\s*\w+\s*\)\s*$", query)
        if variable.get("type") == "query" and match:
            names |= promql_metric_names(match.group(1))
    return names


def scraped_series():
    with open(SERIES, encoding="utf-8") as handle:
        return {line.strip() for line in handle if line.strip() and not line.startswith("#")}


# ---- the tokenizer --------------------------------------------------------------------------------------------------
def test_the_tokenizer_finds_metrics_not_functions_labels_or_keywords():
    expr = ('histogram_quantile(0.99, sum by (instance, le) (rate(vllm:time_to_first_token_seconds_bucket'
            '{instance=~"$instance", le!="1e3"}[$__rate_interval]))) or 1 - avg without (cpu) '
            '(rate(node_cpu_seconds_total{mode="idle"}[5m] offset 1h)) / on (instance) group_left (mountpoint) '
            'kimi_weights_filesystem_info and up == bool 1 unless sum(rate(x_total[1m:30s])) > 1e12')
    assert promql_metric_names(expr) == {"vllm:time_to_first_token_seconds_bucket", "node_cpu_seconds_total",
                                         "kimi_weights_filesystem_info", "up", "x_total"}
    assert promql_metric_names('{__name__="up"}') == set()
    assert promql_metric_names("sum(caddy_http_requests_in_flight)by(instance)") == {"caddy_http_requests_in_flight"}


# ---- (a) only series a host exposes ---------------------------------------------------------------------------------
def test_every_series_the_dashboard_queries_is_scraped():
    names = dashboard_metric_names()
    assert len(names) > 20
    assert sorted(names - scraped_series()) == []


def test_every_engine_panel_names_all_three_engines():
    for panel in panels(load()):
        for target in panel.get("targets", []):
            expr = target["expr"]
            if re.search(r"\b(vllm|sglang):|\btrtllm_", expr):
                found = {engine for engine, pattern in (("vllm", r"\bvllm:"), ("sglang", r"\bsglang:"),
                                                        ("trtllm", r"\btrtllm_")) if re.search(pattern, expr)}
                assert found == {"vllm", "sglang", "trtllm"}, (panel["title"], expr)
                assert expr.count(" or ") >= 2, (panel["title"], expr)


def test_the_series_fixture_is_what_the_generator_writes():
    sys.path.insert(0, FIXTURES)
    try:
        import make_scraped_series  # pylint: disable=import-outside-toplevel
    finally:
        sys.path.remove(FIXTURES)
    with open(SERIES, encoding="utf-8") as handle:
        assert handle.read() == make_scraped_series.text(), "run python3 tests/fixtures/prometheus/make_scraped_series.py"


# ---- (b) panels -----------------------------------------------------------------------------------------------------
def test_every_panel_has_a_datasource_and_a_title():
    for panel in panels(load()):
        assert panel.get("title"), panel.get("id")
        assert panel.get("datasource") == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        for target in panel.get("targets", []):
            assert target.get("datasource") == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
            assert target.get("expr") and target.get("refId"), panel["title"]


# ---- (c) valid Grafana ----------------------------------------------------------------------------------------------
def test_the_dashboard_is_grafana_json():
    dashboard = load()
    assert dashboard["uid"] == "kimi-k26" and dashboard["title"]
    assert dashboard["schemaVersion"] == 39 and dashboard.get("id") is None
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    assert variables["instance"]["query"]["query"] == "label_values(kimi_deployment_info, instance)"
    assert variables["instance"]["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
    ids = [p["id"] for p in panels(dashboard)]
    assert len(ids) == len(set(ids)), "panel ids repeat"
    cells = set()
    for panel in panels(dashboard):
        grid = panel["gridPos"]
        assert set(grid) == {"h", "w", "x", "y"} and grid["h"] > 0 and grid["w"] > 0, panel["title"]
        assert 0 <= grid["x"] and grid["x"] + grid["w"] <= 24, panel["title"]
        mine = {(x, y) for x in range(grid["x"], grid["x"] + grid["w"])
                for y in range(grid["y"], grid["y"] + grid["h"])}
        assert not mine & cells, "%s overlaps another panel" % panel["title"]
        cells |= mine
        assert panel["type"] in ("row", "timeseries", "stat", "table", "gauge", "bargauge"), panel["title"]
        if panel["type"] == "row":
            assert panel["gridPos"]["h"] == 1 and panel["gridPos"]["w"] == 24
        else:
            assert panel["targets"], panel["title"]
    rows = [p["title"] for p in dashboard["panels"] if p["type"] == "row"]
    assert rows == ["Deployment", "Engine", "GPU", "Host", "Proxy", "Usage and cost"]


def test_the_rows_hold_the_panels_the_operators_need():
    exprs = " ".join(t["expr"] for p in panels(load()) for t in p.get("targets", []))
    for needed in ("kimi_deployment_info", "kimi_verify_success", "histogram_quantile(0.5,", "histogram_quantile(0.99,",
                   "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_POWER_USAGE",
                   "DCGM_FI_DEV_XID_ERRORS", "node_cpu_seconds_total", "node_memory_MemAvailable_bytes",
                   "kimi_weights_filesystem_info", "caddy_http_request_duration_seconds_count",
                   "caddy_http_request_duration_seconds_bucket"):
        assert needed in exprs, needed


# ---- the engine double's /metrics, as the dashboard and the alerts read it -----------------------------------------
def _doubles(env=None):
    sys.path.insert(0, FIXTURES)
    try:
        import make_scraped_series  # pylint: disable=import-outside-toplevel
    finally:
        sys.path.remove(FIXTURES)
    doubles = make_scraped_series.engine_doubles()
    for double in doubles:
        double.env = dict(env or {})
    return doubles


def _samples(text):
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, value = line.rsplit(" ", 1)
            out[key] = float(value)
    return out


def test_the_double_histograms_count_what_it_answered():
    for double in _doubles():
        text = double.metrics()
        samples = _samples(text)
        families = re.findall(r"^# TYPE (\S+) histogram$", text, re.M)
        assert len(families) == 3, double.engine
        for family in families:
            buckets = [(k, v) for k, v in samples.items() if k.startswith(family + "_bucket{")]
            counts = [v for _k, v in buckets]
            assert counts == sorted(counts) and buckets[-1][0].endswith('le="+Inf"}'), family
            count = [v for k, v in samples.items() if k.startswith(family + "_count{")]
            total = [v for k, v in samples.items() if k.startswith(family + "_sum{")]
            assert count == [counts[-1]] and count[0] >= 1 and total[0] > 0, family
        for line in text.splitlines():
            if line.startswith("# TYPE ") and line.endswith(" counter"):
                assert line.split()[2].endswith("_total"), line


def test_the_double_gauges_follow_the_queue_and_kv_knobs():
    from ansible_collections.kimi.deploy.plugins.filter.running_requests import running_requests
    gauges = {"vllm": ("vllm:num_requests_waiting", "vllm:kv_cache_usage_perc"),
              "sglang": ("sglang:num_queue_reqs", "sglang:token_usage"),
              "trtllm": ("trtllm_num_requests_waiting", "trtllm_kv_cache_utilization")}
    for double in _doubles({"KIMI_DOUBLE_QUEUE": "7", "KIMI_DOUBLE_KV_USAGE": "0.97"}):
        samples = {k.split("{")[0]: v for k, v in _samples(double.metrics()).items()}
        waiting, kv = gauges[double.engine]
        assert samples[waiting] == 7.0 and samples[kv] == 0.97, double.engine
        if double.engine != "trtllm":  # caddy_proxy's drain counts the queue as in flight
            assert running_requests(double.metrics()) == 7
    for double in _doubles():
        assert "0.97" not in double.metrics()


def test_the_double_refuses_bad_knobs():
    double = _doubles()[0]
    double.env = {"KIMI_DOUBLE_QUEUE": "lots", "KIMI_DOUBLE_KV_USAGE": "97"}
    problems = " ".join(double.startup_problems())
    assert "bad KIMI_DOUBLE_KV_USAGE='97'" in problems and "bad KIMI_DOUBLE_QUEUE='lots'" in problems
