#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# Builds an optional Debian bookworm root file system for `pmemvm run --rootfs debian`:
# mmdebstrap (variant essential, plus mount) with the given packages from the host's apt sources,
# packed with `mke2fs -d` into an ext4 image whose size is a multiple of 16 MiB. No guest
# runs. Cached by a hash of this script and the sorted package list.
#
#   guest-images/rootfs-debian.sh [--packages LIST] [--out DIR]
#
# LIST is comma-separated (default: python3,stress-ng,fio,xfsprogs,ndctl: the proofs and
# fio's test suite). Prints the image's path
# (DIR/debian-<key>.ext4, default DIR: guest-images/out/rootfs/); the package versions
# installed are in DIR/debian-<key>.packages. See docs/guest-image.md.
set -eu -o pipefail

GI_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
OUT="$GI_DIR/out/rootfs"
PACKAGES="python3,stress-ng,fio,xfsprogs,ndctl"

log() { printf '[rootfs %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { printf '[rootfs] ERROR: %s\n' "$*" >&2; exit 1; }

while [ $# -gt 0 ]; do
    case "$1" in
        --packages) PACKAGES="${2?--packages needs a list}"; shift 2 ;;
        --packages=*) PACKAGES="${1#--packages=}"; shift ;;
        --out) OUT="${2:?--out needs a directory}"; shift 2 ;;
        --out=*) OUT="${1#--out=}"; shift ;;
        -h|--help) sed -n '3,13p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown argument: $1 (see --help)" ;;
    esac
done

SORTED=$(printf '%s\n' "${PACKAGES//,/$'\n'}" | sed '/^$/d' | sort -u | paste -sd, -)
case "$SORTED" in
    *[!a-z0-9.+,-]*) die "--packages '$PACKAGES': use Debian package names separated by commas" ;;
esac
KEY=$( { sha256sum "${BASH_SOURCE[0]}" | cut -d' ' -f1; echo "$SORTED"; } | sha256sum | cut -c1-16)
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
IMG="$OUT/debian-$KEY.ext4"
if [ -f "$IMG" ] && [ -f "$OUT/debian-$KEY.packages" ]; then
    log "cached: $IMG (packages $SORTED)"
    echo "$IMG"
    exit 0
fi

need=""
command -v mmdebstrap >/dev/null || need="$need mmdebstrap"
command -v mke2fs >/dev/null || need="$need e2fsprogs"
if [ -n "$need" ]; then
    [ "$(id -u)" -eq 0 ] || die "missing packages:$need (run as root or apt-get install them)"
    log "apt-get install:$need"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $need >/dev/null
fi
[ "$(id -u)" -eq 0 ] || die "building the root file system needs root (mmdebstrap in root mode)"

# Each package must exist in the registry: name the missing ones instead of failing late.
missing=""
for p in ${SORTED//,/ }; do
    apt-cache show "$p" >/dev/null 2>&1 || missing="$missing $p"
done
[ -z "$missing" ] || die "not in the apt registry (after apt-get update):$missing"

WORK=$(mktemp -d "$OUT/.build-XXXXXX")
trap 'rm -rf "$WORK"' EXIT
T0=$(date +%s)
log "mmdebstrap bookworm (essential + $SORTED), from the host's apt sources"
# The host's deb822 sources (comments dropped) on stdin: no mirror named here.
for f in /etc/apt/sources.list.d/*.sources; do grep -v '^#' "$f"; echo; done \
    | awk 'BEGIN { RS = ""; ORS = "\n\n" } /Types:[ \t]*deb[ \t]*(\n|$)/' \
    | mmdebstrap --quiet --variant=essential --include="mount,$SORTED" \
        --customize-hook='mkdir -p "$1/job" "$1/tmp" "$1/run" "$1/proc" "$1/sys" "$1/dev"' \
        --customize-hook='chroot "$1" dpkg-query -W -f "\${Package}=\${Version}\n" > "$1/.packages"' \
        bookworm "$WORK/root" -
mv "$WORK/root/.packages" "$WORK/packages"
# Room for the command's writes: 25% + 64 MiB, rounded up to 16 MiB (the NVDIMM align).
used=$(du -sm "$WORK/root" | cut -f1)
size=$(( (used * 5 / 4 + 64 + 15) / 16 * 16 ))
log "mke2fs -t ext4 -d ($used MiB used, image $size MiB)"
mke2fs -q -t ext4 -L pmemvm-debian -m 0 -d "$WORK/root" "$WORK/img" "${size}M"
mv "$WORK/packages" "$OUT/debian-$KEY.packages"
mv "$WORK/img" "$IMG"
log "done in $(( $(date +%s) - T0 )) s: $IMG"
echo "$IMG"
