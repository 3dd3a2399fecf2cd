//! Why a VM could not be built or run: one sentence per cause, with what
//! the user can do, and which causes are the user's input (exit status 2).

use crate::boot::BootError;
use crate::memory::backing::{self, BackingError};
use crate::memory::placement::PlacementError;
use crate::memory::MemoryLayoutError;
use crate::vstate::cpu::CpuSetupError;
use devices::bus::BusError;

/// Errors building or running a VM.
#[derive(Debug, thiserror::Error)]
pub enum VmError {
    /// /dev/kvm missing.
    #[error("/dev/kvm does not exist: this host has no KVM (load the kvm module, or use a machine with virtualization)")]
    NoKvm,
    /// /dev/kvm not accessible.
    #[error("/dev/kvm cannot be opened: permission denied (run as root or join the 'kvm' group)")]
    KvmPermission,
    /// Other failure opening /dev/kvm.
    #[error("/dev/kvm cannot be opened: {0}")]
    KvmOpen(#[source] kvm_ioctls::Error),
    /// vCPU count above KVM's limit.
    #[error("--cpus {asked} is more than this host's KVM allows ({max}); use 1 to {max}")]
    TooManyCpus {
        /// Requested.
        asked: u8,
        /// KVM's limit.
        max: usize,
    },
    /// Too many DIMMs for memslots or the flush-hint window.
    #[error("{asked} NVDIMMs are more than pmemvm can give a guest here (at most {max})")]
    TooManyNvdimms {
        /// Requested.
        asked: usize,
        /// Limit.
        max: usize,
    },
    /// Memory layout.
    #[error(transparent)]
    Layout(#[from] MemoryLayoutError),
    /// Configuration that is only checked as a whole (e.g. NUMA nodes).
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    /// Kernel/initrd loading.
    #[error(transparent)]
    Boot(#[from] BootError),
    /// Backing files.
    #[error(transparent)]
    Backing(#[from] BackingError),
    /// A `--disk` file.
    #[error(transparent)]
    Disk(#[from] crate::disk::DiskError),
    /// The disks' view of guest memory.
    #[error(transparent)]
    DmaMemory(#[from] devices::virtio::dma::DmaError),
    /// The CXL devices.
    #[error(transparent)]
    Cxl(#[from] crate::cxl::machine::CxlSetupError),
    /// Backing files of legacy persistent memory.
    #[error(transparent)]
    LegacyBacking(#[from] backing::LegacyBackingError),
    /// A DIMM's media state (bad ranges, health, unsafe shutdown count).
    #[error(transparent)]
    Media(#[from] crate::nvdimm::media::MediaSetupError),
    /// A DIMM's flush recording (`record=`).
    #[error(transparent)]
    Record(#[from] crate::nvdimm::record::RecordError),
    /// Machine checks on poisoned loads (`mce=on`).
    #[error(transparent)]
    Mce(#[from] crate::nvdimm::mce::McError),
    /// A KVM call failed.
    #[error("KVM {step} failed: {source}")]
    Kvm {
        /// What was being done.
        step: &'static str,
        /// Cause.
        #[source]
        source: kvm_ioctls::Error,
    },
    /// vCPU setup.
    #[error(transparent)]
    Cpu(#[from] CpuSetupError),
    /// Guest RAM allocation and huge pages.
    #[error(transparent)]
    Huge(#[from] crate::memory::hugepages::HugePageError),
    /// `--pin` / `--host-node`.
    #[error(transparent)]
    Placement(#[from] PlacementError),
    /// Device wiring.
    #[error("placing devices failed: {0}")]
    Bus(#[from] BusError),
    /// ACPI tables.
    #[error("building the ACPI tables failed: {0}")]
    Acpi(String),
    /// A console or channel file that cannot be created where the user said.
    #[error("cannot create {what} {path}: {source}")]
    OutputFile {
        /// Which file ("console file", "channel file").
        what: &'static str,
        /// The path given.
        path: std::path::PathBuf,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// Host I/O (eventfds, threads).
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
}

impl crate::exit_status::Classified for VmError {
    fn kind(&self) -> crate::exit_status::ErrorKind {
        use crate::exit_status::ErrorKind::*;
        match self {
            Self::NoKvm | Self::KvmPermission | Self::TooManyCpus { .. } => Usage,
            Self::TooManyNvdimms { .. } | Self::Layout(_) | Self::OutputFile { .. } => Usage,
            Self::Config(_) => Usage,
            Self::Boot(e) => e.kind(),
            Self::Backing(e) => e.kind(),
            Self::LegacyBacking(e) => e.kind(),
            Self::Cxl(e) => e.kind(),
            Self::Media(e) => e.kind(),
            Self::Disk(e) => e.kind(),
            Self::Huge(e) => e.kind(),
            Self::Record(e) => e.kind(),
            Self::Mce(e) => e.kind(),
            Self::Placement(PlacementError::Bind { .. } | PlacementError::Affinity { .. }) => {
                Environment
            }
            Self::Placement(_) => Usage,
            _ => Environment,
        }
    }
}

impl From<crate::memory::memory_placement::MemoryPlacementError> for VmError {
    fn from(e: crate::memory::memory_placement::MemoryPlacementError) -> Self {
        use crate::memory::memory_placement::MemoryPlacementError as E;
        match e {
            E::Placement(e) => VmError::Placement(e),
            E::Huge(e) => VmError::Huge(e),
        }
    }
}

impl From<crate::acpi_setup::AcpiSetupError> for VmError {
    fn from(e: crate::acpi_setup::AcpiSetupError) -> Self {
        use crate::acpi_setup::AcpiSetupError as E;
        match e {
            E::Tables(msg) => VmError::Acpi(msg),
            E::Nodes(e) => VmError::Config(e),
            E::Bus(e) => VmError::Bus(e),
            E::Io { what, source } => VmError::Io { what, source },
        }
    }
}
