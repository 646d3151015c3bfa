#!/usr/bin/env bash
# make demo / make demo-clean: the main job (the real playbooks/site.yml) on the embedded default, one local
# container "GPU host" of the test harness (molecule/demo: systemd, nested Docker, CDI, the 8 x RTX PRO 6000 NVIDIA
# doubles installed through nvidia_host's apt path, the fake hub, the engine doubles), then a real client call
# through Caddy over TLS from this machine.
#
#   demo/demo.sh up [QUANT ENGINE]   converge (first run: create the host); switch when the identity changes
#   demo/demo.sh plan [QUANT ENGINE] site.yml --check --diff on the running host: the plan, nothing changed
#   demo/demo.sh clean               remove the host, its volumes and the demo folder
#
# Environment: GPUS (a GPU profile of tests/fixtures/gpus, default rtx-pro-6000-x8: the GPUs on the host's PCI bus;
# another one swaps them on a running host), SPEC (kimi_speculative: eagle3, dflash or ngram; unset serves without
# speculative decoding), MODEL (kimi_model: kimi-k2.6, the default, kimi-k2.7-code, kimi-k3; unset QUANT and ENGINE:
# int4 on SGLang, Kimi-K3's mxfp4 on SGLang), KIMI_DEMO_DIR (default .demo: the client key, the CA, the logs,
# molecule's state, deployment.json: what the client can expect of the deployment),
# KIMI_DEMO_INSTANCE (default kimi-demo), KIMI_DEMO_PORT (default 8443, on 127.0.0.1), KIMI_DEMO_ARGS (more
# ansible-playbook arguments, split on spaces, e.g. "--tags serve" or "-v"; make demo ARGS=...).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
mkdir -p "${KIMI_DEMO_DIR:-$ROOT/.demo}"
KIMI_DEMO_DIR=$(cd "${KIMI_DEMO_DIR:-$ROOT/.demo}" && pwd)
chmod 700 "$KIMI_DEMO_DIR"
export KIMI_DEMO_DIR KIMI_DEMO_INSTANCE=${KIMI_DEMO_INSTANCE:-kimi-demo} KIMI_DEMO_PORT=${KIMI_DEMO_PORT:-8443}
export KIMI_DEMO_KEY_FILE=$KIMI_DEMO_DIR/client-key KIMI_DEMO_METRICS_KEY_FILE=$KIMI_DEMO_DIR/metrics-key
export KIMI_DEMO_BENCH_AIPERF=$ROOT/.venv-bench/bin/aiperf  # the bench gate's client (make bench-client)
export MOLECULE_EPHEMERAL_DIRECTORY=$KIMI_DEMO_DIR/molecule
export PATH=$ROOT/.venv/bin:$PATH PY_COLORS=0 ANSIBLE_FORCE_COLOR=0 NO_COLOR=1
unset ANSIBLE_CONFIG  # molecule writes its own (.config/molecule/config.yml)
INSTANCE=$KIMI_DEMO_INSTANCE
CA_IN_HOST=/var/lib/caddy/.local/share/caddy/pki/authorities/local/root.crt

say() { printf 'demo: %s\n' "$*"; }
mol() { local cmd=$1; shift; molecule --base-config .config/molecule/config.yml "$cmd" -s demo "$@"; }
running() { [ "$(docker inspect -f '{{.State.Running}}' "$INSTANCE" 2>/dev/null)" = true ]; }
model_name() {  # the model id clients send to what the host serves (its env file's MODEL_NAME)
	docker exec "$INSTANCE" sh -c '. /etc/kimi-k26.env 2>/dev/null && echo "${MODEL_NAME:-}"' 2>/dev/null || true
}
serving() {  # the identity in the host's environment file, e.g. int4-sglang ("" when none)
	running || return 0
	docker exec "$INSTANCE" sh -c '. /etc/kimi-k26.env 2>/dev/null && [ -n "${QUANT:-}" ] && echo "$QUANT-$FRAMEWORK"' 2>/dev/null || true
}

clean() {
	if [ -d "$MOLECULE_EPHEMERAL_DIRECTORY" ]; then mol destroy >"$KIMI_DEMO_DIR/destroy.log" 2>&1 || true; fi
	docker rm -f -v "$INSTANCE" >/dev/null 2>&1 || true   # also when molecule's state was lost
	rm -rf "$KIMI_DEMO_DIR"
	say "removed the demo host $INSTANCE (container and volumes) and $KIMI_DEMO_DIR"
	say "kept: the test images (kimi-test/*, kimi-double/*) and .cache/kimi-test, which make test uses too"
}

