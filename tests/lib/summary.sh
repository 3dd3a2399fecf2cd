# SPDX-License-Identifier: Apache-2.0
# Sourced by tests/run.sh: the run's summary of what it noted on the way.

# Prints log $2's lines under the heading $1 with their count.
count_lines() {
    local n
    n=$(grep -c . "$2" 2>/dev/null || true)
    echo "$1: ${n:-0}"
    [ "${n:-0}" -eq 0 ] || sed 's/^/  - /; s/\t/: /' "$2"
}

# Status 1, with one sentence, when the rerun log $1 (one line per rerun of a
# nested step after the emulated platform's breakdown, with its evidence)
# holds more than $2 lines: a run that needs more is not trusted.
reruns_within() {
    local n
    n=$(grep -c . "$1" 2>/dev/null || true)
    [ "${n:-0}" -le "$2" ] && return 0
    echo "tests/run.sh: $n reruns after breakdowns of the emulated platform, more than the $2 a run may have: the run fails (the summary lists each with its evidence)" >&2
    return 1
}

# The first $1 lines of standard input, reading it to its end: a reader that
# quits early (head) leaves its writer a broken pipe, which under pipefail is
# the pipeline's status (2 from sort where SIGPIPE is ignored, as in CI).
first_lines() {
    awk -v n="$1" 'NR <= n'
}

# Each test binary's time (the time to the next one's start in its queue),
# from the times logs $1.pair, $1.tcg, $1.tcg-b and $1.rest, all of them longest first
# into $1 and the longest $2 on standard output.
binary_times() {
    local q
    for q in pair tcg tcg-b rest; do
        awk -v q="$q" '
            { t[NR] = $1; sub(/^[0-9]+ +Running +/, ""); n[NR] = $0 }
            END { for (i = 1; i < NR; i++) if (n[i] !~ /^\(end/) print t[i+1] - t[i], q, n[i] }
        ' "$1.$q"
    done | sort -rn | tee "$1" | first_lines "$2"
}

# The TCG slot time of each hold in the hold log $1 (seconds, slots, seconds
# waited, test), longest $2 first, then the sum of all of them.
slot_times() {
    awk -F'\t' '{ printf "%6d slot-s  %d slot(s) %5d s held %5d s waited  %s\n", $1 * $2, $2, $1, $3, $4 }' \
        "$1" | sort -rn | first_lines "$2"
    awk -F'\t' '{ s += $1 * $2 } END { printf "all TCG guests: %d slot-seconds in %d holds\n", s, NR }' "$1"
}
