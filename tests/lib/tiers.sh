# SPDX-License-Identifier: Apache-2.0
# Sourced by tests/run.sh: which tier and queue each test is in, from the
# test files themselves — no list to keep.
#
# Tier (per test): a `#[test]` fn with `#[ignore = "full: <why>"]` is in the
# full tier (`tests/run.sh --full`); one with `#[ignore = "a planted failure
# ..."]` (a `plant_*` fn) runs only inside the test that plants it; every
# other test is in the landing tier (`tests/run.sh`, what CI runs). An
# `#[ignore]` that names neither would run in no tier: tiers_check refuses it.
#
# Queue (per test binary, tests/tests/NAME.rs): a binary that boots QEMU
# guests under TCG — named `nested_*` or `tcg_*`, or whose file holds the line
# `// test-queue: tcg` — runs in the two TCG queues, split by the last
# measured slot-seconds and run longest first; every other binary runs in
# the host queue.
#
# Pairs (per test): a TCG test marked with the line `// test-slots: 2`
# between its #[test] and its fn holds both TCG slots at once (an L1 with
# two vCPUs). tests/run.sh runs the tier's pairs first, one after another,
# before the two TCG queues start (queue "pair" in --list): in a queue, such
# a test would wait with one slot idle until the other queue's running test
# ended.
#
# Slot-seconds (the TCG slots a test held times the seconds it held them,
# tests/src/tcg.rs): target/pmemvm-slot-seconds.tsv of this checkout's last
# run when there is one, else the committed tests/slot-seconds.tsv.

TIERS_TEST_DIR=${TIERS_TEST_DIR:-tests/tests}
# The crates' own sources: their unit tests run in both tiers, and --full
# adds their #[ignore]d ones (--include-ignored), so the same rules hold there.
TIERS_SOURCE_DIRS=${TIERS_SOURCE_DIRS:-acpi devices vmm tests/src tests/skip}

# The slot-seconds table to read: this checkout's last run, else the committed one.
tiers_times_file() {
    if [ -s target/pmemvm-slot-seconds.tsv ]; then
        echo target/pmemvm-slot-seconds.tsv
    else
        echo tests/slot-seconds.tsv
    fi
}

# The queue of test file $1: tcg or host.
tiers_queue_of() {
    case "$(basename "$1" .rs)" in nested_* | tcg_*) echo tcg && return ;; esac
    if grep -qx '// test-queue: tcg' "$1"; then echo tcg; else echo host; fi
}

