//! `--engine nested`: pmemvm itself, inside an L1 VM with emulated SVM, for
//! hosts without hardware virtualization.
//!
//! The L1 is `qemu-system-x86_64 -accel tcg -cpu max,vendor=AuthenticAMD`:
//! QEMU emulates AMD SVM, so L1 — Debian's stock 6.1 kernel with `kvm-amd`
//! loaded — has a working `/dev/kvm`, and this same `pmemvm` binary runs
//! there with the real device model (NFIT, labels, flush hints, the `_DSM`
//! doorbell). A host directory (the *share*) is mounted at `/share` in L1 over
//! virtio-9p (`cache=mmap`), and the directory of each of the user's NVDIMM
//! backing files is mounted too, so pmemvm in L1 maps the user's files
//! themselves `MAP_SHARED`: what the guest writes is in the host file
//! afterwards, and an fdatasync in L1 (a flush hint, pmemvm's exit) becomes an
//! fsync of the host file through 9p. Everything runs under TCG: figures are
//! functional only.
//!
//! * [`prepare`]: the L1 kernel and initramfs (`guest-images/l1/`, embedded in
//!   the binary), fetched with apt and cached by input hash;
//! * [`l1`]: the L1's QEMU command line and one L1 run to its end;
//! * [`share`]: what goes into the share (binaries, the command, mounts);
//! * [`heartbeat`], [`wait`]: is the L1 still running, and the deadline loop;
//! * [`stall`]: what a stopped L1 was doing (its vCPUs over QEMU's monitor);
//!
//! The engine of `run` and `bench` and the interactive `boot` built on them is
//! [`crate::guest::engine::nested`]: this module knows nothing of engines.
//!
//! The nested test harness (`tests/src/nested/`) is built on the same pieces.

use std::path::PathBuf;

pub mod doors;
pub(crate) mod gdb;
pub mod heartbeat;
pub mod l1;
pub mod l1_run;
pub(crate) mod placement;
pub mod prepare;
pub mod share;
pub mod stall;
pub mod wait;

pub use l1::{L1Options, Mount};
pub use l1_run::{L1Failure, L1Run};
pub use prepare::{cache_dir, missing_tool_packages, prepare_l1, L1Image};

/// Console line printed by the L1 init with the command's exit status.
pub const STATUS_MARKER: &str = "PMEMVM-L1-STATUS";
/// Console line printed by the L1 init when its own setup fails.
pub const ERROR_MARKER: &str = "PMEMVM-L1-ERROR";
/// Console line printed by the L1 init just before it runs the command.
pub const RUN_MARKER: &str = "PMEMVM-L1-RUN";
/// Console line printed by the L1 init when it starts.
pub const INIT_MARKER: &str = "PMEMVM-L1-INIT";
/// Console line the L1 init prints every few seconds while it lives (left
/// out of the console text a run returns).
pub const ALIVE_MARKER: &str = "PMEMVM-L1-ALIVE";
/// The share's directory for the L1 init (`/share/.l1` in L1).
pub const L1_DIR: &str = ".l1";
/// Lines of the L1 console shown in errors.
pub const CONSOLE_TAIL_LINES: usize = 60;

/// Errors of `--engine nested` before its L1 runs.
#[derive(Debug, thiserror::Error)]
pub enum NestedError {
    /// A tool the L1 preparation needs is not installed.
    #[error("--engine nested cannot prepare its L1 VM: {detail}; install it (./pmemvm does) or use --engine qemu")]
    MissingTool {
        /// What prepare.sh said, with the Debian package.
        detail: String,
    },
    /// The L1 preparation failed (offline, no kernel package, a module missing).
    #[error("--engine nested could not prepare its L1 VM: {message}")]
    Prepare {
        /// The last line prepare.sh printed.
        message: String,
        /// Everything it printed on stderr.
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
    /// An option the nested engine cannot honour.
    #[error("{0} is not available with --engine nested (pmemvm runs inside the L1 VM there); drop it or use --engine pmemvm on a host with hardware virtualization")]
    Unsupported(&'static str),
    /// A backing file whose directory cannot be shared into the L1.
    #[error("--nvdimm file={}: {why}", file.display())]
    BackingFile {
        /// The file.
        file: PathBuf,
        /// What is wrong.
        why: String,
    },
    /// `$PMEMVM_HOST_CPUS` is not a CPU count.
    #[error(transparent)]
    HostCpus(#[from] crate::guest::host_cpus::HostCpusError),
    /// The L1 did not run the command to its end.
    #[error(transparent)]
    L1(#[from] L1Failure),
    /// Host I/O.
    #[error("cannot {what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
}

impl vmm::exit_status::Classified for NestedError {
    fn kind(&self) -> vmm::exit_status::ErrorKind {
        use vmm::exit_status::ErrorKind::*;
        match self {
            Self::MissingTool { .. }
            | Self::Unsupported(_)
            | Self::BackingFile { .. }
            | Self::HostCpus(_) => Usage,
            _ => Environment,
        }
    }
}

pub(crate) fn io_err(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> NestedError {
    let what = what.into();
    move |source| NestedError::Io { what, source }
}

/// A program on `PATH`.
pub fn find_in_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}
