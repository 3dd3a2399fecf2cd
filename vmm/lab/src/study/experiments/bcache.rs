//! The bcache QUEUE_FLAG_NOWAIT thread's test script (`test-bcache.sh` in "[PATCH 0/1] bcache:
//! allow user to set QUEUE_FLAG_NOWAIT", 12 May 2023), per side in one module load:
//!
//! ```text
//! modprobe null_blk queue_mode=2 nr_devices=2 memory_backed=1 gb=1
//! insmod bcache.ko [bch_nowait=1]
//! bcache make -B /dev/nullb0 -C /dev/nullb1; echo /dev/nullb{0,1} > /sys/fs/bcache/register
//! fio fio/verify.fio    --ioengine=io_uring --size=1G --filename=/dev/bcache0
//! fio fio/randwrite.fio --ioengine=io_uring --size=1G --filename=/dev/bcache0
//! for i in 1 2 3; do fio fio/randread.fio --ioengine=io_uring --size=1G \
//!     --filename=/dev/bcache0 --output=bc-<side>-$i.fio; done
//! ```
//!
//! `bcache-nowait` runs all of it and measures the randread runs; `bcache-verify` runs the
//! setup and the verify job, which failed on the default (off) side in the thread.

use std::collections::BTreeMap;

use super::{
    common, human, pmem, runtime_deviation, BenchParams, Deviation, Experiment, ExperimentError,
    ExperimentPlan, Kind, GIB, MIB,
};

/// The thread's null_blk device size (`gb=1`) and fio `--size`.
pub const THREAD_SIZE: u64 = GIB;
/// make-bcache's default bucket, KiB; at 1 GiB it gives the thread's 2048 buckets.
pub const DEFAULT_BUCKET_KB: u64 = 512;
/// The thread's cache device had this many buckets.
pub const THREAD_BUCKETS: u64 = 2048;

const SETUP: (&str, &str) = guest_images_file!("jobs/bcache.setup.sh");

/// make-bcache's bucket for a cache of `size` bytes: the default, halved until the cache has
/// the thread's 2048 buckets (the kernel refuses caches with too few).
pub fn bucket_kb(size: u64) -> u64 {
    let mut kb = DEFAULT_BUCKET_KB;
    while size / 1024 / kb < THREAD_BUCKETS && kb > 4 {
        kb /= 2;
    }
    kb
}

pub(super) fn plan(e: &Experiment, p: &BenchParams) -> Result<ExperimentPlan, ExperimentError> {
    let mut deviations = Vec::new();
    let c = common(e, p, Some(pmem::THREAD_RANDWRITE_IODEPTH), &mut deviations)?;
    let size = device_size(e, p, c.jobs)?;
    let configfs = !size.is_multiple_of(GIB);
    let bucket = bucket_kb(size);
    let extra_cmdline = if configfs {
        vec!["null_blk.nr_devices=0".to_owned()]
    } else {
        vec![format!(
            "null_blk.queue_mode=2 null_blk.nr_devices=2 null_blk.memory_backed=1 null_blk.gb={}",
            size / GIB
        )]
    };
    device_deviations(p, size, bucket, &mut deviations);
    if matches!(e.kind, Kind::BcacheNowait) {
        runtime_deviation(&c, "RANDWRITE, randread", &mut deviations);
    }
    super::software_deviations(&mut deviations);
    tool_deviations(&mut deviations);
    pmem::not_shown(e.kind, p.iodepth.is_some(), &mut deviations);

    let mut setup_vars: BTreeMap<&'static str, String> = BTreeMap::new();
    setup_vars.insert("NULLB_CONFIGFS", u8::from(configfs).to_string());
    setup_vars.insert("NULLB_MB", (size / MIB).to_string());
    setup_vars.insert("BUCKET_KB", bucket.to_string());
    let setup = super::template::setup(SETUP, &setup_vars)?;

    let mut vars: BTreeMap<&'static str, String> = BTreeMap::new();
    vars.insert("FILENAME", "/dev/bcache0".into());
    vars.insert("SIZE", size.to_string());
    vars.insert("JOBS", c.jobs.to_string());
    let iodepth = c.iodepth.unwrap_or(pmem::THREAD_RANDWRITE_IODEPTH);
    vars.insert("IODEPTH", iodepth.to_string());
    vars.insert("RUNTIME", c.runtime.to_string());
    let phases = pmem::script_phases(e.kind, &vars)?;
    vars.extend(setup_vars);
    Ok(ExperimentPlan {
        setup: Some(setup),
        extra_cmdline,
        min_guest_mem_mib: 2 * (size / MIB) + 512,
        ..c.plan(e, vars, phases, deviations)
    })
}

