//! fio's JSON output: a serde model, a tolerant parser and per-group summaries.
//!
//! The model follows what fio 3.33 (the version in the guest image) prints with
//! `--output-format=json` or `json+`. Only the fields pmemvm reports on are modelled; every other
//! field is ignored, so newer or older fio versions with extra fields still parse.
//!
//! fio's output has a few quirks the parser deals with:
//! - text before the JSON object: `fio: pid=..., err=84/...` error lines, "Laying out IO file"
//!   notices or a whole `normal` report when `--output-format=normal,json` was used; and text
//!   after it (the `normal` report when it comes second). The JSON object is the first line that
//!   starts with `{`; everything before it is kept as [`FioOutput::preamble`].
//! - percentile keys are decimal strings such as `"99.900000"`;
//! - json+ adds latency histograms (`bins`, keyed by latency in ns), which let percentiles of
//!   several jobs be combined exactly;
//! - statistics without samples can come out as `nan`/`-nan`/`inf`, which is not JSON. Those
//!   tokens (outside strings) are read as 0.
//!
//! A [`FioSummary`] condenses one reporting group (`groupid`): IOPS and bandwidth are summed over
//! the group's jobs, latency means are weighted by sample counts, minimums and maximums are the
//! extremes, CPU percentages are weighted by job runtime (as fio's own `group_reporting` does)
//! and context switches are summed.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize};

/// Errors from reading fio's output.
#[derive(Debug, thiserror::Error)]
pub enum FioParseError {
    /// No line of the output starts with `{`.
    #[error("fio output contains no JSON report (no line starts with '{{'); fio probably failed before running any job; output begins with: {excerpt:?}")]
    NoJsonReport {
        /// The first few hundred characters of the output.
        excerpt: String,
    },
    /// The JSON text did not match fio's report format.
    #[error("fio's JSON report is malformed at line {line}, column {column} of the report")]
    MalformedJson {
        /// 1-based line within the JSON part.
        line: usize,
        /// 1-based column.
        column: usize,
        /// What serde_json found.
        #[source]
        source: serde_json::Error,
    },
    /// The report parsed but lists no jobs.
    #[error("fio's JSON report lists no jobs")]
    NoJobs,
}

/// A whole fio JSON report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FioOutput {
    /// fio's version string, e.g. `fio-3.33`.
    #[serde(rename = "fio version", default)]
    pub fio_version: String,
    /// Unix time of the report.
    #[serde(default, deserialize_with = "lenient_u64")]
    pub timestamp: u64,
    /// Options of the `[global]` section / command line, as fio printed them.
    #[serde(rename = "global options", default, deserialize_with = "string_map")]
    pub global_options: BTreeMap<String, String>,
    /// One entry per job (or per group with `group_reporting`).
    #[serde(default)]
    pub jobs: Vec<FioJob>,
    /// Per-disk utilisation, when fio could read it.
    #[serde(default)]
    pub disk_util: Vec<DiskUtil>,
    /// Lines that came before the JSON object (fio warnings and errors, normal-format text).
    #[serde(skip)]
    pub preamble: Vec<String>,
}

/// One job's results.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct FioJob {
    /// The job's name (section name in the job file).
    pub jobname: String,
    /// Reporting group (changed by `stonewall`/`new_group`).
    #[serde(deserialize_with = "lenient_u64")]
    pub groupid: u64,
    /// errno of the first error that stopped the job, 0 when none (84 = EILSEQ for a verify
    /// failure).
    #[serde(deserialize_with = "lenient_i64")]
    pub error: i64,
    /// The job's own options, as fio printed them.
    #[serde(rename = "job options", deserialize_with = "string_map")]
    pub job_options: BTreeMap<String, String>,
    /// Reads.
    pub read: IoStats,
    /// Writes.
    pub write: IoStats,
    /// Trims.
    pub trim: IoStats,
    /// Time the job ran, in ms.
    #[serde(deserialize_with = "lenient_u64")]
    pub job_runtime: u64,
    /// User CPU time as a percentage of one CPU over the job's runtime.
    #[serde(deserialize_with = "lenient_f64")]
    pub usr_cpu: f64,
    /// System CPU time as a percentage of one CPU over the job's runtime.
    #[serde(deserialize_with = "lenient_f64")]
    pub sys_cpu: f64,
    /// Context switches.
    #[serde(deserialize_with = "lenient_u64")]
    pub ctx: u64,
    /// Major page faults.
    #[serde(deserialize_with = "lenient_u64")]
    pub majf: u64,
    /// Minor page faults.
    #[serde(deserialize_with = "lenient_u64")]
    pub minf: u64,
}

