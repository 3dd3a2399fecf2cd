//! The pmem QUEUE_FLAG_NOWAIT thread's test script (`test-pmem.sh` in "[PATCH] pmem: allow
//! user to set QUEUE_FLAG_NOWAIT", V1, 12 May 2023), per side in one module load:
//!
//! ```text
//! fio fio/verify.fio    --ioengine=io_uring --size=896M --filename=/dev/pmem0
//! fio fio/randwrite.fio --ioengine=io_uring --size=896M --filename=/dev/pmem0
//! for i in 1 2 3; do fio fio/randread.fio --ioengine=io_uring --size=896M \
//!     --filename=/dev/pmem0 --output=pmem-<side>-$i.fio; done
//! ```
//!
//! `pmem-nowait` runs all of it and measures the randread runs; `pmem-randwrite` stops after
//! the fill and measures it; `pmem-verify` runs the verify job alone.

use std::collections::BTreeMap;

use super::{
    common, human, plan::Phase, runtime_deviation, BenchParams, Deviation, Experiment,
    ExperimentError, ExperimentPlan, Kind, PhaseRole, GIB, MIB,
};

/// The thread's `--size`.
pub const THREAD_SIZE: u64 = 896 * MIB;
/// The randwrite job's queue depth in the posted output.
pub const THREAD_RANDWRITE_IODEPTH: u32 = 2;
/// Randread runs per side.
pub const THREAD_REPETITIONS: u32 = 3;

const VERIFY: (&str, &str) = guest_images_file!("jobs/write-and-verify.fio");
const RANDWRITE: (&str, &str) = guest_images_file!("jobs/randwrite.fio");
const RANDREAD: (&str, &str) = guest_images_file!("jobs/randread.fio");

/// A phase from a job-file template.
pub(super) fn phase(
    name: &str,
    job: &'static str,
    role: PhaseRole,
    (template, text): (&'static str, &'static str),
    vars: &BTreeMap<&'static str, String>,
) -> Result<Phase, ExperimentError> {
    Ok(Phase {
        name: name.to_owned(),
        job,
        role,
        template,
        args: None,
        job_file: super::template::render_job(template, text, vars)?,
    })
}

/// The verify, randwrite and randread phases of the NOWAIT threads' scripts (pmem and bcache
/// share them), for `kind`.
pub(super) fn script_phases(
    kind: Kind,
    vars: &BTreeMap<&'static str, String>,
) -> Result<Vec<Phase>, ExperimentError> {
    let verify_role = match kind {
        Kind::PmemVerify | Kind::BcacheVerify => PhaseRole::Measured { repetition: 1 },
        _ => PhaseRole::Check,
    };
    let mut phases = vec![phase(
        "write-and-verify",
        "write-and-verify",
        verify_role,
        VERIFY,
        vars,
    )?];
    match kind {
        Kind::PmemVerify | Kind::BcacheVerify | Kind::XfsDaxWrite => {}
        Kind::PmemRandwrite => phases.push(phase(
            "randwrite",
            "RANDWRITE",
            PhaseRole::Measured { repetition: 1 },
            RANDWRITE,
            vars,
        )?),
        Kind::PmemNowait | Kind::BcacheNowait => {
            phases.push(phase(
                "randwrite",
                "RANDWRITE",
                PhaseRole::Prepare,
                RANDWRITE,
                vars,
            )?);
            for i in 1..=THREAD_REPETITIONS {
                phases.push(phase(
                    &format!("randread-{i}"),
                    "randread",
                    PhaseRole::Measured { repetition: i },
                    RANDREAD,
                    vars,
                )?);
            }
        }
    }
    Ok(phases)
}

/// The parameters the posts do not show, common to both NOWAIT scripts.
pub(super) fn not_shown(kind: Kind, iodepth_set: bool, deviations: &mut Vec<Deviation>) {
    deviations.push(Deviation::new(
        "write-and-verify: norandommap",
        "not shown",
        "1",
        "inferred: every passing posted verify read back 63% (1 - 1/e) of the blocks it wrote, \
         as fio does when blocks are written more than once",
    ));
    if matches!(kind, Kind::PmemVerify | Kind::BcacheVerify) {
        return;
    }
    deviations.push(Deviation::new(
        "direct (RANDWRITE, randread)",
        "not shown",
        "1",
        "assumed: the scripts' verify job (fio's basic-verify example) is direct",
    ));
    if matches!(kind, Kind::PmemNowait | Kind::BcacheNowait) && !iodepth_set {
        deviations.push(Deviation::new(
            "iodepth (randread)",
            "not shown",
            THREAD_RANDWRITE_IODEPTH.to_string(),
            "chosen: the same scripts' randwrite.fio runs at 2 (--iodepth sets both)",
        ));
    }
}

