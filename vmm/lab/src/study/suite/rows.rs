//! The table of `pmemvm suite ndctl`: one row per test and engine, from meson's
//! JUnit XML and the guest script's setup-step statuses, and how it is printed.

use serde::{Deserialize, Serialize};

use super::junit::Verdict;
use super::machines::{Bus, Shape};

/// One test's row of the table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Row {
    /// meson's name.
    pub test: String,
    /// The engine it ran on (resolved: pmemvm, qemu or nested).
    pub engine: String,
    /// Why the test cannot run on this engine (it was not tried); None when it was.
    pub not_applicable: Option<String>,
    /// Its bus.
    pub bus: Bus,
    /// Its boot's machine.
    pub shape: Shape,
    /// What meson recorded; None when the test has no case in the boot's JUnit XML (its
    /// boot failed, or the guest ended before it).
    pub verdict: Option<Verdict>,
    /// meson's seconds for it.
    pub seconds: Option<f64>,
    /// Why the verdict is not meson's own (a setup step before the test failed), if so.
    #[serde(default)]
    pub reason: Option<String>,
}

/// What a row says in a table cell: `pass (12.5 s)`, `FAIL`, `not run`, `n/a`.
fn cell(r: &Row) -> String {
    match (r.not_applicable.is_some(), r.verdict, r.seconds) {
        (true, _, _) => "n/a".into(),
        (false, None, _) => "not run".into(),
        (false, Some(v), Some(s)) if s >= 0.0 => format!("{} ({s:.1} s)", v.as_str()),
        (false, Some(v), _) => v.as_str().into(),
    }
}

/// The table: one line per test (test, bus, boot), a column per engine, the tests in
/// the order `order` gives (by name; unknown ones last); then why each `n/a` is, and
/// why a failure is when meson's verdict is not the whole story.
pub fn table_by(rows: &[Row], order: impl Fn(&str) -> Option<usize>) -> String {
    let mut engines: Vec<&str> = Vec::new();
    let mut tests: Vec<&Row> = Vec::new();
    for r in rows {
        if !engines.contains(&r.engine.as_str()) {
            engines.push(&r.engine);
        }
        if !tests.iter().any(|t| t.test == r.test) {
            tests.push(r);
        }
    }
    // In the plan's order, whichever engine's row came first (an engine's `n/a` rows are
    // made before its boot runs); tests the plan does not know keep theirs.
    tests.sort_by_key(|t| order(&t.test));
    // Columns as wide as their longest entry (ack-shutdown-count-set, nfit-test).
    let tw = tests
        .iter()
        .map(|t| t.test.len())
        .max()
        .unwrap_or(0)
        .max(20);
    let bw = tests
        .iter()
        .map(|t| t.shape.name().len())
        .max()
        .unwrap_or(0)
        .max(6);
    let mut out = format!("{:<tw$} {:<22} {:<bw$}", "test", "bus", "boot");
    for e in &engines {
        out.push_str(&format!(" {e:<16}"));
    }
    out.push('\n');
    for t in &tests {
        out.push_str(&format!(
            "{:<tw$} {:<22} {:<bw$}",
            t.test,
            t.bus.as_str(),
            t.shape.name()
        ));
        for e in &engines {
            let c = rows
                .iter()
                .find(|r| r.test == t.test && r.engine == *e)
                .map_or_else(|| "-".to_string(), cell);
            out.push_str(&format!(" {c:<16}"));
        }
        out.push('\n');
    }
    let mut reasons: Vec<String> = Vec::new();
    for r in rows {
        let line = match (&r.not_applicable, &r.reason) {
            (Some(why), _) => format!("n/a on {}: {why}", r.engine),
            (None, Some(why)) => format!("{} failed on {}: {why}", r.test, r.engine),
            (None, None) => continue,
        };
        if !reasons.contains(&line) {
            reasons.push(line);
        }
    }
    for line in reasons {
        out.push_str(&line);
        out.push('\n');
    }
    out.lines().map(|l| format!("{}\n", l.trim_end())).collect()
}

