//! The terminal report (`report.txt`): header, per-run tables (throughput and CPU; latencies),
//! fio's own lines in upstream's shape, the summary per side, the comparison of the sides and
//! upstream's posted runs with their citations.

use std::fmt::Write as _;

use super::analysis::{Analysis, MetricAnalysis, ONE_BOOT};
use super::format::{fio_bw, human_bytes, p_text, ratio_text, si, table};
use super::metric::MetricGroup;
use super::upstream::UpstreamAnalysis;
use super::{BenchReport, Metric, RunOutcome, FUNCTIONAL_ONLY};
use crate::study::inference::Interval;

const NONE: &str = "-";
/// Printed instead of a spread or an interval with fewer than two boots.
const ONE_RUN: &str = "n<2";
/// Printed instead of a log-scale interval when a boot's mean is not positive.
const NOT_POSITIVE: &str = "value<=0";

fn interval_text(m: Metric, ci: &Interval) -> String {
    format!("[{}, {}]", m.format(ci.low), m.format(ci.high))
}

fn ratio_interval_text(ci: &Interval) -> String {
    format!("[{}, {}]", ratio_text(ci.low), ratio_text(ci.high))
}

fn runs_text(m: Metric, runs: &[f64]) -> String {
    if runs.is_empty() {
        return NONE.to_owned();
    }
    runs.iter()
        .map(|&v| m.format(v))
        .collect::<Vec<_>>()
        .join(" ")
}

