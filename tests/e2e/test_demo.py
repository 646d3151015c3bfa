"""`make demo` end to end: the README's first command, on its own demo host, as a user runs it.

One module-scoped demo host (instance kimi-demo-e2e, port 18443, state in .demo/e2e: under the git-ignored .demo as
a user's demo state is, apart from the user's own files, as demo-clean removes only its KIMI_DEMO_DIR), driven through
the Makefile targets in order: the first run prints a completion, a tool call and a vision answer through Caddy over
TLS; the endpoint answers from this machine with the key file and CA it names, and refuses a request without a key;
every metrics path answers the metrics key only, the exporters on loopback; the host's real Prometheus scrapes it
through Caddy and fires KimiEngineDown when the engine stops; a second run changes nothing; yamllint --strict . passes
beside the demo's state (the README's make demo, then make test); make demo-bench runs aiperf through Caddy into JSON
and PNG; --check --diff prints the plan of a switch; a switch gated by
kimi_bench_min_ratio rolls back; a switch to vLLM is seen; a switch to NVFP4 builds its patched image and serves from
it; NVFP4 refuses remote code that is still symlinked before changing anything; GPUS=b200-x8 swaps the host's GPUs,
the weights stage repairs that remote code, and TensorRT-LLM serves from the YAML the collection writes (its /dev/shm
refusal is proven by tests/integration); on the B200s, a switch to int4-vllm whose answers drop past kimi_verify_max_drop
is rolled back naming nvfp4-trtllm, the identity compared with, and one within the margin serves two instances with the
KV host tier and the loader the read test picked; GPUS=ascend-a3-x16 makes it an Atlas 800 A3 that serves W4A8 on vLLM-Ascend, then
on SGLang-Ascend; MODEL=kimi-k3 on 8 x B300 switches the model (SGLang 0.5.23, its kimi_k3 parsers: a tool call and a
reasoning split through Caddy); a switch back to Kimi-K2.6's int4-sglang on the B200s with EAGLE-3 speculative decoding (a draft repo on the fake hub) answers
through Caddy and reports its acceptance; every series the dashboard names was scraped;
demo-clean removes everything. The tests depend on each other's order (pytest runs a module's tests in file order).
"""
import json
import os
import re
import ssl
import stat
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DIR = os.path.join(ROOT, ".demo", "e2e")  # git-ignored by .gitignore's .demo/, as the user's demo state is
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
    assert lines_of(out, "endpoint:") == [ENDPOINT]
    assert lines_of(out, "api key file:") == [os.path.join(DIR, "client-key")]
    assert lines_of(out, "ca:") == [os.path.join(DIR, "ca.crt")]
    assert lines_of(out, "metrics:") == ["https://localhost:%d/metrics (key file: %s; also /metrics/node, "
                                         "/metrics/accelerator, /metrics/caddy)" % (PORT, os.path.join(DIR, "metrics-key"))]


def test_site_yml_ends_with_one_summary_per_host(first_run):
    out = first_run.flat
    assert "%s: serving int4-sglang as kimi-k2.6 at https://localhost:443/v1" % INSTANCE in out
    assert re.search(r"verify through the proxy: health ok \d+ ms, models ok \d+ ms, text ok \d+ ms, tool ok \d+ ms, "
                     r"vision ok \d+ ms", out)
    assert re.search(r"verify on the engine: health ok \d+ ms", out)
    assert re.search(r"stages: preflight [\d.]+ s, host [\d.]+ s, weights [\d.]+ s, image not needed, "
                     r"serve [\d.]+ s, metrics [\d.]+ s, proxy [\d.]+ s \(total [\d.]+ s\)", out)
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


def metrics(path, key):
    """GET a metrics path through Caddy: (status, text)."""
    ctx = ssl.create_default_context(cafile=os.path.join(DIR, "ca.crt"))
    req = urllib.request.Request("https://localhost:%d%s" % (PORT, path),
                                 headers={"Authorization": "Bearer " + key} if key else {})
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=30) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def prometheus(path):
    """The demo host's Prometheus API (loopback in the host)."""
    return json.loads(host("curl", "-sf", "http://127.0.0.1:9090" + path))


