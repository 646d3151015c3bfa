"""`make demo` end to end: the README's first command, on its own demo host, as a user runs it.

One module-scoped demo host (instance kimi-demo-e2e, port 18443, state in build/e2e-demo: never the user's .demo),
driven through the Makefile targets in order: the first run prints a completion, a tool call and a vision answer
through Caddy over TLS; the endpoint answers from this machine with the key file and CA it names, and refuses a
request without a key; a second run changes nothing; --check --diff prints the plan of a switch and changes nothing;
a switch to vLLM is seen; a switch to NVFP4 builds its patched image and serves from it; NVFP4 refuses remote code that
is still symlinked before changing anything, and the weights stage repairs it; GPUS=b200-x8 swaps the host's GPUs and
TensorRT-LLM serves from the YAML the collection writes, a /dev/shm too small for it is refused before any change;
GPUS=ascend-a3-x16 makes it an Atlas 800 A3 that serves W4A8 on vLLM-Ascend, then on SGLang-Ascend; a switch back to
int4-sglang on the B200s works; demo-clean removes everything. The
tests depend on each other's order (pytest runs a module's tests in file order).
"""
import json
import os
import re
import ssl
import stat
import subprocess
import urllib.error
import urllib.request

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DIR = os.path.join(ROOT, "build", "e2e-demo")
INSTANCE = "kimi-demo-e2e"
PORT = 18443
ENV = dict(os.environ, KIMI_DEMO_DIR=DIR, KIMI_DEMO_INSTANCE=INSTANCE, KIMI_DEMO_PORT=str(PORT))
ENV.pop("ANSIBLE_CONFIG", None)
ENDPOINT = "https://localhost:%d/v1" % PORT


def make(*args, check=True):
    """Run a make target; .flat is its output with the callback's wrapped lines joined (long summary lines)."""
    proc = subprocess.run(["make", "--no-print-directory"] + list(args), cwd=ROOT, env=ENV, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, universal_newlines=True, timeout=900, check=False)
    if check and proc.returncode != 0:
        pytest.fail("make %s failed (rc=%d):\n%s" % (" ".join(args), proc.returncode, proc.stdout[-6000:]))
    proc.flat = re.sub(r"\n {6,}", " ", proc.stdout)
    return proc


def host(*cmd):
    return subprocess.run(["docker", "exec", INSTANCE] + list(cmd), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, check=True).stdout


def lines_of(output, prefix):
    return [line[len(prefix):].strip() for line in output.splitlines() if line.startswith(prefix)]


def request(path, key=None):
    ctx = ssl.create_default_context(cafile=os.path.join(DIR, "ca.crt"))
    headers = {"Authorization": "Bearer " + key} if key else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(ENDPOINT + path, headers=headers), context=ctx,
                                    timeout=30) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


def snapshot():
    """What a check-mode run must not touch: config files, units, the engine container, the service PIDs."""
    files = host("sh", "-c", "sha256sum /etc/kimi-k26.env /etc/kimi-k26/* /etc/systemd/system/kimi-k26.service "
                             "/etc/caddy/Caddyfile /etc/caddy/kimi-api-keys.caddy /usr/local/bin/kimi-k26-launch "
                             "2>/dev/null; ls -la --time-style=full-iso /etc/kimi-k26 /etc/caddy")
    services = host("systemctl", "show", "-p", "MainPID,ActiveEnterTimestamp", "kimi-k26", "caddy")
    containers = host("docker", "ps", "--no-trunc", "--format", "{{.ID}} {{.Image}} {{.Status}}")
    containers = re.sub(r"Up [^\n]*", "Up", containers)
    return files, services, containers


@pytest.fixture(scope="module")
def first_run():
    make("demo-clean")
    yield make("demo")
    make("demo-clean")


