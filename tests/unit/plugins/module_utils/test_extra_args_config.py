"""Options that load options from a file (issue 50): vLLM's and SGLang's --config, trtllm-serve's --config /
--extra_llm_api_options and trtllm-serve disaggregated's -c / --config_file would have the engine or router read options
the collection never sees, past every check of the extra arguments (managed flags, credentials, types, choices). They
are refused in every spelling, in the engines' and the routers' extra arguments, naming the variable; the declared list
(cli.OPTION_FILES) is compared with what the flag lists' sources record."""
import glob
import json
import os
import re

import pytest

from ansible_collections.kimi.deploy.plugins.module_utils._engines import cli
from ansible_collections.kimi.deploy.plugins.module_utils._engines import registry as eng
from ansible_collections.kimi.deploy.plugins.module_utils._engines.routers import ROUTERS, checked_argv
from ansible_collections.kimi.deploy.plugins.module_utils._model import deployment as dm
from ansible_collections.kimi.deploy.plugins.module_utils._model.inputs import DeploymentError
from test_deployment import B200x8, ROOT, SHA

FLAGS_DIR = os.path.join(ROOT, "tests", "fixtures", "engine_flags")
REFUSED = "read options from a file"

# Every options table the collection reads extra arguments against: (what, table).
TABLES = ([("%s %s" % (build, version), data["options"]) for build, spec in sorted(eng.ENGINES.items())
           for version, data in sorted(spec["versions"].items())]
          + [(name, router["options"]) for name, router in sorted(ROUTERS.items())])

# A flag of each engine that takes a value and is neither managed nor refused: it must still pass.
NORMAL = {"vllm": ["--max-num-seqs", "64"], "sglang": ["--max-running-requests", "64"],
          "trtllm": ["--max_batch_size", "64"]}

# Options whose name reads like a file of options, reviewed: they read a file (or take a value) that is not the
# engine's or router's own options. A new list with another such name fails the test below until it is reviewed
# here or declared in cli.OPTION_FILES.
NOT_OPTION_FILES = {
    ("vllm", "--log-config-file"): "Python logging's dictConfig JSON",
    ("sglang", "--decrypted-config-file"): "the model's decrypted config.json",
    ("sglang", "--decrypted-draft-config-file"): "the draft model's decrypted config.json",
    ("sglang", "--json-model-override-args"): "inline JSON overriding the model's config.json, not a file",
    ("sglang", "--lmcache-config-file"): "LMCache's own configuration",
    ("sglang", "--flexkv-config-file"): "FlexKV's own configuration",
    ("sglang", "--sidecar-args"): "a JSON list handed to the --sidecar module's main(argv), not SGLang's parser",
    ("trtllm", "--metadata_server_config_file"): "the metadata server's (etcd) address and intervals",
    ("trtllm-serve disaggregated", "--metadata_server_config_file"): "the metadata server's (etcd) address",
}
NAMED_LIKE_OPTION_FILES = re.compile(r"(config|(.+-)?(options?|args?)(-file)?|.+-config-file|.+-from-file)$")


def declared(table):
    return cli.OPTION_FILES.get(table["engine"], {})


def spellings(table, dest):
    """Every way an option of `dest` can be written: its option strings (aliases, short options), and the other
    separator in a long name (vLLM reads --foo_bar as --foo-bar; the click and argparse lists refuse it either way)."""
    out = []
    for option in table["dests"][dest][1:]:
        out.append(option)
        if option.startswith("--"):
            for other in ("--" + option[2:].replace("-", "_"), "--" + option[2:].replace("_", "-")):
                if other not in out:
                    out.append(other)
    return out


def forms(option):
    """The argument shapes check_extra reads: separate value, =value, one string with a space, bare."""
    return [[option, "/etc/opts.yaml"], [option + "=/etc/opts.yaml"], [option + " /etc/opts.yaml"], [option]]


ENGINE_CASES = [(build, version, args) for build, spec in sorted(eng.ENGINES.items())
                for version, data in sorted(spec["versions"].items())
                for dest in sorted(declared(data["options"]))
                for option in spellings(data["options"], dest) for args in forms(option)]
