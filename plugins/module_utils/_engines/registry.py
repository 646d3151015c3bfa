# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The engines: a registry of the engine data files, and what is read off them. Private to kimi.deploy.

An engine is data (_engines/<name>.py, fields in _engines/spec.py); a release of it is one entry in its `versions` with
a flag list generated from the released package (tools/engine_flags.py, tools/gen_flag_modules.py). This module picks
the version (select_version), derives the flags the collection manages for it (managed), renders the command line
(engine_argv, command_for) and the config file (engine_config), and reads kimi_engine_extra_args and kimi_trtllm_options
against that version's own lists. Nothing here knows an engine by name.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.kimi.deploy.plugins.module_utils._engines.cli import check_extra, option_index, option_value
from ansible_collections.kimi.deploy.plugins.module_utils._engines.sglang import ENGINE as SGLANG
from ansible_collections.kimi.deploy.plugins.module_utils._engines.trtllm import ENGINE as TRTLLM
from ansible_collections.kimi.deploy.plugins.module_utils._engines.sglang_ascend import ENGINE as SGLANG_ASCEND
from ansible_collections.kimi.deploy.plugins.module_utils._engines.vllm import ENGINE as VLLM
from ansible_collections.kimi.deploy.plugins.module_utils._engines.vllm_ascend import ENGINE as VLLM_ASCEND
from ansible_collections.kimi.deploy.plugins.module_utils._common import DeploymentError, fail, var

# Keyed by build: an engine (the `engine` input) has one build per accelerator platform it runs on.
ENGINES = dict((spec.get("key", spec["name"]), spec) for spec in (SGLANG, VLLM, TRTLLM, VLLM_ASCEND, SGLANG_ASCEND))
for _key, _spec in ENGINES.items():
    _spec.setdefault("key", _key)
    _spec.setdefault("container_env", {})
    _spec.setdefault("container_env_multi_node", {})
    _spec.setdefault("container_shm_bytes", None)
    _spec.setdefault("attention_tp", None)
    _spec.setdefault("kernel_cache", None)
    _spec.setdefault("slots", None)
ENGINE_NAMES = tuple(sorted(set(spec["name"] for spec in ENGINES.values())))


def builds_of(engine, order=()):
    """The builds (registry keys) of the engine `engine`, in the platforms' `order` (the model passes
    _model/platforms.ORDER; a platform not in it after those that are), then by key."""
    order = tuple(order)
    return sorted((key for key, spec in ENGINES.items() if spec["name"] == engine),
                  key=lambda key: (order.index(ENGINES[key]["platform"]) if ENGINES[key]["platform"] in order
                                   else len(order), key))


def build_of(engine, platform):
    """The build of `engine` for `platform` (a _platforms name), or None where it has none."""
    return next((key for key in builds_of(engine) if ENGINES[key]["platform"] == platform), None)


def pinned_image(key, version, quant, family):
    """The pinned image of a build's release for `quant` on an accelerator family (a release may pin one per family,
    e.g. vLLM-Ascend's -a3 build for the A3)."""
    image = ENGINES[key]["versions"][version]["images"][quant]
    if isinstance(image, dict):
        return image.get(family) or image[sorted(image)[-1]]
    return image


ADD_VERSION = "make engine-flags ENGINE=%s VERSION=<version>, then list it in plugins/module_utils/_engine_%s.py"

# The version an image tag names: v0.22.1, v0.5.12.post1-cu130, 1.2.1, 1.3.0rc17 (at the start of the tag).
TAG_VERSION_RE = re.compile(r"v?(\d+\.\d+(?:\.\d+)?(?:\.post\d+|rc\d+(?:\.post\d+)?)?)(?:$|[-_+])")


def image_version(image):
    """The engine version an image reference's tag names, or None (no tag, a digest only, or a tag like `latest`)."""
    if not image:
        return None
    name = image.split("@", 1)[0]
    tag = name.rsplit(":", 1)[1] if ":" in name.rsplit("/", 1)[-1] else ""
    match = TAG_VERSION_RE.match(tag)
    return match.group(1) if match else None


