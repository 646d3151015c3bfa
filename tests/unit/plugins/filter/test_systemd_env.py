"""kimi.deploy.systemd_env: bare values only, refused with the variable's name before anything is written."""
import pytest

from ansible.errors import AnsibleFilterError
from ansible_collections.kimi.deploy.plugins.filter.systemd_env import FilterModule

systemd_env = FilterModule().filters()["systemd_env"]


def test_renders_bare_values_in_order():
    text = systemd_env([{"name": "QUANT", "value": "int4", "variable": "quant"},
                        {"name": "WAIT_GPU_FREE", "value": 300, "variable": "kimi_serve_wait_gpu_free"},
                        {"name": "KILL_ORPHANS", "value": False, "variable": "kimi_serve_kill_orphans"},
                        {"name": "HF_HOME", "value": "/data/hf home", "variable": "kimi_serve_hf_home"}])
    assert text == "QUANT=int4\nWAIT_GPU_FREE=300\nKILL_ORPHANS=0\nHF_HOME=/data/hf home\n"


@pytest.mark.parametrize("value, problem", [
    ("/data/hf  # the NVMe", "holds '#'"),
    ("'/data/hf'", "holds \"'\""),
    ('"/data/hf"', "holds '\"'"),
    ("/data/hf\\x", "holds '\\\\'"),
    ("/data/hf\nEVIL=1", "holds a newline, a control character"),
    ("/data/hf\x85EVIL=1", "holds a NEL, a control character"),
    ("/data/hf\u2028EVIL=1", "holds a Unicode line separator, a control character"),
    ("/data/hf ", "leading or trailing space"),
    (" /data/hf", "leading or trailing space"),
])
def test_refuses_what_systemd_would_read_otherwise(value, problem):
    with pytest.raises(AnsibleFilterError) as error:
        systemd_env([{"name": "HF_HOME", "value": value, "variable": "kimi_serve_hf_home"}])
    message = str(error.value)
    assert message.startswith("kimi_serve_hf_home=%r is not allowed: it becomes HF_HOME" % value)
    assert problem in message and "an inline '# comment' becomes part of the value" in message


@pytest.mark.parametrize("entries", [
    [{"name": "lower", "value": "x"}],
    [{"name": "A", "value": "x"}, {"name": "A", "value": "y"}],
    [{"name": "A", "value": ["x"]}],
    "A=x",
])
def test_refuses_malformed_entries(entries):
    with pytest.raises(AnsibleFilterError):
        systemd_env(entries)


def test_a_dict_names_its_variable():
    assert systemd_env({"NCCL_DEBUG": "WARN"}, variable="kimi_serve_container_env") == "NCCL_DEBUG=WARN\n"
    with pytest.raises(AnsibleFilterError, match=r"^kimi_serve_container_env\.NCCL_SOCKET_IFNAME='eth0 # lan' is not"):
        systemd_env({"NCCL_SOCKET_IFNAME": "eth0 # lan"}, variable="kimi_serve_container_env")