identity() {  # identity [QUANT ENGINE]: sets quant, engine and gpus for up and plan
	local _q _e
	quant=${1:-${QUANT:-}} engine=${2:-${ENGINE:-}} gpus=${GPUS:-}
	# As asked, else the one the demo serves now, else int4 on SGLang (the reference host's pick); the GPUs as asked,
	# else those the host has now, else the reference host's 8 x RTX PRO 6000.
	if [ -f "$KIMI_DEMO_DIR/identity" ]; then
		read -r _q _e gpus_now <"$KIMI_DEMO_DIR/identity" || true
		# Another model (MODEL=) starts from its own reference pick below, not from what the other model serves.
		if [ -z "$quant$engine${MODEL:-}" ]; then quant=$_q engine=$_e; fi
	fi
	# The model's reference pick: int4 is the K2 family's checkpoint; Kimi-K3's is mxfp4, on SGLang (its cookbook's
	# B300 1x8 TP8). Not auto: before the host stage installs the driver, the GPUs cannot be read to recommend one.
	if [ -z "$quant$engine" ]; then
		case ${MODEL:-kimi-k2.6} in kimi-k3*) quant=mxfp4 engine=sglang ;; *) quant=int4 engine=sglang ;; esac
	fi
	quant=${quant:-auto} engine=${engine:-auto}  # one given: the other is recommended from the GPUs
	gpus=${gpus:-${gpus_now:-rtx-pro-6000-x8}}
	[ -f "tests/fixtures/gpus/$gpus.json" ] || { say "GPUS=$gpus is not a GPU profile: $(cd tests/fixtures/gpus &&
		ls -- *.json | sed 's/\.json$//' | tr '\n' ' ')"; exit 2; }
}

