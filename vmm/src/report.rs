//! Benchmark reports: the runs of one `pmemvm bench` experiment condensed into a terminal table,
//! JSON, CSV and an SVG bar chart.
//!
//! Input is a [`BenchReport`]: the experiment, which engine and accelerator ran it, the host, and
//! one [`RunRecord`] per side (`off`/`on` for the A/B experiments) and run, including runs that
//! failed. [`BenchReport::analyse`] computes, per [`Metric`] and side, the mean, the spread
//! (min–max and sample standard deviation) and the on/off ratio of the means, next to the ratio
//! upstream reported. Figures measured under TCG or nested virtualisation are labelled
//! "functional only, not performance" everywhere they appear.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::fio::FioSummary;

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

/// One figure reported per run, in the units the report shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    /// I/O operations per second, all directions.
    Iops,
    /// Bandwidth in MiB/s, all directions.
    BwMibS,
    /// Minimum submission latency, µs.
    SlatMinUs,
    /// Mean submission latency, µs.
    SlatAvgUs,
    /// Maximum submission latency, µs.
    SlatMaxUs,
    /// Median completion latency, µs.
    ClatP50Us,
    /// 99th percentile completion latency, µs.
    ClatP99Us,
    /// 99.9th percentile completion latency, µs.
    ClatP99_9Us,
    /// User CPU, percent.
    UsrCpu,
    /// System CPU, percent.
    SysCpu,
    /// Context switches.
    Ctx,
}

impl Metric {
    /// Every metric, in report order.
    pub const ALL: [Metric; 11] = [
        Metric::Iops,
        Metric::BwMibS,
        Metric::SlatMinUs,
        Metric::SlatAvgUs,
        Metric::SlatMaxUs,
        Metric::ClatP50Us,
        Metric::ClatP99Us,
        Metric::ClatP99_9Us,
        Metric::UsrCpu,
        Metric::SysCpu,
        Metric::Ctx,
    ];

    /// Column heading.
    pub fn label(self) -> &'static str {
        match self {
            Metric::Iops => "IOPS",
            Metric::BwMibS => "BW MiB/s",
            Metric::SlatMinUs => "slat min us",
            Metric::SlatAvgUs => "slat avg us",
            Metric::SlatMaxUs => "slat max us",
            Metric::ClatP50Us => "clat p50 us",
            Metric::ClatP99Us => "clat p99 us",
            Metric::ClatP99_9Us => "clat p99.9 us",
            Metric::UsrCpu => "usr %",
            Metric::SysCpu => "sys %",
            Metric::Ctx => "ctx",
        }
    }

    /// Machine-readable name (CSV column, JSON key).
    pub fn key(self) -> &'static str {
        match self {
            Metric::Iops => "iops",
            Metric::BwMibS => "bw_mib_s",
            Metric::SlatMinUs => "slat_min_us",
            Metric::SlatAvgUs => "slat_avg_us",
            Metric::SlatMaxUs => "slat_max_us",
            Metric::ClatP50Us => "clat_p50_us",
            Metric::ClatP99Us => "clat_p99_us",
            Metric::ClatP99_9Us => "clat_p99_9_us",
            Metric::UsrCpu => "usr_cpu",
            Metric::SysCpu => "sys_cpu",
            Metric::Ctx => "ctx",
        }
    }

    /// The metric's value in one run, `None` where fio measured nothing (e.g. no slat samples
    /// with a synchronous engine, no percentiles).
    #[allow(clippy::cast_precision_loss)]
    pub fn value(self, s: &FioSummary) -> Option<f64> {
        let us = |ns: u64| ns as f64 / 1000.0;
        let has_slat = s.slat.samples > 0;
        match self {
            Metric::Iops => Some(s.iops),
            Metric::BwMibS => Some(s.bw_bytes as f64 / (1024.0 * 1024.0)),
            Metric::SlatMinUs => has_slat.then(|| us(s.slat.min_ns)),
            Metric::SlatAvgUs => has_slat.then(|| s.slat.mean_ns / 1000.0),
            Metric::SlatMaxUs => has_slat.then(|| us(s.slat.max_ns)),
            Metric::ClatP50Us => s.clat.p50_ns.map(us),
            Metric::ClatP99Us => s.clat.p99_ns.map(us),
            Metric::ClatP99_9Us => s.clat.p99_9_ns.map(us),
            Metric::UsrCpu => Some(s.usr_cpu),
            Metric::SysCpu => Some(s.sys_cpu),
            Metric::Ctx => Some(s.ctx as f64),
        }
    }

    /// Formats a value of this metric compactly for tables.
    pub fn format(self, v: f64) -> String {
        match self {
            Metric::Iops | Metric::Ctx => si(v),
            Metric::UsrCpu | Metric::SysCpu => format!("{v:.1}"),
            _ => sig3(v),
        }
    }
}

/// Formats with k/M/G suffixes and 4 significant digits, the way fio prints IOPS.
fn si(v: f64) -> String {
    let a = v.abs();
    let (div, suffix) = if a >= 1e9 {
        (1e9, "G")
    } else if a >= 1e6 {
        (1e6, "M")
    } else if a >= 1e4 {
        (1e3, "k")
    } else {
        (1.0, "")
    };
    if suffix.is_empty() {
        return format!("{}", v.round());
    }
    format!("{}{suffix}", sig4(v / div))
}

