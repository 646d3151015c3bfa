"""`trtllm-serve <model> [options]` (TensorRT-LLM) for the engine double: click-style parsing, the YAML config file,
and the pydantic `extra="forbid"` check of its keys against the llm_args of the flag list.

Driven by tests/fixtures/engine_flags/engine_flags_trtllm-<version>.json:
  parser_behaviour {kind: click, underscores_accepted, config_option, ...}, positionals ["model"],
  options {"--name": {choices, takes_value, aliases, dest, type, default, multiple}},
  llm_args {class, extra, fields {name: {type, default, choices?, fields?}}}.
The real `trtllm-serve` is a click group whose default command is `serve` (tensorrt_llm/commands/serve.py,
DefaultGroup): `trtllm-serve MODEL ...` runs `serve`, so click's usage line names `trtllm-serve serve`.
Messages are click 8.1-8.3's (identical in those versions).
"""
import difflib
import os
import re

from . import flags, yamlmini

PROG = "trtllm-serve"
SUBCOMMANDS = ("serve", "grpc", "disaggregated", "disaggregated_mpi_worker", "mm_embedding_serve")
# Fields that update_llm_args_with_extra_dict turns into config objects, with a warning "Overriding <field> "
OVERRIDE_WARNED = ("quant_config", "calib_config", "build_config", "kv_cache_config", "decoding_config",
                   "enable_build_cache", "peft_cache_config", "scheduler_config", "speculative_config",
                   "batching_type", "extended_runtime_perf_knob_config", "cache_transceiver_config", "lora_config",
                   "moe_config")
# CLI dest -> llm_args key (serve.get_llm_args); free_gpu_memory_fraction goes into kv_cache_config
CLI_TO_LLM_ARGS = {"free_gpu_memory_fraction": "kv_cache_config.free_gpu_memory_fraction"}
NOT_LLM_ARGS = ("host", "port", "log_level", "extra_llm_api_options", "tool_parser", "metadata_server_config_file",
                "server_role", "disagg_cluster_uri", "media_io_kwargs", "chat_template", "custom_module_dirs", "help")


class ClickError(Exception):
    """A click UsageError: printed as Usage/Try/blank/Error (or just the Error line), exit 2."""

    def __init__(self, message, usage=True, group=False, code=2):
        super().__init__(message)
        self.usage, self.group, self.code = usage, group, code


class ConfigError(Exception):
    """The YAML config or llm_args refused at start-up (exit 1)."""


def usage_lines(table, group=False):
    behaviour = table.get("parser_behaviour") or {}
    if group:
        return ["Usage: %s [OPTIONS] COMMAND [ARGS]..." % PROG, "Try '%s --help' for help." % PROG]
    usage = behaviour.get("usage") or "Usage: %s serve [OPTIONS] %s" % (
        PROG, " ".join(p.upper() for p in table.get("positionals") or ["model"]))
    path = usage[len("Usage: "):].split(" [OPTIONS]")[0] if usage.startswith("Usage: ") else PROG + " serve"
    return [usage, "Try '%s --help' for help." % path]


def format_error(err, table):
    lines = (usage_lines(table, err.group) + [""]) if err.usage else []
    return "\n".join(lines + ["Error: %s" % err])


# ---- the option table ---------------------------------------------------------------------------------------
class Option:
    def __init__(self, name, spec):
        self.spec, self.dest = spec, spec.get("dest") or name.lstrip("-").replace("-", "_")
        self.opts = [name] + [a for a in spec.get("aliases") or [] if a != name]
        self.takes_value = spec.get("takes_value", True)
        self.choices = spec.get("choices")
        self.multiple = bool(spec.get("multiple"))
        self.default = spec.get("default")
        kind = str(spec.get("type") or "").lower()
        if not self.takes_value:
            self.kind = "flag"
        elif self.choices:
            self.kind = "choice"
        elif "int" in kind:
            self.kind = "integer"
        elif "float" in kind:
            self.kind = "float"
        elif "bool" in kind:
            self.kind = "boolean"
        else:
            self.kind = "text"

    def hint(self):
        return " / ".join("'%s'" % o for o in self.opts)

    def convert(self, value):
        if self.kind == "integer":
            try:
                return int(value.strip())
            except ValueError:
                raise ClickError("Invalid value for %s: %r is not a valid integer." % (self.hint(), value))
        if self.kind == "float":
            try:
                return float(value.strip())
            except ValueError:
                raise ClickError("Invalid value for %s: %r is not a valid float." % (self.hint(), value))
        if self.kind == "choice" and value not in self.choices:
            choices = [str(c) for c in self.choices]
            what = "%r is not %r." % (value, choices[0]) if len(choices) == 1 else \
                "%r is not one of %s." % (value, ", ".join(repr(c) for c in choices))
            raise ClickError("Invalid value for %s: %s" % (self.hint(), what))
        if self.kind == "boolean":
            low = value.strip().lower()
            if low in ("1", "true", "t", "yes", "y", "on"):
                return True
            if low in ("0", "false", "f", "no", "n", "off"):
                return False
            raise ClickError("Invalid value for %s: %r is not a valid boolean. Recognized values: 0, 1, f, false, "
                             "n, no, off, on, t, true, y, yes" % (self.hint(), value))
        return value


