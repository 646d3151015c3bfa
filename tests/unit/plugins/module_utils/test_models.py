"""The models as data (_model/models.py, kimi_model): the table's shape, Kimi-K2.6 unchanged, the refusals of engines
and releases that do not serve a model, and the plan's answer for every model on every reference host."""
import json
import shutil
import subprocess
import os

import pytest

from ansible_collections.kimi.deploy.plugins.module_utils._engines import registry as eng
from ansible_collections.kimi.deploy.plugins.module_utils._common import GB
from ansible_collections.kimi.deploy.plugins.module_utils._model import checkpoints
from ansible_collections.kimi.deploy.plugins.module_utils._model import deployment as dm
from ansible_collections.kimi.deploy.plugins.module_utils._model.gpu import summarize_gpus
from ansible_collections.kimi.deploy.plugins.module_utils._model.models import MODELS, MODEL_NAMES, QUANTS, model
from ansible_collections.kimi.deploy.plugins.module_utils._common import release_key as version_key

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
SHA = "0123456789abcdef0123456789abcdef01234567"
REVISIONS = dict((quant, SHA) for quant in QUANTS)
FIELDS = ("title", "architecture", "source", "checkpoints", "replicated_weight_bytes", "non_expert_weight_bytes",
          "geometry", "max_context", "vision", "thinking", "reasoning_efforts", "chat_format", "parsers", "engines",
          "image_floor", "drafts", "default_drafts", "sampling", "layouts")
CHECKPOINT_FIELDS = ("repo_id", "format", "quant_method", "weights_bytes", "revision_variable", "source")


def profile(name):
    with open(os.path.join(ROOT, "tests", "fixtures", "gpus", name + ".json")) as handle:
        return json.load(handle)["kimi_gpus"]


def resolve(gpus=None, **inputs):
    inputs.setdefault("revisions", REVISIONS)
    return dm.resolve(inputs, gpus)


# --- the table -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", MODEL_NAMES)
def test_every_model_has_every_field_and_its_sources(name):
    entry = model(name)
    assert [field for field in FIELDS if field not in entry] == []
    assert entry["source"] and entry["thinking"] in ("optional", "always") and entry["chat_format"] in ("k2", "k3")
    for quant, checkpoint in entry["checkpoints"].items():
        assert [f for f in CHECKPOINT_FIELDS if f not in checkpoint] == [], quant
        assert checkpoint["source"] and checkpoint["revision_variable"] == "kimi_%s_revision" % quant
    geometry = entry["geometry"]
    assert set(geometry["mla"]) >= {"layers", "kv_lora_rank", "qk_rope_head_dim"}
    linear = geometry["linear"]
    assert linear is None or set(linear) == {"kind", "layers", "num_heads", "head_dim", "num_k_heads", "head_k_dim",
                                             "conv_kernel"}
    assert geometry["mla"]["layers"] + (linear["layers"] if linear else 0) == geometry["layers"]
    for repo_id, draft in entry["drafts"].items():
        assert draft["source"] and draft["method"], repo_id
    for engine, methods in entry["default_drafts"].items():
        assert set(methods.values()) <= set(entry["drafts"]), engine
    for layout in entry["layouts"]:
        assert layout["source"] and layout["gpus"]
    for build, served in entry["engines"].items():
        assert build in eng.ENGINES and served["why"], build


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_the_parsers_are_in_every_pinned_release_that_serves_the_model(name):
    entry = model(name)
    for build, served in entry["engines"].items():
        if served["min"] is None:
            continue
        for version in eng.ENGINES[build]["versions"]:
            if version_key(version) < version_key(served["min"]):
                continue
            for kind in ("tool", "reasoning"):
                if (build, kind) == ("trtllm", "reasoning"):  # 1.3.0rc17 has no Kimi reasoning parser (a warning)
                    continue
                names = entry["parsers"][build][kind]
                assert eng.parser_name(build, version, kind, names) is not None, (build, version, kind)


def test_a_base_entry_is_inherited():
    k3, k31 = model("kimi-k3"), model("kimi-k3.1-pro")
    assert k31["geometry"] is k3["geometry"] and k31["parsers"] is k3["parsers"] and k31["title"] == "Kimi-K3.1-Pro"
    assert model("kimi-k2.7-code")["geometry"] is model("kimi-k2.6")["geometry"]
    assert "base" not in k31 and k31["name"] == "kimi-k3.1-pro"


