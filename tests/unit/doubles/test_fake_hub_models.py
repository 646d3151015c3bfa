"""The fake hub serves every model's checkpoints in that model's shape: the repos the models data names (models.py) are
the molecule scenarios' hub repos and the demo's pins (.config/molecule/config.yml), each with its model's architecture,
quantization and geometry, so that `make demo MODEL=kimi-k3` downloads and serves a K3-shaped checkpoint. No Docker."""
import json
import os
import re
import sys

import yaml

from ansible_collections.kimi.deploy.plugins.module_utils._model.models import MODEL_NAMES, model

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "doubles", "hub"))
import fake_hub  # noqa: E402

# A model's chat format -> the config.json model_type of its checkpoints (the engine double reads it).
MODEL_TYPES = {"k2": "kimi_k25", "k3": "kimi_k3"}


def scenario_vars():
    with open(os.path.join(ROOT, ".config", "molecule", "config.yml")) as handle:
        config = yaml.safe_load(handle)
    return config["provisioner"]["inventory"]["group_vars"]["all"]


def hub_specs():
    return dict((spec.repo_id, spec) for spec in map(fake_hub.RepoSpec.parse, scenario_vars()["kimi_test_hub_repos"]))


def config_of(spec):
    files = dict((f.path, f) for f in fake_hub.build_files(spec, memoryview(bytes(fake_hub.BLOCK))))
    return json.loads(files["config.json"].read())


def test_the_demo_pins_each_models_published_checkpoints_and_the_hub_serves_them():
    pins, specs = scenario_vars()["kimi_test_demo_checkpoints"], hub_specs()
    assert sorted(pins) == sorted(MODEL_NAMES)
    for name in MODEL_NAMES:
        entry = model(name)
        published = dict((quant, c["repo_id"]) for quant, c in entry["checkpoints"].items() if c["repo_id"])
        assert pins[name] == published, name
        for quant, repo in published.items():
            spec = specs[repo]
            assert spec.kind == "model" and spec.quant == quant, (name, repo)
            assert spec.model_type == MODEL_TYPES[entry["chat_format"]], (name, repo)
            config = config_of(spec)
            assert config["architectures"] == [entry["architecture"]], (name, repo)
            if quant != "w4a8":  # msModelSlim's W4A8 has a quant_model_description.json instead
                assert config["quantization_config"]["quant_method"] == entry["checkpoints"][quant]["quant_method"]


def test_the_k3_checkpoint_has_k3s_geometry():
    """K3's config.json as the engines read it (text_config kimi_linear), in the numbers models.py's memory model
    uses: MLA layers with a KV cache, KDA layers with a state per sequence (1-based ids), heads, context."""
    geometry = model("kimi-k3")["geometry"]
    config = config_of(fake_hub.RepoSpec.parse("moonshotai/Kimi-K3:shards=1,shard_size=4096"))
    text, linear = config["text_config"], config["text_config"]["linear_attn_config"]
    assert (config["model_type"], text["model_type"]) == ("kimi_k3", "kimi_linear")
    assert config["quantization_config"] == {"quant_method": "compressed-tensors", "format": "mxfp4-pack-quantized"}
    assert text["num_hidden_layers"] == geometry["layers"] == len(linear["full_attn_layers"]) + len(linear["kda_layers"])
    assert len(linear["full_attn_layers"]) == geometry["mla"]["layers"]
    assert len(linear["kda_layers"]) == geometry["linear"]["layers"]
    assert sorted(linear["full_attn_layers"] + linear["kda_layers"]) == list(range(1, geometry["layers"] + 1))
    assert linear["full_attn_layers"][-2:] == [92, 93]  # the last two layers are both MLA
    assert (linear["num_heads"], linear["head_dim"], linear["short_conv_kernel_size"]) == (
        geometry["linear"]["num_heads"], geometry["linear"]["head_dim"], geometry["linear"]["conv_kernel"])
    assert (text["kv_lora_rank"], text["qk_rope_head_dim"], text["num_attention_heads"]) == (
        geometry["mla"]["kv_lora_rank"], geometry["mla"]["qk_rope_head_dim"], geometry["mla"]["heads"])
    assert (text["hidden_size"], text["vocab_size"]) == (geometry["hidden"], geometry["vocab"])
    assert text["max_position_embeddings"] == model("kimi-k3")["max_context"]
    assert text["num_nextn_predict_layers"] == 0  # no MTP layer in the released checkpoint


def test_k3_repos_have_no_k25_remote_code_and_k2_repos_keep_their_commits():
    k3 = [f.path for f in fake_hub.build_files(fake_hub.RepoSpec.parse("RedHatAI/Kimi-K3-NVFP4:shards=1"),
                                               memoryview(bytes(fake_hub.BLOCK)))]
    assert "chat_template.jinja" not in k3 and not [p for p in k3 if "k25" in p] and "tokenization_kimi.py" in k3
    assert "hf_quant_config.json" not in k3  # RedHat's is compressed-tensors, not ModelOpt
    k2 = fake_hub.RepoSpec.parse("moonshotai/Kimi-K2.6")
    assert "model_type" not in k2.canonical() and k2.model_type == "kimi_k25"  # K2 commits are unchanged
    assert fake_hub.RepoSpec.parse("moonshotai/Kimi-K3").canonical()["model_type"] == "kimi_k3"


def test_the_demo_runs_each_model_on_doubles_of_releases_that_serve_it():
    """molecule/demo gives the models no pinned default release serves the doubles of releases that do: their tags
    name a release the model's entry allows (the plan reads the version from the tag), one the engine data pins."""
    from ansible_collections.kimi.deploy.plugins.module_utils._engines.registry import ENGINES, image_version

    def key(version):
        return tuple(int(part) for part in re.findall(r"\d+", version))
    config = scenario_vars()
    newer = sorted(name for name in MODEL_NAMES if any(
        (model(name)["engines"].get(build) or {}).get("min") not in (None, "0")
        and key(model(name)["engines"][build]["min"]) > key(ENGINES[build]["default_version"])
        for build in ("vllm", "sglang")))
    assert sorted(config["kimi_test_k3_models"]) == newer
    for build, image in config["kimi_test_k3_double_images"].items():
        version = image_version(image)
        assert version in ENGINES[build]["versions"] and image in config["kimi_test_engine_images"]
        for name in newer:
            assert key(version) >= key(model(name)["engines"][build]["min"]), (name, image)
