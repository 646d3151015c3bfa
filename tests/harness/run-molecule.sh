#!/usr/bin/env bash
# Run `molecule test` for every scenario in molecule/ (or the ones named), one after the other,
# from the collection root with the project's venv. Continues past a failure, prints a timing
# table and a last line `molecule: N passed, N failed`; exits 1 if any failed.
#
#   tests/harness/run-molecule.sh                 # all scenarios (but demo, which make demo drives)
#   tests/harness/run-molecule.sh harness other   # just these
#
# Environment:
#   KIMI_TEST_SKIP_PREPARE=1   do not call tests/harness/prepare.sh first (it is idempotent, ~2 s when done)
#   KIMI_TEST_QUIET=1          only write the logs (.cache/kimi-test/logs/molecule-<scenario>.log);
#                              the tail of a failed scenario's log is printed
#   KIMI_VENV                  the virtualenv (default .venv; `make setup` makes it)
#   KIMI_TEST_IMAGE, KIMI_TEST_IMAGE_DOCKER   instance images (README.md)
#   MOLECULE_ARGS              extra arguments for `molecule test` (e.g. --destroy=never)
#   KIMI_TEST_JOBS             scenarios run side by side (default 1; make test uses 2), longest first
#   KIMI_TEST_E2E_JUNIT        also run the e2e (pytest tests/e2e: make demo end to end) as one job of the lanes,
#                              its junit file here (make test); its row is in the table, not in the molecule count
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
VENV=${KIMI_VENV:-$ROOT/.venv}
LOGDIR=${KIMI_TEST_CACHE:-$ROOT/.cache/kimi-test}/logs
[ -x "$VENV/bin/molecule" ] || { echo "run-molecule: no molecule in $VENV (run: make setup)" >&2; exit 2; }
export PATH="$VENV/bin:$PATH"
unset ANSIBLE_CONFIG   # molecule writes its own; .config/molecule/config.yml carries the settings
export PY_COLORS=${PY_COLORS:-0} ANSIBLE_FORCE_COLOR=${ANSIBLE_FORCE_COLOR:-0} NO_COLOR=${NO_COLOR:-1}
# Each task's start time and duration in the logs, and the slowest tasks at the end of each run: where a slow
# scenario spends its time, read from a CI log.
export ANSIBLE_CALLBACKS_ENABLED=${ANSIBLE_CALLBACKS_ENABLED:-ansible.posix.profile_tasks}

# kimi.deploy resolves through .collections/ (what `make setup` links)
link=.collections/ansible_collections/kimi/deploy
[ -e "$link" ] || { mkdir -p "$(dirname "$link")" && ln -sfn ../../.. "$link"; }