def test_k26_is_unchanged():
    assert checkpoints.CHECKPOINTS["int4"]["repo_id"] == "moonshotai/Kimi-K2.6"
    assert dict((q, (c["repo_id"], c["weights_bytes"], c["quant_method"])) for q, c in
                checkpoints.CHECKPOINTS.items()) == {
        "int4": ("moonshotai/Kimi-K2.6", 595 * GB, "compressed-tensors"),
        "nvfp4": ("nvidia/Kimi-K2.6-NVFP4", 595 * GB, "modelopt"),
        "w4a8": ("Eco-Tech/Kimi-K2.6-W4A8", 595 * GB, "ascend")}
    assert (checkpoints.QUANTS, checkpoints.MAX_CONTEXT) == (("int4", "nvfp4", "w4a8"), 262144)
    assert checkpoints.KV_BYTES_PER_TOKEN == {"bf16": 70272, "fp8": 35136}
    assert (checkpoints.REPLICATED_WEIGHT_BYTES, checkpoints.NON_EXPERT_WEIGHT_BYTES) == (4.7 * GB, 24 * GB)
    assert checkpoints.non_expert_bytes("w4a8") == 15 * GB and checkpoints.non_expert_bytes("int4") == 24 * GB
    assert sorted(checkpoints.DRAFTS) == ["AQ-MedAI/Kimi-K26-eagle3", "lightseekorg/kimi-k2.6-eagle3",
                                          "z-lab/Kimi-K2.6-DFlash"]
    dep = resolve(profile("rtx-pro-6000-x8"))
    assert dep["model"]["name"] == "kimi-k2.6" and dep["served_model_name"] == "kimi-k2.6"
    assert (dep["tool_parser"], dep["reasoning_parser"]) == ("kimi_k2", "kimi_k2")


def test_the_deployment_carries_the_model():
    dep = resolve(profile("b300-x8"), model="kimi-k3")
    assert dep["model"] == {"name": "kimi-k3", "title": "Kimi-K3", "chat_format": "k3",
                            "parsers": {"tool": ("kimi_k3",), "reasoning": ("kimi_k3",)}, "thinking": "always",
                            "reasoning_efforts": ("low", "high", "max"), "max_context": 1048576, "vision": True,
                            "driver_floor": 580}
    assert (dep["quant"], dep["engine"], dep["engine_version"]) == ("mxfp4", "vllm", "0.33.0")
    assert dep["checkpoint"]["repo_id"] == "moonshotai/Kimi-K3" and dep["served_model_name"] == "kimi-k3"
    assert ["--tool-call-parser", "kimi_k3"] == dep["argv"][dep["argv"].index("--tool-call-parser"):][:2]
    assert any("r580 or newer" in reason for reason in dep["reasons"])
    code = resolve(profile("h200-x8"), model="kimi-k2.7-code", quant="int4", engine="sglang")
    assert code["checkpoint"]["repo_id"] == "moonshotai/Kimi-K2.7-Code" and code["model"]["thinking"] == "always"


# --- refusals: one line naming the variable and the allowed values -----------------------------------------------
@pytest.mark.parametrize("inputs, gpus, message", [
    ({"engine": "trtllm"}, "b300-x8", r"^engine='trtllm' is not allowed: Kimi-K3 on TensorRT-LLM: no TensorRT-LLM "
                                      r"release serves Kimi-K3 yet.*Allowed values: sglang \(SGLang >= 0.5.23"),
    ({"engine": "vllm"}, "ascend-a3-x16", r"^engine='vllm' is not allowed: Kimi-K3 on vLLM-Ascend: .*PR #12950"),
    ({"engine": "sglang"}, "ascend-a3-x16", r"^engine='sglang' is not allowed: Kimi-K3 on SGLang-Ascend"),
    ({"engine": "vllm", "engine_version": "0.22.1"}, "b300-x8",
     r"^kimi_engine_version='0.22.1' is not allowed: Kimi-K3 needs vLLM 0.27.0 or newer .*Allowed values: 0.33.0$"),
    ({"engine": "sglang", "engine_version": "0.5.12.post1"}, "b300-x8",
     r"^kimi_engine_version='0.5.12.post1' is not allowed: Kimi-K3 needs SGLang 0.5.23 or newer"),
    ({"quant": "nvfp4"}, "b300-x8", r"^quant='nvfp4' is not allowed: Kimi-K3's nvfp4 checkpoint: its size is not "
                                    r"published .*Allowed values: mxfp4$"),
    ({"quant": "int4"}, "b300-x8", r"^quant='int4' is not allowed\. Allowed values: mxfp4, nvfp4, auto$"),
])
def test_what_does_not_serve_kimi_k3_is_refused_naming_what_would(inputs, gpus, message):
    with pytest.raises(dm.DeploymentError, match=message):
        resolve(profile(gpus), model="kimi-k3", **inputs)


