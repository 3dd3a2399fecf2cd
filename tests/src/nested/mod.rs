//! End-to-end harness: run a command line (usually `pmemvm ...`) on a machine
//! with a real, hardware-style KVM, and collect its exit status, output and
//! files.
//!
//! Two modes, one API:
//!
//! * **Nested** (any x86_64 Linux host with QEMU): the command runs inside an
//!   L1 VM under `qemu-system-x86_64 -accel tcg -cpu max,vendor=AuthenticAMD`.
//!   QEMU emulates AMD SVM, so L1 — Debian's stock 6.1 kernel with `kvm-amd`
//!   loaded — has a working `/dev/kvm`. A host directory (the *share*) is
//!   mounted at `/share` in L1 over virtio-9p; the command runs there, so
//!   files it writes (NVDIMM backing files, JSON results) are on the host
//!   afterwards. The L1 kernel and initramfs are built by `tests/l1/prepare.sh`
//!   and cached (see [`cache_dir`]). Timing under TCG is functional only.
//! * **Direct** (hosts whose `/proc/cpuinfo` has `vmx` or `svm` and whose
//!   `/dev/kvm` opens): the same command runs on the host in a temporary
//!   share directory, at full speed. This path is deliberately simple: no
//!   isolation beyond the working directory and a process group.
//!
//! `PMEMVM_TEST_MODE=nested|direct` forces a mode. Host binaries given with
//! [`NestedVm::binary`] / [`NestedVm::with_pmemvm`] are on `PATH` in both
//! modes; in nested mode their shared libraries and dynamic loader are copied
//! into the share as well.
//!
//! ```no_run
//! use std::time::Duration;
//! use pmemvm_tests::{nested::NestedVm, require};
//!
//! #[test]
//! fn guest_boots() {
//!     let vm = require!(NestedVm::new().and_then(NestedVm::with_pmemvm));
//!     let kernel = require!(pmemvm_tests::nested::guest_image("bzImage"));
//!     let out = vm
//!         .deadline(Duration::from_secs(240))
//!         .file("bzImage", &kernel)
//!         .run(&["pmemvm", "boot", "--kernel", "bzImage"])
//!         .expect("run pmemvm in L1");
//!     assert_eq!(out.status, 0, "{}", out.dump());
//! }
//! ```

use std::ffi::OsString;
use std::fs;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::process::{wait_watched, Waited};

mod error;
mod heartbeat;
mod l1;
mod output;
mod share;

pub use error::NestedError;
pub(crate) use error::{io_err, unavailable};
pub use output::RunOutput;

use heartbeat::Heartbeat;
pub use l1::{
    cache_dir, find_pmemvm, find_qemu, guest_image, host_has_hw_virt, prepare_l1, L1Image,
};
use l1::{kvm_opens, l1_command};
pub use share::tail;
use share::{
    command_script, libraries_of, parse_console_error, parse_console_status, parse_marker_uptime,
    parse_status_file, FileSource, RunDir,
};

/// Console line printed by the L1 init with the command's exit status.
pub const STATUS_MARKER: &str = "PMEMVM-L1-STATUS";
/// Console line printed by the L1 init when its own setup fails.
pub const ERROR_MARKER: &str = "PMEMVM-L1-ERROR";
/// Console line printed by the L1 init just before it runs the command.
pub const RUN_MARKER: &str = "PMEMVM-L1-RUN";
/// Console line printed by the L1 init when it starts.
pub const INIT_MARKER: &str = "PMEMVM-L1-INIT";
/// Console line the L1 init prints every few seconds while it lives (left
/// out of the console text the harness returns).
pub const ALIVE_MARKER: &str = "PMEMVM-L1-ALIVE";

/// Default time a command may take, L1 boot included.
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(300);
/// Default L1 memory: room for an L2 guest plus the page cache of its NVDIMMs.
pub const DEFAULT_L1_MEMORY_MIB: u32 = 3072;
/// Default number of L1 vCPUs: one. With two, an L1 under TCG's emulated SVM
/// once hung for minutes in `kvm_destroy_vm` waiting for a cross-CPU call
/// (soft lockup in `smp_call_function_many_cond`, seen in a CI dry run); with
/// one L1 CPU there is no such call, and L2 guests can still have several vCPUs.
pub const DEFAULT_L1_CPUS: u32 = 1;
/// Lines of the L1 console shown in errors and dumps.
pub(crate) const CONSOLE_TAIL_LINES: usize = 60;
/// Harness-owned directory inside the share (`/share/.l1` in L1).
pub(crate) const L1_DIR: &str = ".l1";

