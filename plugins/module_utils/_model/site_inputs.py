# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The site inputs, declared once: every variable users set in the inventory or with -e for site.yml and plan.yml
(stdlib only). Private to kimi.deploy.

Derived from this table: _model.inputs.VARIABLES (the field -> variable map every refusal names), _site's FIELDS and
PD_SETTINGS (what kimi.deploy.deployment reads for a host, and the value when unset), and
playbooks/vars/site_argument_specs.yml (site.yml's type check, the docs, and the bundle's secret list through its
no_log options), which `make site-specs` writes from this table and a unit test compares with it both ways.

read: how the deployment action reads the variable - "field", the resolver's input `field` on this host; "pd", the
setting pd.<field without pd_> of a disaggregated deployment; "member", read per member of the host's groups
(_model.site.pd_member, the replica's head address); None, not a model input (the playbooks read it, or plan.yml
passes it as an argument of kimi.deploy.deployment).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from collections import namedtuple

from ansible_collections.kimi.deploy.plugins.module_utils._model.models import DEFAULT_MODEL, MODEL_NAMES, QUANTS
from ansible_collections.kimi.deploy.plugins.module_utils._model.constraints import (
    MAX_TEXT, Bool, Checked, Choice, Constraint, ControllerPath, CountOrShare, DeploymentError, Float, Int, ListOf,
    Mapping, ProbeFile, Text, TimeSpan, refuse)
from ansible_collections.kimi.deploy.plugins.module_utils._model.validate import REPO_ID_RE

# check: the input's constraint (_constraints), checked on every call of kimi.deploy.deployment before anything else.
Input = namedtuple("Input", "variable type check field read default elements no_log doc")
Input.__new__.__defaults__ = (None, None, None, None, None, False, ())

# The choices of two model inputs (their modules import this table, so they are declared here and imported there).
METHODS = ("none", "eagle3", "dflash", "ngram")
KV_OFFLOAD = ("none", "host")
SHA = Text(r"[0-9a-fA-F]{40}", "a 40-hex lower-case commit sha", 40, empty=True,
           good=("0123456789abcdef0123456789abcdef01234567",), bad=("main", "0123456789abcdef"))
NAME = Text(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}", "a name of letters, digits and . _ -", 64, good=("r1",),
            bad=("r 1", "-r"))
ADDRESS = Text(r"[A-Za-z0-9][A-Za-z0-9.-]{0,252}|\[?[0-9A-Fa-f:.]{2,45}\]?", "an IP address or a DNS name", 253,
               good=("10.0.0.1", "gpu1.example", "fd00::1"), bad=("10.0.0.1;x", "a b", "-h"))
# host:port of a collector (no scheme: each consumer writes the form its exporter reads)
HOST_PORT = Text(r"(?:[A-Za-z0-9][A-Za-z0-9.-]{0,252}|\[[0-9A-Fa-f:.]{2,45}\]):(?:6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}|"
                 r"6[0-4][0-9]{3}|[1-5][0-9]{4}|[1-9][0-9]{0,3})", "host:port (a DNS name or an IP address, and a port; "
                 "IPv6 in brackets)", 260, empty=True, good=("otel.example:4317", "10.0.0.5:4317", "[fd00::5]:4317"),
                 bad=("http://otel:4317", "otel", "otel:0", "otel:4317;x", "otel:70000"))


class Accelerators(Constraint):
    """kimi_gpus: an accelerator list as kimi.deploy.gpu_facts or npu_facts reads one
    (_model.accelerators.summarize)."""
    kind = "list"

    def allowed(self):
        return ["a list of accelerators as kimi.deploy.gpu_facts or npu_facts reads them (the profiles in "
                "tests/fixtures/gpus, -e @<profile>.json)"]

    def _check(self, variable, value, ctx):
        # lazy: the accelerator modules import the model's inputs, which import this table
        from ansible_collections.kimi.deploy.plugins.module_utils._model import accelerators
        try:
            accelerators.summarize(value)
        except accelerators.SUMMARY_ERRORS as exc:
            refuse(variable, value, self.allowed(), str(exc))
        return value

    def edges(self):
        return [[]], ["h100", [{"name": 5}], [{"name": "NVIDIA H100", "memory_mib": "lots"}]]


def M(constraint):
    """A model field's constraint: unset, empty or auto let the model pick (_model.inputs.is_unset)."""
    constraint.empty = constraint.auto = True
    return constraint


