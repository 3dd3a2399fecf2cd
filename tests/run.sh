#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# The test suite, on a fresh Debian 12 machine (as root) or a prepared one.
#
#   tests/run.sh          the landing tier (README's test command; CI runs it
#                         with PMEMVM_TEST_STRICT=1)
#   tests/run.sh --full   every tier: also the tests marked
#                         #[ignore = "full: <why>"] (PMEMVM_TEST_FULL=1 is the same)
#   tests/run.sh --list   each test with its tier, queue and last measured
#                         TCG slot-seconds; runs nothing
#
# A run
#   1. installs what the tiers need (apt: acpica-tools, qemu-system-x86, fio,
#      gdb, crash, Slurm, ...; a QEMU 10 unpacked from bookworm-backports for
#      the tests that need one; drgn from PyPI in a venv), skipped when there;
#   2. builds the guest image, the modular kernel of the --modules tests (in
#      the background) and the Debian root file system, each cached by input
#      hash in ~/.cache/pmemvm;
#   3. checks formatting and clippy;
#   4. runs the tier's tests in three queues at once: two of the binaries that
#      boot TCG guests (tests/lib/tiers.sh says which, from their names, and
#      splits them by measured time) and one of every other binary; then
#      prints each binary's time and each test's TCG slot time.
# Tiers and queues follow from the test files (tests/lib/tiers.sh); the run
# ends only what it started (tests/lib/reap.sh). A test whose tier cannot run
# here (a missing tool or missing hardware only) prints "SKIP: [binary::test]
# <reason>"; with PMEMVM_TEST_STRICT=1 every skip fails. The whole run has a
# deadline (PMEMVM_TEST_DEADLINE seconds; default 5250 for the landing tier,
# 9000 with --full). docs/testing.md has the rest.
set -eu -o pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
SCRIPT=$PWD/tests/run.sh

FULL=""
[ "${PMEMVM_TEST_FULL:-}" != 1 ] || FULL=1
LIST=""
for arg in "$@"; do
    case "$arg" in
    --full) FULL=1 ;;
    --list) LIST=1 ;;
    -h | --help)
        sed -n '4,11p' "$SCRIPT" | sed 's/^# \{0,1\}//'
        exit 0
        ;;
    *)
        echo "tests/run.sh: unknown option '$arg'; it accepts --full (every tier), --list (the tests, their tiers and slot-seconds) and --help" >&2
        exit 2
        ;;
    esac
done

# shellcheck source=tests/lib/tiers.sh
. tests/lib/tiers.sh
# shellcheck source=tests/lib/summary.sh
. tests/lib/summary.sh
if [ -n "$LIST" ]; then
    tiers_list
    tiers_check
    exit
fi
tiers_check || exit 1

# shellcheck source=tests/lib/reap.sh
. tests/lib/reap.sh
reap_become_subreaper "$SCRIPT" "$@"

