# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""kimi.deploy.draft_mismatch: why a speculative draft cannot serve with the Kimi-K2.6 checkpoint, or ''."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: draft_mismatch
short_description: Why a speculative-decoding draft cannot serve with the Kimi-K2.6 checkpoint
version_added: 1.0.0
author: kimi.deploy contributors
description:
  - A draft model reads the target's hidden states and proposes token ids of the target's tokenizer, so its
    C(hidden_size) (or C(target_hidden_size)) and C(vocab_size) must be the target's, its architecture the method's
    (C(eagle3), C(dflash)), and the target layers it reads (C(eagle_aux_hidden_state_layer_ids), C(target_layer_ids))
    must exist in the target. Reads both config.json files (the target's C(text_config) where it has one).
  - Returns the first mismatch as a sentence naming the field and both values; an empty string when the draft fits.
    kimi_weights fails with it after the download and before the serve stage.
options:
  _input:
    description: The checkpoint's config.json, parsed.
    type: dict
    required: true
  draft_config:
    description: The draft's config.json, parsed.
    type: dict
    required: true
  method:
    description: The speculative method, C(eagle3) or C(dflash).
    type: str
    required: true
  repo_id:
    description: The draft's repo id, for the message.
    type: str
    default: the draft
"""

EXAMPLES = r"""
- name: Refuse a draft trained for another model
  ansible.builtin.assert:
    that: target_config | kimi.deploy.draft_mismatch(draft_config, 'eagle3', 'acme/draft') == ''
"""

RETURN = r"""
_value:
  description: The first mismatch, or an empty string.
  type: str
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.kimi.deploy.plugins.module_utils._model.speculative import draft_mismatch


def draft_mismatch_filter(target_config, draft_config, method, repo_id="the draft"):
    if not isinstance(target_config, dict) or not isinstance(draft_config, dict):
        raise AnsibleFilterError("kimi.deploy.draft_mismatch: both configs must be parsed config.json dicts")
    if method not in ("eagle3", "dflash"):
        raise AnsibleFilterError("kimi.deploy.draft_mismatch: method must be eagle3 or dflash, got %r" % (method,))
    return draft_mismatch(target_config, draft_config, method, repo_id) or ""


class FilterModule(object):
    def filters(self):
        return {"draft_mismatch": draft_mismatch_filter}
