//! The catalogue of `pmemvm bench` experiments: the upstream threads' test scripts, phase by
//! phase, as pmemvm reproduces them in one guest boot per side.
//!
//! Each [`Experiment`] plans ([`Experiment::plan`]) the boot of one side: an optional setup
//! script, then the thread's fio invocations in the thread's order ([`Phase`]): e.g. for
//! `pmem-nowait` the write-and-verify job, the 48-job randwrite fill and three 60 s randread
//! runs, in one module load as in the thread. The thread's parameters are the defaults; where
//! the host cannot give them (fewer CPUs, a smaller NVDIMM or less disk) the plan scales them
//! and lists every such [`Deviation`], together with the parameters the posts do not show.
//!
//! - [`template`]: `${NAME}` substitution in the job files of `guest-images/jobs/`;
//! - [`plan`]: the plan's types and its text form (`pmemvm bench EXP --plan`);
//! - `pmem`, `bcache`, `xfs`: one module per thread.

use serde::Serialize;

use crate::study::fio::{FioOutput, FioSummary};
use crate::study::report::Upstream;
use crate::study::threads::{self, Posted};

/// A file of `guest-images/` an experiment builds into its plan: its path in the
/// repository (the plan names it) and its text, built into pmemvm.
macro_rules! guest_images_file {
    ($rel:literal) => {
        (
            concat!("guest-images/", $rel),
            include_str!(concat!("../../../../../guest-images/", $rel)),
        )
    };
}

mod bcache;
mod knobs;
pub(crate) use knobs::{common, runtime_deviation, software_deviations, Common};
pub mod plan;
mod pmem;
pub mod template;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_defaults;
#[cfg(test)]
mod tests_tools;
mod xfs;

pub use plan::{Deviation, ExperimentPlan, Phase, PhaseRole, Setup, Side};
pub use template::render_template;

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

/// Largest accepted job count.
pub const MAX_JOBS: u32 = 1024;
/// The threads' job count (one per CPU of the posters' hosts).
pub const THREAD_JOBS: u32 = 48;
/// The threads' randread/randwrite runtime, seconds.
pub const THREAD_RUNTIME_S: u32 = 60;

/// Errors from choosing or planning an experiment.
#[derive(Debug, thiserror::Error)]
pub enum ExperimentError {
    /// No experiment has this name.
    #[error("unknown experiment {name:?}; accepted: {accepted}")]
    UnknownExperiment {
        /// What the user asked for.
        name: String,
        /// Comma-separated list of the experiment names.
        accepted: String,
    },
    /// A scaling parameter is out of range.
    #[error("{experiment}: {what} = {value} is not accepted; {accepted}")]
    InvalidParameter {
        /// Experiment name.
        experiment: &'static str,
        /// Which parameter.
        what: &'static str,
        /// The value given or derived.
        value: String,
        /// What would be accepted.
        accepted: String,
    },
    /// A `${NAME}` in a job file or setup script has no value.
    #[error("{file} uses ${{{name}}}, which pmemvm does not define (defined: {defined})")]
    UndefinedVariable {
        /// The job file or script.
        file: &'static str,
        /// The placeholder name.
        name: String,
        /// The names that are defined.
        defined: String,
    },
    /// fio's report has no job of the measured name.
    #[error("{experiment}: fio's report has no job named {job:?} (jobs: {found})")]
    MeasuredJobMissing {
        /// Experiment name.
        experiment: &'static str,
        /// The job name looked for.
        job: &'static str,
        /// The job names present.
        found: String,
    },
}

/// The kernel parameter an A/B experiment flips.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct AbParameter {
    /// `module.param`, e.g. `nd_pmem.nowait`.
    pub param: &'static str,
}

/// What the thread reported for a verify job, per side, for the report to compare with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct VerifyExpectation {
    /// The verify job's name.
    pub job: &'static str,
    /// Whether it failed with the parameter off.
    pub fails_off: bool,
    /// Whether it failed with the parameter on.
    pub fails_on: bool,
    /// What the thread showed, in one line.
    pub thread: &'static str,
}

/// Which thread's script an experiment follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
enum Kind {
    PmemNowait,
    PmemRandwrite,
    PmemVerify,
    BcacheNowait,
    BcacheVerify,
    XfsDaxWrite,
}

