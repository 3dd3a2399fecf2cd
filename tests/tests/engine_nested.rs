// test-queue: tcg
//! Tier 5 through the product: `--engine nested` (pmemvm itself inside a QEMU
//! TCG L1 with emulated SVM, `lab::guest::nested`) for `run -- CMD`, `run --fio`
//! and `boot` (`bench`: `engine_nested_api`), each `pmemvm` invocation booting its own L1 here. The
//! user's backing file stays on the host and holds the guest's bytes
//! afterwards; results say engine `nested` and functional only; `boot` puts
//! the guest's shell on a terminal (a pty) through both levels and gives the
//! terminal back as it was. And the bad input: `--engine nested` without
//! QEMU on `PATH` is one sentence and status 2, before anything boots.
//!
//! Skips when QEMU, the guest image or a tool of the L1 preparation is
//! missing. Each test holds the machine's TCG lock while its L1 runs.

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use pmemvm_tests::nested::run_engine_nested;
use pmemvm_tests::pmemvm::{path_without, pmemvm_bin, run_cmd, Output, TempDir, VERIFY_JOB};
use pmemvm_tests::require;
use pmemvm_tests::skip::Skip;
use pmemvm_tests::tcg::TcgGuard;
use pmemvm_tests::terminal::{openpty, term_settings};

/// One L1 boot (about 5 s under TCG), the guest and its job, with room for a loaded host.
const DEADLINE: Duration = Duration::from_secs(600);
/// Quiet: every console byte is an expensive exit when nested.
const CMDLINE: &str = "console=ttyS0 reboot=acpi panic=-1 quiet";

/// QEMU, the guest image and the L1 are there (the L1 prepared in the
/// harness's cache, shared with the other nested tests); the guard holds the
/// TCG lock for the test.
fn ready() -> Result<TcgGuard, Skip> {
    pmemvm_tests::nested::engine_ready()
}

/// [`ready`] for an L1 of `n` vCPUs: it holds `n` TCG slots.
fn ready_n(n: usize) -> Result<TcgGuard, Skip> {
    drop(ready()?);
    Ok(pmemvm_tests::tcg::lock_n(n).expect("take the TCG slots"))
}

/// `pmemvm ARGS` with the L1 cache of the harness.
fn pmemvm(args: &[&str]) -> Command {
    let mut cmd = Command::new(pmemvm_bin());
    cmd.args(args)
        .env("PMEMVM_L1_CACHE", pmemvm_tests::nested::cache_dir());
    cmd
}

fn json(path: &Path) -> serde_json::Value {
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    serde_json::from_str(&text).expect("valid JSON")
}

fn assert_nested_record(v: &serde_json::Value, out: &Output) {
    assert_eq!(v["engine"], "nested", "{}", out.dump());
    assert_eq!(v["accelerator"], "kvm-on-tcg", "{}", out.dump());
    assert_eq!(v["functional_only"], true, "{}", out.dump());
    assert!(
        out.stderr
            .contains("engine nested (kvm-on-tcg) — functional only")
            || out
                .stdout
                .contains("engine nested (kvm-on-tcg) — functional only"),
        "{}",
        out.dump()
    );
}

