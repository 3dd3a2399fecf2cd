//! The analysis of a report: per metric and side, the figures over the good runs, and the
//! comparison of the sides.
//!
//! Per side ([`SideStats`]): n, mean, min, max, sample standard deviation and the 95 %
//! confidence interval of the mean (Student t, [`crate::inference::Described`]). Per metric of
//! an A/B experiment ([`MetricAnalysis`]): the ratio of the means (last side over first, on/off)
//! with its 95 % interval by the delta method on the log ratio, and Welch's t-test p-value
//! ([`crate::inference`] says how each is computed). Where a side has fewer than two runs, no
//! spread or a mean ≤ 0, [`MetricAnalysis::not_tested`] says why instead of a number. The same
//! analysis is applied to upstream's posted runs ([`UpstreamAnalysis`]).

use serde::{Deserialize, Serialize};

use super::upstream::UpstreamAnalysis;
use super::{BenchReport, Metric, RunRecord};
use crate::inference::{self, Described, InferenceError, Interval, Welch, CONFIDENCE};

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
    /// Sample standard deviation; `None` with fewer than two runs.
    pub stddev: Option<f64>,
    /// 95 % confidence interval of the mean (Student t); `None` with fewer than two runs.
    pub ci95: Option<Interval>,
}

impl SideStats {
    fn of(side: &str, values: &[f64]) -> Option<(Self, Described)> {
        let d = Described::of(values, CONFIDENCE).ok()?;
        let stats = Self {
            side: side.to_owned(),
            n: d.n,
            mean: d.mean,
            min: values.iter().copied().fold(f64::INFINITY, f64::min),
            max: values.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            stddev: d.sd,
            ci95: d.ci,
        };
        Some((stats, d))
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
    /// 95 % interval of that ratio (delta method on the log ratio).
    pub ratio_ci95: Option<Interval>,
    /// Welch's t-test of the last side against the first.
    pub welch: Option<Welch>,
    /// `Some(p < 0.05)` where the test was possible.
    pub significant: Option<bool>,
    /// Why the interval or the test is missing on an A/B experiment, in a few words.
    pub not_tested: Option<String>,
    /// Upstream's runs of this metric beside the sides that are the thread's, per post that
    /// reported it (empty when no side is).
    pub upstream: Vec<UpstreamAnalysis>,
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

/// Few words for the report on why a statistic is missing.
fn reason(e: &InferenceError, sides: &[&str; 2], described: [&Described; 2]) -> String {
    match e {
        InferenceError::TooFewRuns { .. } => {
            let short: Vec<String> = sides
                .iter()
                .zip(described)
                .filter(|(_, d)| d.n < 2)
                .map(|(s, d)| format!("n={} {s}", d.n))
                .collect();
            short.join(" and ")
        }
        InferenceError::NoSpread => "no spread".to_owned(),
        InferenceError::NonPositiveMean { .. } => "mean <= 0".to_owned(),
        other => other.to_string(),
    }
}

impl BenchReport {
    pub(super) fn is_ab(&self) -> bool {
        self.sides.len() == 2
    }

    /// Per metric and side: n, mean, spread and interval; per metric of an A/B experiment: the
    /// ratio with its interval and Welch's test; upstream's runs analysed the same way.
    pub fn analyse(&self) -> Analysis {
        let metrics = Metric::ALL
            .iter()
            .map(|&metric| self.analyse_metric(metric))
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

    fn analyse_metric(&self, metric: Metric) -> MetricAnalysis {
        let (sides, described): (Vec<Option<SideStats>>, Vec<Option<Described>>) = self
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
                SideStats::of(side, &values).unzip()
            })
            .unzip();
        let mut a = MetricAnalysis {
            metric,
            sides,
            ratio: None,
            ratio_ci95: None,
            welch: None,
            significant: None,
            not_tested: None,
            upstream: self
                .upstream
                .of(metric)
                .into_iter()
                .filter_map(|f| UpstreamAnalysis::beside(f, &self.thread_side_map()))
                .collect(),
        };
        if !self.is_ab() {
            return a;
        }
        let labels = [self.sides[0].as_str(), self.sides[1].as_str()];
        match described.as_slice() {
            [Some(off), Some(on)] => {
                a.ratio = (off.mean != 0.0).then(|| on.mean / off.mean);
                let mut why = Vec::new();
                match inference::ratio_ci(on, off, CONFIDENCE) {
                    Ok(r) => a.ratio_ci95 = Some(r.ci),
                    Err(e) => why.push(reason(&e, &labels, [off, on])),
                }
                match inference::welch(off, on) {
                    Ok(w) => {
                        a.significant = Some(w.significant());
                        a.welch = Some(w);
                    }
                    Err(e) => why.push(reason(&e, &labels, [off, on])),
                }
                why.dedup();
                a.not_tested = (!why.is_empty()).then(|| why.join("; "));
            }
            [off, on] => {
                let missing: Vec<&str> = labels
                    .iter()
                    .zip([off, on])
                    .filter(|(_, d)| d.is_none())
                    .map(|(l, _)| *l)
                    .collect();
                a.not_tested = Some(format!("no data on {}", missing.join(" and ")));
            }
            _ => {}
        }
        a
    }
}
