"""kimi.deploy.pd_layout_mismatch: the KV layouts the hosts of a disaggregated deployment resolved (their members:
tests/unit/plugins/module_utils/test_site.py)."""
from ansible_collections.kimi.deploy.plugins.filter.pd_layout_mismatch import pd_layout_mismatch


def test_layout_mismatch_reads_each_hosts_deployment():
    layout = {"identity": "int4-sglang", "kv_cache_dtype": "fp8_e4m3"}
    hostvars = {"p1": {"kimi_deployment": {"pd": {"role": "prefill", "layout": layout}}},
                "d1": {"kimi_deployment": {"pd": {"role": "decode", "layout": dict(layout, kv_cache_dtype="auto")}}}}
    assert "kimi_kv_cache_dtype differs" in pd_layout_mismatch(["p1", "d1"], hostvars)
    hostvars["d1"]["kimi_deployment"]["pd"]["layout"] = layout
    assert pd_layout_mismatch(["p1", "d1"], hostvars) == ""