def wait_for(what, check, timeout=120, every=3):
    deadline = time.time() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.time() > deadline:
            pytest.fail("timed out after %d s waiting for %s" % (timeout, what))
        time.sleep(every)


def test_every_metrics_path_answers_the_metrics_key_only(first_run):
    """The engine's, the node exporter's, the GPU exporter's (dcgm-exporter double) and Caddy's own series, through
    Caddy with the metrics key; 401 without a key and with the client's API key; the exporters bind loopback only."""
    key = open(os.path.join(DIR, "metrics-key")).read().strip()
    client = open(os.path.join(DIR, "client-key")).read().strip()
    expected = {"/metrics": "sglang:num_running_reqs", "/metrics/node": "node_filesystem_avail_bytes",
                "/metrics/accelerator": "DCGM_FI_DEV_GPU_TEMP", "/metrics/caddy": "caddy_http_request"}
    for path, name in expected.items():
        status, text = metrics(path, key)
        assert status == 200 and name in text, (path, status, text[:300])
        assert metrics(path, None)[0] == 401
        assert metrics(path, client)[0] == 401
    status, text = metrics("/metrics/node", key)
    info = [line for line in text.splitlines() if line.startswith("kimi_deployment_info{")]
    assert len(info) == 1 and 'identity="int4-sglang"' in info[0] and 'engine_version="0.5.12.post1"' in info[0], info
    assert re.search(r'^kimi_verify_success\{identity="int4-sglang"\} 1$', text, re.M)
    assert re.search(r'^kimi_weights_filesystem_info\{mountpoint="[^"]+"\} 1$', text, re.M)
    assert re.search(r'^kimi_deployment_hour_cost\{accelerators="8 x NVIDIA RTX PRO 6000 Blackwell Server Edition",'
                     r'replica=""\} 15\.2$', text, re.M), text
    listening = host("ss", "-Htln")
    for port in (9100, 9400, 9090):
        assert re.search(r"127\.0\.0\.1:%d\b" % port, listening), listening
        assert not re.search(r"(0\.0\.0\.0|\*|\[::\]):%d\b" % port, listening), listening
    assert key not in open(os.path.join(DIR, "converge.log")).read() and key not in first_run.stdout


def test_prometheus_scrapes_the_host_through_caddy_with_the_metrics_key(first_run):
    """The distribution's Prometheus on the demo host (group kimi_monitoring) scrapes every job through Caddy."""
    def targets():
        active = prometheus("/api/v1/targets?state=active")["data"]["activeTargets"]
        up = sorted(t["labels"]["job"] for t in active if t["health"] == "up" and t["labels"]["job"].startswith("kimi-"))
        return up if up == ["kimi-accelerator", "kimi-caddy", "kimi-engine", "kimi-node"] else None
    wait_for("every kimi job up in Prometheus", targets, timeout=60)
    active = prometheus("/api/v1/targets?state=active")["data"]["activeTargets"]
    assert {t["scrapeUrl"] for t in active if t["labels"]["job"].startswith("kimi-")} == {
        "https://localhost:443/metrics", "https://localhost:443/metrics/node",
        "https://localhost:443/metrics/accelerator", "https://localhost:443/metrics/caddy"}
    assert {t["labels"]["instance"] for t in active} == {INSTANCE}
    info = prometheus("/api/v1/query?query=kimi_deployment_info")["data"]["result"]
    assert [r["metric"]["identity"] for r in info] == ["int4-sglang"]
    config = host("cat", "/etc/prometheus/prometheus.yml")
    assert "credentials_file: /etc/prometheus/kimi-keys/kimi-metrics-" in config
    assert open(os.path.join(DIR, "metrics-key")).read().strip() not in config
    assert host("stat", "-c", "%a %U %G", "/etc/prometheus/kimi-keys").split() == ["750", "root", "prometheus"]
    rules = prometheus("/api/v1/rules")["data"]["groups"]
    names = {r["name"] for g in rules for r in g["rules"]}
    assert {"KimiEngineDown", "KimiVerifyFailing", "KimiKVCacheAlmostFull", "KimiQueueGrowing", "KimiGPUTooHot",
            "KimiWeightsDiskAlmostFull", "KimiReplicaMemberLost"} <= names


