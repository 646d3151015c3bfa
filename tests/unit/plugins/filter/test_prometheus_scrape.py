"""The scrape configurations kimi_monitoring generates from the inventory (filter kimi.deploy.prometheus_scrape)."""
import hashlib

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.kimi.deploy.plugins.filter.prometheus_scrape import prometheus_scrape

ALL = ("/metrics", "/metrics/node", "/metrics/accelerator", "/metrics/caddy")
KEY = "metrics-key-0000000000000000000000000001"


def target(host, key=KEY, replica="", paths=ALL, address=None):
    return {"host": host, "address": address or host + ".example", "port": 443, "replica": replica, "key": key,
            "paths": list(paths)}


def digest(key):
    return hashlib.sha256(key.encode()).hexdigest()[:12]


def test_one_key_one_job_per_kind_every_host_labelled_and_the_key_only_in_a_file():
    out = prometheus_scrape([target("gpu-01"), target("gpu-02", replica="r1")], key_dir="/etc/prometheus/k/",
                            ca_file="/etc/prometheus/ca.pem", interval="5s")
    jobs = {c["job_name"]: c for c in out["scrape_configs"]}
    assert list(jobs) == ["kimi-engine", "kimi-node", "kimi-accelerator", "kimi-caddy"]
    engine = jobs["kimi-engine"]
    assert engine["scheme"] == "https" and engine["metrics_path"] == "/metrics" and engine["scrape_interval"] == "5s"
    assert engine["authorization"] == {"type": "Bearer",
                                       "credentials_file": "/etc/prometheus/k/kimi-metrics-%s.key" % digest(KEY)}
    assert engine["tls_config"] == {"ca_file": "/etc/prometheus/ca.pem"}
    assert engine["static_configs"] == [
        {"targets": ["gpu-01.example:443"], "labels": {"instance": "gpu-01", "replica": ""}},
        {"targets": ["gpu-02.example:443"], "labels": {"instance": "gpu-02", "replica": "r1"}}]
    assert "relabel_configs" not in engine
    assert out["keys"] == {"/etc/prometheus/k/kimi-metrics-%s.key" % digest(KEY): KEY}
    assert KEY not in repr(out["scrape_configs"])


def test_hosts_with_other_keys_get_their_own_jobs_relabelled_to_the_same_job():
    other = "metrics-key-0000000000000000000000000002"
    out = prometheus_scrape([target("a"), target("b", key=other)], key_dir="/k")
    names = [c["job_name"] for c in out["scrape_configs"] if c["metrics_path"] == "/metrics"]
    assert sorted(names) == sorted(["kimi-engine-" + digest(KEY), "kimi-engine-" + digest(other)])
    for config in out["scrape_configs"]:
        assert config["relabel_configs"] == [{"target_label": "job", "replacement": config["job_name"].rsplit("-", 1)[0]}]
    assert len(out["keys"]) == 2


def test_a_host_without_the_exporters_is_scraped_for_the_engine_only():
    out = prometheus_scrape([target("a", paths=["/metrics"])], key_dir="/k")
    assert [c["job_name"] for c in out["scrape_configs"]] == ["kimi-engine"]
    assert "tls_config" not in out["scrape_configs"][0]


@pytest.mark.parametrize("field", ["key", "address", "host"])
def test_a_target_without_a_key_or_address_is_refused_naming_it(field):
    t = target("gpu-07")
    t[field] = ""
    with pytest.raises(AnsibleFilterError, match="has no %s" % field):
        prometheus_scrape([t], key_dir="/k")
