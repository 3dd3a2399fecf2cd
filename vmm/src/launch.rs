//! One VM as a value ([`Launch`]): the validated machine and its endpoints,
//! built and run by [`run`], in this process or — by [`hand_over`] — in the
//! core-only executable `pmemvm-vm` that `pmemvm boot` replaces itself with.
//!
//! Why a second executable: the VM's process keeps every page of its
//! program that start-up touched, and the kernel maps a file's cached pages
//! 64 KiB around each one that faults (fault-around). The `pmemvm` program
//! also holds the CLI, the lab's experiments and reports (5.7 MB of code), so
//! a tiny guest's VMM kept 3.5 MiB of program text resident; `pmemvm-vm`
//! holds only this crate and what it needs (the figures: docs/performance.md,
//! "Current figures").

use std::io::{Read, Seek, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::api::ApiListener;
use crate::config::VmConfig;
use crate::debug::gdb::{GdbAddr, GdbListener};
use crate::exit_status;
use crate::vstate::run_loop::RunOptions;
use crate::vstate::vm::{Vm, VmError};

/// The core-only executable's file name, beside `pmemvm`.
pub const CORE_EXECUTABLE: &str = "pmemvm-vm";

/// Its one option: the descriptor holding the [`Launch`] (its JSON on one
/// line, then the initrd's appended bytes).
pub const LAUNCH_FD_OPTION: &str = "--launch-fd";

/// Everything one VM needs, checked by the caller: the machine, its
/// debugger, control socket and panic dump, its timeout.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Launch {
    /// The machine and what it boots.
    pub config: VmConfig,
    /// `--gdb ADDR` and `--gdb-wait`.
    pub gdb: Option<(GdbAddr, bool)>,
    /// `--api PATH`.
    pub api: Option<PathBuf>,
    /// `--dump-on-panic FILE`.
    pub dump_on_panic: Option<PathBuf>,
    /// End the guest after this long.
    pub timeout: Option<Duration>,
    /// The log filter of the process that prepared it (`warn`, `info`, ...).
    pub log_filter: String,
    /// When the user's command started (CLOCK_MONOTONIC, ns): the reference
    /// of the startup figures across the hand-over.
    pub started_ns: Option<u64>,
}

