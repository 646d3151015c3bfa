"""The deployment model: every row of the runbook's tables, and the refusals."""
import json
import os

import pytest

from ansible_collections.kimi.deploy.plugins.module_utils import _deployment as dm

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
FLAGS_DIR = os.path.join(ROOT, "tests", "fixtures", "engine_flags")
SHA = "0123456789abcdef0123456789abcdef01234567"


def gpus(name, cc, mib, count):
    return [{"index": i, "name": name, "compute_cap": cc, "memory_mib": mib} for i in range(count)]


RTX8 = gpus("NVIDIA RTX PRO 6000 Blackwell Server Edition", "12.0", 97887, 8)
H200x8 = gpus("NVIDIA H200", "9.0", 143771, 8)
H100x4 = gpus("NVIDIA H100 80GB HBM3", "9.0", 81559, 4)
B200x8 = gpus("NVIDIA B200", "10.0", 183359, 8)


def resolve(gpu_list=None, **inputs):
    inputs.setdefault("revisions", {"int4": SHA, "nvfp4": SHA})
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


def test_memory_mib_accepts_nvidia_smi_units():
    assert dm.summarize_gpus([{"name": "x", "compute_cap": "12.0", "memory_mib": "97887 MiB"}])["pool_mib"] == 97887


# --- KV estimate against the runbook's measurements on 8 x 97887 MiB -----------------------------------

def test_kv_estimate_matches_runbook_measurements():
    sglang_bf16 = dm.kv_capacity_tokens("int4", "sglang", "auto", 0.85, 97887, 8)
    sglang_fp8 = dm.kv_capacity_tokens("int4", "sglang", "fp8_e4m3", 0.85, 97887, 8)
    assert 110000 <= sglang_bf16 <= 122000          # measured pool: 116K tokens
    assert 220000 <= sglang_fp8 <= 244000           # measured pool: 232K tokens
    assert dm.kv_capacity_tokens("int4", "vllm", "auto", 0.95, 97887, 8) >= 131072    # verified 0.95 / 131K
    assert dm.kv_capacity_tokens("int4", "vllm", "fp8", 0.95, 97887, 8) >= 262144     # 256K needs fp8
    assert dm.kv_capacity_tokens("int4", "vllm", "auto", 0.85, 97887, 8) < dm.MIN_KV_TOKENS  # "won't start"


# --- resolution and refusals ----------------------------------------------------------------------------

def test_nvfp4_on_sglang_is_refused_with_reason():
    with pytest.raises(dm.DeploymentError, match=r"NaN.*Allowed pairs: int4\+sglang, int4\+vllm, nvfp4\+vllm"):
        resolve(RTX8, quant="nvfp4", engine="sglang")


