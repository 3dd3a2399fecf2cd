#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# Builds the pmemvm guest image: a patched Debian linux-source-6.1 kernel
# (vmlinux with a PVH note, bzImage) and an initramfs with busybox, a static
# fio, ndctl, mkfs.xfs, make-bcache and the pmemvm /init.
#
#   guest-images/build.sh [--out DIR] [--jobs N] [--force]
#   guest-images/build.sh --modular [--out DIR] [--jobs N] [--force]
#   guest-images/build.sh --linux 6.12 [--out DIR] [--jobs N] [--force]
#   guest-images/build.sh --check-space   # only the free-space check of a cold build
#
# Outputs (default DIR: guest-images/out/): vmlinux, bzImage,
# initramfs.cpio.gz, manifest.json.  With --modular, only a modular variant
# of the kernel (NVDIMM drivers as modules, config/modular.config; default
# DIR: guest-images/out/modular/): bzImage, vmlinux, config, kernelrelease
# and modules/ (what `make modules_install INSTALL_MOD_PATH=modules` writes),
# for `pmemvm --modules`.  With --linux 6.12, only a Linux 6.12 kernel for CXL
# region, poison and event work (Debian's linux-source-6.12, no patches,
# config/linux-6.12.config after pmemvm.config; default DIR:
# guest-images/out/linux-6.12/): vmlinux, bzImage, config, kernelrelease,
# modules.builtin* and modules/ (those, indexed, for `pmemvm --modules`); it
# boots with the image's initramfs.  Everything is cached by a hash of all
# inputs; an unchanged rebuild prints "cached" and takes seconds.
# See docs/guest-image.md and docs/own-kernel.md.
set -eu -o pipefail

GI_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
OUT="$GI_DIR/out"
WORK="${PMEMVM_IMAGE_WORK:-$GI_DIR/build}"
# Finished stages, keyed by input hash, shared by every checkout on this machine
# (a fresh clone finds the kernels an earlier one built).
CACHE="${PMEMVM_IMAGE_CACHE:-${XDG_CACHE_HOME:-${HOME:-$(getent passwd "$(id -u)" | cut -d: -f6)}/.cache}/pmemvm/image}"
JOBS=$(nproc)
FORCE=0
MODULAR=0
CHECK_SPACE=0
# --linux: the kernel's Debian source package version; 6.1 is the image's.
LINUX=6.1

log() { printf '[guest-image %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { printf '[guest-image] ERROR: %s\n' "$*" >&2; exit 1; }

while [ $# -gt 0 ]; do
    case "$1" in
        --out) OUT="${2:?--out needs a directory}"; shift 2 ;;
        --out=*) OUT="${1#--out=}"; shift ;;
        --jobs) JOBS="${2:?--jobs needs a number}"; shift 2 ;;
        --force) FORCE=1; shift ;;
        --modular) MODULAR=1; shift ;;
        --linux) LINUX="${2:?--linux needs a version (6.1 or 6.12)}"; shift 2 ;;
        --linux=*) LINUX="${1#--linux=}"; shift ;;
        --check-space) CHECK_SPACE=1; shift ;;
        -h|--help) sed -n '3,25p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown argument: $1 (see --help)" ;;
    esac
done
usage() { printf 'guest-images/build.sh: %s\n' "$*" >&2; exit 2; }
case "$LINUX" in
    6.1|6.12) ;;
    *) usage "unknown --linux version '$LINUX': this script builds Debian's linux-source-6.1 (the image's kernel, the default) or linux-source-6.12 (--linux 6.12)" ;;
esac
[ "$LINUX" = 6.1 ] || [ "$MODULAR" -eq 0 ] || usage "--modular builds Linux 6.1 only; drop --linux $LINUX or --modular"
[ "$MODULAR" -eq 0 ] || [ "$OUT" != "$GI_DIR/out" ] || OUT="$GI_DIR/out/modular"
[ "$LINUX" = 6.1 ] || [ "$OUT" != "$GI_DIR/out" ] || OUT="$GI_DIR/out/linux-$LINUX"

