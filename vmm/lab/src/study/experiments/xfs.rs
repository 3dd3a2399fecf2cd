//! XFS on pmem with DAX from the famfs RFC thread ("Re: [RFC PATCH 00/20] Introduce the famfs
//! shared-memory file system", John Groves, 26 Feb 2024), `luis/fio-xfsdax.sh`:
//!
//! ```text
//! mkfs.xfs -d agcount=1024 -m reflink=0 -f /dev/pmem0     # 128 GiB fsdax pmem
//! mount -o dax /dev/pmem0 /mnt/xfs
//! fio -name=ten-256m-per-thread --nrfiles=10 -bs=2M --group_reporting=1 --alloc-size=1048576 \
//!     --filesize=256MiB --readwrite=write --fallocate=none --numjobs=$(nproc) \
//!     --create_on_open=0 --ioengine=io_uring --direct=1 --directory=/mnt/xfs
//! ```

use std::collections::BTreeMap;

use super::{
    common, human, plan::Phase, BenchParams, Deviation, Experiment, ExperimentError,
    ExperimentPlan, PhaseRole, GIB, MIB,
};

/// The thread's pmem device.
pub const THREAD_NVDIMM: u64 = 128 * GIB;
/// Files per job.
pub const NRFILES: u64 = 10;
/// The thread's file size.
pub const THREAD_FILESIZE: u64 = 256 * MIB;
/// The thread's allocation groups (128 MiB each on 128 GiB).
pub const THREAD_AGCOUNT: u64 = 1024;
/// Smallest NVDIMM that holds an XFS (300 MB) and its fsdax page map.
pub const MIN_NVDIMM: u64 = 512 * MIB;
const BS: u64 = 2 * MIB;

const JOB: (&str, &str) = guest_images_file!("jobs/xfs-dax-write.fio");
const SETUP: (&str, &str) = guest_images_file!("jobs/xfs-dax-write.setup.sh");

/// Bytes the files of all jobs may take on an NVDIMM of `nvdimm` bytes: the file system is the
/// device less the fsdax page map (1/64); of that, the 64 MiB log and a reserve of 1/32 (at
/// least 64 MiB) for XFS's metadata and reserved blocks stay free. At the thread's 128 GiB the
/// budget (122 GiB) holds the thread's 48 x 10 x 256 MiB = 120 GiB.
pub fn file_budget(nvdimm: u64) -> u64 {
    let fs = nvdimm - nvdimm / 64;
    fs.saturating_sub((fs / 32).max(64 * MIB) + 64 * MIB)
}

/// The default NVDIMM: the thread's 128 GiB where three quarters of the free disk hold it,
/// else that much in whole GiB.
pub fn default_nvdimm(disk_free: Option<u64>) -> u64 {
    match disk_free {
        Some(free) => (free / 4 * 3 / GIB * GIB).clamp(MIN_NVDIMM, THREAD_NVDIMM),
        None => THREAD_NVDIMM,
    }
}

