//! What each boot ran (kernel, initrd, fio, image), how its unmeasured phases ended, and — for
//! the verify experiments — whether the thread's verify outcome reproduced.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use super::BenchReport;

/// Which kernel, initrd, fio and guest image one boot ran.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Provenance {
    /// Kernel file.
    pub kernel: String,
    /// Its SHA-256.
    pub kernel_sha256: String,
    /// `uname -r` in the guest (empty when the guest did not report it).
    pub kernel_release: String,
    /// Initrd file (the guest image's initramfs unless given).
    pub initrd: Option<String>,
    /// Its SHA-256.
    pub initrd_sha256: Option<String>,
    /// The kernel command line.
    pub cmdline: String,
    /// `fio --version` in the guest.
    pub fio_version: String,
    /// The guest image's manifest (input hash, kernel release, build keys), when the image ran.
    pub image: Option<serde_json::Value>,
    /// The `--modules` tree packed for the kernel and the modules loaded from it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub modules: Option<crate::guest::modules::PackedModules>,
}

/// An unmeasured phase of one boot (the verify job before a measurement, a fill).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckRecord {
    /// Side label.
    pub side: String,
    /// The side's boot, from 1.
    pub boot: u32,
    /// Phase name.
    pub phase: String,
    /// `check` or `prepare`.
    pub role: String,
    /// `None`: passed; otherwise why it failed.
    pub error: Option<String>,
    /// The fio command line the guest ran, as it reported it.
    #[serde(default)]
    pub command: String,
}

/// A file the guest's job ran, as written into its `/job` (a fio job file, the setup script):
/// the complete text, parameters substituted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobFile {
    /// Its name in `/job` (`randread-1.fio`, `setup.sh`).
    pub name: String,
    /// Its text.
    pub text: String,
}

/// One way the plan differed from the thread's script (see `pmemvm bench EXP --plan`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Deviation {
    /// The parameter.
    pub what: String,
    /// The thread's value.
    pub thread: String,
    /// Ours.
    pub here: String,
    /// Why.
    pub why: String,
}

impl Deviation {
    /// A deviation: the parameter, the thread's value, ours, why.
    pub fn new(
        what: impl Into<String>,
        thread: impl Into<String>,
        here: impl Into<String>,
        why: impl Into<String>,
    ) -> Self {
        Self {
            what: what.into(),
            thread: thread.into(),
            here: here.into(),
            why: why.into(),
        }
    }
}

/// What the thread reported for a verify job on the `off` and `on` sides.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VerifyExpectation {
    /// The verify job's name.
    pub job: String,
    /// Failed with the parameter off in the thread.
    pub fails_off: bool,
    /// Failed with the parameter on in the thread.
    pub fails_on: bool,
    /// What the thread showed.
    pub thread: String,
}

/// Per side, how often the verify job failed here, and whether that matches the thread.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct VerifyVerdict {
    /// `(side, failed, of)`.
    pub sides: Vec<(String, usize, usize)>,
    /// `Some(true)`: every side behaved as in the thread (failed in at least one boot where the
    /// thread failed, passed in every boot where it passed); `None`: not comparable (other
    /// sides than `off`/`on`, or no verify ran).
    pub reproduced: Option<bool>,
    /// One sentence.
    pub summary: String,
    /// What each failed verify found (block, writes), per side and boot.
    pub observations: Vec<super::VerifyObservation>,
}

