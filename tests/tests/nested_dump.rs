//! Memory dumps of the guest image's Linux under pmemvm itself (nested: a
//! one-vCPU L1 on QEMU 10 whose KVM is real SVM), read by the tools kernel developers
//! use — Debian's `crash` and drgn (PyPI's, tests/run.sh installs it):
//!
//! 1. A running two-vCPU guest with `--api`: `pmemvm ctl SOCKET stats`,
//!    then `pmemvm ctl SOCKET dump running.core`; SIGTERM ends pmemvm
//!    (status 143) and the socket goes.
//! 2. The same kernel with `rdinit=/bin/busybox false`: init exits, the
//!    kernel panics ("Attempted to kill init!"), its pvpanic driver tells
//!    pmemvm, `--dump-on-panic panic.core` is written and pmemvm ends with
//!    status 7.
//!
//! A boot whose 2-vCPU guest triple-faults at a RIP inside the L1's modules
//! (the TCG platform's breakdown, not pmemvm's: docs/nested-platform.md, "Guest
//! faults in a two-vCPU L1") is run again, up to `BREAKDOWN_TRIES` runs, and
//! noted; any other guest triple fault is the result.
//!
//! On this host: `crash -s vmlinux running.core` prints `sys` with the
//! release the dump's VMCOREINFO names (the kernel's own `uname -r`
//! text), though a user process of the running guest planted 64 MiB of fake
//! VMCOREINFO notes; crash's `bt -a` finds the task of each vCPU and drgn
//! unwinds each from the dump's register notes; drgn reads `init_task.comm` as
//! "swapper/0" from both dumps (it needs the true KASLR offset for that);
//! and crash's `log` of the panic dump holds the panic message.
#![allow(clippy::unwrap_used)] // a failed step fails the test with its message

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use pmemvm_tests::image::setup_job_initrd;
use pmemvm_tests::nested::{guest_image, NestedVm};
use pmemvm_tests::require;
use pmemvm_tests::skip::Skip;

const L1_SCRIPT: &str = r#"
# exec: the background job is pmemvm itself, so the SIGTERM below reaches it.
boot() {
    n=$1; shift
    exec pmemvm -v boot --kernel vmlinux --cpus 2 --memory 256M \
        --console-log console$n.txt --channel channel$n.bin "$@" 2> pmemvm$n.err
}
# A boot whose guest triple-faulted at a RIP inside the L1's modules (the
# platform's breakdown, `breakdown`: docs/nested-platform.md, "Guest faults in a
# two-vCPU L1") is run again, up to $TRIES runs in all, and the line pmemvm
# printed is kept.
# One try of run 1: boot, wait for the job's DUMP-READY, stats, dump, SIGTERM.
# Its step lines go to steps1.txt; the try that counts appends them to steps.txt.
run1() {
    rm -f console1.txt channel1.bin api.sock steps1.txt running.core
    boot 1 --initrd run1.img --cmdline 'console=ttyS0 reboot=acpi panic=-1' --api $PWD/api.sock &
    pid=$!
    i=0
    while [ $i -lt 1500 ] && kill -0 $pid 2>/dev/null && ! grep -q DUMP-READY console1.txt 2>/dev/null; do
        sleep 0.2; i=$((i+1))
    done
    pmemvm ctl api.sock stats > stats.json 2> stats.err; echo "stats $?" >> steps1.txt
    pmemvm ctl api.sock dump running.core > dump.out 2>&1; echo "dump $?" >> steps1.txt
    kill -TERM $pid
    wait $pid; echo "run1 $?" >> steps1.txt
}
# A breakdown at any point of the try (before DUMP-READY, or between it and the
# dump) ends the guest: that try is run again.
try=1
run1
while [ $try -lt $TRIES ] && breakdown pmemvm1.err > /dev/null; do
    echo "run1: $(breakdown pmemvm1.err)" >> once-more.txt
    try=$((try+1))
    run1
done
cat steps1.txt >> steps.txt
[ -e api.sock ]; echo "socket-left $?" >> steps.txt
run2() {
    (boot 2 --initrd initramfs --cmdline 'console=ttyS0 reboot=acpi panic=-1 rdinit=/bin/busybox false' \
        --dump-on-panic $PWD/panic.core)
}
try=1
run2; st=$?
while [ $try -lt $TRIES ] && [ $st = 4 ] && breakdown pmemvm2.err > /dev/null; do
    echo "run2: $(breakdown pmemvm2.err)" >> once-more.txt
    try=$((try+1))
    run2; st=$?
done
echo "run2 $st" >> steps.txt
"#;

