//! The guest memory a virtio device reaches by DMA, as two views: what it may
//! read (RAM and every persistent-memory range) and what it may write (the same
//! less every range the user made read-only). A hostile driver that points a
//! disk read, a status byte or the used ring at a read-only NVDIMM finds that
//! range missing from the writable view: the request fails (or the device
//! needs a reset) and nothing is stored through a `PROT_READ` mapping, which
//! would end pmemvm with SIGSEGV.
//!
//! The views are shared by every device and replaced whole when the machine
//! gains a range (an NVDIMM hot-add); a device takes the current pair at each
//! queue notification.

use std::sync::{Arc, Mutex, PoisonError};

use vm_memory::mmap::MmapRegion;
use vm_memory::{GuestAddress, GuestMemoryMmap, GuestRegionMmap};

/// Errors of adding a range to the views.
#[derive(Debug, thiserror::Error)]
pub enum DmaError {
    /// vm-memory refused the range (it overlaps one already there, or does not fit).
    #[error("the devices' view of guest memory could not take the range at {base:#x} ({len} bytes): {why}")]
    Region {
        /// Guest physical base.
        base: u64,
        /// Length.
        len: usize,
        /// Cause.
        why: String,
    },
}

/// What devices may read and what they may write, at one moment.
#[derive(Debug, Clone)]
pub struct DmaMemory {
    /// Every range: descriptors, driver-to-device buffers, the available ring.
    pub readable: GuestMemoryMmap,
    /// The ranges the guest may write: device-to-driver buffers, status bytes,
    /// the used ring.
    pub writable: GuestMemoryMmap,
}

impl DmaMemory {
    /// RAM only (RAM is always writable).
    pub fn ram(ram: &GuestMemoryMmap) -> Self {
        Self {
            readable: ram.clone(),
            writable: ram.clone(),
        }
    }

    /// These views with the mapping `m` at guest address `base` added; it
    /// joins the writable view only when it is mapped with `PROT_WRITE`.
    /// The mapping is borrowed, not owned: the caller keeps it mapped as long
    /// as any device may use the result.
    pub fn with_range(&self, base: u64, m: &MmapRegion) -> Result<Self, DmaError> {
        let err = |why: String| DmaError::Region {
            base,
            len: m.size(),
            why,
        };
        let add = |mem: &GuestMemoryMmap| -> Result<GuestMemoryMmap, DmaError> {
            // SAFETY: `m` is a live mapping of `m.size()` bytes at `m.as_ptr()`
            // with the protection and flags it reports, and the caller keeps it
            // mapped while the result is used (above); the new region does not
            // own it, so dropping the result never unmaps it.
            let raw = unsafe { MmapRegion::build_raw(m.as_ptr(), m.size(), m.prot(), m.flags()) }
                .map_err(|e| err(e.to_string()))?;
            let region = GuestRegionMmap::new(raw, GuestAddress(base))
                .ok_or_else(|| err("it does not fit the guest address space".into()))?;
            mem.insert_region(Arc::new(region))
                .map_err(|e| err(e.to_string()))
        };
        let readable = add(&self.readable)?;
        let writable = if m.prot() & libc::PROT_WRITE != 0 {
            add(&self.writable)?
        } else {
            self.writable.clone()
        };
        Ok(Self { readable, writable })
    }
}

/// The views every device shares; replaced whole, never edited in place.
#[derive(Debug, Clone)]
pub struct DmaView(Arc<Mutex<Arc<DmaMemory>>>);

impl DmaView {
    /// A shared view starting as `mem`.
    pub fn new(mem: DmaMemory) -> Self {
        Self(Arc::new(Mutex::new(Arc::new(mem))))
    }

    /// The views now (a device uses one pair for a whole notification).
    pub fn current(&self) -> Arc<DmaMemory> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Adds the mapping `m` at `base` for every device (a hot-added range);
    /// on error the views are unchanged. Same contract as [`DmaMemory::with_range`].
    pub fn add_range(&self, base: u64, m: &MmapRegion) -> Result<(), DmaError> {
        let mut now = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let next = now.with_range(base, m)?;
        *now = Arc::new(next);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vm_memory::{Bytes, GuestMemoryBackend};

    fn ram() -> GuestMemoryMmap {
        GuestMemoryMmap::<()>::from_ranges(&[(GuestAddress(0), 1 << 20)]).unwrap()
    }

    #[test]
    fn a_read_only_range_is_readable_but_not_writable_and_ram_is_both() {
        let rw = MmapRegion::new(1 << 20).unwrap();
        let ro = MmapRegion::<()>::build(
            None,
            1 << 20,
            libc::PROT_READ,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
        )
        .unwrap();
        let view = DmaMemory::ram(&ram())
            .with_range(1 << 32, &rw)
            .unwrap()
            .with_range(2 << 32, &ro)
            .unwrap();
        for (addr, readable, writable) in [
            (0x1000u64, true, true),
            ((1 << 32) + 0x1000, true, true),
            ((2 << 32) + 0x1000, true, false),
            (3 << 32, false, false),
        ] {
            let a = GuestAddress(addr);
            assert_eq!(view.readable.address_in_range(a), readable, "{addr:#x}");
            assert_eq!(view.writable.address_in_range(a), writable, "{addr:#x}");
        }
        view.writable
            .write_slice(b"dax", GuestAddress((1 << 32) + 64))
            .unwrap();
        // SAFETY: the region is 1 MiB long and mapped; reading 3 bytes at 64.
        let seen = unsafe { std::slice::from_raw_parts(rw.as_ptr().add(64), 3) };
        assert_eq!(seen, b"dax", "the view writes the mapping itself");
        let e = DmaMemory::ram(&ram()).with_range(0, &rw).unwrap_err();
        assert!(e.to_string().contains("range at 0x0"), "{e}");
    }

    #[test]
    fn a_hot_added_range_reaches_every_holder_of_the_view() {
        let view = DmaView::new(DmaMemory::ram(&ram()));
        let device_copy = view.clone();
        let before = device_copy.current();
        let added = MmapRegion::new(1 << 20).unwrap();
        view.add_range(1 << 32, &added).unwrap();
        let a = GuestAddress((1 << 32) + 8);
        assert!(
            !before.writable.address_in_range(a),
            "an old pair stays as it was"
        );
        assert!(device_copy.current().writable.address_in_range(a));
        // An overlapping add changes nothing.
        assert!(view.add_range(1 << 32, &added).is_err());
        assert_eq!(device_copy.current().readable.num_regions(), 2);
    }
}
