"""The deployment model: every row of the runbook's tables, and the refusals."""
import json
import os
import re

import pytest

from ansible_collections.kimi.deploy.plugins.module_utils._model import deployment as dm
from ansible_collections.kimi.deploy.plugins.module_utils._engines import registry as eng
from ansible_collections.kimi.deploy.plugins.module_utils._model import fit as fitm
from ansible_collections.kimi.deploy.plugins.module_utils._model.checkpoints import CHECKPOINTS
from ansible_collections.kimi.deploy.plugins.module_utils._model.gpu import summarize_gpus

# (quant, engine) -> KV menu, of the engines this collection serves on NVIDIA through vLLM and SGLang's default versions
# Kimi-K2.6's identities (the default model); another model's quants (mxfp4: Kimi-K3) are test_models.py's.
KV_MENUS = dict(((q, e), spec["quants"][q]["kv_menu"]) for e, spec in eng.ENGINES.items() for q in spec["quants"]
                if e in ("sglang", "vllm") and q in CHECKPOINTS)
MOE_BACKENDS = eng.ENGINES["vllm"]["quants"]["nvfp4"]["moe_backends"]

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
FLAGS_DIR = os.path.join(ROOT, "tests", "fixtures", "engine_flags")
SHA = "0123456789abcdef0123456789abcdef01234567"


def gpus(name, cc, mib, count):
    return [{"index": i, "name": name, "compute_cap": cc, "memory_mib": mib} for i in range(count)]


RTX8 = gpus("NVIDIA RTX PRO 6000 Blackwell Server Edition", "12.0", 97887, 8)
H200x8 = gpus("NVIDIA H200", "9.0", 143771, 8)
H100x4 = gpus("NVIDIA H100 80GB HBM3", "9.0", 81559, 4)
B200x8 = gpus("NVIDIA B200", "10.0", 183359, 8)


def npus(name, chip, count, chips_per_npu):
    return [{"index": i, "name": name, "chip": chip, "platform": "ascend", "memory_mib": 65536,
             "chips_per_npu": chips_per_npu} for i in range(count)]


A3x16 = npus("Ascend910", "Ascend910", 16, 2)
A2x8 = npus("Ascend 910B3", "910B3", 8, 1)


def resolve(gpu_list=None, **inputs):
    inputs.setdefault("revisions", {"int4": SHA, "nvfp4": SHA, "w4a8": SHA})
    return dm.resolve(inputs, gpu_list)


# --- recommendation (runbook step 2/3) -----------------------------------------------------------------

@pytest.mark.parametrize("gpu_list, quant, engine, kv, moe", [
    (RTX8, "int4", "sglang", "fp8_e4m3", None),                              # sm_120 reference host
    (B200x8, "nvfp4", "vllm", "fp8", "flashinfer_cutedsl"),                  # datacenter Blackwell
    (H200x8, "int4", "vllm", "fp8", None),                                   # Hopper
    (gpus("NVIDIA L40S", "8.9", 46068, 8), "int4", "vllm", "fp8", None),     # Ada
    (gpus("NVIDIA A100-SXM4-80GB", "8.0", 81920, 8), "int4", "vllm", "fp8", None),  # Ampere
])
def test_recommend_rows(gpu_list, quant, engine, kv, moe):
    rec = dm.recommend(gpu_list)
    assert (rec["quant"], rec["engine"], rec["kv_cache_dtype"], rec["moe_backend"]) == (quant, engine, kv, moe)
    assert rec["reasons"] and all(isinstance(r, str) and r for r in rec["reasons"])


def test_recommend_marks_datacenter_blackwell_unverified():
    assert "unverified" in " ".join(dm.recommend(B200x8)["reasons"])


@pytest.mark.parametrize("gpu_list, fits", [(RTX8, True), (H200x8, True), (B200x8, True), (H100x4, False),
                                            (gpus("NVIDIA H100 80GB HBM3", "9.0", 81559, 8), False)])
def test_fit_verdict(gpu_list, fits):
    assert dm.recommend(gpu_list)["fits"] is fits


def test_too_small_pool_explains_with_numbers():
    rec = dm.recommend(H100x4)
    text = rec["reasons"][-1]
    assert text.startswith("Does not fit")
    assert "4 x NVIDIA H100 80GB HBM3" in text and "81559 MiB" in text and "595 GB" in text


def test_no_gpu_and_pre_ampere_do_not_fit():
    assert dm.recommend([])["fits"] is False
    assert "No NVIDIA GPU" in dm.recommend([])["reasons"][0]
    old = dm.recommend(gpus("Tesla V100-SXM2-32GB", "7.0", 32768, 8))
    assert old["fits"] is False and "sm_80" in old["reasons"][0]


