"""daemon.json is merged, never overwritten: the site's keys survive, required keys win, one value per option."""
import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.kimi.deploy.plugins.filter.docker_daemon_json import FilterModule

merge = FilterModule().filters()["docker_daemon_json"]
REQUIRED = {"features": {"cdi": True}, "exec-opts": ["native.cgroupdriver=cgroupfs"]}


@pytest.mark.parametrize("existing", [None, "", {}])
def test_no_file_gives_the_required_settings(existing):
    assert merge(existing, REQUIRED) == REQUIRED


def test_site_keys_survive_and_nested_dicts_merge():
    existing = {"log-driver": "journald", "features": {"buildkit": True},
                "registry-mirrors": ["https://mirror.example"], "exec-opts": ["native.umask=normal"]}
    merged = merge(existing, REQUIRED)
    assert merged == {"log-driver": "journald", "features": {"buildkit": True, "cdi": True},
                      "registry-mirrors": ["https://mirror.example"],
                      "exec-opts": ["native.umask=normal", "native.cgroupdriver=cgroupfs"]}
    assert existing["features"] == {"buildkit": True}  # the input is not modified


def test_an_option_is_replaced_not_doubled():
    merged = merge({"exec-opts": ["native.cgroupdriver=systemd"]}, REQUIRED)
    assert merged["exec-opts"] == ["native.cgroupdriver=cgroupfs"]


def test_required_scalars_win():
    assert merge({"features": {"cdi": False}}, REQUIRED)["features"] == {"cdi": True}


def test_already_merged_is_unchanged():
    existing = {"log-opts": {"max-size": "10m"}, "features": {"cdi": True},
                "exec-opts": ["native.cgroupdriver=cgroupfs"]}
    assert merge(existing, REQUIRED) == existing


def test_plain_lists_are_a_union():
    assert merge({"dns": ["10.0.0.1"]}, {"dns": ["10.0.0.1", "10.0.0.2"]}) == {"dns": ["10.0.0.1", "10.0.0.2"]}


@pytest.mark.parametrize("existing, message", [
    (["not", "an", "object"], "must hold a JSON object"),
    ({"features": "cdi"}, r"features is a str in daemon.json, expected an object"),
    ({"exec-opts": "native.cgroupdriver=systemd"}, r"exec-opts is a str in daemon.json, expected a list"),
])
def test_unexpected_shapes_are_refused(existing, message):
    with pytest.raises(AnsibleFilterError, match=r"^kimi\.deploy\.docker_daemon_json: .*" + message):
        merge(existing, REQUIRED)
