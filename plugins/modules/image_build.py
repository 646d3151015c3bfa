#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: image_build
short_description: Build a Docker image on the host, streaming the daemon's output to a log and a progress file
description:
  - Builds O(context) with the Docker daemon's classic builder (the C(/build) API), tagged O(name), with the build
    arguments O(buildargs) and the labels O(labels). The tag appears only when every step succeeded, so a failed
    build leaves no image under O(name).
  - Pulls O(base) first when the daemon does not have it (unless O(pull_base=never)); a vLLM base is many GB.
  - Every line the daemon sends is appended to O(log_file) as it comes, and O(progress_file) (JSON with C(state),
    C(elapsed_s) and C(line), the current build step or the pull's byte count) is rewritten at most once a second,
    so that M(kimi.deploy.job_progress) shows the job moving when this module runs with C(async) and C(poll) 0.
  - "Why not community.docker: its build and pull modules return the daemon's output only when the job ends, and a
    build that pulls 20 GB would look hung. Deciding whether to build (labels), tagging, removing and running the
    image stay with community.docker in the kimi.deploy.kimi_image role."
  - Always builds; the caller decides whether a build is needed. Check mode reports a build without running it.
version_added: 1.0.0
author: kimi.deploy maintainers (@kimi-deploy)
extends_documentation_fragment: [kimi.deploy.docker_daemon]
options:
  name:
    description: The image reference to tag the result with, C(repository:tag).
    type: str
    required: true
  context:
    description: Build context, a folder on the host that holds O(dockerfile).
    type: path
    required: true
  dockerfile:
    description: The Dockerfile, relative to O(context).
    type: str
    default: Dockerfile
  buildargs:
    description: Build arguments (C(ARG) values).
    type: dict
    default: {}
  labels:
    description: Labels set on the built image.
    type: dict
    default: {}
  nocache:
    description: Build every step again instead of reusing the daemon's build cache.
    type: bool
    default: false
  base:
    description: The image the Dockerfile builds FROM; pulled first, with progress, when the daemon lacks it.
    type: str
  base_label:
    description:
      - A label set on the built image to what identifies O(base) (the rule of the C(kimi.deploy.image_digest) filter - the
        pinned digest, else the repository digest, else the image ID), known only once the base is on the host.
    type: str
  pull_base:
    description: Whether a missing O(base) is pulled (V(missing)) or is an error (V(never), for hosts that load it).
    type: str
    choices: [missing, never]
    default: missing
  log_file:
    description: The build log on the host; rewritten for each build.
    type: path
    required: true
  progress_file:
    description: JSON progress file on the host, for M(kimi.deploy.job_progress).
    type: path
  timeout:
    description: Seconds the daemon may stay silent before the build is abandoned.
    type: int
    default: 3600
attributes:
  check_mode:
    support: full
    description: Reports what would be built; nothing runs.
  diff_mode:
    support: none
    description: No diff.
  platform:
    support: full
    platforms: posix
    description: Linux hosts with a Docker daemon on a unix socket.
notes:
  - Uses only the Python standard library on the host.
seealso:
  - module: kimi.deploy.job_progress
  - module: community.docker.docker_image_info
"""

EXAMPLES = r"""
- name: Build the NVFP4 image (in the background)
  kimi.deploy.image_build:
    name: kimi-k26-nvfp4-vllm:cu130-mla-candidate
    context: /var/lib/kimi-k26/image-build
    base: vllm/vllm-openai:v0.22.1-cu130
    buildargs:
      BASE_IMAGE: vllm/vllm-openai:v0.22.1-cu130
      EXPECTED_VLLM_VERSION: 0.22.1
    labels:
      io.kimi-deploy.recipe: "{{ recipe_sha256 }}"
    log_file: /var/lib/kimi-k26/image-build/build.log
    progress_file: /var/lib/kimi-k26/image-build/progress.json
  async: 7200
  poll: 0
  register: build_job

- name: Wait for it, one progress line per poll
  kimi.deploy.job_progress:
    jid: "{{ build_job.ansible_job_id }}"
    progress_file: /var/lib/kimi-k26/image-build/progress.json
    label: image
"""

RETURN = r"""
image_id:
  description: ID of the built image (empty in check mode).
  returned: success
  type: str
  sample: sha256:0f3c...
base_id:
  description: ID of the base image the build used.
  returned: when O(base) is set
  type: str
base_digests:
  description: The base's repository digests (empty for a base that was built or loaded locally).
  returned: when O(base) is set
  type: list
  elements: str
base_digest:
  description: What identifies the base (its pinned digest, else its repository digest, else its image ID).
  returned: when O(base) is set
  type: str
pulled:
  description: Whether O(base) was pulled.
  returned: success
  type: bool
steps:
  description: The number of Dockerfile steps run.
  returned: success
  type: int
log_file:
  description: Where the build log is.
  returned: success
  type: str
duration_s:
  description: Seconds the pull and the build took.
  returned: success
  type: float
"""

import io
import json
import os
import re
import tarfile
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.kimi.deploy.plugins.module_utils._docker_api import (
    DAEMON_ARGUMENT_SPEC, DockerAPI, DockerAPIError, image_digest, json_stream, pull as docker_pull, stream_error)
from ansible_collections.kimi.deploy.plugins.module_utils._files import atomic_write

STEP_RE = re.compile(r"^Step (\d+)/(\d+) : (.*)$")
ANSI_RE = re.compile(r"\x1b\[[0-9;]*m")
# The classic builder's own lines around a step's output, left out of a failure message.
BUILDER_LINE_RE = re.compile(r"^(-+> |Removing intermediate container |Step \d+/\d+ : )")


class Job:
    """The log and the progress file of one build."""

    def __init__(self, log_file, progress_file):
        self.log = open(log_file, "w", encoding="utf-8")
        self.progress_file = progress_file
        self.started = time.monotonic()
        self.written = 0.0

    def line(self, text):
        for line in ANSI_RE.sub("", text).splitlines():
            self.log.write(line + "\n")
        self.log.flush()

    def progress(self, state, line, force=False):
        now = time.monotonic()
        if self.progress_file and (force or now - self.written >= 1.0):
            atomic_write(self.progress_file, json.dumps({"state": state, "elapsed_s": round(now - self.started, 1),
                                                         "line": line}).encode("utf-8"), durable=False)
            self.written = now

    def close(self):
        self.log.close()


def pull(api, job, ref):
    """Pull ref, logging and reporting layer progress."""
    job.line("pulling %s" % ref)

    def show(document, progress):
        if document.get("status") and document.get("status") != "Downloading":
            job.line(" ".join(str(document.get(key)) for key in ("id", "status") if document.get(key)))
        job.progress("pulling", "%s: %s" % (ref, progress.line()))

    progress = docker_pull(api, ref, show)
    job.line("pulled %s: %s" % (ref, progress.line()))


def context_tar(context, dockerfile):
    """The build context as an in-memory tar (the context is a few small files)."""
    if not os.path.isfile(os.path.join(context, dockerfile)):
        raise DockerAPIError("%s has no %s" % (context, dockerfile))
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w") as archive:
        for entry in sorted(os.listdir(context)):
            if entry.startswith("."):
                continue  # the log and progress files of earlier builds
            archive.add(os.path.join(context, entry), arcname=entry)
    return data.getvalue()


def build(api, job, params):
    """Run the build; returns (image_id, steps). DockerAPIError on a failed step, with the step's output."""
    body = context_tar(params["context"], params["dockerfile"])
    query = {"t": params["name"], "dockerfile": params["dockerfile"], "rm": "1", "forcerm": "1", "pull": "0",
             "nocache": "1" if params["nocache"] else "0",
             "buildargs": json.dumps(params["buildargs"]), "labels": json.dumps(params["labels"])}
    response = api.request("POST", "/build", params=query, body=body,
                           headers={"Content-Type": "application/x-tar"})
    image_id, steps, current, output = None, 0, "sending the context", []
    for document in json_stream(response):
        error = stream_error(document)
        if error:
            job.line(error)
            said = [line for line in output if line.strip() and not BUILDER_LINE_RE.match(line)]
            raise DockerAPIError("building %s failed at %s: %s%s" % (
                params["name"], current, " / ".join(said[-5:]) + " - " if said else "", error.strip()))
        text = ANSI_RE.sub("", document.get("stream") or document.get("status") or "")
        if text:
            job.line(text.rstrip("\n"))
            for line in text.splitlines():
                match = STEP_RE.match(line.strip())
                if match:
                    steps = int(match.group(1))
                    current = "step %s/%s (%s)" % (match.group(1), match.group(2), " ".join(match.group(3).split())[:100])
                    output = []
                else:
                    output.append(line.strip())
        aux = document.get("aux") or {}
        if aux.get("ID"):
            image_id = aux["ID"]
        job.progress("building", current)
    return image_id, steps


def main():
    module = AnsibleModule(
        argument_spec=dict(
            name=dict(type="str", required=True),
            context=dict(type="path", required=True),
            dockerfile=dict(type="str", default="Dockerfile"),
            buildargs=dict(type="dict", default={}),
            labels=dict(type="dict", default={}),
            nocache=dict(type="bool", default=False),
            base=dict(type="str"),
            base_label=dict(type="str"),
            pull_base=dict(type="str", choices=["missing", "never"], default="missing"),
            log_file=dict(type="path", required=True),
            progress_file=dict(type="path"),
            **DAEMON_ARGUMENT_SPEC,
            timeout=dict(type="int", default=3600),
        ),
        supports_check_mode=True,
    )
    params = module.params
    params["buildargs"] = dict((str(k), str(v)) for k, v in params["buildargs"].items())
    params["labels"] = dict((str(k), str(v)) for k, v in params["labels"].items())
    result = {"changed": True, "image_id": "", "pulled": False, "steps": 0, "log_file": params["log_file"]}
    if module.check_mode:
        module.exit_json(**result)
    started = time.monotonic()
    try:
        api = DockerAPI(params["docker_host"], timeout=params["timeout"])
        job = Job(params["log_file"], params["progress_file"])
    except (DockerAPIError, OSError) as exc:
        module.fail_json(msg=str(exc), **result)
    try:
        if params["base"]:
            base = api.image(params["base"])
            if base is None:
                if params["pull_base"] == "never":
                    raise DockerAPIError("the base image %s is not on this host and pull_base=never: load it "
                                         "(docker load) or allow the pull" % params["base"])
                job.progress("pulling", params["base"], force=True)
                pull(api, job, params["base"])
                result["pulled"] = True
                base = api.image(params["base"])
                if base is None:
                    raise DockerAPIError("the daemon pulled %s but does not list it" % params["base"])
            result["base_id"] = base["Id"]
            result["base_digests"] = base.get("RepoDigests") or []
            result["base_digest"] = image_digest(params["base"], base)
            if params["base_label"]:
                params["labels"][params["base_label"]] = result["base_digest"]
        job.progress("building", "sending the context", force=True)
        image_id, result["steps"] = build(api, job, params)
        image = api.image(params["name"])
        if image is None or (image_id and image["Id"] != image_id):
            raise DockerAPIError("the build of %s ended without an image under that name" % params["name"])
        result["image_id"] = image["Id"]
        job.progress("built", "%s (%s)" % (params["name"], image["Id"][:19]), force=True)
    except (DockerAPIError, OSError) as exc:
        job.line("FAILED: %s" % exc)
        job.progress("failed", str(exc)[:300], force=True)
        job.close()
        result["duration_s"] = round(time.monotonic() - started, 1)
        module.fail_json(msg="%s (build log: %s)" % (exc, params["log_file"]), **result)
    job.close()
    result["duration_s"] = round(time.monotonic() - started, 1)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