def test_stopping_the_engine_fires_engine_down_in_prometheus(first_run):
    host("systemctl", "stop", "kimi-k26")
    try:
        def firing():
            alerts = prometheus("/api/v1/alerts")["data"]["alerts"]
            return [a for a in alerts if a["labels"]["alertname"] == "KimiEngineDown" and a["state"] == "firing"]
        alert = wait_for("KimiEngineDown firing", firing, timeout=120)[0]
        assert alert["labels"]["instance"] == INSTANCE and alert["labels"]["severity"] == "critical"
    finally:
        host("systemctl", "start", "kimi-k26")
    wait_for("the engine to answer again", lambda: request("/models", open(os.path.join(DIR, "client-key")).read()
                                                           .strip())[0] == 200, timeout=120)
    wait_for("KimiEngineDown to resolve", lambda: not [
        a for a in prometheus("/api/v1/alerts")["data"]["alerts"] if a["labels"]["alertname"] == "KimiEngineDown"],
        timeout=90)


def test_a_second_run_changes_nothing_and_says_so(first_run):
    out = make("demo").stdout
    assert "demo: second run: idempotent, changed=0 on every host" in out
    recap = out[out.rindex("PLAY RECAP"):]
    assert re.search(r"%s\s+: ok=\d+\s+changed=0\s+unreachable=0\s+failed=0" % INSTANCE, recap)


def test_yamllint_passes_beside_the_demo_state(first_run):
    """The README's order, make demo then make test: the lint step of make test (tests/run-all.sh: yamllint --strict .
    from the checkout's root) passes while the demo's state exists, although molecule wrote its molecule.yml there
    with this checkout's absolute path in it (issue 50: .yamllint reads its ignores from .gitignore)."""
    assert os.path.isfile(os.path.join(DIR, "molecule", "molecule.yml"))
    proc = subprocess.run([os.path.join(ROOT, ".venv", "bin", "yamllint"), "--strict", "."], cwd=ROOT,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True, timeout=300,
                          check=False)
    assert proc.returncode == 0, proc.stdout[-6000:]


def bench_lines(out):
    json_path, png_path = lines_of(out, "bench json:")[0], lines_of(out, "bench png:")[0]
    return json_path, png_path


def test_demo_bench_runs_aiperf_through_caddy_and_writes_json_and_png(first_run):
    """make demo-bench: a real aiperf sweep (1, 2, 4) against the engine double through Caddy; the summary JSON and the
    plot land in the demo folder. (A next run's comparison with the last run of the same identity is proven in
    tests/integration/test_serve_bench.py, the module's own test, through a TLS proxy that checks the key.)"""
    out = make("demo-bench").flat
    json_path, png_path = bench_lines(out)
    assert json_path.startswith(os.path.join(DIR, "bench") + "/") and os.path.isfile(json_path)
    assert open(png_path, "rb").read(8) == b"\x89PNG\r\n\x1a\n"
    summary = json.load(open(json_path))
    assert summary["identity"] == "int4-sglang" and summary["host"] == INSTANCE
    assert summary["client"]["name"] == "aiperf"
    assert [level["concurrency"] for level in summary["levels"]] == [1, 2, 4]
    assert all(level["requests_ok"] == 8 and level["output_tokens_per_s"] > 0 for level in summary["levels"])
    assert "no baseline" in out
    # kimi_gpu_hour_cost (molecule/demo: 1.9 per RTX PRO 6000 hour) x 8 GPUs over each level's tokens of an hour
    assert summary["hour_cost"] == 15.2
    for level in summary["levels"]:
        assert level["cost_per_million_output_tokens"] == pytest.approx(
            15.2 / (level["output_tokens_per_s"] * 3600) * 1e6, rel=1e-4)
    assert "cost per million output tokens" in out and "(15.2 per hour)" in out
    key = open(os.path.join(DIR, "client-key")).read().strip()
    assert key not in out and key not in open(json_path).read()


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