if [ $# -gt 0 ]; then
	scenarios=("$@")
else
	mapfile -t scenarios < <(find molecule -mindepth 2 -maxdepth 2 -name molecule.yml -printf '%h\n' |
		xargs -rn1 basename | grep -v -e '^_' -e '^demo$' -e '^converge_bench$' | sort)   # demo: demo/demo.sh; converge_bench: bench/converge.py
fi
[ ${#scenarios[@]} -gt 0 ] || { echo "run-molecule: no scenario in molecule/" >&2; exit 2; }

if [ "${KIMI_TEST_SKIP_PREPARE:-0}" != 1 ]; then
	tests/harness/prepare.sh || { echo "run-molecule: prepare.sh failed"; echo "molecule: 0 passed, ${#scenarios[@]} failed"; exit 1; }
fi

mkdir -p "$LOGDIR"
T0=$SECONDS

one() {  # one SCENARIO: molecule test, its log, and its result line in $LOGDIR/result-SCENARIO ("rc seconds")
	local s=$1 log=$LOGDIR/molecule-$1.log t=$SECONDS rc
	echo "=== molecule test -s $s   (log: $log)"
	if [ "$s" = e2e ]; then  # not a scenario: make demo end to end (tests/e2e), one lane's job
		log=$LOGDIR/e2e.log
		pytest -q -p no:cacheprovider --junitxml="$KIMI_TEST_E2E_JUNIT" tests/e2e >"$log" 2>&1; rc=$?
	elif [ ! -f "molecule/$s/molecule.yml" ]; then
		echo "no such scenario: molecule/$s/molecule.yml" >"$log"; rc=2
	elif [ "${KIMI_TEST_QUIET:-0}" = 1 ]; then
		# shellcheck disable=SC2086
		molecule --base-config .config/molecule/config.yml test -s "$s" ${MOLECULE_ARGS:-} >"$log" 2>&1; rc=$?
	else
		# shellcheck disable=SC2086
		molecule --base-config .config/molecule/config.yml test -s "$s" ${MOLECULE_ARGS:-} 2>&1 | tee "$log"; rc=${PIPESTATUS[0]}
	fi
	echo "$rc $((SECONDS - t))" >"$LOGDIR/result-$s"
	if [ "$rc" != 0 ] && [ "${KIMI_TEST_QUIET:-0}" = 1 ]; then tail -n 40 "$log" | sed "s/^/  $s| /"; fi
	echo "=== $s: $([ "$rc" = 0 ] && echo passed || echo "FAILED (rc=$rc)") in $((SECONDS - t))s"
}

# KIMI_TEST_JOBS scenarios at a time (default 1; make test uses 2). Each scenario has its own instances, network and
# state, and only molecule/demo (the e2e's host) publishes a port, so they can run side by side. On two cores they
# share the CPU (ansible is most of the work), so two lanes save about 15%, not half; two is the most that pays (with
# three, the e2e's converges took 3.3x their time alone). The longest start first, so that the lanes end together.
JOBS=${KIMI_TEST_JOBS:-1}
[ -n "${KIMI_TEST_E2E_JUNIT:-}" ] && scenarios+=(e2e)
LONGEST_FIRST=(e2e fleet pd replica airgap kimi_image caddy_proxy kimi_serve ascend_host kimi_weights nvidia_host)
ordered=()
for s in "${LONGEST_FIRST[@]}"; do
	for t in "${scenarios[@]}"; do [ "$t" = "$s" ] && ordered+=("$s"); done
done
for t in "${scenarios[@]}"; do
	case " ${ordered[*]} " in *" $t "*) ;; *) ordered+=("$t") ;; esac
done
rm -f "$LOGDIR"/result-*
if [ "$JOBS" -gt 1 ]; then
	export -f one
	export LOGDIR MOLECULE_ARGS KIMI_TEST_E2E_JUNIT
	export KIMI_TEST_QUIET=1  # lanes side by side: each writes only its log
	printf '%s\n' "${ordered[@]}" | xargs -P "$JOBS" -I{} bash -c 'one "$1"' _ {}
else
	for s in "${ordered[@]}"; do one "$s"; done
fi

passed=0 failed=0 rows=()
for s in "${ordered[@]}"; do
	read -r rc d <"$LOGDIR/result-$s" 2>/dev/null || { rc=1 d=0; }
	if [ "$rc" = 0 ]; then res=passed; else res="FAILED (rc=$rc)"; fi
	if [ "$s" != e2e ]; then  # the e2e's cases are counted from its junit file (tests/run-all.sh)
		if [ "$rc" = 0 ]; then passed=$((passed + 1)); else failed=$((failed + 1)); fi
	fi
	rows+=("$(printf '%-28s %-16s %4dm%02ds' "$s" "$res" $((d / 60)) $((d % 60)))")
done

echo
printf '%-28s %-16s %7s\n' scenario result time
printf '%s\n' "${rows[@]}"
d=$((SECONDS - T0))
printf '%-28s %-16s %4dm%02ds\n' total "" $((d / 60)) $((d % 60))
echo "molecule: $passed passed, $failed failed"
[ $failed = 0 ]
