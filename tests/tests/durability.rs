//! Durability on every exit path, with the tiny `durable` guest
//! (tests/guests/durable.S) on this host's KVM.
//!
//! The guest writes a counter pattern (1 MiB by default) into the first
//! NVDIMM and ends the VM one way or another: ACPI power-off, the reset
//! register, the i8042 reset line, a triple fault, the guest-exit port, or it
//! halts forever while the host sends SIGINT, SIGTERM or SIGKILL. After each
//! run every byte of the backing file is compared with what the guest wrote.
//! The same runs check that the orderly paths fdatasync the backing files
//! (under strace, when installed), that no temporary backing file is left in
//! `$TMPDIR`, and — with a pseudo-terminal as stdin — that the terminal
//! settings are restored. Further: a full host file system (a small tmpfs),
//! `prealloc` refused on it, and two pmemvm processes on one file.
//!
//! Each test prints a `DURABILITY:` line with the bytes checked and lost
//! (docs/robustness.md quotes them; run with `--nocapture`). Tests needing
//! root or a mount print `SKIP: <reason>`.

use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use pmemvm_tests::pmemvm::{pmemvm_bin, TempDir};
use pmemvm_tests::require;
use pmemvm_tests::skip::Skip;
use pmemvm_tests::tiny::{guest, kvm_available};

const DEADLINE: Duration = Duration::from_secs(25);
const MIB: u64 = 1 << 20;
/// First DIMM byte the guest writes (the parameter block is in page 0).
const DATA_OFFSET: u64 = 4096;

/// How the guest ends the VM (the `mode` field of the parameter block).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    PowerOff = 0,
    ResetRegister = 1,
    TripleFault = 2,
    GuestExitPort = 3,
    HaltForever = 4,
    I8042Reset = 5,
}

/// The parameter block the host puts at offset 0 of the backing file.
#[derive(Debug, Clone, Copy)]
struct Params {
    end: End,
    seed: u32,
    offset: u64,
    len: u64,
    stride: u64,
    flush_hint: bool,
    exit_byte: u8,
}

impl Params {
    fn new(end: End, seed: u32) -> Self {
        Self {
            end,
            seed,
            offset: DATA_OFFSET,
            len: MIB,
            stride: 4,
            flush_hint: false,
            exit_byte: 0x2a,
        }
    }

    fn block(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(0x30);
        b.extend_from_slice(b"DURABLE1");
        b.extend_from_slice(&(self.end as u32).to_le_bytes());
        b.extend_from_slice(&self.seed.to_le_bytes());
        b.extend_from_slice(&self.offset.to_le_bytes());
        b.extend_from_slice(&self.len.to_le_bytes());
        b.extend_from_slice(&self.stride.to_le_bytes());
        b.extend_from_slice(&u32::from(self.flush_hint).to_le_bytes());
        b.extend_from_slice(&u32::from(self.exit_byte).to_le_bytes());
        b
    }

    /// The u32 the guest writes at DIMM offset `o`.
    fn word(&self, o: u64) -> [u8; 4] {
        #[allow(clippy::cast_possible_truncation)] // the guest's arithmetic is 32-bit too
        let v = self.seed.wrapping_add((o / 4) as u32);
        v.to_le_bytes()
    }

    /// The identity block pmemvm finds at the end of the prepared file (a
    /// fixed serial: the file's bytes are all known in advance).
    fn identity(&self, region: u64, labels: u64) -> vmm::identity::Identity {
        vmm::identity::Identity {
            serial: 0x1000_0001,
            region_size: region,
            label_size: labels,
            id: [0x42; 16],
        }
    }

