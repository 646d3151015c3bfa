"""tests/harness/junit_counts.py: how tests/run-all.sh counts a junit file, a skip failing the run unless
tests/skips.txt lists it with a reason."""
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HARNESS = os.path.join(ROOT, "tests", "harness")
if HARNESS not in sys.path:
    sys.path.insert(0, HARNESS)
import junit_counts  # noqa: E402  pylint: disable=wrong-import-position

# Five cases as pytest writes them: a pass, a failure, a listed skip, an unlisted skip, and a skipped parameter of a
# class's test (a pattern allows it).
JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" errors="0" failures="1" skipped="3" tests="5">
<testcase classname="tests.unit.test_junit_counts" name="test_passes" time="0.1"/>
<testcase classname="tests.unit.test_junit_counts" name="test_fails" time="0.1">
  <failure message="assert 1 == 2">long text</failure></testcase>
<testcase classname="tests.unit.test_junit_counts" name="test_listed" time="0.0">
  <skipped type="pytest.skip" message="this machine has /dev/infiniband">x.py:3: ...</skipped>
</testcase>
<testcase classname="tests.unit.test_junit_counts" name="test_unlisted" time="0.0">
  <skipped type="pytest.skip" message="no .venv-router: run make router-client">...</skipped></testcase>
<testcase classname="tests.unit.test_junit_counts.TestGroup" name="test_param[vllm]" time="0.0">
  <skipped type="pytest.skip" message="no vllm here">...</skipped></testcase>
</testsuite></testsuites>
"""
SKIPS = """# allowed skips
tests/unit/test_junit_counts.py::test_listed: needs a machine without /dev/infiniband

tests/unit/test_junit_counts.py::TestGroup::test_param[*]: each engine's client, where it is installed
"""
ME = "tests/unit/test_junit_counts.py"


@pytest.fixture
def files(tmp_path):
    junit, skips = tmp_path / "pytest.xml", tmp_path / "skips.txt"
    junit.write_text(JUNIT, encoding="utf-8")
    skips.write_text(SKIPS, encoding="utf-8")
    return junit, skips


def test_an_unlisted_skip_is_a_failure_and_a_listed_one_a_skip(files):
    junit, skips = files
    allowed, problems = junit_counts.read_allowed(str(skips))
    assert problems == [] and len(allowed) == 2
    result = junit_counts.count(str(junit), allowed)
    assert (result["passed"], result["failed"], result["skipped"]) == (1, 2, 2)
    assert result["skips"] == [
        (ME + "::test_listed", "this machine has /dev/infiniband", "needs a machine without /dev/infiniband"),
        (ME + "::TestGroup::test_param[vllm]", "no vllm here", "each engine's client, where it is installed")]
    assert result["failures"] == [
        ME + "::test_fails: assert 1 == 2",
        ME + "::test_unlisted: skipped, and not listed in tests/skips.txt (list it there with a reason, or make it "
             "run): no .venv-router: run make router-client"]


def test_without_the_list_every_skip_fails(files):
    junit, _skips = files
    result = junit_counts.count(str(junit), [])
    assert (result["passed"], result["failed"], result["skipped"]) == (1, 4, 0)


def test_an_entry_without_a_reason_is_an_error_and_allows_nothing(tmp_path, files):
    junit, _skips = files
    bad = tmp_path / "bad.txt"
    bad.write_text("# header\n%s::test_listed\n%s::test_unlisted:   \n" % (ME, ME), encoding="utf-8")
    allowed, problems = junit_counts.read_allowed(str(bad))
    assert allowed == [] and len(problems) == 2
    assert problems[0].endswith("bad.txt:2: an allowed skip needs `<test id or pattern>: <reason>`, got "
                                "'%s::test_listed'" % ME)
    check = subprocess.run([sys.executable, os.path.join(HARNESS, "junit_counts.py"), "--check", str(bad)],
                           capture_output=True, text=True, check=False)
    assert check.returncode == 1 and check.stderr.count("an allowed skip needs") == 2
    assert junit_counts.count(str(junit), allowed)["failed"] == 4
    assert junit_counts.main(["--check", os.path.join(ROOT, "tests", "skips.txt")]) == 0  # the project's own list


def test_run_all_counts_with_it(tmp_path, files):
    """run-all.sh's count_junit (taken from the script as it is): the totals, and the lines printed at the end."""
    junit, skips = files
    with open(os.path.join(ROOT, "tests", "run-all.sh"), encoding="utf-8") as handle:
        script = handle.read()
    function = script[script.index("count_junit() {"):]
    function = function[:function.index("\n}\n") + 3]
    out = tmp_path / "out"
    out.mkdir()
    (tmp_path / "tests" / "harness").mkdir(parents=True)
    os.symlink(os.path.join(HARNESS, "junit_counts.py"), tmp_path / "tests" / "harness" / "junit_counts.py")
    os.symlink(skips, tmp_path / "tests" / "skips.txt")
    shell = "set -u; out=%s; passed=0 failed=0 skipped=0\n%s\ncount_junit %s\ncount_junit %s\n" \
            "echo \"$passed $failed $skipped\"" % (out, function, junit, tmp_path / "missing.xml")
    done = subprocess.run(["bash", "-c", shell], cwd=tmp_path, capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["1", "3", "2"]  # the missing file: one failure
    failed = (out / "failed.txt").read_text(encoding="utf-8")
    assert "::test_unlisted: skipped, and not listed in tests/skips.txt" in failed
    assert "missing.xml: no junit results" in failed
    assert (out / "skipped.txt").read_text(encoding="utf-8").splitlines() == [
        ME + "::test_listed: this machine has /dev/infiniband (allowed: needs a machine without /dev/infiniband)",
        ME + "::TestGroup::test_param[vllm]: no vllm here (allowed: each engine's client, where it is installed)"]


def test_an_id_is_pytests_node_id():
    assert junit_counts.node_id("tests.unit.test_junit_counts", "test_x[a.b]") == ME + "::test_x[a.b]"
    assert junit_counts.node_id("tests.unit.test_junit_counts.TestY", "test_x") == ME + "::TestY::test_x"
    assert junit_counts.node_id("no.such.module", "test_x") == "no.such.module::test_x"
