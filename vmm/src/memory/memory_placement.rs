//! How guest memory is placed on the host: the checks of `--pin`,
//! `--host-node` and huge pages that run before anything is created, and,
//! per DIMM mapping, the huge-page advice, the 2 MiB alignment check and the
//! NUMA binding (docs/performance.md).

use vm_memory::MmapRegion;

use crate::memory::backing::NvdimmBacking;
use crate::memory::hugepages::HugePageError;
use crate::memory::hugepages::{self, FsKind, MemorySpec};
use crate::memory::placement::PlacementError;
use crate::memory::placement::{self, Placement};

/// Errors of placing guest memory on the host.
#[derive(Debug, thiserror::Error)]
pub enum MemoryPlacementError {
    /// `--pin` / `--host-node`.
    #[error(transparent)]
    Placement(#[from] PlacementError),
    /// Huge pages.
    #[error(transparent)]
    Huge(#[from] HugePageError),
}

/// The host-side checks of `--pin`, `--host-node` and huge pages, which
/// touch nothing (also run by `pmemvm preflight` and before `run` builds
/// anything).
pub fn check_host_placement(
    cpus: u8,
    memory: &MemorySpec,
    placement: &Placement,
    nvdimms: &[crate::config::NvdimmSpec],
) -> Result<(), MemoryPlacementError> {
    placement.check(cpus)?;
    for n in nvdimms {
        if let Some(path) = n.file.as_deref() {
            hugepages::backing_len(n, path)?;
        }
    }
    hugepages::check(memory, nvdimms)?;
    Ok(())
}

/// Huge-page advice, alignment check and NUMA binding of one DIMM mapping.
pub fn place_dimm(
    b: &NvdimmBacking,
    mapping: &MmapRegion,
    base: u64,
    node: Option<u32>,
) -> Result<(), MemoryPlacementError> {
    if b.fs != FsKind::Other {
        if !hugepages::relatively_aligned(mapping.as_ptr() as u64, base) {
            // Info, not a warning: Linux leaves a shmem mapping unaligned only when
            // that tmpfs gives no huge pages (huge=never, the default), so 4 KiB pages
            // are all it offers anyway; a run's own stderr stays the guest's.
            log::info!(
                "NVDIMM {}: host mapping {:#x} and guest address {base:#x} are not 2 MiB aligned \
                 to each other, so KVM maps it with 4 KiB pages",
                b.display,
                mapping.as_ptr() as usize
            );
        }
        if b.fs == FsKind::Tmpfs {
            // For tmpfs mounted huge=advise; harmless under huge=always/never.
            // SAFETY: madvise only changes the paging advice of this live
            // mapping, owned by `mapping`.
            unsafe { libc::madvise(mapping.as_ptr().cast(), mapping.size(), libc::MADV_HUGEPAGE) };
        }
    }
    if let Some(node) = node {
        let what = format!("NVDIMM {}", b.display);
        placement::bind_memory(mapping.as_ptr() as usize, mapping.size(), node, &what)?;
    }
    Ok(())
}
