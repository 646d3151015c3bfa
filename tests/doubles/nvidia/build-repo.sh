#!/usr/bin/env bash
# Build the NVIDIA test-double .debs and a signed flat apt repository from them.
#
#   tests/doubles/nvidia/build-repo.sh OUTDIR
#
# OUTDIR gets: pool/*.deb, Packages, Packages.gz, Release, InRelease, Release.gpg,
# kimi-double-archive-keyring.gpg (binary, for Signed-By) and kimi-double-archive-keyring.asc.
# Clients use it as a flat repository, like NVIDIA's own repositories:
#
#   Types: deb
#   URIs: file:/path/to/OUTDIR/
#   Suites: ./
#   Signed-By: /usr/share/keyrings/kimi-double-archive-keyring.gpg
#
# The signing key is made once per OUTDIR (private GNUPGHOME in OUTDIR/.gnupg) and reused.
# A second call with unchanged sources does nothing (content key in OUTDIR/.kimi-double-repo.stamp).
# Needs: dpkg-deb, dpkg-scanpackages (dpkg-dev), gpg, gzip, sha256sum. Prints the content key.
# Environment: KIMI_DOUBLE_DRIVER_VERSION (default 580.159.04), KIMI_DOUBLE_CTK_VERSION (1.18.0).
set -euo pipefail