log() { printf '[tests %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# Rust at Cargo.toml's rust-version, as ./pmemvm checks it.
min=$(sed -n 's/^rust-version = "\(.*\)"/\1/p' Cargo.toml | first_lines 1)
have=$(rustc --version 2>/dev/null | awk '{print $2}' || true)
if ! command -v cargo >/dev/null || [ "$(printf '%s\n%s\n' "$min" "${have:-0}" | sort -V | first_lines 1)" != "$min" ]; then
    echo "tests/run.sh: the tests need Rust $min or newer (cargo and rustc; this PATH has ${have:-none}); install or update it with rustup (https://rustup.rs)" >&2
    exit 2
fi

if [ -n "$FULL" ]; then
    DEADLINE=${PMEMVM_TEST_DEADLINE:-9000}
else
    DEADLINE=${PMEMVM_TEST_DEADLINE:-5250}
fi
T0=$SECONDS
TEST_LOGS=""
# shellcheck source=tests/lib/deadline.sh
. tests/lib/deadline.sh

mkdir -p target
export PMEMVM_SKIP_LOG="$PWD/target/pmemvm-test-skips.log"
: > "$PMEMVM_SKIP_LOG"
export PMEMVM_L1_WAKEUP_LOG="$PWD/target/pmemvm-l1-wakeups.log"
: > "$PMEMVM_L1_WAKEUP_LOG"
export PMEMVM_TCG_LOCK=${PMEMVM_TCG_LOCK:-/tmp/pmemvm-tcg.lock}
# Each TCG guest's test, slots, seconds held and seconds waited (tests/src/tcg.rs).
export PMEMVM_TCG_HOLD_LOG="$PWD/target/pmemvm-tcg-holds.log"
: > "$PMEMVM_TCG_HOLD_LOG"

# Each rerun of a nested step after the emulated platform's breakdown, with
# its evidence (tests/src/nested/breakdown.rs); more than MAX_RERUNS fails the run.
export PMEMVM_RERUN_LOG="$PWD/target/pmemvm-reruns.log"
: > "$PMEMVM_RERUN_LOG"
MAX_RERUNS=2

summary() {
    # What the run started and left running (a background build of a run that
    # ended early, QEMUs its killed tests orphaned) ends with it; nothing else.
    reap_descendants
    count_lines "L1 wake-ups (a silent nested L1 was sent a key event)" "$PMEMVM_L1_WAKEUP_LOG"
    count_lines "reruns after a breakdown of the emulated platform, each with its evidence (more than $MAX_RERUNS fail the run)" "$PMEMVM_RERUN_LOG"
    count_lines "skips$([ "${PMEMVM_TEST_STRICT:-}" = 1 ] && echo ' (strict mode: each one failed its test)')" "$PMEMVM_SKIP_LOG"
}
trap summary EXIT

need=""
for p in qemu-system-x86 acpica-tools binutils fio strace gdb crash python3-venv cpio gzip xz-utils busybox-static zstd libxml2-utils librsvg2-bin munge slurmctld slurmd slurm-client fuse3; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep 'install ok installed' >/dev/null || need="$need $p"
done
if [ -n "$need" ]; then
    log "apt-get install:$need"
    apt-get update -qq
    pins=""
    case " $need " in
    *" qemu-system-x86 "*)
        # QEMU parts left by another source (qemu-utils and qemu-block-extra from
        # bookworm-backports after that QEMU and its source were removed) break
        # the distribution's qemu-system-x86: take every installed package built
        # from QEMU's source at the version qemu-system-x86 comes in (its
        # candidate; without a binNMU suffix for the architecture-independent ones).
        qver=$(apt-cache policy qemu-system-x86 | awk '/Candidate:/ { print $2 }')
        while read -r pkg src status ver; do
            [ "$src" = qemu ] && [ "$status" = ii ] && [ -n "$qver" ] && [ "$qver" != "(none)" ] || continue
            offered=$(apt-cache madison "$pkg" | awk -F' *[|] *' -v a="$qver" -v b="${qver%+b[0-9]*}" \
                '$2 == a || $2 == b { print $2; exit }')
            [ -z "$offered" ] || [ "$ver" = "$offered" ] || pins="$pins $pkg=$offered"
        done < <(dpkg-query -W -f='${Package} ${source:Package} ${db:Status-Abbrev} ${Version}\n' 'qemu*' 2>/dev/null)
        [ -z "$pins" ] || log "apt-get install: QEMU parts from another source, taken as the sources offer them:$pins"
        ;;
    esac
    # shellcheck disable=SC2086 # one argument per package
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends --allow-downgrades $need $pins >/dev/null
fi
# The distribution's QEMU runs the suite (Debian 12's 7.2 runs nested guests about
# 1.5 times as fast as QEMU 10); a QEMU 10 is named for the tests that need one
# (docs/nested-platform.md, "Which QEMU runs the suite", lists them).
PMEMVM_QEMU_10=$(guest-images/lib/qemu-install.sh --unpack "${XDG_CACHE_HOME:-$HOME/.cache}/pmemvm/qemu")
export PMEMVM_QEMU_10
log "QEMU: $(qemu-system-x86_64 --version | first_lines 1); PMEMVM_QEMU_10: $("$PMEMVM_QEMU_10" --version | first_lines 1) ($PMEMVM_QEMU_10)"

