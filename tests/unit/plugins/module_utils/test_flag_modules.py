"""The _engines/flags/<engine>_<version> modules are generated from the flag lists (JSON dumps of the released parsers): each
must be exactly what tools/gen_flag_modules.py makes, and each engine version the collection knows has one."""
import importlib
import importlib.util
import json
import os

import pytest

from ansible_collections.kimi.deploy.plugins.module_utils._engines import registry as eng
from ansible_collections.kimi.deploy.plugins.module_utils._engines.cli import option_index

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
GENERATOR = os.path.join(ROOT, "tools", "gen_flag_modules.py")
MODULE_DIR = os.path.join(ROOT, "plugins", "module_utils", "_engines", "flags")
FLAGS_DIR = os.path.join(ROOT, "tests", "fixtures", "engine_flags")
# Every engine build's release (an Ascend build may run another engine's parser: vLLM-Ascend runs vLLM's) and the
# flag lists themselves, by the engine and version they were made from.
BUILD_RELEASES = sorted((e, v) for e, spec in eng.ENGINES.items() for v in spec["versions"])
TABLES = dict(((eng.options(e, v)["engine"], eng.options(e, v)["version"]), eng.options(e, v)) for e, v in BUILD_RELEASES)
RELEASES = sorted(TABLES)


def generator():
    spec = importlib.util.spec_from_file_location("gen_flag_modules", GENERATOR)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def dump(engine, version):
    with open(os.path.join(FLAGS_DIR, "engine_flags_%s-%s.json" % (engine, version))) as handle:
        return json.load(handle)


def test_every_module_is_what_the_generator_makes_from_the_lists():
    made = generator().render(FLAGS_DIR, MODULE_DIR)
    assert sorted(made) == sorted(generator().flag_modules(MODULE_DIR)), (
        "a flag module without its list, or a list without its module: run python3 tools/gen_flag_modules.py")
    for path, text in made.items():
        with open(path, encoding="utf-8") as handle:
            assert handle.read() == text, "%s is out of date: run python3 tools/gen_flag_modules.py" % path


@pytest.mark.parametrize("engine, version", BUILD_RELEASES)
def test_every_known_release_has_its_own_list(engine, version):
    table = eng.options(engine, version)
    spec = eng.ENGINES[engine]
    made_from = spec["versions"][version].get("parser_of") or (spec["name"], version)
    assert (table["engine"], table["version"]) == tuple(made_from)
    assert dump(*made_from)["version"] == made_from[1]


@pytest.mark.parametrize("engine, version", RELEASES)
def test_every_option_string_maps_to_its_dest(engine, version):
    data = dump(engine, version)
    index = option_index(TABLES[engine, version])
    for option, spec in data["options"].items():
        values = 0 if not spec["takes_value"] else spec.get("nargs") or 1
        assert index[option] == (spec["dest"], values), option
    for short, option in data.get("short_options", {}).items():
        assert index[short] == index[option], short
    aliases = set(a for spec in data["options"].values() for a in spec.get("aliases") or ())
    assert set(index) == set(data["options"]) | set(data.get("short_options", {})) | aliases


def test_parser_behaviour_bits():
    vllm, sglang = eng.options("vllm", "0.22.1"), eng.options("sglang", "0.5.12.post1")
    assert (vllm["underscores"], sglang["underscores"]) == (True, False)
    assert (vllm["parser"], sglang["parser"]) == ("argparse", "argparse")
    assert vllm["optimization_level"] == "--optimization-level" and sglang["optimization_level"] is None
    assert "--speculative-config" in vllm["dotted"] and "--config" not in vllm["dotted"] and sglang["dotted"] == ()
    assert vllm["dests"]["tensor_parallel_size"] == (1, "--tensor-parallel-size", "-tp")
    assert vllm["dests"]["trust_remote_code"] == (0, "--trust-remote-code", "--no-trust-remote-code")
    assert sglang["dests"]["tensor_parallel_size"] == (1, "--tensor-parallel-size", "--tp-size")
    assert vllm["dests"]["served_model_name"][0] == "+"
    assert "kimi_k2" in vllm["values"]["tool_call_parser"] and "fp8_e4m3" in sglang["values"]["kv_cache_dtype"]


def test_the_check_mode_of_the_generator_finds_a_stale_module(tmp_path, monkeypatch):
    gen = generator()
    made = gen.render(FLAGS_DIR, str(tmp_path))
    for path, text in made.items():
        with open(path, "w") as handle:
            handle.write(text.replace("'version'", "'versions'", 1) if "vllm_0_22_1" in path else text)
    monkeypatch.setattr(gen, "MODULE_DIR", str(tmp_path))
    monkeypatch.setattr(gen, "render", lambda: made)
    assert gen.main(["gen", "--check"]) == 1


@pytest.mark.parametrize("spec, kind", [
    ({"takes_value": True, "type": "int"}, "int"),
    ({"takes_value": True, "type": "float"}, "float"),
    ({"takes_value": True, "type": "click.INT"}, "int"),
    ({"takes_value": True, "type": "vllm.engine.arg_utils.optional_type.<locals>._optional_type(int)"}, "int"),
    ({"takes_value": True, "type": "x.human_readable_float(float)"}, "float"),
    ({"takes_value": True, "type": "str"}, None),
    ({"takes_value": True, "type": "json.loads"}, "json"),
    ({"takes_value": True, "type": "vllm.engine.arg_utils.union_dict_and_str"}, None),
    ({"takes_value": True, "type": "click.Path(exists=True)"}, None),
    ({"takes_value": False, "type": "bool"}, None),
    ({"takes_value": True}, None),
])
def test_value_kind_reads_the_parsers_type(spec, kind):
    assert generator().value_kind(spec) == kind


def test_the_trtllm_table_types_its_numeric_options():
    trtllm = TABLES[("trtllm", "1.3.0rc17")]
    assert trtllm["types"]["max_batch_size"] == "int" and trtllm["types"]["free_gpu_memory_fraction"] == "float"
    assert all(kind in ("int", "float", "json") for table in TABLES.values() for kind in table["types"].values())
    assert TABLES[("vllm", "0.22.1")]["types"]["default_chat_template_kwargs"] == "json"
