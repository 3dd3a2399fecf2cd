//! The catalogue of `pmemvm bench` experiments: the upstream measurements pmemvm reproduces.
//!
//! Each [`Experiment`] names a fio job file and an optional setup script under
//! `guest-images/jobs/` (embedded into the binary), the kernel parameter it flips for an A/B
//! comparison (`nd_pmem.nowait=0|1`, `bcache.bch_nowait=0|1`), the figures upstream reported and
//! how it scales to the machine at hand.
//!
//! # Scaling
//! Job files contain `${NAME}` placeholders. [`Experiment::plan`] computes the values from
//! [`BenchParams`] and substitutes them in Rust, so the file the guest runs (and the copy kept
//! with the results) is complete; an unknown placeholder is an error rather than something fio
//! would silently keep. The same syntax is fio's environment substitution, so a job file also
//! runs by hand: `JOBS=4 IODEPTH=32 RUNTIME=10 fio pmem-nowait.fio`. Setup scripts are plain
//! shell: the plan inserts `NAME='value'` assignments below their header comment.
//!
//! Defaults (each overridable in [`BenchParams`]):
//! - `JOBS` = 2 × guest vCPUs: enough submitters to keep every vCPU busy while some wait, without
//!   the 48 jobs of a large host swamping a small guest;
//! - `IODEPTH` = 32 per job; `RUNTIME` = 10 s per measured phase;
//! - NVDIMM size: [`Experiment::default_nvdimm_bytes`] (1–2 GiB instead of upstream's whole
//!   devices, so a fill and a run finish in minutes even under emulation).

use std::collections::BTreeMap;

use serde::Serialize;

use crate::fio::{FioOutput, FioSummary};
use crate::guest_job::GuestJob;
use crate::report::Upstream;
use crate::threads::{self, Posted};

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

/// Default runtime of a measured phase, seconds.
pub const DEFAULT_RUNTIME_S: u32 = 10;
/// Default io_uring queue depth per job.
pub const DEFAULT_IODEPTH: u32 = 32;
/// Default size of each null_blk device of bcache-nowait, MiB (upstream: 1 GiB each).
pub const DEFAULT_NULLB_MIB: u64 = 1024;
/// Largest accepted job count.
pub const MAX_JOBS: u32 = 1024;

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

/// One side of an experiment: a label and the kernel parameter that selects it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Side {
    /// `off`, `on` or `default`.
    pub label: &'static str,
    /// e.g. `nd_pmem.nowait=0`; `None` for single-sided experiments.
    pub cmdline: Option<String>,
}

/// How an experiment's placeholders are computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
enum Scaling {
    /// JOBS, IODEPTH, RUNTIME on a raw /dev/pmem0.
    PmemTimed,
    /// JOBS, IODEPTH, SLICE_SIZE: each job verifies its own slice of /dev/pmem0.
    PmemVerify,
    /// JOBS, IODEPTH, RUNTIME on /dev/bcache0; NULLB_MB for the setup script.
    Bcache,
    /// JOBS, NRFILES, FILESIZE, IODEPTH, RUNTIME; AGCOUNT for the setup script.
    XfsDax,
}

/// One experiment of the catalogue.
#[derive(Debug, Clone, Serialize)]
pub struct Experiment {
    /// Name on the command line.
    pub name: &'static str,
    /// One line on what it measures.
    pub description: &'static str,
    /// Path of the job file in the source tree.
    pub job_file: &'static str,
    /// The job file's text, with `${...}` placeholders.
    #[serde(skip)]
    pub job_template: &'static str,
    /// Path of the setup script in the source tree, if any.
    pub setup_file: Option<&'static str>,
    /// The setup script's text.
    #[serde(skip)]
    pub setup_template: Option<&'static str>,
    /// The kernel parameter flipped between the sides, for A/B experiments.
    pub ab: Option<AbParameter>,
    /// Kernel parameters every run needs.
    pub extra_cmdline: &'static [&'static str],
    /// Whether the guest needs an NVDIMM.
    pub needs_nvdimm: bool,
    /// NVDIMM size when none is given.
    pub default_nvdimm_bytes: Option<u64>,
    /// Smallest NVDIMM the experiment works with.
    pub min_nvdimm_bytes: Option<u64>,
    /// fio job whose reporting group is the measurement (earlier groups prepare the device).
    pub measured_job: &'static str,
    /// Figures upstream posted, with the posts they come from ([`crate::threads`]).
    pub upstream: &'static [Posted],
    /// One line on which upstream measurement this experiment repeats.
    pub upstream_source: &'static str,
    /// How this experiment differs from upstream's runs.
    pub differences: &'static str,
    scaling: Scaling,
}