def test_mixed_pool_is_judged_by_weakest_gpu():
    rec = dm.recommend(RTX8[:4] + gpus("NVIDIA H100 80GB HBM3", "9.0", 81559, 4))
    assert rec["engine"] == "vllm"  # the weakest GPU is Hopper
    assert any(r.startswith("Mixed GPUs") for r in rec["reasons"])


@pytest.mark.parametrize("bad", [[{"name": "x", "memory_mib": 1}], [{"name": "x", "compute_cap": "12.0"}],
                                 ["not a dict"], "RTX"])
def test_malformed_gpu_lists_raise(bad):
    with pytest.raises(dm.DeploymentError):
        dm.recommend(bad)


# --- KV estimate against the runbook's measurements on 8 x 97887 MiB -----------------------------------

def test_kv_estimate_matches_runbook_measurements():
    sglang_bf16 = fitm.kv_capacity_tokens("int4", "sglang", "auto", 0.85, 97887, 8)
    sglang_fp8 = fitm.kv_capacity_tokens("int4", "sglang", "fp8_e4m3", 0.85, 97887, 8)
    assert 110000 <= sglang_bf16 <= 122000          # measured pool: 116K tokens
    assert 220000 <= sglang_fp8 <= 244000           # measured pool: 232K tokens
    assert fitm.kv_capacity_tokens("int4", "vllm", "auto", 0.95, 97887, 8) >= 131072    # verified 0.95 / 131K
    assert fitm.kv_capacity_tokens("int4", "vllm", "fp8", 0.95, 97887, 8) >= 262144     # 256K needs fp8
    assert fitm.kv_capacity_tokens("int4", "vllm", "auto", 0.85, 97887, 8) < fitm.MIN_KV_TOKENS  # "won't start"


# --- resolution and refusals ----------------------------------------------------------------------------

def test_nvfp4_on_sglang_is_refused_with_reason():
    with pytest.raises(dm.DeploymentError, match=r"NaN.*Allowed pairs: int4\+sglang, nvfp4\+trtllm, int4\+vllm, nvfp4\+vllm"):
        resolve(RTX8, quant="nvfp4", engine="sglang")


@pytest.mark.parametrize("field, value, message", [
    ("quant", "fp8", r"quant='fp8' is not allowed\. Allowed values: int4, nvfp4, w4a8, auto"),
    ("engine", "tgi", r"engine='tgi' is not allowed\. Allowed values: sglang, trtllm, vllm, auto"),
    ("mem_fraction", 0.9, r"kimi_mem_fraction=0\.9 .*0\.90 OOM-crashes.*\(0, 0\.85\]"),
    ("context_length", 524288, r"kimi_context_length=524288 .*4096 to 262144"),
    ("tp", 6, r"kimi_tensor_parallel=6 .*power of two"),
    ("tp", 16, r"kimi_tensor_parallel=16 .*1\.\.8 \(GPUs found\)"),
    ("port", 70000, r"kimi_engine_port=70000"),
    ("served_model_name", "bad name!", r"kimi_served_model_name="),
    ("extra_args", "--foo", r"kimi_engine_extra_args='--foo' .*list of strings"),
    ("extra_args", ["--port", "1"], r"--port is set by the collection"),
    ("moe_backend", "marlin", r"kimi_moe_backend='marlin' .*NVFP4 choice"),
])
def test_bad_inputs_name_the_variable_and_allowed_values(field, value, message):
    inputs = {"quant": "int4", "engine": "sglang", field: value}
    with pytest.raises(dm.DeploymentError, match=message):
        resolve(RTX8, **inputs)


@pytest.mark.parametrize("quant, engine", sorted(KV_MENUS))
def test_kv_menus_recommended_first_and_enforced(quant, engine):
    menu = KV_MENUS[(quant, engine)]
    assert resolve(RTX8, quant=quant, engine=engine)["kv_cache_dtype"] == menu[0]
    for kv in menu:
        assert resolve(RTX8, quant=quant, engine=engine, kv_cache_dtype=kv,
                       context_length=65536)["kv_cache_dtype"] == kv
    wrong = "fp8" if engine == "sglang" else "fp8_e5m2"  # SGLang refuses plain fp8; TRITON_MLA has no e5m2
    with pytest.raises(dm.DeploymentError, match=r"kimi_kv_cache_dtype='%s'.*Allowed values: %s"
                       % (wrong, ", ".join(menu))):
        resolve(RTX8, quant=quant, engine=engine, kv_cache_dtype=wrong)


def test_runbook_kv_menus():
    assert KV_MENUS[("int4", "sglang")] == ("fp8_e4m3", "auto", "fp8_e5m2")
    assert KV_MENUS[("int4", "vllm")] == ("fp8", "auto")
    assert KV_MENUS[("nvfp4", "vllm")] == ("fp8", "auto")


