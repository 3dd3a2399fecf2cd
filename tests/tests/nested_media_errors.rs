//! Tier 5: media errors and health under pmemvm itself (nested: pmemvm in
//! an L1 with a real KVM, booting the project's guest image). One L1 boot
//! runs three pmemvm boots on two label-less 256 MiB DIMMs, a.img and b.img
//! (so /dev/pmem0 and /dev/pmem1 exist at once, raw):
//!
//! (ext4 gets `-b 4096`: on a 250 MiB device mkfs.ext4 picks 1 KiB blocks,
//! and DAX needs blocks of the page size.)
//!
//! 1. a.img with `badblocks=1M+4K` from the host: the range is in
//!    /sys/block/pmem0/badblocks and `ndctl list --media-errors` without any
//!    guest action, `dd` over it fails with EIO, the rest reads;
//!    `ndctl inject-error --block=4096 --count=2` and `--block=8192` appear
//!    (kernel notified by the root `_DSM`, no manual scrub), `--status`
//!    lists them, `dd` over them fails; a full-page write over block 4096
//!    clears it. b.img becomes fsdax with ext4 `-o dax`; an error injected
//!    under one page of a file makes reading that file fail, its first page
//!    and another file read back. `ndctl list -DH`: healthy values,
//!    unsafe shutdown count 0. The VM powers off in order.
//! 2. The same files without `badblocks=`: a.img's remaining ranges (the
//!    host's and block 8192) are back; dirty_shutdown is still 0 (the orderly
//!    end of run 1 counted nothing); `ndctl clear-errors` clears them; then
//!    pmemvm is killed with SIGKILL.
//! 3. The same files: unsafe shutdown count 1 and "dirty" on both DIMMs
//!    (`ndctl list -DH`, nmem*/nfit/dirty_shutdown), no bad blocks left
//!    (the clear was durable before the kill); `ndctl inject-smart` sets a
//!    media temperature alarm, fatal health and an unsafe shutdown on nmem1.
//!
//! Between the runs the host-side `pmemvm nvdimm badblocks` reads each
//! file's record. What the guest printed is kept in
//! `target/nested-media-errors/`.
#![allow(clippy::unwrap_used)] // a failed step fails the test with its message

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;
use std::time::Duration;

use lab::guest::guest_job::{parse_channel, GuestReport};
use pmemvm_tests::image::setup_job_initrd;
use pmemvm_tests::nested::{guest_image, workspace_root, NestedVm};
use pmemvm_tests::require;

const PRELUDE: &str = r#"set +e
O=$PMEMVM_OUT
step() { n=$1; shift; "$@" > $O/$n.out 2>&1; echo "$n $?" >> $O/steps.txt; }
field() { sed -n "s/.*\"$1\":\"\([^\"]*\)\".*/\1/p" "$2" | head -n 1; }
# Waits (up to 20 s) until /sys/block/$1/badblocks contains the line $2.
bb_wait() { i=0; while [ $i -lt 100 ] && ! grep -qx "$2" /sys/block/$1/badblocks; do sleep 0.2; i=$((i+1)); done; }
"#;

