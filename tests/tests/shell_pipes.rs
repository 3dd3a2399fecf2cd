//! The test scripts' pipelines under `set -eu -o pipefail` hold where CI runs
//! them, with SIGPIPE ignored: the run's tables of times (tests/lib/summary.sh,
//! as tests/run.sh calls them) read their logs to the end and end with status
//! 0 when the logs hold more than the tables show — a `sort | head` there
//! ended a green CI run with sort's status 2 — and no script of the
//! repository hands a pipeline's output to a reader that stops early
//! (`pmemvm_tests::shell_scripts`).

use std::fs;
use std::process::Command;

use pmemvm_tests::nested::workspace_root;
use pmemvm_tests::pmemvm::TempDir;
use pmemvm_tests::shell_scripts::{early_quitting_readers, shell_scripts, uses_pipefail};

/// Holds (seconds, slots, seconds waited, test) and times logs of the pairs
/// and three queues (seconds since the start, "Running" and the binary), more lines
/// than a pipe buffers.
fn write_logs(dir: &std::path::Path, holds: usize, binaries: usize) {
    let hold_lines: String = (1..=holds)
        .map(|i| format!("{i}\t1\t0\tsome_binary::a_test_with_a_long_descriptive_name_{i}\n"))
        .collect();
    fs::write(dir.join("holds.log"), hold_lines).expect("write the hold log");
    for q in ["pair", "tcg", "tcg-b", "rest"] {
        let mut t = 0;
        let mut lines = String::new();
        for i in 1..=binaries {
            lines += &format!("{t} Running tests/{q}_binary_{i}.rs (target/debug/deps/{q}_binary_{i}-0123456789abcdef)\n");
            t += i;
        }
        lines += &format!("{t} Running (end of cargo test)\n");
        fs::write(dir.join(format!("times.{q}")), lines).expect("write a times log");
    }
}

#[test]
fn the_time_tables_end_with_status_zero_when_sigpipe_is_ignored() {
    let dir = TempDir::new("shell-pipes");
    write_logs(&dir.0, 5000, 1000);
    let summary = workspace_root().join("tests/lib/summary.sh");
    let script = format!(
        "trap '' PIPE; set -eu -o pipefail; . '{}'; \
         slot_times holds.log 40; binary_times times 45; echo tables-done",
        summary.display()
    );
    let out = Command::new("bash")
        .args(["-c", &script])
        .current_dir(&dir.0)
        .output()
        .expect("run bash");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(0),
        "the tables ended the script: {stderr}"
    );
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 40 + 1 + 45 + 1, "{stdout}");
    assert!(lines[0].starts_with("  5000 slot-s"), "{}", lines[0]);
    assert!(lines[39].starts_with("  4961 slot-s"), "{}", lines[39]);
    let sum: usize = (1..=5000).sum();
    assert_eq!(
        lines[40],
        format!("all TCG guests: {sum} slot-seconds in 5000 holds")
    );
    assert!(lines[41].starts_with("1000 "), "{}", lines[41]);
    assert_eq!(lines[86], "tables-done");
    let all = fs::read_to_string(dir.0.join("times")).expect("the whole times table");
    assert_eq!(
        all.lines().count(),
        4 * 1000,
        "binary_times wrote every binary's time"
    );
}

#[test]
fn no_script_hands_a_pipeline_to_a_reader_that_stops_early() {
    let root = workspace_root();
    let scripts = shell_scripts(&root).expect("the repository's tracked files");
    for expected in ["tests/run.sh", "pmemvm", ".ci/run", "guest-images/build.sh"] {
        assert!(
            scripts.iter().any(|p| p.ends_with(expected)),
            "the walk found no {expected} among {scripts:?}"
        );
    }
    let mut found = Vec::new();
    for path in scripts {
        let Ok(text) = fs::read_to_string(&path) else {
            continue;
        };
        if !uses_pipefail(&text) {
            continue;
        }
        let rel = path
            .strip_prefix(&root)
            .unwrap_or(&path)
            .display()
            .to_string();
        for (line, code) in early_quitting_readers(&text) {
            found.push(format!("{rel}:{line}: {code}"));
        }
    }
    assert!(
        found.is_empty(),
        "under pipefail these pipelines end in a reader that stops early (read to the end instead: awk 'NR <= n', sed -n 1p, grep … >/dev/null):\n{}",
        found.join("\n")
    );
}