def test_kimi_k3_1_pro_is_refused_until_a_checkpoint_is_published():
    with pytest.raises(dm.DeploymentError, match=r"^kimi_model='kimi-k3.1-pro' is not allowed: Kimi-K3.1-Pro has no "
                                                 r"published checkpoint .*Allowed values: kimi-k2.6, kimi-k2.7-code, "
                                                 r"kimi-k3$"):
        resolve(profile("b300-x8"), model="kimi-k3.1-pro")
    assert MODELS["kimi-k3.1-pro"]["checkpoints"]["mxfp4"]["repo_id"] is None  # unverified: not guessed


def test_an_unknown_model_is_refused():
    with pytest.raises(dm.DeploymentError, match=r"^kimi_model='kimi-k4' is not allowed.*kimi-k2.6, kimi-k2.7-code"):
        resolve(profile("b300-x8"), model="kimi-k4")


def test_an_unset_release_is_the_oldest_that_serves_the_model():
    dep = resolve(profile("b300-x8"), model="kimi-k3", engine="sglang")
    assert dep["engine_version"] == "0.5.23"
    assert any("the oldest pinned release that serves Kimi-K3" in reason for reason in dep["reasons"])


# --- the plan on every reference host --------------------------------------------------------------------------
def test_the_b300_profile():
    summary = summarize_gpus(profile("b300-x8"))
    # nvidia-smi: "NVIDIA B300 SXM6 AC, 275040 MiB, 10.3" (288 GB HBM3e per GPU, Blackwell Ultra sm_103)
    assert (summary["count"], summary["arch"], summary["sm"], summary["vram_min_mib"]) == (
        8, "blackwell-dc", "sm_103", 275040)


# (model, profile, hosts) -> fits; for a single host that does not fit, the replica that would (hosts, layout).
PLANS = {
    ("kimi-k2.6", "h200-x8", 1): True, ("kimi-k2.6", "b200-x8", 1): True, ("kimi-k2.6", "b200-x8", 2): True,
    ("kimi-k2.6", "b300-x8", 1): True, ("kimi-k2.6", "rtx-pro-6000-x8", 1): True,
    ("kimi-k2.7-code", "h200-x8", 1): True, ("kimi-k2.7-code", "b200-x8", 1): True,
    ("kimi-k2.7-code", "b200-x8", 2): True, ("kimi-k2.7-code", "b300-x8", 1): True,
    ("kimi-k2.7-code", "rtx-pro-6000-x8", 1): True,
    ("kimi-k3", "h200-x8", 1): "2-host replica of such hosts (set kimi_replica to one name on each): Fits: tensor "
                               "parallel 8 x pipeline parallel 2",
    ("kimi-k3", "b200-x8", 1): "2-host replica of such hosts (set kimi_replica to one name on each): Fits: tensor "
                               "parallel 8 x pipeline parallel 2",
    ("kimi-k3", "b200-x8", 2): True, ("kimi-k3", "b300-x8", 1): True,
    ("kimi-k3", "rtx-pro-6000-x8", 1): "4-host replica of such hosts (set kimi_replica to one name on each): Fits: "
                                       "tensor parallel 32",
}


