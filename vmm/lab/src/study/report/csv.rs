//! The CSV files: one row per run, one row per metric and side.

use std::fmt::Write as _;

use super::format::{csv_field, csv_number, csv_precise};
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

    /// One CSV row per metric and side: n (runs), mean and sd of the boots' means, the 95 %
    /// interval of their geometric mean (log scale), min, max; on the last side of an A/B
    /// experiment also the ratio with its 95 % interval, Welch's t, df and p-value over the
    /// boots' means, `significant` (p < 0.05) and, where those are missing, why; then the
    /// boots, the geometric mean and the within-boot sd.
    pub fn summary_csv(&self) -> String {
        let analysis = self.analyse();
        let mut out = String::from(
            "experiment,accelerator,performance,metric,side,n,mean,sd,ci95_low,ci95_high,min,max,\
             ratio,ratio_ci95_low,ratio_ci95_high,welch_t,welch_df,p_value,significant,not_tested,\
             boots,geo_mean,within_boot_sd\n",
        );
        let num = |v: Option<f64>| v.map(csv_number).unwrap_or_default();
        let precise = |v: Option<f64>| v.map(csv_precise).unwrap_or_default();
        for a in &analysis.metrics {
            for (i, (side, s)) in self.sides.iter().zip(&a.sides).enumerate() {
                let last = i + 1 == self.sides.len() && self.is_ab();
                let pick = |v: Option<f64>| if last { v } else { None };
                let welch = a.welch.filter(|_| last);
                let _ = writeln!(
                    out,
                    "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}",
                    csv_field(&self.experiment),
                    self.accelerator.name(),
                    self.accelerator.is_performance(),
                    a.metric.key(),
                    csv_field(side),
                    s.as_ref().map_or(0, |s| s.n),
                    num(s.as_ref().map(|s| s.mean)),
                    num(s.as_ref().and_then(|s| s.stddev)),
                    num(s.as_ref().and_then(|s| s.ci95).map(|c| c.low)),
                    num(s.as_ref().and_then(|s| s.ci95).map(|c| c.high)),
                    num(s.as_ref().map(|s| s.min)),
                    num(s.as_ref().map(|s| s.max)),
                    precise(pick(a.ratio)),
                    precise(pick(a.ratio_ci95.map(|c| c.low))),
                    precise(pick(a.ratio_ci95.map(|c| c.high))),
                    precise(welch.map(|w| w.t)),
                    precise(welch.map(|w| w.df)),
                    precise(welch.map(|w| w.p)),
                    if last {
                        a.significant.map(|b| b.to_string()).unwrap_or_default()
                    } else {
                        String::new()
                    },
                    if last {
                        csv_field(a.not_tested.as_deref().unwrap_or_default())
                    } else {
                        String::new()
                    },
                    s.as_ref().map_or(0, |s| s.boots),
                    num(s.as_ref().and_then(|s| s.geo_mean)),
                    num(s.as_ref().and_then(|s| s.within_boot_sd)),
                );
            }
        }
        out
    }

    /// Upstream's posted runs, one row per post, metric, side and run, with the post's citation;
    /// rows only for the sides that are the thread's ([`BenchReport::thread_side`]).
    pub fn upstream_csv(&self) -> String {
        let mut out = String::from(
            "experiment,source,subject,author,date,message_id,metric,side,run,value\n",
        );
        for f in &self.upstream.figures {
            let Some(src) = self.upstream.sources.iter().find(|s| s.label == f.source) else {
                continue;
            };
            // Only beside the sides that are the thread's, from the thread's side each repeats.
            for (i, side) in self.sides.iter().enumerate() {
                let Some(thread) = self.thread_side(i) else {
                    continue;
                };
                for (run, v) in f.runs(thread.index()).iter().enumerate() {
                    let _ = writeln!(
                        out,
                        "{},{},{},{},{},{},{},{},{},{}",
                        csv_field(&self.experiment),
                        csv_field(&src.label),
                        csv_field(&src.subject),
                        csv_field(&src.author),
                        csv_field(src.date.as_deref().unwrap_or_default()),
                        csv_field(src.message_id.as_deref().unwrap_or_default()),
                        f.metric.key(),
                        csv_field(side),
                        run + 1,
                        csv_precise(*v),
                    );
                }
            }
        }
        out
    }
}
