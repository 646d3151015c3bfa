"""The air-gap bundle's rules (_bundle.py): releases, paths, what a host needs and what a bundle lacks, the inputs
carried without their secrets."""
import pytest

from ansible_collections.kimi.deploy.plugins.module_utils._bundle import layout as bundle

REV = "a" * 40
DRAFT_REV = "b" * 40


def deployment(image="lmsysorg/sglang:v0.5.12.post1-cu130", draft=False, pd=None):
    spec = {"draft": {"repo_id": "AQ-MedAI/Kimi-K26-eagle3", "revision": DRAFT_REV}} if draft else None
    return {"image": image, "checkpoint": {"repo_id": "moonshotai/Kimi-K2.6", "revision": REV},
            "speculative": spec, "pd": pd}


def components(**over):
    base = {"images": {"lmsysorg/sglang:v0.5.12.post1-cu130": {"file": "images/x.tar.zst", "id": "sha256:1"},
                       "ubuntu:24.04": {"file": "images/u.tar.zst", "id": "sha256:2"}},
            "checkpoints": [{"repo_id": "moonshotai/Kimi-K2.6", "revision": REV}],
            "apt": {"noble": {"architecture": "amd64", "packages": ["caddy", "docker.io", "zstd"]}}}
    base.update(over)
    return base


def test_a_known_release_gets_its_archive_updates_and_security_suites():
    spec = bundle.release_spec("trixie")
    assert spec["distribution"] == "Debian" and spec["version"] == "13"
    suites = [s for source in spec["sources"] for s in source["suites"]]
    assert suites == ["trixie", "trixie-updates", "trixie-security"]
    assert all(s["signed_by"] == "/usr/share/keyrings/debian-archive-keyring.gpg" for s in spec["sources"])
    noble = bundle.release_spec("noble")
    assert noble["version"] == "24.04" and "universe" in noble["sources"][0]["components"]


def test_an_unknown_release_names_the_variable_and_the_known_ones():
    with pytest.raises(bundle.BundleError, match=r"kimi_bundle_releases: 'buster' .*bookworm, jammy, noble, trixie"):
        bundle.release_spec("buster")
    with pytest.raises(bundle.BundleError, match="needs version, sources"):
        bundle.release_spec({"name": "x", "distribution": "Debian"})


def test_paths_inside_a_bundle():
    assert bundle.path_of("image", "nvcr.io/nvidia/k8s/dcgm-exporter:4.5.3") == "images/nvcr.io_nvidia_k8s_dcgm-exporter_4.5.3.tar.zst"
    assert bundle.path_of("checkpoint", "moonshotai/Kimi-K2.6") == "hf/hub/models--moonshotai--Kimi-K2.6"
    assert bundle.path_of("apt", "noble", "aarch64") == "apt/noble-arm64"
    assert bundle.path_of("archive", "ubuntu:24.04", bundle="/b/") == {"name": "ubuntu:24.04",
                                                                       "src": "/b/images/ubuntu_24.04.tar.zst"}
    with pytest.raises(bundle.BundleError, match="architecture 'ppc64le'"):
        bundle.path_of("apt", "noble", "ppc64le")


def test_a_host_needs_its_image_checkpoint_draft_and_its_roles_packages():
    need = bundle.needs(deployment(draft=True), ["ubuntu:24.04", "ubuntu:24.04"],
                        ["caddy", "nvidia-container-toolkit=1.18.0-1", "caddy"], "noble", "x86_64")
    assert need["images"] == ["lmsysorg/sglang:v0.5.12.post1-cu130", "ubuntu:24.04"]
    assert need["checkpoints"] == [{"repo_id": "moonshotai/Kimi-K2.6", "revision": REV},
                                   {"repo_id": "AQ-MedAI/Kimi-K26-eagle3", "revision": DRAFT_REV}]
    assert need["apt"] == {"release": "noble", "architecture": "amd64", "packages": ["caddy", "nvidia-container-toolkit"]}
    assert need["disaggregated"] is False


def test_a_complete_bundle_lacks_nothing():
    need = bundle.needs(deployment(), ["ubuntu:24.04"], ["caddy", "zstd"], "noble", "x86_64")
    assert bundle.lacks(components(), need) == []


def test_what_a_bundle_lacks_is_named():
    need = bundle.needs(deployment(image="vllm/vllm-openai:v0.22.1", draft=True), [], ["caddy", "prometheus"],
                        "noble", "x86_64")
    lacks = bundle.lacks(components(), need)
    assert lacks[0].startswith("the image vllm/vllm-openai:v0.22.1 (it has lmsysorg/sglang")
    assert lacks[1] == "the checkpoint AQ-MedAI/Kimi-K26-eagle3@bbbbbbbbbbbb (not in it)"
    assert lacks[2] == "the packages prometheus in its noble/amd64 repository"
    other = bundle.needs(deployment(), [], ["caddy"], "jammy", "x86_64")
    assert bundle.lacks(components(), other) == [
        "an apt repository for jammy/amd64 (it has noble/amd64; add the release to kimi_bundle_releases)"]
    moved = components(checkpoints=[{"repo_id": "moonshotai/Kimi-K2.6", "revision": "c" * 40}])
    assert "it has moonshotai/Kimi-K2.6@cccccccccccc" in bundle.lacks(moved, need)[1]


def test_a_disaggregated_deployment_is_not_carried_yet():
    need = bundle.needs(deployment(pd={"role": "prefill"}), [], [], "noble", "x86_64")
    assert any("PD router" in line for line in bundle.lacks(components(), need))


def test_the_inventory_copy_keeps_inputs_and_drops_secrets():
    specs = [{"argument_specs": {"main": {"options": {"kimi_weights_hf_token": {"no_log": True},
                                                      "caddy_proxy_tls_key_file": {"type": "str"}}}}}]
    host_vars = {"quant": "int4", "engine": "sglang", "kimi_int4_revision": REV, "kimi_weights_hf_token": "hf_x",
                 "caddy_proxy_clients": [{"name": "a", "keys": ["k"]}], "caddy_proxy_metrics_keys": ["m"],
                 "kimi_weights_peer_key": "p", "vault_hf": "v", "ansible_host": "10.0.0.1", "kimi_test_x": 1,
                 "nvidia_host_driver_branch": "580", "caddy_proxy_tls_key_file": "/etc/k.pem"}
    kept = bundle.inputs(host_vars, bundle.secret_names(specs))
    # A name that says key is dropped even where it holds a path: the offline side gives it again.
    assert kept == {"quant": "int4", "engine": "sglang", "kimi_int4_revision": REV, "nvidia_host_driver_branch": "580"}