def test_first_run_prints_a_completion_a_tool_call_and_vision_through_caddy(first_run):
    out = first_run.stdout
    assert lines_of(out, "completion:")[0].startswith("HTTP 200")
    assert "Hello from the Kimi-K2.6 engine double (sglang)" in lines_of(out, "completion:")[0]
    assert re.search(r"get_weather\(.*Paris", lines_of(out, "tool call:")[0])
    assert "blue" in lines_of(out, "vision:")[0]
    assert lines_of(out, "no key:")[0].startswith("HTTP 401")
    assert "demo: first run: created %s" % INSTANCE in out
    last = out.rstrip().splitlines()[-4:]
    assert last[0] == "endpoint: " + ENDPOINT
    assert last[2] == "api key file: " + os.path.join(DIR, "client-key")
    assert last[3] == "ca: " + os.path.join(DIR, "ca.crt")


def test_site_yml_ends_with_one_summary_per_host(first_run):
    out = first_run.flat
    assert "%s: serving int4-sglang as kimi-k2.6 at https://localhost:443/v1" % INSTANCE in out
    assert re.search(r"verify through the proxy: health ok \d+ ms, models ok \d+ ms, text ok \d+ ms, tool ok \d+ ms, "
                     r"vision ok \d+ ms", out)
    assert re.search(r"verify on the engine: health ok \d+ ms", out)
    assert re.search(r"stages: preflight [\d.]+ s, nvidia_host [\d.]+ s, weights [\d.]+ s, image not needed, "
                     r"serve [\d.]+ s, proxy [\d.]+ s \(total [\d.]+ s\)", out)
    assert "why: quant=int4 engine=sglang: set by the user." in out


def test_the_key_is_generated_once_kept_private_and_never_printed(first_run):
    key_file = os.path.join(DIR, "client-key")
    key = open(key_file).read().strip()
    assert stat.S_IMODE(os.stat(key_file).st_mode) == 0o600
    assert len(key) >= 32 and key not in first_run.stdout
    assert key not in open(os.path.join(DIR, "converge.log")).read()
    assert "example-0123" not in key  # never the example inventory's published key


def test_the_endpoint_answers_this_machine_with_the_named_key_and_ca(first_run):
    key = open(os.path.join(DIR, "client-key")).read().strip()
    status, body = request("/models", key)
    assert status == 200 and [m["id"] for m in body["data"]] == ["kimi-k2.6"]
    status, body = request("/models")
    assert status == 401 and body["error"]["code"] == "invalid_api_key"
    status, body = request("/models", "kimi-demo-a-wrong-key-of-the-right-length-000")
    assert status == 401


def test_a_second_run_changes_nothing_and_says_so(first_run):
    out = make("demo").stdout
    assert "demo: second run: idempotent, changed=0 on every host" in out
    recap = out[out.rindex("PLAY RECAP"):]
    assert re.search(r"%s\s+: ok=\d+\s+changed=0\s+unreachable=0\s+failed=0" % INSTANCE, recap)


def test_check_diff_prints_the_plan_of_a_switch_and_changes_nothing(first_run):
    before = snapshot()
    proc = make("demo-plan", "QUANT=int4", "ENGINE=vllm")
    out = proc.flat
    assert "%s: PLAN (check mode, nothing was changed): int4-vllm as kimi-k2.6" % INSTANCE in out
    assert re.search(r"command: vllm serve moonshotai/Kimi-K2.6 .*--tensor-parallel-size 8", out)
    assert re.search(r"image: kimi-double/vllm-openai:v0.22.1", out)
    assert re.search(r"identity: int4-vllm .* from moonshotai/Kimi-K2.6@[0-9a-f]{40}", out)
    assert "/etc/kimi-k26/int4-vllm.args" in out and "/etc/kimi-k26.env" in out
    assert re.search(r"^\+FRAMEWORK=vllm$", proc.stdout, re.M)  # --diff of the env file
    assert re.search(r"^-FRAMEWORK=sglang$", proc.stdout, re.M)
    assert re.search(r"would change: [^']*/etc/kimi-k26/int4-vllm.args", out)
    assert snapshot() == before


