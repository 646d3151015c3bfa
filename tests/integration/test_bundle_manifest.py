"""kimi.deploy.bundle_manifest on real bundles in temporary folders: an image archive, a Hugging Face cache folder
whose snapshot links into blobs/, an apt repository, the collection tarball and an inventory. Most tests run the
module's Bundle class in this process; the last ones run the module through `ansible localhost -m`."""
import hashlib
import json
import os
import subprocess
import sys

import pytest

from ansible_collections.kimi.deploy.plugins.module_utils._bundle import manifest as bm
from hfsnap_helpers import flip_byte

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.join(ROOT, ".venv", "bin")
MiB = 1 << 20
COMMIT = "3f1c0e6e8a0b7c2d4e5f60718293a4b5c6d7e8f9"
HF = "checkpoints/hub/models--moonshotai--Kimi-K2.6"
IMAGE = "images/kimi-k26-nvfp4-vllm_cu130-mla.tar.zst"
COMPONENTS = {"images": ["kimi-k26-nvfp4-vllm:cu130-mla"], "checkpoints": {"moonshotai/Kimi-K2.6": COMMIT},
              "apt_releases": ["noble"], "collection": "kimi.deploy 0.2.0"}
HOUR_NS = 3600 * 10 ** 9


def backdate(path):
    """Give a file an mtime an hour old, as a bundle made earlier has (fresh files are not recorded: bm.RACY_NS)."""
    st = os.lstat(path)
    os.utime(path, ns=(st.st_atime_ns - HOUR_NS, st.st_mtime_ns - HOUR_NS), follow_symlinks=False)


@pytest.fixture
def bundle(tmp_path):
    root = tmp_path / "bundle"
    files = {
        IMAGE: os.urandom(9 * MiB),  # more than one 8 MiB read
        HF + "/blobs/" + "1" * 64: os.urandom(2 * MiB),
        HF + "/blobs/" + "2" * 64: os.urandom(MiB + 3),
        HF + "/blobs/" + "c" * 40: b'{"architectures": ["DeepseekV3ForCausalLM"]}\n',
        HF + "/refs/main": COMMIT.encode(),
        "apt/noble/dists/noble/InRelease": b"-----BEGIN PGP SIGNED MESSAGE-----\n",
        "apt/noble/pool/main/n/nvidia-open_580.deb": os.urandom(100000),
        "collection/kimi-deploy-0.2.0.tar.gz": os.urandom(5000),
        "inventory/hosts.yml": b"all:\n  children:\n    kimi_servers: {}\n",
        "empty.txt": b"",
    }
    for relpath, data in files.items():
        path = root / relpath
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    snapshot = root / HF / "snapshots" / COMMIT
    (snapshot / "sub").mkdir(parents=True)
    (snapshot / "model-00001-of-00002.safetensors").symlink_to("../../blobs/" + "1" * 64)
    (snapshot / "model-00002-of-00002.safetensors").symlink_to("../../blobs/" + "2" * 64)
    (snapshot / "sub" / "config.json").symlink_to("../../../blobs/" + "c" * 40)
    for folder, _dirs, names in os.walk(str(root)):
        for name in names:
            backdate(os.path.join(folder, name))
    return root


@pytest.fixture
def records(tmp_path):
    return tmp_path / "records"


def run(bundle, records, check_mode=False, **options):
    """The module's result, or on a failure its result with failed, msg and option (as fail_json returns them)."""
    params = dict(path=str(bundle), record_dir=str(records), **options)
    try:
        runner = bm.Bundle(params, check_mode=check_mode)
        result = runner.run()
        result["warnings"] = runner.warnings
        return result
    except bm.BundleError as exc:
        return dict(exc.result, failed=True, msg=str(exc), option=exc.option)


def written(bundle, records, **options):
    result = run(bundle, records, state="written", components=COMPONENTS, **options)
    assert not result.get("failed"), result
    return result


def verified(bundle, records, **options):
    return run(bundle, records, state="verified", **options)


def tree(root):
    """Everything under root, with contents, link targets and mtimes: to prove a run changed nothing."""
    state = {}
    for folder, dirs, names in os.walk(str(root)):
        for name in dirs + names:
            path = os.path.join(folder, name)
            st = os.lstat(path)
            if os.path.islink(path):
                state[path] = ("link", os.readlink(path), st.st_mtime_ns)
            elif os.path.isfile(path):
                with open(path, "rb") as handle:
                    state[path] = ("file", hashlib.sha256(handle.read()).hexdigest(), st.st_mtime_ns, st.st_ino)
            else:
                state[path] = ("dir",)
    return state


