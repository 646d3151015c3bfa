#!/usr/bin/env bash
# Make this machine ready for the molecule scenarios, offline from any container registry.
#
#   tests/harness/prepare.sh            # idempotent; a second call takes a few seconds
#   KIMI_TEST_REBUILD=1 tests/harness/prepare.sh   # ignore every cache key, rebuild all
#
# Steps (each skipped when already done):
#   1. apt-get install the host tools that are missing (docker.io, mmdebstrap, dpkg-dev, gpg, apt-utils).
#   2. Start a Docker engine when `docker info` does not answer (dockerd in the background, log in
#      $KIMI_DOCKERD_LOG); reuse a running one.
#   3. Images, each from one `mmdebstrap --variant=minbase` + docker import, side by side, cached by a content key
#      stored as the image label kimi.test.key:
#        kimi-test/debian-systemd:bookworm (the Debian 12 host of molecule/kimi_weights; not for the demo),
#        kimi-test/debian-systemd:trixie-docker  (every Debian 13 host: the base packages + docker.io, docker-cli,
#        python3-docker, caddy, zstd, prometheus, ...; their services installed but disabled),
#        kimi-test/debian-python:trixie  (minbase + python3, no docs, man pages, locales or apt lists: the base of the
#        doubles' images, which every test host loads)
#   4. The doubles, when their builders exist: the signed NVIDIA-double apt repo in $CACHE/apt and the
#      engine-double images, saved together in $CACHE/engine-images.tar for `docker load` in nested engines.
#   5. The routers' wheels (requirements-router.txt) with their dependencies for the trixie-docker instances'
#      Python, in $CACHE/router-wheels: kimi_router installs from there with --no-index (kimi_router_wheelhouse).
#   6. A summary with timings.
#
# Environment: KIMI_TEST_CACHE (default .cache/kimi-test), KIMI_TEST_MIRROR / KIMI_TEST_SECURITY_MIRROR
# (default http://deb.debian.org/debian and .../debian-security), KIMI_DOCKERD_LOG
# (default /var/log/kimi-dockerd.log), KIMI_TEST_REBUILD=1. Exit status 1 when a step failed.
set -euo pipefail
export LC_ALL=C DEBIAN_FRONTEND=noninteractive

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
CACHE=${KIMI_TEST_CACHE:-$ROOT/.cache/kimi-test}
MIRROR=${KIMI_TEST_MIRROR:-http://deb.debian.org/debian}
SECURITY_MIRROR=${KIMI_TEST_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
DOCKERD_LOG=${KIMI_DOCKERD_LOG:-/var/log/kimi-dockerd.log}
REBUILD=${KIMI_TEST_REBUILD:-0}
IMAGE_REPO=kimi-test/debian-systemd
# the doubles' base, which every test host loads: they run python3 and sh, never systemd, apt, man or a locale
DOUBLE_BASE=kimi-test/debian-python:trixie
DOUBLE_BASE_PACKAGES=python3
BASE_PACKAGES=systemd,systemd-sysv,dbus,python3,python3-apt,python3-debian,sudo,iproute2,procps,curl,ca-certificates,gpg
# caddy, prometheus, prometheus-node-exporter, python3-venv, python3-packaging: the instances cannot reach an apt
# mirror, so caddy_proxy, kimi_metrics, kimi_monitoring and kimi_router find their Debian packages already installed
# (apt state=present is then a no-op)
DOCKER_PACKAGES="docker.io docker-cli python3-docker caddy zstd prometheus prometheus-node-exporter python3-venv python3-packaging"
# units the packages' postinst enabled that stay off in the image: an instance boots with only what its scenario
# starts (caddy's default :80 site and :2019 admin API would be live in every trixie-docker instance otherwise)
DOCKER_DISABLED_UNITS="caddy.service caddy-api.service prometheus.service prometheus-node-exporter.service"
ENGINE_IMAGES=(kimi-double/sglang:v0.5.12.post1-cu130 kimi-double/vllm-openai:v0.22.1
	kimi-double/vllm-openai:v0.22.1-cu130 kimi-double/vllm-openai:v0.22.1-cu130-nopattern
	kimi-double/tensorrt-llm:1.3.0rc17 kimi-double/vllm-ascend:v0.20.2rc1-a3
	kimi-double/sglang-ascend:v0.5.13.post1-cann9.0.0-a3 kimi-double/vllm-openai:v0.33.0 kimi-double/sglang:v0.5.23-cu130
	kimi-double/dcgm-exporter:4.5.3-4.8.2-ubuntu22.04 kimi-double/npu-exporter:v26.1.0-ubuntu22.04)
HOST_PACKAGES=(docker.io mmdebstrap dpkg-dev gpg apt-utils)

mkdir -p "$CACHE"
T0=${KIMI_PREPARE_T0:-$EPOCHREALTIME}
export KIMI_PREPARE_T0=$T0
SUMMARY_FILE=/dev/null
if [ "${1:-}" != --run-step ]; then  # a step runs this script again: only the main run keeps a summary
	SUMMARY_FILE=$(mktemp "$CACHE/.prepare.summary.XXXX")
	trap 'rm -f "$SUMMARY_FILE"' EXIT
fi
STATUS_FILE=/dev/null   # each step sets its own (step)
since() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }'; }
log() { printf '[prepare %6ss] %s\n' "$(since "$T0")" "$*" >&2; }
status() { echo "$*" >"$STATUS_FILE"; }
step() {  # step NAME FUNC ARGS...: run in a subshell under set -e, time it, print its start and end, record its line
	local name=$1 t rc sf; shift
	t=$EPOCHREALTIME
	sf=$(mktemp "$CACHE/.prepare.status.XXXX")
	log "start: $name"
	# A new shell runs the step: `set -e` is ignored inside a function called from `||` or `&&`, in subshells too.
	set +e; bash "$SELF" --run-step "$sf" "$@"; rc=$?; set -e
	local line; line="$(printf '%-44s %6ss  %s' "$name" "$(since "$t")" "$([ $rc = 0 ] && cat "$sf" || echo "FAILED rc=$rc")")"
	rm -f "$sf"
	log "done:  $line"
	echo "$line" >>"$SUMMARY_FILE"
	return $rc
}
image_label() { docker image inspect -f "{{ index .Config.Labels \"$2\" }}" "$1" 2>/dev/null || true; }
image_id() { docker image inspect -f '{{ .Id }}' "$1" 2>/dev/null || true; }

# ---------------------------------------------------------------- 1. host packages
host_packages() {
	local missing=() p
	for p in "${HOST_PACKAGES[@]}"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
	done
	if [ ${#missing[@]} = 0 ]; then status present; return; fi
	log "apt-get install ${missing[*]}"
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
	status "installed ${missing[*]}"
}

# ---------------------------------------------------------------- 2. docker engine
docker_engine() {
	if docker info >/dev/null 2>&1; then status running; return; fi
	log "starting dockerd (log: $DOCKERD_LOG)"
	setsid dockerd >>"$DOCKERD_LOG" 2>&1 </dev/null 9>&- &   # 9>&-: the daemon must not hold our lock
	local i
	for i in $(seq 1 120); do
		docker info >/dev/null 2>&1 && { status "started (pid $!)"; return; }
		sleep 0.5
	done
	echo "dockerd did not answer within 60 s; see $DOCKERD_LOG" >&2
	tail -n 20 "$DOCKERD_LOG" >&2
	return 1
}

# ---------------------------------------------------------------- 3. base images
chroot_run() {  # chroot_run DIR CMD...: with /proc, the host resolv.conf and no service starts
	local d=$1; shift
	printf '#!/bin/sh\nexit 101\n' >"$d/usr/sbin/policy-rc.d"; chmod 755 "$d/usr/sbin/policy-rc.d"
	cp /etc/resolv.conf "$d/etc/resolv.conf"
	mount -t proc proc "$d/proc"
	local rc=0
	chroot "$d" "$@" || rc=$?
	umount "$d/proc"
	rm -f "$d/usr/sbin/policy-rc.d"
	return $rc
}
finish_rootfs() {  # apt sources (main, updates, security), fresh lists, a clean identity, dpkg without fsync
	local d=$1 suite=$2
	rm -f "$d/etc/apt/sources.list"
	# As Docker's official Debian images do: a test host is thrown away, so dpkg's fsync after every file it unpacks
	# buys nothing here and cost ~2 s of each package install (0.2 s without).
	echo force-unsafe-io >"$d/etc/dpkg/dpkg.cfg.d/kimi-test-unsafe-io"
	cat >"$d/etc/apt/sources.list.d/debian.sources" <<-EOF
		Types: deb
		URIs: $MIRROR
		Suites: $suite $suite-updates
		Components: main
		Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

		Types: deb
		URIs: $SECURITY_MIRROR
		Suites: $suite-security
		Components: main
		Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
	EOF
	chroot_run "$d" apt-get update -qq
	chroot_run "$d" apt-get clean
	chroot_run "$d" apt-cache gencaches  # kept in the image: each host's first apt run built them (~2 s of CPU)
}
clean_identity() {  # no machine id, resolver or hostname of the build, no logs or temporary files
	local d=$1
	: >"$d/etc/machine-id"; rm -f "$d/var/lib/dbus/machine-id"
	: >"$d/etc/resolv.conf"; echo localhost >"$d/etc/hostname"
	rm -rf "$d"/tmp/* "$d"/var/tmp/* "$d"/var/log/*.log
}
import_rootfs() {  # import_rootfs DIR IMAGE KEY
	tar --numeric-owner --xattrs -C "$1" -c . | docker import \
		-c 'CMD ["/lib/systemd/systemd"]' -c 'ENV container=docker' \
		-c "LABEL kimi.test.key=$3" -c "LABEL org.opencontainers.image.source=kimi.deploy/tests/harness" \
		- "$2" >/dev/null
}
build_image() {  # build_image KEY IMAGE SUITE PACKAGES [DISABLED_UNITS] [lean]
	# One mmdebstrap run (apt resolves and downloads in parallel, one dpkg run: 34 s for trixie where debootstrap took
	# 88 s), every package of the image included, so no image waits on another.
	local key=$1 image=$2 suite=$3 packages=$4 disabled=${5:-} lean=${6:-} d p opts=() log
	log=$CACHE/mmdebstrap-$(echo "${image#*/}" | tr ':/' '--').log
	d=$(mktemp -d "$CACHE/rootfs-$suite.XXXX"); chmod 755 "$d"
	if [ "$lean" = lean ]; then  # docs, man pages and locales never unpacked
		for p in doc man info locale; do opts+=("--dpkgopt=path-exclude=/usr/share/$p/*"); done
	fi
	log "mmdebstrap $suite (minbase + $packages) -> $image"
	mmdebstrap --variant=minbase --components=main --include="$packages" "${opts[@]}" "$suite" "$d" "$MIRROR" \
		>"$log" 2>&1 || { tail -n 20 "$log" >&2; rm -rf "$d"; return 1; }
	# shellcheck disable=SC2086  # a list of unit names
	[ -z "$disabled" ] || chroot_run "$d" systemctl disable --quiet $disabled
	# apt's lists only where a test installs packages (the lean image is the doubles' base: python3, nothing else)
	[ "$lean" = lean ] || finish_rootfs "$d" "$suite"
	clean_identity "$d"
	import_rootfs "$d" "$image" "$key"
	rm -rf "$d"
}
drop_superseded() {  # drop_superseded OLD_ID IMAGE: remove the image that IMAGE replaced, if unused
	[ -n "$1" ] && [ "$1" != "$(image_id "$2")" ] && docker image rm "$1" >/dev/null 2>&1 || true
}
ensure_image() {  # ensure_image IMAGE SUITE PACKAGES [DISABLED_UNITS] [lean]: cached by its recipe (label kimi.test.key)
	local image=$1 key old
	key=$({ echo "$*|$MIRROR|$SECURITY_MIRROR"; declare -f chroot_run finish_rootfs clean_identity import_rootfs build_image; } |
		sha256sum | cut -c1-16)
	if [ "$REBUILD" != 1 ] && [ "$(image_label "$image" kimi.test.key)" = "$key" ]; then
		status "cached $key"; return
	fi
	old=$(image_id "$image")
	build_image "$key" "$@"
	drop_superseded "$old" "$image"
	status "built $key ($(docker image inspect -f '{{ .Size }}' "$image" | awk '{ printf "%d MB", $1 / 1e6 }'))"
}

# ---------------------------------------------------------------- 4. doubles
nvidia_repo() {  # build-repo.sh keeps its own content key (OUTDIR/.kimi-double-repo.stamp) and signing key
	local b=$ROOT/tests/doubles/nvidia/build-repo.sh before
	[ -x "$b" ] || { status "SKIPPED: $b missing"; return; }
	before=$(cat "$CACHE/apt/.kimi-double-repo.stamp" 2>/dev/null || true)
	"$b" "$CACHE/apt" >"$CACHE/build-repo.log" 2>&1 9>&- || { tail -n 30 "$CACHE/build-repo.log" >&2; return 1; }
	[ -s "$CACHE/apt/InRelease" ] && [ -s "$CACHE/apt/kimi-double-archive-keyring.gpg" ] ||
		{ echo "build-repo.sh made no InRelease/keyring in $CACHE/apt" >&2; return 1; }
	# apt's _apt user reads the repo inside the instances (the signing key in .gnupg stays private)
	find "$CACHE/apt" -path "$CACHE/apt/.gnupg" -prune -o -exec chmod a+rX {} + 2>/dev/null || true
	[ "$before" = "$(cat "$CACHE/apt/.kimi-double-repo.stamp" 2>/dev/null)" ] && status "current ($CACHE/apt)" ||
		status "built ($CACHE/apt)"
}

engine_images() {  # build-image.sh keeps its own content key (sources, flag fixtures, base id) and skips
	local b=$ROOT/tests/doubles/engine/build-image.sh st i
	[ -x "$b" ] || { status "SKIPPED: $b missing"; return; }
	ids() { for i in "${ENGINE_IMAGES[@]}"; do image_id "$i"; done | tr '\n' ' '; }
	local before; before=$(ids)
	"$b" "$DOUBLE_BASE" $([ "$REBUILD" = 1 ] && echo --force) >"$CACHE/build-image.log" 2>&1 9>&- ||
		{ tail -n 30 "$CACHE/build-image.log" >&2; return 1; }
	for i in "${ENGINE_IMAGES[@]}"; do
		[ -n "$(image_id "$i")" ] || { echo "build-image.sh did not make $i" >&2; return 1; }
	done
	[ "$before" = "$(ids)" ] && st=current || st=built
	if [ "$(cat "$CACHE/engine-images.ids" 2>/dev/null)" != "$(ids)" ] || [ ! -s "$CACHE/engine-images.tar" ]; then
		docker save -o "$CACHE/engine-images.tar.tmp" "${ENGINE_IMAGES[@]}"
		mv "$CACHE/engine-images.tar.tmp" "$CACHE/engine-images.tar"
		ids >"$CACHE/engine-images.ids"
		status "$st, saved engine-images.tar ($(du -m "$CACHE/engine-images.tar" | cut -f1) MB)"
	else
		status "$st, engine-images.tar current"
	fi
}

# ---------------------------------------------------------------- 5. router wheels
router_wheels() {  # for the instances' Python (trixie: CPython 3.13, x86_64), keyed by requirements-router.txt
	local dir=$CACHE/router-wheels key py
	py=$(command -v python3)
	key=$(cat "$ROOT/requirements-router.txt" | sha256sum | cut -c1-16)-cp313
	if [ "$REBUILD" != 1 ] && [ "$(cat "$dir/.key" 2>/dev/null)" = "$key" ]; then status "current ($dir)"; return; fi
	rm -rf "$dir.tmp"; mkdir -p "$dir.tmp"
	"$py" -m pip download -q --disable-pip-version-check --only-binary=:all: --python-version 3.13 \
		--implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
		--platform manylinux2014_x86_64 -d "$dir.tmp" -r "$ROOT/requirements-router.txt" >"$CACHE/router-wheels.log" 2>&1 ||
		{ tail -n 20 "$CACHE/router-wheels.log" >&2; return 1; }
	echo "$key" >"$dir.tmp/.key"
	rm -rf "$dir"; mv "$dir.tmp" "$dir"
	status "downloaded $(ls "$dir" | wc -l) wheels ($(du -sm "$dir" | cut -f1) MB)"
}

SELF=$(readlink -f "${BASH_SOURCE[0]}")
if [ "${1:-}" = --run-step ]; then  # one step (see step): STATUS_FILE FUNC ARGS...
	STATUS_FILE=$2; shift 2
	"$@"
	exit 0
fi

exec 9>"$CACHE/.prepare.lock"
flock 9   # one prepare at a time (parallel helpers, CI steps)

leftovers() {  # of an interrupted build, or a /proc a chroot's process kept busy (we hold the lock: nobody else builds)
	{ findmnt -rn -o TARGET | grep "^$CACHE/rootfs-" || true; } | sort -r | xargs -r umount -l
	rm -rf "$CACHE"/rootfs-* "$CACHE"/engine-images.tar.tmp
}
leftovers

# What a command needs (the demo needs less than the test suite):
#   all   (default) everything below
#   demo  the trixie-docker image, the NVIDIA doubles' repo, the doubles' base and the engine doubles (make demo)
# Every image is built side by side with the others (mmdebstrap waits on the mirror part of the time), the engine
# doubles after their base, the router wheels after the NVIDIA repo.
WHAT=${1:-all}
case $WHAT in all|demo) ;; *) echo "usage: $0 [all|demo]" >&2; exit 2 ;; esac
RC=0
step "host packages" host_packages || RC=1
step "docker engine" docker_engine || RC=1
if [ $RC = 0 ]; then
	pids=()
	if [ "$WHAT" = all ]; then
		step "image $IMAGE_REPO:bookworm" ensure_image "$IMAGE_REPO:bookworm" bookworm "$BASE_PACKAGES" & pids+=($!)
	fi
	step "image $IMAGE_REPO:trixie-docker" ensure_image "$IMAGE_REPO:trixie-docker" trixie \
		"$BASE_PACKAGES,${DOCKER_PACKAGES// /,}" "$DOCKER_DISABLED_UNITS" & pids+=($!)
	{ step "image $DOUBLE_BASE" ensure_image "$DOUBLE_BASE" trixie "$DOUBLE_BASE_PACKAGES" "" lean &&
		step "engine double images" engine_images; } & pids+=($!)
	{ step "nvidia doubles apt repo" nvidia_repo && if [ "$WHAT" = all ]; then step "router wheels" router_wheels; fi; } & pids+=($!)
	for p in "${pids[@]}"; do wait "$p" || RC=1; done
fi
leftovers

echo "== kimi test harness $([ $RC = 0 ] && echo ready || echo 'NOT ready') ($WHAT) in $(since "$T0") s (cache: $CACHE)"
sed 's/^/   /' "$SUMMARY_FILE"
rm -f "$SUMMARY_FILE"
exit $RC