fn sig4(v: f64) -> String {
    let a = v.abs();
    if a >= 1000.0 {
        format!("{v:.0}")
    } else if a >= 100.0 {
        format!("{v:.1}")
    } else if a >= 10.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

fn sig3(v: f64) -> String {
    let a = v.abs();
    if a >= 100.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
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

/// What the benchmark ran on.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HostInfo {
    /// Host CPU model.
    pub cpu_model: String,
    /// Host logical CPUs.
    pub host_cpus: u32,
    /// Host kernel release.
    pub host_kernel: String,
    /// Guest vCPUs.
    pub guest_vcpus: u32,
    /// Guest memory, MiB.
    pub guest_mem_mib: u64,
    /// NVDIMM size, bytes, when the experiment has one.
    pub nvdimm_bytes: Option<u64>,
    /// fio jobs of the measured phase.
    pub jobs: u32,
}

impl HostInfo {
    /// Reads the host's CPU model, CPU count and kernel release from /proc; the guest fields are
    /// left for the caller.
    pub fn detect_host() -> Self {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu_model = cpuinfo
            .lines()
            .find_map(|l| {
                l.strip_prefix("model name")
                    .and_then(|r| r.split_once(':'))
                    .map(|(_, m)| m.trim().to_owned())
            })
            .unwrap_or_else(|| "unknown".to_owned());
        let host_cpus = std::thread::available_parallelism()
            .map_or(0, |n| u32::try_from(n.get()).unwrap_or(u32::MAX));
        let host_kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map(|s| s.trim().to_owned())
            .unwrap_or_else(|_| "unknown".to_owned());
        Self {
            cpu_model,
            host_cpus,
            host_kernel,
            ..Self::default()
        }
    }
}

/// Upstream's figure for one metric: the range over its runs, per side.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UpstreamFigure {
    /// The metric.
    pub metric: Metric,
    /// Range (low, high) upstream measured with the feature off, or for single-sided experiments
    /// the only value.
    pub off: Option<(f64, f64)>,
    /// Range upstream measured with the feature on.
    pub on: Option<(f64, f64)>,
}

impl UpstreamFigure {
    /// Ratio of the midpoints, on/off.
    pub fn ratio(&self) -> Option<f64> {
        let (off, on) = (self.off?, self.on?);
        let (m_off, m_on) = ((off.0 + off.1) / 2.0, (on.0 + on.1) / 2.0);
        (m_off != 0.0).then(|| m_on / m_off)
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

/// One boot of the guest: a side of the experiment and a repetition.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    /// Side label (`off`, `on`, or `default` for single-sided experiments).
    pub side: String,
    /// Repetition, from 1.
    pub run: u32,
    /// The kernel command line the guest booted with.
    pub kernel_cmdline: Option<String>,
    /// What happened.
    pub outcome: RunOutcome,
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
    /// All runs, including failed ones.
    pub runs: Vec<RunRecord>,
    /// Upstream's figures.
    pub upstream: Vec<UpstreamFigure>,
    /// Where upstream's figures come from.
    pub upstream_source: String,
}

/// Statistics of one metric on one side over the successful runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SideStats {
    /// Side label.
    pub side: String,
    /// Runs with a value.
    pub n: usize,
    /// Mean.
    pub mean: f64,
    /// Smallest.
    pub min: f64,
    /// Largest.
    pub max: f64,
    /// Sample standard deviation (0 with one run).
    pub stddev: f64,
}

impl SideStats {
    fn of(side: &str, values: &[f64]) -> Option<Self> {
        if values.is_empty() {
            return None;
        }
        #[allow(clippy::cast_precision_loss)]
        let n = values.len() as f64;
        let mean = values.iter().sum::<f64>() / n;
        let var = if values.len() > 1 {
            values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0)
        } else {
            0.0
        };
        Some(Self {
            side: side.to_owned(),
            n: values.len(),
            mean,
            min: values.iter().copied().fold(f64::INFINITY, f64::min),
            max: values.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            stddev: var.sqrt(),
        })
    }
}

/// One metric across sides.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MetricAnalysis {
    /// The metric.
    pub metric: Metric,
    /// Per side, in side order; `None` where no run produced a value.
    pub sides: Vec<Option<SideStats>>,
    /// Mean of the last side over mean of the first (on/off), for two-sided experiments.
    pub ratio: Option<f64>,
    /// Upstream's figure, if it reported this metric.
    pub upstream: Option<UpstreamFigure>,
    /// Upstream's on/off ratio.
    pub upstream_ratio: Option<f64>,
}

/// The condensed figures of a report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Analysis {
    /// Per metric, in [`Metric::ALL`] order.
    pub metrics: Vec<MetricAnalysis>,
    /// Runs that produced figures, out of all runs.
    pub good_runs: usize,
    /// All runs.
    pub total_runs: usize,
}

/// The JSON document written by [`BenchReport::to_json`].
#[derive(Debug, Serialize)]
struct JsonDocument<'a> {
    performance: bool,
    note: Option<&'static str>,
    #[serde(flatten)]
    report: &'a BenchReport,
    analysis: Analysis,
}

impl BenchReport {
    fn is_ab(&self) -> bool {
        self.sides.len() == 2
    }