pub(super) fn plan(e: &Experiment, p: &BenchParams) -> Result<ExperimentPlan, ExperimentError> {
    let mut deviations = Vec::new();
    let c = common(e, p, Some(THREAD_RANDWRITE_IODEPTH), &mut deviations)?;
    // 1 GiB holds the thread's 896 MiB; on a short disk, three quarters of what is free.
    let nvdimm = p.nvdimm_bytes.unwrap_or_else(|| {
        p.host.disk_free_bytes.map_or(GIB, |free| {
            (free / 4 * 3 / (16 * MIB) * (16 * MIB)).clamp(16 * MIB, GIB)
        })
    });
    if nvdimm < 16 * MIB {
        return Err(e.invalid("NVDIMM size", human(nvdimm), "use at least 16 MiB"));
    }
    e.check_region_align(nvdimm)?;
    let size = match p.size_bytes {
        Some(s) if s == 0 || !s.is_multiple_of(4096) || s > nvdimm => {
            return Err(e.invalid(
                "size",
                human(s),
                format!("use a multiple of 4 KiB up to the {} NVDIMM", human(nvdimm)),
            ))
        }
        Some(s) => s,
        None => THREAD_SIZE.min(nvdimm),
    };
    if size != THREAD_SIZE {
        let why = if p.size_bytes.is_some() {
            "set with --size".to_owned()
        } else if p.nvdimm_bytes.is_some() {
            format!(
                "the thread's 896 MiB does not fit the {} NVDIMM (--nvdimm)",
                human(nvdimm)
            )
        } else {
            format!(
                "the thread's 896 MiB does not fit the {} NVDIMM that three quarters of the \
                 free disk hold",
                human(nvdimm)
            )
        };
        deviations.push(Deviation::new("--size", "896M", human(size), why));
    }
    match e.kind {
        Kind::PmemNowait => runtime_deviation(&c, "RANDWRITE bound, randread", &mut deviations),
        Kind::PmemRandwrite => runtime_deviation(&c, "RANDWRITE bound", &mut deviations),
        _ => {}
    }
    super::software_deviations(&mut deviations);
    if !matches!(e.kind, Kind::PmemVerify) {
        deviations.push(Deviation::new(
            "device state between sides",
            "one /dev/pmem0 for both loads: the on side started on the off side's data",
            "a new, zeroed NVDIMM every boot",
            "boots are independent (sides alternate, --runs repeats them); each side's own \
             verify and fill write the device before it is measured",
        ));
    }
    deviations.push(Deviation::new(
        "module load",
        "rmmod/insmod nd_pmem.ko [nowait=1] per side",
        "one boot per side with nd_pmem.nowait=0|1 on the kernel command line",
        "nd_pmem is built into the guest kernel; all phases of a side still run in one load",
    ));
    deviations.push(Deviation::new(
        "device",
        "/dev/pmem0 of the poster's NVDIMM (size not shown)",
        format!(
            "/dev/pmem0 of a label-less {} NVDIMM emulated by the engine",
            human(nvdimm)
        ),
        "no NVDIMM hardware here",
    ));
    not_shown(e.kind, p.iodepth.is_some(), &mut deviations);

    let mut vars: BTreeMap<&'static str, String> = BTreeMap::new();
    vars.insert("FILENAME", "/dev/pmem0".into());
    vars.insert("SIZE", size.to_string());
    vars.insert("JOBS", c.jobs.to_string());
    vars.insert(
        "IODEPTH",
        c.iodepth.unwrap_or(THREAD_RANDWRITE_IODEPTH).to_string(),
    );
    vars.insert("RUNTIME", c.runtime.to_string());
    let phases = script_phases(e.kind, &vars)?;
    Ok(ExperimentPlan {
        nvdimm_bytes: Some(nvdimm),
        ..c.plan(e, vars, phases, deviations)
    })
}
