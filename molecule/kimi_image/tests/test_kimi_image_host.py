"""Host state after kimi_image on two hosts (pytest-testinfra, run by verify.yml:
pytest --hosts=docker://kimi-image-a,docker://kimi-image-b). kimi-image-a built the image from the stand-in base;
kimi-image-b, which has no base, loaded the archive that a fetched to the controller."""
import json
import re

import testinfra

IMAGE = "kimi-k26-nvfp4-vllm:cu130-mla"
BASE = "kimi-double/vllm-openai:v0.22.1-cu130"
ARCHIVE = "/var/lib/kimi-k26/images/kimi-k26-nvfp4-vllm_cu130-mla.tar.zst"
KERNEL = "/usr/lib/python3/dist-packages/vllm/v1/attention/ops/triton_decode_attention.py"
BUILDER = "kimi-image-a"


def inspect(host, ref):
    out = host.run("docker image inspect %s", ref)
    return json.loads(out.stdout)[0] if out.rc == 0 else None


def is_builder(host):
    return host.backend.get_hostname() == BUILDER


def test_the_image_carries_the_labels_that_decide_a_rebuild(host):
    labels = inspect(host, IMAGE)["Config"]["Labels"]
    assert labels["io.kimi-deploy.base"] == BASE
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", labels["io.kimi-deploy.base-digest"])
    assert re.fullmatch(r"[0-9a-f]{64}", labels["io.kimi-deploy.recipe"])
    assert re.fullmatch(r"\d+\.\d+\.\d+", labels["io.kimi-deploy.collection-version"])
    assert labels["io.kimi-deploy.vllm-version"] == "0.22.1"
    assert "num_stages 2->1" in labels["io.kimi-deploy.patch"]


def test_the_base_digest_label_is_the_base_the_image_was_built_from():
    builder = testinfra.get_host("docker://" + BUILDER)
    labels = inspect(builder, IMAGE)["Config"]["Labels"]
    assert labels["io.kimi-deploy.base-digest"] == inspect(builder, BASE)["Id"]  # a local base: its ID


def test_both_hosts_have_the_same_image_and_no_candidate_tag(host):
    a, b = (testinfra.get_host("docker://kimi-image-" + name) for name in "ab")
    assert inspect(a, IMAGE)["Id"] == inspect(b, IMAGE)["Id"]
    assert inspect(host, IMAGE + "-candidate") is None


def test_the_patch_is_in_effect_when_the_module_is_imported_inside_the_image(host):
    out = host.check_output("docker run --rm --network none --entrypoint python3 %s "
                            "/opt/kimi-image/kimi_vllm_patch.py prove", IMAGE)
    proof = json.loads(out.splitlines()[-1])
    assert proof["patched"] and proof["num_stages"] == 1
    assert proof["file"] == KERNEL and proof["vllm"] == "0.22.1" and proof["cuda"].startswith("13.")


def test_the_kernel_file_changed_in_that_one_line(host):
    lines = host.check_output("docker run --rm --network none --entrypoint grep %s -n 'num_stages = ' %s",
                              IMAGE, KERNEL).splitlines()
    default = [line for line in lines if line.endswith("(was 2)")]
    assert len(default) == 1 and "    num_stages = 1  # kimi.deploy:" in default[0]
    assert not [line for line in lines if re.search(r":\s+num_stages = 2\s*$", line)]
    record = json.loads(host.check_output("docker run --rm --network none --entrypoint cat %s "
                                          "/opt/kimi-image/patch.json", IMAGE))
    assert record["before"] == "num_stages = 2" and record["after"] == "num_stages = 1"
    assert record["file"] == KERNEL and record["function"] == "_decode_grouped_att_m_fwd"


def test_the_builder_kept_the_build_log_and_the_progress_file(host):
    if not is_builder(host):
        assert not host.file("/var/lib/kimi-k26/image/build.log").exists
        return
    log = host.file("/var/lib/kimi-k26/image/build.log").content_string
    assert "Step 1/" in log and "kimi.deploy patched %s" % KERNEL in log
    assert "Successfully tagged %s-candidate" % IMAGE in log
    progress = json.loads(host.file("/var/lib/kimi-k26/image/progress.json").content_string)
    assert progress["state"] == "built"


def test_the_archive_and_its_record_name_the_image(host):
    archive = host.file(ARCHIVE)
    record = json.loads(host.file(ARCHIVE + ".json").content_string)
    assert archive.is_file and archive.size == record["bytes"]
    assert host.check_output("head -c 4 %s | od -An -tx1", ARCHIVE).split() == ["28", "b5", "2f", "fd"]  # zstd
    assert record["id"] == inspect(host, IMAGE)["Id"] and record["image"] == IMAGE
    assert not host.run("ls -a /var/lib/kimi-k26/images | grep -e '\\.tmp$'").stdout  # no half-written archive


def test_the_loading_host_never_had_the_base(host):
    if is_builder(host):
        return
    assert inspect(host, BASE) is None