def test_a_bench_gate_below_the_minimum_rolls_the_switch_back(first_run):
    baseline = sorted(p for p in os.listdir(os.path.join(DIR, "bench")) if p.endswith(".json"))[-1]
    proc = make("demo", "QUANT=int4", "ENGINE=vllm", "ARGS=-e kimi_bench_min_ratio=1000 -e kimi_bench_baseline=%s"
                % os.path.join(DIR, "bench", baseline), check=False)
    assert proc.returncode != 0
    assert re.search(r"int4-vllm failed on %s \(Run the sweep through the proxy with aiperf, and compare: host %s: "
                     r"output throughput ratio [0-9.e+-]+ is below min_ratio 1000(\.0)? .*\)\. Rolled back: "
                     r"int4-sglang .* is serving again and passed verify" % (INSTANCE, INSTANCE), proc.flat), \
        proc.flat[-3000:]
    assert host("sh", "-c", ". /etc/kimi-k26.env && echo $QUANT-$FRAMEWORK").strip() == "int4-sglang"
    key = open(os.path.join(DIR, "client-key")).read().strip()
    assert request("/models", key)[0] == 200
    text = metrics("/metrics/node", open(os.path.join(DIR, "metrics-key")).read().strip())[1]
    assert re.search(r'^kimi_verify_success\{identity="int4-vllm"\} 0$', text, re.M)


def test_nvfp4_switches_through_the_image_it_builds_and_keeps_the_model_name(first_run):
    out = make("demo", "QUANT=nvfp4", "ENGINE=vllm").flat
    # From int4-sglang: the int4-vllm switch is proven by the bench gate above (vLLM started and passed verify before
    # the gate rolled it back) and by molecule/fleet (a host switched to int4-vllm answers as vLLM through Caddy).
    assert "demo: cutover: %s switched from int4-sglang to nvfp4-vllm" % INSTANCE in out
    assert "served by vllm" in lines_of(out, "models:")[0]
    assert re.search(r"image: kimi-k26-nvfp4-vllm:cu130-mla sha256:[0-9a-f]{12} \(built in [0-9.]+ s, FROM "
                     r"kimi-double/vllm-openai:v0\.22\.1-cu130; patch proved in the image: num_stages 1\)", out), out
    assert "Hello from the Kimi-K2.6 engine double (vllm)" in lines_of(out, "completion:")[0]
    assert "model: kimi-k2.6 (nvfp4-vllm on rtx-pro-6000-x8)" in out
    assert host("docker", "inspect", "-f", "{{.Config.Image}}", "kimi-k26").strip() == "kimi-k26-nvfp4-vllm:cu130-mla"
    proof = json.loads(host("docker", "exec", "kimi-k26", "python3", "/opt/kimi-image/kimi_vllm_patch.py", "prove"))
    assert proof["patched"] and proof["num_stages"] == 1
    assert "NvFp4 MoE backend" in host("journalctl", "-u", "kimi-k26", "--no-pager", "-o", "cat")


def test_nvfp4_refuses_symlinked_remote_code_before_any_change(first_run):
    snapshots = "/var/lib/kimi-k26/huggingface/hub/models--nvidia--Kimi-K2.6-NVFP4/snapshots"
    name = host("sh", "-c", "cd %s/* && ls *.py | head -n 1" % snapshots).strip()
    assert name
    host("sh", "-c", "cd %s/* && cp %s ../../blobs/kimi-test-%s && ln -sf ../../blobs/kimi-test-%s %s"
         % (snapshots, name, name, name, name))
    before = snapshot()
    # The serve stage alone (--tags serve, with the preflight that always runs): the refusal is the serve stage's.
    proc = make("demo", "QUANT=nvfp4", "ENGINE=vllm", "ARGS=--tags serve", check=False)
    assert proc.returncode != 0
    assert re.search(r'%s failed at the serve stage, in "Refuse to start with remote code that is still symlinked": '
                     r"nvfp4-vllm loads nvidia/Kimi-K2.6-NVFP4's remote code offline, and 1 snapshot \*\.py file\(s\) "
                     r"are still symlinks into blobs/: %s\." % (INSTANCE, re.escape(name)), proc.flat), proc.flat[-3000:]
    assert "Nothing was changed: the current deployment keeps serving" in proc.flat
    assert snapshot() == before
    # The next converge's weights stage repairs it: the TensorRT-LLM switch below, on the same checkpoint, checks.
    SYMLINKED.append((snapshots, name))