pub(super) fn plan(e: &Experiment, p: &BenchParams) -> Result<ExperimentPlan, ExperimentError> {
    let mut deviations = Vec::new();
    let c = common(e, p, Some(1), &mut deviations)?;
    let nvdimm = nvdimm_size(e, p, &mut deviations)?;
    let filesize = file_size(e, p, nvdimm, c.jobs, &mut deviations)?;
    let agcount = (nvdimm / (128 * MIB)).clamp(4, THREAD_AGCOUNT);
    if agcount != THREAD_AGCOUNT {
        deviations.push(Deviation::new(
            "mkfs.xfs -d agcount",
            "1024 (128 MiB each)",
            format!("{agcount}"),
            "allocation groups of the thread's 128 MiB on the smaller device (at least 4)",
        ));
    }
    deviations.push(Deviation::new(
        "namespace",
        "fsdax (\"converted from devdax to pmem\"), page map not shown",
        "ndctl create-namespace --mode=fsdax --map=dev",
        "the page map on the device keeps guest RAM independent of the NVDIMM size",
    ));

    let mut vars: BTreeMap<&'static str, String> = BTreeMap::new();
    vars.insert("JOBS", c.jobs.to_string());
    vars.insert("NRFILES", NRFILES.to_string());
    vars.insert("FILESIZE", filesize.to_string());
    vars.insert("IODEPTH", c.iodepth.unwrap_or(1).to_string());
    let mut setup_vars: BTreeMap<&'static str, String> = BTreeMap::new();
    setup_vars.insert("AGCOUNT", agcount.to_string());
    let setup = super::template::setup(SETUP, &setup_vars)?;
    let phase = Phase {
        name: "ten-256m-per-thread".into(),
        job: "ten-256m-per-thread",
        role: PhaseRole::Measured { repetition: 1 },
        template: JOB.0,
        args: Some("--alloc-size=1048576".into()),
        job_file: super::template::render_job(JOB.0, JOB.1, &vars)?,
    };
    vars.extend(setup_vars);
    Ok(ExperimentPlan {
        setup: Some(setup),
        nvdimm_bytes: Some(nvdimm),
        // fio's --alloc-size=1048576 (KiB) maps a 1 GiB shared pool: the guest needs room for it.
        min_guest_mem_mib: 1024 + 512,
        ..c.plan(e, vars, vec![phase], deviations)
    })
}

/// The NVDIMM: `--nvdimm`, else three quarters of the free disk (at most
/// the thread's 128 GiB), at least 512 MiB and region-aligned.
fn nvdimm_size(
    e: &Experiment,
    p: &BenchParams,
    deviations: &mut Vec<Deviation>,
) -> Result<u64, ExperimentError> {
    let nvdimm = p
        .nvdimm_bytes
        .unwrap_or_else(|| default_nvdimm(p.host.disk_free_bytes));
    if nvdimm < MIN_NVDIMM {
        return Err(e.invalid("NVDIMM size", human(nvdimm), "use at least 512 MiB"));
    }
    e.check_region_align(nvdimm)?;
    if nvdimm != THREAD_NVDIMM {
        let why = if p.nvdimm_bytes.is_some() {
            "set with --nvdimm".to_owned()
        } else {
            "three quarters of the free disk for the backing file".to_owned()
        };
        deviations.push(Deviation::new("pmem size", "128 GiB", human(nvdimm), why));
    }
    Ok(nvdimm)
}

/// Each file's size: `--size` (a multiple of the 2 MiB block), else the
/// thread's 256 MiB, at most what lets every job's files fit the file system.
fn file_size(
    e: &Experiment,
    p: &BenchParams,
    nvdimm: u64,
    jobs: u32,
    deviations: &mut Vec<Deviation>,
) -> Result<u64, ExperimentError> {
    let wanted = match p.size_bytes {
        Some(s) if s == 0 || !s.is_multiple_of(BS) => {
            return Err(e.invalid("size", human(s), "use a multiple of 2 MiB (the block size)"))
        }
        Some(s) => s,
        None => THREAD_FILESIZE,
    };
    let fit = file_budget(nvdimm) / (u64::from(jobs) * NRFILES) / BS * BS;
    let filesize = wanted.min(fit);
    if filesize == 0 {
        let max_jobs = file_budget(nvdimm) / (NRFILES * BS);
        return Err(e.invalid(
            "jobs",
            jobs,
            format!(
                "{jobs} jobs x {NRFILES} files of at least 2 MiB do not fit the {} NVDIMM's file \
                 system: use at most {max_jobs} jobs or a larger --nvdimm",
                human(nvdimm)
            ),
        ));
    }
    if filesize != THREAD_FILESIZE {
        let why = if filesize < wanted {
            format!(
                "{jobs} jobs x {NRFILES} files of {} must fit the {} NVDIMM's file system",
                human(wanted),
                human(nvdimm)
            )
        } else {
            "set with --size".to_owned()
        };
        deviations.push(Deviation::new("filesize", "256MiB", human(filesize), why));
    }
    Ok(filesize)
}