const RUN1: &str = r#"
ndctl list -DH > $O/health.json 2>&1
cat /sys/bus/nd/devices/nmem0/nfit/dirty_shutdown > $O/dirty.txt 2>&1
cat /sys/block/pmem0/badblocks > $O/bb-host.txt
ndctl list -N --media-errors > $O/media-host.json 2>&1
dd if=/dev/pmem0 of=/dev/null bs=4096 skip=256 count=1 2> $O/dd-host.err; echo "dd-host $?" >> $O/steps.txt
dd if=/dev/pmem0 of=/dev/null bs=4096 count=256 2> $O/dd-good.err; echo "dd-good $?" >> $O/steps.txt
step inject ndctl inject-error --block=4096 --count=2 namespace0.0
step inject2 ndctl inject-error --block=8192 --count=1 namespace0.0
bb_wait pmem0 "8192 1"
bb_wait pmem0 "4096 2"
step inject-status ndctl inject-error --status namespace0.0
cat /sys/block/pmem0/badblocks > $O/bb-injected.txt
ndctl list -N --media-errors > $O/media-injected.json 2>&1
dd if=/dev/pmem0 of=/dev/null bs=4096 skip=512 count=1 2> $O/dd-inj.err; echo "dd-inj $?" >> $O/steps.txt
step write-clear dd if=/dev/zero of=/dev/pmem0 bs=4096 seek=512 count=1 conv=fsync
cat /sys/block/pmem0/badblocks > $O/bb-after-write.txt
dd if=/dev/pmem0 of=/dev/null bs=4096 skip=512 count=1 2> $O/dd-cleared.err; echo "dd-cleared $?" >> $O/steps.txt
step b-fsdax ndctl create-namespace -f -e namespace1.0 -m fsdax
dev=/dev/$(field blockdev $O/b-fsdax.out)
mkdir -p /mnt/t
step mkfs mkfs.ext4 -F -q -b 4096 $dev
step mount mount -o dax $dev /mnt/t
grep " /mnt/t " /proc/mounts > $O/mounts.txt
dd if=/dev/urandom of=/mnt/t/victim bs=65536 count=16 2>/dev/null
dd if=/dev/urandom of=/mnt/t/other bs=65536 count=16 2>/dev/null
sync
md5sum /mnt/t/other | cut -d' ' -f1 > $O/other-before.md5
dd if=/mnt/t/victim bs=4096 count=1 2>/dev/null | md5sum | cut -d' ' -f1 > $O/victim-page0-before.md5
xfs_io -c fiemap /mnt/t/victim > $O/fiemap.txt 2>&1
start=$(sed -n 's/^[[:space:]]*0: \[[0-9]*\.\.[0-9]*\]: \([0-9]*\)\.\..*/\1/p' $O/fiemap.txt)
blk=$((start + 16))
echo $blk > $O/victim-block.txt
step inject-fs ndctl inject-error --block=$blk --count=1 namespace1.0
bb_wait $(basename $dev) "$blk 1"
cat /sys/block/$(basename $dev)/badblocks > $O/bb-fs.txt
cat /mnt/t/victim > /dev/null 2> $O/cat-victim.err; echo "cat-victim $?" >> $O/steps.txt
dd if=/mnt/t/victim bs=4096 count=1 2>/dev/null | md5sum | cut -d' ' -f1 > $O/victim-page0-after.md5
md5sum /mnt/t/other | cut -d' ' -f1 > $O/other-after.md5
umount /mnt/t
"#;

const RUN2: &str = r#"
echo "R2 bb0 $(tr '\n' ';' < /sys/block/pmem0/badblocks)"
echo "R2 dirty $(cat /sys/bus/nd/devices/nmem0/nfit/dirty_shutdown) $(cat /sys/bus/nd/devices/nmem1/nfit/dirty_shutdown)"
out=$(ndctl clear-errors namespace0.0 2>&1)
echo "R2 clear rc=$? $(echo $out | tr -d '\n')"
echo "R2 bb0-cleared $(tr '\n' ';' < /sys/block/pmem0/badblocks)"
echo "R2-READY"
sleep 600
"#;

const RUN3: &str = r#"
ndctl list -DH > $O/health.json 2>&1
for d in 0 1; do echo "nmem$d $(cat /sys/bus/nd/devices/nmem$d/nfit/dirty_shutdown)" >> $O/dirty.txt; done
cat /sys/block/pmem0/badblocks > $O/bb0.txt
step smart-threshold ndctl inject-smart -M 80 --media-temperature-alarm=on nmem1
step smart-temp ndctl inject-smart -m 90 nmem1
step smart-fatal ndctl inject-smart -f nmem1
step smart-unsafe ndctl inject-smart -U nmem1
ndctl list -DH -d nmem1 > $O/health-injected.json 2>&1
"#;

