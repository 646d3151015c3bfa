"""kimi.deploy.gateway_change: a switch says what each gateway's router did, from the module's result."""
import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.kimi.deploy.plugins.filter.gateway_change import FilterModule

gateway_change = FilterModule().filters()["gateway_change"]
URL = "http://10.0.1.11:30000"


@pytest.mark.parametrize("result, said", [
    ({"removed": [URL], "added": [], "not_listed": []}, "removed " + URL),
    ({"removed": [], "added": [URL], "not_listed": []}, "added " + URL),
    # added with its max_running_requests label: said once, as added
    ({"removed": [], "added": [URL], "labelled": [URL], "not_listed": []}, "added " + URL),
    # listed already, without its label (or another value): SMG given it in place
    ({"removed": [], "added": [], "labelled": [URL], "not_listed": []}, "set the slots of " + URL),
    # asked to take it out, but the router did not list it: not said as a removal
    ({"removed": [], "added": [], "not_listed": [URL]}, "did not list " + URL),
    ({"removed": [], "added": [], "not_listed": [], "router_down": True}, "not running yet (nothing to change)"),
    ({"removed": [], "added": [], "router_down": False}, "listed it already"),
    ({"skipped": True}, "skipped"),
])
def test_says_what_the_router_did(result, said):
    assert gateway_change(result) == said


def test_refuses_what_is_not_a_result():
    with pytest.raises(AnsibleFilterError):
        gateway_change("removed")