@pytest.mark.parametrize("name, gpus, hosts", sorted(PLANS), ids=["%s-%s-%d" % key for key in sorted(PLANS)])
def test_the_plan_answers_for_every_model_and_host(name, gpus, hosts):
    inputs = {"model": name}
    if hosts > 1:
        inputs.update(nodes=hosts, head_address="10.0.0.1")
    dep = resolve(profile(gpus), **inputs)
    expected, hardware = PLANS[(name, gpus, hosts)], dep["hardware"]
    assert hardware["fits"] is (expected is True), hardware["fit_reason"]
    # every command planned passes the release's own flag list (resolve checks each flag; the parsers' values here)
    values = eng.options(dep["engine_build"], dep["engine_version"])["values"]
    for kind in ("tool", "reasoning"):
        chosen = dep["%s_parser" % kind]
        assert chosen is None or any(chosen in (v or ()) for v in values.values()), chosen
    if expected is not True:
        assert hardware["fit_reason"].startswith("Does not fit:") and expected in hardware["replica_advice"]
        assert "Published layouts of Kimi-K3: 8 x B300, tp 8 x pp 1 (SGLang cookbook" in hardware["replica_advice"]
    if name == "kimi-k3" and hosts == 2:
        assert (dep["tp"], dep["pp"], dep["nodes"], dep["engine"]) == (8, 2, 2, "vllm")  # KimiLinear SupportsPP
        assert hardware["sequences_estimate"] == 32 and hardware["state_bytes_per_seq"] == 28085760


# --- drafts and the make variables -----------------------------------------------------------------------------
def test_each_model_has_its_own_drafts():
    code = resolve(profile("b300-x8"), model="kimi-k2.7-code", quant="int4", engine="vllm", speculative="eagle3",
                   speculative_draft_revision=SHA)
    draft = code["speculative"]["draft"]
    assert draft["repo_id"] == "lightseekorg/kimi-k2.7-coder-eagle3.1-mla" and draft["kv"]["kv_heads"] is None
    with pytest.raises(dm.DeploymentError, match=r"^kimi_speculative_draft=None is not allowed: vLLM has no known "
                                                 r"eagle3 draft for Kimi-K3: name one \(its known drafts are of "
                                                 r"methods kimi_speculative does not run: .*dspark"):
        resolve(profile("b300-x8"), model="kimi-k3", speculative="eagle3", speculative_draft_revision=SHA)


@pytest.mark.skipif(not shutil.which("make"), reason="no make")
def test_make_plan_and_demo_pass_model():
    def dry(*args):
        return subprocess.run(["make", "-n"] + list(args), cwd=ROOT, capture_output=True, text=True,
                              check=False).stdout
    assert "-e 'kimi_model=kimi-k3'" in dry("plan", "MODEL=kimi-k3", "GPUS=b300-x8")
    assert "-e 'kimi_model=kimi-k2.6'" in dry("plan")
    assert "MODEL='kimi-k3'" in dry("demo", "MODEL=kimi-k3")
    with open(os.path.join(ROOT, "demo", "demo.sh")) as handle:
        assert handle.read().count("${MODEL:+-e kimi_model=$MODEL}") == 2  # up and plan


# --- the driver floor (image_floor.driver) -------------------------------------------------------------------------
def test_a_host_driver_below_the_model_s_floor_is_refused_before_any_host_changes():
    """Kimi-K3's images are CUDA 13 only: a host whose GPU facts report an r570 driver is refused in one line naming
    kimi_model, the floor and its reason, the fix, and the models that driver runs."""
    with pytest.raises(dm.DeploymentError) as refused:
        resolve(profile("b300-x8"), model="kimi-k3", driver_version="570.172.08")
    text = str(refused.value)
    assert text.startswith("kimi_model='kimi-k3' is not allowed: Kimi-K3's engine images need the host driver r580 "
                           "or newer (vLLM >= 0.27's images are CUDA 13"), text
    assert "this host's driver is 570.172.08" in text and "nvidia_host_driver_branch 580 or newer" in text
    assert text.endswith("Allowed values: kimi-k2.6, kimi-k2.7-code"), text
    assert "\n" not in text
    # the K2 family has no floor: the same driver serves it
    assert resolve(profile("b300-x8"), model="kimi-k2.6", driver_version="570.172.08")["identity"]


