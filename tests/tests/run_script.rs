//! `tests/run.sh` itself, as a new maintainer meets it: an option it does not
//! know is refused before anything runs; `--list` names every test with its
//! tier and queue, which follow from the test files (a new `nested_*` file
//! lands in the TCG queues by its name alone, an `#[ignore]` that names no
//! tier is refused); and the deadline path ends the QEMUs the run's own tests
//! left orphaned while an unrelated orphaned QEMU of the machine lives on.
//! The scripts run here are the repository's own (`tests/run.sh`,
//! `tests/lib/*.sh`), copied into a scratch tree where a test adds files.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use pmemvm_tests::nested::find_qemu;
use pmemvm_tests::pmemvm::{workspace_root, TempDir};
use pmemvm_tests::require;

/// A scratch tree holding the repository's test scripts and a copy of every
/// test file, so a test can add one without touching the checkout.
fn scratch_tree(dir: &Path) -> PathBuf {
    let root = workspace_root();
    let tree = dir.join("tree");
    fs::create_dir_all(tree.join("tests/lib")).expect("scratch tests/lib");
    fs::create_dir_all(tree.join("tests/tests")).expect("scratch tests/tests");
    fs::copy(root.join("tests/run.sh"), tree.join("tests/run.sh")).expect("copy run.sh");
    for dir in ["tests/lib", "tests/tests"] {
        for entry in fs::read_dir(root.join(dir)).expect("read the test scripts") {
            let path = entry.expect("entry").path();
            if path.is_file() {
                let name = path.file_name().expect("a file name");
                fs::copy(&path, tree.join(dir).join(name)).expect("copy a test file");
            }
        }
    }
    tree
}

fn run_script(tree: &Path, args: &[&str]) -> std::process::Output {
    Command::new("bash")
        .arg(tree.join("tests/run.sh"))
        .args(args)
        .current_dir(tree)
        .stdin(Stdio::null())
        .output()
        .expect("run tests/run.sh")
}

/// `bash -c script` in `tree` (the functions of tests/lib/ sourced by it).
fn bash_in(tree: &Path, script: &str) -> std::process::Output {
    Command::new("bash")
        .args(["-c", script])
        .current_dir(tree)
        .output()
        .expect("run bash")
}

