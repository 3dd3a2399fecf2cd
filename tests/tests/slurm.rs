// test-queue: tcg
//! `pmemvm bench EXP --slurm` on a real single-node Slurm cluster (munge, slurmctld and
//! slurmd on this machine, see `pmemvm_tests::slurm_cluster`): the generated job array runs
//! one `pmemvm bench --only SIDE:BOOT` per task under QEMU TCG, one task at a time (`%1`: two
//! cores), the dependent report job merges them, and the merged report holds every (side, boot)
//! exactly once with figures. Also what `--slurm` and `--only` refuse, and `crash-check
//! --slurm`: one task per flush of a recording, the report job's table naming the first image
//! that failed.

use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use pmemvm_tests::pmemvm::{run, run_cmd, TempDir};
use pmemvm_tests::require;
use pmemvm_tests::skip::Skip;
use pmemvm_tests::slurm_cluster::SlurmCluster;
use pmemvm_tests::tcg::TcgGuard;

const DEADLINE: Duration = Duration::from_secs(60);

/// One cluster at a time: the tests of this file each start one on this machine.
static CLUSTER: Mutex<()> = Mutex::new(());

/// QEMU and the guest image are there; the guard holds the machine's TCG lock while the
/// array's guests run.
fn ready() -> Result<TcgGuard, Skip> {
    pmemvm_tests::nested::find_qemu()?;
    pmemvm_tests::image::image_dir()?;
    Ok(pmemvm_tests::tcg::lock().expect("take the TCG lock"))
}

/// The smallest pmem-verify bench: 1 vCPU, 64 MiB NVDIMM, 8 MiB verify, 2 boots per side.
const BENCH: [&str; 12] = [
    "bench",
    "pmem-verify",
    "--engine",
    "qemu",
    "--cpus",
    "1",
    "--nvdimm",
    "64M",
    "--size",
    "8M",
    "--runs",
    "2",
];