def test_a_switch_to_vllm_is_one_command_and_the_cutover_is_seen(first_run):
    out = make("demo", "QUANT=int4", "ENGINE=vllm").flat
    assert "demo: cutover: %s switched from int4-sglang to int4-vllm" % INSTANCE in out
    assert "Hello from the Kimi-K2.6 engine double (vllm)" in lines_of(out, "completion:")[0]
    assert "served by vllm" in lines_of(out, "models:")[0]
    assert "model: kimi-k2.6 (int4-vllm on rtx-pro-6000-x8)" in out


def test_nvfp4_switches_through_the_image_it_builds_and_keeps_the_model_name(first_run):
    out = make("demo", "QUANT=nvfp4", "ENGINE=vllm").flat
    assert "demo: cutover: %s switched from int4-vllm to nvfp4-vllm" % INSTANCE in out
    assert re.search(r"image: kimi-k26-nvfp4-vllm:cu130-mla sha256:[0-9a-f]{12} \(built in [0-9.]+ s, FROM "
                     r"kimi-double/vllm-openai:v0\.22\.1-cu130; patch proved in the image: num_stages 1\)", out), out
    assert "Hello from the Kimi-K2.6 engine double (vllm)" in lines_of(out, "completion:")[0]
    assert "model: kimi-k2.6 (nvfp4-vllm on rtx-pro-6000-x8)" in out
    assert host("docker", "inspect", "-f", "{{.Config.Image}}", "kimi-k26").strip() == "kimi-k26-nvfp4-vllm:cu130-mla"
    proof = json.loads(host("docker", "exec", "kimi-k26", "python3", "/opt/kimi-image/kimi_vllm_patch.py", "prove"))
    assert proof["patched"] and proof["num_stages"] == 1
    assert "NvFp4 MoE backend" in host("journalctl", "-u", "kimi-k26", "--no-pager", "-o", "cat")


def test_nvfp4_refuses_symlinked_remote_code_before_any_change_and_the_weights_stage_repairs_it(first_run):
    snapshots = "/var/lib/kimi-k26/huggingface/hub/models--nvidia--Kimi-K2.6-NVFP4/snapshots"
    name = host("sh", "-c", "cd %s/* && ls *.py | head -n 1" % snapshots).strip()
    assert name
    host("sh", "-c", "cd %s/* && cp %s ../../blobs/kimi-test-%s && ln -sf ../../blobs/kimi-test-%s %s"
         % (snapshots, name, name, name, name))
    before = snapshot()
    proc = make("demo", "QUANT=nvfp4", "ENGINE=vllm", "ARGS=--skip-tags weights", check=False)
    assert proc.returncode != 0
    assert re.search(r'%s failed at the serve stage, in "Refuse to start with remote code that is still symlinked": '
                     r"nvfp4-vllm loads nvidia/Kimi-K2.6-NVFP4's remote code offline, and 1 snapshot \*\.py file\(s\) "
                     r"are still symlinks into blobs/: %s\." % (INSTANCE, re.escape(name)), proc.flat), proc.flat[-3000:]
    assert "Nothing was changed: the current deployment keeps serving" in proc.flat
    assert snapshot() == before
    out = make("demo", "QUANT=nvfp4", "ENGINE=vllm").flat
    assert "model: kimi-k2.6 (nvfp4-vllm on rtx-pro-6000-x8)" in out
    assert host("sh", "-c", "cd %s/* && stat -c %%F %s" % (snapshots, name)).strip() == "regular file"


