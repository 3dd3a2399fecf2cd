//! Where NVDIMM namespace labels live: the [`LabelStorage`] trait the
//! `_DSM` handler ([`crate::nvdimm_dsm`]) reads and writes through, and
//! [`FileLabels`], the label area of a backing file (right after the
//! region the guest maps).
//!
//! Durability: a label write reaches stable storage before the guest sees
//! success — the handler calls [`LabelStorage::sync_labels`] after every
//! write and reports a failed sync as a `_DSM` error.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::atomic::Ordering;

use crate::nvdimm_dsm_page::{DsmStats, DsmStatus, Reply, MAX_LABEL_TRANSFER};

/// Where a DIMM's namespace labels live.
pub trait LabelStorage {
    /// Size of the label area in bytes (0 = label-less DIMM).
    fn label_size(&self) -> u32;
    /// Reads `buf.len()` bytes at `off` within the label area. The caller
    /// has checked `off + buf.len() <= label_size()`.
    fn read_label(&self, off: u64, buf: &mut [u8]) -> io::Result<()>;
    /// Writes `data` at `off` within the label area. The caller has checked
    /// the range and that the storage is not read-only.
    fn write_label(&self, off: u64, data: &[u8]) -> io::Result<()>;
    /// Puts the label writes so far on stable storage.
    fn sync_labels(&self) -> io::Result<()>;
    /// Whether label writes are refused.
    fn readonly(&self) -> bool;
}

/// Labels stored in a range of the DIMM's backing file (pmemvm: the
/// `label_size` bytes right after the region the guest maps).
#[derive(Debug)]
pub struct FileLabels {
    /// The backing file.
    pub file: File,
    /// Offset of the label area in the file.
    pub base: u64,
    /// Size of the label area.
    pub size: u32,
    /// Refuse writes.
    pub readonly: bool,
    /// Write through a shared mapping ([`crate::mapped_write`]): the file has no write(2)
    /// (hugetlbfs, a hugetlb memfd).
    pub through_mapping: bool,
    /// A recorded DIMM's gate, held while a label is written (a recording's
    /// epoch copies the label area with no write in flight).
    pub store_gate: Option<std::sync::Arc<crate::store_gate::StoreGate>>,
}

impl FileLabels {
    /// Labels at `base..base + size` of `file`.
    pub fn new(file: File, base: u64, size: u32, readonly: bool) -> Self {
        Self {
            file,
            base,
            size,
            readonly,
            through_mapping: false,
            store_gate: None,
        }
    }

    /// Label writes hold `gate`'s shared side (a recorded DIMM).
    pub fn store_gate(
        mut self,
        gate: Option<std::sync::Arc<crate::store_gate::StoreGate>>,
    ) -> Self {
        self.store_gate = gate;
        self
    }

    /// Writes go through a shared mapping of the file (for hugetlbfs, which has no
    /// write(2)); reads stay pread(2), which hugetlbfs has.
    pub fn through_mapping(mut self, yes: bool) -> Self {
        self.through_mapping = yes;
        self
    }

    fn file_offset(&self, off: u64, len: usize) -> io::Result<u64> {
        let len = u64::try_from(len).map_err(|_| io::ErrorKind::InvalidInput)?;
        match off.checked_add(len) {
            Some(end) if end <= u64::from(self.size) => self
                .base
                .checked_add(off)
                .ok_or_else(|| io::ErrorKind::InvalidInput.into()),
            _ => Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "label access beyond the label area",
            )),
        }
    }
}

impl LabelStorage for FileLabels {
    fn label_size(&self) -> u32 {
        self.size
    }

    fn read_label(&self, off: u64, buf: &mut [u8]) -> io::Result<()> {
        let at = self.file_offset(off, buf.len())?;
        self.file.read_exact_at(buf, at)
    }

    fn write_label(&self, off: u64, data: &[u8]) -> io::Result<()> {
        if self.readonly {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                "read-only label area",
            ));
        }
        let at = self.file_offset(off, data.len())?;
        let _storing = self.store_gate.as_ref().map(|g| g.storing());
        if self.through_mapping {
            crate::mapped_write::write_through_mapping(&self.file, at, data)
        } else {
            self.file.write_all_at(data, at)
        }
    }

    /// fdatasync of the backing file. Linux has no system call that syncs
    /// a byte range *with* the metadata a first write to a sparse file
    /// needs (`sync_file_range` writes pages but neither allocates durably
    /// nor flushes the disk cache), so this syncs the whole file: the cost
    /// is writing back guest data that is dirty at that moment, only on
    /// label updates (ndctl namespace changes), which are rare.
    fn sync_labels(&self) -> io::Result<()> {
        self.file.sync_data()
    }

    fn readonly(&self) -> bool {
        self.readonly
    }
}

// Label functions 5 and 6 of the Intel family: the handler's share of a
// call once the DIMM, revision and input length are checked.

/// Checks an (offset, length) pair against the label area and the
/// transfer limit.
fn label_range<L: LabelStorage>(dimm: &L, offset: u32, length: u32) -> Option<(u64, usize)> {
    if length > MAX_LABEL_TRANSFER {
        return None;
    }
    let end = u64::from(offset) + u64::from(length);
    if end > u64::from(dimm.label_size()) {
        return None;
    }
    Some((u64::from(offset), usize::try_from(length).ok()?))
}