def test_write_lists_every_file_and_link_and_a_second_write_changes_nothing(bundle, records):
    first = written(bundle, records)
    assert first["changed"] and first["count"] == 13 and first["hashed_files"] == 10 and first["trusted_files"] == 0
    manifest_file = bundle / "manifest.json"
    data = manifest_file.read_bytes()
    manifest = json.loads(data)
    assert manifest["format"] == "kimi.deploy/bundle-manifest/1" and manifest["components"] == COMPONENTS
    assert manifest["created"].endswith("Z") and manifest["count"] == 13
    assert list(manifest["files"]) == sorted(manifest["files"]) and "manifest.json" not in manifest["files"]
    image = (bundle / IMAGE).read_bytes()
    assert manifest["files"][IMAGE] == {"size": len(image), "sha256": hashlib.sha256(image).hexdigest()}
    assert manifest["files"][HF + "/snapshots/" + COMMIT + "/sub/config.json"] == {"link": "../../../blobs/" + "c" * 40}
    assert manifest["files"]["empty.txt"] == {"size": 0, "sha256": hashlib.sha256(b"").hexdigest()}
    assert manifest["bytes"] == first["bytes"] == sum(e.get("size", 0) for e in manifest["files"].values())
    assert first["manifest_sha256"] == hashlib.sha256(data).hexdigest()
    assert first["files_added"] == sorted(manifest["files"]) and first["record"].startswith(str(records))
    assert not [n for n in os.listdir(str(bundle)) if n != "manifest.json" and n.startswith(".")]  # no temporary left

    second = written(bundle, records)
    assert not second["changed"] and second["hashed_files"] == 0 and second["trusted_files"] == 10
    assert manifest_file.read_bytes() == data and second["created"] == manifest["created"]
    assert second["manifest_sha256"] == first["manifest_sha256"]
    assert second["files_added"] == second["files_removed"] == second["files_changed"] == []

    check = verified(bundle, records)
    assert not check.get("failed"), check
    assert not check["changed"] and check["components"] == COMPONENTS and check["count"] == 13
    assert check["bytes"] == first["bytes"] and check["manifest_sha256"] == first["manifest_sha256"]
    assert check["hashed_files"] == 0 and check["hashed_bytes"] == 0  # all trusted from the record

    full = verified(bundle, records, verify="full", hash_workers=3)
    assert not full.get("failed") and full["hashed_files"] == 10 and full["hashed_bytes"] == first["bytes"]


def test_record_lives_outside_the_bundle_under_the_hash_of_its_real_path(bundle, records, tmp_path):
    written(bundle, records)
    name = hashlib.sha256(os.path.realpath(str(bundle)).encode()).hexdigest() + ".json"
    record = json.loads((records / name).read_text())
    assert record["path"] == os.path.realpath(str(bundle))
    size, mtime_ns, ino, sha = record["files"][IMAGE]
    st = os.stat(str(bundle / IMAGE))
    assert [size, mtime_ns, ino] == [st.st_size, st.st_mtime_ns, st.st_ino]
    assert sha == hashlib.sha256((bundle / IMAGE).read_bytes()).hexdigest()
    # The same bundle through a symlinked path shares the record.
    alias = tmp_path / "alias"
    alias.symlink_to(bundle)
    assert verified(alias, records)["hashed_files"] == 0


def test_check_mode_write_reports_and_writes_nothing_in_the_bundle(bundle, records):
    before = tree(bundle)
    planned = run(bundle, records, check_mode=True, state="written", components=COMPONENTS)
    assert planned["changed"] and planned["manifest_sha256"] is None and planned["count"] == 13
    assert tree(bundle) == before and not (bundle / "manifest.json").exists()
    assert written(bundle, records)["hashed_files"] == 0  # the plan filled the record
    again = run(bundle, records, check_mode=True, state="written", components=COMPONENTS)
    assert not again["changed"] and again["hashed_files"] == 0 and again["manifest_sha256"]
    other = run(bundle, records, check_mode=True, state="written", components={"images": []})
    assert other["changed"] and json.loads((bundle / "manifest.json").read_text())["components"] == COMPONENTS


