"""The kernel cache key (issue 39): the same inputs give the same key, a change of any part gives a new one; the
engine data names a cache for every build, and the deployment carries it."""
import os
import re

import pytest
import yaml

from ansible_collections.kimi.deploy.plugins.module_utils._model import deployment as dm
from ansible_collections.kimi.deploy.plugins.module_utils._model import kernel_cache as kc
from ansible_collections.kimi.deploy.plugins.module_utils._engines import registry as eng
from ansible_collections.kimi.deploy.plugins.filter.kernel_cache_key import kernel_cache_key

SHA = "0123456789abcdef0123456789abcdef01234567"
H200x8 = [{"index": i, "name": "NVIDIA H200", "compute_cap": "9.0", "memory_mib": 143771} for i in range(8)]
HOST = {"image_digest": "sha256:" + "a" * 64, "arch": "sm_90", "driver_version": "580.95.05"}


def resolve(**inputs):
    inputs.setdefault("revisions", {"int4": SHA, "nvfp4": SHA, "w4a8": SHA})
    return dm.resolve(inputs, H200x8)


def base_parts():
    parts = kc.deployment_parts(resolve(quant="int4", engine="vllm"))
    parts.update(HOST)
    return parts


# One changed value per part: every name in KEY_PARTS is covered (the test below checks that).
CHANGES = {
    "engine_build": "sglang", "engine_version": "0.33.0", "image": "vllm/vllm-openai:v0.33.0", "quant": "nvfp4",
    "kv_cache_dtype": "auto", "moe_backend": "marlin", "tp": 4, "pp": 2, "dp": 2, "attention_dp": True, "nodes": 2,
    "context_length": 4096, "speculative": {"method": "ngram"}, "extra_args": ["--enforce-eager"],
    "engine_config": {"x": 1}, "image_digest": "sha256:" + "b" * 64, "arch": "sm_100", "driver_version": "590.1",
}


def test_every_part_has_a_change():
    assert sorted(CHANGES) == sorted(kc.KEY_PARTS)


def test_same_inputs_same_key():
    assert kc.cache_key(base_parts()) == kc.cache_key(base_parts())
    assert re.match(r"^vllm-0\.22\.1-[0-9a-f]{24}$", kc.cache_key(base_parts()))


@pytest.mark.parametrize("name", sorted(CHANGES))
def test_a_change_of_any_part_gives_a_new_key(name):
    parts = base_parts()
    assert parts[name] != CHANGES[name]
    changed = dict(parts, **{name: CHANGES[name]})
    assert kc.cache_key(changed) != kc.cache_key(parts)


def test_unknown_host_part_is_a_part_too():
    """A driver the host could not read is its own key, never the key of a known driver."""
    assert kc.cache_key(dict(base_parts(), driver_version=None)) != kc.cache_key(base_parts())


def test_missing_part_is_refused():
    parts = base_parts()
    del parts["arch"]
    with pytest.raises(kc.KernelCacheError, match="arch"):
        kc.cache_key(parts)


def test_filter_adds_the_host_parts():
    d = resolve(quant="int4", engine="vllm")
    key = kernel_cache_key(d["kernel_cache"]["key_parts"], HOST)
    assert key == kc.cache_key(base_parts())
    assert kernel_cache_key(d["kernel_cache"]["key_parts"], dict(HOST, arch="sm_120")) != key


def test_the_deployment_layout_and_flags_change_the_key():
    keys = set()
    for inputs in ({"quant": "int4", "engine": "vllm"}, {"quant": "int4", "engine": "vllm", "kv_cache_dtype": "auto"},
                   {"quant": "int4", "engine": "sglang"}, {"quant": "int4", "engine": "vllm", "speculative": "ngram"}):
        keys.add(kernel_cache_key(resolve(**inputs)["kernel_cache"]["key_parts"], HOST))
    assert len(keys) == 4


def test_node_rank_is_not_a_part():
    """The ranks of one replica compile the same kernels: a host's rank does not split the cache."""
    assert "node_rank" not in kc.KEY_PARTS


@pytest.mark.parametrize("key", sorted(eng.ENGINES))
def test_every_build_and_version_names_its_caches(key):
    spec = eng.ENGINES[key]
    for version in spec["versions"]:
        cache = kc.spec_of(spec, version)
        assert cache, "%s %s keeps no kernel cache" % (key, version)
        assert cache["primary"] in cache["env"]
        assert cache["sources"]
        for name, sub in cache["env"].items():
            assert re.match(r"^[A-Z][A-Z0-9_]*$", name) and re.match(r"^[a-z_]+$", sub)


def test_deployment_env_points_into_the_mounted_folder():
    d = resolve(quant="int4", engine="sglang")
    cache = d["kernel_cache"]
    assert cache["primary"] == "SGLANG_DG_CACHE_DIR"
    assert cache["env"]["SGLANG_DG_CACHE_DIR"] == kc.CONTAINER_DIR + "/deep_gemm"
    assert all(path.startswith(kc.CONTAINER_DIR + "/") for path in cache["env"].values())
    assert cache["precompile"] == ["python3", "-m", "sglang.compile_deep_gemm"] or \
        tuple(cache["precompile"]) == ("python3", "-m", "sglang.compile_deep_gemm")


def test_the_model_owns_the_host_folder():
    """Issue 53: the host folder of the keys' folders is the model's (kimi_deployment.kernel_cache.host_dir):
    kimi_serve, the weights' peer cache and bundle.yml default to it, and none of them names the folder itself."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
        __file__))))))
    assert kc.HOST_DIR == "/var/cache/kimi-k26/kernels"
    assert resolve(quant="int4", engine="sglang")["kernel_cache"]["host_dir"] == kc.HOST_DIR
    for role, variable in (("kimi_serve", "kimi_serve_kernel_cache_dir"),
                           ("kimi_weights", "kimi_weights_peer_kernel_dir")):
        with open(os.path.join(root, "roles", role, "defaults", "main.yml")) as handle:
            assert yaml.safe_load(handle)[variable] == "{{ kimi_deployment.kernel_cache.host_dir | default('') }}"
    named = []
    for folder in ("roles", "playbooks"):
        for path, _dirs, files in os.walk(os.path.join(root, folder)):
            for name in files:
                with open(os.path.join(path, name), errors="replace") as handle:
                    text = handle.read()
                if kc.HOST_DIR in text or "roles/kimi_serve/defaults" in text or "/../kimi_serve/defaults" in text:
                    named.append(os.path.relpath(os.path.join(path, name), root))
    # kimi_serve's input says its default in words (a comment, a description); nothing reads the folder by path
    assert sorted(named) == [os.path.join("roles", "kimi_serve", "defaults", "main.yml"),
                             os.path.join("roles", "kimi_serve", "meta", "argument_specs.yml")], named


def test_the_plan_names_the_kernel_caches():
    from ansible_collections.kimi.deploy.plugins.module_utils._model.report import plan_lines
    lines = [line for line in plan_lines(resolve(quant="int4", engine="sglang")) if line.startswith("kernel cache:")]
    assert len(lines) == 1 and "SGLANG_DG_CACHE_DIR" in lines[0] and "sglang.compile_deep_gemm" in lines[0]