/// The user's scaling knobs; `None` means the experiment's default.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BenchParams {
    /// Guest vCPUs (for the jobs default).
    pub vcpus: u32,
    /// fio jobs of the measured phase.
    pub jobs: Option<u32>,
    /// NVDIMM size.
    pub nvdimm_bytes: Option<u64>,
    /// Seconds per measured phase.
    pub runtime_s: Option<u32>,
    /// io_uring queue depth per job.
    pub iodepth: Option<u32>,
    /// Size of each null_blk device (bcache-nowait), MiB.
    pub nullb_mib: Option<u64>,
}

/// Everything needed to run an experiment: rendered files, sides, sizes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ExperimentPlan {
    /// Experiment name.
    pub experiment: &'static str,
    /// The values substituted into the job file and setup script.
    pub vars: BTreeMap<&'static str, String>,
    /// The complete job file for `/job/job.fio`.
    pub job_file: String,
    /// The complete setup script for `/job/setup.sh`.
    pub setup_script: Option<String>,
    /// Sides in order (`off`, `on`) or the single `default` side.
    pub sides: Vec<Side>,
    /// Kernel parameters for every run (besides the side's).
    pub extra_cmdline: Vec<String>,
    /// NVDIMM size, if the experiment has one.
    pub nvdimm_bytes: Option<u64>,
    /// fio jobs of the measured phase.
    pub jobs: u32,
    /// Guest memory the experiment needs at least (null_blk devices live in guest RAM), MiB.
    pub min_guest_mem_mib: u64,
}

impl ExperimentPlan {
    /// The guest job (files for `/job`).
    pub fn guest_job(&self) -> GuestJob {
        GuestJob {
            fio_job: self.job_file.clone(),
            setup: self.setup_script.clone(),
            args: None,
        }
    }

    /// The kernel command line additions of one side: the experiment's extras plus the side's
    /// parameter.
    pub fn cmdline_for(&self, side: &Side) -> String {
        let mut parts = self.extra_cmdline.clone();
        parts.extend(side.cmdline.clone());
        parts.join(" ")
    }
}

const PMEM_NOWAIT: AbParameter = AbParameter {
    param: "nd_pmem.nowait",
};
const BCACHE_NOWAIT: AbParameter = AbParameter {
    param: "bcache.bch_nowait",
};

