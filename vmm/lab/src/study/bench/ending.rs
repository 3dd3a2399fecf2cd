//! How a bench ends, in words and as an exit status: the failed runs named (a failed verify
//! as a result of the experiment, not a failure), the count of runs with figures, the
//! engine and whether its figures are performance, what verify observed, and the status —
//! 0 when every run produced figures, 1 when something failed (a verify failure only with
//! `--fail-on-check`), 128 + N when signal N stopped the bench.

use std::path::Path;

use vmm::exit_status;

use super::BenchOutcome;

/// The lines `pmemvm bench` prints after the report (to stderr) and its exit status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ending {
    /// The lines, in order.
    pub lines: Vec<String>,
    /// The exit status.
    pub status: u8,
}

/// The ending of `outcome`, whose report was written into `out`.
pub fn ending(outcome: &BenchOutcome, out: &Path, fail_on_check: bool) -> Ending {
    let mut lines = Vec::new();
    for f in &outcome.files {
        lines.push(format!("[bench] wrote {}", f.display()));
    }
    let failed = outcome.report.failed_runs();
    for f in &failed {
        if outcome.report.is_verify_failure_of(f) {
            lines.push(format!(
                "pmemvm: verify failed (a result of the experiment): {f}"
            ));
        } else {
            lines.push(format!("pmemvm: failed: {f}"));
        }
    }
    let r = &outcome.report;
    // Failed phases before the measurement (run 0) are not runs.
    let failed_runs = failed.iter().filter(|f| f.run != 0).count();
    lines.push(format!(
        "[bench] {}: {} of {} runs produced figures; engine {} ({}){}; report in {}",
        r.experiment,
        r.runs.len().saturating_sub(failed_runs),
        r.runs.len(),
        r.engine,
        r.accelerator.name(),
        if r.accelerator.is_performance() {
            ""
        } else {
            " — functional check only, not performance"
        },
        out.display()
    ));
    let verify_results = r.verify_failures().len();
    if let Some(v) = r.verify_verdict() {
        for o in &v.observations {
            lines.push(format!("[bench] verify observed: {}", o.describe()));
        }
        if v.observations.iter().any(|o| o.stale_header()) {
            lines.push(format!(
                "pmemvm: note: {}",
                crate::study::report::STALE_HEADER_NOTE
            ));
        }
        lines.push(format!(
            "[bench] verify ({}): {}{}",
            r.verify_job(),
            v.summary,
            match (verify_results, fail_on_check) {
                (0, _) => String::new(),
                (_, false) =>
                    " — a result of the experiment, not a failure of pmemvm (exit status 0 \
                     unless something else failed; --fail-on-check makes it 1)"
                        .to_owned(),
                (_, true) => " — exit status 1 (--fail-on-check)".to_owned(),
            }
        ));
    }
    let failed_runs = failed_runs
        - failed
            .iter()
            .filter(|f| f.run != 0 && r.is_verify_failure_of(f))
            .count();
    if failed_runs > 0 {
        lines.push(format!(
            "pmemvm: {failed_runs} of {} runs failed; the report lists them (partial results)",
            outcome.report.runs.len()
        ));
    }
    let failed_phases = failed
        .iter()
        .filter(|f| f.run == 0 && !r.is_verify_failure_of(f))
        .count();
    if failed_phases > 0 {
        lines.push(format!(
            "pmemvm: {failed_phases} phase(s) before the measurement failed; the report lists them"
        ));
    }
    if let Some(sig) = outcome.interrupted_by {
        lines.push(format!(
            "pmemvm: bench stopped by signal {sig} after {} run(s); the report holds them",
            outcome.report.runs.len()
        ));
        return Ending {
            lines,
            status: u8::try_from(128 + sig).unwrap_or(exit_status::RUNTIME_ERROR),
        };
    }
    Ending {
        lines,
        status: crate::study::report::bench_exit_status(&r.exit_failures(fail_on_check)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::study::report::failures::tests::nowait_report_with_the_race;

    fn outcome(interrupted_by: Option<i32>) -> BenchOutcome {
        let r = nowait_report_with_the_race();
        BenchOutcome {
            report: r,
            files: vec!["out/report.json".into()],
            interrupted_by,
        }
    }

    #[test]
    fn a_failed_verify_is_told_as_a_result_and_fails_only_with_fail_on_check() {
        let o = outcome(None);
        let e = ending(&o, Path::new("out"), false);
        assert_eq!(e.status, 0, "{:#?}", e.lines);
        assert!(e
            .lines
            .contains(&"[bench] wrote out/report.json".to_owned()));
        assert!(
            e.lines
                .iter()
                .any(|l| l
                    .starts_with("pmemvm: verify failed (a result of the experiment): side off")),
            "{:#?}",
            e.lines
        );
        assert!(
            e.lines.iter().any(|l| l.starts_with("[bench] pmem-nowait: 2 of 2 runs produced figures; engine pmemvm (kvm); report in out")),
            "{:#?}",
            e.lines
        );
        assert!(
            e.lines
                .iter()
                .any(|l| l.contains("a result of the experiment, not a failure of pmemvm")),
            "{:#?}",
            e.lines
        );
        let strict = ending(&o, Path::new("out"), true);
        assert_eq!(strict.status, 1);
        assert!(
            strict
                .lines
                .iter()
                .any(|l| l.ends_with("exit status 1 (--fail-on-check)")),
            "{:#?}",
            strict.lines
        );
    }

    #[test]
    fn a_signal_ends_the_bench_with_128_plus_its_number_and_keeps_the_runs() {
        let e = ending(&outcome(Some(15)), Path::new("out"), false);
        assert_eq!(e.status, 143);
        assert_eq!(
            e.lines.last().map(String::as_str),
            Some("pmemvm: bench stopped by signal 15 after 2 run(s); the report holds them")
        );
    }
}
