"""Make an engine's flag list (tests/fixtures/engine_flags/*.json) from its RELEASED package.

Usage::

    python3 tools/engine_flags.py --engine vllm --version 0.33.0
    python3 tools/engine_flags.py --engine sglang --version 0.5.23 --out-dir /tmp/flags
    python3 tools/engine_flags.py --engine trtllm --version 1.2.1 [--wheel PATH]
    python3 tools/engine_flags.py --engine vllm-router --version 0.1.17
    python3 tools/engine_flags.py --engine smg --version 1.13.0
    python3 tools/engine_flags.py --engine trtllm --version 1.2.1 --source DIR \\
        --source-repo NVIDIA/TensorRT-LLM --source-tag v1.2.1 --source-commit SHA
    python3 tools/engine_flags.py --engine vllm --version 0.22.1 --out-dir /tmp/f \\
        --compare tests/fixtures/engine_flags/engine_flags_vllm-0.22.1.json

The release is fetched with ``pip download --no-deps <package>==<version>`` into
``.cache/engine-flags/wheels`` (``--wheel`` takes a wheel already on disk). Only
the wheel's files are read; the package is never installed.

trtllm only: ``--source DIR`` reads the same files from a source tree instead of
a wheel (DIR/tensorrt_llm/commands/serve.py, DIR/tensorrt_llm/llmapi/llm_args.py
and the package modules they import models from), for when the wheel cannot be
downloaded (it lives on pypi.nvidia.com). ``--source-repo``, ``--source-tag`` and
``--source-commit`` say where DIR came from; they are recorded in ``source``. The
tree must be one commit of the tagged release: the tool checks only that
DIR/tensorrt_llm/version.py, when present, names ``--version``.
``--provenance approximate --source-files-json FILE`` is for a DIR assembled
from upstream files at DIFFERENT commits (e.g. from a code index when the tag
cannot be fetched): FILE lists each file's path, repository and commit; the
version.py check is skipped; the JSON gets ``"provenance": "approximate"``,
``provenance_files`` and a ``source`` that starts "NOT the v<version> tag".

Method per engine:

* vllm, sglang (argparse): the wheel's Python files are unzipped into
  ``.cache/engine-flags/src/<wheel>`` and a child process (in a throwaway venv,
  ``.cache/engine-flags/venv-<engine>-<version>``, holding torch CPU when a local
  wheel of it is found, triton, transformers at the engine's pin, pydantic, ...)
  imports the real parser code and builds the real parser: vLLM
  ``make_arg_parser(FlexibleArgumentParser())``, SGLang
  ``ServerArgs.add_cli_args(argparse.ArgumentParser())``. Any module the import
  chain needs but the venv lacks is replaced by a permissive stub, one at a
  time (the child restarts after each), as vLLM's own docs build does. The
  parser's ``_actions`` are dumped (options, short options, choices, nargs,
  dest, action class, the value's ``type``).
* smg, vllm-router (the routers, argparse): the same, with
  ``RouterArgs.add_cli_args(argparse.ArgumentParser(), use_router_prefix=False)``
  of ``<package>/router_args.py`` (what ``launch_router.parse_router_args``
  builds). The helper venv gets no packages (``helper_packages``): the parser
  code needs only the standard library, and smg's compiled ``smg_rs``
  (``native``), stubbed ahead of the wheel's empty marker file of it.
  Choices computed by a stubbed module (smg's
  ``--tool-call-parser``) are unknown: ``choices`` is null and
  ``choices_from`` names the stubbed call.
* trtllm (click + pydantic): static only (``ast``), no import: the click
  decorators of ``serve`` in ``tensorrt_llm/commands/serve.py`` and the pydantic
  models behind the ``--config``/``--extra_llm_api_options`` YAML
  (``TorchLlmArgs`` and its bases in ``tensorrt_llm/llmapi/llm_args.py``, with
  every nested config model down to the leaves). Options are keyed by their
  first long spelling; the other spellings are only in its ``aliases``. The
  tool and reasoning parser registries
  (``tensorrt_llm/serve/tool_parser/tool_parser_factory.py``,
  ``tensorrt_llm/llmapi/reasoning_parser.py``) fill the ``choices`` of
  ``--tool_parser``/``--reasoning_parser`` when those are
  ``click.Choice(XFactory.parsers.keys())``, and ``parser_behaviour`` records them
  with whether ``tensorrt_llm/_torch/models/`` registers
  ``KimiK25ForConditionalGeneration``.

Output: ``tests/fixtures/engine_flags/engine_flags_<engine>-<version>.json``
(``--out-dir`` to write elsewhere), indent 1, the shape of the committed files
plus ``generated`` (date) and ``tool`` (this file). ``--compare OLD.json``
prints the differences in option names, takes_value, nargs, choices and dest. ``--add-types`` keeps the committed
list (made before the tool recorded ``type``) and adds each option's value type from the new dump of the same
release, with ``types_source`` saying where they come from.
"""

from __future__ import annotations

import argparse
import ast
import datetime
import glob
import hashlib
import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
TOOL = "tools/engine_flags.py"
CHILD_MISSING_RC = 3

ENGINES = {
    "vllm": {
        "package": "vllm",
        "module": "vllm",
        "entrypoint": "vllm serve <model> [options]  (parser = vllm.entrypoints.openai.cli_args."
                      "make_arg_parser; same for python -m vllm.entrypoints.openai.api_server)",
        "builder": "make_arg_parser(FlexibleArgumentParser())",
    },
    "sglang": {
        "package": "sglang",
        "module": "sglang",
        "entrypoint": "python3 -m sglang.launch_server [options]  or  sglang serve --model-path "
                      "<model> [options]  (both -> sglang.srt.server_args.prepare_server_args)",
        "builder": "ServerArgs.add_cli_args(argparse.ArgumentParser())",
    },
    "trtllm": {
        "package": "tensorrt-llm",
        "module": "tensorrt_llm",
    },
    "smg": {
        "package": "smg",
        "module": "smg",
        "entrypoint": "smg launch [options]  or  python3 -m smg.launch_router [options]  (console script smg -> "
                      "smg.cli:main; both -> smg.launch_router.parse_router_args)",
        "builder": "RouterArgs.add_cli_args(argparse.ArgumentParser(), use_router_prefix=False)",
        "router_args": "smg.router_args",
        "native": ["smg.smg_rs"],  # compiled, imported by router_args (the parser lists come from it)
        "helper_packages": [],
    },
    "vllm-router": {
        "package": "vllm-router",
        "module": "vllm_router",
        "entrypoint": "vllm-router [options]  (console script -> vllm_router.launch_router:main; "
                      "same for python3 -m vllm_router.launch_router; parser = "
                      "vllm_router.launch_router.parse_router_args)",
        "builder": "RouterArgs.add_cli_args(argparse.ArgumentParser(), use_router_prefix=False)",
        "router_args": "vllm_router.router_args",
        "helper_packages": [],
    },
}

