//! The guest memory a DMA device (a virtio disk) reaches: RAM, and every NVDIMM and
//! legacy persistent-memory range. Guest pages of a DAX mapping are pmem pages, and the
//! guest hands them to a disk as any other buffer (an `O_DIRECT` read or write between a
//! file and a DAX-mapped buffer: ndctl's `device-dax` test does it); a device that saw
//! only RAM returned such a request unused and the guest read its stale status byte as
//! success — the data silently not moved.

use std::sync::Arc;

use vm_memory::mmap::MmapRegion;
use vm_memory::{GuestAddress, GuestMemoryMmap, GuestRegionMmap};

/// Errors of building the devices' view of guest memory.
#[derive(Debug, thiserror::Error)]
pub enum DmaMemoryError {
    /// A range could not be described to vm-memory.
    #[error("the devices' view of guest memory could not take the persistent-memory range at {base:#x} ({len} bytes): {why}")]
    Region {
        /// Guest physical base.
        base: u64,
        /// Length.
        len: usize,
        /// Cause.
        why: String,
    },
}

/// `ram` with each `(guest base, mapping)` of `pmem` added (the mappings are borrowed,
/// not owned: dropping the result unmaps nothing).
///
/// The caller keeps every mapping of `pmem` alive as long as any device uses the result
/// (the VM owns both; its devices run only in its vCPU threads, which end before it is
/// dropped).
pub fn with_pmem<'a>(
    ram: &GuestMemoryMmap,
    pmem: impl IntoIterator<Item = (u64, &'a MmapRegion)>,
) -> Result<GuestMemoryMmap, DmaMemoryError> {
    let mut mem = ram.clone();
    for (base, m) in pmem {
        let err = |why: String| DmaMemoryError::Region {
            base,
            len: m.size(),
            why,
        };
        // SAFETY: `m` is a live mapping of `m.size()` bytes at `m.as_ptr()` with the
        // protection and flags it reports, and the caller keeps it mapped while the result
        // is used (above); the new region does not own it, so it never unmaps it.
        let raw = unsafe { MmapRegion::build_raw(m.as_ptr(), m.size(), m.prot(), m.flags()) }
            .map_err(|e| err(e.to_string()))?;
        let region = GuestRegionMmap::new(raw, GuestAddress(base))
            .ok_or_else(|| err("it does not fit the guest address space".into()))?;
        mem = mem
            .insert_region(Arc::new(region))
            .map_err(|e| err(e.to_string()))?;
    }
    Ok(mem)
}

#[cfg(test)]
mod tests {
    use super::*;
    use vm_memory::{Bytes, GuestMemoryBackend};

    #[test]
    fn a_pmem_range_is_reachable_beside_ram_and_stays_mapped_when_the_view_is_dropped() {
        let ram = GuestMemoryMmap::<()>::from_ranges(&[(GuestAddress(0), 1 << 20)]).unwrap();
        let pmem = MmapRegion::new(2 << 20).unwrap();
        let view = with_pmem(&ram, [(1u64 << 32, &pmem)]).unwrap();
        view.write_slice(b"dax page", GuestAddress((1 << 32) + 4096))
            .unwrap();
        view.write_slice(b"ram", GuestAddress(64)).unwrap();
        // SAFETY: the region is 2 MiB long and still mapped; reading 8 bytes at 4096.
        let seen = unsafe { std::slice::from_raw_parts(pmem.as_ptr().add(4096), 8) };
        assert_eq!(seen, b"dax page", "the view writes the pmem mapping itself");
        assert!(view.address_in_range(GuestAddress((1 << 32) + (2 << 20) - 1)));
        assert!(!view.address_in_range(GuestAddress((1 << 32) + (2 << 20))));
        drop(view);
        // SAFETY: as above; the dropped view did not unmap the region.
        let after = unsafe { std::slice::from_raw_parts(pmem.as_ptr().add(4096), 8) };
        assert_eq!(after, b"dax page");
        // Overlapping RAM is refused with the range named.
        let e = with_pmem(&ram, [(0u64, &pmem)]).unwrap_err();
        assert!(e.to_string().contains("range at 0x0"), "{e}");
    }
}
