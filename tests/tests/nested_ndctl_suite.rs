//! ndctl's own test suite (upstream ndctl v81, unmodified) judges pmemvm's NVDIMMs,
//! through the product as a user types it: `pmemvm suite ndctl --engine nested --src TREE
//! TEST...` — ndctl built on the host, `meson test` in a Debian guest under pmemvm nested,
//! in the boots the command's plan shapes for the tests:
//!
//! - the destructive ACPI.NFIT tests on pmemvm's NVDIMMs (`pmem-ns`, `sub-section.sh`,
//!   `daxctl-devices.sh`);
//! - the e820 tests on `--pmem-legacy` (`dax-ext4.sh`, `dax-xfs.sh`, `device-dax`,
//!   `revoke-devmem`);
//! - ndctl's error scripts, written for the kernel's nfit_test, pointed at pmemvm's
//!   ACPI.NFIT bus at run time (`clear.sh`, `pmem-errors.sh`, `inject-error.sh`,
//!   `inject-smart.sh`, `monitor.sh`): ARS, error injection, clear, SMART and the
//!   monitor against pmemvm's `_DSM`.
//!
//! Every test must have **passed** in meson's JUnit XML (a skip fails: it would mean the
//! test did not find what it tests) and the table must show it — except `inject-smart.sh`,
//! which must fail exactly at its assumption of nfit_test's fixture (a healthy DIMM's
//! health is "ok", which its script cannot read), so the command's status is 1. pmem-ns
//! must say it found the ACPI.NFIT provider (not nfit_test).
//!
//! The same command runs every boot on QEMU's NVDIMM too (`--engine nested,qemu`), as a
//! user compares the two, and the one table has both columns: on QEMU the ACPI.NFIT tests
//! pass, the error scripts fail for want of error injection and SMART in its `_DSM`, and
//! the e820 tests are `n/a` (its engine has no legacy pmem).
//!
//! The guests have one vCPU here (the product's default is two): ndctl's tests run one at
//! a time, and a 2-vCPU L1 of this emulated platform broke down in most multi-minute boots
//! of this suite — its halted vCPU not woken with interrupts pending, a triple fault, a
//! guest whose timer wake-up never came (docs/ndctl-suite.md, "The platform under the
//! suite"); with one L1 vCPU, of those, none was seen.
//!
//! Skips when QEMU, the guest image, a tool of the L1 preparation or ndctl's source
//! tree is missing (strict mode fails). Holds one TCG slot while its L1s run.

use std::process::Command;
use std::time::Duration;

use pmemvm_tests::ndctl::{engine_logs, own_log};
use pmemvm_tests::pmemvm::{pmemvm_bin, TempDir};
use pmemvm_tests::require;

/// The tests this tier runs (every one in the command's default plan) and wants passed: the
/// destructive ACPI.NFIT tests that need no large DIMM, the e820 DAX file-system and
/// device-dax tests, daxctl's memory hot-plug, and ndctl's error scripts on pmemvm's bus.
/// `revoke-devmem` (3 s) proves the guest kernel revokes a `/dev/mem` mapping of a range a
/// driver claims (`CONFIG_IO_STRICT_DEVMEM`, which the image lacked until ndctl's test found it).
/// The plan's other tests (`align.sh`, `dm.sh`, `mmap.sh`, `device-dax-fio.sh`, `dax-dev` on
/// its own) are left to `pmemvm suite ndctl` on demand: CI's time, and docs/ndctl-suite.md has
/// their results and causes.
const MUST_PASS: [&str; 11] = [
    "pmem-ns",
    "sub-section.sh",
    "dax-ext4.sh",
    "dax-xfs.sh",
    "device-dax",
    "revoke-devmem",
    "daxctl-devices.sh",
    "clear.sh",
    "pmem-errors.sh",
    "inject-error.sh",
    "monitor.sh",
];
/// Tests of the plan whose failure on a healthy platform is the test's own assumption of
/// the kernel's nfit_test fixture, with the line of the log that shows it (docs/ndctl-suite.md
/// has the evidence): they must fail exactly so — another failure, or a pass, fails here.
const NFIT_TEST_ONLY: [(&str, &str); 1] = [(
    // Its `fatal` step reads the DIMM's health before injecting and knows only
    // nfit_test's fixture values ("non-critical", "fatal"); a healthy DIMM says "ok".
    "inject-smart.sh",
    "printf: ok: invalid number",
)];
/// Tests with a check of speed that an emulated CPU can miss, with the line it prints then:
/// they must pass or fail exactly there (any other failure fails here). `device-dax` checks
/// that the device-dax mapping is cacheable by timing a loop over 8 KiB against 30.7 ms; under
/// nested TCG beside another TCG guest it took 32.7 ms, after every functional step of it
/// (O_DIRECT from and to the mapping, remap, poison, soft offline) had passed.
const SPEED_ON_EMULATION: [(&str, &str); 1] = [("device-dax", "verify loop took too long")];
/// Each boot's limit (pmemvm's `--timeout`); meson gives each test 600 s × 3.
const BOOT_TIMEOUT_SECS: u64 = 2400;
/// Two boots, each with its L1's boot, the ndctl build and the root file system.
const DEADLINE: Duration = Duration::from_secs(2 * (BOOT_TIMEOUT_SECS + 300) + 600);