    /// Means, spread and ratios.
    pub fn analyse(&self) -> Analysis {
        let metrics = Metric::ALL
            .iter()
            .map(|&metric| {
                let sides: Vec<Option<SideStats>> = self
                    .sides
                    .iter()
                    .map(|side| {
                        let values: Vec<f64> = self
                            .runs
                            .iter()
                            .filter(|r| &r.side == side)
                            .filter_map(RunRecord::good_summary)
                            .filter_map(|s| metric.value(s))
                            .collect();
                        SideStats::of(side, &values)
                    })
                    .collect();
                let ratio = match sides.as_slice() {
                    [Some(off), Some(on)] if off.mean != 0.0 => Some(on.mean / off.mean),
                    _ => None,
                };
                let upstream = self.upstream.iter().find(|u| u.metric == metric).cloned();
                let upstream_ratio = upstream.as_ref().and_then(UpstreamFigure::ratio);
                MetricAnalysis {
                    metric,
                    sides,
                    ratio,
                    upstream,
                    upstream_ratio,
                }
            })
            .collect();
        Analysis {
            metrics,
            good_runs: self
                .runs
                .iter()
                .filter(|r| r.good_summary().is_some())
                .count(),
            total_runs: self.runs.len(),
        }
    }

    fn headline(&self) -> String {
        let mut s = format!(
            "{} ({}): {}\n",
            self.experiment,
            self.description,
            self.engine_line()
        );
        if !self.accelerator.is_performance() {
            let _ = writeln!(
                s,
                "*** {}: {FUNCTIONAL_ONLY} ***",
                self.accelerator.name().to_uppercase()
            );
        }
        s
    }

    fn engine_line(&self) -> String {
        format!(
            "engine {}, accelerator {}",
            self.engine,
            self.accelerator.name()
        )
    }

    /// The terminal report: runs table, upstream-shaped fio lines, summary with ratios.
    pub fn render_text(&self) -> String {
        let analysis = self.analyse();
        let mut out = self.headline();
        let h = &self.host;
        let nvdimm = h
            .nvdimm_bytes
            .map_or_else(|| "none".to_owned(), human_bytes);
        let _ = writeln!(
            out,
            "host: {} ({} CPUs, Linux {}); guest: {} vCPUs, {} MiB, NVDIMM {nvdimm}; fio jobs: {}",
            h.cpu_model, h.host_cpus, h.host_kernel, h.guest_vcpus, h.guest_mem_mib, h.jobs
        );
        let _ = writeln!(
            out,
            "runs: {} of {} produced figures\n",
            analysis.good_runs, analysis.total_runs
        );

        // Runs table.
        out.push_str("Runs\n");
        let mut header: Vec<String> = vec!["side".into(), "run".into()];
        header.extend(Metric::ALL.iter().map(|m| m.label().to_owned()));
        header.push("status".into());
        let mut rows = vec![header];
        for r in &self.runs {
            let mut row = vec![r.side.clone(), r.run.to_string()];
            for m in Metric::ALL {
                let v = match &r.outcome {
                    RunOutcome::Ok { summary } => m
                        .value(summary)
                        .map_or_else(|| "-".to_owned(), |v| m.format(v)),
                    RunOutcome::Failed { .. } => "-".to_owned(),
                };
                row.push(v);
            }
            row.push(r.status());
            rows.push(row);
        }
        out.push_str(&table(&rows, 2));

        // fio's own lines, as upstream showed them with grep IOPS|slat|cpu *.fio | column -t.
        out.push_str("\nfio lines (grep IOPS|slat|cpu, upstream's shape)\n");
        let mut lines = Vec::new();
        for r in &self.runs {
            let RunOutcome::Ok { summary } = &r.outcome else {
                continue;
            };
            let file = format!("{}-{}-{}.fio:", self.experiment, r.side, r.run);
            for (dir, d) in [
                ("read:", &summary.read),
                ("write:", &summary.write),
                ("trim:", &summary.trim),
            ] {
                if let Some(d) = d {
                    lines.push(vec![
                        file.clone(),
                        dir.to_owned(),
                        format!("IOPS={},", si(d.iops)),
                        format!("BW={}", fio_bw(d.bw_bytes)),
                    ]);
                }
            }
            if summary.slat.samples > 0 {
                lines.push(vec![
                    file.clone(),
                    "slat".to_owned(),
                    "(nsec):".to_owned(),
                    format!("min={},", summary.slat.min_ns),
                    format!("max={},", summary.slat.max_ns),
                    format!("avg={:.2}", summary.slat.mean_ns),
                ]);
            }
            lines.push(vec![
                file.clone(),
                "cpu".to_owned(),
                ":".to_owned(),
                format!("usr={:.2}%,", summary.usr_cpu),
                format!("sys={:.2}%,", summary.sys_cpu),
                format!("ctx={}", summary.ctx),
            ]);
        }
        out.push_str(&table(&lines, 2));

        // Summary.
        out.push_str("\nSummary (mean, min-max, stddev over good runs)\n");
        let mut header = vec!["metric".to_owned()];
        for side in &self.sides {
            header.push(format!("{side} mean"));
            header.push(format!("{side} min-max"));
            header.push(format!("{side} sd"));
        }
        if self.is_ab() {
            header.push(format!("{}/{}", self.sides[1], self.sides[0]));
            header.push(format!("upstream {}/{}", self.sides[1], self.sides[0]));
        }
        header.push("upstream".to_owned());
        let mut rows = vec![header];
        for a in &analysis.metrics {
            let m = a.metric;
            let mut row = vec![m.label().to_owned()];
            for s in &a.sides {
                match s {
                    Some(s) => {
                        row.push(m.format(s.mean));
                        row.push(format!("{}-{}", m.format(s.min), m.format(s.max)));
                        row.push(m.format(s.stddev));
                    }
                    None => row.extend(["-".to_owned(), "-".to_owned(), "-".to_owned()]),
                }
            }
            if self.is_ab() {
                row.push(a.ratio.map_or_else(|| "-".to_owned(), ratio_text));
                row.push(a.upstream_ratio.map_or_else(|| "-".to_owned(), ratio_text));
            }
            row.push(
                a.upstream
                    .as_ref()
                    .map_or_else(|| "-".to_owned(), |u| upstream_text(m, u, &self.sides)),
            );
            rows.push(row);
        }
        out.push_str(&table(&rows, 2));
        if !self.upstream_source.is_empty() {
            let _ = writeln!(out, "upstream: {}", self.upstream_source);
        }
        if !self.accelerator.is_performance() {
            let _ = writeln!(
                out,
                "note: measured under {}: {FUNCTIONAL_ONLY}.",
                self.accelerator.name()
            );
        }
        out
    }