/// Errors of building a VM with its endpoints.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    /// Building or running the VM.
    #[error(transparent)]
    Vm(#[from] VmError),
    /// The debugger's endpoint.
    #[error(transparent)]
    Gdb(#[from] crate::debug::gdb::GdbError),
    /// The control socket.
    #[error(transparent)]
    Api(#[from] crate::api::ApiError),
    /// The panic dump's file.
    #[error(transparent)]
    Dump(#[from] crate::debug::dump::DumpError),
    /// The hand-over to the core executable.
    #[error("cannot hand the VM over to {}: {source}", exe.display())]
    HandOver {
        /// The executable.
        exe: PathBuf,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// What the core executable was given is not a launch.
    #[error("the launch description on descriptor {fd} is not valid: {why}")]
    BadLaunch {
        /// The descriptor.
        fd: i32,
        /// Why.
        why: String,
    },
}

impl crate::exit_status::Classified for LaunchError {
    fn kind(&self) -> crate::exit_status::ErrorKind {
        use crate::exit_status::ErrorKind::*;
        match self {
            Self::Vm(e) => e.kind(),
            Self::Gdb(e) => e.kind(),
            Self::Api(e) => e.kind(),
            Self::Dump(e) => e.kind(),
            Self::HandOver { .. } => Environment,
            Self::BadLaunch { .. } => Internal,
        }
    }
}

/// A VM's doors, bound: the debugger's listener and the control socket.
/// Bound once, before anything is built (a busy port or an existing path
/// stops the run there), and handed to the VM.
#[derive(Debug, Default)]
pub struct Endpoints {
    /// `--gdb`.
    pub gdb: Option<GdbListener>,
    /// `--api`.
    pub api: Option<ApiListener>,
}

impl Endpoints {
    /// Binds `--gdb ADDR` (with `--gdb-wait`) and `--api PATH`.
    pub fn bind(gdb: Option<(&GdbAddr, bool)>, api: Option<&Path>) -> Result<Self, LaunchError> {
        Ok(Self {
            gdb: gdb
                .map(|(addr, wait)| GdbListener::bind(addr, wait))
                .transpose()?,
            api: api.map(ApiListener::bind).transpose()?,
        })
    }
}

/// Checks the dump file and builds the VM with the bound endpoints attached.
pub fn build(
    config: &VmConfig,
    endpoints: Endpoints,
    dump_on_panic: Option<&Path>,
) -> Result<Vm, LaunchError> {
    if let Some(f) = dump_on_panic {
        crate::debug::dump::check_new_file(f)?;
    }
    let mut vm = Vm::build(config)?;
    if let Some(listener) = endpoints.gdb {
        vm.attach_gdb(listener);
    }
    if let Some(listener) = endpoints.api {
        vm.attach_api(listener);
    }
    if let Some(f) = dump_on_panic {
        vm.dump_on_panic(f.to_path_buf())?;
    }
    Ok(vm)
}

/// Builds and runs the VM in this process, logs how it ended and returns
/// the exit status (the guest's, or what ended it).
pub fn run(l: &Launch) -> Result<u8, LaunchError> {
    let endpoints = Endpoints::bind(l.gdb.as_ref().map(|(a, wait)| (a, *wait)), l.api.as_deref())?;
    let vm = build(&l.config, endpoints, l.dump_on_panic.as_deref())?;
    let outcome = vm.run_with(RunOptions {
        timeout: l.timeout,
        ..RunOptions::default()
    })?;
    let status = exit_status::for_request(&outcome.reason);
    log::info!("VM exits: {:?}", outcome.exits);
    for n in &outcome.nvdimms {
        let mce = n
            .machine_checks
            .map(|k| format!(", {k} machine checks"))
            .unwrap_or_default();
        log::info!(
            "NVDIMM {}: {} flushes, {} label calls{mce}",
            n.file,
            n.flushes,
            n.label_calls
        );
    }
    match &outcome.reason {
        devices::exit::ExitRequest::PowerOff | devices::exit::ExitRequest::GuestExit(_) => {
            log::info!("{}", exit_status::describe(&outcome.reason));
        }
        other => {
            eprintln!(
                "pmemvm: {} (exit status {status})",
                exit_status::describe(other)
            );
            if let Some(hint) = &outcome.host_hint {
                eprintln!("pmemvm: {hint}");
            }
            for v in &outcome.vcpus {
                eprintln!("pmemvm: {v}");
            }
        }
    }
    Ok(status)
}

/// The core executable beside this program, if it is there.
pub fn core_executable() -> Option<PathBuf> {
    let exe = std::env::current_exe()
        .ok()?
        .with_file_name(CORE_EXECUTABLE);
    exe.is_file().then_some(exe)
}

/// Runs the VM in `exe` (the core executable), replacing this process — same
/// pid, terminal, signals and exit status — and returns only when the
/// hand-over failed. The launch travels in an unlinked memory file.
pub fn hand_over(l: &Launch, exe: &Path) -> LaunchError {
    use std::os::unix::process::CommandExt;
    let err = |source| LaunchError::HandOver {
        exe: exe.to_path_buf(),
        source,
    };
    let fd = match launch_file(l) {
        Ok(fd) => fd,
        Err(e) => return err(e),
    };
    let e = std::process::Command::new(exe)
        .arg(LAUNCH_FD_OPTION)
        .arg(fd.as_raw_fd().to_string())
        .exec();
    err(e)
}

/// A memory file (kept open across exec) holding the launch, at offset 0:
/// its JSON on one line, then the initrd's appended bytes raw.
fn launch_file(l: &Launch) -> std::io::Result<OwnedFd> {
    let mut json = serde_json::to_vec(l).map_err(std::io::Error::other)?;
    json.push(b'\n');
    // SAFETY: the name is a NUL-terminated literal; memfd_create returns a new
    // descriptor or -1 and touches no memory of ours otherwise.
    let raw = unsafe { libc::memfd_create(c"pmemvm-launch".as_ptr(), 0) };
    if raw < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `raw` is a descriptor just created and owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    let mut file = std::fs::File::from(fd);
    file.write_all(&json)?;
    file.write_all(&l.config.initrd_append)?;
    file.rewind()?;
    Ok(OwnedFd::from(file))
}

/// In the core executable: reads the launch from descriptor `fd` (taking it over).
pub fn read_launch(fd: i32) -> Result<Launch, LaunchError> {
    let bad = |why: String| LaunchError::BadLaunch { fd, why };
    // The descriptor must be an open one this process owns: the parent passed it.
    // SAFETY: F_GETFD only queries the descriptor table.
    if fd < 3 || unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0 {
        return Err(bad("it is not an open descriptor above 2".into()));
    }
    // SAFETY: `fd` is open (checked above) and nothing else in this process uses it.
    let mut file = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) });
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)
        .map_err(|e| bad(e.to_string()))?;
    let Some(end) = bytes.iter().position(|&b| b == b'\n') else {
        return Err(bad("it has no line of JSON".into()));
    };
    let mut launch: Launch =
        serde_json::from_slice(&bytes[..end]).map_err(|e| bad(e.to_string()))?;
    launch.config.initrd_append = bytes.split_off(end + 1);
    Ok(launch)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{ConsoleMode, MachineSpec};
    use crate::exit_status::Classified;

    fn launch() -> Launch {
        Launch {
            config: VmConfig {
                machine: MachineSpec::default(),
                kernel: "/k".into(),
                initrd: Some("/i".into()),
                // Raw bytes, newlines among them, beside the JSON line.
                initrd_append: (0..=255u8).cycle().take(1 << 20).collect(),
                cmdline: "console=ttyS0 a=\"b\nc\"".into(),
                console: ConsoleMode::StdioAndFile("/c".into()),
                channel: None,
            },
            gdb: Some((GdbAddr::parse("127.0.0.1:1234").unwrap(), true)),
            api: Some("/run/api.sock".into()),
            dump_on_panic: None,
            timeout: Some(Duration::from_millis(1500)),
            log_filter: "info".into(),
            started_ns: Some(7),
        }
    }

    #[test]
    fn a_launch_read_back_from_its_memory_file_is_the_same_launch() {
        let l = launch();
        let fd = launch_file(&l).unwrap();
        let raw = std::os::fd::IntoRawFd::into_raw_fd(fd);
        assert_eq!(read_launch(raw).unwrap(), l);
    }

    #[test]
    fn a_descriptor_that_is_not_open_or_not_a_launch_is_refused_by_number() {
        let e = read_launch(1_000_000).unwrap_err();
        assert!(e.to_string().contains("descriptor 1000000"), "{e}");
        assert!(!e.is_usage());
        let raw = std::os::fd::IntoRawFd::into_raw_fd(memory_file_with(b"{\"config\":"));
        let e = read_launch(raw).unwrap_err();
        assert!(e.to_string().contains("is not valid"), "{e}");
    }

    fn memory_file_with(bytes: &[u8]) -> OwnedFd {
        // SAFETY: as in launch_file.
        let raw = unsafe { libc::memfd_create(c"t".as_ptr(), 0) };
        assert!(raw >= 0);
        // SAFETY: a new descriptor owned by nobody else.
        let mut f = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(raw) });
        f.write_all(bytes).unwrap();
        f.rewind().unwrap();
        OwnedFd::from(f)
    }

    #[test]
    fn a_missing_core_executable_hands_over_nothing_and_says_which_file() {
        let e = hand_over(&launch(), Path::new("/nonexistent/pmemvm-vm"));
        assert!(e.to_string().contains("/nonexistent/pmemvm-vm"), "{e}");
    }
}