impl Kind {
    /// The phases whose fio job count is `--jobs` (the thread's 48), as the plan names them;
    /// "" for the verify-only scripts, which have none (their one job is the verify).
    fn many_job_phases(self) -> &'static str {
        match self {
            Kind::PmemNowait | Kind::BcacheNowait => "RANDWRITE, randread",
            Kind::PmemRandwrite => "RANDWRITE",
            Kind::PmemVerify | Kind::BcacheVerify => "",
            Kind::XfsDaxWrite => "ten-256m-per-thread",
        }
    }

    /// Whether the script has a phase bound by a runtime (`--runtime` applies).
    fn timed(self) -> bool {
        matches!(
            self,
            Kind::PmemNowait | Kind::PmemRandwrite | Kind::BcacheNowait
        )
    }
}

/// One experiment of the catalogue.
#[derive(Debug, Clone, Serialize)]
pub struct Experiment {
    /// Name on the command line.
    pub name: &'static str,
    /// One line on what it measures.
    pub description: &'static str,
    /// The kernel parameter flipped between the sides, for A/B experiments.
    pub ab: Option<AbParameter>,
    /// Whether the guest needs an NVDIMM.
    pub needs_nvdimm: bool,
    /// Figures upstream posted, with the posts they come from ([`crate::study::threads`]).
    pub upstream: &'static [Posted],
    /// One line on which upstream measurement this experiment repeats.
    pub upstream_source: &'static str,
    /// The thread's verify outcome per side, for experiments that check it.
    pub expectation: Option<VerifyExpectation>,
    kind: Kind,
}

/// What the host can give the guest, for the defaults that depend on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HostLimits {
    /// The host's CPUs (`None`: unknown, assume enough): the guest gets one vCPU per host CPU
    /// up to the thread's job count.
    pub cpus: Option<u32>,
    /// Free bytes where the NVDIMM backing file goes (`None`: unknown, assume enough).
    pub disk_free_bytes: Option<u64>,
    /// Memory the host can give the guest, after pmemvm's own overhead (`None`: unknown,
    /// assume enough).
    pub guest_mem_bytes: Option<u64>,
}

/// The user's scaling knobs; `None` means the experiment's default (the thread's value where
/// the host allows it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BenchParams {
    /// Guest vCPUs (`--cpus`; default: the thread's job count, at most one per host CPU).
    pub vcpus: Option<u32>,
    /// fio jobs of the many-job phases (thread: 48; default: one per vCPU, at most 48).
    pub jobs: Option<u32>,
    /// NVDIMM size.
    pub nvdimm_bytes: Option<u64>,
    /// Seconds of the time-bound phases (thread: 60).
    pub runtime_s: Option<u32>,
    /// io_uring queue depth of the many-job phases.
    pub iodepth: Option<u32>,
    /// The thread's `--size` (pmem: 896M; bcache: 1G, also each null_blk device's size;
    /// xfs-dax-write: each file's size, 256MiB).
    pub size_bytes: Option<u64>,
    /// The host.
    pub host: HostLimits,
}

const PMEM_NOWAIT: AbParameter = AbParameter {
    param: "nd_pmem.nowait",
};
const BCACHE_NOWAIT: AbParameter = AbParameter {
    param: "bcache.bch_nowait",
};

