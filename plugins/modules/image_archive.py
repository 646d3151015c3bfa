#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: image_archive
short_description: Save a Docker image to a zstd tarball, or load one, checked by image ID
description:
  - O(state=saved) streams the daemon's C(docker save) of O(name) through C(zstd) into O(path), written to a
    temporary file, flushed to disk and renamed, so a reader never sees half an archive. Beside it,
    C(<path>.json) records the image ID, its labels and the archive's size. Nothing is written when that record
    already names the image's current ID and the archive has the recorded size.
  - O(state=loaded) makes the image of an archive present under O(name). It reads C(<path>.json); when the daemon
    already has that image ID under O(name), nothing changes. Otherwise it streams C(zstd -dc) of the archive into
    the daemon's C(docker load) and checks that O(name) then has the recorded ID (the daemon checks every layer
    against the image's configuration, whose hash the ID is).
  - Fleets and air-gapped sites build once and load everywhere else.
version_added: 1.0.0
author: kimi.deploy maintainers (@kimi-deploy)
extends_documentation_fragment: [kimi.deploy.docker_daemon]
options:
  name:
    description: The image reference, C(repository:tag).
    type: str
    required: true
  path:
    description: The archive on the host, for example C(/var/lib/kimi-k26/images/kimi-k26-nvfp4-vllm_cu130-mla.tar.zst).
    type: path
    required: true
  state:
    description: Save the image to O(path), or load O(path) into the daemon.
    type: str
    choices: [saved, loaded]
    default: saved
  level:
    description: zstd compression level for O(state=saved).
    type: int
    default: 3
  timeout:
    description: Seconds the daemon may stay silent.
    type: int
    default: 3600
attributes:
  check_mode:
    support: full
    description: Reports whether it would save or load.
  diff_mode:
    support: none
    description: No diff.
  platform:
    support: full
    platforms: posix
    description: Linux hosts with a Docker daemon on a unix socket and the C(zstd) program.
requirements:
  - the C(zstd) program on the host
seealso:
  - module: kimi.deploy.image_build
"""

EXAMPLES = r"""
- name: Save the built image beside the build
  kimi.deploy.image_archive:
    name: kimi-k26-nvfp4-vllm:cu130-mla
    path: /var/lib/kimi-k26/images/kimi-k26-nvfp4-vllm_cu130-mla.tar.zst

- name: Load it on another host (copied there first)
  kimi.deploy.image_archive:
    name: kimi-k26-nvfp4-vllm:cu130-mla
    path: /var/lib/kimi-k26/images/kimi-k26-nvfp4-vllm_cu130-mla.tar.zst
    state: loaded
"""

RETURN = r"""
image_id:
  description: The image ID the archive holds.
  returned: success
  type: str
labels:
  description: The image's labels, as recorded.
  returned: success
  type: dict
bytes:
  description: Size of the archive.
  returned: success
  type: int
record:
  description: The record file beside the archive.
  returned: success
  type: str
duration_s:
  description: Seconds the save or load took.
  returned: success
  type: float
"""

import json
import os
import shutil
import subprocess
import threading
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.kimi.deploy.plugins.module_utils._docker_api import (
    DAEMON_ARGUMENT_SPEC, READ_SIZE, DockerAPI, DockerAPIError, image_path, json_stream, stream_error)
from ansible_collections.kimi.deploy.plugins.module_utils._files import atomic_output, atomic_write


def record_path(path):
    return path + ".json"


def read_record(path):
    try:
        with open(record_path(path), encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None


def archive_current(path, record, image_id):
    return bool(record) and record.get("id") == image_id and os.path.isfile(path) \
        and os.path.getsize(path) == record.get("bytes")


def pump(source, sink, errors):
    """Copy a stream into a pipe, then close the pipe (a thread, so the other end is read at the same time)."""
    try:
        while True:
            chunk = source.read(READ_SIZE)
            if not chunk:
                break
            sink.write(chunk)
    except (OSError, ValueError) as exc:
        errors.append(exc)
    finally:
        try:
            sink.close()
        except OSError as exc:
            errors.append(exc)


def save(api, zstd, name, path, level):
    """docker save NAME | zstd > PATH, whole or not at all (_files.atomic_output); returns the archive's size."""
    errors = []
    with atomic_output(path, sync_folder=True) as out:
        response = api.request("GET", "/images/%s/get" % image_path(name))
        # A pipe that streams many GB: AnsibleModule.run_command collects whole outputs in memory.
        proc = subprocess.Popen(  # pylint: disable=ansible-bad-function
            [zstd, "-q", "-T0", "-%d" % level, "-c"], stdin=subprocess.PIPE, stdout=out, stderr=subprocess.PIPE)
        feeder = threading.Thread(target=pump, args=(response, proc.stdin, errors))
        feeder.start()
        stderr = proc.stderr.read()
        feeder.join()
        if proc.wait() != 0 or errors:
            raise DockerAPIError("docker save %s | zstd failed: %s" % (
                name, stderr.decode("utf-8", "replace").strip() or errors))
    return os.path.getsize(path)


