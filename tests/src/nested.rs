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
use std::fmt::Write as _;
use std::fs;
use std::io;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use crate::skip::{MaybeSkip, Skip};

/// Console line printed by the L1 init with the command's exit status.
pub const STATUS_MARKER: &str = "PMEMVM-L1-STATUS";
/// Console line printed by the L1 init when its own setup fails.
pub const ERROR_MARKER: &str = "PMEMVM-L1-ERROR";
/// Console line printed by the L1 init just before it runs the command.
pub const RUN_MARKER: &str = "PMEMVM-L1-RUN";
/// Console line printed by the L1 init when it starts.
pub const INIT_MARKER: &str = "PMEMVM-L1-INIT";

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
const CONSOLE_TAIL_LINES: usize = 60;
/// Harness-owned directory inside the share (`/share/.l1` in L1).
const L1_DIR: &str = ".l1";

/// Errors of the end-to-end harness.
#[derive(Debug, thiserror::Error)]
pub enum NestedError {
    /// A requirement of the tier is missing on this machine; the test skips.
    #[error("{0}")]
    Unavailable(Skip),
    /// A file operation of the harness failed.
    #[error("cannot {what}: {source}")]
    Io {
        /// What the harness was doing.
        what: String,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// `tests/l1/prepare.sh` failed for a reason other than a missing tool.
    #[error("preparing the L1 VM failed ({status}); prepare.sh said:\n{stderr}")]
    Prepare {
        /// Exit status of prepare.sh.
        status: String,
        /// Its standard error.
        stderr: String,
    },
    /// `ldd` could not resolve a host binary's libraries.
    #[error("cannot collect the shared libraries of {}: {detail}", binary.display())]
    Libraries {
        /// The binary.
        binary: PathBuf,
        /// What ldd reported.
        detail: String,
    },
    /// The deadline passed; QEMU (or the direct command) was killed.
    #[error(
        "the command did not finish within {deadline:?} and was killed \
         (files kept in {}); {} console, last lines:\n{console}",
        run_dir.display(), mode
    )]
    Deadline {
        /// The deadline that passed.
        deadline: Duration,
        /// Time from starting QEMU (or the command) until it was killed.
        killed_after: Duration,
        /// Mode the command ran in.
        mode: Mode,
        /// Kept run directory (share, console log).
        run_dir: PathBuf,
        /// Tail of the L1 console (nested) or of stderr (direct).
        console: String,
    },
    /// The L1 init could not set up (module load, 9p mount).
    #[error(
        "the L1 VM failed to set up: {message} (files kept in {}); L1 console, last lines:\n{console}",
        run_dir.display()
    )]
    L1Setup {
        /// The init's error line.
        message: String,
        /// Kept run directory.
        run_dir: PathBuf,
        /// Tail of the L1 console.
        console: String,
    },
    /// L1 stopped (panic, crash, QEMU error) without reporting a status.
    #[error(
        "the L1 VM stopped without reporting the command's exit status (QEMU {qemu_status}; \
         files kept in {}); QEMU said: {qemu_log}\nL1 console, last lines:\n{console}",
        run_dir.display()
    )]
    NoStatus {
        /// QEMU's exit status.
        qemu_status: String,
        /// QEMU's own stdout/stderr.
        qemu_log: String,
        /// Kept run directory.
        run_dir: PathBuf,
        /// Tail of the L1 console.
        console: String,
    },
}

impl MaybeSkip for NestedError {
    fn skip_reason(&self) -> Option<&str> {
        match self {
            NestedError::Unavailable(skip) => Some(skip.reason()),
            _ => None,
        }
    }
}

fn io_err(what: impl Into<String>) -> impl FnOnce(io::Error) -> NestedError {
    let what = what.into();
    move |source| NestedError::Io { what, source }
}

fn unavailable(reason: impl Into<String>) -> NestedError {
    NestedError::Unavailable(Skip::new(reason))
}

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

/// The prepared L1 kernel and initramfs.
#[derive(Debug, Clone)]
pub struct L1Image {
    /// Debian's stock kernel.
    pub vmlinuz: PathBuf,
    /// busybox + modules + tests/l1/init.
    pub initramfs: PathBuf,
    /// Initramfs of the "stock" L2 guest: busybox, the NVDIMM modules of the
    /// same kernel and tests/l1/l2-init, for booting `vmlinuz` under pmemvm.
    pub l2_initramfs: PathBuf,
    /// `package=... version=... kernel=...` as recorded by prepare.sh.
    pub kernel_package: String,
}

