#!/usr/bin/env python
"""Checks a hub cache written by kimi.deploy.hf_snapshot against the fake hub's manifests (runs in the instance)."""
import argparse
import fnmatch
import hashlib
import json
import os
import pwd
import sys
import urllib.request


def fetch(url):
    with urllib.request.urlopen(url, timeout=10) as resp:
        return json.load(resp)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hf-home", required=True)
    ap.add_argument("--hub", required=True)
    ap.add_argument("--owner", required=True)
    ap.add_argument("--materialized", default="*.py")
    ap.add_argument("--token-file", required=True)
    ap.add_argument("--repo", action="append", required=True, help="a repo the converge fetched (repeat)")
    args = ap.parse_args()
    info = fetch(args.hub + "/_fake/info")
    uid = pwd.getpwnam(args.owner).pw_uid
    with open(args.token_file) as handle:
        token = handle.read().strip()
    errors = []
    missing = sorted(set(args.repo) - set(info["commits"]))
    if missing:
        errors.append("not on the fake hub: %s" % ", ".join(missing))
    for repo_id, commit in sorted((r, c) for r, c in info["commits"].items() if r in args.repo):
        repo_dir = os.path.join(args.hf_home, "hub", "models--" + repo_id.replace("/", "--"))
        with open(os.path.join(repo_dir, "refs", "main"), "rb") as handle:
            if handle.read() != commit.encode():
                errors.append("%s: refs/main is not exactly the commit" % repo_id)
        if not os.path.isfile(os.path.join(repo_dir, "trees", commit + ".json")):
            errors.append("%s: no trees/%s.json" % (repo_id, commit))
        snapshot = os.path.join(repo_dir, "snapshots", commit)
        files = info["manifests"][repo_id]["files"]
        for item in files:
            path = os.path.join(snapshot, item["path"])
            real = fnmatch.fnmatch(os.path.basename(item["path"]), args.materialized)
            if real and (os.path.islink(path) or not os.path.isfile(path)):
                errors.append("%s: %s should be a real file" % (repo_id, item["path"]))
            if not real:
                target = os.readlink(path)
                expected = "../" * (item["path"].count("/") + 2) + "blobs/" + item["etag"]
                if target != expected:
                    errors.append("%s: %s -> %s, expected %s" % (repo_id, item["path"], target, expected))
            with open(path, "rb") as handle:
                digest = hashlib.sha256(handle.read()).hexdigest()
            if digest != item["sha256"]:
                errors.append("%s: %s has wrong bytes" % (repo_id, item["path"]))
            if os.stat(path).st_uid != uid:
                errors.append("%s: %s is not owned by %s" % (repo_id, item["path"], args.owner))
        for name in os.listdir(os.path.join(repo_dir, "blobs")):
            if name.endswith((".kimi-partial", ".kimi-partial.json")):
                errors.append("%s: partial blob left: %s" % (repo_id, name))
        print("%s@%s: %d files checked" % (repo_id, commit[:12], len(files)))
    for root, unused, names in os.walk(args.hf_home):
        for name in names:
            if name.endswith(".json") and "progress" in name:
                with open(os.path.join(root, name)) as handle:
                    if token in handle.read():
                        errors.append("the token is in %s" % name)
    log = fetch(args.hub + "/_fake/requests")
    if any(entry["auth"] for entry in log if entry["role"] == "cdn"):
        errors.append("a request to the CDN carried Authorization")
    if not any(entry["auth"] for entry in log if entry["role"] == "hub" and entry.get("repo") == "nvidia/Kimi-K2.6-NVFP4"):
        errors.append("no authorised hub request for the private repo (was the token used?)")
    print("requests: %d hub, %d cdn" % (sum(e["role"] == "hub" for e in log), sum(e["role"] == "cdn" for e in log)))
    for error in errors:
        print("ERROR: " + error)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