def test_trtllm_on_b200_gpus_switches_the_host_and_answers_through_caddy(first_run):
    """make demo GPUS=b200-x8 QUANT=nvfp4 ENGINE=trtllm: the host's GPUs become 8 x B200, TensorRT-LLM's double serves
    from the YAML the collection wrote, and the answers come through Caddy (text, tool call, vision)."""
    out = make("demo", "GPUS=b200-x8", "QUANT=nvfp4", "ENGINE=trtllm").flat
    assert "demo: cutover: %s switched from nvfp4-vllm to nvfp4-trtllm" % INSTANCE in out
    assert "clients use the model name nvidia/Kimi-K2.6-NVFP4" in out
    assert lines_of(out, "completion:")[0].startswith("HTTP 200") and "(trtllm)" in lines_of(out, "completion:")[0]
    assert re.search(r"get_weather\(.*Paris", lines_of(out, "tool call:")[0])
    assert "blue" in lines_of(out, "vision:")[0]
    assert "model: nvidia/Kimi-K2.6-NVFP4 (nvfp4-trtllm on b200-x8)" in out
    assert "warning: TensorRT-LLM 1.3.0rc17 has no Kimi reasoning parser: the thinking comes back inside content" in out
    assert "<think>" in lines_of(out, "completion:")[0]  # what the warning says clients see
    assert "GPUs: 8 x NVIDIA B200" in out
    config = host("cat", "/etc/kimi-k26/nvfp4-trtllm.yaml")
    for line in ("tensor_parallel_size: 8", "moe_expert_parallel_size: 8", "enable_attention_dp: true",
                 "  dtype: fp8", "  free_gpu_memory_fraction: 0.75", "trust_remote_code: true"):
        assert line in config.splitlines(), config
    command = host("docker", "inspect", "-f", "{{json .Config.Cmd}}", "kimi-k26")
    assert json.loads(command)[:2] == ["trtllm-serve", "nvidia/Kimi-K2.6-NVFP4"]
    assert "--config" in command
    assert host("docker", "inspect", "-f", "{{.Config.Image}}", "kimi-k26").strip() == "kimi-double/tensorrt-llm:1.3.0rc17"
    assert "Application startup complete." in host("journalctl", "-u", "kimi-k26", "--no-pager", "-o", "cat")


def test_trtllm_refuses_a_dev_shm_too_small_before_any_change(first_run):
    before = snapshot()
    proc = make("demo", "QUANT=nvfp4", "ENGINE=trtllm", "ARGS=-e kimi_serve_shm_min_bytes=1099511627776", check=False)
    assert proc.returncode != 0
    assert re.search(r"%s: /dev/shm has [0-9.]+ [KMG]?B; TensorRT-LLM needs at least 1\.00 TB" % INSTANCE, proc.flat)
    assert "Nothing was changed" in proc.flat and snapshot() == before


def container(fmt):
    return json.loads(host("docker", "inspect", "-f", "{{json %s}}" % fmt, "kimi-k26"))