const L1_SCRIPT: &str = r#"
DIMMS="--nvdimm 256M,file=a.img,label-size=0 --nvdimm 256M,file=b.img,label-size=0"
boot() {
    n=$1; shift
    pmemvm -v boot --kernel vmlinux --initrd run$n.img \
        --cmdline 'console=ttyS0 reboot=acpi panic=-1 quiet' --memory 512M "$@" \
        --console-log console$n.txt --channel channel$n.bin 2> pmemvm$n.err
}
bb() { for f in a b; do pmemvm nvdimm badblocks $f.img > bb-$f-$1.txt 2>&1; done; }
boot 1 --nvdimm 256M,file=a.img,label-size=0,badblocks=1M+4K --nvdimm 256M,file=b.img,label-size=0
echo "run1 exited $?"
bb 1
pmemvm -v boot --kernel vmlinux --initrd run2.img \
    --cmdline 'console=ttyS0 reboot=acpi panic=-1 quiet' --memory 512M $DIMMS \
    --console-log console2.txt --channel channel2.bin 2> pmemvm2.err &
pid=$!
i=0
while [ $i -lt 900 ] && ! grep -q R2-READY console2.txt 2>/dev/null; do sleep 0.2; i=$((i+1)); done
grep -q R2-READY console2.txt && kill -9 $pid && echo "run2 killed"
wait $pid
bb 2
boot 3 $DIMMS
echo "run3 exited $?"
bb 3
"#;

fn job_initrd(base: &[u8], script: &str) -> Vec<u8> {
    setup_job_initrd(base, &format!("{PRELUDE}{script}"))
}

fn text(r: &GuestReport, name: &str) -> String {
    r.files
        .get(name)
        .map(|b| String::from_utf8_lossy(b).into_owned())
        .unwrap_or_default()
}

fn steps(r: &GuestReport) -> BTreeMap<String, String> {
    text(r, "steps.txt")
        .lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(a, b)| (a.to_string(), b.trim().to_string()))
        .collect()
}

/// The `health` object of DIMM `dev` in `ndctl list -DH` output.
fn health(r: &GuestReport, file: &str, dev: &str, ctx: &str) -> serde_json::Value {
    let t = text(r, file);
    let v: serde_json::Value = serde_json::from_str(&t)
        .unwrap_or_else(|e| panic!("{file} is not JSON ({e}):\n{t}\n{ctx}"));
    let dimms = match &v {
        serde_json::Value::Array(a) => a.clone(),
        o => vec![o.clone()],
    };
    dimms
        .into_iter()
        .find(|d| d["dev"] == dev)
        .map(|d| d["health"].clone())
        .unwrap_or_else(|| panic!("no {dev} in {file}:\n{t}\n{ctx}"))
}

/// The console line starting with `prefix`.
fn line<'a>(console: &'a str, prefix: &str, ctx: &str) -> &'a str {
    console
        .lines()
        .find_map(|l| l.trim().strip_prefix(prefix))
        .unwrap_or_else(|| panic!("no '{prefix}' line on the console\n{ctx}"))
}

fn keep(reports: &[(&str, &GuestReport)], out: &Path) -> std::path::PathBuf {
    let dir = workspace_root().join("target/nested-media-errors");
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    for (run, r) in reports {
        for (name, bytes) in &r.files {
            fs::write(dir.join(format!("{run}-{name}")), bytes).unwrap();
        }
    }
    for f in [
        "console2.txt",
        "bb-a-1.txt",
        "bb-a-2.txt",
        "bb-a-3.txt",
        "bb-b-3.txt",
    ] {
        let _ = fs::copy(out.join(f), dir.join(f));
    }
    dir
}

