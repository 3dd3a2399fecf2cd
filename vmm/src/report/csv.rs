//! The CSV files: one row per run, one row per metric and side.

use std::fmt::Write as _;

use super::format::{csv_field, csv_number};
use super::{BenchReport, Metric, RunOutcome};

impl BenchReport {
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
}
