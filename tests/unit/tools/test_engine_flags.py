"""Unit tests of tools/engine_flags.py's pure functions (no network, no wheels)."""
import argparse
import json
import importlib.util
import sys
from pathlib import Path

import pytest

TOOL = Path(__file__).resolve().parents[3] / "tools" / "engine_flags.py"


@pytest.fixture(scope="module", name="ef")
def fixture_ef():
    """The tool, imported as a module."""
    spec = importlib.util.spec_from_file_location("engine_flags", TOOL)
    module = importlib.util.module_from_spec(spec)
    sys.modules["engine_flags"] = module
    spec.loader.exec_module(module)
    return module


CLICK_SRC = '''
import click

@click.command("serve", context_settings={"show_default": True})
@click.argument("model", type=str)
@click.option("--host", type=str, default="localhost", help="Hostname.")
@click.option("--port", type=int, default=8000)
@click.option("--backend", type=click.Choice(["pytorch", "tensorrt"]), default="pytorch")
@click.option("--trust_remote_code", is_flag=True, default=False)
@click.option("--metrics/--no-metrics", default=True)
@click.option("--config", "--extra_llm_api_options", "extra_llm_api_options",
              type=str, default=None)
@click.option("--media", multiple=True)
@click.option("--pair", nargs=2, type=int)
def serve(model, host, port, backend, trust_remote_code, metrics, extra_llm_api_options,
          media, pair):
    pass
'''


def test_click_reader(ef):
    cmd = ef.read_click_command(CLICK_SRC, "serve")
    assert cmd["name"] == "serve"
    assert cmd["positionals"] == ["model"]
    assert cmd["context_settings"] == {"show_default": True}
    opts = cmd["options"]
    assert opts["--host"] == {"choices": None, "takes_value": True, "aliases": [],
                              "dest": "host", "action": "click.Option", "type": "str",
                              "default": "localhost", "multiple": False}
    assert opts["--port"]["type"] == "int" and opts["--port"]["default"] == 8000
    assert opts["--backend"]["choices"] == ["pytorch", "tensorrt"]
    assert opts["--backend"]["type"] == "click.Choice"
    flag = opts["--trust_remote_code"]
    assert flag["takes_value"] is False and flag["is_flag"] is True and flag["type"] == "bool"
    assert opts["--metrics"]["aliases"] == ["--no-metrics"]
    assert opts["--no-metrics"]["takes_value"] is False
    assert opts["--config"]["dest"] == "extra_llm_api_options"
    assert opts["--config"]["aliases"] == ["--extra_llm_api_options"]
    assert opts["--extra_llm_api_options"]["aliases"] == ["--config"]
    assert opts["--media"]["multiple"] is True
    assert opts["--pair"]["nargs"] == 2
    # declaration order (the trtllm document sorts after collapsing aliases)
    assert list(opts)[:2] == ["--host", "--port"]


def test_click_dest_is_first_long_option(ef):
    src = CLICK_SRC.replace(
        '@click.option("--media", multiple=True)',
        '@click.option("--free_gpu_memory_fraction", "--kv_cache_free_gpu_memory_fraction", '
        'type=float)\n@click.option("--moe_expert_parallel_size", "--ep_size", type=int)\n'
        '@click.option("--media", multiple=True)')
    opts = ef.collapse_aliases(ef.read_click_command(src, "serve")["options"])
    assert opts["--free_gpu_memory_fraction"]["dest"] == "free_gpu_memory_fraction"
    assert opts["--moe_expert_parallel_size"]["aliases"] == ["--ep_size"]
    assert "--ep_size" not in opts


def test_click_reader_missing_function(ef):
    with pytest.raises(ValueError):
        ef.read_click_command(CLICK_SRC, "nope")