# Notes that describe the parser class rather than one release; kept as in the
# committed fixtures.
PARSER_BEHAVIOUR = {
    "vllm": {
        "allow_abbrev": True,
        "note_abbrev": "argparse accepts any unambiguous prefix of a long option (e.g. "
                       "--gpu-memory-util). A checker should still require exact names.",
        "underscores_accepted": True,
        "note_underscores": "FlexibleArgumentParser rewrites --foo_bar to --foo-bar before parsing",
        "boolean_negation": "BooleanOptionalAction options also accept --no-<name> "
                            "(listed separately here)",
        "dotted_json_args": "JSON-typed options accept --opt.key value and --opt.key+ value "
                            "(e.g. --speculative-config.method mtp)",
        "optimization_flag": "-O0..-O3 / -O3 map to --optimization-level",
        "config_file": "--config FILE.yaml supplies options from YAML",
        "--model_in_serve": "with `vllm serve`, the model is the positional model_tag; --model "
                            "still parses but logs a deprecation warning",
    },
    "sglang": {
        "allow_abbrev": True,
        "note_abbrev": "argparse accepts any unambiguous prefix: --tp works only as a prefix of "
                       "--tp-size (there is no --tp option); --mem-frac works for "
                       "--mem-fraction-static. A checker should require exact names.",
        "underscores_accepted": False,
        "note_underscores": "plain argparse: --trust_remote_code is rejected",
        "boolean_negation": "none generated automatically; only explicit --no-... options exist",
        "config_file": "--config FILE.yaml is merged into argv by ConfigArgumentMerger",
        "sglang_serve_extra": "`sglang serve` additionally strips --model-type "
                              "{auto,llm,diffusion} before parsing",
    },
}
ROUTER_BEHAVIOUR = {
    "allow_abbrev": True,
    "note_abbrev": "argparse accepts any unambiguous prefix of a long option. A checker should "
                   "still require exact names.",
    "underscores_accepted": False,
    "note_underscores": "plain argparse: --worker_urls is rejected",
    "boolean_negation": "none generated automatically; only explicit --no-... options exist",
    "repeated_options": "--prefill and --decode are append actions: repeat them, one worker each",
    "prefill_format": "--prefill URL [BOOTSTRAP_PORT] (nargs '+'; BOOTSTRAP_PORT is a port number "
                      "or 'none', omitted = none); --decode URL (nargs 1)",
}
PARSER_BEHAVIOUR["vllm-router"] = PARSER_BEHAVIOUR["smg"] = ROUTER_BEHAVIOUR

# Names an engine checks after argparse (the option itself takes any string),
# recorded as the option's `valid_values`. option -> (module, expr[, unless]):
# evaluated in the child, `expr` in the namespace of `module` (a tuple: each
# in turn, until one imports and evaluates), with the EXPR_HELPERS at hand. A
# failure just leaves the key out. `unless`: skipped when the parser has that
# option (whose choices already list the names).
VALID_VALUES = {
    "vllm": {
        "--tool-call-parser": (
            "vllm.tool_parsers.abstract_tool_parser", "ToolParserManager.list_registered()"),
        "--reasoning-parser": (
            "vllm.reasoning.abs_reasoning_parsers", "ReasoningParserManager.list_registered()"),
        # The speculative methods, i.e. the `method` key of this JSON option:
        # SpeculativeConfig.method is typed SpeculativeMethod | None (a Literal
        # of nested Literals), which pydantic checks when the engine config is
        # built. Versions with --spec-method list them as its choices.
        "--speculative-config": (
            ("vllm.config.speculative", "vllm.config"), "literal_names(SpeculativeMethod)",
            "--spec-method"),
    },
    "sglang": {
        # The upper-cased --speculative-algorithm must name a SpeculativeAlgorithm
        # member (SpeculativeAlgorithm.from_string; NONE is the no-speculation
        # default, not a method) or an alias resolved before it (NEXTN -> EAGLE).
        # Plugin-registered names exist only at run time.
        "--speculative-algorithm": (
            "sglang.srt.speculative.spec_info",
            "[name for name in SpeculativeAlgorithm.__members__ if name != 'NONE'] "
            "+ sglang_spec_aliases(SpeculativeAlgorithm)"),
    },
}

# Heavy packages never installed into the helper venv (stubbed when imported).
HELPER_PACKAGES = ["pydantic", "pyyaml", "packaging", "regex", "triton", "optree", "psutil",
                   "requests", "pillow", "orjson", "msgspec", "numpy", "dill"]


# --------------------------------------------------------------------------- download


def pip_download(package: str, version: str, dest: Path) -> Path:
    """Fetch package==version from the package index (wheel only, no deps); return its path."""
    dest.mkdir(parents=True, exist_ok=True)
    stem = package.replace("-", "_")
    for found in sorted(dest.glob(f"{stem}-{version}-*.whl")):
        return found
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
           "-q", "-d", str(dest), f"{package}=={version}"]
    subprocess.run(cmd, check=True)
    found = sorted(dest.glob(f"{stem}-{version}-*.whl"))
    if not found:
        raise SystemExit(f"pip download gave no wheel for {package}=={version} in {dest}")
    return found[0]


def sha256_of(path: Path) -> str:
    """Hex sha256 of a file."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def extract_sources(wheel: Path, dest: Path) -> Path:
    """Unzip the wheel's .py files and dist-info; native modules become empty marker files."""
    marker = dest / ".complete"
    if marker.exists():
        return dest
    with zipfile.ZipFile(wheel) as archive:
        for name in archive.namelist():
            target = dest / name
            if name.endswith(".py") or ".dist-info/" in name:
                archive.extract(name, dest)
            elif name.endswith(".so") or ".so." in name:
                target.parent.mkdir(parents=True, exist_ok=True)
                target.touch()
    marker.touch()
    return dest


def native_modules(src: Path) -> list[str]:
    """Dotted names of the compiled modules of an extracted wheel (stubbed in the child)."""
    names = []
    for path in src.rglob("*.so*"):
        rel = path.relative_to(src).parts
        names.append(".".join(rel[:-1] + (rel[-1].split(".")[0],)))
    return sorted(names)


def commit_id(src: Path, module: str) -> str | None:
    """The commit id a wheel's _version.py records, if any."""
    for rel in ("_version.py", "version.py"):
        path = src / module / rel
        if path.exists():
            match = re.search(r"commit_id\s*=\s*['\"]([^'\"]+)['\"]", path.read_text())
            if match:
                return match.group(1)
    return None


def requirement_pin(src: Path, name: str) -> str | None:
    """The Requires-Dist spec of `name` in the wheel's METADATA (unconditional ones only)."""
    for meta in src.glob("*.dist-info/METADATA"):
        for line in meta.read_text().splitlines():
            match = re.match(rf"Requires-Dist: ({re.escape(name)}\b[^;]*)$", line)
            if match:
                return match.group(1).replace(" ", "")
    return None


def source_text(engine: str, version: str, wheel: Path, sha: str, commit: str | None) -> str:
    """The `source` field: wheel file, sha256, commit id."""
    package = ENGINES[engine]["package"]
    where = f"commit_id {commit}" if commit else "wheel records no commit id"
    return f"PyPI wheel {package}=={version}: {wheel.name} sha256:{sha} ({where})"


# --------------------------------------------------------------------------- argparse dump


def type_name(kind) -> str | None:
    """An argparse action's `type=` as text: int, float, str, or the callable's module.qualname, with the builtin
    type a wrapper closes over in parentheses (vLLM's optional_type(int) -> ...optional_type.<locals>._optional_type(int)),
    which tools/gen_flag_modules.py reads as the value's type."""
    if kind is None:
        return None
    if kind in (int, float, str):
        return kind.__name__
    name = "%s.%s" % (getattr(kind, "__module__", "?"), getattr(kind, "__qualname__", type(kind).__name__))
    inner = [cell.cell_contents for cell in (getattr(kind, "__closure__", None) or ())
             if cell.cell_contents in (int, float)]
    return name + ("(%s)" % inner[0].__name__ if len(inner) == 1 else "")


