//! Machine checks on poisoned loads (`--nvdimm SIZE,mce=on`).
//!
//! On a real NVDIMM a load from a poisoned line is a machine check; Linux's
//! DAX and pmem paths (`copy_mc_*`, `memory_failure`, SIGBUS to the mapping
//! process) exist for it. pmemvm makes the same happen: every 4 KiB page a
//! bad range touches is left out of the DIMM's KVM memory slots
//! ([`holes`]), so the guest's access to it exits to pmemvm. A load that
//! overlaps a bad range gets a machine check on its vCPU ([`deliver`]);
//! any other access inside a hole (the good bytes of a page, every store)
//! is served from the backing file as if the slot were there. Whenever the
//! bad ranges change — `badblocks=` at start, `pmemvm ctl … media
//! inject|clear`, the guest's ARS error-inject or clear-error `_DSM` — the
//! holes follow ([`PoisonSlots`] watches the DIMM's media state), so a
//! cleared range is ordinary memory again.
//!
//! Needs: a host KVM with `KVM_CAP_MCE` and MCG_SER_P (x86 KVM has both
//! since Linux 2.6.32 and 3.x); the guest kernel with `CONFIG_X86_MCE` and
//! `CONFIG_MEMORY_FAILURE`. Stores do not clear poison (as on hardware: the
//! guest's clear-error `_DSM`, which Linux's pmem driver calls when it
//! rewrites a bad block, does).

pub mod broadcast;
pub mod deliver;
pub mod holes;
pub mod rmw;
pub mod vcpu_side;

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use devices::nvdimm_media::{MediaState, MediaWatch};
use kvm_bindings::kvm_userspace_memory_region;
use kvm_ioctls::VmFd;

/// Errors of machine-check setup and delivery.
#[derive(Debug, thiserror::Error)]
pub enum McError {
    /// No `KVM_CAP_MCE`.
    #[error(
        "this host's KVM cannot raise machine checks in a guest (no KVM_CAP_MCE); drop mce=on"
    )]
    NoMce,
    /// Too few banks.
    #[error("this host's KVM emulates {0} machine-check banks and pmemvm needs {b}; drop mce=on", b = deliver::BANKS)]
    FewBanks(u64),
    /// No MCG_SER_P.
    #[error("this host's KVM does not offer software error recovery (MCG_SER_P) to guests, so a machine check would be fatal to the guest; drop mce=on")]
    NoRecovery,
    /// Too few memory slots.
    #[error("this host's KVM has {have} memory slots and a machine with {dimms} mce=on DIMMs needs {need}; use fewer mce=on DIMMs or --nvdimm-slots")]
    Slots {
        /// Slots KVM has.
        have: usize,
        /// DIMMs with mce=on.
        dimms: usize,
        /// Slots needed.
        need: usize,
    },
    /// An ioctl failed.
    #[error("KVM refused {what}: {source}")]
    Kvm {
        /// The ioctl.
        what: &'static str,
        /// Its error.
        #[source]
        source: std::io::Error,
    },
    /// The load could not be finished before its machine check.
    #[error("finishing the guest's load before its machine check: {0}")]
    Completion(String),
    /// Reading or writing the backing file for an access inside a hole.
    #[error("NVDIMM backing file {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
}

impl crate::exit_status::Classified for McError {
    fn kind(&self) -> crate::exit_status::ErrorKind {
        use crate::exit_status::ErrorKind::*;
        match self {
            Self::NoMce | Self::FewBanks(_) | Self::NoRecovery | Self::Slots { .. } => Usage,
            _ => Environment,
        }
    }
}

/// The KVM memory slot numbers the mce=on DIMMs use, from the top of KVM's
/// range down ([`holes::SLOTS_PER_DIMM`] each), above everything else
/// (`below`: the first slot number the rest of the machine does not use,
/// hot-add slots included).
pub fn slot_ids(
    nr_memslots: usize,
    below: usize,
    dimms: usize,
) -> Result<Vec<std::ops::Range<u32>>, McError> {
    let need = below + dimms * holes::SLOTS_PER_DIMM;
    let too_few = McError::Slots {
        have: nr_memslots,
        dimms,
        need,
    };
    let (Ok(top), Ok(count), Ok(per)) = (
        u32::try_from(nr_memslots),
        u32::try_from(dimms),
        u32::try_from(holes::SLOTS_PER_DIMM),
    ) else {
        return Err(too_few);
    };
    if need > nr_memslots {
        return Err(too_few);
    }
    Ok((0..count)
        .map(|k| top - (k + 1) * per..top - k * per)
        .collect())
}