def test_other_components_or_a_new_file_rewrite_the_manifest(bundle, records):
    written(bundle, records)
    rewritten = run(bundle, records, state="written", components={"images": []})
    assert rewritten["changed"] and rewritten["files_changed"] == []
    assert json.loads((bundle / "manifest.json").read_text())["components"] == {"images": []}
    (bundle / "inventory" / "group_vars.yml").write_text("x: 1\n")
    flip_byte(bundle / IMAGE)
    again = written(bundle, records)
    assert again["changed"] and again["files_added"] == ["inventory/group_vars.yml"]
    assert again["files_changed"] == [IMAGE] and again["hashed_files"] == 2
    assert not verified(bundle, records).get("failed")


def test_a_flipped_byte_fails_the_check_naming_the_file(bundle, records):
    written(bundle, records)
    before = tree(bundle)
    flip_byte(bundle / IMAGE, offset=8 * MiB + 5)  # in the second read block
    after = tree(bundle)
    result = verified(bundle, records)
    assert result["failed"] and not result["changed"]
    assert result["changed_files"] == [IMAGE] and result["missing_files"] == [] and result["extra_files"] == []
    size = (bundle / IMAGE).stat().st_size
    assert result["msg"].startswith("bundle %s is not as made: %s changed (sha256 " % (bundle, IMAGE))
    assert result["msg"].endswith(", size %d as recorded)" % size)
    assert result["hashed_files"] == 1  # the others were trusted: only the file whose mtime moved was read
    assert tree(bundle) == after != before  # verifying touches nothing
    # Every run finds it again: a failed hash is never recorded as the truth.
    assert verified(bundle, records)["changed_files"] == [IMAGE]


def test_a_flipped_byte_behind_a_restored_mtime_passes_the_record_and_fails_verify_full(bundle, records):
    """The documented limit of the stat record: a change that keeps the size, the inode and puts the old mtime back
    is trusted by verify=sha256; verify=full reads every byte and names the file."""
    written(bundle, records)
    blob = bundle / HF / "blobs" / ("1" * 64)
    st = os.stat(str(blob))
    flip_byte(blob)
    os.utime(str(blob), ns=(st.st_atime_ns, st.st_mtime_ns))
    assert os.stat(str(blob)).st_mtime_ns == st.st_mtime_ns
    trusted = verified(bundle, records)
    assert not trusted.get("failed") and trusted["hashed_files"] == 0  # trusted: the limit, not a bug
    full = verified(bundle, records, verify="full")
    assert full["failed"] and full["changed_files"] == [HF + "/blobs/" + "1" * 64]
    assert HF + "/blobs/" + "1" * 64 + " changed (sha256 " in full["msg"]
    # verify=full put the true hash in the record: now verify=sha256 catches it too.
    assert verified(bundle, records)["changed_files"] == [HF + "/blobs/" + "1" * 64]


def test_a_deleted_file_is_missing(bundle, records):
    written(bundle, records)
    os.unlink(str(bundle / HF / "blobs" / ("2" * 64)))
    result = verified(bundle, records)
    assert result["failed"] and result["missing_files"] == [HF + "/blobs/" + "2" * 64]
    assert result["changed_files"] == [] and result["extra_files"] == []
    assert "%s/blobs/%s is missing" % (HF, "2" * 64) in result["msg"]


def test_an_added_file_is_extra_unless_ignored(bundle, records):
    written(bundle, records)
    (bundle / "apt" / "noble" / "stray.deb").write_bytes(b"x")
    (bundle / "logs").mkdir()
    (bundle / "logs" / "copy.log").write_text("copied\n")
    result = verified(bundle, records)
    assert result["failed"] and result["extra_files"] == ["apt/noble/stray.deb", "logs/copy.log"]
    assert "apt/noble/stray.deb is extra (not in the manifest)" in result["msg"]
    assert result["changed_files"] == result["missing_files"] == []
    assert not verified(bundle, records, ignore=["logs", "*.deb"]).get("failed")
    assert verified(bundle, records, ignore=["logs"])["extra_files"] == ["apt/noble/stray.deb"]


def test_an_ignored_path_is_left_out_of_the_manifest(bundle, records):
    (bundle / "logs").mkdir()
    (bundle / "logs" / "make.log.tmp-1").write_text("not part of the bundle\n")
    result = written(bundle, records, ignore=["logs"])
    assert not [p for p in json.loads((bundle / "manifest.json").read_text())["files"] if p.startswith("logs")]
    assert result["count"] == 13
    assert verified(bundle, records)["extra_files"] == ["logs/make.log.tmp-1"]
    assert not verified(bundle, records, ignore=["logs"]).get("failed")