def options_of(table):
    """name (as declared, and every alias) -> Option; plus --help."""
    by_name = {}
    for name, spec in table["options"].items():
        if name in by_name:  # listed both as a key and as another key's alias
            continue
        opt = Option(name, spec)
        for n in opt.opts:
            by_name.setdefault(n, opt)
    by_name.setdefault("--help", Option("--help", {"takes_value": False, "dest": "help"}))
    return by_name


def _normalize(name, underscores):
    return "--" + name[2:].replace("-", "_") if underscores and name.startswith("--") else name


def parse(argv, table):
    """Parse `trtllm-serve` argv. Returns flags.ParsedArgs('trtllm'); raises ClickError."""
    behaviour = table.get("parser_behaviour") or {}
    underscores = bool(behaviour.get("underscores_accepted"))
    by_name = options_of(table)
    lookup = {_normalize(n, underscores): o for n, o in by_name.items()}
    argv = list(argv)
    # the group: `trtllm-serve serve ...` or `trtllm-serve MODEL ...` (DefaultGroup); its own parser sees the rest
    if argv[:1] in (["--help"],):
        raise ClickError("help", usage=False, group=True, code=0)
    if not argv:
        raise ClickError("", usage=False, group=True, code=2)  # click >= 8.2: a group without args: help, exit 2
    if argv[0].startswith("-") and argv[0] != "-":
        raise ClickError("No such option: %s" % argv[0].split("=", 1)[0], group=True)
    if argv[0] in SUBCOMMANDS:
        if argv[0] != "serve":
            raise ClickError("%s %s: not provided by the engine double" % (PROG, argv[0]), usage=False, code=1)
        argv = argv[1:]
    args = flags.ParsedArgs("trtllm")
    args.defaults = {o.dest: o.default for o in by_name.values()}
    args.opts = {o.dest: o for o in by_name.values()}
    positionals, order, raw = [], [], {}
    i = 0
    while i < len(argv):
        tok = argv[i]
        i += 1
        if tok == "--":
            positionals.extend(argv[i:])
            break
        if not tok.startswith("-") or tok == "-":
            positionals.append(tok)
            continue
        name, eq, inline = tok.partition("=") if tok.startswith("--") else (tok, "", "")
        opt = lookup.get(_normalize(name, underscores))
        if opt is None:
            if not name.startswith("--") and len(name) > 2:
                name = name[:2]  # click reads -xyz as -x -y -z and fails on the first
            longs = [n for n in by_name if n.startswith("--")]
            close = difflib.get_close_matches(name, longs) if name.startswith("--") else []
            msg = "No such option: %s" % name
            if len(close) == 1:
                msg += " Did you mean %s?" % close[0]
            elif close:
                msg += " (Possible options: %s)" % ", ".join(sorted(close))
            raise ClickError(msg)
        if opt.dest == "help":
            raise ClickError("help", usage=False, code=0)
        if not opt.takes_value:
            if eq:
                raise ClickError("Option %r does not take a value." % name, usage=False)
            value = True
        elif eq:
            value = inline
        elif i < len(argv):
            value = argv[i]  # click takes the next token as the value, even one that starts with '-'
            i += 1
        else:
            raise ClickError("Option %r requires an argument." % name, usage=False)
        args.given.append(opt.opts[0])
        if opt.dest not in order:
            order.append(opt.dest)
        if opt.multiple:
            raw.setdefault(opt.dest, []).append(value)
        else:
            raw[opt.dest] = value
    # processing, in the order the options were given (click's iter_params_for_processing), then the argument
    for dest in order:
        opt, value = args.opts[dest], raw[dest]
        if opt.kind == "flag":
            args.values[dest] = True
        elif opt.multiple:
            args.values[dest] = [opt.convert(v) for v in value]
        else:
            args.values[dest] = opt.convert(value)
    if not positionals:
        raise ClickError("Missing argument '%s'." % (table.get("positionals") or ["model"])[0].upper())
    args.model = positionals.pop(0)
    if positionals:
        raise ClickError("Got unexpected extra argument%s (%s)" % (
            "s" if len(positionals) > 1 else "", " ".join(positionals)))
    return args


