"""Host state of a 2-host replica after site.yml (pytest-testinfra, run by verify.yml:
pytest --hosts=docker://kimi-replica-1,docker://kimi-replica-2). The same unit runs on both; only the head serves the
API and runs Caddy; each engine got its rank and the network settings found in preflight."""
import json

HEAD = "kimi-replica-1"


def values(text):
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line and not line.startswith("#"))


def is_head(host):
    return host.backend.name == HEAD


def test_the_same_unit_runs_on_every_host(host):
    service = host.service("kimi-k26")
    assert service.is_enabled and service.is_running
    env = values(host.file("/etc/kimi-k26.env").content_string)
    assert (env["QUANT"], env["FRAMEWORK"], env["INFINIBAND"]) == ("int4", "vllm", "0")


def test_each_engine_got_its_rank_and_the_heads_rendezvous(host):
    inspect = json.loads(host.check_output("docker inspect kimi-k26"))[0]
    argv = inspect["Args"]
    rank = "0" if is_head(host) else "1"
    assert argv[argv.index("--node-rank") + 1] == rank and argv[argv.index("--nnodes") + 1] == "2"
    assert argv[argv.index("--tensor-parallel-size") + 1] == "8"  # TP inside a host,
    assert argv[argv.index("--pipeline-parallel-size") + 1] == "2"  # PP across the hosts
    assert argv[argv.index("--master-port") + 1] == "29500"
    head_ip = host.check_output("getent ahostsv4 %s | head -n1 | cut -d' ' -f1" % HEAD)
    assert argv[argv.index("--master-addr") + 1] == head_ip
    assert ("--headless" in argv) is not is_head(host)


def test_nccl_and_gloo_use_the_interface_to_the_head_and_no_infiniband(host):
    env = values(host.file("/etc/kimi-k26/container.env").content_string)
    # Each container host has one interface on the replica's network, eth0: the one that carries the rendezvous.
    assert env["NCCL_SOCKET_IFNAME"] == env["GLOO_SOCKET_IFNAME"] == "eth0"
    assert env["NCCL_IB_DISABLE"] == "1" and "NCCL_IB_HCA" not in env
    assert host.file("/etc/kimi-k26/container.env").mode == 0o600


def test_only_the_head_serves_http_and_runs_caddy(host):
    sockets = host.socket.get_listening_sockets()
    serves = "tcp://127.0.0.1:30000" in sockets
    proxies = any(s.endswith(":443") for s in sockets)
    assert serves is is_head(host) and proxies is is_head(host), sockets
    if is_head(host):
        assert any(s.endswith(":29500") for s in sockets)  # the rendezvous, held by the engine for its life


def test_the_replica_watchdog_runs_on_every_host_with_its_secret_private(host):
    assert host.service("kimi-k26-watchdog").is_enabled and host.service("kimi-k26-watchdog").is_running
    secret = host.file("/etc/kimi-k26/watchdog.secret")
    assert secret.mode == 0o600 and secret.user == "root" and len(secret.content_string.strip()) >= 32
    settings = json.loads(host.file("/etc/kimi-k26/watchdog.json").content_string)
    assert [(m["host"], m["rank"]) for m in settings["members"]] == [(HEAD, 0), ("kimi-replica-2", 1)]
    assert settings["drain_file"] == "/etc/caddy/kimi-draining"  # caddy_proxy's, read from its defaults
    assert secret.content_string.strip() not in host.file("/etc/kimi-k26/watchdog.json").content_string
    assert secret.content_string.strip() not in host.check_output("ps -eo args")  # never in argv
    me = [m for m in settings["members"] if m["host"] == host.backend.name][0]
    assert "tcp://%s:%d" % (me["listen"], settings["port"]) in host.socket.get_listening_sockets()