MODELS_BASE = '''
from pydantic import BaseModel, ConfigDict, Field
from typing import Literal, Optional
from enum import Enum

class StrictBaseModel(BaseModel):
    model_config = ConfigDict(extra="forbid")

class CapacitySchedulerPolicy(str, Enum):
    MAX_UTILIZATION = "MAX_UTILIZATION"
    GUARANTEED_NO_EVICT = "GUARANTEED_NO_EVICT"

KvDtype = Literal["auto", "fp8"]

class KvCacheConfig(StrictBaseModel):
    free_gpu_memory_fraction: Optional[float] = Field(
        default=0.9, description="Fraction of free GPU memory for the KV cache.")
    dtype: str = Field(default="auto")
    quant: KvDtype = "auto"
    enable_block_reuse: bool = True
'''

MODELS_ARGS = '''
from pydantic import Field
from typing import ClassVar, Literal, Optional
from .base import StrictBaseModel, KvCacheConfig, CapacitySchedulerPolicy

class CudaGraphConfig(StrictBaseModel):
    batch_sizes: Optional[list[int]] = None
    enable_padding: bool = False

class BaseLlmArgs(StrictBaseModel):
    tensor_parallel_size: int = Field(default=1, alias="tp_size")
    kv_cache_config: KvCacheConfig = Field(default_factory=KvCacheConfig)
    backend: Literal["pytorch", "_autodeploy"] = "pytorch"
    policy: CapacitySchedulerPolicy = CapacitySchedulerPolicy.MAX_UTILIZATION
    model: str = Field(...)
    _private: int = 0
    counter: ClassVar[int] = 0

class TorchLlmArgs(BaseLlmArgs):
    cuda_graph_config: Optional[CudaGraphConfig] = Field(default_factory=CudaGraphConfig)
    backend: Literal["pytorch"] = "pytorch"
    moe_backend: "CudaGraphConfig | None" = None
'''


def test_model_reader(ef):
    reader = ef.ModelReader({"pkg.base": MODELS_BASE, "pkg.args": MODELS_ARGS})
    doc = ef.schema_document(reader, "TorchLlmArgs")
    assert doc["class"] == "TorchLlmArgs"
    assert doc["extra"] == "forbid"
    assert doc["bases"] == ["BaseLlmArgs", "StrictBaseModel"]
    fields = doc["fields"]
    # inheritance: base fields first, derived override
    assert list(fields)[:2] == ["tensor_parallel_size", "kv_cache_config"]
    assert fields["backend"]["choices"] == ["pytorch"]
    assert "_private" not in fields and "counter" not in fields
    assert fields["tensor_parallel_size"] == {"type": "int", "alias": "tp_size", "default": 1}
    assert fields["model"]["required"] is True
    assert fields["policy"]["choices"] == ["MAX_UTILIZATION", "GUARANTEED_NO_EVICT"]
    kv = fields["kv_cache_config"]
    assert kv["model"] == "KvCacheConfig" and kv["extra"] == "forbid"
    assert kv["default_factory"] == "KvCacheConfig"
    assert kv["fields"]["free_gpu_memory_fraction"]["default"] == 0.9
    assert kv["fields"]["free_gpu_memory_fraction"]["type"] == "Optional[float]"
    assert kv["fields"]["free_gpu_memory_fraction"]["description"].startswith("Fraction")
    assert kv["fields"]["quant"]["choices"] == ["auto", "fp8"]  # through a type alias
    assert kv["fields"]["dtype"] == {"type": "str", "default": "auto"}
    cg = fields["cuda_graph_config"]  # Optional[Model]
    assert cg["model"] == "CudaGraphConfig"
    assert set(cg["fields"]) == {"batch_sizes", "enable_padding"}
    assert fields["moe_backend"]["model"] == "CudaGraphConfig"  # string annotation, X | None


def test_model_reader_class_config_and_default_extra(ef):
    src = '''
from pydantic import BaseModel
class A(BaseModel):
    x: int = 1
class B(BaseModel):
    class Config:
        extra = "allow"
    y: "A" = None
'''
    reader = ef.ModelReader({"m": src})
    assert reader.model_config("A") == {}
    assert ef.schema_document(reader, "A")["extra"] == "ignore"
    doc = ef.schema_document(reader, "B")
    assert doc["extra"] == "allow"
    assert doc["fields"]["y"]["fields"] == {"x": {"type": "int", "default": 1}}