INPUTS = (
    Input('kimi_model', 'raw', field='model', read='field', default=DEFAULT_MODEL, doc=(
        'The Kimi model served, one entry of the models table (plugins/module_utils/_model/models.py): C(kimi-k2.6), '
        'C(kimi-k2.7-code), C(kimi-k3) or C(kimi-k3.1-pro). It picks the checkpoints, parsers, drafts, context and '
        'the memory model; an engine release older than the model needs is refused, naming the one that serves it.',
    ), check=Choice(MODEL_NAMES, empty=True)),
    Input('quant', 'raw', field='quant', read='field', default='auto', doc=(
        'Checkpoint quantization, C(int4) (moonshotai/Kimi-K2.6), C(nvfp4) (nvidia/Kimi-K2.6-NVFP4) or C(w4a8) '
        '(Eco-Tech/Kimi-K2.6-W4A8, for Ascend NPUs); C(mxfp4) for Kimi-K3 (moonshotai/Kimi-K3). The repositories '
        "are C(kimi_model)'s.",
        'C(auto) recommends from the accelerators.',
    ), check=Checked("the checkpoints table (%s, or auto) and the platform's quants" % ", ".join(QUANTS),
                     bad=("int8", 4, ["int4"]))),
    Input('engine', 'raw', field='engine', read='field', default='auto', doc=(
        'Serving engine, C(sglang), C(vllm) or C(trtllm) (TensorRT-LLM); C(auto) recommends from the accelerators.',
        'The identity is the pair (quant, engine): C(int4) on C(sglang) or C(vllm); C(nvfp4) on C(vllm) or C(trtllm) '
        '(datacenter Blackwell only); C(w4a8) on the Ascend builds, C(vllm) (vLLM-Ascend) or C(sglang) (SGLang-Ascend, '
        'Ascend 910C only); C(mxfp4) on C(vllm) or C(sglang) (Kimi-K3, on the releases that serve it).',
    ), check=Checked("the engine registry (plugins/module_utils/_engines)", bad=("tensorrt", "sglangx", 5, ["vllm"]))),
    Input('kimi_engine_version', 'raw', field='engine_version', read='field', doc=(
        'The engine release (e.g. C(0.33.0) for vLLM); unset serves the verified default (vLLM 0.22.1, SGLang '
        "0.5.12.post1, TensorRT-LLM's pinned release), or the version the tag of C(kimi_engine_image) names.",
        "Flags, config keys and parsers are checked against that release's own list; a release without a list is "
        'refused, naming the known ones and C(make engine-flags ENGINE= VERSION=), which adds one.',
    ), check=M(Text(r"[0-9][0-9A-Za-z.+-]{0,63}", "a release such as 0.33.0 or 0.5.12.post1", 64,
                    bad=("v0.33.0", "latest")))),
    Input('kimi_trtllm_options', 'raw', field='engine_options', read='field', default={}, doc=(
        "engine=trtllm only. More LLM-API options for trtllm-serve's YAML config (a dict, nested as the YAML is),"
        " each key checked against the pinned release's TorchLlmArgs schema. Keys the collection writes "
        '(tensor_parallel_size, pipeline_parallel_size, max_seq_len, trust_remote_code, kv_cache_config.dtype, '
        'kv_cache_config.free_gpu_memory_fraction, backend) are refused, naming the variable that owns each.',
    ), check=Mapping("nested LLM-API options, each key checked against the pinned release's schema by the model")),
    Input('kimi_int4_revision', 'raw', doc=(
        '40-hex lower-case commit of moonshotai/Kimi-K2.6. Required when quant is int4; there is no safe default.',
    ), check=SHA),
    Input('kimi_nvfp4_revision', 'raw', doc=(
        '40-hex lower-case commit of nvidia/Kimi-K2.6-NVFP4. Required when quant is nvfp4.',
    ), check=SHA),
    Input('kimi_w4a8_revision', 'raw', doc=(
        '40-hex lower-case commit of Eco-Tech/Kimi-K2.6-W4A8 (Ascend NPUs). Required when quant is w4a8.',
    ), check=SHA),
    Input('kimi_mxfp4_revision', 'raw', doc=(
        '40-hex lower-case commit of the MXFP4 checkpoint (moonshotai/Kimi-K3). Required when quant is mxfp4.',
    ), check=SHA),
    Input('kimi_kv_cache_dtype', 'raw', field='kv_cache_dtype', read='field', doc=(
        "KV-cache dtype; unset picks the recommended one of the engine's menu (SGLang fp8_e4m3, vLLM fp8).",
    ), check=M(Text(r"[a-z0-9_]{1,32}", "a KV-cache dtype of the engine's menu (e.g. fp8, fp8_e4m3, bf16)", 32,
                    bad=("FP8", "fp8 ")))),
    Input('kimi_moe_backend', 'raw', field='moe_backend', read='field', doc=(
        'NVFP4 MoE backend (marlin, flashinfer_b12x, flashinfer_cutedsl); unset picks per architecture.',
    ), check=M(Text(r"[a-z0-9_]{1,40}", "a MoE backend of the engine (e.g. marlin, flashinfer_cutedsl)", 40,
                    bad=("Marlin",)))),
    Input('kimi_context_length', 'raw', field='context_length', read='field', doc=(
        "Context length in tokens (4096 up to the model's window: 262144 for the K2 family, 1048576 for Kimi-K3); "
        'unset serves the 256K window where the KV pool allows it.',
    ), check=M(Int(1, 16777216))),
    Input('kimi_mem_fraction', 'raw', field='mem_fraction', read='field', doc=(
        "The engine's memory knob (SGLang --mem-fraction-static <= 0.85, vLLM --gpu-memory-utilization <= 0.98, "
        'TensorRT-LLM kv_cache_config.free_gpu_memory_fraction <= 0.9, a share of what is free after the '
        'weights).',
    ), check=M(Float(0, 1, low_open=True))),
    Input('kimi_tensor_parallel', 'raw', field='tp', read='field', doc=(
        'Tensor-parallel size (a power of two, at most the GPUs found); unset uses every GPU.',
    ), check=M(Int(1, 256))),
    Input('kimi_instances', 'raw', field='instances', read='field', doc=(
        "Engine instances on one host, served by the engine's own data parallelism under the one unit (vLLM "
        '--data-parallel-size, SGLang --dp-size; TensorRT-LLM serves one). Unset - the plan ranks the layouts '
        'that fit by expected throughput per GPU for C(kimi_workload) and picks the best, unless '
        'C(kimi_tensor_parallel) is set (then one instance of that size).',
    ), check=M(Int(1, 256))),
    Input('kimi_workload', 'raw', field='workload', read='field', doc=(
        'The traffic the layout is ranked for - a dict of C(input_tokens), C(output_tokens) and C(concurrency) '
        '(each optional); unset - a chat workload (2048 in, 512 out, 32 concurrent).',
    ), check=M(Mapping("input_tokens, output_tokens, concurrency, checked by the layout model"))),
    Input('kimi_engine_host', 'raw', field='host', read='field', doc=(
        'Address the engine listens on (default 127.0.0.1; the proxy reaches it over loopback).',
        '0.0.0.0 is an opt-in, with a warning.',
    ), check=Checked("the deployment model (an IP address or a host name)", bad=("a b", "host;rm", ["x"]))),
    Input('kimi_engine_port', 'raw', field='port', read='field', doc=(
        'Engine port (1..65535, default 30000).',
    ), check=M(Int(1, 65535))),
    Input('kimi_served_model_name', 'raw', field='served_model_name', read='field', doc=(
        'The OpenAI C(model) id clients send (default kimi-k2.6).',
    ), check=Checked("the deployment model (1-128 letters, digits and . _ : / -)", bad=("kimi k2", "-x", ["x"]))),
    Input('kimi_engine_extra_args', 'raw', field='extra_args', read='field', default=[], doc=(
        "Extra engine arguments, a list of strings. Checked against the pinned engine's own option list; flags "
        'the collection manages are refused in every spelling (aliases, C(=value), underscores).',
    ), check=ListOf(Text(r"(?s).+", "a non-empty string", MAX_TEXT), 0, 256)),
    Input('kimi_engine_image', 'raw', field='image', read='field', doc=(
        'Override of the pinned engine image (a mirror). The old name C(kimi_image) still works, with a '
        'deprecation warning.',
    ), check=Checked("the deployment model (an image reference)", bad=("a b", "-image", {"a": 1}))),
    Input('kimi_gpus', 'list', elements='dict', doc=(
        'GPUs to plan for instead of reading them with M(kimi.deploy.gpu_facts) (C(-e '
        '@tests/fixtures/gpus/<profile>.json)).',
    ), check=Accelerators()),
    Input('kimi_allow_unfit', 'bool', default=False, doc=(
        'Go on when the GPUs cannot hold the deployment. Only for tests.',
    ), check=Bool()),
    Input('kimi_metrics', 'bool', default=True, doc=(
        'Metrics on every host (M(kimi.deploy.kimi_metrics) role) - the node exporter, the accelerator exporter '
        'and the deployment as series on loopback - and Caddy serving them to C(caddy_proxy_metrics_keys).',
    ), check=Bool()),
    Input('kimi_bench_min_ratio', 'float', doc=(
        "Gate each host on a post-deploy benchmark (site.yml's bench stage) - the output throughput of a bounded "
        'sweep through the proxy must be at least this ratio of the baseline (C(kimi_bench_baseline), the '
        "collection's for C(kimi_bench_profile), else the host's last run of the identity), or the host rolls "
        'back as a failed verify does. Unset - no gate (the default; C(playbooks/bench.yml) benchmarks on '
        'demand).',
    ), check=Float(0, 1000, low_open=True)),
    Input('kimi_bench_levels', 'list', default=[1, 4, 16], elements='int', doc=(
        'The concurrencies of the sweep.',
    ), check=ListOf(Int(1, 4096), 1, 32)),
    Input('kimi_bench_requests_per_level', 'int', default=32, doc=(
        'Requests at each concurrency (the sweep is bounded by count, and by C(kimi_bench_timeout)).',
    ), check=Int(1, 100000)),
    Input('kimi_bench_workload', 'str', default='chat', doc=(
        'C(chat) - synthetic single-turn prompts. C(multi_turn) - a replay of agent-like sessions with shared '
        'prefixes (one system prompt shared by every session, each turn resent with its history), to measure a KV '
        'host tier (C(kimi_kv_offload)); the session file is generated, deterministic, and kept with the results.',
    ), check=Choice(("chat", "multi_turn"))),
    Input('kimi_bench_sessions_per_level', 'int', default=16, doc=(
        'C(multi_turn) - sessions at each concurrency (at least the concurrency).',
    ), check=Int(1, 100000)),
    Input('kimi_bench_turns', 'int', default=4, doc=(
        'C(multi_turn) - user turns per session; each adds about C(kimi_bench_input_tokens) new tokens.',
    ), check=Int(1, 64)),
    Input('kimi_bench_system_tokens', 'int', default=2048, doc=(
        'C(multi_turn) - about how many tokens the shared system prompt has (0 - none).',
    ), check=Int(0, 262144)),
    Input('kimi_bench_turn_delay_ms', 'int', default=0, doc=(
        'C(multi_turn) - think time before each turn after the first, milliseconds.',
    ), check=Int(0, 600000)),
    Input('kimi_bench_input_tokens', 'int', default=1024, doc=(
        "Mean prompt length of the synthetic requests, in the checkpoint's tokens (seeds 002/003 - 1K/1K).",
    ), check=Int(1, 262144)),
    Input('kimi_bench_output_tokens', 'int', default=1024, doc=(
        'Mean output length of the synthetic requests.',
    ), check=Int(1, 262144)),
    Input('kimi_bench_timeout', 'int', default=1800, doc=(
        'Seconds the whole sweep may take; the client is stopped and the run fails after it.',
    ), check=Int(1, 86400, unit="seconds")),
    Input('kimi_bench_baseline', 'path', doc=(
        "A benchmark result JSON to compare with (default - the collection's for C(kimi_bench_profile), else the "
        'last run).',
    ), check=ControllerPath("file", empty=True)),
    Input('kimi_bench_profile', 'str', doc=(
        'The hardware profile whose shipped baseline applies (C(bench/baselines/<profile>-<identity>.json)).',
    ), check=Text(r"[a-z0-9][a-z0-9._-]{0,63}", "a profile name such as rtx-pro-6000-x8", 64)),
    Input('kimi_bench_dir', 'path', doc=(
        'Where the results go on the controller (default C(~/.kimi-deploy/bench)).',
    ), check=ControllerPath(None)),
    Input('kimi_bench_url', 'str', doc=(
        "The proxy's base URL as the controller reaches it (default "
        'C(https://<caddy_proxy_site_address>:<port>)).',
    ), check=Text(r"https?://[A-Za-z0-9.\[\]:-]+(/[!-~]*)?", "an http(s) URL", 2048, good=("https://h:8443",),
                  bad=("h:8443", "https://a b"))),
    Input('kimi_bench_api_key', 'str', no_log=True, doc=(
        'The key the benchmark sends (default - the first key of C(caddy_proxy_clients)); give it a client of its'
        ' own.',
    ), check=Text(r"[!-~]{8,512}", "8-512 printable characters, no space", 512)),
    Input('kimi_bench_api_key_file', 'path', doc=(
        'A file on the controller holding that key instead.',
    ), check=ControllerPath("file", empty=True)),
    Input('kimi_bench_ca_file', 'path', doc=(
        "The CA that verifies the proxy (default - the proxy's internal root, copied from the host).",
    ), check=ControllerPath("file", empty=True)),
    Input('kimi_bench_aiperf', 'path', doc=(
        'The aiperf executable (default C(.venv-bench/bin/aiperf) of a checkout, made by C(make bench-client), '
        'else C(aiperf) on the PATH).',
    ), check=ControllerPath(None, empty=True)),
    Input('kimi_bench_confirm', 'bool', default=False, doc=(
        'C(playbooks/bench.yml) loads the hosts like production traffic and runs only with this set.',
    ), check=Bool()),
    Input('kimi_fleet_serial', 'raw', doc=(
        'A fleet run - switch this many hosts at a time (a count such as C(1), or a percentage such as C(25%)), '
        'each drained at its proxy first and put back after it is verified. Unset - every host at once, no drain.',
    ), check=CountOrShare("replicas")),
    Input('kimi_fleet_max_fail_percentage', 'int', doc=(
        'Failed hosts (percent of a batch) that stop a fleet run; default 0 in a fleet run (the first failure '
        'stops it).',
    ), check=Int(0, 100)),
    Input('kimi_fleet_prefetch', 'bool', default=False, doc=(
        'Prepare the target identity on every host (weights, image, page cache) while the current one serves, and'
        ' stop before any switch. A later run then switches with only a restart and a load in the window.',
    ), check=Bool()),
    Input('kimi_fleet_warm_page_cache', 'bool', doc=(
        'Read the target shards into the page cache before the switch, within C(kimi_weights_warm_reserve_bytes).'
        ' Default - on in a fleet run and a prefetch.',
    ), check=Bool()),
    Input('kimi_replica', 'str', doc=(
        'Name of the replica this host belongs to. The kimi_servers hosts with the same name serve one model '
        "replica together, with the engines' own multi-node mode; the first in inventory order is the head, which"
        ' serves the API, runs Caddy and is verified. The hosts of a replica restart together, and must be listed'
        ' one after the other. Unset - the host is a replica of one.',
    ), check=NAME),
    Input('kimi_replica_head_address', 'str', field='head_address', read='member', doc=(
        "The head's address on the replica's network, which every host of the replica must reach (checked in "
        "preflight); default - the head's ansible_host, else its name.",
    ), check=ADDRESS),
    Input('kimi_replica_port', 'int', field='dist_port', read='field', doc=(
        "The engines' rendezvous port on the head (SGLang --dist-init-addr, vLLM --master-port); default 29500.",
    ), check=Int(1, 65535)),
    Input('kimi_pipeline_parallel', 'int', field='pp', read='field', doc=(
        'Pipeline-parallel size; default - 1 on one host, the number of hosts for vLLM across hosts.',
    ), check=Int(1, 64)),
    Input('kimi_replica_plan_hosts', 'int', doc=(
        'plan.yml only - preview a replica of this many hosts like the one in kimi_gpus (C(make plan HOSTS=2)).',
    ), check=Int(1, 16)),
    Input('kimi_fleet_address', 'str', field='fleet_address', read='member', doc=(
        "This host's address on the fleet's private network, where the gateways (the hosts of the group "
        "C(kimi_gateways)) reach its engine; with a gateway in the inventory the engine listens there (a "
        "replica's hosts use their head's). Default - its ansible_host, else its name.",
    ), check=ADDRESS),
    Input('kimi_otlp_endpoint', 'str', field='otlp_endpoint', read='field', doc=(
        "An OpenTelemetry collector's OTLP/gRPC address, C(host:port): traces from the fleet gateway (SMG) to the "
        "engines, each with its own trace options (vLLM and TensorRT-LLM C(--otlp-traces-endpoint), SGLang "
        "C(--enable-trace --otlp-traces-endpoint)), one W3C trace context along the way; Caddy passes a client's "
        "C(traceparent) on (Debian's Caddy 2.6.2 is built without its tracing module). Unset - no traces.",
    ), check=HOST_PORT),
    Input('kimi_fleet_plan', 'raw', doc=(
        'plan.yml only - preview a fleet of this many hosts behind a gateway (C(make plan FLEET=2)).',
    ), check=Int(1, 64)),
    Input('kimi_canary', 'raw', doc=(
        'A canary switch - the first batch of a rolling switch is this many replicas (C(1)) or this share of them '
        '(C(10%), rounded up), leaving at least one outside it. After it is verified and back in the fleet gateway '
        "(kimi_gateways), the switch stops and compares it with the rest on the gateway's traffic (its share is its "
        "replicas' share of the instances) - error rate, TTFT and ITL - then promotes it (the switch goes on, one "
        'replica at a time unless C(kimi_fleet_serial) says otherwise) or rolls it back and stops, naming the figure '
        'that decided. Meanwhile two identities serve the same model name.',
    ), check=CountOrShare("replicas", whole=False)),
    Input('kimi_canary_requests', 'int', default=200, doc=(
        "Finished requests on the canary's instances that end the comparison (or C(kimi_canary_minutes)).",
    ), check=Int(1, 1000000)),
    Input('kimi_canary_minutes', 'float', default=10.0, doc=(
        'The longest the comparison waits for C(kimi_canary_requests); a canary that fewer reached is rolled back '
        "(too little traffic to judge it: the gateway policy decides its share, and C(cache_aware) keeps a prefix on "
        'the instance that holds it until the load is uneven).',
    ), check=Float(0, 1440, low_open=True)),
    Input('kimi_canary_max_error_rate', 'float', default=1.0, doc=(
        "How many percentage points the canary's error rate (the gateway router's failed attempts, before its "
        "retries) may exceed the rest's.",
    ), check=Float(0, 100, unit="percentage points")),
    Input('kimi_canary_max_latency_ratio', 'float', default=1.5, doc=(
        "How many times the rest's TTFT and ITL p50 the canary's may be (a difference under 50 ms never counts).",
    ), check=Float(1, 100)),
    Input('kimi_gpu_hour_cost', 'dict', field='gpu_hour_cost', read='field', default={}, doc=(
        "What an accelerator-hour costs, per model as the host's accelerator facts name it (e.g. "
        "C({'NVIDIA H200': 3.5}), in any one currency). The plan prints the host's cost per hour; the node series "
        'C(kimi_deployment_hour_cost) carries it to the dashboard (cost per million tokens) and the benchmark report '
        'prints the cost per million output tokens at each concurrency. Unset - no cost anywhere.',
    ), check=Checked("the cost model (accelerator model -> price per hour, at least 0)", kind="dict",
                     bad=("3.5", {"NVIDIA H200": -1}, {"NVIDIA H200": "x"}))),
    Input('kimi_load_format', 'raw', field='load_format', read='field', doc=(
        "The engine's weight loader (C(--load-format)): one of the formats the engine version offers for Kimi-K2.6's "
        'safetensors checkpoint and its image carries (vLLM C(safetensors), C(runai_streamer), C(instanttensor); '
        'SGLang also C(fastsafetensors); TensorRT-LLM and the Ascend builds none but the default). Anything '
        'else is refused with the allowed values.',
        "Unset or C(auto) - chosen from C(kimi_weights_read_mbps): a fast disk gets the version's parallel loader "
        "(vLLM's Run:ai streamer, SGLang's multithreaded load), a slow one a page-cache prefetch (SGLang, vLLM "
        '0.33.0), else the default; the plan says which and why.',
    ), check=M(Text(r"[a-z0-9_]{1,40}", "a loader the engine version offers (e.g. safetensors, runai_streamer)", 40,
                    bad=("Safetensors",)))),
    Input('kimi_weights_read_mbps', 'raw', field='weights_read_mbps', read='field', doc=(
        "The weights disk's sequential read rate in MB/s, which picks the weight loader. Set by site.yml's preflight "
        '(kimi.deploy.disk_read on C(kimi_weights_hf_home), reading past the page cache; C(kimi_weights_read_test)); '
        'set it to skip the test. Unset and not measured - the default loader.',
    ), check=M(Float(0, 1000000, unit="MB/s"))),
    Input('kimi_verify_probes', 'bool', default=True, doc=(
        "The accuracy gate (kimi.deploy.kimi_probes): after the verify gate of a (re)started engine, before it takes "
        'traffic, the accuracy probes run against it - tool-call schema and choice accuracy, reasoning split, '
        'deterministic answers, a long-context needle - and a failure rolls the switch back as a failed verify does. '
        'False - verify only.',
    ), check=Bool()),
    Input('kimi_verify_probe_file', 'path', doc=(
        'A probe file on the controller, in the format of roles/kimi_probes/files/kimi-k26-probes.yml '
        '(C(make probes-from-vendor) converts the vendor verifier\'s published cases into it); added to the shipped '
        'probes, or instead of them with C(kimi_verify_probe_mode=replace).',
    ), check=ProbeFile()),
    Input('kimi_verify_probe_mode', 'str', default='add', doc=(
        'C(add) - C(kimi_verify_probe_file) runs beside the shipped probes; C(replace) - instead of them.',
    ), check=Choice(("add", "replace"))),
    Input('kimi_verify_min_schema_accuracy', 'float', default=98.0, doc=(
        "The accuracy gate's least share of tool calls whose arguments validate against the tool's JSON schema (%).",
    ), check=Float(0, 100, unit="percent")),
    Input('kimi_verify_min_choice_accuracy', 'float', default=95.0, doc=(
        "The accuracy gate's least share of cases that called exactly the expected tools (none where none is needed) (%).",
    ), check=Float(0, 100, unit="percent")),
    Input('kimi_verify_max_reasoning_leaks', 'int', default=0, doc=(
        'The most cases whose content may hold reasoning (a think tag, or the reasoning text) in the accuracy gate.',
    ), check=Int(0, 10000)),
    Input('kimi_verify_max_answer_failures', 'int', default=0, doc=(
        'The most deterministic, follow-up and needle answers the accuracy gate lets fail.',
    ), check=Int(0, 10000)),
    Input('kimi_verify_max_drop', 'float', default=2.0, doc=(
        'The A/B: how many points an accuracy of the new identity may be below the stored result of the identity it '
        'replaces (the same identity too: a layout or release change), on the same probes.',
    ), check=Float(0, 100, high_open=True, unit="percentage points")),
    Input('kimi_probe_interval', 'str', default='15min', doc=(
        'How often the serving-time probe asks each serving host a sample of the accuracy probes (a systemd time '
        'span, e.g. C(15min)); its series C(kimi_probe_accuracy) and C(kimi_probe_failures_total) feed the '
        'C(KimiAnswersWrong) alert. Empty - no serving-time probe.',
    ), check=TimeSpan(10, 7 * 86400, empty=True, off="no serving-time probe")),
    Input('kimi_probe_sample', 'int', default=8, doc=(
        'Probe cases each serving-time run asks (a different slice each run; the needle is left out).',
    ), check=Int(1, 1000)),
    Input('kimi_pd', 'str', field='pd_members', doc=(
        'Name of the prefill/decode disaggregated deployment this host belongs to. The kimi_servers hosts with '
        "the same name serve one endpoint together, each in its C(kimi_pd_role), behind a router "
        '(SMG, vllm-router, or trtllm-serve disaggregated) on one of them. They are switched, verified '
        'and rolled back as one, and must be listed one after the other. Unset - not disaggregated.',
    ), check=NAME),
    Input('kimi_pd_role', 'str', field='pd_role', read='member', doc=(
        "This host's role in its C(kimi_pd) deployment (the hosts of one C(kimi_replica) share one).",
    ), check=Choice(("prefill", "decode"))),
    Input('kimi_pd_address', 'str', field='pd_address', read='member', doc=(
        "This host's address on the deployment's network, where the router and the other role reach its engine "
        "(and the prefill's bootstrap server); default - its ansible_host, else its name. The engines listen "
        'there.',
    ), check=ADDRESS),
    Input('kimi_pd_router', 'str', field='pd_router', read='pd', doc=(
        "The host (of this C(kimi_pd)) that runs the router and Caddy; default - the first decode instance's.",
    ), check=Text(r"[A-Za-z0-9][A-Za-z0-9._-]{0,252}", "an inventory host name", 253)),
    Input('kimi_pd_transfer_backend', 'str', field='pd_transfer_backend', read='pd', doc=(
        'The KV cache transfer backend (SGLang mooncake or nixl, C(ascend) on Ascend; vLLM nixl; vLLM-Ascend '
        'mooncake; TensorRT-LLM UCX or NIXL). Default - chosen from the engine and whether every host has RDMA '
        'devices; the plan says why.',
    ), check=M(Text(r"[a-z0-9_]{1,32}", "a KV transfer backend of the engine (e.g. mooncake, nixl)", 32,
                    bad=("NIXL",)))),
    Input('kimi_pd_rdma_devices', 'list', field='pd_rdma_devices', read='member', elements='str', doc=(
        "This host's RDMA devices for the KV transfer (e.g. C([mlx5_0, mlx5_1])); C([none]) turns RDMA off. "
        'Default - those under /sys/class/infiniband.',
    ), check=ListOf(Text(r"[A-Za-z0-9_.-]{1,64}", "an RDMA device name (mlx5_0) or none", 64), 1, 64)),
    Input('kimi_pd_bootstrap_port', 'int', field='pd_bootstrap_port', read='pd', doc=(
        "SGLang's prefill bootstrap port (C(--disaggregation-bootstrap-port)); default 8998.",
    ), check=Int(1, 65535)),
    Input('kimi_pd_router_port', 'int', field='pd_router_port', read='pd', doc=(
        "The router's port on loopback (Caddy's upstream on the router host); default 30080.",
    ), check=Int(1, 65535)),
    Input('kimi_pd_router_metrics_port', 'int', field='pd_router_metrics_port', read='pd', doc=(
        "The router's Prometheus port on loopback (behind the metrics key at /metrics/router); default 29000.",
    ), check=Int(1, 65535)),
    # raw, not a list: a list spec would split a string on commas, which plan.yml refuses; the deployment model
    # refuses anything but a list of strings, naming this variable, for both
    Input('kimi_pd_router_extra_args', 'raw', field='pd_router_extra_args', read='pd', default=[], doc=(
        "More router options, a list of strings, read as the pinned router's parser reads them; the options the "
        'collection sets (workers, listen addresses) are refused.',
    ), check=ListOf(Text(r"(?s).+", "a non-empty string", MAX_TEXT), 0, 256)),
    Input('kimi_pd_plan', 'str', field='pd_plan', doc=(
        'plan.yml only - preview a disaggregated deployment, e.g. C(1P1D) or C(2P2D) (C(make plan PD=1P1D)).',
    ), check=Text(r"[1-9][0-9]?P[1-9][0-9]?D", "prefill and decode instances, e.g. 1P1D or 2P2D", 6)),
    Input('kimi_speculative', 'raw', field='speculative', read='field', default='none', doc=(
        'Speculative decoding - C(none), C(eagle3) or C(dflash) (a draft model proposes tokens the target checks '
        "in one pass), or C(ngram) (drafts from the prompt, no model). Refused where the engine version's own "
        "flag list lacks the method, and on TensorRT-LLM. The plan prints the flags in the engine's form and the "
        "fit counts the draft's weights and KV.",
    ), check=M(Choice(METHODS))),
    Input('kimi_speculative_draft', 'str', field='speculative_draft', read='field', doc=(
        "The draft's Hugging Face repo id; default - the known draft for the method and engine (eagle3 - vLLM "
        'C(lightseekorg/kimi-k2.6-eagle3), SGLang C(AQ-MedAI/Kimi-K26-eagle3); dflash - '
        'C(z-lab/Kimi-K2.6-DFlash)). kimi_weights downloads it beside the checkpoint and refuses one whose config'
        " does not match Kimi-K2.6's.",
    ), check=Text(REPO_ID_RE.pattern, "a Hugging Face repo id, org/name", 192)),
    Input('kimi_bundle', 'str', doc=(
        'An air-gapped site - the folder of a bundle made by C(playbooks/bundle.yml) on a connected machine, on '
        "this controller. Every file is checked against the bundle's manifest before any change (a changed byte "
        "fails, naming the file), then what each host needs (images, pinned checkpoints, its release's packages);"
        " the hosts then take everything from it - apt reads the bundle's signed repository alone (kimi_bundle "
        'role), Docker loads its images, kimi_weights copies its checkpoints - and nothing reaches the internet.',
    ), check=ControllerPath(None)),  # bundle.yml writes it, site.yml reads it: site.yml's bundle check refuses a
    # folder that is not a bundle, naming playbooks/bundle.yml
    Input('kimi_speculative_draft_revision', 'str', field='speculative_draft_revision', read='field', doc=(
        '40-hex lower-case commit of the draft repo. Required with a draft method; there is no safe default.',
    ), check=SHA),
    Input('kimi_speculative_tokens', 'raw', field='speculative_tokens', read='field', doc=(
        'Tokens drafted per step, 1-16 (vLLM num_speculative_tokens; SGLang --speculative-num-steps for EAGLE-3, '
        "--speculative-num-draft-tokens for DFlash and n-gram). Default - the draft's published value (EAGLE-3 3,"
        ' DFlash 15), n-gram 4.',
    ), check=M(Int(1, 16))),
    Input('kimi_speculative_topk', 'raw', field='speculative_topk', read='field', doc=(
        "SGLang EAGLE-3 only - branches per step (C(--speculative-eagle-topk)), 1-8; default the draft's or 1.",
    ), check=M(Int(1, 8))),
    Input('kimi_speculative_draft_tokens', 'raw', field='speculative_draft_tokens', read='field', doc=(
        'SGLang EAGLE-3 only - tokens verified per step (C(--speculative-num-draft-tokens)); with topk 1 it is '
        "tokens + 1 (SGLang's rule), with a tree up to 1 + topk x tokens (the default).",
    ), check=M(Int(1, 1024))),
    Input('kimi_kv_offload', 'raw', field='kv_offload', read='field', default='none', doc=(
        "The KV cache's host-memory tier - C(none) or C(host) (repeated prefixes of long multi-turn sessions are "
        "loaded back from RAM instead of recomputed), through the engine's own mechanism - vLLM's native offloading "
        "connector (C(--kv-offloading-backend native --kv-offloading-size)), SGLang's hierarchical cache "
        "(C(--enable-hierarchical-cache --hicache-size)), TensorRT-LLM's C(kv_cache_config.host_cache_size). "
        'Refused, naming the source, where the build or version has none for MLA (vLLM-Ascend, SGLang-Ascend), and '
        'with C(kimi_pd) on vLLM (one KV connector). The plan prints the size and why.',
    ), check=M(Choice(KV_OFFLOAD))),
    Input('kimi_kv_offload_gb', 'raw', field='kv_offload_gb', read='field', doc=(
        "GiB of the host's RAM for the tier, the whole host (split over its ranks as the engine wants). Unset - "
        "sized in preflight from ansible_memtotal_mb - RAM less max(64 GiB, 10% of RAM), less this host's share of "
        "the checkpoint (weight loading streams it through the page cache), less the engine's /dev/shm staging. A "
        'larger value is refused with the maximum.',
    ), check=M(Int(1, 1048576, unit="GiB"))),
)

