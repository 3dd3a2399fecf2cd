//! Per-group summaries of fio's JSON: what reports show of one reporting group.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{FioJob, FioOutput, IoStats, LatencyStats};

/// A latency distribution condensed for reports, in nanoseconds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LatencySummary {
    /// Number of samples.
    pub samples: u64,
    /// Smallest sample (0 without samples).
    pub min_ns: u64,
    /// Sample-weighted mean.
    pub mean_ns: f64,
    /// Largest sample.
    pub max_ns: u64,
    /// Pooled standard deviation.
    pub stddev_ns: f64,
    /// Median.
    pub p50_ns: Option<u64>,
    /// 99th percentile.
    pub p99_ns: Option<u64>,
    /// 99.9th percentile.
    pub p99_9_ns: Option<u64>,
    /// True when the percentiles are fio's own (one distribution) or computed from json+
    /// histograms; false when several distributions' percentiles were averaged by sample count,
    /// which is only an estimate.
    pub percentiles_exact: bool,
}

impl LatencySummary {
    /// Combines distributions (of several jobs or directions) into one.
    pub fn merge<'a>(parts: impl IntoIterator<Item = &'a LatencyStats>) -> Self {
        let parts: Vec<&LatencyStats> = parts.into_iter().filter(|p| p.samples > 0).collect();
        let samples: u64 = parts.iter().map(|p| p.samples).sum();
        if samples == 0 {
            return Self {
                percentiles_exact: true,
                ..Self::default()
            };
        }
        #[allow(clippy::cast_precision_loss)]
        let n = samples as f64;
        #[allow(clippy::cast_precision_loss)]
        let weight = |p: &LatencyStats| p.samples as f64;
        let mean = parts.iter().map(|p| weight(p) * p.mean).sum::<f64>() / n;
        let second_moment = parts
            .iter()
            .map(|p| weight(p) * (p.stddev * p.stddev + p.mean * p.mean))
            .sum::<f64>()
            / n;
        let stddev = (second_moment - mean * mean).max(0.0).sqrt();
        let min_ns = parts.iter().map(|p| p.min).min().unwrap_or(0);
        let max_ns = parts.iter().map(|p| p.max).max().unwrap_or(0);

        let (p50, p99, p99_9, exact) = if let [only] = parts.as_slice() {
            (
                only.percentile(50.0),
                only.percentile(99.0),
                only.percentile(99.9),
                true,
            )
        } else if parts.iter().all(|p| !p.bins.is_empty()) {
            let mut bins: BTreeMap<u64, u64> = BTreeMap::new();
            for p in &parts {
                for &(value, count) in &p.bins {
                    *bins.entry(value).or_default() += count;
                }
            }
            (
                percentile_from_bins(&bins, 50.0),
                percentile_from_bins(&bins, 99.0),
                percentile_from_bins(&bins, 99.9),
                true,
            )
        } else {
            let estimate = |pct: f64| -> Option<u64> {
                let mut acc = 0.0;
                for p in &parts {
                    #[allow(clippy::cast_precision_loss)]
                    let v = p.percentile(pct)? as f64;
                    acc += weight(p) * v;
                }
                #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                Some((acc / n).round() as u64)
            };
            (estimate(50.0), estimate(99.0), estimate(99.9), false)
        };
        Self {
            samples,
            min_ns,
            mean_ns: mean,
            max_ns,
            stddev_ns: stddev,
            p50_ns: p50,
            p99_ns: p99,
            p99_9_ns: p99_9,
            percentiles_exact: exact,
        }
    }
}

/// fio's rule: the first bucket at which the running count reaches `pct` percent of all samples.
pub(super) fn percentile_from_bins(bins: &BTreeMap<u64, u64>, pct: f64) -> Option<u64> {
    let total: u64 = bins.values().sum();
    #[allow(clippy::cast_precision_loss)]
    let threshold = pct / 100.0 * total as f64;
    let mut running = 0u64;
    for (&value, &count) in bins {
        running += count;
        #[allow(clippy::cast_precision_loss)]
        if running as f64 >= threshold {
            return Some(value);
        }
    }
    None
}

/// One direction (read, write or trim) of a group.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DirectionSummary {
    /// Bytes transferred by all jobs.
    pub io_bytes: u64,
    /// Summed bandwidth, bytes per second.
    pub bw_bytes: u64,
    /// Summed IOPS.
    pub iops: f64,
    /// Completed I/Os.
    pub total_ios: u64,
    /// Longest runtime of a job in this direction, ms.
    pub runtime_ms: u64,
    /// Submission latency.
    pub slat: LatencySummary,
    /// Completion latency.
    pub clat: LatencySummary,
    /// Total latency.
    pub lat: LatencySummary,
}