def dump_argparse(parser: argparse.ArgumentParser) -> tuple[dict, dict]:
    """(options, short_options) of a parser, in the committed fixtures' shape.

    Every long option string is a key; `aliases` are the other strings of the
    same action. Short options map to the action's first long option.
    """
    options: dict = {}
    short: dict = {}
    for action in parser._actions:  # pylint: disable=protected-access
        longs = [s for s in action.option_strings if s.startswith("--")]
        for opt in action.option_strings:
            if not opt.startswith("--") and longs:
                short[opt] = longs[0]
        stubbed = type(action.choices).__name__ == "StubMeta"  # computed by a stubbed module
        for opt in longs:
            entry = {
                "choices": None if action.choices is None or stubbed
                else [str(c) for c in action.choices],
                "takes_value": action.nargs != 0,
                "aliases": [s for s in action.option_strings if s != opt],
                "dest": action.dest,
            }
            if action.nargs not in (None, 0):
                entry["nargs"] = action.nargs
            kind = type_name(action.type) if action.nargs != 0 else None
            if kind:
                entry["type"] = kind
            entry["action"] = type(action).__name__
            if entry["action"].startswith("Deprecated"):
                entry["deprecated"] = True
            if stubbed:
                entry["choices_from"] = (f"{action.choices.__module__}.{action.choices.__name__}() "
                                         "(stubbed: not known)")
            options[opt] = entry
    return dict(sorted(options.items())), dict(sorted(short.items()))


# --------------------------------------------------------------------------- child (import side)


def install_stubs(names: set[str], first: bool = False):
    """Put a meta-path finder last (`first`: first) that stubs the named modules (and all under them)."""
    # pylint: disable=import-outside-toplevel
    import importlib.abc
    import importlib.machinery
    import types

    class StubMeta(type):
        """Metaclass of stub classes: any attribute, call, item or operator works."""

        def __getattr__(cls, name):
            if name == "__func__":
                return lambda *a, **k: cls
            if name.startswith("__") and name.endswith("__"):
                raise AttributeError(name)
            sub = StubMeta(name, (cls,), {"__module__": cls.__module__})
            type.__setattr__(cls, name, sub)
            return sub

        def __call__(cls, *args, **kwargs):
            if len(args) == 1 and not kwargs and callable(args[0]):
                return args[0]
            return cls

        def __getitem__(cls, item):
            return cls

        def __setitem__(cls, key, value):
            pass

        def __iter__(cls):
            return iter(())

        def __len__(cls):
            return 0

        def __lt__(cls, other):
            return False

        __le__ = __gt__ = __ge__ = __lt__

        def __eq__(cls, other):
            return cls is other

        def __hash__(cls):
            return id(cls)

        def __contains__(cls, item):
            return False

        def __enter__(cls):
            return cls

        def __exit__(cls, *exc):
            return False

        def __or__(cls, other):
            return cls

        __ror__ = __or__

    class StubBase(metaclass=StubMeta):
        """Base of stub classes (subclassable, pydantic accepts it as Any)."""

        def __init__(self, *args, **kwargs):
            pass

        def __init_subclass__(cls, **kwargs):
            pass

        @classmethod
        def __get_pydantic_core_schema__(cls, source, handler):
            from pydantic_core import core_schema
            return core_schema.any_schema()

    class StubModule(types.ModuleType):
        """A stubbed module: every attribute is a fresh stub class."""

        def __getattr__(self, name):
            if name == "__version__":
                return "99.0.0"
            if name.startswith("__") and name.endswith("__"):
                raise AttributeError(name)
            value = StubMeta(name, (StubBase,), {"__module__": self.__name__})
            setattr(self, name, value)
            return value

    class StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
        """Finder/loader of StubModule for the named modules and their submodules."""

        def find_spec(self, fullname, path=None, target=None):  # pylint: disable=unused-argument
            parent = sys.modules.get(fullname.rpartition(".")[0])
            if fullname in names or isinstance(parent, StubModule):
                return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
            return None

        def create_module(self, spec):
            module = StubModule(spec.name)
            module.__path__ = []
            return module

        def exec_module(self, module):
            pass

    if first:
        sys.meta_path.insert(0, StubFinder())
    else:
        sys.meta_path.append(StubFinder())


def _missing_module(exc: BaseException, stubbed: set[str]) -> str | None:
    """The first not-yet-stubbed module name in an exception chain of ModuleNotFoundError."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, ModuleNotFoundError) and exc.name and exc.name not in stubbed:
            return exc.name
        exc = exc.__cause__ or exc.__context__
    return None


def _build_parser(engine: str):
    """Build the engine's real serve parser (imports happen here)."""
    # pylint: disable=import-outside-toplevel
    if engine == "vllm":
        import vllm.platforms
        from vllm.platforms.interface import UnspecifiedPlatform
        vllm.platforms._current_platform = UnspecifiedPlatform()  # pylint: disable=protected-access
        try:
            from vllm.utils.argparse_utils import FlexibleArgumentParser
        except ImportError:
            from vllm.utils import FlexibleArgumentParser
        from unittest.mock import patch
        try:
            from vllm.entrypoints.openai.cli_args import make_arg_parser
        except ModuleNotFoundError as exc:  # moved in 0.3x
            if exc.name != "vllm.entrypoints.openai.cli_args":
                raise
            from vllm.entrypoints.common.cli_args import make_arg_parser
        # As vLLM's docs build: no device to infer on a CPU box.
        import vllm.config  # pylint: disable=redefined-outer-name
        with patch.object(vllm.config.DeviceConfig, "__post_init__"):
            return make_arg_parser(FlexibleArgumentParser())
    if "router_args" in ENGINES[engine]:
        import importlib
        router_args = importlib.import_module(ENGINES[engine]["router_args"])
        parser = argparse.ArgumentParser()
        router_args.RouterArgs.add_cli_args(parser, use_router_prefix=False)
        return parser
    from sglang.srt.server_args import ServerArgs
    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    return parser


def child_main(engine: str, src: str, stubs: list[str]) -> int:
    """Runs in the helper venv: build the parser, print the dump as JSON on stdout."""
    # pylint: disable=import-outside-toplevel
    import importlib
    import importlib.metadata

    stubbed = set(stubs)
    sys.path.insert(0, src)
    install_stubs(stubbed)
    if ENGINES[engine].get("native"):  # ahead of the wheel's empty marker files of them
        install_stubs(set(ENGINES[engine]["native"]), first=True)
    real_version = importlib.metadata.version

    def version(name):
        try:
            return real_version(name)
        except importlib.metadata.PackageNotFoundError:
            return "99.0.0"

    importlib.metadata.version = version
    try:
        parser = _build_parser(engine)
    except Exception as exc:  # pylint: disable=broad-except
        missing = _missing_module(exc, stubbed)
        if missing and missing.split(".")[0] != ENGINES[engine]["module"]:
            print(json.dumps({"missing": missing}))
            return CHILD_MISSING_RC
        raise
    options, short = dump_argparse(parser)
    for opt, entry in VALID_VALUES.get(engine, {}).items():
        if opt in options:
            values = valid_values(options, *entry)
            if values is not None:
                options[opt]["valid_values"] = values
    print(json.dumps({"options": options, "short_options": short}))
    return 0


