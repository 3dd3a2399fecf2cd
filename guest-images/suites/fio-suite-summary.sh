#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
#
# The host-side summary of fio's own test suite run by fio-suite.sh in the guest:
#   fio-suite-summary.sh DIR
# where DIR is what `--get fio-results` brought back (`--out OUT` → OUT/fio-results).
# Reads DIR/run-fio-tests.log (the suite's stdout) and prints one line per outcome with
# the test ids, then the totals; exits 0 when the suite's summary line is there and no
# test failed, 1 otherwise. The artifact directories (DIR/NNNN) hold each test's command,
# stdout, stderr and exit code.
set -eu
if [ $# -ne 1 ]; then
    echo "usage: $0 DIR (the fio-results directory that --get brought back)" >&2
    exit 2
fi
log=$1/run-fio-tests.log
if [ ! -f "$log" ]; then
    echo "fio-suite-summary.sh: $log does not exist: is $1 the fio-results directory of a fio-suite.sh run?" >&2
    exit 1
fi
awk '
/^Test [0-9]+ PASSED/  { p = p " " $2; np++ }
/^Test [0-9]+ FAILED/  { f = f " " $2; nf++ }
/^Test [0-9]+ SKIPPED/ { s = s " " $2; ns++ }
/^[0-9]+ test\(s\) passed, [0-9]+ failed, [0-9]+ skipped$/ { total = $0 }
END {
    printf "passed:%s\n", (np ? p : " (none)")
    printf "failed:%s\n", (nf ? f : " (none)")
    printf "skipped:%s\n", (ns ? s : " (none)")
    if (total == "") { print "fio test suite: no summary line (the suite did not finish)"; exit 1 }
    printf "fio test suite totals: %d passed, %d failed, %d skipped\n", np, nf, ns
    exit (nf > 0)
}' "$log"
