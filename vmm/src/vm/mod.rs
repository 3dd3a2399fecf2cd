//! Building a VM from a validated [`VmConfig`]; running it is
//! [`crate::run_loop`], its vCPU threads [`crate::vcpu`].
//!
//! Order matters for the "nothing changed on disk" promise: everything that
//! can be checked without touching the user's files (KVM, sizes, layout,
//! kernel and initrd) is checked before any backing file is created, and a
//! file created here is removed again if a later step fails.

mod buses;
mod error;
mod outputs;

pub use error::VmError;

use outputs::check_output;

use std::sync::{Arc, Mutex};

use devices::bus::Bus;
use devices::exit::{ExitNotifier, ExitRequest};
use devices::nvdimm::FlushStats;
use devices::platform_events::PlatformEvents;
use kvm_bindings::{
    kvm_pit_config, kvm_userspace_memory_region, KVM_MAX_CPUID_ENTRIES, KVM_MEM_LOG_DIRTY_PAGES,
    KVM_MEM_READONLY, KVM_PIT_SPEAKER_DUMMY,
};
use kvm_ioctls::{Kvm, VcpuFd, VmFd};
use vm_memory::{Address, GuestAddress, GuestMemoryBackend, GuestMemoryMmap, GuestMemoryRegion};

use crate::backing;
use crate::boot::{self, BootInputs};
use crate::config::VmConfig;
use crate::cpu;
use crate::host::HostKvm;
use crate::hugepages;
use crate::layout;
use crate::memory;
use crate::placement::{self, Placement};
use crate::stats::{ExitCounts, ExitStats, NvdimmCounts};

fn io_err(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> VmError {
    let what = what.into();
    move |source| VmError::Io { what, source }
}

fn kvm_err(step: &'static str) -> impl FnOnce(kvm_ioctls::Error) -> VmError {
    move |source| VmError::Kvm { step, source }
}

pub use crate::dimm::{LegacyPmem, Nvdimm};

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
    /// (`crate::vcpu_status`).
    pub vcpus: Vec<String>,
}

