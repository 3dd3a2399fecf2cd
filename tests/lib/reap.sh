# SPDX-License-Identifier: Apache-2.0
# Sourced by tests/run.sh: the run ends what it started and nothing else.
#
# A test that is killed leaves its QEMU (started in a process group of its
# own) behind as an orphan. reap_become_subreaper re-executes the script as a
# child subreaper (prctl PR_SET_CHILD_SUBREAPER, kept across execve), so such
# orphans become the script's children instead of PID 1's; reap_descendants
# then ends the script's own descendants — every other process of the
# machine, a user's QEMU included, is left alone.

# Re-executes "$0 $@" as a child subreaper, once (REAP_SUBREAPER marks it).
# Needs python3 (Debian's, for ctypes); without it the run goes on, and says
# that orphans of killed tests would then be left running.
reap_become_subreaper() {
    if [ "${REAP_SUBREAPER:-}" = "$$" ]; then
        # This shell is the subreaper; its children are not.
        export -n REAP_SUBREAPER
        return 0
    fi
    unset REAP_SUBREAPER
    if ! command -v python3 >/dev/null; then
        echo "tests/run.sh: python3 is missing, so the QEMUs of tests killed at the deadline cannot be found and ended" >&2
        return 0
    fi
    export REAP_SUBREAPER=$$
    exec python3 -c '
import ctypes, os, sys
PR_SET_CHILD_SUBREAPER = 36
if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
    sys.exit("tests/run.sh: prctl(PR_SET_CHILD_SUBREAPER): " + os.strerror(ctypes.get_errno()))
os.execvp("bash", ["bash"] + sys.argv[1:])
' "$@"
}

# The descendants of process $1 (default: this shell), deepest first, one pid
# a line; the process itself is not listed.
reap_list_descendants() {
    ps -e -o pid= -o ppid= | awk -v top="${1:-$$}" '
        { kids[$2] = kids[$2] " " $1 }
        function walk(p,   n, i, k) {
            n = split(kids[p], k, " ")
            for (i = 1; i <= n; i++) { walk(k[i]); print k[i] }
        }
        END { walk(top) }'
}

# Ends the QEMUs that tests of this run left orphaned (each the child of the
# subreaper now, $REAP_SUBREAPER, whatever subshell asks) and their own
# children; a QEMU that is not the run's is never touched.
reap_orphaned_qemus() {
    local top=${REAP_SUBREAPER:-$$} pid
    for pid in $(pgrep -P "$top" -x qemu-system-x86); do
        kill -KILL $(reap_list_descendants "$pid") "$pid" 2>/dev/null || true
    done
}

# Sends SIGKILL to every descendant of the main shell still running (at its
# exit: what tests left behind). Call it from the main shell only.
reap_descendants() {
    local pids
    pids=$(reap_list_descendants "$$")
    # The listing's own subshell, ps and awk are gone by now; the rest is ours.
    [ -z "$pids" ] || kill -KILL $pids 2>/dev/null || true
}