def select_version(engine, version, image):
    """(version, reason) of `engine` for kimi_engine_version `version` (None: unset) and the image override `image`
    (None: the pinned one). An image whose tag names a version selects it; a version that has no flag list is refused,
    naming the known ones and the command that adds one."""
    spec = ENGINES[engine]
    known = sorted(spec["versions"])
    tagged = image_version(image)
    for field, value in (("engine_version", version), ("image", tagged)):
        if value is not None and value not in spec["versions"]:
            what = "kimi_engine_version=%r" % value if field == "engine_version" else \
                "kimi_engine_image=%r names %s %s" % (image, engine, value)
            raise DeploymentError(
                "%s, which has no flag list in this collection: its options cannot be checked. Allowed values of "
                "kimi_engine_version for engine=%s: %s. Add a release with: %s"
                % (what, spec["name"], ", ".join(known), ADD_VERSION % (
                    (spec["versions"][known[-1]].get("parser_of") or (spec["name"],))[0], engine.replace("-", "_"))))
    if version is not None and tagged is not None and version != tagged:
        fail("engine_version", version, [tagged], "kimi_engine_image=%s names %s %s; the flags are checked against "
             "the version the image runs" % (image, engine, tagged))
    if version is not None:
        return version, "%s %s: set by kimi_engine_version." % (spec["title"], version)
    if tagged is not None:
        return tagged, "%s %s: named by the tag of kimi_engine_image=%s." % (spec["title"], tagged, image)
    chosen = spec["default_version"]
    why = "%s %s: the default, %s." % (spec["title"], chosen, spec["versions"][chosen]["verified"] or "unverified")
    if image:
        why += (" kimi_engine_image=%s names no version in its tag: it is trusted to run %s %s (set "
                "kimi_engine_version otherwise)." % (image, engine, chosen))
    return chosen, why


def options(engine, version):
    return ENGINES[engine]["versions"][version]["options"]


def label(engine, version):
    return "%s %s" % (engine, version)


def managed(engine, version):
    """dest -> Arg for every flag the collection emits for `engine` (any spelling of it is refused in extra args).
    A flag the collection emits that this version's list lacks is refused here, naming it."""
    index = option_index(options(engine, version))
    out = {}
    for arg in ENGINES[engine]["args"]:
        if arg.option not in index:
            if arg.positional:
                out[arg.option.lstrip("-")] = arg
                continue
            raise DeploymentError(
                "engine=%s kimi_engine_version=%s: %s, which the collection passes for Kimi-K2.6, is not an option of "
                "%s. That version needs its own engine data (plugins/module_utils/_engine_%s.py)."
                % (engine, version, arg.option, label(engine, version), engine))
        out[index[arg.option][0]] = arg
    return out


def parser_name(engine, version, kind, names):
    """The tool ('tool') or reasoning ('reasoning') parser the version knows (the first of the model's `names` that its
    list has), or None."""
    opts = options(engine, version)
    spellings = {"tool": ("--tool-call-parser", "--tool_parser"), "reasoning": ("--reasoning-parser", "--reasoning_parser")}
    for candidate in spellings[kind]:
        entry = option_index(opts).get(candidate)
        if entry:
            values = opts["values"].get(entry[0])
            return next((name for name in names if values is None or name in values), None)
    return None


def check_extra_args(engine, version, extra):
    return check_extra(options(engine, version), label(engine, version), managed(engine, version), extra)


def _merge(base, override):
    out = dict(base)
    for key, value in override.items():
        out[key] = _merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def _check_config_keys(schema, choices, managed_keys, given, prefix, owner):
    """Each key of `given` (kimi_trtllm_options) against the version's LLM-API schema, recursively."""
    if not isinstance(given, dict):
        fail("engine_options", given, ["a dict of %s's LLM-API options, e.g. {max_batch_size: 64}" % owner])
    for key, value in given.items():
        dotted = prefix + str(key)
        if dotted in managed_keys:
            field = managed_keys[dotted]
            fail("engine_options", {dotted: value}, None, "%s is set by the collection%s" % (
                dotted, "; use %s instead" % var(field) if field else " for Kimi-K2.6"))
        if key not in schema:
            near = sorted(k for k in schema if k.startswith(str(key)[:4]))[:4]
            fail("engine_options", {dotted: value}, None, "%s is not an LLM-API option of %s%s" % (
                dotted, owner, " (near: %s)" % ", ".join(prefix + k for k in near) if near else ""))
        if isinstance(schema[key], dict):
            if value is not None:
                _check_config_keys(schema[key], choices, managed_keys, value, dotted + ".", owner)
        elif dotted in choices and value is not None and str(value) not in choices[dotted]:
            fail("engine_options", {dotted: value}, choices[dotted], "%s of %s takes one of its listed values"
                 % (dotted, owner))
        else:
            expected = _type_problem(schema[key], value)
            # a size or a maximum declared as a plain int: a count, 1 or more (pydantic would take -1 and the engine
            # fail at start-up)
            if not expected and "int" in schema[key].lower() and isinstance(value, int) and value < 1 \
                    and (str(key).startswith("max_") or str(key).endswith("_size")):
                expected = "a count of 1 or more"
            if expected:
                fail("engine_options", {dotted: value}, [expected], "%s of %s is %s (%s), got %s %r"
                     % (dotted, owner, expected, schema[key], type(value).__name__, value))


