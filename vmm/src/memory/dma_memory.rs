//! The guest memory a DMA device (a virtio disk) reaches: RAM, and every NVDIMM and
//! legacy persistent-memory range, in the two views of [`devices::virtio::dma`] (what
//! a device may read, what it may write). Guest pages of a DAX mapping are pmem
//! pages, and the guest hands them to a disk as any other buffer (an `O_DIRECT` read
//! or write between a file and a DAX-mapped buffer: ndctl's `device-dax` test does
//! it); a device that saw only RAM returned such a request unused and the guest read
//! its stale status byte as success — the data silently not moved. A `readonly`
//! DIMM or legacy range is mapped `PROT_READ` and joins the readable view only.

use devices::virtio::dma::{DmaError, DmaMemory, DmaView};
use vm_memory::mmap::MmapRegion;
use vm_memory::GuestMemoryMmap;

/// The views of `ram` with each `(guest base, mapping)` of `pmem` added (the
/// mappings are borrowed, not owned: dropping the views unmaps nothing).
///
/// The caller keeps every mapping of `pmem` alive as long as any device uses the
/// views (the VM owns both; a hot-added DIMM's mapping lives as long as the VM).
pub fn with_pmem<'a>(
    ram: &GuestMemoryMmap,
    pmem: impl IntoIterator<Item = (u64, &'a MmapRegion)>,
) -> Result<DmaView, DmaError> {
    let mut mem = DmaMemory::ram(ram);
    for (base, m) in pmem {
        mem = mem.with_range(base, m)?;
    }
    Ok(DmaView::new(mem))
}

#[cfg(test)]
mod tests {
    use super::*;
    use vm_memory::{Bytes, GuestAddress, GuestMemoryBackend};

    #[test]
    fn pmem_ranges_are_reachable_beside_ram_read_only_ones_only_to_read() {
        let ram = GuestMemoryMmap::<()>::from_ranges(&[(GuestAddress(0), 1 << 20)]).unwrap();
        let pmem = MmapRegion::new(2 << 20).unwrap();
        // A `readonly` DIMM: its file mapped shared and PROT_READ.
        let dir = crate::fresh_test_dir("dma-memory");
        let file = std::fs::File::create(dir.join("ro.img")).unwrap();
        file.set_len(1 << 20).unwrap();
        let file = std::fs::File::open(dir.join("ro.img")).unwrap();
        let ro = MmapRegion::<()>::build(
            Some(vm_memory::FileOffset::new(file, 0)),
            1 << 20,
            libc::PROT_READ,
            libc::MAP_SHARED,
        )
        .unwrap();
        let view = with_pmem(&ram, [(1u64 << 32, &pmem), (2u64 << 32, &ro)])
            .unwrap()
            .current();
        view.writable
            .write_slice(b"dax page", GuestAddress((1 << 32) + 4096))
            .unwrap();
        // SAFETY: the region is 2 MiB long and still mapped; reading 8 bytes at 4096.
        let seen = unsafe { std::slice::from_raw_parts(pmem.as_ptr().add(4096), 8) };
        assert_eq!(seen, b"dax page", "the view writes the pmem mapping itself");
        assert!(view
            .writable
            .address_in_range(GuestAddress((1 << 32) + (2 << 20) - 1)));
        assert!(!view
            .readable
            .address_in_range(GuestAddress((1 << 32) + (2 << 20))));
        assert!(view.readable.address_in_range(GuestAddress(2 << 32)));
        assert!(!view.writable.address_in_range(GuestAddress(2 << 32)));
        drop(view);
        // SAFETY: as above; the dropped view did not unmap the region.
        let after = unsafe { std::slice::from_raw_parts(pmem.as_ptr().add(4096), 8) };
        assert_eq!(after, b"dax page");
        // Overlapping RAM is refused with the range named.
        let e = with_pmem(&ram, [(0u64, &pmem)]).unwrap_err();
        assert!(e.to_string().contains("range at 0x0"), "{e}");
        let _ = std::fs::remove_dir_all(dir);
    }
}
