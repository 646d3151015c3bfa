# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The constraints of the role inputs users set directly (stdlib only). Private to kimi.deploy.

A role's meta/argument_specs.yml declares its inputs' types (Ansible checks them when the role starts); the range,
pattern or time-span form of the scalar ones is declared here, once, with the constraints of the site inputs
(_constraints), and kimi.deploy.deployment checks every one a host sets on the same path as the site inputs (plan.yml,
site.yml's preflight, bundle.yml), before any host changes. A unit test holds every scalar option of these roles to
a constraint here or a reason in UNCONSTRAINED, and each constraint's kind to the option's type.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.kimi.deploy.plugins.module_utils._model.constraints import Float, Int, Text

PORT = Int(1, 65535)
UNIT = Text(r"[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}", "a systemd unit name (letters, digits and _ . @ -)", 64)
PACKAGE = Text(r"[a-z0-9][a-z0-9.+-]{0,127}(=[A-Za-z0-9.+~:-]{1,64})?", "a Debian package name, =version optional",
               200)
IMAGE = Text(r"[A-Za-z0-9][A-Za-z0-9._/:@+-]{0,254}", "an image reference, e.g. registry.local/exporter:1", 255)
HOST = Text(r"[A-Za-z0-9*][A-Za-z0-9.*:\[\]-]{0,252}", "an IP address or a DNS name", 253)
ABSPATH = Text(r"/[^\s]{0,1023}", "an absolute path", 1024, empty=True)
URL = Text(r"https?://[A-Za-z0-9.\[\]:-]+(/[!-~]*)?", "an http(s) URL", 2048, empty=True)
# A Go duration as Caddy parses one (caddy.ParseDuration: Go's units and d for days), e.g. 15m, 1h30m, 90s.
GO_DURATION = Text(r"([0-9]+(\.[0-9]+)?(ns|us|\u00b5s|ms|s|m|h|d))+", "a Go duration (e.g. 90s, 15m, 1h30m)", 32)
# A Prometheus duration (model.ParseDuration: units ms, s, m, h, d, w, y, largest first), e.g. 5m, 1h30m, 15d.
PROM_DURATION = Text(r"([0-9]+y)?([0-9]+w)?([0-9]+d)?([0-9]+h)?([0-9]+m)?([0-9]+s)?([0-9]+ms)?",
                     "a Prometheus duration (e.g. 30s, 5m, 1h30m, 15d)", 32)
SECONDS = Int(1, 86400, unit="seconds")

CONSTRAINTS = {
    "caddy_proxy": {
        "caddy_proxy_https_port": PORT,
        "caddy_proxy_site_address": HOST,
        "caddy_proxy_upstream_host": HOST,
        "caddy_proxy_tls_cert_file": ABSPATH,
        "caddy_proxy_tls_key_file": ABSPATH,
        "caddy_proxy_package": PACKAGE,
        "caddy_proxy_max_body_bytes": Int(1024, 1 << 40, unit="bytes"),
        "caddy_proxy_generation_timeout": GO_DURATION,
        "caddy_proxy_stop_timeout": SECONDS,
        "caddy_proxy_drain_retry_after": Int(1, 3600, unit="seconds"),
        "caddy_proxy_drain_timeout": SECONDS,
    },
    "kimi_serve": {
        "kimi_serve_service_name": UNIT,
        "kimi_serve_nofile": Int(1024, 1 << 30),
        "kimi_serve_shm_min_bytes": Int(0, 1 << 50, empty=True, unit="bytes"),
        "kimi_serve_kernel_cache_bundle_dir": ABSPATH,
        "kimi_serve_replica_interface": Text(r"[A-Za-z0-9_.:-]{1,15}", "a network interface name", 15, empty=True),
        "kimi_serve_replica_address": Text(HOST.pattern.pattern, HOST.what, 253, empty=True),
        "kimi_serve_replica_probe_timeout": Int(1, 600, unit="seconds"),
        "kimi_serve_replica_watchdog_port": PORT,
        "kimi_serve_replica_check_interval": Int(1, 3600, unit="seconds"),
        "kimi_serve_replica_deadline": Int(1, 3600, unit="seconds"),
        "kimi_serve_replica_failure_checks": Int(1, 100),
        "kimi_serve_replica_max_restarts": Int(0, 100),
        "kimi_serve_replica_restart_window": Int(1, 7 * 86400, unit="seconds"),
        "kimi_serve_replica_stop_grace": Int(1, 3600, unit="seconds"),
        "kimi_serve_replica_lock_wait": Int(0, 86400, unit="seconds"),
        "kimi_serve_wait_gpu_free": Int(0, 3600, unit="seconds"),
        "kimi_serve_ready_timeout": SECONDS,
        "kimi_serve_poll_interval": Int(1, 600, unit="seconds"),
    },
    "kimi_gateway": {
        "kimi_gateway_router": Text(r"[a-z][a-z0-9_-]{0,31}", "a router name (smg, vllm-router)", 32,
                                    empty=True),
        "kimi_gateway_policy": Text(r"[a-z][a-z0-9_]{0,31}", "a routing policy of the router (e.g. cache_aware)", 32),
        "kimi_gateway_port": PORT,
        "kimi_gateway_metrics_port": PORT,
        "kimi_gateway_usage_port": PORT,
        "kimi_gateway_usage_metrics_port": PORT,
        "kimi_gateway_https_port": PORT,
        "kimi_gateway_health_interval": Int(1, 600, unit="seconds"),
        "kimi_gateway_health_failures": Int(1, 100),
        "kimi_gateway_retry": GO_DURATION,
        "kimi_gateway_service_name": UNIT,
        "kimi_gateway_usage_service_name": UNIT,
        "kimi_gateway_pip_index_url": URL,
        "kimi_gateway_ready_timeout": SECONDS,
    },
    "kimi_probes": {
        "kimi_probes_url": URL,
        "kimi_probes_workers": Int(1, 64),
        "kimi_probes_max_output": Int(16, 262144, unit="tokens"),
        "kimi_probes_timeout": SECONDS,
        "kimi_probes_service_name": UNIT,
    },
    "kimi_metrics": {
        "kimi_metrics_node_exporter_package": PACKAGE,
        "kimi_metrics_node_exporter_port": PORT,
        "kimi_metrics_dcgm_exporter_image": IMAGE,
        "kimi_metrics_npu_exporter_image": IMAGE,
        "kimi_metrics_accelerator_exporter_port": PORT,
    },
    "kimi_monitoring": dict(
        [(name, PROM_DURATION) for name in (
            "kimi_monitoring_alert_engine_down_for", "kimi_monitoring_alert_pd_worker_down_for",
            "kimi_monitoring_alert_host_down_for", "kimi_monitoring_alert_replica_member_lost_for",
            "kimi_monitoring_alert_replica_recovering_for", "kimi_monitoring_alert_replica_down_for",
            "kimi_monitoring_alert_answers_wrong_for", "kimi_monitoring_alert_verify_failing_for",
            "kimi_monitoring_alert_kv_cache_for", "kimi_monitoring_alert_queue_window",
            "kimi_monitoring_alert_queue_for", "kimi_monitoring_alert_gpu_xid_for",
            "kimi_monitoring_alert_gpu_memory_errors_window", "kimi_monitoring_alert_gpu_memory_errors_for",
            "kimi_monitoring_alert_gpu_temperature_for", "kimi_monitoring_alert_weights_disk_for",
            "kimi_monitoring_retention", "kimi_monitoring_scrape_interval", "kimi_monitoring_evaluation_interval")],
        kimi_monitoring_alert_answers_min_accuracy=Float(0, 1),
        kimi_monitoring_alert_kv_cache_usage=Float(0, 1, low_open=True),
        kimi_monitoring_alert_queue_waiting=Int(1, 100000),
        kimi_monitoring_alert_gpu_temperature=Int(30, 120, unit="degrees C"),
        kimi_monitoring_alert_npu_temperature=Int(30, 120, unit="degrees C"),
        kimi_monitoring_alert_weights_disk_free_ratio=Float(0, 1),
        kimi_monitoring_package=PACKAGE,
        kimi_monitoring_listen_address=Text(r"[A-Za-z0-9.\[\]:-]*:[0-9]{1,5}", "host:port", 260),
        kimi_monitoring_targets_group=Text(r"[A-Za-z_][A-Za-z0-9_]{0,63}", "an inventory group name", 64),
        kimi_monitoring_ca_file=ABSPATH,
        kimi_monitoring_verify_retries=Int(1, 1000),
    ),
}

# Scalar options of these roles left without a constraint here, and why (the unit test reads this).
UNCONSTRAINED = {}


def by_variable():
    """{variable: (role, constraint)} of every role input with a constraint."""
    return dict((variable, (role, check)) for role, table in CONSTRAINTS.items() for variable, check in table.items())


def check_roles(get, host, missing=None):
    """Every role input of CONSTRAINTS that `host` sets: the first refusal, as the one line naming the variable."""
    for role in sorted(CONSTRAINTS):
        for variable, check in sorted(CONSTRAINTS[role].items()):
            found = get(host, variable)
            if found is not missing:
                check.check(variable, found)
