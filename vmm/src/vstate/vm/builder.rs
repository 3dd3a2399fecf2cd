//! [`Vm::build`] in named steps, in the order the module docs promise:
//! [`Plan::check`] settles everything that needs no file (KVM, sizes, layout,
//! placement, kernel format); then the VM and its RAM, the kernel, the output
//! paths; only then the user's files (legacy ranges, NVDIMMs), the devices and
//! the vCPUs. A step that fails drops what the earlier ones made, and a backing
//! file created here goes with it.

use std::sync::Arc;

use devices::exit::ExitNotifier;
use devices::nvdimm::FlushStats;
use devices::platform_events::PlatformEvents;
use kvm_bindings::{
    kvm_pit_config, CpuId, KVM_MAX_CPUID_ENTRIES, KVM_MEM_LOG_DIRTY_PAGES, KVM_PIT_SPEAKER_DUMMY,
};
use kvm_ioctls::{Kvm, VcpuFd, VmFd};
use vm_memory::{Address, GuestAddress, GuestMemoryBackend, GuestMemoryMmap, GuestMemoryRegion};

use super::outputs::check_output;
use super::{add_memslot, buses, io_err, kvm_err, open_kvm, readonly_flag, Vm, VmError};
use crate::boot::{self, BootInputs, EntryPoint};
use crate::config::VmConfig;
use crate::host::HostKvm;
use crate::layout;
use crate::memory::backing::{self, NvdimmBacking};
use crate::memory::{self, RamRegion};
use crate::memory::{hugepages, placement};
use crate::nvdimm::dimm::{LegacyPmem, Nvdimm};
use crate::nvdimm::mce::deliver::Vendor;
use crate::nvdimm::record::instant::EpochGate;
use crate::stats::ExitStats;
use crate::vstate::cpu;
use crate::vstate::vcpu_threads::VcpuThreads;

/// What the checks before anything is created settle.
struct Plan {
    /// The CPUID the vCPUs get (patched for machine checks with `mce=on`).
    cpuid: CpuId,
    mce: MachineChecks,
    /// How many DIMMs have `mce=on`.
    mce_dimms: usize,
    /// The guest's physical address width.
    phys_bits: u8,
    ram: Vec<RamRegion>,
    /// NVDIMM slots: the boot DIMMs and the empty ones (`--nvdimm-slots`).
    slots: usize,
    /// Each boot DIMM's base.
    dimm_bases: Vec<u64>,
    /// Each legacy range (base, length).
    legacy: Vec<(u64, u64)>,
}

impl Plan {
    /// Everything that can be checked without creating anything.
    fn check(kvm: &Kvm, config: &VmConfig) -> Result<Self, VmError> {
        let machine = &config.machine;
        let max_cpus = kvm.get_max_vcpus();
        if usize::from(machine.cpus) > max_cpus || machine.cpus == 0 {
            return Err(VmError::TooManyCpus {
                asked: machine.cpus,
                max: max_cpus,
            });
        }
        let (cpuid, mce, mce_dimms) = guest_cpuid(kvm, config)?;
        // The guest gets this CPUID, so its address width bounds the DIMMs.
        let phys_bits = memory::phys_addr_bits(cpuid.as_slice());
        let layout_map = memory::machine_layout(machine, phys_bits)?;
        let slots_max = kvm.get_nr_memslots().saturating_sub(layout_map.ram.len());
        let dimm_max = slots_max.min(usize::try_from(layout::NVDIMM_FLUSH_HINT_MAX).unwrap_or(0));
        // Legacy ranges take memslots too (they have no flush-hint page).
        let dimm_max = dimm_max.min(slots_max.saturating_sub(machine.legacy_pmem.len()));
        // Empty slots count: each may take a memslot and has its flush-hint page.
        let slots = machine.slots();
        if slots > dimm_max {
            return Err(VmError::TooManyNvdimms {
                asked: slots,
                max: dimm_max,
            });
        }
        backing::legacy::check_paths(&machine.legacy_pmem, &machine.nvdimms)?;
        crate::config::resolve_nodes(&machine.nvdimms)?;
        crate::memory::memory_placement::check_host_placement(
            machine.cpus,
            &machine.memory_spec(),
            &machine.placement,
            &machine.nvdimms,
        )?;
        boot::detect_format(&config.kernel)?;
        Ok(Self {
            cpuid,
            mce,
            mce_dimms,
            phys_bits,
            ram: layout_map.ram,
            slots,
            dimm_bases: layout_map.nvdimms.iter().map(|&(b, _)| b).collect(),
            legacy: layout_map.legacy,
        })
    }
}

