//! NVDIMM hot-add while the guest runs (`pmemvm ctl SOCKET nvdimm add SPEC`),
//! as ACPI 6.x describes it for an NVDIMM root device: the platform maps the
//! new DIMM, its NFIT structures join the table `_FIT` returns, and the root
//! device gets notification 0x80; Linux's nfit driver then reads `_FIT`
//! again, merges the new structures and registers the new region.
//!
//! What the machine can take is fixed at boot (`--nvdimm-slots N`): every
//! slot's ACPI device (`_ADR`, `_DSM`) and flush-hint page exist from the
//! start, as on platforms that describe their empty slots. The DIMM goes
//! into the next free slot, at the next 1 GiB boundary above everything
//! mapped, in guest NUMA node 0. Removal is refused: Linux has no path for a
//! DIMM that leaves (nor do real platforms offer surprise removal of persistent memory).

use std::sync::{Arc, Mutex};

use acpi::NvdimmDescription;
use devices::nvdimm::{FlushHintDevice, FlushObserver, FlushStats, FlushTarget};
use devices::nvdimm_dsm::{DsmHandler, FileLabels};
use devices::platform_events::{PlatformEvents, NFIT_CHANGED};
use kvm_ioctls::VmFd;

use crate::acpi_setup::{describe_dimm, PlacedNvdimm};
use crate::config::NvdimmSpec;
use crate::layout;
use crate::memory::backing::NvdimmBacking;
use crate::nvdimm::dimm::Nvdimm;

