#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: bundle_manifest
short_description: Write the sha256 manifest of an air-gapped bundle, or prove a copy of the bundle is exactly as made
description:
  - An air-gapped bundle is one folder made on a connected machine and carried to offline ones - engine images
    (C(.tar.zst)), Hugging Face cache folders with their blobs and relative symlinks, a signed apt repository per
    release, the collection tarball, a copy of the inventory. C(<path>/manifest.json) lists every file in it with its
    size and sha256 and every symlink with its target; folders are implied by the paths.
  - O(state=written), on the connected machine, walks O(path) (files and symlinks, sorted, relative POSIX paths;
    symlinks are not followed), hashes the files in parallel and writes C(manifest.json) atomically (a temporary
    file in the bundle, flushed to disk and renamed). Nothing is written, and RV(ignore:changed=false), when the
    manifest already lists the same files and O(components); its C(created) time then stays.
  - O(state=written) refuses an unfinished or not self-contained bundle, naming the files - a file whose name holds
    C(.tmp-) or ends in C(.incomplete), C(.part) or C(.kimi-partial) (still being written), a symlink that is
    absolute, leads outside O(path) or dangles, and a fifo, socket or device.
  - O(state=verified), on the offline side, reads C(manifest.json) and checks every listed path - it exists, is a
    file or a symlink as recorded, the symlink's target, the size, the sha256. A file in the bundle that the manifest
    does not list fails the check too (the bundle must be exactly what was made), unless O(ignore) matches it. The
    failure lists one problem a line (at most 20, then how many more) and returns them all in RV(changed_files),
    RV(missing_files) and RV(extra_files). It never changes the bundle, so it always reports RV(ignore:changed=false).
  - A 600 GB bundle takes minutes to hash, so a verification record outside the bundle (in O(record_dir)) keeps each
    file's size, mtime (ns) and inode with its sha256; a file whose stat still matches is trusted without being
    read again. A write changes the mtime, a replaced file the inode. The record cannot see a change that keeps the
    size and puts the old mtime back (C(touch -d), C(os.utime)) - O(verify=full) re-reads every byte. Updating the
    record is not a change to the bundle.