/// With an `mce=on` DIMM: the guest's vendor and the banks' capability.
type MachineChecks = Option<(Vendor, u64)>;

/// KVM's CPUID, with machine checks to recover when a DIMM has `mce=on`;
/// and how many DIMMs have it.
fn guest_cpuid(kvm: &Kvm, config: &VmConfig) -> Result<(CpuId, MachineChecks, usize), VmError> {
    let mut cpuid = kvm
        .get_supported_cpuid(KVM_MAX_CPUID_ENTRIES)
        .map_err(kvm_err("supported CPUID query"))?;
    let mce_dimms = config.machine.nvdimms.iter().filter(|n| n.mce).count();
    let mce = match mce_dimms {
        0 => None,
        _ => {
            let vendor = Vendor::of(&cpuid);
            crate::nvdimm::mce::deliver::patch_cpuid(&mut cpuid, vendor);
            Some((vendor, crate::nvdimm::mce::deliver::mcg_cap(kvm)?))
        }
    };
    Ok((cpuid, mce, mce_dimms))
}

/// The VM with its TSS, interrupt controller and PIT.
fn create_vm(kvm: &Kvm) -> Result<Arc<VmFd>, VmError> {
    let vm_fd = Arc::new(kvm.create_vm().map_err(kvm_err("VM creation"))?);
    vm_fd
        .set_tss_address(0xfffb_d000)
        .map_err(kvm_err("TSS address"))?;
    vm_fd
        .create_irq_chip()
        .map_err(kvm_err("IRQ chip creation"))?;
    vm_fd
        .create_pit2(kvm_pit_config {
            flags: KVM_PIT_SPEAKER_DUMMY,
            ..Default::default()
        })
        .map_err(kvm_err("PIT creation"))?;
    Ok(vm_fd)
}

/// Guest RAM, bound to `--host-node` and registered from memory slot `*slot` on.
fn map_ram(
    vm_fd: &VmFd,
    config: &VmConfig,
    ram: &[RamRegion],
    slot: &mut u32,
) -> Result<GuestMemoryMmap, VmError> {
    let ranges: Vec<(GuestAddress, usize)> = ram
        .iter()
        .map(|&(a, l)| (GuestAddress(a), usize::try_from(l).unwrap_or(usize::MAX)))
        .collect();
    let mem = hugepages::guest_ram(&ranges, config.machine.ram_pages)?;
    for region in mem.iter() {
        let host = mem
            .get_host_address(region.start_addr())
            .map_err(|_| VmError::Acpi("guest RAM has no host mapping".into()))?;
        if let Some(node) = config.machine.placement.host_node {
            let len = usize::try_from(region.len()).unwrap_or(usize::MAX);
            placement::bind_memory(host as usize, len, node, "guest RAM")?;
        }
        add_memslot(
            vm_fd,
            *slot,
            region.start_addr().raw_value(),
            host,
            region.len(),
            0,
        )?;
        *slot += 1;
    }
    Ok(mem)
}

/// The kernel, the initrd, the command line and the E820 map in guest RAM.
fn load_kernel(
    mem: &GuestMemoryMmap,
    config: &VmConfig,
    plan: &Plan,
) -> Result<EntryPoint, VmError> {
    let e820 = memory::e820_map(&plan.ram, &plan.legacy);
    let low_ram_end = plan.ram.first().map_or(0, |&(a, l)| a + l);
    Ok(boot::load(
        mem,
        &BootInputs {
            kernel: &config.kernel,
            initrd: config.initrd.as_deref(),
            initrd_append: &config.initrd_append,
            cmdline: &config.cmdline,
            e820: &e820,
            low_ram_end,
        },
    )?)
}

/// The console and channel files and the recording directories can be
/// written (nothing is created yet).
fn check_outputs(config: &VmConfig) -> Result<(), VmError> {
    if let Some(p) = config.console.file() {
        check_output("console file", p)?;
    }
    if let Some(p) = &config.channel {
        check_output("channel file", p)?;
    }
    let record_dirs = config
        .machine
        .nvdimms
        .iter()
        .filter_map(|n| n.record.as_deref());
    for dir in record_dirs {
        crate::nvdimm::record::check_dir(dir)?;
    }
    Ok(())
}