struct Layout {
    /// Bad ranges (offset, length from the region start).
    bad: Vec<(u64, u64)>,
    /// The holes KVM's slots leave now.
    holes: Vec<(u64, u64)>,
    /// Slots registered now (the first of `ids`).
    used: usize,
}

/// One mce=on DIMM's memory slots: the pieces between its poisoned pages.
pub struct PoisonSlots {
    vm_fd: Arc<VmFd>,
    base: u64,
    size: u64,
    /// Host address of the DIMM's mapping (owned by its `Nvdimm`).
    host: u64,
    flags: u32,
    ids: std::ops::Range<u32>,
    file: Arc<File>,
    path: String,
    layout: Mutex<Layout>,
    /// Set when the DIMM's mapping is about to go: no slot is registered
    /// after it.
    closed: AtomicBool,
    /// Machine checks raised.
    pub raised: AtomicU64,
    /// Held from a locked instruction's read of a hole to its write.
    pub rmw: rmw::HoleLock,
}

impl std::fmt::Debug for PoisonSlots {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PoisonSlots")
            .field("base", &self.base)
            .field("size", &self.size)
            .field("ids", &self.ids)
            .finish_non_exhaustive()
    }
}

/// Where a DIMM is and what backs it, for [`PoisonSlots::new`].
#[derive(Debug)]
pub struct DimmPlace {
    /// Guest base.
    pub base: u64,
    /// Region size.
    pub size: u64,
    /// Host address of its mapping.
    pub host: u64,
    /// `KVM_MEM_READONLY` or 0.
    pub flags: u32,
    /// The backing file.
    pub file: Arc<File>,
    /// Its name for messages.
    pub path: String,
}

impl PoisonSlots {
    /// The DIMM at `place` with slot numbers `ids`, its slots registered
    /// around the pages of `bad`.
    ///
    /// # Safety
    ///
    /// `place.host..place.host+place.size` must be a mapping that stays
    /// alive until [`PoisonSlots::close`] is called (the `Nvdimm` holding
    /// it calls it when dropped).
    pub unsafe fn new(
        vm_fd: Arc<VmFd>,
        place: DimmPlace,
        ids: std::ops::Range<u32>,
        bad: &[(u64, u64)],
    ) -> Result<Arc<Self>, McError> {
        let p = Arc::new(Self {
            vm_fd,
            base: place.base,
            size: place.size,
            host: place.host,
            flags: place.flags,
            ids,
            file: place.file,
            path: place.path,
            layout: Mutex::new(Layout {
                bad: Vec::new(),
                holes: Vec::new(),
                used: 0,
            }),
            closed: AtomicBool::new(false),
            raised: AtomicU64::new(0),
            rmw: rmw::HoleLock::default(),
        });
        p.apply(bad)?;
        Ok(p)
    }

    fn layout(&self) -> std::sync::MutexGuard<'_, Layout> {
        self.layout
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// No more slot changes: the mapping is going.
    pub fn close(&self) {
        let _l = self.layout();
        self.closed.store(true, Ordering::SeqCst);
    }

    /// Whether `gpa` is in this DIMM.
    pub fn contains(&self, gpa: u64) -> bool {
        gpa.wrapping_sub(self.base) < self.size
    }

    /// Whether a load of `len` bytes at `gpa` touches a bad range.
    pub fn poisoned(&self, gpa: u64, len: usize) -> bool {
        let off = gpa.wrapping_sub(self.base);
        holes::overlaps(&self.layout().bad, off, len as u64)
    }

    /// "NVDIMM FILE offset OFF" for `gpa`.
    pub fn describe(&self, gpa: u64) -> String {
        format!(
            "NVDIMM {} offset {:#x}",
            self.path,
            gpa.wrapping_sub(self.base)
        )
    }

    /// Registers the slots around the pages of `bad` (offset, length);
    /// returns how many holes they leave.
    pub fn apply(&self, bad: &[(u64, u64)]) -> Result<usize, McError> {
        let mut l = self.layout();
        l.bad = bad.to_vec();
        let holes = holes::holes(bad, self.size);
        if self.closed.load(Ordering::SeqCst) || (holes == l.holes && l.used > 0) {
            return Ok(l.holes.len());
        }
        // Out with the old pieces, in with the new: an access between the
        // two exits to pmemvm and is served from the file.
        for slot in self.ids.clone().take(l.used) {
            self.register(slot, 0, 0, 0)?;
        }
        l.used = 0;
        let pieces = holes::pieces(&holes, self.size);
        for (slot, (off, len)) in self.ids.clone().zip(pieces) {
            self.register(slot, off, len, self.host + off)?;
            l.used += 1;
        }
        l.holes = holes;
        Ok(l.holes.len())
    }