/// The workspace root (the parent of the `tests` crate): one definition for the harnesses.
pub use crate::pmemvm::workspace_root;

/// Cache directory of the harness: `$PMEMVM_TEST_CACHE` or `tests/.cache/`.
pub fn cache_dir() -> PathBuf {
    match std::env::var_os("PMEMVM_TEST_CACHE") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => Path::new(env!("CARGO_MANIFEST_DIR")).join(".cache"),
    }
}

/// True if `/proc/cpuinfo` lists `vmx` or `svm`, i.e. hardware virtualization.
pub fn host_has_hw_virt() -> bool {
    fs::read_to_string("/proc/cpuinfo")
        .map(|info| cpuinfo_has_hw_virt(&info))
        .unwrap_or(false)
}

fn cpuinfo_has_hw_virt(info: &str) -> bool {
    info.lines()
        .filter(|l| l.starts_with("flags"))
        .flat_map(|l| l.split_whitespace())
        .any(|f| f == "vmx" || f == "svm")
}

fn kvm_opens() -> bool {
    fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/kvm")
        .is_ok()
}

fn find_in_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

/// A binary named by an environment variable: nothing at that path means
/// the tool is missing (a skip that names the variable); something there that
/// is not an executable file is a misconfiguration, and the test fails.
fn user_binary(var: &str, path: PathBuf) -> Result<PathBuf, Skip> {
    use std::os::unix::fs::PermissionsExt;
    match fs::metadata(&path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Err(Skip::new(format!(
            "{var}={} does not exist (install the tool there, or unset {var})",
            path.display()
        ))),
        Err(e) => panic!("{var}={}: {e}", path.display()),
        Ok(m) if !m.is_file() || m.permissions().mode() & 0o111 == 0 => panic!(
            "{var}={} is not an executable file: name the binary, or unset {var}",
            path.display()
        ),
        Ok(_) => Ok(path),
    }
}

/// The QEMU binary: `$PMEMVM_QEMU` or `qemu-system-x86_64` on `PATH`.
pub fn find_qemu() -> Result<PathBuf, Skip> {
    if let Some(q) = std::env::var_os("PMEMVM_QEMU").filter(|q| !q.is_empty()) {
        return user_binary("PMEMVM_QEMU", PathBuf::from(q));
    }
    find_in_path("qemu-system-x86_64").ok_or_else(|| {
        Skip::new("qemu-system-x86_64 not found (install the Debian package qemu-system-x86)")
    })
}

/// The `pmemvm` binary: `$PMEMVM_BIN`, else the newer of
/// `target/release/pmemvm` and `target/debug/pmemvm` (honouring
/// `$CARGO_TARGET_DIR`).
pub fn find_pmemvm() -> Result<PathBuf, Skip> {
    if let Some(bin) = std::env::var_os("PMEMVM_BIN").filter(|b| !b.is_empty()) {
        return user_binary("PMEMVM_BIN", PathBuf::from(bin));
    }
    let target = match std::env::var_os("CARGO_TARGET_DIR") {
        Some(t) if !t.is_empty() => {
            let t = PathBuf::from(t);
            if t.is_absolute() {
                t
            } else {
                workspace_root().join(t)
            }
        }
        _ => workspace_root().join("target"),
    };
    ["release", "debug"]
        .iter()
        .map(|profile| target.join(profile).join("pmemvm"))
        .filter_map(|p| {
            let mtime = fs::metadata(&p).and_then(|m| m.modified()).ok()?;
            Some((mtime, p))
        })
        .max_by_key(|(mtime, _)| *mtime)
        .map(|(_, p)| p)
        .ok_or_else(|| {
            Skip::new(format!(
                "pmemvm binary not found (set PMEMVM_BIN or run `cargo build -p pmemvm`; looked in {})",
                target.display()
            ))
        })
}

/// A file of the project's guest image: `$PMEMVM_IMAGE_DIR/NAME` or
/// `guest-images/out/NAME` (e.g. `bzImage`, `vmlinux`, `initramfs.cpio.gz`).
pub fn guest_image(name: &str) -> Result<PathBuf, Skip> {
    let dir = match std::env::var_os("PMEMVM_IMAGE_DIR") {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => workspace_root().join("guest-images").join("out"),
    };
    let path = dir.join(name);
    if path.is_file() {
        Ok(path)
    } else {
        Err(Skip::new(format!(
            "guest image {} not built (run guest-images/build.sh)",
            path.display()
        )))
    }
}

