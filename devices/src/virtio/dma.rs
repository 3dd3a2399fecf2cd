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

use std::sync::{Arc, Mutex, PoisonError, RwLockReadGuard};

use crate::store_gate::StoreGate;

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

/// Told of each range a device wrote into guest memory that it watches (a
/// recorded NVDIMM: a store by DMA must enter the recording as a store by a
/// vCPU does, through KVM's dirty log).
pub trait DmaWriteWatcher: Send + Sync + std::fmt::Debug {
    /// A device wrote `len` bytes at byte `offset` of the watched range.
    fn wrote(&self, offset: u64, len: u64);

    /// The gate a device holds while it stores into the range and tells of it
    /// (a recording takes its epoch with every store stopped).
    fn store_gate(&self) -> Option<Arc<StoreGate>> {
        None
    }
}

/// A watched guest range: base, length, watcher.
type Watch = (u64, u64, Arc<dyn DmaWriteWatcher>);

/// What devices may read and what they may write, at one moment.
#[derive(Debug, Clone)]
pub struct DmaMemory {
    /// Every range: descriptors, driver-to-device buffers, the available ring.
    pub readable: GuestMemoryMmap,
    /// The ranges the guest may write: device-to-driver buffers, status bytes,
    /// the used ring.
    pub writable: GuestMemoryMmap,
    watches: Vec<Watch>,
    /// The watchers' store gate (one per VM).
    gate: Option<Arc<StoreGate>>,
}

impl DmaMemory {
    /// RAM only (RAM is always writable).
    pub fn ram(ram: &GuestMemoryMmap) -> Self {
        Self {
            readable: ram.clone(),
            writable: ram.clone(),
            watches: Vec::new(),
            gate: None,
        }
    }

    /// These views, with `watcher` told of device writes into `len` bytes at
    /// guest address `base`.
    pub fn with_watch(&self, base: u64, len: u64, watcher: Arc<dyn DmaWriteWatcher>) -> Self {
        let mut next = self.clone();
        next.gate = next.gate.take().or_else(|| watcher.store_gate());
        next.watches.push((base, len, watcher));
        next
    }

    /// Held while a device stores into guest memory at the `(address,
    /// length)` ranges `targets` and tells the watchers: the store gate's
    /// shared side when a target meets a watched range, else nothing.
    pub fn storing(&self, targets: &[(u64, u32)]) -> Option<RwLockReadGuard<'_, ()>> {
        let gate = self.gate.as_ref()?;
        let meets = targets.iter().any(|&(addr, len)| {
            let end = addr.saturating_add(u64::from(len));
            self.watches
                .iter()
                .any(|(base, size, _)| addr < base.saturating_add(*size) && *base < end)
        });
        meets.then(|| gate.storing())
    }

    /// True when some range is watched (a device need not note what it wrote otherwise).
    pub fn watched(&self) -> bool {
        !self.watches.is_empty()
    }

    /// A device wrote `len` bytes at guest address `addr`: tells the watchers
    /// of the ranges it touched, each with the part in its range.
    pub fn wrote(&self, addr: u64, len: u64) {
        let end = addr.saturating_add(len);
        for (base, size, w) in &self.watches {
            let from = addr.max(*base);
            let to = end.min(base.saturating_add(*size));
            if from < to {
                w.wrote(from - base, to - from);
            }
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
        Ok(Self {
            readable,
            writable,
            watches: self.watches.clone(),
            gate: self.gate.clone(),
        })
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

    /// Tells `watcher` of device writes into `len` bytes at `base`, for every device.
    pub fn watch(&self, base: u64, len: u64, watcher: Arc<dyn DmaWriteWatcher>) {
        let mut now = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        *now = Arc::new(now.with_watch(base, len, watcher));
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

    #[derive(Debug, Default)]
    struct Seen(std::sync::Mutex<Vec<(u64, u64)>>);

    impl DmaWriteWatcher for Seen {
        fn wrote(&self, offset: u64, len: u64) {
            self.0.lock().unwrap().push((offset, len));
        }
    }

    #[test]
    fn a_watcher_hears_of_the_part_of_each_device_write_in_its_range() {
        let seen = Arc::new(Seen::default());
        let view = DmaView::new(DmaMemory::ram(&ram()));
        view.watch(0x1000, 0x2000, seen.clone());
        let mem = view.current();
        mem.wrote(0x800, 0x1000); // straddles the start
        mem.wrote(0x2800, 0x1000); // straddles the end
        mem.wrote(0x5000, 16); // outside
        mem.wrote(u64::MAX - 4, 16); // wraps: cut at the end of the address space
        assert_eq!(*seen.0.lock().unwrap(), vec![(0, 0x800), (0x1800, 0x800)]);
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
