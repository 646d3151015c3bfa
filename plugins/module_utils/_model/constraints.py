# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The constraint of a site input, declared beside it in _model.site_inputs.INPUTS (stdlib only). Private to
kimi.deploy.

Each constraint checks a value the way a user sets it (inventory YAML, or -e, where every value is a string) and
refuses with the one line every input refusal has: "<variable>=<value> is not allowed: <why>. Allowed values: ...".
It knows nothing of other inputs or the hardware: what depends on those (an engine's KV dtype menu, a layout that
fits) is the deployment model's, which runs after the table's check, on the same call of kimi.deploy.deployment.

edges() gives values at and just past the constraint's edges ((accepted, refused)): the table test drives them, and
the hostile classes (wrong type, empty, huge, control characters), through the one check path.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import math
import os
import re

# pylint: disable=unused-import
from ansible_collections.kimi.deploy.plugins.module_utils._common import (  # noqa: F401 (re-exported)
    CONTROL_RE, MAX_TEXT, DeploymentError, control_name, refuse, refuse_control as check_no_control)
# pylint: enable=unused-import

# Ansible's boolean spellings (ansible.module_utils.parsing.convert_bool), as -e and the inventory give them.
TRUE = ("y", "yes", "on", "1", "true", "t")
FALSE = ("n", "no", "off", "0", "false", "f")


def number(value, kind):
    """An int or float from a number or its text (-e gives text); None when it is neither (bools are not numbers)."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        parsed = value
    elif isinstance(value, str) and value.strip():
        try:
            parsed = int(value.strip()) if kind is int else float(value.strip())
        except ValueError:
            return None
    else:
        return None
    if kind is int:
        if isinstance(parsed, float):
            return int(parsed) if parsed.is_integer() else None
        return parsed
    parsed = float(parsed)
    return parsed if math.isfinite(parsed) else None


class Constraint(object):
    """A value's constraint. empty: whether None or '' is a value (unset: the model or the role picks)."""
    kind = "scalar"
    empty = False
    auto = False  # "auto" is unset too (the deployment model's fields: _model.inputs.is_unset)

    def allowed(self):
        raise NotImplementedError

    def check(self, variable, value, ctx=None):
        if self.auto and value == "auto":
            return value
        if value is None or (isinstance(value, str) and value.strip() == ""):
            if self.empty:
                return value
            refuse(variable, value, self.allowed(), "it is empty; leave it unset instead")
        check_no_control(variable, value)
        return self._check(variable, value, ctx or {})

    def _check(self, variable, value, ctx):
        raise NotImplementedError

    def edges(self):
        return [], []

    def describe(self):
        return "; ".join(self.allowed())


class Number(Constraint):
    """An int (or float) from `low` to `high`; open ends exclude their bound."""

    def __init__(self, kind, low=None, high=None, low_open=False, high_open=False, empty=False, unit=""):
        self.type, self.low, self.high, self.low_open, self.high_open = kind, low, high, low_open, high_open
        self.empty, self.unit = empty, unit

    def allowed(self):
        what = "an integer" if self.type is int else "a number"
        lows = "" if self.low is None else ("above %s" if self.low_open else "from %s") % self.low
        highs = "" if self.high is None else ("below %s" if self.high_open else "to %s") % self.high
        if lows and highs and not self.low_open and not self.high_open:
            span = "from %s to %s" % (self.low, self.high)
        else:
            span = ", ".join(s for s in (lows, highs) if s)
        return ["%s%s%s" % (what, (" " + span) if span else "", (" " + self.unit) if self.unit else "")]

    def _check(self, variable, value, ctx):
        checked = number(value, self.type)
        if checked is None:
            refuse(variable, value, self.allowed())
        if self.low is not None and (checked < self.low or (self.low_open and checked == self.low)):
            refuse(variable, value, self.allowed())
        if self.high is not None and (checked > self.high or (self.high_open and checked == self.high)):
            refuse(variable, value, self.allowed())
        return checked

    def edges(self):
        step = 1 if self.type is int else 0.01
        good, bad = [], ["abc", "1e999", True, "nan"]
        for bound, is_open, sign in ((self.low, self.low_open, -1), (self.high, self.high_open, 1)):
            if bound is None:
                continue
            (bad if is_open else good).append(bound)
            bad.append(bound + sign * step)
            good.append(bound - sign * step if self.type is float or not is_open else bound - sign)
        if self.type is int:
            bad.append("1.5")
        return good, bad