SYMLINKED = []  # (snapshots folder, file) a test left symlinked for the next converge's weights stage to repair


def test_trtllm_on_b200_gpus_switches_the_host_repairs_the_remote_code_and_answers_through_caddy(first_run):
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
    # The remote code the test before left symlinked: this converge's weights stage made it a real file again.
    for snapshots, name in SYMLINKED:
        assert host("sh", "-c", "cd %s/* && stat -c %%F %s" % (snapshots, name)).strip() == "regular file"


def container(fmt):
    return json.loads(host("docker", "inspect", "-f", "{{json %s}}" % fmt, "kimi-k26"))


def fault_knobs(**knobs):
    """make demo ARGS giving this run's engine double fault knobs (molecule/demo/converge.yml's kimi_test_fleet_env),
    written without spaces: demo.sh splits ARGS into words."""
    return "-e " + json.dumps({"kimi_test_fleet_env": {INSTANCE: knobs}}, separators=(",", ":"))


def test_an_accuracy_drop_past_max_drop_rolls_the_switch_back_naming_the_identity_compared_with(first_run):
    """The accuracy gate's A/B end to end: int4-vllm's double breaks the schema of 1 tool call in 5
    (KIMI_DOUBLE_TOOL_ERROR_RATE), above the absolute floor given (50%) but 20 points below nvfp4-trtllm, the identity it
    replaces, on the same probes: rolled back, the output naming the drop and the identity compared with."""
    proc = make("demo", "QUANT=int4", "ENGINE=vllm", "ARGS=%s -e kimi_verify_min_schema_accuracy=50 "
                "-e kimi_verify_max_drop=5" % fault_knobs(KIMI_DOUBLE_TOOL_ERROR_RATE="0.2"), check=False)
    assert proc.returncode != 0
    drop = re.search(r"the accuracy gate failed for int4-vllm: schema accuracy ([0-9.]+)% is ([0-9.]+) points below "
                     r"([0-9.]+)% of nvfp4-trtllm \(at most 5\.0 allowed\)", proc.flat)
    assert drop, proc.flat[-4000:]
    assert 50 < float(drop.group(1)) < 95 and float(drop.group(3)) == 100.0
    assert re.search(r"Rolled back: nvfp4-trtllm .* is serving again and passed verify", proc.flat), proc.flat[-3000:]
    assert host("sh", "-c", ". /etc/kimi-k26.env && echo $QUANT-$FRAMEWORK").strip() == "nvfp4-trtllm"