    /// The whole backing file (region of `region` bytes, `labels` bytes of
    /// labels, identity page) as it must be after the guest wrote every word
    /// below DIMM offset `upto`.
    fn expected(&self, region: u64, labels: u64, upto: u64) -> Vec<u8> {
        let file_size = region + labels + vmm::layout::NVDIMM_IDENTITY_SIZE;
        let mut v = vec![0u8; usize::try_from(file_size).expect("file size")];
        let id = self.identity(region, labels).encode();
        let at = usize::try_from(region + labels).expect("offset");
        v[at..].copy_from_slice(&id);
        let block = self.block();
        v[..block.len()].copy_from_slice(&block);
        let end = (self.offset + self.len).min(upto);
        let mut o = self.offset;
        while o < end {
            let i = usize::try_from(o).expect("offset");
            v[i..i + 4].copy_from_slice(&self.word(o));
            o += self.stride;
        }
        v
    }
}

/// Default label area of `--nvdimm SIZE,file=...`.
const LABELS: u64 = 128 << 10;

/// Creates a sparse backing file for `--nvdimm REGION` with `labels` bytes
/// of labels: the parameter block at offset 0, the identity page at the end.
fn prepare_file(path: &Path, region: u64, labels: u64, p: &Params) {
    let f = std::fs::File::create(path).expect("creating the backing file");
    f.set_len(region + labels + vmm::layout::NVDIMM_IDENTITY_SIZE)
        .expect("sizing the backing file");
    f.write_all_at(&p.block(), 0)
        .expect("writing the parameter block");
    f.write_all_at(&p.identity(region, labels).encode(), region + labels)
        .expect("writing the identity page");
}

/// Compares the file with `want`; returns the number of differing bytes and
/// a description of the first difference.
fn bytes_lost(path: &Path, want: &[u8]) -> (u64, String) {
    let got = std::fs::read(path).expect("reading the backing file");
    if got.len() != want.len() {
        return (
            want.len() as u64,
            format!("file is {} bytes, expected {}", got.len(), want.len()),
        );
    }
    let mut lost = 0u64;
    let mut first = String::new();
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        if g != w {
            if lost == 0 {
                first = format!("first difference at byte {i:#x}: {g:#04x} instead of {w:#04x}");
            }
            lost += 1;
        }
    }
    (lost, first)
}

/// Checks every byte of `path` and reports the figure.
fn check_file(what: &str, path: &Path, want: &[u8], dump: &str) {
    let (lost, first) = bytes_lost(path, want);
    eprintln!(
        "DURABILITY: {what}: bytes checked {}, bytes lost {lost}",
        want.len()
    );
    assert_eq!(lost, 0, "{what}: {lost} bytes differ ({first})\n{dump}");
}

/// Tiny guest `durable`, or a skip reason.
fn durable_guest() -> Result<String, Skip> {
    kvm_available()?;
    Ok(guest("durable")?.to_string_lossy().into_owned())
}

/// What a finished run produced.
#[derive(Debug)]
struct Finished {
    status: Option<i32>,
    signal: Option<i32>,
    stdout: String,
    stderr: String,
    strace: Option<String>,
}

impl Finished {
    fn dump(&self) -> String {
        format!(
            "status={:?} signal={:?}\n--- stdout ---\n{}\n--- stderr ---\n{}\n--- strace ---\n{}",
            self.status,
            self.signal,
            self.stdout,
            self.stderr,
            self.strace.as_deref().unwrap_or("(not traced)")
        )
    }

    /// The fdatasync/fsync calls strace saw on `path` (None when not traced).
    fn syncs_of(&self, path: &Path) -> Option<usize> {
        let log = self.strace.as_ref()?;
        let needle = format!("<{}>", path.display());
        Some(
            log.lines()
                .filter(|l| {
                    (l.contains("fdatasync(") || l.contains("fsync(")) && l.contains(&needle)
                })
                .filter(|l| l.trim_end().ends_with("= 0"))
                .count(),
        )
    }
}

