"""The plan playbook and site.yml's preflight, run through real ansible-playbook (no GPU host needed)."""
import os
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.join(ROOT, ".venv", "bin")
RTX = "@tests/fixtures/gpus/rtx-pro-6000-x8.json"
SHA = "0123456789abcdef0123456789abcdef01234567"


def playbook(*args):
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               PATH=BIN + os.pathsep + os.environ["PATH"])
    proc = subprocess.run([os.path.join(BIN, "ansible-playbook")] + list(args), cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    return proc.returncode, " ".join((proc.stdout + proc.stderr).split())  # undo YAML line folding


def local_inventory(tmp_path):
    """This machine as the one kimi_servers host (local connection, the test's own interpreter)."""
    inventory = tmp_path / "hosts.yml"
    inventory.write_text("all:\n  children:\n    kimi_servers:\n      hosts:\n        localhost:\n"
                         "          ansible_connection: local\n"
                         "          ansible_python_interpreter: \"{{ ansible_playbook_python }}\"\n")
    return inventory


def test_plan_prints_identity_why_checkpoint_image_and_command():
    rc, out = playbook("playbooks/plan.yml", "-e", "quant=int4", "-e", "engine=sglang", "-e", RTX,
                       "-e", "kimi_int4_revision=" + SHA)
    assert rc == 0, out
    assert "identity: int4-sglang" in out
    assert "checkpoint: moonshotai/Kimi-K2.6 @ " + SHA in out
    assert "image: lmsysorg/sglang:v0.5.12.post1-cu130" in out
    assert ("command: python3 -m sglang.launch_server --model-path moonshotai/Kimi-K2.6 --tp-size 8 "
            "--trust-remote-code") in out


def test_plan_recommends_from_gpus_when_not_told():
    rc, out = playbook("playbooks/plan.yml", "-e", RTX)
    assert rc == 0, out
    assert "identity: int4-sglang" in out and "sm_120" in out and "NOT PINNED" in out


@pytest.mark.parametrize("extra, message", [
    (["-e", "quant=nvfp4", "-e", "engine=sglang"], "SGLang's NVFP4 path produces NaN"),
    (["-e", "quant=int8", "-e", "engine=vllm"], "quant='int8' is not allowed. Allowed values: int4, nvfp4, auto"),
    (["-e", "quant=int4", "-e", "engine=sglang", "-e", "kimi_kv_cache_dtype=fp8"],
     "kimi_kv_cache_dtype='fp8' is not allowed"),
    ([], "needs GPU facts"),
])
def test_plan_refuses_bad_input_clearly(extra, message):
    rc, out = playbook("playbooks/plan.yml", *extra)
    assert rc != 0
    assert message in out, out


def test_site_refuses_bad_input_before_any_role_runs(tmp_path):
    inventory = local_inventory(tmp_path)
    rc, out = playbook("-i", str(inventory), "site.yml", "-e", "quant=nvfp4", "-e", "engine=sglang", "-e", RTX)
    assert rc != 0
    assert "NaN" in out
    assert "Turn the host into a Kimi-K2.6 endpoint" not in out  # the changing play never started


def test_site_refuses_an_unpinned_checkpoint(tmp_path):
    inventory = local_inventory(tmp_path)
    rc, out = playbook("-i", str(inventory), "site.yml", "-e", "quant=int4", "-e", "engine=vllm", "-e", RTX)
    assert rc != 0
    assert "kimi_int4_revision is not set" in out and "api/models/moonshotai/Kimi-K2.6/revision/main" in out
