# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The Docker daemon option of the modules that talk to its API (module_utils/_docker_api.DAEMON_ARGUMENT_SPEC)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment(object):
    DOCUMENTATION = r"""
options:
  docker_host:
    description: The daemon's socket, C(unix://PATH); default C($DOCKER_HOST), else C(unix:///var/run/docker.sock).
    type: str
"""