#[test]
fn badblocks_injection_health_and_unsafe_shutdowns() {
    let vm = require!(NestedVm::new().and_then(NestedVm::with_pmemvm));
    let kernel = require!(guest_image("vmlinux"));
    let initrd = require!(guest_image("initramfs.cpio.gz"));
    let base = fs::read(&initrd).expect("initramfs");
    let out = vm
        .deadline(Duration::from_secs(600))
        .file("vmlinux", kernel)
        .bytes("run1.img", job_initrd(&base, RUN1))
        .bytes("run2.img", job_initrd(&base, RUN2))
        .bytes("run3.img", job_initrd(&base, RUN3))
        .run(&["sh", "-c", L1_SCRIPT])
        .expect("three pmemvm boots in the harness");
    let read = |f: &str| fs::read_to_string(out.path(f)).unwrap_or_default();
    let ctx = format!(
        "{}\n--- pmemvm1.err ---\n{}\n--- console1 ---\n{}\n--- console2 ---\n{}\n--- pmemvm3.err ---\n{}\n--- console3 ---\n{}",
        out.dump(),
        read("pmemvm1.err"),
        read("console1.txt"),
        read("console2.txt"),
        read("pmemvm3.err"),
        read("console3.txt"),
    );
    let channel = |n: u32| {
        parse_channel(&fs::read(out.path(&format!("channel{n}.bin"))).unwrap_or_default())
            .unwrap_or_else(|e| panic!("channel {n}: {e}\n{ctx}"))
    };
    let (r1, r3) = (channel(1), channel(3));
    let kept = keep(&[("run1", &r1), ("run3", &r3)], &out.path(""));
    eprintln!(
        "nested media errors: {:.1?} in all; guest outputs in {}",
        out.elapsed,
        kept.display()
    );
    let ctx = format!("{ctx}\n(guest outputs in {})", kept.display());
    assert!(out.stdout.contains("run1 exited 0"), "{ctx}");
    assert!(out.stdout.contains("run2 killed"), "{ctx}");
    assert!(out.stdout.contains("run3 exited 0"), "{ctx}");
    assert_eq!(r1.status, Some(0), "{}\n{ctx}", text(&r1, "setup.log"));
    assert_eq!(r3.status, Some(0), "{}\n{ctx}", text(&r3, "setup.log"));
    check_run1(&r1, &ctx);
    check_run2(&read("console2.txt"), &ctx);
    check_run3(&r3, &ctx);
    // The host's view between the runs.
    let (a1, a2, a3, b3) = (
        read("bb-a-1.txt"),
        read("bb-a-2.txt"),
        read("bb-a-3.txt"),
        read("bb-b-3.txt"),
    );
    assert!(
        a1.contains("2 bad ranges, unsafe shutdown count 0\n")
            && a1.ends_with("\n1048576+4096\n4194304+512\n"),
        "after run 1 (orderly): the host range and block 8192, not the cleared 4096:\n{a1}\n{ctx}"
    );
    assert!(
        a2.contains("0 bad ranges, unsafe shutdown count 0, in use or not ended in order"),
        "after the SIGKILL: cleared for good, dirty flag left set:\n{a2}\n{ctx}"
    );
    assert!(
        a3.contains("0 bad ranges, unsafe shutdown count 1, last shutdown dirty\n")
            && !a3.contains("not ended in order"),
        "after run 3 (orderly): counted once, clean now:\n{a3}\n{ctx}"
    );
    assert!(
        b3.contains("unsafe shutdown count 2,"),
        "b.img: the SIGKILL and the injected unsafe shutdown:\n{b3}\n{ctx}"
    );
}

