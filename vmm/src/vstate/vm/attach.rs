//! The devices step of [`super::Vm::build`]: the platform devices on the
//! buses, the devices' view of guest memory, the virtio disks, the GED, the
//! ACPI tables and the room for hot-added DIMMs.

use std::sync::Arc;

use devices::exit::ExitNotifier;
use devices::platform_events::PlatformEvents;
use kvm_ioctls::VmFd;
use vm_memory::GuestMemoryMmap;

use super::{buses, io_err, VmError};
use crate::config::VmConfig;
use crate::layout;
use crate::memory::RamRegion;
use crate::nvdimm::dimm::{LegacyPmem, Nvdimm};

/// The devices and what the VM keeps of them.
pub(super) struct Devices {
    pub(super) pio: devices::bus::Bus,
    pub(super) mmio: devices::bus::Bus,
    pub(super) serial: buses::SerialPorts,
    pub(super) exit: Arc<ExitNotifier>,
    pub(super) dma_view: devices::virtio::dma::DmaView,
    pub(super) disks: Vec<crate::disk::AttachedDisk>,
    pub(super) disk_threads: Vec<devices::virtio::queues::IoThread>,
    pub(super) events: Option<Arc<PlatformEvents>>,
    pub(super) dsm: Option<Arc<devices::nvdimm_dsm::DsmHandler>>,
    pub(super) hotplug: Option<Arc<crate::nvdimm::hotplug::NvdimmHotplug>>,
}

/// What the devices take of the machine's plan: its RAM, its NVDIMM slots
/// (boot DIMMs and empty ones) and the guest's address width.
pub(super) struct Room<'a> {
    pub(super) ram: &'a [RamRegion],
    pub(super) slots: usize,
    pub(super) phys_bits: u8,
    /// The CXL devices' windows (hot-added DIMMs go above them).
    pub(super) cxl: &'a crate::cxl::CxlPlatform,
}

/// The memory the machine has mapped so far, for the devices.
pub(super) struct Mapped<'a> {
    pub(super) mem: &'a GuestMemoryMmap,
    pub(super) nvdimms: &'a [Nvdimm],
    pub(super) legacy_pmem: &'a [LegacyPmem],
    /// The next free memory slot (a hot-added DIMM's).
    pub(super) next_slot: u32,
}

/// The platform devices, the disks, the GED, the ACPI tables and the room
/// for hot-added DIMMs.
pub(super) fn attach_devices(
    vm_fd: &Arc<VmFd>,
    config: &VmConfig,
    plan: &Room<'_>,
    mapped: &Mapped<'_>,
    open_disks: Vec<crate::disk::OpenDisk>,
) -> Result<Devices, VmError> {
    let exit = Arc::new(ExitNotifier::new().map_err(io_err("creating the exit eventfd"))?);
    let irq = |gsi: u32| buses::irq_line(vm_fd, gsi);
    let buses::Buses {
        mut pio,
        mut mmio,
        serial,
        flush,
    } = buses::platform(config, vm_fd, &exit, (mapped.nvdimms, plan.slots))?;
    let dma_view = dma_view(mapped)?;
    let (disks, disk_threads) = attach_disks(vm_fd, &dma_view, &mut mmio, open_disks)?;
    // The GED's line and register, when there is a DIMM to notify about.
    let events = match plan.slots {
        0 => None,
        _ => Some(Arc::new(PlatformEvents::new(irq(
            layout::PLATFORM_EVENT_GSI,
        )?))),
    };
    let installed = crate::acpi_setup::install(
        config.machine.cpus,
        plan.ram,
        mapped.mem,
        (mapped.nvdimms, plan.slots, events.clone()),
        (disks.len(), plan.cxl.description()),
        &mut pio,
    )?;
    // Empty slots: what a hot-add needs, above everything mapped now.
    let mapped_pmem = mapped
        .nvdimms
        .iter()
        .map(|n| (n.base, n.size()))
        .chain(
            mapped
                .legacy_pmem
                .iter()
                .map(|l| (l.base, l.mapping.size() as u64)),
        )
        .chain(
            plan.cxl
                .devices
                .iter()
                .map(|d| (d.window.base, d.window.size)),
        );
    let hotplug =
        crate::nvdimm::hotplug::NvdimmHotplug::for_machine(crate::nvdimm::hotplug::HotplugParts {
            vm_fd: vm_fd.clone(),
            slots: plan.slots,
            phys_bits: plan.phys_bits,
            host_node: config.machine.placement.host_node,
            described: installed.nvdimms,
            next_memslot: mapped.next_slot,
            top: crate::nvdimm::hotplug::top_of(plan.ram, mapped_pmem),
            dsm: installed.dsm.clone(),
            events: events.clone(),
            flush,
            dma: dma_view.clone(),
        });
    Ok(Devices {
        pio,
        mmio,
        serial,
        exit,
        dma_view,
        disks,
        disk_threads,
        events,
        dsm: installed.dsm,
        hotplug,
    })
}

/// What devices may read and write: RAM, the NVDIMMs and the legacy ranges
/// (DMA to and from DAX pages); a disk's write into a recorded DIMM is a store
/// its recording sees.
fn dma_view(mapped: &Mapped<'_>) -> Result<devices::virtio::dma::DmaView, VmError> {
    let pmem = mapped
        .nvdimms
        .iter()
        .map(|n| (n.base, &n.mapping))
        .chain(mapped.legacy_pmem.iter().map(|l| (l.base, &l.mapping)));
    let view = crate::memory::dma_memory::with_pmem(mapped.mem, pmem)?;
    for n in mapped.nvdimms {
        if let Some(r) = &n.recorder {
            view.watch(n.base, n.size(), r.clone());
        }
    }
    Ok(view)
}

/// The virtio disks on the MMIO bus, each with its interrupt line and its
/// queue-notify eventfd registered with KVM.
fn attach_disks(
    vm_fd: &VmFd,
    dma: &devices::virtio::dma::DmaView,
    mmio: &mut devices::bus::Bus,
    open_disks: Vec<crate::disk::OpenDisk>,
) -> Result<
    (
        Vec<crate::disk::AttachedDisk>,
        Vec<devices::virtio::queues::IoThread>,
    ),
    VmError,
> {
    let wiring = crate::disk::Wiring {
        irq: |gsi| buses::irq_line(vm_fd, gsi).map_err(|e| e.to_string()),
        notify: |addr, kick: &vmm_sys_util::eventfd::EventFd| {
            vm_fd
                .register_ioevent(
                    kick,
                    &kvm_ioctls::IoEventAddress::Mmio(addr),
                    kvm_ioctls::NoDatamatch,
                )
                .map_err(|e| e.to_string())
        },
    };
    Ok(crate::disk::attach_all(open_disks, dma, mmio, wiring)?)
}