# The LLM-API field types (the schema's leaves, as pydantic declares them) the check knows: value -> accepted.
_SCALAR_TYPES = {
    "bool": ("a boolean (true or false, not a string)", lambda v: isinstance(v, bool)),
    "int": ("an integer", lambda v: isinstance(v, int) and not isinstance(v, bool)),
    "PositiveInt": ("an integer above 0", lambda v: isinstance(v, int) and not isinstance(v, bool) and v > 0),
    "NonNegativeInt": ("an integer of 0 or more", lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0),
    "float": ("a number", lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)),
    "NonNegativeFloat": ("a number of 0 or more",
                         lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0),
    "str": ("a string", lambda v: isinstance(v, str)),
    "List[int]": ("a list of integers",
                  lambda v: isinstance(v, list) and all(isinstance(i, int) and not isinstance(i, bool) for i in v)),
}


def _type_problem(type_text, value):
    """What a field of this declared type takes, when `value` is not that; None when it fits or the type is one the
    check does not know (a union, a config class: the engine's own validation reads those)."""
    optional = type_text.startswith("Optional[") and type_text.endswith("]")
    inner = type_text[len("Optional["):-1] if optional else type_text
    if value is None:
        return None if optional else None if inner not in _SCALAR_TYPES else "%s (not null)" % _SCALAR_TYPES[inner][0]
    if inner.startswith("Literal["):
        return None if isinstance(value, str) else "one of %s" % inner[len("Literal["):-1]
    if inner.startswith("Dict["):
        return None if isinstance(value, dict) else "a mapping"
    known = _SCALAR_TYPES.get(inner)
    if known and not known[1](value):
        return known[0]
    return None


def engine_config(engine, version, deployment_fields, user_options):
    """The engine's config file (a dict) for an engine that takes one, or None: its managed keys from the deployment,
    over its defaults, under kimi_trtllm_options (checked key by key against the version's schema)."""
    spec = ENGINES[engine]
    if spec["config"] is None:
        if user_options:
            fail("engine_options", user_options, ["{} (unset)"], "engine=%s takes no config file; its options are "
                 "kimi_engine_extra_args" % engine)
        return None
    schema = spec["versions"][version]["llm_args"]
    owner = "%s (%s)" % (label(engine, version), schema["class"])
    user_options = user_options or {}
    _check_config_keys(schema["keys"], schema["choices"], spec["config_managed"], user_options, "", owner)
    defaults = spec["config_defaults"](deployment_fields)
    merged = _merge(_merge(defaults, user_options), spec["config"](deployment_fields))
    for dotted in spec["config_managed"]:  # the managed keys the collection writes must be in the schema too
        node = schema["keys"]
        for part in dotted.split("."):
            if not isinstance(node, dict) or part not in node:
                raise DeploymentError("engine=%s: the config key %s, which the collection writes, is not an LLM-API "
                                      "option of %s" % (engine, dotted, owner))
            node = node[part]
    return merged


def engine_argv(deployment):
    """The container command after the image, for a deployment resolve() returned: `docker run IMAGE <argv>`.

    Renders only (resolve() validated every value): the engine's args in order, then the extra args. An image
    without the engine's entry point gets it at the head of argv.
    """
    spec = ENGINES[deployment["engine_build"]]
    argv = [] if spec["image_entrypoint"] else list(spec["entrypoint"])
    for arg in spec["args"]:
        argv.extend(arg.render(deployment))
    return argv + list(deployment["extra_args"])


def engine_slots(deployment):
    """The requests the engine of a resolved deployment (its engine_config and extra args included) runs at once, for a
    router that cannot ask it (SMG reads only SGLang's /server_info max_running_requests): the engine data's `slots`,
    given the value kimi_engine_extra_args set for an option (by dest), or None where the engine reports its own or the
    count is not known."""
    key = deployment["engine_build"]
    table = options(key, deployment["engine_version"])
    rule = ENGINES[key]["slots"]
    return rule(deployment, lambda dest: option_value(table, deployment["extra_args"], dest)) if rule else None


def command_for(deployment):
    """The full process command line of a resolved deployment (image entry point included)."""
    spec = ENGINES[deployment["engine_build"]]
    argv = engine_argv(deployment)
    return list(spec["entrypoint"]) + argv if spec["image_entrypoint"] else argv