#[test]
fn run_command_writes_the_users_backing_file_on_the_host() {
    let _tcg = require!(ready());
    let dir = TempDir::new("nested-run-cmd");
    let img = dir.join("user.img");
    // Recorded too: the record directory is shared into the L1 like the file's.
    let rec = dir.join("rec");
    let spec = format!(
        "64M,label-size=0,file={},record={}",
        img.display(),
        rec.display()
    );
    let record = dir.join("run.json");
    let mark = format!("NESTED-ENGINE-{}", std::process::id());
    let script = format!(
        "printf {mark} | dd of=/dev/pmem0 bs=4096 seek=3 conv=fsync 2>/dev/null; \
         echo guest-saw $(head -c {} /dev/pmem0 | tail -c +12289); echo to-stderr >&2; exit 7",
        12288 + mark.len()
    );
    let started = Instant::now();
    let out = run_engine_nested(
        || {
            // A run again after a breakdown starts from no file and no recording.
            let _ = std::fs::remove_file(&img);
            let _ = std::fs::remove_dir_all(&rec);
            pmemvm(&[
                "run",
                "--engine",
                "nested",
                "--cmdline",
                CMDLINE,
                "--nvdimm",
                &spec,
                "--json",
                record.to_str().unwrap(),
                "--",
                "sh",
                "-c",
                &script,
            ])
        },
        DEADLINE,
    );
    eprintln!(
        "run --engine nested -- CMD: {:.1} s",
        started.elapsed().as_secs_f64()
    );
    assert_eq!(out.status, Some(7), "{}", out.dump());
    assert!(
        out.stdout.contains(&format!("guest-saw {mark}")),
        "{}",
        out.dump()
    );
    assert!(out.stderr.contains("to-stderr"), "{}", out.dump());
    // The user's file, on the host, holds the guest's bytes at 12 KiB.
    let bytes = std::fs::read(&img).expect("the backing file is on the host");
    assert_eq!(bytes.len(), (64 << 20) + 4096, "region + identity page");
    assert_eq!(&bytes[12288..12288 + mark.len()], mark.as_bytes());
    let v = json(&record);
    assert_nested_record(&v, &out);
    assert_eq!(v["status"], 7);
    assert_eq!(v["nvdimms"][0]["file"], img.to_str().unwrap());
    // The recording, read on the host: the fsync's flush made the mark durable.
    let images = dir.join("images");
    let out = run_cmd(
        &mut pmemvm(&[
            "crash-images",
            rec.to_str().unwrap(),
            "--out",
            images.to_str().unwrap(),
        ]),
        DEADLINE,
    );
    assert_eq!(out.status, Some(0), "{}", out.dump());
    let manifest = json(&images.join("images.json"));
    let last = manifest["last_flush"].as_u64().unwrap_or(0);
    assert!(last >= 1, "no flush recorded: {manifest}");
    let at = |n: u64| {
        let b = std::fs::read(images.join(format!("flush-{n:06}.img"))).expect("image");
        b[12288..12288 + mark.len()].to_vec()
    };
    assert_eq!(at(0), vec![0u8; mark.len()], "before the first flush");
    assert_eq!(at(last), mark.as_bytes(), "after the last flush");
}

/// `run` of a 2-vCPU guest with a label-less 64 MiB DIMM under `--engine nested`.
const TWO_VCPU_RUN: &[&str] = &[
    "run",
    "--engine",
    "nested",
    "--cmdline",
    CMDLINE,
    "--cpus",
    "2",
    "--nvdimm",
    "64M,label-size=0",
];

/// `--cpus 2` under `--engine nested`: the L1 gets two vCPUs too (on one, a
/// 2-vCPU guest's IPIs wait for a vCPU that cannot run and L1 soft-locks), and
/// the guest sees both and runs work on both.
#[test]
#[ignore = "full: a 2-vCPU L1 holding both TCG slots; CI's 2-vCPU nested runs are the SIGQUIT test here, nested_media_live, nested_gdb and nested_ndctl_suite"]
// test-slots: 2
fn a_two_vcpu_guest_gets_a_two_vcpu_l1() {
    let _tcg = require!(ready_n(2));
    let started = Instant::now();
    // The 2-vCPU L1's own triple fault, panic or stall, or a guest triple fault
    // at a RIP inside the L1's modules (TCG's: `platform_breakdown`), is run
    // again (up to `BREAKDOWN_TRIES` runs); any other end is the result.
    let out = run_engine_nested(
        || {
            pmemvm(
                &[
                    TWO_VCPU_RUN,
                    &[
                        "--",
                        "sh",
                        "-c",
                        "echo online $(cat /sys/devices/system/cpu/online); \
                         for c in 0 1; do taskset -c $c dd if=/dev/pmem0 of=/dev/null bs=1M count=16 2>/dev/null & done; wait; \
                         echo both-done",
                    ],
                ]
                .concat(),
            )
        },
        DEADLINE,
    );
    eprintln!(
        "run --engine nested --cpus 2: {:.1} s",
        started.elapsed().as_secs_f64()
    );
    assert_eq!(out.status, Some(0), "{}", out.dump());
    assert!(out.stdout.contains("online 0-1"), "{}", out.dump());
    assert!(out.stdout.contains("both-done"), "{}", out.dump());
    assert!(!out.stderr.contains("soft lockup"), "{}", out.dump());
}

