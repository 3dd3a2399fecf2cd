#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
#
# bcache setup, run by the guest init as /job/setup.sh (cwd /job) before fio: the bcache
# QUEUE_FLAG_NOWAIT thread's test-bcache.sh (12 May 2023):
#   modprobe null_blk queue_mode=2 nr_devices=2 memory_backed=1 gb=1
#   bcache make -B /dev/nullb0 -C /dev/nullb1
#   echo /dev/nullb0 > /sys/fs/bcache/register; echo /dev/nullb1 > /sys/fs/bcache/register
# null_blk is built into the guest kernel: at whole GiB sizes its parameters are on the kernel
# command line (NULLB_CONFIGFS=0); below that the same devices are made through configfs, whose
# size is in MiB (NULLB_CONFIGFS=1). The thread's `bcache make` (bcache-tools 1.1) is Debian's
# make-bcache (1.0.8) here, with the same defaults: block size = the devices' logical block
# (512 bytes, 1 sector), bucket 512k. Below 1 GiB the bucket is halved until the cache has the
# thread's 2048 buckets (BUCKET_KB).
# pmemvm puts the variable assignments right below this header.
set -eu -o pipefail

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

if [ "$NULLB_CONFIGFS" = 1 ]; then
    cfg=/sys/kernel/config
    grep -q " $cfg configfs " /proc/mounts || mount -t configfs configfs "$cfg"
    for i in 0 1; do
        d="$cfg/nullb/nullb$i"
        mkdir "$d"
        echo 2 >"$d/queue_mode"
        echo "$NULLB_MB" >"$d/size"
        echo 1 >"$d/memory_backed"
        echo 512 >"$d/blocksize"
        echo 1 >"$d/power"
    done
fi
wait_for /dev/nullb0
wait_for /dev/nullb1
echo "setup: nullb0 $(cat /sys/block/nullb0/size) sectors, logical block $(cat /sys/block/nullb0/queue/logical_block_size)"
if [ "$BUCKET_KB" = 512 ]; then
    make-bcache -B /dev/nullb0 -C /dev/nullb1
else
    make-bcache --bucket "${BUCKET_KB}k" -B /dev/nullb0 -C /dev/nullb1
fi
bcache-super-show /dev/nullb1
# No udev in the guest: register both devices by hand, as the thread's script does.
echo /dev/nullb0 >/sys/fs/bcache/register
echo /dev/nullb1 >/sys/fs/bcache/register
wait_for /sys/block/bcache0/bcache
wait_for /dev/bcache0
# Attached to the cache set as in the thread's dmesg ("Caching nullb0 as bcache0 on set ...").
if [ "$(cat /sys/block/bcache0/bcache/state)" = "no cache" ]; then
    echo "setup: bcache0 is not attached to the cache set" >&2
    exit 1
fi
echo "setup: /dev/bcache0 $(cat /sys/block/bcache0/size) sectors, state $(cat /sys/block/bcache0/bcache/state), cache mode $(cat /sys/block/bcache0/bcache/cache_mode)"
