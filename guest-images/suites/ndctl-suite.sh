#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
#
# ndctl's own test suite (meson test of a tree built by guest-images/suites/ndctl-build.sh)
# in the guest, on the ACPI.NFIT bus of pmemvm's NVDIMMs. Runs in the Debian root file
# system of `pmemvm run --rootfs debian --packages "$(cat guest-images/suites/ndctl-packages)"`.
#
#   sh /job/ndctl-suite.sh [--bus BUS] [--cxl-bus ACPI.CXL] TREE [NAME|!CMD]...
#
# TREE is the cached build (<hash>/ of ndctl-build.sh, holding src/, build/ and path), put
# read-only into the guest (e.g. `--put ~/.cache/pmemvm/ndctl/<hash>:/job/ndctl`). Meson's
# build directory records absolute paths, so the tree is copied to the path it was built at
# (TREE/path, /var/tmp/pmemvm-ndctl/<hash>) in the guest's private root file system copy,
# where the tests may write. NAMEs are meson test names (default: the whole suite); a `!CMD`
# among them is a step: the shell command CMD runs at that point, between two `meson test`
# runs (e.g. `'!ndctl create-namespace -b ACPI.NFIT -s 1G'` before daxctl-devices.sh, which
# takes over the bus's first namespace). Each `meson test`'s JUnit XML and text log are left
# in /job/ndctl-results/meson-N/ (N = 1, 2, ... in order), the kernel log before and after
# and the platform (ndctl list) beside them (bring them back with `--get
# /job/ndctl-results`), and each step's output and status (step-K.txt, step-K.status). The
# status is 0 when every `meson test` ended with 0 (each test passed or was skipped) and
# every step succeeded.
#
# --bus BUS points the tests written for the kernel's nfit_test emulation (clear.sh,
# pmem-errors.sh, inject-error.sh, inject-smart.sh, monitor.sh, ...) at BUS (ACPI.NFIT:
# pmemvm's own bus, which implements ARS, error injection, clear and SMART in its _DSM).
# Their logic is not changed: in the guest's private copy of the tree, test/common names BUS
# for its two nfit_test bus variables, and a `modprobe` first in PATH answers for the
# nfit_test module (there is none to load) and passes every other call to the real one. The
# tree given as TREE, and the host's, are not written.
#
# --cxl-bus ACPI.CXL points the tests written for the kernel's cxl_test emulation
# (cxl-labels.sh, cxl-create-region.sh, ...) at the platform's CXL bus (pmemvm's --cxl-pmem
# devices under ACPI0017, which `cxl list -b` calls ACPI.CXL) the same way: test/common's
# CXL_TEST_BUS, and in the test/cxl-*.sh copies each literal `cxl_test` bus argument
# (`-b cxl_test`, `--bus=cxl_test`) becomes ACPI.CXL, or CXL where `ndctl list -b` asks for
# the nvdimm bus the CXL drivers register (its provider is "CXL"); `modprobe` answers for
# the cxl_test module. Nothing else in them is changed.
#
# Without --bus the tests run where ndctl's maintainers run them: the nfit_test ones on the
# kernel's nfit_test.0/1 (`pmemvm suite ndctl --nfit-test` boots the user's modular kernel
# with tools/testing/nvdimm's modules in /lib/modules/$(uname -r)/extra; the real modprobe
# loads them).
set -eu
bus=""
cxlbus=""
while [ $# -gt 0 ]; do
    case "$1" in
        --bus)
            case "${2:-}" in
                ACPI.NFIT|e820|nfit_test.0|nfit_test.1) bus=$2 ;;
                *) echo "ndctl-suite.sh: --bus ${2:-}: give ACPI.NFIT, e820, nfit_test.0 or nfit_test.1." >&2; exit 2 ;;
            esac
            shift 2 ;;
        --cxl-bus)
            case "${2:-}" in
                ACPI.CXL) cxlbus=$2 ;;
                *) echo "ndctl-suite.sh: --cxl-bus ${2:-}: give ACPI.CXL (the platform's CXL bus)." >&2; exit 2 ;;
            esac
            shift 2 ;;
        *) break ;;
    esac
done
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

# The commands this script puts first in PATH for the tests (below).
shim=/var/tmp/pmemvm-ndctl-shim
mkdir -p "$shim"

