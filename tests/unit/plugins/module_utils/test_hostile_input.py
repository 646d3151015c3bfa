"""Hostile and careless input (issue 35): every string that becomes an argument, a unit line, a YAML value or a line
of a file is refused with a control character in it, naming its variable and the element; options that carry a
credential are refused in the extra arguments without echoing the secret."""
import pytest

from ansible_collections.kimi.deploy.plugins.module_utils._model import deployment as dm

# Each control character the rule names: C0 (newline, CR, tab, NUL, ESC), DEL, C1 (NEL, CSI) and U+2028/U+2029.
CONTROLS = ["\n", "\r", "\t", "\x00", "\x1b", "\x7f", "\x85", "\x9b", "\u2028", "\u2029"]
BASE = {"quant": "int4", "engine": "sglang"}


def bad(value, char):
    return value[:2] + char + value[2:]


# (inputs with one string made hostile by `char`, the variable the refusal names)
STRING_INPUTS = [
    (lambda c: {"quant": bad("int4", c)}, "quant"),
    (lambda c: {"engine": bad("sglang", c)}, "engine"),
    (lambda c: dict(BASE, engine_version=bad("0.5.12.post1", c)), "kimi_engine_version"),
    (lambda c: dict(BASE, kv_cache_dtype=bad("fp8_e4m3", c)), "kimi_kv_cache_dtype"),
    (lambda c: dict(BASE, served_model_name=bad("kimi-k2.6", c)), "kimi_served_model_name"),
    (lambda c: dict(BASE, image=bad("lmsysorg/sglang:v0.5.12.post1-cu130", c)), "kimi_engine_image"),
    (lambda c: dict(BASE, host=bad("127.0.0.1", c)), "kimi_engine_host"),
    (lambda c: dict(BASE, head_address=bad("10.0.0.1", c)), "kimi_replica_head_address"),
    (lambda c: dict(BASE, extra_args=["--max-running-requests", "64" + c + "--host=0.0.0.0"]),
     "kimi_engine_extra_args"),
    (lambda c: dict(BASE, extra_args=["--max-running-requests=64" + c]), "kimi_engine_extra_args"),
    (lambda c: {"quant": "int4", "engine": "vllm", "extra_args": ["--max-num-seqs", "64" + c + "--port=9"]},
     "kimi_engine_extra_args"),
    (lambda c: {"quant": "nvfp4", "engine": "trtllm", "engine_options": {"max_batch_size": "6" + c + "4"}},
     "kimi_trtllm_options"),
    (lambda c: {"quant": "nvfp4", "engine": "trtllm", "engine_options": {"kv_cache_config": {"dtype" + c: "fp8"}}},
     "kimi_trtllm_options"),
    (lambda c: dict(BASE, revisions={"int4": "0" * 39 + c}), "kimi_int4_revision"),
    (lambda c: dict(BASE, speculative="eagle3", speculative_draft=bad("AQ-MedAI/Kimi-K26-eagle3", c)),
     "kimi_speculative_draft"),
    (lambda c: dict(BASE, speculative="eagle3", speculative_draft_revision="a" * 39 + c),
     "kimi_speculative_draft_revision"),
    (lambda c: dict(BASE, pd={"plan": "1P1D", "router_extra_args": ["--policy", "random" + c + "--port 9"]}),
     "kimi_pd_router_extra_args"),
]


@pytest.mark.parametrize("char", CONTROLS, ids=lambda c: "U+%04X" % ord(c))
@pytest.mark.parametrize("make, variable", STRING_INPUTS, ids=[row[1] for row in STRING_INPUTS])
def test_a_control_character_in_any_string_input_is_refused_naming_the_variable(make, variable, char):
    with pytest.raises(dm.DeploymentError) as refused:
        dm.resolve(make(char), [], require_revision=False)
    message = str(refused.value)
    assert message.startswith(variable + "="), message
    assert "is not allowed" in message and "no control character may be" in message