def literal_names(*types) -> list[str]:
    """The str members of Literal types, through nested Literals, Union/Optional and Annotated."""
    # pylint: disable=import-outside-toplevel
    import typing
    names: list[str] = []
    for kind in types:
        origin, args = typing.get_origin(kind), typing.get_args(kind)
        if origin is typing.Literal:
            for arg in args:
                names.extend([arg] if isinstance(arg, str) else literal_names(arg))
        else:  # Union / Optional / X | Y (Annotated: its type only); anything else has no args
            names.extend(literal_names(*(args[:1] if origin is typing.Annotated else args)))
    return list(dict.fromkeys(names))


def sglang_spec_aliases(algorithm) -> list[str]:
    """The --speculative-algorithm spellings SGLang resolves to a SpeculativeAlgorithm member
    (NEXTN): sglang.srt.speculative.spec_registry's _RESERVED_ALIASES (0.5.13 on), else its
    _RESERVED_NAMES less the enum members (0.5.12); none where the registry is absent."""
    # pylint: disable=import-outside-toplevel
    import importlib
    try:
        registry = importlib.import_module("sglang.srt.speculative.spec_registry")
    except ImportError:
        return []
    aliases = getattr(registry, "_RESERVED_ALIASES", None)
    if aliases is None:
        aliases = set(getattr(registry, "_RESERVED_NAMES", ())) - set(algorithm.__members__)
    return sorted(aliases)


EXPR_HELPERS = {"literal_names": literal_names, "sglang_spec_aliases": sglang_spec_aliases}


def valid_values(options: dict, modules, expr: str, unless: str | None = None) -> list | None:
    """One VALID_VALUES entry, sorted, or None (skipped: `unless` is an option, or no module
    of `modules` imports and evaluates `expr` to a non-empty collection)."""
    # pylint: disable=import-outside-toplevel
    import importlib
    if unless and unless in options:
        return None
    for module in (modules,) if isinstance(modules, str) else modules:
        try:
            scope = {**vars(importlib.import_module(module)), **EXPR_HELPERS}
            values = sorted(eval(expr, scope))  # pylint: disable=eval-used
        except Exception:  # pylint: disable=broad-except
            continue
        if values:
            return values
    return None


# --------------------------------------------------------------------------- helper venv


def find_torch_cpu_wheel() -> Path | None:
    """A local torch CPU wheel in pip's find-links folders (PIP_FIND_LINKS), if any."""
    for folder in os.environ.get("PIP_FIND_LINKS", "/opt/wheels").split():
        for path in sorted(glob.glob(os.path.join(folder, "torch-*+cpu-*.whl"))):
            return Path(path)
    return None


def python_for_wheel(wheel: Path | None) -> str:
    """An interpreter matching the wheel's cpXY tag (else this one)."""
    if wheel is None:
        return sys.executable
    match = re.search(r"-cp(\d)(\d+)-", wheel.name)
    want = f"{match.group(1)}.{match.group(2)}" if match else ""
    candidates = [f"python{want}"] + sorted(glob.glob(
        os.path.expanduser(f"~/.pyenv/versions/{want}*/bin/python{want}")))
    for cand in candidates:
        try:
            out = subprocess.run([cand, "-c", "import sys; print(sys.version[:5])"],
                                 capture_output=True, text=True, check=True).stdout
        except (OSError, subprocess.CalledProcessError):
            continue
        if out.startswith(want):
            return cand
    return sys.executable


def helper_venv(cache: Path, engine: str, version: str, src: Path) -> Path:
    """Create (once) the throwaway venv the child runs in; return its python."""
    venv = cache / f"venv-{engine}-{version}"
    python = venv / "bin" / "python"
    if (venv / ".complete").exists():
        return python
    packages = ENGINES[engine].get("helper_packages")
    torch_wheel = None if packages is not None else find_torch_cpu_wheel()
    subprocess.run([python_for_wheel(torch_wheel), "-m", "venv", "--clear", str(venv)], check=True)
    if packages is None:
        packages = list(HELPER_PACKAGES)
        packages.append(requirement_pin(src, "transformers") or "transformers")
        if torch_wheel:
            packages.append(str(torch_wheel))
    if packages:
        subprocess.run([str(python), "-m", "pip", "install", "-q", *packages], check=True)
    (venv / ".complete").touch()
    return python


def run_child(python: Path, engine: str, src: Path, max_stubs: int = 150) -> tuple[dict, list]:
    """Run the child until it builds the parser, stubbing one missing module per round."""
    stubs = native_modules(src)
    base = len(stubs)
    for _attempt in range(max_stubs):
        proc = subprocess.run(
            [str(python), str(Path(__file__).resolve()), "--child", engine, str(src),
             "--stubs", ",".join(stubs)],
            capture_output=True, text=True, check=False,
            env={**os.environ, "PYTHONWARNINGS": "ignore", "TOKENIZERS_PARALLELISM": "false"})
        last = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else "{}"
        if proc.returncode == 0:
            return json.loads(last), stubs[base:]
        if proc.returncode == CHILD_MISSING_RC:
            stubs.append(json.loads(last)["missing"])
            print(f"  stub {stubs[-1]}", file=sys.stderr)
            continue
        raise SystemExit(f"child failed (rc {proc.returncode}):\n{proc.stderr[-4000:]}")
    raise SystemExit(f"gave up after stubbing {max_stubs} modules")


def argparse_document(engine: str, version: str, wheel: Path, src: Path,
                      dump: dict, stubbed: list) -> dict:
    """The fixture document for an argparse engine."""
    spec = ENGINES[engine]
    stubbed_top = sorted({name.split(".")[0] for name in stubbed}) + spec.get("native", [])
    return {
        "source": source_text(engine, version, wheel, sha256_of(wheel), commit_id(src, spec["module"])),
        "engine": engine,
        "version": version,
        "generated": datetime.date.today().isoformat(),
        "tool": TOOL,
        "entrypoint": spec["entrypoint"],
        "method": (f"runtime: {TOOL} imported the {version} wheel's own parser code on CPU "
                   f"(not installed; modules stubbed: {', '.join(stubbed_top) or 'none'}), "
                   f"ran {spec['builder']} and dumped parser._actions"),
        "parser_behaviour": PARSER_BEHAVIOUR[engine],
        "short_options": dump["short_options"],
        "options": dump["options"],
    }


# --------------------------------------------------------------------------- static: click


def _literal(node: ast.AST):
    """ast.literal_eval, or the source text when the node is not a literal."""
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return ast.unparse(node)


def _dotted(node: ast.AST) -> str:
    """'click.option' for an Attribute/Name chain."""
    return ast.unparse(node)


def _click_type(node: ast.AST | None) -> tuple[str, list | None]:
    """(type name, choices) of a click `type=` argument."""
    if node is None:
        return "str", None
    if isinstance(node, ast.Call) and _dotted(node.func).endswith("Choice"):
        choices = _literal(node.args[0]) if node.args else None
        return "click.Choice", choices if isinstance(choices, list) else choices
    text = ast.unparse(node)
    return {"click.INT": "int", "click.FLOAT": "float", "click.BOOL": "bool",
            "click.STRING": "str"}.get(text, text), None


