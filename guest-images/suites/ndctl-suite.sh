#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
#
# ndctl's own test suite (meson test of a tree built by guest-images/suites/ndctl-build.sh)
# in the guest, on the ACPI.NFIT bus of pmemvm's NVDIMMs. Runs in the Debian root file
# system of `pmemvm run --rootfs debian --packages "$(cat guest-images/suites/ndctl-packages)"`.
#
#   sh /job/ndctl-suite.sh TREE [NAME...]
#
# TREE is the cached build (<hash>/ of ndctl-build.sh, holding src/, build/ and path), put
# read-only into the guest (e.g. `--put ~/.cache/pmemvm/ndctl/<hash>:/job/ndctl`). Meson's
# build directory records absolute paths, so the tree is copied to the path it was built at
# (TREE/path, /var/tmp/pmemvm-ndctl/<hash>) in the guest's private root file system copy,
# where the tests may write. NAMEs are meson test names (default: the whole suite).
# The JUnit XML, meson's text log, the kernel log and one line per test are left in
# /job/ndctl-results (bring them back with `--get /job/ndctl-results`). The status is
# meson test's (0: every test passed or was skipped).
set -eu
if [ $# -lt 1 ] || [ ! -f "$1/path" ] || [ ! -d "$1/build/meson-private" ]; then
    echo "ndctl-suite.sh: give the tree of guest-images/suites/ndctl-build.sh (the directory holding path, src/ and build/) as the first argument, then the test names." >&2
    exit 2
fi
tree=$1
shift
fixed=$(cat "$tree/path")
case "$fixed" in
    /var/tmp/pmemvm-ndctl/*) ;;
    *) echo "ndctl-suite.sh: $tree/path names $fixed, not a directory below /var/tmp/pmemvm-ndctl/." >&2; exit 2 ;;
esac
results=/job/ndctl-results
mkdir -p "$results" "$(dirname "$fixed")"
rm -rf "$fixed"
cp -a "$tree/." "$fixed"
rm -f "$fixed/build/meson-logs/testlog"*

# What the tests expect of a Debian system that this chroot does not start by itself:
# /var/tmp and /tmp writable (the root file system copy and the init's tmpfs), the kernel's
# /lib/modules/$(uname -r)/modules.builtin when the host put it at /job/kernel (kmod's
# modinfo and daxctl-devices.sh look for built-in drivers there: this kernel has no modules).
if [ -f /job/kernel/modules.builtin ]; then
    kmods=/lib/modules/$(uname -r)
    mkdir -p "$kmods"
    cp /job/kernel/modules.builtin* "$kmods/"
    depmod -a "$(uname -r)" 2>/dev/null || true
fi

# No udevd: the chroot starts no init, and libndctl finds udev's queue empty without one.
# device-mapper then manages /dev/mapper/NAME itself when told so (dmsetup(8),
# DM_DISABLE_UDEV): without it dm.sh's `dmsetup create` made the device but no
# /dev/mapper/test_pmem for its mkfs.ext4. (With systemd-udevd started in the chroot,
# dmsetup create did not return within 9 minutes: docs/ndctl-suite.md.)
export DM_DISABLE_UDEV=1

{
    echo "kernel $(uname -r)"
    echo "ndctl tree $fixed ($(cd "$fixed/build" && ./ndctl/ndctl --version))"
    echo "meson $(meson --version)"
    echo "buses:"
    ls /sys/bus/nd/devices/ 2>/dev/null | tr '\n' ' '
    echo
    "$fixed/build/ndctl/ndctl" list -BDRiu || true
} >"$results/platform.txt" 2>&1
cat "$results/platform.txt"

dmesg >"$results/dmesg-before.txt" 2>&1 || true
t0=$(date +%s)
set +e
# ndctl's tests get meson's 600 s each on hardware; under an emulated L1 (nested TCG) on a
# loaded 2-core host sub-section.sh took 600.6 s where it takes about 60 s alone, so the
# limit is scaled (PMEMVM_NDCTL_TIMEOUT_MULTIPLIER, default 3).
(cd "$fixed/build" && meson test -C . --no-rebuild --print-errorlogs \
    --timeout-multiplier "${PMEMVM_NDCTL_TIMEOUT_MULTIPLIER:-3}" "$@")
st=$?
set -e
echo "ndctl-suite.sh: meson test took $(( $(date +%s) - t0 )) s, status $st"
dmesg >"$results/dmesg.txt" 2>&1 || true
for f in testlog.junit.xml testlog.txt testlog.json meson-log.txt; do
    [ ! -f "$fixed/build/meson-logs/$f" ] || cp "$fixed/build/meson-logs/$f" "$results/"
done
exit "$st"