/// Prepares (or finds cached) the L1 kernel and initramfs with
/// `tests/l1/prepare.sh`. Missing tools or an unreachable Debian archive are
/// reported as [`NestedError::Unavailable`].
pub fn prepare_l1() -> Result<L1Image, NestedError> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("l1")
        .join("prepare.sh");
    let bash = find_in_path("bash").ok_or_else(|| unavailable("bash not found"))?;
    let cache = cache_dir();
    let out = Command::new(bash)
        .arg(&script)
        .arg(&cache)
        .stdin(Stdio::null())
        .output()
        .map_err(io_err(format!("run {}", script.display())))?;
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    if !out.status.success() {
        if out.status.code() == Some(3) {
            let reason = stderr.lines().last().unwrap_or("prepare.sh failed").trim();
            return Err(unavailable(format!("cannot prepare the L1 VM: {reason}")));
        }
        return Err(NestedError::Prepare {
            status: out.status.to_string(),
            stderr,
        });
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let dir = stdout
        .lines()
        .last()
        .map(|l| PathBuf::from(l.trim()))
        .ok_or_else(|| NestedError::Prepare {
            status: "no output directory printed".to_string(),
            stderr: stderr.clone(),
        })?;
    let kernel_package = fs::read_to_string(dir.join("kernel-package.txt"))
        .map_err(io_err(format!("read {}/kernel-package.txt", dir.display())))?
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    Ok(L1Image {
        vmlinuz: dir.join("vmlinuz"),
        initramfs: dir.join("initramfs.cpio.gz"),
        l2_initramfs: dir.join("l2-initramfs.cpio.gz"),
        kernel_package,
    })
}

/// Quotes one word for a POSIX shell.
fn shell_quote(word: &str) -> String {
    if !word.is_empty()
        && word
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./=:,+@%".contains(&b))
    {
        return word.to_string();
    }
    format!("'{}'", word.replace('\'', r"'\''"))
}

/// Escapes a value for a QEMU option list (commas are doubled).
fn qemu_opt_escape(value: &str) -> String {
    value.replace(',', ",,")
}

/// The script the L1 init (or the direct runner) executes in the share.
fn command_script(env: &[(String, String)], argv: &[&str]) -> String {
    let mut s = String::from("# Written by the pmemvm-tests end-to-end harness.\n");
    for (k, v) in env {
        let _ = writeln!(s, "export {k}={}", shell_quote(v));
    }
    let words: Vec<String> = argv.iter().map(|w| shell_quote(w)).collect();
    let _ = writeln!(s, "exec {}", words.join(" "));
    s
}

/// Parses `exit=N` from the status file the L1 init writes.
fn parse_status_file(text: &str) -> Option<i32> {
    text.lines()
        .find_map(|l| l.trim().strip_prefix("exit="))
        .and_then(|n| n.trim().parse().ok())
}

/// The last `PMEMVM-L1-STATUS N` on the console.
fn parse_console_status(console: &str) -> Option<i32> {
    console.lines().rev().find_map(|l| {
        let rest = l.split(STATUS_MARKER).nth(1)?;
        rest.split_whitespace().next()?.parse().ok()
    })
}

/// The message of the last `PMEMVM-L1-ERROR ...` line on the console.
fn parse_console_error(console: &str) -> Option<String> {
    console.lines().rev().find_map(|l| {
        let rest = l.split(ERROR_MARKER).nth(1)?;
        Some(rest.trim().to_string())
    })
}

/// L1 uptime (seconds) printed with a marker, e.g. [`RUN_MARKER`].
fn parse_marker_uptime(console: &str, marker: &str) -> Option<f64> {
    console.lines().find_map(|l| {
        let rest = l.split(marker).nth(1)?;
        rest.split_whitespace()
            .find_map(|w| w.strip_prefix("uptime="))?
            .parse()
            .ok()
    })
}

/// The last `n` lines of `text`.
pub fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// A shared library a binary needs: the name it is loaded by and where it is.
#[derive(Debug, PartialEq, Eq)]
struct Library {
    name: String,
    path: PathBuf,
}

