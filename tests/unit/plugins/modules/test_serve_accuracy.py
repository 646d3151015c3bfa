"""serve_accuracy run as Ansible runs it (a separate process) against engine doubles: a sound identity passes and its
result is stored; the next identity is compared with it (the A/B, named by the previous environment file); a double
with KIMI_DOUBLE_TOOL_ERROR_RATE fails on its schema accuracy naming three failing cases; a stored result is reused
without a restart; check mode asks nothing; a probe file out of format is refused; the key never shows."""
import json
import os
import sys

import pytest
import yaml

from module_runner import run_module

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
MODULE = os.path.join(ROOT, "plugins", "modules", "serve_accuracy.py")
PROBES = os.path.join(ROOT, "roles", "kimi_probes", "files", "kimi-k26-probes.yml")
sys.path.insert(0, os.path.join(ROOT, "tests", "doubles", "engine"))

from kimi_engine_double.process import DoubleProcess  # noqa: E402
from test_serve_verify import NAME, engine_argv  # noqa: E402

THRESHOLDS = {"min_schema_accuracy": 98, "min_choice_accuracy": 95, "max_reasoning_leaks": 0,
              "max_answer_failures": 0}
KEY = "sk-kimi-accuracy-3e9f1c"


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    folder = tmp_path_factory.mktemp("serve_accuracy") / "model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "kimi_k25", "max_position_embeddings": 262144,
                                                    "quantization_config": {"quant_method": "compressed-tensors"}}))
    (folder / "model-00001-of-00001.safetensors").write_bytes(b"\0" * 4096)
    return str(folder)


def double(model, tmp_path, engine, env=None):
    return DoubleProcess(engine, engine_argv(engine, model), tmp_path / ("%s.log" % engine), env or {}).start()


def gate(url, tmp_path, identity, previous=None, **more):
    with open(PROBES) as handle:
        probes = [yaml.safe_load(handle)]
    params = dict({"url": url, "served_model_name": NAME, "probes": probes, "identity": identity,
                   "result_dir": str(tmp_path / "accuracy"), "thresholds": THRESHOLDS, "context_length": 4096,
                   "api_key": KEY}, **more)
    if previous:
        env = tmp_path / "previous.env"
        env.write_text("QUANT=%s\nFRAMEWORK=%s\n" % tuple(previous.split("-", 1)))
        params["previous_env_file"] = str(env)
    return run_module(MODULE, params, keep_stdout=True, timeout=300)


def test_a_sound_identity_passes_is_stored_and_is_what_the_next_one_is_compared_with(model, tmp_path):
    sglang = double(model, tmp_path, "sglang")
    try:
        out = gate(sglang.url, tmp_path, "int4-sglang")
        assert not out.get("failed") and out["changed"], out["msg"]
        assert out["figures"]["failed_cases"] == 0 and out["figures"]["cases"] >= 60 and out["before"] is None
        stored = json.loads((tmp_path / "accuracy" / "int4-sglang.json").read_text())
        assert stored["schema_accuracy"] == 100.0 and len(stored["outcomes"]) == out["figures"]["cases"]
        again = gate(sglang.url, tmp_path, "int4-sglang", force=False)  # no restart: the stored result stands
        assert not again["changed"] and again["msg"].startswith("unchanged since the last gate")
        assert KEY not in out["_stdout"]
    finally:
        sglang.stop()
    broken = double(model, tmp_path, "vllm", {"KIMI_DOUBLE_TOOL_ERROR_RATE": "0.1"})
    try:
        out = gate(broken.url, tmp_path, "int4-vllm", previous="int4-sglang")
        assert out["failed"] and out["before"]["identity"] == "int4-sglang"
        assert out["msg"].startswith("the accuracy gate failed for int4-vllm: schema accuracy ")
        assert "is below the minimum 98%" in out["msg"] and "points below 100.00% of int4-sglang" in out["msg"]
        assert out["msg"].count(" | ") == 2  # three failing cases, each with why
        assert not (tmp_path / "accuracy" / "int4-vllm.json").exists()
        # the A/B alone: thresholds off, at most 2 points below the identity it replaces
        out = gate(broken.url, tmp_path, "int4-vllm", previous="int4-sglang", thresholds={})
        assert out["failed"] and out["reasons"][0].endswith("below 100.00% of int4-sglang (at most 2.0 allowed)")
    finally:
        broken.stop()


def test_check_mode_asks_nothing_and_a_bad_probe_file_is_refused(tmp_path):
    out = run_module(MODULE, {"url": "http://127.0.0.1:9", "probes": [yaml.safe_load(open(PROBES))],
                              "identity": "int4-sglang", "result_dir": str(tmp_path)}, check_mode=True)
    assert not out.get("failed") and out["msg"].startswith("would ask ")
    out = run_module(MODULE, {"probes": [{"version": 1, "cases": [{"id": "x", "category": "poetry", "prompt": "p"}]}],
                              "identity": "int4-sglang", "result_dir": str(tmp_path)})
    assert out["failed"] and out["msg"].startswith("the probes are refused: probe file 1: case x: category 'poetry'")