common="$fixed/src/test/common"
if [ -n "$bus" ]; then
    sed -i "s/^NFIT_TEST_BUS0=.*/NFIT_TEST_BUS0=\"$bus\"/; s/^NFIT_TEST_BUS1=.*/NFIT_TEST_BUS1=\"$bus\"/" "$common"
    if [ "$(grep -c "^NFIT_TEST_BUS[01]=\"$bus\"\$" "$common")" != 2 ]; then
        echo "ndctl-suite.sh: $common does not set NFIT_TEST_BUS0 and NFIT_TEST_BUS1 as ndctl v81 does; cannot point its tests at $bus." >&2
        exit 2
    fi
    echo "ndctl-suite.sh: the nfit_test tests run on $bus (test/common of the guest's copy: $(grep '^NFIT_TEST_BUS' "$common" | tr '\n' ' '))"
fi
if [ -n "$cxlbus" ]; then
    sed -i "s/^CXL_TEST_BUS=.*/CXL_TEST_BUS=\"$cxlbus\"/" "$common"
    if [ "$(grep -c "^CXL_TEST_BUS=\"$cxlbus\"\$" "$common")" != 1 ]; then
        echo "ndctl-suite.sh: $common does not set CXL_TEST_BUS as ndctl v81 does; cannot point its tests at $cxlbus." >&2
        exit 2
    fi
    for f in "$fixed"/src/test/cxl-*.sh; do
        sed -i -e 's/\("\$NDCTL" list -b \)cxl_test/\1CXL/' \
            -e "s/-b cxl_test/-b $cxlbus/g; s/--bus=cxl_test/--bus=$cxlbus/g" "$f"
        if grep -n -e '-b cxl_test' -e '--bus=cxl_test' "$f" >&2; then
            echo "ndctl-suite.sh: $f still names the cxl_test bus (above); cannot point it at $cxlbus." >&2
            exit 2
        fi
    done
    echo "ndctl-suite.sh: the cxl_test tests run on $cxlbus (test/common of the guest's copy: $(grep '^CXL_TEST_BUS' "$common"))"
fi
# The emulation modules the pointed tests load and remove are not there: a `modprobe` first
# in PATH answers for them and passes every other call to the real one.
if [ -n "$bus$cxlbus" ]; then
    real=$(command -v modprobe)
    cat >"$shim/modprobe" <<SHIM
#!/bin/sh
# pmemvm's ndctl-suite.sh --bus '$bus' --cxl-bus '$cxlbus': no emulation module to load or remove.
for a in "\$@"; do
    case "\$a" in
        nfit_test)
            [ -n "$bus" ] || exec $real "\$@"
            echo "ndctl-suite.sh: modprobe \$*: no nfit_test here; the test runs on $bus" >&2
            exit 0 ;;
        cxl_test|cxl-test)
            [ -n "$cxlbus" ] || exec $real "\$@"
            echo "ndctl-suite.sh: modprobe \$*: no cxl_test here; the test runs on $cxlbus" >&2
            exit 0 ;;
    esac
done
exec $real "\$@"
SHIM
    chmod +x "$shim/modprobe"
fi

# check_dmesg (test/common: dax.sh, daxdev-errors.sh, multi-dax.sh) reads the kernel's log
# of the test's time with `journalctl -r -k --since "-Ns"`. No journald runs in this chroot,
# so without it the check would find no journal and pass without looking. A `journalctl`
# first in PATH answers that one question from the kernel's ring buffer (dmesg): the lines
# stamped within the last N seconds of /proc/uptime, newest first with -r.
cat >"$shim/journalctl" <<'JOURNAL'
#!/bin/sh
# pmemvm's ndctl-suite.sh: the kernel log (-k) from dmesg; no journal is kept here.
kernel=0 rev=0 since=""
while [ $# -gt 0 ]; do
    case $1 in
        -k|--dmesg) kernel=1 ;;
        -r|--reverse) rev=1 ;;
        --since) since=${2:-}; shift ;;
        --since=*) since=${1#--since=} ;;
        *) echo "journalctl: $1: only -k, -r and --since -Ns are answered here (pmemvm's ndctl-suite.sh reads the kernel log with dmesg)" >&2; exit 1 ;;
    esac
    shift
done
[ "$kernel" = 1 ] || { echo "journalctl: only the kernel log (-k) is answered here" >&2; exit 1; }
case $since in
    "") back=-1 ;;
    -*s) back=${since#-}; back=${back%s} ;;
    *) echo "journalctl: --since $since: only -Ns (seconds back) is answered here" >&2; exit 1 ;;