# A cold build peaks at about 2 GiB in $WORK (kernel tree and objects 1.6 GiB,
# fio); refuse before the long step rather than fail in the middle of it.
BUILD_SPACE_MIB=3072
# free_mib DIR: MiB free on the file system of DIR or of its nearest existing parent.
free_mib() {
    local d=$1
    while [ ! -d "$d" ]; do d=$(dirname "$d"); done
    df -Pk "$d" | awk 'NR==2 {print int($4 / 1024)}'
}
space_sentence() {
    echo "building the guest image needs about $BUILD_SPACE_MIB MiB free in $WORK, which has ${1:-0} MiB; free space there or set PMEMVM_IMAGE_WORK to a larger file system"
}
# --check-space: only the free-space check of a cold build (./pmemvm runs it before it
# installs anything): status 2 with one sentence when no image is in OUT, no stage is
# cached and WORK's file system is too small; creates nothing.
if [ "$CHECK_SPACE" -eq 1 ]; then
    if [ -f "$OUT/manifest.json" ] || compgen -G "$CACHE/kernel-*" >/dev/null; then
        exit 0
    fi
    avail=$(free_mib "$WORK")
    [ "${avail:-0}" -ge "$BUILD_SPACE_MIB" ] || { echo "pmemvm: $(space_sentence "$avail")" >&2; exit 2; }
    exit 0
fi
mkdir -p "$OUT" "$WORK" "$CACHE"
OUT=$(cd "$OUT" && pwd)
WORK=$(cd "$WORK" && pwd)
CACHE=$(cd "$CACHE" && pwd)
# Input paths below (and their globs) are relative to guest-images/.
cd "$GI_DIR"
[ -f rootfs/init ] || die "missing $GI_DIR/rootfs/init"
compgen -G 'patches/*.patch' >/dev/null || die "no kernel patches in $GI_DIR/patches"

# shellcheck source=lib/kernel.sh
. "$GI_DIR/lib/kernel.sh"
# shellcheck source=lib/initramfs.sh
. "$GI_DIR/lib/initramfs.sh"
# shellcheck source=lib/kernel-modular.sh
. "$GI_DIR/lib/kernel-modular.sh"

