# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The pieces an engine's data file (_engines/<name>.py) is written with. Private to kimi.deploy.

An engine file declares ENGINE, a dict read by _engines (the registry), _fit and _deployment:
  name, title:        engine key (the `engine` input) and its display name.
  entrypoint:         the server command; image_entrypoint: the image's own entry point is that command (vLLM), so
                      argv starts after it; otherwise argv starts with it.
  default_version:    the version served when kimi_engine_version is unset: the newest one verified end to end.
  versions:           version -> {options: the generated flags table, images: {quant: pinned image},
                      local_build: quants whose image kimi_image builds, build_bases: {quant: the release image it
                      builds FROM}, verified: where it was proven (None: only its flags are checked), notes: lines the
                      plan prints}.
  quants:             quant -> {kv_menu: KV dtypes, recommended first; moe_backends (optional); families: the
                      accelerator families it runs on (None: any the checkpoint runs on); families_why}.
  refused_quants:     quant -> why this engine cannot serve it, with a source.
  memory:             the memory knob: flag, default, max, why_max, of ("total" or "free", see _fit),
                      runtime_reserve_bytes, meaning (a sentence for the plan).
  context:            "strict" (the engine refuses a context above its KV pool) or "warn".
  key:                the registry key where it differs from name: a build of the engine for another platform
                      (vllm-ascend is engine=vllm on Ascend); platform: the platform it runs on (_model/platforms.py).
  multi_node:         "pipeline", "tensor", "data" (tensor parallel attention_tp inside each data-parallel rank, the
                      ranks over the hosts, experts over all) or None (not served over several hosts; multi_node_why).
  attention_tp:       for "data" (and attention_dp engines): the tensor-parallel size of one data-parallel rank.
  container_env, container_env_multi_node: the engine's environment in the container (kimi_serve's container.env),
                      on every host and only in a replica of several; container_shm_bytes: --shm-size where the
                      container gets its own /dev/shm (Ascend) instead of the host's (--ipc host).
  hybrid_state:       how a hybrid model's fixed per-sequence state comes out of the memory (_model/memory.py):
                      {rule: "shared" (one pool with the KV cache, a state per running request), "ratio" (ratio: the
                      engine's state-to-KV share) or "outside" (held outside the KV pool)}.
  (The tool and reasoning parser names are the model's data, _model/models.py `parsers`: the first the version's list
  has is emitted, none where it has none; the plan and the verify gate say what clients then see.)
  vision:             the engine serves the model's image input.
  image_refusals:     ((regex on the image reference, why), ...).
  shm_bytes:          /dev/shm the engine needs at weight load (None: no check), shm_why.
  metrics_path:       where the engine serves Prometheus text (default /metrics): what kimi_metrics scrapes.
  disaggregation:     None (not served disaggregated; disaggregation_why says why), or {router: the _routers key,
                      backends: {name: {rdma: moves the KV over RDMA only, why}}, rdma / tcp: the backend chosen with
                      RDMA devices on every host / without, bootstrap: the prefill serves a bootstrap port (SGLang),
                      kv_transfer_config: "nixl" or "mooncake-v1" (vLLM's --kv-transfer-config), container_env}.
                      The engine's PD arguments are Args on the `pd` field (pd_* below).
  speculative:        None (speculative_why says why), or {form: "sglang" (its --speculative-* flags) or "vllm" (one
                      --speculative-config JSON), option: how the method is named in messages, methods_from: the
                      parser dests whose values (the version's flag list) name the methods it accepts, names: {method:
                      the engine's name} (the known drafts are the model's data), refused: ((condition(method, quant,
                      deployment), why), ...), metrics: its acceptance series (_model.speculative.acceptance), and
                      draft_quantization where the draft must not inherit the target's --quantization}. The flags are
                      Args on the speculative* fields (the spec_* functions below).
  kernel_cache:       None, or the compile/autotune caches a restart can reuse (_model/kernel_cache.py): env {the
                      variable that moves a cache: its sub-folder of the key's folder}, primary (the variable whose
                      folder the engine fills first: the engine double's), precompile (argv prefix of an ahead-of-time
                      compile, or None), sources; a version may carry its own `kernel_cache`.
  args:               the flags the collection emits, in order (Arg); the managed set is derived from them.
  config:             None, or a function of the deployment returning the engine's config file (a dict), with
                      config_managed (dotted key -> field or None), config_defaults (a function of the deployment:
                      the defaults the user's options override) and config_path (where the container reads it;
                      kimi_serve mounts the file there).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

from ansible_collections.kimi.deploy.plugins.module_utils._common import text


class Arg:
    """One engine flag the collection emits.

    option:     the option string emitted (for a positional, the option with the same dest, e.g. vLLM's --model).
    field:      the deployment key its value comes from, and so the variable (_model.inputs.VARIABLES) a user sets
                instead; None for what the collection fixes for Kimi-K2.6.
    value:      a constant string, or a function of the deployment; default: the deployment's `field`;
                neither value nor field: a switch.
    when:       a function of the deployment: emit only when true (the dest is managed either way).
    positional: emit the value alone (vLLM's `vllm serve <model>`).
    """

    def __init__(self, option, field=None, value=None, when=None, positional=False):
        self.option = option
        self.field = field
        self.value = value
        self.when = when
        self.positional = positional

    def render(self, deployment):
        if self.when is not None and not self.when(deployment):
            return []
        if callable(self.value):
            value = self.value(deployment)
        elif self.value is not None:
            value = self.value
        elif self.field is not None:
            value = text(deployment[self.field])
        else:
            return [self.option]
        return [value] if self.positional else [self.option, value]


# Functions of a resolved deployment, shared by the engine files.
def model(deployment):
    return deployment["checkpoint"]["repo_id"]


def quantization(deployment):
    """The --quantization value of the checkpoint, or None where the engine detects it (INT4 compressed-tensors: a
    mismatching --quantization fails at start-up)."""
    return {"modelopt": "modelopt_fp4"}.get(deployment["checkpoint"]["quant_method"])


def nvfp4(deployment):
    return deployment["quant"] == "nvfp4"


def multi_node(deployment):
    return deployment["nodes"] > 1


def pipelined(deployment):
    return deployment["pp"] > 1


def worker(deployment):
    return deployment["nodes"] > 1 and deployment["node_rank"] > 0


def data_parallel(deployment):
    return deployment.get("dp", 1) > 1


def data_parallel_local(deployment):
    """The data-parallel ranks on each host of the replica."""
    return str(deployment["dp"] // deployment["nodes"])


def data_parallel_start_rank(deployment):
    return str(deployment["node_rank"] * (deployment["dp"] // deployment["nodes"]))


def dist_init_addr(deployment):
    return "%s:%d" % (deployment["head_address"], deployment["dist_port"])


# Traces (kimi_otlp_endpoint, host:port): each engine's own OpenTelemetry options.
def traced(deployment):
    return bool(deployment.get("otlp_endpoint"))


def otlp_url(deployment):
    """vLLM's and TensorRT-LLM's exporter (opentelemetry's OTLP/gRPC span exporter) takes a URL; http:// makes it
    plaintext, as a collector on the fleet's private network listens."""
    return "http://" + deployment["otlp_endpoint"]


def tool_parser(deployment):
    return deployment["tool_parser"]


def reasoning_parser(deployment):
    return deployment["reasoning_parser"]


# Prefill/decode disaggregation (_pd): the `pd` field of a disaggregated deployment, None otherwise.
def pd_role(deployment):
    return (deployment.get("pd") or {}).get("role")


def pd_prefill(deployment):
    return pd_role(deployment) == "prefill"


def pd_transfer_backend(deployment):
    return deployment["pd"]["transfer_backend"]


def pd_bootstrap_port(deployment):
    return str(deployment["pd"]["bootstrap_port"])


def pd_rdma_devices(deployment):
    """SGLang's --disaggregation-ib-device: the RDMA devices of this host, for a backend over RDMA."""
    return ",".join((deployment.get("pd") or {}).get("rdma_devices") or []) or None


def pd_kv_transfer_config(deployment):
    """vLLM's --kv-transfer-config JSON, or None."""
    config = (deployment.get("pd") or {}).get("kv_transfer_config")
    return json.dumps(config, separators=(",", ":"), sort_keys=True) if config else None


# ---------------------------------------------------------------------------------------------------
# Features: what an engine file reads of a feature the model resolved (_model/deployment.py's FEATURES, in resolve()).
# A feature's field is None when it is off, else a dict of values already resolved for the engines; an Arg names the
# field and the value it emits, and nothing here decides anything.
# ---------------------------------------------------------------------------------------------------

def present(field):
    """An Arg's `when`: the deployment has the feature `field` (e.g. kv_offload, the KV host tier)."""
    def when(deployment):
        return bool(deployment.get(field))
    when.__name__ = "present_%s" % field
    return when


def resolved(field, key):
    """An Arg's value: the feature's resolved `key` (deployment[field][key]), None where the feature is off."""
    def value(deployment):
        return (deployment.get(field) or {}).get(key)
    value.__name__ = "%s_%s" % (field, key)
    return value


def never(_deployment):
    """A condition for an option the collection owns but never emits (vLLM's --spec-method shorthand: the method is in
    --speculative-config)."""
    return False


# Speculative decoding (_model/speculative.py resolves deployment["speculative"]: method, engine_method, draft
# {repo_id, revision}, tokens, topk, draft_tokens, draft_quantization), in each engine's form.
DRAFT_METHODS = ("eagle3", "dflash")


def speculative(deployment):
    return bool(deployment.get("speculative"))


def spec_algorithm(deployment):
    return deployment["speculative"]["engine_method"]


def spec_draft(deployment):
    """The draft's repo id (the engine resolves it in the offline Hugging Face cache, as it does the target), or
    None."""
    draft = (deployment.get("speculative") or {}).get("draft")
    return draft["repo_id"] if draft else None


def spec_steps(deployment):
    """SGLang's --speculative-num-steps (EAGLE-3 only)."""
    spec = deployment.get("speculative") or {}
    return str(spec["tokens"]) if spec.get("method") == "eagle3" else None


def spec_topk(deployment):
    spec = deployment.get("speculative") or {}
    return str(spec["topk"]) if spec.get("topk") else None


def spec_draft_tokens(deployment):
    """SGLang's --speculative-num-draft-tokens: the EAGLE tree's verified tokens, or the DFlash / n-gram block."""
    spec = deployment.get("speculative") or {}
    if not spec or not spec.get("tokens"):
        return None
    return str(spec["draft_tokens"] if spec.get("topk") else spec["tokens"])


def spec_draft_revision(deployment):
    """The draft's pinned commit (the engine loads that snapshot of the offline cache), or None in a preview."""
    draft = (deployment.get("speculative") or {}).get("draft")
    return draft["revision"] if draft and draft["revision"] else None


def spec_draft_quantization(deployment):
    return (deployment.get("speculative") or {}).get("draft_quantization")


def spec_config(deployment):
    """vLLM's --speculative-config JSON, or None."""
    spec = deployment.get("speculative")
    if not spec:
        return None
    config = {"method": spec["engine_method"], "num_speculative_tokens": spec["tokens"]}
    if spec["draft"]:
        config["model"] = spec["draft"]["repo_id"]
        if spec["draft"]["revision"]:
            config["revision"] = spec["draft"]["revision"]
    return json.dumps(config, separators=(",", ":"), sort_keys=True)


# Conditions for the engine data's speculative.refused: (method, quant, deployment) -> true when refused.
def spec_pipelined(_method, _quant, deployment):
    return deployment["pp"] > 1


def with_draft(method, _quant, _deployment):
    return method in DRAFT_METHODS


# The weight loader (_model/loader.py resolves deployment["loader"]: format, extra_config, prefetch_threads,
# load_strategy).
def load_format(deployment):
    """--load-format's value, or None (the engine's default: nothing emitted)."""
    return (deployment.get("loader") or {}).get("format")


def loader_extra_config(deployment):
    """--model-loader-extra-config's JSON, or None."""
    extra = (deployment.get("loader") or {}).get("extra_config")
    return json.dumps(extra, separators=(",", ":"), sort_keys=True) if extra else None


def prefetch_threads(deployment):
    threads = (deployment.get("loader") or {}).get("prefetch_threads")
    return str(threads) if threads else None


def load_strategy(deployment):
    return (deployment.get("loader") or {}).get("load_strategy")