def test_a_retargeted_or_replaced_link_is_changed(bundle, records):
    written(bundle, records)
    link = bundle / HF / "snapshots" / COMMIT / "model-00001-of-00002.safetensors"
    link.unlink()
    link.symlink_to("../../blobs/" + "2" * 64)
    config = bundle / HF / "snapshots" / COMMIT / "sub" / "config.json"
    config.unlink()
    config.write_text("{}")
    result = verified(bundle, records)
    rel = HF + "/snapshots/" + COMMIT
    assert result["changed_files"] == [rel + "/model-00001-of-00002.safetensors", rel + "/sub/config.json"]
    assert "changed (a symlink to ../../blobs/%s instead of ../../blobs/%s)" % ("2" * 64, "1" * 64) in result["msg"]
    assert "sub/config.json is a file, recorded as a symlink to ../../../blobs/" in result["msg"]


@pytest.mark.parametrize("target, words", [
    ("../../blobs/" + "9" * 64, "is a dangling symlink"),
    ("../../../../../../outside.bin", "is a symlink to ../../../../../../outside.bin, outside the bundle"),
    ("/etc/hostname", "is an absolute symlink (to /etc/hostname): it breaks when the bundle moves"),
])
def test_write_refuses_a_dangling_or_outside_symlink_naming_it(bundle, records, target, words):
    bad = bundle / HF / "snapshots" / COMMIT / "model-00003-of-00002.safetensors"
    bad.symlink_to(target)
    result = run(bundle, records, state="written")
    assert result["failed"] and not (bundle / "manifest.json").exists()
    assert result["msg"].startswith("bundle %s cannot be written: %s/snapshots/%s/model-00003-of-00002.safetensors %s"
                                    % (bundle, HF, COMMIT, words))


def test_write_refuses_a_link_whose_real_path_leaves_the_bundle(bundle, records, tmp_path):
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "x").write_text("x")
    (bundle / "checkpoints" / "hop").symlink_to("../../elsewhere")  # itself outside
    (bundle / "inventory" / "via").symlink_to("../checkpoints/hop/x")  # inside on paper, outside for real
    result = run(bundle, records, state="written")
    assert result["failed"] and "checkpoints/hop is a symlink to ../../elsewhere, outside the bundle" in result["msg"]
    assert "inventory/via is a symlink to ../checkpoints/hop/x, which leads outside the bundle" in result["msg"]


@pytest.mark.parametrize("name", ["kimi.tar.zst.tmp-8812", "model-00001.safetensors.incomplete", "pkg.deb.part",
                                  ".manifest.json.tmp-x1y2"])
def test_write_refuses_an_unfinished_file_naming_it(bundle, records, name):
    (bundle / "images" / name).write_bytes(b"half")
    result = run(bundle, records, state="written")
    assert result["failed"] and result["option"] is None
    assert result["msg"].startswith("bundle %s cannot be written: images/%s looks unfinished" % (bundle, name))
    assert not (bundle / "manifest.json").exists()


def test_write_refuses_a_fifo(bundle, records):
    os.mkfifo(str(bundle / "inventory" / "pipe"))
    result = run(bundle, records, state="written")
    assert result["failed"] and "inventory/pipe is a fifo: a bundle holds only files, folders and symlinks" in result["msg"]


def test_verify_names_a_missing_malformed_or_foreign_manifest(bundle, records):
    manifest = bundle / "manifest.json"
    result = verified(bundle, records)
    assert result["failed"] and "has no manifest: %s is missing" % manifest in result["msg"]
    manifest.write_text("{\"format\": ")
    result = verified(bundle, records)
    assert result["failed"] and result["msg"].startswith("manifest %s is not valid JSON" % manifest)
    manifest.write_text(json.dumps({"format": "something/else", "files": {}}))
    result = verified(bundle, records)
    assert result["failed"] and "manifest %s is not a kimi.deploy bundle manifest" % manifest in result["msg"]
    # A malformed manifest is rewritten by state=written.
    assert written(bundle, records)["changed"]
    assert not verified(bundle, records).get("failed")


