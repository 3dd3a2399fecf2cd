#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# Installs (or upgrades to) the QEMU pmemvm runs its L1 VMs and its peer
# engine on. Debian 12's own QEMU 7.2 loses nested guests' wake-ups under TCG
# (a guest with two or more vCPUs under pmemvm in the L1 can stay halted for
# good, and an idle L1 needs key events; docs/nested-platform.md, "QEMU 7.2:
# lost wake-ups"); QEMU 10 from bookworm-backports did not lose them in our runs. On Debian 12 this adds a
# bookworm-backports source (default priority: nothing else is taken from it)
# and installs qemu-system-x86 from there; elsewhere the distribution's own.
#
# Usage: guest-images/lib/qemu-install.sh   (as root; quiet when QEMU >= 10 is there)
#        guest-images/lib/qemu-install.sh --unpack DIR
#   --unpack installs nothing system-wide: it prints the path of a QEMU >= 10 —
#   the one on PATH if it is one, else bookworm-backports' packages unpacked
#   into DIR/qemu-VERSION (once; a wrapper there points QEMU at its own modules
#   and firmware). The test suite keeps Debian 12's QEMU 7.2 on PATH, whose TCG
#   runs nested guests faster, and names this one for the tests that need a
#   QEMU 10
#   (tests/run.sh, $PMEMVM_QEMU_10).
set -eu -o pipefail

min_major=10
major() { "$1" --version 2>/dev/null | sed -n '1s/.*version \([0-9]*\)\..*/\1/p' || true; }
export DEBIAN_FRONTEND=noninteractive
codename=$(. /etc/os-release 2>/dev/null && echo "${VERSION_CODENAME:-}")

add_backports() {
    local src=/etc/apt/sources.list.d/pmemvm-backports.sources
    [ -f "$src" ] || cat > "$src" <<'SRC'
Types: deb
URIs: http://deb.debian.org/debian
Suites: bookworm-backports
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
}

if [ "${1:-}" = --unpack ]; then
    dir=${2:?usage: qemu-install.sh --unpack DIR}
    onpath=$(command -v qemu-system-x86_64 || true)
    have=$([ -z "$onpath" ] || major "$onpath")
    if [ -n "$have" ] && [ "$have" -ge "$min_major" ]; then
        echo "$onpath"
        exit 0
    fi
    if [ "$codename" != bookworm ]; then
        echo "qemu-install.sh: --unpack fetches QEMU $min_major from bookworm-backports, and this is not Debian 12 ($codename); install QEMU $min_major or newer" >&2
        exit 2
    fi
    add_backports
    apt-get update -qq
    ver=$(apt-cache madison qemu-system-x86 | awk -F' *[|] *' '$3 ~ /bookworm-backports/ { print $2; exit }')
    bios=$(apt-cache madison seabios | awk -F' *[|] *' '$3 ~ /bookworm-backports/ { print $2; exit }')
    [ -n "$ver" ] || { echo "qemu-install.sh: bookworm-backports offers no qemu-system-x86" >&2; exit 1; }
    dest="$dir/qemu-${ver//[:~+]/_}"
    if [ ! -x "$dest/qemu-system-x86_64" ]; then
        mkdir -p "$dir"
        tmp=$(mktemp -d "$dir/.unpack.XXXXXX")
        chmod 755 "$tmp"
        pkgs="qemu-system-x86=$ver qemu-system-common=$ver qemu-system-data=$ver"
        [ -z "$bios" ] || pkgs="$pkgs seabios=$bios"
        # shellcheck disable=SC2086 # one argument per package
        (cd "$tmp" && apt-get download -qq $pkgs 2>&1 | grep -v '^W: Download is performed unsandboxed' >&2 || true)
        for deb in "$tmp"/*.deb; do dpkg-deb -x "$deb" "$tmp/root"; done
        rm -f "$tmp"/*.deb
        cat > "$tmp/qemu-system-x86_64" <<EOF
#!/bin/sh
# QEMU $ver from bookworm-backports, unpacked by guest-images/lib/qemu-install.sh --unpack
export QEMU_MODULE_DIR="$dest/root/usr/lib/x86_64-linux-gnu/qemu"
exec "$dest/root/usr/bin/qemu-system-x86_64" -L "$dest/root/usr/share/seabios" -L "$dest/root/usr/share/qemu" "\$@"
EOF
        chmod 755 "$tmp/qemu-system-x86_64"
        rm -rf "$dest"
        mv "$tmp" "$dest"
    fi
    got=$(major "$dest/qemu-system-x86_64")
    if [ -z "$got" ] || [ "$got" -lt "$min_major" ]; then
        echo "qemu-install.sh: the QEMU unpacked in $dest does not run (version '${got:-none}')" >&2
        exit 1
    fi
    echo "$dest/qemu-system-x86_64"
    exit 0
fi

have=$(major qemu-system-x86_64)
if [ -n "$have" ] && [ "$have" -ge "$min_major" ]; then
    exit 0
fi
if [ "$codename" = bookworm ]; then
    add_backports
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends -t bookworm-backports qemu-system-x86 >/dev/null
else
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends qemu-system-x86 >/dev/null
fi
