"""Command-line parsing of the engine double against the pinned flag lists.

The real engines use argparse; this is a small, stricter imitation driven by the JSON dumps of their real
parsers (tests/fixtures/engine_flags/engine_flags_<engine>-<version>.json). What it copies: unknown options,
bad choices, missing values and store_true-with-value all exit 2 with argparse's wording. Where it is
deliberately stricter: abbreviations (unique prefixes) are refused, since the project promises full names.
"""
import glob
import json
import os
import re
import sys

# The pinned versions; KIMI_DOUBLE_ENGINE_VERSION selects another one whose flag list exists.
VERSIONS = {"vllm": "0.22.1", "sglang": "0.5.12.post1", "trtllm": "1.3.0rc17"}
PROGS = {"vllm": "vllm serve", "sglang": "launch_server.py", "trtllm": "trtllm-serve"}
VERSION_ENV = "KIMI_DOUBLE_ENGINE_VERSION"
_NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")


class UsageError(Exception):
    """argparse-like usage error: the real engines print usage and exit 2."""


def flags_dir():
    """Where the flag JSON files are: $KIMI_DOUBLE_FLAGS_DIR, ../flags (image), or the repo fixtures."""
    here = os.path.dirname(os.path.abspath(__file__))
    candidates = [os.environ.get("KIMI_DOUBLE_FLAGS_DIR", ""),
                  os.path.join(here, "..", "flags"),
                  os.path.join(here, "..", "..", "..", "fixtures", "engine_flags")]
    for c in candidates:
        if c and os.path.isdir(c):
            return os.path.abspath(c)
    raise FileNotFoundError("engine double: no flag files found (set KIMI_DOUBLE_FLAGS_DIR)")


class UnknownVersion(Exception):
    """KIMI_DOUBLE_ENGINE_VERSION names a version without a flag list (the double exits 1)."""


def version(engine, env=None):
    """The engine version the double plays: $KIMI_DOUBLE_ENGINE_VERSION, else the pinned one."""
    env = os.environ if env is None else env
    return env.get(VERSION_ENV) or VERSIONS[engine]


def known_versions(engine, directory=None):
    """Versions that have an engine_flags_<engine>-<version>.json in the flags directory."""
    directory = directory or flags_dir()
    prefix = "engine_flags_%s-" % engine
    versions = (os.path.basename(p)[len(prefix):-len(".json")]
                for p in glob.glob(os.path.join(glob.escape(directory), prefix + "*.json")))
    return sorted(v for v in versions if not v.startswith("router-"))  # engine_flags_vllm-router-*: another program


_CACHE = {}


def load_flags(engine, env=None):
    """The flag list of the active version of `engine`. Raises UnknownVersion when it has no file."""
    directory, ver = flags_dir(), version(engine, env)
    path = os.path.join(directory, "engine_flags_%s-%s.json" % (engine, ver))
    if path not in _CACHE:
        if not os.path.isfile(path):
            known = known_versions(engine, directory)
            raise UnknownVersion("engine double: no flag list for %s %s (%s=%s): %s does not exist; known %s "
                                 "versions: %s" % (engine, ver, VERSION_ENV, ver, path, engine,
                                                   ", ".join(known) or "none"))
        with open(path, encoding="utf-8") as f:
            _CACHE[path] = json.load(f)
    return _CACHE[path]


class ParsedArgs:
    """Parsed options keyed by dest (e.g. args.get('tensor_parallel_size')), plus the model."""

    def __init__(self, engine):
        self.engine = engine
        self.values = {}
        self.model = None
        self.given = []  # option names as given (canonical long names), in order
        self.defaults = {}  # dest -> default (trtllm: from the flag list)
        self.opts = {}  # dest -> trtllm.Option
        self.llm_args = None  # trtllm: the effective llm_args (CLI updated by the YAML config)

    def get(self, dest, default=None):
        return self.values.get(dest, default)

    def flag(self, dest):
        return bool(self.values.get(dest))


def _looks_like_value(tok):
    return not tok.startswith("-") or tok == "-" or bool(_NEGATIVE_NUMBER.match(tok))


def _bad_choice(spec, name, value):
    check = value
    if "lower().replace('-', '_')" in spec.get("validated", ""):
        check = value.lower().replace("-", "_")
    if spec.get("choices") and check not in spec["choices"]:
        raise UsageError("argument %s: invalid choice: %r (choose from %s)"
                         % (name, value, ", ".join(repr(c) for c in spec["choices"])))
    return check