/// Parses `ldd` output. `Ok(vec![])` for a static binary.
fn parse_ldd(output: &str) -> Result<Vec<Library>, String> {
    if output.contains("not a dynamic executable") || output.contains("statically linked") {
        return Ok(Vec::new());
    }
    let mut libs = Vec::new();
    for line in output.lines().map(str::trim).filter(|l| !l.is_empty()) {
        if let Some((name, rest)) = line.split_once("=>") {
            let target = rest.trim();
            if target.starts_with("not found") {
                return Err(format!("{} not found", name.trim()));
            }
            let path = target.split_whitespace().next().unwrap_or("");
            if path.starts_with('/') {
                libs.push(Library {
                    name: name.trim().to_string(),
                    path: PathBuf::from(path),
                });
            }
        } else if line.starts_with('/') {
            // The dynamic loader, listed by its absolute path.
            let path = PathBuf::from(line.split_whitespace().next().unwrap_or(line));
            let name = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            libs.push(Library { name, path });
        }
    }
    Ok(libs)
}

fn libraries_of(binary: &Path) -> Result<Vec<Library>, NestedError> {
    let ldd = find_in_path("ldd").ok_or_else(|| NestedError::Libraries {
        binary: binary.to_path_buf(),
        detail: "ldd not found".to_string(),
    })?;
    let out = Command::new(ldd)
        .arg(binary)
        .stdin(Stdio::null())
        .output()
        .map_err(io_err("run ldd"))?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    parse_ldd(&text).map_err(|detail| NestedError::Libraries {
        binary: binary.to_path_buf(),
        detail,
    })
}

/// A run directory under the system temp dir; removed on drop unless kept.
#[derive(Debug)]
struct RunDir {
    path: PathBuf,
    keep: bool,
}

impl RunDir {
    fn create() -> Result<RunDir, NestedError> {
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let path =
            std::env::temp_dir().join(format!("pmemvm-e2e-{}-{n}-{nanos:09}", std::process::id()));
        fs::create_dir_all(path.join("share").join(L1_DIR))
            .map_err(io_err(format!("create {}", path.display())))?;
        let keep = std::env::var_os("PMEMVM_TEST_KEEP").is_some_and(|v| v != "0");
        Ok(RunDir { path, keep })
    }

    fn share(&self) -> PathBuf {
        self.path.join("share")
    }

    fn l1(&self) -> PathBuf {
        self.share().join(L1_DIR)
    }

    /// Keeps the directory (for errors) and returns its path.
    fn keep(mut self) -> PathBuf {
        self.keep = true;
        self.path.clone()
    }
}

impl Drop for RunDir {
    fn drop(&mut self) {
        if !self.keep {
            let _ = fs::remove_dir_all(&self.path);
        }
    }
}

/// What a command left behind.
#[derive(Debug)]
pub struct RunOutput {
    /// Where it ran.
    pub mode: Mode,
    /// Exit status of the command (128 + signal if killed by a signal in direct mode).
    pub status: i32,
    /// Its standard output.
    pub stdout: String,
    /// Its standard error.
    pub stderr: String,
    /// The L1 serial console (empty in direct mode).
    pub l1_console: String,
    /// Host path of the share: the command's working directory, with every
    /// file it wrote. Removed when this value is dropped unless
    /// `PMEMVM_TEST_KEEP=1`.
    pub share_dir: PathBuf,
    /// Host wall time from starting QEMU (or the command) to its end.
    pub elapsed: Duration,
    /// L1 uptime when its init started the command (nested mode).
    pub l1_uptime_at_run: Option<f64>,
    /// The L1 kernel package (nested mode).
    pub l1_kernel: Option<String>,
    _run_dir: RunDir,
}

impl RunOutput {
    /// Host path of `name` in the share.
    pub fn path(&self, name: &str) -> PathBuf {
        self.share_dir.join(name)
    }

    /// Everything useful for an assertion message: status, stdout, stderr and
    /// the tail of the L1 console.
    pub fn dump(&self) -> String {
        let mut s = format!(
            "command ({}) exited with {} after {:.1?}\n--- stdout ---\n{}\n--- stderr ---\n{}\n",
            self.mode,
            self.status,
            self.elapsed,
            tail(&self.stdout, 200),
            tail(&self.stderr, 100)
        );
        if self.mode == Mode::Nested {
            let _ = write!(
                s,
                "--- L1 console (last lines) ---\n{}\n",
                tail(&self.l1_console, CONSOLE_TAIL_LINES)
            );
        }
        s
    }
}

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

