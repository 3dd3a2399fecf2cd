//! `pmemvm boot --gdb` on this host's KVM, driven by Debian's gdb as a user
//! types it: attach to a guest held by `--gdb-wait`, one gdb thread per
//! vCPU, step, read and write memory through the guest's page tables,
//! `monitor regs`, breakpoints and watchpoints where this KVM can stop on
//! them (hardware KVM; PVM cannot, and pmemvm says so), Ctrl-C on a
//! running guest, `kill`, and the guest's exit status through gdb and
//! pmemvm. The same stub under hardware KVM is proven here through the
//! nested engine (`nested_gdb`), whose L1 KVM is SVM.

use std::path::PathBuf;
use std::time::Duration;

use pmemvm_tests::gdb::{
    assert_watch_break_step, debug_session, free_port, gdb_available, gdb_batch,
    gdb_batch_with_ctrl_c, rip_values, LISTENING, WATCH_BREAK_STEP,
};
use pmemvm_tests::host_kind::HostKind;
use pmemvm_tests::require;
use pmemvm_tests::tiny::{guest, kvm_available};

const LISTEN: Duration = Duration::from_secs(30);
const LIMIT: Duration = Duration::from_secs(90);

use pmemvm_tests::gdb::boot_tiny as boot;

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("pmemvm-gdb-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("test directory");
    d
}