def test_dump_argparse(ef):
    parser = argparse.ArgumentParser()
    parser.add_argument("model_tag", nargs="?")
    parser.add_argument("--tensor-parallel-size", "-tp", type=int, default=1)
    parser.add_argument("--kv-cache-dtype", choices=["auto", "fp8"], default="auto")
    parser.add_argument("--enable-metrics", action="store_true")
    parser.add_argument("--served-model-name", nargs="+")
    parser.add_argument("--level", type=int, choices=[0, 1])
    parser.add_argument("--foo", action=argparse.BooleanOptionalAction)

    def optional_type(kind):  # vLLM's wrapper of a builtin type
        def _optional_type(value):
            return None if value == "" else kind(value)
        return _optional_type

    parser.add_argument("--max-num-seqs", type=optional_type(int))
    parser.add_argument("--config", type=json.loads)
    options, short = ef.dump_argparse(parser)
    assert short == {"-h": "--help", "-tp": "--tensor-parallel-size"}
    assert list(options) == sorted(options)
    assert options["--help"] == {"choices": None, "takes_value": False, "aliases": ["-h"],
                                 "dest": "help", "action": "_HelpAction"}
    assert options["--tensor-parallel-size"] == {
        "choices": None, "takes_value": True, "aliases": ["-tp"],
        "dest": "tensor_parallel_size", "type": "int", "action": "_StoreAction"}
    assert options["--max-num-seqs"]["type"].endswith("optional_type.<locals>._optional_type(int)")
    assert options["--config"]["type"] == "json.loads"
    assert "type" not in options["--enable-metrics"] and "type" not in options["--kv-cache-dtype"]
    assert options["--kv-cache-dtype"]["choices"] == ["auto", "fp8"]
    assert options["--enable-metrics"]["takes_value"] is False
    assert options["--served-model-name"]["nargs"] == "+"
    assert list(options["--served-model-name"]) == [
        "choices", "takes_value", "aliases", "dest", "nargs", "action"]
    assert options["--level"]["choices"] == ["0", "1"]
    assert options["--no-foo"]["aliases"] == ["--foo"]
    assert options["--foo"]["action"] == "BooleanOptionalAction"
    assert "model_tag" not in options


def test_compare(ef):
    old = {"options": {"--a": {"takes_value": True, "dest": "a"},
                       "--b": {"takes_value": False, "dest": "b"}}}
    new = {"options": {"--a": {"takes_value": True, "dest": "a", "nargs": "+"},
                       "--c": {"takes_value": False, "dest": "c"}}}
    assert ef.compare(new, old) == ["only in old: --b", "only in new: --c",
                                    "--a nargs: old=None new='+'"]
    assert ef.compare(old, old) == []


def test_missing_module_chain(ef):
    inner = ModuleNotFoundError("No module named 'torchvision'", name="torchvision")
    try:
        try:
            raise inner
        except ModuleNotFoundError as exc:
            raise RuntimeError("wrapped") from exc
    except RuntimeError as outer:
        assert ef._missing_module(outer, set()) == "torchvision"  # pylint: disable=protected-access
        assert ef._missing_module(outer, {"torchvision"}) is None  # pylint: disable=protected-access


def test_literal_names(ef):
    # pylint: disable=import-outside-toplevel
    from typing import Annotated, Literal, Optional, Union
    mtp = Literal["deepseek_mtp", "mtp"]
    eagle = Literal["eagle", "eagle3", mtp]
    # the shape of vLLM's SpeculativeMethod
    method = Literal["ngram", "suffix", eagle, Literal["ngram_gpu"]]
    assert ef.literal_names(method) == ["ngram", "suffix", "eagle", "eagle3", "deepseek_mtp", "mtp",
                                        "ngram_gpu"]
    assert ef.literal_names(Optional[method]) == ef.literal_names(method | None) \
        == ef.literal_names(method)
    assert ef.literal_names(Union[mtp, Literal["a", None, 1]], Annotated[eagle, "doc"]) == [
        "deepseek_mtp", "mtp", "a", "eagle", "eagle3"]
    # no Literal, no names (an annotation left as text included)
    assert ef.literal_names(str, int | None, "SpeculativeMethod | None") == []


