//! `pmemvm boot --engine nested --gdb` under Debian's gdb: pmemvm's stub in
//! the L1, whose KVM is real SVM, reached through QEMU's socket on this
//! host — the hardware-KVM behaviour of the stub, proven here. A tiny guest
//! (write watchpoint, breakpoint, step, memory edit, exit status), then the
//! guest image's kernel as a kernel developer debugs it: `break
//! nd_pmem_probe` with a backtrace through the nvdimm bus probe, a single
//! step, a hardware watchpoint on `jiffies_64`, and the guest running on
//! to its power-off; and `run --gdb` stopping in `pmem_submit_bio` before
//! its job runs to its end.
//!
//! Needs QEMU 10 for the L1 (`$PMEMVM_QEMU_10`, which tests/run.sh sets):
//! QEMU 7.2's TCG does not stop a nested guest on debug registers.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use pmemvm_tests::gdb::{
    assert_watch_break_step, debug_session, free_port, gdb_available, rip_values, Debugged,
    Session, WATCH_BREAK_STEP,
};
use pmemvm_tests::require;
use pmemvm_tests::skip::Skip;
use pmemvm_tests::tcg::TcgGuard;

/// The L1 boots, under a loaded host too.
const LISTEN: Duration = Duration::from_secs(600);
/// gdb's session, and pmemvm's end after it.
const LIMIT: Duration = Duration::from_secs(900);

/// QEMU 10, the L1 and gdb are there; the guard holds a TCG slot per vCPU
/// of the guest (`--engine nested` gives the L1 as many).
fn ready(vcpus: usize) -> Result<(PathBuf, TcgGuard), Skip> {
    gdb_available()?;
    let qemu = pmemvm_tests::nested::find_qemu_10()?;
    let version = Command::new(&qemu)
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| lab::guest::qemu::parse_version(&String::from_utf8_lossy(&o.stdout)));
    assert!(
        version.is_some_and(|v| v >= lab::guest::qemu::NESTED_QEMU_MIN),
        "{} is QEMU {version:?}: the nested gdb tests need QEMU 10 or newer (tests/run.sh \
         names one in PMEMVM_QEMU_10; guest-images/lib/qemu-install.sh --unpack DIR prints one)",
        qemu.display()
    );
    match pmemvm_tests::nested::prepare_l1() {
        Ok(_) => {}
        Err(pmemvm_tests::nested::NestedError::Unavailable(s)) => return Err(s),
        Err(e) => panic!("preparing the L1 failed: {e}"),
    }
    let guard = pmemvm_tests::tcg::lock_n(vcpus).expect("take the TCG slots");
    Ok((qemu, guard))
}

/// `pmemvm boot --engine nested ARGS` with `qemu`'s directory first on PATH.
fn boot_nested(qemu: &Path, args: &[&str]) -> Debugged {
    let dir = qemu.parent().expect("QEMU's directory");
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut paths = vec![dir.to_path_buf()];
    paths.extend(std::env::split_paths(&path));
    let mut cmd = Command::new(pmemvm_tests::pmemvm::pmemvm_bin());
    cmd.args(["boot", "--engine", "nested"])
        .args(args)
        .env("PATH", std::env::join_paths(paths).expect("PATH"))
        .env("PMEMVM_L1_CACHE", pmemvm_tests::nested::cache_dir());
    Debugged::start(cmd)
}

#[test]
// test-slots: 2
fn gdb_through_the_nested_engine_watches_breaks_steps_and_edits_a_tiny_guest() {
    let (qemu, _guard) = require!(ready(2));
    let kernel = require!(pmemvm_tests::tiny::guest("debuggee"));
    let k = kernel.display().to_string();
    let target = format!("127.0.0.1:{}", free_port());
    let args = [
        "--kernel",
        &k,
        "--cpus",
        "2",
        "--gdb",
        &target,
        "--gdb-wait",
    ];
    let s = retry_breakdowns(|| {
        let vm = boot_nested(&qemu, &args);
        debug_session(vm, &kernel, &target, WATCH_BREAK_STEP, None, LISTEN, LIMIT)
    });
    assert!(
        s.gdb.contains("Thread 1.2"),
        "a gdb thread per vCPU:\n{}",
        s.all()
    );
    assert_watch_break_step(&s);
}

/// Runs `session` again after the platform's breakdown (`platform_breakdown`
/// in its output: the L1's own fault or stall, or a guest triple fault at a
/// RIP inside the L1's modules; docs/nested-platform.md, "The evidence the
/// harness accepts"), which is not the stub's doing; each rerun is noted in
/// the run's summary. Any other guest triple fault is the result.
fn retry_breakdowns(session: impl FnMut() -> Session) -> Session {
    pmemvm_tests::nested::retry_breakdowns("nested_gdb", session, |s| {
        let why = pmemvm_tests::nested::platform_breakdown(&s.all())?;
        eprintln!("{}", s.all());
        Some(format!("the nested run was restarted: {why}"))
    })
}

/// The first address of each `x/2i` line that names `function`.
fn instruction_addresses(out: &str, function: &str) -> Vec<u64> {
    out.lines()
        .filter(|l| l.contains(&format!("<{function}")) && l.contains(">:"))
        .filter_map(|l| {
            l.trim_start_matches("=>")
                .split_whitespace()
                .next()
                .and_then(|a| u64::from_str_radix(a.trim_start_matches("0x"), 16).ok())
        })
        .collect()
}