impl DirectionSummary {
    fn merge(parts: &[&IoStats]) -> Option<Self> {
        let active: Vec<&&IoStats> = parts
            .iter()
            .filter(|s| s.total_ios > 0 || s.io_bytes > 0)
            .collect();
        if active.is_empty() {
            return None;
        }
        Some(Self {
            io_bytes: active.iter().map(|s| s.io_bytes).sum(),
            bw_bytes: active.iter().map(|s| s.bw_bytes).sum(),
            iops: active.iter().map(|s| s.iops).sum(),
            total_ios: active.iter().map(|s| s.total_ios).sum(),
            runtime_ms: active.iter().map(|s| s.runtime).max().unwrap_or(0),
            slat: LatencySummary::merge(active.iter().map(|s| &s.slat_ns)),
            clat: LatencySummary::merge(active.iter().map(|s| &s.clat_ns)),
            lat: LatencySummary::merge(active.iter().map(|s| &s.lat_ns)),
        })
    }
}

/// A job that ended with an error.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobError {
    /// The job's name.
    pub jobname: String,
    /// errno fio reported (84 = EILSEQ: verify failure).
    pub error: i64,
}

/// The figures of one fio reporting group, in the shape upstream posted them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FioSummary {
    /// fio's reporting group.
    pub groupid: u64,
    /// Names of the jobs in the group (one per job entry; repeated names for numjobs > 1).
    pub jobnames: Vec<String>,
    /// Reads, if the group read anything.
    pub read: Option<DirectionSummary>,
    /// Writes, if the group wrote anything.
    pub write: Option<DirectionSummary>,
    /// Trims, if the group trimmed anything.
    pub trim: Option<DirectionSummary>,
    /// IOPS over all directions.
    pub iops: f64,
    /// Bandwidth over all directions, bytes per second.
    pub bw_bytes: u64,
    /// Submission latency over all directions.
    pub slat: LatencySummary,
    /// Completion latency over all directions.
    pub clat: LatencySummary,
    /// Total latency (submission to completion, fio's `lat_ns`) over all directions.
    #[serde(default)]
    pub lat: LatencySummary,
    /// Sum of the jobs' runtimes, ms: fio's `job_runtime` per job entry (with `group_reporting`
    /// fio already sums it over the group's jobs). CPU percentages are relative to it.
    #[serde(default)]
    pub job_runtime_ms: u64,
    /// User CPU, percent of one CPU, runtime-weighted over jobs.
    pub usr_cpu: f64,
    /// System CPU, percent of one CPU, runtime-weighted over jobs.
    pub sys_cpu: f64,
    /// Context switches, summed.
    pub ctx: u64,
    /// Major page faults, summed.
    pub majf: u64,
    /// Minor page faults, summed.
    pub minf: u64,
    /// Jobs that reported an error.
    pub errors: Vec<JobError>,
}

impl FioSummary {
    /// Condenses a set of jobs (normally one reporting group).
    pub fn from_jobs(groupid: u64, jobs: &[&FioJob]) -> Self {
        let reads: Vec<&IoStats> = jobs.iter().map(|j| &j.read).collect();
        let writes: Vec<&IoStats> = jobs.iter().map(|j| &j.write).collect();
        let trims: Vec<&IoStats> = jobs.iter().map(|j| &j.trim).collect();
        let all: Vec<&IoStats> = reads.iter().chain(&writes).chain(&trims).copied().collect();
        let active: Vec<&IoStats> = all
            .iter()
            .copied()
            .filter(|s| s.total_ios > 0 || s.io_bytes > 0)
            .collect();

        #[allow(clippy::cast_precision_loss)]
        let runtime_weights: Vec<f64> = jobs.iter().map(|j| j.job_runtime as f64).collect();
        let total_weight: f64 = runtime_weights.iter().sum();
        let weighted = |f: &dyn Fn(&FioJob) -> f64| -> f64 {
            if jobs.is_empty() {
                0.0
            } else if total_weight > 0.0 {
                jobs.iter()
                    .zip(&runtime_weights)
                    .map(|(j, w)| f(j) * w)
                    .sum::<f64>()
                    / total_weight
            } else {
                #[allow(clippy::cast_precision_loss)]
                let n = jobs.len() as f64;
                jobs.iter().map(|j| f(j)).sum::<f64>() / n
            }
        };

        Self {
            groupid,
            jobnames: jobs.iter().map(|j| j.jobname.clone()).collect(),
            read: DirectionSummary::merge(&reads),
            write: DirectionSummary::merge(&writes),
            trim: DirectionSummary::merge(&trims),
            iops: active.iter().map(|s| s.iops).sum(),
            bw_bytes: active.iter().map(|s| s.bw_bytes).sum(),
            slat: LatencySummary::merge(active.iter().map(|s| &s.slat_ns)),
            clat: LatencySummary::merge(active.iter().map(|s| &s.clat_ns)),
            lat: LatencySummary::merge(active.iter().map(|s| &s.lat_ns)),
            job_runtime_ms: jobs.iter().map(|j| j.job_runtime).sum(),
            usr_cpu: weighted(&|j| j.usr_cpu),
            sys_cpu: weighted(&|j| j.sys_cpu),
            ctx: jobs.iter().map(|j| j.ctx).sum(),
            majf: jobs.iter().map(|j| j.majf).sum(),
            minf: jobs.iter().map(|j| j.minf).sum(),
            errors: jobs
                .iter()
                .filter(|j| j.error != 0)
                .map(|j| JobError {
                    jobname: j.jobname.clone(),
                    error: j.error,
                })
                .collect(),
        }
    }

