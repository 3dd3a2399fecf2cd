//! Tier 4 (this host's KVM, tiny guests): `pmemvm boot` hands its checked VM
//! over to the core executable `pmemvm-vm` beside it (`vmm::launch`): the
//! user's process becomes the VM's (same pid, terminal and exit status), and
//! it keeps less program text resident than `pmemvm` running the VM itself.
//! Without the core executable beside it, `pmemvm` runs the VM in its own
//! process. These prove one vCPU on this host's KVM (PVM here, hardware KVM
//! in `hw_kvm_tier`).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use pmemvm_tests::pmemvm::{pmemvm_bin, run_cmd, TempDir};
use pmemvm_tests::require;
use pmemvm_tests::tiny::{guest, kvm_available};

const LIMIT: Duration = Duration::from_secs(60);

/// `pmemvm` alone in a directory of its own (no core executable beside it).
fn pmemvm_alone(d: &TempDir) -> PathBuf {
    let alone = d.join("pmemvm");
    std::fs::copy(pmemvm_bin(), &alone).expect("copy pmemvm");
    alone
}

fn boot_hello(bin: &Path, extra: &[&str]) -> pmemvm_tests::pmemvm::Output {
    let hello = guest("hello").expect("the hello guest is assembled with the tests");
    let mut cmd = Command::new(bin);
    cmd.args(extra).arg("boot").arg("--kernel").arg(hello);
    cmd.args(["--nvdimm", "128G"]);
    run_cmd(&mut cmd, LIMIT)
}

/// The "VMM RSS excluding guest memory N KiB" figure of a `-v` boot.
fn rss_kib(stderr: &str) -> u64 {
    let line = stderr
        .lines()
        .find(|l| l.contains("VMM RSS excluding guest memory"))
        .unwrap_or_else(|| panic!("no RSS line in:\n{stderr}"));
    line.split_whitespace()
        .rev()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no figure in: {line}"))
}

#[test]
fn boot_runs_its_vm_in_the_core_executable_under_the_users_pid() {
    require!(kvm_available());
    let spin = require!(guest("spin"));
    let d = TempDir::new("handover-pid");
    let console = std::fs::File::create(d.join("out")).expect("create out");
    let mut child = Command::new(pmemvm_bin())
        .arg("boot")
        .arg("--kernel")
        .arg(&spin)
        .args(["--nvdimm", "1G"])
        .stdin(Stdio::null())
        .stdout(console.try_clone().expect("dup"))
        .stderr(console)
        .spawn()
        .expect("start pmemvm");
    let exe = format!("/proc/{}/exe", child.id());
    let end = Instant::now() + LIMIT;
    let mut running_in = None;
    while Instant::now() < end {
        let out = std::fs::read_to_string(d.join("out")).unwrap_or_default();
        if out.contains("spinning") {
            running_in = std::fs::read_link(&exe).ok();
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let pid = libc::pid_t::try_from(child.id()).expect("pmemvm's pid");
    // SAFETY: kill(2) on our own child's pid, not yet reaped (wait follows).
    unsafe { libc::kill(pid, libc::SIGINT) };
    let status = child.wait().expect("wait for pmemvm");
    let out = std::fs::read_to_string(d.join("out")).unwrap_or_default();
    let running_in = running_in.unwrap_or_else(|| panic!("the guest never ran:\n{out}"));
    assert_eq!(
        running_in.file_name().and_then(|n| n.to_str()),
        Some(vmm::launch::CORE_EXECUTABLE),
        "the VM runs in {} under the user's pid:\n{out}",
        running_in.display()
    );
    assert_eq!(status.code(), Some(130), "Ctrl-C ends it in order:\n{out}");
    assert!(out.contains("stopped by signal 2"), "{out}");
}

#[test]
fn without_the_core_executable_beside_it_pmemvm_runs_the_vm_itself() {
    require!(kvm_available());
    let d = TempDir::new("handover-alone");
    let out = boot_hello(&pmemvm_alone(&d), &["-vv"]);
    assert_eq!(out.status, Some(42), "{}", out.dump());
    assert!(
        out.stdout.contains("hello from the tiny guest"),
        "{}",
        out.dump()
    );
    assert!(
        out.stderr.contains("pmemvm-vm is not beside this program"),
        "{}",
        out.dump()
    );
}

#[test]
fn the_core_executable_keeps_less_resident_than_pmemvm_running_the_vm() {
    require!(kvm_available());
    let d = TempDir::new("handover-rss");
    let alone = boot_hello(&pmemvm_alone(&d), &["-v"]);
    let handed = boot_hello(&pmemvm_bin(), &["-v"]);
    assert_eq!(alone.status, Some(42), "{}", alone.dump());
    assert_eq!(handed.status, Some(42), "{}", handed.dump());
    let (a, h) = (rss_kib(&alone.stderr), rss_kib(&handed.stderr));
    assert!(
        h < a,
        "handed over: {h} KiB resident, in pmemvm itself: {a} KiB (a tiny guest, 128G DIMM)"
    );
}

#[test]
fn an_error_in_the_core_executable_has_pmemvm_s_words_and_status() {
    require!(kvm_available());
    let d = TempDir::new("handover-error");
    // A core executable that is not one: the hand-over fails with the file named.
    let bin = pmemvm_alone(&d);
    std::fs::write(d.join(vmm::launch::CORE_EXECUTABLE), b"not a program").expect("write");
    let out = boot_hello(&bin, &[]);
    assert_eq!(out.status, Some(1), "{}", out.dump());
    assert!(
        out.stderr
            .contains("pmemvm: error: cannot hand the VM over to")
            && out.stderr.contains(vmm::launch::CORE_EXECUTABLE),
        "{}",
        out.dump()
    );
    // Given anything but a launch descriptor, the core executable refuses with status 2.
    let core = pmemvm_bin().with_file_name(vmm::launch::CORE_EXECUTABLE);
    let out = run_cmd(Command::new(core).args(["boot", "--kernel", "x"]), LIMIT);
    assert_eq!(out.status, Some(2), "{}", out.dump());
    assert!(out.stderr.contains("--launch-fd"), "{}", out.dump());
}
