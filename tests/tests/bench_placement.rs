//! `pmemvm bench --pin CPULIST --host-node N --memory SIZE[,hugepages|,thp]`:
//! every boot of the bench gets them (the Slurm tasks too, as the user typed
//! them), and an engine that cannot honour them is refused before anything is
//! created or booted — one sentence, status 2, for `--engine qemu` and
//! `--engine nested`, also when only the Slurm scripts would be written.
#![allow(clippy::unwrap_used)]

use std::process::Command;
use std::time::Duration;

use pmemvm_tests::pmemvm::{pmemvm_bin, run_cmd, TempDir};

fn pmemvm(args: &[&str]) -> pmemvm_tests::pmemvm::Output {
    run_cmd(
        Command::new(pmemvm_bin())
            .args(args)
            .env_remove("RUST_BACKTRACE"),
        Duration::from_secs(60),
    )
}

#[test]
fn placement_on_an_engine_that_cannot_honour_it_is_refused_before_anything() {
    let dir = TempDir::new("bench-placement-refused");
    let out_dir = dir.join("report");
    let out_str = out_dir.to_str().unwrap();
    let cases: [(&[&str], &str); 4] = [
        (&["--pin", "0"], "--pin"),
        (&["--host-node", "0"], "--host-node"),
        (&["--memory", "2G,hugepages"], "--memory SIZE,hugepages/thp"),
        (&["--memory", "2G,thp"], "--memory SIZE,hugepages/thp"),
    ];
    for (extra, option) in cases {
        for engine in ["qemu", "nested"] {
            for slurm in [false, true] {
                let mut args = vec!["bench", "pmem-nowait", "--engine", engine, "--out", out_str];
                if slurm {
                    args.push("--slurm");
                }
                args.extend_from_slice(extra);
                let out = pmemvm(&args);
                assert_eq!(out.status, Some(2), "{args:?}\n{}", out.dump());
                // Each engine's own sentence, the same as `run` and `boot` give.
                let want = match engine {
                    "qemu" => format!("{option} applies to --engine pmemvm only"),
                    _ => format!("{option} is not available with --engine nested"),
                };
                assert!(out.stderr.contains(&want), "{args:?}\n{}", out.dump());
                assert_eq!(
                    out.stderr.lines().count(),
                    1,
                    "{args:?}: one sentence\n{}",
                    out.dump()
                );
                assert!(
                    !out_dir.exists(),
                    "{args:?} created {}\n{}",
                    out_dir.display(),
                    out.dump()
                );
            }
        }
    }
}

#[test]
fn slurm_tasks_carry_the_placement_as_typed() {
    let dir = TempDir::new("bench-placement-slurm");
    let shared = dir.join("shared");
    let out = pmemvm(&[
        "bench",
        "pmem-nowait",
        "--engine",
        "pmemvm",
        "--pin",
        "0",
        "--host-node",
        "0",
        "--memory",
        "2G,thp",
        "--slurm",
        "--out",
        shared.to_str().unwrap(),
    ]);
    assert_eq!(out.status, Some(0), "{}", out.dump());
    // Each task runs the request --slurm serialized, not options spelled again.
    let script = std::fs::read_to_string(shared.join("bench.sbatch")).unwrap();
    let request = shared.join("request.json");
    assert!(
        script.contains(&format!("--request {}", request.display())),
        "{script}"
    );
    let text = std::fs::read_to_string(&request).unwrap();
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    let r = &json["request"];
    assert_eq!(r["engine"], "pmemvm", "{text}");
    assert_eq!(r["memory"], 2u64 << 30, "{text}");
    assert_eq!(r["ram_pages"], "Thp", "{text}");
    assert_eq!(r["placement"]["pin"], serde_json::json!([0]), "{text}");
    assert_eq!(r["placement"]["host_node"], 0, "{text}");
    // A task reads it back as the same bench: its plan has the RAM asked for.
    let out = pmemvm(&[
        "bench",
        "pmem-nowait",
        "--request",
        request.to_str().unwrap(),
        "--plan",
        "--json",
    ]);
    assert_eq!(out.status, Some(0), "{}", out.dump());
    let plan: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(plan["guest_mem_mib"], 2048, "{}", out.stdout);
    // A request of another experiment is refused in one sentence, status 2.
    let out = pmemvm(&[
        "bench",
        "pmem-verify",
        "--request",
        request.to_str().unwrap(),
        "--plan",
    ]);
    assert_eq!(out.status, Some(2), "{}", out.dump());
    assert!(
        out.stderr
            .contains("is a request of experiment pmem-nowait, not pmem-verify"),
        "{}",
        out.dump()
    );
}