#[test]
fn an_unknown_option_is_refused_in_one_sentence_before_anything_runs() {
    let dir = TempDir::new("run-sh-option");
    let tree = scratch_tree(&dir.0);
    let out = run_script(&tree, &["--lsit"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "one sentence:\n{stderr}");
    assert!(
        stderr.contains("'--lsit'") && stderr.contains("--full") && stderr.contains("--list"),
        "{stderr}"
    );
    assert!(
        !tree.join("target").exists(),
        "a refused option created target/"
    );
}

#[test]
fn list_names_every_test_with_its_tier_and_queue_and_a_new_file_is_placed_by_its_name() {
    let dir = TempDir::new("run-sh-list");
    let tree = scratch_tree(&dir.0);
    fs::write(
        tree.join("tests/tests/nested_placed_by_name.rs"),
        "#[test]\nfn boots_a_guest() {}\n\n#[test]\n#[ignore = \"full: long\"]\nfn boots_many() {}\n\n\
         #[test]\n// test-slots: 2\nfn boots_a_two_vcpu_l1() {}\n",
    )
    .expect("a new test file");
    let out = run_script(&tree, &["--list"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let row = |test: &str| -> Vec<String> {
        stdout
            .lines()
            .find(|l| l.ends_with(&format!(" {test}")))
            .unwrap_or_else(|| panic!("{test} is not listed:\n{stdout}"))
            .split_whitespace()
            .map(str::to_owned)
            .collect()
    };
    assert_eq!(
        row("nested_placed_by_name::boots_a_guest")[..2],
        ["landing", "tcg"]
    );
    assert_eq!(
        row("nested_placed_by_name::boots_many")[..2],
        ["full", "tcg"]
    );
    // A test marked as holding both TCG slots runs first, alone: a pair.
    assert_eq!(
        row("nested_placed_by_name::boots_a_two_vcpu_l1")[..2],
        ["landing", "pair"]
    );
    let pairs = bash_in(&tree, ". tests/lib/tiers.sh; tiers_pairs landing");
    let pairs = String::from_utf8_lossy(&pairs.stdout);
    assert!(
        pairs
            .lines()
            .any(|l| l == "nested_placed_by_name boots_a_two_vcpu_l1"),
        "{pairs}"
    );
    // The repository's own files: a marked TCG binary, a host one, a planted failure.
    assert_eq!(
        row("l1_stall::a_silent_l1_is_sent_a_key_event_and_goes_on")[..2],
        ["landing", "tcg"]
    );
    assert_eq!(
        row("skip_path::every_skip_goes_through_the_skip_crate")[..2],
        ["landing", "host"]
    );
    assert_eq!(
        row("skip_path::plant_bad_image_dir")[..2],
        ["planted", "host"]
    );
    // Every #[test] of every file is listed.
    let tests: usize = fs::read_dir(tree.join("tests/tests"))
        .expect("read tests")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "rs"))
        .map(|p| {
            fs::read_to_string(&p)
                .expect("read a test file")
                .lines()
                .filter(|l| l.trim() == "#[test]")
                .count()
        })
        .sum();
    let listed = stdout
        .lines()
        .filter(|l| l.contains("::") && !l.starts_with("tier"))
        .count();
    assert_eq!(listed, tests, "{stdout}");
    // The queues split follows too: the new binary is in queue A or B.
    let queues = bash_in(&tree, ". tests/lib/tiers.sh; tiers_tcg_queues landing");
    let text = String::from_utf8_lossy(&queues.stdout);
    assert_eq!(
        text.split_whitespace()
            .filter(|w| *w == "nested_placed_by_name")
            .count(),
        1,
        "{text}"
    );
}

#[test]
fn an_ignore_that_names_no_tier_is_refused() {
    let dir = TempDir::new("run-sh-untiered");
    let tree = scratch_tree(&dir.0);
    fs::write(
        tree.join("tests/tests/host_forgotten.rs"),
        "#[test]\n#[ignore]\nfn never_runs() {}\n",
    )
    .expect("a test file");
    let out = run_script(&tree, &["--list"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("host_forgotten::never_runs") && stderr.contains("no tier"),
        "{stderr}"
    );
}

/// A crate's own unit tests run in both tiers and `--full` adds their ignored
/// ones: an ignore there that names no tier, or a planted failure whose name
/// `--full` would not skip, is refused as in tests/tests.
#[test]
fn an_ignore_in_a_crates_own_sources_is_held_to_the_same_rules() {
    let dir = TempDir::new("run-sh-untiered-src");
    let tree = scratch_tree(&dir.0);
    fs::create_dir_all(tree.join("vmm/src")).expect("scratch vmm/src");
    let test =
        |ignore: &str, name: &str| format!("#[test]\n#[ignore = {ignore:?}]\nfn {name}() {{}}\n\n");
    fs::write(
        tree.join("vmm/src/forgotten.rs"),
        [
            test("run by another test", "helper_child"),
            test("a planted failure: the child", "not_prefixed"),
            test("a planted failure: the child", "plant_child"),
            test("full: long", "long_one"),
        ]
        .concat(),
    )
    .expect("a source file");
    let out = run_script(&tree, &["--list"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("vmm/src/forgotten.rs::helper_child")
            && stderr.contains("vmm/src/forgotten.rs::not_prefixed")
            && !stderr.contains("plant_child")
            && !stderr.contains("long_one"),
        "{stderr}"
    );
}

/// Whether `pid` runs (a zombie has ended: its parent has not reaped it yet).
fn alive(pid: u32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| !rest.starts_with('Z')),
        Err(_) => false,
    }
}

/// Starts `qemu` orphaned, in a session of its own, as a killed test leaves
/// its QEMU (or as another user runs one); returns its pid.
fn orphaned_qemu(qemu: &Path, cwd: &Path) -> u32 {
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "setsid {} -machine none -nodefaults -display none -monitor none -serial none \
             </dev/null >/dev/null 2>&1 & echo $!",
            qemu.display()
        ))
        .current_dir(cwd)
        .output()
        .expect("start QEMU");
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .expect("QEMU's pid")
}

