#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
#
# Prepare the L1 VM of `--engine nested` and the nested test harness: Debian's
# stock 6.1 kernel (downloaded with `apt-get download`, unpacked, never
# installed) and an initramfs with busybox-static, the KVM + virtio-9p modules
# and init (this directory). pmemvm embeds this directory's three files and
# runs them from its cache (vmm/lab/src/nested/prepare.rs).
# Also a small "stock" L2 initramfs (busybox, the NVDIMM modules, l2-init) for
# booting the same kernel under pmemvm inside L1.
#
# Usage: prepare.sh CACHE_DIR
# Prints the directory holding vmlinuz, initramfs.cpio.gz,
# l2-initramfs.cpio.gz and kernel-package.txt as its last line of stdout.
# Cached by a hash of this script, init, l2-init and $PMEMVM_L1_KERNEL_PKG:
# a second run only hashes and exits.
# Needs: apt-get, apt-cache, dpkg-deb, cpio, gzip, xz-utils,
# zstd, busybox-static. Exit status 3: one of them is missing (the tests
# skip; pmemvm names the package to install); any other failure exits 1.
set -eu -o pipefail

if [ $# -ne 1 ]; then
    echo "usage: $0 CACHE_DIR" >&2
    exit 2
fi
cache=$1
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$cache"
cache=$(cd "$cache" && pwd)

key=$( (cat "$here/prepare.sh" "$here/init" "$here/l2-init"; echo "pkg=${PMEMVM_L1_KERNEL_PKG:-}") \
    | sha256sum | cut -c1-16)
out="$cache/l1-$key"
if [ -f "$out/ready" ]; then
    echo "$out"
    exit 0
fi

# One preparation at a time (tests run in parallel threads and processes).
exec 9>"$cache/l1.lock"
flock 9
if [ -f "$out/ready" ]; then
    echo "$out"
    exit 0
fi

for pair in apt-get:apt apt-cache:apt dpkg-deb:dpkg cpio:cpio gzip:gzip xz:xz-utils zstd:zstd \
    busybox:busybox-static; do
    tool=${pair%%:*}
    command -v "$tool" >/dev/null || {
        echo "prepare.sh: '$tool' not found (Debian package ${pair#*:})" >&2
        exit 3
    }
done
if ldd "$(command -v busybox)" >/dev/null 2>&1; then
    echo "prepare.sh: busybox is dynamically linked (Debian package busybox-static)" >&2
    exit 3
fi

pkg=${PMEMVM_L1_KERNEL_PKG:-}
find_pkg() {
    apt-cache search --names-only '^linux-image-6\.1\.0-[0-9]+-amd64$' | cut -d' ' -f1 | sort -V | tail -n1
}
if [ -z "$pkg" ]; then
    pkg=$(find_pkg)
    # A fresh machine has no package lists yet: fetch them once (root only).
    if [ -z "$pkg" ] && [ "$(id -u)" -eq 0 ]; then
        echo "prepare.sh: apt-get update (no package lists yet)" >&2
        apt-get update -qq >&2 || true
        pkg=$(find_pkg)
    fi
fi
# From here on every failure is a harness failure (exit 1), not a skip: the
# tools are there, so a missing package or a failed download is a fault.
if [ -z "$pkg" ]; then
    echo "prepare.sh: apt knows no linux-image-6.1.0-*-amd64 package (is a Debian bookworm source configured? apt-get update)" >&2
    exit 1
fi

mkdir -p "$cache/debs"
deb=$(ls "$cache/debs/${pkg}_"*_amd64.deb 2>/dev/null | sort -V | tail -n1 || true)
if [ -z "$deb" ]; then
    echo "prepare.sh: downloading $pkg" >&2
    (cd "$cache/debs" && apt-get download "$pkg" >&2) || {
        echo "prepare.sh: 'apt-get download $pkg' failed (no access to the Debian archive?)" >&2
        exit 1
    }
    deb=$(ls "$cache/debs/${pkg}_"*_amd64.deb | sort -V | tail -n1)
fi

work=$(mktemp -d "$cache/tmp.XXXXXX")
trap 'rm -rf "$work"' EXIT
echo "prepare.sh: unpacking $(basename "$deb")" >&2
dpkg-deb -x "$deb" "$work/pkg"
kver=$(ls "$work/pkg/lib/modules" | awk 'NR == 1')
moddir="$work/pkg/lib/modules/$kver"
# Module name (dashes as underscores) -> path under $moddir. Dependencies come
# from each module's own .modinfo ("depends=a,b"), so no kmod/depmod is needed.
declare -A modpath
while IFS= read -r -d '' f; do
    b=${f##*/}
    n=${b%%.ko*}
    modpath[${n//-/_}]=${f#"$moddir"/}
done < <(find "$moddir/kernel" -name '*.ko*' -print0)

# module_bytes REL: the module's ELF image on stdout, decompressed.
module_bytes() {
    case "$1" in
    *.ko.xz) xz -dc "$moddir/$1" ;;
    *.ko.zst) zstd -qdc "$moddir/$1" ;;
    *.ko.gz) gzip -dc "$moddir/$1" ;;
    *) cat "$moddir/$1" ;;
    esac
}

