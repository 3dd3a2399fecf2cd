//! Which runs of a report failed, and the exit status of `pmemvm bench` that follows from them.
//!
//! A run failed when it produced no usable fio report (boot or guest failure, setup script
//! failure, time-out, unreadable JSON) or when fio reported a job error (e.g. `err=84`, a verify
//! failure). Either way it is left out of the statistics, listed in the report and named on
//! stderr. Every failure makes `pmemvm bench` exit with [`exit_status::RUNTIME_ERROR`] — after
//! the report has been written — except one: the experiment's verify job finding other data
//! than it wrote ([`BenchReport::verify_failures`]). The threads ran that job as a check and
//! reported its outcome per side; here too it is a result of the experiment (the report's
//! verify section and JSON `verify`, one line on stderr), and `--fail-on-check` makes it a
//! non-zero exit for pipelines that want one.

use std::fmt;

use serde::Serialize;

use super::{BenchReport, RunOutcome};
use vmm::exit_status;

/// One failed run (or unmeasured phase) and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FailedRun {
    /// Side label.
    pub side: String,
    /// Repetition, from 1; 0 for an unmeasured phase (a verify before the measurement, a fill).
    pub run: u32,
    /// The phase, when recorded.
    pub phase: String,
    /// What went wrong.
    pub reason: String,
}

impl fmt::Display for FailedRun {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.run, self.phase.as_str()) {
            (0, phase) => write!(f, "side {} phase {phase}: {}", self.side, self.reason),
            (run, "") => write!(f, "side {} run {run}: {}", self.side, self.reason),
            (run, phase) => write!(f, "side {} run {run} ({phase}): {}", self.side, self.reason),
        }
    }
}

impl RunOutcome {
    /// Why this run failed — no usable fio report, or a fio job error — if it did.
    pub fn failure(&self) -> Option<String> {
        match self {
            RunOutcome::Failed { error } => Some(error.clone()),
            RunOutcome::Ok { summary } if !summary.ok() => Some(
                summary
                    .errors
                    .iter()
                    .map(|e| format!("fio error {} in job {}", e.error, e.jobname))
                    .collect::<Vec<_>>()
                    .join("; "),
            ),
            RunOutcome::Ok { .. } => None,
        }
    }
}

impl BenchReport {
    /// The runs that failed or ended with a fio job error, in run order.
    pub fn failed_runs(&self) -> Vec<FailedRun> {
        let runs = self.runs.iter().filter_map(|r| {
            Some(FailedRun {
                side: r.side.clone(),
                run: r.run,
                phase: r.phase.clone(),
                reason: r.outcome.failure()?,
            })
        });
        let checks = self.checks.iter().filter_map(|c| {
            Some(FailedRun {
                side: c.side.clone(),
                run: 0,
                phase: format!("{} of boot {}", c.phase, c.boot),
                reason: c.error.clone()?,
            })
        });
        runs.chain(checks).collect()
    }
}

impl BenchReport {
    /// The failed runs and phases that are the experiment's verify job (the report's
    /// `verify_expectation`) ending with fio's verify error: the data read back is not what
    /// was written. A result of the experiment, not a failure of the tool.
    pub fn verify_failures(&self) -> Vec<FailedRun> {
        self.failed_runs()
            .into_iter()
            .filter(|f| self.is_verify_failure_of(f))
            .collect()
    }

    /// What makes `pmemvm bench` fail: every failed run and phase, less the verify results
    /// unless `fail_on_check`.
    pub fn exit_failures(&self, fail_on_check: bool) -> Vec<FailedRun> {
        self.failed_runs()
            .into_iter()
            .filter(|f| fail_on_check || !self.is_verify_failure_of(f))
            .collect()
    }

    /// True when `f` (from [`Self::failed_runs`]) is one of [`Self::verify_failures`].
    pub fn is_verify_failure_of(&self, f: &FailedRun) -> bool {
        // Checks are named "<phase> of boot N" by `failed_runs`.
        let phase = f.phase.split(" of boot ").next().unwrap_or_default();
        phase == self.verify_job() && is_verify_failure(&f.reason)
    }

    /// The experiment's verify job: the thread's when it reported one, else the job every
    /// experiment's script names so ([`VERIFY_JOB`]).
    pub fn verify_job(&self) -> &str {
        self.verify_expectation
            .as_ref()
            .map_or(VERIFY_JOB, |x| x.job.as_str())
    }
}

