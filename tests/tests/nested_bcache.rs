//! Tier 5: the guest kernel's bcache `QUEUE_FLAG_NOWAIT` change under pmemvm — the write
//! path's allocations for a `REQ_NOWAIT` bio are made without waiting
//! (`guest-images/patches/0002-bcache-bch_nowait-module-parameter.patch`).
//!
//! The thread's null_blk + bcache setup (scaled down, writethrough as `make-bcache` makes
//! it), then io_uring direct random writes on `/dev/bcache0`: with `bcache.bch_nowait=1`
//! io_uring issues them inline with `REQ_NOWAIT`, and the patch's counter of write-path
//! allocations made with `GFP_NOWAIT` (it moves only at the writethrough clone and the
//! writeback flush) must move; with `bcache.bch_nowait=0` no bio reaches bcache with the flag
//! and it must stay 0. Both boots run in one L1. Skips when QEMU, the L1 kernel package or
//! the guest image is missing.

use std::time::Duration;

use pmemvm_tests::nested::setup_boot::{boot_line, with_setup_image, SetupBoot};
use pmemvm_tests::nested::NestedVm;
use pmemvm_tests::require;

/// The bench's bcache setup at 64 MiB null_blk devices (configfs, 2048 buckets of 32 KiB;
/// the boot gives `null_blk.nr_devices=0`, as the bench does, so configfs makes both), then
/// the writes and what bcache counted.
fn setup_script() -> String {
    let bcache_setup = include_str!("../../guest-images/jobs/bcache.setup.sh");
    format!(
        "NULLB_CONFIGFS=1\nNULLB_MB=64\nBUCKET_KB=32\n{bcache_setup}\n{}",
        r#"
out=$PMEMVM_OUT
fio --name=nowait-writes --filename=/dev/bcache0 --ioengine=io_uring --direct=1 \
    --rw=randwrite --bs=4k --iodepth=16 --size=16M --output-format=json >$out/writes.json
p=/sys/module/bcache/parameters
cat $p/bch_nowait >$out/bch_nowait
cat $p/bch_nowait_write_allocs >$out/allocs
cat $p/bch_nowait_write_again >$out/again
cat /sys/block/bcache0/bcache/cache_mode >$out/cache_mode
"#
    )
}

/// Writes fio completed, after checking it reported no error.
fn writes(boot: &SetupBoot) -> u64 {
    let fio: serde_json::Value = serde_json::from_str(&boot.text("writes.json"))
        .unwrap_or_else(|e| panic!("writes.json: {e}\n{}", boot.ctx));
    let job = &fio["jobs"][0];
    assert_eq!(job["error"], 0, "{}", boot.ctx);
    job["write"]["total_ios"]
        .as_u64()
        .unwrap_or_else(|| panic!("no write total_ios\n{}", boot.ctx))
}

#[test]
fn bcache_nowait_writes_allocate_without_waiting_only_with_the_flag() {
    let vm = require!(NestedVm::new()
        .and_then(NestedVm::with_pmemvm)
        .and_then(|vm| with_setup_image(vm, "vmlinux", &setup_script())));
    let machine = "--cpus 1 --memory 768M --nvdimm 64M,label-size=0";
    let script = format!(
        "{}\n{}\n",
        boot_line("off", machine, "null_blk.nr_devices=0 bcache.bch_nowait=0"),
        boot_line("on", machine, "null_blk.nr_devices=0 bcache.bch_nowait=1")
    );
    let out = vm
        .deadline(Duration::from_secs(700))
        .run(&["sh", "-c", &script])
        .expect("run pmemvm in the harness");

    let off = SetupBoot::read(&out, "off");
    assert_eq!(off.text("bch_nowait"), "N", "{}", off.ctx);
    assert_eq!(
        off.text("cache_mode"),
        "[writethrough] writeback writearound none",
        "{}",
        off.ctx
    );
    assert_eq!(writes(&off), 4096, "{}", off.ctx);
    assert_eq!(off.count("allocs"), 0, "{}", off.ctx);
    assert_eq!(off.count("again"), 0, "{}", off.ctx);

    let on = SetupBoot::read(&out, "on");
    assert_eq!(on.text("bch_nowait"), "Y", "{}", on.ctx);
    assert_eq!(on.text("cache_mode"), off.text("cache_mode"), "{}", on.ctx);
    let writes = writes(&on);
    assert_eq!(writes, 4096, "{}", on.ctx);
    let (allocs, again) = (on.count("allocs"), on.count("again"));
    // Every inline REQ_NOWAIT write that bcache caches (writethrough) takes the path once; a
    // write that ended with BLK_STS_AGAIN is retried by io_uring from io-wq without the flag.
    assert!(
        allocs > 0,
        "the write path never allocated without waiting\n{}",
        on.ctx
    );
    assert!(
        allocs <= writes + again,
        "allocs {allocs} > writes {writes} + again {again}\n{}",
        on.ctx
    );
    eprintln!(
        "bcache.bch_nowait=1: {allocs} write-path GFP_NOWAIT allocations for {writes} writes, \
         {again} ended with BLK_STS_AGAIN; bch_nowait=0: 0"
    );
}