def test_two_instances_the_kv_host_tier_and_the_read_tests_loader_serve_within_the_accuracy_margin(first_run):
    """One switch with the serve-faster features together, on the B200s: two vLLM instances (kimi_instances=2: TP4 x
    DP2), the KV host tier sized from the server's RAM (the B200 profile's 2 TB, a meminfo double), and the weight
    loader picked from the preflight's read test (its probe file, measured again). Each is asserted in the double's
    argv and in what it serves. Its double breaks 1 tool call in 20: within kimi_verify_max_drop of nvfp4-trtllm, so
    the gate passes it, comparing with that identity."""
    started = int(time.time())
    proc = make("demo", "QUANT=int4", "ENGINE=vllm", "ARGS=-e kimi_instances=2 -e kimi_kv_offload=host "
                "-e kimi_weights_read_test_write=true -e kimi_weights_read_test_refresh=true "
                "-e kimi_weights_read_test_bytes=268435456 -e kimi_verify_min_schema_accuracy=80 "
                "-e kimi_verify_max_drop=10 %s" % fault_knobs(KIMI_DOUBLE_TOOL_ERROR_RATE="0.05"))
    out = proc.flat
    assert "demo: cutover: %s switched from nvfp4-trtllm to int4-vllm" % INSTANCE in out
    accuracy = re.search(r"accuracy: " + INSTANCE + r" int4-vllm: schema accuracy ([0-9.]+)%.*; nvfp4-trtllm had "
                         r"100\.00% and [0-9.]+%", out)
    assert accuracy and 90 <= float(accuracy.group(1)) < 100, out[-4000:]
    command = container(".Config.Cmd")
    line = " ".join(command)
    # two instances: vLLM's data parallelism, and one series child per engine index
    assert "--tensor-parallel-size 4 --data-parallel-size 2" in line, line
    text = metrics("/metrics", open(os.path.join(DIR, "metrics-key")).read().strip())[1]
    for index in ("0", "1"):
        answered = re.search(r'^vllm:request_success_total\{[^}]*engine="%s"[^}]*finished_reason="stop"\} ([0-9.]+)$'
                             % index, text, re.M)
        assert answered and float(answered.group(1)) > 0, text[:3000]
    # the KV host tier: sized from the server's RAM (not the CI machine's), and the connector's series
    memtotal = int(host("awk", "$1 == \"MemTotal:\" {print $2}", "/proc/meminfo"))
    assert memtotal == 2 * 1024 ** 3, memtotal  # kB: the B200 profile's 2 TB
    size = command[command.index("--kv-offloading-size") + 1]
    assert command[command.index("--kv-offloading-backend") + 1] == "native" and int(size) > 64, line
    assert re.search(r"^vllm:external_prefix_cache_queries_total\{", text, re.M), text[:3000]
    # the loader: the one the rule picks for the rate the read test measured and kept on the host
    sys.path.insert(0, os.path.join(ROOT, ".collections"))
    from ansible_collections.kimi.deploy.plugins.module_utils._engines.registry import ENGINES
    from ansible_collections.kimi.deploy.plugins.module_utils._model import loader
    rate = json.loads(host("cat", "/var/lib/kimi-k26/weights-read-test.json"))["result"]["read_mbps"]
    assert re.search(r"weights disk [^:]+: %.0f MB/s sequential \([a-z_]+, 256 MiB\), measured now" % rate, out), out[-4000:]
    chosen = loader.choose(ENGINES["vllm"], "0.22.1", None, rate)
    assert re.search(r"the weights disk reads %.0f MB/s sequentially \(preflight read test\)" % rate, out), out[-4000:]
    assert ("--load-format %s" % chosen["format"] in line) == bool(chosen["format"]), (rate, chosen, line)
    assert ("--load-format" in line) == bool(chosen["format"]), (rate, chosen, line)
    logged = host("journalctl", "-u", "kimi-k26", "--no-pager", "-o", "cat", "--since", "@%d" % started)
    assert ("Weight loader: load_format=%s" % chosen["format"] in logged) == bool(chosen["format"]), logged[-2000:]


def test_ascend_a3_host_serves_w4a8_on_vllm_ascend_through_caddy(first_run):
    """make demo GPUS=ascend-a3-x16 QUANT=w4a8 ENGINE=vllm: the host's GPUs become an Atlas 800 A3's 16 NPUs (npu-smi
    double, driver files, device nodes), ascend_host prepares it, and vLLM-Ascend's double serves through Caddy with
    the NPUs given as devices and read-only driver mounts, its own /dev/shm and seed 004's environment."""
    out = make("demo", "GPUS=ascend-a3-x16", "QUANT=w4a8", "ENGINE=vllm").flat
    assert "demo: cutover: %s switched from int4-vllm to w4a8-vllm" % INSTANCE in out
    assert "Hello from the Kimi-K2.6 engine double (vllm)" in lines_of(out, "completion:")[0]
    assert re.search(r"get_weather\(.*Paris", lines_of(out, "tool call:")[0])
    assert "blue" in lines_of(out, "vision:")[0]
    assert "model: kimi-k2.6 (w4a8-vllm on ascend-a3-x16)" in out
    assert "NPUs: 16 x Ascend910 (ascend-a3), 1048576 MiB HBM in all, driver 25.2.1" in out
    assert re.search(r"stages: preflight [0-9.]+ s, host [0-9.]+ s, weights", out)
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
    # SGLang-Ascend's own parsers (--tool-call-parser kimi_k2, --reasoning-parser kimi_k2): a tool call in tool_calls,
    # the thinking in reasoning_content and none of it in the answer
    assert re.search(r"get_weather\(.*Paris", lines_of(out, "tool call:")[0])
    assert lines_of(out, "reasoning:") and "<think>" not in lines_of(out, "completion:")[0]
    command = " ".join(container(".Config.Cmd"))
    assert "--tool-call-parser kimi_k2" in command and "--reasoning-parser kimi_k2" in command
    assert container(".Config.Image") == "kimi-double/sglang-ascend:v0.5.13.post1-cann9.0.0-a3"
    command = " ".join(container(".Config.Cmd"))
    assert "--quantization modelslim --tp-size 16 --dp-size 16 --enable-dp-attention --ep-size 16" in command
    assert container(".HostConfig.ShmSize") == 16 * 1024 ** 3
    assert "SGLANG_NPU_USE_MLAPO=1" in container(".Config.Env")