/// The running guest's job: a user process plants 64 MiB of fake
/// VMCOREINFO notes (the kernel's note's shape, a made-up release and KASLR
/// offset) in free memory, then says DUMP-READY and waits.
const PLANT: &str = r#"
printf '\013\000\000\000\074\000\000\000\000\000\000\000VMCOREINFO\000\000OSRELEASE=6.6.6-planted\nPAGESIZE=4096\nKERNELOFFSET=2a000000\n' > /tmp/n
{ cat /tmp/n; head -c 44 /dev/zero; } > /tmp/b
i=0; while [ $i -lt 13 ]; do cat /tmp/b /tmp/b > /tmp/c; mv /tmp/c /tmp/b; i=$((i+1)); done
i=0; while [ $i -lt 64 ]; do cat /tmp/b >> /tmp/fake; i=$((i+1)); done
echo "planted $(wc -c < /tmp/fake)"
echo DUMP-READY
sleep 600
"#;

/// crash (Debian's package).
fn crash() -> Result<PathBuf, Skip> {
    match Command::new("crash").arg("--version").output() {
        Ok(o) if o.status.success() => Ok(PathBuf::from("crash")),
        _ => Err(Skip::new("crash is not installed (apt-get install crash)")),
    }
}

/// drgn: `$PMEMVM_DRGN` (tests/run.sh's venv) or one on PATH.
fn drgn() -> Result<PathBuf, Skip> {
    let d = std::env::var_os("PMEMVM_DRGN").map_or_else(|| PathBuf::from("drgn"), PathBuf::from);
    match Command::new(&d).arg("--version").output() {
        Ok(o) if o.status.success() => Ok(d),
        _ => Err(Skip::new(
            "drgn is not installed (tests/run.sh installs it from PyPI into a venv and sets PMEMVM_DRGN)",
        )),
    }
}

