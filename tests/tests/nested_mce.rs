//! Tier 5: machine checks on poisoned loads (`--nvdimm …,mce=on`) under
//! pmemvm itself (nested: pmemvm in a two-vCPU L1 on QEMU 10 with a real
//! KVM, booting the project's guest image with two vCPUs and a labelled
//! 256 MiB DIMM with `mce=on`):
//!
//! 1. the guest makes an fsdax namespace, ext4 on it mounted `-o dax`, and
//!    a 2 MiB file of 0x5a; `xfs_io` maps the file (`mmap -r`), reads it all
//!    (every page now mapped in the process) and waits on a FIFO for its
//!    next command; the guest works out the DIMM offset of the file's page
//!    100 (fiemap's sector + the fsdax data offset in the region, from
//!    sysfs) and says `INJECT-AT <offset> .` (the mark tells the L1 the
//!    line is whole);
//! 2. the L1 runs `pmemvm ctl SOCKET media inject 0 <offset>+4K`: pmemvm
//!    takes the page out of the DIMM's memory slots and notifies the guest,
//!    whose badblocks gain the range;
//! 3. `xfs_io` reads 8 bytes of page 100 through its existing mapping: the
//!    load exits to pmemvm, which raises a machine check at it; Linux's
//!    `memory_failure` handles it and the process gets SIGBUS (status 135),
//!    the kernel log names the page frame, pmemvm's log the load;
//! 4. `dd` of that page from /dev/pmem0 fails with EIO, its neighbours read
//!    through the block device and a fresh mapping of page 101 reads, and
//!    the guest keeps running;
//! 5. a page-sized write over the page through the file (DAX's recovery
//!    write: the guest's clear-error `_DSM`) clears the poison; pmemvm puts
//!    the page back in the slots, and a fresh mapping of page 100 reads the
//!    new bytes;
//! 6. a block the guest does not know is bad (`ndctl inject-error -N`: the
//!    ARS error-inject `_DSM` without a notification): `dd` of it from
//!    /dev/pmem0 fails with EIO through the pmem driver's machine-check-safe
//!    copy (pmemvm logs the machine check in that page) and the guest goes
//!    on; the nfit driver's machine-check notifier puts the consumed line in
//!    the guest's badblocks (the error is in bank 4, the one Linux takes for
//!    memory on AMD, though the guest cleared its GART bit); `--uninject`
//!    takes it back, the VM powers off in order and the file holds no bad
//!    range.
//!
//! A boot whose 2-vCPU guest triple-faults at a RIP inside the L1's modules
//! (the TCG platform's breakdown: docs/nested-platform.md, "Guest faults in a
//! two-vCPU L1") is run again, up to `BREAKDOWN_TRIES` runs, and noted; any
//! other guest triple fault is the result.
#![allow(clippy::unwrap_used)] // a failed step fails the test with its message

use std::fs;
use std::time::Duration;

use pmemvm_tests::image::setup_job_initrd;
use pmemvm_tests::nested::{guest_image, NestedVm};
use pmemvm_tests::require;