/// The landing tier's two of ndctl's tests, as a user types them: `pmemvm
/// suite ndctl --engine nested --src TREE pmem-ns clear.sh` — namespaces on
/// pmemvm's ACPI.NFIT bus, and an nfit_test error script (ARS, injection,
/// clear) pointed at it; both must pass and the command's status is 0.
#[test]
fn two_ndctl_tests_pass_on_pmemvm_nested() {
    let src = require!(pmemvm_tests::ndctl::source());
    let _tcg = require!(pmemvm_tests::nested::engine_ready());
    let dir = TempDir::new("nested-ndctl-two");
    let chosen = ["pmem-ns", "clear.sh"];
    let args: Vec<std::ffi::OsString> = chosen.iter().map(Into::into).collect();
    let (out, summary) = pmemvm_tests::ndctl::run_engines(
        "nested",
        &src,
        BOOT_TIMEOUT_SECS,
        &args,
        &dir.join("out"),
        DEADLINE,
    );
    check_nested_column(&summary, &chosen, &out);
    assert_eq!(out.status, Some(0), "the suite's status\n{}", out.dump());
}

/// A plan whose setup step fails, as a user would meet it: `pmemvm suite
/// ndctl --engine nested --src TREE daxctl-devices.sh`, whose step before the
/// test (`ndctl create-namespace -b ACPI.NFIT -s 1G`) exits with status 3
/// (`PMEMVM_TEST_FAULT=suite-step-fails`, debug builds): the test fails
/// whatever meson says of it, its row says why, and the command's status is 1.
#[test]
#[ignore = "full: one more nested suite boot; the row logic lands through suite::rows's unit tests"]
fn a_plan_whose_setup_step_fails_fails_its_test_and_the_run() {
    let src = require!(pmemvm_tests::ndctl::source());
    let _tcg = require!(pmemvm_tests::nested::engine_ready());
    let dir = TempDir::new("nested-ndctl-step");
    let args = [std::ffi::OsString::from("daxctl-devices.sh")];
    let (out, summary) = pmemvm_tests::ndctl::run_engines_env(
        "nested",
        &src,
        BOOT_TIMEOUT_SECS,
        &args,
        &dir.join("out"),
        DEADLINE,
        &[("PMEMVM_TEST_FAULT", "suite-step-fails")],
    );
    assert_eq!(out.status, Some(1), "the suite's status\n{}", out.dump());
    assert!(
        out.stdout.contains(
            "daxctl-devices.sh failed on nested: its setup step `ndctl create-namespace -b ACPI.NFIT -s 1G` failed with status 3"
        ),
        "the row says why\n{}\n{summary:#}",
        out.dump()
    );
}