/// The legacy ranges' files, mapped and registered from slot `*slot` on.
fn map_legacy(
    vm_fd: &VmFd,
    config: &VmConfig,
    plan: &Plan,
    slot: &mut u32,
) -> Result<Vec<LegacyPmem>, VmError> {
    let opened = backing::legacy::open_all(&config.machine.legacy_pmem)?;
    let mut legacy_pmem = Vec::with_capacity(opened.len());
    for (b, &(base, _)) in opened.into_iter().zip(&plan.legacy) {
        let mapping = b.map()?;
        if let Some(node) = config.machine.placement.host_node {
            let what = format!("--pmem-legacy {}", b.display);
            placement::bind_memory(mapping.as_ptr() as usize, mapping.size(), node, &what)?;
        }
        let flags = readonly_flag(b.spec.readonly);
        add_memslot(
            vm_fd,
            *slot,
            base,
            mapping.as_ptr(),
            mapping.size() as u64,
            flags,
        )?;
        *slot += 1;
        legacy_pmem.push(LegacyPmem {
            backing: b,
            mapping,
            base,
        });
    }
    Ok(legacy_pmem)
}

/// What mapping the NVDIMMs shares between them.
struct DimmContext<'a> {
    vm_fd: &'a Arc<VmFd>,
    config: &'a VmConfig,
    vcpu_threads: &'a Arc<VcpuThreads>,
    /// Each `mce=on` DIMM's memory slots, from the top of KVM's numbers.
    mce_ids: std::vec::IntoIter<std::ops::Range<u32>>,
    media_started: crate::nvdimm::media::SetupGuard,
    /// With a recorded DIMM: where the vCPUs and devices stop for each epoch.
    epoch_gate: Option<Arc<EpochGate>>,
}

impl<'a> DimmContext<'a> {
    fn new(
        vm_fd: &'a Arc<VmFd>,
        config: &'a VmConfig,
        vcpu_threads: &'a Arc<VcpuThreads>,
        mce_ids: Vec<std::ops::Range<u32>>,
    ) -> Self {
        Self {
            vm_fd,
            config,
            vcpu_threads,
            mce_ids: mce_ids.into_iter(),
            media_started: crate::nvdimm::media::SetupGuard::default(),
            epoch_gate: None,
        }
    }
}

/// An Intel guest's machine checks reach every vCPU (several vCPUs, a DIMM with `mce=on`).
fn mce_broadcast(
    mce: MachineChecks,
    cpus: u8,
    threads: &Arc<VcpuThreads>,
) -> Option<Arc<crate::nvdimm::mce::broadcast::McBroadcast>> {
    match mce {
        Some((Vendor::Intel, _)) if cpus > 1 => Some(Arc::new(
            crate::nvdimm::mce::broadcast::McBroadcast::new(cpus.into(), threads.clone()),
        )),
        _ => None,
    }
}

/// The NVDIMMs' files, mapped and registered from slot `*slot` on, with
/// their media, poison slots and recorders.
fn map_nvdimms(
    ctx: &mut DimmContext<'_>,
    plan: &Plan,
    slot: &mut u32,
) -> Result<Vec<Nvdimm>, VmError> {
    let backings = backing::open_all(&ctx.config.machine.nvdimms)?;
    let mut nvdimms = Vec::with_capacity(backings.len());
    for (i, (b, &base)) in backings.into_iter().zip(&plan.dimm_bases).enumerate() {
        nvdimms.push(map_nvdimm(ctx, i, b, base, *slot)?);
        *slot += 1;
    }
    Ok(nvdimms)
}