@pytest.mark.parametrize("engine, args, option", [
    ("vllm", ["--api-key=sk-live-123"], "--api-key"),
    ("vllm", ["--api-key", "sk-live-123"], "--api-key"),
    ("vllm", ["--api_key sk-live-123"], "--api_key"),
    ("vllm", ["--hf-token", "hf_live_123"], "--hf-token"),
    ("sglang", ["--api-key", "sk-live-123"], "--api-key"),
    ("sglang", ["--admin-api-key=sk-live-123"], "--admin-api-key"),
    ("sglang", ["--ssl-keyfile-password", "sk-live-123"], "--ssl-keyfile-password"),
])
def test_an_option_that_carries_a_credential_is_refused_without_echoing_it(engine, args, option):
    with pytest.raises(dm.DeploymentError) as refused:
        dm.resolve({"quant": "int4", "engine": engine, "extra_args": args}, [], require_revision=False)
    message = str(refused.value)
    assert message.startswith("kimi_engine_extra_args=") and "carries a credential" in message
    assert option in message and "live_123" not in message and "live-123" not in message


@pytest.mark.parametrize("args", [["--api-key=sk-live-123"], ["--control-plane-api-keys", "sk-live-123"]])
def test_the_routers_credential_options_are_refused_too(args):
    with pytest.raises(dm.DeploymentError) as refused:
        dm.resolve(dict(BASE, pd={"plan": "1P1D", "router_extra_args": args}), [], require_revision=False)
    message = str(refused.value)
    assert message.startswith("kimi_pd_router_extra_args=") and "carries a credential" in message
    assert "live-123" not in message


@pytest.mark.parametrize("inputs", [
    {"quant": "int4", "engine": "sglang"},
    {"quant": "int4", "engine": "vllm",
     "extra_args": ["--max-num-seqs", "64", "--override-generation-config", '{"temperature": 0.6}']},
    {"quant": "nvfp4", "engine": "trtllm"},
])
def test_the_plans_command_pastes_into_a_shell_and_gives_the_argv_back(inputs):
    import shlex
    from ansible_collections.kimi.deploy.plugins.module_utils._model.report import plan_lines
    deployment = dm.resolve(inputs, [], require_revision=False)
    line = next(x for x in plan_lines(deployment) if x.startswith("command: "))
    assert shlex.split(line[len("command: "):]) == [str(a) for a in deployment["command"]]


@pytest.mark.parametrize("options, expected", [
    ({"max_batch_size": "lots"}, "an integer"),
    ({"max_batch_size": -1}, "a count of 1 or more"),
    ({"max_batch_size": True}, "an integer"),
    ({"enable_attention_dp": "false"}, "a boolean"),  # a string "false" would be read as true by the fit
    ({"enable_attention_dp": 0}, "a boolean"),
    ({"max_num_tokens": 8.5}, "an integer"),
    ({"cuda_graph_config": {"batch_sizes": [1, "2"]}}, "a list of integers"),
])
def test_trtllm_options_are_checked_by_the_schemas_type(options, expected):
    with pytest.raises(dm.DeploymentError) as refused:
        dm.resolve({"quant": "nvfp4", "engine": "trtllm", "engine_options": options}, [], require_revision=False)
    message = str(refused.value)
    assert message.startswith("kimi_trtllm_options=") and expected in message, message


@pytest.mark.parametrize("options", [{"max_batch_size": 64}, {"enable_attention_dp": True},
                                     {"cuda_graph_config": {"batch_sizes": [1, 2, 4]}}])
def test_trtllm_options_of_the_right_type_are_written(options):
    deployment = dm.resolve({"quant": "nvfp4", "engine": "trtllm", "engine_options": options}, [],
                            require_revision=False)
    key, value = next(iter(options.items()))
    assert deployment["engine_config"][key] == value


