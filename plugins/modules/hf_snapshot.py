#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: hf_snapshot
short_description: Download one commit of a Hugging Face model repo into the hub cache, in parallel, resumable and verified
description:
  - Lists the files of O(repo_id) at the commit O(revision) through the paginated tree API, resolves each file once,
    and fetches byte ranges of the (redirected) download URL with O(connections) parallel C(curl) processes.
  - Writes the layout that C(huggingface_hub) reads with C(HF_HUB_OFFLINE=1), so vLLM and SGLang load the model
    offline - C(blobs/<etag>), relative symlinks in C(snapshots/<commit>/), C(refs/main) holding exactly the commit.
  - Resumes partial files across runs, re-resolves expired signed URLs, honours HTTP 429 C(Retry-After) and
    C(RateLimit), and retries 5xx answers and dropped connections with backoff. Errors no retry can fix (a malformed
    URL, a host name that does not resolve, a TLS certificate that does not verify) fail at once.
  - Every blob is hashed before it is renamed into place (sha256 for LFS files, the git blob sha1 for the others);
    a corrupt or truncated blob found in the cache is re-fetched.
  - A verification record keyed on size, mtime and inode makes a re-run over a complete snapshot a stat-only
    check with no network access that reports RV(ignore:changed=false).
  - Needs only Python 3 and C(curl) on the target. The token goes only to the hub, in curl's configuration on
    standard input - never in a command line, never to the CDN, never in results or logs.
  - For air-gapped sites, O(offline=true) takes the listing from the cache itself and fetches nothing - it checks and
    adopts a repo folder copied from a bundle made on a connected host.
