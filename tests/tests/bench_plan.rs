//! `pmemvm bench EXP --plan [--json]` and bad `--side` values, from the command line: no guest
//! boots, so these run everywhere in a few seconds.
//!
//! The plan must show each side's phases in the thread's order with the complete fio job text
//! and the deviations; a bad `--side` must end with status 2, one sentence naming the value
//! and what is accepted, and nothing created.

use std::time::Duration;

use pmemvm_tests::pmemvm::{pmemvm_bin, run, run_cmd, TempDir};

const DEADLINE: Duration = Duration::from_secs(60);

#[test]
fn plan_prints_the_thread_script_per_side_without_booting() {
    let dir = TempDir::new("bench-plan");
    let out_dir = dir.join("report");
    let out_s = out_dir.to_str().unwrap();
    let out = run(
        &[
            "bench",
            "pmem-nowait",
            "--plan",
            "--fail-on-check",
            "--cpus",
            "2",
            "--out",
            out_s,
        ],
        DEADLINE,
    );
    assert_eq!(out.status, Some(0), "{}", out.dump());
    let t = &out.stdout;
    // The thread's order: verify, fill, three randreads.
    let at = |s: &str| {
        t.find(s)
            .unwrap_or_else(|| panic!("{s:?} missing in the plan:\n{t}"))
    };
    assert!(at("1. write-and-verify (check") < at("2. randwrite (prepare"));
    assert!(at("2. randwrite (prepare") < at("3. randread-1 (measured, repetition 1"));
    assert!(
        at("4. randread-2 (measured, repetition 2") < at("5. randread-3 (measured, repetition 3")
    );
    for want in [
        "off: kernel of the guest image, initrd of the guest image, command line + nd_pmem.nowait=0",
        "on: kernel of the guest image, initrd of the guest image, command line + nd_pmem.nowait=1",
        "   | [RANDWRITE]",
        "   | iodepth=16",
        "   | size=939524096",
        "   | time_based=1",
        "   | runtime=60",
        "jobs (RANDWRITE, randread): thread 48, here 2",
    ] {
        assert!(t.contains(want), "{want:?} missing in the plan:\n{t}");
    }
    assert!(!out_dir.exists(), "--plan created {}", out_dir.display());

    let json = run(
        &[
            "bench",
            "bcache-verify",
            "--plan",
            "--json",
            "--size",
            "64M",
        ],
        DEADLINE,
    );
    assert_eq!(json.status, Some(0), "{}", json.dump());
    let v: serde_json::Value = serde_json::from_str(&json.stdout).expect("plan JSON");
    assert_eq!(v["experiment"], "bcache-verify");
    assert_eq!(v["phases"][0]["name"], "write-and-verify");
    assert!(v["phases"][0]["job_file"]
        .as_str()
        .is_some_and(|j| j.contains("filename=/dev/bcache0") && j.contains("size=67108864")));
    assert!(v["setup"]["script"]
        .as_str()
        .is_some_and(|s| s.contains("make-bcache -B /dev/nullb0 -C /dev/nullb1")));
    assert_eq!(v["sides"][0]["cmdline"], "bcache.bch_nowait=0");
    assert_eq!(v["runs_per_side"], 1);
    let devs: Vec<&str> = v["deviations"]
        .as_array()
        .expect("deviations")
        .iter()
        .filter_map(|d| d["what"].as_str())
        .collect();
    assert!(devs.contains(&"null_blk setup"), "{devs:?}");
}

#[test]
fn plan_with_sides_names_their_kernels() {
    let dir = TempDir::new("bench-plan-sides");
    let k = dir.join("bzImage-base");
    std::fs::write(&k, b"not booted").unwrap();
    let k = k.to_str().unwrap();
    let out = run(
        &[
            "bench",
            "pmem-verify",
            "--plan",
            "--side",
            &format!("base:kernel={k}"),
            "--side",
            &format!("patched:kernel={k},append=nd_pmem.nowait=1"),
        ],
        DEADLINE,
    );
    assert_eq!(out.status, Some(0), "{}", out.dump());
    assert!(
        out.stdout.contains(&format!(
            "base: kernel {k}, initrd of the guest image, command line + nothing"
        )),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains(&format!(
            "patched: kernel {k}, initrd of the guest image, command line + nd_pmem.nowait=1"
        )),
        "{}",
        out.stdout
    );
}

