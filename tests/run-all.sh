#!/usr/bin/env bash
# The README's test command (`make test`) and what CI runs: every suite, even after a failure, then a timing
# table and one closing line `summary: N passed, N failed, N skipped` that counts pytest cases, molecule scenarios and
# the single-result checks (lint, sanity, build). A skipped pytest case is a failure unless tests/skips.txt lists it
# with a reason (tests/harness/junit_counts.py counts the junit files; `skipped` counts only the listed ones).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 1
export PATH=$root/.venv/bin:$PATH ANSIBLE_CONFIG=$root/ansible.cfg PY_COLORS=0 ANSIBLE_NOCOLOR=1
out=$root/build/test-results
mkdir -p "$out"
passed=0 failed=0 skipped=0
: >"$out/skipped.txt"
: >"$out/failed.txt"
declare -a rows=()

run() {  # run NAME COMMAND...: one check, timed, counted as one result
  local name=$1 start=$SECONDS rc
  shift
  echo "=== $name: $*"
  "$@"
  rc=$?
  rows+=("$(printf '%-22s %6ss  %s' "$name" $((SECONDS - start)) "$([ $rc != 0 ] && echo "FAILED (rc=$rc)" || echo ok)")")
  if [ $rc != 0 ]; then failed=$((failed + 1)); else passed=$((passed + 1)); fi
  return $rc
}

count_junit() {  # add a junit file's cases to the totals; its skipped and failed cases, with their reasons, to
  # $out/skipped.txt and $out/failed.txt (printed again at the very end: CI keeps only the end of the output). A skip
  # tests/skips.txt does not list is a failed case.
  local counts p f k
  counts=$(python3 tests/harness/junit_counts.py "$1" "$out/skipped.txt" "$out/failed.txt" --allowed tests/skips.txt)
  read -r p f k <<<"$counts"
  if ! [[ "$p $f $k" =~ ^[0-9]+\ [0-9]+\ [0-9]+$ ]]; then  # the counter itself failed: one failure
    echo "$1: tests/harness/junit_counts.py could not count it" >>"$out/failed.txt"
    p=0 f=1 k=0
  fi
  passed=$((passed + p)); failed=$((failed + f)); skipped=$((skipped + k))
}

junit_result() {  # junit_result NAME JUNIT RC SECONDS [WHAT]: a runner's row, and its cases counted from its junit file
  local name=$1 junit=$2 rc=$3 secs=$4 what=${5:-ok}
  rows+=("$(printf '%-22s %6ss  %s' "$name" "$secs" "$([ "$rc" = 0 ] && echo "$what" || echo "FAILED (rc=$rc)")")")
  count_junit "$junit"  # a missing file counts as one failure
  # A runner that fails without reporting a failed case (collection error, crash) still counts as a failure.
  if [ "$rc" != 0 ] && [ -f "$junit" ] && ! grep -q '<failure\|<error' "$junit"; then failed=$((failed + 1)); fi
}

suite() {  # suite NAME JUNIT COMMAND...: a runner whose cases are counted from its junit file
  local name=$1 junit=$2 start=$SECONDS rc
  shift 2
  echo "=== $name: $*"
  rm -f "$junit"
  "$@"
  rc=$?
  junit_result "$name" "$junit" $rc $((SECONDS - start))
}

build_and_install() {  # the built tarball installs, its plugins load and its playbooks run by name from the install
  local tmp
  tmp=$(mktemp -d)
  ansible-galaxy collection build --force --output-path "$tmp" . >/dev/null &&
    ansible-galaxy collection install --offline --force -p "$tmp/installed" "$tmp"/kimi-deploy-*.tar.gz >/dev/null &&
    ANSIBLE_COLLECTIONS_PATH=$tmp/installed ansible-doc -t filter kimi.deploy.deployment >/dev/null &&
    (cd "$tmp" && env -u ANSIBLE_CONFIG ANSIBLE_COLLECTIONS_PATH="$tmp/installed" ansible-playbook kimi.deploy.plan \
      -e quant=int4 -e engine=sglang -e @"$root/tests/fixtures/gpus/rtx-pro-6000-x8.json" | grep 'identity: int4-sglang' >/dev/null) &&
    (cd "$tmp" && env -u ANSIBLE_CONFIG ANSIBLE_COLLECTIONS_PATH="$tmp/installed" ansible-playbook kimi.deploy.site \
      -i localhost, --syntax-check >/dev/null)
  # what the tarball holds: tests/unit/test_release.py (an allow-list)
  local rc=$?
  rm -rf "$tmp"
  return $rc
}

declare -a bg_names=()
declare -A bg_counted=()
background() {  # background [--check] NAME COMMAND...: started now, beside the static checks; join collects it.
  # A --check is a check (counted as one result, like run); without it, a setup step (not counted, but a failure is).
  local counted=0 name
  if [ "$1" = --check ]; then counted=1; shift; fi
  name=$1
  shift
  echo "=== $name (beside the static checks; log: build/test-results/setup-$name.log): $*"
  (t=$SECONDS; "$@" >"$out/setup-$name.log" 2>&1; echo "$? $((SECONDS - t))" >"$out/setup-$name.rc") &
  bg_names+=("$name")
  bg_counted[$name]=$counted
}
join() {  # wait for the background steps: each gets its row; a failed one counts, with its log's tail
  local name rc secs what
  wait
  for name in "${bg_names[@]}"; do
    read -r rc secs <"$out/setup-$name.rc" 2>/dev/null || { rc=1 secs="?"; }
    what="ok (setup beside the static checks, not counted)"
    if [ "${bg_counted[$name]}" = 1 ]; then
      what="ok (beside the static checks)"
      [ "$rc" = 0 ] && passed=$((passed + 1))
    fi
    rows+=("$(printf '%-22s %6ss  %s' "$name" "$secs" "$([ "$rc" = 0 ] && echo "$what" || echo "FAILED (rc=$rc)")")")
    if [ "$rc" != 0 ]; then
      failed=$((failed + 1))
      echo "=== $name FAILED (rc=$rc); the end of its log:"
      tail -n 30 "$out/setup-$name.log"
    fi
  done
}

