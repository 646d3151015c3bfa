"""kimi.deploy.rdma_facts: the RDMA devices under <sys_root>/class/infiniband, sorted; none without the folder."""
import os

from module_runner import run_module

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
MODULE = os.path.join(ROOT, "plugins", "modules", "rdma_facts.py")


def test_the_devices_sorted_as_a_fact(tmp_path):
    folder = tmp_path / "class" / "infiniband"
    folder.mkdir(parents=True)
    for name in ("mlx5_1", "mlx5_0"):
        (folder / name).symlink_to(tmp_path)  # sysfs: links to the device
    result = run_module(MODULE, {"sys_root": str(tmp_path)})
    assert result["changed"] is False and result["devices"] == ["mlx5_0", "mlx5_1"]
    assert result["ansible_facts"] == {"rdma_devices": ["mlx5_0", "mlx5_1"]}


def test_no_rdma_driver_is_no_devices(tmp_path):
    result = run_module(MODULE, {"sys_root": str(tmp_path)})
    assert result["devices"] == [] and result["ansible_facts"] == {"rdma_devices": []}