version_added: 1.0.0
author: kimi.deploy maintainers (@kimi-deploy)
options:
  path:
    description: The bundle folder.
    type: path
    required: true
  state:
    description:
      - V(written) - make C(<path>/manifest.json) from what the folder holds now.
      - V(verified) - check the folder against its C(manifest.json); fail naming every difference.
    type: str
    choices: [written, verified]
    default: verified
  components:
    description:
      - What the bundle holds, stored verbatim in the manifest by O(state=written) and returned by O(state=verified) -
        for example the engine images, the checkpoints and their commits, the apt releases, the collection version.
      - A different value rewrites the manifest. Not used by O(state=verified).
    type: dict
    default: {}
  verify:
    description:
      - V(sha256) - hash each file once, then trust the verification record while its size, mtime and inode are
        unchanged.
      - V(full) - hash every file now, whatever the record says (the record is then updated).
    type: str
    choices: [sha256, full]
    default: sha256
  hash_workers:
    description: Files hashed in parallel, 1 to 256. Default - the number of CPUs.
    type: int
  record_dir:
    description:
      - Folder of the verification records, outside the bundle; the record of a bundle is
        C(<record_dir>/<sha256 of the bundle's absolute real path>.json).
      - A record that cannot be written is a warning, not a failure (the next run hashes everything again).
    type: path
    default: ~/.cache/kimi-deploy/bundle-records
  ignore:
    description:
      - Globs (fnmatch, where C(*) also matches C(/)) of paths that are not part of the bundle. A glob matches a path
        relative to O(path), a folder above it, or its file name - C(logs) skips the folder, C(*.log) every log file,
        C(*/.kimi-snapshot/*) the records C(kimi.deploy.hf_snapshot) keeps in a cache.
      - O(state=written) leaves them out of the manifest; O(state=verified) does not report them as extra. Paths the
        manifest lists are always checked.
    type: list
    elements: str
    default: []
notes:
  - A failure caused by one option's value returns that option's name in RV(option).
  - The manifest itself and the folders are not listed; empty folders are not part of the bundle.
  - Hard links are listed (and hashed) once per path.
attributes:
  check_mode:
    support: full
    description:
      - O(state=written) hashes the files and reports whether it would write the manifest, and writes nothing in the
        bundle (it may update the verification record, outside it).
      - O(state=verified) runs as without check mode.
  diff_mode:
    support: none
    description: No diff; O(state=written) returns the paths added, removed and changed since the last manifest.
  platform:
    support: full
    platforms: posix
    description: Any POSIX host with Python 3.
seealso:
  - module: kimi.deploy.image_archive
  - module: kimi.deploy.hf_snapshot
"""

EXAMPLES = r"""
- name: Seal the bundle on the connected machine
  kimi.deploy.bundle_manifest:
    path: /srv/kimi-bundle
    state: written
    components:
      images: [kimi-k26-nvfp4-vllm:cu130-mla]
      checkpoints:
        moonshotai/Kimi-K2.6: "{{ kimi_int4_revision }}"
      apt_releases: [noble]
      collection: kimi.deploy 0.3.0

- name: Prove the copy on the offline side before using it
  kimi.deploy.bundle_manifest:
    path: /mnt/usb/kimi-bundle
  register: bundle

- name: Re-read every byte, ignoring the stat record (after a suspicious copy)
  kimi.deploy.bundle_manifest:
    path: /mnt/usb/kimi-bundle
    verify: full
    ignore: ["*/.kimi-snapshot/*"]
"""

RETURN = r"""
bundle:
  description: The bundle folder, O(path) made absolute.
  returned: always, unless an option is refused
  type: str
manifest:
  description: The manifest file, C(<path>/manifest.json).
  returned: always, unless an option is refused
  type: str
record:
  description: The verification record of this bundle (outside it).
  returned: always, unless an option is refused
  type: str
verify:
  description: The O(verify) mode in effect.
  returned: always, unless an option is refused
  type: str
components:
  description: What the bundle holds, as in the manifest (O(state=written) - O(components)).
  returned: success
  type: dict
created:
  description: When the manifest was written, ISO-8601 UTC; kept while the manifest is unchanged.
  returned: success
  type: str
  sample: "2025-01-31T12:00:00Z"
count:
  description: Paths the manifest lists (files and symlinks).
  returned: success
  type: int
bytes:
  description: Total size of the listed files.
  returned: success
  type: int
hashed_files:
  description: Files hashed by this run (the others were trusted from the verification record).
  returned: success, and on a failed check
  type: int
hashed_bytes:
  description: Bytes hashed by this run.
  returned: success, and on a failed check
  type: int
trusted_files:
  description: Files whose sha256 came from the verification record, unchanged stat.
  returned: success, and on a failed check
  type: int
manifest_sha256:
  description:
    - sha256 of C(manifest.json)'s bytes - one value that names the whole bundle, to compare across sites.
    - Null in check mode when the manifest would be written.
  returned: success
  type: str
files_added:
  description: Paths listed now and not by the previous manifest (all of them for a first manifest).
  returned: O(state=written)
  type: list
  elements: str
files_removed:
  description: Paths the previous manifest listed that are gone.
  returned: O(state=written)
  type: list
  elements: str
files_changed:
  description: Paths whose size, sha256 or symlink target differ from the previous manifest.
  returned: O(state=written)
  type: list
  elements: str
changed_files:
  description: Listed paths whose content, size, type or symlink target is not as recorded.
  returned: when O(state=verified) fails the check
  type: list
  elements: str
missing_files:
  description: Listed paths that are not in the bundle.
  returned: when O(state=verified) fails the check
  type: list
  elements: str
extra_files:
  description: Paths in the bundle that the manifest does not list (and O(ignore) does not match).
  returned: when O(state=verified) fails the check
  type: list
  elements: str
problems:
  description: Every problem, one line each (the message lists 20 at most).
  returned: when O(state=verified) fails the check
  type: list
  elements: str
duration_s:
  description: Seconds taken.
  returned: success
  type: float
option:
  description: On a failure caused by the value of one option, that option's name.
  returned: on such a failure
  type: str
  sample: path
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.kimi.deploy.plugins.module_utils._bundle.manifest import (
    DEFAULT_RECORD_DIR, Bundle, BundleError,
)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            state=dict(type="str", choices=["written", "verified"], default="verified"),
            components=dict(type="dict", default={}),
            verify=dict(type="str", choices=["sha256", "full"], default="sha256"),
            hash_workers=dict(type="int"),
            record_dir=dict(type="path", default=DEFAULT_RECORD_DIR),
            ignore=dict(type="list", elements="str", default=[]),
        ),
        supports_check_mode=True,
    )
    bundle, result, failure = None, None, None
    try:
        bundle = Bundle(module.params, check_mode=module.check_mode)
        result = bundle.run()
    except BundleError as exc:
        failure = dict(exc.result, msg=str(exc), changed=False)
        if exc.option:
            failure["option"] = exc.option
    except OSError as exc:
        failure = dict(msg="%s: %s" % (type(exc).__name__, exc), changed=False)
    for warning in bundle.warnings if bundle else []:
        module.warn(warning)
    if failure is not None:
        module.fail_json(**failure)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
