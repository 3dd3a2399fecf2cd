#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
#
# bcache-nowait setup, run by the guest init as /job/setup.sh (cwd /job) before fio.
# Builds /dev/bcache0 from two memory-backed null_blk devices of ${NULLB_MB} MiB each
# (nullb0: backing device, nullb1: cache device), both made through configfs; the kernel command
# line carries null_blk.nr_devices=0 so that null_blk creates no default device.
# pmemvm puts the variable assignments (NULLB_MB=...) right below this header.
set -eu -o pipefail

cfg=/sys/kernel/config
if ! grep -q " $cfg configfs " /proc/mounts; then
    mount -t configfs configfs "$cfg"
fi

for i in 0 1; do
    d="$cfg/nullb/nullb$i"
    mkdir "$d"
    echo "$NULLB_MB" >"$d/size"
    echo 1 >"$d/memory_backed"
    echo 4096 >"$d/blocksize"
    echo 1 >"$d/power"
done

wait_for() {
    n=0
    while [ ! -e "$1" ]; do
        n=$((n + 1))
        if [ "$n" -gt 100 ]; then
            echo "setup: $1 did not appear" >&2
            exit 1
        fi
        sleep 0.1
    done
}

wait_for /dev/nullb0
wait_for /dev/nullb1
# The kernel refuses a cache device with fewer than 1024 buckets ("cache device is too small"):
# halve make-bcache's default 512k bucket until the cache has at least 2048 of them. At
# upstream's 1 GiB the default stays.
bucket_kb=512
while [ $((NULLB_MB * 1024 / bucket_kb)) -lt 2048 ] && [ "$bucket_kb" -gt 4 ]; do
    bucket_kb=$((bucket_kb / 2))
done
make-bcache --block 4k -B /dev/nullb0
make-bcache --block 4k --bucket "${bucket_kb}k" -C /dev/nullb1
# No udev in the guest: register both devices by hand.
echo /dev/nullb0 >/sys/fs/bcache/register
echo /dev/nullb1 >/sys/fs/bcache/register
wait_for /sys/block/bcache0/bcache
cset="$(bcache-super-show /dev/nullb1 | sed -n 's/^cset\.uuid[[:space:]]*//p')"
if [ -z "$cset" ]; then
    echo "setup: no cache set uuid on /dev/nullb1" >&2
    exit 1
fi
echo "$cset" >/sys/block/bcache0/bcache/attach
# Send all I/O through the cache, sequential or not.
echo 0 >/sys/block/bcache0/bcache/sequential_cutoff
wait_for /dev/bcache0
echo "setup: /dev/bcache0 = nullb0 (backing, $NULLB_MB MiB) + nullb1 (cache), cache set $cset"
cat /sys/block/bcache0/bcache/state
