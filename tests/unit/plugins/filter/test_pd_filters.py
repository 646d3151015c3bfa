"""kimi.deploy.pd_members and kimi.deploy.pd_layout_mismatch: what site.yml reads of the hosts of a disaggregated
deployment."""
from ansible_collections.kimi.deploy.plugins.filter.pd_layout_mismatch import pd_layout_mismatch
from ansible_collections.kimi.deploy.plugins.filter.pd_members import pd_members


def test_members_with_their_address_replica_port_and_rdma_devices():
    hostvars = {
        "p1": {"kimi_pd_role": "prefill", "ansible_host": "10.0.0.11",
               "_kimi_pd_rdma_found": {"files": [{"path": "/sys/class/infiniband/mlx5_1"},
                                                 {"path": "/sys/class/infiniband/mlx5_0"}]}},
        "d1": {"kimi_pd_role": "decode", "kimi_pd_address": "192.168.0.21", "ansible_host": "10.0.0.21",
               "kimi_pd_rdma_devices": ["none"], "kimi_replica": "r", "kimi_engine_port": 31000},
    }
    assert pd_members(["p1", "d1"], hostvars) == [
        {"host": "p1", "role": "prefill", "address": "10.0.0.11", "replica": None, "port": None,
         "rdma_devices": ["mlx5_0", "mlx5_1"]},
        {"host": "d1", "role": "decode", "address": "192.168.0.21", "replica": "r", "port": 31000,
         "rdma_devices": ["none"]}]
    assert pd_members(["x"], {})[0]["address"] == "x"


def test_layout_mismatch_reads_each_hosts_deployment():
    layout = {"identity": "int4-sglang", "kv_cache_dtype": "fp8_e4m3"}
    hostvars = {"p1": {"kimi_deployment": {"pd": {"role": "prefill", "layout": layout}}},
                "d1": {"kimi_deployment": {"pd": {"role": "decode", "layout": dict(layout, kv_cache_dtype="auto")}}}}
    assert "kimi_kv_cache_dtype differs" in pd_layout_mismatch(["p1", "d1"], hostvars)
    hostvars["d1"]["kimi_deployment"]["pd"]["layout"] = layout
    assert pd_layout_mismatch(["p1", "d1"], hostvars) == ""
