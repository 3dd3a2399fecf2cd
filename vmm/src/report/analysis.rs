//! The analysis of a report: per metric and side, the figures over the good runs, and the
//! comparison of the sides.

use serde::{Deserialize, Serialize};

use super::{BenchReport, Metric, RunRecord, UpstreamFigure};

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

impl BenchReport {
    pub(super) fn is_ab(&self) -> bool {
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
}
