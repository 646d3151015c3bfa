"""kimi.deploy.page_cache run as Ansible runs it (a subprocess on an argument file), on real files: residency comes
from mincore, eviction from posix_fadvise, so these tests read the kernel's own page cache."""
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODULE = os.path.join(ROOT, "plugins", "modules", "page_cache.py")
MiB = 1 << 20


def run(tmp_path, check_mode=False, **args):
    if check_mode:
        args["_ansible_check_mode"] = True
    path = tmp_path / "args.json"
    path.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    proc = subprocess.run([sys.executable, str(MODULE), str(path)], capture_output=True, text=True, check=False,
                          env=dict(os.environ, PYTHONPATH=os.path.join(ROOT, ".collections")))
    return json.loads(proc.stdout)


@pytest.fixture
def snapshot(tmp_path):
    """A snapshot folder as hf_snapshot writes it: shards are symlinks into blobs/."""
    blobs = tmp_path / "blobs"
    snap = tmp_path / "snapshots" / "c0ffee"
    blobs.mkdir()
    snap.mkdir(parents=True)
    for i in (1, 2):
        blob = blobs / ("%064x" % i)
        blob.write_bytes(os.urandom(8 * MiB))
        (snap / ("model-%05d-of-00002.safetensors" % i)).symlink_to(os.path.relpath(blob, snap))
    (snap / "config.json").write_text("{}")
    os.sync()
    return snap


def test_evict_then_warm_reads_the_shards_in_and_a_second_warm_reads_nothing(tmp_path, snapshot):
    evicted = run(tmp_path, snapshot=str(snapshot), state="evicted")
    assert evicted["files"] == 2 and evicted["bytes_total"] == 16 * MiB and not evicted["changed"]
    assert evicted["bytes_resident_after"] == 0, evicted
    warmed = run(tmp_path, snapshot=str(snapshot), reserve_bytes=0)
    assert warmed["bytes_resident_before"] == 0 and warmed["bytes_read"] == 16 * MiB
    assert warmed["limited_by"] is None and not warmed["changed"]
    if warmed["bytes_resident_after"] != 16 * MiB:
        # The kernel reclaimed a few clean pages between the read and the count (seen once in a fresh-machine CI run,
        # 3 pages of 4096): a second warm reads back exactly those and leaves every page resident.
        missing = 16 * MiB - warmed["bytes_resident_after"]
        warmed = run(tmp_path, snapshot=str(snapshot), reserve_bytes=0)
        assert warmed["bytes_read"] <= missing, warmed
    assert warmed["bytes_resident_after"] == 16 * MiB, warmed
    again = run(tmp_path, snapshot=str(snapshot), reserve_bytes=0)
    if again["bytes_read"]:
        # The kernel may reclaim clean pages between two runs on a busy machine (seen once beside two pytest workers
        # and a build); right after a warm, a warm that still reads everything is the module's fault.
        again = run(tmp_path, snapshot=str(snapshot), reserve_bytes=0)
    assert again["bytes_read"] == 0 and again["bytes_resident_after"] == 16 * MiB


def test_warm_stops_at_max_bytes_and_says_so(tmp_path, snapshot):
    run(tmp_path, snapshot=str(snapshot), state="evicted")
    warmed = run(tmp_path, snapshot=str(snapshot), reserve_bytes=0, max_bytes=10 * MiB)
    assert warmed["bytes_read"] == 10 * MiB and warmed["limited_by"] == "max_bytes"
    assert 10 * MiB <= warmed["bytes_resident_after"] < 16 * MiB


def test_warm_keeps_the_memory_reserve(tmp_path, snapshot):
    run(tmp_path, snapshot=str(snapshot), state="evicted")
    with open("/proc/meminfo") as handle:
        total = int([l for l in handle if l.startswith("MemTotal:")][0].split()[1]) * 1024
    warmed = run(tmp_path, snapshot=str(snapshot), reserve_bytes=total)  # more than can ever be available
    assert warmed["bytes_read"] == 0 and warmed["budget_bytes"] == 0 and warmed["limited_by"] == "memory"


def test_check_mode_reads_nothing(tmp_path, snapshot):
    run(tmp_path, snapshot=str(snapshot), state="evicted")
    planned = run(tmp_path, check_mode=True, snapshot=str(snapshot), reserve_bytes=0)
    assert planned["bytes_read"] == 0 and planned["bytes_resident_after"] == 0 and planned["budget_bytes"] > 0


def test_refuses_a_missing_snapshot_naming_it(tmp_path):
    result = run(tmp_path, snapshot=str(tmp_path / "nope"))
    assert result["failed"] and result["option"] == "snapshot" and "is not a folder" in result["msg"]
