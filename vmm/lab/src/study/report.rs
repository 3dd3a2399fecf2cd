//! Benchmark reports: the runs of one `pmemvm bench` experiment condensed into a terminal table,
//! JSON, CSV and an SVG bar chart.
//!
//! Input is a [`BenchReport`]: the experiment, which engine and accelerator ran it, the host, and
//! one [`RunRecord`] per side (`off`/`on` for the A/B experiments) and run, including runs that
//! failed, plus upstream's posted runs with their citations ([`Upstream`]).
//! [`BenchReport::analyse`] computes, per [`Metric`] and side, n, mean, min–max, the sample
//! standard deviation and the 95 % confidence interval of the mean, and for A/B experiments the
//! on/off ratio of the means with its 95 % interval and Welch's t-test p-value (see
//! [`crate::study::inference`] for the methods); upstream's runs are analysed the same way.
//! [`BenchReport::failed_runs`] lists the runs that failed, which decides `pmemvm bench`'s exit
//! status. Figures measured under TCG or nested virtualisation are labelled "functional only,
//! not performance" everywhere they appear.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::study::fio::FioSummary;

mod analysis;
mod csv;
pub(crate) mod failures;
mod format;
mod machine;
mod metric;
mod provenance;
mod svg;
mod svg_series;
mod text;
mod upstream;
mod verify;

pub use analysis::{Analysis, MetricAnalysis, SideStats};
pub use failures::{bench_exit_status, is_verify_failure, FailedRun};
pub use metric::{Metric, MetricGroup};
pub use provenance::{
    CheckRecord, Deviation, JobFile, Provenance, VerifyExpectation, VerifyVerdict,
};
pub use upstream::{ThreadSide, Upstream, UpstreamAnalysis, UpstreamFigure, UpstreamSource};
pub use verify::{VerifyObservation, STALE_HEADER_NOTE};

/// Errors from writing report files.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// The output directory could not be created.
    #[error("cannot create report directory {path}")]
    CreateDir {
        /// The directory.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A report file exists and overwriting was not asked for.
    #[error("report file {path} already exists; choose another --out directory or remove it")]
    FileExists {
        /// The file.
        path: PathBuf,
    },
    /// A report file could not be written.
    #[error("cannot write report file {path}")]
    Write {
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// JSON serialisation failed.
    #[error("cannot serialise the report as JSON")]
    Json(#[source] serde_json::Error),
}

/// Where the guest ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Accelerator {
    /// Hardware KVM on the host.
    Kvm,
    /// QEMU's TCG emulation.
    Tcg,
    /// KVM inside an L1 that itself runs under emulation.
    Nested,
}

impl Accelerator {
    /// Whether numbers measured this way say anything about performance.
    pub fn is_performance(self) -> bool {
        matches!(self, Accelerator::Kvm)
    }

    /// Lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            Accelerator::Kvm => "kvm",
            Accelerator::Tcg => "tcg",
            Accelerator::Nested => "nested",
        }
    }
}

/// Marker printed next to figures that are not performance figures.
pub const FUNCTIONAL_ONLY: &str = "functional only, not performance";

/// What the benchmark ran on: the host and the guest it gave each boot.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HostInfo {
    /// Which host (its fields stand at this level in the JSON).
    #[serde(flatten)]
    pub identity: vmm::host::machine::HostIdentity,
    /// Guest vCPUs.
    pub guest_vcpus: u32,
    /// Guest memory, MiB.
    pub guest_mem_mib: u64,
    /// NVDIMM size, bytes, when the experiment has one.
    pub nvdimm_bytes: Option<u64>,
    /// The device of that persistent memory (results written before CXL: an NVDIMM).
    #[serde(default)]
    pub pmem_device: crate::study::bench::cxl::PmemDevice,
    /// fio jobs of the measured phase.
    pub jobs: u32,
}

impl HostInfo {
    /// This host; the guest fields are left for the caller.
    pub fn detect_host() -> Self {
        Self {
            identity: vmm::host::machine::HostIdentity::probe(),
            ..Self::default()
        }
    }
}