#[test]
#[ignore = "full: every test of the default plan but the slow five, on pmemvm nested and QEMU's NVDIMM, two boots per engine (the landing tier runs two of them on pmemvm)"]
fn ndctl_suite_passes_on_pmemvm_nvdimms_and_legacy_pmem() {
    let src = require!(pmemvm_tests::ndctl::source());
    // One TCG slot: `--cpus 1` gives the L1 one vCPU.
    let _tcg = require!(pmemvm_tests::nested::engine_ready());
    let dir = TempDir::new("nested-ndctl");
    let out_dir = dir.join("out");
    let plan = pmemvm_tests::pmemvm::run_cmd(
        Command::new(pmemvm_bin())
            .args(["suite", "ndctl", "--plan", "--src"])
            .arg(&src),
        Duration::from_secs(20),
    );
    assert_eq!(plan.status, Some(0), "{}", plan.dump());
    let planned: Vec<String> = plan
        .stdout
        .lines()
        .filter_map(|l| l.trim().strip_prefix("tests: "))
        .flat_map(|l| l.split(", ").map(str::to_string))
        .collect();
    for name in MUST_PASS
        .iter()
        .chain(NFIT_TEST_ONLY.iter().map(|(t, _)| t))
    {
        assert!(
            planned.iter().any(|p| p == name),
            "{name} is not in the default plan:\n{}",
            plan.stdout
        );
    }
    let chosen: Vec<&str> = MUST_PASS
        .iter()
        .chain(NFIT_TEST_ONLY.iter().map(|(t, _)| t))
        .copied()
        .collect();
    // A breakdown of the emulated platform (the L1's own fault or stall, a guest triple fault
    // at a RIP inside the L1's modules: docs/nested-platform.md, "The evidence the harness
    // accepts") runs the command again (up to `BREAKDOWN_TRIES` runs), noted in the run's
    // summary; any other end is the result.
    let args: Vec<std::ffi::OsString> = chosen.iter().map(Into::into).collect();
    // QEMU's NVDIMM beside it in the same command, as a user compares them (one table).
    let (out, summary) = pmemvm_tests::ndctl::run_engines(
        "nested,qemu",
        &src,
        BOOT_TIMEOUT_SECS,
        &args,
        &out_dir,
        DEADLINE,
    );
    let all_rows = summary["rows"].as_array().cloned().unwrap_or_default();
    let of = |engine: &str| -> Vec<serde_json::Value> {
        all_rows
            .iter()
            .filter(|r| r["engine"] == engine)
            .cloned()
            .collect()
    };
    check_qemu_column(&of("qemu"), &chosen, &engine_logs(&summary, "qemu"), &out);
    let header = out
        .stdout
        .lines()
        .find(|l| l.starts_with("test "))
        .unwrap_or_default();
    assert!(
        header.contains("nested") && header.contains("qemu"),
        "one table with a column per engine:\n{}",
        out.stdout
    );
    check_nested_column(&summary, &chosen, &out);
    // 1: the nfit_test-only failure above is a failure of the command too.
    assert_eq!(out.status, Some(1), "the suite's status\n{}", out.dump());
}

/// pmemvm's column: one row per `chosen` test, each passed or failed exactly at
/// its known cause (`check_nested_row`); ndctl's tests ran on pmemvm's
/// ACPI.NFIT bus, and its nfit_test scripts were pointed at it.
fn check_nested_column(
    summary: &serde_json::Value,
    chosen: &[&str],
    out: &pmemvm_tests::pmemvm::Output,
) {
    let rows: Vec<&serde_json::Value> = summary["rows"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|r| r["engine"] == "nested")
        .collect();
    assert_eq!(rows.len(), chosen.len(), "one row per test\n{}", out.dump());
    let logs = || engine_logs(summary, "nested");
    for name in chosen {
        let row = rows
            .iter()
            .find(|r| r["test"] == *name)
            .unwrap_or_else(|| panic!("{name} has no row in summary.json\n{}", out.dump()));
        check_nested_row(name, row, out, &logs);
    }
    assert!(
        logs().contains("found provider: ACPI.NFIT"),
        "pmem-ns ran on pmemvm's ACPI.NFIT bus, not nfit_test"
    );
    assert!(
        logs().contains("the test runs on ACPI.NFIT"),
        "the nfit_test scripts were pointed at pmemvm's bus (their modprobe nfit_test answered)"
    );
}