/// One NVDIMM at `base` with memory slot `slot` (or its poison slots).
fn map_nvdimm(
    ctx: &mut DimmContext<'_>,
    index: usize,
    b: NvdimmBacking,
    base: u64,
    slot: u32,
) -> Result<Nvdimm, VmError> {
    let mapping = b.map()?;
    let host_node = ctx.config.machine.placement.host_node;
    crate::memory::memory_placement::place_dimm(&b, &mapping, base, host_node)?;
    // A recorded DIMM's slot keeps KVM's dirty log: each flush takes
    // the pages stored to since the one before.
    let dirty_log = match b.spec.record.is_some() {
        true => KVM_MEM_LOG_DIRTY_PAGES,
        false => 0,
    };
    let handle = acpi::nfit_handle(u32::try_from(index).unwrap_or(u32::MAX));
    let media = crate::nvdimm::media::start(&b, handle, base, &mut ctx.media_started)?;
    let poison = match (b.spec.mce, ctx.mce_ids.next()) {
        (true, Some(ids)) => {
            let p = crate::nvdimm::mce::with_slots(ctx.vm_fd, &b, &mapping, base, ids, &media)?;
            Some(crate::nvdimm::mce::SlotsGuard(p))
        }
        _ => {
            let flags = readonly_flag(b.spec.readonly) | dirty_log;
            add_memslot(
                ctx.vm_fd,
                slot,
                base,
                mapping.as_ptr(),
                mapping.size() as u64,
                flags,
            )?;
            None
        }
    };
    let recorder = match &b.spec.record {
        Some(dir) => {
            let cpus = ctx.config.machine.cpus.into();
            let threads = ctx.vcpu_threads.clone();
            let gate = ctx
                .epoch_gate
                .get_or_insert_with(|| Arc::new(EpochGate::new(cpus, threads)))
                .clone();
            let file = b.file.clone();
            let vm_fd = ctx.vm_fd.clone();
            let r = crate::nvdimm::record::FlushRecorder::start(
                dir, vm_fd, slot, file, &b.display, &mapping, gate,
            )?;
            Some(Arc::new(r))
        }
        None => None,
    };
    Ok(Nvdimm {
        backing: b,
        mapping,
        base,
        flush_stats: Arc::new(FlushStats::default()),
        handle,
        media,
        recorder,
        poison,
    })
}

/// The devices and what the VM keeps of them.
struct Devices {
    pio: devices::bus::Bus,
    mmio: devices::bus::Bus,
    serial: buses::SerialPorts,
    exit: Arc<ExitNotifier>,
    dma_view: devices::virtio::dma::DmaView,
    disks: Vec<crate::disk::AttachedDisk>,
    disk_threads: Vec<devices::virtio::queues::IoThread>,
    events: Option<Arc<PlatformEvents>>,
    dsm: Option<Arc<devices::nvdimm_dsm::DsmHandler>>,
    hotplug: Option<Arc<crate::nvdimm::hotplug::NvdimmHotplug>>,
}

/// The memory the machine has mapped so far, for the devices.
struct Mapped<'a> {
    mem: &'a GuestMemoryMmap,
    nvdimms: &'a [Nvdimm],
    legacy_pmem: &'a [LegacyPmem],
    /// The next free memory slot (a hot-added DIMM's).
    next_slot: u32,
}

