"""Helpers for tests/integration/test_hf_snapshot.py: run the hf_snapshot module and the real huggingface_hub
client as subprocesses against the fake hub (tests/doubles/hub/fake_hub.py), and read the cache they leave."""
import hashlib
import json
import os
import subprocess
import sys
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODULE = os.path.join(ROOT, "plugins", "modules", "hf_snapshot.py")
COLLECTIONS = os.path.join(ROOT, ".collections")
HUB_DIR = os.path.join(ROOT, "tests", "doubles", "hub")
MiB = 1 << 20

if HUB_DIR not in sys.path:
    sys.path.insert(0, HUB_DIR)
import fake_hub  # noqa: E402  pylint: disable=wrong-import-position


def clean_env(**extra):
    """The environment without HF_* variables, so the module and the client only see what a test gives them."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env.update(PYTHONDONTWRITEBYTECODE="1", PYTHONPATH=COLLECTIONS)
    env.update(extra)
    return env


def module_argv(tmp_dir, args, check_mode=False, name="args.json"):
    """Write the module's argument file; return the command line that runs the module on it."""
    payload = dict(args)
    if check_mode:
        payload["_ansible_check_mode"] = True
    path = os.path.join(str(tmp_dir), name)
    with open(path, "w") as handle:
        json.dump({"ANSIBLE_MODULE_ARGS": payload}, handle)
    return [sys.executable, MODULE, path]


def parse_result(stdout, stderr, returncode):
    try:
        return json.loads(stdout)
    except ValueError:
        raise AssertionError("module printed no JSON (rc %s):\nstdout: %s\nstderr: %s" % (returncode, stdout[-3000:], stderr[-3000:]))


def run_module(tmp_dir, args, check_mode=False, expect_ok=True, timeout=120, env=None):
    """Run hf_snapshot once (env: variables to set or override); returns (result dict, raw stdout)."""
    proc = subprocess.run(module_argv(tmp_dir, args, check_mode), env=clean_env(**(env or {})), capture_output=True,
                          text=True, timeout=timeout, check=False)
    result = parse_result(proc.stdout, proc.stderr, proc.returncode)
    if expect_ok:
        assert proc.returncode == 0 and not result.get("failed"), "module failed: %s\nstderr: %s" % (
            json.dumps(result, indent=1)[:4000], proc.stderr[-3000:])
    else:
        assert proc.returncode != 0 and result.get("failed"), "module did not fail: %s" % json.dumps(result)[:3000]
    return result, proc.stdout


def start_module(tmp_dir, args, name="args-bg.json"):
    """Start hf_snapshot in its own process group (so that killpg takes its curl children too)."""
    return subprocess.Popen(module_argv(tmp_dir, args, name=name), env=clean_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)


def run_client(hub, home, code, offline=True, timeout=120):
    """Run `code` with the real huggingface_hub in a subprocess (its env is read at import); the last stdout line
    must be JSON, which is returned."""
    env = clean_env(HF_ENDPOINT=hub.url, HF_HUB_DISABLE_XET="1", HF_HOME=str(home), HF_HUB_DISABLE_TELEMETRY="1",
                    HF_HUB_DISABLE_PROGRESS_BARS="1")
    env.pop("PYTHONPATH")
    if offline:
        env["HF_HUB_OFFLINE"] = "1"
    prog = "import json, hashlib, huggingface_hub as hh\n" + textwrap.dedent(code)
    proc = subprocess.run([sys.executable, "-c", prog], env=env, capture_output=True, text=True, timeout=timeout,
                          check=False)
    assert proc.returncode == 0, "client failed:\n%s\n%s" % (proc.stdout[-2000:], proc.stderr[-4000:])
    return json.loads(proc.stdout.strip().splitlines()[-1])


def flip_byte(path, offset=1000):
    """Change one byte in place: same size, same inode, new mtime."""
    with open(str(path), "r+b") as handle:
        handle.seek(offset)
        byte = handle.read(1)
        handle.seek(offset)
        handle.write(bytes([byte[0] ^ 0xFF]))


def sha256_file(path):
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(MiB), b""):
            digest.update(block)
    return digest.hexdigest()


def manifest(hub, repo_id):
    """path -> {path, size, sha256, lfs, oid, etag, git_sha1} as the fake hub serves it."""
    return dict((f["path"], f) for f in hub.repos[repo_id].manifest()["files"])


def expected_etag(hub, repo_id, path):
    """The blob name huggingface_hub uses, computed from the served bytes: sha256 for LFS, git blob sha1 otherwise."""
    entry = manifest(hub, repo_id)[path]
    if entry["lfs"]:
        return entry["sha256"]
    return fake_hub.git_blob_sha1(hub.repos[repo_id].by_path[path].read())


def repo_dir(home, repo_id):
    return os.path.join(str(home), "hub", "models--" + repo_id.replace("/", "--"))


def blob_path(home, repo_id, etag):
    return os.path.join(repo_dir(home, repo_id), "blobs", etag)


def snapshot_dir(home, repo_id, commit):
    return os.path.join(repo_dir(home, repo_id), "snapshots", commit)


def snapshot_files(home, repo_id, commit):
    """Repo paths of every file or link under snapshots/<commit>/."""
    root = snapshot_dir(home, repo_id, commit)
    out = []
    for folder, dirs, files in os.walk(root):
        for name in files + [d for d in dirs if os.path.islink(os.path.join(folder, d))]:
            out.append(os.path.relpath(os.path.join(folder, name), root).replace(os.sep, "/"))
    return sorted(out)


def assert_snapshot_matches(hub, home, repo_id, paths=None):
    """Every file (or the given paths) of the snapshot holds the hub's bytes; nothing else is in the snapshot."""
    commit = hub.commits[repo_id]
    man = manifest(hub, repo_id)
    paths = sorted(man) if paths is None else sorted(paths)
    assert snapshot_files(home, repo_id, commit) == paths
    root = snapshot_dir(home, repo_id, commit)
    for path in paths:
        assert sha256_file(os.path.join(root, *path.split("/"))) == man[path]["sha256"], path


def leftovers(home, repo_id):
    """Partial, state and temporary files anywhere in the repo's cache folder."""
    found = []
    for folder, unused_dirs, files in os.walk(repo_dir(home, repo_id)):
        for name in files:
            if ".kimi-partial" in name or name.endswith((".tmp", ".kimi-tmp", ".incomplete")):
                found.append(os.path.join(folder, name))
    return found


def parse_range(header):
    """(start, end_exclusive) of a 'bytes=a-b' Range header."""
    spec = header.split("=", 1)[1]
    start, end = spec.split("-")
    return int(start), int(end) + 1


def body_requests(log, path=None):
    """Requests that carried file bytes: CDN GETs and GETs on /resolve/ (git files), optionally for one file."""
    return [r for r in log if r["method"] == "GET" and (r["role"] == "cdn" or "/resolve/" in r["path"])
            and (path is None or r["file"] == path)]
