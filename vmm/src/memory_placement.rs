//! How guest memory is placed on the host: the checks of `--pin`,
//! `--host-node` and huge pages that run before anything is created, and,
//! per DIMM mapping, the huge-page advice, the 2 MiB alignment check and the
//! NUMA binding (docs/performance.md).

use std::fs::File;
use std::path::Path;

use vm_memory::MmapRegion;

use crate::backing::NvdimmBacking;
use crate::hugepages::{self, fs_kind, FsKind, MemorySpec};
use crate::placement::{self, Placement};
use crate::vm::VmError;

/// The host-side checks of `--pin`, `--host-node` and huge pages, which
/// touch nothing (also run by `pmemvm preflight` and before `run` builds
/// anything).
pub fn check_host_placement(
    cpus: u8,
    memory: &MemorySpec,
    placement: &Placement,
    nvdimms: &[crate::config::NvdimmSpec],
) -> Result<(), VmError> {
    placement.check(cpus)?;
    for n in nvdimms {
        if let Some(path) = n.file.as_deref() {
            backing_len(n, path)?;
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
) -> Result<(), VmError> {
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

/// True when `path` (or, for a file not there yet, its directory) is on hugetlbfs.
pub fn on_hugetlbfs(path: &Path) -> bool {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let on = |p: &Path| File::open(p).is_ok_and(|f| fs_kind(&f) == FsKind::Hugetlbfs);
    on(path) || (!path.exists() && on(dir))
}

/// The length the backing file of `spec` at `path` must have: the region,
/// labels and identity page; on hugetlbfs (label-less DIMMs only: it has
/// no write(2) for label writes) rounded up to whole 2 MiB pages.
pub fn backing_len(
    spec: &crate::config::NvdimmSpec,
    path: &Path,
) -> Result<u64, hugepages::HugePageError> {
    if !on_hugetlbfs(path) {
        return Ok(spec.file_len());
    }
    if spec.label_size != 0 {
        return Err(hugepages::HugePageError::HugetlbfsFile(
            path.display().to_string(),
        ));
    }
    Ok(hugepages::huge_len(spec.file_len()))
}