/// Errors of a hot-add.
#[derive(Debug, thiserror::Error)]
pub enum HotplugError {
    /// Every slot holds a DIMM.
    #[error("this VM has no free NVDIMM slot ({slots} in all, each holding a DIMM); start it with --nvdimm-slots N for room to hot-add")]
    NoFreeSlot {
        /// Slots of the machine.
        slots: usize,
    },
    /// An option a hot-added DIMM cannot have.
    #[error("a hot-added NVDIMM cannot have {option} ({why}); give it SIZE[,file=PATH][,label-size=SIZE][,prealloc][,hugepages][,badblocks=...] only")]
    Option {
        /// The option.
        option: &'static str,
        /// Why.
        why: &'static str,
    },
    /// No room below the guest's physical address limit.
    #[error("no room for a {size}-byte NVDIMM at {base:#x}: the guest's physical addresses end at {limit:#x} ({bits} bits)")]
    AddressSpace {
        /// The DIMM's size.
        size: u64,
        /// Where it would go.
        base: u64,
        /// The limit.
        limit: u64,
        /// Physical address bits.
        bits: u8,
    },
    /// The backing file.
    #[error(transparent)]
    Backing(#[from] crate::memory::backing::BackingError),
    /// Its media state.
    #[error(transparent)]
    Media(#[from] crate::nvdimm::media::MediaSetupError),
    /// Binding its memory to `--host-node`.
    #[error(transparent)]
    Placement(#[from] crate::memory::memory_placement::MemoryPlacementError),
    /// KVM refused the memory slot.
    #[error("KVM refused the new DIMM's memory slot: {0}")]
    Memslot(#[source] kvm_ioctls::Error),
    /// The disks' view of guest memory could not take the DIMM.
    #[error(transparent)]
    Dma(#[from] devices::virtio::dma::DmaError),
    /// Host I/O (duplicating the file, raising the notification).
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
}

impl crate::exit_status::Classified for HotplugError {
    fn kind(&self) -> crate::exit_status::ErrorKind {
        use crate::exit_status::ErrorKind::*;
        match self {
            Self::NoFreeSlot { .. } | Self::Option { .. } | Self::AddressSpace { .. } => Usage,
            Self::Backing(e) => e.kind(),
            Self::Media(e) => e.kind(),
            Self::Placement(_) | Self::Memslot(_) | Self::Dma(_) | Self::Io { .. } => Environment,
        }
    }
}

/// What a hot-add did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Added {
    /// The DIMM's place among the machine's DIMMs (`ctl` commands name it so).
    pub index: usize,
    /// Its NFIT device handle.
    pub handle: u32,
    /// Guest physical base.
    pub base: u64,
    /// Size of its persistent-memory range.
    pub size: u64,
    /// The backing file (or "(temporary)").
    pub file: String,
    /// Whether the guest was notified (0x80 on the NVDIMM root device).
    pub notified: bool,
}

struct State {
    /// Every DIMM's NFIT description, in slot order (boot DIMMs first).
    described: Vec<NvdimmDescription>,
    /// The next KVM memory slot.
    next_memslot: u32,
    /// The end of the highest guest range mapped.
    top: u64,
    /// The hot-added DIMMs (their mappings live as long as the VM).
    dimms: Vec<Nvdimm>,
}

/// The machine's room for hot-added DIMMs and what a hot-add touches.
pub struct NvdimmHotplug {
    vm_fd: Arc<VmFd>,
    slots: usize,
    phys_bits: u8,
    host_node: Option<u32>,
    dsm: Arc<DsmHandler>,
    events: Arc<PlatformEvents>,
    flush: Arc<Mutex<FlushHintDevice>>,
    dma: devices::virtio::dma::DmaView,
    state: Mutex<State>,
}

impl std::fmt::Debug for NvdimmHotplug {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NvdimmHotplug")
            .field("slots", &self.slots)
            .finish_non_exhaustive()
    }
}

/// What the VM's build gives [`NvdimmHotplug::for_machine`].
pub(crate) struct HotplugParts {
    pub vm_fd: Arc<VmFd>,
    pub slots: usize,
    pub phys_bits: u8,
    pub host_node: Option<u32>,
    /// The boot DIMMs' descriptions, in order.
    pub described: Vec<NvdimmDescription>,
    pub next_memslot: u32,
    /// The end of the highest range mapped at boot ([`top_of`]).
    pub top: u64,
    /// The `_DSM` handler (with a DIMM or a slot).
    pub dsm: Option<Arc<DsmHandler>>,
    /// The GED (with a DIMM or a slot).
    pub events: Option<Arc<PlatformEvents>>,
    /// The flush-hint device (with a DIMM or a slot).
    pub flush: Option<Arc<Mutex<FlushHintDevice>>>,
    /// The disks' view of guest memory, which each new DIMM joins.
    pub dma: devices::virtio::dma::DmaView,
}

/// The end of the highest guest range of `ram` and `ranges` (base, length),
/// and at least 4 GiB: where the next DIMM may start.
pub(crate) fn top_of(ram: &[(u64, u64)], ranges: impl Iterator<Item = (u64, u64)>) -> u64 {
    ranges
        .map(|(b, l)| b.saturating_add(l))
        .chain(std::iter::once(crate::memory::ram_end(ram)))
        .max()
        .unwrap_or(0)
        .max(layout::RAM_64BIT_START.0)
}

impl NvdimmHotplug {
    /// Room for hot-adds when the machine has empty slots (and so the
    /// `_DSM` handler, the GED and the flush-hint device); `None` otherwise.
    pub(crate) fn for_machine(p: HotplugParts) -> Option<Arc<Self>> {
        if p.slots <= p.described.len() {
            return None;
        }
        Some(Arc::new(Self {
            vm_fd: p.vm_fd,
            slots: p.slots,
            phys_bits: p.phys_bits,
            host_node: p.host_node,
            dsm: p.dsm?,
            events: p.events?,
            flush: p.flush?,
            dma: p.dma,
            state: Mutex::new(State {
                described: p.described,
                next_memslot: p.next_memslot,
                top: p.top,
                dimms: Vec::new(),
            }),
        }))
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Slots in all.
    pub fn slots(&self) -> usize {
        self.slots
    }

    /// DIMMs present (boot and hot-added).
    pub fn present(&self) -> usize {
        self.state().described.len()
    }

    /// The media state of hot-added DIMM `i` (counted from the first hot-added one).
    pub fn media(&self, i: usize) -> Option<Arc<devices::nvdimm_media::DimmMedia>> {
        self.state().dimms.get(i).map(|n| n.media.clone())
    }

    /// Counters of the hot-added DIMMs, in order.
    pub(crate) fn counters(&self) -> Vec<crate::stats::DimmCounters> {
        self.state()
            .dimms
            .iter()
            .map(|n| crate::stats::DimmCounters {
                file: n.backing.display.clone(),
                base: n.base,
                size: n.size(),
                handle: n.handle,
                flush: n.flush_stats.clone(),
                poison: None,
            })
            .collect()
    }

    /// The hot-added DIMMs, for the VM's end (sync, clean-shutdown mark).
    pub(crate) fn take_dimms(&self) -> Vec<Nvdimm> {
        std::mem::take(&mut self.state().dimms)
    }

    /// Checks what a hot-added DIMM may be.
    fn check_spec(spec: &NvdimmSpec) -> Result<(), HotplugError> {
        let refuse = |option, why| Err(HotplugError::Option { option, why });
        if spec.record.is_some() {
            return refuse("record=", "a recording starts with the VM");
        }
        if spec.node.is_some() {
            return refuse(
                "node=",
                "the guest's NUMA nodes are fixed at boot; it joins node 0",
            );
        }
        if spec.mce {
            return refuse(
                "mce=on",
                "the vCPUs' machine-check banks are set up at boot for the DIMMs given then",
            );
        }
        if spec.readonly {
            return refuse(
                "readonly",
                "only DIMMs given at boot are guarded against guest writes",
            );
        }
        Ok(())
    }

    /// Hot-adds the DIMM `spec` (see the module docs).
    pub fn add(&self, spec: &NvdimmSpec) -> Result<Added, HotplugError> {
        Self::check_spec(spec)?;
        let mut st = self.state();
        let index = st.described.len();
        if index >= self.slots {
            return Err(HotplugError::NoFreeSlot { slots: self.slots });
        }
        let size = spec.spa_size();
        let base = self.free_base(st.top, size)?;
        let mut backing = NvdimmBacking::open(spec)?;
        let mapping = backing.map()?;
        crate::memory::memory_placement::place_dimm(&backing, &mapping, base, self.host_node)?;
        let slot_index = u32::try_from(index).unwrap_or(u32::MAX);
        let handle = acpi::nfit_handle(slot_index);
        let mut guard = crate::nvdimm::media::SetupGuard::default();
        let media = crate::nvdimm::media::start(&backing, handle, base, &mut guard)?;
        let labels_fd = backing
            .file
            .try_clone()
            .map_err(|source| HotplugError::Io {
                what: format!("duplicating the fd of {}", backing.display),
                source,
            })?;
        self.map_for_guest_and_disks(st.next_memslot, (base, size), &mapping)?;
        let placed = PlacedNvdimm {
            spec,
            base,
            serial: backing.serial,
            node: 0,
        };
        let described = describe_dimm(&placed, slot_index);
        let flush_stats = Arc::new(FlushStats::default());
        self.add_flush_hint(index, &backing, &flush_stats);
        self.dsm.hot_add(
            handle,
            FileLabels::new(labels_fd, spec.label_offset(), described.label_size, false)
                .through_mapping(backing.fs == crate::memory::hugepages::FsKind::Hugetlbfs),
            media.clone(),
            index,
        );
        st.described.push(described);
        self.dsm.set_fit(acpi::nfit::fit(&st.described));
        st.next_memslot += 1;
        st.top = base + size;
        backing.keep();
        guard.disarm();
        let file = backing.display.clone();
        st.dimms.push(Nvdimm {
            backing,
            mapping,
            base,
            flush_stats,
            handle,
            media,
            recorder: None,
            poison: None,
        });
        drop(st);
        let notified = match self.events.raise(NFIT_CHANGED) {
            Ok(()) => true,
            Err(e) => {
                log::warn!("notifying the guest of NVDIMM slot {index} failed: {e}");
                false
            }
        };
        Ok(Added {
            index,
            handle,
            base,
            size,
            file,
            notified,
        })
    }

    /// The base of a DIMM of `size` above `top`, within the guest's address width.
    fn free_base(&self, top: u64, size: u64) -> Result<u64, HotplugError> {
        let bits = self.phys_bits.min(crate::memory::MAX_PHYS_ADDR_BITS);
        let limit = 1u64 << bits;
        let base = top
            .checked_next_multiple_of(layout::NVDIMM_ALIGN)
            .unwrap_or(u64::MAX);
        if base.checked_add(size).is_none_or(|end| end > limit) {
            return Err(HotplugError::AddressSpace {
                size,
                base,
                limit,
                bits,
            });
        }
        Ok(base)
    }

    /// `mapping` as guest memory (`size` bytes at `base`, memory slot
    /// `memslot`), and in the disks' view from now on (a buffer there before
    /// this got an error status); the slot goes again when the disks cannot take it.
    fn map_for_guest_and_disks(
        &self,
        memslot: u32,
        (base, size): (u64, u64),
        mapping: &vm_memory::mmap::MmapRegion,
    ) -> Result<(), HotplugError> {
        let region = kvm_bindings::kvm_userspace_memory_region {
            slot: memslot,
            flags: 0,
            guest_phys_addr: base,
            memory_size: size,
            userspace_addr: mapping.as_ptr() as u64,
        };
        // SAFETY: `mapping` is a live MAP_SHARED mapping of `size` bytes that
        // the caller keeps (in `State::dimms`) as long as the VM fd exists;
        // the guest range starts above every range mapped before (`top`) and
        // the slot number was never used.
        unsafe { self.vm_fd.set_user_memory_region(region) }.map_err(HotplugError::Memslot)?;
        let Err(e) = self.dma.add_range(base, mapping) else {
            return Ok(());
        };
        let gone = kvm_bindings::kvm_userspace_memory_region {
            memory_size: 0,
            ..region
        };
        // SAFETY: a size of 0 deletes the slot just created; nothing else
        // refers to it yet (the guest has not been told of the DIMM).
        if let Err(k) = unsafe { self.vm_fd.set_user_memory_region(gone) } {
            log::warn!("removing the memory slot of a DIMM the disks cannot reach failed: {k}");
        }
        Err(e.into())
    }

    /// The new DIMM's flush-hint page writes its file.
    fn add_flush_hint(&self, index: usize, backing: &NvdimmBacking, stats: &Arc<FlushStats>) {
        let added = self
            .flush
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .add(FlushTarget {
                file: backing.file.clone(),
                path: backing.display.clone(),
                stats: stats.clone(),
                observer: None::<Arc<dyn FlushObserver>>,
            });
        if !added {
            log::warn!("the flush-hint page of NVDIMM slot {index} was taken");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_next_dimm_starts_above_everything_mapped_and_above_4_gib() {
        assert_eq!(top_of(&[(0, 1 << 30)], std::iter::empty()), 4 << 30);
        let ram = [(0, 3 << 30), (4 << 30, 2 << 30)];
        assert_eq!(top_of(&ram, std::iter::empty()), 6 << 30);
        let ranges = [(7 << 30, 256 << 20), (8 << 30, 16 << 20)];
        assert_eq!(top_of(&ram, ranges.into_iter()), (8 << 30) + (16 << 20));
    }
}