/// Every experiment, in the order `pmemvm bench --help` lists them.
pub static EXPERIMENTS: [Experiment; 5] = [
    Experiment {
        name: "pmem-nowait",
        description: "4k random read, io_uring, /dev/pmem0 filled first; nd_pmem.nowait=0 vs 1",
        job_file: "guest-images/jobs/pmem-nowait.fio",
        job_template: include_str!("../../guest-images/jobs/pmem-nowait.fio"),
        setup_file: None,
        setup_template: None,
        ab: Some(PMEM_NOWAIT),
        extra_cmdline: &[],
        needs_nvdimm: true,
        default_nvdimm_bytes: Some(GIB),
        min_nvdimm_bytes: Some(16 * MIB),
        measured_job: "randread",
        upstream: &threads::PMEM_NOWAIT,
        upstream_source: "the pmem QUEUE_FLAG_NOWAIT patches V1 and V2 (nvdimm list, May 2023): fio \
                          io_uring 4k randread after a random-write fill, 3 runs per side",
        differences: "device scaled from a whole host pmem to the --nvdimm size; JOBS = 2 x vCPUs, \
                      IODEPTH 32 and RUNTIME 10 s are pmemvm's choices (the posts show the fio \
                      command lines but not the randread job file)",
        scaling: Scaling::PmemTimed,
    },
    Experiment {
        name: "pmem-randwrite",
        description: "4k random write, io_uring, /dev/pmem0; nd_pmem.nowait=0 vs 1",
        job_file: "guest-images/jobs/pmem-randwrite.fio",
        job_template: include_str!("../../guest-images/jobs/pmem-randwrite.fio"),
        setup_file: None,
        setup_template: None,
        ab: Some(PMEM_NOWAIT),
        extra_cmdline: &[],
        needs_nvdimm: true,
        default_nvdimm_bytes: Some(GIB),
        min_nvdimm_bytes: Some(16 * MIB),
        measured_job: "randwrite",
        upstream: &threads::PMEM_RANDWRITE,
        upstream_source: "the pmem QUEUE_FLAG_NOWAIT patch V1's test script (nvdimm list, May 2023): \
                          fio io_uring 4k randwrite, 48 jobs, one run per side",
        differences: "device scaled to the --nvdimm size; JOBS, IODEPTH and RUNTIME as for pmem-nowait",
        scaling: Scaling::PmemTimed,
    },
    Experiment {
        name: "pmem-verify",
        description: "random 4k writes with crc32c, then read back and verify, io_uring, /dev/pmem0; \
                      nd_pmem.nowait=0 and 1",
        job_file: "guest-images/jobs/pmem-verify.fio",
        job_template: include_str!("../../guest-images/jobs/pmem-verify.fio"),
        setup_file: None,
        setup_template: None,
        ab: Some(PMEM_NOWAIT),
        extra_cmdline: &[],
        needs_nvdimm: true,
        default_nvdimm_bytes: Some(GIB),
        min_nvdimm_bytes: Some(16 * MIB),
        measured_job: "verify",
        upstream: &threads::PMEM_VERIFY,
        upstream_source: "the pmem QUEUE_FLAG_NOWAIT patch V1's test script (nvdimm list, May 2023): a \
                          write-and-verify fio job on each side (pass/fail, no figures)",
        differences: "each job verifies its own slice; together the slices cover the whole NVDIMM",
        scaling: Scaling::PmemVerify,
    },
    Experiment {
        name: "bcache-nowait",
        description: "4k random read, io_uring, bcache over memory-backed null_blk (backing + cache), \
                      filled first; bcache.bch_nowait=0 vs 1",
        job_file: "guest-images/jobs/bcache-nowait.fio",
        job_template: include_str!("../../guest-images/jobs/bcache-nowait.fio"),
        setup_file: Some("guest-images/jobs/bcache-nowait.setup.sh"),
        setup_template: Some(include_str!("../../guest-images/jobs/bcache-nowait.setup.sh")),
        ab: Some(BCACHE_NOWAIT),
        extra_cmdline: &["null_blk.nr_devices=0"],
        needs_nvdimm: false,
        default_nvdimm_bytes: None,
        min_nvdimm_bytes: None,
        measured_job: "randread",
        upstream: &threads::BCACHE_NOWAIT,
        upstream_source: "the bcache QUEUE_FLAG_NOWAIT patch (linux-bcache list, May 2023): backing and \
                          cache on memory-backed null_blk of 1 GiB each, fio io_uring 4k randread, 3 \
                          runs per side",
        differences: "the workload (4k randread after a random-write fill) is pmemvm's choice; null_blk \
                      devices are made through configfs",
        scaling: Scaling::Bcache,
    },
    Experiment {
        name: "xfs-dax-write",
        description: "2M direct io_uring writes into files on XFS mounted -o dax on /dev/pmem0 (fsdax)",
        job_file: "guest-images/jobs/xfs-dax-write.fio",
        job_template: include_str!("../../guest-images/jobs/xfs-dax-write.fio"),
        setup_file: Some("guest-images/jobs/xfs-dax-write.setup.sh"),
        setup_template: Some(include_str!("../../guest-images/jobs/xfs-dax-write.setup.sh")),
        ab: None,
        extra_cmdline: &[],
        needs_nvdimm: true,
        default_nvdimm_bytes: Some(2 * GIB),
        min_nvdimm_bytes: Some(512 * MIB),
        measured_job: "xfs-dax-write",
        upstream: &threads::XFS_DAX_WRITE,
        upstream_source: "XFS with DAX on pmem in the famfs RFC thread (Feb 2024): mkfs.xfs -d \
                          agcount=1024 -m reflink=0, mount -o dax, 48 jobs x 10 files x 256 MiB, bs 2M, \
                          direct io_uring writes: 12.8 GiB/s",
        differences: "JOBS = 2 x vCPUs; 10 files per job of at most 256 MiB, smaller so that all files \
                      fit in half the NVDIMM; AGCOUNT = NVDIMM / 128 MiB (4..1024, 1024 at upstream's \
                      128 GiB)",
        scaling: Scaling::XfsDax,
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

fn human(bytes: u64) -> String {
    if bytes.is_multiple_of(GIB) {
        format!("{} GiB", bytes / GIB)
    } else {
        format!("{} MiB", bytes / MIB)
    }
}

impl Experiment {
    /// Sides of the experiment: `off` then `on` for A/B experiments, else `default`.
    pub fn sides(&self) -> Vec<Side> {
        match self.ab {
            Some(ab) => vec![
                Side {
                    label: "off",
                    cmdline: Some(format!("{}=0", ab.param)),
                },
                Side {
                    label: "on",
                    cmdline: Some(format!("{}=1", ab.param)),
                },
            ],
            None => vec![Side {
                label: "default",
                cmdline: None,
            }],
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

    fn invalid(
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

    /// Computes the scaled parameters and renders the job file and setup script.
    pub fn plan(&self, params: &BenchParams) -> Result<ExperimentPlan, ExperimentError> {
        let vcpus = params.vcpus.max(1);
        let jobs = params.jobs.unwrap_or(2 * vcpus);
        if jobs == 0 || jobs > MAX_JOBS {
            return Err(self.invalid("jobs", jobs, format!("use 1 to {MAX_JOBS}")));
        }
        let iodepth = params.iodepth.unwrap_or(DEFAULT_IODEPTH);
        if iodepth == 0 || iodepth > 4096 {
            return Err(self.invalid("iodepth", iodepth, "use 1 to 4096"));
        }
        let runtime = params.runtime_s.unwrap_or(DEFAULT_RUNTIME_S);
        if runtime == 0 {
            return Err(self.invalid("runtime", "0 s", "use at least 1 s"));
        }

        let nvdimm_bytes = if self.needs_nvdimm {
            let size = params
                .nvdimm_bytes
                .or(self.default_nvdimm_bytes)
                .unwrap_or(GIB);
            let min = self.min_nvdimm_bytes.unwrap_or(0);
            if size < min {
                return Err(self.invalid(
                    "NVDIMM size",
                    human(size),
                    format!("use at least {}", human(min)),
                ));
            }
            let align = crate::layout::NVDIMM_REGION_ALIGN;
            if !size.is_multiple_of(align) {
                return Err(self.invalid(
                    "NVDIMM size",
                    human(size),
                    "use a multiple of 16 MiB (the region align Linux uses since 5.7)",
                ));
            }
            Some(size)
        } else {
            None
        };

        let mut vars: BTreeMap<&'static str, String> = BTreeMap::new();
        let mut setup_vars: BTreeMap<&'static str, String> = BTreeMap::new();
        let mut min_guest_mem_mib = 512;
        vars.insert("JOBS", jobs.to_string());
        vars.insert("IODEPTH", iodepth.to_string());
        match self.scaling {
            Scaling::PmemTimed => {
                vars.insert("RUNTIME", runtime.to_string());
            }
            Scaling::PmemVerify => {
                let size = nvdimm_bytes.unwrap_or(GIB);
                let slice = size / u64::from(jobs) / MIB * MIB;
                if slice == 0 {
                    return Err(self.invalid(
                        "jobs",
                        jobs,
                        format!(
                            "each job needs at least 1 MiB of the {} NVDIMM: use at most {} jobs",
                            human(size),
                            size / MIB
                        ),
                    ));
                }
                vars.insert("SLICE_SIZE", slice.to_string());
            }
            Scaling::Bcache => {
                let nullb = params.nullb_mib.unwrap_or(DEFAULT_NULLB_MIB);
                if !(64..=64 * 1024).contains(&nullb) {
                    return Err(self.invalid(
                        "null_blk size",
                        format!("{nullb} MiB"),
                        "use 64 MiB to 64 GiB",
                    ));
                }
                vars.insert("RUNTIME", runtime.to_string());
                setup_vars.insert("NULLB_MB", nullb.to_string());
                min_guest_mem_mib = 2 * nullb + 512;
            }
            Scaling::XfsDax => {
                let size = nvdimm_bytes.unwrap_or(2 * GIB);
                const NRFILES: u64 = 10;
                const UPSTREAM_FILESIZE: u64 = 256 * MIB;
                const BS: u64 = 2 * MIB;
                let per_file =
                    (size / 2 / (u64::from(jobs) * NRFILES)).min(UPSTREAM_FILESIZE) / BS * BS;
                if per_file == 0 {
                    let max_jobs = size / 2 / (NRFILES * BS);
                    return Err(self.invalid(
                        "jobs",
                        jobs,
                        format!(
                            "{jobs} jobs x {NRFILES} files of at least 2 MiB do not fit in half of the {} NVDIMM: \
                             use at most {max_jobs} jobs or a larger --nvdimm",
                            human(size)
                        ),
                    ));
                }
                let agcount = (size / (128 * MIB)).clamp(4, 1024);
                // A bound, not the length: each job ends when its files are written.
                vars.insert("RUNTIME", params.runtime_s.unwrap_or(600).to_string());
                vars.insert("NRFILES", NRFILES.to_string());
                vars.insert("FILESIZE", per_file.to_string());
                setup_vars.insert("AGCOUNT", agcount.to_string());
            }
        }

        let job_file = render_template(self.job_file, self.job_template, &vars)?;
        let setup_script = match (self.setup_file, self.setup_template) {
            (Some(file), Some(template)) => Some(render_setup(file, template, &setup_vars)?),
            _ => None,
        };
        vars.extend(setup_vars);
        Ok(ExperimentPlan {
            experiment: self.name,
            vars,
            job_file,
            setup_script,
            sides: self.sides(),
            extra_cmdline: self.extra_cmdline.iter().map(|s| (*s).to_owned()).collect(),
            nvdimm_bytes,
            jobs,
            min_guest_mem_mib,
        })
    }

    /// The measured group's summary, with the errors of every group (a failed fill counts).
    pub fn measurement(&self, out: &FioOutput) -> Result<FioSummary, ExperimentError> {
        let mut summary = out.summary_of_job(self.measured_job).ok_or_else(|| {
            ExperimentError::MeasuredJobMissing {
                experiment: self.name,
                job: self.measured_job,
                found: out
                    .jobs
                    .iter()
                    .map(|j| j.jobname.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            }
        })?;
        for e in out.errors() {
            if !summary.errors.contains(&e) {
                summary.errors.push(e);
            }
        }
        Ok(summary)
    }
}

/// Replaces every `${NAME}` with its value; a name without a value is an error.
pub fn render_template(
    file: &'static str,
    template: &str,
    vars: &BTreeMap<&'static str, String>,
) -> Result<String, ExperimentError> {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find('}') else {
            // An unterminated "${" is left as it is; fio would do the same.
            out.push_str(&rest[start..]);
            rest = "";
            break;
        };
        let name = &after[..end];
        match vars.get(name) {
            Some(v) => out.push_str(v),
            None => {
                return Err(ExperimentError::UndefinedVariable {
                    file,
                    name: name.to_owned(),
                    defined: vars.keys().copied().collect::<Vec<_>>().join(", "),
                })
            }
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// Inserts `NAME='value'` lines below the script's leading comment block.
fn render_setup(
    file: &'static str,
    template: &str,
    vars: &BTreeMap<&'static str, String>,
) -> Result<String, ExperimentError> {
    let header_end = template
        .split_inclusive('\n')
        .take_while(|l| l.starts_with('#'))
        .map(str::len)
        .sum::<usize>();
    let mut out = String::from(&template[..header_end]);
    out.push_str("# Set by pmemvm:\n");
    for (k, v) in vars {
        out.push_str(&format!("{k}='{}'\n", v.replace('\'', "'\\''")));
    }
    out.push_str(&template[header_end..]);
    // Every upper-case $NAME / ${NAME} the script uses must be one pmemvm sets.
    for name in upper_case_vars(&template[header_end..]) {
        if !vars.contains_key(name.as_str()) {
            return Err(ExperimentError::UndefinedVariable {
                file,
                name,
                defined: vars.keys().copied().collect::<Vec<_>>().join(", "),
            });
        }
    }
    Ok(out)
}

/// `$NAME` references with all-upper-case names in a shell script.
fn upper_case_vars(script: &str) -> Vec<String> {
    let mut names = Vec::new();
    let bytes = script.as_bytes();
    for (i, _) in script.match_indices('$') {
        let start = if bytes.get(i + 1) == Some(&b'{') {
            i + 2
        } else {
            i + 1
        };
        let name: String = bytes[start..]
            .iter()
            .take_while(|b| b.is_ascii_uppercase() || **b == b'_')
            .map(|&b| char::from(b))
            .collect();
        if !name.is_empty() && !names.contains(&name) {
            names.push(name);
        }
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fio::parse_fio_json;
    use crate::report::Metric;
    use std::process::Command;

    fn params() -> BenchParams {
        BenchParams {
            vcpus: 2,
            ..BenchParams::default()
        }
    }

    #[test]
    fn unknown_experiment_lists_names() {
        let e = find_experiment("pmem-nowiat").unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("\"pmem-nowiat\""), "{msg}");
        for name in [
            "pmem-nowait",
            "pmem-randwrite",
            "pmem-verify",
            "bcache-nowait",
            "xfs-dax-write",
        ] {
            assert!(msg.contains(name), "{msg}");
            assert_eq!(find_experiment(name).unwrap().name, name);
        }
    }

    #[test]
    fn sides_and_cmdlines() {
        let e = find_experiment("pmem-nowait").unwrap();
        let plan = e.plan(&params()).unwrap();
        assert_eq!(
            plan.sides.iter().map(|s| s.label).collect::<Vec<_>>(),
            ["off", "on"]
        );
        assert_eq!(plan.cmdline_for(&plan.sides[0]), "nd_pmem.nowait=0");
        assert_eq!(plan.cmdline_for(&plan.sides[1]), "nd_pmem.nowait=1");
        let b = find_experiment("bcache-nowait")
            .unwrap()
            .plan(&params())
            .unwrap();
        assert_eq!(
            b.cmdline_for(&b.sides[1]),
            "null_blk.nr_devices=0 bcache.bch_nowait=1"
        );
        assert_eq!(b.nvdimm_bytes, None);
        assert_eq!(b.min_guest_mem_mib, 2 * 1024 + 512);
        let x = find_experiment("xfs-dax-write")
            .unwrap()
            .plan(&params())
            .unwrap();
        assert_eq!(
            x.sides,
            vec![Side {
                label: "default",
                cmdline: None
            }]
        );
        assert_eq!(x.cmdline_for(&x.sides[0]), "");
    }

    #[test]
    fn defaults_and_scaling() {
        let p = find_experiment("pmem-nowait")
            .unwrap()
            .plan(&params())
            .unwrap();
        assert_eq!(p.jobs, 4, "2 x vCPUs");
        assert!(p.job_file.contains("numjobs=4\n"));
        assert!(p.job_file.contains("iodepth=32\n"));
        assert!(p.job_file.contains("runtime=10\n"));
        assert!(!p.job_file.contains("${"));
        assert_eq!(p.nvdimm_bytes, Some(GIB));

        let p = find_experiment("pmem-verify")
            .unwrap()
            .plan(&BenchParams {
                vcpus: 2,
                jobs: Some(3),
                nvdimm_bytes: Some(GIB),
                ..BenchParams::default()
            })
            .unwrap();
        // 1 GiB / 3 rounded down to MiB.
        assert_eq!(p.vars["SLICE_SIZE"], (341 * MIB).to_string());
        assert!(p
            .job_file
            .contains(&format!("offset_increment={}\n", 341 * MIB)));

        // Upstream's shape at upstream's size: 48 jobs x 10 x 256 MiB, agcount 1024.
        let p = find_experiment("xfs-dax-write")
            .unwrap()
            .plan(&BenchParams {
                vcpus: 24,
                nvdimm_bytes: Some(256 * GIB),
                ..BenchParams::default()
            })
            .unwrap();
        assert_eq!(p.jobs, 48);
        assert_eq!(p.vars["FILESIZE"], (256 * MIB).to_string());
        assert_eq!(p.vars["AGCOUNT"], "1024");
        assert!(p
            .setup_script
            .as_ref()
            .unwrap()
            .contains("\nAGCOUNT='1024'\n"));
        // Default small size: 2 GiB / 2 / (4 x 10) = 25.6 MiB -> 24 MiB (2 MiB multiple).
        let p = find_experiment("xfs-dax-write")
            .unwrap()
            .plan(&params())
            .unwrap();
        assert_eq!(p.vars["FILESIZE"], (24 * MIB).to_string());
        assert_eq!(p.vars["AGCOUNT"], "16");
    }

    #[test]
    fn bad_parameters_are_explained() {
        let e = find_experiment("xfs-dax-write").unwrap();
        let err = e
            .plan(&BenchParams {
                vcpus: 2,
                nvdimm_bytes: Some(256 * MIB),
                ..BenchParams::default()
            })
            .unwrap_err();
        assert!(err.to_string().contains("at least 512 MiB"), "{err}");
        let err = e
            .plan(&BenchParams {
                vcpus: 2,
                jobs: Some(200),
                nvdimm_bytes: Some(GIB),
                ..BenchParams::default()
            })
            .unwrap_err();
        assert!(err.to_string().contains("use at most 25 jobs"), "{err}");
        let err = find_experiment("pmem-nowait")
            .unwrap()
            .plan(&BenchParams {
                vcpus: 2,
                jobs: Some(0),
                ..BenchParams::default()
            })
            .unwrap_err();
        assert!(err.to_string().contains("jobs = 0"), "{err}");
        let err = find_experiment("pmem-verify")
            .unwrap()
            .plan(&BenchParams {
                vcpus: 2,
                jobs: Some(20),
                nvdimm_bytes: Some(16 * MIB),
                ..BenchParams::default()
            })
            .unwrap_err();
        assert!(err.to_string().contains("at most 16 jobs"), "{err}");
    }

    #[test]
    fn templates() {
        let vars: BTreeMap<&'static str, String> = [("A", "1".to_owned())].into();
        assert_eq!(
            render_template("t", "x=${A} y=${A}$ {", &vars).unwrap(),
            "x=1 y=1$ {"
        );
        let e = render_template("t.fio", "x=${B}", &vars).unwrap_err();
        assert_eq!(
            e.to_string(),
            "t.fio uses ${B}, which pmemvm does not define (defined: A)"
        );
        let s = render_setup(
            "s.sh",
            "#!/bin/sh\n# c\nset -eu\necho \"$A\" $lower\n",
            &vars,
        )
        .unwrap();
        assert_eq!(
            s,
            "#!/bin/sh\n# c\n# Set by pmemvm:\nA='1'\nset -eu\necho \"$A\" $lower\n"
        );
        assert!(render_setup("s.sh", "#!/bin/sh\necho $NOPE\n", &vars).is_err());
        assert!(render_setup("s.sh", "#!/bin/sh\necho ${NOPE}\n", &vars).is_err());
    }

    #[test]
    fn upstream_figures_are_the_posted_runs_with_their_posts() {
        let e = find_experiment("pmem-nowait").unwrap();
        let up = e.upstream_figures();
        let labels: Vec<&str> = up.sources.iter().map(|s| s.label.as_str()).collect();
        assert_eq!(labels, ["V1", "V2"]);
        assert_eq!(
            up.sources[0].message_id.as_deref(),
            Some("20230512104302.8527-1-kch@nvidia.com")
        );
        let iops = up.of(Metric::Iops);
        assert_eq!(iops.len(), 2);
        assert_eq!(iops[0].off, [3_968_000.0, 4_084_000.0, 3_995_000.0]);
        // Ratio of the means of the posted runs.
        assert!((iops[0].ratio().unwrap() - 17912.0 / 12047.0).abs() < 1e-12);
        assert!((iops[1].ratio().unwrap() - 17718.0 / 11501.0).abs() < 1e-12);
        let b = find_experiment("bcache-nowait").unwrap().upstream_figures();
        let b_iops = b.of(Metric::Iops);
        assert!((b_iops[0].ratio().unwrap() - 1637.0 / 1449.0).abs() < 1e-12);
        let x = find_experiment("xfs-dax-write").unwrap().upstream_figures();
        assert_eq!(x.of(Metric::BwMibS)[0].off, [13107.2]);
        assert!(x.of(Metric::BwMibS)[0].on.is_empty());
        let v = find_experiment("pmem-verify").unwrap().upstream_figures();
        assert!(v.figures.is_empty() && v.sources.len() == 1);
        for e in &EXPERIMENTS {
            assert!(
                !e.upstream_source.to_lowercase().contains("issue"),
                "{}",
                e.name
            );
            assert!(
                !e.differences.to_lowercase().contains("issue"),
                "{}",
                e.name
            );
        }
    }

    fn have(cmd: &str) -> bool {
        Command::new(cmd).arg("--version").output().is_ok()
    }

    /// fio itself accepts every rendered job file.
    #[test]
    fn fio_parses_rendered_job_files() {
        if !have("fio") {
            pmemvm_skip::skip!("fio not installed (apt-get install fio)");
        }
        let dir = std::env::temp_dir().join(format!("pmemvm-exp-parse-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for e in &EXPERIMENTS {
            let plan = e.plan(&params()).unwrap();
            let path = dir.join(format!("{}.fio", e.name));
            std::fs::write(&path, &plan.job_file).unwrap();
            let out = Command::new("fio")
                .arg("--parse-only")
                .arg(&path)
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{}: {}",
                e.name,
                String::from_utf8_lossy(&out.stderr)
            );
            // The unrendered template does not parse: the placeholders matter.
            std::fs::write(&path, e.job_template).unwrap();
            let out = Command::new("fio")
                .arg("--parse-only")
                .env_clear()
                .arg(&path)
                .output()
                .unwrap();
            assert!(
                !out.status.success() || !e.job_template.contains("${"),
                "{}",
                e.name
            );
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// The rendered setup scripts are valid for dash and for the guest's busybox sh.
    #[test]
    fn setup_scripts_parse() {
        for e in EXPERIMENTS.iter().filter(|e| e.setup_template.is_some()) {
            let plan = e.plan(&params()).unwrap();
            let script = plan.setup_script.unwrap();
            assert!(script.starts_with("#!/bin/sh\n# SPDX-License-Identifier: Apache-2.0\n"));
            for shell in [&["sh"][..], &["busybox", "sh"][..]] {
                let Ok(mut child) = Command::new(shell[0])
                    .args(&shell[1..])
                    .arg("-n")
                    .stdin(std::process::Stdio::piped())
                    .spawn()
                else {
                    pmemvm_skip::skip(&format!("{} not installed", shell.join(" ")));
                    continue;
                };
                use std::io::Write;
                child
                    .stdin
                    .take()
                    .unwrap()
                    .write_all(script.as_bytes())
                    .unwrap();
                assert!(
                    child.wait().unwrap().success(),
                    "{} rejects {}",
                    shell.join(" "),
                    e.name
                );
            }
        }
    }

    /// Runs every experiment's job file for real on host files (short runtime, small size) and
    /// checks that the measurement is found and consistent. The device paths are swapped for
    /// temporary files; everything else is the file the guest gets.
    #[test]
    fn job_files_run_on_host_files() {
        if !have("fio") {
            pmemvm_skip::skip!("fio not installed (apt-get install fio)");
        }
        let dir = std::env::temp_dir().join(format!("pmemvm-exp-run-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for e in &EXPERIMENTS {
            let size = 16 * MIB;
            let plan = e
                .plan(&BenchParams {
                    vcpus: 1,
                    jobs: Some(2),
                    nvdimm_bytes: Some(if e.name == "xfs-dax-write" {
                        512 * MIB
                    } else {
                        size
                    }),
                    runtime_s: Some(if e.name == "xfs-dax-write" { 60 } else { 1 }),
                    iodepth: Some(4),
                    nullb_mib: None,
                })
                .unwrap();
            let data = dir.join(format!("{}.dat", e.name));
            let job = plan
                .job_file
                .replace(
                    "filename=/dev/pmem0",
                    &format!("filename={}\nsize={size}", data.display()),
                )
                .replace(
                    "filename=/dev/bcache0",
                    &format!("filename={}\nsize={size}", data.display()),
                )
                .replace(
                    "directory=/mnt/pmem",
                    &format!("directory={}", dir.display()),
                );
            let path = dir.join(format!("{}.fio", e.name));
            std::fs::write(&path, job).unwrap();
            let out = Command::new("fio")
                .arg("--output-format=json")
                .arg(&path)
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{}: {}",
                e.name,
                String::from_utf8_lossy(&out.stderr)
            );
            let report = parse_fio_json(&out.stdout).unwrap();
            let m = e.measurement(&report).unwrap();
            assert!(m.ok(), "{}: {:?}", e.name, m.errors);
            assert!(m.iops > 0.0, "{}", e.name);
            match e.name {
                "pmem-nowait" | "bcache-nowait" => {
                    // Fill group (whole file, once) then the measured group.
                    assert_eq!(report.group_ids(), vec![0, 1]);
                    let fill = report.group_summary(0).unwrap();
                    assert_eq!(fill.write.unwrap().io_bytes, size);
                    assert!(m.read.is_some() && m.write.is_none());
                }
                "pmem-verify" => {
                    let (r, w) = (m.read.unwrap(), m.write.unwrap());
                    assert_eq!(w.io_bytes, 2 * 8 * MIB);
                    assert_eq!(r.io_bytes, w.io_bytes, "everything written is read back");
                }
                "xfs-dax-write" => {
                    let w = m.write.unwrap();
                    let files = 2 * 10 * plan.vars["FILESIZE"].parse::<u64>().unwrap();
                    assert_eq!(w.io_bytes, files);
                }
                _ => assert!(m.write.is_some()),
            }
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// fio reports from real Linux guests (QEMU TCG, Debian 6.1 kernel, QEMU NVDIMM) running the
    /// job files and setup scripts, made by make-guest-fixtures.sh with 2 jobs, a 512 MiB
    /// NVDIMM (xfs-dax-write: 1 GiB) and 128 MiB null_blk devices.
    #[test]
    fn guest_fixtures_measure_what_the_experiment_says() {
        const MIB: u64 = 1 << 20;
        for e in &EXPERIMENTS {
            let path = format!(
                "{}/tests/fixtures/fio/guest-{}.json",
                env!("CARGO_MANIFEST_DIR"),
                e.name
            );
            let bytes = std::fs::read(&path).unwrap_or_else(|err| panic!("{path}: {err}"));
            let out = parse_fio_json(&bytes).unwrap();
            let m = e.measurement(&out).unwrap();
            assert!(m.ok(), "{}: {:?}", e.name, m.errors);
            assert!(m.iops > 0.0);
            assert_eq!(
                m.jobnames.len(),
                1,
                "group_reporting folds the jobs into one entry"
            );
            match e.name {
                "pmem-nowait" => {
                    assert_eq!(out.group_ids(), vec![0, 1]);
                    // The fill wrote the whole raw 512 MiB namespace once.
                    assert_eq!(
                        out.group_summary(0).unwrap().write.unwrap().io_bytes,
                        512 * MIB
                    );
                    assert!(m.write.is_none() && m.slat.samples > 0);
                }
                "bcache-nowait" => {
                    assert_eq!(out.group_ids(), vec![0, 1]);
                    // /dev/bcache0 is the 128 MiB backing device less bcache's 8 KiB superblock area.
                    let fill = out.group_summary(0).unwrap().write.unwrap().io_bytes;
                    assert!(fill > 127 * MIB && fill <= 128 * MIB, "{fill}");
                }
                "pmem-verify" => {
                    let (r, w) = (m.read.unwrap(), m.write.unwrap());
                    assert_eq!(w.io_bytes, 512 * MIB, "2 slices of 256 MiB");
                    assert_eq!(r.io_bytes, w.io_bytes);
                }
                "xfs-dax-write" => assert_eq!(m.write.unwrap().io_bytes, 2 * 10 * 24 * MIB),
                _ => assert!(m.read.is_none()),
            }
        }
    }

    #[test]
    fn measured_job_missing_is_an_error() {
        let bytes = std::fs::read(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/fio/groups.json"
        ))
        .unwrap();
        let out = parse_fio_json(&bytes).unwrap();
        let err = find_experiment("pmem-nowait")
            .unwrap()
            .measurement(&out)
            .unwrap_err();
        assert!(
            err.to_string().contains("no job named \"randread\""),
            "{err}"
        );
        // A fill failure shows up in the measured summary.
        let bytes = std::fs::read(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/fio/verify-fail.out"
        ))
        .unwrap();
        let mut out = parse_fio_json(&bytes).unwrap();
        let mut measured = out.jobs[0].clone();
        measured.jobname = "randread".into();
        measured.groupid = 1;
        measured.error = 0;
        out.jobs.push(measured);
        let m = find_experiment("pmem-nowait")
            .unwrap()
            .measurement(&out)
            .unwrap();
        assert_eq!(m.groupid, 1);
        assert!(!m.ok());
    }
}
