"""kimi_probes: the gate's thresholds fall back to the site inputs' defaults (declared once, in site_inputs.py), and
the role's defaults are its argument specs' (derived copies that must match)."""
import json
import os
import re
import sys

import yaml

from ansible_collections.kimi.deploy.plugins.module_utils import _accuracy as acc
from ansible_collections.kimi.deploy.plugins.module_utils._model.site_inputs import INPUTS

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
ROLE = os.path.join(ROOT, "roles", "kimi_probes")
sys.path.insert(0, os.path.join(ROOT, "tests", "unit", "doubles"))
import test_engine_double  # noqa: E402

cache, start = test_engine_double.cache, test_engine_double.start  # its fixtures


def load(*parts):
    with open(os.path.join(ROLE, *parts)) as handle:
        return yaml.safe_load(handle)


def test_the_thresholds_fall_back_to_the_site_inputs_defaults():
    defaults = dict((i.variable, i.default) for i in INPUTS)
    found = {}
    for value in list(load("vars", "main.yml")["_kimi_probes_thresholds"].values()) + [
            load("vars", "main.yml")["_kimi_probes_max_drop"]]:
        variable, fallback = re.search(r"(kimi_verify_[a-z_]+) \| default\(([0-9.]+)\)", value).groups()
        found[variable] = float(fallback)
    assert found and all(found[v] == defaults[v] for v in found), (found, defaults)
    assert set(found) == set(v for v in defaults if re.match(r"kimi_verify_(min|max)_", v))


def test_the_probe_schedule_falls_back_to_the_site_inputs_defaults():
    defaults = dict((i.variable, i.default) for i in INPUTS)
    variables = load("vars", "main.yml")
    for name, variable in (("_kimi_probes_interval", "kimi_probe_interval"),
                           ("_kimi_probes_sample", "kimi_probe_sample")):
        fallback = re.search(r"%s \| default\('?([^')]*)'?\)" % variable, variables[name]).group(1)
        assert fallback == str(defaults[variable]), (variable, fallback, defaults[variable])
    for template in os.listdir(os.path.join(ROLE, "templates")):  # the templates read the role's copies only
        with open(os.path.join(ROLE, "templates", template)) as handle:
            assert not re.search(r"\bkimi_probe_(interval|sample)\b", handle.read()), template


def test_the_role_defaults_are_its_argument_specs():
    defaults = load("defaults", "main.yml")
    for entry in load("meta", "argument_specs.yml")["argument_specs"].values():
        options = entry["options"]
        assert dict((k, options[k]["default"]) for k in defaults if k in options) == dict(
            (k, v) for k, v in defaults.items() if k in options)
    named = set(k for e in load("meta", "argument_specs.yml")["argument_specs"].values() for k in e["options"])
    assert set(defaults) <= named


def probe_run(tmp_path, url, sample=8, model=None):
    """kimi_probe.py as the timer runs it, from a folder laid out as the role installs it (with the deployment's
    model.json when `model` is given)."""
    import shutil
    import subprocess
    folder = tmp_path / "probe"
    if not folder.exists():
        folder.mkdir()
        shutil.copy(os.path.join(ROLE, "files", "kimi_probe.py"), str(folder))
        shutil.copy(os.path.join(ROOT, "plugins", "module_utils", "_accuracy.py"), str(folder))
        shutil.copy(os.path.join(ROOT, "plugins", "module_utils", "_chat_format.py"), str(folder))
        (folder / "probes.json").write_text(json.dumps([load("files", "kimi-k26-probes.yml")]))
        (tmp_path / "kimi-k26.env").write_text("QUANT=int4\nFRAMEWORK=sglang\nMODEL_NAME=kimi-k2.6\n")
    if model:
        (folder / "model.json").write_text(json.dumps(model))
    done = subprocess.run([sys.executable, str(folder / "kimi_probe.py"), "--url", url, "--env-file",
                           str(tmp_path / "kimi-k26.env"), "--probes", str(folder / "probes.json"), "--sample",
                           str(sample), "--state", str(tmp_path / "state.json"), "--textfile",
                           str(tmp_path / "kimi_probe.prom")]
                          + (["--model-file", str(folder / "model.json")] if model else []),
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          universal_newlines=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout
    return done.stdout, (tmp_path / "kimi_probe.prom").read_text()


def test_the_serving_time_probe_writes_its_series_and_sees_answers_turn_to_garbage(start, tmp_path):
    """A sound engine: accuracy 1 and no failure, a different slice each run; after KIMI_DOUBLE_GARBAGE_AFTER the
    accuracy falls and the failures count up (what KimiAnswersWrong fires on); an engine that is down changes
    nothing but the time of the run."""
    double = start("sglang")
    url = "http://127.0.0.1:%d" % double.double.port
    out, text = probe_run(tmp_path, url)
    assert "int4-sglang: 8 of 8 answered cases passed" in out
    assert 'kimi_probe_accuracy{identity="int4-sglang"} 1.0' in text
    assert 'kimi_probe_failures_total{identity="int4-sglang"} 0' in text
    first = json.loads((tmp_path / "state.json").read_text())["offset"]
    double.double.env["KIMI_DOUBLE_GARBAGE_AFTER"] = "0"
    out, text = probe_run(tmp_path, url)
    assert "int4-sglang: 0 of 8 answered cases passed; failing: " in out
    assert 'kimi_probe_accuracy{identity="int4-sglang"} 0.0' in text
    assert 'kimi_probe_failures_total{identity="int4-sglang"} 8' in text
    pool = [c for c in acc.load(load("files", "kimi-k26-probes.yml")) if c["category"] != "needle"]
    assert json.loads((tmp_path / "state.json").read_text())["offset"] == (first + 8) % len(pool)  # the next slice
    _out, down = probe_run(tmp_path, "http://127.0.0.1:9")
    assert 'kimi_probe_accuracy{identity="int4-sglang"} 0.0' in down and "failures_total{identity=\"int4-sglang\"} 8" in down


def test_the_role_installs_the_chat_formats_beside_the_probe_and_its_model():
    """The probe imports _accuracy.py, which imports _chat_format.py: the role copies both, and writes model.json from
    the deployment's model (the fields the requests follow) for --model-file."""
    with open(os.path.join(ROLE, "tasks", "main.yml")) as handle:
        tasks = handle.read()
    assert "module_utils/_chat_format.py\", dest: _chat_format.py" in tasks and "/model.json" in tasks
    with open(os.path.join(ROLE, "templates", "kimi-k26-probe.service.j2")) as handle:
        assert "'--model-file', kimi_probes_dir ~ '/model.json'" in handle.read()
    assert "reasoning_efforts" in load("vars", "main.yml")["_kimi_probes_model"]