def help_text(table, group=False):
    if group:
        return ("Usage: %s [OPTIONS] COMMAND [ARGS]...\n\nOptions:\n  --help  Show this message and exit.\n\n"
                "Commands:\n  %s\n\n(engine double of TensorRT-LLM %s)" % (PROG, "\n  ".join(SUBCOMMANDS),
                                                                           table.get("version")))
    opts = sorted({", ".join(o.opts) for o in options_of(table).values()})
    return "%s\n\n  Running an OpenAI API compatible server (engine double of TensorRT-LLM %s)\n\nOptions:\n  %s" % (
        usage_lines(table)[0], table.get("version"), "\n  ".join(opts))


# ---- the YAML config and llm_args ---------------------------------------------------------------------------
def config_path(args):
    for dest in ("extra_llm_api_options", "config"):
        if args.get(dest):
            return args.get(dest)
    return None


def read_config(path):
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise ConfigError("FileNotFoundError: [Errno %s] %s: '%s'" % (e.errno, e.strerror, path))
    try:
        data = yamlmini.safe_load(text)
    except yamlmini.YAMLError as e:
        raise ConfigError("yaml error in %s: %s" % (path, e))
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError("TypeError: the config file %s must hold a mapping, got %s" % (path, type(data).__name__))
    return data


def cli_llm_args(args):
    """serve.get_llm_args: the dict the CLI values make (defaults from the flag list)."""
    out = {"model": args.model}
    for dest, opt in sorted(args.opts.items()):
        if dest in NOT_LLM_ARGS:
            continue
        value = args.values.get(dest, opt.default)
        key = CLI_TO_LLM_ARGS.get(dest, dest)
        if "." in key:
            top, sub = key.split(".", 1)
            out.setdefault(top, {})[sub] = value
        else:
            out[key] = value
    return out


def _type_name(value):
    return {type(None): "NoneType"}.get(type(value), type(value).__name__)


def _input(value):
    return "input_value=%r, input_type=%s" % (value, _type_name(value))


def _check_value(loc, field, value, extra, errors):
    """pydantic-style, loosely: nested models, extra=forbid, literals/choices, int/float/bool/str."""
    kind = str(field.get("type") or "")
    optional = "Optional" in kind or "None" in kind
    if value is None:
        bases = set(re.findall(r"\b(int|float|bool|str)\b", kind))
        if not optional and not field.get("fields") and len(bases) == 1 and field.get("default") is not None:
            base = bases.pop()
            kind = {"int": "integer", "float": "number", "bool": "boolean", "str": "string"}[base]
            errors.append((loc, "Input should be a valid %s" % kind,
                           {"str": "string_type"}.get(base, base + "_type"), value))
        return
    if field.get("fields"):
        if not isinstance(value, dict):
            cls = re.sub(r"^Optional\[(.*)\]$", r"\1", kind) or "model"
            errors.append((loc, "Input should be a valid dictionary or instance of %s" % cls, "model_type", value))
            return
        check_mapping(loc + ".", field["fields"], value, field.get("extra", extra), errors)
        return
    choices = field.get("choices")
    if choices:
        if value not in choices:
            shown = [repr(c) for c in choices]
            listed = shown[0] if len(shown) == 1 else ", ".join(shown[:-1]) + " or " + shown[-1]
            errors.append((loc, "Input should be %s" % listed, "literal_error", value))
        return
    bases = set(re.findall(r"\b(int|float|bool|str)\b", kind))
    if "List" in kind or "Dict" in kind or len(bases) != 1:
        return  # containers and unions: not checked
    base = bases.pop()
    if base == "int":
        ok = (isinstance(value, int) and not isinstance(value, bool)) or (isinstance(value, float) and
                                                                          value.is_integer())
        if isinstance(value, str):
            ok = bool(re.match(r"^\s*[-+]?\d+\s*$", value))
        if not ok:
            errors.append((loc, "Input should be a valid integer" + (
                ", unable to parse string as an integer" if isinstance(value, str) else ""),
                "int_parsing" if isinstance(value, str) else "int_type", value))
    elif base == "float":
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        if isinstance(value, str):
            try:
                float(value)
                ok = True
            except ValueError:
                ok = False
        if not ok:
            errors.append((loc, "Input should be a valid number" + (
                ", unable to parse string as a number" if isinstance(value, str) else ""),
                "float_parsing" if isinstance(value, str) else "float_type", value))
    elif base == "bool":
        ok = isinstance(value, bool) or value in (0, 1) or (
            isinstance(value, str) and value.lower() in ("0", "1", "true", "false", "yes", "no", "on", "off", "t",
                                                         "f", "y", "n"))
        if not ok:
            errors.append((loc, "Input should be a valid boolean" + (
                ", unable to interpret input" if isinstance(value, str) else ""),
                "bool_parsing" if isinstance(value, str) else "bool_type", value))
    elif base == "str" and not isinstance(value, str):
        errors.append((loc, "Input should be a valid string", "string_type", value))


