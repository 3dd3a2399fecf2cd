//! The terminal report (`report.txt`).

use std::fmt::Write as _;

use super::format::{fio_bw, human_bytes, ratio_text, si, table};
use super::upstream::upstream_text;
use super::{BenchReport, Metric, RunOutcome, FUNCTIONAL_ONLY};

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

    /// The terminal report: runs table, upstream-shaped fio lines, summary with ratios.
    pub fn render_text(&self) -> String {
        let analysis = self.analyse();
        let mut out = self.headline();
        let h = &self.host;
        let nvdimm = h
            .nvdimm_bytes
            .map_or_else(|| "none".to_owned(), human_bytes);
        let _ = writeln!(
            out,
            "host: {} ({} CPUs, Linux {}); guest: {} vCPUs, {} MiB, NVDIMM {nvdimm}; fio jobs: {}",
            h.cpu_model, h.host_cpus, h.host_kernel, h.guest_vcpus, h.guest_mem_mib, h.jobs
        );
        let _ = writeln!(
            out,
            "runs: {} of {} produced figures\n",
            analysis.good_runs, analysis.total_runs
        );

        // Runs table.
        out.push_str("Runs\n");
        let mut header: Vec<String> = vec!["side".into(), "run".into()];
        header.extend(Metric::ALL.iter().map(|m| m.label().to_owned()));
        header.push("status".into());
        let mut rows = vec![header];
        for r in &self.runs {
            let mut row = vec![r.side.clone(), r.run.to_string()];
            for m in Metric::ALL {
                let v = match &r.outcome {
                    RunOutcome::Ok { summary } => m
                        .value(summary)
                        .map_or_else(|| "-".to_owned(), |v| m.format(v)),
                    RunOutcome::Failed { .. } => "-".to_owned(),
                };
                row.push(v);
            }
            row.push(r.status());
            rows.push(row);
        }
        out.push_str(&table(&rows, 2));

        // fio's own lines, as upstream showed them with grep IOPS|slat|cpu *.fio | column -t.
        out.push_str("\nfio lines (grep IOPS|slat|cpu, upstream's shape)\n");
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
        out.push_str(&table(&lines, 2));

        // Summary.
        out.push_str("\nSummary (mean, min-max, stddev over good runs)\n");
        let mut header = vec!["metric".to_owned()];
        for side in &self.sides {
            header.push(format!("{side} mean"));
            header.push(format!("{side} min-max"));
            header.push(format!("{side} sd"));
        }
        if self.is_ab() {
            header.push(format!("{}/{}", self.sides[1], self.sides[0]));
            header.push(format!("upstream {}/{}", self.sides[1], self.sides[0]));
        }
        header.push("upstream".to_owned());
        let mut rows = vec![header];
        for a in &analysis.metrics {
            let m = a.metric;
            let mut row = vec![m.label().to_owned()];
            for s in &a.sides {
                match s {
                    Some(s) => {
                        row.push(m.format(s.mean));
                        row.push(format!("{}-{}", m.format(s.min), m.format(s.max)));
                        row.push(m.format(s.stddev));
                    }
                    None => row.extend(["-".to_owned(), "-".to_owned(), "-".to_owned()]),
                }
            }
            if self.is_ab() {
                row.push(a.ratio.map_or_else(|| "-".to_owned(), ratio_text));
                row.push(a.upstream_ratio.map_or_else(|| "-".to_owned(), ratio_text));
            }
            row.push(
                a.upstream
                    .as_ref()
                    .map_or_else(|| "-".to_owned(), |u| upstream_text(m, u, &self.sides)),
            );
            rows.push(row);
        }
        out.push_str(&table(&rows, 2));
        if !self.upstream_source.is_empty() {
            let _ = writeln!(out, "upstream: {}", self.upstream_source);
        }
        if !self.accelerator.is_performance() {
            let _ = writeln!(
                out,
                "note: measured under {}: {FUNCTIONAL_ONLY}.",
                self.accelerator.name()
            );
        }
        out
    }
}
