"""Every site input has a constraint, and every value past its edges or of a hostile class is refused naming the
variable, through the one check path of kimi.deploy.deployment (the table's check, then the deployment model), so
plan.yml, site.yml and bundle.yml refuse alike; the templates that render inputs get their boundary values."""
import json
import os
import re

import jinja2
import pytest
import yaml

from ansible_collections.kimi.deploy.plugins.module_utils._model import constraints as _c
from ansible_collections.kimi.deploy.plugins.module_utils._model import site as _site
from ansible_collections.kimi.deploy.plugins.module_utils._model import site_inputs as _site_inputs
from ansible_collections.kimi.deploy.plugins.module_utils._model.deployment import resolve
from ansible_collections.kimi.deploy.plugins.module_utils._model.inputs import DeploymentError

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
with open(os.path.join(ROOT, "tests", "fixtures", "gpus", "rtx-pro-6000-x8.json")) as _handle:
    GPUS = json.load(_handle)["kimi_gpus"]
SHA = "0123456789abcdef0123456789abcdef01234567"
BASE = {"quant": "int4", "engine": "sglang", "kimi_int4_revision": SHA}
TABLE = _site_inputs.INPUTS


def check_path(values):
    """What kimi.deploy.deployment does for a host that sets `values` (over BASE): every input against the table, then
    the deployment model on an 8 x RTX PRO 6000 host."""
    given = dict(BASE, **values)

    def get(host, variable):
        return given.get(variable, _site.MISSING)

    _site_inputs.check_site(get, "h", {"cwd": ROOT}, missing=_site.MISSING)
    inputs = _site.inputs(get, "h", ["h"], [])
    return resolve(inputs, _site.accelerators(get, "h") if "kimi_gpus" in values else GPUS, require_revision=False)


def refusal(variable, value):
    with pytest.raises(DeploymentError) as refused:
        check_path({variable: value})
    return str(refused.value)


def test_every_input_has_a_constraint_and_a_checked_one_says_by_what():
    for item in TABLE:
        assert isinstance(item.check, _c.Constraint), item.variable
        if isinstance(item.check, _c.Checked):
            assert len(item.check.by) > 10 and item.check.bad, item.variable
        assert item.check.allowed() and all(item.check.allowed()), item.variable


def hostile(item):
    """Values of the hostile classes for an input's kind: the wrong type, empty, huge, control characters."""
    kind = item.check.kind
    wrong = {"scalar": [["a"], {"a": 1}], "list": ["a string", {"a": 1}], "dict": ["a string", [1]]}[kind]
    control = {"scalar": "1\n2", "list": ["--x\n--host=0"], "dict": {"a": "b\rc"}}[kind]
    huge = {"scalar": "9" * 5000, "list": ["9" * 5000], "dict": {"a": "9" * 5000}}[kind]
    empty = [] if item.check.empty else ["", None]
    return wrong + [control, huge] + empty


@pytest.mark.parametrize("item", TABLE, ids=lambda i: i.variable)
def test_edges_and_hostile_values_are_refused_naming_the_variable(item):
    good, bad = item.check.edges()
    for value in bad + hostile(item):
        message = refusal(item.variable, value)
        assert message.startswith(item.variable), (value, message)
        assert "Allowed values" in message or "not allowed" in message, message
        if item.no_log and isinstance(value, str) and len(value) > 3:
            assert value not in message
    for value in good:  # the table accepts them (the model may still refuse one for this host: its own check)
        _site_inputs.check_input(item, value, {"cwd": ROOT})


@pytest.mark.parametrize("variable, value, why", [
    ("kimi_probe_interval", "1s;reboot", "systemd would not parse it as a time span"),
    ("kimi_probe_interval", "0", "outside the range"),
    ("kimi_verify_max_drop", -0.1, "Allowed values: a number from 0, below 100"),
    ("kimi_verify_max_drop", 100, "Allowed values: a number from 0, below 100"),
    ("kimi_canary_max_error_rate", 2 * 100 + 1, "Allowed values: a number from 0 to 100"),
    ("kimi_canary_minutes", -1, "Allowed values: a number above 0, to 1440"),
    ("kimi_canary", "abc", "a count of replicas"),
    ("kimi_canary", "0", "a count of replicas"),
    ("kimi_canary", "-5", "a count of replicas"),
    ("kimi_canary", "150%", "a count of replicas"),
    ("kimi_fleet_max_fail_percentage", 101, "an integer from 0 to 100"),
    ("kimi_verify_probe_file", "/nonexistent/probes.yml", "there is no such file on the controller"),
])
def test_the_values_the_issue_found_are_refused_with_the_one_line(variable, value, why):
    message = refusal(variable, value)
    assert message.startswith("%s=%r is not allowed" % (variable, value)) and why in message, message


def test_a_probe_file_out_of_format_or_without_cases_is_refused_naming_what_is_wrong(tmp_path):
    shipped = os.path.join(ROOT, "roles", "kimi_probes", "files", "kimi-k26-probes.yml")
    check_path({"kimi_verify_probe_file": shipped})
    empty = tmp_path / "empty.yml"
    empty.write_text("version: 1\ncases: []\n")
    assert "the file: no cases" in refusal("kimi_verify_probe_file", str(empty))
    broken = tmp_path / "broken.yml"
    broken.write_text("version: 1\ncases: [{id: a, category: nope, prompt: hi}]\n")
    assert "category 'nope' is not one of" in refusal("kimi_verify_probe_file", str(broken))
    garbage = tmp_path / "garbage.yml"
    garbage.write_text("version: [1\n")
    assert "it cannot be read as YAML" in refusal("kimi_verify_probe_file", str(garbage))


