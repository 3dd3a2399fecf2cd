//! The terminal after every exit path: with a pseudo-terminal as pmemvm's
//! stdin, the durable tiny guest ends the VM (power-off, SIGTERM, triple
//! fault) and the terminal settings must be exactly what they were; `run
//! --console` puts the terminal in raw mode and restores it (see
//! tests/src/durable.rs for the harness).

use std::os::fd::{AsRawFd, OwnedFd};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use pmemvm_tests::durable::*;
use pmemvm_tests::pmemvm::TempDir;
use pmemvm_tests::require;
use pmemvm_tests::terminal::{openpty, term_settings};

// ---- The terminal --------------------------------------------------------

/// `stty -g` of the terminal, the way a user would compare it.
fn stty_g(slave: &OwnedFd) -> String {
    let fd = slave.try_clone().expect("dup pty");
    Command::new("stty")
        .arg("-g")
        .stdin(Stdio::from(fd))
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

/// pmemvm with a terminal as stdin: raw while it runs, restored after `end`.
fn terminal_restored(what: &str, end: End, signal: Option<i32>, want_status: i32) {
    let g = require!(durable_guest());
    let (_master, slave) = require!(openpty());
    let dir = TempDir::new(&format!("tty-{what}"));
    let file = dir.join("pm0.img");
    let mut p = Params::new(end, 0x7777);
    p.len = 64 << 10;
    prepare_file(&file, 16 * MIB, LABELS, &p);
    let before = term_settings(&slave);
    let stty_before = stty_g(&slave);
    let args: Vec<String> = vec![
        "boot".into(),
        "--kernel".into(),
        g,
        "--nvdimm".into(),
        format!("16M,file={}", file.display()),
    ];
    let stdin = Stdio::from(slave.try_clone().expect("dup pty"));
    let mut run = Running::start(&args, &dir.0, stdin, None);
    if let Some(sig) = signal {
        assert!(
            run.wait_for("pattern written"),
            "guest never wrote its pattern"
        );
        // The guest is running: the terminal must be in raw mode now (this
        // is what makes the restore check able to fail).
        let start = Instant::now();
        while term_settings(&slave) == before && start.elapsed() < DEADLINE {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_ne!(
            term_settings(&slave),
            before,
            "pmemvm did not put the terminal in raw mode"
        );
        run.signal(sig);
    }
    let out = run.finish();
    assert_eq!(out.status, Some(want_status), "{what}: {}", out.dump());
    assert_eq!(
        term_settings(&slave),
        before,
        "{what}: terminal not restored\n{}",
        out.dump()
    );
    let stty_after = stty_g(&slave);
    assert_eq!(stty_after, stty_before, "{what}: stty -g differs");
    eprintln!("DURABILITY: terminal after {what}: stty -g unchanged ({stty_after})");
    check_file(
        &format!("tty-{what}"),
        &file,
        &p.expected(16 * MIB, LABELS, u64::MAX),
        &out.dump(),
    );
}

#[test]
fn terminal_is_restored_after_power_off() {
    terminal_restored("poweroff", End::PowerOff, None, 0);
}

#[test]
fn terminal_is_restored_after_sigterm() {
    terminal_restored("sigterm", End::HaltForever, Some(libc::SIGTERM), 143);
}

#[test]
fn terminal_is_restored_after_triple_fault() {
    terminal_restored("triple-fault", End::TripleFault, None, 4);
}

/// `pmemvm run --console` uses the terminal the way `boot` does: raw while
/// the guest runs, restored afterwards.
#[test]
fn run_with_console_uses_raw_mode_and_restores_the_terminal() {
    let g = require!(durable_guest());
    let (_master, slave) = require!(openpty());
    let dir = TempDir::new("tty-run");
    let file = dir.join("pm0.img");
    let mut p = Params::new(End::HaltForever, 0x7778);
    p.len = 64 << 10;
    prepare_file(&file, 16 * MIB, LABELS, &p);
    let job = dir.join("job.fio");
    std::fs::write(&job, "[x]\nioengine=null\nsize=1M\n").expect("job.fio");
    let before = term_settings(&slave);
    let args: Vec<String> = [
        "run",
        "--kernel",
        &g,
        "--fio",
        &job.display().to_string(),
        "--engine",
        "pmemvm",
        "--console",
        "--timeout",
        "60",
        "--nvdimm",
        &format!("16M,file={}", file.display()),
    ]
    .iter()
    .map(ToString::to_string)
    .collect();
    let stdin = Stdio::from(slave.try_clone().expect("dup pty"));
    let mut run = Running::start(&args, &dir.0, stdin, None);
    assert!(
        run.wait_for("pattern written"),
        "guest never wrote its pattern"
    );
    let start = Instant::now();
    while term_settings(&slave) == before && start.elapsed() < DEADLINE {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_ne!(
        term_settings(&slave),
        before,
        "pmemvm run --console did not put the terminal in raw mode"
    );
    // SAFETY: F_GETFL on an open fd.
    let nonblocking = unsafe { libc::fcntl(slave.as_raw_fd(), libc::F_GETFL) } & libc::O_NONBLOCK;
    assert_ne!(
        nonblocking, 0,
        "console input is not non-blocking while the VM runs"
    );
    run.signal(libc::SIGTERM);
    let out = run.finish();
    assert_eq!(out.status, Some(143), "{}", out.dump());
    assert_eq!(
        term_settings(&slave),
        before,
        "terminal not restored\n{}",
        out.dump()
    );
    // SAFETY: as above.
    let flags = unsafe { libc::fcntl(slave.as_raw_fd(), libc::F_GETFL) };
    assert_eq!(
        flags & libc::O_NONBLOCK,
        0,
        "O_NONBLOCK left on the terminal"
    );
    eprintln!("DURABILITY: terminal after run --console + SIGTERM: restored");
}