HEADER = """\
---
# GENERATED from plugins/module_utils/_model/site_inputs.py by `make site-specs`: edit the table there, not this file.
# The collection's site inputs: what users set in the inventory or with -e, each with its constraint ("Allowed
# values"). kimi.deploy.deployment checks every one of them on every call (plan.yml, site.yml's preflight before any
# host changes, bundle.yml), then the deployment model checks what depends on other inputs and the hardware; every
# refusal is one line naming the variable and the allowed values. This file is the documentation and the bundle's
# secret list (no_log). Role variables are documented in each role's meta/argument_specs.yml.
"""


def by_variable():
    return dict((i.variable, i) for i in INPUTS)


def choices(item):
    """The spec's choices of an input: its Choice constraint's, for a str input (raw ones take other spellings)."""
    return list(item.check.choices) if isinstance(item.check, Choice) and item.type == "str" else None


def allowed(item):
    """What the input's constraint allows, as its refusal says it (and the spec's description ends with)."""
    return item.check.allowed() + (["unset or auto (the model picks)"] if item.check.auto else [])


def check_input(item, value, ctx=None):
    """One input's value against its constraint (control characters and length first, for every input): the one
    line naming the variable, or the value as checked. A secret's value is never in the line."""
    try:
        return item.check.check(item.variable, value, ctx)
    except DeploymentError as refused:
        if not item.no_log:
            raise
        raise DeploymentError("%s (its value is not shown: a secret) is not allowed. Allowed values: %s"
                              % (item.variable, "; ".join(item.check.allowed())))


def check_site(get, host, ctx=None, missing=None):
    """Every site input `host` sets (get(host, variable) is `missing` where unset), in table order: the first
    refusal, as the one line. ctx: {"cwd", "playbook_dir"} for controller paths."""
    for item in INPUTS:
        found = get(host, item.variable)
        if found is not missing:
            check_input(item, found, ctx)


def spec():
    """The argument spec document of the site inputs ({argument_specs: {site: ...}}), as the YAML file holds it."""
    options = {}
    for item in INPUTS:
        option = {"type": item.type}
        if item.elements is not None:
            option["elements"] = item.elements
        if choices(item):
            option["choices"] = choices(item)
        if item.default is not None:
            option["default"] = item.default
        if item.no_log:
            option["no_log"] = True
        option["description"] = list(item.doc) + ["Allowed values: %s." % "; ".join(allowed(item))]
        options[item.variable] = option
    return {"argument_specs": {"site": {
        "short_description": "Site inputs of kimi.deploy (site.yml and playbooks/plan.yml)", "options": options}}}
