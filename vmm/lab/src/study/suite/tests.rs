//! Unit tests of `suite`.

use super::*;
use vmm::exit_status::Classified;

fn request(src: &Path, out: &Path, tests: &[&str]) -> NdctlRequest {
    NdctlRequest {
        src: src.to_path_buf(),
        tests: tests.iter().map(|s| s.to_string()).collect(),
        engines: vec![Engine::Nested],
        cpus: 2,
        memory: 2 << 30,
        out: out.to_path_buf(),
        timeout: Duration::from_secs(60),
        stream_console: false,
        nfit_test: None,
        kernel: None,
    }
}

#[test]
fn bad_input_is_refused_before_anything_is_made() {
    let base = std::env::temp_dir().join(format!("pmemvm-suite-check-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    let src = base.join("ndctl");
    std::fs::create_dir_all(src.join("test")).unwrap();
    let out = base.join("out");
    let e = check(&request(&src, &out, &[])).unwrap_err();
    assert!(matches!(e, SuiteError::NoSource(_)) && e.is_usage(), "{e}");
    assert!(e.to_string().contains("git clone --branch v81"), "{e}");
    std::fs::write(src.join("meson.build"), "").unwrap();
    std::fs::write(src.join("test/meson.build"), "").unwrap();
    let e = check(&request(&src, &out, &["no-such-test"])).unwrap_err();
    assert!(matches!(e, SuiteError::Plan(_)) && e.is_usage(), "{e}");
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(out.join("keep"), "the user's").unwrap();
    let e = check(&request(&src, &out, &[])).unwrap_err();
    assert!(
        matches!(e, SuiteError::OutNotEmpty(_)) && e.is_usage(),
        "{e}"
    );
    assert_eq!(
        std::fs::read_to_string(out.join("keep")).unwrap(),
        "the user's"
    );
    assert!(!out.join("summary.json").exists());
    let _ = std::fs::remove_dir_all(&base);
}

#[test]
fn the_builds_runtime_packages_join_the_list_once() {
    assert_eq!(
        package_list("jq,fio,\n", "libkmod2\nfio\n\nlibuuid1\n"),
        "jq,fio,libkmod2,libuuid1"
    );
    assert_eq!(package_list("jq", ""), "jq");
}

#[test]
fn the_status_is_1_when_a_test_failed_or_did_not_run() {
    let row = |verdict| ndctl::Row {
        test: "pmem-ns".into(),
        engine: "nested".into(),
        not_applicable: None,
        bus: ndctl::Bus::AcpiNfit,
        shape: ndctl::Shape::Small,
        verdict,
        seconds: None,
        reason: None,
    };
    let outcome = |rows| NdctlOutcome {
        src: PathBuf::new(),
        rows,
        boots: Vec::new(),
        stopped_by: None,
    };
    use junit::Verdict::*;
    assert_eq!(
        outcome(vec![row(Some(Passed)), row(Some(Skipped))]).status(),
        0
    );
    assert_eq!(
        outcome(vec![row(Some(Passed)), row(Some(Failure))]).status(),
        1
    );
    assert_eq!(outcome(vec![row(Some(Error))]).status(), 1);
    // Every row passed, but a boot's guest command did not end with 0.
    let mut guest_failed = outcome(vec![row(Some(Passed))]);
    guest_failed.boots.push(BootOutcome {
        engine: "nested".into(),
        shape: ndctl::Shape::Large,
        status: 1,
        error: None,
        wall_seconds: 1.0,
        dir: PathBuf::new(),
    });
    assert_eq!(guest_failed.status(), 1);
    assert_eq!(outcome(vec![row(None)]).status(), 1);
    let mut stopped = outcome(vec![row(Some(Passed))]);
    stopped.stopped_by = Some(15);
    assert_eq!(stopped.status(), 143);
}

#[test]
fn a_boot_stopped_by_a_signal_is_told_from_a_failed_one() {
    // The record of a real `pmemvm suite ndctl --engine nested` boot ended by SIGTERM.
    let real: crate::guest::run::RunResult =
        serde_json::from_str(include_str!("testdata/run-stopped-by-sigterm.json")).unwrap();
    assert_eq!(stopped_by(&real), Some(15));
    let result = |status, error: Option<&str>| {
        let mut r = real.clone();
        r.status = status;
        r.error = error.map(str::to_string);
        r
    };
    let qemu = "stopped by signal 2; QEMU was ended";
    assert_eq!(stopped_by(&result(130, Some(qemu))), Some(2));
    // The guest's own status 143 (its command was killed inside) is not a stop.
    assert_eq!(stopped_by(&result(143, None)), None);
    assert_eq!(stopped_by(&result(1, Some("failed"))), None);
    assert_eq!(stopped_by(&result(128, Some("stopped by signal 0"))), None);
}