def test_moe_backend_defaults_by_architecture():
    assert resolve(RTX8, quant="nvfp4", engine="vllm")["moe_backend"] == "marlin"
    assert resolve(B200x8, quant="nvfp4", engine="vllm")["moe_backend"] == "flashinfer_cutedsl"
    assert resolve(RTX8, quant="nvfp4", engine="vllm", moe_backend="flashinfer_b12x")["moe_backend"] == "flashinfer_b12x"
    assert resolve(RTX8, quant="int4", engine="vllm")["moe_backend"] is None
    with pytest.raises(dm.DeploymentError, match=r"Allowed values: marlin, flashinfer_b12x, flashinfer_cutedsl"):
        resolve(RTX8, quant="nvfp4", engine="vllm", moe_backend="triton")


def test_memory_knobs_are_different_knobs():
    sgl = resolve(RTX8, quant="int4", engine="sglang")
    vll = resolve(RTX8, quant="int4", engine="vllm")
    assert (sgl["memory_flag"], sgl["mem_fraction"]) == ("--mem-fraction-static", 0.85)
    assert (vll["memory_flag"], vll["mem_fraction"]) == ("--gpu-memory-utilization", 0.95)


def test_context_defaults_follow_kv_dtype():
    assert resolve(RTX8, quant="int4", engine="sglang")["context_length"] == 262144
    assert resolve(RTX8, quant="int4", engine="vllm")["context_length"] == 262144      # fp8 KV
    assert resolve(RTX8, quant="int4", engine="vllm", kv_cache_dtype="auto")["context_length"] == 131072


def test_vllm_context_beyond_kv_cache_is_refused_before_start():
    with pytest.raises(dm.DeploymentError, match="larger than the estimated KV cache"):
        resolve(RTX8, quant="int4", engine="vllm", kv_cache_dtype="auto", context_length=262144)


def test_vllm_memory_knob_without_kv_room_is_refused_by_the_fit_verdict():
    """0.85 leaves vLLM ~14K KV tokens on 8 x 96 GB: the chosen settings do not fit, and the verdict says so
    with the numbers (site.yml's preflight refuses it before any change) instead of a context-length error."""
    dep = resolve(RTX8, quant="int4", engine="vllm", mem_fraction=0.85, context_length=32768)
    hardware = dep["hardware"]
    assert hardware["fits"] is False and 0 < hardware["kv_tokens_estimate"] < 32768
    assert hardware["fit_reason"].startswith("Does not fit: tensor parallel 8 on 8 x NVIDIA RTX PRO 6000")
    assert "--gpu-memory-utilization 0.85" in hardware["fit_reason"] and "below the 64K minimum" in hardware["fit_reason"]
    assert "With kimi_mem_fraction=0.98 it would fit" in hardware["fit_reason"]


def test_an_unfit_pool_resolves_with_the_fit_verdict_instead_of_a_context_error():
    dep = resolve(H100x4)  # vLLM's KV estimate is 0 tokens here: the verdict, not the context check, reports it
    assert dep["identity"] == "int4-vllm" and dep["hardware"]["fits"] is False


def test_auto_resolution_uses_hardware_and_says_why():
    dep = resolve(RTX8)
    assert dep["identity"] == "int4-sglang"
    assert any("sm_120" in r for r in dep["reasons"])
    assert resolve(B200x8)["identity"] == "nvfp4-vllm"
    assert resolve(H200x8)["identity"] == "int4-vllm"
    assert resolve(RTX8, engine="vllm")["identity"] == "int4-vllm"
    assert resolve(RTX8, quant="nvfp4")["identity"] == "nvfp4-vllm"
    assert resolve(B200x8, quant="int4")["identity"] == "int4-vllm"
    assert resolve(B200x8, engine="sglang")["identity"] == "int4-sglang"


def test_user_choice_against_recommendation_is_noted():
    dep = resolve(RTX8, quant="int4", engine="vllm")
    assert any(r.startswith("Note: for this hardware the collection would recommend quant=int4 engine=sglang")
               for r in dep["reasons"])


def test_auto_without_gpus_is_refused():
    with pytest.raises(dm.DeploymentError, match="needs GPU facts"):
        resolve(None)


