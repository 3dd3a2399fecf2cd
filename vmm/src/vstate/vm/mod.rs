//! Building a VM from a validated [`VmConfig`]; running it is
//! [`crate::vstate::run_loop`], its vCPU threads [`crate::vstate::vcpu`].
//!
//! Order matters for the "nothing changed on disk" promise: everything that
//! can be checked without touching the user's files (KVM, sizes, layout,
//! kernel and initrd) is checked before any backing file is created, and a
//! file created here is removed again if a later step fails.

mod attach;
mod builder;
mod buses;
mod error;
mod outputs;

pub use error::VmError;

use std::sync::{Arc, Mutex};

use devices::bus::Bus;
use devices::exit::{ExitNotifier, ExitRequest};
use devices::platform_events::PlatformEvents;
use kvm_bindings::{kvm_userspace_memory_region, KVM_MEM_READONLY};
use kvm_ioctls::{Kvm, VcpuFd, VmFd};
use vm_memory::GuestMemoryMmap;

use crate::host::HostKvm;
use crate::memory::placement::Placement;
use crate::stats::{ExitCounts, ExitStats, NvdimmCounts};

fn io_err(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> VmError {
    let what = what.into();
    move |source| VmError::Io { what, source }
}

fn kvm_err(step: &'static str) -> impl FnOnce(kvm_ioctls::Error) -> VmError {
    move |source| VmError::Kvm { step, source }
}

pub use crate::nvdimm::dimm::{LegacyPmem, Nvdimm};

/// How a VM ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunOutcome {
    /// The exit request that ended it.
    pub reason: ExitRequest,
    /// Exit counters.
    pub exits: ExitCounts,
    /// Per-DIMM counters.
    pub nvdimms: Vec<NvdimmCounts>,
    /// A sentence explaining why the host cannot run this guest, when that is the likely cause.
    pub host_hint: Option<String>,
    /// The host, the placement and the page sizes that backed guest memory.
    pub machine: crate::host::machine::MachineDescription,
    /// When the watchdog ended the run: one sentence per vCPU saying where it was
    /// (`crate::vstate::vcpu_status`).
    pub vcpus: Vec<String>,
}

/// A VM ready to run.
pub struct Vm {
    pub(crate) vm_fd: Arc<VmFd>,
    pub(crate) mem: GuestMemoryMmap,
    pub(crate) nvdimms: Vec<Nvdimm>,
    pub(crate) legacy_pmem: Vec<LegacyPmem>,
    /// The CXL devices (`--cxl-pmem`).
    pub(crate) cxl: Option<crate::cxl::machine::CxlMachine>,
    pub(crate) vcpus: Vec<VcpuFd>,
    pub(crate) pio: Arc<Bus>,
    pub(crate) mmio: Arc<Bus>,
    pub(crate) exit: Arc<ExitNotifier>,
    pub(crate) stats: Arc<ExitStats>,
    pub(crate) serial: buses::SerialPorts,
    pub(crate) host: HostKvm,
    pub(crate) dsm: Option<Arc<devices::nvdimm_dsm::DsmHandler>>,
    /// The platform event register and line (with a DIMM): the control
    /// socket's notifications to the guest.
    pub(crate) events: Option<Arc<PlatformEvents>>,
    pub(crate) placement: Placement,
    /// The kernel file (its symbols name a stuck vCPU's RIP).
    pub(crate) kernel: std::path::PathBuf,
    /// The virtio disks, for their counters.
    pub(crate) disks: Vec<crate::disk::AttachedDisk>,
    /// Their I/O threads, stopped before the exit fdatasync.
    pub(crate) disk_threads: Vec<devices::virtio::queues::IoThread>,
    /// The memory policy vCPU 0's thread runs with (for the run's record).
    pub(crate) vcpu_policy: Arc<Mutex<String>>,
    /// The debugger's endpoint (`--gdb`), served while the VM runs.
    pub(crate) gdb: Option<crate::debug::gdb::GdbListener>,
    /// The control socket (`--api`), served while the VM runs.
    pub(crate) api: Option<crate::api::ApiListener>,
    /// Where a guest panic's dump goes (`--dump-on-panic`).
    pub(crate) dump_on_panic: Option<std::path::PathBuf>,
    /// The guest's CPU vendor when a DIMM has `mce=on`.
    pub(crate) mce_vendor: Option<crate::nvdimm::mce::deliver::Vendor>,
    /// The pvpanic device.
    pub(crate) pvpanic: Arc<crate::pvpanic::PvPanic>,
    /// Room for NVDIMMs hot-added while the guest runs (`--nvdimm-slots`).
    pub(crate) hotplug: Option<Arc<crate::nvdimm::hotplug::NvdimmHotplug>>,
    /// Where vCPUs and devices stop while a recording takes an epoch.
    pub(crate) epoch_gate: Option<Arc<crate::nvdimm::record::instant::EpochGate>>,
    /// The vCPU threads, to kick.
    pub(crate) vcpu_threads: Arc<crate::vstate::vcpu_threads::VcpuThreads>,
    /// RAM and every NVDIMM and legacy range (hot-added ones too), as the
    /// devices and a dump with `--nvdimms` read them.
    pub(crate) dma_view: devices::virtio::dma::DmaView,
    /// An Intel guest's machine checks reach every vCPU (several vCPUs).
    pub(crate) mce_broadcast: Option<Arc<crate::nvdimm::mce::broadcast::McBroadcast>>,
}

