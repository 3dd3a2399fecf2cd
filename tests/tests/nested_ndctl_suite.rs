//! ndctl's own test suite (upstream ndctl v81, unmodified, built with meson on the
//! host by `guest-images/suites/ndctl-build.sh`) against pmemvm's NVDIMMs, through
//! the product: `pmemvm run --engine nested --rootfs debian --packages ...` with two
//! 1 GiB DIMMs, `meson test` in the guest (`guest-images/suites/ndctl-suite.sh`) and
//! the JUnit XML back with `--get`. The destructive tests that use the ACPI.NFIT bus:
//!
//! - `pmem-ns`: zeroes the labels of every DIMM on the bus, creates one full-size
//!   namespace, I/O on its first and last page;
//! - `sub-section.sh`: up to ten 16 MiB namespaces in one region, each with ext4
//!   mounted `-o dax`, then disabled, enabled and destroyed.
//!
//! Each must have **passed** in the JUnit XML (not skipped: a skip would mean the
//! test did not find pmemvm's ACPI.NFIT bus, e.g. pmem-ns falls back to nfit_test),
//! pmem-ns must say it found the ACPI.NFIT provider, and the run's status must be 0.
//!
//! Skips when QEMU, the guest image, a tool of the L1 preparation or ndctl's source
//! tree is missing. Holds the machine's TCG lock while its L1 runs.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use pmemvm_tests::guest_inputs::rootfs_or_fail;
use pmemvm_tests::pmemvm::{pmemvm_bin, workspace_root, TempDir};
use pmemvm_tests::require;
use pmemvm_tests::skip::Skip;
use pmemvm_tests::tcg::TcgGuard;

/// The ndctl tests run, in this order (meson runs them serially).
const TESTS: [&str; 2] = ["pmem-ns", "sub-section.sh"];
/// pmemvm's own limit for the guest; the test's deadline is above it. meson gives each
/// test 600 s × 3 (`ndctl-suite.sh`'s timeout multiplier): a loaded CI host once took
/// 600.6 s for sub-section.sh (about 60 s alone), which meson ends as a time-out.
const GUEST_TIMEOUT_SECS: u64 = 2400;
const DEADLINE: Duration = Duration::from_secs(GUEST_TIMEOUT_SECS + 300);
/// Where ndctl's tree is when `PMEMVM_NDCTL_SRC` is not set.
const DEFAULT_SRC: &str = "/work/shared/third-party/ndctl-v81";

/// QEMU, the guest image and the L1 are there; the guard holds the TCG lock.
fn ready() -> Result<TcgGuard, Skip> {
    pmemvm_tests::nested::find_qemu()?;
    pmemvm_tests::image::image_dir()?;
    match pmemvm_tests::nested::prepare_l1() {
        Ok(_) => {}
        Err(pmemvm_tests::nested::NestedError::Unavailable(s)) => return Err(s),
        Err(e) => panic!("preparing the L1 failed: {e}"),
    }
    // `--cpus 2`: the nested engine gives the L1 two vCPUs, so the test holds two slots.
    Ok(pmemvm_tests::tcg::lock_n(2).expect("take two TCG slots"))
}

/// ndctl's source tree: `$PMEMVM_NDCTL_SRC` or the default; missing is a skip.
fn ndctl_source() -> Result<PathBuf, Skip> {
    let src = std::env::var_os("PMEMVM_NDCTL_SRC")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(DEFAULT_SRC));
    if src.join("meson.build").is_file() && src.join("test/meson.build").is_file() {
        Ok(src)
    } else {
        Err(Skip::new(format!(
            "ndctl's source tree is not at {}: get ndctl v81 with `git clone --branch v81 https://github.com/pmem/ndctl` and set PMEMVM_NDCTL_SRC to it",
            src.display()
        )))
    }
}