@pytest.mark.parametrize("revision, message", [
    (None, r"kimi_int4_revision is not set.*no safe default.*api/models/moonshotai/Kimi-K2\.6/revision/main"),
    ("main", r"kimi_int4_revision='main' is not a 40-hex commit sha"),
    ("0123456789ABCDEF0123456789ABCDEF01234567", r"kimi_int4_revision='0123456789ABCDEF.*must be written in lower case"
                                                 r".*use 0123456789abcdef0123456789abcdef01234567"),
    (SHA[:39], "not a 40-hex"),
    (SHA + "\n", r"kimi_int4_revision='0123.*\\n' is not allowed: the value holds a newline at character 40"),
])
def test_revision_must_be_a_pinned_sha(revision, message):
    with pytest.raises(dm.DeploymentError, match=message):
        dm.resolve({"quant": "int4", "engine": "sglang", "revisions": {"int4": revision}}, RTX8)


def test_revision_preview_mode_warns_instead():
    dep = dm.resolve({"quant": "nvfp4", "engine": "vllm"}, RTX8, require_revision=False)
    assert dep["checkpoint"]["revision"] is None
    assert any("kimi_nvfp4_revision is not set" in w for w in dep["warnings"])
    with pytest.raises(dm.DeploymentError, match="not a 40-hex"):
        dm.resolve({"quant": "nvfp4", "engine": "vllm", "revisions": {"nvfp4": "v1"}}, RTX8, require_revision=False)


def test_checkpoints_images_and_identity():
    dep = resolve(RTX8, quant="int4", engine="sglang")
    assert dep["checkpoint"]["repo_id"] == "moonshotai/Kimi-K2.6" and dep["checkpoint"]["revision"] == SHA
    assert dep["image"] == "lmsysorg/sglang:v0.5.12.post1-cu130"
    assert resolve(RTX8, quant="int4", engine="vllm")["image"] == "vllm/vllm-openai:v0.22.1"
    nv = resolve(RTX8, quant="nvfp4", engine="vllm")
    assert nv["checkpoint"]["repo_id"] == "nvidia/Kimi-K2.6-NVFP4" and nv["image_is_local_build"] is True
    assert resolve(RTX8, quant="int4", engine="vllm", image="registry.local/vllm:1")["image"] == "registry.local/vllm:1"


# --- engine command lines ---------------------------------------------------------------------------------

def load_flags(engine):
    name = {"vllm": "engine_flags_vllm-0.22.1.json", "sglang": "engine_flags_sglang-0.5.12.post1.json"}[engine]
    with open(os.path.join(FLAGS_DIR, name)) as handle:
        return json.load(handle)


def parse_against_pinned_parser(engine, argv):
    """Walk argv like the pinned parser: every option must exist, take a value iff it should, and respect
    choices/valid_values. Returns {flag: value}."""
    options = load_flags(engine)["options"]
    seen, index = {}, 0
    if engine == "sglang":
        assert argv[:3] == ["python3", "-m", "sglang.launch_server"]
        index = 3
    else:
        assert not argv[0].startswith("-")  # positional model of `vllm serve`
        index = 1
    while index < len(argv):
        flag = argv[index]
        assert flag.startswith("--"), "unexpected positional %r" % flag
        assert flag in options, "%s does not exist in the pinned %s parser" % (flag, engine)
        spec = options[flag]
        if spec["takes_value"]:
            value = argv[index + 1]
            allowed = spec.get("choices") or spec.get("valid_values")
            if allowed:
                assert value in allowed, "%s %s not in %s" % (flag, value, allowed)
            seen[flag] = value
            index += 2
        else:
            seen[flag] = True
            index += 1
    return seen


IDENTITY_ROWS = [(q, e, kv, moe) for (q, e), menu in sorted(KV_MENUS.items()) for kv in menu
                 for moe in (MOE_BACKENDS if q == "nvfp4" else (None,))]


def render(**inputs):
    """argv of a deployment resolved without GPUs or revision (what the engine_flags filter does for inputs)."""
    return dm.resolve(inputs, [], require_revision=False)["argv"]


@pytest.mark.parametrize("quant, engine, kv, moe", IDENTITY_ROWS)
def test_every_emitted_flag_exists_in_the_pinned_engine(quant, engine, kv, moe):
    flags = parse_against_pinned_parser(engine, render(quant=quant, engine=engine, kv_cache_dtype=kv, moe_backend=moe,
                                                       tp=8, context_length=131072))
    assert flags["--trust-remote-code"] is True
    assert flags["--tool-call-parser"] == "kimi_k2" and flags["--reasoning-parser"] == "kimi_k2"
    assert flags["--kv-cache-dtype"] == kv and flags["--port"] == "30000" and flags["--host"] == "127.0.0.1"
    assert flags["--served-model-name"] == "kimi-k2.6"
    if engine == "vllm":
        assert flags["--enable-auto-tool-choice"] is True and flags["--mm-encoder-tp-mode"] == "data"
        assert flags["--tensor-parallel-size"] == "8" and flags["--max-model-len"] == "131072"
        assert flags["--gpu-memory-utilization"] == "0.95"
    else:
        assert "--enable-auto-tool-choice" not in flags and "--mm-encoder-tp-mode" not in flags
        assert flags["--tp-size"] == "8" and flags["--context-length"] == "131072"
        assert flags["--mem-fraction-static"] == "0.85" and flags["--enable-metrics"] is True
    if quant == "nvfp4":
        assert flags["--quantization"] == "modelopt_fp4" and flags["--moe-backend"] == moe
        assert flags["--disable-custom-all-reduce"] is True
    else:
        assert "--quantization" not in flags and "--moe-backend" not in flags