const JOB: &str = r#"set +e
# xfs_io dies of SIGBUS: a later write to its FIFO must fail, not end the script.
trap '' PIPE
O=$PMEMVM_OUT
step() { n=$1; shift; "$@" > $O/$n.out 2>&1; echo "$n $?" >> $O/steps.txt; }
step ns ndctl create-namespace -m fsdax
i=0; while [ $i -lt 100 ] && [ ! -e /dev/pmem0 ]; do sleep 0.1; i=$((i+1)); done
step mkfs mkfs.ext4 -q -F -b 4096 /dev/pmem0
mkdir -p /mnt/d
step mount mount -o dax /dev/pmem0 /mnt/d
step write xfs_io -f -c "pwrite -S 0x5a -b 2m 0 2m" -c fsync /mnt/d/f
xfs_io -c "fiemap -v" /mnt/d/f > $O/fiemap.txt 2>&1
dev=$(readlink -f /sys/block/pmem0/device)
data=$(cat $dev/resource)
region=$(cat $(dirname $dev)/resource)
sector=$(awk '$1 == "0:" { sub(/[.][.].*/, "", $3); print $3; exit }' $O/fiemap.txt)
off=$(( data - region + sector * 512 + 100 * 4096 ))
printf '%x\n' $(( (region + off) / 4096 )) > $O/pfn.txt
echo "$data $region $sector $off" > $O/where.txt
mkfifo /tmp/cmd
xfs_io /mnt/d/f < /tmp/cmd > $O/mread.out 2>&1 &
xpid=$!
exec 3> /tmp/cmd
echo "mmap -r 0 2m" >&3
echo "mread 0 2m" >&3
# Every page is mapped once xfs_io gets to its next command, which makes a file.
echo "open -f /tmp/mapped" >&3
i=0; while [ $i -lt 3000 ] && [ ! -e /tmp/mapped ]; do sleep 0.1; i=$((i+1)); done
# The closing mark: the L1 reads the number only once the whole line is there
# (the console reaches its file a byte at a time).
echo "INJECT-AT $off ."
i=0
while [ $i -lt 600 ] && [ -z "$(cat /sys/block/pmem0/badblocks)" ]; do sleep 0.1; i=$((i+1)); done
cat /sys/block/pmem0/badblocks > $O/bb-injected.txt
echo "mread -v 409600 8" >&3
echo "quit" >&3
exec 3>&-
wait $xpid; echo "mread $?" >> $O/steps.txt
dmesg > $O/dmesg-mce.txt
# /dev/pmem0's sector 0 is the fsdax data start, where fiemap counts from.
p=$(( sector / 8 ))
dd if=/dev/pmem0 of=/dev/null bs=4096 skip=$(( p + 100 )) count=1 2> $O/dd-bad.err; echo "dd-bad $?" >> $O/steps.txt
dd if=/dev/pmem0 of=/dev/null bs=4096 skip=$(( p + 101 )) count=1 2> $O/dd-next.err; echo "dd-next $?" >> $O/steps.txt
step map-next xfs_io -c "mmap -r 0 2m" -c "mread -v 413696 8" /mnt/d/f
step rewrite xfs_io -c "pwrite -S 0x33 409600 4096" -c fsync /mnt/d/f
cat /sys/block/pmem0/badblocks > $O/bb-after.txt
step map-again xfs_io -c "mmap -r 0 2m" -c "mread -v 409600 8" /mnt/d/f
# A block the guest does not know is bad: injected through the ARS
# error-inject _DSM without a notification (ndctl inject-error -N), so no
# scrub tells the pmem driver; its read of the block meets the poison in
# the machine-check-safe copy and fails with EIO, and the kernel goes on.
step inject-quiet ndctl inject-error namespace0.0 -B $(( sector + 102 * 8 )) -n 8 -N
cat /sys/block/pmem0/badblocks > $O/bb-quiet.txt
dd if=/dev/pmem0 of=/dev/null bs=4096 skip=$(( p + 102 )) count=1 iflag=direct 2> $O/dd-quiet.err; echo "dd-quiet $?" >> $O/steps.txt
# The consumed poison reaches badblocks through the nfit driver's
# machine-check notifier only (no scrub knows it): it runs from a work item.
i=0; while [ $i -lt 100 ] && [ -z "$(cat /sys/block/pmem0/badblocks)" ]; do sleep 0.1; i=$((i+1)); done
cat /sys/block/pmem0/badblocks > $O/bb-consumed.txt
dmesg > $O/dmesg-end.txt
step uninject ndctl inject-error namespace0.0 -B $(( sector + 102 * 8 )) -n 8 --uninject
step umount umount /mnt/d
"#;

const L1_SCRIPT: &str = r#"
# Waits (up to 10 minutes) for the guest's console line $1 while pmemvm runs.
waitfor() {
    i=0
    while [ $i -lt 3000 ] && kill -0 $pid 2>/dev/null && ! grep -q "$1" console.txt 2>/dev/null; do
        sleep 0.2; i=$((i+1))
    done
}
run() {
    rm -f console.txt channel.bin /tmp/api.sock a.img l1-steps.txt
    pmemvm -v boot --kernel vmlinux --initrd job.img \
        --cmdline 'console=ttyS0 reboot=acpi panic=-1 quiet' --cpus 2 --memory 512M \
        --nvdimm 256M,file=a.img,mce=on --api /tmp/api.sock --timeout 900 \
        --console-log console.txt --channel channel.bin 2> pmemvm.err &
    pid=$!
    waitfor 'INJECT-AT [0-9]* \.'
    off=$(grep -o 'INJECT-AT [0-9]* \.' console.txt | head -n 1 | cut -d' ' -f2)
    echo "$off" > offset.txt
    pmemvm ctl /tmp/api.sock media inject 0 "$off+4K" > inject.out 2>&1; echo "inject $?" >> l1-steps.txt
    wait $pid; echo "pmemvm $?" >> l1-steps.txt
}
try=1
run
while [ $try -lt $TRIES ] && breakdown pmemvm.err > /dev/null; do
    echo "$(breakdown pmemvm.err)" >> once-more.txt
    try=$((try+1))
    run
