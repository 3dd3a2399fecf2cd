//! `pmemvm report DIR...` from the command line, on the real results in
//! `tests/fixtures/fleet/` (real `pmemvm bench --only` runs; host fields edited to stand for
//! other machines, see the README there): pooled hosts, refused hosts, `--pool-hosts`, and bad
//! input (not a result, two experiments, a missing directory): one sentence, status 2, nothing
//! written.

use std::path::PathBuf;
use std::time::Duration;

use pmemvm_tests::pmemvm::{run, workspace_root, TempDir};

const DEADLINE: Duration = Duration::from_secs(60);

fn fixture(name: &str) -> String {
    workspace_root()
        .join("tests/fixtures/fleet")
        .join(name)
        .display()
        .to_string()
}

#[test]
fn report_merges_two_hosts_and_writes_the_bench_files() {
    let dir = TempDir::new("report-merge");
    let out_dir = dir.join("merged");
    let out = run(
        &[
            "report",
            &fixture("host-a"),
            &fixture("host-b"),
            "--out",
            out_dir.to_str().unwrap(),
        ],
        DEADLINE,
    );
    assert_eq!(out.status, Some(0), "{}", out.dump());
    assert!(out.stdout.contains("Summary per side"), "{}", out.dump());
    assert!(
        out.stdout
            .contains("Per host (mean over the host's good runs"),
        "{}",
        out.dump()
    );
    for f in [
        "report.txt",
        "report.json",
        "runs.csv",
        "summary.csv",
        "upstream.csv",
        "chart.svg",
        "merge.json",
    ] {
        assert!(out_dir.join(f).is_file(), "{f} missing");
    }
    let merge: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out_dir.join("merge.json")).unwrap()).unwrap();
    let hosts: Vec<&str> = merge["per_host"]
        .as_array()
        .expect("per_host")
        .iter()
        .filter_map(|h| h["host"].as_str())
        .collect();
    assert_eq!(hosts, ["node-a", "node-b"], "{merge:#}");
    let csv = std::fs::read_to_string(out_dir.join("runs.csv")).unwrap();
    assert_eq!(csv.lines().count(), 5, "{csv}");
    // Again into the same --out: the merged report is refreshed.
    let again = run(
        &[
            "report",
            &fixture("host-a"),
            &fixture("host-b"),
            "--out",
            out_dir.to_str().unwrap(),
        ],
        DEADLINE,
    );
    assert_eq!(again.status, Some(0), "{}", again.dump());
}

#[test]
fn report_refuses_other_machines_unless_pool_hosts() {
    let refused = run(
        &["report", &fixture("host-a"), &fixture("host-c")],
        DEADLINE,
    );
    assert_eq!(refused.status, Some(2), "{}", refused.dump());
    assert_eq!(refused.stderr.lines().count(), 1, "{}", refused.dump());
    assert!(
        refused.stderr.contains("their CPU model differs"),
        "{}",
        refused.dump()
    );
    let pooled = run(
        &[
            "report",
            &fixture("host-a"),
            &fixture("host-c"),
            "--pool-hosts",
        ],
        DEADLINE,
    );
    assert_eq!(pooled.status, Some(0), "{}", pooled.dump());
    assert!(
        pooled
            .stdout
            .contains("machines differ; pooled because --pool-hosts was given"),
        "{}",
        pooled.dump()
    );
}

#[test]
fn report_lists_missing_boots_and_exits_1() {
    let out = run(&["report", &fixture("host-a")], DEADLINE);
    assert_eq!(out.status, Some(1), "{}", out.dump());
    assert!(
        out.stdout.contains("off:2: no result directory holds it"),
        "{}",
        out.dump()
    );
}