#[test]
fn run_fio_on_nested_returns_fio_json_labelled_nested() {
    let _tcg = require!(ready());
    let dir = TempDir::new("nested-run-fio");
    let job = dir.join("verify.fio");
    std::fs::write(&job, VERIFY_JOB).unwrap();
    let record = dir.join("fio.json");
    let started = Instant::now();
    let out = run_engine_nested(
        || {
            pmemvm(&[
                "run",
                "--engine",
                "nested",
                "--cmdline",
                CMDLINE,
                "--nvdimm",
                "64M,label-size=0",
                "--fio",
                job.to_str().unwrap(),
                "--json",
                record.to_str().unwrap(),
            ])
        },
        DEADLINE,
    );
    eprintln!(
        "run --engine nested --fio: {:.1} s",
        started.elapsed().as_secs_f64()
    );
    assert_eq!(out.status, Some(0), "{}", out.dump());
    let v = json(&record);
    assert_nested_record(&v, &out);
    let jobs = v["fio"]["jobs"].as_array().expect("fio's JSON came back");
    assert_eq!(jobs[0]["jobname"], "write-verify");
    assert_eq!(jobs[0]["error"], 0);
    assert!(jobs[0]["write"]["io_bytes"].as_u64().unwrap_or(0) >= 8 << 20);
}

/// A new DIMM with the default label area has no namespace, so a fio job on /dev/pmem0
/// is stopped in the guest before fio runs, with one sentence naming the device and the two
/// ways on, status 1, and nothing written to the DIMM; the first way, `--setup 'ndctl
/// create-namespace'`, then runs the same job.
#[test]
fn a_job_on_pmem0_of_a_new_labelled_dimm_is_stopped_with_the_reason() {
    let _tcg = require!(ready());
    let dir = TempDir::new("nested-no-namespace");
    let job = dir.join("verify.fio");
    std::fs::write(&job, VERIFY_JOB).unwrap();
    let img = dir.join("new.img");
    let spec = format!("64M,file={}", img.display());
    let run = |setup: Option<&str>| {
        let mut args = vec![
            "run",
            "--engine",
            "nested",
            "--cmdline",
            CMDLINE,
            "--nvdimm",
            &spec,
            "--fio",
            job.to_str().unwrap(),
        ];
        if let Some(s) = setup {
            args.extend(["--setup", s]);
        }
        run_engine_nested(|| pmemvm(&args), DEADLINE)
    };
    let out = run(None);
    assert_eq!(out.status, Some(1), "{}", out.dump());
    assert!(
        out.stderr.contains(
            "the fio job names /dev/pmem0, which the guest does not have; fio was not run"
        ),
        "{}",
        out.dump()
    );
    assert!(
        out.stderr.contains("--setup 'ndctl create-namespace'"),
        "{}",
        out.dump()
    );
    assert!(out.stderr.contains("label-size=0"), "{}", out.dump());
    assert!(!out.stderr.contains("O_DIRECT"), "{}", out.dump());
    let mut region = vec![0u8; 64 << 20];
    std::fs::File::open(&img)
        .and_then(|mut f| f.read_exact(&mut region))
        .expect("read the DIMM's region");
    assert!(
        region.iter().all(|&b| b == 0),
        "the DIMM's region was written"
    );
    let out = run(Some("ndctl create-namespace"));
    assert_eq!(out.status, Some(0), "{}", out.dump());
}