def test_a_pipeline_too_deep_for_the_default_tensor_parallel_names_kimi_pipeline_parallel():
    import json
    import os
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
    with open(os.path.join(root, "tests", "fixtures", "gpus", "rtx-pro-6000-x8.json")) as f:
        gpus = json.load(f)["kimi_gpus"]
    with pytest.raises(dm.DeploymentError, match=r"^kimi_pipeline_parallel=2 is not allowed: .*set kimi_tensor_parallel"):
        dm.resolve({"quant": "int4", "engine": "sglang", "pp": 2}, gpus, require_revision=False)
    with pytest.raises(dm.DeploymentError, match=r"^kimi_tensor_parallel=8 is not allowed"):  # both set: tp named
        dm.resolve({"quant": "int4", "engine": "sglang", "pp": 2, "tp": 8}, gpus, require_revision=False)


# Ports (issue 35 item 5): every port of a host in one table, a collision refused naming both users.
def test_the_engine_port_on_the_replicas_rendezvous_port_is_refused_naming_both():
    inputs = {"quant": "int4", "engine": "sglang", "nodes": 2, "node_rank": 0, "head_address": "10.0.0.1",
              "port": 29500}
    with pytest.raises(dm.DeploymentError) as refused:
        dm.resolve(inputs, [], require_revision=False)
    message = str(refused.value)
    assert message.startswith("kimi_replica_port=29500 is not allowed"), message
    assert "the engine's API (kimi_engine_port) already uses" in message


def test_a_worker_of_a_replica_does_not_open_the_rendezvous_port():
    inputs = {"quant": "int4", "engine": "sglang", "nodes": 2, "node_rank": 1, "head_address": "10.0.0.1",
              "port": 29500}
    deployment = dm.resolve(inputs, [], require_revision=False)
    assert [p["variable"] for p in deployment["ports"]] == ["kimi_engine_port"]


def test_the_deployment_lists_its_ports():
    deployment = dm.resolve({"quant": "int4", "engine": "sglang", "nodes": 2, "node_rank": 0,
                             "head_address": "10.0.0.1"}, [], require_revision=False)
    assert [(p["variable"], p["port"]) for p in deployment["ports"]] == [
        ("kimi_engine_port", deployment["port"]), ("kimi_replica_port", deployment["dist_port"])]


@pytest.mark.parametrize("variable, value, port", [
    ("caddy_proxy_https_port", 30000, 30000),
    ("kimi_weights_peer_port", "30000", 30000),
    ("kimi_metrics_node_exporter_port", 30000, 30000),
    ("kimi_monitoring_listen_address", "127.0.0.1:30000", 30000),
])
def test_a_role_port_on_the_engine_port_is_refused_naming_both(variable, value, port):
    from ansible_collections.kimi.deploy.plugins.module_utils._model import ports as _ports
    uses = [(30000, "kimi_engine_port", "the engine's API"),
            (_ports.role_port(variable, value), variable, _ports.ROLE_PORTS[variable][1])]
    with pytest.raises(dm.DeploymentError) as refused:
        _ports.check(uses)
    message = str(refused.value)
    assert message.startswith("%s=%d is not allowed" % (variable, port)), message
    assert "(kimi_engine_port) already uses" in message


def test_a_role_port_that_is_not_a_port_is_refused_naming_it():
    from ansible_collections.kimi.deploy.plugins.module_utils._model import ports as _ports
    for variable, value in (("caddy_proxy_https_port", "https"), ("kimi_monitoring_listen_address", "9090"),
                            ("kimi_metrics_node_exporter_port", 70000)):
        with pytest.raises(dm.DeploymentError) as refused:
            _ports.role_port(variable, value)
        assert str(refused.value).startswith(variable + "="), str(refused.value)


def test_a_served_model_name_of_auto_is_refused_not_silently_the_default():
    with pytest.raises(dm.DeploymentError) as refused:
        dm.resolve(dict(BASE, served_model_name="auto"), [], require_revision=False)
    assert str(refused.value).startswith("kimi_served_model_name='auto' is not allowed"), str(refused.value)
    assert "leave kimi_served_model_name unset for kimi-k2.6" in str(refused.value)
    assert dm.resolve(dict(BASE), [], require_revision=False)["served_model_name"] == "kimi-k2.6"


