# SPDX-License-Identifier: Apache-2.0
# Sourced by tests/run.sh (after tests/lib/reap.sh): one deadline for the whole
# run. Needs DEADLINE (seconds) and T0 (the run's start, $SECONDS) set, and
# log(); TEST_LOGS may name log files whose tails are printed at the deadline.

remaining() { echo $((DEADLINE - (SECONDS - T0))); }

# Runs "$@" within what is left of the deadline; on expiry says what was
# running (the TCG lock names the test and its console), ends the QEMUs the
# run's killed tests left orphaned, and returns 124.
bounded() {
    local left rc=0
    left=$(remaining)
    [ "$left" -gt 0 ] || { log "deadline of $DEADLINE s passed before: $*"; return 124; }
    timeout --kill-after=30 "$left" "$@" || rc=$?
    if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
        log "DEADLINE: $DEADLINE s passed while running: $*"
        local slot console f
        for slot in "$PMEMVM_TCG_LOCK" "$PMEMVM_TCG_LOCK".*; do
            [ -s "$slot" ] || continue
            log "a guest that was running: $(tr '\n' ' ' <"$slot")"
            console=$(sed -n 's/^console=//p' "$slot")
            [ -z "$console" ] || [ ! -f "$console" ] || { log "its console, last lines:"; tail -n 40 "$console" >&2; }
        done
        for f in ${TEST_LOGS:-}; do
            [ ! -f "$f" ] || { log "test log $f, last lines:"; tail -n 30 "$f" >&2; }
        done
        # QEMUs of killed tests are orphans now (each ran in its own process
        # group): the run's subreaper holds them, so only the run's are ended.
        reap_orphaned_qemus
        return 124
    fi
    return "$rc"
}