impl BenchReport {
    /// Verify outcomes of this report against the thread's.
    pub fn verify_verdict(&self) -> Option<VerifyVerdict> {
        let x = self.verify_expectation.as_ref();
        let job = self.verify_job();
        if !self.runs.iter().any(|r| r.phase == job) && !self.checks.iter().any(|c| c.phase == job)
        {
            return None;
        }
        let mut sides = Vec::new();
        for side in &self.sides {
            // Passed, or failed with fio's verify error; a verify that did not run (or
            // failed otherwise) has no outcome to count.
            let outcome = |failure: Option<&str>| match failure {
                None => Some(false),
                Some(f) if super::failures::is_verify_failure(f) => Some(true),
                Some(_) => None,
            };
            let from_runs = self
                .runs
                .iter()
                .filter(|r| &r.side == side && r.phase == job)
                .filter_map(|r| outcome(r.outcome.failure().as_deref()));
            let from_checks = self
                .checks
                .iter()
                .filter(|c| &c.side == side && c.phase == job)
                .filter_map(|c| outcome(c.error.as_deref()));
            let results: Vec<bool> = from_runs.chain(from_checks).collect();
            sides.push((
                side.clone(),
                results.iter().filter(|&&f| f).count(),
                results.len(),
            ));
        }
        let expected = |side: &str| match (side, x) {
            ("off", Some(x)) => Some(x.fails_off),
            ("on", Some(x)) => Some(x.fails_on),
            _ => None,
        };
        let comparable = sides
            .iter()
            .all(|(s, _, of)| expected(s).is_some() && *of > 0);
        let reproduced = comparable.then(|| {
            sides.iter().all(|(s, failed, _)| {
                if expected(s) == Some(true) {
                    *failed > 0
                } else {
                    *failed == 0
                }
            })
        });
        let here = sides
            .iter()
            .map(|(s, f, of)| format!("{s}: failed in {f} of {of} boot(s)"))
            .collect::<Vec<_>>()
            .join(", ");
        let summary = match reproduced {
            Some(true) => format!("the thread's verify outcome reproduced ({here})"),
            Some(false) => format!("the thread's verify outcome did not reproduce ({here})"),
            None if x.is_none() => {
                format!("the thread reported no verify outcome to compare with ({here})")
            }
            None => format!("not compared with the thread: the sides are not its off/on ({here})"),
        };
        Some(VerifyVerdict {
            sides,
            reproduced,
            summary,
            observations: self.verify_observations(),
        })
    }

