"""plugins/plugin_utils/_site.py, the controller view the deployment and gateway actions share: the roles' ports and
the shared host values come from the model's tables (never a role's files), a host's own values first."""
import os

import yaml

from ansible_collections.kimi.deploy.plugins.action import gateway as gateway_action
from ansible_collections.kimi.deploy.plugins.module_utils._model import gateway as _gateway
from ansible_collections.kimi.deploy.plugins.module_utils._model import host_values as _host_values
from ansible_collections.kimi.deploy.plugins.module_utils._model import ports as _ports
from ansible_collections.kimi.deploy.plugins.plugin_utils._site import Site, collection_version, role_ports

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))


class Templar:
    def template(self, value):
        return value


def site(**task_vars):
    task_vars = dict({"inventory_hostname": "gpu-01", "groups": {"kimi_servers": ["gpu-01"]}}, **task_vars)
    return Site(Templar(), task_vars, require_revision=False)


def test_the_roles_ports_default_to_the_table():
    uses = role_ports({}, [])
    assert (443, "caddy_proxy_https_port", "Caddy's HTTPS listener") in uses
    assert not [u for u in uses if u[1].startswith("kimi_gateway_")]  # a gateway's ports on kimi_gateways hosts only
    assert (8443, "caddy_proxy_https_port", "Caddy's HTTPS listener") in role_ports({"caddy_proxy_https_port": 8443},
                                                                                    [])


def test_the_host_values_default_to_the_table():
    values = site().host_values("gpu-01")
    assert values["host_paths"] == dict((k, v[2]) for k, v in _host_values.HOST_PATHS.items())
    assert values["proxy"] == {"address": "gpu-01", "https_port": 443, "url": "https://gpu-01:443"}


def test_a_host_s_own_values_come_first():
    values = site(caddy_proxy_drain_file="/run/kimi-drain", kimi_metrics_textfile_dir="/srv/textfiles",
                  kimi_serve_env_file="/etc/kimi.env", caddy_proxy_site_address="api.example",
                  caddy_proxy_https_port="8443").host_values("gpu-01")
    assert values["host_paths"]["drain_file"] == "/run/kimi-drain"
    assert values["host_paths"]["textfile_dir"] == "/srv/textfiles"
    assert values["host_paths"]["env_file"] == "/etc/kimi.env"
    assert values["proxy"]["url"] == "https://api.example:8443"


def test_the_collection_version_is_the_collection_s():
    with open(os.path.join(ROOT, "galaxy.yml")) as handle:
        assert collection_version(ROOT) == str(yaml.safe_load(handle)["version"])


def test_the_gateway_action_takes_its_settings_from_the_model():
    assert gateway_action.SETTINGS == dict((k, v[0]) for k, v in _gateway.SETTINGS.items())
    for key in ("port", "metrics_port", "https_port", "usage_port", "usage_metrics_port"):
        variable, default = _gateway.SETTINGS[key]
        assert _ports.ROLE_PORTS[variable][3] == default
