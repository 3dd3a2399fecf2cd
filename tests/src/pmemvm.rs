//! Running the `pmemvm` binary from tests: finding (and building) it, running
//! it with a deadline, and collecting status and output.

use std::io::Read;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Root of the workspace.
pub fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(PathBuf::from)
        .unwrap_or_default()
}

/// Cargo's target directory: `$CARGO_TARGET_DIR` (relative to the workspace
/// when relative), else the workspace's `target`.
pub fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR").filter(|t| !t.is_empty()) {
        Some(t) => workspace_root().join(t),
        None => workspace_root().join("target"),
    }
}

/// The pmemvm binary: `$PMEMVM_BIN`, or `debug/pmemvm` of [`target_dir`] built
/// once per test process with `cargo build -p pmemvm` (with the core
/// executable `pmemvm-vm` beside it) so tests never run a stale binary. The tests' one binary lookup (the nested harness's
/// `find_pmemvm` checks `$PMEMVM_BIN` exists, then asks this).
pub fn pmemvm_bin() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        if let Some(p) = std::env::var_os("PMEMVM_BIN").filter(|p| !p.is_empty()) {
            return PathBuf::from(p);
        }
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let status = Command::new(cargo)
            .args(["build", "-q", "-p", "pmemvm"])
            .current_dir(workspace_root())
            .status();
        assert!(
            status.is_ok_and(|s| s.success()),
            "building pmemvm for the tests failed"
        );
        target_dir().join("debug/pmemvm")
    })
    .clone()
}

/// What a pmemvm run produced.
#[derive(Debug)]
pub struct Output {
    /// Exit status (None if killed by a signal).
    pub status: Option<i32>,
    /// Standard output (the guest console unless redirected).
    pub stdout: String,
    /// Standard error (pmemvm's messages).
    pub stderr: String,
    /// Wall time.
    pub elapsed: Duration,
    /// True when the deadline killed it.
    pub timed_out: bool,
}

impl Output {
    /// Everything, for assertion messages.
    pub fn dump(&self) -> String {
        format!(
            "status={:?} timed_out={} elapsed={:?}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.status, self.timed_out, self.elapsed, self.stdout, self.stderr
        )
    }
}

/// Runs `pmemvm ARGS` with stdin closed; kills it at `deadline`.
pub fn run(args: &[&str], deadline: Duration) -> Output {
    run_cmd(Command::new(pmemvm_bin()).args(args), deadline)
}

/// Runs a prepared command with stdin closed; kills it at `deadline`.
pub fn run_cmd(cmd: &mut Command, deadline: Duration) -> Output {
    run_cmd_with_stdin(cmd.stdin(Stdio::null()), deadline)
}

/// Runs a prepared command with the stdin it was given; kills it at `deadline`.
pub fn run_cmd_with_stdin(cmd: &mut Command, deadline: Duration) -> Output {
    let start = Instant::now();
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawning pmemvm");
    let mut out_pipe = child.stdout.take().expect("stdout pipe");
    let mut err_pipe = child.stderr.take().expect("stderr pipe");
    let out_t = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = out_pipe.read_to_end(&mut s);
        s
    });
    let err_t = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = err_pipe.read_to_end(&mut s);
        s
    });
    let waited =
        crate::process::wait_with_deadline(&mut child, deadline).expect("waiting for pmemvm");
    let timed_out = waited.is_none();
    let stdout = String::from_utf8_lossy(&out_t.join().unwrap_or_default()).into_owned();
    let stderr = String::from_utf8_lossy(&err_t.join().unwrap_or_default()).into_owned();
    Output {
        status: waited.and_then(|s| s.code()),
        stdout,
        stderr,
        elapsed: start.elapsed(),
        timed_out,
    }
}

/// A command run in the background with its output in files, for a test that acts on it
/// while it runs (its control socket); killed and reaped if the test fails first.
#[derive(Debug)]
pub struct Background {
    child: std::process::Child,
    out: PathBuf,
    err: PathBuf,
    started: Instant,
}

impl Drop for Background {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

impl Background {
    /// Starts `cmd` with stdin closed, stdout in `dir/run.out` and stderr in `dir/run.err`.
    pub fn start(cmd: &mut Command, dir: &std::path::Path) -> Self {
        let (out, err) = (dir.join("run.out"), dir.join("run.err"));
        let child = cmd
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&out).expect("run.out"))
            .stderr(std::fs::File::create(&err).expect("run.err"))
            .spawn()
            .expect("start pmemvm");
        Self {
            child,
            out,
            err,
            started: Instant::now(),
        }
    }

    /// Every half second until the command ends (or `deadline` from its start, when it is
    /// killed), `each` with its standard error so far; then its output.
    pub fn watch(mut self, deadline: Duration, mut each: impl FnMut(&str)) -> Output {
        let mut status = None;
        while self.started.elapsed() < deadline {
            if let Some(s) = self.child.try_wait().expect("wait") {
                status = Some(s);
                break;
            }
            each(&std::fs::read_to_string(&self.err).unwrap_or_default());
            std::thread::sleep(Duration::from_millis(500));
        }
        let timed_out = status.is_none();
        if timed_out {
            let _ = self.child.kill();
            status = self.child.wait().ok();
        }
        Output {
            status: status.and_then(|s| s.code()),
            stdout: std::fs::read_to_string(&self.out).unwrap_or_default(),
            stderr: std::fs::read_to_string(&self.err).unwrap_or_default(),
            elapsed: self.started.elapsed(),
            timed_out,
        }
    }
}

/// A fresh temporary directory for one test, removed on drop.
#[derive(Debug)]
pub struct TempDir(pub PathBuf);

impl TempDir {
    /// Creates `$TMPDIR/pmemvm-test-<name>-<pid>-<n>`.
    pub fn new(name: &str) -> Self {
        Self::new_in(&std::env::temp_dir(), name)
    }

    /// Creates `<parent>/pmemvm-test-<name>-<pid>-<n>` (a tmpfs, say).
    pub fn new_in(parent: &std::path::Path, name: &str) -> Self {
        use std::sync::atomic::{AtomicU32, Ordering};
        static N: AtomicU32 = AtomicU32::new(0);
        let p = parent.join(format!(
            "pmemvm-test-{name}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).expect("creating a test directory");
        Self(p)
    }

    /// A path inside.
    pub fn join(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A directory `DIR/bin` of links to every program on `PATH` except
/// `hidden` (e.g. qemu-system-x86_64), for a `PATH` without them.
pub fn path_without(dir: &std::path::Path, hidden: &[&str]) -> PathBuf {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).expect("bin dir");
    let path = std::env::var_os("PATH").unwrap_or_default();
    for d in std::env::split_paths(&path) {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let name = e.file_name();
            if hidden.iter().any(|h| name == *h) {
                continue;
            }
            let link = bin.join(&name);
            if !link.exists() {
                let _ = std::os::unix::fs::symlink(e.path(), &link);
            }
        }
    }
    bin
}

/// An 8 MiB io_uring random write with crc32c verify on /dev/pmem0: the
/// small fio job of the engine tests.
pub const VERIFY_JOB: &str = "[global]
filename=/dev/pmem0
ioengine=io_uring
direct=1
bs=4k
size=8m
[write-verify]
rw=randwrite
verify=crc32c
do_verify=1
";
