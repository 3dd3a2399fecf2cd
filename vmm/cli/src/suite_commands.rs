//! `pmemvm suite ndctl`: ndctl's own test suite on the guest's NVDIMMs (the work is in
//! `lab::study::suite`).

use crate::suite_args::NdctlArgs;
use lab::study::suite::{self, ndctl, SuiteError};

/// The plan as text.
fn plan_text(boots: &[ndctl::Boot]) -> String {
    let mut out = String::new();
    for (i, b) in boots.iter().enumerate() {
        let machine: Vec<String> = b
            .shape
            .nvdimms()
            .iter()
            .map(|n| format!("--nvdimm {n}"))
            .chain(
                b.shape
                    .legacy()
                    .iter()
                    .map(|l| format!("--pmem-legacy {l}")),
            )
            .chain(b.shape.cxl_pmem().iter().map(|c| format!("--cxl-pmem {c}")))
            .collect();
        let machine = if machine.is_empty() {
            let pages = if suite::nfit_test::wants_huge_pages(b) {
                format!(
                    "; --memory + 4G, --append '{}' (hugetlb's 1 GiB pages)",
                    suite::nfit_test::HUGETLB_CMDLINE
                )
            } else {
                String::new()
            };
            format!(
                "no NVDIMM; the user's kernel with the nfit_test modules (--kernel, --modules){pages}"
            )
        } else {
            machine.join(" ")
        };
        out.push_str(&format!(
            "boot {} ({}): {}\n  tests: {}\n  guest: {}\n",
            i + 1,
            b.shape.name(),
            machine,
            b.tests
                .iter()
                .map(|t| t.name)
                .collect::<Vec<_>>()
                .join(", "),
            b.argv().join(" ")
        ));
    }
    out
}

/// Runs the suite; the status is 0 when every test passed or skipped itself.
pub fn ndctl(a: &NdctlArgs) -> Result<u8, SuiteError> {
    let req = a.request()?;
    if a.plan {
        print!("{}", plan_text(&suite::plan(&req)?));
        if req.tests.is_empty() && req.nfit_test.is_none() {
            for (name, why) in ndctl::NOT_PLANNED {
                println!("not planned: {name}: {why}");
            }
        }
        return Ok(0);
    }
    let outcome = suite::run_ndctl(&req, |boot, rows| {
        eprintln!(
            "pmemvm suite: {}: boot {} ended with status {} after {:.0} s{}",
            boot.engine,
            boot.shape.name(),
            boot.status,
            boot.wall_seconds,
            boot.error
                .as_deref()
                .map(|e| format!(": {e}"))
                .unwrap_or_default()
        );
        eprint!("{}", ndctl::table(rows));
    })?;
    print!("{}", ndctl::table(&outcome.rows));
    let failed = ndctl::failed(&outcome.rows);
    let passed = outcome
        .rows
        .iter()
        .filter(|r| r.verdict == Some(suite::junit::Verdict::Passed))
        .count();
    println!(
        "{passed} passed, {} skipped, {} failed or not run, of {} (results in {})",
        outcome
            .rows
            .iter()
            .filter(|r| r.verdict == Some(suite::junit::Verdict::Skipped))
            .count(),
        failed.len(),
        outcome.rows.len(),
        req.out.display()
    );
    if let Some(sig) = outcome.stopped_by {
        eprintln!(
            "pmemvm suite: stopped by signal {sig}; the boots after the one it stopped did not start (status {})",
            outcome.status()
        );
    }
    Ok(outcome.status())
}

/// What `suite ndctl` checks in preflight: the request (nothing is built).
pub fn preflight(a: &NdctlArgs) -> Result<(), SuiteError> {
    if a.plan {
        suite::plan(&a.request()?)?;
        return Ok(());
    }
    suite::check(&a.request()?).map(|_| ())
}
