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
    C(RateLimit), and retries 5xx answers and dropped connections with backoff.
  - Every blob is hashed before it is renamed into place (sha256 for LFS files, the git blob sha1 for the others);
    a corrupt or truncated blob found in the cache is re-fetched.
  - A verification record keyed on size, mtime and inode makes a re-run over a complete snapshot a stat-only
    check with no network access that reports RV(ignore:changed=false).
  - Needs only Python 3 and C(curl) on the target. The token goes only to the hub, in curl's configuration on
    standard input - never in a command line, never to the CDN, never in results or logs.
version_added: 0.1.0
author: kimi.deploy maintainers (@kimi-deploy)
options:
  repo_id:
    description: Model repo, C(org/name).
    type: str
    required: true
  revision:
    description:
      - Full 40-hex commit sha. Branches and tags are refused because they move.
      - Look it up with C(curl -s https://huggingface.co/api/models/<repo_id>/revision/main) (field C(sha)).
    type: str
    required: true
  hf_home:
    description:
      - Hugging Face home; the cache is C(<hf_home>/hub).
      - Default - the remote user's C(HF_HOME), else C(~/.cache/huggingface).
    type: path
  endpoint:
    description:
      - Hub endpoint. Default - the remote C(HF_ENDPOINT), else C(https://huggingface.co).
    type: str
  token:
    description:
      - Hugging Face token. Default - the remote C(HF_TOKEN); public repos need none.
      - Sent only to the origin of O(endpoint).
    type: str
  connections:
    description: Parallel curl transfers.
    type: int
    default: 16
  chunk_size:
    description: Size of one Range request; large files are split into chunks of this size (bytes, at least 1 MiB).
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
    description: Bytes that must stay free on the cache's file system after the download; checked before anything is fetched.
    type: int
    default: 0
  progress_file:
    description:
      - File rewritten about once a second with JSON progress - state, files, bytes, rate, ETA.
      - Read it while the module runs asynchronously.
    type: path
  hash_workers:
    description: Files hashed in parallel. Default - the number of CPUs.
    type: int
  retries:
    description: Attempts per request or byte range before giving up (progress resets the count).
    type: int
    default: 10
  connect_timeout:
    description: curl's connect timeout, seconds.
    type: int
    default: 30
  stall_timeout:
    description: A transfer slower than 1 KiB/s for this many seconds is cut and retried.
    type: int
    default: 60
  ca_bundle:
    description: CA bundle for TLS (curl's C(--cacert)); default - curl's own.
    type: path
notes:
  - Supports check mode - it lists the repo and reports what would be fetched, and writes nothing.
  - Run it with C(async) and read O(progress_file) to show progress (the C(kimi_weights) role does).
  - Concurrent runs on one repo are serialised by a lock in the cache.
requirements:
  - curl on the target
seealso:
  - name: Hugging Face cache layout
    description: How huggingface_hub stores and reads cached files.
    link: https://huggingface.co/docs/huggingface_hub/guides/manage-cache
attributes:
  check_mode:
    support: full
    description: Lists the repo and reports what would be downloaded.
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
    min_free_bytes: "{{ 20 * 1024 ** 3 }}"
    progress_file: /var/lib/kimi-k26/huggingface/.progress.json
  async: 86400
  poll: 0
  register: kimi_download

- name: NVFP4 with its remote code written as real files
  kimi.deploy.hf_snapshot:
    repo_id: nvidia/Kimi-K2.6-NVFP4
    revision: "{{ kimi_nvfp4_revision }}"
    materialize: ["*.py"]
    owner: root
    group: root

- name: Only the configuration files, sizes checked
  kimi.deploy.hf_snapshot:
    repo_id: moonshotai/Kimi-K2.6
    revision: "{{ kimi_int4_revision }}"
    allow_patterns: ["*.json", "*.py", "tiktoken.model"]
    verify: size
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
"""

import json
import os
import stat
import threading
import time

from concurrent.futures import ThreadPoolExecutor

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.kimi.deploy.plugins.module_utils._hf_cache import (
    TMP_PREFIX, CacheError, Layout, atomic_write, human_size, check_repo_id, check_revision, fast_check, filter_paths, load_record,
    materialize_matches, pointer_target, read_text, save_record, selection_key, stat_key, tree_cache_json,
)
from ansible_collections.kimi.deploy.plugins.module_utils._hf_download import (
    Curl, Downloader, Hub, HubError, PartialBlob, recorded_intervals, verify_blob,
)

try:
    import fcntl
except ImportError:  # pragma: no cover
    fcntl = None

DEFAULT_ENDPOINT = "https://huggingface.co"


class Progress(object):
    """Counters shared by the workers; a thread rewrites progress_file from them about once a second."""

    def __init__(self, path, repo_id, commit):
        self.path = path
        self.lock = threading.Lock()
        self.data = {"repo_id": repo_id, "commit": commit, "state": "starting", "files_total": 0, "files_done": 0,
                     "bytes_total": 0, "bytes_done": 0, "bytes_downloaded": 0, "rate_bytes_per_s": 0.0, "eta_s": None,
                     "started": time.time(), "pid": os.getpid()}
        self.samples = []
        self.downloader = None
        self.base_done = 0
        self.stop_event = threading.Event()
        self.thread = None

    def set(self, **kwargs):
        with self.lock:
            self.data.update(kwargs)

    def add(self, key, value):
        with self.lock:
            self.data[key] += value

    def snapshot(self):
        with self.lock:
            data = dict(self.data)
        if self.downloader is not None:
            data["bytes_downloaded"] = self.downloader.bytes_downloaded
            data["bytes_done"] = self.base_done + self.downloader.bytes_downloaded
        now = time.time()
        self.samples.append((now, data["bytes_downloaded"]))
        self.samples = [s for s in self.samples if now - s[0] <= 10.0]
        if len(self.samples) > 1 and self.samples[-1][0] > self.samples[0][0]:
            rate = (self.samples[-1][1] - self.samples[0][1]) / (self.samples[-1][0] - self.samples[0][0])
        else:
            rate = 0.0
        data["rate_bytes_per_s"] = round(rate, 1)
        left = max(0, data["bytes_total"] - data["bytes_done"])
        data["eta_s"] = round(left / rate, 1) if rate > 0 else None
        data["updated"] = now
        data["elapsed_s"] = round(now - data["started"], 1)
        return data

    def write(self):
        if not self.path:
            return
        try:
            atomic_write(self.path, json.dumps(self.snapshot(), sort_keys=True).encode("utf-8"))
        except (IOError, OSError):
            pass  # progress is advisory; the download must not fail because of it

    def start(self):
        if not self.path:
            return
        folder = os.path.dirname(self.path)
        if folder and not os.path.isdir(folder):
            os.makedirs(folder, 0o755)

        def loop():
            while not self.stop_event.wait(1.0):
                self.write()
        self.thread = threading.Thread(target=loop, name="kimi-progress")
        self.thread.daemon = True
        self.thread.start()

    def stop(self, state):
        self.set(state=state)
        self.stop_event.set()
        if self.thread:
            self.thread.join()
        self.write()


class Snapshot(object):
    """One run of the module."""

    def __init__(self, module):
        self.module = module
        p = module.params
        self.check_mode = module.check_mode
        self.repo_id = p["repo_id"]
        self.commit = p["revision"]
        # hf_home is type=path (expanded by AnsibleModule); the fallbacks are what huggingface_hub uses.
        self.hf_home = os.path.abspath(p["hf_home"] or os.environ.get("HF_HOME") or default_hf_home())
        self.endpoint = (p["endpoint"] or os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")
        self.token = p["token"] or os.environ.get("HF_TOKEN") or None
        self.verify = p["verify"]
        self.layout = Layout(self.hf_home, self.repo_id, self.commit)
        self.selection = selection_key(p["allow_patterns"], p["ignore_patterns"], p["materialize"])
        self.uid, self.gid = self.owner_ids()
        self.file_mode = self.parse_mode(p["mode"])
        self.dir_mode = self.file_mode | ((self.file_mode & 0o444) >> 2) | 0o700
        self.changed = False
        self.started = time.time()
        self.hashed_files = 0
        self.hashed_bytes = 0
        self.hash_lock = threading.Lock()
        self.repaired = []
        self.warnings = []
        self.paths_per_etag = {}
        self.progress = Progress(p["progress_file"], self.repo_id, self.commit)

    def fail(self, msg, **kwargs):
        self.progress.stop("failed")
        self.module.fail_json(msg=msg, commit=self.commit, **kwargs)

    def parse_mode(self, mode):
        if isinstance(mode, int):
            value = mode
        else:
            try:
                value = int(str(mode), 8)
            except ValueError:
                self.module.fail_json(msg="mode must be an octal file mode such as '0644', got %r" % (mode,))
        if value & ~0o7777 or not value & 0o400:
            self.module.fail_json(msg="mode must be an octal file mode readable by its owner such as '0644', got %r" % (mode,))
        return value

    def owner_ids(self):
        import grp
        import pwd
        uid = gid = -1
        p = self.module.params
        try:
            if p["owner"] is not None:
                uid = int(p["owner"]) if p["owner"].isdigit() else pwd.getpwnam(p["owner"]).pw_uid
            if p["group"] is not None:
                gid = int(p["group"]) if p["group"].isdigit() else grp.getgrnam(p["group"]).gr_gid
        except KeyError as exc:
            self.module.fail_json(msg="owner/group: no such user or group on the target: %s" % exc)
        return uid, gid

    # ---- ownership and modes -------------------------------------------------------------------------------------
    def wanted_mode(self, path, st):
        if stat.S_ISDIR(st.st_mode):
            return self.dir_mode
        if os.path.basename(path).endswith((".kimi-partial", ".kimi-partial.json")) or os.path.basename(path) == "lock":
            return None
        return self.file_mode

    def walk_repo(self):
        yield self.layout.repo_dir
        for root, dirs, files in os.walk(self.layout.repo_dir):
            for name in dirs + files:
                yield os.path.join(root, name)

    def fix_permissions(self, dry_run=False):
        """Owner, group and mode of everything in the repo folder; True if something was (or would be) changed."""
        fixed = False
        if not os.path.isdir(self.layout.repo_dir):
            return False
        for path in self.walk_repo():
            st = os.lstat(path)
            if stat.S_ISLNK(st.st_mode):
                if (self.uid != -1 and st.st_uid != self.uid) or (self.gid != -1 and st.st_gid != self.gid):
                    fixed = True
                    if not dry_run:
                        os.lchown(path, self.uid, self.gid)
                continue
            if (self.uid != -1 and st.st_uid != self.uid) or (self.gid != -1 and st.st_gid != self.gid):
                fixed = True
                if not dry_run:
                    os.chown(path, self.uid, self.gid)
            mode = self.wanted_mode(path, st)
            if mode is not None and stat.S_IMODE(st.st_mode) != mode:
                fixed = True
                if not dry_run:
                    os.chmod(path, mode)
        return fixed

    def makedirs(self, path):
        if os.path.isdir(path):
            return
        parent = os.path.dirname(path)
        if parent != path:
            self.makedirs(parent)
        os.mkdir(path, self.dir_mode)
        os.chmod(path, self.dir_mode)  # umask
        if self.uid != -1 or self.gid != -1:
            os.chown(path, self.uid, self.gid)

    # ---- results ----------------------------------------------------------------------------------------------------
    def result(self, files, fetched, bytes_total, bytes_downloaded, resumed, verified, from_record, download_s, counters):
        duration = time.time() - self.started
        return dict(
            changed=self.changed,
            commit=self.commit,
            snapshot_path=self.layout.snapshot,
            files=files,
            files_fetched=fetched,
            bytes_total=bytes_total,
            bytes_downloaded=bytes_downloaded,
            bytes_resumed=resumed,
            verified=verified,
            verification=dict(mode=self.verify, hashed_files=self.hashed_files, hashed_bytes=self.hashed_bytes,
                              from_record=from_record, repaired=self.repaired),
            duration_s=round(duration, 3),
            throughput_bytes_per_s=round(bytes_downloaded / download_s, 1) if download_s > 0 and bytes_downloaded else 0.0,
            requests=counters,
        )

    # ---- main -------------------------------------------------------------------------------------------------------
    def run(self):
        p = self.module.params
        # Fast path: a complete snapshot proven by the record - stats only, no lock, no network.
        record = load_record(self.layout, self.selection)
        if fast_check(self.layout, record, p["materialize"], p["set_refs"], self.verify):
            perms = self.fix_permissions(dry_run=self.check_mode)
            self.changed = perms
            files = [e["path"] for e in record["files"]]
            total = record.get("bytes_total", 0)
            return self.result(files, [], total, 0, 0, True, True, 0, {})

        curl_path = self.module.get_bin_path("curl")
        if not curl_path:
            self.fail("curl is missing on the host: install it (apt-get install curl); hf_snapshot downloads with it")
        curl = Curl(curl_path, self.endpoint, self.token, connect_timeout=p["connect_timeout"],
                    stall_timeout=p["stall_timeout"], ca_bundle=p["ca_bundle"])
        hub = Hub(curl, self.repo_id, self.commit, retries=p["retries"])
        if self.check_mode:
            return self.plan_only(hub, record)

        self.makedirs(self.layout.hub)
        for path in (self.layout.blobs, self.layout.snapshot, self.layout.refs, self.layout.record_dir):
            self.makedirs(path)
        lock = self.take_lock()
        try:
            self.remove_stale_temporaries()
            self.progress.start()
            return self.download(hub, record)
        except CacheError as exc:
            self.fail(str(exc))
        finally:
            os.close(lock)

    def take_lock(self):
        fd = os.open(self.layout.lock, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o600)
        if fcntl is None:
            return fd
        deadline = time.time() + 30
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return fd
            except (IOError, OSError):
                if time.time() > deadline:
                    os.close(fd)
                    self.module.fail_json(msg="another hf_snapshot run holds %s: wait for it to finish" % self.layout.lock)
                time.sleep(0.5)

    def list_selected(self, hub):
        try:
            entries = hub.list_files()
        except CacheError as exc:
            self.fail(str(exc))
        paths = filter_paths([e["path"] for e in entries], self.module.params["allow_patterns"],
                             self.module.params["ignore_patterns"])
        if not paths:
            self.fail("no file of %s@%s matches allow_patterns=%s ignore_patterns=%s" % (
                self.repo_id, self.commit, self.module.params["allow_patterns"], self.module.params["ignore_patterns"]))
        wanted = set(paths)
        return entries, [e for e in entries if e["path"] in wanted]

    def trusted(self, record):
        """etag -> stat of blobs the record proves verified (unless verify=full)."""
        if record is None or self.verify == "full":
            return {}
        if self.verify == "sha256" and record.get("verify") != "sha256":
            return {}
        return dict((e["etag"], e["stat"]) for e in record.get("blobs", record["files"]))

    def classify(self, selected, record):
        """Split unique blobs into trusted (present and proven), to_check (present, unproven) and missing."""
        trusted = self.trusted(record)
        blobs = {}
        for entry in selected:
            blobs.setdefault(entry["etag"], entry)
        ok, to_check, missing = {}, [], []
        for etag, entry in sorted(blobs.items(), key=lambda kv: kv[1]["path"]):
            path = self.layout.blob(etag)
            try:
                key = stat_key(path)
            except OSError:
                missing.append(entry)
                continue
            if trusted.get(etag) == key:
                ok[etag] = key
            else:
                to_check.append(entry)
        return blobs, ok, to_check, missing

    def hash_mode(self):
        return "size" if self.verify == "size" else "sha256"

    def check_existing(self, to_check, pool):
        """Hash blobs already in the cache that the record does not cover; bad ones are deleted and re-fetched."""
        good, bad = {}, []

        def one(entry):
            path = self.layout.blob(entry["etag"])
            reason = verify_blob(path, entry, self.hash_mode())
            self.count_hash(entry)
            return entry, path, reason
        for entry, path, reason in pool.map(one, to_check):
            if reason is None:
                good[entry["etag"]] = stat_key(path)
            else:
                self.warnings.append("%s: cached blob failed the check (%s); fetching it again" % (entry["path"], reason))
                self.repaired.append(entry["path"])
                if not self.check_mode:
                    os.unlink(path)
                bad.append(entry)
        return good, bad

    def count_hash(self, entry):
        if self.hash_mode() == "size":
            return
        with self.hash_lock:
            self.hashed_files += 1
            self.hashed_bytes += entry["size"]

    def plan_only(self, hub, record):
        entries, selected = self.list_selected(hub)
        blobs, _ok, to_check, missing = self.classify(selected, record)
        with ThreadPoolExecutor(max_workers=self.hash_workers()) as pool:
            _good, bad = self.check_existing(to_check, pool)
        fetch = missing + bad
        fetch_paths = sorted(e["path"] for e in selected if e["etag"] in set(b["etag"] for b in fetch))
        need = sum(b["size"] - self.partial_done(b) for b in fetch)
        self.check_disk(need)
        links = self.snapshot_changes(selected, apply=False)
        refs = self.refs_changes(apply=False)
        perms = self.fix_permissions(dry_run=True)
        self.changed = bool(fetch or links or refs or perms)
        return self.result([e["path"] for e in selected], fetch_paths, sum(e["size"] for e in selected), need, 0,
                           not fetch, False, 0, {})

    def hash_workers(self):
        return max(1, self.module.params["hash_workers"] or os.cpu_count() or 1)

    def partial_done(self, entry):
        """Bytes of this blob a killed or failed run left on disk (the next download keeps them)."""
        etag = entry["etag"]
        return sum(b - a for a, b in recorded_intervals(self.layout.partial(etag), self.layout.partial_state(etag), entry))

    def check_disk(self, need):
        folder = self.layout.hub
        while not os.path.isdir(folder):
            folder = os.path.dirname(folder)
        st = os.statvfs(folder)
        free = st.f_bavail * st.f_frsize
        floor = self.module.params["min_free_bytes"]
        if need and free - need < floor:
            self.fail("not enough disk space in %s: %s missing to download, %s free, min_free_bytes=%s must stay free. "
                      "Free %s or point hf_home at a bigger disk." % (
                          folder, human_size(need), human_size(free), human_size(floor), human_size(need + floor - free)),
                      bytes_needed=need, bytes_free=free)

    def download(self, hub, record):
        p = self.module.params
        self.progress.set(state="listing")
        entries, selected = self.list_selected(hub)
        blobs, ok, to_check, missing = self.classify(selected, record)
        self.paths_per_etag = {}
        for entry in selected:
            self.paths_per_etag[entry["etag"]] = self.paths_per_etag.get(entry["etag"], 0) + 1
        self.progress.set(files_total=len(selected), bytes_total=sum(e["size"] for e in blobs.values()))
        verified_stats = dict(ok)
        fetched_etags = set()
        resumed = 0
        download_s = 0.0
        with ThreadPoolExecutor(max_workers=self.hash_workers()) as pool:
            if to_check:
                self.progress.set(state="verifying")
                good, bad = self.check_existing(to_check, pool)
                verified_stats.update(good)
                missing = missing + bad
            on_disk = sum(self.partial_done(b) for b in missing)
            self.check_disk(sum(b["size"] for b in missing) - on_disk)
            self.progress.base_done = sum(blobs[e]["size"] for e in verified_stats) + on_disk
            self.progress.set(files_done=len([e for e in selected if e["etag"] in verified_stats]))
            rounds = 0
            counters = {"range_requests": 0, "retries": 0, "reresolved": 0, "rounds": 0}
            while missing:
                rounds += 1
                if rounds > 3:
                    self.fail("gave up: %s failed verification after 3 downloads (%s)" % (
                        ", ".join(b["path"] for b in missing), "; ".join(self.warnings[-3:])))
                self.progress.set(state="downloading")
                partials = []
                for entry in missing:
                    blob = PartialBlob(self.layout, entry)
                    blob.open()
                    resumed += blob.resumed_bytes if rounds == 1 else 0
                    partials.append(blob)
                futures = []
                futures_lock = threading.Lock()

                def done(blob):
                    fut = pool.submit(self.finish_blob, blob)
                    with futures_lock:
                        futures.append(fut)
                downloader = Downloader(hub, self.layout, connections=p["connections"], chunk_size=p["chunk_size"],
                                        retries=p["retries"], on_blob_done=done)
                self.progress.downloader = downloader
                t0 = time.time()
                try:
                    downloader.run(partials)
                finally:
                    download_s += time.time() - t0
                    self.progress.base_done += downloader.bytes_downloaded
                    self.progress.downloader = None
                    self.progress.add("bytes_downloaded", downloader.bytes_downloaded)
                    counters["range_requests"] += downloader.requests
                    counters["retries"] += downloader.retried
                    counters["reresolved"] += downloader.reresolved
                    for blob in partials:
                        blob.save(force=True)  # what a rerun resumes from, also after a failure
                        if blob.pending:
                            blob.close()  # complete ones are closed by finish_blob in the hash pool
                self.progress.set(state="verifying")
                retry = []
                for fut in list(futures):
                    blob, stat_or_reason = fut.result()
                    if isinstance(stat_or_reason, list):
                        verified_stats[blob.entry["etag"]] = stat_or_reason
                        fetched_etags.add(blob.entry["etag"])
                    else:
                        self.warnings.append("%s: downloaded blob failed the check (%s); fetching it again" % (
                            blob.entry["path"], stat_or_reason))
                        self.progress.base_done -= blob.entry["size"]
                        retry.append(blob.entry)
                missing = retry
            counters["rounds"] = rounds
        if fetched_etags:
            self.changed = True
        self.progress.set(state="linking")
        if self.snapshot_changes(selected, apply=True):
            self.changed = True
        full_set = not p["allow_patterns"] and not p["ignore_patterns"]
        if full_set and self.write_if_changed(os.path.join(self.layout.trees, self.commit + ".json"), tree_cache_json(entries)):
            self.changed = True
        if self.refs_changes(apply=True):
            self.changed = True
        self.remove_stale_partials(blobs)
        self.save(selected, verified_stats, blobs)
        if self.fix_permissions():  # after save(): the record file is chowned too
            self.changed = True
        self.progress.set(bytes_done=sum(e["size"] for e in blobs.values()), files_done=len(selected))
        self.progress.stop("done")
        total_downloaded = self.progress.data["bytes_downloaded"]
        fetched = sorted(e["path"] for e in selected if e["etag"] in fetched_etags)
        return self.result([e["path"] for e in selected], fetched, sum(e["size"] for e in selected), total_downloaded,
                           resumed, True, False, download_s, counters)

    def finish_blob(self, blob):
        """Hash a complete partial blob; rename it into place if it matches. Runs in the hash pool."""
        entry = blob.entry
        if blob.fd is not None:
            os.fsync(blob.fd)  # the bytes are on disk before the name says the blob is complete
        reason = verify_blob(blob.path, entry, self.hash_mode())
        self.count_hash(entry)
        if reason is not None:
            blob.failed = reason
            blob.discard()
            if entry["path"] not in self.repaired:
                self.repaired.append(entry["path"])
            return blob, reason
        blob.mark_finished()
        blob.close()
        os.chmod(blob.path, self.file_mode)
        if self.uid != -1 or self.gid != -1:
            os.chown(blob.path, self.uid, self.gid)
        os.replace(blob.path, self.layout.blob(entry["etag"]))
        try:
            os.unlink(blob.state_path)
        except OSError:
            pass
        self.progress.add("files_done", self.paths_per_etag.get(entry["etag"], 1))
        return blob, stat_key(self.layout.blob(entry["etag"]))

    def remove_stale_temporaries(self):
        """Temporary files of atomic writes cut by a kill (we hold the lock: no other run is writing)."""
        for root, unused, names in os.walk(self.layout.repo_dir):
            for name in names:
                if name.startswith(TMP_PREFIX) and name.endswith(".tmp"):
                    os.unlink(os.path.join(root, name))

    def remove_stale_partials(self, blobs):
        """Partial files of blobs that are complete now (left by a run that lost a race or was killed)."""
        for etag in blobs:
            for path in (self.layout.partial(etag), self.layout.partial_state(etag)):
                if os.path.exists(path) and os.path.exists(self.layout.blob(etag)):
                    os.unlink(path)

    def write_if_changed(self, path, data, mode=None):
        if read_text(path) == data.decode("utf-8"):
            return False
        self.makedirs(os.path.dirname(path))
        atomic_write(path, data, mode=mode or self.file_mode)
        return True

    def snapshot_changes(self, selected, apply):
        """Relative symlinks (or real files for `materialize`) in snapshots/<commit>/; True if any changed."""
        changed = False
        for entry in selected:
            pointer = self.layout.pointer(entry["path"])
            target = pointer_target(entry["path"], entry["etag"])
            real = materialize_matches(entry["path"], self.module.params["materialize"])
            if real:
                if os.path.isfile(pointer) and not os.path.islink(pointer) and self.same_content(pointer, entry):
                    continue
            else:
                try:
                    if os.readlink(pointer) == target:
                        continue
                except OSError:
                    pass
            changed = True
            if not apply:
                continue
            self.makedirs(os.path.dirname(pointer))
            tmp = os.path.join(os.path.dirname(pointer), "%s%s.tmp" % (TMP_PREFIX, os.path.basename(pointer)))
            if os.path.lexists(tmp):
                os.unlink(tmp)
            if real:
                with open(self.layout.blob(entry["etag"]), "rb") as src:
                    data = src.read()
                atomic_write(pointer, data, mode=self.file_mode)
            else:
                os.symlink(target, tmp)
                os.replace(tmp, pointer)
        return changed

    def same_content(self, path, entry):
        return verify_blob(path, entry, "sha256" if entry["size"] < (64 << 20) else "size") is None

    def refs_changes(self, apply):
        changed = False
        for ref in self.module.params["set_refs"]:
            path = os.path.join(self.layout.refs, *ref.split("/"))
            if read_text(path) == self.commit:
                continue
            changed = True
            if apply:
                self.makedirs(os.path.dirname(path))
                # exactly the 40-hex commit, no newline: huggingface_hub does not strip it
                atomic_write(path, self.commit.encode("ascii"), mode=self.file_mode)
        return changed

    def save(self, selected, verified_stats, blobs):
        files = []
        for entry in selected:
            item = {"path": entry["path"], "etag": entry["etag"], "size": entry["size"],
                    "stat": verified_stats[entry["etag"]]}
            if materialize_matches(entry["path"], self.module.params["materialize"]):
                item["pointer_stat"] = stat_key(self.layout.pointer(entry["path"]))
            files.append(item)
        record = {"repo_id": self.repo_id, "selection": self.selection, "complete": True,
                  "verify": self.hash_mode(), "files": files, "bytes_total": sum(e["size"] for e in selected),
                  "blobs": [{"etag": k, "stat": verified_stats[k]} for k in sorted(blobs)], "saved": time.time()}
        save_record(self.layout, record)


def default_hf_home():
    import pwd
    home = os.environ.get("HOME") or pwd.getpwuid(os.getuid()).pw_dir
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(home, ".cache")
    return os.path.join(cache, "huggingface")


def main():
    module = AnsibleModule(
        argument_spec=dict(
            repo_id=dict(type="str", required=True),
            revision=dict(type="str", required=True),
            hf_home=dict(type="path"),
            endpoint=dict(type="str"),
            token=dict(type="str", no_log=True),
            connections=dict(type="int", default=16),
            chunk_size=dict(type="int", default=64 << 20),
            allow_patterns=dict(type="list", elements="str"),
            ignore_patterns=dict(type="list", elements="str"),
            verify=dict(type="str", default="sha256", choices=["sha256", "size", "full"]),
            materialize=dict(type="list", elements="str", default=[]),
            set_refs=dict(type="list", elements="str", default=["main"]),
            owner=dict(type="str"),
            group=dict(type="str"),
            mode=dict(type="raw", default="0644"),
            min_free_bytes=dict(type="int", default=0),
            progress_file=dict(type="path"),
            hash_workers=dict(type="int"),
            retries=dict(type="int", default=10),
            connect_timeout=dict(type="int", default=30),
            stall_timeout=dict(type="int", default=60),
            ca_bundle=dict(type="path"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    try:
        check_repo_id(p["repo_id"])
        check_revision(p["revision"], p["repo_id"])
    except CacheError as exc:
        module.fail_json(msg=str(exc))
    limits = (("connections", 1, 64), ("chunk_size", 1 << 20, 1 << 34), ("retries", 0, 1000),
              ("connect_timeout", 1, 3600), ("stall_timeout", 5, 3600))
    for name, low, high in limits:
        if not low <= p[name] <= high:
            module.fail_json(msg="%s must be between %d and %d, got %d" % (name, low, high, p[name]))
    if p["hash_workers"] is not None and not 1 <= p["hash_workers"] <= 256:
        module.fail_json(msg="hash_workers must be between 1 and 256, got %d" % p["hash_workers"])
    if p["min_free_bytes"] < 0:
        module.fail_json(msg="min_free_bytes must be >= 0, got %d" % p["min_free_bytes"])
    endpoint = p["endpoint"] or os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT
    if not endpoint.startswith(("http://", "https://")):
        module.fail_json(msg="endpoint must be an http(s) URL, got %r" % endpoint)
    for ref in p["set_refs"]:
        if not ref or ref.startswith("/") or ".." in ref.split("/") or ref.strip() != ref:
            module.fail_json(msg="set_refs: %r is not a valid ref name" % ref)
    snapshot = Snapshot(module)
    try:
        result = snapshot.run()
    except HubError as exc:
        snapshot.fail(str(exc))
    except (CacheError, OSError) as exc:
        snapshot.fail("%s: %s" % (type(exc).__name__, exc))
    for warning in snapshot.warnings:
        module.warn(warning)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