# One line per test: binary, test, tier (landing|full|planted|untiered), queue
# (tcg|host|pair), tab-separated, in file and source order.
tiers_tests() {
    local f
    for f in "$TIERS_TEST_DIR"/*.rs; do
        awk -v bin="$(basename "$f" .rs)" -v queue="$(tiers_queue_of "$f")" '
            /^[ \t]*#\[test\]/ { pending = 1; tier = "landing"; pair = 0; next }
            !pending { next }
            /^[ \t]*\/\/ test-slots: 2[ \t]*$/ { pair = 1; next }
            /^[ \t]*#\[ignore/ {
                if ($0 ~ /#\[ignore = "full: /) tier = "full"
                else if ($0 ~ /#\[ignore = "a planted failure/) tier = "planted"
                else tier = "untiered"
                next
            }
            match($0, /fn [A-Za-z0-9_]+/) {
                name = substr($0, RSTART + 3, RLENGTH - 3)
                # --full skips planted failures by the name prefix alone.
                if (tier == "planted" && name !~ /^plant_/) tier = "untiered"
                printf "%s\t%s\t%s\t%s\n", bin, name, tier, (pair && queue == "tcg") ? "pair" : queue
                pending = 0
            }' "$f"
    done
}

# FILE::FN of each #[ignore]d test in the crates' own sources that no tier
# would run right: neither "full: <why>" nor a planted failure on a plant_* fn.
tiers_untiered_sources() {
    local d
    for d in $TIERS_SOURCE_DIRS; do
        [ -d "$d" ] || continue
        find "$d" -name '*.rs' -not -path '*/target/*' -print0 | xargs -0 -r awk '
            FNR == 1 { pending = 0 }
            /^[ \t]*#\[ignore/ {
                pending = 1
                tier = "untiered"
                if ($0 ~ /#\[ignore = "full: /) tier = "full"
                else if ($0 ~ /#\[ignore = "a planted failure/) tier = "planted"
                next
            }
            pending && match($0, /fn [A-Za-z0-9_]+/) {
                name = substr($0, RSTART + 3, RLENGTH - 3)
                if (tier == "untiered" || (tier == "planted" && name !~ /^plant_/))
                    printf "%s::%s\n", FILENAME, name
                pending = 0
            }'
    done
}

# Refuses a test that would run in no tier (an #[ignore] naming neither "full:"
# nor a planted failure); prints one sentence per such test, status 1.
tiers_check() {
    local bad
    bad=$(tiers_tests | awk -F'\t' '$3 == "untiered" { print $1 "::" $2 }'; tiers_untiered_sources)
    [ -z "$bad" ] && return 0
    printf 'tests/run.sh: %s is #[ignore]d without "full: <why>" (or "a planted failure" on a plant_* fn), so no tier would run it right\n' $bad >&2
    return 1
}

# The test binaries of queue $1 (tcg or host), one per line: every file of
# the test directory is one, with or without a #[test] of its own.
tiers_binaries() {
    local f
    for f in "$TIERS_TEST_DIR"/*.rs; do
        [ "$(tiers_queue_of "$f")" = "$1" ] && basename "$f" .rs
    done
    return 0
}

# The pairs of tier $1 ("landing", or "full" for every tier), one "BINARY
# TEST" per line, in file order.
tiers_pairs() {
    tiers_tests | awk -F'\t' -v full="$1" '
        $4 == "pair" && ($3 == "landing" || (full == "full" && $3 == "full")) { print $1 " " $2 }'
}

# The TCG binaries split into two queues of about equal measured slot-seconds
# of the tests that run ($1: "landing", or "full" for every tier): longest
# first, each to the queue with less so far (a binary with no measured test
# counts as 200). Prints "A name..." and "B name..." on two lines, each queue
# in name order, as cargo runs it.
tiers_tcg_queues() {
    local times
    times=$(tiers_times_file)
    # The first input is the tier table, the second (standard input) the binaries.
    tiers_binaries tcg | awk -F'\t' -v times="$times" -v full="$1" '
        FNR == NR {
            if ($4 != "pair" && ($3 == "landing" || (full == "full" && $3 == "full"))) { runs[$1 "::" $2] = 1; inbin[$1] = 1 }
            next
        }
        FNR == 1 {
            while ((getline line < times) > 0) {
                if (line ~ /^#/) continue
                split(line, f, "\t")
                split(f[1], t, "::")
                # A binary'"'"'s own wall time ("NAME::(wall)"): a binary that holds few
                # slots for long (first_contact builds) costs its time.
                if (t[2] == "(wall)") { wall[t[1]] = f[2]; continue }
                if (!(f[1] in runs)) continue
                cost[t[1]] += f[2]
            }
        }
        # Unmeasured: 200; a binary with no test in this tier runs nothing: 0.
        {
            bins[++n] = $0; c[n] = ($0 in cost) ? cost[$0] : (($0 in inbin) ? 200 : 0)
            if (($0 in inbin) && wall[$0] > c[n]) c[n] = wall[$0]
        }
        END {
            # Longest first (insertion sort: a few dozen binaries).
            for (i = 2; i <= n; i++) {
                b = bins[i]; x = c[i]
                for (j = i - 1; j >= 1 && (c[j] < x || (c[j] == x && bins[j] > b)); j--) {
                    bins[j + 1] = bins[j]; c[j + 1] = c[j]
                }
                bins[j + 1] = b; c[j + 1] = x
            }
            for (i = 1; i <= n; i++) {
                if (sa <= sb) { sa += c[i]; q[bins[i]] = "A" } else { sb += c[i]; q[bins[i]] = "B" }
            }
            # Longest first within each queue too (tests/run.sh runs them in this
            # order): the queues end with short binaries, not one long one alone.
            la = "A"; lb = "B"
            for (i = 1; i <= n; i++) if (q[bins[i]] == "A") la = la " " bins[i]; else lb = lb " " bins[i]
            print la; print lb
        }' <(tiers_tests) -
}

# `tests/run.sh --list`: every test, its tier, queue and last measured
# slot-seconds ("-" where it held no TCG slot or was never measured).
tiers_list() {
    local times
    times=$(tiers_times_file)
    printf '%-8s %-5s %9s  %s\n' tier queue slot-s test
    tiers_tests | awk -F'\t' -v times="$times" '
        BEGIN {
            while ((getline line < times) > 0) {
                if (line ~ /^#/) continue
                split(line, f, "\t"); s[f[1]] += f[2]
            }
        }
        {
            key = $1 "::" $2
            v = (key in s) ? sprintf("%d", s[key]) : "-"
            printf "%-8s %-5s %9s  %s\n", $3, $4, v, key
            n[$3]++
        }
        END {
            printf "%d landing, %d full, %d planted (slot-seconds from %s)\n", n["landing"], n["full"], n["planted"], times
        }'
    echo "and the unit and doc tests of every crate (cargo test --workspace): landing, host queue"
}
