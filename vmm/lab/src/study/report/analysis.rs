//! The analysis of a report: per metric and side, the figures over the good runs, and the
//! comparison of the sides.
//!
//! The unit is the boot: the runs of one boot are not independent samples of the side, so the
//! side's samples are its boots' means. Per side ([`SideStats`]): runs and boots, the mean and
//! sample standard deviation of the boot means, the 95 % confidence interval of their
//! geometric mean on the log scale (never below zero), min and max over the runs, and the
//! spread of the runs within their boots, labelled as such. Per metric of an A/B experiment
//! ([`MetricAnalysis`]): the ratio of the means (last side over first, on/off) with its 95 %
//! interval by the delta method on the log ratio, and Welch's t-test p-value, both over the
//! boot means ([`crate::study::inference`] says how each is computed); with one boot per side there is
//! neither ([`ONE_BOOT`]). Where a side has fewer than two runs, no
//! spread or a mean ≤ 0, [`MetricAnalysis::not_tested`] says why instead of a number. The same
//! analysis is applied to upstream's posted runs ([`UpstreamAnalysis`]).

use serde::{Deserialize, Serialize};

use super::upstream::UpstreamAnalysis;
use super::{BenchReport, Metric};
use crate::study::inference::{self, Described, InferenceError, Interval, Welch, CONFIDENCE};

/// Statistics of one metric on one side over the successful runs. The boot is the unit: the
/// runs of one boot (the thread's three randreads in one module load) share its kernel, its
/// memory layout and its host state, so they are not independent samples of the side; the
/// side's samples are its boots' means.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SideStats {
    /// Side label.
    pub side: String,
    /// Runs with a value.
    pub n: usize,
    /// Boots with a value: the samples of the side's mean, interval and test.
    #[serde(default)]
    pub boots: usize,
    /// Mean of the boots' means (the mean of the runs when each boot has as many).
    pub mean: f64,
    /// Smallest run.
    pub min: f64,
    /// Largest run.
    pub max: f64,
    /// Sample standard deviation of the boots' means; `None` with fewer than two boots.
    pub stddev: Option<f64>,
    /// 95 % confidence interval of the boots' geometric mean, on the log scale
    /// ([`crate::study::inference::log_interval`]: never below zero); `None` with fewer than two
    /// boots or a boot mean ≤ 0.
    pub ci95: Option<Interval>,
    /// Geometric mean of the boots' means, where they are positive and at least two.
    #[serde(default)]
    pub geo_mean: Option<f64>,
    /// Standard deviation of the runs within their boots (pooled over the boots with two runs
    /// or more): how much one boot's runs scatter, not an uncertainty of the side.
    #[serde(default)]
    pub within_boot_sd: Option<f64>,
}

/// Pooled within-group standard deviation: √(Σ (n_b − 1) s_b² / Σ (n_b − 1)) over the groups
/// of two values or more.
fn pooled_sd(groups: &[Vec<f64>]) -> Option<f64> {
    let (mut ss, mut df) = (0.0, 0usize);
    for g in groups.iter().filter(|g| g.len() >= 2) {
        #[allow(clippy::cast_precision_loss)]
        let mean = g.iter().sum::<f64>() / g.len() as f64;
        ss += g.iter().map(|v| (v - mean).powi(2)).sum::<f64>();
        df += g.len() - 1;
    }
    #[allow(clippy::cast_precision_loss)]
    (df > 0).then(|| (ss / df as f64).sqrt())
}

impl SideStats {
    /// `by_boot`: the values of each boot, one vector per boot with a value.
    fn of(side: &str, by_boot: &[Vec<f64>]) -> Option<(Self, Described)> {
        #[allow(clippy::cast_precision_loss)]
        let means: Vec<f64> = by_boot
            .iter()
            .map(|g| g.iter().sum::<f64>() / g.len() as f64)
            .collect();
        let d = Described::of(&means, CONFIDENCE).ok()?;
        let runs = by_boot.iter().flatten().copied();
        let log = inference::log_interval(&means, CONFIDENCE).ok();
        let stats = Self {
            side: side.to_owned(),
            n: by_boot.iter().map(Vec::len).sum(),
            boots: d.n,
            mean: d.mean,
            min: runs.clone().fold(f64::INFINITY, f64::min),
            max: runs.fold(f64::NEG_INFINITY, f64::max),
            stddev: d.sd,
            ci95: log.map(|l| l.ci),
            geo_mean: log.map(|l| l.geo_mean),
            within_boot_sd: pooled_sd(by_boot),
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

/// What the report says when every side has one boot.
pub const ONE_BOOT: &str = "n = 1 boot per side: no confidence interval or test across boots";

/// Few words for the report on why a statistic is missing.
fn reason(e: &InferenceError, sides: &[&str; 2], described: [&Described; 2]) -> String {
    match e {
        InferenceError::TooFewRuns { .. } if described.iter().all(|d| d.n == 1) => {
            ONE_BOOT.to_owned()
        }
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

    /// The metric's values on `side` over the good runs, one vector per boot in boot order.
    /// A run that did not record its boot (results written before it was) is a boot of its
    /// own, as every run was then.
    fn values_by_boot(&self, side: &str, metric: Metric) -> Vec<Vec<f64>> {
        let mut by_boot: std::collections::BTreeMap<(u32, u32), Vec<f64>> = Default::default();
        for r in self.runs.iter().filter(|r| r.side == side) {
            if let Some(v) = r.good_summary().and_then(|s| metric.value(s)) {
                let key = if r.boot == 0 { (0, r.run) } else { (r.boot, 0) };
                by_boot.entry(key).or_default().push(v);
            }
        }
        by_boot.into_values().collect()
    }

    /// Whether no side of any metric has two boots: the report then has no interval and no
    /// test across boots anywhere.
    pub(super) fn one_boot_per_side(analysis: &Analysis) -> bool {
        analysis
            .metrics
            .iter()
            .flat_map(|m| m.sides.iter().flatten())
            .all(|s| s.boots < 2)
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
            .map(|side| SideStats::of(side, &self.values_by_boot(side, metric)).unzip())
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
