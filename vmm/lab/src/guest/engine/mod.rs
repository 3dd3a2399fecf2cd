//! The engines a guest job runs on, behind one interface: pmemvm's own VMM
//! core, QEMU with its own NVDIMM (the peer engine), and pmemvm inside a QEMU
//! TCG L1 with emulated SVM ([`crate::guest::nested`]). [`crate::guest::run`]
//! prepares the machine (kernel, initrd with the job, command line, DIMMs,
//! console and channel files) once; an engine boots it and says how it ended.

use std::path::{Path, PathBuf};
use std::time::Duration;

use vmm::host::HostKvm;
use vmm::stats::{ExitCounts, NvdimmCounts};
use vmm::vstate::vm::VmError;

use crate::guest::qemu::QemuAccel;

mod kind;
pub mod nested;
mod pmemvm;
mod qemu;
pub use kind::{with_engine_nested, Engine, Refusal, Unavailable, QEMU_PACKAGE};
pub use pmemvm::Pmemvm;
pub use qemu::Qemu;

/// Errors of an engine before or while it boots a machine.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// Building pmemvm's VM.
    #[error(transparent)]
    Vm(#[from] VmError),
    /// pmemvm's VM with its endpoints (`--gdb`, `--api`, `--dump-on-panic`).
    #[error(transparent)]
    Launch(#[from] vmm::launch::LaunchError),
    /// The engine is not usable here (e.g. QEMU missing).
    #[error(transparent)]
    Unavailable(#[from] Unavailable),
    /// An option the engine cannot honour (refused before anything boots).
    #[error(transparent)]
    Refused(#[from] Refusal),
    /// An input file cannot be read.
    #[error("cannot read {what} {path}: {source}")]
    Input {
        /// What it is.
        what: &'static str,
        /// Path.
        path: PathBuf,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// `--engine nested` could not set up its L1.
    #[error(transparent)]
    Nested(#[from] crate::guest::nested::NestedError),
    /// Host I/O.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
}

impl vmm::exit_status::Classified for EngineError {
    fn kind(&self) -> vmm::exit_status::ErrorKind {
        use vmm::exit_status::ErrorKind::*;
        match self {
            Self::Vm(e) => e.kind(),
            Self::Launch(e) => e.kind(),
            Self::Unavailable(_) | Self::Input { .. } | Self::Refused(_) => Usage,
            Self::Nested(e) => e.kind(),
            Self::Io { .. } => Environment,
        }
    }
}

/// The control socket and the panic dump of a run (engine pmemvm): `--api`
/// and `--dump-on-panic` of `boot` and `run`, checked before anything boots.
#[derive(
    Debug, Clone, Default, serde::Serialize, serde::Deserialize, PartialEq, Eq, clap::Args,
)]
pub struct RunControl {
    /// Serve the control socket at PATH (a new Unix socket, owner-only,
    /// removed at the end): `pmemvm ctl PATH stats|pause|resume|dump FILE`
    /// (docs/api.md).
    #[arg(long, value_name = "PATH")]
    pub api: Option<PathBuf>,
    /// When the guest kernel panics (it says so through the pvpanic
    /// device), write its memory and vCPU registers to FILE, a new file:
    /// an ELF core for `crash vmlinux FILE` and `drgn -c FILE`.
    #[arg(long, value_name = "FILE")]
    pub dump_on_panic: Option<PathBuf>,
}

impl RunControl {
    /// True when neither is asked for.
    pub fn is_empty(&self) -> bool {
        self.api.is_none() && self.dump_on_panic.is_none()
    }
}

/// One guest boot, as the engines see it.
#[derive(Debug)]
pub struct Machine<'a> {
    /// `--gdb ADDR` and `--gdb-wait`.
    pub gdb: Option<(&'a vmm::debug::gdb::GdbAddr, bool)>,
    /// `--gdb` and `--api`, bound once by the run: engine pmemvm serves them;
    /// an engine whose own process listens there lets them go first.
    pub endpoints: std::cell::RefCell<Option<vmm::launch::Endpoints>>,
    /// `--api` and `--dump-on-panic` (engine pmemvm).
    pub control: &'a RunControl,
    /// The guest as the core boots it: the kernel, the initrd without the
    /// job and the job's newc archive appended to it (`initrd_append`), the
    /// command line, and the machine (vCPUs, RAM, placement and devices: the
    /// user's NVDIMMs and legacy ranges, and as virtio disks the user's
    /// `--disk`s, then the root file system and the transfer disks of a
    /// command run); its console and channel are [`Self::console`] and
    /// [`Self::channel`]. Engine pmemvm boots it as it is; the others read it.
    pub config: &'a vmm::config::VmConfig,
    /// COM1 goes here (and to stdout when `stream_console`).
    pub console: &'a Path,
    /// COM2 (the job's result channel) goes here.
    pub channel: &'a Path,
    /// A scratch directory for the engine's own files.
    pub scratch: &'a Path,
    /// Show the console on stdout while the guest runs.
    pub stream_console: bool,
    /// Give up after this long.
    pub timeout: Duration,
}

impl Machine<'_> {
    /// The run's bound endpoints, taken (once); later calls get `None`.
    pub fn take_endpoints(&self) -> Option<vmm::launch::Endpoints> {
        self.endpoints.borrow_mut().take()
    }
}

/// How a boot ended, engine-independent.
#[derive(Debug, Default)]
pub struct Ended {
    /// The exit status the engine derived (guest exit code, power-off = 0),
    /// `None` when the guest did not end by itself.
    pub status: Option<u8>,
    /// Why the boot failed, if it did.
    pub error: Option<String>,
    /// "kvm" or "tcg".
    pub accelerator: String,
    /// TCG or nested: figures are functional only.
    pub functional_only: bool,
    /// VM exits by reason (pmemvm only).
    pub exits: Option<ExitCounts>,
    /// Per-DIMM flush and label counters (pmemvm only).
    pub nvdimm_stats: Vec<NvdimmCounts>,
    /// The machine with the page sizes measured behind guest memory (pmemvm only).
    pub machine: Option<vmm::host::machine::MachineDescription>,
}

/// An engine: boots a [`Machine`] to its end.
pub trait GuestEngine: std::fmt::Debug {
    /// The engine's name as reports print it.
    fn engine(&self) -> Engine;
    /// Boots the machine and waits for its end (or its timeout).
    fn boot(&self, machine: &Machine<'_>) -> Result<Ended, EngineError>;
}

/// The engine for an already resolved choice (see [`Engine::resolve`]).
pub fn for_engine(engine: Engine, kvm: &HostKvm) -> Result<Box<dyn GuestEngine>, EngineError> {
    Ok(match engine {
        Engine::Pmemvm | Engine::Auto => Box::new(pmemvm::Pmemvm { kvm: kvm.clone() }),
        Engine::Qemu => {
            let qemu = crate::guest::qemu::find_qemu().ok_or(Unavailable::NoQemu {
                engine: Engine::Qemu.name(),
            })?;
            Box::new(qemu::Qemu {
                qemu,
                accel: QemuAccel::choose(kvm),
            })
        }
        Engine::Nested => {
            let qemu = crate::guest::qemu::find_qemu().ok_or(Unavailable::NoQemu {
                engine: Engine::Nested.name(),
            })?;
            Box::new(nested::NestedEngine::new(qemu)?)
        }
    })
}

/// True when this process runs inside the nested harness's L1 (QEMU TCG guest).
pub fn in_nested_l1() -> bool {
    std::fs::read_to_string("/sys/class/dmi/id/sys_vendor")
        .map(|v| v.trim() == "QEMU")
        .unwrap_or(false)
        && std::fs::read_to_string("/proc/cpuinfo")
            .map(|c| c.contains("hypervisor"))
            .unwrap_or(false)
}