/// The tests that were tried and did not pass or skip.
pub fn failed(rows: &[Row]) -> Vec<&Row> {
    rows.iter()
        .filter(|r| r.not_applicable.is_none())
        .filter(|r| !matches!(r.verdict, Some(Verdict::Passed | Verdict::Skipped)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::study::suite::ndctl::{plan, rows, table};
    use std::path::Path;

    #[test]
    fn a_test_whose_setup_step_failed_fails_with_the_step_named_though_meson_saw_a_skip() {
        let dir = std::env::temp_dir().join(format!("pmemvm-suite-steps-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("meson-1")).unwrap();
        // daxctl-devices.sh found no namespace to take over and skipped (77).
        std::fs::write(
            dir.join("meson-1/testlog.junit.xml"),
            r#"<testsuites><testcase name="daxctl-devices.sh" time="3.0"><skipped/></testcase><testcase name="align.sh" time="50.0"/></testsuites>"#,
        )
        .unwrap();
        std::fs::write(dir.join("step-1.status"), "1\n").unwrap();
        let boots = plan(&["daxctl-devices.sh".into(), "align.sh".into()]).unwrap();
        let got = rows(&boots[0], "nested", &dir);
        let bad: Vec<&str> = failed(&got).iter().map(|r| r.test.as_str()).collect();
        assert_eq!(
            bad,
            ["daxctl-devices.sh"],
            "the skip of a test whose setup failed"
        );
        let t = table(&got);
        assert!(
            t.contains("daxctl-devices.sh failed on nested: its setup step `ndctl create-namespace -b ACPI.NFIT -s 1G` failed with status 1"),
            "{t}"
        );
        // The step succeeded: meson's skip stands (and is not a failure of the run).
        std::fs::write(dir.join("step-1.status"), "0\n").unwrap();
        let got = rows(&boots[0], "nested", &dir);
        assert!(failed(&got).is_empty());
        assert!(table(&got).contains("skip"), "{}", table(&got));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn rows_come_from_every_meson_run_of_the_boot_and_missing_cases_are_not_run() {
        let dir = std::env::temp_dir().join(format!("pmemvm-suite-rows-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("meson-1")).unwrap();
        std::fs::create_dir_all(dir.join("meson-2")).unwrap();
        std::fs::write(
            dir.join("meson-1/testlog.junit.xml"),
            r#"<testsuites><testcase name="align.sh" time="52.6"/><testcase name="dm.sh" time="7.1"><failure/></testcase></testsuites>"#,
        )
        .unwrap();
        std::fs::write(
            dir.join("meson-2/testlog.junit.xml"),
            r#"<testsuites><testcase name="ndctl:dax / daxctl-devices.sh" time="40.8"><skipped/></testcase></testsuites>"#,
        )
        .unwrap();
        let boots = plan(&[
            "align.sh".into(),
            "dm.sh".into(),
            "daxctl-devices.sh".into(),
        ])
        .unwrap();
        let found = rows(&boots[0], "nested", &dir);
        let got: Vec<(&str, Option<Verdict>)> =
            found.iter().map(|r| (r.test.as_str(), r.verdict)).collect();
        assert_eq!(
            got,
            [
                ("daxctl-devices.sh", Some(Verdict::Skipped)),
                ("align.sh", Some(Verdict::Passed)),
                ("dm.sh", Some(Verdict::Failure)),
            ]
        );
        let bad: Vec<&str> = failed(&found).iter().map(|r| r.test.as_str()).collect();
        assert_eq!(bad, ["dm.sh"]);
        let t = table(&found);
        assert!(
            t.contains("dm.sh") && t.contains("FAIL") && t.contains("52.6"),
            "{t}"
        );
        // No JUnit at all: every test of the boot is "not run", and a failure.
        let empty = rows(&boots[0], "nested", Path::new("/nonexistent/pmemvm-suite"));
        assert!(empty.iter().all(|r| r.verdict.is_none()));
        assert_eq!(failed(&empty).len(), 3);
        assert!(table(&empty).contains("not run"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
