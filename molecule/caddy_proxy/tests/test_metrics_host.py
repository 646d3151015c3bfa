"""Host state after kimi_metrics and kimi_monitoring (pytest-testinfra, run by verify.yml): the exporters on loopback
only, the deployment as series, Prometheus with its keys in files it alone reads, and every target up through Caddy."""
import json
import re
import time

PORT = 8443
CA = "/var/lib/caddy/.local/share/caddy/pki/authorities/local/root.crt"
METRICS_KEY = "test-metrics-key-00000000000000000000000004"
ALICE = "test-alice-key-0000000000000000000000000001"


def listeners(host, port):
    return [line.split()[3] for line in host.check_output("ss -Htln").splitlines() if line.split()[3].endswith(":%d" % port)]


def through_caddy(host, path, key=None):
    """(status, body) of GET path through Caddy; the key goes in a curl config on stdin, not in argv."""
    header = 'header = "Authorization: Bearer %s"\n' % key if key else ""
    out = host.run("printf '%%s' '%s' | curl -s -K - --cacert %s -w '\\n%%{http_code}' https://localhost:%d%s"
                   % (header, CA, PORT, path))
    body, status = out.stdout.rsplit("\n", 1)
    return int(status), body


def test_the_node_exporter_runs_from_the_package_on_loopback_with_the_textfile_folder(host):
    assert host.package("prometheus-node-exporter").is_installed
    service = host.service("prometheus-node-exporter")
    assert service.is_enabled and service.is_running
    assert listeners(host, 9100) == ["127.0.0.1:9100"]
    args = host.file("/etc/default/prometheus-node-exporter").content_string
    assert "--collector.textfile.directory=/var/lib/prometheus/node-exporter" in args


def test_the_accelerator_exporter_is_the_pinned_container_under_its_unit_on_loopback(host):
    service = host.service("kimi-accelerator-exporter")
    assert service.is_enabled and service.is_running
    assert host.check_output("docker inspect -f '{{.Config.Image}}' kimi-accelerator-exporter") == \
        "kimi-double/dcgm-exporter:4.5.3-4.8.2-ubuntu22.04"
    unit = host.file("/etc/systemd/system/kimi-accelerator-exporter.service").content_string
    assert "--device nvidia.com/gpu=all --cap-add SYS_ADMIN" in unit and "-a 127.0.0.1:9400" in unit
    assert listeners(host, 9400) == ["127.0.0.1:9400"]


def test_the_deployment_is_a_series_in_the_textfile_folder(host):
    prom = host.file("/var/lib/prometheus/node-exporter/kimi_deployment.prom")
    assert prom.user == "root" and prom.mode == 0o644
    assert re.search(r'^kimi_deployment_info\{identity="int4-sglang",quant="int4",engine="sglang",'
                     r'engine_version="0\.5\.12\.post1",image="kimi-double/sglang:v0\.5\.12\.post1-cu130",'
                     r'checkpoint="moonshotai/Kimi-K2\.6",revision="[0-9a-f]{40}",model_name="kimi-k2\.6",replica=""\} 1$',
                     prom.content_string, re.M), prom.content_string


def test_caddy_serves_each_exporter_to_the_metrics_key_only(host):
    for path, name in (("/metrics", "sglang:num_running_reqs"), ("/metrics/node", "kimi_deployment_info"),
                       ("/metrics/accelerator", "DCGM_FI_DEV_GPU_TEMP"), ("/metrics/caddy", "caddy_http_")):
        status, body = through_caddy(host, path, METRICS_KEY)
        assert status == 200 and name in body, (path, status, body[:200])
        assert through_caddy(host, path)[0] == 401
        assert through_caddy(host, path, ALICE)[0] == 401


def test_prometheus_reads_its_keys_from_files_only_it_can_read(host):
    service = host.service("prometheus")
    assert service.is_enabled and service.is_running
    assert listeners(host, 9090) == ["127.0.0.1:9090"]
    folder = host.file("/etc/prometheus/kimi-keys")
    assert (folder.user, folder.group, folder.mode) == ("root", "prometheus", 0o750)
    keys = host.check_output("ls /etc/prometheus/kimi-keys").split()
    assert len(keys) == 1
    key = host.file("/etc/prometheus/kimi-keys/" + keys[0])
    assert (key.user, key.group, key.mode) == ("root", "prometheus", 0o640)
    config = host.file("/etc/prometheus/prometheus.yml").content_string
    assert METRICS_KEY not in config and "credentials_file: /etc/prometheus/kimi-keys/" + keys[0] in config
    assert host.run("promtool check config /etc/prometheus/prometheus.yml").rc == 0
    assert host.run("promtool check rules /etc/prometheus/kimi-alerts.yml").rc == 0


def test_every_target_is_up_through_caddy(host):
    deadline = time.time() + 60
    while True:
        targets = json.loads(host.check_output("curl -sf http://127.0.0.1:9090/api/v1/targets?state=active"))
        active = targets["data"]["activeTargets"]
        if sorted(t["labels"]["job"] for t in active if t["health"] == "up") == \
                ["kimi-accelerator", "kimi-caddy", "kimi-engine", "kimi-node"] or time.time() > deadline:
            break
        time.sleep(3)
    assert sorted((t["labels"]["job"], t["health"], t["scrapeUrl"]) for t in active) == [
        ("kimi-accelerator", "up", "https://localhost:8443/metrics/accelerator"),
        ("kimi-caddy", "up", "https://localhost:8443/metrics/caddy"),
        ("kimi-engine", "up", "https://localhost:8443/metrics"),
        ("kimi-node", "up", "https://localhost:8443/metrics/node")]