def test_kimi_k3_on_b300_gpus_is_a_model_switch_that_answers_a_tool_call_and_a_reasoning_split(first_run):
    """make demo MODEL=kimi-k3 GPUS=b300-x8: another model is an identity switch. The host's NPUs become 8 x B300, the
    K3-shaped checkpoint comes from the fake hub, SGLang 0.5.23's double (the first release that serves K3) runs it with
    its kimi_k3 parsers, the verify gate leaves out the thinking-off answer K3 cannot give, and the client gets the tool
    call in tool_calls and the reasoning apart from the answer, through Caddy."""
    out = make("demo", "MODEL=kimi-k3", "GPUS=b300-x8").flat
    assert "demo: cutover: %s switched from w4a8-sglang to mxfp4-sglang" % INSTANCE in out
    assert "Hello from the Kimi-K3 engine double (sglang)" in lines_of(out, "completion:")[0]
    assert re.search(r"get_weather\(.*Paris", lines_of(out, "tool call:")[0])
    assert "(apart from the answer)" in lines_of(out, "reasoning:")[0]
    assert "model: kimi-k3 (mxfp4-sglang on b300-x8)" in out
    # No text_no_thinking between text and tool (Kimi-K2.6's gate runs it there)
    assert re.search(r"verify on the engine: health ok \d+ ms, models ok \d+ ms, text ok \d+ ms, tool ok", out), out
    assert container(".Config.Image") == "kimi-double/sglang:v0.5.23-cu130"
    command = " ".join(container(".Config.Cmd"))
    assert "moonshotai/Kimi-K3" in command
    assert "--tool-call-parser kimi_k3" in command and "--reasoning-parser kimi_k3" in command


def test_a_switch_back_to_int4_sglang_with_eagle3_speculation_answers_through_caddy(first_run):
    """make demo GPUS=b200-x8 QUANT=int4 ENGINE=sglang SPEC=eagle3: back to int4-sglang on the same GPUs, speculating.
    The known EAGLE-3 draft (a small repo on the fake hub) is fetched, pinned and verified beside the checkpoint,
    SGLang's double loads it from the offline cache, the verify gate reads the acceptance from the engine's metrics,
    and the answers come through Caddy."""
    out = make("demo", "GPUS=b200-x8", "QUANT=int4", "ENGINE=sglang", "SPEC=eagle3").flat
    assert "demo: cutover: %s switched from mxfp4-sglang to int4-sglang" % INSTANCE in out
    assert "Hello from the Kimi-K2.6 engine double (sglang)" in lines_of(out, "completion:")[0]
    assert re.search(r"get_weather\(.*Paris", lines_of(out, "tool call:")[0])
    assert "model: kimi-k2.6 (int4-sglang on b200-x8)" in out and "speculative decoding: eagle3" in out
    assert host("sh", "-c", "ls /etc/kimi-k26/").split().count("nvfp4-trtllm.yaml") == 1  # kept for a switch back
    draft = "/var/lib/kimi-k26/huggingface/hub/models--AQ-MedAI--Kimi-K26-eagle3/snapshots/"
    assert re.search(r"draft weights: 4 files, 0\.0 GB in %s[0-9a-f]{40} \([0-9.]+ GB fetched, verified: True\)"
                     % re.escape(draft), out), out[-4000:]
    assert re.search(r"speculative: eagle3 \(EAGLE3\) with AQ-MedAI/Kimi-K26-eagle3@[0-9a-f]{12}, 3 steps, topk 1, 4 "
                     r"draft tokens verified; verify saw acceptance rate \d+%, mean accepted length [0-9.]+", out), out
    assert re.search(r"verify on the engine: .*speculative ok \d+ ms", out)
    command = " ".join(container(".Config.Cmd"))
    assert re.search(r"--speculative-algorithm EAGLE3 --speculative-draft-model-path AQ-MedAI/Kimi-K26-eagle3 "
                     r"--speculative-draft-model-revision [0-9a-f]{40} --speculative-num-steps 3 "
                     r"--speculative-eagle-topk 1 --speculative-num-draft-tokens 4", command), command
    text = metrics("/metrics", open(os.path.join(DIR, "metrics-key")).read().strip())[1]
    assert re.search(r"^sglang:spec_accept_length\{.*\} [0-9.]+$", text, re.M), text[:2000]