def test_ascend_a3_host_serves_w4a8_on_vllm_ascend_through_caddy(first_run):
    """make demo GPUS=ascend-a3-x16 QUANT=w4a8 ENGINE=vllm: the host's GPUs become an Atlas 800 A3's 16 NPUs (npu-smi
    double, driver files, device nodes), ascend_host prepares it, and vLLM-Ascend's double serves through Caddy with
    the NPUs given as devices and read-only driver mounts, its own /dev/shm and seed 004's environment."""
    out = make("demo", "GPUS=ascend-a3-x16", "QUANT=w4a8", "ENGINE=vllm").flat
    assert "demo: cutover: %s switched from nvfp4-trtllm to w4a8-vllm" % INSTANCE in out
    assert "Hello from the Kimi-K2.6 engine double (vllm)" in lines_of(out, "completion:")[0]
    assert re.search(r"get_weather\(.*Paris", lines_of(out, "tool call:")[0])
    assert "blue" in lines_of(out, "vision:")[0]
    assert "model: kimi-k2.6 (w4a8-vllm on ascend-a3-x16)" in out
    assert "NPUs: 16 x Ascend910 (ascend-a3), 1048576 MiB HBM in all, driver 25.2.1" in out
    assert re.search(r"stages: preflight [0-9.]+ s, ascend_host [0-9.]+ s, weights", out)
    assert container(".Config.Image") == "kimi-double/vllm-ascend:v0.20.2rc1-a3"
    command = container(".Config.Cmd")
    assert command[:5] == ["vllm", "serve", "Eco-Tech/Kimi-K2.6-W4A8", "--quantization", "ascend"]
    assert " ".join(command).count("--tensor-parallel-size 4 --data-parallel-size 4 --enable-expert-parallel") == 1
    hostconfig = container(".HostConfig")
    assert hostconfig["Privileged"] is False and hostconfig["IpcMode"] != "host"
    assert hostconfig["ShmSize"] == 1024 ** 3
    devices = [d["PathOnHost"] for d in hostconfig["Devices"]]
    controls = ["/dev/davinci_manager", "/dev/devmm_svm", "/dev/hisi_hdc"]
    assert devices == ["/dev/davinci%d" % n for n in range(16)] + controls
    assert "/usr/local/bin/npu-smi:/usr/local/bin/npu-smi:ro" in hostconfig["Binds"]
    assert "HCCL_OP_EXPANSION_MODE=AIV" in container(".Config.Env")
    # npu-smi inside the engine's container sees the 16 NPUs through the devices and mounts it was given.
    inside = host("docker", "exec", "kimi-k26", "npu-smi", "info")
    assert len(re.findall(r"^\| \d+ +Ascend910 ", inside, re.M)) == 16
    assert "sched_migration_cost_ns = 50000" in host("cat", "/etc/sysctl.d/90-ascend-host.conf")


def test_ascend_switches_to_sglang_ascend(first_run):
    out = make("demo", "QUANT=w4a8", "ENGINE=sglang").flat
    assert "demo: cutover: %s switched from w4a8-vllm to w4a8-sglang" % INSTANCE in out
    assert "Hello from the Kimi-K2.6 engine double (sglang)" in lines_of(out, "completion:")[0]
    assert "model: kimi-k2.6 (w4a8-sglang on ascend-a3-x16)" in out
    assert container(".Config.Image") == "kimi-double/sglang-ascend:v0.5.13.post1-cann9.0.0-a3"
    command = " ".join(container(".Config.Cmd"))
    assert "--quantization modelslim --tp-size 16 --dp-size 16 --enable-dp-attention --ep-size 16" in command
    assert container(".HostConfig.ShmSize") == 16 * 1024 ** 3
    assert "SGLANG_NPU_USE_MLAPO=1" in container(".Config.Env")


def test_a_switch_back_to_int4_sglang_works_on_the_same_gpus(first_run):
    out = make("demo", "GPUS=b200-x8", "QUANT=int4", "ENGINE=sglang").flat
    assert "demo: cutover: %s switched from w4a8-sglang to int4-sglang" % INSTANCE in out
    assert "Hello from the Kimi-K2.6 engine double (sglang)" in lines_of(out, "completion:")[0]
    assert "model: kimi-k2.6 (int4-sglang on b200-x8)" in out
    assert host("sh", "-c", "ls /etc/kimi-k26/").split().count("nvfp4-trtllm.yaml") == 1  # kept for a switch back


def test_demo_clean_removes_everything_the_demo_made(first_run):
    volumes = json.loads(subprocess.run(["docker", "inspect", "-f", "{{json .Mounts}}", INSTANCE],
                                        stdout=subprocess.PIPE, universal_newlines=True, check=True).stdout)
    anonymous = [m["Name"] for m in volumes if m.get("Type") == "volume"]
    assert anonymous  # the nested /var/lib/docker
    out = make("demo-clean").stdout
    assert "removed the demo host %s" % INSTANCE in out
    assert subprocess.run(["docker", "inspect", INSTANCE], stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL, check=False).returncode != 0
    for name in anonymous:
        assert subprocess.run(["docker", "volume", "inspect", name], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, check=False).returncode != 0
    assert not os.path.exists(DIR)