def _module(name, **attrs):
    import types  # pylint: disable=import-outside-toplevel
    module = types.ModuleType(name)
    module.__dict__.update(attrs)
    return module


@pytest.mark.parametrize("registry, aliases", [
    ({"_RESERVED_ALIASES": frozenset({"NEXTN"})}, ["NEXTN"]),  # 0.5.13 on
    ({"_RESERVED_NAMES": frozenset({"EAGLE", "NEXTN", "NONE"})}, ["NEXTN"]),  # 0.5.12
    (None, []),  # no registry module
])
def test_sglang_speculative_algorithms(ef, monkeypatch, registry, aliases):
    import enum  # pylint: disable=import-outside-toplevel
    algorithm = enum.Enum("SpeculativeAlgorithm", ["DFLASH", "EAGLE", "EAGLE3", "NONE"])
    spec_info = "sglang.srt.speculative.spec_info"
    monkeypatch.setitem(sys.modules, spec_info, _module(spec_info, SpeculativeAlgorithm=algorithm))
    monkeypatch.setitem(sys.modules, "sglang.srt.speculative.spec_registry",
                        None if registry is None else _module("spec_registry", **registry))
    opts = {"--speculative-algorithm": {}}
    assert ef.valid_values(opts, *ef.VALID_VALUES["sglang"]["--speculative-algorithm"]) == sorted(
        ["DFLASH", "EAGLE", "EAGLE3"] + aliases)


def test_vllm_speculative_methods(ef, monkeypatch):
    from typing import Literal  # pylint: disable=import-outside-toplevel
    method = Literal["ngram", Literal["eagle", Literal["mtp"]]]
    entry = ef.VALID_VALUES["vllm"]["--speculative-config"]
    # the first module that imports and has the name wins; later ones are tried in turn
    monkeypatch.setitem(sys.modules, "vllm.config.speculative", None)
    monkeypatch.setitem(sys.modules, "vllm.config",
                        _module("vllm.config", SpeculativeMethod=method))
    assert ef.valid_values({"--speculative-config": {}}, *entry) == ["eagle", "mtp", "ngram"]
    monkeypatch.setitem(sys.modules, "vllm.config.speculative",
                        _module("vllm.config.speculative", SpeculativeMethod=Literal["suffix"]))
    assert ef.valid_values({"--speculative-config": {}}, *entry) == ["suffix"]
    # a version with --spec-method lists them as its choices: nothing more on --speculative-config
    assert ef.valid_values({"--speculative-config": {}, "--spec-method": {}}, *entry) is None
    monkeypatch.setitem(sys.modules, "vllm.config.speculative", None)
    monkeypatch.setitem(sys.modules, "vllm.config", _module("vllm.config"))
    assert ef.valid_values({"--speculative-config": {}}, *entry) is None  # left out, not []


SERVE_SRC = '''
import click
from tensorrt_llm.llmapi.reasoning_parser import ReasoningParserFactory
from tensorrt_llm.serve.tool_parser import ToolParserFactory

@click.command("serve")
@click.argument("model", type=str)
@click.option("--tensor_parallel_size", "--tp_size", type=int, default=1)
@click.option("--config", "--extra_llm_api_options", "extra_llm_api_options", type=str,
              default=None)
@click.option("--reasoning_parser", type=click.Choice(ReasoningParserFactory.parsers.keys()),
              default=None)
@click.option("--tool_parser", type=click.Choice(ToolParserFactory.parsers.keys()), default=None)
def serve(model, tensor_parallel_size, extra_llm_api_options, reasoning_parser, tool_parser):
    pass
'''

TOOL_FACTORY_SRC = '''
class ToolParserFactory:
    parsers: dict = {"qwen3": Qwen3ToolParser, "kimi_k2": KimiK2ToolParser}
'''