def test_declared_flags_exist_in_pinned_parsers():
    for engine in ("sglang", "vllm"):
        args = eng.ENGINES[engine]["args"]
        options = load_flags(engine)["options"]
        missing = [a.option for a in args if a.option not in options]
        # --quantization is declared for SGLang too (never emitted for INT4) so that extra_args cannot set it.
        assert not missing, "%s: %s" % (engine, missing)


def test_managed_set_is_derived_from_the_declarations_by_dest():
    managed = dict((e, eng.managed(e, eng.ENGINES[e]["default_version"])) for e in ("sglang", "vllm"))
    for engine in managed:
        options = load_flags(engine)["options"]
        assert set(managed[engine]) == set(options[a.option]["dest"] for a in eng.ENGINES[engine]["args"])
    assert {"tensor_parallel_size", "model_path", "quantization", "mem_fraction_static"} <= set(managed["sglang"])
    assert {"tensor_parallel_size", "model", "moe_backend", "disable_custom_all_reduce"} <= set(managed["vllm"])
    assert "--tensor-parallel-size" not in [a.option for a in eng.ENGINES["sglang"]["args"]]  # managed as an alias


def test_model_argument_and_extra_args():
    argv = render(quant="int4", engine="vllm", extra_args=["--max-num-seqs", "64"])
    assert argv[0] == "moonshotai/Kimi-K2.6" and argv[-2:] == ["--max-num-seqs", "64"]
    full = dm.resolve({"quant": "int4", "engine": "vllm"}, [], require_revision=False)["command"]
    assert full[:3] == ["vllm", "serve", "moonshotai/Kimi-K2.6"]
    sgl = dm.resolve({"quant": "int4", "engine": "sglang"}, [], require_revision=False)
    assert sgl["argv"][sgl["argv"].index("--model-path") + 1] == "moonshotai/Kimi-K2.6"
    assert sgl["command"] == sgl["argv"] == eng.command_for(sgl)


@pytest.mark.parametrize("inputs, message", [
    ({"quant": "nvfp4", "engine": "sglang"}, "NaN"),
    ({"quant": "int4"}, r"quant=int4 engine=auto needs GPU facts .*engine \(sglang, trtllm, vllm\)"),
    ({"quant": "int4", "engine": "sglang", "kv_cache_dtype": "fp8"}, "kimi_kv_cache_dtype='fp8'"),
    ({"quant": "int4", "engine": "vllm", "moe_backend": "marlin"}, "NVFP4 choice"),
    ({"quant": "int4", "engine": "sglang", "mem_fraction": 0.95}, r"\(0, 0\.85\]"),
    ("int4-sglang", "deployment inputs must be a dict, got str"),
])
def test_refusals_without_gpus(inputs, message):
    """What engine_argv used to re-check is refused once, by resolve (the engine_flags filter's path too)."""
    with pytest.raises(dm.DeploymentError, match=message):
        dm.resolve(inputs, [], require_revision=False)


def test_engine_argv_renders_without_validating():
    dep = resolve(RTX8, quant="int4", engine="sglang")
    changed = dict(dep, tp=3, port=1, mem_fraction=0.5, extra_args=["--x"])  # values resolve() would refuse
    argv = eng.engine_argv(changed)
    assert argv[argv.index("--tp-size") + 1] == "3" and argv[argv.index("--port") + 1] == "1"
    assert argv[argv.index("--mem-fraction-static") + 1] == "0.5" and argv[-1] == "--x"


def test_resolved_command_matches_engine_argv():
    dep = resolve(RTX8, quant="nvfp4", engine="vllm")
    assert dep["argv"] == eng.engine_argv(dep)
    assert dep["command"][:2] == ["vllm", "serve"] and dep["command"][2:] == dep["argv"]


# --- kimi_engine_extra_args, read the way the pinned parser reads it ----------------------------------------

def extra(engine, args):
    return dm.resolve({"quant": "int4", "engine": engine, "extra_args": args}, [], require_revision=False)["extra_args"]