/// A two-vCPU guest whose setup waits forever on a pipe, under pmemvm nested:
/// SIGQUIT to pmemvm here reaches pmemvm in the L1, which says where each vCPU
/// is and lets the guest go on; at `--timeout` the same description ends the
/// run (status 124), on stderr and in the record — each vCPU in the guest,
/// halted with interrupts on at a RIP the image's vmlinux names (the idle
/// loop), with the idle loop's caller among the kernel code on its stack.
#[test]
// test-slots: 2
fn a_guest_waiting_forever_is_described_per_vcpu_on_sigquit_and_at_the_time_out() {
    let _tcg = require!(ready_n(2));
    let dir = TempDir::new("nested-hang");
    let job = dir.join("verify.fio");
    std::fs::write(&job, VERIFY_JOB).unwrap();
    let record = dir.join("run.json");
    let answered = |s: &str| s.contains("pmemvm: SIGQUIT: the guest goes on");
    // One run: SIGQUIT every 15 s until pmemvm in the L1 answers (before it runs, the L1
    // says so) or the run ends; its stderr, exit status and the SIGQUITs sent.
    let one_run = || {
        let _ = std::fs::remove_file(&record);
        let mut cmd = pmemvm(
            &[
                TWO_VCPU_RUN,
                &[
                    "--setup",
                    "mkfifo /tmp/never; cat /tmp/never",
                    "--fio",
                    job.to_str().unwrap(),
                    // Long enough for the guest to reach its setup on a loaded host (one CI
                    // run saw `/init` up after 31.5 s, and 40 s caught it still in `ndctl list`):
                    // twice that and more; each second here holds both TCG slots.
                    "--timeout",
                    "100",
                    "--json",
                    record.to_str().unwrap(),
                ],
            ]
            .concat(),
        );
        cmd.env("TMPDIR", &dir.0)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("start pmemvm");
        let stderr = Arc::new(Mutex::new(String::new()));
        let reader = pmemvm_tests::durable::collect(
            child.stderr.take().expect("stderr pipe"),
            Arc::clone(&stderr),
        );
        let pid = libc::pid_t::try_from(child.id()).expect("pid");
        let start = Instant::now();
        let mut asked = 0;
        while child.try_wait().expect("wait").is_none()
            && !answered(&stderr.lock().unwrap())
            && start.elapsed() < DEADLINE
        {
            std::thread::sleep(Duration::from_secs(15));
            // SAFETY: kill(2) sends SIGQUIT to the pmemvm this test started.
            assert_eq!(unsafe { libc::kill(pid, libc::SIGQUIT) }, 0);
            asked += 1;
        }
        let waited = pmemvm_tests::process::wait_with_deadline(&mut child, DEADLINE)
            .expect("wait for pmemvm");
        reader.join().expect("stderr reader");
        let err = stderr.lock().unwrap().clone();
        (err, waited, asked)
    };
    // An L1 that stalls or faults, or a guest triple fault at a RIP inside the
    // L1's modules (the TCG platform's breakdown with two vCPUs:
    // docs/nested-platform.md, "The evidence the harness accepts"), is run
    // again, as the other nested runs are.
    let (err, waited, asked) =
        pmemvm_tests::nested::retry_breakdowns("nested SIGQUIT", one_run, |(err, _, _)| {
            pmemvm_tests::nested::platform_breakdown(err)
        });
    assert!(answered(&err), "no answer to {asked} SIGQUIT(s):\n{err}");
    for i in 0..2 {
        let line = format!("pmemvm: SIGQUIT: vCPU {i}: in the guest, ");
        assert!(err.contains(&line), "{line} missing:\n{err}");
    }
    assert_eq!(waited.and_then(|s| s.code()), Some(124), "{err}");
    let v = json(&record);
    let error = v["error"].as_str().unwrap_or_default().to_owned();
    // At the time-out a vCPU of the idle guest is halted — or, caught in the
    // middle of a tick (a strict run saw it: timekeeping_update with the local
    // timer's vector 0xec in service), running with interrupts off. Either is
    // the truth; anything else is not.
    let parts: Vec<&str> = error
        .split("; ")
        .map(|p| p.trim_start_matches("pmemvm: "))
        .filter(|p| p.starts_with("vCPU "))
        .collect();
    let in_a_tick = |p: &str| {
        p.contains(": in the guest, running, ")
            && p.contains("interrupts off")
            && parts_lapic(&error, p).contains("vector 0xec in service")
    };
    for i in 0..2 {
        let vcpu = format!("vCPU {i}: in the guest, halted");
        let part = parts
            .iter()
            .find(|p| p.starts_with(&format!("vCPU {i}: ")))
            .unwrap_or_else(|| panic!("no vCPU {i} in {error}"));
        assert!(
            part.starts_with(&vcpu) || in_a_tick(part),
            "vCPU {i}: {error}\n{err}"
        );
        assert!(err.contains(&vcpu), "{vcpu}: {err}");
        // A halted vCPU is in the idle loop: the scan of its kernel stack
        // finds the loop's caller, named from the vmlinux.
        if part.starts_with(&vcpu) {
            let stack = error
                .split_once(*part)
                .map(|(_, rest)| rest)
                .and_then(|rest| rest.split("; vCPU ").next())
                .unwrap_or_default();
            assert!(
                stack.contains("kernel code on its stack") && stack.contains("cpu_startup_entry+"),
                "vCPU {i}: the idle loop's caller on its stack: {error}"
            );
        }
    }
    let named = parts.iter().all(|p| {
        p.contains("at RIP 0xffffffff")
            && p.contains('+')
            && (p.contains("interrupts on") || in_a_tick(p))
    });
    assert!(
        named,
        "each vCPU with a kernel RIP, its symbol and IF: {error}"
    );
    eprintln!("the time-out's report: {error}");
}

