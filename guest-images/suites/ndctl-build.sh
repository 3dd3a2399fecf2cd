#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
#
# Builds ndctl and its own test suite (meson, -Dtest=enabled -Ddestructive=enabled) on
# the host, for running the suite in the guest's Debian root file system (same
# userland: Debian 12). Installs the build dependencies with apt-get when missing.
#
#   guest-images/suites/ndctl-build.sh [SRC]
#
# SRC is an unmodified ndctl source tree (default $PMEMVM_NDCTL_SRC, else
# /work/shared/third-party/ndctl-v81); it is copied, never written. The result is
# cached by a hash of the source tree, this script and the compiler and meson versions in
# ${XDG_CACHE_HOME:-$HOME/.cache}/pmemvm/ndctl/<hash>/ (published with one rename):
#   src/    the copied source tree (the shell tests and test/common run from here)
#   build/  meson's build directory (the binaries, meson-private/, meson-logs/)
#   path    the absolute path the tree was built at: /var/tmp/pmemvm-ndctl/<hash>. Meson
#           records absolute paths, so src/ and build/ work only there; the guest
#           copies the tree to that path (guest-images/suites/ndctl-suite.sh).
# Prints the build directory (<hash>/build). See docs/ndctl-suite.md.
set -eu -o pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
src=${1:-${PMEMVM_NDCTL_SRC:-/work/shared/third-party/ndctl-v81}}
cache=${XDG_CACHE_HOME:-$HOME/.cache}/pmemvm/ndctl

log() { printf '[ndctl-build %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { printf 'ndctl-build.sh: %s\n' "$*" >&2; exit 1; }

if [ $# -gt 1 ] || [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then
    echo "usage: guest-images/suites/ndctl-build.sh [SRC]  (an ndctl source tree; default \$PMEMVM_NDCTL_SRC or /work/shared/third-party/ndctl-v81)" >&2
    exit 2
fi
if [ ! -f "$src/meson.build" ] || [ ! -f "$src/test/meson.build" ]; then
    echo "ndctl-build.sh: $src is not an ndctl source tree (no meson.build and test/meson.build); get ndctl v81 with 'git clone --branch v81 https://github.com/pmem/ndctl' and pass its path (or set PMEMVM_NDCTL_SRC)." >&2
    exit 2
fi
src=$(cd "$src" && pwd)

# Build dependencies (Debian 12 package names).
deps="meson ninja-build pkgconf build-essential libkmod-dev libudev-dev uuid-dev libjson-c-dev libkeyutils-dev libiniparser-dev libtracefs-dev libtraceevent-dev"
missing=""
for p in $deps; do
    dpkg-query -W -f '${Status}\n' "$p" 2>/dev/null | grep '^install ok installed$' >/dev/null || missing="$missing $p"
done
if [ -n "$missing" ]; then
    [ "$(id -u)" -eq 0 ] || die "missing build dependencies:$missing (run as root or apt-get install them)"
    log "apt-get install:$missing"
    apt-get update -qq
    # shellcheck disable=SC2086 # a list of package names
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi

# The key: every file of the source tree (path and content), this script, the toolchain.
key=$( {
    (cd "$src" && find . -path ./.git -prune -o -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum)
    sha256sum "${BASH_SOURCE[0]}" | cut -d' ' -f1
    dpkg-query -W -f '${Package}=${Version}\n' meson ninja-build gcc-12 libc6-dev $deps 2>/dev/null | LC_ALL=C sort
} | sha256sum | cut -c1-16)
out="$cache/$key"
if [ -f "$out/build/meson-private/meson_test_setup.dat" ] && [ -f "$out/path" ]; then
    log "cached: $out (built at $(cat "$out/path"))"
    echo "$out/build"
    exit 0
fi

# Meson records absolute paths: build at the fixed path the guest will use too.
fixed=/var/tmp/pmemvm-ndctl/$key
mkdir -p "$cache" /var/tmp/pmemvm-ndctl
exec 9>"$cache/.lock-$key"
flock 9
if [ -f "$out/build/meson-private/meson_test_setup.dat" ]; then
    log "cached (built meanwhile): $out"
    echo "$out/build"
    exit 0
fi
rm -rf "$fixed"
stage=$(mktemp -d "$cache/.build-$key-XXXXXX")
trap 'rm -rf "$stage" "$fixed"' EXIT
t0=$(date +%s)
log "copying $src to $fixed/src"
mkdir -p "$fixed"
cp -a "$src" "$fixed/src"
rm -rf "$fixed/src/.git" "$fixed/src/build"
chmod -R u+w "$fixed/src"
# A tree exported without symlinks (git's core.symlinks=false form, or a copy through an
# API) has each symlink as a small file holding the target's name, with no newline:
# upstream test/dax-ext4.sh and test/dax-xfs.sh are symlinks to dax.sh. Make them links
# again (meson runs them as programs); their content is the upstream link target.
find "$fixed/src" -type f -size -256c -print0 | while IFS= read -r -d '' f; do
    t=$(cat "$f")
    case "$t" in ''|*[!A-Za-z0-9._/-]*) continue ;; esac
    [ "$(tail -c 1 "$f" | od -An -c | tr -d ' ')" != '\n' ] || continue
    [ -f "$(dirname "$f")/$t" ] || continue
    log "restoring symlink ${f#"$fixed/src/"} -> $t"
    ln -sfn "$t" "$f"
done
log "meson setup (test and destructive tests enabled; docs and systemd off)"
(cd "$fixed/src" && meson setup "$fixed/build" -Dtest=enabled -Ddestructive=enabled \
    -Ddocs=disabled -Dsystemd=disabled) >"$stage/setup.log" 2>&1 \
    || { tail -n 20 "$stage/setup.log" >&2; die "meson setup failed (log above)"; }
log "meson compile"
meson compile -C "$fixed/build" >"$stage/compile.log" 2>&1 \
    || { tail -n 30 "$stage/compile.log" >&2; die "meson compile failed (log above)"; }
# The test binaries and the tools must find their libraries in the guest: name the
# Debian packages that hold what they link, for the root file system's package list.
find "$fixed/build" -type f -perm -u+x ! -name '*.sh' ! -path '*/meson-*' -print0 \
    | xargs -0 ldd 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// { print $3 }' | sort -u \
    | grep -v "^$fixed/" | while read -r lib; do
        # usrmerge: dpkg knows a library by one of /lib/... and /usr/lib/...
        for f in "$lib" "/usr$lib" "${lib#/usr}" "$(readlink -f "$lib")"; do
            dpkg -S "$f" 2>/dev/null && break
        done || echo "unowned: $lib" >&2
    done | cut -d: -f1 | sort -u >"$stage/runtime-packages"
[ -s "$stage/runtime-packages" ] || die "found no runtime library package of the built binaries (ldd or dpkg -S failed)"
printf '%s\n' "$fixed" >"$stage/path"
mv "$stage/setup.log" "$stage/compile.log" "$fixed/build/meson-logs/"
mv "$stage/runtime-packages" "$stage/path" "$fixed/"
log "built in $(( $(date +%s) - t0 )) s; publishing $out"
cp -a "$fixed/." "$stage/tree"
mv "$stage/tree" "$out.tmp-$$"
rm -rf "$out"
mv -T "$out.tmp-$$" "$out"
echo "$out/build"
