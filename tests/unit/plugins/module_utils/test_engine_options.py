"""_engine_options is generated from the pinned parsers' JSON dumps: it must be exactly what the generator makes."""
import importlib.util
import json
import os

import pytest

from ansible_collections.kimi.deploy.plugins.module_utils import _deployment as dm
from ansible_collections.kimi.deploy.plugins.module_utils._engine_options import ENGINE_OPTIONS

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
GENERATOR = os.path.join(ROOT, "tests", "doubles", "engine", "gen_engine_options.py")
MODULE = os.path.join(ROOT, "plugins", "module_utils", "_engine_options.py")
FLAGS_DIR = os.path.join(ROOT, "tests", "fixtures", "engine_flags")


def generator():
    spec = importlib.util.spec_from_file_location("gen_engine_options", GENERATOR)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def dump(engine):
    with open(os.path.join(FLAGS_DIR, "engine_flags_%s-%s.json" % (engine, dm.ENGINE_VERSIONS[engine]))) as handle:
        return json.load(handle)


def test_the_module_is_what_the_generator_makes_from_the_fixtures():
    with open(MODULE, encoding="utf-8") as handle:
        committed = handle.read()
    assert committed == generator().render(FLAGS_DIR), (
        "plugins/module_utils/_engine_options.py differs from tests/fixtures/engine_flags/*.json: "
        "run python3 tests/doubles/engine/gen_engine_options.py")


def test_one_table_per_pinned_engine():
    assert sorted(ENGINE_OPTIONS) == sorted(dm.ENGINES)
    for engine in dm.ENGINES:
        assert ENGINE_OPTIONS[engine]["version"] == dm.ENGINE_VERSIONS[engine]


@pytest.mark.parametrize("engine", sorted(dm.ENGINE_VERSIONS))
def test_every_option_string_maps_to_its_dest(engine):
    data = dump(engine)
    index = dm.OPTION_INDEX[engine]
    for option, spec in data["options"].items():
        values = 0 if not spec["takes_value"] else spec.get("nargs") or 1
        assert index[option] == (spec["dest"], values), option
    for short, option in data["short_options"].items():
        assert index[short] == index[option], short
    assert set(index) == set(data["options"]) | set(data["short_options"])


def test_parser_behaviour_bits():
    vllm, sglang = ENGINE_OPTIONS["vllm"], ENGINE_OPTIONS["sglang"]
    assert (vllm["underscores"], sglang["underscores"]) == (True, False)
    assert vllm["optimization_level"] == "--optimization-level" and sglang["optimization_level"] is None
    assert "--speculative-config" in vllm["dotted"] and "--config" not in vllm["dotted"] and sglang["dotted"] == ()
    assert vllm["dests"]["tensor_parallel_size"] == (1, "--tensor-parallel-size", "-tp")
    assert vllm["dests"]["trust_remote_code"] == (0, "--trust-remote-code", "--no-trust-remote-code")
    assert sglang["dests"]["tensor_parallel_size"] == (1, "--tensor-parallel-size", "--tp-size")
    assert vllm["dests"]["served_model_name"][0] == "+"


def test_generator_refuses_two_versions_of_one_engine(tmp_path):
    for version in ("0.22.1", "0.23.0"):
        data = dict(dump("vllm"), version=version)
        (tmp_path / ("engine_flags_vllm-%s.json" % version)).write_text(json.dumps(data))
    with pytest.raises(ValueError, match="two pinned versions of vllm"):
        generator().render(str(tmp_path))