    /// The report and its analysis as pretty JSON.
    pub fn to_json(&self) -> Result<String, ReportError> {
        let doc = JsonDocument {
            performance: self.accelerator.is_performance(),
            note: (!self.accelerator.is_performance()).then_some(FUNCTIONAL_ONLY),
            report: self,
            analysis: self.analyse(),
        };
        serde_json::to_string_pretty(&doc).map_err(ReportError::Json)
    }

    /// One CSV row per run.
    pub fn runs_csv(&self) -> String {
        let mut out = String::from(
            "experiment,engine,accelerator,performance,side,run,status,kernel_cmdline",
        );
        for m in Metric::ALL {
            out.push(',');
            out.push_str(m.key());
        }
        out.push('\n');
        for r in &self.runs {
            let fields = [
                self.experiment.clone(),
                self.engine.clone(),
                self.accelerator.name().to_owned(),
                self.accelerator.is_performance().to_string(),
                r.side.clone(),
                r.run.to_string(),
                r.status(),
                r.kernel_cmdline.clone().unwrap_or_default(),
            ];
            out.push_str(
                &fields
                    .iter()
                    .map(|f| csv_field(f))
                    .collect::<Vec<_>>()
                    .join(","),
            );
            for m in Metric::ALL {
                out.push(',');
                if let RunOutcome::Ok { summary } = &r.outcome {
                    if let Some(v) = m.value(summary) {
                        out.push_str(&csv_number(v));
                    }
                }
            }
            out.push('\n');
        }
        out
    }

    /// One CSV row per metric and side, with the ratio and upstream's figures.
    pub fn summary_csv(&self) -> String {
        let analysis = self.analyse();
        let mut out = String::from("experiment,accelerator,performance,metric,side,n,mean,min,max,stddev,ratio,upstream_low,upstream_high,upstream_ratio\n");
        for a in &analysis.metrics {
            for (i, (side, s)) in self.sides.iter().zip(&a.sides).enumerate() {
                let up = a
                    .upstream
                    .as_ref()
                    .and_then(|u| if i == 0 { u.off } else { u.on });
                let num = |v: Option<f64>| v.map(csv_number).unwrap_or_default();
                let ratio = if i + 1 == self.sides.len() && self.is_ab() {
                    a.ratio
                } else {
                    None
                };
                let upstream_ratio = if i + 1 == self.sides.len() && self.is_ab() {
                    a.upstream_ratio
                } else {
                    None
                };
                let _ = writeln!(
                    out,
                    "{},{},{},{},{},{},{},{},{},{},{},{},{},{}",
                    csv_field(&self.experiment),
                    self.accelerator.name(),
                    self.accelerator.is_performance(),
                    a.metric.key(),
                    csv_field(side),
                    s.as_ref().map_or(0, |s| s.n),
                    num(s.as_ref().map(|s| s.mean)),
                    num(s.as_ref().map(|s| s.min)),
                    num(s.as_ref().map(|s| s.max)),
                    num(s.as_ref().map(|s| s.stddev)),
                    num(ratio),
                    num(up.map(|u| u.0)),
                    num(up.map(|u| u.1)),
                    num(upstream_ratio),
                );
            }
        }
        out
    }