if [ $# -ne 1 ] || [ -z "$1" ]; then
    echo "usage: $0 OUTDIR" >&2
    exit 2
fi
HERE="$(cd "$(dirname "$0")" && pwd)"
FIXTURES="$(cd "$HERE/../../fixtures/gpus" && pwd)"
mkdir -p "$1"
OUTDIR="$(cd "$1" && pwd)"

DRIVER_VERSION="${KIMI_DOUBLE_DRIVER_VERSION:-580.159.04}"
BRANCH="${DRIVER_VERSION%%.*}"
DRIVER_DEB_VERSION="${DRIVER_VERSION}-0ubuntu1"
CTK_VERSION="${KIMI_DOUBLE_CTK_VERSION:-1.18.0}"
CTK_DEB_VERSION="${CTK_VERSION}-1"
EPOCH=1767225600  # 2026-01-01: file times inside the .debs, for byte-identical rebuilds
MAINTAINER="kimi.deploy test suite <kimi-double@invalid>"
KEY_UID="kimi-double test archive (TEST DOUBLE, throwaway key) <kimi-double@invalid>"
STAMP="$OUTDIR/.kimi-double-repo.stamp"

content_key() {
    local nested="./${OUTDIR#"$HERE"/}"  # an OUTDIR inside this folder is not a source
    [ "$OUTDIR" = "${OUTDIR#"$HERE"/}" ] && nested=/nonexistent
    {
        printf 'format 1\n%s\n%s\n' "$DRIVER_VERSION" "$CTK_VERSION"
        (cd "$HERE" && find . -path "$nested" -prune -o -type f ! -name '*.pyc' ! -path '*/__pycache__/*' -print0 |
            LC_ALL=C sort -z | xargs -0 sha256sum)
        (cd "$FIXTURES" && find . -maxdepth 1 -type f -name '*.json' -print0 | LC_ALL=C sort -z | xargs -0 sha256sum)
    } | sha256sum | cut -c1-16
}

KEY="$(content_key)"
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$KEY" ] && [ -s "$OUTDIR/InRelease" ] &&
    [ -s "$OUTDIR/kimi-double-archive-keyring.gpg" ]; then
    echo "kimi-double nvidia repo up to date: key $KEY in $OUTDIR"
    exit 0
fi
echo "kimi-double nvidia repo: building key $KEY into $OUTDIR"
rm -f "$STAMP"

STAGE="$OUTDIR/.build"
rm -rf "$STAGE" "$OUTDIR/pool"
mkdir -p "$STAGE" "$OUTDIR/pool"
umask 022

# ---------------------------------------------------------------------------------------------
# package helpers
# ---------------------------------------------------------------------------------------------
# new_pkg NAME VERSION DEPENDS SHORT-DESCRIPTION [STANDS-IN-FOR]  (the description says it is a test double)
new_pkg() {
    local name="$1" version="$2" depends="$3" summary="$4" real="${5:-the NVIDIA package of this name}" root="$STAGE/$1"
    mkdir -p "$root/DEBIAN" "$root/usr/share/doc/$name"
    {
        echo "Package: $name"
        echo "Version: $version"
        echo "Architecture: all"
        echo "Maintainer: $MAINTAINER"
        echo "Section: utils"
        echo "Priority: optional"
        [ -n "$depends" ] && echo "Depends: $depends"
        echo "Description: TEST DOUBLE: $summary"
        echo " Built by kimi.deploy's test suite (tests/doubles/nvidia) to stand in for"
        echo " $real, so that roles can use the real apt install path"
        echo " on machines without NVIDIA GPUs. It contains no NVIDIA software."
    } > "$root/DEBIAN/control"
    cat > "$root/usr/share/doc/$name/README.kimi-double" <<EOF
TEST DOUBLE built by kimi.deploy tests/doubles/nvidia/build-repo.sh (content key $KEY).
Not NVIDIA software. The GPU answers come from /etc/kimi-double/gpu-profile.json
(or \$KIMI_DOUBLE_GPU_PROFILE); profiles are installed by kimi-double-gpu-profiles
under /usr/share/kimi-double/gpus/.
EOF
}

# install_py SRC DEST: a double script, with the interpreter line Debian uses
install_py() {
    mkdir -p "$(dirname "$2")"
    { echo '#!/usr/bin/python3'; sed "s/@DRIVER_VERSION@/$DRIVER_VERSION/g" "$HERE/src/$1"; } > "$2"
    chmod 0755 "$2"
}

script() {  # script PKG postinst|postrm|prerm  (body on stdin)
    cat > "$STAGE/$1/DEBIAN/$2"
    chmod 0755 "$STAGE/$1/DEBIAN/$2"
}

build_pkg() {
    local root="$STAGE/$1"
    find "$root" -exec touch -h -d "@$EPOCH" {} +
    local version
    version="$(sed -n 's/^Version: //p' "$root/DEBIAN/control")"
    SOURCE_DATE_EPOCH=$EPOCH dpkg-deb --root-owner-group -Zxz --build "$root" \
        "$OUTDIR/pool/${1}_${version}_all.deb" > /dev/null
}

D="$DRIVER_DEB_VERSION"

# ---------------------------------------------------------------------------------------------
# NVIDIA driver (Ubuntu package names, branch $BRANCH, open kernel module flavour)
# ---------------------------------------------------------------------------------------------
new_pkg "nvidia-utils-$BRANCH" "$D" "python3" "NVIDIA driver support binaries (nvidia-smi)"
install_py nvidia_smi.py "$STAGE/nvidia-utils-$BRANCH/usr/bin/nvidia-smi"

new_pkg "nvidia-compute-utils-$BRANCH" "$D" "python3, passwd" "NVIDIA compute utilities (nvidia-persistenced)"
install_py nvidia_persistenced.py "$STAGE/nvidia-compute-utils-$BRANCH/usr/bin/nvidia-persistenced"
install -D -m 0644 "$HERE/files/nvidia-persistenced.service" \
    "$STAGE/nvidia-compute-utils-$BRANCH/usr/lib/systemd/system/nvidia-persistenced.service"
script "nvidia-compute-utils-$BRANCH" postinst <<'EOF'
#!/bin/sh
set -e
if [ "$1" = "configure" ]; then
    if ! getent passwd nvidia-persistenced >/dev/null; then
        useradd --system --user-group --home-dir / --no-create-home --shell /usr/sbin/nologin \
            --comment "NVIDIA Persistence Daemon" nvidia-persistenced
    fi
    if [ -d /run/systemd/system ]; then
        systemctl --system daemon-reload >/dev/null || true
        systemctl try-restart nvidia-persistenced.service >/dev/null 2>&1 || true
    fi
fi
exit 0
EOF
script "nvidia-compute-utils-$BRANCH" postrm <<'EOF'
#!/bin/sh
set -e
if [ -d /run/systemd/system ]; then
    systemctl --system daemon-reload >/dev/null || true
fi
exit 0
EOF

new_pkg "nvidia-kernel-common-$BRANCH" "$D" "" "shared files used with the NVIDIA kernel modules"
new_pkg "nvidia-kernel-source-$BRANCH-open" "$D" "" "NVIDIA open kernel module source"
new_pkg "nvidia-dkms-$BRANCH-open" "$D" "nvidia-kernel-common-$BRANCH (= $D), nvidia-kernel-source-$BRANCH-open (= $D)" \
    "NVIDIA open kernel module (DKMS)"
# What /proc/driver/nvidia/version reads with the module loaded (a container cannot fake /proc).
mkdir -p "$STAGE/nvidia-dkms-$BRANCH-open/usr/share/kimi-double/proc/driver/nvidia"
{
    printf 'NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  %s  Release Build  ' "$DRIVER_VERSION"
    printf '(dvs-builder@U22-I3-AF03-09-1)  Thu Oct 30 12:00:00 UTC 2025\n'
    printf 'GCC version:  gcc version 13.3.0 (Ubuntu 13.3.0-6ubuntu2~24.04) \n'
} > "$STAGE/nvidia-dkms-$BRANCH-open/usr/share/kimi-double/proc/driver/nvidia/version"
new_pkg "libnvidia-compute-$BRANCH" "$D" "" "NVIDIA libcompute package (empty)"
new_pkg "nvidia-driver-$BRANCH-open" "$D" \
    "nvidia-utils-$BRANCH (= $D), nvidia-compute-utils-$BRANCH (= $D), nvidia-dkms-$BRANCH-open (= $D), nvidia-kernel-common-$BRANCH (= $D), libnvidia-compute-$BRANCH (= $D)" \
    "NVIDIA driver metapackage (open kernel module)"

# ---------------------------------------------------------------------------------------------
# NVIDIA Container Toolkit
# ---------------------------------------------------------------------------------------------
C="$CTK_DEB_VERSION"
new_pkg nvidia-container-toolkit-base "$C" "python3" "NVIDIA Container Toolkit base (nvidia-ctk)"
install_py nvidia_ctk.py "$STAGE/nvidia-container-toolkit-base/usr/bin/nvidia-ctk"
sed -i "s/^VERSION = .*/VERSION = \"$CTK_VERSION\"/" "$STAGE/nvidia-container-toolkit-base/usr/bin/nvidia-ctk"
install_py nvidia_container_runtime.py "$STAGE/nvidia-container-toolkit-base/usr/bin/nvidia-container-runtime"
for unit in nvidia-cdi-refresh.service nvidia-cdi-refresh.path; do
    install -D -m 0644 "$HERE/files/$unit" "$STAGE/nvidia-container-toolkit-base/usr/lib/systemd/system/$unit"
done
script nvidia-container-toolkit-base postinst <<'EOF'
#!/bin/sh
set -e
case "$1" in
    configure)
        /usr/bin/nvidia-ctk --quiet config --config-file=/etc/nvidia-container-runtime/config.toml --in-place
        if command -v systemctl >/dev/null 2>&1; then
            SYSTEMD_STATE=$(systemctl is-system-running 2>/dev/null || true)
            case "$SYSTEMD_STATE" in
                running|degraded)
                    systemctl daemon-reload || echo "Warning: Failed to reload systemd daemon" >&2
                    systemctl enable --now nvidia-cdi-refresh.path || echo "Warning: Failed to enable nvidia-cdi-refresh.path" >&2
                    systemctl enable --now nvidia-cdi-refresh.service || echo "Warning: Failed to enable nvidia-cdi-refresh.service" >&2
                    echo "Regenerating NVIDIA CDI specification..."
                    systemctl start nvidia-cdi-refresh.service || echo "Warning: Failed to trigger CDI refresh" >&2
                    ;;
            esac
        fi
        ;;
