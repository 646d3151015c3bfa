"""The plan playbook and site.yml's preflight, run through real ansible-playbook (no GPU host needed)."""
import json
import os
import re
import subprocess

import pytest
import yaml

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


def test_make_plan_prints_the_trtllm_serve_command_and_its_yaml():
    """docs/docsite/rst/tensorrt_llm.rst's `make plan GPUS=b200-x8 QUANT=nvfp4 ENGINE=trtllm`: the command, the YAML
    it writes, the version."""
    proc = subprocess.run(["make", "--no-print-directory", "plan", "GPUS=b200-x8", "QUANT=nvfp4", "ENGINE=trtllm"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    out = " ".join(proc.stdout.split())
    assert proc.returncode == 0, out
    assert "identity: nvfp4-trtllm (quant=nvfp4, engine=trtllm 1.3.0rc17)" in out
    assert ("command: trtllm-serve nvidia/Kimi-K2.6-NVFP4 --host 127.0.0.1 --port 30000 --config "
            "/etc/kimi-k26/engine-config.yaml --tool_parser kimi_k2") in out
    assert "config /etc/kimi-k26/engine-config.yaml, from <kimi_serve_config_dir>/nvfp4-trtllm.yaml on the host:" in out
    for line in ("enable_attention_dp: true", "free_gpu_memory_fraction: 0.75", "dtype: fp8",
                 "moe_expert_parallel_size: 8", "tensor_parallel_size: 8", "max_num_tokens: 8448"):
        assert line in out, line
    assert "image: nvcr.io/nvidia/tensorrt-llm/release:1.3.0rc17" in out
    assert "memory knob: kv_cache_config.free_gpu_memory_fraction is the share of each GPU" in out


def test_plan_recommends_from_gpus_when_not_told():
    rc, out = playbook("playbooks/plan.yml", "-e", RTX)
    assert rc == 0, out
    assert "identity: int4-sglang" in out and "sm_120" in out and "NOT PINNED" in out


@pytest.mark.parametrize("extra, message", [
    (["-e", "quant=nvfp4", "-e", "engine=sglang"], "SGLang's NVFP4 path produces NaN"),
    (["-e", "quant=int8", "-e", "engine=vllm"], "quant='int8' is not allowed. Allowed values: int4, nvfp4, w4a8, auto"),
    (["-e", "quant=int4", "-e", "engine=sglang", "-e", "kimi_kv_cache_dtype=fp8"],
     "kimi_kv_cache_dtype='fp8' is not allowed"),
    ([], "needs GPU facts"),
    # one port table: a role's port on the engine's (issue 35 item 5)
    (["-e", "quant=int4", "-e", "engine=sglang", "-e", "caddy_proxy_https_port=30000"],
     "kimi.deploy: caddy_proxy_https_port=30000 is not allowed: Caddy's HTTPS listener would listen on port 30000, "
     "which the engine's API (kimi_engine_port) already uses"),
    (["-e", "quant=int4", "-e", "engine=vllm", "-e", "kimi_weights_peer_port={{ 29999 + 1 }}"],
     "kimi.deploy: kimi_weights_peer_port=30000 is not allowed"),
])
def test_plan_refuses_bad_input_clearly(extra, message):
    rc, out = playbook("playbooks/plan.yml", *extra)
    assert rc != 0
    assert message in " ".join(out.split()), out


def test_make_plan_prints_the_speculative_flags_the_draft_and_the_fit():
    """docs/docsite/rst/speculation.rst's `make plan ... SPEC=eagle3`: the flags in the engine's form, the draft
    (unpinned: a warning), its share in the fit."""
    proc = subprocess.run(["make", "--no-print-directory", "plan", "QUANT=int4", "ENGINE=vllm", "SPEC=eagle3"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    out = " ".join(proc.stdout.split())
    assert proc.returncode == 0, out
    assert ('speculative flags (vLLM): --speculative-config {"method":"eagle3","model":"lightseekorg/kimi-k2.6-eagle3",'
            '"num_speculative_tokens":3}') in out
    assert "draft: lightseekorg/kimi-k2.6-eagle3 @ NOT PINNED (LlamaForCausalLMEagle3, ~4.3 GB; seed 004" in out
    assert "plus ~0.5 GB of the ~4.3 GB draft lightseekorg/kimi-k2.6-eagle3" in out
    assert "warning: kimi_speculative_draft_revision is not set" in out


def test_site_refuses_an_unpinned_draft(tmp_path):
    inventory = local_inventory(tmp_path)
    rc, out = playbook("-i", str(inventory), "site.yml", "-e", "quant=int4", "-e", "engine=sglang", "-e", RTX,
                       "-e", "kimi_int4_revision=" + SHA, "-e", "kimi_speculative=eagle3")
    assert rc != 0
    assert "kimi_speculative_draft_revision is not set" in out, out[-2000:]
    assert "api/models/AQ-MedAI/Kimi-K26-eagle3/revision/main" in out
    assert "Turn the host into a container host for its accelerators" not in out


def test_site_refuses_bad_input_before_any_role_runs(tmp_path):
    inventory = local_inventory(tmp_path)
    rc, out = playbook("-i", str(inventory), "site.yml", "-e", "quant=nvfp4", "-e", "engine=sglang", "-e", RTX)
    assert rc != 0
    assert "NaN" in out
    assert "Turn the host into a container host for its accelerators" not in out  # the changing play never started


@pytest.mark.parametrize("extra, message", [
    ("kimi_probe_interval=1s;reboot", "kimi.deploy: kimi_probe_interval='1s;reboot' is not allowed: systemd would not "
                                      "parse it as a time span"),
    ("caddy_proxy_generation_timeout=15min", "kimi.deploy: caddy_proxy_generation_timeout='15min' is not allowed. "
                                             "Allowed values: a Go duration"),
])
def test_plan_and_site_refuse_an_input_alike_with_its_first_preflight_task(tmp_path, extra, message):
    """The one check path: plan.yml and site.yml refuse the same value with the same line, site.yml in the first task
    that could read a host (the disk read test keeps a figure on it), so nothing reaches a timer or a Caddyfile."""
    rc, out = playbook("playbooks/plan.yml", "-e", RTX, "-e", "quant=int4", "-e", "engine=sglang", "-e", extra)
    assert rc != 0 and message in out, out[-2000:]
    rc, out = playbook("-i", str(local_inventory(tmp_path)), "site.yml", "-e", RTX, "-e", "quant=int4", "-e",
                       "engine=sglang", "-e", "kimi_int4_revision=" + SHA, "-e", extra)
    assert rc != 0 and message in out, out[-2000:]
    failed = re.search(r"TASK \[([^\]]+)\][ *]*\[ERROR\]", out)
    assert failed and failed.group(1) == "Check the site inputs", out[-2000:]
    assert "Read the host's OS facts" not in out and "Measure the weights disk" not in out
    assert_nothing_changed(out, "localhost")


def test_site_refuses_an_unpinned_checkpoint(tmp_path):
    inventory = local_inventory(tmp_path)
    rc, out = playbook("-i", str(inventory), "site.yml", "-e", "quant=int4", "-e", "engine=vllm", "-e", RTX)
    assert rc != 0
    assert "kimi_int4_revision is not set" in out and "api/models/moonshotai/Kimi-K2.6/revision/main" in out


def test_nvidia_host_refuses_the_control_node_before_any_change(tmp_path):
    """A `connection: local` host is the machine running Ansible: the role reboots when the driver changes, so it
    stops at its first task (nothing read from the GPUs, nothing installed) unless told."""
    play = tmp_path / "play.yml"
    play.write_text("- hosts: localhost\n  connection: local\n  gather_facts: true\n"
                    "  vars:\n    ansible_python_interpreter: \"{{ ansible_playbook_python }}\"\n"

                    "  roles:\n    - kimi.deploy.nvidia_host\n")
    rc, out = playbook(str(play))
    assert rc != 0
    assert "is reached over a local connection, i.e. it is the control node" in out, out
    assert "nvidia_host_skip_reboot=true" in out and "nvidia_host_allow_local_reboot=true" in out
    assert "Gather GPU facts" not in out and "Check the driver settings" not in out  # stopped at the first check


def test_site_on_a_bare_host_asks_for_quant_and_engine(tmp_path):
    """GPUs on the PCI bus but no driver (no nvidia-smi here): VRAM and compute capability are unknown, so the
    preflight asks for quant and engine before any host is changed, naming the GPUs it found."""
    inventory = local_inventory(tmp_path)
    devices = tmp_path / "sys" / "bus" / "pci" / "devices"
    for bus in ("0000:01:00.0", "0000:21:00.0"):
        (devices / bus).mkdir(parents=True)
        for name, value in (("vendor", "0x10de"), ("device", "0x2bb5"), ("class", "0x030200")):
            (devices / bus / name).write_text(value + "\n")
    rc, out = playbook("-i", str(inventory), "site.yml", "-e", "nvidia_host_sys_root=%s" % (tmp_path / "sys"),
                       "-e", "nvidia_host_nvidia_smi=/nonexistent/nvidia-smi", "-e", "kimi_int4_revision=" + SHA)
    assert rc != 0
    assert ("2 NVIDIA GPU(s) on the PCI bus (0000:01:00.0, 0000:21:00.0): the memory and compute capability of its GPUs "
            "are unknown") in out, out
    assert "-e quant=int4 -e engine=sglang" in out
    assert "Turn the host into a container host for its accelerators" not in out


H100X4 = "@tests/fixtures/gpus/h100-x4.json"
STRONG_KEY = '{"caddy_proxy_api_keys": ["%s"]}' % ("k" * 40)


def test_site_fails_on_an_inventory_without_kimi_servers(tmp_path):
    inventory = tmp_path / "hosts.yml"
    inventory.write_text("all:\n  children:\n    gpu:\n      hosts:\n        localhost:\n"
                         "          ansible_connection: local\n")
    rc, out = playbook("-i", str(inventory), "site.yml", "-e", "quant=int4", "-e", "engine=sglang")
    assert rc != 0
    assert "no host in the group kimi_servers (groups found: gpu)" in out, out
    assert "all.children.kimi_servers.hosts" in out


def test_site_refuses_a_pool_that_cannot_hold_the_checkpoint(tmp_path):
    """4 x H100 80 GB: refused in preflight, naming the GPUs and the numbers, before the host-changing play."""
    inventory = local_inventory(tmp_path)
    rc, out = playbook("-i", str(inventory), "site.yml", "-e", H100X4, "-e", "kimi_int4_revision=" + SHA)
    assert rc != 0
    assert "cannot hold int4-vllm" in out and "4 x NVIDIA H100 80GB HBM3" in out, out
    assert "kimi_allow_unfit=true only to test" in out
    assert "Turn the host into a container host for its accelerators" not in out


def test_site_fit_uses_the_chosen_tensor_parallel_size(tmp_path):
    """tp=4 on 8 x 96 GB puts ~149 GB of weights on each 96 GB GPU: refused before any change, with the numbers."""
    inventory = local_inventory(tmp_path)
    rc, out = playbook("-i", str(inventory), "site.yml", "-e", RTX, "-e", "quant=int4", "-e", "engine=sglang",
                       "-e", "kimi_tensor_parallel=4", "-e", "kimi_int4_revision=" + SHA)
    assert rc != 0
    assert "cannot hold int4-sglang" in out and "tensor parallel 4" in out, out
    assert "With kimi_tensor_parallel=8 it would fit" in out
    assert "Turn the host into a container host for its accelerators" not in out


def test_site_refuses_a_dev_shm_too_small_for_trtllm_before_any_change(tmp_path):
    """TensorRT-LLM stages the weights in /dev/shm (seed 003's Bus error): kimi_serve's preflight measures the host's."""
    inventory = local_inventory(tmp_path)
    rc, out = playbook("-i", str(inventory), "site.yml", "-e", "@tests/fixtures/gpus/b200-x8.json", "-e", "quant=nvfp4",
                       "-e", "engine=trtllm", "-e", "kimi_nvfp4_revision=" + SHA,
                       "-e", "kimi_serve_shm_min_bytes=%d" % (1 << 45), "-e", STRONG_KEY)
    assert rc != 0
    assert re.search(r"localhost: /dev/shm has [0-9.]+ [KMGT]?i?B; TensorRT-LLM needs at least 32\.00 TB "
                     r"\(kimi_serve_shm_min_bytes\): TensorRT-LLM stages the weights through /dev/shm", out), out
    assert "Nothing was changed" in out and "Turn the host into a container host for its accelerators" not in out


def test_site_refuses_the_published_example_api_key(tmp_path):
    inventory = local_inventory(tmp_path)
    rc, out = playbook("-i", str(inventory), "site.yml", "-e", RTX, "-e", "kimi_int4_revision=" + SHA,
                       "-e", '{"caddy_proxy_api_keys": ["example-0123456789abcdef0123456789abcdef"]}')
    assert rc != 0
    assert "published in this repository's example inventory" in out, out
    assert "example-0123456789abcdef0123456789abcdef" not in out  # compared by digest, never printed
    assert "Turn the host into a container host for its accelerators" not in out


def test_site_preflight_fails_fast_on_an_unreachable_hub(tmp_path):
    inventory = local_inventory(tmp_path)
    rc, out = playbook("-i", str(inventory), "site.yml", "-e", RTX, "-e", "kimi_int4_revision=" + SHA,
                       "-e", STRONG_KEY, "-e", "kimi_weights_endpoint=http://127.0.0.1:9",
                       "-e", "kimi_weights_hf_home=%s" % (tmp_path / "hf"))
    assert rc != 0
    assert "Plan the download" in out and "127.0.0.1:9" in out, out
    assert "Turn the host into a container host for its accelerators" not in out
    assert not (tmp_path / "hf").exists()  # the plan writes nothing


def test_site_stage_tags_keep_the_preflight():
    rc, out = playbook("-i", "inventories/example/hosts.yml", "site.yml", "--tags", "proxy", "--list-tasks",
                       "--vault-password-file", "inventories/example/vault-password.example")
    assert rc == 0, out
    # preflight always runs: the resolution and the tasks of its imported VRAM-fit file are listed
    assert "Resolve the deployment" in out and "Check the site inputs" in out
    assert "Check the GPUs can hold the deployment" in out
    assert "Check the proxy settings TAGS: [always, preflight]" in out  # caddy_proxy's, in role_preflights.yml
    assert "nvidia_host : Check the driver settings" not in out and "kimi_weights : Start the download" not in out


def test_plan_keeps_the_old_image_variable_with_a_deprecation_warning():
    rc, out = playbook("playbooks/plan.yml", "-e", "quant=int4", "-e", "engine=vllm", "-e", RTX,
                       "-e", "kimi_image=mirror.example/vllm-openai:v0.22.1")
    assert rc == 0, out
    assert "DEPRECATION: kimi_image is deprecated" in out and "kimi_engine_image" in out
    assert "image: mirror.example/vllm-openai:v0.22.1" in out


def test_site_preflight_refuses_api_keys_given_as_a_string(tmp_path):
    """A role's checks run in site.yml's preflight: a string where a list of keys belongs (-e key=value gives a
    string) is refused there, naming the variable, before any change, and the value is never printed."""
    inventory = local_inventory(tmp_path)
    rc, out = playbook("-i", str(inventory), "site.yml", "-e", RTX, "-e", "kimi_int4_revision=" + SHA,
                       "-e", "caddy_proxy_api_keys=" + "k" * 40)
    assert rc != 0
    assert "caddy_proxy_api_keys must be a list of keys" in out and "(got a str, not a list)" in out, out
    assert ("k" * 40) not in out  # no_log in the spec: the value is never printed
    assert "Turn the host into a container host for its accelerators" not in out


def test_plan_for_one_8_x_h100_says_it_fits_as_a_2_host_replica_and_prints_the_two_host_plan():
    h100 = "@" + os.path.join(ROOT, "tests", "fixtures", "gpus", "h100-x8.json")
    rc, out = playbook("playbooks/plan.yml", "-e", h100)
    assert rc == 2, out  # printed, then refused: a script can gate on the plan
    assert "Does not fit alone; fits as a 2-host replica of such hosts" in out
    assert "kimi.deploy: the deployment does not fit" in out
    rc, out = playbook("playbooks/plan.yml", "-e", h100, "-e", "kimi_replica_plan_hosts=2")
    assert rc == 0, out
    assert "hardware: 2 hosts of 8 x NVIDIA H100 80GB HBM3" in out and "fits=True" in out
    assert "replica: 2 hosts meeting at head.replica.example:29500, tensor parallel 8 x pipeline parallel 2" in out
    # each command ends there (the next word is not another option of it)
    assert re.search(r"--nnodes 2 --node-rank 0 --master-addr head.replica.example --master-port 29500 (?!-)", out)
    assert re.search(r"--nnodes 2 --node-rank 1 --master-addr head.replica.example --master-port 29500 --headless (?!-)",
                     out)


def replica_inventory(tmp_path, hosts):
    """Local 'hosts' (each a name and its host vars) in kimi_servers, in this order."""
    inventory = tmp_path / "hosts.yml"
    inventory.write_text("all:\n  children:\n    kimi_servers:\n      hosts:\n" + "".join(
        "        %s: {ansible_connection: local%s}\n" % (name, "".join(", %s: %s" % kv for kv in hostvars.items()))
        for name, hostvars in hosts) + "      vars: {ansible_python_interpreter: \"{{ ansible_playbook_python }}\"}\n")
    return inventory


def site_on_h100s(inventory, *extra):
    h100 = "@" + os.path.join(ROOT, "tests", "fixtures", "gpus", "h100-x8.json")
    return playbook("-i", str(inventory), "site.yml", "-e", h100, "-e", "quant=int4", "-e", "engine=vllm",
                    "-e", "kimi_int4_revision=" + SHA, "-e", STRONG_KEY, *extra)


def assert_nothing_changed(out, *hosts):
    recap = out.rsplit("PLAY RECAP", maxsplit=1)[-1]
    assert all("%s : ok=" % host in recap for host in hosts) and not re.search(r"changed=[1-9]", recap), recap
    assert "Turn the host into a container host for its accelerators" not in out


def test_site_refuses_a_wrong_head_address_naming_each_host_and_the_port(tmp_path):
    """Every host of the replica must reach the head's rendezvous port at kimi_replica_head_address (here TEST-NET-1,
    where nothing answers) in preflight, before any change."""
    inventory = replica_inventory(tmp_path, [("gpu1", {"kimi_replica": "r1"}), ("gpu2", {"kimi_replica": "r1"})])
    rc, out = site_on_h100s(inventory, "-e", "kimi_replica_head_address=192.0.2.1", "-e", "kimi_replica_port=29517",
                            "-e", "kimi_serve_replica_probe_timeout=2")
    assert rc != 0
    flat = re.sub(r"\s+", " ", out)
    for host in ("gpu1", "gpu2"):
        assert "%s cannot use 192.0.2.1:29517 as the rendezvous of replica r1" % host in flat, out[-3000:]
    assert "Nothing was changed" in flat
    assert_nothing_changed(out, "gpu1", "gpu2")


def test_site_waits_for_a_replica_recovery_in_progress_then_refuses_naming_its_lock(tmp_path):
    """The replica's watchdog holds its lock file while it restarts the replica: a converge waits for it
    (kimi_serve_replica_lock_wait), then refuses before any change, naming the lock (a lock of the test's own here)."""
    lock = tmp_path / "recovery.lock"
    lock.write_text("1 kimi-k26-watchdog recovering replica r1\n")
    inventory = replica_inventory(tmp_path, [("gpu1", {"kimi_replica": "r1"}), ("gpu2", {"kimi_replica": "r1"})])
    rc, out = site_on_h100s(inventory, "-e", "kimi_replica_head_address=127.0.0.1", "-e", "kimi_replica_port=29519",
                            "-e", "kimi_serve_replica_lock_wait=2", "-e", "_kimi_serve_watchdog_lock=%s" % lock)
    assert rc != 0
    flat = re.sub(r"\s+", " ", out)
    assert "kimi-k26-watchdog is recovering replica r1 (%s exists, 2 s waited, kimi_serve_replica_lock_wait)" % lock \
        in flat, out[-3000:]
    assert_nothing_changed(out, "gpu1", "gpu2")


def test_site_refuses_a_replica_whose_hosts_are_listed_apart(tmp_path):
    inventory = replica_inventory(tmp_path, [("gpu1", {"kimi_replica": "r1"}), ("solo", {"kimi_allow_unfit": "true"}),
                                             ("gpu2", {"kimi_replica": "r1"})])
    rc, out = site_on_h100s(inventory, "-e", "kimi_replica_head_address=127.0.0.1")
    assert rc != 0
    assert "the hosts of one replica (gpu1, gpu2) must be listed one after the other in kimi_servers, but solo come" \
        in re.sub(r"\s+", " ", out), out[-3000:]
    assert_nothing_changed(out, "gpu1", "gpu2", "solo")


def test_site_refuses_a_replica_whose_hosts_resolve_different_deployments(tmp_path):
    inventory = replica_inventory(tmp_path, [("gpu1", {"kimi_replica": "r1"}),
                                             ("gpu2", {"kimi_replica": "r1", "kimi_kv_cache_dtype": "auto"})])
    rc, out = site_on_h100s(inventory, "-e", "kimi_replica_head_address=127.0.0.1")
    assert rc != 0
    assert ("kimi_replica r1: gpu2 resolves another command than its head gpu1: kimi_context_length 131072 (gpu1: "
            "262144), kimi_kv_cache_dtype auto (gpu1: fp8). A replica over several hosts is one engine" in re.sub(r"\s+", " ", out)), out[-3000:]
    assert_nothing_changed(out, "gpu1", "gpu2")


def group_inventory(tmp_path, hosts):
    """replica_inventory, each host's GPUs given as its own host var (kimi_gpus: a profile's list)."""
    def gpus(profile):
        with open(os.path.join(ROOT, "tests", "fixtures", "gpus", profile + ".json")) as handle:
            return json.dumps(json.load(handle)["kimi_gpus"])
    return replica_inventory(tmp_path, [(name, dict(hostvars, kimi_gpus=gpus(profile)))
                                        for name, profile, hostvars in hosts])


def test_plan_on_an_inventory_resolves_each_host_and_refuses_replica_hosts_with_other_gpus(tmp_path):
    """plan.yml against an inventory: every host of kimi_servers is resolved from its own GPUs (host vars), and a
    replica whose second host has half the GPUs of its head is refused, naming the host and what differs."""
    same = group_inventory(tmp_path, [("gpu1", "h200-x8", {"kimi_replica": "r1"}),
                                      ("gpu2", "h200-x8", {"kimi_replica": "r1"})])
    rc, out = playbook("-i", str(same), "playbooks/plan.yml", "-e", "quant=int4", "-e", "engine=vllm",
                       "-e", "kimi_replica_head_address=10.0.0.1")
    assert rc == 0, out[-3000:]
    assert "ok: [gpu1]" in out and "ok: [gpu2]" in out and "replica: 2 hosts meeting at 10.0.0.1:29500" in out
    (tmp_path / "other").mkdir()
    differs = group_inventory(tmp_path / "other", [("gpu1", "h200-x8", {"kimi_replica": "r1"}),
                                                   ("gpu2", "h100-x4", {"kimi_replica": "r1"})])
    rc, out = playbook("-i", str(differs), "playbooks/plan.yml", "-e", "quant=int4", "-e", "engine=vllm",
                       "-e", "kimi_replica_head_address=10.0.0.1", "-e", "kimi_allow_unfit=true")
    assert rc != 0
    flat = re.sub(r"\s+", " ", out)
    assert "kimi.deploy: kimi_replica r1: gpu2 has 4 x NVIDIA H100 80GB HBM3 (sm_90, 80 GiB each), its head gpu1 " \
           "8 x NVIDIA H200 (sm_90, 140 GiB each): model, memory and count differ." in flat, out[-3000:]


@pytest.mark.parametrize("profile, shown", [
    ("b200-x8", "8 x NVIDIA B200 (sm_100, 179 GiB each)"),
    ("rtx-pro-6000-x8", "8 x NVIDIA RTX PRO 6000 Blackwell Server Edition (sm_120, 96 GiB each)"),
])
def test_plan_on_an_inventory_refuses_a_replica_of_other_gpus_whose_commands_agree(tmp_path, profile, shown):
    """Issue 50: an H100 x 8 host and a B200 x 8 (or RTX PRO 6000 x 8) host resolve the same int4 vLLM command, and a
    replica of the two is still two kinds of GPU under one engine: plan.yml refuses it, naming the member and what
    differs (two equal members pass: the test above)."""
    inventory = group_inventory(tmp_path, [("gpu1", "h100-x8", {"kimi_replica": "r1"}),
                                           ("gpu2", profile, {"kimi_replica": "r1"})])
    rc, out = playbook("-i", str(inventory), "playbooks/plan.yml", "-e", "quant=int4", "-e", "engine=vllm",
                       "-e", "kimi_replica_head_address=10.0.0.1", "-e", "kimi_allow_unfit=true")
    assert rc != 0
    flat = re.sub(r"\s+", " ", out)
    assert ("kimi.deploy: kimi_replica r1: gpu2 has %s, its head gpu1 8 x NVIDIA H100 80GB HBM3 (sm_90, 80 GiB each): "
            "architecture, model and memory differ. A replica over several hosts is one engine" % shown) in flat, \
        out[-3000:]


def test_plan_on_an_inventory_refuses_pd_hosts_with_another_kv_dtype(tmp_path):
    inventory = group_inventory(tmp_path, [
        ("p1", "h200-x8", {"kimi_pd": "pd1", "kimi_pd_role": "prefill", "kimi_kv_cache_dtype": "auto"}),
        ("d1", "h200-x8", {"kimi_pd": "pd1", "kimi_pd_role": "decode", "kimi_kv_cache_dtype": "fp8_e4m3"})])
    rc, out = playbook("-i", str(inventory), "playbooks/plan.yml", "-e", "quant=int4", "-e", "engine=sglang")
    assert rc != 0
    assert ('kimi_pd pd1: kimi_kv_cache_dtype differs between the hosts of the disaggregated deployment: "auto" on p1 '
            '(prefill) and "fp8_e4m3" on d1 (decode)') in re.sub(r"\s+", " ", out), out[-3000:]


def test_site_compares_the_hosts_of_a_replica_again_after_the_driver_stage(tmp_path):
    """The play that runs after the host stage (drivers installed, GPU facts read) resolves every host again and
    compares each group: two replica hosts with different GPUs are refused there, saying only the host stage ran
    (that play run alone: in preflight the bare hosts had no GPU facts to compare). Both resolutions import
    tasks/check_fit.yml, so --start-at-task cannot tell them apart: the play is copied beside site.yml's vars and
    tasks."""
    inventory = group_inventory(tmp_path, [("gpu1", "h200-x8", {"kimi_replica": "r1"}),
                                           ("gpu2", "h100-x4", {"kimi_replica": "r1"})])
    with open(os.path.join(ROOT, "playbooks", "site.yml")) as handle:
        plays = yaml.safe_load(handle)
    again = [play for play in plays if play["name"] == "Resolve again now that the driver reports the GPUs"]
    for folder in ("vars", "tasks"):
        (tmp_path / folder).symlink_to(os.path.join(ROOT, "playbooks", folder))
    (tmp_path / "again.yml").write_text(yaml.safe_dump(again))
    rc, out = playbook("-i", str(inventory), str(tmp_path / "again.yml"), "-e", "quant=int4", "-e", "engine=vllm",
                       "-e", "kimi_int4_revision=" + SHA, "-e", "kimi_allow_unfit=true")
    assert rc != 0
    flat = re.sub(r"\s+", " ", out)
    assert "kimi_replica r1: gpu2 has 4 x NVIDIA H100 80GB HBM3 (sm_90, 80 GiB each), its head gpu1 8 x NVIDIA H200" \
        in flat
    assert "Only the host stage has run (driver, container toolkit, Docker)" in flat, out[-3000:]
    # every call compares the groups: the resolving task runs unconditionally, imported by the two resolving plays
    with open(os.path.join(ROOT, "playbooks", "tasks", "check_fit.yml")) as handle:
        fit = yaml.safe_load(handle)
    resolving = [task for task in fit if "kimi.deploy.deployment" in task]
    assert len(resolving) == 1 and "when" not in resolving[0]
    imports = [task for play in plays for task in play.get("tasks", [])
               if task.get("ansible.builtin.import_tasks") == "tasks/check_fit.yml"]
    assert len(imports) == 2 and not any("when" in task for task in imports)
    assert [task for play in plays for task in play.get("tasks", []) if "kimi.deploy.deployment" in task
            and not task["kimi.deploy.deployment"].get("inputs_only")] == []


def test_site_refuses_a_disaggregated_deployment_whose_roles_differ_in_kv_dtype(tmp_path):
    """The decode instances read the KV cache as the prefill instances send it: a KV dtype that differs between the
    roles is refused in preflight, on the router's host, before any change (moved here from molecule/pd, where a
    whole site.yml run on two container hosts proved the same)."""
    inventory = replica_inventory(tmp_path, [("p1", {"kimi_pd": "pd1", "kimi_pd_role": "prefill",
                                                     "kimi_kv_cache_dtype": "auto"}),
                                             ("d1", {"kimi_pd": "pd1", "kimi_pd_role": "decode",
                                                     "kimi_kv_cache_dtype": "fp8_e4m3"})])
    h200 = "@" + os.path.join(ROOT, "tests", "fixtures", "gpus", "h200-x8.json")
    rc, out = playbook("-i", str(inventory), "site.yml", "-e", h200, "-e", "quant=int4", "-e", "engine=sglang",
                       "-e", "kimi_int4_revision=" + SHA, "-e", STRONG_KEY)
    assert rc != 0
    assert ('kimi_pd pd1: kimi_kv_cache_dtype differs between the hosts of the disaggregated deployment: "auto" on p1 '
            '(prefill) and "fp8_e4m3" on d1 (decode)') in re.sub(r"\s+", " ", out), out[-3000:]
    assert "Nothing was changed" in out
    assert_nothing_changed(out, "p1", "d1")


def test_site_refuses_a_bad_fleet_serial_naming_the_variable(tmp_path):
    inventory = replica_inventory(tmp_path, [("gpu1", {}), ("gpu2", {})])
    rc, out = playbook("-i", str(inventory), "site.yml", "-e", RTX, "-e", "kimi_int4_revision=" + SHA,
                       "-e", STRONG_KEY, "-e", "kimi_fleet_serial=0")
    assert rc != 0
    assert "kimi.deploy: kimi_fleet_serial='0' is not allowed. Allowed values: a count of replicas (1, 2, ...) or a " \
        "percentage of them from 1% to 100%" in re.sub(r"\s+", " ", out), out[-3000:]
    assert_nothing_changed(out, "gpu1", "gpu2")


def test_make_plan_prints_the_two_host_a2_replica():
    """docs/docsite/rst/ascend.rst's `make plan GPUS=ascend-a2-x8 HOSTS=2`: vLLM-Ascend over two Atlas 800 A2, each
    member's command."""
    proc = subprocess.run(["make", "--no-print-directory", "plan", "GPUS=ascend-a2-x8", "HOSTS=2"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    out = " ".join(proc.stdout.split())
    assert proc.returncode == 0, out
    assert "identity: w4a8-vllm (quant=w4a8, engine=vllm 0.20.2rc1)" in out
    assert "image: quay.io/ascend/vllm-ascend:v0.20.2rc1" in out
    assert "replica: 2 hosts meeting at head.replica.example:29500, tensor parallel 4 x data parallel 4" in out
    assert "--data-parallel-size-local 2 --data-parallel-address head.replica.example --data-parallel-rpc-port 29500 " \
           "--data-parallel-start-rank 2 --headless" in out
    assert "fits=True" in out and "HCCL_OP_EXPANSION_MODE=AIV" in out


def test_site_refuses_cuda_only_identities_on_an_ascend_host_before_any_change(tmp_path):
    """An Ascend host given int4 (CUDA-only) is refused in the preflight, naming the reason and what runs there."""
    inventory = local_inventory(tmp_path)
    rc, out = playbook("-i", str(inventory), "site.yml", "-e", "@tests/fixtures/gpus/ascend-a3-x16.json",
                       "-e", "quant=int4", "-e", "engine=sglang", "-e", "kimi_int4_revision=" + SHA, "-e", STRONG_KEY)
    flat = " ".join(out.split())
    assert rc != 0
    assert "quant=int4 engine=sglang is refused on 16 x Ascend910 (Huawei Ascend NPUs (CANN)): moonshotai/Kimi-K2.6's " \
           "INT4 (compressed-tensors, Marlin MoE kernels) needs CUDA" in flat, out
    assert "Allowed here: w4a8+sglang, w4a8+vllm" in flat
    assert "Turn the host into a container host for its accelerators" not in out


def test_make_plan_prints_each_role_and_the_router_of_a_1p1d_deployment():
    """docs/docsite/rst/disaggregation.rst's `make plan GPUS=h200-x8 PD=1P1D`: each role's command and the router's,
    with example addresses."""
    proc = subprocess.run(["make", "--no-print-directory", "plan", "GPUS=h200-x8", "PD=1P1D", "ENGINE=sglang",
                           "QUANT=int4"], cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    out = " ".join(proc.stdout.split())
    assert proc.returncode == 0, out
    assert "disaggregated: kimi_pd plan, 1P1D (prefill prefill-1 at http://10.0.1.11:30000, decode decode-1 at " \
           "http://10.0.2.11:30000); KV transfer nixl: no RDMA device on prefill-1, decode-1" in out
    assert "command of prefill instance prefill-1: python3 -m sglang.launch_server" in out
    assert "--disaggregation-mode prefill --disaggregation-transfer-backend nixl --disaggregation-bootstrap-port 8998" \
           in out
    assert "command of the router: smg launch --pd-disaggregation --prefill " \
           "http://10.0.1.11:30000 8998 --decode http://10.0.2.11:30000 --host 127.0.0.1 --port 30080" in out
    assert "router on decode-1: SMG 1.13.0 (the pinned wheel in a virtualenv)" in out


def test_make_plan_prints_smg_and_its_discovery_file_for_a_vllm_1p1d_deployment():
    """vLLM's prefill/decode behind SMG: the workers, each with its KV connector, from the discovery file kimi_router
    writes (plain --prefill/--decode would route vLLM without a KV handoff)."""
    proc = subprocess.run(["make", "--no-print-directory", "plan", "GPUS=h200-x8", "PD=1P1D", "ENGINE=vllm",
                           "QUANT=int4"], cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    out = " ".join(proc.stdout.split())
    assert proc.returncode == 0, out
    assert "router on decode-1: SMG 1.13.0 (the pinned wheel in a virtualenv)" in out
    assert "command of the router: smg launch --pd-disaggregation --discovery-provider file --discovery-file " \
           "/etc/kimi-k26/pd-workers.json --host 127.0.0.1 --port 30080" in out
    assert 'router config /etc/kimi-k26/pd-workers.json: {"version": 1, "workers": [{"id": "prefill-1", ' \
           '"kv_connector": "NixlConnector", "kv_role": "kv_both", "url": "http://10.0.1.11:30000", ' \
           '"worker_type": "prefill"}, {"id": "decode-1", "kv_connector": "NixlConnector"' in out


def test_plan_names_kimi_replica_plan_hosts_for_a_bad_hosts_count():
    rc, out = playbook("playbooks/plan.yml", "-e", RTX, "-e", "kimi_replica_plan_hosts=0")
    assert rc != 0
    assert "kimi.deploy: kimi_replica_plan_hosts='0' is not allowed" in out and "from 1 to 16" in out, out


def test_a_refusal_is_one_clean_line_first():
    """The deployment's refusal comes from an action with a clean message: its first line names the variable, with no
    filter-exception preamble before it."""
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               PATH=BIN + os.pathsep + os.environ["PATH"])
    proc = subprocess.run([os.path.join(BIN, "ansible-playbook"), "playbooks/plan.yml", "-e", RTX, "-e",
                           '{"quant": "int4", "engine": "vllm", "kimi_engine_extra_args": ["--max-num-seqs", '
                           '"64\\n--host=0.0.0.0"]}'], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
                          check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    first = next(line for line in out.splitlines() if "kimi_engine_extra_args" in line)
    assert re.search(r"^(\[ERROR\]: Task failed: Action failed: )?kimi\.deploy: kimi_engine_extra_args='64\\n--host=0\.0\.0\.0'"
                     r" is not allowed: element 1 holds a newline", first), first
    assert "Finalization of task args" not in out and "filter plugin" not in out


def changed_bundle(tmp):
    """A bundle written by bundle_manifest, then one of its files changed."""
    bundle = tmp / "bundle"
    (bundle / "images").mkdir(parents=True)
    (bundle / "images" / "engine.tar").write_bytes(b"image")
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"))
    subprocess.run([os.path.join(BIN, "ansible"), "localhost", "-m", "kimi.deploy.bundle_manifest", "-a",
                    "path=%s state=written record_dir=%s" % (bundle, tmp / "records")], cwd=ROOT, env=env,
                   capture_output=True, check=True, timeout=120)
    (bundle / "images" / "engine.tar").write_bytes(b"imagE")
    return bundle


@pytest.mark.parametrize("make, why", [
    (lambda tmp: tmp / "missing", "is not a folder"),
    (lambda tmp: (tmp / "empty").mkdir() or tmp / "empty", "has no manifest"),
    (changed_bundle, "images/engine.tar changed (sha256"),
], ids=["missing", "no-manifest", "changed-file"])
def test_site_refuses_a_bad_bundle_naming_kimi_bundle_and_bundle_yml(tmp_path, make, why):
    """A bad kimi_bundle said "path=... is not a folder" or "make it with state=written" (the module's terms)."""
    inventory = local_inventory(tmp_path)
    bundle = make(tmp_path)
    rc, out = playbook("-i", str(inventory), "site.yml", "-e", RTX, "-e", "kimi_int4_revision=" + SHA,
                       "-e", STRONG_KEY, "-e", "kimi_bundle=%s" % bundle)
    assert rc != 0
    assert re.search(r"kimi\.deploy: kimi_bundle='?%s'? is not allowed" % re.escape(str(bundle)), out) and why in out, \
        out[-3000:]
    assert "playbooks/bundle.yml" in out
    assert "Turn the host into a container host for its accelerators" not in out


# Every secret variable (the no_log options of the argument specs), each with a value no output may carry.
SECRETS = {
    "caddy_proxy_clients": [{"name": "team-a", "keys": ["secret-client-key-0123456789abcdefghijkl"]}],
    "caddy_proxy_metrics_keys": ["secret-metrics-key-0123456789abcdefghij"],
    "caddy_proxy_api_keys": ["secret-api-key-0123456789abcdefghijklmnop"],
    "kimi_weights_hf_token": "hf_secretToken0123456789abcdefghijkl",
    "kimi_weights_peer_key": "secret-weights-peer-key-0123456789abcdef",
    "kimi_bench_api_key": "secret-bench-key-0123456789abcdefghijklm",
}


def secret_values():
    for value in SECRETS.values():
        for item in value if isinstance(value, list) else [value]:
            yield from item["keys"] if isinstance(item, dict) else [item]


def test_no_plan_or_preflight_output_carries_a_secret_value(tmp_path):
    """The plan, and a site.yml run through its preflight to a failure (the hub unreachable, after the keys were
    checked and the download planned with the token), print no secret variable's value."""
    names = {spec_file: [line for line in open(os.path.join(ROOT, spec_file)) if "no_log: true" in line]
             for spec_file in ("roles/caddy_proxy/meta/argument_specs.yml", "roles/kimi_weights/meta/argument_specs.yml",
                               "playbooks/vars/site_argument_specs.yml")}
    assert sum(len(lines) for lines in names.values()) == len(SECRETS)  # a new secret variable joins this table
    rc, plan = playbook("playbooks/plan.yml", "-e", RTX, "-e", "quant=int4", "-e", "engine=sglang",
                        "-e", json.dumps(SECRETS))
    assert rc == 0, plan
    inventory = local_inventory(tmp_path)
    # caddy_proxy_api_keys is the deprecated form of caddy_proxy_clients: one or the other (the plan took both)
    site_secrets = {name: value for name, value in SECRETS.items() if name != "caddy_proxy_api_keys"}
    rc, site = playbook("-i", str(inventory), "site.yml", "-e", RTX, "-e", "kimi_int4_revision=" + SHA,
                        "-e", json.dumps(site_secrets), "-e", "kimi_weights_endpoint=http://127.0.0.1:9",
                        "-e", "kimi_weights_hf_home=%s" % (tmp_path / "hf"))
    assert rc != 0 and "127.0.0.1:9" in site, site[-3000:]
    for value in secret_values():
        assert value not in plan and value not in site, value


def gateway_inventory(tmp_path, servers, gateway_vars=""):
    """group_inventory's servers (H200 x 8 each, sglang) and a host `gw` in kimi_gateways that serves nothing."""
    inventory = group_inventory(tmp_path, [(name, "h200-x8", dict({"ansible_host": "10.0.1.%d" % (11 + i)}, **extra))
                                           for i, (name, extra) in enumerate(servers)])
    inventory.write_text(inventory.read_text().replace(
        "all:\n  children:\n", "all:\n  children:\n    kimi_gateways:\n      hosts:\n        gw: {ansible_connection: "
        "local%s}\n" % gateway_vars))
    return inventory


def test_plan_prints_the_fleet_gateway_and_refuses_a_router_that_cannot_serve_the_fleet(tmp_path):
    """make plan FLEET=2 previews two hosts behind a gateway; plan.yml on an inventory with kimi_gateways resolves the
    gateway from every serving host's own variables; a router that does not serve the fleet's engine is refused, naming
    the variable and the router that does."""
    proc = subprocess.run(["make", "--no-print-directory", "plan", "GPUS=h200-x8", "FLEET=2", "ENGINE=sglang",
                           "QUANT=int4"], cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    flat = " ".join(proc.stdout.split())
    assert proc.returncode == 0, flat[-3000:]
    assert "router: SMG 1.13.0: the maintained gateway for every engine" in flat
    assert "worker: http://10.0.1.11:30000 (fleet-1, int4-sglang)" in flat and "http://10.0.1.12:30000" in flat
    assert ("gateway command: smg launch --worker-urls http://10.0.1.11:30000 "
            "http://10.0.1.12:30000 --policy cache_aware --host 127.0.0.1 --port 30090") in flat
    assert "--trust-tenant-header --tenant-header-name X-LLM-Client" in flat
    inventory = gateway_inventory(tmp_path, [("gpu1", {}), ("gpu2", {})])
    rc, out = playbook("-i", str(inventory), "playbooks/plan.yml", "-e", "quant=int4", "-e", "engine=sglang")
    assert rc == 0, out[-3000:]
    flat = re.sub(r"\s+", " ", out)
    assert "worker: http://10.0.1.12:30000 (gpu2, int4-sglang)" in flat and "must stay private" in flat
    assert "served model name: kimi-k2.6 on 10.0.1.11:30000" in flat  # the engine listens on the fleet's network
    rc, out = playbook("-i", str(inventory), "playbooks/plan.yml", "-e", "quant=int4", "-e", "engine=sglang",
                       "-e", "kimi_gateway_router=vllm-router")
    assert rc != 0
    assert ("kimi.deploy: kimi_gateway_router='vllm-router' is not allowed: vllm-router does not serve sglang (gpu1: "
            "int4-sglang, gpu2: int4-sglang). Allowed values: smg") in re.sub(r"\s+", " ", out), out[-3000:]


@pytest.mark.parametrize("canary, refusal", [
    ("1", "kimi_canary='1' is not allowed: a canary is compared with the rest of the fleet on the traffic of the fleet "
          "gateway, and the inventory has no host in kimi_gateways"),
    ("0", "kimi_canary='0' is not allowed. Allowed values: a count of replicas (1, 2, ...) or a percentage of them"),
])
def test_site_refuses_a_canary_without_a_gateway_or_of_no_replica(tmp_path, canary, refusal):
    inventory = replica_inventory(tmp_path, [("gpu1", {}), ("gpu2", {})])
    rc, out = site_on_h100s(inventory, "-e", "kimi_canary=" + canary, "-e", "kimi_allow_unfit=true")
    assert rc != 0
    assert refusal in re.sub(r"\s+", " ", out), out[-3000:]
    assert_nothing_changed(out, "gpu1", "gpu2")