# The kernel lib/kernel.sh builds: Debian source version, patches, fragments.
KERNEL_VERSION=$LINUX
if [ "$LINUX" = 6.1 ]; then
    KERNEL_PATCHES=$(echo patches/*.patch)
    KERNEL_FRAGMENTS="config/pmemvm.config"
else
    # Stock Debian 6.12: patches 0001 (nd_pmem.nowait) and 0002 (bcache.bch_nowait)
    # are 6.1's and do not apply (6.12 sets queue flags as queue_limits features;
    # 0002's request.c hunks fail too); 6.12's pmem.c sets no BLK_FEAT_NOWAIT either.
    KERNEL_PATCHES=""
    KERNEL_FRAGMENTS="config/pmemvm.config config/linux-$LINUX.config"
fi

# ---- host packages --------------------------------------------------------
# Kernel build, initramfs contents and fio's (static) build dependencies.
HOST_PACKAGES="linux-source-$LINUX build-essential flex bison bc libelf-dev libssl-dev
    busybox-static ndctl daxctl xfsprogs e2fsprogs bcache-tools kmod cpio zstd xz-utils patch
    dpkg-dev libaio-dev zlib1g-dev pkg-config python3 file"
# Packages whose exact versions feed the cache key.
KERNEL_KEY_PACKAGES="linux-source-$LINUX gcc-12 binutils flex bison libelf-dev libssl-dev"
INITRAMFS_KEY_PACKAGES="busybox-static ndctl daxctl xfsprogs e2fsprogs bcache-tools kmod libaio-dev zlib1g-dev gcc-12 libc6-dev libc6"

ensure_deb_src() {
    if apt-cache showsrc fio 2>/dev/null | grep '^Version:' >/dev/null; then
        return 0
    fi
    log "adding a deb-src entry for Debian bookworm (needed for 'apt-get source fio')"
    cat > /etc/apt/sources.list.d/pmemvm-deb-src.sources <<'EOF'
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
    apt-get update -qq
    apt-cache showsrc fio 2>/dev/null | grep '^Version:' >/dev/null \
        || die "apt-get source fio is not available even with deb-src"
}

# linux-source-6.12 comes from bookworm-security (6.12.118-1~deb12u1 on 2026-12-07)
# or bookworm-backports (6.12.95-1~bpo12+1): a plain `apt-get install` takes the newer.
# (`-t bookworm-backports` would take the older one and move linux-libc-dev and
# linux-perf to backports too.)  Where no source offers it, bookworm-backports is added,
# as guest-images/lib/qemu-install.sh adds it.
ensure_backports() {
    if apt-cache policy "$1" 2>/dev/null | grep 'Candidate: [0-9]' >/dev/null; then
        return 0
    fi
    log "adding a bookworm-backports entry (needed for $1)"
    cat > /etc/apt/sources.list.d/pmemvm-backports.sources <<'EOF'
Types: deb
URIs: http://deb.debian.org/debian
Suites: bookworm-backports
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
    apt-get update -qq
    apt-cache policy "$1" 2>/dev/null | grep 'Candidate: [0-9]' >/dev/null \
        || die "no apt source offers $1, even with bookworm-backports"
}

ensure_packages() {
    local missing="" p
    for p in $HOST_PACKAGES; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep 'install ok installed' >/dev/null \
            || missing="$missing $p"
    done
    if [ -n "$missing" ]; then
        [ "$(id -u)" -eq 0 ] || die "missing packages:$missing (run as root or apt-get install them)"
        log "apt-get install:$missing"
        apt-get update -qq
        ensure_backports "linux-source-$LINUX"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >/dev/null
    fi
    ensure_deb_src
}

pkg_versions() {
    local p
    for p in "$@"; do
        printf '%s=%s\n' "$p" "$(dpkg-query -W -f='${Version}' "$p" 2>/dev/null || echo none)"
    done
}

fio_src_version() {
    apt-cache showsrc fio | sed -n 's/^Version: //p' | sort -V | tail -1
}

sha() { sha256sum "$1" | cut -d' ' -f1 || die "cannot hash $1"; }

check_space() {
    local avail
    avail=$(free_mib "$WORK")
    [ "${avail:-0}" -ge "$BUILD_SPACE_MIB" ] || die "$(space_sentence "$avail")"
}

# ---- cache keys -------------------------------------------------------------
ensure_packages

FIO_VERSION=$(fio_src_version)
kernel_inputs() {
    local f
    for f in lib/kernel.sh $KERNEL_FRAGMENTS $KERNEL_PATCHES; do
        echo "file $f $(sha "$GI_DIR/$f")"
    done
    pkg_versions $KERNEL_KEY_PACKAGES
}
initramfs_inputs() {
    local f
    for f in lib/initramfs.sh rootfs/*; do
        echo "file $f $(sha "$GI_DIR/$f")"
    done
    echo "fio-source=$FIO_VERSION"
    # The initramfs carries the kernel's modules.builtin: it follows the kernel.
    echo "kernel=$KERNEL_KEY"
    pkg_versions $INITRAMFS_KEY_PACKAGES
}
modular_inputs() {
    local f
    for f in lib/kernel-modular.sh config/pmemvm.config config/modular.config patches/*.patch; do
        echo "file $f $(sha "$GI_DIR/$f")"
    done
    pkg_versions $KERNEL_KEY_PACKAGES xz-utils
}

# publish TMP DIR: moves a finished stage into the cache in one rename (TMP is
# in the cache's file system). Another build that published the same key
# first wins; its result is the same by construction of the key.
publish() {
    if ! mv -T "$1" "$2" 2>/dev/null; then
        [ -d "$2" ] || die "cannot move $1 to $2"
        rm -rf "$1"
    fi
}

# --modular: the modular kernel only, cached by its own key.
if [ "$MODULAR" -eq 1 ]; then
    MODULAR_KEY=$(modular_inputs | sha256sum | cut -c1-16)
    MDIR="$CACHE/kernel-modular-$MODULAR_KEY"
    if [ "$FORCE" -eq 0 ] && [ -f "$MDIR/build-seconds" ]; then
        log "modular kernel: cached ($MDIR)"
    else
        check_space
        rm -rf "$MDIR"
        tmp=$(mktemp -d "$CACHE/.kernel-modular-$MODULAR_KEY.XXXXXX")
        kernel_build_modular "$tmp"
        publish "$tmp" "$MDIR"
    fi
    # lib/modules/<release>/build names the kept build tree, as after a user's own
    # `make modules_install` (pmemvm suite ndctl --nfit-test builds against it).
    ln -sfn "$MDIR/tree" "$MDIR/modules/lib/modules/$(cat "$MDIR/kernelrelease")/build"
    if [ "$(cat "$OUT/key" 2>/dev/null)" != "$MODULAR_KEY" ] || [ ! -L "$OUT/modules/lib/modules/$(cat "$MDIR/kernelrelease")/build" ]; then
        log "writing $OUT"
        rm -rf "$OUT/modules" "$OUT/key"
        cp -a "$MDIR/bzImage" "$MDIR/vmlinux" "$MDIR/config" "$MDIR/kernelrelease" \
            "$MDIR/build-seconds" "$MDIR/modules" "$OUT/"
        echo "$MODULAR_KEY" > "$OUT/key"
    fi
    log "modular kernel: $OUT ($(cat "$OUT/kernelrelease"), built in $(cat "$OUT/build-seconds") s)"
    exit 0
fi

# --linux 6.12: that kernel only, cached by its own key. It boots with the image's
# initramfs, whose /lib/modules is 6.1's: modules/ gives the guest its own
# modules.builtin through `pmemvm --modules` (lib/kernel.sh, kernel_builtin_tree).
if [ "$LINUX" != 6.1 ]; then
    KERNEL_KEY=$(kernel_inputs | sha256sum | cut -c1-16)
    KDIR="$CACHE/linux-$LINUX-$KERNEL_KEY"
    if [ "$FORCE" -eq 0 ] && [ -f "$KDIR/build-seconds" ]; then
        log "kernel $LINUX: cached ($KDIR)"
    else
        check_space
        rm -rf "$KDIR"
        tmp=$(mktemp -d "$CACHE/.linux-$LINUX-$KERNEL_KEY.XXXXXX")
        kernel_build "$tmp"
        kernel_builtin_tree "$tmp/modules" "$(cat "$tmp/kernelrelease")" "$tmp"
        kernel_inputs > "$tmp/inputs"
        publish "$tmp" "$KDIR"
    fi
    kernel_check_pvh "$KDIR/vmlinux"
    if [ "$FORCE" -eq 1 ] || [ "$(cat "$OUT/key" 2>/dev/null)" != "$KERNEL_KEY" ] || [ ! -f "$OUT/vmlinux" ]; then
        log "writing $OUT"
        rm -rf "$OUT/modules" "$OUT/key"
        cp -a "$KDIR"/{vmlinux,bzImage,config,kernelrelease,build-seconds,inputs,modules.builtin,modules.builtin.modinfo,modules} "$OUT/"
        echo "$KERNEL_KEY" > "$OUT/key"
    fi
    [ -f "$GI_DIR/out/initramfs.cpio.gz" ] \
        || log "no guest-images/out/initramfs.cpio.gz yet: guest-images/build.sh (no --linux) builds the initramfs this kernel boots with"
    log "kernel $LINUX: $OUT ($(cat "$OUT/kernelrelease"), $(sed -n "s/^linux-source-$LINUX=//p" "$OUT/inputs"), built in $(cat "$OUT/build-seconds") s)"
    log "boot it with: pmemvm run --kernel $OUT/bzImage --modules $OUT/modules ..."
    exit 0
fi

KERNEL_KEY=$(kernel_inputs | sha256sum | cut -c1-16)
INITRAMFS_KEY=$(initramfs_inputs | sha256sum | cut -c1-16)
INPUT_HASH=$( { sha "$GI_DIR/build.sh"; echo "$KERNEL_KEY $INITRAMFS_KEY"; } | sha256sum | cut -d' ' -f1)

if [ "$FORCE" -eq 0 ] && [ -f "$OUT/manifest.json" ] \
    && python3 "$GI_DIR/lib/manifest.py" check "$OUT" "$INPUT_HASH"; then
    log "cached: $OUT is up to date (input hash ${INPUT_HASH:0:16})"
    exit 0
fi

T_START=$(date +%s)
KDIR="$CACHE/kernel-$KERNEL_KEY"
IDIR="$CACHE/initramfs-$INITRAMFS_KEY"

KERNEL_CACHED=false
INITRAMFS_CACHED=false
if [ "$FORCE" -eq 0 ] && [ -f "$KDIR/build-seconds" ]; then
    KERNEL_CACHED=true
    log "kernel: cached ($KDIR)"
else
    check_space
    rm -rf "$KDIR"
    tmp=$(mktemp -d "$CACHE/.kernel-$KERNEL_KEY.XXXXXX")
    kernel_build "$tmp"
    publish "$tmp" "$KDIR"
fi
kernel_check_pvh "$KDIR/vmlinux"

if [ "$FORCE" -eq 0 ] && [ -f "$IDIR/build-seconds" ]; then
    INITRAMFS_CACHED=true
    log "initramfs: cached ($IDIR)"
else
    check_space
    rm -rf "$IDIR"
    tmp=$(mktemp -d "$CACHE/.initramfs-$INITRAMFS_KEY.XXXXXX")
    initramfs_build "$tmp"
    publish "$tmp" "$IDIR"
fi

log "writing $OUT"
for f in vmlinux bzImage; do cp "$KDIR/$f" "$OUT/$f.tmp" && mv "$OUT/$f.tmp" "$OUT/$f"; done
cp "$IDIR/initramfs.cpio.gz" "$OUT/initramfs.cpio.gz.tmp" && mv "$OUT/initramfs.cpio.gz.tmp" "$OUT/initramfs.cpio.gz"

{
    echo "input_hash=$INPUT_HASH"
    echo "kernel_key=$KERNEL_KEY"
    echo "initramfs_key=$INITRAMFS_KEY"
    echo "kernel_release=$(cat "$KDIR/kernelrelease")"
    echo "kernel_build_seconds=$(cat "$KDIR/build-seconds")"
    echo "initramfs_build_seconds=$(cat "$IDIR/build-seconds")"
    echo "total_seconds=$(( $(date +%s) - T_START ))"
    echo "kernel_cached=$KERNEL_CACHED"
    echo "initramfs_cached=$INITRAMFS_CACHED"
    echo "fio_version=$(cat "$IDIR/fio-version")"
    echo "initramfs_uncompressed_size=$(cat "$IDIR/uncompressed-size")"
    echo "fio_source=$FIO_VERSION"
    echo "config=$KDIR/config"
} > "$WORK/manifest.env"
{ kernel_inputs; initramfs_inputs; echo "file build.sh $(sha "$GI_DIR/build.sh")"; } > "$WORK/manifest.inputs"
python3 "$GI_DIR/lib/manifest.py" write "$OUT" "$GI_DIR" "$WORK/manifest.env" "$IDIR/contents.txt"
log "done in $(( $(date +%s) - T_START )) s: $OUT/{vmlinux,bzImage,initramfs.cpio.gz,manifest.json}"
