//! The merge's own section of the text report: the inputs (directory, host, engine, state, the
//! boots taken from each), a per-host breakdown when the machines differ (per host and side the
//! mean of the headline metrics, by the report's own analysis; [`Merged::per_host`] has the
//! whole analysis per host for `merge.json`), and what was left out and why.

use std::fmt::Write as _;

use super::merge::Merged;
use crate::study::report::{Analysis, Metric};

/// Metrics of the per-host breakdown.
const PER_HOST: [Metric; 3] = [Metric::Iops, Metric::BwMibS, Metric::SysCpu];

impl Merged {
    /// The bench report's text followed by the merge's section.
    pub fn render_text(&self) -> String {
        let mut out = self.report.render_text();
        out.push_str(&self.render_merge_section());
        out
    }

    /// "Merged from", "Per host" (when machines differ) and "Left out".
    pub fn render_merge_section(&self) -> String {
        let mut out = String::new();
        let info = &self.info;
        let _ = writeln!(
            out,
            "\nMerged from {} result director{}{}:",
            info.inputs.len(),
            if info.inputs.len() == 1 { "y" } else { "ies" },
            if info.pooled_hosts {
                " (machines differ; pooled because --pool-hosts was given)"
            } else {
                ""
            }
        );
        if !info.pooled_inputs.is_empty() {
            let _ = writeln!(
                out,
                "  what the sides ran differs; pooled because --pool-different-inputs was given:"
            );
            for d in &info.pooled_inputs {
                let _ = writeln!(out, "    {d}");
            }
        }
        for i in &info.inputs {
            let taken = &i.taken;
            let _ = writeln!(
                out,
                "  {}  host {} ({}), {}, {}; boots taken: {}",
                i.dir,
                if i.hostname.is_empty() {
                    "not recorded"
                } else {
                    &i.hostname
                },
                i.cpu_model,
                i.engine,
                i.state,
                if taken.is_empty() {
                    "none".to_owned()
                } else {
                    taken.join(", ")
                }
            );
        }
        if info.hosts_differ {
            out.push_str(&self.render_per_host());
        }
        if info.left_out.is_empty() {
            out.push_str("\nLeft out: nothing; every planned boot is in the report.\n");
        } else {
            let _ = writeln!(out, "\nLeft out ({}):", info.left_out.len());
            for l in &info.left_out {
                let _ = writeln!(
                    out,
                    "  {}{}: {}",
                    l.task,
                    if l.dir.is_empty() {
                        String::new()
                    } else {
                        format!(" from {}", l.dir)
                    },
                    l.why
                );
            }
        }
        out
    }

    /// Per host (in name order), the report's analysis of that host's runs alone.
    pub fn per_host(&self) -> Vec<(String, Analysis)> {
        let mut hosts: Vec<&String> = self.run_hosts.iter().collect();
        hosts.sort();
        hosts.dedup();
        hosts
            .into_iter()
            .map(|host| {
                let mut sub = self.report.clone();
                sub.runs = self
                    .report
                    .runs
                    .iter()
                    .zip(&self.run_hosts)
                    .filter(|(_, h)| *h == host)
                    .map(|(r, _)| r.clone())
                    .collect();
                (host.clone(), sub.analyse())
            })
            .collect()
    }

    fn render_per_host(&self) -> String {
        let mut out = String::from("\nPer host (mean over the host's good runs, n in brackets):\n");
        for (host, analysis) in self.per_host() {
            let _ = write!(
                out,
                "  {}:",
                if host.is_empty() {
                    "not recorded"
                } else {
                    &host
                }
            );
            for m in analysis
                .metrics
                .iter()
                .filter(|m| PER_HOST.contains(&m.metric))
            {
                let per_side: Vec<String> = m
                    .sides
                    .iter()
                    .zip(&self.report.sides)
                    .map(|(s, label)| match s {
                        Some(s) => format!("{label} {} [{}]", m.metric.format(s.mean), s.n),
                        None => format!("{label} -"),
                    })
                    .collect();
                let _ = write!(out, "  {} {}", m.metric.short_label(), per_side.join(", "));
            }
            out.push('\n');
        }
        out
    }
}