def read_click_command(source: str, func_name: str) -> dict:
    """Options/arguments/context of the click command defined by `func_name`.

    Returns {"name", "context_settings", "positionals", "options"}; each option
    in the fixtures' shape plus type/default/multiple/is_flag/nargs.
    """
    tree = ast.parse(source)
    func = next((n for n in ast.walk(tree)
                 if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == func_name),
                None)
    if func is None:
        raise ValueError(f"no function {func_name}")
    result = {"name": func_name, "decorator": None, "context_settings": None,
              "positionals": [], "options": {}}
    for deco in func.decorator_list:
        if not isinstance(deco, ast.Call):
            continue
        name = _dotted(deco.func)
        kwargs = {k.arg: k.value for k in deco.keywords if k.arg}
        decls = [a.value for a in deco.args
                 if isinstance(a, ast.Constant) and isinstance(a.value, str)]
        if name.endswith(".command") or name.endswith(".group"):
            result["decorator"] = name
            if "name" in kwargs:
                result["name"] = _literal(kwargs["name"])
            elif decls:
                result["name"] = decls[0]
            if "context_settings" in kwargs:
                result["context_settings"] = _literal(kwargs["context_settings"])
        elif name.endswith(".argument"):
            result["positionals"].append(decls[0] if decls else "?")
        elif name.endswith(".option"):
            for opt, entry in _click_option(decls, kwargs).items():
                result["options"][opt] = entry
    return result


def _click_option(decls: list[str], kwargs: dict) -> dict:
    """Entries (one per long option string) of one @click.option(...)."""
    opts = [d for d in decls if d.startswith("-")]
    names = [d for d in decls if not d.startswith("-")]
    secondary = []
    primary = []
    for opt in opts:
        if "/" in opt:
            first, second = opt.split("/", 1)
            primary.append(first.strip())
            secondary.append(second.strip())
        else:
            primary.append(opt)
    # click names the parameter after its first long option (declaration order),
    # else its first option; an explicit non-dashed name wins.
    first = next((o for o in primary if o.startswith("--")), primary[0] if primary else "")
    dest = names[0] if names else first.lstrip("-").replace("-", "_").lower()
    ctype, choices = _click_type(kwargs.get("type"))
    is_flag = bool(_literal(kwargs["is_flag"])) if "is_flag" in kwargs else bool(secondary)
    default = _literal(kwargs["default"]) if "default" in kwargs else None
    if "type" not in kwargs and is_flag:
        ctype = "bool"
    elif "type" not in kwargs and default is not None and not isinstance(default, str):
        ctype = type(default).__name__
    nargs = _literal(kwargs["nargs"]) if "nargs" in kwargs else 1
    everything = primary + secondary
    out = {}
    for opt in everything:
        if not opt.startswith("--"):
            continue
        entry = {
            "choices": choices,
            "takes_value": not is_flag,
            "aliases": [o for o in everything if o != opt],
            "dest": dest,
            "action": "click.Option",
            "type": ctype,
            "default": default,
            "multiple": bool(_literal(kwargs["multiple"])) if "multiple" in kwargs else False,
        }
        if is_flag:
            entry["is_flag"] = True
        if nargs != 1:
            entry["nargs"] = nargs
        if "envvar" in kwargs:
            entry["envvar"] = _literal(kwargs["envvar"])
        if "hidden" in kwargs:
            entry["hidden"] = _literal(kwargs["hidden"])
        if "required" in kwargs:
            entry["required"] = _literal(kwargs["required"])
        out[opt] = entry
    return out


# --------------------------------------------------------------------------- static: pydantic


class ModelReader:
    """Reads pydantic model classes statically from a set of module sources.

    `sources` maps dotted module names to source text. Classes are looked up by
    name across all modules; bases are followed by name (Generic[...] etc.
    ignored when unknown).
    """

    def __init__(self, sources: dict[str, str]):
        self.classes: dict[str, ast.ClassDef] = {}
        self.assigns: dict[str, ast.AST] = {}
        for text in sources.values():
            tree = ast.parse(text)
            for node in tree.body:
                if isinstance(node, ast.ClassDef):
                    self.classes.setdefault(node.name, node)
                elif isinstance(node, ast.Assign) and len(node.targets) == 1 \
                        and isinstance(node.targets[0], ast.Name):
                    self.assigns.setdefault(node.targets[0].id, node.value)
                elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) \
                        and node.value is not None:
                    self.assigns.setdefault(node.target.id, node.value)

    # -- classes

    def bases(self, name: str) -> list[str]:
        """Names of the direct bases of a known class."""
        node = self.classes.get(name)
        if node is None:
            return []
        out = []
        for base in node.bases:
            base_node = base.value if isinstance(base, ast.Subscript) else base
            out.append(ast.unparse(base_node).rsplit(".", 1)[-1])
        return out

    def mro(self, name: str) -> list[str]:
        """The class and its known ancestors, most-derived first (depth first, no repeats)."""
        out: list[str] = []

        def visit(cls: str):
            if cls in out or cls not in self.classes:
                return
            out.append(cls)
            for base in self.bases(cls):
                visit(base)
        visit(name)
        return out

    def is_model(self, name: str) -> bool:
        """True when the class derives (by name) from pydantic BaseModel."""
        seen = set()
        stack = [name]
        while stack:
            cls = stack.pop()
            if cls in seen:
                continue
            seen.add(cls)
            if cls == "BaseModel":
                return True
            stack.extend(self.bases(cls))
        return False

    def model_config(self, name: str) -> dict:
        """Merged model_config (ConfigDict(...) or dict literal, or class Config) along the mro."""
        merged: dict = {}
        for cls in reversed(self.mro(name)):
            for stmt in self.classes[cls].body:
                value = None
                if isinstance(stmt, ast.Assign) and any(
                        isinstance(t, ast.Name) and t.id == "model_config" for t in stmt.targets):
                    value = stmt.value
                elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) \
                        and stmt.target.id == "model_config":
                    value = stmt.value
                elif isinstance(stmt, ast.ClassDef) and stmt.name == "Config":
                    for sub in stmt.body:
                        if isinstance(sub, ast.Assign) and isinstance(sub.targets[0], ast.Name):
                            merged[sub.targets[0].id] = _literal(sub.value)
                if isinstance(value, ast.Call):
                    merged.update({k.arg: _literal(k.value) for k in value.keywords if k.arg})
                elif isinstance(value, ast.Dict):
                    merged.update(_literal(value) if isinstance(_literal(value), dict) else {})
        return merged

    # -- fields

    def fields(self, name: str, depth: int = 0, max_depth: int = 6) -> dict:
        """{field: description} of a model and its bases (derived classes override)."""
        out: dict = {}
        for cls in reversed(self.mro(name)):
            for stmt in self.classes[cls].body:
                if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
                    continue
                field = stmt.target.id
                if field.startswith("_") or field == "model_config" \
                        or ast.unparse(stmt.annotation).startswith("ClassVar"):
                    continue
                out[field] = self.describe(stmt.annotation, stmt.value, depth, max_depth)
        return out

    def describe(self, annotation: ast.AST, value: ast.AST | None, depth: int,
                 max_depth: int) -> dict:
        """Description of one field: type, default, choices, alias, description, nested fields."""
        entry: dict = {"type": ast.unparse(annotation)}
        default_node = value
        if isinstance(value, ast.Call) and ast.unparse(value.func).rsplit(".", 1)[-1] == "Field":
            kwargs = {k.arg: k.value for k in value.keywords if k.arg}
            default_node = value.args[0] if value.args else kwargs.get("default")
            if "default_factory" in kwargs:
                entry["default_factory"] = ast.unparse(kwargs["default_factory"])
            for key in ("alias", "validation_alias", "serialization_alias"):
                if key in kwargs:
                    entry[key] = _literal(kwargs[key])
            if "description" in kwargs:
                entry["description"] = _literal(kwargs["description"])
            extra = kwargs.get("json_schema_extra")
            if extra is not None and isinstance(_literal(extra), dict):
                status = _literal(extra).get("status")
                if status:
                    entry["status"] = status
        if default_node is not None:
            default = _literal(default_node)
            entry["default"] = None if default is Ellipsis or default == "..." else default
            if isinstance(default_node, ast.Constant) and default_node.value is Ellipsis:
                entry["required"] = True
        elif value is None:
            entry["required"] = True
        choices = self.choices(annotation)
        if choices:
            entry["choices"] = choices
        model = self.model_in(annotation)
        if model and depth < max_depth:
            entry["model"] = model
            entry["extra"] = self.model_config(model).get("extra", "ignore")
            entry["fields"] = self.fields(model, depth + 1, max_depth)
        return entry

    def _resolve_alias(self, node: ast.AST) -> ast.AST:
        """Follow a module-level type alias (Name = Literal[...])."""
        seen = 0
        while isinstance(node, ast.Name) and node.id in self.assigns and seen < 5:
            node = self.assigns[node.id]
            seen += 1
        return node

    def choices(self, annotation: ast.AST) -> list | None:
        """Literal members (through Optional/Union/aliases) or Enum member values."""
        found: list = []
        for node in self._union_members(annotation):
            node = self._resolve_alias(node)
            if isinstance(node, ast.Subscript) and ast.unparse(node.value).endswith("Literal"):
                items = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
                found.extend(_literal(i) for i in items)
            elif isinstance(node, ast.Name) and node.id in self.classes and self._is_enum(node.id):
                found.extend(self._enum_values(node.id))
            elif isinstance(node, ast.Subscript) and ast.unparse(node.value).endswith("Literal") \
                    is False and node is not annotation:
                sub = self.choices(node)
                if sub:
                    found.extend(sub)
        return found or None

    def _union_members(self, annotation: ast.AST) -> list[ast.AST]:
        """Members of Optional[X] / Union[X, Y] / X | Y (else [annotation])."""
        node = self._resolve_alias(annotation)
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            try:
                node = ast.parse(node.value, mode="eval").body
            except SyntaxError:
                return [node]
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
            return self._union_members(node.left) + self._union_members(node.right)
        if isinstance(node, ast.Subscript):
            head = ast.unparse(node.value).rsplit(".", 1)[-1]
            if head in ("Optional", "Union"):
                items = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
                out = []
                for item in items:
                    out.extend(self._union_members(item))
                return out
            if head == "Annotated":
                first = node.slice.elts[0] if isinstance(node.slice, ast.Tuple) else node.slice
                return self._union_members(first)
        return [node]

    def _is_enum(self, name: str) -> bool:
        return any(b.endswith("Enum") for b in self.bases(name)) or any(
            self._is_enum(b) for b in self.bases(name) if b in self.classes and b != name)

    def _enum_values(self, name: str) -> list:
        values = []
        for stmt in self.classes[name].body:
            if isinstance(stmt, ast.Assign) and isinstance(stmt.targets[0], ast.Name) \
                    and not stmt.targets[0].id.startswith("_"):
                values.append(_literal(stmt.value))
        return values

    def model_in(self, annotation: ast.AST) -> str | None:
        """The package's pydantic model named by X / Optional[X] / X | None, if one."""
        for node in self._union_members(annotation):
            name = ast.unparse(node).strip("'\"").rsplit(".", 1)[-1]
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                name = node.value.rsplit(".", 1)[-1]
            if name in self.classes and self.is_model(name):
                return name
        return None


