//! The merge on the real results in `tests/fixtures/fleet/` (see its README: real `pmemvm
//! bench --only` runs, host fields edited to stand for other machines).

use std::path::PathBuf;
use vmm::exit_status::Classified;

use super::*;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/fleet")
        .join(name)
}

fn merged(dirs: &[&str], pool: bool) -> Result<Merged, MergeError> {
    let dirs: Vec<PathBuf> = dirs.iter().map(|d| fixture(d)).collect();
    merge_dirs(&dirs, pool)
}

#[test]
fn two_hosts_of_one_machine_kind_pool_into_every_side_and_boot_once() {
    let m = merged(&["host-a", "host-b"], false).unwrap();
    let got: Vec<(String, u32)> = m
        .report
        .runs
        .iter()
        .map(|r| (r.side.clone(), r.boot))
        .collect();
    assert_eq!(
        got,
        [
            ("off".into(), 1),
            ("off".into(), 2),
            ("on".into(), 1),
            ("on".into(), 2)
        ]
    );
    assert!(m
        .report
        .runs
        .iter()
        .all(|r| r.good_summary().is_some_and(|s| s.iops > 0.0)));
    assert!(m.info.left_out.is_empty(), "{:?}", m.info.left_out);
    assert!(m.info.hosts_differ && !m.info.machines_differ);
    assert!(m.all_good());
    assert_eq!(m.run_hosts, ["node-a", "node-b", "node-a", "node-b"]);
    // The statistics are the report module's: two runs per side now.
    let a = m.report.analyse();
    let iops = a
        .metrics
        .iter()
        .find(|x| x.metric == crate::study::report::Metric::Iops)
        .unwrap();
    assert!(iops
        .sides
        .iter()
        .all(|s| s.as_ref().is_some_and(|s| s.n == 2)));
    let text = m.render_text();
    assert!(
        text.contains("Per host (mean over the host's good runs"),
        "{text}"
    );
    assert!(text.contains("Left out: nothing"), "{text}");
}

#[test]
fn different_cpu_models_are_refused_unless_pooling_is_asked() {
    let e = merged(&["host-a", "host-c"], false).unwrap_err();
    assert!(e.is_usage());
    let msg = e.to_string();
    assert!(
        msg.contains("their CPU model differs (AMD EPYC vs Intel(R) Xeon(R) Gold 6348 CPU @ 2.60GHz); pass --pool-hosts"),
        "{msg}"
    );
    let m = merged(&["host-a", "host-c"], true).unwrap();
    assert!(m.info.pooled_hosts && m.info.machines_differ);
    assert_eq!(m.report.runs.len(), 4);
    assert!(
        m.report.host.identity.cpu_model.contains(" / "),
        "{}",
        m.report.host.identity.cpu_model
    );
}

#[test]
fn missing_boots_and_duplicates_are_listed_as_left_out() {
    let m = merged(&["host-a"], false).unwrap();
    let missing: Vec<String> = m.info.left_out.iter().map(|l| l.task.to_string()).collect();
    assert_eq!(missing, ["off:2", "on:2"]);
    assert!(!m.all_good());
    let m = merged(&["host-a", "host-b", "host-b/on-2"], false).unwrap();
    assert_eq!(m.report.runs.len(), 4);
    assert_eq!(m.info.left_out.len(), 1, "{:?}", m.info.left_out);
    assert!(m.info.left_out[0]
        .why
        .starts_with("a copy of the same boot in"));
}

