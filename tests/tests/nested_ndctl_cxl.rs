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
//! Landing tier (about 120 s here): the one test of regions, labels and namespaces on
//! `--cxl-pmem` that CI runs. Skips when QEMU, the guest image, a tool of the L1 preparation
//! or ndctl's source tree is missing (strict mode fails). Holds one TCG slot while its L1s
//! run.

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
    /// A skip (status 77) whose own log holds this line.
    SkipAt(&'static str),
}

/// pmemvm's column (docs/ndctl-suite.md, "ndctl's CXL tests on the platform's CXL bus"), on
/// the guest image's Linux 6.1.
const PMEMVM: [(&str, Want); 7] = [
    // cxl_test commits a region's decoders before Linux starts (an "autodiscovered region");
    // a device after power-on, pmemvm's and QEMU's, has none committed.
    (
        "cxl-topology.sh",
        Want::FailAt("test/cxl-topology.sh: failed at line 28"),
    ),
    // cxl_test's root decoder that interleaves two host bridges (`nr_targets == 2`); each of
    // pmemvm's windows targets one host bridge, so the test's decoder name is empty.
    (
        "cxl-region-sysfs.sh",
        Want::FailAt("test/cxl-region-sysfs.sh: failed at line 40"),
    ),
    ("cxl-labels.sh", Want::Pass),
    // Two 256 MiB regions on one device: each host bridge has a second, empty root port, so
    // Linux 6.1 programs the bridge's own HDM decoders, one per region (with one root port it
    // gives the bridge a single pass-through decoder: drivers/cxl/port.c, `rc == 1`).
    ("cxl-create-region.sh", Want::Pass),
    // Passes without a region: it destroys regions of a device with volatile capacity
    // (cxl_test's), which a --cxl-pmem device does not have.
    ("cxl-destroy-region.sh", Want::Pass),
    // Linux 6.1 has no CXL trace events (drivers/cxl/core/trace.h arrived in 6.3).
    (
        "cxl-poison.sh",
        Want::FailAt("test/cxl-poison.sh: failed at line 130"),
    ),
    (
        "cxl-events.sh",
        Want::FailAt("test/cxl-events.sh: failed at line 64"),
    ),
];

/// QEMU's column: its `cxl-type3` device behind `pxb-cxl` and one `cxl-rp` (the QEMU
/// engine's peer of `--cxl-pmem`): the same lines but `cxl-create-region.sh`'s, whose second
/// region finds no decoder at a host bridge of one root port under Linux 6.1.
const QEMU: [(&str, Want); 7] = [
    PMEMVM[0],
    PMEMVM[1],
    PMEMVM[2],
    (
        "cxl-create-region.sh",
        Want::FailAt("test/cxl-create-region.sh: failed at line 97"),
    ),
    PMEMVM[4],
    PMEMVM[5],
    PMEMVM[6],
];

/// pmemvm's column on Linux 6.12 (`guest-images/build.sh --linux 6.12`, `suite ndctl
/// --kernel`), which has the CXL trace events, poison commands and event handling: the
/// two tests 6.1 stopped in now go on to their own `cxl_test` assumptions.
const PMEMVM_612: [(&str, Want); 7] = [
    PMEMVM[0],
    PMEMVM[1],
    PMEMVM[2],
    PMEMVM[3],
    PMEMVM[4],
    // `find_memdev` wants a device with volatile and persistent capacity (cxl_test's mixed
    // mock); a --cxl-pmem device is persistent only. The test's inject, clear and
    // `--media-errors` steps have their pmemvm counterpart in nested_cxl_events.
    (
        "cxl-poison.sh",
        Want::FailAt("test/cxl-poison.sh: failed at line 31"),
    ),
    // cxl_test's `event_trigger` file (its mock's canned records); the test exits 77 without
    // it. A real device's records, through its MSI: nested_cxl_events.
    (
        "cxl-events.sh",
        Want::SkipAt("TEST: Kernel does not support test event trigger"),
    ),
];

/// QEMU's column on Linux 6.12: as pmemvm's, but `cxl-create-region.sh`'s second region
/// (QEMU's host bridge has one root port and no decoder left for it).
const QEMU_612: [(&str, Want); 7] = [
    PMEMVM_612[0],
    PMEMVM_612[1],
    PMEMVM_612[2],
    QEMU[3],
    PMEMVM_612[4],
    PMEMVM_612[5],
    PMEMVM_612[6],
];