# drgn, for the memory-dump tests (Debian 12 has no package): PyPI's wheel,
# pinned, in a virtual environment of the cache.
DRGN_VENV="${XDG_CACHE_HOME:-$HOME/.cache}/pmemvm/drgn-0.3.0"
if [ ! -x "$DRGN_VENV/bin/drgn" ]; then
    log "drgn: pip install drgn==0.3.0 into $DRGN_VENV"
    rm -rf "$DRGN_VENV"
    python3 -m venv "$DRGN_VENV"
    "$DRGN_VENV/bin/pip" install -q --disable-pip-version-check drgn==0.3.0
fi
export PMEMVM_DRGN="$DRGN_VENV/bin/drgn"
log "drgn: $("$PMEMVM_DRGN" --version 2>&1 | first_lines 1)"

log "guest image"
bounded guest-images/build.sh
if [ -n "$FULL" ]; then
    # The Linux 6.12 kernel of the CXL poison and event tests (full tier only).
    log "guest kernel: Linux 6.12 (guest-images/build.sh --linux 6.12)"
    bounded guest-images/build.sh --linux 6.12
fi

# The modular kernel (the user's own kernel of the --modules tests) is needed by
# two test binaries late in the run: it builds in the background at normal
# priority beside the tests (at nice 19 two TCG queues would starve it), while
# it holds an flock on
# $PMEMVM_MODULAR_BUILD.lock; tests/src/own_kernel.rs waits for that lock and
# fails if $PMEMVM_MODULAR_BUILD.status is not 0.
export PMEMVM_MODULAR_BUILD="$PWD/target/modular-build"
rm -f "$PMEMVM_MODULAR_BUILD.status"
exec 9>"$PMEMVM_MODULAR_BUILD.lock"
flock 9
log "modular kernel: building in the background (log: $PMEMVM_MODULAR_BUILD.log)"
(
    mrc=0
    bounded guest-images/build.sh --modular >"$PMEMVM_MODULAR_BUILD.log" 2>&1 || mrc=$?
    echo "$mrc" >"$PMEMVM_MODULAR_BUILD.status"
    log "modular kernel: finished with status $mrc"
) &
MODULAR_PID=$!
exec 9>&-

log "Debian root file system (pmemvm run --rootfs debian)"
bounded guest-images/rootfs-debian.sh >/dev/null

log "cargo fmt --check"
cargo fmt --all -- --check
log "cargo clippy"
bounded cargo clippy --workspace --all-targets -q -- -D warnings

log "cargo build"
bounded cargo build --workspace --all-targets -q
export PMEMVM_BIN="$PWD/target/debug/pmemvm"

