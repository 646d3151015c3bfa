"""What the engine double answers: a tiny deterministic stand-in for the model's choices, enough for the accuracy probes
(roles/kimi_probes/files/kimi-k26-probes.yml) to score a sound engine 100%, and the knobs that make it wrong the way
real deployments go wrong (issue 38):

- KIMI_DOUBLE_TOOL_ERROR_RATE=<0..1>: that share of tool calls (every 1/rate-th, deterministic) has arguments that break
  the tool's schema - in turn a missing required argument, a wrong type, an enum value that is not allowed - as
  engines and parsers were measured to do (MoonshotAI/K2-Vendor-Verifier).
- KIMI_DOUBLE_THINK_LEAK=1: the reasoning ends up in content, closed by </think> (Kimi-K2.6's template opens the think
  block in the prompt, so a wrong reasoning parser leaves the reasoning and the closing tag in content:
  smg-project/smg#1873).
- KIMI_DOUBLE_GARBAGE_AFTER=<N>: after N chat requests every answer is garbage (repeated tokens, tool arguments that
  are not JSON), as long-running deployments with some layouts were reported to do (sgl-project/sglang#23554).

The model stand-in: a tool is chosen by the words of its name and description found in the last user message (all
such tools when the user asks for several things at once; the first tool when no word points to one; none when the
message says no tool is needed); the
arguments are the schema's examples, or values within its bounds; after a tool result it reports the result; a
product, a sum, an exact echo, a code hidden in a long text and one capital are answered correctly.
"""

import json
import re

STOP = {"with", "from", "that", "this", "there", "into", "each", "have", "your", "their", "about", "what", "when",
        "where", "which", "them", "then", "than", "some", "more", "another", "other"}
NO_TOOL = re.compile(r"\b(no tool|without (using )?any tool|without a tool)\b", re.I)
SEVERAL = re.compile(r"\b(both|at the same time|at once|and also)\b", re.I)
ARITHMETIC = re.compile(r"(-?\d+)\s*(multiplied by|times|plus|minus|\*|\+|-)\s*(-?\d+)", re.I)
ECHO = re.compile(r"repeat exactly[^:]*:\s*(\S+)", re.I)
NEEDLE = re.compile(r"the secret probe code is (\S+?)\.(\s|$)")
FACTS = {"capital of france": "The capital of France is Paris."}


def knob_problems(env):
    """The bad values of this module's knobs."""
    problems = []
    rate = env.get("KIMI_DOUBLE_TOOL_ERROR_RATE", "")
    if rate and not (_number(rate) and 0 <= float(rate) <= 1):
        problems.append("engine double: bad KIMI_DOUBLE_TOOL_ERROR_RATE=%r (use a number from 0 to 1)" % rate)
    leak = env.get("KIMI_DOUBLE_THINK_LEAK", "")
    if leak not in ("", "0", "1"):
        problems.append("engine double: bad KIMI_DOUBLE_THINK_LEAK=%r (use 0 or 1)" % leak)
    after = env.get("KIMI_DOUBLE_GARBAGE_AFTER", "")
    if after and not after.isdigit():
        problems.append("engine double: bad KIMI_DOUBLE_GARBAGE_AFTER=%r (use a whole number >= 0)" % after)
    return problems


def _number(text):
    try:
        float(text)
        return True
    except ValueError:
        return False


def _words(text):
    return set(w for w in re.findall(r"[a-z]+", (text or "").lower()) if len(w) >= 4 and w not in STOP)


def choose_tools(tools, message, choice):
    """The tools the model calls for the last user message: a named or required choice, else by relevance."""
    if isinstance(choice, dict):
        wanted = (choice.get("function") or {}).get("name")
        return [t for t in tools if (t.get("function") or {}).get("name") == wanted][:1] or tools[:1]
    if choice != "required" and NO_TOOL.search(message or ""):
        return []
    said = _words(message)
    scored = []
    for tool in tools:
        fn = tool.get("function") or {}
        words = _words(fn.get("name", "").replace("_", " ") + " " + (fn.get("description") or ""))
        scored.append((len(words & said), tool))
    hits = [tool for score, tool in scored if score > 0]
    if not hits:  # nothing points elsewhere: the first tool offered
        return tools[:1]
    if SEVERAL.search(message or ""):
        return hits
    best = max(score for score, _tool in scored)
    return [next(tool for score, tool in scored if score == best)]


def example_value(schema):
    """A value that the schema accepts: its first example, enum value or const, else one within its bounds."""
    if not isinstance(schema, dict):
        return "example"
    for key in ("examples", "enum"):
        if schema.get(key):
            return schema[key][0]
    if "const" in schema:
        return schema["const"]
    kind = schema.get("type")
    if kind == "object":
        props = schema.get("properties") or {}
        return dict((k, example_value(props[k])) for k in (schema.get("required") or list(props)) if k in props)
    if kind == "array":
        return [example_value(schema.get("items")) for _i in range(max(1, schema.get("minItems", 1)))]
    if kind in ("integer", "number"):
        if "minimum" in schema:
            low = schema["minimum"]
        elif "exclusiveMinimum" in schema:
            low = schema["exclusiveMinimum"] + 1
        else:
            low = 1
        value = min(max(low, 1), schema.get("maximum", max(low, 1)))
        return int(value) if kind == "integer" else float(value)
    if kind == "boolean":
        return True
    return "Paris"


def broken_arguments(schema, turn):
    """Arguments that break the schema, the `turn`-th way: a missing required one, a wrong type, a bad enum value."""
    args = example_value(schema)
    props, required = schema.get("properties") or {}, list(schema.get("required") or [])
    enums = [k for k in props if props[k].get("enum")]
    way = turn % 3
    if way == 0 and required:
        args.pop(required[0], None)
    elif way == 1 and args:
        key = sorted(args)[0]
        args[key] = 7 if isinstance(args[key], str) else "seven"
    elif enums:
        args[enums[0]] = "not-an-allowed-value"
    elif required:
        args.pop(required[0], None)
    return args


def tool_call(tool, index, arguments=None):
    fn = tool.get("function") or {}
    args = example_value(dict(fn.get("parameters") or {}, type="object")) if arguments is None else arguments
    return {"id": "functions.%s:%d" % (fn.get("name", "tool"), index), "type": "function",
            "function": {"name": fn.get("name", "tool"),
                         "arguments": arguments if isinstance(arguments, str) else json.dumps(args)}}


def direct_answer(message, prompt):
    """An answer the stand-in knows (arithmetic, an echo, a hidden code, a fact), or None."""
    echo = ECHO.search(message)
    if echo:
        return echo.group(1)
    if "secret probe code" in message.lower():
        found = NEEDLE.search(prompt)
        return found.group(1) if found else "I cannot find a secret probe code."
    sums = ARITHMETIC.search(message)
    if sums:
        a, op, b = int(sums.group(1)), sums.group(2).lower(), int(sums.group(3))
        return str(a * b if op in ("multiplied by", "times", "*") else a + b if op in ("plus", "+") else a - b)
    for question, answer in FACTS.items():
        if question in message.lower():
            return answer
    return None


def tool_results(messages):
    """The tool results after the last assistant turn (a follow-up), or None."""
    results = []
    for msg in reversed(messages):
        if not isinstance(msg, dict):
            continue
        if msg.get("role") == "tool":
            results.append(str(msg.get("content") or ""))
        else:
            break
    return list(reversed(results)) or None


def garbage():
    return " ".join(["the"] * 12) + " ,,,, ;;;; the the"