#[derive(Debug)]
enum FileSource {
    Copy(PathBuf),
    Bytes(Vec<u8>),
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
    pub fn run(&self, argv: &[&str]) -> Result<RunOutput, NestedError> {
        let run_dir = RunDir::create()?;
        self.populate(&run_dir, argv)?;
        match self.mode {
            Mode::Direct => self.run_direct(run_dir),
            Mode::Nested => self.run_nested(run_dir),
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
        let waited = wait_with_deadline(child, self.deadline)?;
        let elapsed = start.elapsed();
        let stdout = fs::read_to_string(l1.join("stdout")).unwrap_or_default();
        let stderr = fs::read_to_string(l1.join("stderr")).unwrap_or_default();
        let Some(status) = waited else {
            return Err(NestedError::Deadline {
                deadline: self.deadline,
                killed_after: elapsed,
                mode: Mode::Direct,
                console: tail(&stderr, CONSOLE_TAIL_LINES),
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
        let mut cmd = Command::new(qemu);
        cmd.args(["-accel", "tcg", "-cpu", "max,vendor=AuthenticAMD"])
            .args(["-m", &format!("{}M", self.memory_mib)])
            .args(["-smp", &self.cpus.to_string()])
            .args([
                "-nodefaults",
                "-no-user-config",
                "-display",
                "none",
                "-no-reboot",
            ])
            .arg("-serial")
            .arg(format!("file:{}", console_path.display()))
            .arg("-kernel")
            .arg(&l1.vmlinuz)
            .arg("-initrd")
            .arg(&l1.initramfs)
            .args(["-append", "console=ttyS0 panic=-1 rdinit=/init"])
            .arg("-virtfs")
            .arg(format!(
                "local,path={},mount_tag=share,security_model=none",
                qemu_opt_escape(&share.to_string_lossy())
            ))
            .stdin(Stdio::null())
            .stdout(qemu_log)
            .stderr(qemu_log_err)
            .process_group(0);

        let mut guard = crate::tcg::lock().map_err(io_err("take the TCG lock"))?;
        guard.note_console(&console_path);
        let start = Instant::now();
        let child = cmd.spawn().map_err(io_err("start QEMU"))?;
        let waited = wait_with_deadline(child, self.deadline)?;
        let elapsed = start.elapsed();
        drop(guard);

        let console = fs::read_to_string(&console_path).unwrap_or_default();
        let console = console.replace('\r', "");
        let Some(qemu_status) = waited else {
            return Err(NestedError::Deadline {
                deadline: self.deadline,
                killed_after: elapsed,
                mode: Mode::Nested,
                console: tail(&console, CONSOLE_TAIL_LINES),
                run_dir: run_dir.keep(),
            });
        };
        let l1dir = run_dir.l1();
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

/// Waits for `child`; at the deadline kills its process group and returns
/// `None`.
fn wait_with_deadline(
    mut child: Child,
    deadline: Duration,
) -> Result<Option<ExitStatus>, NestedError> {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().map_err(io_err("wait for the child"))? {
            return Ok(Some(status));
        }
        if start.elapsed() >= deadline {
            kill_group(&mut child);
            let _ = child.wait();
            return Ok(None);
        }
        thread::sleep(Duration::from_millis(50));
    }
}

/// Kills the process group led by `child` (it was spawned with
/// `process_group(0)`), falling back to the child alone.
fn kill_group(child: &mut Child) {
    if let Ok(pid) = libc::pid_t::try_from(child.id()) {
        // SAFETY: kill(2) only sends a signal; -pid names the process group
        // this harness created for the child, so no unrelated process is hit.
        let rc = unsafe { libc::kill(-pid, libc::SIGKILL) };
        if rc == 0 {
            return;
        }
    }
    let _ = child.kill();
}

#[cfg(test)]
mod tests {
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
    fn escapes_qemu_options() {
        assert_eq!(qemu_opt_escape("/tmp/a,b"), "/tmp/a,,b");
    }

    #[test]
    fn tail_keeps_last_lines() {
        assert_eq!(tail("a\nb\nc\n", 2), "b\nc");
        assert_eq!(tail("a", 5), "a");
    }
}