#[test]
fn gdb_attaches_to_a_held_guest_steps_and_edits_memory_and_the_exit_status_follows() {
    require!(kvm_available());
    require!(gdb_available());
    let kernel = require!(guest("debuggee"));
    let d = dir("attach");
    let sock = d.join("gdb.sock");
    let sock_arg = sock.display().to_string();
    let mut vm = boot(&kernel, &["--cpus", "2", "--gdb", &sock_arg, "--gdb-wait"]);
    assert!(
        vm.wait_for(LISTENING, Duration::from_secs(30)),
        "{}",
        vm.output()
    );
    let out = gdb_batch(
        &kernel,
        &sock_arg,
        &[
            "info registers rip",
            "info threads",
            "stepi",
            "info registers rip",
            "stepi",
            "info registers rip",
            "print (long)counter",
            "print/x *(unsigned char *)&status",
            "set var *(unsigned char *)&status = 3",
            "print/x *(unsigned char *)&status",
            "monitor regs",
            "continue",
        ],
        Duration::from_secs(90),
    );
    let (status, pmemvm) = vm.finish(Duration::from_secs(60));
    let all = format!("{out}\n--- pmemvm ---\n{pmemvm}");
    // Held before its first instruction: at the ELF entry, _start.
    assert_eq!(
        rip_values(&out),
        vec![0x100000, 0x100007, 0x100008],
        "RIP at _start, then after `mov $0x90000,%rsp` (7 bytes) and `cli` (1 byte):\n{all}"
    );
    assert!(
        out.contains("Thread 1.1") && out.contains("Thread 1.2"),
        "one gdb thread per vCPU:\n{all}"
    );
    assert!(
        out.contains("$1 = 0"),
        "counter read through the page tables:\n{all}"
    );
    assert!(
        out.contains("$2 = 0x7") && out.contains("$3 = 0x3"),
        "status read, written, read back:\n{all}"
    );
    assert!(
        out.contains("CR3 0x") && out.contains("EFER 0x5"),
        "monitor regs shows control registers and long mode:\n{all}"
    );
    assert!(
        out.contains("exited with code 03"),
        "gdb sees the guest's exit with the status it wrote:\n{all}"
    );
    assert_eq!(
        status,
        Some(3),
        "pmemvm exits with the guest's status:\n{all}"
    );
    assert!(!sock.exists(), "the socket is removed at exit");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn breakpoints_and_watchpoints_stop_the_guest_where_this_kvm_can() {
    require!(gdb_available());
    let kind = require!(HostKind::detect());
    let kernel = require!(guest("debuggee"));
    let target = format!("127.0.0.1:{}", free_port());
    let vm = boot(&kernel, &["--cpus", "2", "--gdb", &target, "--gdb-wait"]);
    let s = debug_session(vm, &kernel, &target, WATCH_BREAK_STEP, None, LISTEN, LIMIT);
    match kind {
        HostKind::Hardware => assert_watch_break_step(&s),
        HostKind::Pvm => {
            let all = s.all();
            assert!(
                s.pmemvm
                    .contains("cannot stop the guest on breakpoints or watchpoints"),
                "pmemvm says why, in one sentence:\n{all}"
            );
            assert!(
                s.gdb.contains("Could not insert hardware watchpoint 1")
                    && s.gdb.contains("Cannot insert breakpoint 2"),
                "gdb reports both as not inserted:\n{all}"
            );
            // gdb inserts its breakpoints before each resume: with one it
            // cannot insert, neither continue nor stepi moves the guest.
            assert_eq!(rip_values(&s.gdb), vec![0x100000, 0x100000], "{all}");
            assert_eq!(
                s.pmemvm.matches("cannot stop the guest").count(),
                1,
                "said once:\n{all}"
            );
            assert_eq!(
                s.status,
                Some(3),
                "the guest runs to its end with gdb's status:\n{all}"
            );
        }
    }
}

/// `run --engine pmemvm --gdb`: the socket the run binds before anything
/// boots is the one the stub serves (bound once), and it goes with the run.
#[test]
fn run_serves_gdb_on_the_socket_it_bound_before_the_boot() {
    require!(kvm_available());
    require!(gdb_available());
    let kernel = require!(guest("debuggee"));
    let d = dir("run");
    let job = d.join("job.fio");
    std::fs::write(&job, "[x]\nioengine=null\nsize=1M\n").expect("job file");
    let sock = d.join("gdb.sock");
    let sock_arg = sock.display().to_string();
    let mut cmd = std::process::Command::new(pmemvm_tests::pmemvm::pmemvm_bin());
    cmd.args(["run", "--engine", "pmemvm", "--kernel"])
        .arg(&kernel)
        .arg("--fio")
        .arg(&job)
        .args(["--timeout", "60", "--gdb", &sock_arg, "--gdb-wait"]);
    let mut vm = pmemvm_tests::gdb::Debugged::start(cmd);
    assert!(vm.wait_for(LISTENING, LISTEN), "{}", vm.output());
    let out = gdb_batch(
        &kernel,
        &sock_arg,
        &["info registers rip", "continue"],
        LIMIT,
    );
    let (status, pmemvm) = vm.finish(LIMIT);
    let all = format!("{out}\n--- pmemvm ---\n{pmemvm}");
    assert_eq!(rip_values(&out), vec![0x100000], "held at _start:\n{all}");
    assert!(
        status.is_some(),
        "the run ended by itself after gdb's continue:\n{all}"
    );
    assert!(!sock.exists(), "the socket goes with the run:\n{all}");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn ctrl_c_stops_a_running_guest_and_gdbs_kill_ends_pmemvm() {
    require!(kvm_available());
    require!(gdb_available());
    let spin = require!(guest("spin"));
    let port = free_port();
    let target = format!("127.0.0.1:{port}");
    // No --gdb-wait: the guest runs (spins with interrupts off) until gdb attaches.
    let mut vm = boot(&spin, &["--gdb", &target]);
    assert!(
        vm.wait_for("spinning", Duration::from_secs(30)),
        "{}",
        vm.output()
    );
    let out = gdb_batch_with_ctrl_c(
        &spin,
        &target,
        &[
            "info registers rip",
            "continue",
            "info registers rip",
            "kill",
        ],
        Some(Duration::from_secs(5)),
        Duration::from_secs(90),
    );
    let (status, pmemvm) = vm.finish(Duration::from_secs(60));
    let all = format!("{out}\n--- pmemvm ---\n{pmemvm}");
    let rips = rip_values(&out);
    assert_eq!(
        rips.len(),
        2,
        "attached (the guest stopped) and interrupted:\n{all}"
    );
    for rip in rips {
        assert!(
            (0x100000..0x101000).contains(&rip),
            "inside the spin loop: {rip:#x}\n{all}"
        );
    }
    assert!(
        out.contains("SIGINT"),
        "Ctrl-C's stop is reported as SIGINT:\n{all}"
    );
    assert_eq!(
        status,
        Some(137),
        "gdb's kill ends pmemvm as SIGKILL would:\n{all}"
    );
}