@pytest.mark.parametrize("engine, args, spelling, instead", [
    ("sglang", ["--tensor-parallel-size", "4"], "--tensor-parallel-size", "use kimi_tensor_parallel instead"),
    ("sglang", ["--tp-size=4"], "--tp-size", "use kimi_tensor_parallel instead"),
    ("sglang", ["--tp-size 4"], "--tp-size", "use kimi_tensor_parallel instead"),
    ("sglang", ["--tp_size", "4"], "--tp_size", "use kimi_tensor_parallel instead"),
    ("sglang", ["--model", "x/y"], "--model", "use quant instead"),
    ("sglang", ["--mem-fraction-static", "0.9"], "--mem-fraction-static", "use kimi_mem_fraction instead"),
    ("sglang", ["--quantization", "fp8"], "--quantization", "use quant instead"),
    ("sglang", ["--enable-metrics"], "--enable-metrics", "the collection fixes it"),
    ("vllm", ["-tp", "4"], "-tp", "use kimi_tensor_parallel instead"),
    ("vllm", ["-tp=4"], "-tp", "use kimi_tensor_parallel instead"),
    ("vllm", ["--tensor_parallel_size=4"], "--tensor_parallel_size", "use kimi_tensor_parallel instead"),
    ("vllm", ["--tensor-parallel-size 4"], "--tensor-parallel-size", "use kimi_tensor_parallel instead"),
    ("vllm", ["-q", "fp8"], "-q", "use quant instead"),
    ("vllm", ["--model", "x/y"], "--model", "use quant instead"),
    ("vllm", ["--no-enable-auto-tool-choice"], "--no-enable-auto-tool-choice", "the collection fixes it"),
    ("vllm", ["--max_model_len", "8192"], "--max_model_len", "use kimi_context_length instead"),
    ("vllm", ["--served-model-name", "a", "b"], "--served-model-name", "use kimi_served_model_name instead"),
])
def test_extra_args_refuse_managed_flags_in_any_spelling(engine, args, spelling, instead):
    with pytest.raises(dm.DeploymentError) as err:
        extra(engine, args)
    text = str(err.value)
    assert text.startswith("kimi_engine_extra_args=")
    assert "%s is set by the collection" % spelling in text and instead in text


@pytest.mark.parametrize("engine, args, message", [
    ("vllm", ["--foo"], r"--foo is not an option of vllm 0\.22\.1, the engine version selected"),
    ("sglang", ["--max-num-seqs", "64"], r"--max-num-seqs is not an option of sglang 0\.5\.12\.post1"),
    ("sglang", ["-tp", "4"], r"-tp is not an option of sglang 0\.5\.12\.post1"),
    ("vllm", ["--gpu-memory-util", "0.9"], r"abbreviation of --gpu-memory-utilization; kimi\.deploy requires full"),
    ("sglang", ["--tp", "4"], r"abbreviation of --tp-size"),
    ("vllm", ["--foo_bar"], r"--foo_bar \(read as --foo-bar\) is not an option of vllm"),
    ("sglang", ["--max_running_requests", "8"], r"sglang 0\.5\.12\.post1 does not accept underscores.*--max-running-requests"),
    ("sglang", ["--no-enable-metrics"], r"--no-enable-metrics is not an option of sglang"),
    ("vllm", ["--max-num-seqs"], r"'--max-num-seqs' is not allowed: --max-num-seqs needs a value"),
    ("vllm", ["--max-num-seqs", "--enable-expert-parallel"], r"--max-num-seqs needs a value"),
    ("vllm", ["--lora-modules"], r"--lora-modules needs a value"),
    ("vllm", ["--enable-expert-parallel=true"], r"--enable-expert-parallel is a switch and takes no value"),
    ("vllm", ["--enable-expert-parallel yes"], r"--enable-expert-parallel is a switch and takes no value"),
    ("vllm", ["64"], r"kimi_engine_extra_args='64' .*follows no option that takes a value"),
    ("vllm", ["--max-num-seqs", "64", "65"], r"'65' .*follows no option that takes a value"),
    ("vllm", ["--compilation-config.", "x"], r"dotted key"),
    ("vllm", ["-O3=1"], r"-O3 already carries its value"),
])
def test_extra_args_refuse_unknown_options_and_bad_values(engine, args, message):
    with pytest.raises(dm.DeploymentError, match=message):
        extra(engine, args)