/// Every experiment, in the order `pmemvm bench --help` lists them.
pub static EXPERIMENTS: [Experiment; 6] = [
    Experiment {
        name: "pmem-nowait",
        description: "the pmem QUEUE_FLAG_NOWAIT test script: write-and-verify, randwrite fill, \
                      three 4k randread runs (measured), io_uring, /dev/pmem0; nd_pmem.nowait=0 vs 1",
        ab: Some(PMEM_NOWAIT),
        needs_nvdimm: true,
        upstream: &threads::PMEM_NOWAIT,
        upstream_source: "\"[PATCH] pmem: allow user to set QUEUE_FLAG_NOWAIT\" (V1) and \"[PATCH V2 \
                          1/1] pmem: set QUEUE_FLAG_NOWAIT\" (nvdimm list, May 2023): fio io_uring 4k \
                          randread after a randwrite fill, 3 runs per side in one module load",
        expectation: None,
        kind: Kind::PmemNowait,
    },
    Experiment {
        name: "pmem-randwrite",
        description: "the pmem test script's write-and-verify and 4k randwrite fill (measured), \
                      io_uring, /dev/pmem0; nd_pmem.nowait=0 vs 1",
        ab: Some(PMEM_NOWAIT),
        needs_nvdimm: true,
        upstream: &threads::PMEM_RANDWRITE,
        upstream_source: "the test script of \"[PATCH] pmem: allow user to set QUEUE_FLAG_NOWAIT\" \
                          (V1, nvdimm list, 12 May 2023): fio io_uring 4k randwrite, 48 jobs, \
                          iodepth 2, 896 MiB each, one run per side",
        expectation: None,
        kind: Kind::PmemRandwrite,
    },
    Experiment {
        name: "pmem-verify",
        description: "the pmem test script's write-and-verify job (randwrite 4k, iodepth 16, \
                      crc32c), io_uring, /dev/pmem0; nd_pmem.nowait=0 and 1",
        ab: Some(PMEM_NOWAIT),
        needs_nvdimm: true,
        upstream: &threads::PMEM_VERIFY,
        upstream_source: "the test script of \"[PATCH] pmem: allow user to set QUEUE_FLAG_NOWAIT\" \
                          (V1, nvdimm list, 12 May 2023): a write-and-verify fio job on each side",
        expectation: Some(VerifyExpectation {
            job: "write-and-verify",
            fails_off: false,
            fails_on: false,
            thread: "err=0 on both sides",
        }),
        kind: Kind::PmemVerify,
    },
    Experiment {
        name: "bcache-nowait",
        description: "the bcache QUEUE_FLAG_NOWAIT test script on null_blk: write-and-verify, \
                      randwrite, three 4k randread runs (measured), io_uring, /dev/bcache0; \
                      bcache.bch_nowait=0 vs 1",
        ab: Some(BCACHE_NOWAIT),
        needs_nvdimm: false,
        upstream: &threads::BCACHE_NOWAIT,
        upstream_source: "\"[PATCH 0/1] bcache: allow user to set QUEUE_FLAG_NOWAIT\" (linux-bcache \
                          list, 12 May 2023): backing and cache on memory-backed null_blk of 1 GiB \
                          each, fio io_uring 4k randread after a randwrite, 3 runs per side",
        expectation: None,
        kind: Kind::BcacheNowait,
    },
    Experiment {
        name: "bcache-verify",
        description: "the bcache test script's write-and-verify job on /dev/bcache0 (null_blk \
                      backing + cache); bcache.bch_nowait=0 and 1",
        ab: Some(BCACHE_NOWAIT),
        needs_nvdimm: false,
        upstream: &threads::BCACHE_VERIFY,
        upstream_source: "\"[PATCH 0/1] bcache: allow user to set QUEUE_FLAG_NOWAIT\" (linux-bcache \
                          list, 12 May 2023): the write-and-verify job failed with bch_nowait off \
                          (\"verify: bad header numberio\", err=84) and passed with it on",
        expectation: Some(VerifyExpectation {
            job: "write-and-verify",
            fails_off: true,
            fails_on: false,
            thread: "off: \"verify: bad header numberio 63917, wanted 64003 ... offset 701530112\", \
                     err=84; on: err=0",
        }),
        kind: Kind::BcacheVerify,
    },
    Experiment {
        name: "xfs-dax-write",
        description: "the famfs thread's XFS-DAX write: 2M direct io_uring writes into 10 files \
                      per job on XFS mounted -o dax on /dev/pmem0 (fsdax)",
        ab: None,
        needs_nvdimm: true,
        upstream: &threads::XFS_DAX_WRITE,
        upstream_source: "XFS with DAX on pmem in \"Re: [RFC PATCH 00/20] Introduce the famfs \
                          shared-memory file system\" (26 Feb 2024): mkfs.xfs -d agcount=1024 -m \
                          reflink=0, mount -o dax, 48 jobs x 10 files x 256 MiB, bs 2M, direct \
                          io_uring writes: 12.8 GiB/s",
        expectation: None,
        kind: Kind::XfsDaxWrite,
    },
];

/// The names of all experiments, comma-separated.
pub fn experiment_names() -> String {
    EXPERIMENTS
        .iter()
        .map(|e| e.name)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Looks an experiment up by name.
pub fn find_experiment(name: &str) -> Result<&'static Experiment, ExperimentError> {
    EXPERIMENTS
        .iter()
        .find(|e| e.name == name)
        .ok_or_else(|| ExperimentError::UnknownExperiment {
            name: name.to_owned(),
            accepted: experiment_names(),
        })
}

/// `1 GiB`, `896 MiB`, `4 KiB`.
pub(crate) fn human(bytes: u64) -> String {
    if bytes >= GIB && bytes.is_multiple_of(GIB) {
        format!("{} GiB", bytes / GIB)
    } else if bytes >= MIB && bytes.is_multiple_of(MIB) {
        format!("{} MiB", bytes / MIB)
    } else if bytes.is_multiple_of(1024) {
        format!("{} KiB", bytes / 1024)
    } else {
        format!("{bytes} bytes")
    }
}

