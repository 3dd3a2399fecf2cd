//! KVM's own count of how it maps the guest's memory: the VM's binary statistics
//! (`KVM_GET_STATS_FD`, Linux 5.14 and later), whose x86 entries `pages_4k`, `pages_2m` and
//! `pages_1g` are the pages KVM maps for the guest at each size. That is the page size of the
//! guest's view, which the host's smaps cannot tell: a 2 MiB host page can still be mapped
//! to the guest 4 KiB at a time (a misaligned memslot, a dirty log, an NX huge page split).

use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::fs::FileExt;

use serde::{Deserialize, Serialize};

/// Errors reading KVM's statistics.
#[derive(Debug, thiserror::Error)]
pub enum KvmStatsError {
    /// The ioctl failed (a kernel before 5.14, or a KVM without binary statistics).
    #[error("KVM's binary statistics are not available (KVM_GET_STATS_FD: {0})")]
    Unavailable(std::io::Error),
    /// Reading the statistics file failed.
    #[error("reading KVM's statistics: {0}")]
    Read(std::io::Error),
    /// The file is not laid out as the KVM API documents it.
    #[error("KVM's statistics file is malformed: {0}")]
    Malformed(&'static str),
}

/// Pages KVM maps for the whole VM (RAM and NVDIMMs) at each size.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KvmPages {
    /// 4 KiB mappings.
    pub pages_4k: u64,
    /// 2 MiB mappings.
    pub pages_2m: u64,
    /// 1 GiB mappings.
    pub pages_1g: u64,
}

impl KvmPages {
    /// "512 × 4K, 30 × 2M" (sizes with no pages left out; "none" when all are 0).
    pub fn describe(&self) -> String {
        let parts: Vec<String> = [
            (self.pages_4k, "4K"),
            (self.pages_2m, "2M"),
            (self.pages_1g, "1G"),
        ]
        .iter()
        .filter(|(n, _)| *n > 0)
        .map(|(n, s)| format!("{n} × {s}"))
        .collect();
        if parts.is_empty() {
            "none".to_owned()
        } else {
            parts.join(", ")
        }
    }

    /// The size (bytes) that maps the most bytes, 0 when nothing is mapped.
    pub fn dominant_page_size(&self) -> u64 {
        [
            (self.pages_4k << 12, 4u64 << 10),
            (self.pages_2m << 21, 2 << 20),
            (self.pages_1g << 30, 1 << 30),
        ]
        .into_iter()
        .filter(|(bytes, _)| *bytes > 0)
        .max_by_key(|(bytes, _)| *bytes)
        .map_or(0, |(_, size)| size)
    }
}

/// `KVM_GET_STATS_FD`: `_IO(KVMIO, 0xce)`.
const KVM_GET_STATS_FD: libc::c_ulong = 0xAECE;
/// Header: flags, name_size, num_desc, id_offset, desc_offset, data_offset (u32 each).
const HEADER_LEN: usize = 24;
/// A descriptor before its name: flags u32, exponent i16, size u16, offset u32, bucket u32.
const DESC_FIXED: usize = 16;
/// Bounds on what the parser accepts (the x86 VM file has about 20 entries).
const MAX_DESCRIPTORS: usize = 4096;
const MAX_NAME: usize = 256;

/// Reads the page counts of the VM behind `vm_fd`.
pub fn read(vm_fd: &impl AsRawFd) -> Result<KvmPages, KvmStatsError> {
    // SAFETY: KVM_GET_STATS_FD takes no argument and returns a new file descriptor (or -1);
    // `vm_fd` is an open KVM VM descriptor for the duration of the call.
    let fd = unsafe { libc::ioctl(vm_fd.as_raw_fd(), KVM_GET_STATS_FD as _, 0) };
    if fd < 0 {
        return Err(KvmStatsError::Unavailable(std::io::Error::last_os_error()));
    }
    // SAFETY: `fd` was just returned by the kernel and is owned by nothing else.
    let file = unsafe { File::from_raw_fd(fd) };
    parse(&file)
}