    /// A bar chart: one panel per metric that has figures, a bar per side (mean) with a whisker
    /// over the min–max range, and the ratio (ours and upstream's) under the panel.
    pub fn render_svg(&self) -> String {
        let analysis = self.analyse();
        let panels: Vec<&MetricAnalysis> = analysis
            .metrics
            .iter()
            .filter(|a| a.sides.iter().any(Option::is_some))
            .collect();
        const COLS: usize = 4;
        const PW: f64 = 230.0;
        const PH: f64 = 220.0;
        const TOP: f64 = 70.0;
        let colours = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759"];
        let rows = panels.len().div_ceil(COLS).max(1);
        #[allow(clippy::cast_precision_loss)]
        let (width, height) = (PW * COLS as f64 + 20.0, TOP + PH * rows as f64 + 20.0);
        let mut s = String::new();
        let _ = writeln!(s, r#"<?xml version="1.0" encoding="UTF-8"?>"#);
        let _ = writeln!(
            s,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0}" height="{height:.0}" viewBox="0 0 {width:.0} {height:.0}" font-family="sans-serif" font-size="11">"#
        );
        let _ = writeln!(
            s,
            r#"<rect x="0" y="0" width="{width:.0}" height="{height:.0}" fill="white"/>"#
        );
        let _ = writeln!(
            s,
            r#"<text x="10" y="20" font-size="15" font-weight="bold">{}</text>"#,
            xml_escape(&format!("{}: {}", self.experiment, self.description))
        );
        let _ = writeln!(
            s,
            r#"<text x="10" y="38">{}</text>"#,
            xml_escape(&format!(
                "{}; runs with figures: {} of {}; bars: mean, whiskers: min-max",
                self.engine_line(),
                analysis.good_runs,
                analysis.total_runs
            ))
        );
        if !self.accelerator.is_performance() {
            let _ = writeln!(
                s,
                r##"<text x="10" y="56" fill="#c00000" font-weight="bold">{}</text>"##,
                xml_escape(&format!(
                    "{}: {FUNCTIONAL_ONLY}",
                    self.accelerator.name().to_uppercase()
                ))
            );
        }
        for (i, a) in panels.iter().enumerate() {
            #[allow(clippy::cast_precision_loss)]
            let (x0, y0) = (10.0 + PW * (i % COLS) as f64, TOP + PH * (i / COLS) as f64);
            let m = a.metric;
            let _ = writeln!(s, r#"<g class="panel" id="{}">"#, m.key());
            let _ = writeln!(
                s,
                r#"<text x="{:.1}" y="{:.1}" font-weight="bold">{}</text>"#,
                x0 + 5.0,
                y0 + 14.0,
                xml_escape(m.label())
            );
            let (plot_top, plot_bottom) = (y0 + 24.0, y0 + PH - 50.0);
            let top_value = a
                .sides
                .iter()
                .flatten()
                .map(|st| st.max.max(st.mean))
                .fold(0.0, f64::max);
            let scale = if top_value > 0.0 {
                (plot_bottom - plot_top) / (top_value * 1.1)
            } else {
                0.0
            };
            let _ = writeln!(
                s,
                r#"<line x1="{x:.1}" y1="{plot_bottom:.1}" x2="{x2:.1}" y2="{plot_bottom:.1}" stroke="black"/>"#,
                x = x0 + 5.0,
                x2 = x0 + PW - 15.0
            );
            #[allow(clippy::cast_precision_loss)]
            let slot = (PW - 30.0) / self.sides.len().max(1) as f64;
            for (j, (side, st)) in self.sides.iter().zip(&a.sides).enumerate() {
                #[allow(clippy::cast_precision_loss)]
                let bx = x0 + 10.0 + slot * j as f64 + slot * 0.15;
                let bw = slot * 0.7;
                let _ = writeln!(
                    s,
                    r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
                    bx + bw / 2.0,
                    plot_bottom + 14.0,
                    xml_escape(side)
                );
                let Some(st) = st else {
                    let _ = writeln!(
                        s,
                        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">no data</text>"#,
                        bx + bw / 2.0,
                        plot_bottom - 4.0
                    );
                    continue;
                };
                let bar_top = plot_bottom - st.mean * scale;
                let _ = writeln!(
                    s,
                    r#"<rect x="{bx:.1}" y="{bar_top:.1}" width="{bw:.1}" height="{:.1}" fill="{}"><title>{}</title></rect>"#,
                    plot_bottom - bar_top,
                    colours[j % colours.len()],
                    xml_escape(&format!(
                        "{side}: mean {} (n={}, sd {})",
                        m.format(st.mean),
                        st.n,
                        m.format(st.stddev)
                    ))
                );
                let (wy1, wy2, cx) = (
                    plot_bottom - st.max * scale,
                    plot_bottom - st.min * scale,
                    bx + bw / 2.0,
                );
                let _ = writeln!(
                    s,
                    r#"<line class="whisker" x1="{cx:.1}" y1="{wy1:.1}" x2="{cx:.1}" y2="{wy2:.1}" stroke="black"/>"#
                );
                for y in [wy1, wy2] {
                    let _ = writeln!(
                        s,
                        r#"<line x1="{:.1}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="black"/>"#,
                        cx - 6.0,
                        cx + 6.0
                    );
                }
                let _ = writeln!(
                    s,
                    r#"<text x="{cx:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
                    wy1 - 4.0,
                    xml_escape(&m.format(st.mean))
                );
            }
            let mut note = Vec::new();
            if let Some(r) = a.ratio {
                note.push(format!(
                    "{}/{} {}",
                    self.sides[self.sides.len() - 1],
                    self.sides[0],
                    ratio_text(r)
                ));
            }
            if let Some(r) = a.upstream_ratio {
                note.push(format!("upstream {}", ratio_text(r)));
            } else if let Some(u) = &a.upstream {
                note.push(format!("upstream {}", upstream_text(m, u, &self.sides)));
            }
            if !note.is_empty() {
                let _ = writeln!(
                    s,
                    r#"<text x="{:.1}" y="{:.1}">{}</text>"#,
                    x0 + 5.0,
                    plot_bottom + 32.0,
                    xml_escape(&note.join(", "))
                );
            }
            s.push_str("</g>\n");
        }
        s.push_str("</svg>\n");
        s
    }

    /// Writes `report.txt`, `report.json`, `runs.csv`, `summary.csv` and `chart.svg` into `dir`
    /// (created if missing). Existing files are an error unless `overwrite`.
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

fn upstream_text(m: Metric, u: &UpstreamFigure, sides: &[String]) -> String {
    let range = |r: (f64, f64)| {
        if r.0 == r.1 {
            m.format(r.0)
        } else {
            format!("{}-{}", m.format(r.0), m.format(r.1))
        }
    };
    match (u.off, u.on) {
        (Some(off), Some(on)) => format!("{} -> {}", range(off), range(on)),
        (Some(only), None) => range(only),
        (None, Some(on)) => format!(
            "{}: {}",
            sides.last().map_or("on", String::as_str),
            range(on)
        ),
        (None, None) => "-".to_owned(),
    }
}

/// A ratio as "1.48x", or "1/9167x" when it is far below 1.
fn ratio_text(r: f64) -> String {
    if r > 0.0 && r < 0.1 {
        format!("1/{}x", si(1.0 / r))
    } else {
        format!("{r:.2}x")
    }
}

/// fio's bandwidth notation: MiB/s below 1 GiB/s, GiB/s above.
#[allow(clippy::cast_precision_loss)]
fn fio_bw(bytes: u64) -> String {
    let mib = bytes as f64 / (1024.0 * 1024.0);
    if mib >= 1024.0 {
        format!("{}GiB/s", sig3(mib / 1024.0))
    } else {
        format!("{}MiB/s", sig3(mib))
    }
}

#[allow(clippy::cast_precision_loss)]
fn human_bytes(b: u64) -> String {
    const GIB: u64 = 1 << 30;
    const MIB: u64 = 1 << 20;
    if b >= GIB && b.is_multiple_of(GIB) {
        format!("{} GiB", b / GIB)
    } else if b >= GIB {
        format!("{:.2} GiB", b as f64 / GIB as f64)
    } else {
        format!("{} MiB", b / MIB)
    }
}

/// Left-aligned columns separated by `gap` spaces, trailing spaces trimmed.
fn table(rows: &[Vec<String>], gap: usize) -> String {
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..cols)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|s| s.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for r in rows {
        let mut line = String::new();
        for (c, cell) in r.iter().enumerate() {
            line.push_str(cell);
            if c + 1 < r.len() {
                let pad = widths[c] - cell.chars().count() + gap;
                line.extend(std::iter::repeat_n(' ', pad));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_owned()
    }
}

fn csv_number(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{v:.0}")
    } else {
        format!("{v:.3}")
    }
}

fn xml_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fio::parse_fio_json;

    const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/fio");

    fn summary(fixture: &str, group: u64) -> FioSummary {
        let bytes = std::fs::read(format!("{FIXTURES}/{fixture}")).unwrap();
        parse_fio_json(&bytes)
            .unwrap()
            .group_summary(group)
            .unwrap()
    }

    fn ok(side: &str, run: u32, summary: FioSummary) -> RunRecord {
        RunRecord {
            side: side.into(),
            run,
            kernel_cmdline: Some(format!(
                "console=ttyS0 nd_pmem.nowait={}",
                u8::from(side == "on")
            )),
            outcome: RunOutcome::Ok {
                summary: Box::new(summary),
            },
        }
    }

    /// A report over real fio output: the "off" runs are the psync/io_uring groups, the "on"
    /// runs io_uring ones, one run failed and one ended with a verify error.
    fn sample(accelerator: Accelerator) -> BenchReport {
        BenchReport {
            experiment: "pmem-nowait".into(),
            description: "4k randread, io_uring, nd_pmem.nowait=0 vs 1".into(),
            engine: "pmemvm".into(),
            accelerator,
            host: HostInfo {
                cpu_model: "Test CPU".into(),
                host_cpus: 2,
                host_kernel: "6.1.0-test".into(),
                guest_vcpus: 2,
                guest_mem_mib: 1024,
                nvdimm_bytes: Some(2 << 30),
                jobs: 4,
            },
            sides: vec!["off".into(), "on".into()],
            runs: vec![
                ok("off", 1, summary("groups.json", 1)),
                ok("off", 2, summary("libaio-psync.json", 0)),
                RunRecord {
                    side: "off".into(),
                    run: 3,
                    kernel_cmdline: None,
                    outcome: RunOutcome::Failed {
                        error: "guest did not reach init within 120 s".into(),
                    },
                },
                ok("on", 1, summary("group-reporting.json", 0)),
                ok("on", 2, summary("normal-json.out", 0)),
                ok("on", 3, summary("verify-fail.out", 0)),
            ],
            upstream: vec![
                UpstreamFigure {
                    metric: Metric::Iops,
                    off: Some((3.97e6, 4.08e6)),
                    on: Some((5.91e6, 6.01e6)),
                },
                UpstreamFigure {
                    metric: Metric::SlatAvgUs,
                    off: Some((9.2, 9.2)),
                    on: Some((7.4, 7.4)),
                },
                UpstreamFigure {
                    metric: Metric::Ctx,
                    off: Some((220e6, 220e6)),
                    on: Some((24e3, 24e3)),
                },
            ],
            upstream_source: "issue 6 (upstream thread, fio io_uring, 3 runs each)".into(),
        }
    }

    fn golden(name: &str, actual: &str) {
        let path = format!("{FIXTURES}/golden/{name}");
        if std::env::var_os("UPDATE_GOLDEN").is_some() {
            std::fs::create_dir_all(format!("{FIXTURES}/golden")).unwrap();
            std::fs::write(&path, actual).unwrap();
        }
        let expected = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{path}: {e} (run with UPDATE_GOLDEN=1 to create)"));
        assert_eq!(actual, expected, "{name} differs from the golden file; inspect and rerun with UPDATE_GOLDEN=1 if intended");
    }

    #[test]
    fn analysis_uses_good_runs_only() {
        let r = sample(Accelerator::Kvm);
        let a = r.analyse();
        assert_eq!((a.good_runs, a.total_runs), (4, 6));
        let iops = &a.metrics[0];
        assert_eq!(iops.metric, Metric::Iops);
        let off = iops.sides[0].clone().unwrap();
        let on = iops.sides[1].clone().unwrap();
        assert_eq!(
            (off.n, on.n),
            (2, 2),
            "failed and fio-error runs are left out"
        );
        let off_values = [
            summary("groups.json", 1).iops,
            summary("libaio-psync.json", 0).iops,
        ];
        assert!((off.mean - (off_values[0] + off_values[1]) / 2.0).abs() < 1e-6);
        assert_eq!(off.min, off_values[0].min(off_values[1]));
        assert_eq!(off.max, off_values[0].max(off_values[1]));
        let sd = ((off_values[0] - off_values[1]).abs()) / 2f64.sqrt();
        assert!((off.stddev - sd).abs() < 1e-6);
        assert!((iops.ratio.unwrap() - on.mean / off.mean).abs() < 1e-12);
        // (5.91+6.01)/(3.97+4.08)
        assert!((iops.upstream_ratio.unwrap() - 11.92 / 8.05).abs() < 1e-9);
        // psync has no slat: the off side's slat comes from the io_uring/libaio runs only.
        let slat = a
            .metrics
            .iter()
            .find(|m| m.metric == Metric::SlatAvgUs)
            .unwrap();
        assert_eq!(slat.sides[0].as_ref().unwrap().n, 1);
    }

    #[test]
    fn text_report_golden() {
        let text = sample(Accelerator::Kvm).render_text();
        assert!(!text.contains(FUNCTIONAL_ONLY));
        assert!(text.contains("failed: guest did not reach init within 120 s"));
        assert!(text.contains("fio error 84 in job verify-garbage"));
        golden("report-kvm.txt", &text);
    }

    #[test]
    fn tcg_and_nested_are_marked_functional_only() {
        for acc in [Accelerator::Tcg, Accelerator::Nested] {
            let r = sample(acc);
            let text = r.render_text();
            assert!(
                text.lines().nth(1).unwrap().contains(FUNCTIONAL_ONLY),
                "{text}"
            );
            assert!(r.render_svg().contains(FUNCTIONAL_ONLY));
            let json: serde_json::Value = serde_json::from_str(&r.to_json().unwrap()).unwrap();
            assert_eq!(json["performance"], false);
            assert_eq!(json["note"], FUNCTIONAL_ONLY);
            assert_eq!(json["accelerator"], acc.name());
            assert!(r
                .runs_csv()
                .lines()
                .nth(1)
                .unwrap()
                .contains(&format!(",{},false,", acc.name())));
        }
        golden(
            "report-nested.txt",
            &sample(Accelerator::Nested).render_text(),
        );
    }

    #[test]
    fn json_round_trips_and_carries_analysis() {
        let r = sample(Accelerator::Kvm);
        let text = r.to_json().unwrap();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["experiment"], "pmem-nowait");
        assert_eq!(v["runs"][2]["outcome"]["status"], "failed");
        assert_eq!(v["runs"][0]["outcome"]["status"], "ok");
        assert_eq!(v["analysis"]["metrics"][0]["metric"], "iops");
        // The report part deserialises back into the same BenchReport.
        let back: BenchReport = serde_json::from_value(v).unwrap();
        assert_eq!(back, r);
    }

