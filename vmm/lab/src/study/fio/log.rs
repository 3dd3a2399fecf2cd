//! fio's per-second IOPS and bandwidth logs (`write_iops_log`, `write_bw_log` with
//! `log_avg_msec`), summed over the jobs into one time series per phase.
//!
//! Every measured phase's job asks fio 3.33 for them ([`LOG_OPTIONS`]): with `per_job_logs=0`
//! all jobs write to one file, `<name>_iops.log` and `<name>_bw.log`, and fio appends each job's
//! whole log at the job's end under a file lock, so the file is the jobs' series one after the
//! other. A line is `time_ms, value, ddir, bs, offset` (fio 3.33; older versions print four
//! fields): `time_ms` the end of the averaging window since the job started, `value` the IOPS
//! or the bandwidth in KiB/s averaged over the window since the previous line.
//!
//! [`parse_log`] splits the file into one stream per job and direction (a time that does not
//! increase starts the next job's stream), spreads each line's value over the window it covers
//! (from the previous line of its stream; the first line covers one period) and sums the
//! streams per period: point `i` is the rate over `(i·P, (i+1)·P]` ms, P = `log_avg_msec`. A
//! window fio did not log (its helper thread was late) is covered by the next line's longer
//! window. The leading points every started stream covers in full are
//! [`Series::complete`]; after them some job's log had ended — the job finished (a size-bound
//! fill's tail) or its last window was not logged — so those points are partial.
//!
//! The files come from the guest: the parser bounds their size, the number of lines, streams
//! and points, and never panics on what it reads.

use serde::{Deserialize, Serialize};

/// `log_avg_msec` of every measured phase: one point per second.
pub const LOG_PERIOD_MS: u32 = 1000;
/// The largest log file read, bytes (48 jobs × 3600 s take about 4 MiB).
pub const MAX_LOG_BYTES: usize = 64 << 20;
/// The most points (periods) of one series: a day of seconds.
pub const MAX_POINTS: usize = 86_400;
/// The most streams (jobs × directions) of one file.
pub const MAX_STREAMS: usize = 4096;
/// The most period visits while spreading the windows, a bound on the work a file can ask for.
const MAX_WORK: usize = 32 << 20;
/// Share of a period a job's log may miss at its end and still cover the period in full
/// (fio's windows end a few ms early or late: 3999, 4002).
const COVER_TOLERANCE: f64 = 0.05;

/// The job-file lines that ask fio for the logs and percentiles of a phase whose files are
/// `/tmp/<prefix>_iops.log` and `/tmp/<prefix>_bw.log`.
pub fn log_options(prefix: &str) -> String {
    format!(
        "write_iops_log={prefix}\nwrite_bw_log={prefix}\nlog_avg_msec={LOG_PERIOD_MS}\n\
         per_job_logs=0\nslat_percentiles=1\nclat_percentiles=1\nlat_percentiles=1\n"
    )
}

/// The options [`log_options`] adds, for the plan's deviation.
pub const LOG_OPTIONS: &str = "write_iops_log, write_bw_log, log_avg_msec=1000, per_job_logs=0, \
                               slat_percentiles=1, clat_percentiles=1, lat_percentiles=1";

