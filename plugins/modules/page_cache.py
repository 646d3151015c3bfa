#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: page_cache
short_description: Warm the page cache with a checkpoint's shards within a memory budget, or drop them from it
description:
  - V(warm) reads the shards of a Hugging Face snapshot (or the files given) into the page cache, in the order the
    engines load them, so that the next engine start reads them from memory instead of the disk. The runbook measured
    a Kimi-K2.6 load at 10-15 minutes cold from NVMe and 4-5 minutes from a warm page cache.
  - It reads only while the kernel's C(MemAvailable) stays above O(reserve_bytes) and at most O(max_bytes); files
    already resident are not read again. Page cache is reclaimable, so the serving engine's own memory is not taken;
    the reserve keeps room for what the host needs besides.
  - V(evicted) drops the files' clean pages with C(posix_fadvise DONTNEED), which needs no privilege. That makes a
    cold start, for measurements.
  - Reports the resident bytes before and after (C(mincore)). The page cache is not configuration, so the module
    always reports RV(ignore:changed=false).
version_added: 1.0.0
author: kimi.deploy maintainers (@kimi-deploy)
options:
  snapshot:
    description: A snapshot folder; its C(*.safetensors) files (symlinks resolved to the blobs) are used, sorted by name.
    type: path
  paths:
    description: Files to use instead of, or besides, O(snapshot)'s shards, in this order.
    type: list
    elements: path
    default: []
  state:
    description: V(warm) reads the files in; V(evicted) drops them.
    type: str
    choices: [warm, evicted]
    default: warm
  reserve_bytes:
    description: C(MemAvailable) that must remain after warming, bytes.
    type: int
    default: 17179869184
  max_bytes:
    description: Most bytes to read; default - no limit but memory.
    type: int
notes:
  - Supports check mode - reports what is resident and the budget, and reads nothing.
attributes:
  check_mode:
    support: full
    description: Reports residency and the budget only.
  diff_mode:
    support: none
    description: No diff.
"""

EXAMPLES = r"""
- name: Warm the page cache with the target checkpoint, keeping 64 GiB available
  kimi.deploy.page_cache:
    snapshot: /var/lib/kimi-k26/huggingface/hub/models--moonshotai--Kimi-K2.6/snapshots/{{ kimi_int4_revision }}
    reserve_bytes: "{{ 64 * 1024 ** 3 }}"
"""

RETURN = r"""
files:
  description: Files considered.
  returned: always
  type: int
bytes_total:
  description: Their size.
  returned: always
  type: int
bytes_resident_before:
  description: Bytes of them in the page cache before.
  returned: always
  type: int
bytes_resident_after:
  description: Bytes of them in the page cache after.
  returned: always
  type: int
bytes_read:
  description: Bytes read in by this run (0 in check mode and for V(evicted)).
  returned: always
  type: int
limited_by:
  description: C(memory) or C(max_bytes) when the budget stopped the warming before the last file; null otherwise.
  returned: always
  type: str
budget_bytes:
  description: What could be read - C(MemAvailable) less O(reserve_bytes), or O(max_bytes) if smaller.
  returned: always
  type: int
mem_available_before:
  description: C(MemAvailable) before, bytes.
  returned: always
  type: int
mem_available_after:
  description: C(MemAvailable) after, bytes (V(warm) only).
  returned: when warming
  type: int
mem_total:
  description: C(MemTotal), bytes.
  returned: always
  type: int
duration_s:
  description: Seconds taken.
  returned: always
  type: float
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.kimi.deploy.plugins.module_utils._hf.page_cache import (
    budget, evict, meminfo, resident_bytes, snapshot_files, warm,
)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            snapshot=dict(type="path"), paths=dict(type="list", elements="path", default=[]),
            state=dict(type="str", choices=["warm", "evicted"], default="warm"),
            reserve_bytes=dict(type="int", default=16 << 30), max_bytes=dict(type="int"),
        ),
        required_one_of=[["snapshot", "paths"]],
        supports_check_mode=True,
    )
    p = module.params
    if p["snapshot"] and not os.path.isdir(p["snapshot"]):
        module.fail_json(msg="snapshot=%s is not a folder" % p["snapshot"], option="snapshot")
    for name in ("reserve_bytes", "max_bytes"):
        if p[name] is not None and p[name] < 0:
            module.fail_json(msg="%s must be 0 or more, got %d" % (name, p[name]), option=name)
    paths = (snapshot_files(p["snapshot"]) if p["snapshot"] else []) + [os.path.realpath(x) for x in p["paths"]]
    missing = [x for x in paths if not os.path.isfile(x)]
    if missing:
        module.fail_json(msg="not a file: %s" % ", ".join(missing[:5]), option="paths")
    if module.check_mode or p["state"] == "evicted":
        before = sum(resident_bytes(x) or 0 for x in paths)
        if p["state"] == "evicted" and not module.check_mode:
            for path in paths:
                evict(path)
        info = meminfo()
        module.exit_json(changed=False, files=len(paths), bytes_total=sum(os.path.getsize(x) for x in paths),
                         bytes_resident_before=before, bytes_resident_after=sum(resident_bytes(x) or 0 for x in paths),
                         bytes_read=0, limited_by=None, budget_bytes=budget(info, p["reserve_bytes"], p["max_bytes"])[0],
                         mem_available_before=info.get("MemAvailable"), mem_total=info.get("MemTotal"), duration_s=0.0)
    report = warm(paths, max_bytes=p["max_bytes"], reserve_bytes=p["reserve_bytes"])
    module.exit_json(changed=False, **report)


if __name__ == "__main__":
    main()