esac
exit 0
EOF
new_pkg nvidia-container-toolkit "$C" "nvidia-container-toolkit-base (= $C)" "NVIDIA Container Toolkit"

# ---------------------------------------------------------------------------------------------
# The GPU profiles, for hosts and containers that pick one: cp to /etc/kimi-double/gpu-profile.json
# ---------------------------------------------------------------------------------------------
new_pkg kimi-double-gpu-profiles "1.0+$KEY" "" "GPU profiles read by the NVIDIA test doubles" \
    "a GPU host (copy one profile to /etc/kimi-double/gpu-profile.json)"
mkdir -p "$STAGE/kimi-double-gpu-profiles/usr/share/kimi-double/gpus"
install -m 0644 "$FIXTURES"/*.json "$STAGE/kimi-double-gpu-profiles/usr/share/kimi-double/gpus/"

for root in "$STAGE"/*/; do
    build_pkg "$(basename "$root")"
done
rm -rf "$STAGE"

# ---------------------------------------------------------------------------------------------
# Flat repository index, Release, signatures
# ---------------------------------------------------------------------------------------------
cd "$OUTDIR"
dpkg-scanpackages --multiversion pool /dev/null 2>/dev/null > Packages
gzip -9nc Packages > Packages.gz

hashes() {  # hashes TOOL  -> " hash size name" lines for the index files
    local f
    for f in Packages Packages.gz; do
        printf ' %s %s %s\n' "$("$1" "$f" | cut -d' ' -f1)" "$(stat -c %s "$f")" "$f"
    done
}
{
    echo "Origin: kimi-double"
    echo "Label: kimi-double NVIDIA test doubles"
    echo "Suite: kimi-double"
    echo "Codename: kimi-double"
    echo "Version: $KEY"
    echo "Date: $(LC_ALL=C date -u '+%a, %d %b %Y %H:%M:%S UTC')"
    echo "Architectures: all amd64 arm64"
    echo "Description: TEST DOUBLE packages for kimi.deploy (not NVIDIA software), content key $KEY"
    echo "MD5Sum:"
    hashes md5sum
    echo "SHA1:"
    hashes sha1sum
    echo "SHA256:"
    hashes sha256sum
    echo "SHA512:"
    hashes sha512sum
} > Release