ROUTER_CASES = [(name, args) for name, router in sorted(ROUTERS.items())
                for dest in sorted(declared(router["options"]))
                for option in spellings(router["options"], dest) for args in forms(option)]


def refusal(call):
    with pytest.raises(DeploymentError) as refused:
        call()
    return str(refused.value)


# -- the declared list against the flag lists


def test_the_declared_list_matches_what_the_flag_lists_sources_record():
    """Each list's source records its parser's file of options (parser_behaviour: config_file, a note naming the
    option; config_option, trtllm-serve's option names): the declared dests are exactly those, per engine."""
    recorded = {}
    for path in sorted(glob.glob(os.path.join(FLAGS_DIR, "engine_flags_*.json"))):
        with open(path) as handle:
            data = json.load(handle)
        behaviour = data["parser_behaviour"]
        named = re.findall(r"--[A-Za-z0-9_-]+", behaviour.get("config_file", ""))
        option = behaviour.get("config_option") or []
        named += [option] if isinstance(option, str) else option
        dests = dict((alias, entry["dest"]) for option, entry in data["options"].items()
                     for alias in [option] + entry.get("aliases", []))
        recorded.setdefault(data["engine"], set()).update(dests[o] for o in named)
    assert set(recorded) >= {"vllm", "sglang", "trtllm", "smg", "vllm-router"}
    for engine, dests in recorded.items():
        assert set(cli.OPTION_FILES.get(engine, {})) == dests, engine
    # trtllm-serve disaggregated has no generated list (routers.TRTLLM_DISAGGREGATED is read off serve.py by hand)
    assert set(cli.OPTION_FILES) - set(recorded) == {"trtllm-serve disaggregated"}


@pytest.mark.parametrize("what, table", TABLES, ids=[row[0] for row in TABLES])
def test_each_declared_option_is_in_every_list_of_its_engine(what, table):
    assert all(dest in table["dests"] for dest in declared(table)), what


def test_each_declared_engine_has_a_list():
    assert set(cli.OPTION_FILES) <= set(table["engine"] for _what, table in TABLES)


@pytest.mark.parametrize("what, table", TABLES, ids=[row[0] for row in TABLES])
def test_an_option_named_like_a_file_of_options_is_declared_or_reviewed(what, table):
    for dest, entry in table["dests"].items():
        for option in entry[1:]:
            if NAMED_LIKE_OPTION_FILES.match(option.lstrip("-").replace("_", "-")):
                assert dest in declared(table) or (table["engine"], option) in NOT_OPTION_FILES, (
                    "%s: %s reads like a file of options: declare it in cli.OPTION_FILES or review it in "
                    "NOT_OPTION_FILES" % (what, option))


# -- the refusal, every build, version and spelling


@pytest.mark.parametrize("build, version, args", ENGINE_CASES,
                         ids=["%s-%s-%s" % (b, v, "|".join(a)) for b, v, a in ENGINE_CASES])
def test_each_spelling_is_refused_in_the_engines_extra_args_naming_the_variable(build, version, args):
    message = refusal(lambda: eng.check_extra_args(build, version, args))
    assert message.startswith("kimi_engine_extra_args=%r is not allowed: " % args[0]), message
    assert REFUSED in message and "never reads" in message, message
    assert message.count("Allowed values: ") == 1 and "in kimi_engine_extra_args" in message.split("Allowed values")[1]


@pytest.mark.parametrize("name, args", ROUTER_CASES, ids=["%s-%s" % (n, "|".join(a)) for n, a in ROUTER_CASES])
@pytest.mark.parametrize("field", ["pd_router_extra_args", "kimi_gateway_router_extra_args"])
def test_each_spelling_is_refused_in_the_routers_extra_args_naming_the_variable(name, args, field):
    variable = {"pd_router_extra_args": "kimi_pd_router_extra_args"}.get(field, field)
    message = refusal(lambda: checked_argv(name, [], args, {}, "kimi_pd", "kimi_pd", field))
    assert message.startswith("%s=%r is not allowed: " % (variable, args[0])) and REFUSED in message, message
    assert "in %s" % variable in message.split("Allowed values")[1], message