impl std::fmt::Debug for Vm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Vm")
            .field("vcpus", &self.vcpus.len())
            .field("nvdimms", &self.nvdimms)
            .finish_non_exhaustive()
    }
}

fn open_kvm() -> Result<Kvm, VmError> {
    if !std::path::Path::new("/dev/kvm").exists() {
        return Err(VmError::NoKvm);
    }
    Kvm::new().map_err(|e| match e.errno() {
        libc::EACCES | libc::EPERM => VmError::KvmPermission,
        libc::ENOENT => VmError::NoKvm,
        _ => VmError::KvmOpen(e),
    })
}

/// `KVM_MEM_READONLY` for a read-only mapping.
fn readonly_flag(readonly: bool) -> u32 {
    match readonly {
        true => KVM_MEM_READONLY,
        false => 0,
    }
}

/// Registers a host mapping as guest memory.
fn add_memslot(
    vm: &VmFd,
    slot: u32,
    guest: u64,
    host: *mut u8,
    size: u64,
    flags: u32,
) -> Result<(), VmError> {
    let region = kvm_userspace_memory_region {
        slot,
        flags,
        guest_phys_addr: guest,
        memory_size: size,
        userspace_addr: host as u64,
    };
    // SAFETY: `host..host+size` is a live mapping owned by the `Vm` (guest RAM
    // or an NVDIMM `MmapRegion`), kept alive as long as the VM fd exists; the
    // guest range does not overlap another slot (layout module).
    unsafe { vm.set_user_memory_region(region) }.map_err(kvm_err("memory slot registration"))
}

impl Vm {
    /// The exit notifier (devices, vCPUs and the event loop post to it;
    /// a caller may post a request to end the VM from another thread).
    pub fn exit_notifier(&self) -> Arc<ExitNotifier> {
        self.exit.clone()
    }

    /// The NVDIMMs.
    pub fn nvdimms(&self) -> &[Nvdimm] {
        &self.nvdimms
    }

    /// The virtio disks, in `--disk` order.
    pub fn disks(&self) -> &[crate::disk::AttachedDisk] {
        &self.disks
    }

    /// The legacy persistent-memory ranges (E820 type 12).
    pub fn legacy_pmem(&self) -> &[LegacyPmem] {
        &self.legacy_pmem
    }

    /// Serves a debugger at `listener` while the VM runs (`--gdb`).
    pub fn attach_gdb(&mut self, listener: crate::debug::gdb::GdbListener) {
        self.gdb = Some(listener);
    }

    /// Serves the control socket at `listener` while the VM runs (`--api`).
    pub fn attach_api(&mut self, listener: crate::api::ApiListener) {
        self.api = Some(listener);
    }

    /// Writes the guest's memory to `path` when the guest kernel panics
    /// (`--dump-on-panic`); `path` must not exist (checked now and again at
    /// the panic).
    pub fn dump_on_panic(
        &mut self,
        path: std::path::PathBuf,
    ) -> Result<(), crate::debug::dump::DumpError> {
        crate::debug::dump::check_new_file(&path)?;
        self.dump_on_panic = Some(path);
        Ok(())
    }

    /// Guest RAM.
    pub fn memory(&self) -> &GuestMemoryMmap {
        &self.mem
    }

    /// The VM fd (for tests and tools).
    pub fn vm_fd(&self) -> &VmFd {
        &self.vm_fd
    }
}
