#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: disk_read
short_description: Measure the weights disk's sequential read rate with a short, bounded read past the page cache
description:
  - Reads at most O(size_bytes) from the largest files under O(path) (a Hugging Face home holds the checkpoint's
    blobs there) and reports the sequential read rate in MB/s (10^6 bytes per second). The deployment picks the
    engine's weight loader from it (C(kimi_weights_read_mbps), C(kimi_load_format)).
  - The read bypasses the page cache with C(O_DIRECT) where the file system takes it; otherwise the files' clean pages
    are dropped first (C(posix_fadvise DONTNEED), no privilege needed), and a read that still found pages resident
    says so in RV(reason).
  - With nothing to read (no file of O(min_file_bytes) or more, as before the checkpoint is downloaded), O(write_probe)
    writes a probe file of O(size_bytes) in O(path) (or its nearest existing parent), reads it and removes it;
    otherwise RV(read_mbps) is null and RV(reason) says why.
  - With O(state_file), the figure is kept there (JSON, written atomically) keyed by O(path), the device it is on
    (C(st_dev)) and O(size_bytes), and a later run reuses it without reading (RV(kept)) until that key changes or
    O(refresh) is set. A disk's rate varies between runs, and a figure measured on every run would flip a choice made
    from it near its thresholds, re-read O(size_bytes) each time and (C(posix_fadvise)) drop those pages from the
    page cache. A figure that was partly the page cache's (RV(reason)) or no figure is not kept.
  - The page cache and the probe are not configuration, so the module reports RV(ignore:changed=true) only when it
    writes O(state_file) (or, in check mode, would).
version_added: 1.0.0
author: kimi.deploy maintainers (@kimi-deploy)
options:
  path:
    description: The folder on the weights disk (e.g. C(kimi_weights_hf_home)); a missing one is measured at its
      nearest existing parent.
    type: path
    required: true
  size_bytes:
    description: Most bytes to read (and the probe's size). 1 GiB takes about a second on NVMe and reads past a
      drive's own cache.
    type: int
    default: 1073741824
  min_file_bytes:
    description: Only files at least this large are read (checkpoint shards, not metadata).
    type: int
    default: 67108864
  write_probe:
    description: Write, read and remove a probe file when there is nothing to read.
    type: bool
    default: false
  state_file:
    description: The JSON file that keeps the figure (its folder is created, mode 0755, when missing); unset - measure
      on every run and keep nothing.
    type: path
  refresh:
    description: Measure even when O(state_file) holds a figure for this key (and replace it).
    type: bool
    default: false
notes:
  - Stdlib only. Linux (C(O_DIRECT), C(posix_fadvise), C(mincore)).
attributes:
  check_mode:
    support: full
    description: An C(O_DIRECT) read changes nothing, so check mode measures too; where only dropping the page cache
      would do, or a probe would be written, it reports what it would read and no figure. A kept figure is reused;
      O(state_file) is never written.
  diff_mode:
    support: none
    description: No diff.
"""

EXAMPLES = r"""
- name: Measure the weights disk (2 GiB at most)
  kimi.deploy.disk_read:
    path: /var/lib/kimi-k26/huggingface
    size_bytes: "{{ 2 * 1024 ** 3 }}"
  register: weights_disk

- name: Measure it once, then reuse the kept figure
  kimi.deploy.disk_read:
    path: /var/lib/kimi-k26/huggingface
    state_file: /var/lib/kimi-k26/weights-read-test.json
"""

RETURN = r"""
read_mbps:
  description: Sequential read rate in MB/s (10^6 bytes per second); null when nothing was read (RV(reason) says why).
  returned: always
  type: float
  sample: 3120.4
bytes:
  description: Bytes read.
  returned: always
  type: int
seconds:
  description: Seconds the reads took.
  returned: always
  type: float
method:
  description: V(o_direct), V(fadvise) (the page cache dropped first) or null (nothing read).
  returned: always
  type: str
source:
  description: V(files) (files under O(path)), V(probe) (the probe file) or null.
  returned: always
  type: str
files:
  description: What was (or would be) read - C(path) and C(bytes) each.
  returned: always
  type: list
  elements: dict
path:
  description: The folder read (O(path) or its nearest existing parent).
  returned: always
  type: str
cached_share:
  description: The share of what was read that was still in the page cache (V(fadvise) only).
  returned: always
  type: float
reason:
  description: Why there is no figure, or a caveat on it; null otherwise.
  returned: always
  type: str
kept:
  description: The figure was read from O(state_file), not measured now.
  returned: always
  type: bool
measured_at:
  description: When the figure was measured (UTC, ISO 8601); null without a figure.
  returned: always
  type: str
  sample: "2026-11-28T11:40:02Z"
state_file:
  description: O(state_file), or null.
  returned: always
  type: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.kimi.deploy.plugins.module_utils._hf.disk_read import run, run_kept, stamp


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            size_bytes=dict(type="int", default=1 << 30),
            min_file_bytes=dict(type="int", default=64 << 20),
            write_probe=dict(type="bool", default=False),
            state_file=dict(type="path"),
            refresh=dict(type="bool", default=False),
        ),
        supports_check_mode=True,
    )
    p = module.params
    for name in ("size_bytes", "min_file_bytes"):
        if p[name] < 1:
            module.fail_json(msg="%s must be at least 1, got %d" % (name, p[name]), option=name)
    try:
        if p["state_file"]:
            result = run_kept(p["path"], p["size_bytes"], p["min_file_bytes"], p["state_file"], probe=p["write_probe"],
                              check_mode=module.check_mode, refresh=p["refresh"])
        else:
            result = run(p["path"], p["size_bytes"], p["min_file_bytes"], probe=p["write_probe"],
                         check_mode=module.check_mode)
            result.update(kept=False, state_file=None, changed=False,
                          measured_at=stamp() if result["read_mbps"] is not None else None)
    except OSError as exc:
        # The read, or the kept file (an unwritable folder): the error names the file.
        module.fail_json(msg="the read test of %s (state_file %s) failed: %s" % (p["path"], p["state_file"], exc))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