/// The result of one run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "lowercase")]
pub enum RunOutcome {
    /// fio ran and reported; its summary may still list job errors.
    Ok {
        /// The measured group.
        summary: Box<FioSummary>,
    },
    /// No usable fio report (boot failure, setup failure, timeout, unparsable output).
    Failed {
        /// What went wrong, one sentence.
        error: String,
    },
}

/// One run: a measured phase of one boot of a side (e.g. the second randread of boot 1).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    /// Side label (`off`, `on`, `default`, or a `--side` name).
    pub side: String,
    /// Repetition on this side, from 1 (boots × measured phases per boot).
    pub run: u32,
    /// The kernel command line the guest booted with.
    pub kernel_cmdline: Option<String>,
    /// What happened.
    pub outcome: RunOutcome,
    /// The side's boot this run belongs to, from 1 (0: not recorded).
    #[serde(default)]
    pub boot: u32,
    /// The phase (e.g. `randread-2`); empty when not recorded.
    #[serde(default)]
    pub phase: String,
    /// Which kernel, initrd, fio and image the boot ran.
    #[serde(default)]
    pub provenance: Option<Provenance>,
    /// The fio command line the guest ran for this phase, as it reported it.
    #[serde(default)]
    pub command: String,
    /// What the boot's machine was (host, placement, measured page sizes).
    #[serde(default)]
    pub machine: Option<vmm::host::machine::MachineDescription>,
    /// IOPS and bandwidth per second of the phase, summed over its jobs (fio's logs), where
    /// the guest sent them; absent in results written before they were recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub series: Option<crate::study::fio::PhaseSeries>,
    /// Why the guest's logs of the phase could not be read, when they could not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub series_error: Option<String>,
}

impl RunRecord {
    /// The summary, for runs that produced figures without job errors.
    pub fn good_summary(&self) -> Option<&FioSummary> {
        match &self.outcome {
            RunOutcome::Ok { summary } if summary.ok() => Some(summary),
            _ => None,
        }
    }

    /// `ok`, `fio error N in JOB`, or `failed: ...`.
    pub fn status(&self) -> String {
        match &self.outcome {
            RunOutcome::Ok { summary } => match summary.errors.first() {
                None => "ok".to_owned(),
                Some(e) => format!("fio error {} in job {}", e.error, e.jobname),
            },
            RunOutcome::Failed { error } => format!("failed: {error}"),
        }
    }
}

/// Everything a report is made from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BenchReport {
    /// Experiment name (e.g. `pmem-nowait`).
    pub experiment: String,
    /// One line on what it measures.
    pub description: String,
    /// `pmemvm` or `qemu`.
    pub engine: String,
    /// How the guest was run.
    pub accelerator: Accelerator,
    /// Host and guest shape.
    pub host: HostInfo,
    /// Side labels in order; for A/B experiments `["off", "on"]`.
    pub sides: Vec<String>,
    /// Which of the thread's sides each side was declared to repeat (`--side ...,as=off|on`),
    /// index for index with `sides`; empty when none was declared (sides named `off`/`on`, and
    /// `default` alone, are the thread's by name: see [`BenchReport::thread_side`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub thread_sides: Vec<Option<ThreadSide>>,
    /// All runs, including failed ones.
    pub runs: Vec<RunRecord>,
    /// Upstream's figures.
    pub upstream: Upstream,
    /// How upstream measured, in one line (the posts are cited in [`Upstream::sources`]).
    pub upstream_source: String,
    /// The unmeasured phases of each boot (verify, fill) and how they ended.
    #[serde(default)]
    pub checks: Vec<CheckRecord>,
    /// What the thread reported for a verify job, when the experiment compares with it.
    #[serde(default)]
    pub verify_expectation: Option<VerifyExpectation>,
    /// Every way the plan differed from the thread's script.
    #[serde(default)]
    pub deviations: Vec<Deviation>,
    /// The files every boot's job ran (fio job files, setup script), complete; empty in
    /// results written before they were recorded.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub job_files: Vec<JobFile>,
    /// What the result directory holds (schema and pmemvm versions, which boots, complete or
    /// partial); absent in results written before it was recorded.
    #[serde(default)]
    pub result: Option<crate::study::results::record::ResultInfo>,
}