impl BenchReport {
    pub(super) fn headline(&self) -> String {
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

    pub(super) fn engine_line(&self) -> String {
        format!(
            "engine {}, accelerator {}",
            self.engine,
            self.accelerator.name()
        )
    }

    /// The terminal report.
    pub fn render_text(&self) -> String {
        let analysis = self.analyse();
        let mut out = self.headline();
        let h = &self.host;
        let nvdimm = h
            .nvdimm_bytes
            .map_or_else(|| "none".to_owned(), human_bytes);
        let device = h.pmem_device.label();
        let _ = writeln!(
            out,
            "host: {} ({} CPUs, Linux {}); guest: {} vCPUs, {} MiB, {device} {nvdimm}; fio jobs: {}",
            h.identity.cpu_model,
            h.identity.host_cpus,
            h.identity.host_kernel,
            h.guest_vcpus,
            h.guest_mem_mib,
            h.jobs
        );
        let _ = writeln!(
            out,
            "runs: {} of {} produced figures\n",
            analysis.good_runs, analysis.total_runs
        );
        out.push_str("Runs\n");
        out.push_str(&self.runs_table(MetricGroup::Throughput));
        out.push_str("\nLatency per run (us)\n");
        out.push_str(&self.runs_table(MetricGroup::Latency));
        out.push_str("\nfio lines (grep IOPS|slat|cpu, upstream's shape)\n");
        out.push_str(&self.fio_lines());
        let one_boot = Self::one_boot_per_side(&analysis);
        out.push_str(
            "\nSummary per side (good runs; the unit is the boot: mean and sd over the boots' \
             means; 95% CI: of the boots' geometric mean, Student t on the log scale; \
             within-boot sd: the spread of one boot's runs, not an uncertainty of the side)\n",
        );
        out.push_str(&self.summary_table(&analysis));
        if one_boot {
            let _ = writeln!(out, "{ONE_BOOT}.");
        }
        if self.is_ab() {
            if one_boot {
                let _ = writeln!(
                    out,
                    "\nComparison {}/{} (ratio of the means; {ONE_BOOT})",
                    self.sides[1], self.sides[0]
                );
            } else {
                let _ = writeln!(
                    out,
                    "\nComparison {}/{} (ratio of the means over the boots; 95% CI: delta method \
                     on the log ratio; p: Welch's t-test on the boots' means, not significant at \
                     p >= 0.05)",
                    self.sides[1], self.sides[0]
                );
            }
            out.push_str(&self.comparison_table(&analysis, one_boot));
        }
        out.push_str(&self.upstream_section(&analysis));
        out.push_str(&self.provenance_sections());
        out.push_str(&self.machine_section());
        if !self.accelerator.is_performance() {
            let _ = writeln!(
                out,
                "note: measured under {}: {FUNCTIONAL_ONLY}; no performance conclusion can be drawn \
                 from these figures.",
                self.accelerator.name()
            );
        }
        out
    }

    /// One row per run with the metrics of `group`; latency columns without any value are left
    /// out and named below the table.
    fn runs_table(&self, group: MetricGroup) -> String {
        let metrics: Vec<Metric> = Metric::ALL
            .iter()
            .copied()
            .filter(|m| m.group() == group)
            .collect();
        let value = |m: Metric, outcome: &RunOutcome| match outcome {
            RunOutcome::Ok { summary } => m.value(summary),
            RunOutcome::Failed { .. } => None,
        };
        let (shown, empty): (Vec<Metric>, Vec<Metric>) = metrics.iter().partition(|&&m| {
            group == MetricGroup::Throughput
                || self.runs.iter().any(|r| value(m, &r.outcome).is_some())
        });
        let label = |m: Metric| match group {
            MetricGroup::Throughput => m.label(),
            MetricGroup::Latency => m.short_label(),
        };
        let mut header: Vec<String> = vec!["side".into(), "run".into()];
        header.extend(shown.iter().map(|&m| label(m).to_owned()));
        if group == MetricGroup::Throughput {
            header.push("status".into());
        }
        let mut rows = vec![header];
        for r in &self.runs {
            let mut row = vec![r.side.clone(), r.run.to_string()];
            for &m in &shown {
                row.push(value(m, &r.outcome).map_or_else(|| NONE.to_owned(), |v| m.format(v)));
            }
            if group == MetricGroup::Throughput {
                row.push(r.status());
            }
            rows.push(row);
        }
        let mut out = if shown.is_empty() {
            String::new()
        } else {
            table(&rows, 2)
        };
        if !empty.is_empty() {
            let names: Vec<&str> = empty.iter().map(|&m| label(m)).collect();
            let _ = writeln!(out, "no run reported: {}", names.join(", "));
        }
        out
    }

    /// fio's own lines, as upstream showed them with `grep IOPS|slat|cpu *.fio | column -t`.
    fn fio_lines(&self) -> String {
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
        table(&lines, 2)
    }

    /// One row per metric and side; metrics without any value are named below the table.
    fn summary_table(&self, analysis: &Analysis) -> String {
        let mut rows = vec![[
            "metric",
            "side",
            "boots",
            "runs",
            "mean",
            "sd",
            "95% CI",
            "within-boot sd",
            "min-max",
        ]
        .map(str::to_owned)
        .to_vec()];
        let mut empty = Vec::new();
        for a in &analysis.metrics {
            if a.sides.iter().all(Option::is_none) {
                empty.push(a.metric.label());
                continue;
            }
            let m = a.metric;
            for (side, s) in self.sides.iter().zip(&a.sides) {
                let mut row = vec![m.label().to_owned(), side.clone()];
                match s {
                    None => {
                        row.extend(["0", "0", NONE, NONE, NONE, NONE, NONE].map(str::to_owned));
                    }
                    Some(s) => {
                        row.push(s.boots.to_string());
                        row.push(s.n.to_string());
                        row.push(m.format(s.mean));
                        row.push(s.stddev.map_or_else(|| ONE_RUN.to_owned(), |v| m.format(v)));
                        row.push(match (s.ci95, s.boots) {
                            (Some(ci), _) => interval_text(m, &ci),
                            (None, b) if b < 2 => ONE_RUN.to_owned(),
                            (None, _) => NOT_POSITIVE.to_owned(),
                        });
                        row.push(
                            s.within_boot_sd
                                .map_or_else(|| NONE.to_owned(), |v| m.format(v)),
                        );
                        row.push(if s.n == 1 {
                            m.format(s.min)
                        } else {
                            format!("{}-{}", m.format(s.min), m.format(s.max))
                        });
                    }
                }
                rows.push(row);
            }
        }
        let mut out = table(&rows, 2);
        if !empty.is_empty() {
            let _ = writeln!(out, "no run reported: {}", empty.join(", "));
        }
        out
    }

    /// One row per metric with data: our ratio, its interval, Welch's p and the verdict, then
    /// upstream's ratio per post.
    fn comparison_table(&self, analysis: &Analysis, one_boot: bool) -> String {
        let sources: Vec<&str> = self
            .upstream
            .sources
            .iter()
            .map(|s| s.label.as_str())
            .filter(|label| analysis.metrics.iter().any(|a| has_source(a, label)))
            .collect();
        let pair = format!("{}/{}", self.sides[1], self.sides[0]);
        // With one boot per side there is no interval, p or verdict to show.
        let ours: &[&str] = if one_boot {
            &["metric", &pair]
        } else {
            &["metric", &pair, "95% CI", "p", "verdict"]
        };
        let mut header: Vec<String> = ours.iter().map(|h| (*h).to_owned()).collect();
        header.extend(sources.iter().map(|s| format!("{s} {pair}")));
        let mut rows = vec![header];
        for a in &analysis.metrics {
            if a.sides.iter().all(Option::is_none) {
                continue;
            }
            let mut row = vec![
                a.metric.label().to_owned(),
                a.ratio.map_or_else(|| NONE.to_owned(), ratio_text),
            ];
            if !one_boot {
                row.extend([
                    a.ratio_ci95
                        .as_ref()
                        .map_or_else(|| NONE.to_owned(), ratio_interval_text),
                    a.welch
                        .as_ref()
                        .map_or_else(|| NONE.to_owned(), |w| p_text(w.p)),
                    verdict(a),
                ]);
            }
            for label in &sources {
                row.push(
                    a.upstream
                        .iter()
                        .find(|u| u.source == *label)
                        .and_then(|u| u.ratio)
                        .map_or_else(|| NONE.to_owned(), ratio_text),
                );
            }
            rows.push(row);
        }
        table(&rows, 2)
    }

    /// Upstream's posts (citation, how they ran) and every run they posted.
    fn upstream_section(&self, analysis: &Analysis) -> String {
        let mut out = String::new();
        if self.upstream.sources.is_empty() && self.upstream_source.is_empty() {
            return out;
        }
        out.push_str("\nUpstream\n");
        if !self.upstream_source.is_empty() {
            let _ = writeln!(out, "{}", self.upstream_source);
        }
        for s in &self.upstream.sources {
            let _ = writeln!(out, "{}", s.citation());
            if !s.how.is_empty() {
                let _ = writeln!(out, "  {}: {}", s.label, s.how);
            }
        }
        let thread = self.thread_side_map();
        let beside: Vec<(usize, super::ThreadSide)> = thread
            .iter()
            .enumerate()
            .filter_map(|(i, t)| t.map(|t| (i, t)))
            .collect();
        if beside.is_empty() {
            let _ = writeln!(
                out,
                "Upstream's figures are not shown: sides {} are not the thread's off and on \
                 (declare one with --side NAME:...,as=off or as=on).",
                self.sides.join(" and ")
            );
            return out;
        }
        let with_ratio = self.is_ab() && beside.len() == self.sides.len();
        let mut header: Vec<String> = vec!["metric".into(), "post".into()];
        if self.is_ab() {
            for &(i, t) in &beside {
                let side = &self.sides[i];
                header.push(if side == t.name() {
                    format!("{side} runs")
                } else {
                    format!("{side} runs (thread's {})", t.name())
                });
            }
            if with_ratio {
                header.extend([
                    format!("{}/{}", self.sides[1], self.sides[0]),
                    "95% CI".to_owned(),
                    "p".to_owned(),
                ]);
            }
        } else {
            header.push("runs".into());
        }
        let mut rows = vec![header];
        for a in &analysis.metrics {
            for u in &a.upstream {
                let Some(f) = self
                    .upstream
                    .figures
                    .iter()
                    .find(|f| f.metric == a.metric && f.source == u.source)
                else {
                    continue;
                };
                let mut row = vec![a.metric.label().to_owned(), u.source.clone()];
                for &(_, t) in &beside {
                    row.push(runs_text(a.metric, f.runs(t.index())));
                }
                if with_ratio {
                    row.extend(upstream_comparison(u));
                }
                rows.push(row);
            }
        }
        if rows.len() > 1 {
            out.push_str(&table(&rows, 2));
        }
        out
    }
}

/// Whether the post has a ratio beside this report's sides for the metric (every side is the
/// thread's).
fn has_source(a: &MetricAnalysis, label: &str) -> bool {
    a.upstream
        .iter()
        .any(|u| u.source == label && u.ratio.is_some())
}

fn verdict(a: &MetricAnalysis) -> String {
    match (a.significant, &a.not_tested) {
        (Some(true), _) => "significant".to_owned(),
        (Some(false), _) => "not significant".to_owned(),
        (None, Some(why)) => format!("not tested: {why}"),
        (None, None) => NONE.to_owned(),
    }
}

fn upstream_comparison(u: &UpstreamAnalysis) -> [String; 3] {
    let ratio = u.ratio.map_or_else(|| NONE.to_owned(), ratio_text);
    let one_run = u.sides.iter().flatten().any(|d| d.n < 2);
    let missing = if one_run { ONE_RUN } else { NONE };
    [
        ratio,
        u.ratio_ci95
            .as_ref()
            .map_or_else(|| missing.to_owned(), |r| ratio_interval_text(&r.ci)),
        u.welch
            .as_ref()
            .map_or_else(|| missing.to_owned(), |w| p_text(w.p)),
    ]
}