#[test]
fn the_deadline_ends_the_runs_orphaned_qemu_and_leaves_an_unrelated_one_alive() {
    let qemu = require!(find_qemu());
    let dir = TempDir::new("run-sh-reap");
    let tree = scratch_tree(&dir.0);
    let unrelated = orphaned_qemu(&qemu, &tree);
    assert!(alive(unrelated), "the unrelated QEMU did not start");
    // The run's deadline path (tests/lib/deadline.sh's `bounded`) under the
    // run's subreaper (tests/lib/reap.sh), as tests/run.sh uses them: a
    // "test" starts its QEMU in a session of its own and is killed at a
    // 3-second deadline, which leaves that QEMU orphaned.
    let harness = tree.join("harness.sh");
    fs::write(
        &harness,
        format!(
            "set -eu\n\
             . tests/lib/reap.sh\n\
             reap_become_subreaper \"$0\"\n\
             log() {{ echo \"$*\" >&2; }}\n\
             DEADLINE=3; T0=$SECONDS; PMEMVM_TCG_LOCK=$PWD/no-lock\n\
             . tests/lib/deadline.sh\n\
             rc=0\n\
             bounded sh -c 'setsid {} -machine none -nodefaults -display none -monitor none \
             -serial none </dev/null >/dev/null 2>&1 & echo $! >own.pid; sleep 60' || rc=$?\n\
             echo \"bounded: $rc\"\n",
            qemu.display()
        ),
    )
    .expect("write the harness");
    let started = Instant::now();
    let out = Command::new("bash")
        .arg(&harness)
        .current_dir(&tree)
        .stdin(Stdio::null())
        .output()
        .expect("run the harness");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let own: u32 = fs::read_to_string(tree.join("own.pid"))
        .unwrap_or_else(|e| panic!("own.pid: {e}\n{stdout}{stderr}"))
        .trim()
        .parse()
        .expect("the run's QEMU pid");
    // SIGKILL is sent by then; a QEMU's threads take a moment to end.
    let own_alive = (0..100).all(|_| {
        std::thread::sleep(Duration::from_millis(100));
        alive(own)
    });
    let unrelated_alive = alive(unrelated);
    // Clean up before asserting, whatever happened.
    for pid in [own, unrelated] {
        let _ = Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .stderr(Stdio::null())
            .status();
    }
    assert!(stdout.contains("bounded: 124"), "{stdout}{stderr}");
    assert!(stderr.contains("DEADLINE: 3 s passed"), "{stderr}");
    assert!(
        started.elapsed() < Duration::from_secs(40),
        "the deadline path took {:?}",
        started.elapsed()
    );
    assert!(
        !own_alive,
        "the QEMU the run's killed test left orphaned still runs"
    );
    assert!(
        unrelated_alive,
        "the deadline path ended a QEMU that was not the run's"
    );
}

/// The run's summary names each rerun with its evidence, and a run with
/// more than two fails (tests/lib/summary.sh, as tests/run.sh calls it).
#[test]
fn the_summary_names_each_rerun_and_more_than_two_fail_the_run() {
    let dir = TempDir::new("run-sh-reruns");
    let tree = scratch_tree(&dir.0);
    let log = tree.join("reruns.log");
    let summary = |lines: &[&str]| {
        fs::write(
            &log,
            lines.iter().map(|l| format!("{l}\n")).collect::<String>(),
        )
        .expect("write the rerun log");
        bash_in(
            &tree,
            ". tests/lib/summary.sh; count_lines reruns reruns.log; reruns_within reruns.log 2",
        )
    };
    let evidence = "nested_mce::t\tthe L1 was restarted: the L1's CPU took a triple fault";
    let one = summary(&[evidence]);
    let stdout = String::from_utf8_lossy(&one.stdout);
    assert_eq!(one.status.code(), Some(0), "{stdout}");
    assert_eq!(
        stdout,
        "reruns: 1\n  - nested_mce::t: the L1 was restarted: the L1's CPU took a triple fault\n"
    );
    let three = summary(&[evidence, evidence, evidence]);
    let stderr = String::from_utf8_lossy(&three.stderr);
    assert_eq!(three.status.code(), Some(1), "{stderr}");
    assert!(
        String::from_utf8_lossy(&three.stdout).starts_with("reruns: 3\n"),
        "{}",
        String::from_utf8_lossy(&three.stdout)
    );
    assert!(
        stderr.contains("3 reruns") && stderr.contains("more than the 2"),
        "{stderr}"
    );
}

/// A guest that triple-faults under pmemvm (a tiny guest on this host's
/// KVM), run through the harness's rerun path with its classifier: no
/// evidence of the platform, so one run, and its status 4 is the result.
#[test]
fn a_planted_guest_triple_fault_is_run_once_and_is_the_result() {
    require!(pmemvm_tests::tiny::kvm_available());
    let guest = require!(pmemvm_tests::tiny::guest("triplefault"));
    let runs = std::cell::Cell::new(0);
    let out = pmemvm_tests::nested::retry_breakdowns(
        "planted triple fault",
        || {
            runs.set(runs.get() + 1);
            pmemvm_tests::pmemvm::run(
                &["boot", "--kernel", &guest.to_string_lossy()],
                Duration::from_secs(60),
            )
        },
        |out| pmemvm_tests::nested::platform_breakdown(&out.stderr),
    );
    assert_eq!(out.status, Some(4), "{}", out.dump());
    assert!(
        out.stderr.contains("the guest triple-faulted"),
        "{}",
        out.dump()
    );
    assert_eq!(runs.get(), 1, "a guest triple fault alone was run again");
}
