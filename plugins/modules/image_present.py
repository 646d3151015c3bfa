#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: image_present
short_description: Read a Docker image and pull it when it is missing, in one daemon round trip when it is there
description:
  - Reads O(name) from the daemon (C(GET /images/{name}/json)). When the daemon has it, nothing changes.
  - When it is missing and O(pull=missing), pulls it (C(POST /images/create)) and reads it again; with O(pull=never)
    (an image built or loaded on the host, never from a registry), fails naming the image and O(hint).
  - Every converge reads the engine's and the exporter's images; this module talks to the daemon's socket with the
    standard library, where community.docker's modules import the Docker SDK on the host for each task.
version_added: 1.0.0
author: kimi.deploy maintainers (@kimi-deploy)
extends_documentation_fragment: [kimi.deploy.docker_daemon]
options:
  name:
    description: The image reference, C(repository:tag) or C(repository@sha256:...).
    type: str
    required: true
  pull:
    description: Pull a missing image (V(missing)), or fail when it is missing (V(never)).
    type: str
    choices: [missing, never]
    default: missing
  hint:
    description: What to do about a missing image that is never pulled, appended to the failure.
    type: str
    default: ""
  timeout:
    description: Seconds the daemon may stay silent during a pull.
    type: int
    default: 3600
attributes:
  check_mode:
    support: full
    description: Reports whether it would pull; a missing image that is never pulled is reported, not failed.
  diff_mode:
    support: none
    description: No diff.
  platform:
    support: full
    platforms: posix
    description: Linux hosts with a Docker daemon on a unix socket.
seealso:
  - module: kimi.deploy.image_build
  - module: kimi.deploy.image_archive
"""

EXAMPLES = r"""
- name: The engine image, pulled when missing
  kimi.deploy.image_present:
    name: lmsysorg/sglang:v0.5.12.post1-cu130

- name: A locally built image (never pulled)
  kimi.deploy.image_present:
    name: kimi-k26-nvfp4-vllm:cu130-mla
    pull: never
    hint: run site.yml with --tags image first
"""

RETURN = r"""
present:
  description: Whether the daemon has the image (after a pull; in check mode, before it).
  returned: always
  type: bool
image_id:
  description: The image's ID ("" when absent).
  returned: always
  type: str
digest:
  description: What identifies the image (the pinned digest, the repository digest recorded at the pull, else the ID).
  returned: always
  type: str
pulled:
  description: Whether this run pulled it.
  returned: always
  type: bool
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.kimi.deploy.plugins.module_utils._docker_api import (
    DAEMON_ARGUMENT_SPEC, DockerAPI, DockerAPIError, image_digest, pull)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            name=dict(type="str", required=True),
            pull=dict(type="str", choices=["missing", "never"], default="missing"),
            hint=dict(type="str", default=""),
            **DAEMON_ARGUMENT_SPEC,
            timeout=dict(type="int", default=3600),
        ),
        supports_check_mode=True,
    )
    name = module.params["name"]
    result = {"changed": False, "present": False, "image_id": "", "digest": "", "pulled": False}
    try:
        api = DockerAPI(module.params["docker_host"], timeout=module.params["timeout"])
        image = api.image(name)
        if image is None:
            if module.params["pull"] == "never":
                if module.check_mode:
                    module.exit_json(**result)
                module.fail_json(msg="%s is not on this host and is never pulled%s" % (
                    name, (": " + module.params["hint"]) if module.params["hint"] else ""), **result)
            result["changed"] = True
            if module.check_mode:
                module.exit_json(**result)
            pull(api, name)
            result["pulled"] = True
            image = api.image(name)
            if image is None:
                module.fail_json(msg="the daemon pulled %s but does not list it" % name, **result)
    except (DockerAPIError, OSError) as exc:
        module.fail_json(msg=str(exc), **result)
    result.update(present=True, image_id=image["Id"], digest=image_digest(name, image))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