def load(api, zstd, path):
    """zstd -dc PATH | docker load; returns the daemon's messages. Streamed, as in save()."""
    proc = subprocess.Popen(  # pylint: disable=ansible-bad-function
        [zstd, "-q", "-dc", path], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        response = api.request("POST", "/images/load", params={"quiet": "1"}, body=proc.stdout,
                               headers={"Content-Type": "application/x-tar"})
        messages = []
        for document in json_stream(response):
            error = stream_error(document)
            if error:
                raise DockerAPIError("docker load of %s: %s" % (path, error))
            if document.get("stream"):
                messages.append(document["stream"].strip())
    finally:
        stderr = proc.stderr.read()
        if proc.wait() != 0:
            raise DockerAPIError("zstd -dc %s failed: %s" % (path, stderr.decode("utf-8", "replace").strip()))
    return messages


def main():
    module = AnsibleModule(
        argument_spec=dict(
            name=dict(type="str", required=True),
            path=dict(type="path", required=True),
            state=dict(type="str", choices=["saved", "loaded"], default="saved"),
            level=dict(type="int", default=3),
            **DAEMON_ARGUMENT_SPEC,
            timeout=dict(type="int", default=3600),
        ),
        supports_check_mode=True,
    )
    name, path, state = module.params["name"], module.params["path"], module.params["state"]
    started = time.monotonic()
    result = {"changed": False, "record": record_path(path)}
    zstd = shutil.which("zstd")
    try:
        api = DockerAPI(module.params["docker_host"], timeout=module.params["timeout"])
        if state == "saved":
            image = api.image(name)
            if image is None:
                module.fail_json(msg="cannot save %s: the daemon has no such image" % name, **result)
            record = read_record(path)
            result.update(image_id=image["Id"], labels=(image.get("Config") or {}).get("Labels") or {})
            if archive_current(path, record, image["Id"]):
                result["bytes"] = record["bytes"]
                module.exit_json(**result)
            result["changed"] = True
            if module.check_mode:
                module.exit_json(**result)
            if not zstd:
                module.fail_json(msg="zstd is not installed on this host (apt install zstd)", **result)
            if not os.path.isdir(os.path.dirname(path)):
                module.fail_json(msg="the folder of %s does not exist" % path, **result)
            result["bytes"] = save(api, zstd, name, path, module.params["level"])
            record = {"image": name, "id": image["Id"], "labels": result["labels"], "bytes": result["bytes"],
                      "created": image.get("Created")}
            atomic_write(record_path(path), (json.dumps(record, indent=2, sort_keys=True) + "\n").encode("utf-8"))
        else:
            record = read_record(path)
            if not record or not record.get("id") or not os.path.isfile(path):
                module.fail_json(msg="%s or its record %s is missing or unreadable: save the image with "
                                     "state=saved first" % (path, record_path(path)), **result)
            result.update(image_id=record["id"], labels=record.get("labels") or {}, bytes=record.get("bytes"))
            image = api.image(name)
            if image is not None and image["Id"] == record["id"]:
                module.exit_json(**result)
            result["changed"] = True
            if module.check_mode:
                module.exit_json(**result)
            if os.path.getsize(path) != record.get("bytes"):
                module.fail_json(msg="%s has %d bytes, its record says %s: the copy is incomplete"
                                     % (path, os.path.getsize(path), record.get("bytes")), **result)
            if not zstd:
                module.fail_json(msg="zstd is not installed on this host (apt install zstd)", **result)
            result["messages"] = load(api, zstd, path)
            image = api.image(name)
            if image is None or image["Id"] != record["id"]:
                module.fail_json(msg="after loading %s, %s is %s, not the recorded %s" % (
                    path, name, image["Id"] if image else "absent", record["id"]), **result)
    except (DockerAPIError, OSError) as exc:
        module.fail_json(msg=str(exc), **result)
    result["duration_s"] = round(time.monotonic() - started, 1)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