    fn register(&self, slot: u32, off: u64, len: u64, host: u64) -> Result<(), McError> {
        let region = kvm_userspace_memory_region {
            slot,
            flags: self.flags,
            guest_phys_addr: self.base + off,
            memory_size: len,
            userspace_addr: host,
        };
        // SAFETY: `host..host+len` lies in the DIMM's mapping (`off + len`
        // ≤ size, from `holes::pieces`), alive until `close`, which `apply`
        // checks under the same lock; a zero length deletes the slot. The
        // guest range is the DIMM's own, which no other slot covers.
        unsafe { self.vm_fd.set_user_memory_region(region) }.map_err(|e| McError::Kvm {
            what: "a memory slot around a poisoned page",
            source: std::io::Error::from_raw_os_error(e.errno()),
        })
    }

    /// Serves a read inside a hole from the backing file.
    pub fn read(&self, gpa: u64, data: &mut [u8]) -> Result<(), McError> {
        let off = gpa.wrapping_sub(self.base);
        if off.saturating_add(data.len() as u64) > self.size {
            data.fill(0xff);
            return Ok(());
        }
        self.file
            .read_exact_at(data, off)
            .map_err(|source| McError::Io {
                path: self.path.clone(),
                source,
            })
    }

    /// Serves a store inside a hole into the backing file (dropped on a
    /// read-only DIMM, as KVM drops it there).
    pub fn write(&self, gpa: u64, data: &[u8]) -> Result<(), McError> {
        let off = gpa.wrapping_sub(self.base);
        if self.flags != 0 || off.saturating_add(data.len() as u64) > self.size {
            return Ok(());
        }
        self.file
            .write_all_at(data, off)
            .map_err(|source| McError::Io {
                path: self.path.clone(),
                source,
            })
    }
}

/// The memory slots of mce=on DIMM `b` mapped at `mapping` from guest
/// address `base`, around the bad ranges of `media`, which they follow
/// from now on.
pub fn with_slots(
    vm_fd: &Arc<VmFd>,
    b: &crate::memory::backing::NvdimmBacking,
    mapping: &vm_memory::mmap::MmapRegion,
    base: u64,
    ids: std::ops::Range<u32>,
    media: &Arc<devices::nvdimm_media::DimmMedia>,
) -> Result<Arc<PoisonSlots>, McError> {
    let bad = bad_ranges(&media.state());
    let place = DimmPlace {
        base,
        size: mapping.size() as u64,
        host: mapping.as_ptr() as u64,
        flags: match b.spec.readonly {
            true => kvm_bindings::KVM_MEM_READONLY,
            false => 0,
        },
        file: b.file.clone(),
        path: b.display.clone(),
    };
    // SAFETY: `mapping` is the DIMM's, owned by the `Nvdimm` that will hold
    // the returned slots in a `SlotsGuard`, a field dropped (and so closing
    // them) before its `mapping`.
    let p = unsafe { PoisonSlots::new(vm_fd.clone(), place, ids, &bad) }?;
    media.watch(p.clone());
    Ok(p)
}

/// The bad ranges of `state` as (offset, length).
fn bad_ranges(state: &MediaState) -> Vec<(u64, u64)> {
    state
        .bad_ranges
        .iter()
        .map(|r| (r.offset, r.length))
        .collect()
}

/// Closes the slots when dropped (held before the DIMM's mapping).
#[derive(Debug)]
pub struct SlotsGuard(pub Arc<PoisonSlots>);

impl Drop for SlotsGuard {
    fn drop(&mut self) {
        self.0.close();
    }
}

impl MediaWatch for PoisonSlots {
    fn bad_ranges_changed(&self, state: &MediaState) {
        let bad = bad_ranges(state);
        match self.apply(&bad) {
            Ok(holes) => log::info!(
                "mce: NVDIMM {}: {} bad ranges, {holes} holes in its memory slots",
                self.path,
                bad.len()
            ),
            Err(e) => log::warn!(
                "mce: NVDIMM {}: the memory slots could not follow the bad ranges ({e}); loads from them read the file's bytes",
                self.path
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_numbers_come_from_the_top_and_never_meet_the_rest() {
        let ids = slot_ids(509, 10, 2).unwrap();
        assert_eq!(ids, [476..509, 443..476]);
        assert!(slot_ids(509, 500, 1).is_err());
        let e = slot_ids(100, 40, 2).unwrap_err().to_string();
        assert!(
            e.contains("100 memory slots") && e.contains("needs 106"),
            "{e}"
        );
        assert_eq!(
            slot_ids(32764, 0, 0).unwrap(),
            Vec::<std::ops::Range<u32>>::new()
        );
    }
}