/// A pmemvm process with its output collected in the background.
struct Running {
    child: Child,
    /// The pmemvm process (the child itself, or strace's child).
    pid: i32,
    stdout: Arc<Mutex<String>>,
    readers: Vec<JoinHandle<()>>,
    stderr: Arc<Mutex<String>>,
    strace_log: Option<PathBuf>,
    /// Reaped (or given up on): nothing left to clean up.
    done: bool,
}

impl Running {
    /// SIGKILLs pmemvm (and strace, if it runs under it) and reaps them.
    fn kill(&mut self) {
        // Only while our child lives: then pmemvm (it, or strace's tracee)
        // has not been reaped and its pid cannot have been reused.
        if matches!(self.child.try_wait(), Ok(None)) {
            // SAFETY: kill(2) on the pid of a live process this test started.
            unsafe { libc::kill(self.pid, libc::SIGKILL) };
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Running {
    /// A failed assertion must not leave a VM running.
    fn drop(&mut self) {
        if !self.done {
            self.kill();
        }
    }
}

fn collect(mut r: impl Read + Send + 'static, into: Arc<Mutex<String>>) -> JoinHandle<()> {
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        loop {
            match r.read(&mut buf) {
                Ok(0) | Err(_) => return,
                Ok(n) => into
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push_str(&String::from_utf8_lossy(&buf[..n])),
            }
        }
    })
}

fn strace_available() -> bool {
    Command::new("strace")
        .arg("-V")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

impl Running {
    /// Starts `pmemvm ARGS` with `TMPDIR=tmpdir` and `stdin`; under strace
    /// (fdatasync/fsync, paths shown) when `trace_to` is given.
    fn start(args: &[String], tmpdir: &Path, stdin: Stdio, trace_to: Option<&Path>) -> Self {
        Self::start_with_env(args, tmpdir, stdin, trace_to, &[])
    }

    /// [`Running::start`] with extra environment variables.
    fn start_with_env(
        args: &[String],
        tmpdir: &Path,
        stdin: Stdio,
        trace_to: Option<&Path>,
        env: &[(&str, &str)],
    ) -> Self {
        let mut cmd = match trace_to {
            Some(log) => {
                let mut c = Command::new("strace");
                c.args([
                    "-f",
                    "-qq",
                    "--seccomp-bpf",
                    "-y",
                    "-e",
                    "trace=fdatasync,fsync",
                    "-o",
                ])
                .arg(log)
                .arg(pmemvm_bin());
                c
            }
            None => Command::new(pmemvm_bin()),
        };
        cmd.args(args)
            .envs(env.iter().copied())
            .env("TMPDIR", tmpdir)
            .stdin(stdin)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("spawning pmemvm");
        let stdout = Arc::new(Mutex::new(String::new()));
        let stderr = Arc::new(Mutex::new(String::new()));
        let readers = vec![
            collect(child.stdout.take().expect("stdout"), stdout.clone()),
            collect(child.stderr.take().expect("stderr"), stderr.clone()),
        ];
        let mut pid = i32::try_from(child.id()).expect("pid");
        if trace_to.is_some() {
            // pmemvm is the child of strace whose executable is pmemvm
            // (strace also forks short-lived probe children first).
            let bin = std::fs::canonicalize(pmemvm_bin()).unwrap_or_else(|_| pmemvm_bin());
            let start = Instant::now();
            let traced = loop {
                let children = std::fs::read_dir(format!("/proc/{pid}/task"))
                    .into_iter()
                    .flatten()
                    .flatten()
                    .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
                    .collect::<String>();
                let found = children
                    .split_whitespace()
                    .filter_map(|p| p.parse::<i32>().ok())
                    .find(|p| std::fs::read_link(format!("/proc/{p}/exe")).is_ok_and(|e| e == bin));
                if let Some(p) = found {
                    break p;
                }
                if start.elapsed() > DEADLINE {
                    let _ = child.kill();
                    let _ = child.wait();
                    panic!("strace did not start pmemvm");
                }
                std::thread::sleep(Duration::from_millis(2));
            };
            pid = traced;
        }
        Self {
            child,
            pid,
            stdout,
            readers,
            stderr,
            strace_log: trace_to.map(Path::to_path_buf),
            done: false,
        }
    }

    /// Waits until stdout contains `needle`; false at the deadline or exit.
    fn wait_for(&mut self, needle: &str) -> bool {
        let start = Instant::now();
        while start.elapsed() < DEADLINE {
            if self
                .stdout
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .contains(needle)
            {
                return true;
            }
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return false;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        false
    }

    fn signal(&self, sig: i32) {
        // SAFETY: kill(2) with a pid of a process this test started and has not reaped.
        let rc = unsafe { libc::kill(self.pid, sig) };
        assert_eq!(rc, 0, "kill({}, {sig}) failed", self.pid);
    }

    /// Waits for the end (kills at the deadline) and collects everything.
    fn finish(mut self) -> Finished {
        let f = self.wait_and_collect();
        self.done = true;
        f
    }

    fn wait_and_collect(&mut self) -> Finished {
        use std::os::unix::process::ExitStatusExt;
        let start = Instant::now();
        let status = loop {
            if let Some(s) = self.child.try_wait().expect("waiting for pmemvm") {
                break s;
            }
            if start.elapsed() > DEADLINE {
                self.kill();
                self.done = true;
                let out = self
                    .stdout
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .clone();
                panic!("pmemvm did not end within {DEADLINE:?}; stdout:\n{out}");
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        for r in self.readers.drain(..) {
            let _ = r.join();
        }
        let take = |m: &Arc<Mutex<String>>| m.lock().unwrap_or_else(|e| e.into_inner()).clone();
        Finished {
            status: status.code(),
            signal: status.signal(),
            stdout: take(&self.stdout),
            stderr: take(&self.stderr),
            strace: self
                .strace_log
                .as_ref()
                .map(|p| std::fs::read_to_string(p).unwrap_or_default()),
        }
    }
}

/// Everything in `dir`, recursively, for "nothing left behind" checks.
fn listing(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            let p = e.path();
            out.push(p.clone());
            if p.is_dir() {
                out.extend(listing(&p));
            }
        }
    }
    out.sort();
    out
}

/// One exit path: the guest writes the pattern, the VM ends by `end` (or
/// by `signal` while the guest halts), and the file is checked byte by byte.
/// A temporary DIMM rides along to check `$TMPDIR` stays clean.
fn exit_path(what: &str, end: End, signal: Option<i32>, want_status: Option<i32>) {
    let g = require!(durable_guest());
    let dir = TempDir::new(&format!("durable-{what}"));
    let tmp = dir.join("tmp");
    std::fs::create_dir(&tmp).expect("tmp dir");
    let file = dir.join("pm0.img");
    let seed = 0x5eed_0000 | (end as u32) << 8 | u32::try_from(signal.unwrap_or(0)).unwrap_or(0);
    let mut p = Params::new(end, seed);
    p.flush_hint = end == End::PowerOff;
    prepare_file(&file, 16 * MIB, LABELS, &p);
    let args: Vec<String> = [
        "boot",
        "--kernel",
        &g,
        "--nvdimm",
        &format!("16M,file={}", file.display()),
        "--nvdimm",
        "16M",
    ]
    .iter()
    .map(ToString::to_string)
    .collect();
    // SIGKILL leaves nothing to trace; every other path must sync.
    let trace =
        (signal != Some(libc::SIGKILL) && strace_available()).then(|| dir.join("strace.log"));
    let mut run = Running::start(&args, &tmp, Stdio::null(), trace.as_deref());
    if let Some(sig) = signal {
        assert!(
            run.wait_for("pattern written"),
            "guest never wrote its pattern"
        );
        run.signal(sig);
    }
    let out = run.finish();
    match want_status {
        Some(s) => assert_eq!(out.status, Some(s), "{what}: {}", out.dump()),
        None => assert_eq!(out.signal, signal, "{what}: {}", out.dump()),
    }
    assert!(out.stdout.contains("pattern written"), "{}", out.dump());
    assert!(!out.stderr.contains("panicked"), "{}", out.dump());
    check_file(
        what,
        &file,
        &p.expected(16 * MIB, LABELS, u64::MAX),
        &out.dump(),
    );
    match out.syncs_of(&file) {
        Some(n) => {
            // Flush-hint writes sync too; the one at exit is what matters.
            assert!(
                n >= 1,
                "{what}: the backing file was not fdatasynced\n{}",
                out.dump()
            );
            let temp_synced =
                out.strace.as_deref().unwrap_or_default().lines().any(|l| {
                    l.contains("fdatasync(") && l.contains("(deleted)") && l.ends_with("= 0")
                });
            assert!(
                temp_synced,
                "{what}: the temporary DIMM was not fdatasynced\n{}",
                out.dump()
            );
            eprintln!("DURABILITY: {what}: fdatasync calls on the backing file: {n}");
        }
        None if signal == Some(libc::SIGKILL) => {}
        None => {
            // The rest of the test still runs; strict mode fails here.
            pmemvm_tests::skip::skip(&format!(
                "strace is not installed (apt-get install strace); fdatasync at exit not verified for {what}"
            ));
        }
    }
    let left = listing(&tmp);
    assert!(left.is_empty(), "{what}: left in $TMPDIR: {left:?}");
    let mut rest = listing(&dir.0);
    rest.retain(|p| p != &file && p != &tmp && Some(p.as_path()) != trace.as_deref());
    assert!(rest.is_empty(), "{what}: unexpected files: {rest:?}");
}

#[test]
fn acpi_power_off_keeps_every_byte() {
    exit_path("poweroff", End::PowerOff, None, Some(0));
}

#[test]
fn reset_register_keeps_every_byte() {
    exit_path("reset-register", End::ResetRegister, None, Some(3));
}

#[test]
fn i8042_reset_keeps_every_byte() {
    exit_path("i8042-reset", End::I8042Reset, None, Some(3));
}

#[test]
fn triple_fault_keeps_every_byte() {
    exit_path("triple-fault", End::TripleFault, None, Some(4));
}

#[test]
fn guest_exit_port_keeps_every_byte() {
    exit_path("guest-exit-port", End::GuestExitPort, None, Some(0x2a));
}

#[test]
fn sigint_is_orderly_and_keeps_every_byte() {
    exit_path("sigint", End::HaltForever, Some(libc::SIGINT), Some(130));
}

#[test]
fn sigterm_is_orderly_and_keeps_every_byte() {
    exit_path("sigterm", End::HaltForever, Some(libc::SIGTERM), Some(143));
}

#[test]
fn sighup_is_orderly_and_keeps_every_byte() {
    exit_path("sighup", End::HaltForever, Some(libc::SIGHUP), Some(129));
}

#[test]
fn sigkill_keeps_every_byte_in_the_page_cache() {
    exit_path("sigkill", End::HaltForever, Some(libc::SIGKILL), None);
}

// ---- pmemvm's own failures (injected, debug builds) -------------------------

/// One injected failure (`PMEMVM_TEST_FAULT`): the guest writes its pattern
/// and ends by `end` (or `signal` while it halts); pmemvm must still end
/// with `want_status`, say `want` on stderr and fdatasync the backing file.
/// `whole_pattern`: the run gets far enough for every byte to be checked.
struct FaultCase<'a> {
    what: &'a str,
    fault: &'a str,
    cpus: &'a str,
    end: End,
    signal: Option<i32>,
    want_status: i32,
    want: &'a str,
    whole_pattern: bool,
}

fn fault_path(c: &FaultCase) {
    let g = require!(durable_guest());
    let dir = TempDir::new(&format!("fault-{}", c.what));
    let file = dir.join("pm0.img");
    let p = Params::new(c.end, 0x0fa0_1700);
    prepare_file(&file, 16 * MIB, LABELS, &p);
    let args: Vec<String> = [
        "boot",
        "--kernel",
        &g,
        "--cpus",
        c.cpus,
        "--nvdimm",
        &format!("16M,file={}", file.display()),
    ]
    .iter()
    .map(ToString::to_string)
    .collect();
    let trace = strace_available().then(|| dir.join("strace.log"));
    let start = Instant::now();
    let mut run = Running::start_with_env(
        &args,
        &dir.0,
        Stdio::null(),
        trace.as_deref(),
        &[("PMEMVM_TEST_FAULT", c.fault)],
    );
    if let Some(sig) = c.signal {
        assert!(
            run.wait_for("pattern written"),
            "guest never wrote its pattern"
        );
        run.signal(sig);
    }
    let out = run.finish();
    eprintln!(
        "DURABILITY: fault {}: status {:?} after {:.1} s",
        c.what,
        out.status,
        start.elapsed().as_secs_f64()
    );
    assert_eq!(
        out.status,
        Some(c.want_status),
        "{}: {}",
        c.what,
        out.dump()
    );
    assert!(out.stderr.contains(c.want), "{}: {}", c.what, out.dump());
    if c.what != "vcpu-stuck" {
        assert!(
            !out.stderr.contains("did not leave KVM_RUN"),
            "{}: {}",
            c.what,
            out.dump()
        );
    }
    if c.whole_pattern {
        check_file(
            c.what,
            &file,
            &p.expected(16 * MIB, LABELS, u64::MAX),
            &out.dump(),
        );
    }
    match out.syncs_of(&file) {
        Some(n) => assert!(
            n >= 1,
            "{}: the backing file was not fdatasynced\n{}",
            c.what,
            out.dump()
        ),
        None => pmemvm_tests::skip::skip(&format!(
            "strace is not installed (apt-get install strace); fdatasync not verified for {}",
            c.what
        )),
    }
}

#[test]
fn a_panicking_vcpu_still_ends_in_order() {
    fault_path(&FaultCase {
        what: "vcpu-panic",
        fault: "vcpu-panic",
        cpus: "1",
        end: End::GuestExitPort,
        signal: None,
        want_status: 5,
        want: "vCPU 0 failed: pmemvm bug: fault injection",
        whole_pattern: true,
    });
}

#[test]
fn a_panic_in_the_event_loop_still_stops_the_vcpus_and_syncs() {
    fault_path(&FaultCase {
        what: "loop-panic",
        fault: "loop-panic",
        cpus: "1",
        end: End::GuestExitPort,
        signal: None,
        // Rust's status for a panic that reaches the top of `main`.
        want_status: 101,
        want: "fault injection: the event loop panics",
        whole_pattern: true,
    });
}

#[test]
fn a_vcpu_thread_that_cannot_start_still_syncs() {
    fault_path(&FaultCase {
        what: "vcpu-spawn",
        fault: "vcpu-spawn=1",
        cpus: "2",
        end: End::HaltForever,
        signal: None,
        want_status: 1,
        want: "starting the thread of vCPU 1",
        whole_pattern: false,
    });
}

#[test]
fn a_vcpu_that_does_not_stop_is_named_and_pmemvm_still_exits() {
    fault_path(&FaultCase {
        what: "vcpu-stuck",
        fault: "vcpu-ignores-stop",
        cpus: "2",
        end: End::HaltForever,
        signal: Some(libc::SIGTERM),
        want_status: 5,
        want: "vCPU 0, 1 did not leave KVM_RUN within 5 s",
        whole_pattern: true,
    });
}

// ---- The terminal --------------------------------------------------------

/// A pseudo-terminal pair: (master, slave).
fn openpty() -> Result<(OwnedFd, OwnedFd), Skip> {
    let (mut master, mut slave) = (-1, -1);
    // SAFETY: openpty writes two fds into the out-parameters; name, termios
    // and winsize may be null.
    let rc = unsafe {
        libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    if rc != 0 {
        return Err(Skip::new(format!(
            "no pseudo-terminal: {}",
            std::io::Error::last_os_error()
        )));
    }
    // SAFETY: both fds were just opened by openpty and are owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) })
}

/// The settings `stty -g` shows, as a comparable tuple.
fn term_settings(fd: &OwnedFd) -> (u32, u32, u32, u32, Vec<u8>) {
    // SAFETY: a zeroed termios is a valid out-parameter.
    let mut t: libc::termios = unsafe { std::mem::zeroed() };
    // SAFETY: fd is an open terminal; t is a valid termios.
    let rc = unsafe { libc::tcgetattr(fd.as_raw_fd(), &mut t) };
    assert_eq!(rc, 0, "tcgetattr: {}", std::io::Error::last_os_error());
    (t.c_iflag, t.c_oflag, t.c_cflag, t.c_lflag, t.c_cc.to_vec())
}

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

// ---- A full host file system -----------------------------------------------

/// A size-limited tmpfs mounted for one test, unmounted on drop.
struct SmallTmpfs {
    dir: TempDir,
}

impl SmallTmpfs {
    fn mount(name: &str, size: &str) -> Result<Self, Skip> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return Err(Skip::new("mounting a small tmpfs needs root"));
        }
        let dir = TempDir::new(name);
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&dir.0)
            .output()
            .map_err(|e| Skip::new(format!("cannot run mount: {e}")))?;
        if !out.status.success() {
            return Err(Skip::new(format!(
                "mounting a {size} tmpfs failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        Ok(Self { dir })
    }

    fn join(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }
}

impl Drop for SmallTmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.dir.0).status();
    }
}

#[test]
fn full_host_file_system_stops_the_vm_and_names_the_file() {
    let g = require!(durable_guest());
    let fs = require!(SmallTmpfs::mount("fullfs", "8m"));
    let file = fs.join("pm-full.img");
    // 64 MiB sparse file on 8 MiB: one word in every 4 KiB page of the DIMM.
    let mut p = Params::new(End::PowerOff, 0xf011);
    p.len = 64 * MIB - DATA_OFFSET;
    p.stride = 4096;
    prepare_file(&file, 64 * MIB, 0, &p);
    let args: Vec<String> = vec![
        "boot".into(),
        "--kernel".into(),
        g,
        "--nvdimm".into(),
        format!("64M,file={},label-size=0", file.display()),
    ];
    let out = Running::start(&args, &fs.dir.0, Stdio::null(), None).finish();
    assert_eq!(out.status, Some(6), "{}", out.dump());
    assert!(
        out.stderr.contains(&file.display().to_string()),
        "file not named:\n{}",
        out.dump()
    );
    assert!(
        out.stderr.contains("full"),
        "reason not given:\n{}",
        out.dump()
    );
    assert!(
        !out.stdout.contains("pattern written"),
        "the guest went on:\n{}",
        out.dump()
    );
    // Every page the guest wrote before the failing one holds its word.
    let failed_at = out
        .stderr
        .split("NVDIMM offset 0x")
        .nth(1)
        .and_then(|s| s.split(|c: char| !c.is_ascii_hexdigit()).next())
        .and_then(|h| u64::from_str_radix(h, 16).ok())
        .expect("the message gives the failing DIMM offset");
    assert!(
        failed_at > DATA_OFFSET && failed_at < 64 * MIB,
        "{failed_at:#x}"
    );
    let got = std::fs::read(&file).expect("reading the backing file");
    let mut lost = 0u64;
    let mut o = p.offset;
    while o < failed_at {
        let i = usize::try_from(o).expect("offset");
        if got[i..i + 4] != p.word(o) {
            lost += 4;
        }
        o += p.stride;
    }
    eprintln!(
        "DURABILITY: full tmpfs: stopped at DIMM offset {failed_at:#x}, {} pages written before checked, bytes lost {lost}",
        (failed_at - p.offset) / p.stride
    );
    assert_eq!(lost, 0, "{}", out.dump());
}

#[test]
fn prealloc_on_a_small_file_system_refuses_and_leaves_nothing() {
    let g = require!(durable_guest());
    let fs = require!(SmallTmpfs::mount("prealloc", "8m"));
    let file = fs.join("pm-prealloc.img");
    let out = Running::start(
        &[
            "boot".into(),
            "--kernel".into(),
            g,
            "--nvdimm".into(),
            format!("64M,file={},prealloc", file.display()),
        ],
        &fs.dir.0,
        Stdio::null(),
        None,
    )
    .finish();
    assert_eq!(out.status, Some(2), "{}", out.dump());
    assert!(
        out.stderr.contains(&file.display().to_string()),
        "{}",
        out.dump()
    );
    assert!(out.stderr.contains("preallocated"), "{}", out.dump());
    assert!(out.stderr.contains("No space left"), "{}", out.dump());
    assert!(
        listing(&fs.dir.0).is_empty(),
        "left behind: {:?}",
        listing(&fs.dir.0)
    );
}

// ---- Two processes, one file -------------------------------------------------

#[test]
fn second_pmemvm_on_the_same_file_is_refused_and_stale_locks_do_not_block() {
    let g = require!(durable_guest());
    let dir = TempDir::new("lock");
    let file = dir.join("shared.img");
    let p = Params {
        len: 64 << 10,
        ..Params::new(End::HaltForever, 0x1111)
    };
    prepare_file(&file, 16 * MIB, LABELS, &p);
    let spec = format!("16M,file={}", file.display());
    let args = |end: &str| -> Vec<String> {
        vec![
            "boot".into(),
            "--kernel".into(),
            g.clone(),
            "--nvdimm".into(),
            end.into(),
        ]
    };
    let mut first = Running::start(&args(&spec), &dir.0, Stdio::null(), None);
    assert!(first.wait_for("pattern written"), "first VM did not start");
    let snapshot = std::fs::read(&file).expect("read");
    for variant in [spec.clone(), format!("{spec},readonly")] {
        let second = Running::start(&args(&variant), &dir.0, Stdio::null(), None).finish();
        assert_eq!(second.status, Some(2), "{variant}: {}", second.dump());
        assert!(
            second.stderr.contains(&file.display().to_string()),
            "{}",
            second.dump()
        );
        assert!(second.stderr.contains("in use"), "{}", second.dump());
        assert_eq!(
            std::fs::read(&file).expect("read"),
            snapshot,
            "the refused run changed the file"
        );
    }
    first.signal(libc::SIGTERM);
    assert_eq!(first.finish().status, Some(143));

    // A SIGKILLed holder: its lock goes with it.
    let mut killed = Running::start(&args(&spec), &dir.0, Stdio::null(), None);
    assert!(killed.wait_for("pattern written"), "VM did not start");
    killed.signal(libc::SIGKILL);
    assert_eq!(killed.finish().signal, Some(libc::SIGKILL));
    let p2 = Params {
        len: 64 << 10,
        ..Params::new(End::PowerOff, 0x2222)
    };
    std::fs::OpenOptions::new()
        .write(true)
        .open(&file)
        .and_then(|f| f.write_all_at(&p2.block(), 0))
        .expect("new parameter block");
    let next = Running::start(&args(&spec), &dir.0, Stdio::null(), None).finish();
    assert_eq!(
        next.status,
        Some(0),
        "a stale lock blocked the next run: {}",
        next.dump()
    );
    check_file(
        "after-stale-lock",
        &file,
        &p2.expected(16 * MIB, LABELS, u64::MAX),
        &next.dump(),
    );
}