def test_the_a_b_compares_like_with_like_the_same_model_s_requests(tmp_path):
    """A result stored for the identity replaced counts only when taken on the same probes and the same model's
    requests: Kimi-K2.6's (the default, as before models were data) compares with it, Kimi-K3's (other requests:
    always thinking, reasoning efforts) does not."""
    import hashlib
    sys.path.insert(0, os.path.join(ROOT, ".collections"))
    from ansible_collections.kimi.deploy.plugins.module_utils._model.models import model as entry
    probes = [yaml.safe_load(open(PROBES))]
    digest = hashlib.sha256(json.dumps(probes, sort_keys=True).encode("utf-8")).hexdigest()[:16]
    (tmp_path / "accuracy").mkdir()
    (tmp_path / "accuracy" / "int4-sglang.json").write_text(json.dumps(
        {"identity": "int4-sglang", "probes_digest": digest, "schema_accuracy": 100.0, "choice_accuracy": 100.0}))
    (tmp_path / "previous.env").write_text("QUANT=int4\nFRAMEWORK=sglang\n")
    base = {"url": "http://127.0.0.1:9", "probes": probes, "identity": "int4-vllm",
            "result_dir": str(tmp_path / "accuracy"), "previous_env_file": str(tmp_path / "previous.env")}
    for name, compared in (("kimi-k2.6", True), ("kimi-k3", False)):
        model = dict((k, v) for k, v in entry(name).items() if k in ("chat_format", "thinking", "reasoning_efforts"))
        out = run_module(MODULE, dict(base, model=dict(model, name=name)), check_mode=True)
        assert not out.get("failed") and (out["before"] is not None) == compared, (name, out)
    assert run_module(MODULE, base, check_mode=True)["before"]["identity"] == "int4-sglang"


def _k27(tmp_path, env_model=None, stored_model="kimi-k2.6"):
    """Kimi-K2.7-Code int4-vllm after int4-vllm: a stored result taken on the very requests K2.7-Code is asked (the
    same digest), recorded as `stored_model`'s; the previous environment file names `env_model` (None: no MODEL)."""
    import hashlib
    sys.path.insert(0, os.path.join(ROOT, ".collections"))
    from ansible_collections.kimi.deploy.plugins.module_utils import _accuracy as acc
    from ansible_collections.kimi.deploy.plugins.module_utils._model.models import model as entry
    probes = [yaml.safe_load(open(PROBES))]
    model = dict((k, v) for k, v in entry("kimi-k2.7-code").items()
                 if k in ("chat_format", "thinking", "reasoning_efforts"))
    model["name"] = "kimi-k2.7-code"
    digest = hashlib.sha256(json.dumps([probes, acc.model_key(model)], sort_keys=True).encode("utf-8")).hexdigest()[:16]
    (tmp_path / "accuracy").mkdir(parents=True)
    stored = {"identity": "int4-vllm", "probes_digest": digest, "schema_accuracy": 100.0, "choice_accuracy": 100.0}
    if stored_model:
        stored["model"] = stored_model
    (tmp_path / "accuracy" / "int4-vllm.json").write_text(json.dumps(stored))
    (tmp_path / "previous.env").write_text("QUANT=int4\nFRAMEWORK=vllm\n" + ("MODEL=%s\n" % env_model if env_model
                                                                             else ""))
    return run_module(MODULE, {"url": "http://127.0.0.1:9", "probes": probes, "identity": "int4-vllm",
                               "result_dir": str(tmp_path / "accuracy"), "model": model,
                               "previous_env_file": str(tmp_path / "previous.env")}, check_mode=True)


def test_a_model_switch_of_the_same_quant_engine_is_judged_by_the_thresholds_alone(tmp_path):
    """Kimi-K2.7-Code int4-vllm after Kimi-K2.6 int4-vllm: the identity is the same, the model is not, so the A/B has
    nothing to compare with - even a stored result on the same requests (the same digest) is not used, and the message
    says why. The previous model comes from the environment file (MODEL) where it names one, else from the model the
    stored result records (a result without one served kimi-k2.6)."""
    for env_model, stored_model in (("kimi-k2.6", "kimi-k2.7-code"), (None, "kimi-k2.6"), (None, None)):
        out = _k27(tmp_path / ("%s-%s" % (env_model, stored_model)), env_model, stored_model)
        assert not out.get("failed") and out["before"] is None, (env_model, stored_model, out)
        assert out["msg"].endswith("previous identity served kimi-k2.6: compared with the thresholds only"), out["msg"]


def test_the_same_model_s_result_is_compared_with(tmp_path):
    """The control: the stored result of the same model on the same requests is the A/B's (no note)."""
    out = _k27(tmp_path, None, "kimi-k2.7-code")
    assert out["before"]["identity"] == "int4-vllm" and "thresholds only" not in out["msg"], out
