"""Host state of a 1P1D disaggregated deployment after site.yml (pytest-testinfra, run by verify.yml:
pytest --hosts=docker://kimi-pd-1,docker://kimi-pd-2). The same unit runs on both, each engine in its role on the
deployment's network; only the decode host (the router host) runs the router, from its pinned wheel, and Caddy."""
import json

ROUTER = "kimi-pd-2"


def values(text):
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line and not line.startswith("#"))


def is_router(host):
    return host.backend.name == ROUTER


def test_the_same_unit_runs_each_role(host):
    service = host.service("kimi-k26")
    assert service.is_enabled and service.is_running
    env = values(host.file("/etc/kimi-k26.env").content_string)
    assert (env["QUANT"], env["FRAMEWORK"]) == ("int4", "sglang")
    assert env["PD_ROLE"] == ("decode" if is_router(host) else "prefill")
    assert env["ENGINE_HOST"] == host.backend.name


def test_each_engine_got_its_role_and_the_transfer_backend(host):
    argv = json.loads(host.check_output("docker inspect kimi-k26"))[0]["Args"]
    role = "decode" if is_router(host) else "prefill"
    assert argv[argv.index("--disaggregation-mode") + 1] == role
    assert argv[argv.index("--disaggregation-transfer-backend") + 1] == "nixl"  # no RDMA device in a container
    assert argv[argv.index("--host") + 1] == host.backend.name  # the deployment's network, not loopback
    assert ("--disaggregation-bootstrap-port" in argv) is (role == "prefill")
    assert "--disaggregation-ib-device" not in argv
    assert argv[argv.index("--kv-cache-dtype") + 1] == "fp8_e4m3"


def test_engines_listen_on_the_network_and_only_the_router_host_proxies(host):
    sockets = host.socket.get_listening_sockets()
    address = host.check_output("getent ahostsv4 %s | head -n1 | cut -d' ' -f1" % host.backend.name)
    assert "tcp://%s:30000" % address in sockets, sockets
    assert ("tcp://%s:8998" % address in sockets) is not is_router(host)  # the prefill's bootstrap server
    assert ("tcp://127.0.0.1:30080" in sockets) is is_router(host)  # the router, on loopback
    assert ("tcp://127.0.0.1:29000" in sockets) is is_router(host)  # its Prometheus text, on loopback
    assert any(s.endswith(":443") for s in sockets) is is_router(host)


def test_the_router_runs_its_pinned_wheel_from_a_virtualenv(host):
    if not is_router(host):
        assert not host.file("/etc/systemd/system/kimi-k26-router.service").exists
        return
    router = host.service("kimi-k26-router")
    assert router.is_enabled and router.is_running
    version = host.check_output("/opt/kimi-k26-router/venv/bin/python -c "
                                "'import importlib.metadata as m; print(m.version(\"smg\"))'")
    assert version == "1.13.0"
    unit = host.file("/etc/systemd/system/kimi-k26-router.service").content_string
    assert '"/opt/kimi-k26-router/venv/bin/smg" "launch" "--pd-disaggregation"' in unit
    # SGLang's workers on SMG's command line: no discovery file (that is vLLM's)
    assert "--discovery-file" not in unit and not host.file("/etc/kimi-k26/pd-workers.json").exists
    assert '"--prefill" "http://kimi-pd-1:30000" "8998"' in unit and '"--decode" "http://kimi-pd-2:30000"' in unit
    assert host.file("/opt/kimi-k26-router/wheels").is_directory  # installed --no-index from the wheelhouse


def test_caddy_fronts_the_router(host):
    if not is_router(host):
        return
    caddyfile = host.file("/etc/caddy/Caddyfile").content_string
    assert "reverse_proxy 127.0.0.1:30080" in caddyfile
    assert "127.0.0.1:29000" in caddyfile  # /metrics/router