#[test]
fn report_bad_input_is_one_sentence_and_status_2() {
    let dir = TempDir::new("report-bad");
    let out_dir = dir.join("out");
    let not_result = dir.join("empty");
    std::fs::create_dir_all(&not_result).unwrap();
    let missing: PathBuf = dir.join("no-such");
    let cases: [(Vec<String>, &str); 3] = [
        (
            vec![not_result.display().to_string()],
            "is not a pmemvm result",
        ),
        (
            vec![fixture("host-a"), fixture("randwrite")],
            "merge one experiment at a time",
        ),
        (vec![missing.display().to_string()], "does not exist"),
    ];
    for (dirs, want) in cases {
        let mut args: Vec<&str> = vec!["report"];
        args.extend(dirs.iter().map(String::as_str));
        args.extend(["--out", out_dir.to_str().unwrap()]);
        let out = run(&args, DEADLINE);
        assert_eq!(out.status, Some(2), "{}", out.dump());
        assert_eq!(out.stderr.lines().count(), 1, "{}", out.dump());
        assert!(out.stderr.contains(want), "{}", out.dump());
        assert!(!out_dir.exists(), "nothing may be written on bad input");
    }
    // --out holding a bench result (not a merged report) is not overwritten.
    let bench_dir = dir.join("bench");
    std::fs::create_dir_all(&bench_dir).unwrap();
    std::fs::copy(
        workspace_root().join("tests/fixtures/fleet/host-a/off-1/report.json"),
        bench_dir.join("report.json"),
    )
    .unwrap();
    let out = run(
        &[
            "report",
            &fixture("host-a"),
            "--out",
            bench_dir.to_str().unwrap(),
        ],
        DEADLINE,
    );
    assert_eq!(out.status, Some(2), "{}", out.dump());
    assert!(
        out.stderr
            .contains("already holds a report that `pmemvm report` did not write"),
        "{}",
        out.dump()
    );
    assert_eq!(std::fs::read_dir(&bench_dir).unwrap().count(), 1);
}

/// Copies `tests/fixtures/fleet/NAME/*/report.json` into `to/NAME/*/`.
fn copy_fixture(name: &str, to: &std::path::Path) {
    let from = workspace_root().join("tests/fixtures/fleet").join(name);
    for entry in std::fs::read_dir(&from).expect("the fixture is there") {
        let task = entry.expect("a readable fixture directory").file_name();
        let dir = to.join(name).join(&task);
        std::fs::create_dir_all(&dir).expect("make the copy's directory");
        std::fs::copy(
            from.join(&task).join("report.json"),
            dir.join("report.json"),
        )
        .expect("copy the fixture");
    }
}

#[test]
fn report_refuses_two_kernels_under_one_side_unless_asked() {
    // host-a and host-b together are one whole bench (off/on x boots 1 and 2); host-b's on-2
    // is edited to have booted another kernel, and nothing else.
    let dir = TempDir::new("report-kernels");
    copy_fixture("host-a", &dir.0);
    copy_fixture("host-b", &dir.0);
    let edited = dir.join("host-b/on-2/report.json");
    let mut r: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&edited).unwrap()).unwrap();
    let other = "1111111111111111111111111111111111111111111111111111111111111111";
    for run in r["runs"].as_array_mut().unwrap() {
        run["provenance"]["kernel_sha256"] = other.into();
    }
    std::fs::write(&edited, serde_json::to_string_pretty(&r).unwrap()).unwrap();
    let (a, b) = (dir.join("host-a"), dir.join("host-b"));
    let out_dir = dir.join("merged");
    let args = [
        "report",
        a.to_str().unwrap(),
        b.to_str().unwrap(),
        "--out",
        out_dir.to_str().unwrap(),
    ];
    let refused = run(&args, DEADLINE);
    assert_eq!(refused.status, Some(2), "{}", refused.dump());
    assert!(
        refused.stderr.contains(
            "they did not run the same experiment (1 difference); pass --pool-different-inputs"
        ),
        "{}",
        refused.dump()
    );
    let sentence = format!(
        "side on: kernel SHA-256 differs: \"ddb998ba1eb23ac69197603c17533608521a8391a55522fa17a77f04ad604485\" in {}, \"{other}\" in {}",
        dir.join("host-a/on-1").display(),
        dir.join("host-b/on-2").display()
    );
    assert!(refused.stderr.contains(&sentence), "{}", refused.dump());
    assert!(refused.stdout.is_empty(), "{}", refused.dump());
    assert!(!out_dir.exists(), "nothing may be written when refused");
    // Asked for: pooled, and the report says over what.
    let mut pooled_args = args.to_vec();
    pooled_args.push("--pool-different-inputs");
    let pooled = run(&pooled_args, DEADLINE);
    assert_eq!(pooled.status, Some(0), "{}", pooled.dump());
    assert!(
        pooled.stdout.contains(&format!(
            "what the sides ran differs; pooled because --pool-different-inputs was given:\n    {sentence}"
        )),
        "{}",
        pooled.dump()
    );
    let merge: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out_dir.join("merge.json")).unwrap()).unwrap();
    assert_eq!(merge["pooled_inputs"][0], sentence.as_str(), "{merge:#}");
}