def schema_document(reader: ModelReader, cls: str) -> dict:
    """{"class", "extra", "bases", "fields"} of a top-level args model."""
    return {"class": cls,
            "extra": reader.model_config(cls).get("extra", "ignore"),
            "bases": reader.mro(cls)[1:],
            "fields": reader.fields(cls)}


# --------------------------------------------------------------------------- trtllm


def _module_sources(src: Path, package: str, start: str, depth: int = 2) -> dict[str, str]:
    """Source of `start` and of the package modules it imports from (transitively, `depth` hops)."""
    sources: dict[str, str] = {}
    frontier = [start]
    for _level in range(depth + 1):
        nxt = []
        for mod in frontier:
            if mod in sources:
                continue
            path = src / (mod.replace(".", "/") + ".py")
            if not path.exists():
                path = src / mod.replace(".", "/") / "__init__.py"
            if not path.exists():
                continue
            text = path.read_text()
            sources[mod] = text
            for node in ast.walk(ast.parse(text)):
                if isinstance(node, ast.ImportFrom) and node.module is not None:
                    base = node.module
                    if node.level:
                        parts = mod.split(".")[: -node.level]
                        base = ".".join(parts + [node.module])
                    if base.startswith(package):
                        nxt.append(base)
        frontier = nxt
    return sources


TOOL_PARSER_FILE = "tensorrt_llm/serve/tool_parser/tool_parser_factory.py"
REASONING_PARSER_FILE = "tensorrt_llm/llmapi/reasoning_parser.py"
MODELS_DIR = "tensorrt_llm/_torch/models"
KIMI_K25_ARCH = "KimiK25ForConditionalGeneration"


def registry_keys(source: str, class_name: str, attr: str = "parsers") -> list | None:
    """Keys of `class_name.attr = {...}` (a dict literal) plus any names registered to it.

    Also collects `@register_reasoning_parser("name", ...)`-style decorators
    (any call whose function name starts with `register` and ends with `parser`)
    found in the same source, since some releases register parsers that way.
    Returns None when neither is found.
    """
    tree = ast.parse(source)
    keys: list = []
    found = False
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            for stmt in node.body:
                target = stmt.target if isinstance(stmt, ast.AnnAssign) else (
                    stmt.targets[0] if isinstance(stmt, ast.Assign) else None)
                if isinstance(target, ast.Name) and target.id == attr \
                        and isinstance(stmt.value, ast.Dict):
                    found = True
                    keys.extend(_literal(k) for k in stmt.value.keys if k is not None)
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            for deco in node.decorator_list:
                if not isinstance(deco, ast.Call):
                    continue
                fname = ast.unparse(deco.func).rsplit(".", 1)[-1]
                if fname.startswith("register") and fname.endswith("parser"):
                    found = True
                    keys.extend(_literal(a) for a in deco.args
                                if isinstance(a, ast.Constant) and isinstance(a.value, str))
    if not found:
        return None
    out: list = []
    for key in keys:
        if key not in out:
            out.append(key)
    return out


def arch_registered(src: Path, arch: str) -> str | None:
    """Path (relative to src) of the model file that does register_auto_model("<arch>")."""
    pattern = re.compile(rf"register_auto_model\(\s*['\"]{re.escape(arch)}['\"]")
    folder = src / MODELS_DIR
    for path in sorted(folder.rglob("*.py")) if folder.is_dir() else []:
        if pattern.search(path.read_text(errors="replace")):
            return str(path.relative_to(src))
    return None


def collapse_aliases(options: dict) -> dict:
    """One key per click parameter (its first long spelling); the others only in aliases."""
    out: dict = {}
    claimed: set = set()
    for opt, entry in options.items():
        if opt in claimed:
            continue
        out[opt] = entry
        claimed.update(entry["aliases"])
    return out