/// The boot's limit (pmemvm's `--timeout`).
const BOOT_TIMEOUT_SECS: u64 = 1800;
/// Two boots (one per engine), each with its L1's boot, the ndctl build and the root file
/// system.
const DEADLINE: Duration = Duration::from_secs(2 * (BOOT_TIMEOUT_SECS + 300) + 600);

/// `pmemvm suite ndctl --engine nested,qemu [KERNEL] TESTS` in `dir/out` (the tests of
/// `pmemvm`, after `kernel`'s `--kernel` when given), each engine's column checked against
/// `pmemvm` and `qemu`: every mismatch at once, each with its test's own log.
fn run_and_check(
    src: &std::path::Path,
    dir: &TempDir,
    kernel: Option<&std::path::Path>,
    pmemvm: &[(&str, Want)],
    qemu: &[(&str, Want)],
) {
    let mut args: Vec<std::ffi::OsString> = Vec::new();
    if let Some(k) = kernel {
        args.extend(["--kernel".into(), k.into()]);
    }
    args.extend(pmemvm.iter().map(|(t, _)| t.into()));
    let (out, summary) = pmemvm_tests::ndctl::run_engines(
        "nested,qemu",
        src,
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
    if kernel.is_some() {
        for engine in ["nested", "qemu"] {
            let console = dir.join(&format!("out/{engine}/boot-1-cxl.console.log"));
            let console = std::fs::read_to_string(&console).unwrap_or_default();
            assert!(
                console.contains("pmemvm-init: kernel 6.12."),
                "{engine}'s boot ran Linux 6.12:\n{}",
                out.dump()
            );
        }
    }
    let qemu_logs = pmemvm_tests::ndctl::engine_logs(&summary, "qemu");
    let mut wrong = check_column(&summary, "nested", pmemvm, &logs, &out);
    wrong.extend(check_column(&summary, "qemu", qemu, &qemu_logs, &out));
    assert!(wrong.is_empty(), "{}", wrong.join("\n\n"));
}

#[test]
fn ndctl_cxl_tests_pass_or_fail_at_their_named_cxl_test_line_on_pmemvm_and_qemu() {
    let src = require!(pmemvm_tests::ndctl::source());
    let _tcg = require!(pmemvm_tests::nested::engine_ready());
    let dir = TempDir::new("nested-ndctl-cxl");
    run_and_check(&src, &dir, None, &PMEMVM, &QEMU);
}

#[test]
#[ignore = "full: two boots of the Linux 6.12 kernel (built only for the full tier); ndctl's CXL tests land on 6.1 through ndctl_cxl_tests_pass_or_fail_at_their_named_cxl_test_line_on_pmemvm_and_qemu"]
fn on_linux_6_12_poison_and_events_reach_their_own_cxl_test_lines_on_pmemvm_and_qemu() {
    let src = require!(pmemvm_tests::ndctl::source());
    let _tcg = require!(pmemvm_tests::nested::engine_ready());
    let kernel = require!(pmemvm_tests::own_kernel::linux_612());
    let dir = TempDir::new("nested-ndctl-cxl-612");
    run_and_check(&src, &dir, Some(&kernel.bz_image), &PMEMVM_612, &QEMU_612);
}

/// How `engine`'s rows differ from `want` (one row per test, each as written), each
/// with the test's own log.
fn check_column(
    summary: &serde_json::Value,
    engine: &str,
    want: &[(&str, Want)],
    logs: &str,
    out: &pmemvm_tests::pmemvm::Output,
) -> Vec<String> {
    let rows: Vec<&serde_json::Value> = summary["rows"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|r| r["engine"] == engine)
        .collect();
    assert_eq!(rows.len(), want.len(), "one row per test\n{}", out.dump());
    // Every test's mismatch at once, each with its own log.
    let mut wrong = Vec::new();
    for (name, w) in want {
        let row = rows
            .iter()
            .find(|r| r["test"] == *name)
            .unwrap_or_else(|| panic!("{name} has no {engine} row\n{}", out.dump()));
        let own = pmemvm_tests::ndctl::own_log(logs, name);
        let (verdict, line) = match w {
            Want::Pass => ("passed", None),
            Want::FailAt(l) => ("failure", Some(*l)),
            Want::SkipAt(l) => ("skipped", Some(*l)),
        };
        if row["verdict"] != verdict || line.is_some_and(|l| !own.contains(l)) {
            wrong.push(format!(
                "{engine} {name}: {} where {verdict}{} is written\n{own}",
                row["verdict"],
                line.map(|l| format!(" at '{l}'")).unwrap_or_default()
            ));
        }
    }
    wrong
}
