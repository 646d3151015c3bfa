"""The NVFP4 image's patch script (roles/kimi_image/files/kimi_vllm_patch.py) against the kernel file's shape.

The fixture is tests/doubles/vllm_base/site/vllm/v1/attention/ops/triton_decode_attention.py: the statements of
vLLM 0.22.1's _decode_grouped_att_m_fwd that the patch reads, in the upstream's order and spelling (its header names
the upstream path and commits). Shapes the upstream file could take next are made from it by small edits; each must
either patch exactly one line or fail with "PATCH FAILED", the file and what was looked for."""
import importlib.util
import json
import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
SCRIPT = os.path.join(ROOT, "roles", "kimi_image", "files", "kimi_vllm_patch.py")
SITE = os.path.join(ROOT, "tests", "doubles", "vllm_base", "site")
KERNEL_REL = os.path.join("vllm", "v1", "attention", "ops", "triton_decode_attention.py")
FIXTURE = os.path.join(SITE, KERNEL_REL)

spec = importlib.util.spec_from_file_location("kimi_vllm_patch", SCRIPT)
patch = importlib.util.module_from_spec(spec)
spec.loader.exec_module(patch)


def fixture_text():
    with open(FIXTURE, encoding="utf-8", newline="") as handle:
        return handle.read()


def test_the_fixture_has_the_upstream_shape():
    found = patch.analyse(fixture_text(), FIXTURE)
    lines = fixture_text().splitlines()
    assert found["value"] == 2
    assert lines[found["line"] - 1] == "    num_stages = 2"
    assert lines[found["line"]] == "    if is_hip_:"  # the ROCm branch that already uses 1 follows it
    assert lines[found["launch_line"] - 1].strip() == "_fwd_grouped_kernel_stage1[grid]("
    assert found["function_line"] < found["line"] < found["launch_line"]


def test_the_patch_changes_exactly_the_default_line():
    before = fixture_text()
    patched, was, now = patch.patch_text(before, FIXTURE)
    old, new = before.splitlines(), patched.splitlines()
    changed = [i for i, (a, b) in enumerate(zip(old, new)) if a != b]
    assert len(old) == len(new) and changed == [was["line"] - 1]
    assert new[changed[0]] == "    num_stages = 1  " + patch.MARKER
    assert now["value"] == 1 and now["launch_line"] == was["launch_line"]
    assert "        num_stages = 1" in new  # the ROCm branch is untouched


def test_an_already_patched_file_fails_saying_so():
    patched = patch.patch_text(fixture_text(), FIXTURE)[0]
    with pytest.raises(patch.PatchError, match="patched already: build FROM the vLLM release image"):
        patch.patch_text(patched, FIXTURE)


def test_line_endings_and_the_rest_of_the_file_are_kept():
    crlf = fixture_text().replace("\n", "\r\n")
    patched = patch.patch_text(crlf, FIXTURE)[0]
    assert patched.count("\r\n") == crlf.count("\r\n") and "\n" not in patched.replace("\r\n", "")


def test_an_upstream_shape_with_other_keywords_still_patches():
    # commit 5c1551b07a65's launch passes IS_MLA=is_mla and no k_scale: the patch keys on what it edits only
    text = fixture_text().replace("        k_scale,\n        kv_group_num", "        kv_group_num").replace(
        "        USE_FP8=use_fp8,\n", "        IS_MLA=is_mla,\n")
    patched, now = patch.patch_text(text, FIXTURE)[::2]
    assert now["value"] == 1 and "IS_MLA=is_mla" in patched


@pytest.mark.parametrize("edit, message", [
    (lambda t: t.replace("def _decode_grouped_att_m_fwd(", "def _decode_grouped_att_fwd("),
     "looked for one top-level function _decode_grouped_att_m_fwd\\(\\), found 0"),
    (lambda t: t.replace("    num_stages = 2\n", ""),
     "looked for one assignment `num_stages = <int>` in the body of _decode_grouped_att_m_fwd"),
    (lambda t: t.replace("    num_stages = 2\n", "    num_stages = 1\n"),
     "looked for `num_stages = 2` .* found `num_stages = 1` \\(upstream changed it"),
    (lambda t: t.replace("    num_stages = 2\n", "    num_stages = 2 if Lk < 576 else 1\n"),
     "looked for `num_stages = <int>` in _decode_grouped_att_m_fwd\\(\\), found `num_stages = 2 if Lk < 576 else 1`"),
    (lambda t: t.replace("        num_stages=num_stages,\n", "        num_stages=2,\n"),
     "looked for the keyword `num_stages=num_stages` in the launch of _fwd_grouped_kernel_stage1, found num_stages=2"),
    (lambda t: t.replace("        num_stages=num_stages,\n", ""),
     "found no num_stages keyword"),
    (lambda t: t.replace("    _fwd_grouped_kernel_stage1[grid](", "    _fwd_grouped_kernel_stage1_v2[grid]("),
     "looked for one launch _fwd_grouped_kernel_stage1\\[grid\\]\\(...\\) in _decode_grouped_att_m_fwd\\(\\), found 0"),
    (lambda t: t.replace("    num_stages = 2\n", "    num_stages = 2\n    num_stages = 2\n"),
     "found 2"),
    (lambda t: t.replace("def _decode_grouped_att_m_fwd(", "def _decode_grouped_att_m_fwd(\n"), None),  # still fine
    (lambda t: t + "\ndef broken(:\n", "does not parse as Python"),
])
def test_every_unexpected_shape_fails_loudly_naming_the_file(edit, message):
    text = edit(fixture_text())
    if message is None:
        assert patch.patch_text(text, FIXTURE)[2]["value"] == 1
        return
    with pytest.raises(patch.PatchError, match=message) as error:
        patch.patch_text(text, FIXTURE)
    assert FIXTURE in str(error.value)