fn json(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn bench_array_on_a_real_slurm_cluster_merges_every_side_and_boot_once() {
    let _one = CLUSTER
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let started = Instant::now();
    let dir = TempDir::new("slurm");
    // The TCG lock first: the cluster runs only while this test may boot guests.
    let _tcg = require!(ready());
    let waited = started.elapsed();
    let cluster = require!(SlurmCluster::start(&dir.join("cluster")));
    let shared = dir.join("shared");
    let mut args: Vec<&str> = BENCH.to_vec();
    args.extend(["--slurm", "--out", shared.to_str().unwrap()]);
    let out = run(&args, DEADLINE);
    assert_eq!(out.status, Some(0), "{}", out.dump());
    assert!(
        out.stdout
            .contains("4 array task(s) (2 side(s) x 2 boot(s))"),
        "{}",
        out.dump()
    );
    assert!(
        std::fs::read_dir(shared.join("runs"))
            .unwrap()
            .next()
            .is_none(),
        "--slurm must run nothing"
    );

    // What a Slurm user types: the submit script (sbatch --parsable, then the report job with
    // --dependency=afterany:), here throttled to one task at a time.
    let submit = run_cmd(
        cluster
            .command("sh")
            .arg(shared.join("submit.sh"))
            .arg("--array=0-3%1"),
        DEADLINE,
    );
    assert_eq!(submit.status, Some(0), "{}", submit.dump());
    let (array, report_job) = submitted(&submit);
    // squeue shows the report job waiting on the array.
    let queue = run_cmd(
        cluster
            .command("squeue")
            .args(["-h", "-o", "%j %T %E", "-j", &report_job]),
        DEADLINE,
    );
    assert!(
        queue
            .stdout
            .contains("pmemvm-pmem-verify-report PENDING afterany:"),
        "{}",
        queue.dump()
    );
    let state = cluster.wait(&report_job, Duration::from_secs(300));
    let logs = || {
        std::fs::read_dir(shared.join("logs"))
            .map(|d| {
                d.filter_map(Result::ok)
                    .map(|e| {
                        let text = std::fs::read_to_string(e.path()).unwrap_or_default();
                        let tail: Vec<&str> = text.lines().rev().take(20).collect();
                        format!(
                            "--- {} ---\n{}",
                            e.path().display(),
                            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
                        )
                    })
                    .collect::<Vec<_>>()
                    .join("\n")
            })
            .unwrap_or_default()
    };
    assert_eq!(
        state,
        "COMPLETED",
        "report job {report_job}\n{}\n{}",
        logs(),
        cluster.logs()
    );
    let (states, shown) = task_states(&cluster, &array);
    assert_eq!(states, ["COMPLETED"; 4], "{shown}\n{}", logs());

    // Each task's directory says which boot it holds.
    for (side, boot) in [("off", 1), ("on", 1), ("off", 2), ("on", 2)] {
        let r = json(&shared.join(format!("runs/{side}-{boot}/report.json")));
        assert_eq!(
            r["result"]["only"],
            serde_json::json!({"side": side, "boot": boot})
        );
        assert_eq!(r["result"]["schema_version"], 1);
        assert_eq!(r["result"]["state"], "complete");
        assert!(
            !r["host"]["hostname"].as_str().unwrap_or("").is_empty(),
            "{r:#}"
        );
    }
    // The merged report: every (side, boot) exactly once, with figures.
    let merged = json(&shared.join("report/report.json"));
    let mut got: Vec<(String, u64)> = merged["runs"]
        .as_array()
        .expect("runs")
        .iter()
        .map(|r| {
            assert_eq!(r["outcome"]["status"], "ok", "{r:#}");
            let iops = r["outcome"]["summary"]["iops"].as_f64().unwrap_or(0.0);
            assert!(iops > 0.0, "no IOPS in {r:#}");
            (
                r["side"].as_str().unwrap_or("").to_owned(),
                r["boot"].as_u64().unwrap_or(0),
            )
        })
        .collect();
    got.sort();
    let want: Vec<(String, u64)> = [("off", 1), ("off", 2), ("on", 1), ("on", 2)]
        .iter()
        .map(|(s, b)| ((*s).to_owned(), *b))
        .collect();
    assert_eq!(got, want, "{merged:#}");
    assert_eq!(merged["result"]["state"], "complete");
    assert_eq!(
        merged["result"]["merged_from"].as_array().map(Vec::len),
        Some(4)
    );
    let iops = merged["analysis"]["metrics"]
        .as_array()
        .and_then(|m| m.iter().find(|x| x["metric"] == "iops"))
        .expect("iops analysis");
    for side in iops["sides"].as_array().expect("sides") {
        assert_eq!(side["n"], 2, "{iops:#}");
    }
    let merge = json(&shared.join("report/merge.json"));
    assert_eq!(merge["left_out"], serde_json::json!([]), "{merge:#}");
    let text = std::fs::read_to_string(shared.join("report/report.txt")).unwrap();
    assert!(text.contains("Left out: nothing"), "{text}");

    // `pmemvm report SHARED` finds the tasks' results below it (and skips the merged report).
    let again = run(&["report", shared.to_str().unwrap()], DEADLINE);
    assert_eq!(again.status, Some(0), "{}", again.dump());
    assert!(
        again.stdout.contains("Merged from 4 result directories"),
        "{}",
        again.dump()
    );

    // A task that failed (here: its result is gone) is rerun alone, as docs/fleet.md says:
    // the report lists it as missing, `sbatch --array=I bench.sbatch` reruns it, the report
    // job completes the merge.
    std::fs::remove_dir_all(shared.join("runs/on-1")).unwrap();
    let missing = run(&["report", shared.join("runs").to_str().unwrap()], DEADLINE);
    assert_eq!(missing.status, Some(1), "{}", missing.dump());
    assert!(
        missing
            .stdout
            .contains("on:1: no result directory holds it"),
        "{}",
        missing.dump()
    );
    let rerun = run_cmd(
        cluster
            .command("sbatch")
            .args(["--wait", "--array=1"])
            .arg(shared.join("bench.sbatch")),
        Duration::from_secs(300),
    );
    assert_eq!(rerun.status, Some(0), "{}\n{}", rerun.dump(), logs());
    let report = run_cmd(
        cluster
            .command("sbatch")
            .arg("--wait")
            .arg(shared.join("report.sbatch")),
        Duration::from_secs(120),
    );
    assert_eq!(report.status, Some(0), "{}\n{}", report.dump(), logs());
    let merge = json(&shared.join("report/merge.json"));
    assert_eq!(merge["left_out"], serde_json::json!([]), "{merge:#}");
    drop(cluster);
    eprintln!(
        "slurm array test: {:.0} s, of which {:.0} s waiting for the TCG lock",
        started.elapsed().as_secs_f64(),
        waited.as_secs_f64()
    );
}

#[test]
fn slurm_scripts_refuse_to_overwrite_and_only_refuses_unknown_tasks() {
    let dir = TempDir::new("slurm-refuse");
    let shared = dir.join("shared");
    let mut args: Vec<&str> = BENCH.to_vec();
    args.extend(["--slurm", "--out", shared.to_str().unwrap()]);
    let out = run(&args, DEADLINE);
    assert_eq!(out.status, Some(0), "{}", out.dump());
    let script = std::fs::read_to_string(shared.join("bench.sbatch")).unwrap();
    assert!(script.contains("#SBATCH --array=0-3\n"), "{script}");
    assert!(script.contains("3) task=on:2 dir=on-2 ;;"), "{script}");
    // Again: one sentence, status 2, the scripts untouched.
    std::fs::write(shared.join("bench.sbatch"), "mine").unwrap();
    let again = run(&args, DEADLINE);
    assert_eq!(again.status, Some(2), "{}", again.dump());
    assert_eq!(again.stderr.lines().count(), 1, "{}", again.dump());
    assert!(
        again.stderr.contains("bench.sbatch already exists"),
        "{}",
        again.dump()
    );
    assert_eq!(
        std::fs::read_to_string(shared.join("bench.sbatch")).unwrap(),
        "mine"
    );
    // --only names a task the bench does not have: refused before anything runs.
    let out_dir = dir.join("only");
    let mut only: Vec<&str> = BENCH.to_vec();
    only.extend(["--only", "on:3", "--out", out_dir.to_str().unwrap()]);
    let bad = run(&only, DEADLINE);
    assert_eq!(bad.status, Some(2), "{}", bad.dump());
    assert!(
        bad.stderr.contains("--only on:3 is not a task of this bench: its sides are off, on and its boots 1 to 2 (--runs 2)"),
        "{}",
        bad.dump()
    );
    assert!(!out_dir.exists());
    // --out that cannot be a directory: one sentence, status 2.
    let file = dir.join("a-file");
    std::fs::write(&file, "x").unwrap();
    let mut under_file: Vec<&str> = BENCH.to_vec();
    let under = file.join("shared");
    under_file.extend(["--slurm", "--out", under.to_str().unwrap()]);
    let out = run(&under_file, DEADLINE);
    assert_eq!(out.status, Some(2), "{}", out.dump());
    assert_eq!(out.stderr.lines().count(), 1, "{}", out.dump());
    // --slurm without --out: clap's usage error.
    let mut no_out: Vec<&str> = BENCH.to_vec();
    no_out.push("--slurm");
    assert_eq!(run(&no_out, DEADLINE).status, Some(2));
}

/// Each array task's `JobState`, and what `scontrol show job` printed.
fn task_states(cluster: &SlurmCluster, array: &str) -> (Vec<String>, String) {
    let tasks = run_cmd(
        cluster
            .command("scontrol")
            .args(["show", "job", "-o", array]),
        DEADLINE,
    );
    let states = tasks
        .stdout
        .split_whitespace()
        .filter_map(|w| w.strip_prefix("JobState="))
        .map(str::to_owned)
        .collect();
    (states, tasks.dump())
}

/// The array and report job ids `submit.sh` printed ("submitted array job A (N tasks) and
/// report job R; ...").
fn submitted(out: &pmemvm_tests::pmemvm::Output) -> (String, String) {
    let words: Vec<&str> = out.stdout.split_whitespace().collect();
    let id = |first: &str| {
        words
            .windows(3)
            .find(|p| p[0] == first && p[1] == "job")
            .map(|p| p[2].trim_end_matches(';').to_owned())
            .unwrap_or_else(|| panic!("no '{first} job ID' in {}", out.dump()))
    };
    (id("array"), id("report"))
}

/// `crash-check --slurm` on the real cluster. The recording is the tiny `epochs` guest's on
/// this host's KVM (a label-less 16 MiB DIMM: page 1 ← A, page 2 ← B, flush 1; page 1 ← C,
/// flush 2; page 3 ← D, the tail); `--every 2` selects flushes 0 and 2, so the array has two
/// tasks, each booting the guest image under QEMU TCG on its flush's image (and torn variant)
/// to check that page 2 holds B. The image after flush 0 cannot (B was not flushed yet), the
/// one after flush 2 does: the report job ends with status 1 and names flush 0.
#[test]
fn crash_check_array_on_a_real_slurm_cluster_checks_each_flush_and_names_the_first_failure() {
    pmemvm_tests::require!(pmemvm_tests::tiny::kvm_available());
    let epochs = pmemvm_tests::require!(pmemvm_tests::tiny::guest("epochs"));
    let _one = CLUSTER
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let started = Instant::now();
    let dir = TempDir::new("slurm-crash");
    let _tcg = require!(ready());
    let cluster = require!(SlurmCluster::start(&dir.join("cluster")));

    // The recording (the guest's parameter block at the start of its region).
    const REGION: u64 = 16 << 20;
    const PAGE: u64 = 4096;
    let dimm = dir.join("pm0.img");
    let f = std::fs::File::create(&dimm).expect("DIMM file");
    f.set_len(REGION + 4096).expect("size");
    let steps: [(u64, u32, bool); 4] = [
        (PAGE, 0xaaaa_0001, false),
        (2 * PAGE, 0xbbbb_0002, true),
        (PAGE, 0xcccc_0003, true),
        (3 * PAGE, 0xdddd_0004, false),
    ];
    let mut block = b"EPOCHS01".to_vec();
    block.extend_from_slice(&4u32.to_le_bytes());
    block.extend_from_slice(&[0; 4]);
    for (off, value, flush) in steps {
        block.extend_from_slice(&off.to_le_bytes());
        block.extend_from_slice(&value.to_le_bytes());
        block.extend_from_slice(&u32::from(flush).to_le_bytes());
    }
    f.write_all_at(&block, 0).expect("parameter block");
    drop(f);
    let rec = dir.join("rec");
    let spec = format!(
        "16M,label-size=0,file={},record={}",
        dimm.display(),
        rec.display()
    );
    let out = run(
        &[
            "boot",
            "--kernel",
            &epochs.to_string_lossy(),
            "--nvdimm",
            &spec,
        ],
        DEADLINE,
    );
    assert_eq!(out.status, Some(0), "{}", out.dump());

    // What a user types: the check, with --slurm SHARED.
    let shared = dir.join("shared");
    let summary_path = dir.join("summary.json");
    let check = "v=$(dd if=/dev/pmem0 bs=4096 skip=2 count=1 2>/dev/null | head -c 4 | od -An -tx1 | tr -d ' \\n'); \
                 echo \"page 2: $v\"; test \"$v\" = 0200bbbb";
    let args = [
        "crash-check",
        rec.to_str().unwrap(),
        "--every",
        "2",
        "--torn",
        "5",
        "--engine",
        "qemu",
        "--cpus",
        "1",
        "--timeout",
        "500",
        "--slurm",
        shared.to_str().unwrap(),
        "--json",
        summary_path.to_str().unwrap(),
        "--",
        "sh",
        "-c",
        check,
    ];
    let out = run(&args, DEADLINE);
    assert_eq!(out.status, Some(0), "{}", out.dump());
    assert!(
        out.stdout
            .contains("2 array task(s), one per flush (0, 2); submit with: sh"),
        "{}",
        out.dump()
    );
    assert!(
        std::fs::read_dir(shared.join("results"))
            .expect("results/")
            .next()
            .is_none(),
        "--slurm must run nothing"
    );
    // Writing the scripts again is refused; nothing of the first is changed.
    let script = std::fs::read_to_string(shared.join("check.sbatch")).expect("check.sbatch");
    let again = run(&args, DEADLINE);
    assert_eq!(again.status, Some(2), "{}", again.dump());
    assert!(again.stderr.contains("already exists"), "{}", again.dump());
    assert_eq!(
        std::fs::read_to_string(shared.join("check.sbatch")).unwrap(),
        script
    );

    let submit = run_cmd(
        cluster
            .command("sh")
            .arg(shared.join("submit.sh"))
            .arg("--array=0-1%1"),
        DEADLINE,
    );
    assert_eq!(submit.status, Some(0), "{}", submit.dump());
    let (array, report_job) = submitted(&submit);
    let state = cluster.wait(&report_job, Duration::from_secs(1500));
    let logs = || {
        let mut all = String::new();
        for e in std::fs::read_dir(shared.join("logs"))
            .into_iter()
            .flatten()
            .flatten()
        {
            let text = std::fs::read_to_string(e.path()).unwrap_or_default();
            all.push_str(&format!("--- {} ---\n{text}\n", e.path().display()));
        }
        all
    };
    // A failed image is the report's result: its job ends with status 1.
    assert_eq!(
        state,
        "FAILED",
        "report job {report_job}\n{}\n{}",
        logs(),
        cluster.logs()
    );
    let (states, shown) = task_states(&cluster, &array);
    assert_eq!(states, ["COMPLETED"; 2], "{shown}\n{}", logs());
    let report_log = std::fs::read_to_string(shared.join(format!("logs/report-{report_job}.out")))
        .unwrap_or_else(|e| panic!("the report's log: {e}\n{}", logs()));
    assert!(
        report_log.contains("the first: the image after flush 0 ("),
        "{report_log}"
    );
    let summary = json(&summary_path);
    let checks = summary["checks"].as_array().expect("checks");
    let plain: Vec<(u64, u64)> = checks
        .iter()
        .filter(|c| c["torn"] == false)
        .map(|c| (c["flush"].as_u64().unwrap(), c["status"].as_u64().unwrap()))
        .collect();
    assert_eq!(plain, [(0, 1), (2, 0)], "{summary:#}");
    assert_eq!(
        checks.len(),
        4,
        "each flush's torn variant too: {summary:#}"
    );
    for c in checks {
        assert!(
            c["stdout"].as_str().unwrap_or("").contains("page 2: "),
            "the check ran in the guest: {c:#}"
        );
    }
    assert_eq!(
        summary["manifest"]["images"].as_array().map(Vec::len),
        Some(2)
    );
    drop(cluster);
    eprintln!(
        "slurm crash-check test: {:.0} s",
        started.elapsed().as_secs_f64()
    );
}