    #[test]
    fn csv_shapes() {
        let r = sample(Accelerator::Kvm);
        let runs = r.runs_csv();
        let lines: Vec<&str> = runs.lines().collect();
        assert_eq!(lines.len(), 7);
        let cols = lines[0].split(',').count();
        assert_eq!(cols, 8 + Metric::ALL.len());
        for l in &lines[1..] {
            // No field of these rows needs quoting, so a plain split counts the columns.
            assert_eq!(l.split(',').count(), cols, "{l}");
        }
        let summary = r.summary_csv();
        assert_eq!(summary.lines().count(), 1 + Metric::ALL.len() * 2);
        let iops_on = summary.lines().find(|l| l.contains(",iops,on,")).unwrap();
        let f: Vec<&str> = iops_on.split(',').collect();
        assert_eq!(f[5], "2");
        assert!(!f[10].is_empty(), "ratio on the 'on' row");
        assert_eq!(f[11], "5910000");
        assert_eq!(csv_field("a,\"b\""), "\"a,\"\"b\"\"\"");
        golden("runs.csv", &runs);
        golden("summary.csv", &summary);
    }

    /// Minimal well-formedness check: every tag closes in order, attributes are quoted,
    /// no bare '&' or '<' in text.
    fn check_xml(s: &str) {
        let body = s.split_once("?>").map_or(s, |(_, b)| b);
        let mut stack: Vec<String> = Vec::new();
        let mut rest = body;
        while let Some(lt) = rest.find('<') {
            let text = &rest[..lt];
            assert!(!text.contains('>'), "stray '>' in text {text:?}");
            for (i, _) in text.match_indices('&') {
                let ent = &text[i..];
                assert!(
                    ["&amp;", "&lt;", "&gt;", "&quot;", "&apos;"]
                        .iter()
                        .any(|e| ent.starts_with(e)),
                    "bare & in {text:?}"
                );
            }
            let gt = rest[lt..].find('>').unwrap() + lt;
            let tag = &rest[lt + 1..gt];
            assert_eq!(
                tag.matches('"').count() % 2,
                0,
                "unbalanced quotes in <{tag}>"
            );
            if let Some(name) = tag.strip_prefix('/') {
                assert_eq!(stack.pop().as_deref(), Some(name), "mismatched </{name}>");
            } else if !tag.ends_with('/') {
                stack.push(tag.split_whitespace().next().unwrap().to_owned());
            }
            rest = &rest[gt + 1..];
        }
        assert!(stack.is_empty(), "unclosed tags {stack:?}");
    }