impl Experiment {
    /// Sides of the experiment: `off` then `on` for A/B experiments, else `default`.
    pub fn sides(&self) -> Vec<Side> {
        match self.ab {
            Some(ab) => vec![
                Side::cmdline("off", Some(format!("{}=0", ab.param))),
                Side::cmdline("on", Some(format!("{}=1", ab.param))),
            ],
            None => vec![Side::cmdline("default", None)],
        }
    }

    /// Upstream's posts and per-run figures in the report's type.
    pub fn upstream_figures(&self) -> Upstream {
        let mut up = Upstream::default();
        for posted in self.upstream {
            if !up.sources.iter().any(|s| s.label == posted.post.label) {
                up.sources.push(posted.post.to_source(posted.how));
            }
            up.figures.extend(posted.figures());
        }
        up
    }

    /// An NVDIMM size must be a multiple of Linux's default region align.
    pub(crate) fn check_region_align(&self, size: u64) -> Result<(), ExperimentError> {
        if size.is_multiple_of(vmm::layout::NVDIMM_REGION_ALIGN) {
            Ok(())
        } else {
            Err(self.invalid(
                "NVDIMM size",
                size.to_string() + " bytes",
                "use a multiple of 16 MiB (the region align Linux uses since 5.7)",
            ))
        }
    }

    pub(crate) fn invalid(
        &self,
        what: &'static str,
        value: impl ToString,
        accepted: impl Into<String>,
    ) -> ExperimentError {
        ExperimentError::InvalidParameter {
            experiment: self.name,
            what,
            value: value.to_string(),
            accepted: accepted.into(),
        }
    }

    /// The plan of one boot per side on this machine: the thread's script with the thread's
    /// parameters where the host allows them, scaled where it does not, every difference listed.
    pub fn plan(&self, params: &BenchParams) -> Result<ExperimentPlan, ExperimentError> {
        let mut plan = match self.kind {
            Kind::PmemNowait | Kind::PmemRandwrite | Kind::PmemVerify => pmem::plan(self, params)?,
            Kind::BcacheNowait | Kind::BcacheVerify => bcache::plan(self, params)?,
            Kind::XfsDaxWrite => xfs::plan(self, params)?,
        };
        plan.sides = self.sides();
        observe_measured_phases(&mut plan);
        Ok(plan.with_memory(None))
    }

    /// The figures of one measured phase's fio report.
    pub fn measurement(
        &self,
        phase: &Phase,
        out: &FioOutput,
    ) -> Result<FioSummary, ExperimentError> {
        let mut summary =
            out.summary_of_job(phase.job)
                .ok_or_else(|| ExperimentError::MeasuredJobMissing {
                    experiment: self.name,
                    job: phase.job,
                    found: out
                        .jobs
                        .iter()
                        .map(|j| j.jobname.as_str())
                        .collect::<Vec<_>>()
                        .join(", "),
                })?;
        for e in out.errors() {
            if !summary.errors.contains(&e) {
                summary.errors.push(e);
            }
        }
        Ok(summary)
    }
}

/// The comment above the lines [`observe_measured_phases`] adds to a job file.
pub const OBSERVE_COMMENT: &str = "; pmemvm, not in the thread's job: per-second IOPS and \
bandwidth logs of all jobs\n; (one file each) and slat/clat/lat percentiles; they change what \
fio reports, not the I/O it issues.\n";

/// Adds per-second IOPS and bandwidth logs (`/tmp/<phase>_iops.log`, `/tmp/<phase>_bw.log`,
/// sent back by the guest's init) and slat/clat/lat percentiles to every measured phase's
/// job, and says so among the deviations. The job files have one section: the lines belong
/// to it.
fn observe_measured_phases(plan: &mut ExperimentPlan) {
    let mut names = Vec::new();
    for phase in &mut plan.phases {
        if !matches!(phase.role, PhaseRole::Measured { .. }) {
            continue;
        }
        if !phase.job_file.ends_with('\n') {
            phase.job_file.push('\n');
        }
        phase.job_file.push_str(OBSERVE_COMMENT);
        phase
            .job_file
            .push_str(&crate::study::fio::log::log_options(&format!(
                "/tmp/{}",
                phase.name
            )));
        names.push(phase.name.clone());
    }
    if names.is_empty() {
        return;
    }
    plan.deviations.push(Deviation::new(
        format!("fio options ({})", names.join(", ")),
        "not in the thread's job",
        crate::study::fio::log::LOG_OPTIONS,
        "added by pmemvm for the report: per-second IOPS and bandwidth of every run (the chart's \
         time series) and submission, completion and total latency percentiles; they do not \
         change the I/O fio issues or what it measures (one histogram update per I/O and one log \
         line per job and second)",
    ));
}
