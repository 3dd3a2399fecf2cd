# SPDX-License-Identifier: Apache-2.0
# Setup for xfs-dax.fio: turn the label-less namespace into fsdax (a pfn info
# block with the struct pages on the device), make XFS and mount it with DAX.
ndctl create-namespace --force --reconfig=namespace0.0 --mode=fsdax --map=dev
mkfs.xfs -f -q -m reflink=0 /dev/pmem0
mkdir -p /mnt/pmem
mount -o dax=always /dev/pmem0 /mnt/pmem
grep /mnt/pmem /proc/mounts
