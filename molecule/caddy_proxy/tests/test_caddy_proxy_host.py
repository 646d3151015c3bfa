"""Host state after caddy_proxy (pytest-testinfra, run by verify.yml: pytest --hosts=docker://kimi-caddy).
The HTTP behaviour (auth matrix, streaming, body sizes) is checked by verify.yml through the proxy."""
import re

PORT = 8443


def test_caddy_is_enabled_and_running_under_the_drop_in(host):
    service = host.service("caddy")
    assert service.is_enabled and service.is_running
    show = host.check_output("systemctl show caddy -p ExecStart -p DropInPaths -p TimeoutStopUSec -p RuntimeDirectory")
    assert "/etc/systemd/system/caddy.service.d/kimi.conf" in show
    assert "--environ" not in show  # it would print the environment to the journal
    assert "--adapter caddyfile" in show
    assert "TimeoutStopUSec=10min" in show
    assert "RuntimeDirectory=caddy" in show


def test_only_the_configured_port_listens(host):
    lines = host.check_output("ss -H -lntup").splitlines()
    caddy = [line for line in lines if '"caddy"' in line]
    ports = {re.search(r"\s\S+:(\d+)\s", line).group(1) for line in caddy}
    assert ports == {str(PORT)}, caddy
    assert not any(line.startswith("udp") for line in caddy), "an HTTP/3 (UDP) listener"
    sockets = host.socket.get_listening_sockets()
    assert not [s for s in sockets if s.endswith(":80") or s.endswith(":2019")], sockets


def test_key_file_is_0640_root_caddy_and_config_has_admin_off(host):
    keys = host.file("/etc/caddy/kimi-api-keys.caddy")
    assert keys.user == "root" and keys.group == "caddy" and keys.mode == 0o640
    config = host.file("/etc/caddy/Caddyfile").content_string
    assert "admin off" in config
    assert not re.search(r"^\s*flush_interval", config, re.M)
    assert "127.0.0.1:30000" in config
    assert "import /etc/caddy/kimi-api-keys.caddy" in config
    assert not re.search(r'"Bearer [^"]', config)  # keys live in the imported file only


def test_the_engine_still_listens_on_loopback_only(host):
    sockets = host.socket.get_listening_sockets()
    assert "tcp://127.0.0.1:30000" in sockets
    assert "tcp://0.0.0.0:30000" not in sockets and "tcp://:::30000" not in sockets
