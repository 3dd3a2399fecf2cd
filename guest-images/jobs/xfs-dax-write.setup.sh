#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
#
# xfs-dax-write setup, run by the guest init as /job/setup.sh (cwd /job) before fio: the famfs
# RFC thread's luis/fio-xfsdax.sh (26 Feb 2024) on /dev/pmem0:
#   mkfs.xfs -d agcount=1024 -m reflink=0 -f /dev/pmem0; mount -o dax /dev/pmem0 /mnt/xfs
# The thread's pmem was an fsdax namespace ("converted from devdax to pmem"); the guest's
# label-less raw namespace is turned into fsdax first (--map=dev: the page map lives on the
# device, so guest RAM need not grow with the NVDIMM). ${AGCOUNT} is 1024 at the thread's
# 128 GiB (allocation groups of 128 MiB) and scaled with the device below that.
# pmemvm puts the variable assignments (AGCOUNT=...) right below this header.
set -eu -o pipefail

ndctl create-namespace --force --reconfig=namespace0.0 --mode=fsdax --map=dev
mkfs.xfs -d agcount="$AGCOUNT" -m reflink=0 -f /dev/pmem0
mkdir -p /mnt/xfs
mount -o dax /dev/pmem0 /mnt/xfs
# Fail here, not in fio, if the kernel fell back to page-cache I/O.
if ! grep -E '^/dev/pmem0 /mnt/xfs xfs .*dax' /proc/mounts; then
    echo "setup: /mnt/xfs is not mounted with DAX" >&2
    grep pmem0 /proc/mounts >&2 || true
    exit 1
fi