@pytest.mark.parametrize("text, seconds", [
    ("15min", 900), ("1h 30min", 5400), ("2.5h", 9000), ("90", 90), ("5 min", 300), ("1d2h", 93600), ("1M", 2629800),
    ("1m", 60), ("500ms", 0.5), ("1s;reboot", None), ("15mins", None), ("", None), ("-5min", None), ("infinity", None),
    ("1h x", None)])
def test_time_spans_are_read_as_systemd_reads_them(text, seconds):
    assert _c.timespan_seconds(text) == seconds


def render(role, template, **variables):
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(os.path.join(ROOT, "roles", role, "templates")),
                             undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    env.filters["kimi.deploy.systemd_exec"] = " ".join
    return env.get_template(template).render(ansible_managed="managed", **variables)


def role_copy(role, name, variable, value):
    """The role's own copy of a site input (roles/<role>/vars/main.yml: `{{ variable | default(...) }}`), as Ansible
    renders it for `value`."""
    with open(os.path.join(ROOT, "roles", role, "vars", "main.yml")) as handle:
        expression = yaml.safe_load(handle)[name]
    return jinja2.Environment().from_string(expression).render(**{variable: value})


def test_the_probe_timer_gets_every_boundary_interval_as_systemd_reads_it():
    item = _site_inputs.by_variable()["kimi_probe_interval"]
    good, bad = item.check.edges()
    for value in good:
        _site_inputs.check_input(item, value)
        interval = role_copy("kimi_probes", "_kimi_probes_interval", "kimi_probe_interval", value)
        timer = render("kimi_probes", "kimi-k26-probe.timer.j2", _kimi_probes_interval=interval)
        line = re.search(r"^OnUnitActiveSec=(.*)$", timer, re.M).group(1)
        assert _c.timespan_seconds(line) == _c.timespan_seconds(value) and 10 <= _c.timespan_seconds(line), line
        assert "\n" not in line and len(timer.splitlines()) == 11
    for value in bad:  # none of these reaches a timer: the check path refuses it first
        assert refusal("kimi_probe_interval", value).startswith("kimi_probe_interval=")


def test_the_probe_service_gets_every_boundary_sample_as_one_argument():
    item = _site_inputs.by_variable()["kimi_probe_sample"]
    for value in item.check.edges()[0]:
        sample = role_copy("kimi_probes", "_kimi_probes_sample", "kimi_probe_sample", value)
        unit = render("kimi_probes", "kimi-k26-probe.service.j2", _kimi_probes_sample=sample, kimi_probes_dir="/p",
                      kimi_probes_env_file="/e", kimi_probes_result_dir="/r", kimi_probes_textfile_dir="/t",
                      kimi_probes_max_output=64, kimi_probes_service_name="kimi-k26-probe",
                      kimi_deployment={"local_url": "http://127.0.0.1:30000", "verify_checks": ["tool"],
                                       "reasoning_parser": "kimi_k2"})
        assert re.search(r"--sample %d --state" % int(value), unit), unit


def test_every_replica_name_at_its_edges_is_one_label_value_of_the_deployment_series():
    item = _site_inputs.by_variable()["kimi_replica"]
    for value in item.check.edges()[0] + ["a" * 64, "r.1_x-2"]:
        _site_inputs.check_input(item, value)
        assert re.fullmatch(r"[A-Za-z0-9_.-]+", value)  # nothing a label value or a unit comment must escape


def test_the_gates_take_points_so_a_max_drop_of_1_5_and_an_error_margin_of_2_still_fail():
    """kimi_verify_max_drop and kimi_canary_max_error_rate are percentage points (the figures are 0..100 and
    100 x a 0..1 rate): 1.5 and 2 are working settings, accepted, and the gates they feed still fail past them; only
    values that could never fail (100 and more) or always fail (below 0) are refused."""
    from ansible_collections.kimi.deploy.plugins.module_utils import _accuracy
    from ansible_collections.kimi.deploy.plugins.module_utils._model import canary
    check_path({"kimi_verify_max_drop": "1.5", "kimi_canary_max_error_rate": "2"})
    before = {"schema_accuracy": 100.0, "choice_accuracy": 100.0, "identity": "int4-sglang"}
    now = {"schema_accuracy": 100.0, "choice_accuracy": 98.0, "reasoning_leaks": 0, "answer_failures": 0}
    assert _accuracy.judge(now, {}, before, max_drop=1.5) and not _accuracy.judge(now, {}, before, max_drop=2.5)
    group = {"requests": 97, "errors": 3, "answered": 97, "error_rate": 0.03, "ttft_p50_ms": None, "itl_p50_ms": None}
    clean = dict(group, errors=0, error_rate=0.0)
    assert not canary.decide(group, clean, 2, 1.5, 50)[0] and canary.decide(group, clean, 3.5, 1.5, 50)[0]
    assert refusal("kimi_verify_max_drop", 100).startswith("kimi_verify_max_drop=100 is not allowed")