/// The cached tree of `ndctl-build.sh SRC` (holding `path`, `src/`, `build/`); a
/// failed build fails the test.
fn ndctl_tree(src: &Path) -> PathBuf {
    let script = workspace_root().join("guest-images/suites/ndctl-build.sh");
    let out = Command::new("bash")
        .arg(&script)
        .arg(src)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", script.display()));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let build = stdout.lines().last().map(PathBuf::from);
    match build {
        Some(b) if out.status.success() && b.join("meson-private").is_dir() => {
            b.parent().expect("the build's tree").to_path_buf()
        }
        _ => panic!(
            "{} {} failed ({}):\n{}",
            script.display(),
            src.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ),
    }
}

/// One `<testcase>` of meson's JUnit XML.
#[derive(Debug)]
struct Case {
    name: String,
    time: f64,
    /// `passed`, `skipped`, `failure` or `error`.
    result: &'static str,
}

fn attr(tag: &str, name: &str) -> Option<String> {
    let start = tag.find(&format!(" {name}=\""))? + name.len() + 3;
    let len = tag[start..].find('"')?;
    Some(tag[start..start + len].to_string())
}

/// The test cases of meson's `testlog.junit.xml` (ElementTree output: attributes in
/// double quotes, text escaped, so no `<` inside a case but its child elements).
fn junit_cases(xml: &str) -> Vec<Case> {
    let mut cases = Vec::new();
    let mut rest = xml;
    while let Some(i) = rest.find("<testcase ") {
        rest = &rest[i..];
        let tag_end = rest.find('>').expect("a closed <testcase> tag");
        let tag = &rest[..tag_end];
        let body = if tag.ends_with('/') {
            ""
        } else {
            let end = rest.find("</testcase>").expect("</testcase>");
            &rest[tag_end..end]
        };
        let result = if body.contains("<skipped") {
            "skipped"
        } else if body.contains("<failure") {
            "failure"
        } else if body.contains("<error") {
            "error"
        } else {
            "passed"
        };
        cases.push(Case {
            name: attr(tag, "name").unwrap_or_default(),
            time: attr(tag, "time")
                .and_then(|t| t.parse().ok())
                .unwrap_or(-1.0),
            result,
        });
        rest = &rest[tag_end..];
    }
    cases
}

#[test]
fn junit_cases_reads_meson_results() {
    let xml = r#"<?xml version='1.0' encoding='utf-8'?>
<testsuites tests="3"><testsuite name="ndctl" tests="3">
<testcase name="ndctl:ndctl / pmem-ns" classname="ndctl" time="12.5"><system-out>found provider: ACPI.NFIT &lt;ok&gt;</system-out></testcase>
<testcase name="sub-section.sh" classname="ndctl:dax" time="3.25"><skipped /></testcase>
<testcase name="dm.sh" classname="ndctl:dax" time="1.0"><failure /><system-err>x</system-err></testcase>
<testcase name="align.sh" classname="ndctl:ndctl" time="2" />
</testsuite></testsuites>"#;
    let cases = junit_cases(xml);
    let got: Vec<(&str, &str, f64)> = cases
        .iter()
        .map(|c| (c.name.as_str(), c.result, c.time))
        .collect();
    assert_eq!(
        got,
        [
            ("ndctl:ndctl / pmem-ns", "passed", 12.5),
            ("sub-section.sh", "skipped", 3.25),
            ("dm.sh", "failure", 1.0),
            ("align.sh", "passed", 2.0),
        ]
    );
}

