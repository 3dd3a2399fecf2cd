//! [`Vm::build`] in named steps, in the order the module docs promise:
//! [`Plan::check`] settles everything that needs no file (KVM, sizes, layout,
//! placement, kernel format); then the VM and its RAM, the kernel, the output
//! paths; only then the user's files (legacy ranges, NVDIMMs), the devices and
//! the vCPUs. A step that fails drops what the earlier ones made, and a backing
//! file created here goes with it.

use std::sync::Arc;

use devices::nvdimm::FlushStats;
use kvm_bindings::{
    kvm_pit_config, CpuId, KVM_MAX_CPUID_ENTRIES, KVM_MEM_LOG_DIRTY_PAGES, KVM_PIT_SPEAKER_DUMMY,
};
use kvm_ioctls::{Kvm, VcpuFd, VmFd};
use vm_memory::{Address, GuestAddress, GuestMemoryBackend, GuestMemoryMmap, GuestMemoryRegion};

use super::attach::{attach_devices, Mapped, Room};
use super::buses;
use super::outputs::check_output;
use super::{add_memslot, kvm_err, open_kvm, readonly_flag, Vm, VmError};
use crate::boot::{self, BootInputs, EntryPoint};
use crate::config::VmConfig;
use crate::cxl;
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
    /// The CXL devices in place.
    cxl: crate::cxl::CxlPlatform,
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
        // Legacy ranges and CXL decoders take memslots too (no flush-hint page).
        let cxl_slots = cxl::machine::slots(&layout_map.cxl) as usize;
        let dimm_max =
            dimm_max.min(slots_max.saturating_sub(machine.legacy_pmem.len() + cxl_slots));
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
            cxl: layout_map.cxl,
        })
    }
}

/// With an `mce=on` DIMM: the guest's vendor and the banks' capability.
type MachineChecks = Option<(Vendor, u64)>;

impl Plan {
    /// Memory slots the CXL devices' decoders hold.
    fn cxl_slots(&self) -> u32 {
        cxl::machine::slots(&self.cxl)
    }

    /// What the devices take of it.
    fn room(&self) -> Room<'_> {
        Room {
            ram: &self.ram,
            slots: self.slots,
            phys_bits: self.phys_bits,
            cxl: &self.cxl,
        }
    }
}

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
    let e820 = memory::e820_map(&plan.ram, &plan.legacy, &plan.cxl.e820_reserved());
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

/// Keeps the backing files this build created: the VM is set up.
fn keep_created_files(
    nvdimms: &mut [Nvdimm],
    legacy_pmem: &mut [LegacyPmem],
    cxl: &mut Option<cxl::machine::CxlMachine>,
) {
    nvdimms.iter_mut().for_each(|n| n.backing.keep());
    legacy_pmem.iter_mut().for_each(|l| l.backing.keep());
    cxl.iter_mut().for_each(cxl::machine::CxlMachine::keep);
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
        let below = slot as usize + plan.slots + plan.cxl_slots() as usize;
        let mce_ids = crate::nvdimm::mce::slot_ids(kvm.get_nr_memslots(), below, plan.mce_dimms)?;
        let mut dimms = DimmContext::new(&vm_fd, config, &vcpu_threads, mce_ids);
        let mut nvdimms = map_nvdimms(&mut dimms, &plan, &mut slot)?;
        let (media_started, epoch_gate) = (dimms.media_started, dimms.epoch_gate);
        // The CXL decoders' slots come next (from `slot`); hot-added DIMMs' after.
        let mapped = Mapped {
            mem: &mem,
            nvdimms: &nvdimms,
            legacy_pmem: &legacy_pmem,
            next_slot: slot.saturating_add(plan.cxl_slots()),
        };
        let mut devices = attach_devices(&vm_fd, config, &plan.room(), &mapped, open_disks)?;
        let mut cxl = cxl::machine::attach(&vm_fd, &plan.cxl, &mut devices.mmio, slot)?;
        let cxl_functions = cxl.as_ref().map(cxl::machine::CxlMachine::pci_functions);
        buses::pci_config(&mut devices.pio, !legacy_pmem.is_empty(), cxl_functions)?;
        let vcpus = create_vcpus(&vm_fd, &mem, &plan, cpus, entry)?;
        keep_created_files(&mut nvdimms, &mut legacy_pmem, &mut cxl);
        media_started.disarm();
        let mce_broadcast = mce_broadcast(plan.mce, cpus, &vcpu_threads);
        Ok(Self {
            pvpanic: Arc::new(crate::pvpanic::PvPanic::new(devices.exit.clone())),
            vm_fd,
            mem,
            nvdimms,
            legacy_pmem,
            cxl,
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
