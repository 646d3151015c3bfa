# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Value rules shared by the deployment model (controller) and the modules (targets). Private to kimi.deploy.

Each rule here is the only copy of itself: the commit sha, the Hugging Face repo id, and how to look a commit up.
Every pattern is matched with full-match semantics (re.fullmatch): `$` would accept a trailing newline, and a
revision ending in "\\n" would create a `snapshots/<sha>\\n` folder.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.kimi.deploy.plugins.module_utils._common import full_match  # noqa: F401 (re-exported)

DEFAULT_ENDPOINT = "https://huggingface.co"

SHA_RE = re.compile(r"[0-9a-f]{40}")
SHA256_RE = re.compile(r"[0-9a-f]{64}")
REPO_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,95}/[A-Za-z0-9][A-Za-z0-9_.-]{0,95}")


class ValueRuleError(ValueError):
    """A value that breaks one of the rules below. The message names the variable and says what is allowed."""


def revision_hint(repo_id, variable=None, endpoint=DEFAULT_ENDPOINT):
    """How to look up the commit of `repo_id` (the one copy of this hint)."""
    hint = ("Look it up with: curl -s %s/api/models/%s/revision/main | python3 -c 'import json,sys; "
            "print(json.load(sys.stdin)[\"sha\"])' (or the commit list on the model page)"
            % ((endpoint or DEFAULT_ENDPOINT).rstrip("/"), repo_id))
    if variable:
        hint += ", then set %s in your inventory" % variable
    return hint + "."


def check_revision(revision, repo_id, variable="revision", endpoint=DEFAULT_ENDPOINT):
    """A pinned 40-hex lower-case commit sha, returned as is; otherwise ValueRuleError naming `variable`."""
    hint = revision_hint(repo_id, variable if variable != "revision" else None, endpoint)
    if revision is None or (isinstance(revision, str) and revision.strip() == ""):
        raise ValueRuleError("%s is not set: %s must be pinned to a 40-hex commit sha; there is no safe default. %s"
                             % (variable, repo_id, hint))
    if full_match(SHA_RE, revision):
        return revision
    if isinstance(revision, str) and full_match(SHA_RE, revision.lower()):
        raise ValueRuleError("%s=%r must be written in lower case (a commit sha is lower-case hex): use %s"
                             % (variable, revision, revision.lower()))
    raise ValueRuleError("%s=%r is not a 40-hex commit sha (branches and tags move; a deployment must not). %s"
                         % (variable, revision, hint))


def check_repo_id(repo_id, variable="repo_id"):
    """'org/name' of letters, digits, '-', '_', '.', returned as is; otherwise ValueRuleError naming `variable`."""
    if not full_match(REPO_ID_RE, repo_id) or ".." in repo_id:
        raise ValueRuleError("%s=%r is not allowed: it must look like 'org/name' (letters, digits, '-', '_', '.')"
                             % (variable, repo_id))
    return repo_id
