#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
#
# fio's own test suite (t/run-fio-tests.py of Debian's fio source package) in the guest,
# against files on an XFS `-o dax` mount of /dev/pmem0. Runs in the Debian root file
# system of `pmemvm run --rootfs debian` (python3, fio, xfsprogs, ndctl); fio's t/ directory is
# put at /job/fio/t. Arguments: the test ids to run (default: all of them). The suite's
# artifacts are copied to /job/fio-results (for --get) with the suite's stdout as
# run-fio-tests.log (guest-images/suites/fio-suite-summary.sh reads it on the host); its
# own summary line ("N test(s) passed, N failed, N skipped") ends stdout; the status is
# the suite's. fio's t/ may be read-only (pmemvm's --put is): the suite writes only below
# its artifact root. See docs/testing.md, "fio's test suite".
set -eu
dev=${PMEMVM_SUITE_DEV:-/dev/pmem0}
mnt=/mnt/dax
# A raw namespace has no DAX: make it fsdax first (as guest-images/jobs/xfs-dax.setup.sh).
ndctl create-namespace --force --reconfig=namespace0.0 --mode=fsdax --map=dev >/dev/null
mkfs.xfs -q -f -m reflink=0 "$dev"
mkdir -p "$mnt"
mount -o dax=always "$dev" "$mnt"
grep " $mnt " /proc/mounts
mkdir -p /job/fio-results
only=""
[ $# -gt 0 ] && only="--run-only $*"
set +e
t0=$(date +%s)
# The suite's stdout streams to the console and into the log; its status via a file
# (sh has no pipefail).
{
    # shellcheck disable=SC2086 # the ids are words on purpose
    python3 /job/fio/t/run-fio-tests.py --fio "$(command -v fio)" --fio-root /job/fio \
        --artifact-root "$mnt/artifacts" $only 2>&1
    echo $? >/tmp/fio-suite.status
} | tee /job/fio-results/run-fio-tests.log
st=$(cat /tmp/fio-suite.status 2>/dev/null || echo 1)
echo "fio-suite.sh: run-fio-tests.py took $(( $(date +%s) - t0 )) s"
cp -r "$mnt/artifacts/." /job/fio-results/ 2>/dev/null
umount "$mnt"
exit "$st"