done
pmemvm nvdimm badblocks a.img > bb-file.txt 2>&1
"#;

#[test]
fn a_dax_load_from_an_injected_bad_page_is_a_machine_check_and_sigbus_and_a_rewrite_brings_it_back()
{
    let qemu = require!(pmemvm_tests::nested::find_qemu_10());
    let mut first = Some(require!(NestedVm::new().and_then(NestedVm::with_pmemvm)));
    let kernel = require!(guest_image("vmlinux"));
    let initrd = require!(guest_image("initramfs.cpio.gz"));
    let job = setup_job_initrd(&fs::read(&initrd).unwrap(), JOB);
    let script = pmemvm_tests::nested::l1_script_with_retries(L1_SCRIPT);
    // Each L1 boots the guest up to `TRIES` times (the script's loop, on the
    // platform's evidence only); an L1 whose last boot still ended in the
    // platform's breakdown before the injection is started again, as the
    // other nested runs are.
    let out = pmemvm_tests::nested::retry_breakdowns(
        "nested_mce L1",
        || {
            let vm = first.take().unwrap_or_else(|| {
                NestedVm::new()
                    .and_then(NestedVm::with_pmemvm)
                    .expect("the nested VM, as the first time")
            });
            // One L1 vCPU under the 2-vCPU guest: the guest's vCPUs interleave
            // on it, and the emulated platform's faults of 2-vCPU L1s
            // (docs/nested-platform.md, "Two vCPUs in the L1, and one L1 per
            // run") stay out of the result.
            vm.with_qemu(qemu.clone())
                .l1_cpus(1)
                .l1_memory_mib(2048)
                .deadline(Duration::from_secs(2400))
                .file("vmlinux", kernel.clone())
                .bytes("job.img", job.clone())
                .run(&["sh", "-c", &script])
                .expect("the L1 script")
        },
        |out| {
            let steps = fs::read_to_string(out.path("l1-steps.txt")).unwrap_or_default();
            if steps.lines().any(|l| l == "inject 0") {
                return None;
            }
            let err = fs::read_to_string(out.path("pmemvm.err")).unwrap_or_default();
            pmemvm_tests::nested::platform_breakdown(&err)
        },
    );
    let read = |f: &str| fs::read_to_string(out.path(f)).unwrap_or_default();
    pmemvm_tests::nested::note_l1_restarts("nested_mce", &out);
    let files = out.guest_files("channel.bin", "nested-mce");
    let g = |name: &str| files.text(name);
    let tail = |t: String, n: usize| {
        let lines: Vec<&str> = t.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    };
    let ctx = format!(
        "{}\n--- l1-steps ---\n{}\n--- inject.out ---\n{}\n--- guest steps ---\n{}\n--- where ---\n{}\n--- pmemvm.err (tail) ---\n{}\n--- console (tail) ---\n{}\n(guest files in {})",
        out.dump(),
        read("l1-steps.txt"),
        read("inject.out"),
        g("steps.txt"),
        g("where.txt"),
        tail(read("pmemvm.err"), 20),
        tail(read("console.txt"), 40),
        files.dir.display()
    );
    let l1 = read("l1-steps.txt");
    for step in ["inject 0", "pmemvm 0"] {
        assert!(l1.lines().any(|l| l == step), "L1 step '{step}'\n{ctx}");
    }
    let steps = g("steps.txt");
    let status = |step: &str| {
        steps
            .lines()
            .find(|l| l.split_whitespace().next() == Some(step))
            .and_then(|l| l.split_whitespace().nth(1))
            .unwrap_or_else(|| panic!("no guest step {step}\n{ctx}"))
            .to_string()
    };
    for step in ["ns", "mkfs", "mount", "write"] {
        assert_eq!(
            status(step),
            "0",
            "guest step {step}: {}\n{ctx}",
            g(&format!("{step}.out"))
        );
    }
    assert_eq!(
        g("where.txt").split_whitespace().count(),
        4,
        "the guest found the file's page (data start, region, first sector, offset)\n{}\n{ctx}",
        g("fiemap.txt")
    );
    let off: u64 = read("offset.txt")
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("{ctx}"));
    assert_eq!(off % 4096, 0, "{ctx}");
    assert!(
        !g("bb-injected.txt").trim().is_empty(),
        "the injected range reached the guest's badblocks\n{ctx}"
    );
    // The machine check: SIGBUS to the process, the kernel's memory-failure
    // handling of that page frame, pmemvm's record of the load.
    assert_eq!(
        status("mread"),
        "135",
        "xfs_io's read through its mapping ended with SIGBUS\n{}\n{ctx}",
        g("mread.out")
    );
    let pfn = g("pfn.txt").trim().to_string();
    let dmesg = g("dmesg-mce.txt");
    assert!(
        !pfn.is_empty() && dmesg.contains(&format!("Memory failure: 0x{pfn}")),
        "the kernel's memory_failure handled page frame 0x{pfn}:\n{}\n{ctx}",
        tail(dmesg.clone(), 30)
    );
    // pmemvm's line names the DIMM offset of the load: inside the page.
    let err = read("pmemvm.err");
    let loads: Vec<u64> = err
        .lines()
        .filter(|l| l.contains("machine check for the load at guest address"))
        .filter_map(|l| l.split("offset 0x").nth(1))
        .filter_map(|t| u64::from_str_radix(t.split(',').next().unwrap_or(""), 16).ok())
        .collect();
    assert!(
        loads.iter().any(|&a| a >= off && a < off + 4096),
        "pmemvm raised the machine check at a load in the page: {loads:x?}\n{ctx}"
    );
    // Around it, and after it.
    assert_eq!(status("dd-bad"), "1", "{ctx}");
    assert!(g("dd-bad.err").contains("Input/output error"), "{ctx}");
    assert_eq!(status("dd-next"), "0", "{ctx}");
    assert_eq!(status("map-next"), "0", "{}\n{ctx}", g("map-next.out"));
    assert!(
        g("map-next.out").contains("5a 5a 5a 5a"),
        "{}",
        g("map-next.out")
    );
    // The rewrite cleared it, and the page reads through a mapping again.
    assert_eq!(status("rewrite"), "0", "{}\n{ctx}", g("rewrite.out"));
    assert_eq!(g("bb-after.txt").trim(), "", "{ctx}");
    assert_eq!(status("map-again"), "0", "{}\n{ctx}", g("map-again.out"));
    assert!(
        g("map-again.out").contains("33 33 33 33"),
        "{}",
        g("map-again.out")
    );
    // The quiet injection: the pmem driver's machine-check-safe copy.
    assert_eq!(
        status("inject-quiet"),
        "0",
        "{}\n{ctx}",
        g("inject-quiet.out")
    );
    assert_eq!(
        g("bb-quiet.txt").trim(),
        "",
        "not announced to the guest\n{ctx}"
    );
    assert_eq!(status("dd-quiet"), "1", "{}\n{ctx}", g("dd-quiet.err"));
    assert!(g("dd-quiet.err").contains("Input/output error"), "{ctx}");
    let quiet = off + 2 * 4096;
    let err = read("pmemvm.err");
    assert!(
        err.lines()
            .filter(|l| l.contains("machine check for the load at guest address"))
            .filter_map(|l| l.split("offset 0x").nth(1))
            .filter_map(|t| u64::from_str_radix(t.split(',').next().unwrap_or(""), 16).ok())
            .any(|a| a >= quiet && a < quiet + 4096),
        "the kernel's copy from the quietly injected page met a machine check\n{ctx}"
    );
    // The error went in bank 4, the one Linux takes for memory on AMD (the
    // L1's CPU), though the guest cleared bank 4's GART bit: the nfit
    // driver's notifier put the consumed line in badblocks.
    assert!(
        err.lines()
            .any(|l| l.contains("machine check for the load") && l.ends_with(", bank 4")),
        "the errors went in bank 4\n{ctx}"
    );
    let first: u64 = g("where.txt")
        .split_whitespace()
        .nth(2)
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("the file's first sector\n{ctx}"));
    let consumed = first + 102 * 8;
    assert!(
        g("bb-consumed.txt")
            .lines()
            .filter_map(|l| l.split_whitespace().next()?.parse::<u64>().ok())
            .any(|s| (consumed..consumed + 8).contains(&s)),
        "the consumed line (sectors {consumed}..+8) is in badblocks through the MCE notifier: {:?}\n{ctx}",
        g("bb-consumed.txt")
    );
    assert_eq!(status("uninject"), "0", "{}\n{ctx}", g("uninject.out"));
    assert_eq!(status("umount"), "0", "the guest went on\n{ctx}");
    assert!(
        read("bb-file.txt").contains(", 0 bad ranges,"),
        "the file holds no bad range:\n{}\n{ctx}",
        read("bb-file.txt")
    );
}