pub(crate) fn get_label_data<L: LabelStorage>(stats: &DsmStats, dimm: &L, input: &[u8]) -> Reply {
    if input.len() != 8 {
        return Reply::Status(DsmStatus::InvalidInput);
    }
    let offset = u32::from_le_bytes([input[0], input[1], input[2], input[3]]);
    let length = u32::from_le_bytes([input[4], input[5], input[6], input[7]]);
    let Some((off, len)) = label_range(dimm, offset, length) else {
        return Reply::Status(DsmStatus::InvalidInput);
    };
    let mut data = vec![0u8; len];
    match dimm.read_label(off, &mut data) {
        Ok(()) => {
            stats
                .label_bytes_read
                .fetch_add(u64::from(length), Ordering::Relaxed);
            Reply::Data(data)
        }
        Err(e) => {
            log::warn!("nvdimm label read at {off:#x}+{len:#x} failed: {e}");
            Reply::Status(DsmStatus::HardwareError)
        }
    }
}

pub(crate) fn set_label_data<L: LabelStorage>(stats: &DsmStats, dimm: &L, input: &[u8]) -> Reply {
    if input.len() < 8 {
        return Reply::Status(DsmStatus::InvalidInput);
    }
    let offset = u32::from_le_bytes([input[0], input[1], input[2], input[3]]);
    let length = u32::from_le_bytes([input[4], input[5], input[6], input[7]]);
    let data = &input[8..];
    let Some((off, len)) = label_range(dimm, offset, length) else {
        return Reply::Status(DsmStatus::InvalidInput);
    };
    if data.len() != len {
        return Reply::Status(DsmStatus::InvalidInput);
    }
    if dimm.readonly() {
        return Reply::Status(DsmStatus::NotSupported);
    }
    if let Err(e) = dimm.write_label(off, data) {
        log::warn!("nvdimm label write at {off:#x}+{len:#x} failed: {e}");
        return Reply::Status(DsmStatus::HardwareError);
    }
    if let Err(e) = dimm.sync_labels() {
        log::warn!("nvdimm label write at {off:#x}+{len:#x} could not be synced: {e}");
        return Reply::Status(DsmStatus::HardwareError);
    }
    stats.label_syncs.fetch_add(1, Ordering::Relaxed);
    stats
        .label_bytes_written
        .fetch_add(u64::from(length), Ordering::Relaxed);
    Reply::Status(DsmStatus::Success)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nvdimm_dsm::{DsmHandler, DSM_PAGE_SIZE};

    fn rw_input(offset: u32, length: u32, data: &[u8]) -> Vec<u8> {
        let mut v = offset.to_le_bytes().to_vec();
        v.extend_from_slice(&length.to_le_bytes());
        v.extend_from_slice(data);
        v
    }

    #[test]
    fn file_labels_pread_pwrite() {
        let backing = vmm_sys_util::tempfile::TempFile::new().unwrap();
        let path = backing.as_path().to_path_buf();
        let file = backing.as_file().try_clone().unwrap();
        // 1 MiB of "data" followed by a 128 KiB label area.
        file.set_len((1 << 20) + (128 << 10)).unwrap();
        let labels = FileLabels::new(file, 1 << 20, 128 << 10, false);
        let mut h: DsmHandler = DsmHandler::new();
        h.add_dimm(1, labels);
        let mut page = Box::new([0u8; DSM_PAGE_SIZE]);
        let input = rw_input(100, 5, b"hello");
        page[0..4].copy_from_slice(&1u32.to_le_bytes());
        page[4..8].copy_from_slice(&1u32.to_le_bytes());
        page[8..12].copy_from_slice(&6u32.to_le_bytes());
        page[12..16].copy_from_slice(&13u32.to_le_bytes());
        page[16..29].copy_from_slice(&input);
        h.handle(&mut page);
        assert_eq!(&page[..8], &[4, 0, 0, 0, 0, 0, 0, 0]);
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(&bytes[(1 << 20) + 100..(1 << 20) + 105], b"hello");
        assert!(
            bytes[..1 << 20].iter().all(|b| *b == 0),
            "data area touched"
        );
        // Read back through the handler.
        page.fill(0);
        page[0..4].copy_from_slice(&1u32.to_le_bytes());
        page[4..8].copy_from_slice(&1u32.to_le_bytes());
        page[8..12].copy_from_slice(&5u32.to_le_bytes());
        page[12..16].copy_from_slice(&8u32.to_le_bytes());
        page[16..24].copy_from_slice(&rw_input(100, 5, &[]));
        h.handle(&mut page);
        assert_eq!(
            &page[..13],
            &[9, 0, 0, 0, 0, 0, 0, 0, b'h', b'e', b'l', b'l', b'o']
        );
        // Direct bounds checks of FileLabels.
        let f = FileLabels::new(std::fs::File::open(&path).unwrap(), 1 << 20, 16, true);
        let mut buf = [0u8; 8];
        assert!(f.read_label(8, &mut buf).is_ok());
        assert!(f.read_label(9, &mut buf).is_err());
        assert!(f.read_label(u64::MAX, &mut buf).is_err());
        assert!(f.write_label(0, b"x").is_err(), "read-only");
        // A label area past the end of the file reads as an error, not zeros.
        let f = FileLabels::new(std::fs::File::open(&path).unwrap(), 2 << 20, 16, false);
        assert!(f.read_label(0, &mut buf).is_err());
    }
}
