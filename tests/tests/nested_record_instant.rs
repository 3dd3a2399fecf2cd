//! Each crash image of a Linux recording with two vCPUs is one instant
//! (nested tier, full: a two-CPU L1 on QEMU 10, so the guest's two vCPUs run
//! at once).
//!
//! In the L1, pmemvm runs the Debian root file system with two vCPUs and a
//! 16 MiB label-less DIMM with `record=`; the guest makes it an fsdax
//! namespace with ext4 `-o dax` and a two-page file, finds the file's two
//! pages in the DIMM (fiemap and the namespace's data offset), and then runs
//! two processes at once: one maps the file and stores a count n to page A
//! and then to page B (one 8-byte store each, `ctypes`), n = 1, 2, …; the
//! other fsyncs the file in a loop (each fsync a flush the recorder takes).
//! `pmemvm crash-images --all` then makes every plain image, and in each one
//! that holds both pages' tags, B is A or one behind — never ahead of A
//! (the reviewers measured 10 of 165 images with B ahead before each epoch
//! stopped the vCPUs).
#![allow(clippy::unwrap_used)] // a failed step fails the test with its message

use std::fs;
use std::time::Duration;

use pmemvm_tests::guest_inputs::rootfs_or_fail;
use pmemvm_tests::nested::{guest_image, NestedError, NestedVm};
use pmemvm_tests::require;

const CMDLINE: &str = "console=ttyS0 reboot=acpi panic=-1 quiet";