def parser_facts(src: Path, options: dict) -> dict:
    """Tool/reasoning parser registries and the KimiK25 registration; fills click choices."""
    facts: dict = {}
    for key, rel, cls, opt in (("tool_parsers", TOOL_PARSER_FILE, "ToolParserFactory",
                                "--tool_parser"),
                               ("reasoning_parsers", REASONING_PARSER_FILE,
                                "ReasoningParserFactory", "--reasoning_parser")):
        path = src / rel
        names = registry_keys(path.read_text(), cls) if path.exists() else None
        facts[key] = {"names": names, "file": rel if path.exists() else None,
                      "registry": f"{cls}.parsers"}
        entry = options.get(opt)
        if entry is not None and names is not None and entry.get("choices") \
                and isinstance(entry["choices"], str) and cls in entry["choices"]:
            entry["choices_from"] = entry["choices"]
            entry["choices"] = names
    where = arch_registered(src, KIMI_K25_ARCH)
    checked = (src / MODELS_DIR).is_dir()
    facts["kimi_k25_registered"] = {"registered": (where is not None) if checked else None,
                                    "file": where,
                                    "architecture": KIMI_K25_ARCH,
                                    "searched": f"{MODELS_DIR}/**/*.py for "
                                                f"register_auto_model(\"{KIMI_K25_ARCH}\")"}
    return facts


def source_version(src: Path) -> str | None:
    """The last __version__ literal in DIR/tensorrt_llm/version.py, if any."""
    path = src / "tensorrt_llm/version.py"
    if not path.exists():
        return None
    found = re.findall(r"__version__\s*=\s*['\"]([^'\"]+)['\"]", path.read_text())
    return found[-1] if found else None


def approximate_source_text(version: str, files_json: Path) -> tuple[str, dict]:
    """The `source` field (and a `provenance_files` record) for --provenance approximate.

    FILE is JSON: {"repo": "owner/name", "files": [{"path": ..., "commit": ...,
    "repo": optional, "kind": optional "verbatim"|"excerpt"|"digest"|"stand-in",
    "note": optional}, ...], "cross_check": optional sentence}. Each file keeps
    its own repository and commit, since they come from different commits.
    """
    spec = json.loads(files_json.read_text())
    default_repo = spec.get("repo", "NVIDIA/TensorRT-LLM")
    files = spec.get("files") or []
    if not files:
        raise ValueError(f"{files_json}: no files")
    parts = []
    for entry in files:
        if not entry.get("path") or not entry.get("commit"):
            raise ValueError(f"{files_json}: every file needs path and commit: {entry}")
        repo = entry.get("repo", default_repo)
        name = entry["path"].rsplit("/", 1)[-1]
        parts.append(f"{name}@{entry['commit']}" if repo == default_repo
                     else f"{repo}:{name}@{entry['commit']}")
    text = (f"NOT the v{version} tag: upstream {default_repo} files as stored in the code "
            f"index, each at its own commit: {', '.join(parts)}")
    if spec.get("cross_check"):
        text += f"; {spec['cross_check']}"
    text += (f"; regenerate from the tag with `make engine-flags ENGINE=trtllm VERSION={version} "
             "ARGS='--source DIR --source-commit SHA'` where GitHub is reachable")
    record = {"repo": default_repo,
              "files": [{"repo": e.get("repo", default_repo), **e} for e in files]}
    return text, record


def tagged_source_text(repo: str, tag: str, commit: str, src: Path) -> str:
    """The `source` field for a document read from a source tree."""
    version = source_version(src)
    seen = f"tensorrt_llm/version.py says {version}" if version else \
        "no tensorrt_llm/version.py in the tree"
    return f"GitHub {repo} tag {tag} commit {commit} (source tree; {seen})"


def trtllm_document(version: str, src: Path, source: str, from_tag: bool = False) -> dict:
    """The fixture document for TensorRT-LLM (static), from a wheel's or a source tree's files."""
    serve_py = src / "tensorrt_llm/commands/serve.py"
    serve_src = serve_py.read_text()
    command = read_click_command(serve_src, "serve")
    group = _console_script(src)
    click_pin = requirement_pin(src, "click")
    options = dict(sorted(collapse_aliases(command["options"]).items()))
    facts = parser_facts(src, options)
    ctx = command["context_settings"] or {}
    underscores = any("_" in opt[2:] for opt in options)
    reader = ModelReader(_module_sources(src, "tensorrt_llm", "tensorrt_llm.llmapi.llm_args"))
    config_opts = [o for o in ("--config", "--extra_llm_api_options")
                   if o in options or any(o in e["aliases"] for e in options.values())]
    behaviour = {
        "kind": "click",
        "underscores_accepted": bool(ctx.get("token_normalize_func")),
        "note_underscores": ("option names are matched exactly as declared"
                             + (" (declared with underscores, e.g. --trust_remote_code)"
                                if underscores else "")
                             + "; click does not turn - into _ unless "
                               "context_settings.token_normalize_func is set"
                             + (f" (context_settings: {ctx})" if ctx else " (no context_settings)")),
        "allow_abbrev": False,
        "unknown_option_error": "Error: No such option: --foo",
        "note_unknown_option": "click prints usage, then 'Error: No such option: --foo' and, "
                               "for close matches, ' Did you mean --bar?' (or 'Possible options: "
                               f"...'); exit 2. click pin: {click_pin or 'unpinned or unknown'}",
        "exit_code_usage": 2,
        "config_option": config_opts,
        "console_script": group,
        **facts,
    }
    kind = "the tagged source" if from_tag else "the wheel"
    return {
        "source": source,
        "engine": "trtllm",
        "version": version,
        "generated": datetime.date.today().isoformat(),
        "tool": TOOL,
        "entrypoint": f"trtllm-serve <model> [options]  (click command `{command['name']}` "
                      f"in tensorrt_llm/commands/serve.py; console script {group})",
        "method": f"static, read from {kind} (no import): ast of tensorrt_llm/commands/serve.py "
                  "(click options of `serve`) and tensorrt_llm/llmapi/llm_args.py "
                  "(TorchLlmArgs + bases + nested pydantic config models, with the package "
                  f"modules it imports from); parser registries from {TOOL_PARSER_FILE} and "
                  f"{REASONING_PARSER_FILE}; model registration grepped in {MODELS_DIR}",
        "parser_behaviour": behaviour,
        "positionals": command["positionals"],
        "options": options,
        "llm_args": schema_document(reader, "TorchLlmArgs"),
    }


def _console_script(src: Path) -> str:
    """The trtllm-serve entry of the wheel's entry_points.txt and what it points at."""
    for path in src.glob("*.dist-info/entry_points.txt"):
        for line in path.read_text().splitlines():
            if line.strip().startswith("trtllm-serve"):
                target = line.split("=", 1)[1].strip()
                module, _colon, attr = target.partition(":")
                text_path = src / (module.replace(".", "/") + ".py")
                kind = "unknown"
                if text_path.exists():
                    text = text_path.read_text()
                    if re.search(rf"def {re.escape(attr)}\b", text):
                        kind = "function"
                    match = re.search(rf"^{re.escape(attr)}\s*=\s*(.+)$", text, re.M)
                    if match:
                        kind = match.group(1).strip()
                    for deco in re.findall(rf"@([\w.]+)\([^)]*\)\s*\n\s*def {re.escape(attr)}\b",
                                           text):
                        kind = deco
                return f"trtllm-serve = {target} ({kind})"
    setup = src / "setup.py"
    if setup.exists():
        match = re.search(r"['\"]trtllm-serve\s*=\s*([\w.:]+)['\"]", setup.read_text())
        if match:
            return f"trtllm-serve = {match.group(1)} (setup.py)"
    return "trtllm-serve: not in entry_points.txt (nor setup.py)"