def Int(low=None, high=None, **kw):
    return Number(int, low, high, **kw)


def Float(low=None, high=None, **kw):
    return Number(float, low, high, **kw)


class Bool(Constraint):
    def allowed(self):
        return ["true", "false"]

    def _check(self, variable, value, ctx):
        if isinstance(value, bool):
            return value
        if isinstance(value, int) and value in (0, 1):
            return bool(value)
        if isinstance(value, str) and value.strip().lower() in TRUE + FALSE:
            return value.strip().lower() in TRUE
        refuse(variable, value, self.allowed())

    def edges(self):
        return [True, False, "yes", "false"], ["maybe", 2, "truee", [True]]


class Choice(Constraint):
    def __init__(self, choices, empty=False):
        self.choices, self.empty = tuple(choices), empty

    def allowed(self):
        return list(self.choices)

    def _check(self, variable, value, ctx):
        if not isinstance(value, str) or value not in self.choices:
            refuse(variable, value, self.allowed())
        return value

    def edges(self):
        return list(self.choices), [self.choices[0].upper() + "x", self.choices[0] + " ", 1]


class Text(Constraint):
    """A string matched in full by `pattern` (a trailing newline never slips through), at most `longest` long."""

    def __init__(self, pattern, what, longest=255, empty=False, good=(), bad=()):
        self.pattern, self.what, self.longest, self.empty = re.compile(pattern), what, longest, empty
        self.good, self.bad = tuple(good), tuple(bad)

    def allowed(self):
        return ["%s (at most %d characters)" % (self.what, self.longest)]

    def _check(self, variable, value, ctx):
        if isinstance(value, int) and not isinstance(value, bool):
            value = str(value)
        if not isinstance(value, str) or len(value) > self.longest or self.pattern.fullmatch(value) is None:
            refuse(variable, value, self.allowed())
        return value

    def edges(self):
        return list(self.good), list(self.bad) + ["x" * (self.longest + 1), ["a"], {"a": 1}]


# systemd's time units (src/basic/time-util.c, parse_time's table), in seconds; case matters (M months, m minutes).
TIME_UNITS = {"usec": 1e-6, "us": 1e-6, u"\u00b5s": 1e-6, u"\u03bcs": 1e-6, "nsec": 1e-9, "ns": 1e-9,
              "msec": 1e-3, "ms": 1e-3, "seconds": 1, "second": 1, "sec": 1, "s": 1, "minutes": 60, "minute": 60,
              "min": 60, "m": 60, "hours": 3600, "hour": 3600, "hr": 3600, "h": 3600, "days": 86400, "day": 86400,
              "d": 86400, "weeks": 604800, "week": 604800, "w": 604800, "months": 2629800, "month": 2629800,
              "M": 2629800, "years": 31557600, "year": 31557600, "y": 31557600}
TIME_PART_RE = re.compile(u"\\s*([0-9]+(?:\\.[0-9]*)?|\\.[0-9]+)\\s*([A-Za-z\u00b5\u03bc]*)")


def timespan_seconds(text):
    """Seconds of a systemd time span ("15min", "1h 30min", "90", "2.5h"; a bare number is seconds), parsed the way
    systemd parses a timer's OnUnitActiveSec; None when systemd would not parse it (then it ignores the line)."""
    if not isinstance(text, str) or not text.strip():
        return None
    total, at, end = 0.0, 0, len(text.rstrip())
    while at < end:
        match = TIME_PART_RE.match(text, at)
        if not match or match.end() == at:
            return None
        unit = match.group(2)
        if unit and unit not in TIME_UNITS:
            return None
        total += float(match.group(1)) * TIME_UNITS.get(unit, 1)
        at = match.end()
    return total


