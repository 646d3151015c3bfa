"""Count a pytest junit file's cases for tests/run-all.sh, against the skips the project allows (tests/skips.txt).

    junit_counts.py JUNIT SKIPPED_OUT FAILED_OUT [--allowed tests/skips.txt]   # prints "passed failed skipped"
    junit_counts.py --check tests/skips.txt                                    # exit 1 when the list is malformed

A skipped case passes the run only when tests/skips.txt lists it, with a reason; any other skip is a failure (a
missing tool, client virtualenv or data file that skips a check would otherwise pass unseen). Each skipped case goes
to SKIPPED_OUT (listed) or FAILED_OUT (not listed) with its own reason; each failed or errored case to FAILED_OUT. An
unreadable junit file counts as one failure.

tests/skips.txt: `#` comments and blank lines, else one line per allowed skip, `<test id or pattern>: <reason>`. A test
id is pytest's node id (tests/unit/test_x.py::test_y[param], the form this script prints); `*` in a pattern matches any
text, every other character only itself. An entry without a reason is an error (--check fails, and it allows nothing).
Stdlib only.
"""
import os
import re
import sys
import xml.etree.ElementTree as ET

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))


def read_allowed(path):
    """([(pattern, reason, regex)], [problem]) of a skips file; a missing file allows nothing."""
    allowed, problems = [], []
    if not path or not os.path.exists(path):
        return allowed, problems
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            text = line.strip()
            if not text or text.startswith("#"):
                continue
            pattern, sep, reason = text.partition(": ")
            pattern, reason = pattern.strip(), reason.strip()
            if not sep or not reason or not pattern:
                problems.append("%s:%d: an allowed skip needs `<test id or pattern>: <reason>`, got %r" % (
                    path, number, text))
                continue
            regex = re.compile("^%s$" % ".*".join(re.escape(part) for part in pattern.split("*")))
            allowed.append((pattern, reason, regex))
    return allowed, problems


def node_id(classname, name, root=ROOT):
    """pytest's node id of a junit case: the longest dotted prefix of classname that is a .py file under root is the
    file (tests.unit.test_x.TestY -> tests/unit/test_x.py::TestY), else the classname as it is."""
    parts = classname.split(".") if classname else []
    for cut in range(len(parts), 0, -1):
        path = "/".join(parts[:cut]) + ".py"
        if os.path.isfile(os.path.join(root, path)):
            return "::".join([path] + parts[cut:] + [name])
    return "%s::%s" % (classname, name) if classname else name


def one_line(text, limit):
    return " ".join((text or "").split())[:limit]


def count(junit, allowed, root=ROOT):
    """{"passed", "failed", "skipped", "skips": [(id, why, listed reason)], "failures": [line]} of a junit file:
    a skip is counted as skipped when an allowed pattern matches its id, else as a failure."""
    try:
        tree = ET.parse(junit).getroot()
    except (OSError, ET.ParseError) as exc:
        return {"passed": 0, "failed": 1, "skipped": 0, "skips": [],
                "failures": ["%s: no junit results (%s)" % (junit, one_line(str(exc), 200))]}
    suites = [tree] if tree.tag == "testsuite" else tree.findall("testsuite")
    total = sum(int(s.get("tests", 0)) for s in suites)
    bad = sum(int(s.get("failures", 0)) + int(s.get("errors", 0)) for s in suites)
    result = {"skips": [], "failures": []}
    unlisted = 0
    for case in tree.iter("testcase"):
        case_id = node_id(case.get("classname", ""), case.get("name", ""), root)
        for bad_case in case.findall("failure") + case.findall("error"):
            result["failures"].append("%s: %s" % (case_id, one_line(bad_case.get("message") or bad_case.text, 400)))
        for skip in case.findall("skipped"):
            why = one_line(skip.get("message") or skip.text, 200)
            listed = next((reason for _pattern, reason, regex in allowed if regex.match(case_id)), None)
            if listed is None:
                unlisted += 1
                result["failures"].append("%s: skipped, and not listed in tests/skips.txt (list it there with a "
                                          "reason, or make it run): %s" % (case_id, why))
            else:
                result["skips"].append((case_id, why, listed))
    skipped = len(result["skips"])
    result.update(passed=total - bad - skipped - unlisted, failed=bad + unlisted, skipped=skipped)
    return result


def main(argv):
    if argv[:1] == ["--check"] and len(argv) == 2:
        _allowed, problems = read_allowed(argv[1])
        for problem in problems:
            print(problem, file=sys.stderr)
        return 1 if problems else 0
    if len(argv) not in (3, 5) or (len(argv) == 5 and argv[3] != "--allowed"):
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    junit, skipped_out, failed_out = argv[:3]
    allowed, _problems = read_allowed(argv[4] if len(argv) == 5 else None)  # run-all.sh checks the list on its own
    result = count(junit, allowed)
    with open(skipped_out, "a", encoding="utf-8") as handle:
        for case_id, why, listed in result["skips"]:
            handle.write("%s: %s (allowed: %s)\n" % (case_id, why, listed))
    with open(failed_out, "a", encoding="utf-8") as handle:
        for line in result["failures"]:
            handle.write(line + "\n")
    print(result["passed"], result["failed"], result["skipped"])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