/// Errors reading one fio log file.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FioLogError {
    /// The file is larger than [`MAX_LOG_BYTES`].
    #[error("fio's log is {bytes} bytes, more than the {max} bytes pmemvm reads")]
    TooLarge {
        /// Its size.
        bytes: usize,
        /// The limit.
        max: usize,
    },
    /// A line is not `time, value[, ddir, ...]` with whole numbers.
    #[error("line {line} of fio's log is not \"time_ms, value, ddir, ...\": {text:?}")]
    BadLine {
        /// 1-based line number.
        line: usize,
        /// The line, cut to 80 characters.
        text: String,
    },
    /// The log names a time beyond [`MAX_POINTS`] periods.
    #[error("fio's log reaches {ms} ms, beyond the {max} s of one series pmemvm keeps")]
    TooLong {
        /// The time.
        ms: u64,
        /// The limit, seconds at one point a second.
        max: usize,
    },
    /// More than [`MAX_STREAMS`] job streams, or more work than the bound allows.
    #[error("fio's log has more job series than pmemvm reads ({max} at most)")]
    TooManyStreams {
        /// The limit.
        max: usize,
    },
    /// The guest sent one of a phase's two logs only.
    #[error("the guest sent fio's {sent} log of the phase but not its {missing} log")]
    MissingFile {
        /// The log that came.
        sent: &'static str,
        /// The log that did not.
        missing: &'static str,
    },
}

/// One metric of a phase per period, summed over its jobs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Series {
    /// Milliseconds per point (`log_avg_msec`).
    pub period_ms: u32,
    /// Point `i`: the rate over `(i·period, (i+1)·period]` ms since the jobs started.
    pub values: Vec<f64>,
    /// Job streams (jobs × directions) found in the log.
    pub streams: u32,
    /// The leading points every started stream covers in full; the rest are partial.
    pub complete: usize,
}

impl Series {
    /// The mean of the complete points (`None` without any).
    pub fn complete_mean(&self) -> Option<f64> {
        let v = self.values.get(..self.complete)?;
        #[allow(clippy::cast_precision_loss)]
        let n = v.len() as f64;
        (!v.is_empty()).then(|| v.iter().sum::<f64>() / n)
    }
}

/// A phase's IOPS and bandwidth over time, as `report.json` keeps them per run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PhaseSeries {
    /// IOPS, all directions.
    pub iops: Series,
    /// Bandwidth, MiB/s, all directions.
    pub bw_mib_s: Series,
}

/// One job's samples of one direction, in time order.
#[derive(Debug, Default)]
struct Stream {
    samples: Vec<(u64, f64)>,
}

/// Parses one log file: the sum over the jobs per period of `period_ms`, every value multiplied
/// by `scale` (1 for IOPS, 1/1024 for KiB/s → MiB/s). A log without samples (a job shorter than
/// one period) is a series without points.
pub fn parse_log(bytes: &[u8], period_ms: u32, scale: f64) -> Result<Series, FioLogError> {
    if bytes.len() > MAX_LOG_BYTES {
        return Err(FioLogError::TooLarge {
            bytes: bytes.len(),
            max: MAX_LOG_BYTES,
        });
    }
    let period = u64::from(period_ms.max(1));
    let max_ms = period.saturating_mul(MAX_POINTS as u64);
    let text = String::from_utf8_lossy(bytes);
    let mut streams: Vec<Stream> = Vec::new();
    // The stream each direction appends to now.
    let mut open: Vec<(u32, usize)> = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let (t, v, ddir) = parse_line(line).ok_or_else(|| FioLogError::BadLine {
            line: i + 1,
            text: line.chars().take(80).collect(),
        })?;
        if t > max_ms {
            return Err(FioLogError::TooLong {
                ms: t,
                max: MAX_POINTS,
            });
        }
        let current = open.iter().find(|(d, _)| *d == ddir).map(|&(_, s)| s);
        let continues = current
            .and_then(|s| streams.get(s))
            .and_then(|s| s.samples.last())
            .is_some_and(|&(last, _)| t > last);
        let index = match (current, continues) {
            (Some(s), true) => s,
            _ => {
                if streams.len() >= MAX_STREAMS {
                    return Err(FioLogError::TooManyStreams { max: MAX_STREAMS });
                }
                streams.push(Stream::default());
                let s = streams.len() - 1;
                open.retain(|(d, _)| *d != ddir);
                open.push((ddir, s));
                s
            }
        };
        if let Some(s) = streams.get_mut(index) {
            s.samples.push((t, v * scale));
        }
    }
    spread(&streams, period, period_ms)
}

