#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
#
# xfs-dax-write setup, run by the guest init as /job/setup.sh (cwd /job) before fio.
# Turns the label-less raw namespace into fsdax (struct pages kept on the device itself, so guest
# RAM need not grow with the NVDIMM), makes XFS the way upstream did (-d agcount=... -m
# reflink=0; ${AGCOUNT} is scaled down for small NVDIMMs: an allocation group needs at least
# 16 MiB) and mounts it with -o dax on /mnt/pmem.
# pmemvm puts the variable assignments (AGCOUNT=...) right below this header.
set -eu -o pipefail

ndctl create-namespace --force --reconfig=namespace0.0 --mode=fsdax --map=dev
mkfs.xfs -f -d agcount="$AGCOUNT" -m reflink=0 /dev/pmem0
mkdir -p /mnt/pmem
mount -o dax /dev/pmem0 /mnt/pmem
# Fail here, not in fio, if the kernel fell back to page-cache I/O.
if ! grep -E '^/dev/pmem0 /mnt/pmem xfs .*dax' /proc/mounts; then
    echo "setup: /mnt/pmem is not mounted with DAX" >&2
    grep pmem0 /proc/mounts >&2 || true
    exit 1
fi