/// Statistics of one I/O direction of one job.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct IoStats {
    /// Bytes transferred.
    #[serde(deserialize_with = "lenient_u64")]
    pub io_bytes: u64,
    /// Bandwidth in bytes per second.
    #[serde(deserialize_with = "lenient_u64")]
    pub bw_bytes: u64,
    /// I/O operations per second.
    #[serde(deserialize_with = "lenient_f64")]
    pub iops: f64,
    /// Time spent in this direction, in ms.
    #[serde(deserialize_with = "lenient_u64")]
    pub runtime: u64,
    /// Completed I/Os.
    #[serde(deserialize_with = "lenient_u64")]
    pub total_ios: u64,
    /// I/Os that transferred less than asked.
    #[serde(deserialize_with = "lenient_u64")]
    pub short_ios: u64,
    /// I/Os dropped.
    #[serde(deserialize_with = "lenient_u64")]
    pub drop_ios: u64,
    /// Submission latency.
    pub slat_ns: LatencyStats,
    /// Completion latency.
    pub clat_ns: LatencyStats,
    /// Total latency.
    pub lat_ns: LatencyStats,
}

/// One latency distribution, in nanoseconds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct LatencyStats {
    /// Smallest sample.
    #[serde(deserialize_with = "lenient_u64")]
    pub min: u64,
    /// Largest sample.
    #[serde(deserialize_with = "lenient_u64")]
    pub max: u64,
    /// Mean.
    #[serde(deserialize_with = "lenient_f64")]
    pub mean: f64,
    /// Standard deviation.
    #[serde(deserialize_with = "lenient_f64")]
    pub stddev: f64,
    /// Number of samples.
    #[serde(rename = "N", deserialize_with = "lenient_u64")]
    pub samples: u64,
    /// Percentiles as fio printed them: (percent, value in ns), ascending by percent.
    #[serde(deserialize_with = "percentile_list")]
    pub percentile: Vec<(f64, u64)>,
    /// json+ histogram: (bucket value in ns, count), ascending by value. Empty with plain json.
    #[serde(deserialize_with = "bin_list")]
    pub bins: Vec<(u64, u64)>,
}

impl LatencyStats {
    /// The value fio printed for percentile `pct` (e.g. 99.9), if it printed that one.
    pub fn percentile(&self, pct: f64) -> Option<u64> {
        self.percentile
            .iter()
            .find(|(p, _)| (p - pct).abs() < 1e-6)
            .map(|&(_, v)| v)
    }
}

/// Utilisation of one disk during the run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct DiskUtil {
    /// Kernel name of the disk (e.g. `pmem0`).
    pub name: String,
    /// Reads completed.
    #[serde(deserialize_with = "lenient_u64")]
    pub read_ios: u64,
    /// Writes completed.
    #[serde(deserialize_with = "lenient_u64")]
    pub write_ios: u64,
    /// Percentage of time the disk was busy.
    #[serde(deserialize_with = "lenient_f64")]
    pub util: f64,
}

