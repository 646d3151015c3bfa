# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Kimi-K2.6's checkpoints and geometry, as the default model's view (_model/models.py declares them, with the other
models'). Private to kimi.deploy.

Which engine serves which checkpoint is the engines' data (_engines/<name>.py), not this file's. Code that serves
another model reads _model.models.model(name); these names stay for the default model's callers.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# pylint: disable=unused-import
from ansible_collections.kimi.deploy.plugins.module_utils._common import GB, GIB, MIB  # noqa: F401 (re-exported)
from ansible_collections.kimi.deploy.plugins.module_utils._model.models import DEFAULT_MODEL, model
from ansible_collections.kimi.deploy.plugins.module_utils._model.memory import (  # noqa: F401 (re-exported)
    KV_ELEMENT, kv_bytes_per_token)
# pylint: enable=unused-import

_K26 = model(DEFAULT_MODEL)
CHECKPOINTS = _K26["checkpoints"]
QUANTS = tuple(sorted(CHECKPOINTS))
MAX_CONTEXT = _K26["max_context"]

# KV per token (MLA's latent KV: replicated on every tensor-parallel rank): 61 layers x (512 + 64) values.
KV_BYTES_PER_TOKEN = dict((element, kv_bytes_per_token(_K26, element)) for element in ("bf16", "fp8"))
REPLICATED_WEIGHT_BYTES = _K26["replicated_weight_bytes"]
NON_EXPERT_WEIGHT_BYTES = _K26["non_expert_weight_bytes"]


def non_expert_bytes(quant, name=DEFAULT_MODEL):
    """The bytes of `quant`'s checkpoint (of model `name`) outside the routed experts, or None where not known."""
    entry = model(name)
    return entry["checkpoints"][quant].get("non_expert_bytes", entry["non_expert_weight_bytes"])


# Speculative decoding (_speculative): the target's geometry a draft must match, and K2.6's drafts.
TARGET_HIDDEN_SIZE = _K26["geometry"]["hidden"]
TARGET_VOCAB_SIZE = _K26["geometry"]["vocab"]
TARGET_LAYERS = _K26["geometry"]["layers"]
DRAFTS = _K26["drafts"]
# A draft not listed: its size is estimated as the largest known one's until hf_snapshot reads the real one.
UNKNOWN_DRAFT_BYTES = 7 * GB