esac
now=$(cut -d' ' -f1 /proc/uptime)
dmesg | awk -v now="$now" -v back="$back" '
    { t = $0; sub(/^\[ */, "", t); sub(/\].*/, "", t) }
    back < 0 || t + 0 >= now - back { print }' |
    if [ "$rev" = 1 ]; then tac; else cat; fi
JOURNAL
chmod +x "$shim/journalctl"

# dax.sh (dax-ext4.sh, dax-xfs.sh) counts PMD faults with `trace-cmd record` then `trace-cmd
# report`. Debian 12's trace-cmd 3.1.6 writes zstd-compressed trace files by default and then
# cannot read them ("libtracecmd: Unsupported file compression", "error reading header for
# trace.dat": reproduced with `trace-cmd record -e sched:sched_switch sleep 1; trace-cmd
# report` in this root file system). A `trace-cmd` first in PATH records uncompressed
# (`--compression none`, which its report reads); every other use goes to it unchanged.
real_trace_cmd=$(command -v trace-cmd || true)
if [ -n "$real_trace_cmd" ]; then
    cat >"$shim/trace-cmd" <<TRACECMD
#!/bin/sh
# pmemvm's ndctl-suite.sh: Debian 12's trace-cmd cannot report its own compressed files.
if [ "\${1:-}" = record ]; then
    shift
    case " \$* " in
        *" --compression"*) exec $real_trace_cmd record "\$@" ;;
        *) exec $real_trace_cmd record --compression none "\$@" ;;
    esac
fi
exec $real_trace_cmd "\$@"
TRACECMD
    chmod +x "$shim/trace-cmd"
fi
export PATH="$shim:$PATH"

# The CXL event and poison tests write /sys/kernel/tracing themselves (no trace-cmd mounts it
# for them, as it does for dax.sh): tracefs is mounted there when the kernel has it.
if [ -d /sys/kernel/tracing ] && [ ! -e /sys/kernel/tracing/trace ]; then
    mount -t tracefs nodev /sys/kernel/tracing \
        || echo "ndctl-suite.sh: could not mount tracefs on /sys/kernel/tracing; tests that trace will fail there" >&2
fi

# The kernel's /lib/modules/$(uname -r)/modules.builtin: the guest's init binds the
# initramfs's into the root file system (kmod's modinfo and daxctl-devices.sh look for the
# built-in kmem driver there; with --modules the packed modules are there too).
[ -f "/lib/modules/$(uname -r)/modules.builtin" ] ||
    echo "ndctl-suite.sh: /lib/modules/$(uname -r)/modules.builtin is missing: daxctl-devices.sh will not find the built-in kmem driver" >&2

# btt-pad-compat.sh reads the BTT's arena layout from debugfs (/sys/kernel/debug/btt/...)
# and skips without it ("seems to be missing the BTT compatibility fixes"); the chroot has
# debugfs only when it is mounted.
if [ -d /sys/kernel/debug ] && ! grep -q ' /sys/kernel/debug debugfs ' /proc/mounts; then
    mount -t debugfs debugfs /sys/kernel/debug 2>/dev/null ||
        echo "ndctl-suite.sh: debugfs cannot be mounted (a kernel without CONFIG_DEBUG_FS): btt-pad-compat.sh will skip" >&2
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