def check_mapping(prefix, fields, data, extra, errors):
    for key, value in data.items():
        loc = "%s%s" % (prefix, key)
        if key not in fields:
            if extra == "forbid":
                errors.append((loc, "Extra inputs are not permitted", "extra_forbidden", value))
            continue
        _check_value(loc, fields[key], value, extra, errors)


def validation_error(cls, errors):
    lines = ["pydantic_core._pydantic_core.ValidationError: %d validation error%s for %s"
             % (len(errors), "" if len(errors) == 1 else "s", cls)]
    for loc, msg, etype, value in errors:
        lines += [loc, "  %s [type=%s, %s]" % (msg, etype, _input(value)),
                  "    For further information visit https://errors.pydantic.dev/2.11/v/%s" % etype]
    return "\n".join(lines)


def effective_llm_args(args, table, log):
    """The CLI's llm_args updated by the YAML config (the YAML wins: `llm_args | llm_args_dict`), validated
    against the flag list's llm_args. Logs what the config overrides. Raises ConfigError."""
    llm = cli_llm_args(args)
    path = config_path(args)
    extra = read_config(path) if path else {}
    spec = table.get("llm_args") or {}
    if spec.get("fields"):
        errors = []
        check_mapping("", spec["fields"], extra, spec.get("extra", "forbid"), errors)
        if errors:
            raise ConfigError(validation_error(spec.get("class", "TorchLlmArgs"), errors))
    for key in extra:
        if key in OVERRIDE_WARNED:
            log("Overriding %s " % key, "W")
    replaced = ["%s=%r (CLI: %r)" % (k, extra[k], llm[k]) for k in sorted(extra) if k in llm and llm[k] != extra[k]
                and args.values.get(k) is not None]
    if "kv_cache_config" in extra and args.values.get("free_gpu_memory_fraction") is not None:
        replaced.append("kv_cache_config replaces --free_gpu_memory_fraction %s"
                        % args.values["free_gpu_memory_fraction"])
    if replaced:
        log("[engine double] the config file %s wins over the command line: %s" % (path, "; ".join(replaced)), "W")
    merged = dict(llm)
    merged.update(extra)
    return merged, path


def fill_args(args, llm):
    """Copy the effective llm_args the rest of the double reads back into args.values."""
    for key in ("tensor_parallel_size", "pipeline_parallel_size", "moe_expert_parallel_size", "enable_attention_dp",
                "max_seq_len", "max_batch_size", "trust_remote_code", "revision", "reasoning_parser", "backend"):
        if llm.get(key) is not None:
            args.values[key] = llm[key]
    kv = llm.get("kv_cache_config") or {}
    if isinstance(kv, dict):
        args.values["kv_cache_dtype"] = kv.get("dtype") or "auto"
        args.values["kv_cache_free_gpu_memory_fraction"] = kv.get("free_gpu_memory_fraction", 0.9)
    if args.values.get("tool_parser"):
        args.values["tool_call_parser"] = args.values["tool_parser"]


def shm_problem(weight_bytes, env, path="/dev/shm"):
    """TRT-LLM dies with SIGBUS at weight load when /dev/shm is too small (KIMI_DOUBLE_SHM_BYTES_PER_WEIGHT_BYTE)."""
    try:
        factor = float(env.get("KIMI_DOUBLE_SHM_BYTES_PER_WEIGHT_BYTE") or 0)
    except ValueError:
        return None
    if factor <= 0:
        return None
    try:
        st = os.statvfs(path)
        free = st.f_bavail * st.f_frsize
    except OSError:
        free = 0
    if weight_bytes * factor > free:
        return free
    return None