# --------------------------------------------------------------------------- compare


COMPARED_KEYS = ("takes_value", "nargs", "choices", "dest")


def compare(new: dict, old: dict) -> list[str]:
    """Differences in option names and COMPARED_KEYS between two documents."""
    lines = []
    new_opts, old_opts = new["options"], old["options"]
    for opt in sorted(set(old_opts) - set(new_opts)):
        lines.append(f"only in old: {opt}")
    for opt in sorted(set(new_opts) - set(old_opts)):
        lines.append(f"only in new: {opt}")
    for opt in sorted(set(new_opts) & set(old_opts)):
        for key in COMPARED_KEYS:
            if new_opts[opt].get(key) != old_opts[opt].get(key):
                lines.append(f"{opt} {key}: old={old_opts[opt].get(key)!r} "
                             f"new={new_opts[opt].get(key)!r}")
    return lines


# --------------------------------------------------------------------------- main


def parse_args(argv: list[str]) -> argparse.Namespace:
    """Command-line arguments."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--engine", choices=sorted(ENGINES))
    parser.add_argument("--version")
    parser.add_argument("--wheel", type=Path, help="use this wheel instead of pip download")
    parser.add_argument("--source", type=Path, metavar="DIR",
                        help="trtllm: read a source tree laid out like the package "
                             "(DIR/tensorrt_llm/...) instead of a wheel")
    parser.add_argument("--source-repo", default="NVIDIA/TensorRT-LLM",
                        help="with --source: the GitHub repository DIR comes from")
    parser.add_argument("--source-tag", help="with --source: the release tag (default v<version>)")
    parser.add_argument("--source-commit",
                        help="with --source: the commit sha of DIR (required unless "
                             "--provenance approximate)")
    parser.add_argument("--provenance", choices=("tag", "approximate"), default="tag",
                        help="with --source: 'tag' (DIR is one commit of the release) or "
                             "'approximate' (DIR holds upstream files from different commits, "
                             "listed in --source-files-json; the version.py check is skipped)")
    parser.add_argument("--source-files-json", type=Path, metavar="FILE",
                        help="with --provenance approximate: JSON naming each file of DIR "
                             "with its own repository and commit")
    parser.add_argument("--out-dir", type=Path, default=REPO_ROOT / "tests/fixtures/engine_flags")
    parser.add_argument("--cache", type=Path, default=REPO_ROOT / ".cache/engine-flags")
    parser.add_argument("--compare", type=Path, help="print differences against this fixture")
    parser.add_argument("--add-types", action="store_true",
                        help="argparse engines: keep the committed list as it is and add each option's value type "
                             "from this dump of the same release (for a list made before the tool recorded types)")
    parser.add_argument("--child", nargs=2, metavar=("ENGINE", "SRC"), help=argparse.SUPPRESS)
    parser.add_argument("--stubs", default="", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if not args.child and not (args.engine and args.version):
        parser.error("--engine and --version are required")
    if args.source is None and (args.provenance != "tag" or args.source_files_json):
        parser.error("--provenance/--source-files-json go with --source")
    if args.source is not None:
        if args.engine != "trtllm":
            parser.error("--source is for --engine trtllm only")
        if args.wheel is not None:
            parser.error("--source and --wheel exclude each other")
        approximate = args.provenance == "approximate"
        if approximate and args.source_files_json is None:
            parser.error("--provenance approximate needs --source-files-json FILE")
        if not approximate and args.source_files_json is not None:
            parser.error("--source-files-json is for --provenance approximate only")
        if not approximate and not args.source_commit:
            parser.error("--source needs --source-commit (the sha the tree was read at)")
        if not (args.source / "tensorrt_llm/commands/serve.py").exists():
            parser.error(f"{args.source}/tensorrt_llm/commands/serve.py not found")
        found = source_version(args.source)
        if not approximate and found is not None and found != args.version:
            parser.error(f"{args.source}/tensorrt_llm/version.py says {found}, "
                         f"not {args.version}")
    return args


def main(argv: list[str] | None = None) -> int:
    """Entry point."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.child:
        return child_main(args.child[0], args.child[1], [s for s in args.stubs.split(",") if s])
    spec = ENGINES[args.engine]
    if args.source is not None and args.provenance == "approximate":
        source, record = approximate_source_text(args.version, args.source_files_json)
        doc = trtllm_document(args.version, args.source, source, from_tag=True)
        doc["provenance"] = "approximate"
        doc["provenance_files"] = record
        doc["method"] = doc["method"].replace("read from the tagged source",
                                              "read from upstream files at mixed commits")
        return write_document(args, doc)
    if args.source is not None:
        source = tagged_source_text(args.source_repo, args.source_tag or f"v{args.version}",
                                    args.source_commit, args.source)
        doc = trtllm_document(args.version, args.source, source, from_tag=True)
        return write_document(args, doc)
    wheel = args.wheel or pip_download(spec["package"], args.version, args.cache / "wheels")
    src = extract_sources(wheel, args.cache / "src" / wheel.stem)
    if args.engine == "trtllm":
        source = source_text("trtllm", args.version, wheel, sha256_of(wheel),
                             commit_id(src, "tensorrt_llm"))
        doc = trtllm_document(args.version, src, source)
    else:
        python = helper_venv(args.cache, args.engine, args.version, src)
        dump, stubbed = run_child(python, args.engine, src)
        doc = argparse_document(args.engine, args.version, wheel, src, dump, stubbed)
    return write_document(args, doc)


def add_types(doc: dict, old: dict) -> dict:
    """The committed list `old`, each option's `type` taken from `doc` (a new dump of the same release) and where
    the types come from in `types_source`. Refuses a dump whose option names differ: then it is another release, or
    the list is stale, and the whole list must be made again."""
    if set(doc["options"]) != set(old["options"]):
        raise SystemExit("--add-types: the new dump's options differ from the committed list's (%s): make the whole "
                         "list again" % ", ".join(sorted(set(doc["options"]) ^ set(old["options"]))[:10]))
    merged = dict(old, options={})
    for option, entry in old["options"].items():
        entry = dict(entry)
        entry.pop("type", None)
        if doc["options"][option].get("type"):
            entry["type"] = doc["options"][option]["type"]
        merged["options"][option] = entry
    merged["types_source"] = "%s (%s, %s)" % (doc["source"], TOOL, doc.get("generated"))
    return merged


def write_document(args: argparse.Namespace, doc: dict) -> int:
    """Write the document to --out-dir; with --compare, print the differences."""
    args.out_dir.mkdir(parents=True, exist_ok=True)
    out = args.out_dir / f"engine_flags_{args.engine}-{args.version}.json"
    if args.add_types:
        doc = add_types(doc, json.loads(out.read_text()))
    out.write_text(json.dumps(doc, indent=1))
    print(f"wrote {out} ({len(doc['options'])} options)")
    if args.compare:
        diff = compare(doc, json.loads(args.compare.read_text()))
        print("\n".join(diff) if diff else f"identical to {args.compare} in option names, "
              + ", ".join(COMPARED_KEYS))
    return 0


if __name__ == "__main__":
    sys.exit(main())