# The tests between two steps (and before the first, after the last) run in one `meson test`
# (meson 1.0.1, serial: every ndctl test is `is_parallel: false`); its logs go to
# $results/meson-N/. ndctl's tests get meson's 600 s each on hardware; under an emulated L1
# (nested TCG) on a loaded 2-core host sub-section.sh took 600.6 s where it takes about 60 s
# alone, so the limit is scaled (PMEMVM_NDCTL_TIMEOUT_MULTIPLIER, default 3).
status=0
segment=0
names=""
# While a `meson test` runs, every PMEMVM_NDCTL_WATCH seconds (default 120) the processes
# that are not sleeping interruptibly (D, R), and each test script's children, with their
# kernel stacks, go to the console and to $results/watch.txt: a test that stops making
# progress says where it waits.
list_processes() {
    for p in /proc/[0-9]*; do
        pid=${p#/proc/}
        [ "$pid" != $$ ] || continue
        # Which process is being read, for the watch to name if a read waits.
        echo "$pid" >"$results/watch.cur"
        # A process can end between the glob and the read: under `set -e` a failed read
        # ended the whole watch (one run's watch.txt stopped after its first entry).
        st=$(sed -n 's/^State:[[:space:]]*\([A-Z]\).*/\1/p' "$p/status" 2>/dev/null) || st=""
        cmd=$( (tr '\0' ' ' <"$p/cmdline") 2>/dev/null | cut -c1-160) || cmd=""
        [ -n "$cmd" ] || continue
        case "$st:$cmd" in
            D:*|R:*|*/test/*|*ndctl*|*daxctl*|*sleep*) ;;
            *) continue ;;
        esac
        echo "  $pid $st wchan=$(cat "$p/wchan" 2>/dev/null || true) $cmd"
        sed 's/^/      /' "$p/stack" 2>/dev/null | head -n 12 || true
    done
    echo done >"$results/watch.cur"
}
# Reading another process's /proc files can also wait for its locks (cmdline takes its
# mmap lock, stack its exec lock). So the listing runs on its own and gets 60 s; one that
# has not finished by then is left (its read ends when the lock is free) and the entry says
# which process it was reading, by /proc/PID/comm (a read that takes no lock of it).
watch_tests() {
    n=0
    nap=""
    # Its sleep ends with it (an orphaned sleep would hold the console pipe open).
    trap 'kill $nap 2>/dev/null; exit 0' TERM
    while :; do
        sleep "${PMEMVM_NDCTL_WATCH:-120}" &
        nap=$!
        wait "$nap"
        n=$((n + ${PMEMVM_NDCTL_WATCH:-120}))
        echo "ndctl-suite.sh: meson test still running after $n s; processes waiting:" \
            >>"$results/watch.txt"
        : >"$results/watch.cur"
        list_processes >>"$results/watch.txt" 2>&1 </dev/null &
        lister=$!
        waited=0
        while [ "$(cat "$results/watch.cur" 2>/dev/null)" != done ] && [ "$waited" -lt 60 ]; do
            sleep 1
            waited=$((waited + 1))
        done
        cur=$(cat "$results/watch.cur" 2>/dev/null || true)
        if [ "$cur" != done ]; then
            kill -9 "$lister" 2>/dev/null || true
            echo "  (the listing waited 60 s reading /proc/$cur, $(cat "/proc/$cur/comm" 2>/dev/null || echo gone); left)" \
                >>"$results/watch.txt"
        fi
        wait "$lister" 2>/dev/null || true
        tail -n 200 "$results/watch.txt" | sed -n '/still running after '"$n"' s/,$p'
    done
}
run_tests() {
    segment=$((segment + 1))
    out="$results/meson-$segment"
    mkdir -p "$out"
    rm -f "$fixed/build/meson-logs/testlog"*
    t0=$(date +%s)
    # shellcheck disable=SC2086 # meson test names are single words
    watch_tests &
    watcher=$!
    (cd "$fixed/build" && meson test -C . --no-rebuild --print-errorlogs \
        --timeout-multiplier "${PMEMVM_NDCTL_TIMEOUT_MULTIPLIER:-3}" $names) && st=0 || st=$?
    kill "$watcher" 2>/dev/null || true
    wait "$watcher" 2>/dev/null || true
    echo "ndctl-suite.sh: meson test${names:- (the whole suite)} took $(( $(date +%s) - t0 )) s, status $st"
    for f in testlog.junit.xml testlog.txt testlog.json; do
        [ ! -f "$fixed/build/meson-logs/$f" ] || cp "$fixed/build/meson-logs/$f" "$out/"
    done
    [ "$st" = 0 ] || status=$st
    names=""
}
steps=0
for a in "$@"; do
    case $a in
        !*)
            [ -z "$names" ] || run_tests
            steps=$((steps + 1))
            echo "ndctl-suite.sh: step: ${a#!}"
            # Its status beside its output: the host fails the test it prepares when it
            # failed (the test would skip without its setup, and a skip is not a failure).
            sh -c "${a#!}" >"$results/step-$steps.txt" 2>&1 && st=0 || st=$?
            echo "$st" >"$results/step-$steps.status"
            if [ "$st" != 0 ]; then
                echo "ndctl-suite.sh: the step \`${a#!}\` failed with status $st:" >&2
                cat "$results/step-$steps.txt" >&2
                status=1
            fi
            ;;
        *) names="$names $a" ;;
    esac
done
# The tests after the last step, or the whole suite when no test was named.
[ -z "$names" ] && [ "$segment$steps" != 00 ] || run_tests
dmesg >"$results/dmesg.txt" 2>&1 || true
exit "$status"