def test_the_message_lists_twenty_problems_then_counts_the_rest(bundle, records):
    written(bundle, records)
    for i in range(25):
        (bundle / "inventory" / ("extra-%02d.yml" % i)).write_text("x")
    flip_byte(bundle / "collection" / "kimi-deploy-0.2.0.tar.gz")
    result = verified(bundle, records)
    lines = result["msg"].split("\n")
    assert lines[0].startswith("bundle %s is not as made: collection/kimi-deploy-0.2.0.tar.gz changed" % bundle)
    assert len(lines) == 21 and lines[-1] == "and 6 more"
    assert len(result["extra_files"]) == 25 and len(result["problems"]) == 26


def test_fresh_files_are_hashed_again_until_their_mtime_is_safely_old(bundle, records):
    written(bundle, records)
    (bundle / "inventory" / "hosts.yml").write_text("all: {}\n")  # mtime now: a write in this tick would not show
    assert written(bundle, records)["hashed_files"] == 1
    assert written(bundle, records)["hashed_files"] == 1
    backdate(str(bundle / "inventory" / "hosts.yml"))
    assert written(bundle, records)["hashed_files"] == 1
    assert written(bundle, records)["hashed_files"] == 0


def test_options_are_refused_naming_them(bundle, records, tmp_path):
    assert run(tmp_path / "nope", records, state="written")["option"] == "path"
    inside = run(bundle, bundle / ".records", state="written")
    assert inside["failed"] and inside["option"] == "record_dir" and "inside the bundle" in inside["msg"]
    assert run(bundle, records, hash_workers=0)["option"] == "hash_workers"
    assert run(bundle, records, state="written", components=["x"])["option"] == "components"


def test_a_record_that_cannot_be_saved_is_a_warning(bundle, records, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    result = run(bundle, blocker / "records", state="written", components=COMPONENTS)
    assert result["changed"] and not result.get("failed")
    assert result["warnings"] and "could not save the verification record" in result["warnings"][0]
    assert not verified(bundle, blocker / "records").get("failed")


# ------------------------------------------------------------------------------ through ansible, as a playbook runs it

def ansible(*args, **module_args):
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_LOAD_CALLBACK_PLUGINS="1", ANSIBLE_STDOUT_CALLBACK="json",
               PATH=BIN + os.pathsep + os.environ["PATH"])
    proc = subprocess.run([os.path.join(BIN, "ansible"), "localhost", "-i", "localhost,", "-c", "local",
                           "-e", "ansible_python_interpreter=" + sys.executable,
                           "-m", "kimi.deploy.bundle_manifest", "-a", json.dumps(module_args)] + list(args),
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)
    try:
        output = json.loads(proc.stdout)
    except ValueError:
        raise AssertionError("ansible printed no JSON (rc %d): %s %s" % (proc.returncode, proc.stdout, proc.stderr))
    return proc.returncode, output["plays"][0]["tasks"][0]["hosts"]["localhost"]


def test_through_ansible_write_verify_and_a_failure_with_its_lists(bundle, records):
    common = dict(path=str(bundle), record_dir=str(records))
    rc, plan = ansible("--check", state="written", components=COMPONENTS, **common)
    assert rc == 0 and plan["changed"] and not (bundle / "manifest.json").exists()
    rc, made = ansible(state="written", components=COMPONENTS, hash_workers=2, **common)
    assert rc == 0 and made["changed"] and made["count"] == 13 and made["bundle"] == str(bundle)
    rc, again = ansible(state="written", components=COMPONENTS, **common)
    assert rc == 0 and not again["changed"] and again["hashed_files"] == 0
    rc, check = ansible(**common)
    assert rc == 0 and not check["changed"] and check["components"] == COMPONENTS
    assert check["manifest_sha256"] == hashlib.sha256((bundle / "manifest.json").read_bytes()).hexdigest()
    os.unlink(str(bundle / "empty.txt"))
    flip_byte(bundle / IMAGE)
    rc, bad = ansible(**common)
    assert rc != 0 and bad["failed"] and not bad["changed"]
    assert bad["changed_files"] == [IMAGE] and bad["missing_files"] == ["empty.txt"] and bad["extra_files"] == []
    assert bad["msg"].startswith("bundle %s is not as made: %s changed" % (bundle, IMAGE))
    assert bad["msg"].endswith("\nempty.txt is missing")


def test_through_ansible_a_bad_option_is_named(bundle, records):
    rc, result = ansible(path=str(bundle / "nope"), record_dir=str(records))
    assert rc != 0 and result["option"] == "path" and "is not a folder" in result["msg"]