#[test]
fn a_tests_own_log_is_cut_from_meson_s_text_log_at_the_test_lines() {
    let logs = "==== 1/2 ====\ntest:         ndctl:dax / device-dax\nverify loop took too long\n\
                ==== 2/2 ====\ntest:         ndctl:dax / dax-dev\nother\n";
    assert!(own_log(logs, "device-dax").contains("verify loop took too long"));
    assert!(!own_log(logs, "dax-dev").contains("verify loop took too long"));
    assert!(own_log(logs, "dax").is_empty(), "a name is matched whole");
}

/// QEMU's column: the ACPI.NFIT tests pass on its NVDIMM; the error scripts fail for want of
/// error injection (and SMART) in its `_DSM`; the e820 tests are `n/a` (no legacy pmem).
fn check_qemu_column(
    rows: &[serde_json::Value],
    chosen: &[&str],
    logs: &str,
    out: &pmemvm_tests::pmemvm::Output,
) {
    assert_eq!(
        rows.len(),
        chosen.len(),
        "one QEMU row per test\n{}",
        out.dump()
    );
    let row = |name: &str| {
        rows.iter()
            .find(|r| r["test"] == name)
            .unwrap_or_else(|| panic!("{name} has no QEMU row\n{}", out.dump()))
            .clone()
    };
    for name in ["pmem-ns", "sub-section.sh", "daxctl-devices.sh"] {
        assert_eq!(row(name)["verdict"], "passed", "QEMU {name}\n{logs}");
    }
    for name in ["dax-ext4.sh", "dax-xfs.sh", "device-dax", "revoke-devmem"] {
        let why = row(name)["not_applicable"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        assert!(why.contains("QEMU's engine has none"), "QEMU {name}: {why}");
    }
    for name in [
        "clear.sh",
        "pmem-errors.sh",
        "inject-error.sh",
        "inject-smart.sh",
        "monitor.sh",
    ] {
        assert_eq!(row(name)["verdict"], "failure", "QEMU {name}\n{logs}");
    }
    assert!(
        logs.contains("error injection not supported"),
        "QEMU's error scripts fail at its _DSM's missing injection:\n{logs}"
    );
}

/// One test's result under pmemvm nested: passed, or failed exactly at a known cause.
fn check_nested_row(
    name: &str,
    row: &serde_json::Value,
    out: &pmemvm_tests::pmemvm::Output,
    logs: &dyn Fn() -> String,
) {
    if let Some((_, marker)) = SPEED_ON_EMULATION.iter().find(|(t, _)| *t == name) {
        if row["verdict"] != "passed" {
            assert_eq!(row["verdict"], "failure", "{name}: {row}\n{}", logs());
            // Its own output only: the line elsewhere in the logs proves nothing of it.
            assert!(
                own_log(&logs(), name).contains(marker),
                "{name} failed, and not at its check of speed ({marker}):\n{}",
                logs()
            );
            eprintln!("{name}: failed at its check of speed only ({marker}): the emulated CPU");
        }
        return;
    }
    if let Some((_, marker)) = NFIT_TEST_ONLY.iter().find(|(t, _)| *t == name) {
        assert_eq!(row["verdict"], "failure", "{name}: {row}\n{}", logs());
        assert!(
            own_log(&logs(), name).contains(marker),
            "{name} failed, but not at its nfit_test assumption ({marker}):\n{}",
            logs()
        );
        return;
    }
    assert_eq!(
        row["verdict"],
        "passed",
        "{name}: {row}\n{}\n--- meson logs ---\n{}",
        out.dump(),
        logs()
    );
    let line = out
        .stdout
        .lines()
        .find(|l| l.split_whitespace().next() == Some(name))
        .unwrap_or_else(|| panic!("{name} is not in the table:\n{}", out.stdout));
    assert!(line.contains("pass ("), "{line}");
}
