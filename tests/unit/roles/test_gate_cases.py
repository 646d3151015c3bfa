"""Which accuracy cases the gate runs is the engine data's for the identity: its Kimi tool-call and reasoning parsers,
pinned here per build and release (read from each release's own parser, the flag lists), so that a resolver that
dropped a parser fails here instead of quietly taking the tool or reasoning cases out of the gate."""
import json
import os

import jinja2
import pytest
import yaml

from ansible_collections.kimi.deploy.plugins.module_utils._engines import registry
from ansible_collections.kimi.deploy.plugins.module_utils._model.deployment import resolve
from ansible_collections.kimi.deploy.plugins.module_utils._model.models import DEFAULT_MODEL, model

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
SHA = "0123456789abcdef0123456789abcdef01234567"

# (build, release): (quant, GPU profile, tool-call parser, reasoning parser). TensorRT-LLM 1.3.0rc17: neither of the
# engine data's Kimi reasoning parsers (kimi_k25, kimi_k2) is among its flag list's --reasoning_parser choices, so its
# answers carry the think block and the gate counts no leak.
PINNED = {
    ("sglang", "0.5.12.post1"): ("int4", "rtx-pro-6000-x8", "kimi_k2", "kimi_k2"),
    ("sglang", "0.5.23"): ("int4", "rtx-pro-6000-x8", "kimi_k2", "kimi_k2"),
    ("vllm", "0.22.1"): ("int4", "rtx-pro-6000-x8", "kimi_k2", "kimi_k2"),
    ("vllm", "0.33.0"): ("int4", "rtx-pro-6000-x8", "kimi_k2", "kimi_k2"),
    ("trtllm", "1.3.0rc17"): ("nvfp4", "b200-x8", "kimi_k2", None),
    ("vllm-ascend", "0.20.2rc1"): ("w4a8", "ascend-a3-x16", "kimi_k2", "kimi_k2"),
    ("sglang-ascend", "0.5.13.post1"): ("w4a8", "ascend-a3-x16", "kimi_k2", "kimi_k2"),
}


def gpus(profile):
    with open(os.path.join(ROOT, "tests", "fixtures", "gpus", profile + ".json")) as handle:
        return json.load(handle)["kimi_gpus"]


def gate_arguments(deployment):
    """tool_calls and reasoning_split as roles/kimi_probes/tasks/gate.yml renders them for this deployment."""
    with open(os.path.join(ROOT, "roles", "kimi_probes", "tasks", "gate.yml")) as handle:
        task = yaml.safe_load(handle)[0]["block"][0]["kimi.deploy.serve_accuracy"]
    env = jinja2.Environment()
    return dict((name, env.from_string(task[name]).render(kimi_deployment=deployment) == "True")
                for name in ("tool_calls", "reasoning_split"))


def test_every_build_and_release_is_pinned():
    assert set(PINNED) == set((build, version) for build, spec in registry.ENGINES.items()
                              for version in spec["versions"])


@pytest.mark.parametrize("build, version", sorted(PINNED), ids=["%s-%s" % k for k in sorted(PINNED)])
def test_the_gate_runs_the_cases_the_releases_parsers_allow(build, version):
    quant, profile, tool, reasoning = PINNED[(build, version)]
    names = model(DEFAULT_MODEL)["parsers"][build]  # the parser names are the model's data
    assert (registry.parser_name(build, version, "tool", names["tool"]),
            registry.parser_name(build, version, "reasoning", names["reasoning"])) == (tool, reasoning)
    engine = build.split("-")[0]  # the engine a user names; the platform picks the build
    deployment = resolve({"quant": quant, "engine": engine, "engine_version": version, "revisions": {quant: SHA},
                          "allow_unfit": True}, gpus(profile), require_revision=False)
    assert deployment["engine_build"] == build and deployment["engine_version"] == version
    assert (deployment["tool_parser"], deployment["reasoning_parser"]) == (tool, reasoning)
    assert gate_arguments(deployment) == {"tool_calls": tool is not None, "reasoning_split": reasoning is not None}
    assert ("tool" in deployment["verify_checks"]) == (tool is not None)