/// Where the command runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// On the host, which has hardware virtualization.
    Direct,
    /// In an L1 VM under QEMU TCG with emulated SVM.
    Nested,
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Mode::Direct => write!(f, "direct"),
            Mode::Nested => write!(f, "nested/TCG L1"),
        }
    }
}

/// The workspace root (the parent of the `tests` crate): one definition for the harnesses.
pub use crate::pmemvm::workspace_root;

/// Builder for one command run on a machine with a real KVM (see the module
/// docs). Each [`run`](NestedVm::run) uses a fresh share directory.
#[derive(Debug)]
pub struct NestedVm {
    mode: Mode,
    qemu: Option<PathBuf>,
    l1: Option<L1Image>,
    deadline: Duration,
    memory_mib: u32,
    cpus: u32,
    files: Vec<(String, FileSource)>,
    binaries: Vec<(String, PathBuf)>,
    env: Vec<(String, String)>,
}

impl NestedVm {
    /// Chooses the mode (direct on hosts with `vmx`/`svm` and a usable
    /// `/dev/kvm`, else nested; `PMEMVM_TEST_MODE` overrides) and, for nested
    /// mode, finds QEMU and prepares the L1 image.
    pub fn new() -> Result<NestedVm, NestedError> {
        let mode = match std::env::var("PMEMVM_TEST_MODE").as_deref() {
            Ok("nested") => Mode::Nested,
            Ok("direct") => Mode::Direct,
            Ok("") | Err(_) => {
                if host_has_hw_virt() && kvm_opens() {
                    Mode::Direct
                } else {
                    Mode::Nested
                }
            }
            Ok(other) => panic!("PMEMVM_TEST_MODE={other} is not one of nested, direct"),
        };
        let (qemu, l1) = match mode {
            Mode::Direct => {
                if !kvm_opens() {
                    return Err(unavailable(
                        "direct mode needs a read-write /dev/kvm on the host",
                    ));
                }
                (None, None)
            }
            Mode::Nested => {
                let qemu = find_qemu().map_err(NestedError::Unavailable)?;
                (Some(qemu), Some(prepare_l1()?))
            }
        };
        Ok(NestedVm {
            mode,
            qemu,
            l1,
            deadline: DEFAULT_DEADLINE,
            memory_mib: DEFAULT_L1_MEMORY_MIB,
            cpus: DEFAULT_L1_CPUS,
            files: Vec::new(),
            binaries: Vec::new(),
            env: Vec::new(),
        })
    }

    /// Makes the `pmemvm` binary (see [`find_pmemvm`]) available as `pmemvm`
    /// on the command's `PATH`; unavailable (skip) if it is not built.
    pub fn with_pmemvm(self) -> Result<NestedVm, NestedError> {
        let bin = find_pmemvm().map_err(NestedError::Unavailable)?;
        Ok(self.binary("pmemvm", bin))
    }

    /// The mode this run will use.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// The L1 image (nested mode only).
    pub fn l1_image(&self) -> Option<&L1Image> {
        self.l1.as_ref()
    }