/// The JSON document written by [`BenchReport::to_json`].
#[derive(Debug, Serialize)]
struct JsonDocument<'a> {
    performance: bool,
    note: Option<&'static str>,
    #[serde(flatten)]
    report: &'a BenchReport,
    analysis: Analysis,
    /// The verify job's outcome per side (pass/fail per boot), a result of the experiment.
    verify: Option<VerifyVerdict>,
}

impl BenchReport {
    /// Which of the thread's sides side `i` repeats: the declared one, else by its name
    /// ([`ThreadSide::by_name`]); `None` for a side that is none of the thread's.
    pub fn thread_side(&self, i: usize) -> Option<ThreadSide> {
        self.thread_sides
            .get(i)
            .copied()
            .flatten()
            .or_else(|| ThreadSide::by_name(self.sides.get(i)?, self.sides.len()))
    }

    /// [`BenchReport::thread_side`] of every side, in side order.
    pub fn thread_side_map(&self) -> Vec<Option<ThreadSide>> {
        (0..self.sides.len()).map(|i| self.thread_side(i)).collect()
    }

    /// The side labels, each declared thread side beside it (`base (as off), patched`).
    pub fn sides_described(&self) -> String {
        self.sides
            .iter()
            .enumerate()
            .map(|(i, s)| match self.thread_sides.get(i).copied().flatten() {
                Some(t) => format!("{s} (as {})", t.name()),
                None => s.clone(),
            })
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The report and its analysis as pretty JSON. Upstream's figures are left out when no
    /// side is the thread's (they would stand beside sides they do not belong to).
    pub fn to_json(&self) -> Result<String, ReportError> {
        let without_figures;
        let report = if self.thread_side_map().iter().any(Option::is_some) {
            self
        } else {
            without_figures = Self {
                upstream: Upstream {
                    sources: self.upstream.sources.clone(),
                    figures: Vec::new(),
                },
                ..self.clone()
            };
            &without_figures
        };
        let doc = JsonDocument {
            performance: self.accelerator.is_performance(),
            note: (!self.accelerator.is_performance()).then_some(FUNCTIONAL_ONLY),
            report,
            analysis: self.analyse(),
            verify: self.verify_verdict(),
        };
        serde_json::to_string_pretty(&doc).map_err(ReportError::Json)
    }

    /// Writes `report.txt`, `report.json`, `runs.csv`, `summary.csv`, `upstream.csv` and
    /// `chart.svg` into `dir` (created if missing). Existing files are an error unless
    /// `overwrite`.
    pub fn write_files(&self, dir: &Path, overwrite: bool) -> Result<Vec<PathBuf>, ReportError> {
        std::fs::create_dir_all(dir).map_err(|source| ReportError::CreateDir {
            path: dir.to_owned(),
            source,
        })?;
        let files = [
            ("report.txt", self.render_text()),
            ("report.json", self.to_json()?),
            ("runs.csv", self.runs_csv()),
            ("summary.csv", self.summary_csv()),
            ("upstream.csv", self.upstream_csv()),
            ("chart.svg", self.render_svg()),
        ];
        if !overwrite {
            if let Some(path) = files.iter().map(|(n, _)| dir.join(n)).find(|p| p.exists()) {
                return Err(ReportError::FileExists { path });
            }
        }
        let mut written = Vec::new();
        for (name, content) in files {
            let path = dir.join(name);
            std::fs::write(&path, content).map_err(|source| ReportError::Write {
                path: path.clone(),
                source,
            })?;
            written.push(path);
        }
        Ok(written)
    }
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_boots;
#[cfg(test)]
mod tests_series;
#[cfg(test)]
mod tests_sides;