/// `time, value[, ddir[, ...]]` as whole numbers.
fn parse_line(line: &str) -> Option<(u64, f64, u32)> {
    let mut fields = line.split(',').map(str::trim);
    let t: u64 = fields.next()?.parse().ok()?;
    let v: u64 = fields.next()?.parse().ok()?;
    let ddir: u32 = match fields.next() {
        Some(d) => d.parse().ok()?,
        None => 0,
    };
    #[allow(clippy::cast_precision_loss)]
    Some((t, v as f64, ddir))
}

/// Spreads every stream's windows over the periods and sums them.
fn spread(streams: &[Stream], period: u64, period_ms: u32) -> Result<Series, FioLogError> {
    #[allow(clippy::cast_precision_loss)]
    let p = period as f64;
    let end = streams
        .iter()
        .filter_map(|s| s.samples.last().map(|&(t, _)| t))
        .max()
        .unwrap_or(0);
    let points = usize::try_from(end.div_ceil(period))
        .unwrap_or(MAX_POINTS)
        .min(MAX_POINTS);
    let mut values = vec![0.0; points];
    let mut work = 0usize;
    // (start, end) of each stream's cover, ms.
    let mut covers = Vec::with_capacity(streams.len());
    for s in streams {
        let Some(&(first, _)) = s.samples.first() else {
            continue;
        };
        let mut from = first.saturating_sub(period);
        covers.push((from, s.samples.last().map_or(first, |&(t, _)| t)));
        for &(to, v) in &s.samples {
            // Periods k with (k·P, (k+1)·P] overlapping (from, to].
            let (k0, k1) = (from / period, to.div_ceil(period));
            for k in k0..k1 {
                work += 1;
                if work > MAX_WORK {
                    return Err(FioLogError::TooManyStreams { max: MAX_STREAMS });
                }
                let (lo, hi) = (k * period, (k + 1) * period);
                let overlap = to.min(hi).saturating_sub(from.max(lo));
                if let Some(slot) = usize::try_from(k).ok().and_then(|k| values.get_mut(k)) {
                    #[allow(clippy::cast_precision_loss)]
                    let share = overlap as f64 / p;
                    *slot += v * share;
                }
            }
            from = to;
        }
    }
    let tol = p * COVER_TOLERANCE;
    let complete = (0..points)
        .take_while(|&k| {
            #[allow(clippy::cast_precision_loss)]
            let (lo, hi) = (k as f64 * p, (k + 1) as f64 * p);
            covers.iter().all(|&(start, stop)| {
                #[allow(clippy::cast_precision_loss)]
                let (start, stop) = (start as f64, stop as f64);
                start > lo + tol || stop >= hi - tol
            })
        })
        .count();
    Ok(Series {
        period_ms,
        values,
        streams: u32::try_from(streams.len()).unwrap_or(u32::MAX),
        complete,
    })
}

/// The IOPS and bandwidth series of a phase from its two log files (`None` when the guest sent
/// neither: a job without the logs, or an image older than them).
pub fn phase_series(
    iops_log: Option<&[u8]>,
    bw_log: Option<&[u8]>,
) -> Option<Result<PhaseSeries, FioLogError>> {
    let missing = |sent, missing| Some(Err(FioLogError::MissingFile { sent, missing }));
    let (iops, bw) = match (iops_log, bw_log) {
        (None, None) => return None,
        (Some(_), None) => return missing("IOPS", "bandwidth"),
        (None, Some(_)) => return missing("bandwidth", "IOPS"),
        (Some(i), Some(b)) => (i, b),
    };
    Some((|| {
        Ok(PhaseSeries {
            iops: parse_log(iops, LOG_PERIOD_MS, 1.0)?,
            bw_mib_s: parse_log(bw, LOG_PERIOD_MS, 1.0 / 1024.0)?,
        })
    })())
}

#[cfg(test)]
mod tests;
