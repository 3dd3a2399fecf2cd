//! One NVDIMM of a built VM: its backing file, the mapping registered as a
//! memslot, its guest base, counters and media state; and one legacy
//! persistent-memory range (file, mapping, base). Shared by the VM build
//! ([`crate::vstate::vm`]) and the ACPI setup ([`crate::acpi_setup`]), which must not
//! depend on each other.

use std::sync::Arc;

use devices::nvdimm::FlushStats;
use vm_memory::mmap::MmapRegion;

use crate::memory::backing::{LegacyPmemBacking, NvdimmBacking};

/// One NVDIMM: its file, its mapping and where the guest sees it.
#[derive(Debug)]
pub struct Nvdimm {
    /// Its memory slots around poisoned pages (`mce=on`). First: fields are
    /// dropped in order, and these must be closed before `mapping` goes.
    pub poison: Option<crate::nvdimm::mce::SlotsGuard>,
    /// The flush recorder of `record=` (it reads pages through a view of
    /// `mapping`: dropped before it, as `poison`).
    pub recorder: Option<Arc<crate::nvdimm::record::FlushRecorder>>,
    /// Backing file.
    pub backing: NvdimmBacking,
    /// The `MAP_SHARED` mapping registered as a memslot.
    pub mapping: MmapRegion,
    /// Guest physical base.
    pub base: u64,
    /// Flush counters.
    pub flush_stats: Arc<FlushStats>,
    /// NFIT device handle (addresses its `_DSM` calls).
    pub handle: u32,
    /// Bad ranges, health and unsafe shutdown count ([`crate::nvdimm::media`]).
    pub media: Arc<devices::nvdimm_media::DimmMedia>,
}

impl Nvdimm {
    /// Guest physical range length.
    pub fn size(&self) -> u64 {
        self.mapping.size() as u64
    }
}

/// One legacy persistent-memory range (E820 type 12): its backing file,
/// the mapping registered as a memslot and its guest base.
#[derive(Debug)]
pub struct LegacyPmem {
    /// Backing file.
    pub backing: LegacyPmemBacking,
    /// The `MAP_SHARED` mapping registered as a memslot.
    pub mapping: MmapRegion,
    /// Guest physical base.
    pub base: u64,
}