@pytest.mark.parametrize("engine, args, argv", [
    ("vllm", ["--max-num-seqs", "64"], ["--max-num-seqs", "64"]),
    ("vllm", ["--max-num-seqs 64"], ["--max-num-seqs", "64"]),              # one string: split on the first space
    ("vllm", ["--max-num-seqs=64"], ["--max-num-seqs=64"]),
    ("vllm", ["--max_num_seqs", "64"], ["--max_num_seqs", "64"]),           # vLLM reads it as --max-num-seqs
    ("vllm", ["-ep", "--no-enable-prefix-caching"], ["-ep", "--no-enable-prefix-caching"]),
    ("vllm", ["-O3"], ["-O3"]),
    ("vllm", ["-O", "3"], ["-O", "3"]),
    ("vllm", ["--compilation-config.mode", "3"], ["--compilation-config.mode", "3"]),
    ("vllm", ['--compilation-config {"mode": 3}'], ["--compilation-config", '{"mode": 3}']),
    ("vllm", ["--lora-modules", "a=/x", "b=/y", "--max-num-seqs", "8"],
     ["--lora-modules", "a=/x", "b=/y", "--max-num-seqs", "8"]),
    ("vllm", ["--hf-token"], ["--hf-token"]),                                # nargs "?": the value is optional
    ("vllm", ["--num-gpu-blocks-override", "-1"], ["--num-gpu-blocks-override", "-1"]),  # a negative number is a value
    ("sglang", ["--max-running-requests", "64", "--enable-dp-attention"],
     ["--max-running-requests", "64", "--enable-dp-attention"]),
    ("sglang", [" --chunked-prefill-size 8192 "], ["--chunked-prefill-size", "8192"]),
])
def test_extra_args_accepted_spellings(engine, args, argv):
    assert extra(engine, args) == argv


def test_extra_args_land_at_the_end_of_the_command():
    dep = resolve(RTX8, quant="int4", engine="sglang", extra_args=["--max-running-requests 64"])
    assert dep["argv"][-2:] == ["--max-running-requests", "64"] and dep["extra_args"] == dep["argv"][-2:]


# --- the fit of the settings chosen (fit(), the one verdict) -------------------------------------------------

def test_tensor_parallel_below_the_gpu_count_does_not_fit_with_the_numbers():
    """-e kimi_tensor_parallel=4 on 8 x 96 GB puts ~153 GB of weights on each GPU: refused, with what fits."""
    hardware = resolve(RTX8, quant="int4", engine="vllm", tp=4)["hardware"]
    assert hardware["fits"] is False and hardware["kv_tokens_estimate"] == 0
    reason = hardware["fit_reason"]
    assert reason.startswith("Does not fit: tensor parallel 4 on 8 x NVIDIA RTX PRO 6000 Blackwell Server Edition")
    assert "each GPU would hold ~153 GB of the ~595 GB int4 checkpoint" in reason
    assert "leaving room for 0K KV tokens" in reason and "below the 64K minimum" in reason
    assert "With kimi_tensor_parallel=8 it would fit" in reason
    assert reason in resolve(RTX8, quant="int4", engine="vllm", tp=4)["reasons"]


def test_the_fit_describes_the_chosen_checkpoint():
    dep = resolve(B200x8, engine="sglang")  # the recommendation for B200 is nvfp4; the choice is int4 on SGLang
    assert dep["identity"] == "int4-sglang"
    assert dep["hardware"]["fit_reason"].startswith("Fits: tensor parallel 8 on 8 x NVIDIA B200")
    assert "int4 checkpoint (moonshotai/Kimi-K2.6)" in dep["hardware"]["fit_reason"]
    assert "sglang --mem-fraction-static 0.85" in dep["hardware"]["fit_reason"]
    assert not any("nvfp4 checkpoint" in r or "NVFP4" in r and r.startswith("Fits") for r in dep["reasons"])
    assert dep["hardware"]["recommended"]["quant"] == "nvfp4"


def test_hardware_shape():
    hardware = resolve(RTX8)["hardware"]
    assert set(hardware) == {"gpu_count", "platform", "models", "arch", "sm", "vram_total_mib", "vram_min_mib",
                             "kv_tokens_estimate", "fits", "fit_reason", "recommended", "replica_advice",
                             "sequences_estimate", "state_bytes_per_seq"}
    assert (hardware["sequences_estimate"], hardware["state_bytes_per_seq"]) == (None, 0)  # K2.6 has no state
    assert hardware["replica_advice"] is None  # it fits alone
    assert (hardware["vram_total_mib"], hardware["vram_min_mib"], hardware["fits"]) == (8 * 97887, 97887, True)
    assert hardware["kv_tokens_estimate"] == fitm.kv_capacity_tokens("int4", "sglang", "fp8_e4m3", 0.85, 97887, 8)