def test_answers_turned_to_garbage_fire_kimi_answers_wrong_in_prometheus(first_run):
    """The serving-time probe (kimi-k26-probe.timer, every 10 s here) asks the engine a slice of the accuracy probes;
    once the engine's answers turn to garbage in service (the double restarted on the host with
    KIMI_DOUBLE_GARBAGE_AFTER=0, as a drift after hours would) its kimi_probe_accuracy falls and the real Prometheus
    fires KimiAnswersWrong for the host and the identity. Before, the accuracy gate passed the identity and stored its
    figures."""
    stored = json.loads(host("cat", "/var/lib/kimi-k26/accuracy/int4-sglang.json"))
    assert stored["failed_cases"] == 0 and stored["cases"] >= 60
    assert host("systemctl", "is-active", "kimi-k26-probe.timer").strip() == "active"
    host("sh", "-c", "echo KIMI_DOUBLE_GARBAGE_AFTER=0 >> /etc/kimi-k26/container.env && systemctl restart kimi-k26")

    def firing():
        alerts = prometheus("/api/v1/alerts")["data"]["alerts"]
        return [a for a in alerts if a["labels"]["alertname"] == "KimiAnswersWrong" and a["state"] == "firing"]
    alert = wait_for("KimiAnswersWrong firing", firing, timeout=180, every=5)[0]
    assert alert["labels"]["instance"] == INSTANCE and alert["labels"]["identity"] == "int4-sglang"
    assert alert["labels"]["severity"] == "critical"
    text = metrics("/metrics/node", open(os.path.join(DIR, "metrics-key")).read().strip())[1]
    failures = re.search(r'^kimi_probe_failures_total\{identity="int4-sglang"\} ([0-9]+)$', text, re.M)
    assert failures and int(failures.group(1)) > 0, text[-2000:]
    assert "failing: " in host("journalctl", "-u", "kimi-k26-probe", "-n", "50", "--no-pager")


def test_the_dashboard_names_only_series_prometheus_scraped(first_run):
    """Every series the Grafana dashboard queries is one the demo's Prometheus scraped while the demo served SGLang,
    vLLM, TensorRT-LLM and the Ascend engines (the engine-specific alternatives of each panel included). The usage
    panels' series come from a fleet gateway's usage tap, which the demo host is not: molecule/fleet's verify checks
    those names against the tap it runs. The KV host tier's series (the engines' data, kv_offload.metrics) exist only
    with kimi_kv_offload host: the demo served it on vLLM only (the B200 profile's RAM); tests/unit/test_dashboard.py
    checks the others against the doubles' exposition with the tier on."""
    sys.path.insert(0, os.path.join(ROOT, "tests", "unit"))
    from test_dashboard import dashboard_metric_names
    from ansible_collections.kimi.deploy.plugins.module_utils._engines.registry import ENGINES
    scraped = set(prometheus("/api/v1/label/__name__/values")["data"])
    names = dashboard_metric_names(os.path.join(ROOT, "roles", "kimi_monitoring", "files", "kimi-k26-dashboard.json"))
    gateway = set(name for name in names if name.startswith("kimi_usage_"))
    tier = set(series.split("{", maxsplit=1)[0] for spec in ENGINES.values() if spec.get("kv_offload")
               for series in spec["kv_offload"].get("metrics", {}).values()) - scraped
    assert tier and tier <= names, (tier, names)
    missing = sorted(names - gateway - tier - scraped)
    assert names and len(gateway) == 3 and not missing, missing


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