/// The platform devices, the disks, the GED, the ACPI tables and the room
/// for hot-added DIMMs.
fn attach_devices(
    vm_fd: &Arc<VmFd>,
    config: &VmConfig,
    plan: &Plan,
    mapped: &Mapped<'_>,
    open_disks: Vec<crate::disk::OpenDisk>,
) -> Result<Devices, VmError> {
    let exit = Arc::new(ExitNotifier::new().map_err(io_err("creating the exit eventfd"))?);
    let irq = |gsi: u32| buses::irq_line(vm_fd, gsi);
    let with_legacy = !mapped.legacy_pmem.is_empty();
    let buses::Buses {
        mut pio,
        mut mmio,
        serial,
        flush,
    } = buses::platform(
        config,
        vm_fd,
        &exit,
        (mapped.nvdimms, plan.slots),
        with_legacy,
    )?;
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
        &plan.ram,
        mapped.mem,
        (mapped.nvdimms, plan.slots, events.clone()),
        disks.len(),
        &mut pio,
    )?;
    // Empty slots: what a hot-add needs, above everything mapped now.
    let mapped_pmem = mapped.nvdimms.iter().map(|n| (n.base, n.size())).chain(
        mapped
            .legacy_pmem
            .iter()
            .map(|l| (l.base, l.mapping.size() as u64)),
    );
    let hotplug =
        crate::nvdimm::hotplug::NvdimmHotplug::for_machine(crate::nvdimm::hotplug::HotplugParts {
            vm_fd: vm_fd.clone(),
            slots: plan.slots,
            phys_bits: plan.phys_bits,
            host_node: config.machine.placement.host_node,
            described: installed.nvdimms,
            next_memslot: mapped.next_slot,
            top: crate::nvdimm::hotplug::top_of(&plan.ram, mapped_pmem),
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

/// The vCPUs, configured to enter the kernel at `entry`.
fn create_vcpus(
    vm_fd: &VmFd,
    mem: &GuestMemoryMmap,
    plan: &Plan,
    cpus: u8,
    entry: EntryPoint,
) -> Result<Vec<VcpuFd>, VmError> {
    let mut vcpus = Vec::with_capacity(cpus.into());
    for i in 0..cpus {
        let vcpu = vm_fd
            .create_vcpu(i.into())
            .map_err(kvm_err("vCPU creation"))?;
        cpu::configure(&vcpu, mem, plan.cpuid.clone(), i, cpus, entry)?;
        if let Some((_, cap)) = plan.mce {
            crate::nvdimm::mce::deliver::setup(&vcpu, cap)?;
        }
        vcpus.push(vcpu);
    }
    Ok(vcpus)
}

impl Vm {
    /// Builds the VM. See the module docs for the order of checks.
    pub fn build(config: &VmConfig) -> Result<Self, VmError> {
        let host = HostKvm::probe();
        let kvm = open_kvm()?;
        let plan = Plan::check(&kvm, config)?;
        let vm_fd = create_vm(&kvm)?;
        let mut slot = 0u32;
        let mem = map_ram(&vm_fd, config, &plan.ram, &mut slot)?;
        let entry = load_kernel(&mem, config, &plan)?;
        check_outputs(config)?;
        // Disks are only opened (never created): before any DIMM file is.
        let open_disks = crate::disk::open_all(&config.machine.disks)?;
        // From here on the user's files may be created.
        let mut legacy_pmem = map_legacy(&vm_fd, config, &plan, &mut slot)?;
        let cpus = config.machine.cpus;
        let vcpu_threads = Arc::new(VcpuThreads::new(cpus.into()));
        // mce=on DIMMs take their slots from the top of KVM's numbers.
        let below = slot as usize + plan.slots;
        let mce_ids = crate::nvdimm::mce::slot_ids(kvm.get_nr_memslots(), below, plan.mce_dimms)?;
        let mut dimms = DimmContext::new(&vm_fd, config, &vcpu_threads, mce_ids);
        let mut nvdimms = map_nvdimms(&mut dimms, &plan, &mut slot)?;
        let (media_started, epoch_gate) = (dimms.media_started, dimms.epoch_gate);
        let mapped = Mapped {
            mem: &mem,
            nvdimms: &nvdimms,
            legacy_pmem: &legacy_pmem,
            next_slot: slot,
        };
        let devices = attach_devices(&vm_fd, config, &plan, &mapped, open_disks)?;
        let vcpus = create_vcpus(&vm_fd, &mem, &plan, cpus, entry)?;
        nvdimms.iter_mut().for_each(|n| n.backing.keep());
        legacy_pmem.iter_mut().for_each(|l| l.backing.keep());
        media_started.disarm();
        let mce_broadcast = mce_broadcast(plan.mce, cpus, &vcpu_threads);
        Ok(Self {
            pvpanic: Arc::new(crate::pvpanic::PvPanic::new(devices.exit.clone())),
            vm_fd,
            mem,
            nvdimms,
            legacy_pmem,
            vcpus,
            pio: Arc::new(devices.pio),
            mmio: Arc::new(devices.mmio),
            exit: devices.exit,
            stats: Arc::new(ExitStats::default()),
            serial: devices.serial,
            host,
            dsm: devices.dsm,
            events: devices.events,
            placement: config.machine.placement.clone(),
            kernel: config.kernel.clone(),
            disks: devices.disks,
            disk_threads: devices.disk_threads,
            vcpu_policy: Arc::default(),
            gdb: None,
            api: None,
            dump_on_panic: None,
            hotplug: devices.hotplug,
            mce_vendor: plan.mce.map(|(v, _)| v),
            mce_broadcast,
            epoch_gate,
            vcpu_threads,
            dma_view: devices.dma_view,
        })
    }
}
