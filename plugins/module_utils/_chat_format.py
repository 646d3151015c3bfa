# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The Kimi chat formats (a model entry's `chat_format`): the markup each model writes, which parsers read it, and
the text a model of that format generates. Standard library only and no imports from the collection: the accuracy
gate (_accuracy.py, also copied beside the serving-time probe) and the engine double (tests/doubles/engine, whose
image build copies this file in) both read it, so each token string and parser name is declared here once.

Sources: vLLM 0.33.0 `parser/kimi_k2.py` (K2's markers), `reasoning/kimi_k3_reasoning_parser.py`,
`tool_parsers/kimi_k3_tool_parser.py` (K3's XTML channels) and SGLang 0.5.23 `function_call/kimik3_format.py`
(the same K3 marker constants), read in the released wheels.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

K2_THINK_OPEN, K2_THINK_CLOSE = "<think>", "</think>"
K2_TOOLS_OPEN, K2_TOOLS_CLOSE = "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>"
K2_CALL_OPEN, K2_CALL_ARGS, K2_CALL_CLOSE = "<|tool_call_begin|>", "<|tool_call_argument_begin|>", "<|tool_call_end|>"

# K3 (XTML): three special tokens build every element, <|open|>NAME attrs<|sep|> ... <|close|>NAME<|sep|>.
K3_OPEN, K3_CLOSE, K3_SEP = "<|open|>", "<|close|>", "<|sep|>"


def _k3(name):
    return K3_OPEN + name + K3_SEP, K3_CLOSE + name + K3_SEP


K3_THINK_OPEN, K3_THINK_CLOSE = _k3("think")
K3_RESPONSE_OPEN, K3_RESPONSE_CLOSE = _k3("response")
K3_TOOLS_OPEN, K3_TOOLS_CLOSE = _k3("tools")
K3_MESSAGE_CLOSE = _k3("message")[1]

FORMATS = {
    "k2": {
        "think": (K2_THINK_OPEN, K2_THINK_CLOSE),
        # What never belongs in an answer's content once the engine parses this format (K1.5's ◁think▷ too).
        "markup": (K2_THINK_OPEN, K2_THINK_CLOSE, u"\u25c1think\u25b7", u"\u25c1/think\u25b7", K2_TOOLS_OPEN,
                   K2_TOOLS_CLOSE, K2_CALL_OPEN, K2_CALL_ARGS, K2_CALL_CLOSE),
        # Every parser name of the pinned releases that reads this format (the engines' flag lists accept others,
        # which read other models' formats). kimi_k25: TensorRT-LLM's name; the <think> parsers read K2's think block.
        "readers": {"tool": ("kimi_k2",),
                    "reasoning": ("kimi", "kimi_k2", "kimi_k25", "deepseek_r1", "deepseek-r1", "qwen3")},
    },
    "k3": {
        "think": (K3_THINK_OPEN, K3_THINK_CLOSE),
        "markup": (K3_OPEN, K3_CLOSE, K3_SEP),
        "readers": {"tool": ("kimi_k3",), "reasoning": ("kimi_k3",)},
    },
}
# A checkpoint's config.json model_type -> the format its chat template makes the model write (the engines pick the
# template from the checkpoint, the parsers from their flags). Any other Kimi checkpoint (kimi_k25, kimi_k2): k2.
CHECKPOINT_FORMATS = {"kimi_k3": "k3"}


def checkpoint_format(config):
    """The chat format a checkpoint's config.json (a dict) writes."""
    config = config or {}
    if config.get("model_type") in CHECKPOINT_FORMATS:
        return CHECKPOINT_FORMATS[config["model_type"]]
    if "KimiK3ForConditionalGeneration" in (config.get("architectures") or ()):
        return "k3"
    return "k2"


def reads(fmt, kind, parser):
    """Whether parser name `parser` (None: no parser) reads format `fmt`'s `kind` ("tool" or "reasoning")."""
    return bool(parser) and parser in FORMATS[fmt]["readers"][kind]


def all_markup():
    """Every format's markup: none of it belongs in an answer's content, whatever the model."""
    return tuple(m for fmt in sorted(FORMATS) for m in FORMATS[fmt]["markup"])


def _k3_type(value):
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    kinds = {str: "string", float: "number", dict: "object", list: "array", type(None): "null"}
    return kinds.get(type(value), "string")


def _attr(value):
    return str(value).replace("&", "&amp;").replace('"', "&quot;")  # the encoder escapes attribute values


def tool_markup(fmt, calls):
    """The tool calls ([{id, function: {name, arguments (JSON text)}}]) as the model writes them."""
    if fmt == "k2":  # Kimi's native id (functions.NAME:N) heads each call
        return K2_TOOLS_OPEN + "".join(
            "%s%s%s%s%s" % (K2_CALL_OPEN, c["id"], K2_CALL_ARGS, c["function"]["arguments"], K2_CALL_CLOSE)
            for c in calls) + K2_TOOLS_CLOSE
    parts = [K3_TOOLS_OPEN]
    for index, call in enumerate(calls):
        parts.append('%scall tool="%s" index="%d"%s' % (K3_OPEN, _attr(call["function"]["name"]), index + 1, K3_SEP))
        try:
            arguments = json.loads(call["function"]["arguments"])
        except ValueError:  # broken arguments: written as one raw string
            arguments = {"arguments": call["function"]["arguments"]}
        for key, value in (arguments.items() if isinstance(arguments, dict) else [("arguments", arguments)]):
            kind = _k3_type(value)  # a string is written raw, any other type as JSON
            parts.append('%sargument key="%s" type="%s"%s%s%s' % (
                K3_OPEN, _attr(key), kind, K3_SEP, value if kind == "string" else json.dumps(value),
                K3_CLOSE + "argument" + K3_SEP))
        parts.append(K3_CLOSE + "call" + K3_SEP)
    return "".join(parts) + K3_TOOLS_CLOSE


def generated(fmt, reasoning, answer, calls=()):
    """The whole text a model of format `fmt` writes for a turn (what an engine without its parsers returns)."""
    if fmt == "k2":
        return ("%s%s%s" % (K2_THINK_OPEN, reasoning, K2_THINK_CLOSE) if reasoning else "") + answer + (
            tool_markup(fmt, calls) if calls else "")
    # K3: think, then response, then tools (the channel grammar puts response before tools), then the message close
    return ((K3_THINK_OPEN + reasoning + K3_THINK_CLOSE if reasoning else "") + K3_RESPONSE_OPEN + answer
            + K3_RESPONSE_CLOSE + (tool_markup(fmt, calls) if calls else "") + K3_MESSAGE_CLOSE)


def after_think(fmt_or_none, content):
    """The content after the think block (a deployment without a reasoning parser: the answer follows it)."""
    for fmt in ([fmt_or_none] if fmt_or_none else sorted(FORMATS)):
        close = FORMATS[fmt]["think"][1]
        if close in content:
            content = content.split(close)[-1]
    if K3_RESPONSE_OPEN in content:  # K3's answer is the response channel
        content = content.split(K3_RESPONSE_OPEN, 1)[1].split(K3_RESPONSE_CLOSE)[0]
    return content