class TimeSpan(Constraint):
    """A systemd time span from `low` to `high` seconds; empty where `empty` (the feature is off)."""

    def __init__(self, low, high, empty=False, off=""):
        self.low, self.high, self.empty, self.off = low, high, empty, off

    def allowed(self):
        return ["a systemd time span from %s to %s (e.g. 15min, 1h 30min, 90s)" % (_span(self.low), _span(self.high))
                ] + (["empty (%s)" % self.off] if self.empty else [])

    def _check(self, variable, value, ctx):
        seconds = timespan_seconds(value) if isinstance(value, str) else None
        if seconds is None:
            refuse(variable, value, self.allowed(), "systemd would not parse it as a time span (it ignores such a "
                   "line, silently)")
        if not self.low <= seconds <= self.high:
            refuse(variable, value, self.allowed(), "%s is outside the range" % _span(seconds))
        return value

    def edges(self):
        return ([_span(self.low), _span(self.high), "1h 30min", "2.5h", " 15min"],
                ["0", _span(self.low - 1), _span(self.high) + " 1s", "1s;reboot", "15mins", "15 min x", "-5min",
                 "infinity", 900])


def _span(seconds):
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size and seconds % size == 0:
            return "%d%s" % (seconds // size, unit)
    return "%gs" % seconds


class CountOrShare(Constraint):
    """A count (1, 2, ...) or a percentage (10%) of the replicas; `whole` allows 100% (a canary must leave one out)."""

    def __init__(self, what, whole=True):
        self.what, self.whole = what, whole

    def allowed(self):
        top = 100 if self.whole else 99
        return ["a count of %s (1, 2, ...) or a percentage of them from 1%% to %d%%" % (self.what, top)]

    def _check(self, variable, value, ctx):
        parsed = count_or_share(value)
        if parsed is None or (parsed[1] and parsed[0] > (100 if self.whole else 99)) or parsed[0] > 100000:
            refuse(variable, value, self.allowed())
        return value

    def edges(self):
        top = "100%" if self.whole else "99%"
        return [1, "2", "1%", top], [0, "0", "-5", "abc", "0%", "101%" if self.whole else "100%", "1.5", "10 %", True]


COUNT_RE = re.compile(r"([1-9][0-9]*)(%?)")


def count_or_share(value):
    """(number, is_percentage) of a count or percentage setting ("2", 2, "25%"); None when it is neither."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        return None
    match = COUNT_RE.fullmatch(str(value).strip())
    return (int(match.group(1)), bool(match.group(2))) if match else None


class ListOf(Constraint):
    kind = "list"

    def __init__(self, element, shortest=0, longest=64):
        self.element, self.shortest, self.longest = element, shortest, longest

    def allowed(self):
        return ["a list of %d to %d elements, each %s" % (self.shortest, self.longest, self.element.describe())]

    def _check(self, variable, value, ctx):
        if not isinstance(value, (list, tuple)) or not self.shortest <= len(value) <= self.longest:
            refuse(variable, value, self.allowed())
        for number, item in enumerate(value):
            try:
                self.element.check(variable, item, ctx)
            except DeploymentError:
                refuse(variable, value, self.allowed(), "element %d (%r) is not" % (number, item))
        return value

    def edges(self):
        good, bad = self.element.edges()
        good = good or ["x"]
        return ([[g] for g in good[:2]] + ([[]] if self.shortest == 0 else []),
                [[b] for b in bad[:3]] + ["a string", [good[0]] * (self.longest + 1)] +
                ([[]] if self.shortest else []))


class Mapping(Constraint):
    """A dict; its contents are the deployment model's to check (`by`)."""
    kind = "dict"

    def __init__(self, by, empty=False):
        self.by, self.empty = by, empty

    def allowed(self):
        return ["a mapping (%s)" % self.by]

    def _check(self, variable, value, ctx):
        if not isinstance(value, dict):
            refuse(variable, value, self.allowed())
        return value

    def edges(self):
        return [{}], ["a string", [1], 5]


class ControllerPath(Constraint):
    """A path on the controller: `must` is "file" (an existing regular file), "dir" (an existing folder) or None
    (any path; it is made when needed). Relative paths are read from where ansible-playbook runs (ctx["cwd"]) or
    the playbook's folder (ctx["playbook_dir"]), as Ansible's lookups find them."""

    def __init__(self, must="file", hint="", empty=False):
        self.must, self.hint, self.empty = must, hint, empty

    def allowed(self):
        return {"file": ["the path of an existing file on the controller"],
                "dir": ["the path of an existing folder on the controller"]}.get(self.must, ["a path"]) + (
                    ["empty (the default)"] if self.empty else [])

    def _check(self, variable, value, ctx):
        if not isinstance(value, str):
            refuse(variable, value, self.allowed())
        if self.must:
            found = locate(value, ctx)
            test = os.path.isfile if self.must == "file" else os.path.isdir
            if found is None or not test(found):
                refuse(variable, value, self.allowed(), "there is no such %s on the controller%s"
                       % ("file" if self.must == "file" else "folder", self.hint))
            return found
        return value

    def edges(self):
        return ([__file__] if self.must == "file" else ["/"] if self.must == "dir" else ["/tmp/x", "relative/x"],
                (["/nonexistent/kimi-deploy-probes.yml", 5, ["a"]] if self.must else [5, ["a"]]))


def locate(path, ctx):
    """A controller path as Ansible's lookups find it: absolute, else under ctx's cwd, then playbook_dir."""
    path = os.path.expanduser(path)
    if os.path.isabs(path):
        return path if os.path.exists(path) else None
    for base in (ctx.get("cwd") or os.getcwd(), ctx.get("playbook_dir")):
        if base and os.path.exists(os.path.join(base, path)):
            return os.path.join(base, path)
    return None


class Checked(Constraint):
    """A value whose form depends on other inputs or the hardware: the deployment model checks it on every call
    (`by` says where), after the table's generic checks (control characters, length). `bad` are values it refuses
    in any context; the table test drives them through the model."""

    def __init__(self, by, kind="scalar", bad=(), empty=True):
        self.by, self.kind, self.bad, self.empty = by, kind, tuple(bad), empty

    def allowed(self):
        return ["as %s allows" % self.by]

    def _check(self, variable, value, ctx):
        return value

    def edges(self):
        return [], list(self.bad)


class ProbeFile(ControllerPath):
    """A probe file on the controller: it exists, parses as YAML and holds at least one case of the probe format
    (_accuracy.load, the loader the gate and the serving-time probe use)."""

    def __init__(self):
        super(ProbeFile, self).__init__("file", empty=True)

    def allowed(self):
        return ["an existing file on the controller in the probe format (roles/kimi_probes/files/kimi-k26-probes.yml;"
                " at least one case)", "empty (none)"]

    def _check(self, variable, value, ctx):
        found = super(ProbeFile, self)._check(variable, value, ctx)
        # Controller only (PyYAML comes with Ansible); lazy, so that the table stays importable anywhere.
        import yaml
        from ansible_collections.kimi.deploy.plugins.module_utils import _accuracy
        try:
            with open(found) as handle:
                _accuracy.load(yaml.safe_load(handle), "the file")
        except (OSError, yaml.YAMLError) as exc:
            refuse(variable, value, self.allowed(), "it cannot be read as YAML: %s" % " ".join(str(exc).split()))
        except _accuracy.ProbeError as exc:
            refuse(variable, value, self.allowed(), str(exc))
        return found

    def edges(self):
        return [], ["/nonexistent/kimi-deploy-probes.yml", __file__, 5]
