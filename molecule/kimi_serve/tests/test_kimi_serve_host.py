"""Host state after kimi_serve (pytest-testinfra, run by verify.yml against the instance:
pytest --hosts=docker://kimi-serve). The API behaviour is checked by kimi.deploy.serve_verify in the role."""
import json

SERVICE = "kimi-k26"


def test_the_unit_is_enabled_and_running(host):
    service = host.service(SERVICE)
    assert service.is_enabled and service.is_running
    unit = host.file("/etc/systemd/system/kimi-k26.service")
    assert unit.user == "root" and unit.mode == 0o644
    assert "EnvironmentFile=/etc/kimi-k26.env" in unit.content_string
    assert "WorkingDirectory=/var/lib/kimi-k26" in unit.content_string
    assert "Restart=on-failure" in unit.content_string


def test_the_env_file_holds_bare_values_owned_by_root(host):
    env = host.file("/etc/kimi-k26.env")
    assert env.user == "root" and env.group == "root" and env.mode == 0o644
    values = dict(line.split("=", 1) for line in env.content_string.splitlines() if line and not line.startswith("#"))
    for name in ("QUANT", "FRAMEWORK", "IMAGE", "HF_HOME", "KV_CACHE_DTYPE", "MOE_BACKEND", "MODEL_NAME", "WAIT_GPU_FREE"):
        assert values.get(name), name
    assert all("#" not in value and value == value.strip() for value in values.values())


def test_the_launcher_is_on_the_root_disk_and_the_identity_is_prepared(host):
    launcher = host.file("/usr/local/bin/kimi-k26-launch")
    assert launcher.user == "root" and launcher.mode == 0o755
    quant = host.check_output("sed -n 's/^QUANT=//p' /etc/kimi-k26.env")
    engine = host.check_output("sed -n 's/^FRAMEWORK=//p' /etc/kimi-k26.env")
    assert host.file("/etc/kimi-k26/%s-%s.args" % (quant, engine)).is_file
    assert host.file("/etc/kimi-k26/%s-%s.env" % (quant, engine)).content_string == host.file("/etc/kimi-k26.env").content_string


def test_the_engine_listens_on_loopback_only(host):
    sockets = host.socket.get_listening_sockets()
    assert "tcp://127.0.0.1:30000" in sockets
    assert "tcp://0.0.0.0:30000" not in sockets and "tcp://:::30000" not in sockets


def test_the_container_has_no_restart_policy_and_gets_the_gpus_through_cdi(host):
    inspect = json.loads(host.check_output("docker inspect %s" % SERVICE))[0]
    assert inspect["HostConfig"]["RestartPolicy"]["Name"] in ("", "no")
    assert inspect["HostConfig"]["IpcMode"] == "host" and inspect["HostConfig"]["NetworkMode"] == "host"
    requests = inspect["HostConfig"].get("DeviceRequests") or []
    assert any(r.get("Driver") == "cdi" and "nvidia.com/gpu=all" in r.get("DeviceIDs", []) for r in requests)
    mounts = {m["Destination"]: m for m in inspect["Mounts"]}
    assert mounts["/root/.cache/huggingface/hub"]["RW"] is False
    assert mounts["/root/.cache/huggingface/modules"]["RW"] is True
    # the kernel cache of the deployment's key (issue 39), writable: the engine compiles into it
    assert mounts["/root/.cache/kimi-kernels"]["RW"] is True
    assert mounts["/root/.cache/kimi-kernels"]["Source"].startswith("/var/cache/kimi-k26/kernels/sglang-0.5.12.post1-")
    env = inspect["Config"]["Env"]
    assert "HF_HUB_OFFLINE=1" in env


def test_the_accuracy_gate_stored_what_the_identity_scored(host):
    """The converge's identity passed the accuracy gate: its figures on the shipped probes are kept, for the next
    switch's A/B."""
    result = host.file("/var/lib/kimi-k26/accuracy/int4-sglang.json")
    assert result.user == "root" and result.mode == 0o644
    figures = json.loads(result.content_string)
    assert figures["identity"] == "int4-sglang" and figures["cases"] >= 60 and figures["failed_cases"] == 0
    assert (figures["schema_accuracy"], figures["choice_accuracy"], figures["reasoning_leaks"]) == (100.0, 100.0, 0)
    assert len(figures["outcomes"]) == figures["cases"]
