//! ndctl's default test set on the kernel's own NVDIMM emulation, as ndctl's maintainers
//! run it, through the product as a user types it: `pmemvm suite ndctl --engine nested
//! --nfit-test --kernel bzImage --modules DIR --src TREE TEST...` — the kernel's
//! `tools/testing/nvdimm` modules built on the host against the user's modular kernel (the
//! modular kernel of `guest-images/build.sh --modular`, found through its modules'
//! `lib/modules/<release>/build` link), that kernel booted under pmemvm nested with them,
//! and ndctl's own `meson test` in the Debian guest on `nfit_test.0`/`nfit_test.1`.
//!
//! Checked: each chosen test **passed** in meson's JUnit XML (a skip fails); ndctl's own
//! `test/core.c` check passed, which refuses production modules (each of nfit, libnvdimm,
//! nd_pmem, nd_btt, nd_e820, device_dax and dax_pmem must resolve to `extra/` and carry the
//! out-of-tree taint) — and the guest's kernel log names the nfit_test buses; the user's
//! `--modules` tree is not written (its file list and sizes before and after).
//!
//! Skips when QEMU, the guest image, the modular kernel, a tool of the L1 preparation or
//! ndctl's source tree is missing (strict mode fails). Holds one TCG slot while its L1 runs.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use pmemvm_tests::pmemvm::TempDir;
use pmemvm_tests::require;

/// The tests this tier runs and wants passed: libndctl (the library against every
/// nfit_test DIMM, namespace, BTT, PFN and DAX path), the DSM failure paths, namespace
/// creation, error injection and clearing through nfit_test's ARS, SMART injection, the
/// shutdown-count DSM and sector mode. The rest of the set runs on demand (`pmemvm suite
/// ndctl --nfit-test`; docs/ndctl-suite.md has the whole table): CI's time.
const MUST_PASS: [&str; 7] = [
    "libndctl",
    "dsm-fail",
    "create.sh",
    "clear.sh",
    "inject-smart.sh",
    "ack-shutdown-count-set",
    "sector-mode.sh",
];
/// The boot's limit (pmemvm's `--timeout`); meson gives each test 600 s × 3.
const BOOT_TIMEOUT_SECS: u64 = 1800;
/// The boot with its L1's, the ndctl and nfit_test builds and the root file system.
const DEADLINE: Duration = Duration::from_secs(BOOT_TIMEOUT_SECS + 600);

/// Every file and link under `dir` with its size: what "not written" is compared on.
fn listing(dir: &Path) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            let meta = std::fs::symlink_metadata(&p).expect("stat a module file");
            if meta.is_dir() {
                stack.push(p.clone());
            }
            out.push((p.display().to_string(), meta.len()));
        }
    }
    out.sort();
    out
}

#[test]
#[ignore = "full: ndctl's default set on nfit_test takes about 210 s of nested TCG time; the landing tier's ndctl check is nested_ndctl_suite"]
fn ndctl_default_set_passes_on_nfit_test_built_against_the_users_modular_kernel() {
    let src = require!(pmemvm_tests::ndctl::source());
    let kernel = require!(pmemvm_tests::own_kernel::modular_kernel());
    // One TCG slot: `--cpus 1` gives the L1 one vCPU.
    let _tcg = require!(pmemvm_tests::nested::engine_ready());
    let dir = TempDir::new("nested-nfit-test");
    let out_dir = dir.join("out");
    let before = listing(&kernel.modules);
    let mut args: Vec<OsString> = vec!["--nfit-test".into(), "--kernel".into()];
    args.push(kernel.bz_image.clone().into());
    args.push("--modules".into());
    args.push(kernel.modules.clone().into());
    args.extend(MUST_PASS.iter().map(OsString::from));
    let (out, summary) =
        pmemvm_tests::ndctl::run_nested(&src, BOOT_TIMEOUT_SECS, &args, &out_dir, DEADLINE);
    let boots = summary["boots"].as_array().cloned().unwrap_or_default();
    assert_eq!(boots.len(), 1, "one boot\n{}", out.dump());
    let boot_dir = PathBuf::from(boots[0]["dir"].as_str().unwrap_or_default());
    let results = boot_dir.join("ndctl-results");
    let log = std::fs::read_to_string(results.join("meson-1/testlog.txt")).unwrap_or_default();
    let rows = summary["rows"].as_array().cloned().unwrap_or_default();
    assert_eq!(
        rows.len(),
        MUST_PASS.len(),
        "one row per test\n{}",
        out.dump()
    );
    for name in MUST_PASS {
        let row = rows
            .iter()
            .find(|r| r["test"] == name)
            .unwrap_or_else(|| panic!("{name} has no row\n{}", out.dump()));
        assert_eq!(row["bus"], "nfit_test", "{row}");
        assert_eq!(
            row["verdict"],
            "passed",
            "{name}: {row}\n{}\n--- meson log ---\n{log}",
            out.dump()
        );
        let line = out
            .stdout
            .lines()
            .find(|l| l.split_whitespace().next() == Some(name))
            .unwrap_or_else(|| panic!("{name} is not in the table:\n{}", out.stdout));
        assert!(
            line.contains("nfit_test") && line.contains("pass ("),
            "{line}"
        );
    }
    assert_eq!(out.status, Some(0), "the suite's status\n{}", out.dump());
    // The test modules, not the kernel's own: libndctl's ndctl_test_init() refuses a module
    // outside extra/ or without the O taint, so its pass says so; the buses were nfit_test's.
    let dmesg = std::fs::read_to_string(results.join("dmesg.txt")).unwrap_or_default();
    assert!(
        dmesg.contains("nfit_test.0"),
        "the guest's kernel log names nfit_test.0:\n{}",
        pmemvm_tests::nested::tail(&dmesg, 40)
    );
    let platform = std::fs::read_to_string(results.join("platform.txt")).unwrap_or_default();
    assert!(
        platform.contains("kernel ") && platform.contains(&kernel.release),
        "the guest ran the user's modular kernel {}:\n{platform}",
        kernel.release
    );
    // The user's module tree was only read.
    assert_eq!(listing(&kernel.modules), before, "--modules was written");
    let built = out_dir
        .join("nfit-test-modules/lib/modules")
        .join(&kernel.release);
    assert!(
        built.join("extra/nfit_test.ko").is_file(),
        "the run's own module tree has the test modules: {}",
        built.display()
    );
}
