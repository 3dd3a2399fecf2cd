#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# Installs (or upgrades to) the QEMU pmemvm runs its L1 VMs and its peer
# engine on. Debian 12's own QEMU 7.2 loses nested guests' wake-ups under TCG
# (a guest with two or more vCPUs under pmemvm in the L1 can stay halted for
# good, and an idle L1 needs key events; docs/testing.md, "QEMU 7.2 and nested
# guests"); QEMU 10 from bookworm-backports did not lose them in our runs. On Debian 12 this adds a
# bookworm-backports source (default priority: nothing else is taken from it)
# and installs qemu-system-x86 from there; elsewhere the distribution's own.
# Usage: guest-images/lib/qemu-install.sh   (as root; quiet when QEMU >= 10 is there)
set -eu -o pipefail

min_major=10
have=$(qemu-system-x86_64 --version 2>/dev/null | sed -n '1s/.*version \([0-9]*\)\..*/\1/p' || true)
if [ -n "$have" ] && [ "$have" -ge "$min_major" ]; then
    exit 0
fi
codename=$(. /etc/os-release 2>/dev/null && echo "${VERSION_CODENAME:-}")
export DEBIAN_FRONTEND=noninteractive
if [ "$codename" = bookworm ]; then
    src=/etc/apt/sources.list.d/pmemvm-backports.sources
    if [ ! -f "$src" ]; then
        cat > "$src" <<'SRC'
Types: deb
URIs: http://deb.debian.org/debian
Suites: bookworm-backports
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
    fi
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends -t bookworm-backports qemu-system-x86 >/dev/null
else
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends qemu-system-x86 >/dev/null
fi