/// Each null_blk device's size (and fio's `--size`): `--size`, else the
/// thread's 1 GiB where two of them fit in RAM beside the guest (512 MiB and
/// the default's RAM per job), else what fits.
fn device_size(e: &Experiment, p: &BenchParams, jobs: u32) -> Result<u64, ExperimentError> {
    let beside = (512 + super::plan::GUEST_MEM_PER_JOB_MIB * u64::from(jobs)) * MIB;
    let fits = p
        .host
        .guest_mem_bytes
        .map(|m| (m.saturating_sub(beside) / 2 / MIB * MIB).max(64 * MIB));
    let size = p
        .size_bytes
        .unwrap_or_else(|| fits.map_or(THREAD_SIZE, |f| f.min(THREAD_SIZE)));
    if !(64 * MIB..=64 * GIB).contains(&size) || !size.is_multiple_of(MIB) {
        return Err(e.invalid(
            "size",
            human(size),
            "use a whole number of MiB from 64 MiB to 64 GiB (each null_blk device and fio's --size)",
        ));
    }
    Ok(size)
}

/// Where the devices differ from the thread's: their size, their setup
/// through configfs (not whole GiB), the bucket size.
fn device_deviations(p: &BenchParams, size: u64, bucket: u64, deviations: &mut Vec<Deviation>) {
    if size != THREAD_SIZE {
        let why = if p.size_bytes.is_some() {
            "set with --size".to_owned()
        } else {
            format!(
                "two memory-backed devices of 1 GiB and the guest do not fit the {} of RAM \
                 this host has available",
                human(p.host.guest_mem_bytes.unwrap_or(0) / MIB * MIB)
            )
        };
        deviations.push(Deviation::new(
            "null_blk size and --size",
            "gb=1, --size=1G",
            human(size),
            why,
        ));
    }
    if !size.is_multiple_of(GIB) {
        deviations.push(Deviation::new(
            "null_blk setup",
            "modprobe null_blk queue_mode=2 nr_devices=2 memory_backed=1 gb=1",
            "null_blk.nr_devices=0, then both devices through configfs (queue_mode 2, \
             memory_backed 1, blocksize 512, size in MiB)",
            "null_blk's gb parameter takes whole GiB only",
        ));
    }
    if bucket != DEFAULT_BUCKET_KB {
        deviations.push(Deviation::new(
            "bcache bucket size",
            "512k (2048 buckets)",
            format!("{bucket}k ({} buckets)", size / 1024 / bucket),
            "kept the thread's 2048 buckets on the smaller cache device",
        ));
    }
}

/// How the modules load and which bcache tool makes the device.
fn tool_deviations(deviations: &mut Vec<Deviation>) {
    deviations.push(Deviation::new(
        "module load",
        "modprobe null_blk; insmod bcache.ko [bch_nowait=1] per side",
        "one boot per side with bcache.bch_nowait=0|1 (and null_blk's parameters) on the \
         kernel command line",
        "null_blk and bcache are built into the guest kernel; all phases of a side still run \
         in one load",
    ));
    deviations.push(Deviation::new(
        "bcache tool",
        "bcache make -B /dev/nullb0 -C /dev/nullb1 (bcache-tools 1.1)",
        "make-bcache -B /dev/nullb0 -C /dev/nullb1 (Debian's bcache-tools 1.0.8)",
        "the guest image's bcache-tools; same defaults (block 1 sector, bucket 512k)",
    ));
}