#[test]
fn boot_on_nested_puts_the_guest_shell_on_the_terminal() {
    let _tcg = require!(ready());
    let (master, slave) = require!(openpty());
    let before = term_settings(&slave);
    let stdin = std::fs::File::from(slave.try_clone().expect("dup"));
    let stdout = std::fs::File::from(slave.try_clone().expect("dup"));
    let started = Instant::now();
    let mut child = pmemvm(&[
        "boot",
        "--engine",
        "nested",
        "--cmdline",
        CMDLINE,
        "--nvdimm",
        "64M,label-size=0",
    ])
    .stdin(Stdio::from(stdin))
    .stdout(Stdio::from(stdout))
    .stderr(Stdio::piped())
    .spawn()
    .expect("start pmemvm boot");
    let seen = Arc::new(Mutex::new(Vec::<u8>::new()));
    let mut reader = std::fs::File::from(master.try_clone().expect("dup"));
    let sink = Arc::clone(&seen);
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = reader.read(&mut buf) {
            if n == 0 {
                break;
            }
            sink.lock().unwrap().extend_from_slice(&buf[..n]);
        }
    });
    let text = || String::from_utf8_lossy(&seen.lock().unwrap()).into_owned();
    let prompt = "interactive shell on the console";
    while !text().contains(prompt) {
        if started.elapsed() > DEADLINE || child.try_wait().ok().flatten().is_some() {
            let _ = child.kill();
            panic!(
                "no {prompt:?} on the terminal within {DEADLINE:?}:\n{}",
                text()
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    std::thread::sleep(Duration::from_secs(2));
    let mut writer = std::fs::File::from(master);
    writer
        .write_all(b"echo hi-$((6*7)) from-$(uname -r | cut -c1-3); poweroff -f\r")
        .expect("type into the terminal");
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        if started.elapsed() > DEADLINE {
            let _ = child.kill();
            panic!("pmemvm boot did not end within {DEADLINE:?}:\n{}", text());
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let mut stderr = String::new();
    let _ = child
        .stderr
        .take()
        .map(|mut e| e.read_to_string(&mut stderr));
    eprintln!(
        "boot --engine nested: {:.1} s",
        started.elapsed().as_secs_f64()
    );
    std::thread::sleep(Duration::from_millis(300));
    let shown = text();
    assert_eq!(status.code(), Some(0), "{shown}\n--- stderr ---\n{stderr}");
    assert!(shown.contains("hi-42 from-6.1"), "{shown}");
    assert!(
        !shown.contains("PMEMVM-L1-"),
        "the L1 console is not muted:\n{shown}"
    );
    assert_eq!(
        term_settings(&slave),
        before,
        "the terminal was not restored"
    );
}

#[test]
fn nested_without_qemu_is_one_sentence_and_status_2() {
    let dir = TempDir::new("nested-no-qemu");
    let bin = path_without(&dir.0, &["qemu-system-x86_64"]);
    let img = dir.join("untouched.img");
    let spec = format!("64M,file={}", img.display());
    for args in [
        &["run", "--engine", "nested", "--nvdimm", &spec, "--", "true"][..],
        &["boot", "--engine", "nested", "--nvdimm", &spec][..],
        &["bench", "pmem-verify", "--engine", "nested"][..],
    ] {
        let out = run_cmd(pmemvm(args).env("PATH", &bin), Duration::from_secs(60));
        assert_eq!(out.status, Some(2), "{args:?}: {}", out.dump());
        let lines: Vec<&str> = out.stderr.lines().collect();
        assert_eq!(lines.len(), 1, "{args:?}: one sentence: {}", out.dump());
        assert!(
            lines[0].contains("--engine nested needs qemu-system-x86_64"),
            "{args:?}: {}",
            out.dump()
        );
        assert!(!img.exists(), "{args:?} created the backing file");
    }
}

#[test]
fn a_host_cpu_count_that_is_not_a_count_is_one_sentence_and_status_2() {
    // `$PMEMVM_HOST_CPUS` sizes the L1 as on a host of that many CPUs; what
    // is not a count is refused before any L1 starts or any file is made.
    let _tcg = require!(ready());
    let dir = TempDir::new("nested-host-cpus");
    let img = dir.join("untouched.img");
    let spec = format!("64M,file={}", img.display());
    let out = run_cmd(
        pmemvm(&["run", "--engine", "nested", "--nvdimm", &spec, "--", "true"])
            .env("PMEMVM_HOST_CPUS", "many"),
        Duration::from_secs(120),
    );
    assert_eq!(out.status, Some(2), "{}", out.dump());
    let errors: Vec<&str> = out
        .stderr
        .lines()
        .filter(|l| !l.starts_with("pmemvm: warning"))
        .collect();
    assert_eq!(errors.len(), 1, "one sentence: {}", out.dump());
    assert!(
        errors[0].contains("PMEMVM_HOST_CPUS=\"many\" is not a CPU count"),
        "{}",
        out.dump()
    );
    assert!(!img.exists(), "the backing file was created");
}

/// Starts `pmemvm run --engine nested -- sleep 600`, sends `sig` once its L1
/// runs, and returns pmemvm's status, the QEMUs of the run still alive
/// (killed afterwards) and pmemvm's stderr.
fn stop_nested_run_with(sig: libc::c_int, name: &str) -> (Option<i32>, Vec<libc::pid_t>, String) {
    let dir = TempDir::new(name);
    let mut cmd = pmemvm(&[
        "run",
        "--engine",
        "nested",
        "--cmdline",
        CMDLINE,
        "--nvdimm",
        "64M,label-size=0",
        "--",
        "sh",
        "-c",
        "sleep 600",
    ]);
    // The run's scratch directory (the L1's share) under the test's directory.
    cmd.env("TMPDIR", &dir.0)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("start pmemvm");
    let start = Instant::now();
    let mut qemu = Vec::new();
    while qemu.is_empty() && start.elapsed() < Duration::from_secs(120) {
        if child.try_wait().expect("wait").is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
        qemu = pmemvm_tests::process::qemus_under(&dir.0);
    }
    assert!(
        !qemu.is_empty(),
        "no L1 QEMU appeared under {}",
        dir.0.display()
    );
    // Let the L1 boot into its command.
    std::thread::sleep(Duration::from_secs(10));
    let pid = libc::pid_t::try_from(child.id()).expect("pid");
    // SAFETY: kill(2) sends `sig` to the pmemvm this test started.
    assert_eq!(unsafe { libc::kill(pid, sig) }, 0);
    let waited = pmemvm_tests::process::wait_with_deadline(&mut child, Duration::from_secs(60))
        .expect("wait for pmemvm");
    let mut stderr = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut stderr);
    }
    // QEMU may take a moment to die after its parent.
    let gone_by = Instant::now() + Duration::from_secs(10);
    let mut left = pmemvm_tests::process::qemus_under(&dir.0);
    while !left.is_empty() && Instant::now() < gone_by {
        std::thread::sleep(Duration::from_millis(200));
        left = pmemvm_tests::process::qemus_under(&dir.0);
    }
    for p in &left {
        // SAFETY: kill(2) of a QEMU this test's pmemvm started (cleanup).
        unsafe { libc::kill(*p, libc::SIGKILL) };
    }
    (waited.and_then(|s| s.code()), left, stderr)
}

/// `kill -TERM` of a `pmemvm run --engine nested` while its L1 runs: status
/// 143, and no QEMU of that run outlives it (the L1 is in a process group of
/// its own, so the signal would not reach it by itself).
#[test]
fn a_stop_signal_ends_the_l1_with_pmemvm() {
    let _tcg = require!(ready());
    let (status, left, stderr) = stop_nested_run_with(libc::SIGTERM, "nested-sigterm");
    assert_eq!(status, Some(143), "pmemvm did not end with 143:\n{stderr}");
    assert!(left.is_empty(), "QEMU {left:?} outlived pmemvm:\n{stderr}");
    assert!(stderr.contains("stopped by signal 15"), "{stderr}");
    // SIGKILL leaves pmemvm no say: the L1 dies with it all the same.
    let (status, left, stderr) = stop_nested_run_with(libc::SIGKILL, "nested-sigkill");
    assert_eq!(status, None, "{stderr}");
    assert!(
        left.is_empty(),
        "QEMU {left:?} outlived a killed pmemvm:\n{stderr}"
    );
}

/// The "local APIC: ..." clause that follows vCPU part `part` of a stuck
/// guest's report `error` (it is a part of its own after `; `), or "".
fn parts_lapic<'a>(error: &'a str, part: &str) -> &'a str {
    error
        .split_once(part)
        .map(|(_, rest)| rest.trim_start_matches("; "))
        .filter(|rest| rest.starts_with("local APIC:"))
        .map(|rest| rest.split("; ").next().unwrap_or(""))
        .unwrap_or("")
}

#[test]
fn a_vcpu_caught_in_a_tick_is_told_from_one_that_is_not() {
    let error = "the guest did not finish within 150 s; pmemvm: vCPU 0: in the guest, running, \
                 at RIP 0xffffffff810bf83e (timekeeping_update+0x23e), interrupts off; local \
                 APIC: vector 0xec in service; pmemvm: vCPU 1: in the guest, halted";
    let part = "vCPU 0: in the guest, running, at RIP 0xffffffff810bf83e \
                (timekeeping_update+0x23e), interrupts off";
    assert_eq!(
        parts_lapic(error, part),
        "local APIC: vector 0xec in service"
    );
    assert_eq!(parts_lapic(error, "vCPU 1: in the guest, halted"), "");
}