#[test]
fn bad_inputs_are_one_sentence() {
    let e = merged(&["host-a", "randwrite"], false)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("experiment pmem-verify and")
            && e.contains("experiment pmem-randwrite; merge one experiment at a time"),
        "{e}"
    );
    let e = merged(&["no-such-dir"], false).unwrap_err().to_string();
    assert!(
        e.ends_with("no-such-dir does not exist; give directories written by `pmemvm bench --out`"),
        "{e}"
    );
    let empty = std::env::temp_dir().join(format!("pmemvm-merge-empty-{}", std::process::id()));
    std::fs::create_dir_all(empty.join("sub")).unwrap();
    let e = merge_dirs(std::slice::from_ref(&empty), false)
        .unwrap_err()
        .to_string();
    let _ = std::fs::remove_dir_all(&empty);
    assert!(e.contains("is not a pmemvm result"), "{e}");
    // The fixtures' root holds results two levels down, of two experiments.
    let e = merge_dirs(&[fixture("")], false).unwrap_err().to_string();
    assert!(e.contains("merge one experiment at a time"), "{e}");
}

#[test]
fn a_failed_boot_gives_way_to_its_rerun() {
    let mut failed = read_input(&fixture("host-b/on-2")).unwrap();
    for r in &mut failed.report.runs {
        r.outcome = crate::study::report::RunOutcome::Failed {
            error: "boot timed out".into(),
        };
    }
    let rerun = read_input(&fixture("host-b/on-2")).unwrap();
    let m = merge(vec![failed, rerun], false).unwrap();
    assert!(m.report.runs[0].good_summary().is_some());
    assert!(
        m.info.left_out[0].why.starts_with("failed; "),
        "{:?}",
        m.info.left_out
    );
}

#[test]
fn two_good_boots_of_the_same_number_are_both_taken_the_later_renumbered() {
    // Two hosts that each ran a whole bench both have off:1: the second is another repetition.
    let a = read_input(&fixture("host-a/off-1")).unwrap();
    let mut b = read_input(&fixture("host-b/off-2")).unwrap();
    for r in &mut b.report.runs {
        r.boot = 1;
        r.run = 1;
    }
    for c in &mut b.report.checks {
        c.boot = 1;
    }
    b.report.result = None;
    let m = merge(vec![a, b], false).unwrap();
    let got: Vec<(u32, u32)> = m.report.runs.iter().map(|r| (r.boot, r.run)).collect();
    assert_eq!(got, [(1, 1), (2, 2)]);
    assert_eq!(m.info.inputs[1].taken, ["off:1 as off:2"]);
    assert_eq!(m.run_hosts, ["node-a", "node-b"]);
}

#[test]
fn results_of_two_kernels_under_one_side_are_refused_unless_asked() {
    // host-a/on-1 and host-b/on-2 are two boots of one bench; give the second another kernel.
    let a = read_input(&fixture("host-a/on-1")).unwrap();
    let mut b = read_input(&fixture("host-b/on-2")).unwrap();
    for r in &mut b.report.runs {
        if let Some(p) = r.provenance.as_mut() {
            p.kernel_sha256 = "0123abcd".into();
        }
    }
    b.inputs = super::super::inputs::input_keys(&b.report);
    let e = merge(vec![a.clone(), b.clone()], true).unwrap_err();
    assert!(e.is_usage());
    let msg = e.to_string();
    assert!(
        msg.starts_with("cannot pool these results: they did not run the same experiment (1 difference); pass --pool-different-inputs"),
        "{msg}"
    );
    assert!(
        msg.contains("side on: kernel SHA-256 differs: \"ddb998ba1eb23ac69197603c17533608521a8391a55522fa17a77f04ad604485\" in ")
            && msg.contains("host-a/on-1, \"0123abcd\" in ")
            && msg.ends_with("host-b/on-2"),
        "{msg}"
    );
    let pool = PoolOptions {
        hosts: false,
        different_inputs: true,
    };
    let m = merge_with(vec![a, b], pool).unwrap();
    assert_eq!(m.info.pooled_inputs.len(), 1);
    assert_eq!(m.report.runs.len(), 2);
    let text = m.render_text();
    assert!(
        text.contains("what the sides ran differs; pooled because --pool-different-inputs was given:\n    side on: kernel SHA-256 differs"),
        "{text}"
    );
}
