//! One skip path, and failures fail: no Rust file of the tree skips around
//! the `pmemvm-skip` crate, and the setups that used to turn a failure into a
//! skip (a wrong `PMEMVM_IMAGE_DIR`, a failing Debian root file system build,
//! a tmpfs that cannot be mounted) fail their test without strict mode too.

use std::process::Command;

use pmemvm_tests::pmemvm::{workspace_root, TempDir};
use pmemvm_tests::require;

#[test]
fn every_skip_goes_through_the_skip_crate() {
    let root = workspace_root();
    let files = pmemvm_tests::skip_lint::rust_files(&root);
    assert!(
        files.len() > 100,
        "only {} Rust files found below {}: the scan looks in the wrong place",
        files.len(),
        root.display()
    );
    let found = pmemvm_tests::skip_lint::scan_tree(&root);
    assert!(
        found.is_empty(),
        "skips around the skip crate:\n{}",
        found
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("\n")
    );
}

// ---- planted failures: run one at a time by the test below ------------------

#[test]
#[ignore = "a planted failure, run by planted_failures_fail_without_strict_mode"]
fn plant_bad_image_dir() {
    // The test process gets PMEMVM_IMAGE_DIR=<a directory without an image>.
    let _ = require!(pmemvm_tests::image::image_dir());
}

#[test]
#[ignore = "a planted failure, run by planted_failures_fail_without_strict_mode"]
fn plant_failing_rootfs_build() {
    // A package list the build script refuses: the build fails, so must the test.
    let _ = pmemvm_tests::guest_inputs::rootfs_or_fail(&["--packages", "NOT A PACKAGE"]);
}

#[test]
#[ignore = "a planted failure, run by planted_failures_fail_without_strict_mode"]
fn plant_unmountable_tmpfs() {
    let dir = TempDir::new("unmountable");
    let _m = require!(pmemvm_tests::mounts::Mounted::new(
        &dir.join("mnt"),
        "tmpfs",
        "size=not-a-size"
    ));
}

/// Runs the planted test `name` of this binary without strict mode; returns
/// (passed, stdout + stderr, the skip log).
fn run_planted(name: &str, env: &[(&str, &str)]) -> (bool, String, String) {
    let exe = std::env::current_exe().expect("this test binary");
    let scratch = TempDir::new("planted");
    let log = scratch.join("skips.log");
    std::fs::write(&log, "").expect("skip log");
    let mut cmd = Command::new(exe);
    cmd.args(["--ignored", "--exact", name, "--test-threads", "1"])
        .env_remove("PMEMVM_TEST_STRICT")
        .env("PMEMVM_SKIP_LOG", &log);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run the planted test");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let skips = std::fs::read_to_string(&log).unwrap_or_default();
    (out.status.success(), text, skips)
}

/// One planted failure: the test to run, its environment, what its failure must say.
struct Planted<'a> {
    name: &'a str,
    env: Vec<(&'a str, &'a str)>,
    says: String,
}

#[test]
fn planted_failures_fail_without_strict_mode() {
    let empty = TempDir::new("not-an-image");
    let empty_dir = empty.0.display().to_string();
    let mut cases = vec![
        Planted {
            name: "plant_bad_image_dir",
            env: vec![("PMEMVM_IMAGE_DIR", empty_dir.as_str())],
            says: format!("PMEMVM_IMAGE_DIR={empty_dir} is not a built guest image"),
        },
        Planted {
            name: "plant_failing_rootfs_build",
            env: vec![],
            says: "the Debian root file system could not be built".into(),
        },
    ];
    if pmemvm_tests::mounts::is_root() {
        cases.push(Planted {
            name: "plant_unmountable_tmpfs",
            env: vec![],
            says: "mount -t tmpfs -o size=not-a-size".into(),
        });
    } else {
        pmemvm_tests::skip::skip(
            "the unmountable-tmpfs case needs root (a mount that fails as root)",
        );
    }
    for Planted { name, env, says } in cases {
        let (passed, text, skips) = run_planted(name, &env);
        assert!(!passed, "{name}: the planted failure passed:\n{text}");
        assert!(
            text.contains("test result: FAILED. 0 passed; 1 failed"),
            "{name}: not one failed test:\n{text}"
        );
        assert!(
            text.contains(&says),
            "{name}: the failure does not say {says:?}:\n{text}"
        );
        assert!(
            !text.contains("SKIP:") && skips.is_empty(),
            "{name}: the failure was also logged as a skip ({skips:?}):\n{text}"
        );
    }
}
