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
//!   run with its heartbeat watch — is the product's `lab::nested`, the same
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

use lab::nested::l1::{l1_command, run_l1, L1Failure, L1Options};
use lab::nested::share::{install_binary, write_command};

mod error;
mod l1;
mod output;
mod run_dir;

pub use error::NestedError;
pub(crate) use error::{io_err, unavailable};
pub use output::RunOutput;

use l1::kvm_opens;
pub use l1::{
    cache_dir, find_pmemvm, find_qemu, find_qemu_10, guest_image, host_has_hw_virt, prepare_l1,
    L1Image,
};
pub use lab::nested::share::tail;
pub use lab::nested::{ALIVE_MARKER, ERROR_MARKER, INIT_MARKER, RUN_MARKER, STATUS_MARKER};
use run_dir::{FileSource, RunDir};

/// Default time a command may take, L1 boot included.
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(300);
/// Default L1 memory: room for an L2 guest plus the page cache of its NVDIMMs.
pub const DEFAULT_L1_MEMORY_MIB: u32 = 3072;
/// Default number of L1 vCPUs: one. With two, an L1 under TCG's emulated SVM
/// once hung for minutes in `kvm_destroy_vm` waiting for a cross-CPU call
/// (soft lockup in `smp_call_function_many_cond`, seen in a CI dry run); with
/// one L1 CPU there is no such call, and L2 guests can still have several vCPUs.
pub const DEFAULT_L1_CPUS: u32 = 1;
pub(crate) use lab::nested::{CONSOLE_TAIL_LINES, L1_DIR};

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
    mounts: Vec<lab::nested::l1::Mount>,
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
            mounts: Vec::new(),
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
            self.mounts.push(lab::nested::l1::Mount {
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
    /// ceases: a TCG emulation failure, seen as a silent L1 in CI) is killed
    /// and the run is repeated once in a fresh share, saying so on stderr; a
    /// second stall is an error. A command that is merely slow is not
    /// retried: it meets the deadline.
    pub fn run(&self, argv: &[&str]) -> Result<RunOutput, NestedError> {
        match self.mode {
            Mode::Direct => {
                let run_dir = RunDir::create()?;
                self.populate(&run_dir, argv)?;
                self.run_direct(run_dir)
            }
            // An L1 that stalled, or that took a triple fault itself (QEMU's TCG,
            // not the guest: KVM in the L1 turns a guest's into a shutdown exit),
            // and a guest of pmemvm that triple-faulted in an L1 of two or more
            // vCPUs (TCG's delivery of an interrupt KVM injected, docs/testing.md
            // §6b), are run again in a fresh L1, up to [`BREAKDOWN_TRIES`] runs in
            // all; each restart is counted in the summary of tests/run.sh.
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
                    Ok(out) if self.cpus > 1 && argv.first() == Some(&"pmemvm") => {
                        platform_breakdown(&out.stderr)
                            .map(|why| format!("the nested run was restarted: {why}"))
                    }
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
                console,
            }) => {
                return Err(NestedError::Deadline {
                    deadline,
                    killed_after: elapsed,
                    mode: Mode::Nested,
                    console,
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

/// Whether a failed run is the L1's own breakdown rather than a result: a
/// stall, or an end without status after QEMU logged the L1's triple fault.
fn l1_broke(e: &NestedError) -> bool {
    match e {
        NestedError::L1Stalled { .. } => true,
        NestedError::NoStatus {
            qemu_status,
            console,
            ..
        } => qemu_status.contains("triple fault") || l1_kernel_panic(console).is_some(),
        _ => false,
    }
}

/// What the nested engine says when the L1's kernel stopped running (its
/// init's heartbeat ceased; seen in CI as an L1 CPU spinning with interrupts
/// off after the guest's job had reported its status).
const L1_STALLED: &str = "the L1 VM stopped running (no heartbeat";

/// The line that says a `pmemvm … --engine nested` run ended in a breakdown of
/// the emulated platform rather than with a result: the L1's own triple fault
/// (QEMU's reset log), a triple fault of the guest inside its TCG-run L1, or
/// the L1's kernel that stopped running (no heartbeat) or panicked.
/// Both were seen in CI only with two or more vCPUs in the L1 (docs/testing.md,
/// "The ndctl suite's two-vCPU L1 on QEMU 7.2"). `None` for any other end.
pub fn platform_breakdown(stderr: &str) -> Option<String> {
    let fault = stderr
        .lines()
        .find(|l| {
            l.contains("the L1's CPU took a triple fault")
                || l.contains(GUEST_TRIPLE_FAULT)
                || l.contains(L1_STALLED)
        })
        .map(|l| l.trim().to_owned());
    fault.or_else(|| {
        // The L1's own kernel panicked (its console, as the nested engine
        // prints it after the L1 stopped without a status). A process cannot
        // panic the kernel: this is the TCG-emulated platform's (seen in CI
        // with an interrupt taken right after a #VMEXIT in `__svm_vcpu_run`).
        let (_, console) = stderr.split_once("L1 console, last lines:")?;
        l1_kernel_panic(console).map(|p| format!("the L1's kernel panicked: {p}"))
    })
}

/// The L1 kernel's panic line (from "Kernel panic") in its console `text`.
fn l1_kernel_panic(text: &str) -> Option<&str> {
    text.lines().find_map(|l| {
        l.find("Kernel panic - not syncing")
            .map(|at| l[at..].trim_end())
    })
}

/// How many runs in all a test gives one step when its runs end in a
/// breakdown of the TCG-emulated platform (an L1 that stalled or took a triple
/// fault, or a 2-vCPU guest whose interrupt delivery triple-faulted in its
/// TCG-run L1; docs/testing.md §6b). Each restart is noted in the summary of
/// tests/run.sh; a breakdown in the last run is the test's result.
pub const BREAKDOWN_TRIES: u32 = 5;

/// Runs `run` until `breakdown` finds no breakdown in its result, at most
/// [`BREAKDOWN_TRIES`] times; every restart is printed (`who: why`) and noted
/// with [`note_wakeup`]. Returns the last result.
pub fn retry_breakdowns<T>(
    who: &str,
    run: impl FnMut() -> T,
    breakdown: impl Fn(&T) -> Option<String>,
) -> T {
    retry_noting(who, run, breakdown, note_wakeup)
}

/// [`retry_breakdowns`] with the restarts noted by `note`.
fn retry_noting<T>(
    who: &str,
    mut run: impl FnMut() -> T,
    breakdown: impl Fn(&T) -> Option<String>,
    note: impl Fn(&str),
) -> T {
    let mut tries = 1;
    loop {
        let result = run();
        match breakdown(&result) {
            Some(why) if tries < BREAKDOWN_TRIES => {
                tries += 1;
                eprintln!("{who}: {why}; run {tries} of at most {BREAKDOWN_TRIES}");
                note(&why);
            }
            _ => return result,
        }
    }
}

/// What pmemvm prints when its guest triple-faulted.
const GUEST_TRIPLE_FAULT: &str = "the guest triple-faulted (KVM shutdown exit)";

/// An L1 script that boots 2-vCPU guests itself, with what it needs to run a
/// boot again after the platform's breakdown as [`retry_breakdowns`] does:
/// `$TRIES` is [`BREAKDOWN_TRIES`]; `breakdown FILE` prints the line of
/// pmemvm's stderr FILE that says its guest triple-faulted (status 1 when
/// there is none). A script appends each restart's line to `once-more.txt`,
/// which [`note_l1_restarts`] reads.
pub fn l1_script_with_retries(script: &str) -> String {
    format!(
        "TRIES={BREAKDOWN_TRIES}\nbreakdown() {{ grep -m1 \"{GUEST_TRIPLE_FAULT}\" \"$1\"; }}\n{script}"
    )
}

/// Prints and notes (in the run's summary) the restarts an L1 script of
/// [`l1_script_with_retries`] wrote to `once-more.txt`.
pub fn note_l1_restarts(who: &str, out: &RunOutput) {
    let restarts = fs::read_to_string(out.path("once-more.txt")).unwrap_or_default();
    for line in restarts.lines() {
        eprintln!("{who}: run again after a platform breakdown: {line}");
        note_wakeup(&format!("the nested run was restarted: {line}"));
    }
}

/// Runs `pmemvm … --engine nested` (the command made by `command` for each
/// try), again after a [`platform_breakdown`] (the line pmemvm printed: the
/// vCPU and, in the SVM L1, the RIP from the kvm:kvm_exit tracepoint), up to
/// [`BREAKDOWN_TRIES`] runs ([`retry_breakdowns`]).
pub fn run_engine_nested(
    command: impl Fn() -> Command,
    deadline: Duration,
) -> crate::pmemvm::Output {
    retry_breakdowns(
        "nested engine",
        || crate::pmemvm::run_cmd(&mut command(), deadline),
        |out| {
            if out.timed_out {
                return None;
            }
            let why = platform_breakdown(&out.stderr)?;
            eprintln!("{}", out.dump());
            Some(format!("the nested run was restarted: {why}"))
        },
    )
}

/// Appends `<test>\t<wake-up>` to `$PMEMVM_L1_WAKEUP_LOG` when it is set: libtest hides a
/// passing test's stderr, and `tests/run.sh` prints this log at the end (how often CI's L1s
/// needed a key event, and the runs done once more).
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
    use super::{l1_broke, NestedError};

    #[test]
    fn only_a_triple_faulted_or_stalled_l1_is_run_again() {
        let no_status = |qemu_status: &str| NestedError::NoStatus {
            qemu_status: qemu_status.into(),
            qemu_log: String::new(),
            run_dir: "/tmp/x".into(),
            console: String::new(),
        };
        let fault = lab::nested::l1::reset_cause("Triple fault\n").expect("a cause");
        assert!(l1_broke(&no_status(&format!("exit status: 0; {fault}"))));
        // A power-off or a QEMU error without a logged triple fault is a result.
        assert!(!l1_broke(&no_status("exit status: 0")));
        assert!(!l1_broke(&no_status("exit status: 1")));
    }

    #[test]
    fn a_step_is_run_again_after_breakdowns_up_to_the_limit() {
        use super::{retry_noting, BREAKDOWN_TRIES};
        use std::cell::{Cell, RefCell};
        // Every run breaks down: BREAKDOWN_TRIES runs, the last result
        // returned, each restart noted (here, not in the run's summary).
        let runs = Cell::new(0);
        let notes = RefCell::new(Vec::new());
        let note = |why: &str| notes.borrow_mut().push(why.to_owned());
        let last = retry_noting(
            "t",
            || {
                runs.set(runs.get() + 1);
                runs.get()
            },
            |_| Some("fault".to_owned()),
            note,
        );
        assert_eq!((runs.get(), last), (BREAKDOWN_TRIES, BREAKDOWN_TRIES));
        assert_eq!(notes.borrow().len(), BREAKDOWN_TRIES as usize - 1);
        // The second run is a result: no third.
        runs.set(0);
        notes.borrow_mut().clear();
        let last = retry_noting(
            "t",
            || {
                runs.set(runs.get() + 1);
                runs.get()
            },
            |n| (*n == 1).then(|| "fault".to_owned()),
            note,
        );
        assert_eq!((runs.get(), last), (2, 2));
        assert_eq!(*notes.borrow(), ["fault"]);
    }

    #[test]
    fn a_panic_of_the_l1_kernel_is_a_breakdown_and_the_guests_is_not() {
        use super::platform_breakdown;
        let l1 = "pmemvm-init: found /dev/pmem0 (131072 sectors)\n\
                  pmemvm: --engine nested: the L1 VM stopped without reporting the command's \
                  exit status (QEMU exit status: 0); QEMU said: \n\
                  L1 console, last lines:\n\
                  [   30.737179] RIP: 0010:__svm_vcpu_run+0x9c/0x210 [kvm_amd]\n\
                  [   30.737179] Kernel panic - not syncing: Fatal exception in interrupt\n";
        assert_eq!(
            platform_breakdown(l1).as_deref(),
            Some("the L1's kernel panicked: Kernel panic - not syncing: Fatal exception in interrupt")
        );
        // The guest's own panic (its console, before the L1's) is a result.
        let guest = "pmemvm: last lines of the guest console:\n\
                     [    2.1] Kernel panic - not syncing: Attempted to kill init!\n";
        assert_eq!(platform_breakdown(guest), None);
        let no_status = NestedError::NoStatus {
            qemu_status: "exit status: 0".into(),
            qemu_log: String::new(),
            run_dir: "/tmp/x".into(),
            console: "[ 30.7] Kernel panic - not syncing: Fatal exception\n".into(),
        };
        assert!(l1_broke(&no_status));
    }

    #[test]
    fn an_l1_script_knows_the_tries_and_finds_the_guests_triple_fault() {
        let script = super::l1_script_with_retries("breakdown err.txt; echo \"$TRIES\"");
        let dir = std::env::temp_dir().join(format!("pmemvm-l1-retry-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("err.txt"),
            "x\npmemvm: the guest triple-faulted (KVM shutdown exit) on vCPU 1\n",
        )
        .unwrap();
        let out = std::process::Command::new("sh")
            .args(["-c", &script])
            .current_dir(&dir)
            .output()
            .unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            format!(
                "pmemvm: the guest triple-faulted (KVM shutdown exit) on vCPU 1\n{}\n",
                super::BREAKDOWN_TRIES
            )
        );
    }

    #[test]
    fn triple_faults_and_stalls_of_the_platform_are_breakdowns() {
        use super::platform_breakdown;
        let l1 = "pmemvm: --engine nested: the L1 VM stopped without reporting the command's \
                  exit status (QEMU exit status: 0; the L1's CPU took a triple fault (QEMU's \
                  reset log counted 1), which -no-reboot turned into QEMU's exit); QEMU said:";
        let l2 = "pmemvm: pmemvm in the L1 VM: pmemvm: the guest triple-faulted (KVM shutdown \
                  exit) on vCPU 1 at RIP 0xffffffff81002fad; CR2 0x0 (exit status 4)";
        assert!(platform_breakdown(&format!("warning\n{l1}\nL1 console")).is_some());
        assert_eq!(platform_breakdown(l2).as_deref(), Some(l2));
        let stall = "pmemvm: --engine nested: the L1 VM stopped running (no heartbeat from the \
                     L1 init for 150 s after 3 heartbeats; it prints one every 10 s) and was \
                     killed; what it was doing:";
        assert_eq!(platform_breakdown(stall).as_deref(), Some(stall));
        assert_eq!(platform_breakdown("pmemvm: the guest powered off"), None);
        assert_eq!(
            platform_breakdown("pmemvm: the guest did not finish within 90 s"),
            None
        );
    }

    #[test]
    fn detects_hw_virt_flags() {
        assert!(cpuinfo_has_hw_virt("flags\t\t: fpu vme svm lm\n"));
        assert!(cpuinfo_has_hw_virt("flags\t\t: fpu vmx\n"));
        assert!(!cpuinfo_has_hw_virt("flags\t\t: fpu vme lm\n"));
        assert!(!cpuinfo_has_hw_virt("model name : svm-like cpu\n"));
    }
}
