"""The deployment's features hook into resolve() through declared seams (_model/deployment.py: SEAMS, FEATURES), and an
engine file reads what a feature resolved from the deployment (_engines/spec.py: present, resolved), never the
feature's module."""
import pytest

from ansible_collections.kimi.deploy.plugins.module_utils._model import deployment as dm
from ansible_collections.kimi.deploy.plugins.module_utils._model import kv_offload
from ansible_collections.kimi.deploy.plugins.module_utils._engines import spec
from ansible_collections.kimi.deploy.plugins.module_utils._engines.registry import ENGINES, engine_argv
from ansible_collections.kimi.deploy.plugins.module_utils._model.checkpoints import GIB
from test_deployment import H200x8, SHA


def test_every_feature_hooks_after_a_declared_seam():
    assert dm.FEATURES
    for after, feature in dm.FEATURES:
        assert after in dm.SEAMS and callable(feature)
    # the features run in declared order: a seam's hooks keep their order, seams theirs
    positions = [dm.SEAMS.index(after) for after, _feature in dm.FEATURES]
    assert positions == sorted(positions)


def test_a_feature_returns_its_fragment_and_resolve_merges_it():
    dep = dm.resolve({"quant": "int4", "engine": "vllm", "revisions": {"int4": SHA}, "kv_offload": "host",
                      "kv_offload_gb": 256, "host_memory_bytes": 2048 * GIB}, H200x8)
    for field in ("kv_offload", "loader", "load_format", "hour_cost", "kernel_cache"):
        assert field in dep, field
    reasons = []
    fragment = kv_offload.resolve({"inputs": {"kv_offload": "host", "kv_offload_gb": 256,
                                              "host_memory_bytes": 2048 * GIB},
                                   "spec": ENGINES["vllm"], "version": dep["engine_version"], "summary": None,
                                   "deployment": dep, "reasons": reasons, "warnings": []})
    assert list(fragment) == ["kv_offload"] and fragment["kv_offload"] == dep["kv_offload"]
    assert reasons == [dep["kv_offload"]["why"]]


@pytest.mark.parametrize("key", sorted(k for k in ENGINES if ENGINES[k].get("kv_offload")))
def test_the_engine_flags_of_the_kv_tier_are_data_over_the_resolved_value(key):
    """The tier's Args read deployment["kv_offload"] through spec.present / spec.resolved: a made-up resolved value is
    rendered as it is, with no sizing run; without the tier nothing is."""
    args = [a for a in ENGINES[key]["args"] if getattr(a.when, "__name__", "") == "present_kv_offload"]
    if not args:  # a tier in the config file (TensorRT-LLM's host_cache_size), read from the same dict
        assert ENGINES[key]["config"] is not None
        return
    rendered = [token for arg in args for token in arg.render({"kv_offload": {"value": "12345"}})]
    assert "12345" in rendered
    assert [token for arg in args for token in arg.render({"kv_offload": None})] == []


def test_present_and_resolved():
    assert spec.present("x")({"x": {"a": 1}}) and not spec.present("x")({"x": None}) and not spec.present("x")({})
    assert spec.resolved("x", "a")({"x": {"a": "1"}}) == "1" and spec.resolved("x", "a")({"x": None}) is None


def test_the_argv_reads_the_resolved_tier():
    dep = dm.resolve({"quant": "int4", "engine": "vllm", "revisions": {"int4": SHA}, "kv_offload": "host",
                      "kv_offload_gb": 256, "host_memory_bytes": 2048 * GIB}, H200x8)
    argv = engine_argv(dict(dep, kv_offload=dict(dep["kv_offload"], value="7")))
    assert argv[argv.index("--kv-offloading-size") + 1] == "7"