def test_sglangs_default_context_above_its_kv_estimate_is_warned_about():
    """8 x RTX PRO 6000 with SGLang and an fp8 KV cache: the default 262144 is above the pool's estimate; SGLang starts
    anyway, so the plan warns (it only did for a bf16 cache)."""
    import json
    import os
    fixture = os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures", "gpus", "rtx-pro-6000-x8.json")
    with open(fixture) as handle:
        gpus = json.load(handle)["kimi_gpus"]
    deployment = dm.resolve(dict(BASE), gpus, require_revision=False)
    assert deployment["kv_cache_dtype"] == "fp8_e4m3"
    assert deployment["context_length"] > deployment["hardware"]["kv_tokens_estimate"]
    assert any(w.startswith("context 262144 exceeds the estimated KV pool (%d tokens)"
                            % deployment["hardware"]["kv_tokens_estimate"]) and "lower kimi_context_length" in w
               for w in deployment["warnings"]), deployment["warnings"]


@pytest.mark.parametrize("option, owner", [
    ("--port", "use kimi_pd_router_port instead"),
    ("--prometheus-port", "use kimi_pd_router_metrics_port instead"),
    ("--host", "the collection fixes it"),  # loopback, Caddy in front: no variable moves it
    ("--prefill", "use kimi_pd instead"),   # the workers are kimi_pd's hosts
])
def test_a_managed_router_option_names_the_variable_that_sets_it(option, owner):
    """It said "use kimi_pd_router" (which only picks the router's host) for every one of them."""
    with pytest.raises(dm.DeploymentError) as refused:
        dm.resolve(dict(BASE, pd={"plan": "1P1D", "router_extra_args": [option, "9"]}), [], require_revision=False)
    message = str(refused.value)
    assert message.startswith("kimi_pd_router_extra_args='%s' is not allowed" % option) and owner in message, message
    assert "kimi_pd_router instead" not in message


def test_the_kv_transfers_fixed_port_names_the_variable_that_moved_onto_it():
    """vLLM's NIXL side channel (5600) has no variable: the engine port set onto it is the one refused."""
    with pytest.raises(dm.DeploymentError) as refused:
        dm.resolve({"quant": "int4", "engine": "vllm", "port": 5600, "pd": {"plan": "1P1D"}}, [],
                   require_revision=False)
    message = str(refused.value)
    assert message.startswith("kimi_engine_port=5600 is not allowed"), message
    assert "vLLM's NIXL side channel (kimi_pd) already uses" in message


def test_a_router_host_lists_the_router_and_its_metrics_ports():
    deployment = dm.resolve({"quant": "int4", "engine": "sglang", "pd": {"plan": "1P1D"}}, [], require_revision=False)
    assert [(p["variable"], p["port"]) for p in deployment["ports"]] == [
        ("kimi_engine_port", 30000), ("kimi_pd_router_port", 30080), ("kimi_pd_router_metrics_port", 29000)]
    assert deployment["pd"]["role"] == "decode"  # the plan's host: the decode that runs the router; no bootstrap server


def test_only_a_prefill_host_lists_the_bootstrap_port():
    from ansible_collections.kimi.deploy.plugins.module_utils._model import ports as _ports
    deployment = {"port": 30000, "pd": {"bootstrap_port": 8998, "role": "prefill", "router": {"is_here": False}}}
    assert (8998, "kimi_pd_bootstrap_port", "the PD bootstrap server") in _ports.deployment_ports(deployment)
    deployment["pd"]["role"] = "decode"
    assert [use[1] for use in _ports.deployment_ports(deployment)] == ["kimi_engine_port"]