/// Parses fio's output (`--output-format=json` or `json+`, possibly with text around it).
pub fn parse_fio_json(bytes: &[u8]) -> Result<FioOutput, FioParseError> {
    let text = String::from_utf8_lossy(bytes);
    let mut offset = 0;
    let mut start = None;
    for line in text.split_inclusive('\n') {
        if line.starts_with('{') {
            start = Some(offset);
            break;
        }
        offset += line.len();
    }
    let Some(start) = start else {
        return Err(FioParseError::NoJsonReport {
            excerpt: text.chars().take(300).collect(),
        });
    };
    let preamble = text[..start]
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(str::to_owned)
        .collect();
    let json = sanitize_non_finite(&text[start..]);
    // Parse exactly one JSON value and ignore whatever fio printed after it.
    let mut stream = serde_json::Deserializer::from_str(&json).into_iter::<FioOutput>();
    let mut out = match stream.next() {
        Some(Ok(out)) => out,
        Some(Err(source)) => {
            return Err(FioParseError::MalformedJson {
                line: source.line(),
                column: source.column(),
                source,
            })
        }
        None => {
            return Err(FioParseError::NoJsonReport {
                excerpt: text.chars().take(300).collect(),
            })
        }
    };
    if out.jobs.is_empty() {
        return Err(FioParseError::NoJobs);
    }
    out.preamble = preamble;
    Ok(out)
}

/// Replaces the non-JSON tokens fio may print for empty statistics (`nan`, `-nan`, `inf`,
/// `-inf`) with `null`, leaving strings untouched.
fn sanitize_non_finite(json: &str) -> String {
    let mut out = String::with_capacity(json.len());
    let mut chars = json.char_indices().peekable();
    let mut in_string = false;
    let mut escaped = false;
    while let Some((i, c)) = chars.next() {
        if in_string {
            out.push(c);
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_string = false;
            }
            continue;
        }
        if c == '"' {
            in_string = true;
            out.push(c);
            continue;
        }
        if c.is_ascii_alphabetic()
            || (c == '-' && json[i + 1..].starts_with(|n: char| n.is_ascii_alphabetic()))
        {
            let mut end = i + c.len_utf8();
            while let Some(&(j, n)) = chars.peek() {
                if n.is_ascii_alphanumeric() {
                    end = j + n.len_utf8();
                    chars.next();
                } else {
                    break;
                }
            }
            let word = &json[i..end];
            let bare = word.trim_start_matches('-').to_ascii_lowercase();
            if bare == "nan" || bare == "inf" || bare == "infinity" {
                out.push_str("null");
            } else {
                out.push_str(word);
            }
            continue;
        }
        out.push(c);
    }
    out
}

struct LenientNumber;

impl<'de> Visitor<'de> for LenientNumber {
    type Value = f64;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a number or null")
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<f64, E> {
        // Precision loss past 2^53 is irrelevant for fio's statistics.
        #[allow(clippy::cast_precision_loss)]
        Ok(v as f64)
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<f64, E> {
        #[allow(clippy::cast_precision_loss)]
        Ok(v as f64)
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<f64, E> {
        Ok(v)
    }
    fn visit_unit<E: de::Error>(self) -> Result<f64, E> {
        Ok(0.0)
    }
    fn visit_none<E: de::Error>(self) -> Result<f64, E> {
        Ok(0.0)
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<f64, E> {
        v.trim()
            .parse::<f64>()
            .map_err(|_| E::custom(format!("expected a number, found {v:?}")))
    }
}

fn lenient_f64<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    let v = d.deserialize_any(LenientNumber)?;
    Ok(if v.is_finite() { v } else { 0.0 })
}

#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
fn lenient_u64<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    let v = lenient_f64(d)?;
    // Negative counters do not exist; fio prints unsigned values, floats are rounded.
    Ok(if v <= 0.0 { 0 } else { v.round() as u64 })
}

#[allow(clippy::cast_possible_truncation)]
fn lenient_i64<'de, D: Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
    Ok(lenient_f64(d)?.round() as i64)
}

/// Reads a map of option name → value, turning non-string values into their JSON text.
fn string_map<'de, D: Deserializer<'de>>(d: D) -> Result<BTreeMap<String, String>, D::Error> {
    let raw = Option::<BTreeMap<String, serde_json::Value>>::deserialize(d)?.unwrap_or_default();
    Ok(raw
        .into_iter()
        .map(|(k, v)| {
            let v = match v {
                serde_json::Value::String(s) => s,
                other => other.to_string(),
            };
            (k, v)
        })
        .collect())
}

fn number_map<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<BTreeMap<String, serde_json::Value>, D::Error> {
    Ok(Option::<BTreeMap<String, serde_json::Value>>::deserialize(d)?.unwrap_or_default())
}

