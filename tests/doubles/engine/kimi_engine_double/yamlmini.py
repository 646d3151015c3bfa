"""YAML for the engine double: PyYAML's safe_load when it is installed, else a small reader of the block YAML the
collection writes (mappings, `- ` lists, scalars, quoted strings, short flow lists/maps, comments).

Not a YAML implementation: anchors, tags, multi-line scalars and documents are refused with an error that says so.
"""
import re

try:  # the real trtllm-serve uses yaml.safe_load
    import yaml as _yaml
except ImportError:  # the double's base image need not have PyYAML
    _yaml = None


class YAMLError(ValueError):
    """A file the reader cannot parse (the real engine fails with yaml.scanner.ScannerError or similar)."""


def safe_load(text):
    if _yaml is not None:
        try:
            return _yaml.safe_load(text)
        except _yaml.YAMLError as e:
            raise YAMLError("%s.%s: %s" % (type(e).__module__, type(e).__name__, e))
    return load_subset(text)


_INT = re.compile(r"^[-+]?(0|[1-9][0-9_]*)$")
_FLOAT = re.compile(r"^[-+]?(\.[0-9]+|[0-9][0-9_]*(\.[0-9_]*)?)([eE][-+]?[0-9]+)?$")
_BOOLS = {"true": True, "yes": True, "on": True, "false": False, "no": False, "off": False}


def _strip_comment(line):
    out, quote = [], None
    for i, ch in enumerate(line):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1] in " \t"):
            break
        out.append(ch)
    return "".join(out).rstrip()


def _split_flow(body):
    items, depth, quote, cur = [], 0, None, ""
    for ch in body:
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
        elif ch == "," and depth == 0:
            items.append(cur)
            cur = ""
            continue
        cur += ch
    if cur.strip():
        items.append(cur)
    return [i.strip() for i in items]


def scalar(text):
    text = text.strip()
    if text == "" or text in ("~", "null", "Null", "NULL"):
        return None
    if text[0] in "&*!|>":
        raise YAMLError("engine double YAML reader: anchors, tags and block scalars are not supported: %r" % text)
    if text[0] in "'\"":
        if len(text) < 2 or text[-1] != text[0]:
            raise YAMLError("while scanning a quoted scalar: found unexpected end of stream: %r" % text)
        inner = text[1:-1]
        return inner.replace("''", "'") if text[0] == "'" else bytes(inner, "utf-8").decode("unicode_escape")
    if text[0] == "[":
        if text[-1] != "]":
            raise YAMLError("while parsing a flow sequence: expected ',' or ']': %r" % text)
        return [scalar(i) for i in _split_flow(text[1:-1])]
    if text[0] == "{":
        if text[-1] != "}":
            raise YAMLError("while parsing a flow mapping: expected ',' or '}': %r" % text)
        out = {}
        for item in _split_flow(text[1:-1]):
            key, sep, value = item.partition(":")
            if not sep:
                raise YAMLError("while parsing a flow mapping: expected ':': %r" % item)
            out[scalar(key)] = scalar(value)
        return out
    if text.lower() in _BOOLS:
        return _BOOLS[text.lower()]
    if _INT.match(text):
        return int(text.replace("_", ""))
    if _FLOAT.match(text) and any(c.isdigit() for c in text):
        return float(text.replace("_", ""))
    if text.lower() in (".inf", "+.inf"):
        return float("inf")
    return text


def _key_value(text):
    """'key: value' -> (key, value-text) or None when the line is not a mapping entry."""
    m = re.match(r"""^("[^"]*"|'[^']*'|[^'"\[{][^:]*?)\s*:(\s+|$)(.*)$""", text)
    if not m:
        return None
    return scalar(m.group(1)), m.group(3)


def load_subset(text):
    lines = []
    for raw in text.splitlines():
        if raw.strip() in ("---", "...") and not raw.startswith(" "):
            continue
        if "\t" in raw[:len(raw) - len(raw.lstrip())]:
            raise YAMLError("found character '\\t' that cannot start any token")
        line = _strip_comment(raw)
        if line.strip():
            lines.append((len(line) - len(line.lstrip(" ")), line.strip()))
    if not lines:
        return None
    value, pos = _block(lines, 0, lines[0][0])
    if pos != len(lines):
        raise YAMLError("engine double YAML reader: unexpected indentation at %r" % lines[pos][1])
    return value


def _block(lines, pos, indent):
    if lines[pos][1].startswith("- ") or lines[pos][1] == "-":
        return _seq(lines, pos, indent)
    if _key_value(lines[pos][1]) is None:
        if pos + 1 < len(lines) and lines[pos + 1][0] >= indent:
            raise YAMLError("engine double YAML reader: multi-line scalars are not supported: %r" % lines[pos][1])
        return scalar(lines[pos][1]), pos + 1
    return _map(lines, pos, indent)


def _child(lines, pos, indent, rest):
    """The value after 'key:' or '- ': inline, or the indented block that follows (or None)."""
    if rest.strip():
        return scalar(rest), pos
    if pos < len(lines) and lines[pos][0] > indent:
        return _block(lines, pos, lines[pos][0])
    if pos < len(lines) and lines[pos][0] == indent and lines[pos][1].startswith("- "):
        return _seq(lines, pos, indent)  # a list at the same indentation as its key (allowed in YAML)
    return None, pos


def _map(lines, pos, indent):
    out = {}
    while pos < len(lines) and lines[pos][0] == indent:
        kv = _key_value(lines[pos][1])
        if kv is None:
            if lines[pos][1].startswith("- "):
                break
            raise YAMLError("could not find expected ':' at %r" % lines[pos][1])
        key, rest = kv
        out[key], pos = _child(lines, pos + 1, indent, rest)
    if pos < len(lines) and lines[pos][0] > indent:
        raise YAMLError("mapping values are not allowed here: %r" % lines[pos][1])
    return out, pos


def _seq(lines, pos, indent):
    out = []
    while pos < len(lines) and lines[pos][0] == indent and (lines[pos][1].startswith("- ") or lines[pos][1] == "-"):
        rest = lines[pos][1][2:] if lines[pos][1] != "-" else ""
        if _key_value(rest.strip()) is not None:  # "- key: value" starts a mapping item
            inner = indent + 2 + (len(rest) - len(rest.lstrip(" ")))
            sub = [(inner, rest.strip())] + lines[pos + 1:]
            item, used = _map(sub, 0, inner)
            out.append(item)
            pos = pos + used
        else:
            item, pos = _child(lines, pos + 1, indent, rest)
            out.append(item)
    return out, pos
