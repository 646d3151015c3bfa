"""kimi.deploy.replica_batches: a rolling switch counts replicas, and never splits one."""
import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.kimi.deploy.plugins.filter.replica_batches import FilterModule

replica_batches = FilterModule().filters()["replica_batches"]

# a1+a2 form replica a, b1+b2+b3 replica b; solo-1 and solo-2 serve alone (no kimi_replica_members: as today)
HOSTVARS = {"a1": {"kimi_replica_members": ["a1", "a2"]}, "a2": {"kimi_replica_members": ["a1", "a2"]},
            "solo-1": {}, "b1": {"kimi_replica_members": ["b1", "b2", "b3"]},
            "b2": {"kimi_replica_members": ["b1", "b2", "b3"]}, "b3": {"kimi_replica_members": ["b1", "b2", "b3"]},
            "solo-2": {"kimi_replica_members": ["solo-2"]}}
HOSTS = ["a1", "a2", "solo-1", "b1", "b2", "b3", "solo-2"]


@pytest.mark.parametrize("serial, batches", [
    (1, [["a1", "a2"], ["solo-1"], ["b1", "b2", "b3"], ["solo-2"]]),
    ("2", [["a1", "a2", "solo-1"], ["b1", "b2", "b3", "solo-2"]]),
    ("50%", [["a1", "a2", "solo-1"], ["b1", "b2", "b3", "solo-2"]]),
    ("10%", [["a1", "a2"], ["solo-1"], ["b1", "b2", "b3"], ["solo-2"]]),  # rounded down, at least one replica
    ("100%", [HOSTS]),
])
def test_batches_count_replicas_not_hosts(serial, batches):
    assert replica_batches(HOSTS, HOSTVARS, serial) == batches


def test_hosts_alone_batch_as_ansible_serial_does():
    assert replica_batches(["h1", "h2", "h3"], {}, 2) == [["h1", "h2"], ["h3"]]


def test_a_replica_listed_apart_is_refused_naming_what_comes_between():
    with pytest.raises(AnsibleFilterError, match=r"one replica \(a1, a2\) must be listed one after the other.*solo-1"):
        replica_batches(["a1", "solo-1", "a2"], HOSTVARS, 1)


def test_a_replica_cut_by_limit_is_refused():
    with pytest.raises(AnsibleFilterError, match=r"^a2 belong\(s\) to the replica of a1 but not to this run \(--limit\?\)"):
        replica_batches(["a1", "solo-1"], HOSTVARS, 1)


@pytest.mark.parametrize("serial", ["two", 0, "0", "0%", "1.5", "-1", True, "25 %"])
def test_a_bad_serial_names_the_variable(serial):
    with pytest.raises(AnsibleFilterError, match=r"^kimi\.deploy: kimi_fleet_serial=.* is not allowed\. Allowed values: a count of replicas"):
        replica_batches(HOSTS, HOSTVARS, serial)


def test_a_disaggregated_deployment_is_one_unit_of_a_rolling_switch():
    pd = ["p1", "d1", "d2"]
    hostvars = dict((h, {"kimi_pd_members": pd}) for h in pd)
    hostvars["solo"] = {}
    assert replica_batches(["p1", "d1", "d2", "solo"], hostvars, 1) == [pd, ["solo"]]
    with pytest.raises(AnsibleFilterError, match=r"d2 belong\(s\) to the replica of p1"):
        replica_batches(["p1", "d1", "solo"], hostvars, 1)


@pytest.mark.parametrize("canary, serial, batches", [
    (1, 1, [["a1", "a2"], ["solo-1"], ["b1", "b2", "b3"], ["solo-2"]]),
    ("2", "100%", [["a1", "a2", "solo-1"], ["b1", "b2", "b3", "solo-2"]]),
    ("10%", 2, [["a1", "a2"], ["solo-1", "b1", "b2", "b3"], ["solo-2"]]),  # rounded up: at least one replica
    ("50%", 1, [["a1", "a2", "solo-1"], ["b1", "b2", "b3"], ["solo-2"]]),
])
def test_a_canary_is_the_first_batch_then_serial_at_a_time(canary, serial, batches):
    assert replica_batches(HOSTS, HOSTVARS, serial, canary=canary) == batches


@pytest.mark.parametrize("canary, why", [
    (0, "kimi_canary=0 is not allowed"), ("0%", "kimi_canary='0%' is not allowed"),
    ("100%", "kimi_canary='100%' is not allowed"), ("150%", "kimi_canary='150%' is not allowed"),
    (4, "kimi_canary=4 is not allowed: the canary would take every replica, leaving none to compare it with"),
    ("99%", "kimi_canary=.99%. is not allowed: the canary would take every replica"), ("one", "kimi_canary='one' is not allowed"),
    (True, "kimi_canary=True is not allowed"),
])
def test_a_canary_of_nothing_or_of_everything_is_refused_naming_the_variable(canary, why):
    with pytest.raises(AnsibleFilterError, match="kimi.deploy: " + why.replace("(", "[(]").replace(")", "[)]")) as e:
        replica_batches(HOSTS, HOSTVARS, 1, canary=canary)
    assert "Allowed values: a count of replicas (1, 2, ...) or a percentage of them (10%) that leaves at least one " \
           "replica outside the canary, of the 4 here" in str(e.value)