#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
fn value_u64(v: &serde_json::Value) -> Option<u64> {
    v.as_u64().or_else(|| {
        v.as_f64()
            .filter(|f| f.is_finite() && *f >= 0.0)
            .map(|f| f.round() as u64)
    })
}

fn percentile_list<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<(f64, u64)>, D::Error> {
    let mut list = Vec::new();
    for (k, v) in number_map(d)? {
        let pct = k
            .trim()
            .parse::<f64>()
            .map_err(|_| de::Error::custom(format!("percentile key {k:?} is not a number")))?;
        let value = value_u64(&v).ok_or_else(|| {
            de::Error::custom(format!("percentile {k} has value {v}, not a number"))
        })?;
        list.push((pct, value));
    }
    list.sort_by(|a, b| a.0.total_cmp(&b.0));
    Ok(list)
}

fn bin_list<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<(u64, u64)>, D::Error> {
    let mut list = Vec::new();
    for (k, v) in number_map(d)? {
        let value = k.trim().parse::<u64>().map_err(|_| {
            de::Error::custom(format!("histogram bin {k:?} is not a latency in ns"))
        })?;
        let count = value_u64(&v).ok_or_else(|| {
            de::Error::custom(format!("histogram bin {k} has count {v}, not a number"))
        })?;
        list.push((value, count));
    }
    list.sort_unstable();
    Ok(list)
}

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
fn percentile_from_bins(bins: &BTreeMap<u64, u64>, pct: f64) -> Option<u64> {
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

#[cfg(test)]
mod tests {
    use super::*;

    const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/fio");

    fn fixture(name: &str) -> Vec<u8> {
        std::fs::read(format!("{FIXTURES}/{name}")).unwrap()
    }

    fn parse(name: &str) -> FioOutput {
        parse_fio_json(&fixture(name)).unwrap()
    }

    /// Exit status recorded by make-fixtures.sh.
    fn exit_status(name: &str) -> i32 {
        let text = String::from_utf8(fixture("exit-status.txt")).unwrap();
        text.lines()
            .filter(|l| !l.starts_with('#'))
            .find_map(|l| {
                let (n, rc) = l.split_once(' ')?;
                (n == name).then(|| rc.trim().parse().unwrap())
            })
            .unwrap()
    }

    fn close(a: f64, b: f64, rel: f64) -> bool {
        (a - b).abs() <= rel * a.abs().max(b.abs()).max(1.0)
    }

    /// fio's iops is io/runtime: check the numbers are consistent with each other.
    fn check_direction_consistency(s: &IoStats, bs: u64) {
        if s.total_ios == 0 {
            assert_eq!(s.iops, 0.0);
            return;
        }
        assert_eq!(s.io_bytes, s.total_ios * bs, "io_bytes = total_ios * bs");
        #[allow(clippy::cast_precision_loss)]
        let expect = s.total_ios as f64 * 1000.0 / s.runtime as f64;
        assert!(
            close(s.iops, expect, 0.01),
            "iops {} vs total_ios/runtime {expect}",
            s.iops
        );
        assert_eq!(s.clat_ns.samples, s.total_ios);
        assert!(s.clat_ns.min <= s.clat_ns.max);
        #[allow(clippy::cast_precision_loss)]
        let (min, max) = (s.clat_ns.min as f64, s.clat_ns.max as f64);
        assert!(min <= s.clat_ns.mean && s.clat_ns.mean <= max);
    }

    #[test]
    fn every_fixture_parses() {
        let mut count = 0;
        for entry in std::fs::read_dir(FIXTURES).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if !(name.ends_with(".json") || name.ends_with(".out")) {
                continue;
            }
            let out = parse_fio_json(&std::fs::read(&path).unwrap())
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(out.fio_version, "fio-3.33", "{name}");
            for job in &out.jobs {
                let bs = job
                    .job_options
                    .get("bs")
                    .or_else(|| out.global_options.get("bs"));
                let bs = match bs.map(String::as_str) {
                    None | Some("4k") => 4096,
                    Some("2M") => 2 << 20,
                    Some(other) => panic!("{name}: unexpected bs {other}"),
                };
                check_direction_consistency(&job.read, bs);
                check_direction_consistency(&job.write, bs);
            }
            count += 1;
        }
        assert!(count >= 13, "expected at least 13 fixtures, found {count}");
    }

    #[test]
    fn uring_randrw_two_jobs_one_group() {
        let out = parse("uring-randrw.json");
        assert_eq!(exit_status("uring-randrw"), 0);
        assert_eq!(out.jobs.len(), 2);
        assert_eq!(out.group_ids(), vec![0]);
        assert_eq!(
            out.global_options.get("ioengine").map(String::as_str),
            Some("io_uring")
        );
        assert_eq!(
            out.global_options.get("iodepth").map(String::as_str),
            Some("16")
        );
        let rr = &out.jobs[0];
        assert_eq!(rr.jobname, "randread");
        assert_eq!(
            rr.job_options.get("rw").map(String::as_str),
            Some("randread")
        );
        assert!(rr.read.iops > 1000.0 && rr.write.total_ios == 0);
        assert_eq!(out.jobs[1].read.total_ios, 0);
        assert!(rr.read.clat_ns.percentile(99.9).is_some());
        assert!(
            rr.read.clat_ns.bins.is_empty(),
            "plain json has no histogram"
        );
        assert!(!out.disk_util.is_empty());

        let s = out.group_summary(0).unwrap();
        assert_eq!(s.jobnames, vec!["randread", "randwrite"]);
        let (r, w) = (s.read.clone().unwrap(), s.write.clone().unwrap());
        assert!(close(s.iops, rr.read.iops + out.jobs[1].write.iops, 1e-12));
        assert_eq!(s.bw_bytes, r.bw_bytes + w.bw_bytes);
        // One job per direction: the direction's percentiles are fio's own.
        assert!(r.clat.percentiles_exact);
        assert_eq!(r.clat.p99_ns, rr.read.clat_ns.percentile(99.0));
        // Both directions combined without histograms: estimate, flagged as such.
        assert!(!s.clat.percentiles_exact);
        assert_eq!(
            s.slat.min_ns,
            rr.read.slat_ns.min.min(out.jobs[1].write.slat_ns.min)
        );
        assert_eq!(s.ctx, rr.ctx + out.jobs[1].ctx);
        assert!(s.ok());
    }

    #[test]
    fn json_plus_bins_reproduce_fio_percentiles() {
        let out = parse("uring-randrw-plus.json");
        for job in &out.jobs {
            let stats = if job.read.total_ios > 0 {
                &job.read
            } else {
                &job.write
            };
            let bins: BTreeMap<u64, u64> = stats.clat_ns.bins.iter().copied().collect();
            assert_eq!(bins.values().sum::<u64>(), stats.clat_ns.samples);
            for pct in [1.0, 50.0, 90.0, 99.0, 99.9, 99.99] {
                assert_eq!(
                    percentile_from_bins(&bins, pct),
                    stats.clat_ns.percentile(pct),
                    "{} p{pct}",
                    job.jobname
                );
            }
        }
        // With histograms, the combined read+write percentiles are exact.
        let s = out.group_summary(0).unwrap();
        assert!(s.clat.percentiles_exact);
        let (p_read, p_write) = (
            out.jobs[0].read.clat_ns.percentile(50.0).unwrap(),
            out.jobs[1].write.clat_ns.percentile(50.0).unwrap(),
        );
        let p = s.clat.p50_ns.unwrap();
        assert!(p >= p_read.min(p_write) && p <= p_read.max(p_write));
    }

    #[test]
    fn groups_are_summarised_separately() {
        let out = parse("groups.json");
        assert_eq!(out.group_ids(), vec![0, 1, 2]);
        let sums = out.summaries();
        assert_eq!(sums.len(), 3);
        assert_eq!(sums[0].jobnames, vec!["seqwrite"]);
        assert_eq!(sums[1].jobnames, vec!["randread2", "randread2"]);
        assert!(sums[0].read.is_none() && sums[0].write.is_some());
        assert!(sums[1].write.is_none());

        let g1: Vec<&FioJob> = out.jobs.iter().filter(|j| j.groupid == 1).collect();
        let r = sums[1].read.clone().unwrap();
        assert!(close(r.iops, g1[0].read.iops + g1[1].read.iops, 1e-12));
        assert_eq!(r.io_bytes, g1[0].read.io_bytes + g1[1].read.io_bytes);
        assert_eq!(
            r.slat.min_ns,
            g1[0].read.slat_ns.min.min(g1[1].read.slat_ns.min)
        );
        assert_eq!(
            r.clat.max_ns,
            g1[0].read.clat_ns.max.max(g1[1].read.clat_ns.max)
        );
        assert_eq!(
            r.clat.samples,
            g1[0].read.clat_ns.samples + g1[1].read.clat_ns.samples
        );
        #[allow(clippy::cast_precision_loss)]
        let mean = (g1[0].read.clat_ns.mean * g1[0].read.clat_ns.samples as f64
            + g1[1].read.clat_ns.mean * g1[1].read.clat_ns.samples as f64)
            / r.clat.samples as f64;
        assert!(close(r.clat.mean_ns, mean, 1e-9));
        assert!(r.clat.mean_ns >= r.clat.min_ns as f64);
        assert_eq!(sums[1].ctx, g1[0].ctx + g1[1].ctx);
        let (lo, hi) = (
            g1[0].sys_cpu.min(g1[1].sys_cpu),
            g1[0].sys_cpu.max(g1[1].sys_cpu),
        );
        assert!(sums[1].sys_cpu >= lo - 1e-9 && sums[1].sys_cpu <= hi + 1e-9);

        assert_eq!(out.last_group_summary().unwrap().groupid, 2);
        assert_eq!(out.summary_of_job("randread2").unwrap().groupid, 1);
        assert!(out.summary_of_job("nope").is_none());
    }

    #[test]
    fn libaio_and_psync_mixed_job() {
        let out = parse("libaio-psync.json");
        assert_eq!(out.jobs.len(), 2);
        let mixed = &out.jobs[1];
        assert_eq!(
            mixed.job_options.get("ioengine").map(String::as_str),
            Some("psync")
        );
        assert!(mixed.read.total_ios > 0 && mixed.write.total_ios > 0);
        // rwmixread=70: about 70% of the I/Os are reads.
        #[allow(clippy::cast_precision_loss)]
        let share =
            mixed.read.total_ios as f64 / (mixed.read.total_ios + mixed.write.total_ios) as f64;
        assert!((0.6..0.8).contains(&share), "read share {share}");
        // psync has no separate submission step: fio reports no slat samples for it.
        assert_eq!(mixed.read.slat_ns.samples, 0);
        assert!(out.jobs[0].read.slat_ns.samples > 0, "libaio has slat");
    }

    #[test]
    fn group_reporting_is_one_entry() {
        let out = parse("group-reporting.json");
        assert_eq!(out.jobs.len(), 1);
        assert_eq!(
            out.jobs[0].job_options.get("numjobs").map(String::as_str),
            Some("4")
        );
        let s = out.group_summary(0).unwrap();
        assert!(close(s.iops, out.jobs[0].read.iops, 1e-12));
        assert!(close(s.sys_cpu, out.jobs[0].sys_cpu, 1e-12));
    }

    /// CPU time and I/Os per CPU-second from fio's raw fields, for one group_reporting entry
    /// of four jobs and for two separate job entries.
    #[test]
    fn cpu_seconds_and_ios_per_cpu_second() {
        for (name, group) in [("group-reporting.json", 0), ("uring-randrw.json", 0)] {
            let raw: serde_json::Value = serde_json::from_slice(&fixture(name)).unwrap();
            let (mut cpu_ms, mut ios) = (0.0, 0.0);
            for j in raw["jobs"].as_array().unwrap() {
                let pct = j["usr_cpu"].as_f64().unwrap() + j["sys_cpu"].as_f64().unwrap();
                cpu_ms += pct / 100.0 * j["job_runtime"].as_f64().unwrap();
                for dir in ["read", "write", "trim"] {
                    ios += j[dir]["total_ios"].as_f64().unwrap();
                }
            }
            let s = parse(name).group_summary(group).unwrap();
            assert!(close(s.cpu_seconds(), cpu_ms / 1000.0, 1e-12), "{name}");
            let per_cpu = s.ios_per_cpu_second().unwrap();
            assert!(close(per_cpu, ios / (cpu_ms / 1000.0), 1e-12), "{name}");
        }
        // group_reporting: fio's job_runtime is already the sum over the four 1 s jobs.
        let gr = parse("group-reporting.json").group_summary(0).unwrap();
        assert!(
            (3900..4200).contains(&gr.job_runtime_ms),
            "{}",
            gr.job_runtime_ms
        );
        let idle = FioSummary::default();
        assert_eq!(idle.ios_per_cpu_second(), None);
    }

    #[test]
    fn total_latency_and_slat_percentiles() {
        let out = parse("slat-percentiles.json");
        let j = &out.jobs[0];
        let s = out.group_summary(0).unwrap();
        assert_eq!(s.lat.min_ns, j.read.lat_ns.min);
        assert!(close(s.lat.mean_ns, j.read.lat_ns.mean, 1e-12));
        // Total latency is submission plus completion latency, sample by sample.
        assert!(close(
            s.lat.mean_ns,
            j.read.slat_ns.mean + j.read.clat_ns.mean,
            1e-6
        ));
        assert_eq!(s.slat.p50_ns, j.read.slat_ns.percentile(50.0));
        assert_eq!(s.slat.p99_9_ns, j.read.slat_ns.percentile(99.9));
        assert!(s.slat.p99_ns.is_some() && s.slat.percentiles_exact);
        // Without slat_percentiles=1 fio prints none, and the summary says so.
        let plain = parse("normal-json.out").group_summary(0).unwrap();
        assert_eq!(plain.slat.p50_ns, None);
        assert!(plain.clat.p50_ns.is_some());
    }

    #[test]
    fn verify_pass_and_failure() {
        let pass = parse("verify-pass.json");
        assert_eq!(exit_status("verify-pass"), 0);
        assert!(pass.errors().is_empty());
        let j = &pass.jobs[0];
        // The verify phase reads back everything that was written.
        assert_eq!(j.read.io_bytes, j.write.io_bytes);
        assert_eq!(j.read.io_bytes, 8 << 20);

        let fail = parse("verify-fail.out");
        assert_eq!(exit_status("verify-fail"), 1);
        // fio printed its error line to stdout before the JSON report.
        assert!(
            fail.preamble
                .iter()
                .any(|l| l.starts_with("fio: pid=") && l.contains("err=84")),
            "{:?}",
            fail.preamble
        );
        assert_eq!(
            fail.errors(),
            vec![JobError {
                jobname: "verify-garbage".into(),
                error: 84
            }]
        );
        let s = fail.group_summary(0).unwrap();
        assert!(!s.ok());
        // fio stops at the first bad block.
        assert_eq!(s.read.unwrap().io_bytes, 4096);
    }

    /// Cross-checks the JSON against fio's own human-readable report printed in the same run.
    #[test]
    fn json_matches_fio_normal_text() {
        let raw = String::from_utf8(fixture("normal-json.out")).unwrap();
        let out = parse_fio_json(raw.as_bytes()).unwrap();
        assert!(out
            .preamble
            .iter()
            .any(|l| l.contains("Laying out IO file")));
        let r = &out.jobs[0].read;

        let line = |prefix: &str| {
            raw.lines()
                .map(str::trim_start)
                .find(|l| l.starts_with(prefix))
                .unwrap()
                .to_owned()
        };
        let field = |line: &str, key: &str| -> String {
            let rest = &line[line.find(key).unwrap() + key.len()..];
            rest.trim_start()
                .split([',', ' ', '%'])
                .next()
                .unwrap()
                .to_owned()
        };
        // "read: IOPS=74.8k, BW=..."
        let iops_text = field(&line("read: IOPS="), "IOPS=");
        let iops_text_val: f64 = match iops_text.strip_suffix('k') {
            Some(k) => k.parse::<f64>().unwrap() * 1000.0,
            None => iops_text.parse().unwrap(),
        };
        assert!(
            (r.iops - iops_text_val).abs() <= 50.0 + 0.001 * r.iops,
            "{iops_text} vs {}",
            r.iops
        );
        // "cpu          : usr=3.40%, sys=37.10%, ctx=4691, majf=0, minf=26"
        let cpu = line("cpu");
        let job = &out.jobs[0];
        assert!((field(&cpu, "usr=").parse::<f64>().unwrap() - job.usr_cpu).abs() < 0.006);
        assert!((field(&cpu, "sys=").parse::<f64>().unwrap() - job.sys_cpu).abs() < 0.006);
        assert_eq!(field(&cpu, "ctx=").parse::<u64>().unwrap(), job.ctx);
        // "slat (usec): min=2, max=4024, avg= 4.50, stdev=20.06" (unit varies with magnitude)
        let slat = line("slat (");
        let unit = match &slat[6..10] {
            "nsec" => 1.0,
            "usec" => 1e3,
            "msec" => 1e6,
            other => panic!("unit {other}"),
        };
        let avg: f64 = field(&slat, "avg=").parse().unwrap();
        assert!(
            (avg * unit - r.slat_ns.mean).abs() <= 0.006 * unit,
            "slat avg {avg} vs {}",
            r.slat_ns.mean
        );
        // "issued rwts: total=74920,0,0,0"
        let issued = line("issued rwts:");
        assert_eq!(
            field(&issued, "total=").parse::<u64>().unwrap(),
            r.total_ios
        );
    }

    #[test]
    fn tolerates_nan_unknown_fields_and_trailing_text() {
        let text = b"fio: some warning\n{\n \"fio version\" : \"fio-9.99\", \"new field\" : [1, {\"x\": nan}],\n \"jobs\" : [ { \"jobname\" : \"a-nan-job inf\", \"groupid\" : 3, \"error\" : 0,\n \"read\" : { \"iops\" : -nan, \"io_bytes\" : 4096, \"total_ios\": 1, \"runtime\" : 1,\n \"clat_ns\" : { \"min\" : 5, \"max\" : 7, \"mean\": 6.0, \"stddev\" : inf, \"N\" : 1,\n \"percentile\" : { \"99.000000\" : 7, \"50.000000\" : 6 } } },\n \"usr_cpu\" : 1.5 } ] }\ntrailing normal text {\n";
        let out = parse_fio_json(text).unwrap();
        assert_eq!(out.preamble, vec!["fio: some warning"]);
        assert_eq!(out.jobs[0].jobname, "a-nan-job inf");
        assert_eq!(out.jobs[0].groupid, 3);
        assert_eq!(out.jobs[0].read.iops, 0.0);
        assert_eq!(out.jobs[0].read.clat_ns.stddev, 0.0);
        assert_eq!(
            out.jobs[0].read.clat_ns.percentile,
            vec![(50.0, 6), (99.0, 7)]
        );
        assert_eq!(out.jobs[0].write, IoStats::default());
    }

    #[test]
    fn bad_input_gives_clear_errors() {
        let e = parse_fio_json(b"fio: failed to open /dev/pmem0: No such file or directory\n")
            .unwrap_err();
        assert!(matches!(e, FioParseError::NoJsonReport { .. }));
        assert!(e.to_string().contains("/dev/pmem0"), "{e}");
        let e = parse_fio_json(b"{\n \"jobs\" : [ { \"jobname\" : 5 } ] }").unwrap_err();
        assert!(
            matches!(e, FioParseError::MalformedJson { line: 2, .. }),
            "{e:?}"
        );
        let e = parse_fio_json(b"{ \"fio version\" : \"fio-3.33\", \"jobs\" : [] }").unwrap_err();
        assert!(matches!(e, FioParseError::NoJobs));
        let e = parse_fio_json(b"{ \"jobs\" : [ { \"jobname\" : \"x\",").unwrap_err();
        assert!(matches!(e, FioParseError::MalformedJson { .. }));
    }
}
