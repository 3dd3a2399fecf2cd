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
//!   afterwards. The L1 — its kernel and initramfs (`guest-images/l1/`,
//!   cached in [`cache_dir`]), its QEMU command line, the share's layout, the
//!   run with its heartbeat watch — is the product's `lab::guest::nested`, the same
//!   code as `--engine nested`. Timing under TCG is functional only.
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

use lab::guest::nested::l1::{l1_command, L1Options};
use lab::guest::nested::l1_run::{run_l1, L1Failure};
use lab::guest::nested::share::{install_binary, write_command};

mod breakdown;
mod error;
mod l1;
mod output;
mod run_dir;
pub mod setup_boot;

use breakdown::l1_broke;
pub use breakdown::{
    l1_script_with_retries, note_l1_restarts, note_rerun, platform_breakdown, retry_breakdowns,
    run_engine_nested, BREAKDOWN_TRIES,
};

pub use error::NestedError;
pub(crate) use error::{io_err, unavailable};
pub use output::{GuestFiles, RunOutput};

use l1::kvm_opens;
pub use l1::{
    cache_dir, find_pmemvm, find_qemu, find_qemu_10, guest_image, host_has_hw_virt, prepare_l1,
    L1Image,
};
pub use lab::guest::nested::share::tail;
pub use lab::guest::nested::{ALIVE_MARKER, ERROR_MARKER, INIT_MARKER, RUN_MARKER, STATUS_MARKER};
use run_dir::{FileSource, RunDir};

/// What a test of `pmemvm ... --engine nested` needs before it runs: QEMU,
/// the guest image and the L1 (prepared in the harness's cache, shared with
/// the other nested tests); the guard holds one TCG slot for the test.
pub fn engine_ready() -> Result<crate::tcg::TcgGuard, crate::skip::Skip> {
    find_qemu()?;
    crate::image::image_dir()?;
    match prepare_l1() {
        Ok(_) => {}
        Err(NestedError::Unavailable(s)) => return Err(s),
        Err(e) => panic!("preparing the L1 failed: {e}"),
    }
    Ok(crate::tcg::lock().expect("take the TCG lock"))
}

/// Default time a command may take, L1 boot included.
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(300);
/// Default L1 memory: room for an L2 guest plus the page cache of its NVDIMMs.
pub const DEFAULT_L1_MEMORY_MIB: u32 = 3072;
/// Default number of L1 vCPUs: one. With two, an L1 under TCG's emulated SVM
/// once hung for minutes in `kvm_destroy_vm` waiting for a cross-CPU call
/// (soft lockup in `smp_call_function_many_cond`, seen in a CI dry run); with
/// one L1 CPU there is no such call, and L2 guests can still have several vCPUs.
pub const DEFAULT_L1_CPUS: u32 = 1;
pub(crate) use lab::guest::nested::{CONSOLE_TAIL_LINES, L1_DIR};

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
    mounts: Vec<lab::guest::nested::l1::Mount>,
}

impl NestedVm {
    /// Chooses the mode (direct on hosts with `vmx`/`svm` and a usable
    /// `/dev/kvm`, else nested; `PMEMVM_TEST_MODE` overrides) and, for nested
    /// mode, finds QEMU and prepares the L1 image.
    pub fn new() -> Result<NestedVm, NestedError> {
        Self::in_mode(match std::env::var("PMEMVM_TEST_MODE").as_deref() {
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
        })
    }

    /// Nested mode on every host, for a test of the L1 itself (a hardware-KVM
    /// host included); unavailable (skip) only without QEMU or the L1's tools.
    pub fn nested() -> Result<NestedVm, NestedError> {
        Self::in_mode(Mode::Nested)
    }