# Three queues at once. The test binaries that boot QEMU under TCG (the nested L1s,
# --engine qemu, the table and image checks) hold one of the machine-wide TCG
# slots per guest (tests/src/tcg.rs: $PMEMVM_TCG_SLOTS, one per core by
# default; an L1 has one vCPU): two queues of them, A and B, of about equal
# measured slot-seconds (tests/lib/tiers.sh; cargo runs each queue's binaries
# in name order), keep the cores busy; every other test binary (unit tests,
# tiny guests on this host's KVM, durability, CLI checks) runs beside them in
# a third queue. Which binary goes where follows from its name.
TIER=landing
[ -z "$FULL" ] || TIER=full
QUEUES=$(tiers_tcg_queues "$TIER")
TCG_A=$(sed -n 's/^A//p' <<<"$QUEUES")
TCG_B=$(sed -n 's/^B//p' <<<"$QUEUES")
REST_TESTS=$(tiers_binaries host | tr '\n' ' ')
# The other crates' own integration tests (acpi/tests/*.rs), which run in the
# third queue too.
CRATE_TESTS=$(for f in */tests/*.rs */*/tests/*.rs; do
    case $f in tests/* | '*'*) ;; *) basename "$f" .rs ;; esac
done | sort -u | tr '\n' ' ')
log "tier: $TIER; TCG queue A:$TCG_A; TCG queue B:$TCG_B"
TEST_LOG="$PWD/target/pmemvm-test.log"       # TCG queue A (printed as it runs)
TEST_B_LOG="$PWD/target/pmemvm-test-b.log"   # TCG queue B (printed at its end)
REST_LOG="$PWD/target/pmemvm-test-rest.log"  # the other queue (printed at its end)
TIMES_LOG="$PWD/target/pmemvm-test-times.log"
TEST_LOGS="$TEST_LOG $TEST_B_LOG $REST_LOG"
: > "$TEST_LOG"; : > "$TEST_B_LOG"; : > "$REST_LOG"; : > "$TIMES_LOG"

# Seconds since the start of the run at each test binary's start, for the
# per-binary times printed at the end (docs/testing.md, "Times").
stamp_binaries() {
    local line
    while IFS= read -r line; do
        case "$line" in
            *"Running "*) printf '%s %s\n' "$(( SECONDS - T0 ))" "$line" ;;
        esac
    done
}
# cargo_test QUEUE LOG ARGS...: one `cargo test ARGS`, its output appended to
# LOG, its binaries' start times to the times log of QUEUE.
# LIBTEST_ARGS (words) go to the test binaries after cargo's "--".
LIBTEST_ARGS=""
cargo_test() {
    local queue=$1 out=$2 crc=0 full=""
    shift 2
    # --full: the #[ignore = "full: ..."] tests too, never the planted
    # failures (plant_*), which only the test that plants them runs.
    [ -z "$FULL" ] || full="--include-ignored --skip plant_"
    # shellcheck disable=SC2086 # empty or a few words each
    bounded cargo test --no-fail-fast "$@" -- --test-threads="${PMEMVM_TEST_THREADS:-2}" $full $LIBTEST_ARGS 2>&1 \
        | tee -a "$out" | stamp_binaries >> "$TIMES_LOG.$queue" || crc=$?
    printf '%s Running (end of cargo test)\n' "$(( SECONDS - T0 ))" >> "$TIMES_LOG.$queue"
    return "$crc"
}
: > "$TIMES_LOG.pair"; : > "$TIMES_LOG.tcg"; : > "$TIMES_LOG.tcg-b"; : > "$TIMES_LOG.rest"

log "cargo test (deadline: $(remaining) s left of $DEADLINE s; strict=${PMEMVM_TEST_STRICT:-0}): TCG queue A here, queue B in $TEST_B_LOG, the other queue in $REST_LOG"
rc=0
(
    qrc=0
    # `--workspace` with its targets named, not `--exclude`/`-p`: the features
    # of the whole workspace, so what `cargo build --workspace --all-targets`
    # made runs as it is (a narrower package set resolves other features and
    # rebuilt the crates first, holding the build lock the pairs wait for).
    # shellcheck disable=SC2046 # one --test per name
    cargo_test rest "$REST_LOG" --workspace --lib --bins --examples \
        $(printf -- '--test %s ' $CRATE_TESTS $REST_TESTS) || qrc=1
    cargo_test rest "$REST_LOG" --workspace --doc || qrc=1
    exit "$qrc"
) &
REST_PID=$!
# run_queue QUEUE LOG BINARIES...: one `cargo test` per binary, in the order
# given (longest first: cargo would run one invocation's binaries in name order).
# `--workspace --test NAME`, not `-p pmemvm-tests`: the workspace's features,
# so the binaries `cargo build --workspace --all-targets` made are the ones
# that run (`-p` resolves features for that package alone and rebuilds vmm,
# the lab and the tests first, minutes of both cores).
run_queue() {
    local queue=$1 out=$2 qrc=0 b
    shift 2
    for b in "$@"; do
        # The pairs ran before the queues (tests/lib/tiers.sh, "Pairs").
        LIBTEST_ARGS=$(awk -v b="$b" '$1 == b { printf "--skip %s ", $2 }' <<<"$PAIRS")
        cargo_test "$queue" "$out" --workspace --test "$b" || qrc=1
    done
    return "$qrc"
}
# The tier's pairs (tests that hold both TCG slots), one after another on a
# machine whose TCG slots are all free, before the queues start.
run_pairs() {
    local prc=0 b t
    while read -r b t; do
        [ -n "$b" ] || continue
        LIBTEST_ARGS="--exact $t"
        cargo_test pair "$TEST_LOG" --workspace --test "$b" || prc=1
    done <<<"$PAIRS"
    LIBTEST_ARGS=""
    return "$prc"
}
PAIRS=$(tiers_pairs "$TIER")
log "pairs, first (both TCG slots each): $(awk '{ printf "%s::%s ", $1, $2 }' <<<"$PAIRS")"
(
    run_pairs >/dev/null &
    tail -n +1 --pid=$! -f "$TEST_LOG"
    wait $!
) || rc=$?
# shellcheck disable=SC2086 # one word per binary
run_queue tcg-b "$TEST_B_LOG" $TCG_B >/dev/null &
TCG_B_PID=$!
(
    # Printed from where the pairs' output ended.
    from=$(( $(stat -c %s "$TEST_LOG") + 1 ))
    # shellcheck disable=SC2086 # one word per binary
    run_queue tcg "$TEST_LOG" $TCG_A >/dev/null &
    tail -c +"$from" --pid=$! -f "$TEST_LOG"
    wait $!
) || rc=$?
wait "$TCG_B_PID" || rc=1
wait "$REST_PID" || rc=1
log "TCG queue B's output ($TEST_B_LOG):"
cat "$TEST_B_LOG"
log "the other queue's output ($REST_LOG):"
cat "$REST_LOG"
failed=$(grep -h -E '^test .* \.\.\. FAILED$|^error: test failed' "$TEST_LOG" "$TEST_B_LOG" "$REST_LOG" || true)
[ -z "$failed" ] || { log "failed:"; printf '%s\n' "$failed" >&2; }

log "time per test binary (s), longest first (three queues run at once):"
binary_times "$TIMES_LOG" 45 >&2
log "TCG slot time per test (slot-seconds = slots x seconds held; waited: for free slots), longest first:"
slot_times "$PMEMVM_TCG_HOLD_LOG" 40 >&2
# Each test's slot-seconds, for `--list` and the next run's queues (tests/lib/tiers.sh).
# With each TCG binary's wall time as "NAME::(wall)" (a binary holding few slots
# for long still takes its time in its queue).
{
    awk -F'\t' '{ s[$4] += $1 * $2 } END { for (t in s) printf "%s\t%d\n", t, s[t] }' \
        "$PMEMVM_TCG_HOLD_LOG"
    awk '$2 ~ /^tcg/ { n = $3; sub(/^tests\//, "", n); sub(/\.rs$/, "", n); printf "%s::(wall)\t%d\n", n, $1 }' \
        "$TIMES_LOG"
} | sort >target/pmemvm-slot-seconds.tsv
reruns_within "$PMEMVM_RERUN_LOG" "$MAX_RERUNS" || rc=1
wait "$MODULAR_PID" || true
if [ "$(cat "$PMEMVM_MODULAR_BUILD.status" 2>/dev/null)" != 0 ]; then
    log "the background modular kernel build failed (status $(cat "$PMEMVM_MODULAR_BUILD.status" 2>/dev/null || echo none)); its log ends:"
    tail -n 30 "$PMEMVM_MODULAR_BUILD.log" >&2 || true
    rc=1
fi
# Each failed test's own output (its panic message), last, where a CI log's
# tail shows it: at most 25 lines a test.
if [ -n "$failed" ]; then
    log "what each failed test printed:"
    awk '/^---- .* stdout ----$/ { n = 0; on = 1 }
         /^(failures|successes):$/ { on = 0 }
         on && n++ < 25' $TEST_LOGS >&2 || true
fi
log "done in $(( SECONDS - T0 )) s (status $rc)"
exit "$rc"