up() {
	local quant engine gpus gpus_now= before after model log=$KIMI_DEMO_DIR/converge.log first=0 changed split
	identity "$@"

	say "preparing this machine (Docker engine, offline test images, doubles): tests/harness/prepare.sh"
	# each step's start and end on the terminal, everything in the log
	if ! tests/harness/prepare.sh demo 2>&1 | tee "$KIMI_DEMO_DIR/prepare.log" |
		{ grep --line-buffered -E '^(\[prepare|== )' || true; }; then
		tail -n 30 "$KIMI_DEMO_DIR/prepare.log"; say "prepare.sh failed (log: $KIMI_DEMO_DIR/prepare.log)"; exit 1
	fi

	if [ ! -s "$KIMI_DEMO_KEY_FILE" ]; then
		(umask 077 && python3 -c 'import secrets; print("kimi-demo-" + secrets.token_urlsafe(32))' >"$KIMI_DEMO_KEY_FILE")
		say "generated a client key in $KIMI_DEMO_KEY_FILE (mode 0600; it is not printed)"
	fi
	if [ ! -s "$KIMI_DEMO_METRICS_KEY_FILE" ]; then
		(umask 077 && python3 -c 'import secrets; print("kimi-metrics-" + secrets.token_urlsafe(32))' >"$KIMI_DEMO_METRICS_KEY_FILE")
		say "generated a metrics key in $KIMI_DEMO_METRICS_KEY_FILE (mode 0600; it is not printed)"
	fi

	# A host whose container is gone (reboot, docker rm) starts over: molecule's state would still say "created".
	if ! running; then
		first=1
		if [ -d "$MOLECULE_EPHEMERAL_DIRECTORY" ]; then mol destroy >"$KIMI_DEMO_DIR/destroy.log" 2>&1 || true; fi
	fi
	before=$(serving)
	say "site.yml -e quant=$quant -e engine=$engine on $INSTANCE with $gpus${before:+ (serving $before now)} (log: $log)"
	set +e
	# shellcheck disable=SC2086  # KIMI_DEMO_ARGS is a list of arguments
	mol converge -- -e "quant=$quant" -e "engine=$engine" -e "kimi_test_gpu_profile=$gpus" ${MODEL:+-e kimi_model=$MODEL} \
		${SPEC:+-e kimi_speculative=$SPEC} ${KIMI_DEMO_ARGS:-} 2>&1 |
		tee "$log"
	local rc=${PIPESTATUS[0]}
	set -e
	if [ "$rc" != 0 ]; then
		say "site.yml failed on $INSTANCE (rc=$rc): the error above names the stage and the fix (log: $log)"
		exit "$rc"
	fi
	echo "$quant $engine $gpus" >"$KIMI_DEMO_DIR/identity"
	after=$(serving)
	model=$(model_name)
	# changed= of every host in the last PLAY RECAP (site.yml's; create and prepare print theirs before it)
	changed=$(awk '/^PLAY RECAP/ {n = 0; delete c} /changed=/ {for (i = 1; i <= NF; i++) if ($i ~ /^changed=/) {split($i, a, "="); c[n++] = a[2]}}
		END {s = 0; for (k in c) s += c[k]; print s}' "$log")

	docker cp "$INSTANCE:$CA_IN_HOST" "$KIMI_DEMO_DIR/ca.crt" >/dev/null
	echo
	say "a client on this machine, through Caddy over TLS, with the demo's key:"
	# The reasoning must come back apart from the answer, unless the deployment has no Kimi reasoning parser
	# (deployment.json: kimi_deployment's facts, molecule/demo/converge.yml's last play).
	split=$(python3 -c 'import json, sys; print("no" if json.load(open(sys.argv[1])).get("reasoning_parser") is None
else "yes")' "$KIMI_DEMO_DIR/deployment.json" 2>/dev/null || echo yes)
	python3 demo/client.py --endpoint "https://localhost:$KIMI_DEMO_PORT/v1" --api-key-file "$KIMI_DEMO_KEY_FILE" \
		--ca "$KIMI_DEMO_DIR/ca.crt" --model "$model" $([ "$split" = no ] && echo --no-reasoning-split)
	echo
	if [ "$first" = 1 ]; then
		say "first run: created $INSTANCE and converged it ($changed changes); run make demo again: it changes nothing"
	elif [ -n "$before" ] && [ "$before" != "$after" ]; then
		say "cutover: $INSTANCE switched from $before to $after ($changed changes); clients use the model name $model"
	elif [ "$changed" = 0 ]; then
		say "second run: idempotent, changed=0 on every host"
	else
		say "converged with $changed changes"
	fi
	echo "endpoint: https://localhost:$KIMI_DEMO_PORT/v1"
	echo "model: $model ($after on $gpus)"
	echo "speculative decoding: ${SPEC:-none}"
	echo "api key file: $KIMI_DEMO_KEY_FILE"
	echo "ca: $KIMI_DEMO_DIR/ca.crt"
	echo "metrics: https://localhost:$KIMI_DEMO_PORT/metrics (key file: $KIMI_DEMO_METRICS_KEY_FILE; also /metrics/node, /metrics/accelerator, /metrics/caddy)"
	echo "prometheus: http://127.0.0.1:9090 in $INSTANCE (docker exec $INSTANCE curl -s 127.0.0.1:9090/api/v1/alerts)"
}

plan() {
	local quant engine gpus gpus_now=
	running || { say "no demo host is running: run make demo first"; exit 1; }
	identity "$@"
	say "site.yml --check --diff -e quant=$quant -e engine=$engine on $INSTANCE with $gpus (nothing is changed)"
	# shellcheck disable=SC2086
	mol converge -- --check --diff -e "quant=$quant" -e "engine=$engine" -e "kimi_test_gpu_profile=$gpus" \
		${MODEL:+-e kimi_model=$MODEL} ${SPEC:+-e kimi_speculative=$SPEC} ${KIMI_DEMO_ARGS:-}
}

bench() {  # make demo-bench: playbooks/bench.yml on the demo host, through Caddy from this machine, a short sweep
	running || { say "no demo host is running: run make demo first"; exit 1; }
	local out=$KIMI_DEMO_DIR/bench log=$KIMI_DEMO_DIR/bench.log json png _q _e gpus=rtx-pro-6000-x8
	mkdir -p "$out"
	# the GPUs the host's nvidia-smi double reports (its profile), for the report's cost per million tokens
	[ -f "$KIMI_DEMO_DIR/identity" ] && read -r _q _e gpus <"$KIMI_DEMO_DIR/identity" || true
	say "playbooks/bench.yml on $INSTANCE: aiperf through Caddy at https://localhost:$KIMI_DEMO_PORT (log: $log)"
	set +e
	# shellcheck disable=SC2086
	ANSIBLE_COLLECTIONS_PATH=$ROOT/.collections ansible-playbook -i "$MOLECULE_EPHEMERAL_DIRECTORY/inventory" \
		playbooks/bench.yml -e kimi_bench_confirm=true -e "kimi_bench_url=https://localhost:$KIMI_DEMO_PORT" \
		-e "kimi_bench_api_key_file=$KIMI_DEMO_KEY_FILE" -e "kimi_bench_ca_file=$KIMI_DEMO_DIR/ca.crt" \
		-e "kimi_bench_dir=$out" -e '{"kimi_bench_levels": [1, 2, 4]}' -e kimi_bench_requests_per_level=8 \
		-e kimi_bench_input_tokens=128 -e kimi_bench_output_tokens=64 -e kimi_bench_timeout=600 \
		-e "@tests/fixtures/gpus/${gpus:-rtx-pro-6000-x8}.json" ${KIMI_DEMO_ARGS:-} 2>&1 | tee "$log"
	local rc=${PIPESTATUS[0]}
	set -e
	[ "$rc" = 0 ] || { say "bench.yml failed (rc=$rc, log: $log)"; exit "$rc"; }
	json=$(ls -t "$out"/*.json | head -1) png=${json%.json}.png
	echo "bench json: $json"
	echo "bench png: $png"
}

case ${1:-up} in
	up) shift || true; up "$@" ;;
	plan) shift; plan "$@" ;;
	bench) bench ;;
	clean) clean ;;
	*) echo "usage: $0 up [QUANT ENGINE] | plan [QUANT ENGINE] | bench | clean" >&2; exit 2 ;;
esac