mkdir -p "$OUTDIR/.gnupg"
chmod 700 "$OUTDIR/.gnupg"
# gpg-agent's socket is made in GNUPGHOME, and a Unix socket's path has at most 107 bytes: a checkout in a long path
# ($OUTDIR/.gnupg/S.gpg-agent) made the key generation fail. A short link in /tmp to the kept home keeps it short.
short_home=$(mktemp -d /tmp/kimi-gnupg.XXXXXX)
ln -s "$OUTDIR/.gnupg" "$short_home/h"
export GNUPGHOME="$short_home/h"
cleanup_agent() { gpgconf --kill gpg-agent >/dev/null 2>&1 || true; rm -rf "$short_home"; }
trap cleanup_agent EXIT
GPG=(gpg --batch --quiet --no-tty --pinentry-mode loopback --passphrase '')
if ! "${GPG[@]}" --list-secret-keys "$KEY_UID" >/dev/null 2>&1; then
    "${GPG[@]}" --quick-generate-key "$KEY_UID" ed25519 sign never 2>/dev/null
fi
FPR="$("${GPG[@]}" --with-colons --list-secret-keys "$KEY_UID" | awk -F: '$1 == "fpr" {print $10; exit}')"
"${GPG[@]}" --export "$FPR" > kimi-double-archive-keyring.gpg
"${GPG[@]}" --armor --export "$FPR" > kimi-double-archive-keyring.asc
rm -f InRelease Release.gpg
"${GPG[@]}" --digest-algo SHA512 --local-user "$FPR" --clearsign --output InRelease Release
"${GPG[@]}" --digest-algo SHA512 --local-user "$FPR" --armor --detach-sign --output Release.gpg Release

echo "$KEY" > "$STAMP"
echo "kimi-double nvidia repo built: key $KEY, signing key $FPR"
ls pool