def test_every_build_with_such_an_option_is_covered():
    """vLLM (and vLLM-Ascend), SGLang (and SGLang-Ascend) and TensorRT-LLM, every pinned release; the routers: only
    trtllm-serve disaggregated has one."""
    assert {(b, v) for b, v, _args in ENGINE_CASES} == {(b, v) for b, spec in eng.ENGINES.items() for v in spec["versions"]}
    assert {n for n, _args in ROUTER_CASES} == {"trtllm-disaggregated"}
    assert {a[0] for b, _version, a in ENGINE_CASES if b == "trtllm"} >= {
        "--config", "--extra_llm_api_options", "--extra-llm-api-options"}
    assert {a[0] for n, a in ROUTER_CASES} >= {"-c", "--config_file", "--config-file"}


@pytest.mark.parametrize("build, version", [(b, v) for b, spec in sorted(eng.ENGINES.items())
                                            for v in sorted(spec["versions"])])
def test_a_normal_flag_still_passes(build, version):
    args = NORMAL[eng.options(build, version)["engine"]]
    assert eng.check_extra_args(build, version, args) == args


def test_without_the_declaration_the_option_would_pass(monkeypatch):
    """The refusal is what stops it: --config is a known option of the lists, which check_extra takes otherwise."""
    monkeypatch.setattr(cli, "OPTION_FILES", {})
    assert eng.check_extra_args("vllm", "0.22.1", ["--config", "/etc/opts.yaml"]) == ["--config", "/etc/opts.yaml"]
    assert eng.check_extra_args("sglang", "0.5.12.post1", ["--config=/etc/opts.yaml"]) == ["--config=/etc/opts.yaml"]


# -- through the deployment model


@pytest.mark.parametrize("inputs", [
    {"quant": "int4", "engine": "vllm", "extra_args": ["--max-num-seqs", "64", "--config", "/etc/opts.yaml"]},
    {"quant": "int4", "engine": "sglang", "extra_args": ["--config=/etc/opts.yaml"]},
    {"quant": "nvfp4", "engine": "trtllm", "extra_args": ["--extra_llm_api_options /etc/opts.yaml"]},
])
def test_the_deployment_refuses_it_naming_kimi_engine_extra_args(inputs):
    message = refusal(lambda: dm.resolve(inputs, [], require_revision=False))
    assert message.startswith("kimi_engine_extra_args=") and REFUSED in message, message


def test_trtllm_names_kimi_trtllm_options_for_the_llm_api_options():
    """trtllm-serve's --config is the YAML the collection writes: the refusal comes before the managed rule and says
    where LLM-API options go."""
    message = refusal(lambda: eng.check_extra_args("trtllm", "1.3.0rc17", ["--config", "/etc/opts.yaml"]))
    assert "is set by the collection" not in message and "LLM-API options in kimi_trtllm_options" in message, message


@pytest.mark.parametrize("inputs", [
    {"quant": "int4", "engine": "vllm", "extra_args": ["--max-num-seqs", "64", "--config-format", "hf"]},
    {"quant": "int4", "engine": "sglang", "extra_args": ["--max-running-requests=64"]},
    {"quant": "nvfp4", "engine": "trtllm", "extra_args": ["--max_batch_size", "64"]},
])
def test_the_deployment_takes_normal_flags(inputs):
    command = [str(a) for a in dm.resolve(inputs, [], require_revision=False)["command"]]
    assert all(a in command for a in inputs["extra_args"])


def test_the_pd_router_refuses_it_naming_kimi_pd_router_extra_args():
    members = [{"host": "p1", "role": "prefill", "address": "10.0.0.11", "rdma_devices": None},
               {"host": "d1", "role": "decode", "address": "10.0.0.12", "rdma_devices": None}]
    for args in (["-c", "/etc/disagg.yaml"], ["--config_file=/etc/disagg.yaml"]):
        inputs = {"quant": "nvfp4", "engine": "trtllm", "revisions": {"nvfp4": SHA},
                  "pd": {"name": "pd1", "me": "d1", "members": members, "router_extra_args": args}}
        message = refusal(lambda: dm.resolve(inputs, B200x8))
        assert message.startswith("kimi_pd_router_extra_args=%r is not allowed" % args[0]), message
        assert REFUSED in message and "writes that YAML itself from kimi_pd" in message, message