# Extra engine and router arguments: values outside the option's choices (or the names the engine checks at start-up)
# and values not of its type (where the flag list records the parser's type) are refused, naming the option.
@pytest.mark.parametrize("inputs, expected", [
    (dict(BASE, extra_args=["--attention-backend", "$(reboot)"]), "--attention-backend does not take '$(reboot)'"),
    ({"quant": "int4", "engine": "vllm", "extra_args": ["--dtype=float8"]}, "--dtype does not take 'float8'"),
    ({"quant": "int4", "engine": "vllm", "extra_args": ["--all2all-backend", "nccl"]}, "Allowed values: "),
    ({"quant": "nvfp4", "engine": "trtllm", "extra_args": ["--max_batch_size", "lots"]},
     "--max_batch_size takes an integer value, not 'lots'"),
    ({"quant": "nvfp4", "engine": "trtllm", "extra_args": ["--max_num_tokens=8.5"]},
     "--max_num_tokens takes an integer value, not '8.5'"),
    ({"quant": "int4", "engine": "vllm", "extra_args": ["--default-chat-template-kwargs", "{thinking: true}"]},
     "--default-chat-template-kwargs takes a JSON value, not '{thinking: true}'"),
])
def test_extra_argument_values_are_checked_against_the_option(inputs, expected):
    with pytest.raises(dm.DeploymentError) as refused:
        dm.resolve(inputs, [], require_revision=False)
    message = str(refused.value)
    assert message.startswith("kimi_engine_extra_args=") and expected in message, message


@pytest.mark.parametrize("inputs", [
    {"quant": "nvfp4", "engine": "trtllm", "extra_args": ["--max_batch_size", "64", "--max_num_tokens=8192"]},
    {"quant": "int4", "engine": "vllm", "extra_args": ["--dtype", "bfloat16"]},
    {"quant": "int4", "engine": "vllm", "extra_args": ["--default-chat-template-kwargs", '{"thinking": true}']},
])
def test_extra_argument_values_of_the_options_type_and_choices_pass(inputs):
    deployment = dm.resolve(inputs, [], require_revision=False)
    assert all(a in [str(x) for x in deployment["command"]] for a in inputs["extra_args"] if "=" not in a)


@pytest.mark.parametrize("args, expected", [
    (["--cache-threshold", "half"], "--cache-threshold takes a number value, not 'half'"),
    (["--balance-abs-threshold=1e3"], "--balance-abs-threshold takes an integer value, not '1e3'"),
    (["--log-level", "loud"], "--log-level does not take 'loud'"),
])
def test_router_argument_values_are_checked_against_the_routers_option(args, expected):
    with pytest.raises(dm.DeploymentError) as refused:
        dm.resolve(dict(BASE, pd={"plan": "1P1D", "router_extra_args": args}), [], require_revision=False)
    message = str(refused.value)
    assert message.startswith("kimi_pd_router_extra_args=") and expected in message, message


def test_router_argument_values_of_the_right_type_pass():
    deployment = dm.resolve(dict(BASE, pd={"plan": "1P1D", "router_extra_args": ["--cache-threshold", "0.5"]}), [],
                            require_revision=False)
    assert "0.5" in str(deployment["pd"])


def test_names_the_engine_checks_at_start_up_are_compared_without_case():
    # vLLM upper-cases --attention-backend before looking it up: triton_mla is TRITON_MLA
    deployment = dm.resolve({"quant": "int4", "engine": "vllm", "extra_args": ["--attention-backend", "triton_mla"]},
                            [], require_revision=False)
    assert "triton_mla" in [str(a) for a in deployment["command"]]
    with pytest.raises(dm.DeploymentError, match="--attention-backend does not take 'no_such_backend'"):
        dm.resolve({"quant": "int4", "engine": "vllm", "extra_args": ["--attention-backend=no_such_backend"]}, [],
                   require_revision=False)


def test_a_value_of_the_wrong_type_is_refused_with_its_option():
    with pytest.raises(dm.DeploymentError) as refused:
        dm.resolve({"quant": "int4", "engine": "vllm", "extra_args": ["--max-num-seqs", "$(reboot)"]}, [],
                   require_revision=False)
    assert str(refused.value) == ("kimi_engine_extra_args='--max-num-seqs $(reboot)' is not allowed: --max-num-seqs "
                                  "takes an integer value, not '$(reboot)' (vllm 0.22.1)")