REASONING_SRC = '''
class ReasoningParserFactory:
    parsers = {"deepseek-r1": DeepSeekR1Parser}

@register_reasoning_parser("qwen3", reasoning_at_start=True)
class Qwen3ReasoningParser:
    pass
'''


def _source_tree(root, version="1.3.0rc9", kimi=True):
    """A minimal tree laid out like the package."""
    files = {
        "tensorrt_llm/commands/serve.py": SERVE_SRC,
        "tensorrt_llm/llmapi/base.py": MODELS_BASE,
        "tensorrt_llm/llmapi/llm_args.py": MODELS_ARGS.replace(
            "from .base import", "from tensorrt_llm.llmapi.base import"),
        "tensorrt_llm/serve/tool_parser/tool_parser_factory.py": TOOL_FACTORY_SRC,
        "tensorrt_llm/llmapi/reasoning_parser.py": REASONING_SRC,
        "tensorrt_llm/version.py": f'__version__ = "{version}"\n',
        "tensorrt_llm/_torch/models/modeling_kimi_k25.py":
            '@register_auto_model("KimiK25ForConditionalGeneration")\nclass A: pass\n'
            if kimi else "class A: pass\n",
        "setup.py": "entry_points={'console_scripts': "
                    "['trtllm-serve=tensorrt_llm.commands.serve:main']}\n",
    }
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_source_tree(ef, tmp_path):
    src = _source_tree(tmp_path / "src")
    out = tmp_path / "out"
    assert ef.main(["--engine", "trtllm", "--version", "1.3.0rc9", "--source", str(src),
                    "--source-commit", "0123abc", "--out-dir", str(out)]) == 0
    doc = json.loads((out / "engine_flags_trtllm-1.3.0rc9.json").read_text())
    assert doc["source"] == ("GitHub NVIDIA/TensorRT-LLM tag v1.3.0rc9 commit 0123abc "
                             "(source tree; tensorrt_llm/version.py says 1.3.0rc9)")
    assert "tagged source" in doc["method"]
    assert doc["engine"] == "trtllm" and doc["positionals"] == ["model"]
    opts = doc["options"]
    # aliases only under the primary spelling
    assert "--tp_size" not in opts and "--extra_llm_api_options" not in opts
    assert opts["--tensor_parallel_size"]["aliases"] == ["--tp_size"]
    assert opts["--config"]["dest"] == "extra_llm_api_options"
    assert opts["--tool_parser"]["choices"] == ["qwen3", "kimi_k2"]
    assert opts["--reasoning_parser"]["choices"] == ["deepseek-r1", "qwen3"]
    beh = doc["parser_behaviour"]
    assert beh["config_option"] == ["--config", "--extra_llm_api_options"]
    assert beh["tool_parsers"]["names"] == ["qwen3", "kimi_k2"]
    assert beh["reasoning_parsers"]["names"] == ["deepseek-r1", "qwen3"]
    assert beh["kimi_k25_registered"]["registered"] is True
    assert beh["kimi_k25_registered"]["file"] == \
        "tensorrt_llm/_torch/models/modeling_kimi_k25.py"
    assert beh["console_script"].startswith("trtllm-serve = tensorrt_llm.commands.serve:main")
    assert doc["llm_args"]["class"] == "TorchLlmArgs" and doc["llm_args"]["extra"] == "forbid"
    assert "kv_cache_config" in doc["llm_args"]["fields"]


def test_source_tree_checks(ef, tmp_path, capsys):
    src = _source_tree(tmp_path / "src", kimi=False)
    base = ["--engine", "trtllm", "--source", str(src), "--out-dir", str(tmp_path)]
    with pytest.raises(SystemExit):  # version.py disagrees
        ef.main(base + ["--version", "1.2.1", "--source-commit", "abc"])
    assert "says 1.3.0rc9" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # no commit
        ef.main(base + ["--version", "1.3.0rc9"])
    with pytest.raises(SystemExit):  # not trtllm
        ef.main(["--engine", "vllm", "--version", "1", "--source", str(src),
                 "--source-commit", "abc"])
    ef.main(base + ["--version", "1.3.0rc9", "--source-commit", "abc"])
    doc = json.loads((tmp_path / "engine_flags_trtllm-1.3.0rc9.json").read_text())
    assert doc["parser_behaviour"]["kimi_k25_registered"]["registered"] is False


