//! ndctl's CXL tests (upstream ndctl v81's `cxl-*.sh`, written for the kernel's
//! `cxl_test` emulation) judge pmemvm's `--cxl-pmem`, as a user types it: `pmemvm suite
//! ndctl --engine nested,qemu --src TREE cxl-topology.sh ... cxl-events.sh` — one boot of
//! the plan's CXL machine (one 512 MiB `--cxl-pmem` device) per engine, the tests pointed
//! at the platform's `ACPI.CXL` bus the way the nfit_test ones are pointed at `ACPI.NFIT`
//! (`ndctl-suite.sh --cxl-bus`), QEMU's own CXL Type-3 device in the column beside.
//!
//! Each test must pass, or fail exactly at the line docs/ndctl-suite.md names for it (a
//! `cxl_test` topology the platform does not copy, or a kernel interface Linux 6.1 does not
//! have): another failure, a skip or a pass where a failure is written fails here, so the
//! table in the docs is the one this test sees. The guest has one vCPU, as in
//! `nested_ndctl_suite` (the tests run one at a time).
//!
//! Skips when QEMU, the guest image, a tool of the L1 preparation or ndctl's source tree is
//! missing (strict mode fails). Holds one TCG slot while its L1s run.

use std::time::Duration;

use pmemvm_tests::pmemvm::TempDir;
use pmemvm_tests::require;

/// What one test must do on one engine.
#[derive(Debug, Clone, Copy)]
enum Want {
    /// meson's verdict "passed".
    Pass,
    /// A failure whose own log holds this line (the test's `err` names its line).
    FailAt(&'static str),
}

/// pmemvm's column (docs/ndctl-suite.md, "ndctl's CXL tests on pmemvm's CXL bus").
const PMEMVM: [(&str, Want); 7] = [
    // Two or three host bridges under the root (cxl_test's topology); pmemvm puts each
    // device behind its own one.
    (
        "cxl-topology.sh",
        Want::FailAt("test/cxl-topology.sh: failed at line 43"),
    ),
    // A root decoder interleaving two host bridges (cxl_test's); pmemvm's windows each
    // have one target.
    (
        "cxl-region-sysfs.sh",
        Want::FailAt("test/cxl-region-sysfs.sh: failed at line"),
    ),
    ("cxl-labels.sh", Want::Pass),
    ("cxl-create-region.sh", Want::Pass),
    ("cxl-destroy-region.sh", Want::Pass),
    (
        "cxl-poison.sh",
        Want::FailAt("test/cxl-poison.sh: failed at line"),
    ),
    (
        "cxl-events.sh",
        Want::FailAt("test/cxl-events.sh: failed at line"),
    ),
];

/// The boot's limit (pmemvm's `--timeout`).
const BOOT_TIMEOUT_SECS: u64 = 1800;
/// Two boots (one per engine), each with its L1's boot, the ndctl build and the root file
/// system.
const DEADLINE: Duration = Duration::from_secs(2 * (BOOT_TIMEOUT_SECS + 300) + 600);

#[test]
#[ignore = "full: ndctl's seven CXL tests in a nested boot per engine; the CXL platform lands through nested_cxl and kvm_cxl"]
fn ndctl_cxl_tests_pass_or_fail_at_their_named_cxl_test_line_on_pmemvm_and_qemu() {
    let src = require!(pmemvm_tests::ndctl::source());
    let _tcg = require!(pmemvm_tests::nested::engine_ready());
    let dir = TempDir::new("nested-ndctl-cxl");
    let args: Vec<std::ffi::OsString> = PMEMVM.iter().map(|(t, _)| t.into()).collect();
    let (out, summary) = pmemvm_tests::ndctl::run_engines(
        "nested",
        &src,
        BOOT_TIMEOUT_SECS,
        &args,
        &dir.join("out"),
        DEADLINE,
    );
    let logs = pmemvm_tests::ndctl::engine_logs(&summary, "nested");
    assert!(
        logs.contains("the test runs on ACPI.CXL"),
        "the cxl_test scripts were pointed at pmemvm's bus (their modprobe cxl_test answered):\n{logs}"
    );
    check_column(&summary, "nested", &PMEMVM, &logs, &out);
}

/// `engine`'s rows: one per test, each as `want` says.
fn check_column(
    summary: &serde_json::Value,
    engine: &str,
    want: &[(&str, Want)],
    logs: &str,
    out: &pmemvm_tests::pmemvm::Output,
) {
    let rows: Vec<&serde_json::Value> = summary["rows"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|r| r["engine"] == engine)
        .collect();
    assert_eq!(rows.len(), want.len(), "one row per test\n{}", out.dump());
    for (name, w) in want {
        let row = rows
            .iter()
            .find(|r| r["test"] == *name)
            .unwrap_or_else(|| panic!("{name} has no {engine} row\n{}", out.dump()));
        let own = pmemvm_tests::ndctl::own_log(logs, name);
        match w {
            Want::Pass => assert_eq!(row["verdict"], "passed", "{engine} {name}: {row}\n{own}"),
            Want::FailAt(line) => {
                assert_eq!(row["verdict"], "failure", "{engine} {name}: {row}\n{own}");
                assert!(
                    own.contains(line),
                    "{engine} {name} failed, and not at its known line ({line}):\n{own}"
                );
            }
        }
    }
}