/// The verify job of the threads' scripts (`experiments`: the `write-and-verify` phase).
pub const VERIFY_JOB: &str = "write-and-verify";

/// fio's words for a job that ended with EILSEQ (84), its verify error: a block read back
/// with other contents than the job wrote.
pub(super) const VERIFY_ERROR: &str = "fio error 84 in job ";

/// True when `reason` is fio's verify error (err=84), not a boot, setup or fio failure.
pub fn is_verify_failure(reason: &str) -> bool {
    reason.contains(VERIFY_ERROR)
}

/// `pmemvm bench`'s exit status from [`BenchReport::exit_failures`]: 0 when none,
/// [`exit_status::RUNTIME_ERROR`] otherwise.
pub fn bench_exit_status(failed: &[FailedRun]) -> u8 {
    if failed.is_empty() {
        exit_status::POWER_OFF
    } else {
        exit_status::RUNTIME_ERROR
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::study::fio::{FioSummary, JobError};
    use crate::study::report::{
        Accelerator, CheckRecord, HostInfo, RunRecord, Upstream, VerifyExpectation,
    };

    pub(crate) fn run(side: &str, run: u32, outcome: RunOutcome) -> RunRecord {
        RunRecord {
            side: side.into(),
            run,
            kernel_cmdline: None,
            outcome,
            boot: 1,
            phase: String::new(),
            provenance: None,
            command: String::new(),
            machine: None,
            series: None,
            series_error: None,
        }
    }

    pub(crate) fn good() -> RunOutcome {
        RunOutcome::Ok {
            summary: Box::new(FioSummary::default()),
        }
    }

    pub(crate) fn report(runs: Vec<RunRecord>) -> BenchReport {
        BenchReport {
            experiment: "pmem-verify".into(),
            description: String::new(),
            engine: "pmemvm".into(),
            accelerator: Accelerator::Kvm,
            host: HostInfo::default(),
            sides: vec!["off".into(), "on".into()],
            thread_sides: vec![],
            runs,
            upstream: Upstream::default(),
            upstream_source: String::new(),
            checks: vec![],
            verify_expectation: None,
            deviations: vec![],
            job_files: vec![],
            result: None,
        }
    }

    #[test]
    fn every_kind_of_failure_is_named_and_makes_the_exit_status_non_zero() {
        let verify_error = RunOutcome::Ok {
            summary: Box::new(FioSummary {
                errors: vec![JobError {
                    jobname: "verify".into(),
                    error: 84,
                }],
                ..FioSummary::default()
            }),
        };
        let r = report(vec![
            run("off", 1, good()),
            run("on", 1, verify_error),
            run(
                "off",
                2,
                RunOutcome::Failed {
                    error: "the setup script exited with status 1".into(),
                },
            ),
            run(
                "on",
                2,
                RunOutcome::Failed {
                    error: "guest did not reach init within 120 s".into(),
                },
            ),
        ]);
        let failed = r.failed_runs();
        let named: Vec<String> = failed.iter().map(ToString::to_string).collect();
        assert_eq!(
            named,
            [
                "side on run 1: fio error 84 in job verify",
                "side off run 2: the setup script exited with status 1",
                "side on run 2: guest did not reach init within 120 s",
            ]
        );
        assert_eq!(bench_exit_status(&failed), exit_status::RUNTIME_ERROR);
    }

    #[test]
    fn a_stale_header_is_reported_as_observed_with_the_measured_note_and_a_checksum_without() {
        // As fio 3.33 words them (a stale header first, then a corrupted block).
        let stale = "fio error 84 in job write-and-verify (verify: bad header numberio 7156, \
                    wanted 7159 at file /dev/pmem0 offset 19742720, length 4096)";
        let crc = "fio error 84 in job write-and-verify (crc32c: verify failed at file \
                   /dev/pmem0 offset 180224, length 4096)";
        let failed = |error: &str| {
            let mut r = run(
                "off",
                1,
                RunOutcome::Failed {
                    error: error.into(),
                },
            );
            r.phase = VERIFY_JOB.into();
            r
        };
        let with_stale = report(vec![failed(stale), run("on", 1, good())]);
        let text = with_stale.provenance_sections();
        assert!(
            text.contains(
                "  off boot 1: /dev/pmem0 offset 19742720 (4096 bytes) held the header of write \
                 7156, fio expected write 7159 (3 writes later)"
            ),
            "{text}"
        );
        assert!(
            text.contains("Note: \"bad header numberio A, wanted B\" with A < B"),
            "{text}"
        );
        assert_eq!(bench_exit_status(&with_stale.failed_runs()), 1);
        let with_crc = report(vec![failed(crc), run("on", 1, good())]);
        let text = with_crc.provenance_sections();
        assert!(!text.contains("Note:"), "{text}");
        assert!(
            text.contains("failed to verify: crc32c: verify failed"),
            "{text}"
        );
    }

    /// fio's verify error of the "pmem: set QUEUE_FLAG_NOWAIT" thread's race.
    pub(crate) const VERIFY_RACE: &str = "fio error 84 in job write-and-verify (verify: bad \
        header numberio 7156, wanted 7159 at file /dev/pmem0 offset 19742720, length 4096)";

    /// pmem-nowait with the thread's expectation (the verify fails with the flag
    /// off only), one good run a side, and the off side's verify check failed with
    /// [`VERIFY_RACE`].
    pub(crate) fn nowait_report_with_the_race() -> BenchReport {
        let check = |side: &str, error: Option<&str>| CheckRecord {
            side: side.into(),
            boot: 1,
            phase: "write-and-verify".into(),
            role: "check".into(),
            error: error.map(str::to_owned),
            command: String::new(),
        };
        let mut r = report(vec![run("off", 1, good()), run("on", 1, good())]);
        r.experiment = "pmem-nowait".into();
        r.verify_expectation = Some(VerifyExpectation {
            job: "write-and-verify".into(),
            fails_off: true,
            fails_on: false,
            thread: String::new(),
        });
        r.checks = vec![check("off", Some(VERIFY_RACE)), check("on", None)];
        r
    }

    #[test]
    fn a_failed_verify_is_a_result_unless_fail_on_check_and_other_failures_still_fail() {
        let race = VERIFY_RACE;
        let mut r = nowait_report_with_the_race();
        assert_eq!(r.failed_runs().len(), 1);
        assert_eq!(r.verify_failures().len(), 1);
        assert!(r.exit_failures(false).is_empty());
        assert_eq!(bench_exit_status(&r.exit_failures(false)), 0);
        assert_eq!(bench_exit_status(&r.exit_failures(true)), 1);
        // The same verify job failing for another reason is a failure of the run.
        r.checks[0].error = Some("phase write-and-verify did not run: time-out".into());
        assert!(r.verify_failures().is_empty());
        assert_eq!(bench_exit_status(&r.exit_failures(false)), 1);
        // fio's verify error in another job than the experiment's verify is a failure too.
        r.checks[0].error = Some(race.into());
        r.checks[0].phase = "randwrite".into();
        assert_eq!(bench_exit_status(&r.exit_failures(false)), 1);
        // pmem-nowait's thread reported no verify outcome: its verify job is still the one.
        r.checks[0].phase = "write-and-verify".into();
        r.verify_expectation = None;
        assert_eq!(r.verify_failures().len(), 1);
        assert_eq!(bench_exit_status(&r.exit_failures(false)), 0);
        assert_eq!(bench_exit_status(&r.exit_failures(true)), 1);
        let v = r.verify_verdict().expect("a verdict without the thread's");
        assert_eq!(v.reproduced, None);
        assert!(
            v.summary
                .contains("off: failed in 1 of 1 boot(s), on: failed in 0 of 1 boot(s)"),
            "{}",
            v.summary
        );
        r.verify_expectation = Some(VerifyExpectation {
            job: "write-and-verify".into(),
            fails_off: true,
            fails_on: false,
            thread: String::new(),
        });
        // A measured verify (pmem-verify) that fails is a result as well.
        let mut v = report(vec![
            run("off", 1, RunOutcome::Failed { error: race.into() }),
            run("on", 1, good()),
        ]);
        for r in &mut v.runs {
            r.phase = "write-and-verify".into();
        }
        v.verify_expectation = r.verify_expectation.clone();
        assert_eq!(bench_exit_status(&v.exit_failures(false)), 0);
        assert_eq!(bench_exit_status(&v.exit_failures(true)), 1);
    }

    #[test]
    fn all_good_runs_exit_zero() {
        let r = report(vec![run("off", 1, good()), run("on", 1, good())]);
        assert!(r.failed_runs().is_empty());
        assert_eq!(bench_exit_status(&r.failed_runs()), 0);
    }
}
