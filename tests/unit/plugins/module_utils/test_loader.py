"""The weight loader (kimi_load_format, _model/loader.py): the choice rule on the measured read rate, the user's choice
and its refusals, and each engine's argv checked against its pinned flag lists."""
import json

import pytest

from ansible_collections.kimi.deploy.plugins.module_utils._model import deployment as dm
from ansible_collections.kimi.deploy.plugins.module_utils._model import loader as ld
from ansible_collections.kimi.deploy.plugins.module_utils._model.inputs import DeploymentError
from ansible_collections.kimi.deploy.plugins.module_utils._engines.cli import option_index
from ansible_collections.kimi.deploy.plugins.module_utils._engines.registry import ENGINES, options
from test_deployment import B200x8, H200x8, SHA

FAST, MIDDLE, SLOW = ld.FAST_READ_MBPS + 1, (ld.FAST_READ_MBPS + ld.SLOW_READ_MBPS) / 2, ld.SLOW_READ_MBPS - 1
LOADER_FLAGS = ("--load-format", "--model-loader-extra-config", "--weight-loader-prefetch-checkpoints",
                "--weight-loader-prefetch-num-threads", "--safetensors-load-strategy")


def resolve(gpus, quant, engine, **inputs):
    return dm.resolve(dict({"quant": quant, "engine": engine, "revisions": {quant: SHA}}, **inputs), gpus)


def arg(argv, option):
    return argv[argv.index(option) + 1]


def loader_flags(argv):
    return [a for a in argv if a in LOADER_FLAGS]


# ---- the rule --------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("version", sorted(ENGINES["vllm"]["versions"]))
def test_vllm_fast_disk_streams_with_concurrency(version):
    dep = resolve(H200x8, "int4", "vllm", engine_version=version, weights_read_mbps=FAST)
    argv = dep["argv"]
    assert arg(argv, "--load-format") == "runai_streamer"
    assert json.loads(arg(argv, "--model-loader-extra-config")) == {"concurrency": 16}
    assert dep["loader"]["source"] == "measured" and "runai_streamer" in dep["loader"]["why"]
    assert dep["loader"]["why"] in dep["reasons"]


@pytest.mark.parametrize("rate", [None, MIDDLE, SLOW, 0])
def test_vllm_0_22_1_without_a_fast_disk_keeps_the_default_and_says_why(rate):
    dep = resolve(H200x8, "int4", "vllm", engine_version="0.22.1", weights_read_mbps=rate)
    assert loader_flags(dep["argv"]) == []
    assert dep["loader"]["source"] == "default" and dep["load_format"] is None
    assert "default" in dep["loader"]["why"]


def test_vllm_0_33_0_slow_disk_prefetches_into_the_page_cache():
    dep = resolve(H200x8, "int4", "vllm", engine_version="0.33.0", weights_read_mbps=SLOW)
    assert arg(dep["argv"], "--safetensors-load-strategy") == "prefetch" and "--load-format" not in dep["argv"]
    middle = resolve(H200x8, "int4", "vllm", engine_version="0.33.0", weights_read_mbps=MIDDLE)
    assert loader_flags(middle["argv"]) == []


def test_the_threshold_is_inclusive():
    assert ld.choose(ENGINES["vllm"], "0.22.1", read_mbps=ld.FAST_READ_MBPS)["format"] == "runai_streamer"
    assert ld.choose(ENGINES["vllm"], "0.22.1", read_mbps=ld.FAST_READ_MBPS - 0.1)["format"] is None


@pytest.mark.parametrize("version", sorted(ENGINES["sglang"]["versions"]))
def test_sglang_fast_disk_loads_multithreaded(version):
    argv = resolve(H200x8, "int4", "sglang", engine_version=version, weights_read_mbps=FAST)["argv"]
    assert "--load-format" not in argv
    assert json.loads(arg(argv, "--model-loader-extra-config")) == {"enable_multithread_load": True, "num_threads": 16}
    assert "--weight-loader-prefetch-checkpoints" not in argv


@pytest.mark.parametrize("version", sorted(ENGINES["sglang"]["versions"]))
def test_sglang_slow_disk_prefetches(version):
    argv = resolve(H200x8, "int4", "sglang", engine_version=version, weights_read_mbps=SLOW)["argv"]
    assert "--weight-loader-prefetch-checkpoints" in argv and arg(argv, "--weight-loader-prefetch-num-threads") == "8"
    assert "--model-loader-extra-config" not in argv and "--load-format" not in argv


def test_sglang_middle_disk_keeps_the_default():
    assert loader_flags(resolve(H200x8, "int4", "sglang", weights_read_mbps=MIDDLE)["argv"]) == []


def test_trtllm_offers_only_the_default():
    dep = resolve(B200x8, "nvfp4", "trtllm", weights_read_mbps=FAST)
    assert dep["load_format"] is None and dep["loader"]["source"] == "default"
    assert "offers no other loader" in dep["loader"]["why"]
    assert ld.allowed_formats(ENGINES["trtllm"], dep["engine_version"]) == ["auto"]


# ---- the user's choice -----------------------------------------------------------------------------------------------
def test_the_users_choice_wins_over_the_measurement():
    dep = resolve(H200x8, "int4", "vllm", load_format="safetensors", weights_read_mbps=FAST)
    assert arg(dep["argv"], "--load-format") == "safetensors" and "--model-loader-extra-config" not in dep["argv"]
    assert dep["loader"]["source"] == "user" and "set by the user" in dep["loader"]["why"]