#[test]
fn gdb_breaks_in_nd_pmem_probe_of_the_guest_kernel_and_the_guest_runs_on_to_its_end() {
    let (qemu, _guard) = require!(ready(1));
    let image = require!(pmemvm_tests::image::image_dir());
    let vmlinux = image.vmlinux.clone();
    let v = vmlinux.display().to_string();
    let initrd = image.initramfs.display().to_string();
    let dir = pmemvm_tests::pmemvm::TempDir::new("nested-gdb");
    let dimm = format!("64M,label-size=0,file={}/pm0.img", dir.0.display());
    let target = format!("127.0.0.1:{}", free_port());
    // init is busybox's `poweroff -f`: the kernel probes the DIMM, then powers off;
    // quiet, since every console byte is an expensive exit when nested.
    let s = retry_breakdowns(|| {
        let vm = boot_nested(
            &qemu,
            &[
                "--kernel",
                &v,
                "--initrd",
                &initrd,
                // One vCPU: `--engine nested` gives the L1 the guest's vCPUs, and a
                // 2-vCPU L1's guest faults are results now (docs/testing.md,
                // "Reruns"); gdb's thread per vCPU is the tiny guest's test.
                "--cpus",
                "1",
                "--nvdimm",
                &dimm,
                "--cmdline",
                "console=ttyS0 reboot=acpi panic=-1 quiet rdinit=/bin/busybox poweroff -f",
                "--gdb",
                &target,
                "--gdb-wait",
            ],
        );
        debug_session(
            vm,
            &vmlinux,
            &target,
            &[
                "break nd_pmem_probe",
                "continue",
                "bt",
                "info registers rip",
                "x/2i $pc",
                "stepi",
                "info registers rip",
                "delete",
                "watch jiffies_64",
                "continue",
                "delete",
                "continue",
            ],
            None,
            LISTEN,
            LIMIT,
        )
    });
    let (out, status, all) = (&s.gdb, s.status, s.all());
    eprintln!("{all}");
    assert!(
        out.contains("Breakpoint 1, ") && out.contains("nd_pmem_probe"),
        "the breakpoint in nd_pmem_probe is hit:\n{all}"
    );
    assert!(
        out.contains("nvdimm_bus_probe"),
        "the backtrace goes through the nvdimm bus probe:\n{all}"
    );
    let rips = rip_values(out);
    let insns = instruction_addresses(out, "nd_pmem_probe");
    assert!(rips.len() >= 2 && insns.len() >= 2, "{all}");
    assert_eq!(rips[0], insns[0], "stopped at the breakpoint:\n{all}");
    assert_eq!(rips[1], insns[1], "one step: the next instruction:\n{all}");
    assert!(
        out.contains("Hardware watchpoint 2: jiffies_64") && out.contains("New value = "),
        "the watchpoint on jiffies_64 fires on the timer's write:\n{all}"
    );
    assert!(
        out.contains("exited with code 00") || out.contains("exited normally"),
        "{all}"
    );
    assert_eq!(status, Some(0), "the guest powered off: status 0:\n{all}");
}

#[test]
fn run_with_gdb_breaks_in_pmem_submit_bio_and_the_job_finishes() {
    let (qemu, _guard) = require!(ready(1));
    let image = require!(pmemvm_tests::image::image_dir());
    let vmlinux = image.vmlinux.clone();
    let dir = pmemvm_tests::pmemvm::TempDir::new("nested-gdb-run");
    let dimm = format!("64M,label-size=0,file={}/pm0.img", dir.0.display());
    let target = format!("127.0.0.1:{}", free_port());
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut paths = vec![qemu.parent().expect("QEMU's directory").to_path_buf()];
    paths.extend(std::env::split_paths(&path));
    let session = || {
        let mut cmd = Command::new(pmemvm_tests::pmemvm::pmemvm_bin());
        cmd.args([
            // One vCPU, as above.
            "run", "--engine", "nested", "--cpus", "1", "--nvdimm", &dimm,
        ])
        .args(["--timeout", "900", "--gdb", &target, "--gdb-wait", "--"])
        .args(["dd", "if=/dev/pmem0", "of=/dev/null", "bs=4096", "count=1"])
        .env("PATH", std::env::join_paths(paths.clone()).expect("PATH"))
        .env("PMEMVM_L1_CACHE", pmemvm_tests::nested::cache_dir());
        let vm = Debugged::start(cmd);
        debug_session(
            vm,
            &vmlinux,
            &target,
            &[
                "break pmem_submit_bio",
                "continue",
                "bt",
                "delete",
                "continue",
            ],
            None,
            LISTEN,
            LIMIT,
        )
    };
    let s = retry_breakdowns(session);
    let (out, all) = (&s.gdb, s.all());
    eprintln!("{all}");
    assert!(
        out.contains("Breakpoint 1, pmem_submit_bio"),
        "the breakpoint in pmem_submit_bio is hit:\n{all}"
    );
    assert!(
        out.contains("submit_bio"),
        "the backtrace names the block layer:\n{all}"
    );
    assert_eq!(s.status, Some(0), "the job (dd) ran to its end:\n{all}");
}
