# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Reading command-line options the way an engine's own parser would. Private to kimi.deploy.

One engine version's options table (a generated _engines/flags/<engine>_<version> module, see its header) says how its parser
reads argv: argparse (vLLM, SGLang) or click (trtllm-serve), whether --foo_bar means --foo-bar (vLLM's
FlexibleArgumentParser), which options take --opt.key VALUE (vLLM's JSON config arguments) and what -O<n> stands for.
check_extra() reads kimi_engine_extra_args with those rules and refuses what the engine would refuse, or what the
collection manages, or an option that would have the engine read more options from a file (OPTION_FILES). Prefix
abbreviations, which argparse would accept, are refused: kimi.deploy requires full names.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import re

from ansible_collections.kimi.deploy.plugins.module_utils._common import check_no_control, fail, full_match, var

# Options that carry a credential (the engines' and routers' flag lists: vLLM --api-key/--hf-token, SGLang
# --api-key/--admin-api-key/--ssl-keyfile-password, SMG --api-key/--control-plane-api-keys/--tenant-api-key/
# --oracle-password/--postgres-db-url/--redis-url (the database URLs carry their password), vllm-router --api-key): a
# value there would be in the process's argv (`ps`), the args file and the plan. Refused in every spelling, naming what
# holds that secret instead.
SECRET_DESTS = {
    "api_key": "clients authenticate at Caddy with their own keys (caddy_proxy_clients); the engine and the router "
               "listen on loopback only",
    "admin_api_key": "the admin endpoints stay on loopback, behind Caddy",
    "hf_token": "the Hugging Face token is kimi_weights_hf_token (the weights stage downloads; the engine reads the "
                "local cache offline)",
    "ssl_keyfile_password": "Caddy terminates TLS (caddy_proxy); the engine serves plain HTTP on loopback",
    "control_plane_api_keys": "the router's control plane is not exposed; Caddy fronts the router",
    "oracle_password": "the router's history backend is not used by kimi.deploy",
    "postgres_db_url": "the router's history backend is not used by kimi.deploy",
    "redis_url": "the router's history backend is not used by kimi.deploy",
    "tenant_api_key": "clients authenticate at Caddy with their own keys (caddy_proxy_clients), which passes on only "
                       "their names",
}
# Options that have the engine or router read options from a file that kimi.deploy never reads: what that file holds
# would pass every check below unseen (managed flags, credentials, types, choices, unknown options). By the flag list's
# `engine`, then dest, so every spelling is refused (aliases, short options, vLLM's --foo_bar, trtllm-serve's refused
# --foo-bar). What the engines' help and source say:
# - vllm --config: "Read CLI options from a config file. Must be a YAML with the following options"
#   (vllm/entrypoints/openai/cli_args.py); FlexibleArgumentParser.parse_args: `if "--config" in args: args =
#   self._pull_args_from_config(args)` inserts the YAML's keys as options (vllm/utils/argparse_utils.py).
# - sglang --config: "Read CLI options from a config file. Must be a YAML file with configuration options."
#   (sglang/srt/server_args.py); prepare_server_args merges the YAML's keys into argv before parsing
#   (ConfigArgumentMerger, sglang/srt/server_args_config_parser.py).
# - trtllm --config, alias --extra_llm_api_options: "Path to a YAML file that overwrites the parameters specified by
#   trtllm-serve" (tensorrt_llm/commands/serve.py: yaml.safe_load, update_llm_args_with_extra_dict). The collection
#   writes that YAML itself (trtllm.CONFIG_PATH) from kimi_trtllm_options, checked against the LLM-API schema.
# - trtllm-serve disaggregated -c/--config_file: "Specific option for disaggregated mode." (parse_disagg_config_file:
#   the server's host, port and workers); the collection writes it from kimi_pd (routers.ROUTERS).
# The flag lists' sources record the first three (tests/fixtures/engine_flags/*.json, parser_behaviour: config_file,
# config_option); SMG 1.13.0 and vllm-router 0.1.17 have no such option. test_extra_args_config compares.
# dest -> (what the file holds, where its options go instead). {extra} is the extra-args variable refused.
INSTEAD = "each option in {extra} itself, where it is checked"
OPTION_FILES = {
    "vllm": {"config": ("a YAML whose keys vLLM's parser inserts as options", INSTEAD)},
    "sglang": {"config": ("a YAML whose keys SGLang merges into its options", INSTEAD)},
    "trtllm": {"extra_llm_api_options": (
        "a YAML of LLM-API options that overrides trtllm-serve's own",
        "LLM-API options in {engine_options} (the collection writes that YAML itself, each key checked against the "
        "release's schema), trtllm-serve's options in {extra}")},
    "trtllm-serve disaggregated": {"config_file": (
        "the disaggregated server's YAML: its host, port and workers",
        "the collection writes that YAML itself from {pd}; the router's other options in {extra}")},
}
NEGATIVE_NUMBER_RE = re.compile(r"-\d+|-\d*\.\d+")  # argparse reads these as values, not options
OPTION_RE = re.compile(r"(-[^=\s]*)(?:(=)|\s+)?(.*)", re.S)  # option, then "=value" or " value" (one string)


def option_index(table):
    """Every option string of one engine version's table -> (dest, values)."""
    index = {}
    for dest, entry in table["dests"].items():
        for option in entry[1:]:
            index[option] = (dest, table["arities"].get(option, entry[0]))
    return index


def _looks_like_value(text):
    return not text.startswith("-") or text == "-" or full_match(NEGATIVE_NUMBER_RE, text)


def _option(table, index, label, name, spelling, field="extra_args"):
    """An option as written -> (dest, values, implied value or None, refusal or None), the way the parser reads it:
    exact names, aliases and short options, vLLM's --foo_bar and --opt.key spellings and -O<n>. Refuses unknown
    options, naming the engine version (`label`). The refusal is for a spelling the engine would refuse although its
    dest is known (SGLang's --foo_bar, trtllm-serve's --foo-bar): check_extra raises it unless the dest is managed,
    which it reports first."""
    given = name
    if name.startswith("--") and table["underscores"]:
        base, dot, key = name.partition(".")
        name = base.replace("_", "-") + dot + key  # FlexibleArgumentParser rewrites the name before any dot
    if name in index:
        return index[name] + (None, None)
    if table["optimization_level"] and re.match(r"-O\d+$", name):
        return index[table["optimization_level"]] + (name[2:], None)
    if table["optimization_level"] and name == "-O":
        return index[table["optimization_level"]] + (None, None)
    base, dot, key = name.partition(".")
    if dot and base in table["dotted"]:
        if not re.match(r"[A-Za-z0-9_]+(\.[A-Za-z0-9_]+)*\+?$", key):
            fail(field, spelling, None, "%s takes --%s.KEY VALUE with a dotted key of letters, digits "
                 "and _" % (label, base.lstrip("-")))
        return index[base][0], 1, None, None
    for other in (name.replace("_", "-"), "--" + name[2:].replace("-", "_")):
        if name.startswith("--") and other != name and other in index:
            how = ("does not accept underscores in option names (plain argparse)" if table["parser"] == "argparse"
                   else "reads option names exactly as declared (%s)" % table["parser"])
            return index[other] + (None, "%s %s: write %s" % (label, how, other))
    why = "%s is not an option of %s, the engine version selected" % (
        given if given == name else "%s (read as %s)" % (given, name), label)
    prefixed = sorted(o for o in index if o.startswith(name)) if name.startswith("--") and len(name) > 2 else []
    if prefixed and table["parser"] == "argparse":
        why += " (argparse would take it as an abbreviation of %s; kimi.deploy requires full option names)" % (
            " or ".join(prefixed[:3]))
    fail(field, spelling, None, why)


# The value types a flag list records (tools/gen_flag_modules.value_kind): the parser the engine applies, and its name.
KINDS = {"int": (int, "an integer"), "float": (float, "a number"), "json": (json.loads, "a JSON")}


def _parses(kind, value):
    try:
        KINDS[kind][0](value)
    except ValueError:  # json.JSONDecodeError is a ValueError
        return False
    return True


def check_values(table, label, dest, name, spelling, given, field="extra_args"):
    """The values given to an option, checked as its parser would: one of its choices (or of the names the engine
    checks at start-up), and of its type (int, float, JSON) where the table records one. The refusal names the
    option, the value and what it takes."""
    allowed = table["values"].get(dest)
    kind = table.get("types", {}).get(dest)
    # Parser choices are exact; names checked at start-up are compared without case (vLLM upper-cases an attention
    # backend, SGLang a speculative algorithm, before looking them up).
    loose = dest in table.get("checked_at_start", ())
    for value in given:
        spelled = spelling if value in spelling else "%s %s" % (spelling, value)  # the option with the value refused
        if allowed and value not in allowed and not (loose and value.upper() in (a.upper() for a in allowed)):
            fail(field, spelled, allowed, "%s does not take %r (%s)" % (name, value, label))
        if kind and not _parses(kind, value):
            fail(field, spelled, None, "%s takes %s value, not %r (%s)" % (name, KINDS[kind][1], value, label))


def check_extra(table, label, managed, extra, field="extra_args"):
    """kimi_engine_extra_args, read the way `table`'s parser reads argv, returned as argv elements.

    managed: dest -> the Arg that the collection emits for it (every spelling of a managed dest is refused).
    Elements are `--flag`, `--flag=value`, `--flag value` as one string (split on the first whitespace), a flag
    followed by its values as separate elements, aliases and short options (`-tp 4`), vLLM's underscore, dotted
    and -O<n> spellings. Refused: an option that has the engine read options from a file (OPTION_FILES, any
    spelling), an option whose dest the collection manages (any spelling), an option the engine version does not
    have, a value for a switch, a missing value, a value that follows no option, a value outside the option's choices
    or not of its type (check_values).
    """
    extra = [] if extra is None or extra == "" else extra
    if isinstance(extra, str) or not isinstance(extra, (list, tuple)) or not all(isinstance(a, str) for a in extra):
        fail(field, extra, ["a list of strings, e.g. ['--max-running-requests', '64']"])
    check_no_control(field, list(extra))
    index = option_index(table)
    option_files = OPTION_FILES.get(table["engine"], {})
    elements = [element.strip() for element in extra]
    argv = []
    position = 0
    while position < len(elements):
        spelling = elements[position]
        position += 1
        if _looks_like_value(spelling):
            fail(field, spelling, None, "it is not an option and follows no option that takes a value "
                 "(give options as '--flag', '--flag=value', '--flag value' or '--flag', 'value')")
        name, equals, rest = OPTION_RE.match(spelling).groups()
        dest, values, implied, refusal = _option(table, index, label, name, spelling, field)
        if dest in option_files:  # before the managed rule: the collection may pass it, with a file of its own
            holds, instead = option_files[dest]
            fail(field, spelling, [instead.format(extra=var(field), engine_options=var("engine_options"),
                                                  pd=var("pd_members"))],
                 "%s makes %s read options from a file (%s), which kimi.deploy never reads: none of them would be "
                 "checked (managed flags, credentials, types, choices)" % (name, label, holds))
        if dest in managed:  # the managed-flag rule: by dest, so every spelling of a managed flag
            arg = managed[dest]
            instead = ("use %s instead" % var(arg.field)) if arg.field else "the collection fixes it for Kimi-K2.6"
            fail(field, spelling, None, "%s is set by the collection (%s's %s, emitted as %s); %s"
                 % (name, label, dest, "the model argument" if arg.positional else arg.option, instead))
        if refusal:
            fail(field, spelling, None, refusal)
        given = [rest.strip()] if equals or rest.strip() else []
        if implied is not None:  # -O3
            if given:
                fail(field, spelling, None, "%s already carries its value" % name)
            given = [implied]
        if values == 0:
            if given:
                fail(field, spelling, None, "%s is a switch and takes no value" % name)
            argv.append(spelling)
            continue
        if not given:
            limit = 1 if values in (1, "?") else len(elements)
            while position < len(elements) and len(given) < limit and _looks_like_value(elements[position]):
                given.append(elements[position])
                position += 1
        if dest in SECRET_DESTS and (given or values in (1, "+")):  # a bare `--hf-token` (nargs ?) holds none
            fail(field, "%s%s" % (name, "=<redacted>" if given else ""), None,  # never echo the value
                 "%s carries a credential, which would be readable in the process list, the args file and the plan; "
                 "%s" % (name, SECRET_DESTS[dest]))
        if not given and values in (1, "+"):
            fail(field, spelling, None, "%s needs a value, e.g. '%s=VALUE' or '%s', 'VALUE'"
                 % (name, name, name))
        check_values(table, label, dest, name, spelling, given, field)
        argv.extend([spelling] if equals or implied is not None else [name] + given)
    return argv


def option_value(table, argv, dest):
    """The value checked extra args (check_extra's argv) give `dest`, the last one winning as in argparse and click;
    None when they do not set it."""
    index = option_index(table)
    value = None
    for position, element in enumerate(argv):
        if _looks_like_value(element):
            continue
        name, equals, rest = OPTION_RE.match(element).groups()
        if _option(table, index, table["engine"], name, element)[0] != dest:  # read as check_extra read it
            continue
        if equals:
            value = rest
        elif position + 1 < len(argv) and _looks_like_value(argv[position + 1]):
            value = argv[position + 1]
    return value