@pytest.mark.parametrize("driver, upgrade", [("580.95.05", False), ("590.44.01", False), (None, False),
                                             ("570.172.08", True)])
def test_a_driver_at_the_floor_unknown_or_replaced_by_nvidia_host_passes(driver, upgrade):
    """At or above the floor it serves; no driver yet (nvidia_host installs one) or one nvidia_host replaces
    (nvidia_host_replace_driver) is judged when site.yml resolves again after the host stage."""
    dep = resolve(profile("b300-x8"), model="kimi-k3", driver_version=driver, driver_upgrade=upgrade)
    assert dep["model"]["driver_floor"] == 580
    assert any("judged again after it" in w for w in dep["warnings"]) == upgrade


def test_the_site_reads_the_driver_from_the_gpu_facts_and_judges_again_after_the_host_stage():
    from ansible_collections.kimi.deploy.plugins.module_utils._model import site as _site
    facts = {"nvidia_gpu_summary": {"driver_version": "570.172.08"}}

    def inputs(**hostvars):
        hostvars = dict({"kimi_model": "kimi-k3", "ansible_facts": facts, "kimi_mxfp4_revision": SHA}, **hostvars)

        def get(_host, name):
            return hostvars.get(name, _site.MISSING)
        return _site.inputs(get, "gpu1", ["gpu1"], [])
    assert (inputs()["driver_version"], inputs()["driver_upgrade"], inputs()["driver_branch"]) == (
        "570.172.08", False, None)
    assert inputs(nvidia_host_driver_branch="590")["driver_branch"] == "590"
    assert inputs(nvidia_host_replace_driver=True)["driver_upgrade"] is True
    # after the host stage the driver is what nvidia_host left: judged, replaced or not
    assert inputs(nvidia_host_replace_driver="true", kimi_site_after_host_stage=True)["driver_upgrade"] is False
    with pytest.raises(dm.DeploymentError, match=r"^kimi_model='kimi-k3' is not allowed: .* r580 or newer"):
        dm.resolve(inputs(), profile("b300-x8"))
    assert _site.driver_version({}) is None and _site.driver_version(None) is None


def test_nvidia_host_installs_a_branch_at_or_above_every_model_s_floor():
    """nvidia_host's default branch meets every model's floor (a host without a driver gets one the images run on);
    an inventory's nvidia_host_driver_branch below the served model's floor is refused before any host changes."""
    import yaml
    with open(os.path.join(ROOT, "roles", "nvidia_host", "defaults", "main.yml")) as handle:
        defaults = yaml.safe_load(handle)
    floors = [(model(name)["image_floor"] or {}).get("driver", 0) for name in MODEL_NAMES]
    assert int(defaults["nvidia_host_driver_branch"]) >= max(floors)
    with pytest.raises(dm.DeploymentError, match=r"^nvidia_host_driver_branch='570' is not allowed: Kimi-K3's engine "
                                                 r"images need the host driver r580 or newer .*Allowed values: 580 or "
                                                 r"newer \(its default, 580\)$"):
        resolve(profile("b300-x8"), model="kimi-k3", driver_branch="570")
    assert resolve(profile("b300-x8"), model="kimi-k3", driver_branch="590")["identity"] == "mxfp4-vllm"
    assert resolve(profile("b300-x8"), model="kimi-k2.6", driver_branch="570")["identity"]


def test_a_model_switch_of_the_same_quant_engine_restarts_the_engine():
    """Kimi-K2.7-Code int4-vllm after Kimi-K2.6 int4-vllm keeps the identity (its format is <quant>-<engine>), but
    the engine's arguments (the checkpoint) differ, so kimi_serve restarts it: a switch, gated as one."""
    k26 = resolve(profile("h200-x8"), model="kimi-k2.6", quant="int4", engine="vllm", served_model_name="kimi")
    k27 = resolve(profile("h200-x8"), model="kimi-k2.7-code", quant="int4", engine="vllm", served_model_name="kimi")
    assert k26["identity"] == k27["identity"] == "int4-vllm"
    assert k26["argv"] != k27["argv"] and k26["model"]["name"] != k27["model"]["name"]