    /// The sections on checks, verify outcome, provenance and deviations (empty when none).
    pub(super) fn provenance_sections(&self) -> String {
        let mut out = String::new();
        let verdict = self.verify_verdict();
        if let Some(v) = &verdict {
            let x = self.verify_expectation.as_ref();
            let _ = writeln!(
                out,
                "\nVerify ({}): thread: {}\nhere: {}",
                self.verify_job(),
                x.map_or("no verify outcome reported", |x| x.thread.as_str()),
                v.summary
            );
            // Each run in order (passed, what its verify found, or why it did not verify),
            // then what the verifies before the measurement found.
            for r in self.runs.iter().filter(|r| r.phase == self.verify_job()) {
                let line = match r.outcome.failure() {
                    None => format!("{} boot {}: passed", r.side, r.boot),
                    Some(f) => super::VerifyObservation::parse(&r.side, r.boot, &f).map_or_else(
                        || format!("{} boot {}: {f}", r.side, r.boot),
                        |o| o.describe(),
                    ),
                };
                let _ = writeln!(out, "  {line}");
            }
            for c in self.checks.iter().filter(|c| c.phase == self.verify_job()) {
                if let Some(o) = c
                    .error
                    .as_deref()
                    .and_then(|e| super::VerifyObservation::parse(&c.side, c.boot, e))
                {
                    let _ = writeln!(out, "  {}", o.describe());
                }
            }
        }
        if !self.checks.is_empty() {
            out.push_str("\nPhases before the measurement\n");
            for c in &self.checks {
                let _ = writeln!(
                    out,
                    "  {} boot {} {} ({}): {}",
                    c.side,
                    c.boot,
                    c.phase,
                    c.role,
                    c.error
                        .as_deref()
                        .map_or("ok".to_owned(), |e| format!("FAILED: {e}"))
                );
            }
        }
        if verdict.is_some_and(|v| v.observations.iter().any(|o| o.stale_header())) {
            let _ = writeln!(out, "\nNote: {}.", super::verify::STALE_HEADER_NOTE);
        }
        let mut seen: Vec<(&str, &Provenance)> = Vec::new();
        for r in &self.runs {
            if let Some(p) = &r.provenance {
                if !seen.iter().any(|(s, q)| *s == r.side && *q == p) {
                    seen.push((&r.side, p));
                }
            }
        }
        if !seen.is_empty() {
            out.push_str("\nWhat each side booted\n");
            for (side, p) in seen {
                let sha = |h: &str| h.get(..12).unwrap_or(h).to_owned();
                let _ =
                    writeln!(
                    out,
                    "  {side}: kernel {} (sha256 {}…, release {}), initrd {}, {}\n    cmdline: {}",
                    p.kernel,
                    sha(&p.kernel_sha256),
                    if p.kernel_release.is_empty() { "not reported" } else { &p.kernel_release },
                    match (&p.initrd, &p.initrd_sha256) {
                        (Some(i), Some(h)) => format!("{i} (sha256 {}…)", sha(h)),
                        _ => "none".to_owned(),
                    },
                    if p.fio_version.is_empty() { "fio not reported" } else { &p.fio_version },
                    p.cmdline
                );
                if let Some(m) = &p.modules {
                    let _ = writeln!(out, "    modules: {} ({})", m.dir, m.load.join(" "));
                }
            }
        }
        if !self.deviations.is_empty() {
            let _ = writeln!(
                out,
                "\nDeviations from the thread ({})",
                self.deviations.len()
            );
            for d in &self.deviations {
                let _ = writeln!(
                    out,
                    "  - {}: thread {}, here {}: {}",
                    d.what, d.thread, d.here, d.why
                );
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::study::fio::FioSummary;
    use crate::study::report::{Accelerator, HostInfo, RunOutcome, RunRecord, Upstream};

    fn run(side: &str, failed: bool) -> RunRecord {
        RunRecord {
            side: side.into(),
            run: 1,
            kernel_cmdline: None,
            outcome: if failed {
                RunOutcome::Failed {
                    error: "fio error 84 in job write-and-verify".into(),
                }
            } else {
                RunOutcome::Ok {
                    summary: Box::new(FioSummary::default()),
                }
            },
            boot: 1,
            phase: "write-and-verify".into(),
            provenance: None,
            command: String::new(),
            machine: None,
            series: None,
            series_error: None,
        }
    }

    fn report(sides: &[&str], runs: Vec<RunRecord>) -> BenchReport {
        BenchReport {
            experiment: "bcache-verify".into(),
            description: String::new(),
            engine: "qemu".into(),
            accelerator: Accelerator::Tcg,
            host: HostInfo::default(),
            sides: sides.iter().map(|s| (*s).to_owned()).collect(),
            thread_sides: Vec::new(),
            runs,
            upstream: Upstream::default(),
            upstream_source: String::new(),
            checks: Vec::new(),
            verify_expectation: Some(VerifyExpectation {
                job: "write-and-verify".into(),
                fails_off: true,
                fails_on: false,
                thread: "off: err=84; on: err=0".into(),
            }),
            deviations: vec![Deviation::new("jobs", "48", "1", "one per vCPU")],
            job_files: vec![],
            result: None,
        }
    }

    #[test]
    fn verdict_follows_the_runs() {
        let r = report(&["off", "on"], vec![run("off", true), run("on", false)]);
        let v = r.verify_verdict().unwrap();
        assert_eq!(v.reproduced, Some(true));
        assert_eq!(
            v.summary,
            "the thread's verify outcome reproduced (off: failed in 1 of 1 boot(s), on: failed in 0 of 1 boot(s))"
        );
        let text = r.provenance_sections();
        assert!(
            text.contains("\nVerify (write-and-verify): thread: off: err=84; on: err=0\n"),
            "{text}"
        );
        assert!(
            text.contains(
                "  off boot 1: a block failed to verify (fio gave no detail)\n  on boot 1: passed\n"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "Deviations from the thread (1)\n  - jobs: thread 48, here 1: one per vCPU"
            ),
            "{text}"
        );
        for runs in [
            vec![run("off", false), run("on", false)],
            vec![run("off", true), run("on", true)],
        ] {
            let v = report(&["off", "on"], runs).verify_verdict().unwrap();
            assert_eq!(v.reproduced, Some(false), "{}", v.summary);
        }
        let v = report(
            &["base", "patched"],
            vec![run("base", true), run("patched", false)],
        )
        .verify_verdict()
        .unwrap();
        assert_eq!(v.reproduced, None);
        assert!(
            v.summary.starts_with("not compared with the thread"),
            "{}",
            v.summary
        );
    }
}
