"""Offline "weight loading" from a Hugging Face hub cache, the way the real engines resolve a model.

Layout (huggingface_hub): <cache>/models--<org>--<name>/{refs/main, snapshots/<sha>/..., blobs/...}
where snapshot files are usually relative symlinks into ../../blobs.
"""
import json
import os
import re

_SHA = re.compile(r"^[0-9a-f]{40}$")


class LoadError(Exception):
    """Start-up failure while resolving or reading the checkpoint (the engine exits non-zero)."""


def cache_root(env=None):
    env = os.environ if env is None else env
    if env.get("HF_HUB_CACHE"):
        return env["HF_HUB_CACHE"]
    if env.get("HF_HOME"):
        return os.path.join(env["HF_HOME"], "hub")
    return os.path.join(os.path.expanduser("~"), ".cache", "huggingface", "hub")


def _offline(env):
    return env.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on")


def _missing(env, what, path):
    if _offline(env):
        return LoadError(
            "huggingface_hub.errors.LocalEntryNotFoundError: Cannot find the requested files in the local "
            "cache and outgoing traffic has been disabled (HF_HUB_OFFLINE=1). To enable hf.co look-ups and "
            "downloads online, set 'local_files_only' to False. [engine double: %s: %s]" % (what, path))
    return LoadError(
        "OSError: We couldn't connect to 'https://huggingface.co' to load the files, and couldn't find them "
        "in the cached files. [engine double: %s: %s; the double never downloads]" % (what, path))


def resolve_snapshot(model, revision=None, env=None):
    """Return the snapshot directory for a repo id or local directory, or raise LoadError."""
    env = os.environ if env is None else env
    if os.path.isdir(model):
        if not os.path.isfile(os.path.join(model, "config.json")):
            raise LoadError("OSError: %s does not appear to have a file named config.json." % model)
        return os.path.abspath(model)
    if model.startswith(("/", ".")) or model.count("/") != 1 or not all(model.split("/")):
        raise LoadError("huggingface_hub.errors.HFValidationError: Repo id must be in the form 'repo_name' "
                        "or 'namespace/repo_name': '%s'. Use `repo_type` argument if needed." % model)
    repo_dir = os.path.join(cache_root(env), "models--" + model.replace("/", "--"))
    if not os.path.isdir(repo_dir):
        raise _missing(env, "no cached repo", repo_dir)
    revision = revision or "main"
    sha = revision if _SHA.match(revision) else None
    if sha is None:
        ref = os.path.join(repo_dir, "refs", revision)
        if not os.path.isfile(ref):
            raise _missing(env, "no ref", ref)
        with open(ref, encoding="utf-8") as f:
            sha = f.read().strip()
    snapshot = os.path.join(repo_dir, "snapshots", sha)
    if not os.path.isdir(snapshot):
        raise _missing(env, "no snapshot", snapshot)
    if not os.path.isfile(os.path.join(snapshot, "config.json")):
        raise _missing(env, "no config.json in snapshot", snapshot)
    return snapshot


def check_remote_code(snapshot, env=None):
    """Mimic the NVFP4 offline trust_remote_code failure (transformers >= 5.10 + symlinked .py files).

    Only with KIMI_DOUBLE_REMOTE_CODE_STRICT=1: a symlinked *.py in the snapshot makes the sibling import
    resolve under blobs/, where no file of that name exists.
    """
    env = os.environ if env is None else env
    if env.get("KIMI_DOUBLE_REMOTE_CODE_STRICT") != "1":
        return
    for name in sorted(os.listdir(snapshot)):
        path = os.path.join(snapshot, name)
        if name.endswith(".py") and os.path.islink(path):
            missing = os.path.join(os.path.dirname(os.path.realpath(path)), name)
            raise LoadError("FileNotFoundError: [Errno 2] No such file or directory: '%s'" % missing)


def load(model, revision=None, env=None, trust_remote_code=False):
    """Resolve the snapshot and read every file once. Returns a summary dict."""
    env = os.environ if env is None else env
    snapshot = resolve_snapshot(model, revision, env)
    if trust_remote_code:
        check_remote_code(snapshot, env)
    files = total = 0
    for top, _dirs, names in os.walk(snapshot):
        for name in sorted(names):
            path = os.path.join(top, name)
            try:
                with open(path, "rb") as f:
                    while True:
                        chunk = f.read(1 << 20)
                        if not chunk:
                            break
                        total += len(chunk)
            except OSError as e:
                raise LoadError("FileNotFoundError: [Errno 2] No such file or directory: '%s' (%s)"
                                % (os.path.realpath(path), e.strerror))
            files += 1
    try:
        with open(os.path.join(snapshot, "config.json"), encoding="utf-8") as f:
            config = json.load(f)
    except ValueError as e:
        raise LoadError("json.decoder.JSONDecodeError in config.json: %s" % e)
    return {"snapshot": snapshot, "files": files, "bytes": total, "config": config}