def test_the_users_streamer_gets_its_concurrency_on_any_disk():
    argv = resolve(H200x8, "int4", "vllm", load_format="runai_streamer", weights_read_mbps=SLOW)["argv"]
    assert arg(argv, "--load-format") == "runai_streamer"
    assert json.loads(arg(argv, "--model-loader-extra-config")) == {"concurrency": 16}


def test_auto_is_the_rule_as_for_quant_and_engine():
    dep = resolve(H200x8, "int4", "vllm", load_format="auto", weights_read_mbps=FAST)
    assert dep["loader"]["source"] == "measured" and arg(dep["argv"], "--load-format") == "runai_streamer"


def test_a_format_the_image_lacks_is_refused_naming_the_variable_and_the_allowed_values():
    with pytest.raises(DeploymentError) as err:
        resolve(H200x8, "int4", "vllm", load_format="fastsafetensors")
    msg = str(err.value)
    assert "kimi_load_format='fastsafetensors'" in msg and "fastsafetensors" in msg and "lacks" in msg
    assert "Allowed values: auto, safetensors, runai_streamer, instanttensor" in msg


@pytest.mark.parametrize("value", ["dummy", "gguf", "pt", "bogus"])
def test_a_format_that_does_not_read_the_checkpoint_is_refused(value):
    with pytest.raises(DeploymentError, match=r"kimi_load_format=.*Allowed values: auto"):
        resolve(H200x8, "int4", "vllm", load_format=value)


def test_trtllm_refuses_any_loader_but_auto():
    with pytest.raises(DeploymentError, match=r"kimi_load_format='runai_streamer'.*Allowed values: auto$"):
        resolve(B200x8, "nvfp4", "trtllm", load_format="runai_streamer")


def test_an_unchecked_package_is_allowed_with_a_warning():
    dep = resolve(H200x8, "int4", "sglang", load_format="runai_streamer")
    assert arg(dep["argv"], "--load-format") == "runai_streamer"
    assert any("runai-model-streamer" in w and "not checked" in w for w in dep["warnings"])


@pytest.mark.parametrize("rate", ["fast", [1], -5])
def test_a_bad_read_rate_is_refused_naming_the_variable(rate):
    with pytest.raises(DeploymentError, match="kimi_weights_read_mbps"):
        resolve(H200x8, "int4", "vllm", weights_read_mbps=rate)


def test_extra_args_cannot_set_the_loader():
    with pytest.raises(DeploymentError, match="kimi_load_format"):
        resolve(H200x8, "int4", "vllm", extra_args=["--load-format", "safetensors"])


# ---- the data against the pinned flag lists --------------------------------------------------------------------------
@pytest.mark.parametrize("engine,version", [(e, v) for e in ("vllm", "sglang") for v in sorted(ENGINES[e]["versions"])])
def test_every_format_offered_is_in_the_versions_list_and_every_flag_exists(engine, version):
    opts = options(engine, version)
    index = option_index(opts)
    dest = index["--load-format"][0]
    listed = opts["values"].get(dest)
    loading = ENGINES[engine]["versions"][version]["loading"]
    if listed:  # the parser's choices are the version's own list
        assert set(loading["known"]) == set(listed)
    for fmt in ld.allowed_formats(ENGINES[engine], version):
        assert fmt in loading["known"]
    for tier in (loading["fast"], loading["slow"]):
        if tier and tier["format"]:
            assert tier["format"] in loading["known"] and loading["packages"].get(tier["format"], (None, True))[1]
        if tier and tier.get("load_strategy"):  # a choice the version's own list has
            dest = index["--safetensors-load-strategy"][0]
            assert tier["load_strategy"] in opts["values"][dest]
    for flag in LOADER_FLAGS[:4]:
        if engine == "vllm" and "weight-loader" in flag:
            continue
        assert flag in index, (engine, version, flag)
    if engine == "vllm":
        assert "--safetensors-load-strategy" in index
    if "--weight-loader-prefetch-num-threads" in index:
        assert opts["types"][index["--weight-loader-prefetch-num-threads"][0]] == "int"


# ---- a replica: one figure, one loader -------------------------------------------------------------------------------
def test_a_replica_reads_its_slowest_disk_so_every_member_picks_one_loader():
    from ansible_collections.kimi.deploy.plugins.module_utils._model import site as _site
    hostvars = {"a": {"kimi_replica": "r", "kimi_weights_read_mbps": 2500.0},
                "b": {"kimi_replica": "r", "kimi_weights_read_mbps": 1990.5}}

    def get(host, name):
        return hostvars.get(host, {}).get(name, _site.MISSING)
    for host in ("a", "b"):
        assert _site.inputs(get, host, ["a", "b"], [])["weights_read_mbps"] == 1990.5
    del hostvars["b"]["kimi_weights_read_mbps"]  # a member not measured: no figure for the replica
    assert _site.inputs(get, "a", ["a", "b"], [])["weights_read_mbps"] is None
    hostvars["b"]["kimi_weights_read_mbps"] = "fast"  # not a number: passed on, and the loader refuses it by name
    assert _site.inputs(get, "a", ["a", "b"], [])["weights_read_mbps"] == "fast"


def test_the_plan_says_which_loader_and_why():
    from ansible_collections.kimi.deploy.plugins.module_utils._model.report import plan_lines
    text = "\n".join(plan_lines(resolve(H200x8, "int4", "vllm", weights_read_mbps=FAST)))
    assert "Weight loader: runai_streamer" in text and "MB/s" in text