/// `crash -s VMLINUX CORE` with `commands` on stdin; stdout and stderr.
fn crash_session(vmlinux: &Path, core: &Path, commands: &str) -> String {
    let mut child = Command::new("crash")
        .arg("-s")
        .arg(vmlinux)
        .arg(core)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(commands.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    format!(
        "{}\n{}\nstatus {:?}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        out.status.code()
    )
}

/// drgn's answer to `init_task.comm` in `core`.
fn drgn_comm(drgn: &Path, vmlinux: &Path, core: &Path) -> String {
    drgn_eval(
        drgn,
        vmlinux,
        core,
        "print('COMM=' + prog['init_task'].comm.string_().decode())",
    )
}

/// What drgn prints for the Python `code` run on `core`.
fn drgn_eval(drgn: &Path, vmlinux: &Path, core: &Path, code: &str) -> String {
    let out = Command::new(drgn)
        .arg("-q")
        .arg("-c")
        .arg(core)
        .arg("-s")
        .arg(vmlinux)
        .arg("-e")
        .arg(code)
        .output()
        .unwrap();
    format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn dumps_of_a_running_and_a_panicked_guest_open_in_crash_and_drgn() {
    require!(crash());
    let drgn = require!(drgn());
    // QEMU 10 runs the L1 of the two-vCPU guest: Debian 12's 7.2 loses wake-ups of
    // nested guests now and then (docs/nested-platform.md, "QEMU
    // 7.2: lost wake-ups").
    let qemu = require!(pmemvm_tests::nested::find_qemu_10());
    let vm = require!(NestedVm::new().and_then(NestedVm::with_pmemvm)).with_qemu(qemu);
    let vmlinux = require!(guest_image("vmlinux"));
    let initrd = require!(guest_image("initramfs.cpio.gz"));
    let base = fs::read(&initrd).unwrap();
    let out = vm
        // One L1 vCPU under the 2-vCPU guest: the guest's vCPUs interleave on
        // it, and the emulated platform's faults of 2-vCPU L1s (docs/nested-platform.md,
        // "Two vCPUs in the L1, and one L1 per run") stay out of the result.
        .l1_cpus(1)
        .deadline(Duration::from_secs(2400))
        .file("vmlinux", &vmlinux)
        .file("initramfs", &initrd)
        .bytes("run1.img", setup_job_initrd(&base, PLANT))
        .run(&[
            "sh",
            "-c",
            &pmemvm_tests::nested::l1_script_with_retries(L1_SCRIPT),
        ])
        .expect("two pmemvm boots in the L1");
    let read = |f: &str| fs::read_to_string(out.path(f)).unwrap_or_default();
    let ctx = format!(
        "{}\n--- steps ---\n{}\n--- dump.out ---\n{}\n--- pmemvm1.err ---\n{}\n--- pmemvm2.err ---\n{}\n--- console2 (tail) ---\n{}",
        out.dump(),
        read("steps.txt"),
        read("dump.out"),
        read("pmemvm1.err"),
        read("pmemvm2.err"),
        read("console2.txt").lines().rev().take(30).collect::<Vec<_>>().into_iter().rev().collect::<Vec<_>>().join("\n"),
    );
    pmemvm_tests::nested::note_l1_restarts("nested_dump", &out);
    let steps = read("steps.txt");
    for step in ["stats 0", "dump 0", "run1 143", "socket-left 1", "run2 7"] {
        assert!(steps.lines().any(|l| l == step), "step '{step}'\n{ctx}");
    }
    let stats: serde_json::Value = serde_json::from_str(&read("stats.json"))
        .unwrap_or_else(|e| panic!("stats is not JSON ({e})\n{ctx}"));
    assert!(
        stats["exits"]["io_out"].as_u64() > Some(0),
        "{stats}\n{ctx}"
    );
    let dumped = read("dump.out");
    let release = dumped
        .split("kernel ")
        .nth(1)
        .and_then(|r| r.split(':').next())
        .unwrap_or_else(|| panic!("the dump names the kernel release\n{ctx}"))
        .to_string();
    assert!(release.starts_with("6.1"), "{release}\n{ctx}");
    assert!(dumped.contains("2 vCPU(s)"), "{ctx}");
    let pm2 = read("pmemvm2.err");
    assert!(pm2.contains("the guest kernel panicked (vCPU"), "{ctx}");
    assert!(pm2.contains("panic.core"), "{ctx}");

    let running = out.path("running.core");
    let panicked = out.path("panic.core");
    let sys = crash_session(&vmlinux, &running, "sys\nquit\n");
    assert!(
        sys.lines()
            .any(|l| l.trim() == format!("RELEASE: {release}")),
        "crash's sys names the release:\n{sys}\n{ctx}"
    );
    assert!(sys.contains("CPUS: 2"), "{sys}");
    // The planted notes lie below the kernel's, and none of them is taken:
    // the dump's VMCOREINFO is read through the kernel's own pointer.
    if let Some(keep) = std::env::var_os("PMEMVM_KEEP_DUMP") {
        let _ = fs::copy(&running, keep);
    }
    let core = fs::read(&running).unwrap();
    let real_note = format!("VMCOREINFO\0\0OSRELEASE={release}\n");
    let (fake, real) = (
        pmemvm_tests::core_file::lowest(&core, b"OSRELEASE=6.6.6-planted"),
        pmemvm_tests::core_file::lowest(&core, real_note.as_bytes()),
    );
    // Both are in the dump. The kernel allocates its note early, low in RAM
    // (0x26000c in one run here), where a user process cannot get below it;
    // the unit test `the_kernels_own_note_is_found_where_a_scan_finds_the_users_forgery`
    // plants one below.
    assert!(
        fake.is_some() && real.is_some(),
        "the planted notes ({fake:x?}) and the kernel's ({real:x?}) in the dump\n{ctx}"
    );
    assert!(
        dumped.contains("read through the kernel's own vmcoreinfo_note pointer")
            && !sys.contains("6.6.6-planted"),
        "{sys}\n{ctx}"
    );
    // Each vCPU's backtrace, from the dump's register notes: crash's `bt -a`
    // finds the task on each CPU, and drgn unwinds each (crash 8.0.2, Debian
    // 12's, stops at its own set-up of 6.1's exception stacks — "invalid size
    // request: 0 type: stack contents" — before any frame, on this dump as
    // on any).
    let bt = crash_session(&vmlinux, &running, "bt -a\nquit\n");
    for cpu in 0..2 {
        assert!(
            bt.lines()
                .any(|l| l.starts_with("PID: ") && l.contains(&format!("CPU: {cpu} "))),
            "crash's bt -a has no CPU {cpu}:\n{bt}\n{ctx}"
        );
    }
    let traces = drgn_eval(
        &drgn,
        &vmlinux,
        &running,
        "from drgn.helpers.linux.sched import cpu_curr\n\
         for cpu in range(2):\n    print('CPU', cpu)\n    print(prog.stack_trace(cpu_curr(prog, cpu)))",
    );
    for cpu in 0..2 {
        let part = traces
            .split(&format!("CPU {cpu}\n"))
            .nth(1)
            .and_then(|t| t.split("CPU ").next())
            .unwrap_or_default();
        assert!(
            part.contains("#0 ") && part.contains("do_idle"),
            "drgn's backtrace of vCPU {cpu} from its register note:\n{traces}\n{ctx}"
        );
    }
    let log = crash_session(&vmlinux, &panicked, "log\nquit\n");
    assert!(
        log.contains("Kernel panic - not syncing: Attempted to kill init!"),
        "crash reads the panic from the dump's kernel log:\n{log}\n{ctx}"
    );
    for core in [&running, &panicked] {
        let comm = drgn_comm(&drgn, &vmlinux, core);
        assert!(
            comm.lines().any(|l| l == "COMM=swapper/0"),
            "drgn reads init_task.comm from {}:\n{comm}\n{ctx}",
            core.display()
        );
    }
}