# add_module ROOT NAME: NAME's dependencies, then NAME, into ROOT's
# /lib/modules, appended to its load-order file.
add_module() {
    local root=$1 name=${2//-/_} rel base deps dep
    rel=${modpath[$name]:-}
    if [ -z "$rel" ]; then
        echo "prepare.sh: module $2 not found in $pkg" >&2
        exit 1
    fi
    base=${rel##*/}
    base=${base%%.ko*}.ko
    grep -qx "$base" "$root/lib/modules/load-order" && return 0
    deps=$(module_bytes "$rel" | tr '\0' '\n' | grep -a '^depends=' | sed -n 1p | cut -d= -f2 || true)
    for dep in ${deps//,/ }; do
        add_module "$root" "$dep"
    done
    module_bytes "$rel" >"$root/lib/modules/$base"
    echo "$base" >>"$root/lib/modules/load-order"
}

# make_initramfs INIT OUTPUT MODULE...: busybox, INIT as /init and the
# modules with their dependencies, in load order in /lib/modules/load-order.
make_initramfs() {
    local init=$1 output=$2 root want
    shift 2
    root=$(mktemp -d "$work/root.XXXXXX")
    mkdir -p "$root/bin" "$root/lib/modules" "$root/dev"
    : >"$root/lib/modules/load-order"
    for want in "$@"; do
        add_module "$root" "$want"
    done
    cp "$(command -v busybox)" "$root/bin/busybox"
    cp "$init" "$root/init"
    chmod 755 "$root/init" "$root/bin/busybox"
    (cd "$root" && find . | sort | cpio -o -H newc -R 0:0 --quiet) | gzip -6 >"$output"
}

stage="$work/out"
mkdir -p "$stage"
make_initramfs "$here/init" "$stage/initramfs.cpio.gz" \
    irqbypass ccp kvm kvm-amd virtio_ring virtio virtio_pci_modern_dev \
    virtio_pci_legacy_dev virtio_pci 9pnet 9pnet_virtio netfs fscache 9p
make_initramfs "$here/l2-init" "$stage/l2-initramfs.cpio.gz" \
    libnvdimm nfit nd_btt nd_pmem
cp "$work/pkg/boot/vmlinuz-$kver" "$stage/vmlinuz"
version=$(dpkg-deb -f "$deb" Version)
printf 'package=%s\nversion=%s\nkernel=%s\n' "$pkg" "$version" "$kver" >"$stage/kernel-package.txt"
rm -rf "$out"
mv "$stage" "$out"
# Older preparations (other script versions) are not needed any more.
find "$cache" -maxdepth 1 -name 'l1-*' ! -name "l1-$key" -exec rm -rf {} +
touch "$out/ready"
echo "prepare.sh: L1 ready: $pkg $version" >&2
echo "$out"
