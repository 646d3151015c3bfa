#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: kernel_cache
short_description: Publish a verified kernel cache, fetch a matching one from fleet peers, or install the bundle's
description:
  - The engines' compile and autotune caches live under O(root), one folder per cache key (kimi_serve). After a
    verified start V(published) archives the key's folder as C(<key>.tar) and writes C(<key>.verified) (the key, its
    parts, the archive's size and sha256), the marker last; the fleet's peer caches (kimi_weights) serve both.
  - V(fetched), before the first start of a key on a host (its folder empty), asks each peer for the key's marker,
    refuses one of another key or without an archive record, downloads the archive into a temporary folder beside the
    key's (curl, the peers' CA and key, as kimi.deploy.hf_snapshot does), checks its size and sha256 and renames the
    unpacked tree into place. A key no peer holds is not an error - the engine compiles as before.
  - V(installed) does the same from a folder holding archives and markers (the air-gap bundle's C(kernels/)), for every
    key it holds whose folder here is empty.
  - V(collected) copies the verified caches of O(src) (a marker and the archive that matches it) into O(root) - the
    air-gap bundle's C(kernels/); a key without a marker, or whose archive does not match it, is not carried.
version_added: 1.0.0
author: kimi.deploy maintainers (@kimi-deploy)
options:
  root:
    description: The kernel cache folder (kimi_serve_kernel_cache_dir, default kimi_deployment.kernel_cache.host_dir).
    type: path
    required: true
  key:
    description: The cache key (kimi.deploy.kernel_cache_key). Required for V(published) and V(fetched).
    type: str
  state:
    description: What to do.
    type: str
    choices: [published, fetched, installed, collected]
    default: fetched
  record:
    description: What the marker records besides the archive (V(published)) - identity, key parts.
    type: dict
    default: {}
  peers:
    description: The fleet's peer caches, C(name) and C(url) each (C(kimi_weights_peers.peers), kimi_weights' output).
    type: list
    elements: dict
    default: []
  peer_key:
    description: The fleet's key, sent as C(Authorization) in curl's configuration on standard input.
    type: str
  peer_ca_bundle:
    description: The CA roots of the peers' TLS.
    type: path
  src:
    description: The folder of archives and markers to install from (V(installed)) or collect from (V(collected)).
    type: path
notes:
  - Supports check mode - reports what it would fetch or install and changes nothing.
attributes:
  check_mode:
    support: full
    description: Reports only.
  diff_mode:
    support: none
    description: No diff.
"""

EXAMPLES = r"""
- name: Fetch the kernel cache of this key from a peer before the first start
  kimi.deploy.kernel_cache:
    root: /var/cache/kimi-k26/kernels
    key: "{{ key }}"
    state: fetched
    peers: "{{ kimi_weights_peers.peers }}"  # [{name: gpu-2, url: "https://10.0.0.12:8444"}, ...]
    peer_key: "{{ kimi_weights_peers.key }}"
    peer_ca_bundle: "{{ kimi_weights_peers.ca_file }}"
"""

RETURN = r"""
fetched:
  description: Whether the key's folder came from a peer (V(fetched)).
  returned: success
  type: bool
source:
  description: The peer it came from.
  returned: success
  type: str
files:
  description: Files in the key's folder after the task.
  returned: success
  type: int
tried:
  description: Why each peer asked gave nothing.
  returned: success
  type: list
  elements: str
installed:
  description: The keys installed (V(installed)) or carried (V(collected)).
  returned: success
  type: list
  elements: str
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.kimi.deploy.plugins.module_utils._hf.hub import Curl, TransientError, read_head
from ansible_collections.kimi.deploy.plugins.module_utils._model import kernel_cache_transfer as transfer


def curl_get(curl, headers, ca_bundle):
    """get(url, dest) for transfer.fetch: the body into dest on 200; the HTTP status (0 when no answer came)."""
    def get(url, dest):
        proc = curl.spawn(curl.config(url, headers=headers, ca_bundle=ca_bundle, max_time=3600))
        try:
            status, _reason, _headers = read_head(proc.stdout)
        except TransientError:
            curl.finish(proc)
            return 0
        if status == 200:
            with open(dest, "wb") as out:
                for block in iter(lambda: proc.stdout.read(transfer.CHUNK), b""):
                    out.write(block)
        else:
            proc.stdout.read()
        code, _err = curl.finish(proc)
        return status if code == 0 else 0
    return get


