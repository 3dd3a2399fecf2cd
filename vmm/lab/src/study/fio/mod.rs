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

pub mod log;
mod summary;
pub use log::{PhaseSeries, Series};
#[cfg(test)]
use summary::percentile_from_bins;
pub use summary::*;

#[cfg(test)]
mod tests;