    fn in_mode(mode: Mode) -> Result<NestedVm, NestedError> {
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
            mounts: Vec::new(),
        })
    }

    /// Makes the `pmemvm` binary (see [`find_pmemvm`]) available as `pmemvm`
    /// on the command's `PATH`, with the core executable beside it when it is
    /// built (what `pmemvm boot` hands its VM to); unavailable (skip) if
    /// `pmemvm` is not built.
    pub fn with_pmemvm(self) -> Result<NestedVm, NestedError> {
        let bin = find_pmemvm().map_err(NestedError::Unavailable)?;
        let core = bin.with_file_name(vmm::launch::CORE_EXECUTABLE);
        let vm = self.binary("pmemvm", bin);
        Ok(match core.is_file() {
            true => vm.binary(vmm::launch::CORE_EXECUTABLE, core),
            false => vm,
        })
    }

    /// The mode this run will use.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// The QEMU that runs this L1 (nested mode only).
    pub fn l1_qemu(&self) -> Option<&Path> {
        self.qemu.as_deref()
    }

    /// Runs the L1 on `qemu` instead of the one [`NestedVm::new`] found
    /// (nested mode only; see [`find_qemu_10`]).
    pub fn with_qemu(mut self, qemu: PathBuf) -> Self {
        if self.qemu.is_some() {
            self.qemu = Some(qemu);
        }
        self
    }

    /// The L1 image (nested mode only).
    pub fn l1_image(&self) -> Option<&L1Image> {
        self.l1.as_ref()
    }

    /// Debian's stock kernel and its small L2 initramfs, for tests that boot
    /// it under pmemvm: the L1's own files (prepared by [`prepare_l1`]) in
    /// nested mode, prepared the same way in direct mode, so those tests run
    /// on either kind of host.
    pub fn stock_kernel(&self) -> Result<L1Image, NestedError> {
        match &self.l1 {
            Some(l1) => Ok(l1.clone()),
            None => prepare_l1(),
        }
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

    /// Makes the host directory `dir` (absolute) visible at the same path to
    /// the command: in nested mode a 9p mount in L1, in direct mode it is
    /// there already. Test binaries that find their inputs by the paths they
    /// were built with (the source tree, `target/`) run unchanged in L1.
    pub fn mount_same_path(mut self, dir: &Path) -> Self {
        assert!(dir.is_absolute(), "{} is not absolute", dir.display());
        if self.mode == Mode::Nested {
            let tag = format!("host{}", self.mounts.len());
            self.mounts.push(lab::guest::nested::l1::Mount {
                tag,
                host_dir: dir.to_path_buf(),
                l1_dir: dir.display().to_string(),
            });
        }
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
    /// ceases) is killed. A run that broke down with evidence naming the
    /// emulated platform — that stall, the L1's own triple fault, panic or
    /// oops, or, for a `pmemvm` command, a guest triple fault at a RIP inside
    /// the L1's modules — is run again in a fresh share, saying so on stderr,
    /// up to `BREAKDOWN_TRIES` runs in all (docs/testing.md, "Reruns"). A
    /// command that is merely slow is not run again: it meets the deadline,
    /// and that is its result.
    pub fn run(&self, argv: &[&str]) -> Result<RunOutput, NestedError> {
        match self.mode {
            Mode::Direct => {
                let run_dir = RunDir::create()?;
                self.populate(&run_dir, argv)?;
                self.run_direct(run_dir)
            }
            // A run that broke down with evidence naming the emulated platform
            // (the L1's own triple fault, panic, oops or stall; a guest triple
            // fault at a RIP inside the L1's modules: `breakdown`) is run again
            // in a fresh L1, up to [`BREAKDOWN_TRIES`] runs in all, each rerun
            // logged for the summary of tests/run.sh. A guest's triple fault
            // or hang alone is the result.
            Mode::Nested => retry_breakdowns(
                "nested harness",
                || {
                    let run_dir = RunDir::create()?;
                    self.populate(&run_dir, argv)?;
                    self.run_nested(run_dir)
                },
                |result| match result {
                    Err(e) if l1_broke(e) => Some(format!(
                        "the L1 was restarted: {}",
                        e.to_string().lines().next().unwrap_or_default()
                    )),
                    Ok(out) if argv.first() == Some(&"pmemvm") => platform_breakdown(&out.stderr)
                        .map(|why| format!("the nested run was restarted: {why}")),
                    _ => None,
                },
            ),
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
        for (name, src) in &self.binaries {
            install_binary(&share, name, src, self.mode == Mode::Nested)?;
        }
        write_command(&share, &self.env, argv, &self.mounts, None)?;
        Ok(())
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
            l1_wakeups: Vec::new(),
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
        let opts = L1Options {
            memory_mib: self.memory_mib,
            cpus: self.cpus,
            mounts: self.mounts.clone(),
            interactive: false,
            gdb: None,
            api: None,
        };
        let cmd = l1_command(qemu, l1, &opts, &console_path, &share);
        // An L1 with N vCPUs is N cores of TCG work: it holds N slots.
        let mut guard = crate::tcg::lock_n(usize::try_from(self.cpus).unwrap_or(1))
            .map_err(io_err("take the TCG lock"))?;
        guard.note_console(&console_path);
        let run = run_l1(
            cmd,
            false,
            &console_path,
            &qemu_log_path,
            &share,
            Some(self.deadline),
            None,
        );
        drop(guard);
        let l1dir = run_dir.l1();
        let stderr_tail = || {
            tail(
                &fs::read_to_string(l1dir.join("stderr")).unwrap_or_default(),
                CONSOLE_TAIL_LINES,
            )
        };
        let run = match run {
            Ok(run) => run,
            Err(L1Failure::Deadline {
                deadline,
                elapsed,
                state,
                console,
            }) => {
                return Err(NestedError::Deadline {
                    deadline,
                    killed_after: elapsed,
                    mode: Mode::Nested,
                    console: format!(
                        "{console}\nwhere the L1's vCPUs were before the kill (QEMU's monitor): \
                         {state}"
                    ),
                    stderr: stderr_tail(),
                    run_dir: run_dir.keep(),
                })
            }
            Err(L1Failure::Stalled {
                reason,
                state,
                console,
            }) => {
                return Err(NestedError::L1Stalled {
                    reason,
                    state,
                    console,
                    stderr: stderr_tail(),
                    run_dir: run_dir.keep(),
                })
            }
            Err(L1Failure::Setup { message, console }) => {
                return Err(NestedError::L1Setup {
                    message,
                    console,
                    run_dir: run_dir.keep(),
                })
            }
            Err(L1Failure::NoStatus {
                qemu_status,
                reset,
                qemu_log,
                console,
            }) => {
                return Err(NestedError::NoStatus {
                    qemu_status: format!("{qemu_status}{reset}"),
                    qemu_log,
                    console,
                    run_dir: run_dir.keep(),
                })
            }
            Err(L1Failure::Io { what, source }) => return Err(NestedError::Io { what, source }),
            Err(e @ L1Failure::Signal { .. }) => {
                return Err(NestedError::Io {
                    what: "run the L1 VM".into(),
                    source: std::io::Error::new(std::io::ErrorKind::Interrupted, e.to_string()),
                })
            }
        };
        for w in &run.wakeups {
            eprintln!("nested harness: the L1 VM fell silent ({w})");
            note_wakeup(w);
        }
        Ok(RunOutput {
            mode: Mode::Nested,
            status: run.status,
            stdout: fs::read_to_string(l1dir.join("stdout")).unwrap_or_default(),
            stderr: fs::read_to_string(l1dir.join("stderr")).unwrap_or_default(),
            l1_uptime_at_run: run.uptime_at_run,
            l1_console: run.console,
            share_dir: share,
            elapsed: run.elapsed,
            l1_kernel: Some(l1.kernel_package.clone()),
            l1_wakeups: run.wakeups,
            _run_dir: run_dir,
        })
    }
}

/// Appends `<test>\t<wake-up>` to `$PMEMVM_L1_WAKEUP_LOG` when it is set: libtest hides a
/// passing test's stderr, and `tests/run.sh` prints this log at the end (how often CI's L1s
/// needed a key event; reruns are in `$PMEMVM_RERUN_LOG`, [`note_rerun`]).
pub fn note_wakeup(wakeup: &str) {
    use std::io::Write as _;
    let Some(path) = std::env::var_os("PMEMVM_L1_WAKEUP_LOG").filter(|p| !p.is_empty()) else {
        return;
    };
    if let Ok(mut f) = fs::OpenOptions::new().create(true).append(true).open(path) {
        let _ = writeln!(f, "{}\t{wakeup}", crate::skip::tier());
    }
}

#[cfg(test)]
mod tests {
    use super::l1::cpuinfo_has_hw_virt;

    #[test]
    fn detects_hw_virt_flags() {
        assert!(cpuinfo_has_hw_virt("flags\t\t: fpu vme svm lm\n"));
        assert!(cpuinfo_has_hw_virt("flags\t\t: fpu vmx\n"));
        assert!(!cpuinfo_has_hw_virt("flags\t\t: fpu vme lm\n"));
        assert!(!cpuinfo_has_hw_virt("model name : svm-like cpu\n"));
    }
}