def test_source_tree_approximate(ef, tmp_path, capsys):
    src = _source_tree(tmp_path / "src", version="1.3.0rc9")
    (src / "tensorrt_llm/_torch/models/modeling_kimi_k25.py").unlink()
    (src / "tensorrt_llm/_torch/models").rmdir()
    files = tmp_path / "files.json"
    files.write_text(json.dumps({
        "repo": "NVIDIA/TensorRT-LLM",
        "files": [{"path": "tensorrt_llm/commands/serve.py", "commit": "aaa"},
                  {"path": "tensorrt_llm/llmapi/llm_args.py", "commit": "bbb",
                   "kind": "digest"}],
        "cross_check": "option names cross-checked against X"}))
    base = ["--engine", "trtllm", "--version", "1.3.0rc17", "--source", str(src),
            "--out-dir", str(tmp_path)]
    # the tag mode still checks version.py (1.3.0rc9 != 1.3.0rc17) ...
    with pytest.raises(SystemExit):
        ef.main(base + ["--source-commit", "ccc"])
    assert "version.py says 1.3.0rc9" in capsys.readouterr().err
    # ... approximate mode needs the files JSON, and the JSON needs the mode
    with pytest.raises(SystemExit):
        ef.main(base + ["--provenance", "approximate"])
    with pytest.raises(SystemExit):
        ef.main(base + ["--source-commit", "ccc", "--source-files-json", str(files)])
    # approximate mode skips the version.py check and records each file's commit
    assert ef.main(base + ["--provenance", "approximate", "--source-files-json",
                           str(files)]) == 0
    doc = json.loads((tmp_path / "engine_flags_trtllm-1.3.0rc17.json").read_text())
    assert doc["provenance"] == "approximate"
    assert doc["source"] == (
        "NOT the v1.3.0rc17 tag: upstream NVIDIA/TensorRT-LLM files as stored in the code "
        "index, each at its own commit: serve.py@aaa, llm_args.py@bbb; option names "
        "cross-checked against X; regenerate from the tag with `make engine-flags "
        "ENGINE=trtllm VERSION=1.3.0rc17 ARGS='--source DIR --source-commit SHA'` "
        "where GitHub is reachable")
    assert [(f["path"], f["repo"], f["commit"]) for f in doc["provenance_files"]["files"]] == [
        ("tensorrt_llm/commands/serve.py", "NVIDIA/TensorRT-LLM", "aaa"),
        ("tensorrt_llm/llmapi/llm_args.py", "NVIDIA/TensorRT-LLM", "bbb")]
    assert "tagged source" not in doc["method"]
    assert doc["parser_behaviour"]["kind"] == "click"
    # no models folder in the tree: not checked, rather than "not registered"
    assert doc["parser_behaviour"]["kimi_k25_registered"]["registered"] is None
    assert doc["llm_args"]["extra"] == "forbid"


def test_add_types_keeps_the_committed_list_and_adds_the_dumps_types(ef):
    old = {"source": "old", "options": {"--a": {"takes_value": True, "dest": "a", "validated": "by hand"},
                                        "--b": {"takes_value": False, "dest": "b"}}}
    new = {"source": "wheel sha256:x", "generated": "2026-11-27",
           "options": {"--a": {"takes_value": True, "dest": "a", "type": "int"},
                       "--b": {"takes_value": False, "dest": "b"}}}
    merged = ef.add_types(new, old)
    assert merged["options"]["--a"] == {"takes_value": True, "dest": "a", "validated": "by hand", "type": "int"}
    assert "type" not in merged["options"]["--b"] and merged["source"] == "old"
    assert merged["types_source"].startswith("wheel sha256:x")
    with pytest.raises(SystemExit, match="make the whole list again"):
        ef.add_types({"source": "s", "options": {"--c": {}}}, old)