/// The page counts from a statistics file laid out as Documentation/virt/kvm/api.rst
/// describes (the header, the descriptors, then the data).
pub fn parse(file: &impl FileExt) -> Result<KvmPages, KvmStatsError> {
    let mut header = [0u8; HEADER_LEN];
    file.read_exact_at(&mut header, 0)
        .map_err(KvmStatsError::Read)?;
    let word =
        |i: usize| u32::from_le_bytes([header[i], header[i + 1], header[i + 2], header[i + 3]]);
    let (name_size, num_desc) = (word(4) as usize, word(8) as usize);
    let (desc_offset, data_offset) = (u64::from(word(16)), u64::from(word(20)));
    if name_size == 0 || name_size > MAX_NAME || num_desc > MAX_DESCRIPTORS {
        return Err(KvmStatsError::Malformed(
            "name size or descriptor count out of range",
        ));
    }
    let desc_len = DESC_FIXED + name_size;
    let mut descs = vec![0u8; desc_len * num_desc];
    file.read_exact_at(&mut descs, desc_offset)
        .map_err(KvmStatsError::Read)?;
    let mut pages = KvmPages::default();
    for d in descs.chunks_exact(desc_len) {
        let name_bytes = &d[DESC_FIXED..];
        let end = name_bytes
            .iter()
            .position(|&b| b == 0)
            .unwrap_or(name_bytes.len());
        let slot = match &name_bytes[..end] {
            b"pages_4k" => &mut pages.pages_4k,
            b"pages_2m" => &mut pages.pages_2m,
            b"pages_1g" => &mut pages.pages_1g,
            _ => continue,
        };
        let offset = u64::from(u32::from_le_bytes([d[8], d[9], d[10], d[11]]));
        let at = data_offset
            .checked_add(offset)
            .ok_or(KvmStatsError::Malformed("data offset overflows"))?;
        let mut value = [0u8; 8];
        file.read_exact_at(&mut value, at)
            .map_err(KvmStatsError::Read)?;
        *slot = u64::from_le_bytes(value);
    }
    Ok(pages)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A statistics file as the kernel lays it out, with `entries` (name, value).
    #[allow(clippy::cast_possible_truncation)] // test sizes are a few hundred bytes
    fn stats_file(entries: &[(&str, u64)]) -> Vec<u8> {
        let name_size = 48usize;
        let desc_offset = (HEADER_LEN + 16) as u32;
        let desc_len = DESC_FIXED + name_size;
        let data_offset = desc_offset + (desc_len * entries.len()) as u32;
        let mut f = Vec::new();
        for w in [
            0u32,
            name_size as u32,
            entries.len() as u32,
            HEADER_LEN as u32,
            desc_offset,
            data_offset,
        ] {
            f.extend_from_slice(&w.to_le_bytes());
        }
        f.resize(desc_offset as usize, b'i');
        for (i, (name, _)) in entries.iter().enumerate() {
            let mut d = vec![0u8; desc_len];
            d[6..8].copy_from_slice(&1u16.to_le_bytes());
            d[8..12].copy_from_slice(&((i * 8) as u32).to_le_bytes());
            d[DESC_FIXED..DESC_FIXED + name.len()].copy_from_slice(name.as_bytes());
            f.extend_from_slice(&d);
        }
        for (_, v) in entries {
            f.extend_from_slice(&v.to_le_bytes());
        }
        f
    }

    fn write(bytes: &[u8]) -> File {
        let mut f = tempfile();
        std::io::Write::write_all(&mut f, bytes).unwrap();
        f
    }

    fn tempfile() -> File {
        vmm_sys_util::tempfile::TempFile::new()
            .expect("a temporary file")
            .into_file()
    }

    #[test]
    fn the_page_counts_are_read_by_name_wherever_they_are() {
        let f = write(&stats_file(&[
            ("remote_tlb_flush", 7),
            ("pages_2m", 30),
            ("pages_4k", 512),
            ("pages_1g", 0),
            ("nx_lpage_splits", 3),
        ]));
        let p = parse(&f).unwrap();
        assert_eq!(
            p,
            KvmPages {
                pages_4k: 512,
                pages_2m: 30,
                pages_1g: 0
            }
        );
        assert_eq!(p.describe(), "512 × 4K, 30 × 2M");
        assert_eq!(p.dominant_page_size(), 2 << 20);
        assert_eq!(KvmPages::default().describe(), "none");
        assert_eq!(KvmPages::default().dominant_page_size(), 0);
    }

    #[test]
    fn a_malformed_or_short_file_is_an_error_not_a_panic() {
        let good = stats_file(&[("pages_4k", 1)]);
        assert!(matches!(
            parse(&write(&good[..10])),
            Err(KvmStatsError::Read(_))
        ));
        let mut huge_count = good.clone();
        huge_count[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(
            parse(&write(&huge_count)),
            Err(KvmStatsError::Malformed(_))
        ));
        let mut past_end = good.clone();
        let len = past_end.len();
        past_end.truncate(len - 4);
        assert!(matches!(
            parse(&write(&past_end)),
            Err(KvmStatsError::Read(_))
        ));
    }
}