@pytest.mark.parametrize("field, value, message", [
    ("quant", "fp8", r"quant='fp8' is not allowed\. Allowed values: int4, nvfp4, auto"),
    ("engine", "trtllm", r"engine='trtllm' is not allowed\. Allowed values: sglang, vllm, auto"),
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


@pytest.mark.parametrize("quant, engine", sorted(dm.KV_MENUS))
def test_kv_menus_recommended_first_and_enforced(quant, engine):
    menu = dm.KV_MENUS[(quant, engine)]
    assert resolve(RTX8, quant=quant, engine=engine)["kv_cache_dtype"] == menu[0]
    for kv in menu:
        assert resolve(RTX8, quant=quant, engine=engine, kv_cache_dtype=kv,
                       context_length=65536)["kv_cache_dtype"] == kv
    wrong = "fp8" if engine == "sglang" else "fp8_e5m2"  # SGLang refuses plain fp8; TRITON_MLA has no e5m2
    with pytest.raises(dm.DeploymentError, match=r"kimi_kv_cache_dtype='%s'.*Allowed values: %s"
                       % (wrong, ", ".join(menu))):
        resolve(RTX8, quant=quant, engine=engine, kv_cache_dtype=wrong)


def test_runbook_kv_menus():
    assert dm.KV_MENUS[("int4", "sglang")] == ("fp8_e4m3", "auto", "fp8_e5m2")
    assert dm.KV_MENUS[("int4", "vllm")] == ("fp8", "auto")
    assert dm.KV_MENUS[("nvfp4", "vllm")] == ("fp8", "auto")


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
    with pytest.raises(dm.DeploymentError, match="larger than the estimated KV cache"):
        resolve(RTX8, quant="int4", engine="vllm", mem_fraction=0.85, context_length=32768)


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
    ("0123456789ABCDEF0123456789ABCDEF01234567", "not a 40-hex"),
    (SHA[:39], "not a 40-hex"),
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


IDENTITY_ROWS = [(q, e, kv, moe) for (q, e), menu in sorted(dm.KV_MENUS.items()) for kv in menu
                 for moe in (dm.MOE_BACKENDS if q == "nvfp4" else (None,))]


@pytest.mark.parametrize("quant, engine, kv, moe", IDENTITY_ROWS)
def test_every_emitted_flag_exists_in_the_pinned_engine(quant, engine, kv, moe):
    dep = {"quant": quant, "engine": engine, "kv_cache_dtype": kv, "moe_backend": moe, "tp": 8,
           "context_length": 131072}
    flags = parse_against_pinned_parser(engine, dm.engine_argv(dep))
    assert flags["--trust-remote-code"] is True
    assert flags["--tool-call-parser"] == "kimi_k2" and flags["--reasoning-parser"] == "kimi_k2"
    assert flags["--kv-cache-dtype"] == kv and flags["--port"] == "30000" and flags["--host"] == "0.0.0.0"
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


def test_managed_flags_exist_in_pinned_parsers():
    for engine, flags in dm.MANAGED_FLAGS.items():
        options = load_flags(engine)["options"]
        missing = [f for f in flags if f not in options]
        # --quantization is listed for SGLang only to refuse it in extra_args; it exists there too.
        assert not missing, "%s: %s" % (engine, missing)


def test_model_argument_and_extra_args():
    argv = dm.engine_argv({"quant": "int4", "engine": "vllm", "extra_args": ["--max-num-seqs", "64"]})
    assert argv[0] == "moonshotai/Kimi-K2.6" and argv[-2:] == ["--max-num-seqs", "64"]
    full = dm.command_for({"quant": "int4", "engine": "vllm"})
    assert full[:3] == ["vllm", "serve", "moonshotai/Kimi-K2.6"]
    sgl = dm.engine_argv({"quant": "int4", "engine": "sglang"})
    assert sgl[sgl.index("--model-path") + 1] == "moonshotai/Kimi-K2.6"
    assert dm.command_for({"quant": "int4", "engine": "sglang"}) == sgl


@pytest.mark.parametrize("dep, message", [
    ({"quant": "nvfp4", "engine": "sglang"}, "NaN"),
    ({"quant": "int4"}, r"engine=None is not allowed\. Allowed values: sglang, vllm"),
    ({"quant": "int4", "engine": "sglang", "kv_cache_dtype": "fp8"}, "kimi_kv_cache_dtype='fp8'"),
    ({"quant": "int4", "engine": "vllm", "moe_backend": "marlin"}, "NVFP4 choice"),
    ({"quant": "int4", "engine": "sglang", "mem_fraction": 0.95}, r"\(0, 0\.85\]"),
    ("int4-sglang", "must be a deployment dict"),
])
def test_engine_argv_refusals(dep, message):
    with pytest.raises(dm.DeploymentError, match=message):
        dm.engine_argv(dep)


def test_resolved_command_matches_engine_argv():
    dep = resolve(RTX8, quant="nvfp4", engine="vllm")
    assert dep["argv"] == dm.engine_argv(dep)
    assert dep["command"][:2] == ["vllm", "serve"] and dep["command"][2:] == dep["argv"]