def main():
    module = AnsibleModule(
        argument_spec=dict(
            root=dict(type="path", required=True),
            key=dict(type="str", no_log=False),
            state=dict(type="str", default="fetched", choices=["published", "fetched", "installed", "collected"]),
            record=dict(type="dict", default={}),
            peers=dict(type="list", elements="dict", default=[]),
            peer_key=dict(type="str", no_log=True),
            peer_ca_bundle=dict(type="path"),
            src=dict(type="path"),
        ),
        required_if=[("state", "published", ["key"]), ("state", "fetched", ["key"]), ("state", "installed", ["src"]),
                     ("state", "collected", ["src"])],
        supports_check_mode=True,
    )
    p = module.params
    root = p["root"]
    if not os.path.isdir(root):
        if module.check_mode:  # the task before creates it
            module.exit_json(changed=False, fetched=False, source=None, files=0, installed=[], tried=[])
        module.fail_json(msg="kernel cache folder %s does not exist (kimi_serve_kernel_cache_dir)" % root)
    try:
        if p["state"] == "published":
            folder = transfer.paths(root, p["key"])[0]
            if module.check_mode:
                module.exit_json(changed=False, fetched=False, files=transfer.files_in(folder))
            changed, marker = transfer.publish(root, p["key"], p["record"])
            module.exit_json(changed=changed, fetched=False, files=transfer.files_in(folder), marker=marker)
        if p["state"] == "collected":
            if module.check_mode:
                module.exit_json(changed=False, installed=[], tried=[], fetched=False, files=0)
            copied, refused = transfer.collect(p["src"], root)
            module.exit_json(changed=bool(copied), installed=copied, tried=refused, fetched=False, files=0)
        if p["state"] == "installed":
            installed, skipped = [], []
            names = sorted(os.listdir(p["src"])) if os.path.isdir(p["src"]) else []
            for name in names:
                if not name.endswith(transfer.MARKER):
                    continue
                key = name[:-len(transfer.MARKER)]
                try:
                    transfer.check_key(key)
                    arch = transfer.check_marker(transfer.read_marker(os.path.join(p["src"], name)), key)
                    if not transfer.needs_fetch(root, key):
                        skipped.append("%s: already here" % key)
                        continue
                    if not module.check_mode:
                        transfer.install(root, key, os.path.join(p["src"], key + transfer.ARCHIVE), arch)
                    installed.append(key)
                except (transfer.TransferError, IOError, OSError) as exc:
                    skipped.append("%s: refused, %s" % (key, exc))
            module.exit_json(changed=bool(installed), installed=installed, tried=skipped, fetched=False, files=0)
        # fetched
        key = transfer.check_key(p["key"])
        folder = transfer.paths(root, key)[0]
        if not transfer.needs_fetch(root, key):
            module.exit_json(changed=False, fetched=False, source=None, files=transfer.files_in(folder),
                             tried=["this host holds the key's cache"])
        if not p["peers"]:
            module.exit_json(changed=False, fetched=False, source=None, files=0, tried=[])
        if module.check_mode:
            module.exit_json(changed=False, fetched=False, source=None, files=0,
                             tried=["check mode: would ask %s" % ", ".join(x["name"] for x in p["peers"])])
        curl_path = module.get_bin_path("curl", required=True)
        headers = ["Authorization: Bearer " + p["peer_key"]] if p["peer_key"] else []
        curl = Curl(curl_path, "https://peers.invalid", ca_bundle=p["peer_ca_bundle"])
        result = transfer.fetch(root, key, p["peers"], curl_get(curl, headers, p["peer_ca_bundle"]))
        module.exit_json(changed=result["fetched"], **result)
    except transfer.TransferError as exc:
        module.fail_json(msg="kernel cache: %s" % exc)


if __name__ == "__main__":
    main()