def run(tmp_path, *args, cuda="13.0.3"):
    env = dict(os.environ, PYTHONPATH=str(tmp_path / "site"), PYTHONDONTWRITEBYTECODE="1")
    env.pop("CUDA_VERSION", None)
    if cuda:
        env["CUDA_VERSION"] = cuda
    return subprocess.run([sys.executable, SCRIPT] + list(args), env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True, check=False)


@pytest.fixture
def site(tmp_path):
    shutil.copytree(SITE, str(tmp_path / "site"))
    return tmp_path


def test_patch_then_prove_through_the_installed_package(site):
    kernel = site / "site" / KERNEL_REL
    cache = kernel.parent / "__pycache__"
    cache.mkdir()
    stale = cache / ("triton_decode_attention.cpython-%d%d.pyc" % sys.version_info[:2])
    stale.write_bytes(b"stale")
    before = run(site, "prove")
    assert before.returncode == 1 and json.loads(before.stdout)["num_stages"] == 2
    out = run(site, "patch", "--expect-vllm", "0.22.1", "--require-cuda-major", "13", "--record",
              str(site / "record.json"))
    assert out.returncode == 0, out.stderr
    assert "patched %s:" % kernel in out.stdout and "num_stages = 2 -> num_stages = 1" in out.stdout
    assert not stale.exists()  # nothing stale can be imported instead of the edited source
    record = json.loads((site / "record.json").read_text())
    assert record["file"] == str(kernel) and record["vllm"] == "0.22.1" and record["cuda"] == "13.0.3"
    proof = run(site, "prove")
    assert proof.returncode == 0
    assert json.loads(proof.stdout) == {
        "cuda": "13.0.3", "expected": 1, "file": str(kernel), "function": "_decode_grouped_att_m_fwd",
        "module": "vllm.v1.attention.ops.triton_decode_attention", "num_stages": 1, "patched": True, "vllm": "0.22.1"}
    again = run(site, "patch")
    assert again.returncode == 3 and "PATCH FAILED: %s" % kernel in again.stderr


@pytest.mark.parametrize("args, cuda, message", [
    (["--expect-vllm", "0.21.0"], "13.0.3", "this image has vllm 0.22.1, the collection's engine flags are pinned to 0.21.0"),
    (["--require-cuda-major", "13"], "12.9.1", "this image's CUDA is 12.9.1 .*\\(\"b12x fused MoE requires CUDA 13\"\\)"),
    (["--require-cuda-major", "13"], None, "this image's CUDA is unknown"),
])
def test_a_wrong_base_fails_before_any_edit(site, args, cuda, message):
    before = (site / "site" / KERNEL_REL).read_text()
    out = run(site, "patch", *args, cuda=cuda)
    assert out.returncode == 3 and out.stderr.startswith("PATCH FAILED: ")
    assert __import__("re").search(message, out.stderr), out.stderr
    assert (site / "site" / KERNEL_REL).read_text() == before


def test_without_vllm_installed_it_says_where_it_looked(tmp_path):
    (tmp_path / "site").mkdir()
    out = run(tmp_path, "patch")
    assert out.returncode == 3 and "the package vllm is not installed" in out.stderr and "find_spec" in out.stderr


def test_a_vllm_release_the_patch_was_not_read_on_is_refused(site):
    """The patch states the releases it applies to (APPLIES_TO); another one fails before any edit, naming them."""
    dist = next((site / "site").glob("vllm-*.dist-info"))
    metadata = dist / "METADATA"
    metadata.write_text(metadata.read_text().replace("Version: 0.22.1", "Version: 0.34.0"))
    dist.rename(site / "site" / "vllm-0.34.0.dist-info")
    before = (site / "site" / KERNEL_REL).read_text()
    out = run(site, "patch")
    assert out.returncode == 3 and "this image has vllm 0.34.0; the patch is verified on 0.22.1, " in out.stderr
    assert "0.33.0 only" in out.stderr and (site / "site" / KERNEL_REL).read_text() == before