def parse(engine, argv, table=None):
    """Parse argv (options after `vllm serve` / `-m sglang.launch_server`). Raises UsageError."""
    table = table or load_flags(engine)
    options, shorts = table["options"], table.get("short_options", {})
    args = ParsedArgs(engine)
    extras = []
    dotted = {}  # vLLM: dest -> (option, dict of its --option.key values)
    positionals = []
    i = 0
    while i < len(argv):
        tok = argv[i]
        i += 1
        if tok == "--":
            positionals.extend(argv[i:])
            break
        if _looks_like_value(tok):
            positionals.append(tok)
            continue
        name, eq, inline = tok.partition("=")
        if engine == "vllm" and name.startswith("--"):
            # FlexibleArgumentParser rewrites --foo_bar to --foo-bar, before the first dot only (its pattern
            # `(?<=--)[^\.]*`): --speculative-config.num_speculative_tokens keeps the key's underscores.
            head, dot, rest = name[2:].partition(".")
            name = "--" + head.replace("_", "-") + dot + rest
        if engine == "vllm" and re.match(r"^-O\d+$", name):  # -O3 -> --optimization-level 3
            name, eq, inline = "--optimization-level", "=", name[2:]
        elif engine == "vllm" and name == "-O":
            name = "--optimization-level"
        if name in shorts:
            name = shorts[name]
        base = name.split(".", 1)[0]
        if (engine == "vllm" and "." in name and base in options and base.endswith("-config")
                and options[base]["takes_value"]):
            # --speculative-config.method mtp: FlexibleArgumentParser (vllm/utils/argparse_utils.py) gathers the
            # dotted keys of one option into a dict (each value json.loads'd, else the string; `.key+ a,b` a list)
            # and appends `--speculative-config <that JSON>` after the other arguments, so it wins over a JSON given
            # whole (argparse keeps the last value).
            if not eq:
                if i >= len(argv):
                    raise UsageError("argument %s: expected one argument" % base)
                inline, i = argv[i], i + 1
            keys = name.split(".")[1:]
            if keys and keys[-1].endswith("+"):
                keys[-1], value = keys[-1][:-1], inline.split(",")
            else:
                try:
                    value = json.loads(inline)
                except ValueError:
                    value = inline
            node = dotted.setdefault(options[base]["dest"], (base, {}))[1]
            for key in keys[:-1]:
                if not isinstance(node.get(key), dict):
                    node[key] = {}
                node = node[key]
            node[keys[-1]] = value
            args.given.append(base)
            continue
        elif name in options:
            spec = options[name]
        else:
            matches = [o for o in options if o.startswith(name)] if name.startswith("--") else []
            if matches:
                raise UsageError(
                    "unrecognized arguments: %s (an abbreviation of %s; the engine double requires "
                    "full option names, which is what kimi.deploy promises to emit)"
                    % (tok, " / ".join(sorted(matches)[:5])))
            extras.append(tok)
            while i < len(argv) and _looks_like_value(argv[i]) and (engine != "vllm" or args.model
                                                                    or positionals):
                extras.append(argv[i])
                i += 1
            continue
        args.given.append(name)
        dest, nargs = spec["dest"], spec.get("nargs")
        if not spec["takes_value"]:
            if eq:
                raise UsageError("argument %s: ignored explicit argument %r" % (name, inline))
            if spec["action"] == "BooleanOptionalAction":
                args.values[dest] = not name.startswith("--no-")
            elif spec["action"] == "_HelpAction":
                args.values["help"] = True
            elif spec["action"] != "DeprecatedAction":
                args.values[dest] = True
            continue
        vals = [inline] if eq else []
        if not eq:
            while i < len(argv) and _looks_like_value(argv[i]):
                vals.append(argv[i])
                i += 1
                if nargs not in ("+", "*"):
                    break
        if not vals and nargs not in ("?", "*"):
            raise UsageError("argument %s: expected %s argument" % (
                name, "at least one" if nargs == "+" else "one"))
        vals = [_bad_choice(spec, name, v) for v in vals]
        if nargs in ("+", "*"):
            args.values[dest] = vals
        elif spec["action"] == "_AppendAction":
            args.values.setdefault(dest, []).append(vals[0])
        else:
            args.values[dest] = vals[0] if vals else None
    for dest, (_option, value) in dotted.items():
        args.values[dest] = json.dumps(value)
    if engine == "vllm":
        _check_json_options(args, options)
        if positionals:
            args.model = positionals.pop(0)
        extras.extend(positionals)
        args.model = args.model or args.values.get("model")
    else:
        extras.extend(positionals)
        args.model = args.values.get("model_path")
    if extras:
        raise UsageError("unrecognized arguments: %s" % " ".join(extras))
    if engine == "sglang" and not args.model and not args.values.get("help"):
        raise UsageError("the following arguments are required: --model-path/--model")
    return args


# vLLM options whose argparse type is json.loads (EngineArgs: parse_type(json.loads) for a dict-typed config); a
# value that is not JSON stops the parser (exit 2). Only those the double reads are checked.
JSON_OPTIONS = {"speculative_config": "--speculative-config/-sc"}


def _check_json_options(args, options):
    for dest, shown in JSON_OPTIONS.items():
        value = args.values.get(dest)
        if isinstance(value, str):
            try:
                json.loads(value)
            except ValueError:
                raise UsageError("argument %s: Value %s cannot be converted to <function loads>." % (shown, value))


def startup_problems(args, table=None):
    """Values the real engine accepts at parse time but refuses at start-up (JSON `valid_values`)."""
    table = table or load_flags(args.engine)
    problems, seen = [], set()
    for name, spec in table["options"].items():
        valid, value = spec.get("valid_values"), args.values.get(spec["dest"])
        if not valid or value is None or spec["dest"] in seen:
            continue
        if args.engine == "vllm" and name.endswith("-config"):
            continue  # vLLM 0.20.2's --speculative-config valid_values are its `method`s: speculative.py checks them
        seen.add(spec["dest"])
        check = value.upper() if args.engine == "sglang" else value  # SGLang upper-cases enum names
        if check not in valid:
            problems.append("ValueError: invalid value %r for %s; valid values are: %s"
                            % (value, name, ", ".join(valid)))
    return problems


def usage_exit(engine, message, stream=None):
    """Print argparse-style usage + error and exit 2, like the real parsers."""
    stream = stream or sys.stderr
    prog = PROGS[engine]
    print("usage: %s [options]%s" % (prog, " model_tag" if engine == "vllm" else ""), file=stream)
    print("%s: error: %s" % (prog, message), file=stream)
    sys.exit(2)