    /// Whether every job of the group finished without error.
    pub fn ok(&self) -> bool {
        self.errors.is_empty()
    }

    /// Completed I/Os over all directions.
    pub fn total_ios(&self) -> u64 {
        [&self.read, &self.write, &self.trim]
            .into_iter()
            .flatten()
            .map(|d| d.total_ios)
            .sum()
    }

    /// CPU time the group's jobs used, seconds: Σ over jobs of (usr + sys) / 100 × job runtime.
    /// fio's percentages are runtime-weighted over the jobs, so this is
    /// (usr_cpu + sys_cpu) / 100 × [`Self::job_runtime_ms`] / 1000. It counts what fio's own
    /// threads used (getrusage), not kernel threads working on their behalf (io_uring's io-wq
    /// workers, softirqs).
    #[allow(clippy::cast_precision_loss)]
    pub fn cpu_seconds(&self) -> f64 {
        (self.usr_cpu + self.sys_cpu) / 100.0 * self.job_runtime_ms as f64 / 1000.0
    }

    /// Completed I/Os per CPU-second of the jobs ([`Self::total_ios`] / [`Self::cpu_seconds`]):
    /// the IOPS each fully busy CPU delivers. `None` without I/Os or without CPU time.
    #[allow(clippy::cast_precision_loss)]
    pub fn ios_per_cpu_second(&self) -> Option<f64> {
        let (ios, cpu) = (self.total_ios(), self.cpu_seconds());
        (ios > 0 && cpu > 0.0).then(|| ios as f64 / cpu)
    }
}

impl FioOutput {
    /// The reporting group ids present, ascending.
    pub fn group_ids(&self) -> Vec<u64> {
        let mut ids: Vec<u64> = self.jobs.iter().map(|j| j.groupid).collect();
        ids.sort_unstable();
        ids.dedup();
        ids
    }

    /// Summary of one reporting group, `None` if no job belongs to it.
    pub fn group_summary(&self, groupid: u64) -> Option<FioSummary> {
        let jobs: Vec<&FioJob> = self.jobs.iter().filter(|j| j.groupid == groupid).collect();
        (!jobs.is_empty()).then(|| FioSummary::from_jobs(groupid, &jobs))
    }

    /// Summaries of all reporting groups, ascending by group id.
    pub fn summaries(&self) -> Vec<FioSummary> {
        self.group_ids()
            .into_iter()
            .filter_map(|id| self.group_summary(id))
            .collect()
    }

    /// Summary of the group containing the job named `jobname`.
    pub fn summary_of_job(&self, jobname: &str) -> Option<FioSummary> {
        let groupid = self.jobs.iter().find(|j| j.jobname == jobname)?.groupid;
        self.group_summary(groupid)
    }

    /// Summary of the last reporting group (the measured phase of a job file whose earlier
    /// groups prepare the device).
    pub fn last_group_summary(&self) -> Option<FioSummary> {
        let last = *self.group_ids().last()?;
        self.group_summary(last)
    }

    /// All job errors in the report.
    pub fn errors(&self) -> Vec<JobError> {
        self.jobs
            .iter()
            .filter(|j| j.error != 0)
            .map(|j| JobError {
                jobname: j.jobname.clone(),
                error: j.error,
            })
            .collect()
    }
}