#[test]
fn ndctl_suite_passes_on_pmemvm_nvdimms() {
    let src = require!(ndctl_source());
    let _tcg = require!(ready());
    let tree = ndctl_tree(&src);
    let suite = workspace_root().join("guest-images/suites/ndctl-suite.sh");
    let packages =
        std::fs::read_to_string(workspace_root().join("guest-images/suites/ndctl-packages"))
            .expect("guest-images/suites/ndctl-packages");
    let packages = packages.trim();
    // Every Debian package holding a library the built binaries link (found by
    // ndctl-build.sh with ldd) is in the root file system's list.
    let runtime = std::fs::read_to_string(tree.join("runtime-packages"))
        .expect("the tree's runtime-packages");
    let listed: Vec<&str> = packages.split(',').collect();
    for p in runtime.lines().filter(|l| !l.is_empty()) {
        assert!(
            listed.contains(&p),
            "{p} (a runtime library of the ndctl build) is not in guest-images/suites/ndctl-packages"
        );
    }
    // Built (or found in its cache) before the run, so a failed build reads as such.
    rootfs_or_fail(&["--packages", packages]);
    let dir = TempDir::new("nested-ndctl");
    let out_dir = dir.join("out");
    let record = dir.join("run.json");
    let put_tree = format!("{}:/job/ndctl", tree.display());
    let timeout = GUEST_TIMEOUT_SECS.to_string();
    let mut args = vec![
        "run",
        "--engine",
        "nested",
        "--cpus",
        "2",
        "--memory",
        "2G",
        "--nvdimm",
        "1G",
        "--nvdimm",
        "1G",
        "--rootfs",
        "debian",
        "--packages",
        packages,
        "--put",
        &put_tree,
        "--put",
        suite.to_str().expect("a UTF-8 path"),
        "--get",
        "/job/ndctl-results",
        "--out",
        out_dir.to_str().expect("a UTF-8 path"),
        "--json",
        record.to_str().expect("a UTF-8 path"),
        "--timeout",
        &timeout,
        "--",
        "sh",
        "/job/ndctl-suite.sh",
        "/job/ndctl",
    ];
    args.extend(TESTS);
    let started = Instant::now();
    // A triple fault of the 2-vCPU L1 or of the guest in it (TCG's, seen in CI
    // on both QEMUs) is run again (up to `BREAKDOWN_TRIES` runs), counted in the
    // run's summary.
    let out = pmemvm_tests::nested::run_engine_nested(
        || {
            let _ = std::fs::remove_dir_all(&out_dir);
            let _ = std::fs::remove_file(&record);
            let mut c = Command::new(pmemvm_bin());
            c.args(&args)
                .env("PMEMVM_L1_CACHE", pmemvm_tests::nested::cache_dir());
            c
        },
        DEADLINE,
    );
    eprintln!(
        "ndctl suite ({}) under --engine nested: {:.1} s",
        TESTS.join(", "),
        started.elapsed().as_secs_f64()
    );
    let results = out_dir.join("ndctl-results");
    let read = |name: &str| std::fs::read_to_string(results.join(name)).unwrap_or_default();
    let testlog = read("testlog.txt");
    let xml = read("testlog.junit.xml");
    assert!(
        !xml.is_empty(),
        "no JUnit XML came back\n{}\n{testlog}",
        out.dump()
    );
    let cases = junit_cases(&xml);
    for case in &cases {
        println!("{:<16} {:<8} {:>7.1} s", case.name, case.result, case.time);
    }
    for name in TESTS {
        let case = cases
            .iter()
            .find(|c| c.name == name || c.name.ends_with(&format!(" / {name}")))
            .unwrap_or_else(|| panic!("{name} is not in the JUnit XML:\n{xml}"));
        assert_eq!(
            case.result,
            "passed",
            "{name}: {} in {:.1} s\n{testlog}\n--- kernel log ---\n{}",
            case.result,
            case.time,
            read("dmesg.txt")
        );
    }
    assert!(
        testlog.contains("found provider: ACPI.NFIT"),
        "pmem-ns ran on pmemvm's ACPI.NFIT bus, not nfit_test\n{testlog}"
    );
    assert!(
        read("platform.txt").contains("\"provider\":\"ACPI.NFIT\""),
        "{}",
        read("platform.txt")
    );
    assert_eq!(out.status, Some(0), "meson test's status\n{}", out.dump());
}