fn check_run1(r: &GuestReport, ctx: &str) {
    let st = steps(r);
    let ok = |n: &str| {
        assert_eq!(
            st.get(n).map(String::as_str),
            Some("0"),
            "step {n}:\n{}\n{ctx}",
            text(r, &format!("{n}.out"))
        );
    };
    let failed = |n: &str, err: &str| {
        assert_ne!(
            st.get(n).map(String::as_str),
            Some("0"),
            "{n} succeeded\n{ctx}"
        );
        assert!(st.contains_key(n), "{n} did not run\n{ctx}");
        let e = text(r, err);
        assert!(e.contains("Input/output error"), "{n}: {e}\n{ctx}");
    };
    // The host's badblocks=1M+4K: sector 2048, 8 sectors, before any guest action.
    assert_eq!(text(r, "bb-host.txt"), "2048 8\n", "{ctx}");
    let media = text(r, "media-host.json");
    assert!(
        media.contains("\"badblock_count\":8") && media.contains("\"offset\":2048"),
        "ndctl list --media-errors:\n{media}\n{ctx}"
    );
    failed("dd-host", "dd-host.err");
    ok("dd-good");
    for n in [
        "inject",
        "inject2",
        "inject-status",
        "write-clear",
        "dd-cleared",
        "b-fsdax",
        "mkfs",
        "mount",
        "inject-fs",
    ] {
        ok(n);
    }
    let inj = text(r, "bb-injected.txt");
    assert_eq!(inj, "2048 8\n4096 2\n8192 1\n", "{ctx}");
    let status = text(r, "inject-status.out");
    assert!(
        status.contains("4096") && status.contains("8192"),
        "ndctl inject-error --status:\n{status}\n{ctx}"
    );
    let media = text(r, "media-injected.json");
    assert!(media.contains("\"badblock_count\":11"), "{media}\n{ctx}");
    failed("dd-inj", "dd-inj.err");
    assert_eq!(
        text(r, "bb-after-write.txt"),
        "2048 8\n8192 1\n",
        "a write clears poison\n{ctx}"
    );
    // ext4 -o dax on b: the page under the injected sector fails, the rest reads.
    assert!(text(r, "mounts.txt").contains("dax"), "{ctx}");
    let blk = text(r, "victim-block.txt");
    assert!(
        text(r, "bb-fs.txt").contains(&format!("{} 1", blk.trim())),
        "fiemap:\n{}\nbadblocks:\n{}\n{ctx}",
        text(r, "fiemap.txt"),
        text(r, "bb-fs.txt")
    );
    assert_ne!(st.get("cat-victim").map(String::as_str), Some("0"), "{ctx}");
    let e = text(r, "cat-victim.err");
    assert!(
        e.contains("Input/output error") || e.contains("hardware error"),
        "reading the file over the bad sector: {e}\n{ctx}"
    );
    assert_eq!(
        text(r, "victim-page0-before.md5"),
        text(r, "victim-page0-after.md5"),
        "{ctx}"
    );
    assert_eq!(
        text(r, "other-before.md5"),
        text(r, "other-after.md5"),
        "{ctx}"
    );
    assert_eq!(text(r, "other-after.md5").len(), 33, "{ctx}");
    // Health of fresh DIMMs.
    let h = health(r, "health.json", "nmem0", ctx);
    assert_eq!(h["health_state"], "ok", "{h:#}");
    assert_eq!(h["shutdown_count"], 0, "{h:#}");
    assert_eq!(h["shutdown_state"], "clean", "{h:#}");
    assert_eq!(h["temperature_celsius"], 25.0, "{h:#}");
    assert_eq!(h["spares_percentage"], 100, "{h:#}");
    assert_eq!(text(r, "dirty.txt").trim(), "0", "{ctx}");
}

fn check_run2(console: &str, ctx: &str) {
    // Persisted across the boot, without badblocks= on this command line.
    assert_eq!(line(console, "R2 bb0 ", ctx), "2048 8;8192 1;", "{ctx}");
    assert_eq!(
        line(console, "R2 dirty ", ctx),
        "0 0",
        "orderly end of run 1\n{ctx}"
    );
    assert!(line(console, "R2 clear ", ctx).starts_with("rc=0"), "{ctx}");
    assert_eq!(line(console, "R2 bb0-cleared", ctx).trim(), "", "{ctx}");
}

fn check_run3(r: &GuestReport, ctx: &str) {
    assert_eq!(text(r, "dirty.txt"), "nmem0 1\nnmem1 1\n", "{ctx}");
    let h = health(r, "health.json", "nmem0", ctx);
    assert_eq!(h["shutdown_count"], 1, "{h:#}");
    assert_eq!(h["shutdown_state"], "dirty", "{h:#}");
    assert_eq!(text(r, "bb0.txt"), "", "cleared before the kill\n{ctx}");
    let st = steps(r);
    for n in [
        "smart-threshold",
        "smart-temp",
        "smart-fatal",
        "smart-unsafe",
    ] {
        assert_eq!(
            st.get(n).map(String::as_str),
            Some("0"),
            "{n}:\n{}\n{ctx}",
            text(r, &format!("{n}.out"))
        );
    }
    let h = health(r, "health-injected.json", "nmem1", ctx);
    assert_eq!(h["health_state"], "fatal", "{h:#}");
    assert_eq!(h["temperature_celsius"], 90.0, "{h:#}");
    assert_eq!(h["alarm_temperature"], true, "{h:#}");
    assert_eq!(h["shutdown_count"], 2, "{h:#}");
}
