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