def test_fit_verdict_function():
    summary = summarize_gpus(RTX8)
    good = fitm.fit("int4", "sglang", "fp8_e4m3", 0.85, 8, summary)
    assert good["fits"] is True and good["kv_tokens"] >= fitm.MIN_KV_TOKENS and good["reason"].startswith("Fits: ")
    assert "~227K KV tokens per replica with fp8_e4m3 KV (at least 64K needed" in good["reason"]
    assert fitm.fit("int4", "sglang", "fp8_e4m3", 0.85, 8, summary, min_kv_tokens=10 ** 7)["fits"] is False
    bf16 = fitm.fit("int4", "vllm", "auto", 0.85, 8, summary)
    assert bf16["fits"] is False and "kimi_mem_fraction=0.98" in bf16["reason"]
    small = fitm.fit("int4", "vllm", "fp8", 0.95, 4, summarize_gpus(H100x4))
    assert small["fits"] is False and "Use more or larger GPUs, e.g. 8 x 96 GB" in small["reason"]
    old = fitm.fit("int4", "vllm", "fp8", 0.95, 8, summarize_gpus(gpus("Tesla V100-SXM2-32GB", "7.0", 32768, 8)))
    assert old["fits"] is False and "sm_80 or newer" in old["reason"]
    assert fitm.fit("int4", "vllm", "fp8", 0.95, 8, summarize_gpus([]))["fits"] is False


def test_recommend_uses_the_same_verdict():
    rec = dm.recommend(RTX8)
    assert rec["fit_reason"] == fitm.fit("int4", "sglang", "fp8_e4m3", 0.85, 8, summarize_gpus(RTX8))["reason"]
    assert rec["reasons"][-1] == rec["fit_reason"] and rec["vram_total_mib"] == 8 * 97887


# --- single values: full match, defaults only for unset -------------------------------------------------------

@pytest.mark.parametrize("field, value, message", [
    ("port", False, r"kimi_engine_port=False is not allowed"),
    ("port", True, r"kimi_engine_port=True is not allowed"),
    ("port", "false", r"kimi_engine_port='false' is not allowed"),
    ("port", 0, r"kimi_engine_port=0 is not allowed"),
    ("host", "0.0.0.0\n", r"kimi_engine_host='0\.0\.0\.0\\n' is not allowed"),
    ("host", False, r"kimi_engine_host=False is not allowed"),
    ("served_model_name", "kimi\n", r"kimi_served_model_name='kimi\\n' is not allowed"),
    ("image", "vllm/vllm-openai:v0.22.1\n", r"kimi_engine_image='vllm/vllm-openai:v0\.22\.1\\n' is not allowed"),
    ("mem_fraction", True, r"kimi_mem_fraction=True is not allowed"),
    ("tp", False, r"kimi_tensor_parallel=False is not allowed"),
])
def test_single_values_are_matched_in_full(field, value, message):
    with pytest.raises(dm.DeploymentError, match=message):
        resolve(RTX8, **{"quant": "int4", "engine": "vllm", field: value})


@pytest.mark.parametrize("value", [None, "", "auto"])
def test_only_unset_means_the_default_port(value):
    assert resolve(RTX8, quant="int4", engine="vllm", port=value)["port"] == 30000
    assert resolve(RTX8, quant="int4", engine="vllm", port="8000")["port"] == 8000


def test_checkpoint_names_its_revision_variable():
    assert resolve(RTX8, quant="int4", engine="vllm")["checkpoint"]["revision_variable"] == "kimi_int4_revision"
    assert resolve(RTX8, quant="nvfp4", engine="vllm")["checkpoint"]["revision_variable"] == "kimi_nvfp4_revision"


def test_engine_listens_on_loopback_unless_told_and_then_warns():
    quiet = dm.resolve({"quant": "int4", "engine": "vllm"}, [], require_revision=False)
    assert quiet["host"] == "127.0.0.1" and quiet["local_url"] == "http://127.0.0.1:30000"
    assert not [w for w in quiet["warnings"] if "without authentication" in w]
    loud = dm.resolve({"quant": "int4", "engine": "vllm", "host": "0.0.0.0"}, [], require_revision=False)
    assert loud["host"] == "0.0.0.0" and loud["local_url"] == "http://127.0.0.1:30000"  # reached over loopback
    assert [w for w in loud["warnings"] if w.startswith("kimi_engine_host=0.0.0.0: the engine port 30000 answers")]


@pytest.mark.parametrize("image", ["lmsysorg/sglang:v0.5.12.post1-cu130-runtime", "mirror.local:5000/sglang:dev-runtime"])
def test_sglang_runtime_images_are_refused(image):
    expected = r"kimi_engine_image='%s' is not allowed: the -runtime images lack ninja and nvcc" % re.escape(image)
    with pytest.raises(dm.DeploymentError, match=expected):
        dm.resolve({"quant": "int4", "engine": "sglang", "image": image}, [], require_revision=False)