#[test]
fn bad_side_specs_are_one_sentence_status_2_and_create_nothing() {
    let dir = TempDir::new("bench-bad-side");
    let k = dir.join("bzImage");
    std::fs::write(&k, b"x").unwrap();
    let k = k.to_str().unwrap().to_owned();
    let out_dir = dir.join("report");
    let out_s = out_dir.to_str().unwrap().to_owned();
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            vec![format!("a:kernl={k}"), format!("b:kernel={k}")],
            "unknown key \"kernl\"; accepted: kernel, initrd, modules, as, append",
        ),
        (
            vec![
                "a:kernel=/nonexistent/bzImage".into(),
                format!("b:kernel={k}"),
            ],
            "kernel /nonexistent/bzImage cannot be read",
        ),
        (
            vec![format!("a:kernel={k}"), format!("a:kernel={k}")],
            "--side a is given twice",
        ),
        (
            vec![format!("a:kernel={k}")],
            "1 --side given (a); an A/B comparison takes exactly two",
        ),
        (
            vec![format!("kernel={k}"), format!("b:kernel={k}")],
            "has no name: use NAME:kernel=PATH[,initrd=PATH][,modules=DIR][,as=off|on][,append=ARGS]",
        ),
        (
            vec![format!("a:kernel={k},as=yes"), format!("b:kernel={k}")],
            "--side a: as=\"yes\" is not accepted; use as=off or as=on",
        ),
    ];
    for (sides, want) in cases {
        let mut args: Vec<&str> = vec!["bench", "pmem-verify", "--out", &out_s];
        for s in &sides {
            args.extend(["--side", s.as_str()]);
        }
        let out = run(&args, DEADLINE);
        assert_eq!(out.status, Some(2), "{sides:?}\n{}", out.dump());
        let errors: Vec<&str> = out
            .stderr
            .lines()
            .filter(|l| l.starts_with("pmemvm: error:"))
            .collect();
        assert_eq!(errors.len(), 1, "{sides:?}\n{}", out.dump());
        assert!(errors[0].contains(want), "{sides:?}: {}", errors[0]);
        assert!(!out.stderr.contains("panicked"), "{}", out.dump());
        assert!(!out_dir.exists(), "{sides:?} created {}", out_dir.display());
    }
}

/// `pmemvm bench pmem-nowait --plan` on a host described as having `cpus` CPUs
/// (`PMEMVM_HOST_CPUS`, the bench's one source of the host's CPU count).
fn plan_on_host(cpus: &str, extra: &[&str]) -> String {
    let out = run_cmd(
        std::process::Command::new(pmemvm_bin())
            .args(["bench", "pmem-nowait", "--plan"])
            .args(extra)
            .env("PMEMVM_HOST_CPUS", cpus),
        DEADLINE,
    );
    assert_eq!(out.status, Some(0), "{}", out.dump());
    out.stdout
}

#[test]
fn plan_defaults_follow_the_thread_where_the_host_allows() {
    // A 64-CPU host: the thread's 48 jobs on 48 vCPUs, and no jobs deviation.
    let big = plan_on_host("64", &[]);
    assert!(
        big.contains("Guest: 48 vCPU(s), 1024 MiB RAM"),
        "guest shape missing:\n{big}"
    );
    assert!(big.contains("   | numjobs=48"), "{big}");
    assert!(!big.contains("   | numjobs=2\n"), "{big}");
    assert!(!big.contains("jobs (RANDWRITE, randread)"), "{big}");

    // A 2-CPU host: 2 jobs, and the deviation names the host's 2 CPUs, not a pmemvm default.
    let small = plan_on_host("2", &[]);
    assert!(small.contains("Guest: 2 vCPU(s)"), "{small}");
    assert!(small.contains("   | numjobs=2"), "{small}");
    let line = small
        .lines()
        .find(|l| l.contains("jobs (RANDWRITE, randread): thread 48, here 2"))
        .unwrap_or_else(|| panic!("no jobs deviation:\n{small}"));
    assert!(line.contains("this host has 2 CPU(s)"), "{line}");
    assert!(!line.contains("--cpus"), "{line}");

    // --cpus and --jobs still override, and the deviation says the user chose them.
    let chosen = plan_on_host("64", &["--cpus", "4"]);
    assert!(chosen.contains("Guest: 4 vCPU(s)"), "{chosen}");
    assert!(
        chosen.contains("jobs (RANDWRITE, randread): thread 48, here 4")
            && chosen.contains("set with --cpus"),
        "{chosen}"
    );
    let jobs = plan_on_host("2", &["--jobs", "3"]);
    assert!(
        jobs.contains("jobs (RANDWRITE, randread): thread 48, here 3: set with --jobs"),
        "{jobs}"
    );

    // A description that is not a CPU count is refused, in one sentence.
    let out = run_cmd(
        std::process::Command::new(pmemvm_bin())
            .args(["bench", "pmem-nowait", "--plan"])
            .env("PMEMVM_HOST_CPUS", "many"),
        DEADLINE,
    );
    assert_eq!(out.status, Some(2), "{}", out.dump());
    assert!(
        out.stderr
            .contains("PMEMVM_HOST_CPUS=\"many\" is not a CPU count"),
        "{}",
        out.dump()
    );
}