    /// Time limit for the whole run, L1 boot included.
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.deadline = deadline;
        self
    }

    /// L1 memory in MiB (nested mode).
    pub fn l1_memory_mib(mut self, mib: u32) -> Self {
        self.memory_mib = mib;
        self
    }

    /// Number of L1 vCPUs (nested mode).
    pub fn l1_cpus(mut self, cpus: u32) -> Self {
        self.cpus = cpus;
        self
    }

    /// Copies the host file `src` into the share as `name` (a relative path).
    pub fn file(mut self, name: &str, src: impl AsRef<Path>) -> Self {
        self.files.push((
            name.to_string(),
            FileSource::Copy(src.as_ref().to_path_buf()),
        ));
        self
    }

    /// Writes `data` into the share as `name` (a relative path).
    pub fn bytes(mut self, name: &str, data: impl Into<Vec<u8>>) -> Self {
        self.files
            .push((name.to_string(), FileSource::Bytes(data.into())));
        self
    }

    /// Puts the host binary `src` on the command's `PATH` as `name`; in
    /// nested mode its shared libraries and loader come along.
    pub fn binary(mut self, name: &str, src: impl AsRef<Path>) -> Self {
        self.binaries
            .push((name.to_string(), src.as_ref().to_path_buf()));
        self
    }

    /// Exports an environment variable to the command.
    pub fn env(mut self, key: &str, value: &str) -> Self {
        self.env.push((key.to_string(), value.to_string()));
        self
    }

    /// Runs `argv` in the share directory (`/share` in L1) and waits for it,
    /// at most until the deadline.
    ///
    /// In nested mode an L1 whose kernel stops running (its init's heartbeat
    /// ceases: a TCG emulation failure, seen as a silent L1 in CI) is killed
    /// and the run is repeated once in a fresh share, saying so on stderr; a
    /// second stall is an error. A command that is merely slow is not
    /// retried: it meets the deadline.
    pub fn run(&self, argv: &[&str]) -> Result<RunOutput, NestedError> {
        let run_dir = RunDir::create()?;
        self.populate(&run_dir, argv)?;
        match self.mode {
            Mode::Direct => self.run_direct(run_dir),
            Mode::Nested => match self.run_nested(run_dir) {
                Err(e @ NestedError::L1Stalled { .. }) => {
                    eprintln!("nested harness: {e}\nnested harness: retrying once in a fresh L1");
                    let run_dir = RunDir::create()?;
                    self.populate(&run_dir, argv)?;
                    self.run_nested(run_dir)
                }
                other => other,
            },
        }
    }

    fn populate(&self, run_dir: &RunDir, argv: &[&str]) -> Result<(), NestedError> {
        let share = run_dir.share();
        for (name, source) in &self.files {
            let dst = share.join(name);
            if let Some(parent) = dst.parent() {
                fs::create_dir_all(parent)
                    .map_err(io_err(format!("create {}", parent.display())))?;
            }
            let written = match source {
                FileSource::Copy(src) => fs::copy(src, &dst)
                    .map(|_| ())
                    .map_err(io_err(format!("copy {} into the share", src.display()))),
                FileSource::Bytes(data) => {
                    fs::write(&dst, data).map_err(io_err(format!("write {}", dst.display())))
                }
            };
            written?;
        }
        let l1 = run_dir.l1();
        if !self.binaries.is_empty() {
            fs::create_dir_all(l1.join("bin")).map_err(io_err("create the bin dir"))?;
        }
        for (name, src) in &self.binaries {
            fs::copy(src, l1.join("bin").join(name))
                .map_err(io_err(format!("copy {} into the share", src.display())))?;
            if self.mode == Mode::Nested {
                let lib_dir = l1.join("lib");
                fs::create_dir_all(&lib_dir).map_err(io_err("create the lib dir"))?;
                for lib in libraries_of(src)? {
                    let dst = lib_dir.join(&lib.name);
                    if !dst.exists() {
                        fs::copy(&lib.path, &dst)
                            .map_err(io_err(format!("copy {}", lib.path.display())))?;
                    }
                }
            }
        }
        let script = command_script(&self.env, argv);
        fs::write(l1.join("cmd.sh"), script).map_err(io_err("write cmd.sh"))
    }

    fn run_direct(&self, run_dir: RunDir) -> Result<RunOutput, NestedError> {
        let share = run_dir.share();
        let l1 = run_dir.l1();
        let mut path = OsString::from(l1.join("bin"));
        if let Some(old) = std::env::var_os("PATH") {
            path.push(":");
            path.push(old);
        }
        let stdout = fs::File::create(l1.join("stdout")).map_err(io_err("create stdout"))?;
        let stderr = fs::File::create(l1.join("stderr")).map_err(io_err("create stderr"))?;
        let start = Instant::now();
        let child = Command::new("sh")
            .arg(l1.join("cmd.sh"))
            .current_dir(&share)
            .env("PATH", path)
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr)
            .process_group(0)
            .spawn()
            .map_err(io_err("start the command"))?;
        let mut child = child;
        let waited = crate::process::wait_with_deadline(&mut child, self.deadline)
            .map_err(io_err("wait for the command"))?;
        let elapsed = start.elapsed();
        let stdout = fs::read_to_string(l1.join("stdout")).unwrap_or_default();
        let stderr = fs::read_to_string(l1.join("stderr")).unwrap_or_default();
        let Some(status) = waited else {
            return Err(NestedError::Deadline {
                deadline: self.deadline,
                killed_after: elapsed,
                mode: Mode::Direct,
                console: String::new(),
                stderr: tail(&stderr, CONSOLE_TAIL_LINES),
                run_dir: run_dir.keep(),
            });
        };
        let status = status
            .code()
            .or_else(|| std::os::unix::process::ExitStatusExt::signal(&status).map(|s| 128 + s))
            .unwrap_or(-1);
        Ok(RunOutput {
            mode: Mode::Direct,
            status,
            stdout,
            stderr,
            l1_console: String::new(),
            share_dir: share,
            elapsed,
            l1_uptime_at_run: None,
            l1_kernel: None,
            _run_dir: run_dir,
        })
    }

    fn run_nested(&self, run_dir: RunDir) -> Result<RunOutput, NestedError> {
        let (Some(qemu), Some(l1)) = (&self.qemu, &self.l1) else {
            unreachable!("NestedVm::new sets QEMU and the L1 image in nested mode");
        };
        let share = run_dir.share();
        let console_path = run_dir.path.join("l1-console.log");
        let qemu_log_path = run_dir.path.join("qemu.log");
        let qemu_log = fs::File::create(&qemu_log_path).map_err(io_err("create qemu.log"))?;
        let qemu_log_err = qemu_log.try_clone().map_err(io_err("open qemu.log"))?;
        let mut cmd = l1_command(qemu, l1, self.memory_mib, self.cpus, &console_path, &share);
        cmd.stdin(Stdio::null())
            .stdout(qemu_log)
            .stderr(qemu_log_err)
            .process_group(0);

        let mut guard = crate::tcg::lock().map_err(io_err("take the TCG lock"))?;
        guard.note_console(&console_path);
        let start = Instant::now();
        let mut child = cmd.spawn().map_err(io_err("start QEMU"))?;
        let mut heartbeat = Heartbeat::new(&console_path);
        let waited = wait_watched(&mut child, self.deadline, || heartbeat.check())
            .map_err(io_err("wait for QEMU"))?;
        let elapsed = start.elapsed();
        drop(guard);

        let console =
            heartbeat::without_heartbeats(&fs::read_to_string(&console_path).unwrap_or_default());
        let l1dir = run_dir.l1();
        let stderr_tail = || {
            tail(
                &fs::read_to_string(l1dir.join("stderr")).unwrap_or_default(),
                CONSOLE_TAIL_LINES,
            )
        };
        let qemu_status = match waited {
            Waited::Exited(status) => status,
            Waited::Deadline => {
                return Err(NestedError::Deadline {
                    deadline: self.deadline,
                    killed_after: elapsed,
                    mode: Mode::Nested,
                    console: tail(&console, CONSOLE_TAIL_LINES),
                    stderr: stderr_tail(),
                    run_dir: run_dir.keep(),
                })
            }
            Waited::Stopped(reason) => {
                return Err(NestedError::L1Stalled {
                    reason,
                    console: tail(&console, CONSOLE_TAIL_LINES),
                    stderr: stderr_tail(),
                    run_dir: run_dir.keep(),
                })
            }
        };
        let status = fs::read_to_string(l1dir.join("status"))
            .ok()
            .and_then(|s| parse_status_file(&s))
            .or_else(|| parse_console_status(&console));
        if let Some(message) = parse_console_error(&console) {
            return Err(NestedError::L1Setup {
                message,
                console: tail(&console, CONSOLE_TAIL_LINES),
                run_dir: run_dir.keep(),
            });
        }
        let Some(status) = status else {
            return Err(NestedError::NoStatus {
                qemu_status: qemu_status.to_string(),
                qemu_log: fs::read_to_string(&qemu_log_path).unwrap_or_default(),
                console: tail(&console, CONSOLE_TAIL_LINES),
                run_dir: run_dir.keep(),
            });
        };
        Ok(RunOutput {
            mode: Mode::Nested,
            status,
            stdout: fs::read_to_string(l1dir.join("stdout")).unwrap_or_default(),
            stderr: fs::read_to_string(l1dir.join("stderr")).unwrap_or_default(),
            l1_uptime_at_run: parse_marker_uptime(&console, RUN_MARKER),
            l1_console: console,
            share_dir: share,
            elapsed,
            l1_kernel: Some(l1.kernel_package.clone()),
            _run_dir: run_dir,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::l1::cpuinfo_has_hw_virt;
    use super::share::*;
    use super::*;

    #[test]
    fn quotes_shell_words() {
        assert_eq!(shell_quote("pmemvm"), "pmemvm");
        assert_eq!(
            shell_quote("--nvdimm=16G,file=a.img"),
            "--nvdimm=16G,file=a.img"
        );
        assert_eq!(shell_quote(""), "''");
        assert_eq!(shell_quote("exit 7"), "'exit 7'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert_eq!(shell_quote("$HOME"), "'$HOME'");
    }

    #[test]
    fn builds_command_script() {
        let env = vec![("RUST_LOG".to_string(), "debug".to_string())];
        let s = command_script(&env, &["sh", "-c", "exit 7"]);
        assert!(s.contains("export RUST_LOG=debug\n"));
        assert!(s.ends_with("exec sh -c 'exit 7'\n"));
    }

    #[test]
    fn parses_status_file_and_console() {
        assert_eq!(parse_status_file("exit=7\n"), Some(7));
        assert_eq!(parse_status_file("exit=x\n"), None);
        assert_eq!(parse_status_file(""), None);
        let console = "[ 1.0] boot\nPMEMVM-L1-RUN uptime=2.61\nPMEMVM-L1-STATUS 3 uptime=2.65\n";
        assert_eq!(parse_console_status(console), Some(3));
        assert_eq!(parse_console_status("PMEMVM-L1-RUN uptime=1\n"), None);
        assert_eq!(parse_marker_uptime(console, RUN_MARKER), Some(2.61));
        assert_eq!(parse_console_error(console), None);
        assert_eq!(
            parse_console_error("PMEMVM-L1-ERROR insmod kvm-amd.ko failed\n").as_deref(),
            Some("insmod kvm-amd.ko failed")
        );
    }

    #[test]
    fn parses_ldd_output() {
        let out = "\tlinux-vdso.so.1 (0x00007ffd)\n\
                   \tlibgcc_s.so.1 => /lib/x86_64-linux-gnu/libgcc_s.so.1 (0x00007f)\n\
                   \tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f)\n\
                   \t/lib64/ld-linux-x86-64.so.2 (0x00007f)\n";
        let libs = parse_ldd(out).expect("valid ldd output");
        let names: Vec<&str> = libs.iter().map(|l| l.name.as_str()).collect();
        assert_eq!(
            names,
            ["libgcc_s.so.1", "libc.so.6", "ld-linux-x86-64.so.2"]
        );
        assert_eq!(libs[1].path, Path::new("/lib/x86_64-linux-gnu/libc.so.6"));
        assert!(parse_ldd("\tnot a dynamic executable\n")
            .expect("static")
            .is_empty());
        assert!(parse_ldd("\tlibfoo.so.1 => not found\n").is_err());
    }

    #[test]
    fn detects_hw_virt_flags() {
        assert!(cpuinfo_has_hw_virt("flags\t\t: fpu vme svm lm\n"));
        assert!(cpuinfo_has_hw_virt("flags\t\t: fpu vmx\n"));
        assert!(!cpuinfo_has_hw_virt("flags\t\t: fpu vme lm\n"));
        assert!(!cpuinfo_has_hw_virt("model name : svm-like cpu\n"));
    }

    #[test]
    fn tail_keeps_last_lines() {
        assert_eq!(tail("a\nb\nc\n", 2), "b\nc");
        assert_eq!(tail("a", 5), "a");
    }
}