/// The guest: namespace, file system, the file's place, both processes.
const GUEST: &str = r#"set -e
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
ndctl create-namespace -f -e namespace0.0 -m fsdax -M dev > /dev/null
i=0; while [ ! -e /dev/pmem0 ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done
mkfs.ext4 -q -F -b 4096 /dev/pmem0
mkdir -p /mnt; mount -o dax /dev/pmem0 /mnt
grep ' /mnt .*dax' /proc/mounts || { echo "not mounted with dax"; exit 3; }
python3 - <<'PY'
import os, mmap
fd = os.open('/mnt/ab', os.O_RDWR | os.O_CREAT)
os.ftruncate(fd, 8192)
m = mmap.mmap(fd, 8192)
m[0:8] = b'AAAAAAAA'
m[4096:4104] = b'BBBBBBBB'
m.flush()
PY
sync
# The file's first block (fiemap, 512-byte units of /dev/pmem0) and the
# namespace's data start in the region: page A's offset in the DIMM file.
dev=$(readlink -f /sys/block/pmem0/device)
data=$(cat $dev/resource)
region=$(cat $(dirname $dev)/resource)
sector=$(xfs_io -c "fiemap -v" /mnt/ab | awk '$1 == "0:" { sub(/[.][.].*/, "", $3); print $3; exit }')
echo "AB-AT $(( data - region + sector * 512 ))"
# DAX for this file (statx's STATX_ATTR_DAX, 0x200000), or the stores would
# go to the page cache and reach the DIMM only by writeback, page by page.
echo "attributes $(xfs_io -c 'statx -r' /mnt/ab | sed -n 's/^stat.attributes = //p')"
xfs_io -c "fiemap -v" /mnt/ab
python3 - <<'PY' &
import os, mmap, ctypes
fd = os.open('/mnt/ab', os.O_RDWR)
m = mmap.mmap(fd, 8192)
a = ctypes.c_uint64.from_buffer(m, 8)
b = ctypes.c_uint64.from_buffer(m, 4104)
n = 0
while not os.path.exists('/tmp/stop'):
    n += 1
    a.value = n
    b.value = n
    if n == 1000:
        open('/tmp/storing', 'w').close()
print('stores', n)
PY
writer=$!
python3 - <<'PY'
import os, time
while not os.path.exists('/tmp/storing'):
    time.sleep(0.05)
fd = os.open('/mnt/ab', os.O_RDWR)
for _ in range(40):
    os.fsync(fd)
    time.sleep(0.02)
print('fsyncs 40')
PY
touch /tmp/stop
wait $writer
umount /mnt
echo ab-done
"#;

/// In the L1: the recorded run, every image, A and B of each.
const L1: &str = r#"
truncate -s $((16 * 1048576 + 4096)) ab.img
pmemvm run --kernel vmlinux --initrd initramfs.cpio.gz --rootfs debian.ext4 --cmdline "$CMDLINE" \
    --cpus 2 --memory 768M --timeout 1500 --nvdimm 16M,file=ab.img,label-size=0,record=ab-rec \
    -- sh -c "$GUEST" > run.out 2> run.err
echo "run $?" >> steps.txt
at=$(grep -o 'AB-AT [0-9]*' run.out | head -n 1 | cut -d' ' -f2)
# The images in the L1's memory, not through the share: tens of 16 MiB files.
pmemvm crash-images ab-rec --out /tmp/ab-images --all > images.out 2>&1
echo "images $?" >> steps.txt
word() { dd if="$1" bs=1 skip=$2 count=8 2> /dev/null | od -An -t u8 | tr -d ' '; }
tag() { dd if="$1" bs=1 skip=$2 count=8 2> /dev/null; }
for img in /tmp/ab-images/flush-*.img; do
    [ "$(tag $img $at)" = AAAAAAAA ] && [ "$(tag $img $((at + 4096)))" = BBBBBBBB ] || continue
    echo "$(basename $img) $(word $img $((at + 8))) $(word $img $((at + 4104)))" >> ab.txt
done
rm -rf /tmp/ab-images ab-rec
"#;

#[test]
#[ignore = "full: a two-CPU L1 (both TCG slots) and a Linux recording with two vCPUs; the landing tier proves the same stop with two vCPUs of a tiny guest (record_instant)"]
// test-slots: 2
fn every_plain_image_of_a_two_vcpu_linux_recording_has_b_never_ahead_of_a() {
    let qemu = require!(pmemvm_tests::nested::find_qemu_10());
    let vm = require!(NestedVm::new().and_then(NestedVm::with_pmemvm));
    let kernel = require!(guest_image("vmlinux").map_err(NestedError::Unavailable));
    let initrd = require!(guest_image("initramfs.cpio.gz").map_err(NestedError::Unavailable));
    let out = vm
        .with_qemu(qemu)
        .l1_cpus(2)
        .l1_memory_mib(4096)
        .deadline(Duration::from_secs(2400))
        .file("vmlinux", kernel)
        .file("initramfs.cpio.gz", initrd)
        // The default root file system has no mkfs.ext4: e2fsprogs with it.
        .file(
            "debian.ext4",
            rootfs_or_fail(&["--packages", "python3,ndctl,xfsprogs,e2fsprogs"]),
        )
        .env("CMDLINE", CMDLINE)
        .env("GUEST", GUEST)
        .run(&["sh", "-c", L1])
        .expect("the L1 script");
    let read = |f: &str| fs::read_to_string(out.path(f)).unwrap_or_default();
    let ctx = || {
        format!(
            "{}\n--- steps ---\n{}\n--- run.out ---\n{}\n--- run.err ---\n{}\n--- images.out ---\n{}",
            out.dump(),
            read("steps.txt"),
            read("run.out"),
            read("run.err"),
            read("images.out")
        )
    };
    assert!(read("steps.txt").contains("run 0"), "{}", ctx());
    assert!(read("steps.txt").contains("images 0"), "{}", ctx());
    let run = read("run.out");
    println!(
        "{}",
        run.lines()
            .filter(|l| !l.starts_with(' '))
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert!(
        run.contains("fsyncs 40") && run.contains("ab-done"),
        "{}",
        ctx()
    );
    let stores: u64 = run
        .lines()
        .find_map(|l| l.strip_prefix("stores "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0);
    let rows: Vec<(String, u64, u64)> = read("ab.txt")
        .lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            Some((
                w.next()?.to_string(),
                w.next()?.parse().ok()?,
                w.next()?.parse().ok()?,
            ))
        })
        .collect();
    let running = rows.iter().filter(|(_, a, _)| *a > 0).count();
    assert!(
        running >= 20 && stores > 0,
        "the writer stored ({stores}) across the flushes: {running} images with a count\n{}",
        ctx()
    );
    let wrong: Vec<String> = rows
        .iter()
        .filter(|(_, a, b)| b > a || *a > b + 1)
        .map(|(img, a, b)| format!("{img}: A = {a}, B = {b}"))
        .collect();
    assert!(
        wrong.is_empty(),
        "{} of {} images are no instant of memory: {}",
        wrong.len(),
        rows.len(),
        wrong.join("; ")
    );
}