# What the static checks do not need is set up beside them: the test images (prepare.sh: mmdebstrap, docker builds)
# and the client virtualenvs (mostly downloads): the benchmark client (aiperf in .venv-bench; the bench tests and the
# e2e's bench gate), the PD routers (.venv-router) and the documentation toolchain (.venv-docs; the docs site test).
rm -f "$out"/setup-*
background prepare tests/harness/prepare.sh
# ansible-test sanity (~3 min of one core) beside ansible-lint: each mostly uses one core.
background --check sanity tests/sanity.sh
background clients bash -c 'make --no-print-directory bench-client && make --no-print-directory router-client &&
  make --no-print-directory docs-venv'
run skips-list python3 tests/harness/junit_counts.py --check tests/skips.txt
run yamllint yamllint --strict .
run ansible-lint ansible-lint --profile production
run changelog bash -c 'antsibull-changelog lint && antsibull-changelog lint-changelog-yaml changelogs/changelog.yaml'
run build-install build_and_install
join
# Two workers (pytest-xdist): most cases run ansible-playbook, one process each; on two cores 7 min against 9 alone.
suite pytest "$out/pytest.xml" pytest -q -p no:cacheprovider -n "${KIMI_PYTEST_WORKERS:-2}" --junitxml="$out/pytest.xml" \
  tests/unit tests/integration

# The molecule scenarios and the e2e (make demo end to end, the README's first command, on its own demo host:
# completion through Caddy, 401, idempotence, the --check --diff plan, switches, NVFP4 building its image,
# demo-clean), two at a time, longest first (tests/harness/run-molecule.sh): neither lane idles while the other works.
# On the 2-core CI machine fleet and pd together took 1158 s against 762 + 592 s one after the other; a no-op make demo
# beside one scenario took 120 s against 76 s alone. KIMI_TEST_JOBS=1 runs them one after the other.
start=$SECONDS
rm -f "$out/e2e.xml"
KIMI_TEST_E2E_JUNIT=$out/e2e.xml KIMI_TEST_SKIP_PREPARE=1 KIMI_TEST_JOBS=${KIMI_TEST_JOBS:-2} \
  tests/harness/run-molecule.sh 2>&1 | tee "$out/molecule.log"
e2e_rc=1 e2e_secs=0
read -r e2e_rc e2e_secs <"${KIMI_TEST_CACHE:-$root/.cache/kimi-test}/logs/result-e2e" 2>/dev/null
junit_result e2e-demo "$out/e2e.xml" "$e2e_rc" "$e2e_secs" "ok (in a lane)"
mol=$(grep -E '^molecule: [0-9]+ passed, [0-9]+ failed' "$out/molecule.log" | tail -1)
if [ -n "$mol" ]; then
  mp=$(sed -E 's/^molecule: ([0-9]+) passed.*/\1/' <<<"$mol"); mf=$(sed -E 's/.* ([0-9]+) failed.*/\1/' <<<"$mol")
else
  mp=0 mf=1
fi
passed=$((passed + mp)); failed=$((failed + mf))
for result in "${KIMI_TEST_CACHE:-$root/.cache/kimi-test}"/logs/result-*; do  # a failed scenario's last error line
  s=${result##*/result-}
  [ "$s" = e2e ] || [ ! -f "$result" ] || [ "$(cut -d' ' -f1 <"$result")" = 0 ] && continue
  # the last failure not ignored (its fatal line and msg), and molecule's own CRITICAL lines (idempotence, converge)
  why=$(python3 - "${result%/*}/molecule-$s.log" <<'PY' 2>/dev/null
import re, sys
blocks, cur = [], None
for line in open(sys.argv[1], errors="replace"):
    if re.match(r"(fatal|failed): \[", line):
        cur = [line]; blocks.append(cur)
    elif cur is not None and (line.startswith(("TASK [", "PLAY ", "RUNNING HANDLER")) or not line.strip()):
        cur = None
    elif cur is not None:
        cur.append(line)
real = [b for b in blocks if not any("...ignoring" in l for l in b)]
critical = [l for l in open(sys.argv[1], errors="replace") if "CRITICAL" in l and "glob failed" not in l]
print(" ".join(" ".join((real[-1] if real else [])[:12] + critical[-2:]).split()))
PY
)
  echo "molecule/$s: ${why:0:600}" >>"$out/failed.txt"
done
rows+=("$(printf '%-22s %6ss  %s' molecule $((SECONDS - start)) "$mp passed, $mf failed")")

echo
echo "=== timings (also in build/test-results/timings.txt)"
{ printf '%s\n' "${rows[@]}"; printf '%-22s %6ss\n' total "$SECONDS"; } | tee "$out/timings.txt"
if [ "$skipped" -gt 0 ]; then
  echo
  echo "=== skipped ($skipped, each allowed by tests/skips.txt), with their reasons"
  cat "$out/skipped.txt"
fi
if [ -s "$out/failed.txt" ]; then
  echo
  echo "=== failed cases, with the start of their messages (whole logs: build/test-results, .cache/kimi-test/logs)"
  cat "$out/failed.txt"
fi
echo "summary: $passed passed, $failed failed, $skipped skipped"
[ "$failed" = 0 ]