version_added: 1.0.0
author: kimi.deploy maintainers (@kimi-deploy)
options:
  repo_id:
    description: Model repo, C(org/name).
    type: str
    required: true
  revision:
    description: Full 40-hex lower-case commit sha. Branches and tags are refused because they move; the error says how to look the commit up.
    type: str
    required: true
  hf_home:
    description:
      - Hugging Face home, an absolute path; the cache is C(<hf_home>/hub). Default - the remote user's C(HF_HOME), else C(~/.cache/huggingface).
      - Where it does not exist yet, its nearest existing parent must be a folder this user may write (checked in check mode too).
    type: path
  endpoint:
    description: Hub endpoint, an http(s) URL. Default - the remote C(HF_ENDPOINT), else C(https://huggingface.co).
    type: str
  token:
    description: Hugging Face token, sent only to the origin of O(endpoint). Default - the remote C(HF_TOKEN); public repos need none.
    type: str
  connections:
    description: Parallel curl transfers, 1 to 64.
    type: int
    default: 16
  chunk_size:
    description: Size of one Range request in bytes, 1 MiB to 16 GiB; large files are split into chunks of this size.
    type: int
    default: 67108864
  allow_patterns:
    description: Only files matching one of these globs (like C(huggingface_hub)'s C(allow_patterns)).
    type: list
    elements: str
  ignore_patterns:
    description: Skip files matching one of these globs.
    type: list
    elements: str
  verify:
    description:
      - V(sha256) - hash every blob once (sha256 = lfs.oid for LFS files, git blob sha1 = oid for the others) and trust
        the verification record after that while size, mtime and inode are unchanged.
      - V(size) - check sizes only.
      - V(full) - re-hash every blob now, whatever the record says.
    type: str
    choices: [sha256, size, full]
    default: sha256
  materialize:
    description:
      - Globs (on the repo path or the file name) of files written into the snapshot as real files instead of symlinks.
      - Use C(["*.py"]) for repos with remote code that transformers resolves through C(blobs/) (the NVFP4 fix).
    type: list
    elements: str
    default: []
  set_refs:
    description: Refs (branch names) written under C(refs/) to point at the commit, so C(revision="main") works offline.
    type: list
    elements: str
    default: [main]
  owner:
    description: Owner of everything under the repo's cache folder.
    type: str
  group:
    description: Group of everything under the repo's cache folder.
    type: str
  mode:
    description: Mode of the files (blobs, refs); folders get the matching execute bits.
    type: raw
    default: "0644"
  min_free_bytes:
    description:
      - Bytes that must stay free on the cache's file system after what is missing is downloaded.
      - Checked before anything is fetched, in check mode too (RV(disk) has the numbers).
    type: int
    default: 0
  progress_file:
    description:
      - File rewritten about once a second with JSON progress - state, files, bytes, rate, ETA.
      - Read it while the module runs asynchronously.
    type: path
  hash_workers:
    description: Files hashed in parallel, 1 to 256. Default - the number of CPUs.
    type: int
  retries:
    description:
      - Attempts per request or byte range before giving up (progress resets the count).
      - In check mode a request that gets no answer at all (connection refused or timed out) is retried once only.
    type: int
    default: 10
  connect_timeout:
    description: curl's connect timeout, seconds (at most 10 in check mode).
    type: int
    default: 30
  stall_timeout:
    description: A transfer slower than 1 KiB/s for this many seconds is cut and retried (at most 15 in check mode).
    type: int
    default: 60
  ca_bundle:
    description: CA bundle for TLS (curl's C(--cacert)); default - curl's own.
    type: path
  peers:
    description:
      - Hosts of the fleet that hold a verified cache of this repo, served read-only over HTTP(S) as
        C(<url>/<repo folder>/blobs/<etag>) (the C(kimi_weights) role's peer cache server, Caddy's C(file_server)).
      - The listing, sizes and hashes still come from O(endpoint) (hashes from the hub, bytes from peers); every blob a
        peer sends is hashed against them, and a blob that fails is fetched again without that peer.
      - Peers are preferred; each gets at most O(peer_connections) transfers at once. A peer that refuses the key, cuts
        a transfer or cannot be reached is dropped for the run and its ranges go to the others; a peer that answers
        404 lacks that blob (yet) and is asked for it again a second later.
      - Peers may fetch at the same time as this host (a seed from the hub). A blob that no live peer holds yet waits
        for one, at most O(peer_wait) seconds, so this host trails the peers by a blob or so.
    type: list
    elements: dict
    default: []
    suboptions:
      name:
        description: Name in results and messages (the inventory name).
        type: str
        required: true
      url:
        description: Base URL of its peer cache server, C(https://host:port).
        type: str
        required: true
  peer_key:
    description: Key sent to the peers (C(Authorization) header, in curl's configuration on standard input), never to the hub.
    type: str
  peer_ca_bundle:
    description: CA bundle that signs the peers' TLS certificates (the fleet's peer CAs); default - O(ca_bundle), else curl's own.
    type: path
  peer_connections:
    description: Transfers at once from one peer, 1 to 64, so that one seed is not overrun. O(connections) bounds them all.
    type: int
    default: 4
  peer_wait:
    description:
      - Seconds a blob may wait for a live peer to hold it. Then the hub sends it (O(hub_bytes)), or the run fails.
    type: int
    default: 600
  hub_bytes:
    description:
      - Whether the hub may send bytes. With O(peers), it sends only blobs no peer can (none left, or they lack it).
      - V(false) - the peers must send everything (the hub is asked for the listing only).
    type: bool
    default: true
  offline:
    description:
      - For air-gapped sites. Take the file listing from the cache itself (C(trees/<commit>.json), written with the
        snapshot by this module or C(huggingface_hub) when the full file set is present) instead of the hub, and fetch
        nothing - no C(curl), no network; O(endpoint), O(token), O(ca_bundle), O(peers) and the other transfer options
        are ignored.
      - The cache is a bundle made on a connected host - the repo's folder (C(models--<org>--<name>)) of a complete
        snapshot, copied with its symlinks into C(<hf_home>/hub/) of this host.
      - Every blob is checked against that listing per O(verify) (sha256 for LFS files, the git blob sha1 for the others,
        sizes only with V(size)). A blob that is absent or fails its check fails the run, naming its repo paths and the
        blob, and is left as it is; in check mode too, before any change (RV(missing) lists those paths).
      - Snapshot symlinks, refs and the verification record are then (re)written as by a download; the record of a
        copied cache no longer matches (inodes differ), so the first run reports RV(ignore:changed=true), and a second
        run is the stat-only check that reports RV(ignore:changed=false).
      - Without C(trees/<commit>.json) (or with a malformed one) the run fails, saying which folder to copy.
    type: bool
    default: false
    version_added: 1.0.0
notes:
  - Supports check mode - the plan. It lists the repo, reports what would be fetched and whether the disk can take
    it, proves O(hf_home) writable, and writes nothing. It fails within seconds on an endpoint it cannot reach.
  - Run it with C(async) and read O(progress_file) to show progress (the C(kimi_weights) role does).
  - Concurrent runs on one repo are serialised by a lock in the cache.
  - A failure caused by one option's value returns that option's name in C(option).
  - With O(offline=true) C(curl) is not needed and nothing is fetched; the cache must already hold the snapshot.
requirements:
  - curl on the target (C(apt-get install curl)), also for check mode; not with O(offline=true)
seealso:
  - name: Hugging Face cache layout
    description: How huggingface_hub stores and reads cached files.
    link: https://huggingface.co/docs/huggingface_hub/guides/manage-cache
attributes:
  check_mode:
    support: full
    description: Lists the repo and reports what would be downloaded and the disk space it needs.
  diff_mode:
    support: none
    description: No diff.
"""

EXAMPLES = r"""
- name: Download Kimi-K2.6 INT4 at a pinned commit
  kimi.deploy.hf_snapshot:
    repo_id: moonshotai/Kimi-K2.6
    revision: "{{ kimi_int4_revision }}"
    hf_home: /var/lib/kimi-k26/huggingface
    token: "{{ hf_token | default(omit) }}"
    connections: 16
    min_free_bytes: "{{ 20 * 1000 ** 3 }}"
    progress_file: /var/lib/kimi-k26/huggingface/.progress.json
  async: 86400
  poll: 0
  register: kimi_download

- name: Plan only - what is missing, and whether the disk can take it
  kimi.deploy.hf_snapshot:
    repo_id: moonshotai/Kimi-K2.6
    revision: "{{ kimi_int4_revision }}"
    hf_home: /var/lib/kimi-k26/huggingface
    min_free_bytes: 10000000000
    verify: size
  check_mode: true
  register: kimi_plan

# Air-gapped host: the repo's cache folder was copied from a bundle made on a connected host
# (cp -a models--moonshotai--Kimi-K2.6 /var/lib/kimi-k26/huggingface/hub/); check it and adopt it, fetching nothing.
- name: Verify and adopt Kimi-K2.6 from an offline bundle
  kimi.deploy.hf_snapshot:
    repo_id: moonshotai/Kimi-K2.6
    revision: "{{ kimi_int4_revision }}"
    hf_home: /var/lib/kimi-k26/huggingface
    offline: true
  register: kimi_offline
"""

RETURN = r"""
commit:
  description: The commit in the cache.
  returned: always
  type: str
  sample: 3f1c0e6e8a0b7c2d4e5f60718293a4b5c6d7e8f9
snapshot_path:
  description: The snapshot folder, what engines load.
  returned: always
  type: str
  sample: /var/lib/kimi-k26/huggingface/hub/models--moonshotai--Kimi-K2.6/snapshots/3f1c0e6e8a0b7c2d4e5f60718293a4b5c6d7e8f9
files:
  description: Repo paths in the snapshot (after the patterns).
  returned: always
  type: list
  elements: str
  sample: [config.json, model-00001-of-00064.safetensors]
files_fetched:
  description: Repo paths whose blob was downloaded (or re-downloaded) by this run; in check mode, those that would be.
  returned: always
  type: list
  elements: str
bytes_total:
  description: Size of the snapshot in bytes.
  returned: always
  type: int
bytes_downloaded:
  description: Bytes received by this run (in check mode, bytes that would be fetched).
  returned: always
  type: int
bytes_resumed:
  description: Bytes of partial files from earlier runs that this run kept.
  returned: always
  type: int
disk:
  description: The weights-disk check - after fetching what is missing, O(min_free_bytes) must stay free.
  returned: always, and on a failure of that check
  type: dict
  contains:
    path:
      description: The existing folder whose file system was measured (O(hf_home) or its nearest parent).
      type: str
    free_bytes:
      description: Bytes free to this user on that file system now.
      type: int
    need_bytes:
      description: Bytes still to download (the snapshot's missing bytes less partial files kept).
      type: int
    min_free_bytes:
      description: O(min_free_bytes).
      type: int
    ok:
      description: True when C(free_bytes - need_bytes >= min_free_bytes), or nothing is missing.
      type: bool
verified:
  description: True when every file was checked - hashed now, or proven unchanged since it was hashed by the record.
  returned: always
  type: bool
verification:
  description: How the files were checked.
  returned: always
  type: dict
  contains:
    mode:
      description: The verify option in effect.
      type: str
    hashed_files:
      description: Blobs hashed by this run.
      type: int
    hashed_bytes:
      description: Bytes hashed by this run.
      type: int
    from_record:
      description: True when the whole check came from the verification record (stat only, no network).
      type: bool
    repaired:
      description: Repo paths whose cached blob failed the check and was fetched again.
      type: list
      elements: str
duration_s:
  description: Wall time of the run.
  returned: always
  type: float
throughput_bytes_per_s:
  description: Bytes downloaded per second of download time (0 when nothing was fetched).
  returned: always
  type: float
requests:
  description: Counters of HTTP work - range requests, retries, re-resolved URLs.
  returned: always
  type: dict
sources:
  description: Per source of bytes (each peer, then the hub) - name, url, bytes, requests, why it was dropped, files it lacked.
  returned: always
  type: list
  elements: dict
bytes_from_hub:
  description: Bytes the hub sent in this run (0 when the peers sent everything).
  returned: always
  type: int
missing:
  description:
    - With O(offline=true), on a failure (check mode too) - repo paths whose blob is absent from the cache or fails its
      check; nothing may fetch them offline.
  returned: on such a failure
  type: list
  elements: str
  sample: [model-00002-of-00064.safetensors]
  version_added: 1.0.0
option:
  description: On a failure caused by the value of one option, that option's name (for callers that map it to their own variable).
  returned: on such a failure
  type: str
  sample: connections
"""

import os
import re
import time

from concurrent.futures import ThreadPoolExecutor

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.kimi.deploy.plugins.module_utils._hf.cache import (
    BlobChecker, CacheError, CacheWriter, Layout, check_hf_home, classify, default_hf_home, disk_message, disk_report,
    fast_check, filter_paths, load_record, owner_ids, parse_mode, selection_key, stat_key,
)
from ansible_collections.kimi.deploy.plugins.module_utils._hf.download import Downloader, Progress, Source, partial_bytes
from ansible_collections.kimi.deploy.plugins.module_utils._hf.hub import CacheListing, Curl, Hub
from ansible_collections.kimi.deploy.plugins.module_utils._model.validate import (
    DEFAULT_ENDPOINT, ValueRuleError, check_repo_id, check_revision,
)

# The option limits, their only copy: callers (the kimi_weights role) pass values through and the module refuses
# a bad one, naming the option.
LIMITS = (("connections", 1, 64), ("peer_connections", 1, 64), ("peer_wait", 0, 86400), ("chunk_size", 1 << 20, 1 << 34),
          ("retries", 0, 1000), ("connect_timeout", 1, 3600),
          ("stall_timeout", 5, 3600), ("hash_workers", 1, 256), ("min_free_bytes", 0, 1 << 62))
ENDPOINT_RE = re.compile(r"https?://[^/\s?#]+(/[^\s?#]*)?")
# The plan (check mode) fails fast on an endpoint it cannot reach: one retry after a second, short timeouts.
PLAN_CONNECT_RETRIES = 1
PLAN_CONNECT_TIMEOUT = 10
PLAN_STALL_TIMEOUT = 15
CURL_MISSING = ("curl is missing on the host: hf_snapshot lists and downloads with it, also for the plan (check mode). "
                "Install it first: apt-get install curl (Debian, Ubuntu).")


class Snapshot(object):
    """One run: listing, the checks, the workers, progress and the result. CacheWriter makes every change."""

    def __init__(self, module, hf_home, endpoint):
        self.module = module
        self.p = p = module.params
        self.check_mode = module.check_mode
        self.commit = p["revision"]
        self.endpoint = endpoint
        self.offline = p["offline"]  # listing from trees/<commit>.json, nothing fetched: no hub, no peers
        self.layout = Layout(hf_home, p["repo_id"], self.commit)
        self.selection = selection_key(p["allow_patterns"], p["ignore_patterns"], p["materialize"])
        self.disk = None
        self.progress = Progress(p["progress_file"], p["repo_id"], self.commit)
        self.checker = BlobChecker(p["verify"])
        self.paths_per_etag = {}
        # The byte sources, kept across rounds (a dropped peer stays dropped): each peer, and the hub unless hub_bytes
        # is off.
        headers = ["Authorization: Bearer " + p["peer_key"]] if p["peer_key"] else []
        self.peers = [Source(peer["name"], p["peer_connections"], url=peer["url"], headers=headers,
                             ca_bundle=p["peer_ca_bundle"] or p["ca_bundle"]) for peer in p["peers"] if not self.offline]
        self.hub_source = Source("hub", p["connections"], is_hub=True) if p["hub_bytes"] and not self.offline else None
        self.exclude = {}  # etag -> the peer that alone sent a copy that failed its hash
        self.suspect = {}  # etag -> the peers that together sent a copy that failed
        self.changed = False
        self.started = time.time()
        try:
            uid, gid = owner_ids(p["owner"], p["group"])
            self.writer = CacheWriter(self.layout, uid, gid, parse_mode(p["mode"]), p["materialize"])
        except CacheError as exc:
            module.fail_json(msg=str(exc), option=exc.option)

    def fail(self, msg, option=None, **more):
        self.progress.stop("failed")
        extra = dict((k, v) for k, v in (("option", option), ("disk", self.disk)) if v is not None)
        extra.update(more)
        self.module.fail_json(msg=msg, commit=self.commit, **extra)

    def run(self):
        p = self.p
        # Fast path: a complete snapshot proven by the record - stats only, no lock, no network.
        record = load_record(self.layout, self.selection)
        if fast_check(self.layout, record, p["materialize"], p["set_refs"], p["verify"]):
            self.changed = self.writer.fix_permissions(dry_run=self.check_mode)
            self.check_disk(0)
            return self.result([e["path"] for e in record["files"]], [], record.get("bytes_total", 0), 0, 0, True, True, 0, {})
        check_hf_home(self.layout)  # CacheError naming hf_home
        if self.offline:
            return self.run_offline(record)
        curl_path = self.module.get_bin_path("curl")
        if not curl_path:
            self.fail(CURL_MISSING)
        plan = self.check_mode
        curl = Curl(curl_path, self.endpoint, p["token"] or os.environ.get("HF_TOKEN") or None, ca_bundle=p["ca_bundle"],
                    connect_timeout=min(p["connect_timeout"], PLAN_CONNECT_TIMEOUT) if plan else p["connect_timeout"],
                    stall_timeout=min(p["stall_timeout"], PLAN_STALL_TIMEOUT) if plan else p["stall_timeout"])
        hub = Hub(curl, p["repo_id"], self.commit, retries=p["retries"], connect_retries=PLAN_CONNECT_RETRIES if plan else None)
        with ThreadPoolExecutor(max_workers=max(1, p["hash_workers"] or os.cpu_count() or 1)) as pool:
            if plan:
                return self.plan(hub, record, pool)
            self.writer.prepare()
            lock = self.writer.lock()
            try:
                self.writer.remove_stale_temporaries()
                self.progress.start()
                return self.download(hub, record, pool)
            finally:
                os.close(lock)

    def run_offline(self, record):
        """offline=true: the listing is the cache's trees/<commit>.json; no curl, no request, nothing fetched."""
        listing = CacheListing(self.layout, self.p["repo_id"])
        listing.list_files()  # a missing or malformed listing fails here, before any folder is made
        with ThreadPoolExecutor(max_workers=max(1, self.p["hash_workers"] or os.cpu_count() or 1)) as pool:
            if self.check_mode:
                return self.plan(listing, record, pool)
            self.writer.prepare()
            lock = self.writer.lock()
            try:
                self.writer.remove_stale_temporaries()
                self.progress.start()
                return self.download(listing, record, pool)
            finally:
                os.close(lock)

    def check_offline(self, selected, to_check, missing, pool):
        """offline: hash the present blobs the record does not vouch for; fail naming every blob absent or bad (and
        its repo paths) - nothing can fetch it. Bad blobs are left in place. Returns etag -> stat key of good ones."""
        good, bad = {}, [(entry, "absent") for entry in missing]
        for entry, reason in pool.map(lambda e: (e, self.checker.check(self.layout.blob(e["etag"]), e)), to_check):
            if reason is None:
                good[entry["etag"]] = stat_key(self.layout.blob(entry["etag"]))
            else:
                bad.append((entry, reason))
        if bad:
            bad_etags = set(entry["etag"] for entry, _reason in bad)
            paths = dict((etag, sorted(e["path"] for e in selected if e["etag"] == etag)) for etag in bad_etags)
            details = "; ".join("%s (blob %s): %s" % (", ".join(paths[entry["etag"]]), entry["etag"], reason)
                                for entry, reason in sorted(bad, key=lambda b: paths[b[0]["etag"]]))
            self.fail("offline: %d of the %d blobs of %s@%s are absent or fail their check, and offline nothing is fetched: "
                      "%s. Copy them again from the bundle into %s (or the bundle's whole folder of this repo)." % (
                          len(bad), len(set(e["etag"] for e in selected)), self.p["repo_id"], self.commit, details,
                          self.layout.blobs), missing=sorted(p for ps in paths.values() for p in ps))
        return good

    def record_changes(self, record, verified):
        """offline: whether the verification record is (re)written with other contents (a copied cache: new inodes)."""
        if record is None or not record.get("complete") or record.get("verify") != self.checker.mode:
            return True
        try:
            return dict((b["etag"], b["stat"]) for b in record.get("blobs", record["files"])) != verified
        except (KeyError, TypeError):
            return True

    def list_selected(self, hub):
        entries = hub.list_files()
        paths = set(filter_paths([e["path"] for e in entries], self.p["allow_patterns"], self.p["ignore_patterns"]))
        if not paths:
            self.fail("no file of %s@%s matches allow_patterns=%s ignore_patterns=%s" % (
                self.p["repo_id"], self.commit, self.p["allow_patterns"], self.p["ignore_patterns"]))
        return entries, [e for e in entries if e["path"] in paths]

    def check_disk(self, need):
        """The weights-disk rule (_hf.cache.disk_report); fails naming hf_home and the numbers."""
        self.disk = disk_report(self.layout, need, self.p["min_free_bytes"])
        if not self.disk["ok"]:
            self.fail(disk_message(self.disk, self.layout.hf_home, self.layout))

    def plan(self, hub, record, pool):
        """Check mode: what would be fetched, and whether the disk can take it. Writes nothing."""
        selected = self.list_selected(hub)[1]
        blobs, verified, to_check, missing = classify(self.layout, selected, record, self.p["verify"])
        changes = []
        if self.offline:  # fails naming what is absent or bad: a plan shows an incomplete offline cache
            verified.update(self.check_offline(selected, to_check, missing, pool))
            to_check, missing = [], []
            changes.append(self.record_changes(record, dict((k, verified[k]) for k in blobs)))
        missing += self.checker.check_cached(self.layout, to_check, pool, delete=False)[1]
        fetch = set(b["etag"] for b in missing)
        self.check_disk(sum(b["size"] - partial_bytes(self.layout, b) for b in missing))
        changes += [fetch, self.writer.snapshot_changes(selected, apply=False), self.writer.refs_changes(self.p["set_refs"], apply=False)]
        self.changed = any(changes) or self.writer.fix_permissions(dry_run=True)
        return self.result([e["path"] for e in selected], sorted(e["path"] for e in selected if e["etag"] in fetch),
                           sum(e["size"] for e in selected), self.disk["need_bytes"], 0, not fetch, False, 0, {})

    def download(self, hub, record, pool):
        self.progress.set(state="listing")
        entries, selected = self.list_selected(hub)
        blobs, verified, to_check, missing = classify(self.layout, selected, record, self.p["verify"])
        for entry in selected:
            self.paths_per_etag[entry["etag"]] = self.paths_per_etag.get(entry["etag"], 0) + 1
        self.progress.set(files_total=len(selected), bytes_total=sum(e["size"] for e in blobs.values()))
        if self.offline:
            self.progress.set(state="verifying")
            verified.update(self.check_offline(selected, to_check, missing, pool))
            to_check, missing = [], []
        if to_check:
            self.progress.set(state="verifying")
            good, bad = self.checker.check_cached(self.layout, to_check, pool, delete=True)
            verified.update(good)
            missing += bad
        on_disk = sum(partial_bytes(self.layout, b) for b in missing)
        self.check_disk(sum(b["size"] for b in missing) - on_disk)
        self.progress.base_done = sum(blobs[e]["size"] for e in verified) + on_disk
        self.progress.set(files_done=len([e for e in selected if e["etag"] in verified]))
        counters = {"range_requests": 0, "retries": 0, "reresolved": 0, "rounds": 0}
        fetched, resumed, download_s = set(), 0, 0.0
        while missing:  # a blob that fails its check after the download is fetched again, three times at most
            counters["rounds"] += 1
            if counters["rounds"] > 3:
                self.fail("gave up: %s failed verification after 3 downloads (%s)" % (
                    ", ".join(b["path"] for b in missing), "; ".join(self.checker.warnings[-3:])))
            started = time.time()
            landed, resumed_now = self.fetch_round(hub, missing, pool, counters)
            for entry, key, sources in landed:
                peers = sources - set(["hub"])
                if isinstance(key, list) or not peers:
                    continue
                if len(sources) == 1:  # the one sender of a wrong copy: not asked for this blob again
                    self.exclude.setdefault(entry["etag"], set()).update(peers)
                    self.suspect.pop(entry["etag"], None)
                else:  # one of them sent a wrong byte: next round one source sends it whole
                    self.suspect[entry["etag"]] = peers
            landed = [(entry, key) for entry, key, _sources in landed]
            download_s += time.time() - started
            resumed += resumed_now if counters["rounds"] == 1 else 0
            missing = [e for e, key in landed if not isinstance(key, list)]
            verified.update((e["etag"], key) for e, key in landed if isinstance(key, list))
            fetched.update(e["etag"] for e, key in landed if isinstance(key, list))
        self.progress.set(state="linking")
        changes = [fetched, self.writer.snapshot_changes(selected, apply=True)]
        if self.offline:  # the listing came from the tree cache: kept as it is; the record adopts the copied blobs
            changes.append(self.record_changes(record, dict((k, verified[k]) for k in blobs)))
        elif not self.p["allow_patterns"] and not self.p["ignore_patterns"]:
            changes.append(self.writer.write_tree(entries))  # only for the full file set: clients check completeness
        changes.append(self.writer.refs_changes(self.p["set_refs"], apply=True))
        self.writer.remove_stale_partials(blobs)
        self.writer.save_record(self.p["repo_id"], self.selection, self.checker.mode, selected, verified, blobs)
        changes.append(self.writer.fix_permissions())  # after the record: it is chowned too
        self.changed = any(changes)
        self.progress.set(bytes_done=sum(e["size"] for e in blobs.values()), files_done=len(selected))
        self.progress.stop("done")
        return self.result([e["path"] for e in selected], sorted(e["path"] for e in selected if e["etag"] in fetched),
                           sum(e["size"] for e in selected), self.progress.data["bytes_downloaded"], resumed, True, False,
                           download_s, counters)

    def fetch_round(self, hub, missing, pool, counters):
        """Download the missing blobs once; the hash pool lands each as it completes (self.land).
        Returns ([(entry, stat key or the reason it failed)], bytes resumed from partial files)."""
        self.progress.set(state="downloading")
        downloader = Downloader(hub, self.layout, connections=self.p["connections"], chunk_size=self.p["chunk_size"],
                                retries=self.p["retries"], peers=self.peers, hub_source=self.hub_source,
                                exclude=self.exclude, suspect=self.suspect, hash_on_receive=self.checker.mode != "size",
                                peer_wait=self.p["peer_wait"])
        self.progress.downloader = downloader
        try:
            futures = downloader.fetch(missing, self.land, pool)
        finally:
            self.progress.base_done += downloader.bytes_downloaded
            self.progress.downloader = None
            self.progress.add("bytes_downloaded", downloader.bytes_downloaded)
            for key, value in downloader.counters().items():
                counters[key] += value
        self.progress.set(state="verifying")
        landed = [future.result() for future in futures]
        for entry, key, _sources in landed:
            if not isinstance(key, list):
                self.checker.failed(entry, key, "downloaded")
                self.progress.base_done -= entry["size"]
        return landed, downloader.resumed_bytes

    def land(self, blob):
        """Runs in the hash pool: check a complete blob and put it in place (PartialBlob.land)."""
        etag = blob.entry["etag"]
        key = blob.land(lambda path, digest: self.checker.check(path, blob.entry, digest),
                        lambda path: self.writer.install_blob(path, etag))
        if isinstance(key, list):
            self.progress.add("files_done", self.paths_per_etag.get(etag, 1))
        return blob.entry, key, set(blob.sources)

    def source_reports(self):
        sources = list(self.peers) + ([self.hub_source] if self.hub_source else [])
        return [s.report() for s in sources]

    def result(self, files, fetched, bytes_total, bytes_downloaded, resumed, verified, from_record, download_s, counters):
        return dict(
            changed=bool(self.changed), commit=self.commit, snapshot_path=self.layout.snapshot, files=files,
            files_fetched=fetched, bytes_total=bytes_total, bytes_downloaded=bytes_downloaded, bytes_resumed=resumed,
            disk=self.disk, verified=verified, duration_s=round(time.time() - self.started, 3),
            verification=dict(mode=self.p["verify"], hashed_files=self.checker.hashed_files, hashed_bytes=self.checker.hashed_bytes,
                              from_record=from_record, repaired=self.checker.repaired),
            throughput_bytes_per_s=round(bytes_downloaded / download_s, 1) if download_s > 0 and bytes_downloaded else 0.0,
            requests=counters, sources=self.source_reports(),
            bytes_from_hub=self.hub_source.bytes if self.hub_source else 0,
        )


def check_params(module):
    """The value rules of the options, before any request; each error names its option. Returns (hf_home, endpoint)."""
    p = module.params
    endpoint = p["endpoint"] or os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT
    for option, check in (("repo_id", lambda: check_repo_id(p["repo_id"], "repo_id")),
                          ("revision", lambda: check_revision(p["revision"], p["repo_id"], "revision", endpoint))):
        try:
            check()
        except ValueRuleError as exc:
            module.fail_json(msg=str(exc), option=option)
    for name, low, high in LIMITS:
        if p[name] is not None and not low <= p[name] <= high:
            module.fail_json(msg="%s must be between %d and %d, got %d" % (name, low, high, p[name]), option=name)
    # offline: no hub, no peers - their options are ignored, not checked
    if not p["offline"] and not ENDPOINT_RE.fullmatch(endpoint):
        module.fail_json(msg="endpoint must be an http(s) URL such as %s, got %r" % (DEFAULT_ENDPOINT, endpoint), option="endpoint")
    for peer in [] if p["offline"] else p["peers"]:
        if not ENDPOINT_RE.fullmatch(peer["url"] or ""):
            module.fail_json(msg="peers: %s's url must be an http(s) URL such as https://10.0.0.2:8444, got %r" % (
                peer["name"], peer["url"]), option="peers")
    if not p["peers"] and not p["hub_bytes"] and not p["offline"]:
        module.fail_json(msg="hub_bytes=false needs peers: without them no source may send bytes", option="hub_bytes")
    for ref in p["set_refs"]:
        if not ref or ref.startswith("/") or ".." in ref.split("/") or ref.strip() != ref:
            module.fail_json(msg="set_refs: %r is not a valid ref name" % ref, option="set_refs")
    hf_home = p["hf_home"] or os.path.abspath(os.environ.get("HF_HOME") or default_hf_home())  # what huggingface_hub uses
    try:
        check_hf_home(Layout(hf_home, p["repo_id"], p["revision"]), writable=False)
    except CacheError as exc:
        module.fail_json(msg=str(exc), option=exc.option)
    return hf_home, endpoint.rstrip("/")


def main():
    module = AnsibleModule(
        argument_spec=dict(
            repo_id=dict(type="str", required=True), revision=dict(type="str", required=True),
            hf_home=dict(type="path"), endpoint=dict(type="str"), token=dict(type="str", no_log=True),
            connections=dict(type="int", default=16), chunk_size=dict(type="int", default=64 << 20),
            allow_patterns=dict(type="list", elements="str"), ignore_patterns=dict(type="list", elements="str"),
            verify=dict(type="str", default="sha256", choices=["sha256", "size", "full"]),
            materialize=dict(type="list", elements="str", default=[]), set_refs=dict(type="list", elements="str", default=["main"]),
            owner=dict(type="str"), group=dict(type="str"), mode=dict(type="raw", default="0644"),
            min_free_bytes=dict(type="int", default=0), progress_file=dict(type="path"), hash_workers=dict(type="int"),
            retries=dict(type="int", default=10), connect_timeout=dict(type="int", default=30),
            stall_timeout=dict(type="int", default=60), ca_bundle=dict(type="path"),
            peers=dict(type="list", elements="dict", default=[], options=dict(name=dict(type="str", required=True),
                                                                              url=dict(type="str", required=True))),
            peer_key=dict(type="str", no_log=True), peer_ca_bundle=dict(type="path"),
            peer_connections=dict(type="int", default=4), hub_bytes=dict(type="bool", default=True),
            peer_wait=dict(type="int", default=600), offline=dict(type="bool", default=False),
        ),
        supports_check_mode=True,
    )
    hf_home, endpoint = check_params(module)
    snapshot = Snapshot(module, hf_home, endpoint)
    try:
        result = snapshot.run()
    except CacheError as exc:  # HubError too
        snapshot.fail(str(exc), option=exc.option)
    except OSError as exc:
        snapshot.fail("%s: %s" % (type(exc).__name__, exc))
    for warning in snapshot.checker.warnings:
        module.warn(warning)
    for peer in snapshot.peers:
        if peer.dropped:
            module.warn("peer %s was dropped, the others sent its share: %s" % (peer.name, peer.dropped))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