    #[test]
    fn svg_is_well_formed_with_whiskers() {
        let mut r = sample(Accelerator::Tcg);
        r.description = "quotes \" & <angles>".into();
        let svg = r.render_svg();
        check_xml(&svg);
        assert!(svg.contains("quotes &quot; &amp; &lt;angles&gt;"));
        // One panel per metric with data, each side with a bar and a whisker.
        assert_eq!(
            svg.matches(r#"<g class="panel""#).count(),
            Metric::ALL.len()
        );
        assert_eq!(
            svg.matches(r#"class="whisker""#).count(),
            Metric::ALL.len() * 2
        );
        assert!(svg.contains("upstream 1.48x"));

        // xmllint, when installed (Debian libxml2-utils), as an independent parser.
        let dir = std::env::temp_dir().join(format!("pmemvm-report-test-{}", std::process::id()));
        let files = sample(Accelerator::Kvm).write_files(&dir, false).unwrap();
        assert_eq!(files.len(), 5);
        match std::process::Command::new("xmllint").arg("--noout").arg(dir.join("chart.svg")).status() {
            Ok(status) => assert!(status.success(), "xmllint rejected chart.svg"),
            Err(_) => pmemvm_skip::skip("xmllint not installed (apt-get install libxml2-utils); used the built-in check only"),
        }
        check_xml(&std::fs::read_to_string(dir.join("chart.svg")).unwrap());
        // Written files are not overwritten unless asked.
        let e = sample(Accelerator::Kvm)
            .write_files(&dir, false)
            .unwrap_err();
        assert!(matches!(e, ReportError::FileExists { .. }), "{e}");
        sample(Accelerator::Kvm).write_files(&dir, true).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn svg_golden() {
        golden("chart.svg", &sample(Accelerator::Kvm).render_svg());
    }

    #[test]
    fn single_sided_report() {
        let mut r = sample(Accelerator::Kvm);
        r.experiment = "xfs-dax-write".into();
        r.sides = vec!["default".into()];
        for run in &mut r.runs {
            run.side = "default".into();
        }
        r.upstream = vec![UpstreamFigure {
            metric: Metric::BwMibS,
            off: Some((12.8 * 1024.0, 12.8 * 1024.0)),
            on: None,
        }];
        let text = r.render_text();
        assert!(!text.contains("on/off"));
        assert!(text.contains("13107"), "{text}");
        let a = r.analyse();
        assert!(a.metrics.iter().all(|m| m.ratio.is_none()));
        check_xml(&r.render_svg());
    }

    #[test]
    fn number_formats() {
        assert_eq!(si(3_968_000.0), "3.968M");
        assert_eq!(si(546_123.0), "546.1k");
        assert_eq!(si(24_000.0), "24.00k");
        assert_eq!(si(4691.0), "4691");
        assert_eq!(si(220e6), "220.0M");
        assert_eq!(fio_bw(16_212_000_000), "15.1GiB/s");
        assert_eq!(fio_bw(306_565_754), "292MiB/s");
        assert_eq!(Metric::SlatAvgUs.format(9.424), "9.42");
        assert_eq!(human_bytes(2 << 30), "2 GiB");
        assert_eq!(ratio_text(1.4807), "1.48x");
        assert_eq!(ratio_text(24e3 / 220e6), "1/9167x");
        assert_eq!(
            table(
                &[
                    vec!["a".into(), "bb".into()],
                    vec!["ccc".into(), "d".into()]
                ],
                2
            ),
            "a    bb\nccc  d\n"
        );
    }
}