/// A VM ready to run.
pub struct Vm {
    pub(crate) vm_fd: Arc<VmFd>,
    pub(crate) mem: GuestMemoryMmap,
    pub(crate) nvdimms: Vec<Nvdimm>,
    pub(crate) legacy_pmem: Vec<LegacyPmem>,
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
    pub(crate) gdb: Option<crate::gdb::GdbListener>,
    /// The control socket (`--api`), served while the VM runs.
    pub(crate) api: Option<crate::api::ApiListener>,
    /// Where a guest panic's dump goes (`--dump-on-panic`).
    pub(crate) dump_on_panic: Option<std::path::PathBuf>,
    /// The guest's CPU vendor when a DIMM has `mce=on`.
    pub(crate) mce_vendor: Option<crate::mce::deliver::Vendor>,
    /// The pvpanic device.
    pub(crate) pvpanic: Arc<crate::pvpanic::PvPanic>,
    /// Room for NVDIMMs hot-added while the guest runs (`--nvdimm-slots`).
    pub(crate) hotplug: Option<Arc<crate::hotplug::NvdimmHotplug>>,
    /// Where vCPUs and devices stop while a recording takes an epoch.
    pub(crate) epoch_gate: Option<Arc<crate::record::instant::EpochGate>>,
    /// The vCPU threads, to kick.
    pub(crate) vcpu_threads: Arc<crate::vcpu_threads::VcpuThreads>,
    /// RAM and every NVDIMM and legacy range (hot-added ones too), as the
    /// devices and a dump with `--nvdimms` read them.
    pub(crate) dma_view: devices::virtio::dma::DmaView,
    /// An Intel guest's machine checks reach every vCPU (several vCPUs).
    pub(crate) mce_broadcast: Option<Arc<crate::mce::broadcast::McBroadcast>>,
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
    /// Builds the VM. See the module docs for the order of checks.
    pub fn build(config: &VmConfig) -> Result<Self, VmError> {
        let host = HostKvm::probe();
        let kvm = open_kvm()?;
        let max_cpus = kvm.get_max_vcpus();
        if usize::from(config.machine.cpus) > max_cpus || config.machine.cpus == 0 {
            return Err(VmError::TooManyCpus {
                asked: config.machine.cpus,
                max: max_cpus,
            });
        }
        let mut cpuid = kvm
            .get_supported_cpuid(KVM_MAX_CPUID_ENTRIES)
            .map_err(kvm_err("supported CPUID query"))?;
        // mce=on: the vCPUs' machine-check banks and the CPUID to recover.
        let mce_dimms = config.machine.nvdimms.iter().filter(|n| n.mce).count();
        let mce = match mce_dimms {
            0 => None,
            _ => {
                let vendor = crate::mce::deliver::Vendor::of(&cpuid);
                crate::mce::deliver::patch_cpuid(&mut cpuid, vendor);
                Some((vendor, crate::mce::deliver::mcg_cap(&kvm)?))
            }
        };
        // The guest gets this CPUID, so its address width bounds the DIMMs.
        let phys_bits = memory::phys_addr_bits(cpuid.as_slice());
        let placement_map = memory::machine_layout(&config.machine, phys_bits)?;
        let ram = placement_map.ram;
        let slots_max = kvm.get_nr_memslots().saturating_sub(ram.len());
        let dimm_max = slots_max.min(usize::try_from(layout::NVDIMM_FLUSH_HINT_MAX).unwrap_or(0));
        // Legacy ranges take memslots too (they have no flush-hint page).
        let dimm_max = dimm_max.min(slots_max.saturating_sub(config.machine.legacy_pmem.len()));
        // Empty slots count: each may take a memslot and has its flush-hint page.
        let slots = config.machine.slots();
        if slots > dimm_max {
            return Err(VmError::TooManyNvdimms {
                asked: slots,
                max: dimm_max,
            });
        }
        let bases: Vec<u64> = placement_map.nvdimms.iter().map(|&(b, _)| b).collect();
        let legacy_ranges = placement_map.legacy;
        let legacy_bases: Vec<u64> = legacy_ranges.iter().map(|&(b, _)| b).collect();
        backing::legacy::check_paths(&config.machine.legacy_pmem, &config.machine.nvdimms)?;
        crate::config::resolve_nodes(&config.machine.nvdimms)?;
        crate::memory_placement::check_host_placement(
            config.machine.cpus,
            &config.machine.memory_spec(),
            &config.machine.placement,
            &config.machine.nvdimms,
        )?;
        boot::detect_format(&config.kernel)?;

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

        let ranges: Vec<(GuestAddress, usize)> = ram
            .iter()
            .map(|&(a, l)| (GuestAddress(a), usize::try_from(l).unwrap_or(usize::MAX)))
            .collect();
        let mem = hugepages::guest_ram(&ranges, config.machine.ram_pages)?;
        let mut slot = 0u32;
        for region in mem.iter() {
            let host = mem
                .get_host_address(region.start_addr())
                .map_err(|_| VmError::Acpi("guest RAM has no host mapping".into()))?;
            if let Some(node) = config.machine.placement.host_node {
                let len = usize::try_from(region.len()).unwrap_or(usize::MAX);
                placement::bind_memory(host as usize, len, node, "guest RAM")?;
            }
            add_memslot(
                &vm_fd,
                slot,
                region.start_addr().raw_value(),
                host,
                region.len(),
                0,
            )?;
            slot += 1;
        }

        let e820 = memory::e820_map(&ram, &legacy_ranges);
        let low_ram_end = ram.first().map_or(0, |&(a, l)| a + l);
        let entry = boot::load(
            &mem,
            &BootInputs {
                kernel: &config.kernel,
                initrd: config.initrd.as_deref(),
                initrd_append: &config.initrd_append,
                cmdline: &config.cmdline,
                e820: &e820,
                low_ram_end,
            },
        )?;

        if let Some(p) = config.console.file() {
            check_output("console file", p)?;
        }
        if let Some(p) = &config.channel {
            check_output("channel file", p)?;
        }
        for dir in config
            .machine
            .nvdimms
            .iter()
            .filter_map(|n| n.record.as_deref())
        {
            crate::record::check_dir(dir)?;
        }
        // Disks are only opened (never created): before any DIMM file is.
        let open_disks = crate::disk::open_all(&config.machine.disks)?;
        // From here on the user's files may be created.
        let mut legacy_pmem = Vec::with_capacity(config.machine.legacy_pmem.len());
        for (b, base) in backing::legacy::open_all(&config.machine.legacy_pmem)?
            .into_iter()
            .zip(legacy_bases)
        {
            let mapping = b.map()?;
            if let Some(node) = config.machine.placement.host_node {
                let what = format!("--pmem-legacy {}", b.display);
                placement::bind_memory(mapping.as_ptr() as usize, mapping.size(), node, &what)?;
            }
            let size = mapping.size() as u64;
            add_memslot(
                &vm_fd,
                slot,
                base,
                mapping.as_ptr(),
                size,
                readonly_flag(b.spec.readonly),
            )?;
            slot += 1;
            legacy_pmem.push(LegacyPmem {
                backing: b,
                mapping,
                base,
            });
        }
        // mce=on DIMMs take their slots from the top of KVM's numbers.
        let mut mce_ids =
            crate::mce::slot_ids(kvm.get_nr_memslots(), slot as usize + slots, mce_dimms)?
                .into_iter();
        let backings = backing::open_all(&config.machine.nvdimms)?;
        let mut nvdimms = Vec::with_capacity(backings.len());
        let mut media_started = crate::media::SetupGuard::default();
        let vcpu_threads = Arc::new(crate::vcpu_threads::VcpuThreads::new(
            config.machine.cpus.into(),
        ));
        // With a recorded DIMM: where the vCPUs and devices stop for each epoch.
        let mut epoch_gate = None;
        for (i, (b, base)) in backings.into_iter().zip(bases).enumerate() {
            let mapping = b.map()?;
            crate::memory_placement::place_dimm(
                &b,
                &mapping,
                base,
                config.machine.placement.host_node,
            )?;
            // A recorded DIMM's slot keeps KVM's dirty log: each flush takes
            // the pages stored to since the one before.
            let dirty_log = match b.spec.record.is_some() {
                true => KVM_MEM_LOG_DIRTY_PAGES,
                false => 0,
            };
            let handle = acpi::nfit_handle(u32::try_from(i).unwrap_or(u32::MAX));
            let media = crate::media::start(&b, handle, base, &mut media_started)?;
            let poison = match (b.spec.mce, mce_ids.next()) {
                (true, Some(ids)) => {
                    let p = crate::mce::with_slots(&vm_fd, &b, &mapping, base, ids, &media)?;
                    Some(crate::mce::SlotsGuard(p))
                }
                _ => {
                    add_memslot(
                        &vm_fd,
                        slot,
                        base,
                        mapping.as_ptr(),
                        mapping.size() as u64,
                        readonly_flag(b.spec.readonly) | dirty_log,
                    )?;
                    None
                }
            };
            let recorder = match &b.spec.record {
                Some(dir) => Some(Arc::new(crate::record::FlushRecorder::start(
                    dir,
                    vm_fd.clone(),
                    slot,
                    b.file.clone(),
                    &b.display,
                    &mapping,
                    epoch_gate
                        .get_or_insert_with(|| {
                            Arc::new(crate::record::instant::EpochGate::new(
                                config.machine.cpus.into(),
                                vcpu_threads.clone(),
                            ))
                        })
                        .clone(),
                )?)),
                None => None,
            };
            slot += 1;
            nvdimms.push(Nvdimm {
                backing: b,
                mapping,
                base,
                flush_stats: Arc::new(FlushStats::default()),
                handle,
                media,
                recorder,
                poison,
            });
        }

        let exit = Arc::new(ExitNotifier::new().map_err(io_err("creating the exit eventfd"))?);
        let irq = |gsi: u32| buses::irq_line(&vm_fd, gsi);
        let buses::Buses {
            mut pio,
            mut mmio,
            serial,
            flush,
        } = buses::platform(
            config,
            &vm_fd,
            &exit,
            (&nvdimms, slots),
            !legacy_pmem.is_empty(),
        )?;
        // The disks reach the NVDIMMs and legacy ranges too (DMA to and from DAX pages).
        let dma_mem = crate::dma_memory::with_pmem(
            &mem,
            nvdimms
                .iter()
                .map(|n| (n.base, &n.mapping))
                .chain(legacy_pmem.iter().map(|l| (l.base, &l.mapping))),
        )?;
        // A disk's write into a recorded DIMM is a store the recording must see.
        for n in &nvdimms {
            if let Some(r) = &n.recorder {
                dma_mem.watch(n.base, n.size(), r.clone());
            }
        }
        let (disks, disk_threads) = crate::disk::attach_all(
            open_disks,
            &dma_mem,
            &mut mmio,
            crate::disk::Wiring {
                irq: |gsi| irq(gsi).map_err(|e| e.to_string()),
                notify: |addr, kick: &vmm_sys_util::eventfd::EventFd| {
                    vm_fd
                        .register_ioevent(
                            kick,
                            &kvm_ioctls::IoEventAddress::Mmio(addr),
                            kvm_ioctls::NoDatamatch,
                        )
                        .map_err(|e| e.to_string())
                },
            },
        )?;
        // The GED's line and register, when there is a DIMM to notify about.
        let events = match slots {
            0 => None,
            _ => Some(Arc::new(PlatformEvents::new(irq(
                layout::PLATFORM_EVENT_GSI,
            )?))),
        };
        let installed = crate::acpi_setup::install(
            config.machine.cpus,
            &ram,
            &mem,
            (&nvdimms, slots, events.clone()),
            disks.len(),
            &mut pio,
        )?;
        let dsm = installed.dsm;
        // Empty slots: what a hot-add needs, above everything mapped now.
        let hotplug = crate::hotplug::NvdimmHotplug::for_machine(crate::hotplug::HotplugParts {
            vm_fd: vm_fd.clone(),
            slots,
            phys_bits,
            host_node: config.machine.placement.host_node,
            described: installed.nvdimms,
            next_memslot: slot,
            top: crate::hotplug::top_of(
                &ram,
                nvdimms.iter().map(|n| (n.base, n.size())).chain(
                    legacy_pmem
                        .iter()
                        .map(|l| (l.base, l.mapping.size() as u64)),
                ),
            ),
            dsm: dsm.clone(),
            events: events.clone(),
            flush,
            dma: dma_mem.clone(),
        });

        let mut vcpus = Vec::with_capacity(config.machine.cpus.into());
        for i in 0..config.machine.cpus {
            let vcpu = vm_fd
                .create_vcpu(i.into())
                .map_err(kvm_err("vCPU creation"))?;
            cpu::configure(&vcpu, &mem, cpuid.clone(), i, config.machine.cpus, entry)?;
            if let Some((_, cap)) = mce {
                crate::mce::deliver::setup(&vcpu, cap)?;
            }
            vcpus.push(vcpu);
        }
        for n in &mut nvdimms {
            n.backing.keep();
        }
        for l in &mut legacy_pmem {
            l.backing.keep();
        }
        media_started.disarm();
        let pvpanic = Arc::new(crate::pvpanic::PvPanic::new(exit.clone()));
        Ok(Self {
            vm_fd,
            mem,
            nvdimms,
            legacy_pmem,
            vcpus,
            pio: Arc::new(pio),
            mmio: Arc::new(mmio),
            exit,
            stats: Arc::new(ExitStats::default()),
            serial,
            host,
            dsm,
            events,
            placement: config.machine.placement.clone(),
            kernel: config.kernel.clone(),
            disks,
            disk_threads,
            vcpu_policy: Arc::default(),
            gdb: None,
            api: None,
            dump_on_panic: None,
            pvpanic,
            hotplug,
            mce_vendor: mce.map(|(v, _)| v),
            mce_broadcast: match mce {
                Some((crate::mce::deliver::Vendor::Intel, _)) if config.machine.cpus > 1 => {
                    Some(Arc::new(crate::mce::broadcast::McBroadcast::new(
                        config.machine.cpus.into(),
                        vcpu_threads.clone(),
                    )))
                }
                _ => None,
            },
            epoch_gate,
            vcpu_threads,
            dma_view: dma_mem,
        })
    }

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
    pub fn attach_gdb(&mut self, listener: crate::gdb::GdbListener) {
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
    ) -> Result<(), crate::dump::DumpError> {
        crate::dump::check_new_file(&path)?;
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
