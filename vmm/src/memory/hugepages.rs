//! Huge pages for guest memory: `--memory SIZE,hugepages` (hugetlb guest
//! RAM, reserved at mmap time so a shortage is found before the guest
//! starts), `--memory SIZE,thp` (`MADV_HUGEPAGE` on anonymous RAM), and
//! `--nvdimm SIZE,hugepages,label-size=0` (a temporary DIMM in a
//! `memfd_create(MFD_HUGETLB)` file). DIMM files on a tmpfs mounted with
//! `huge=always`/`within_size` get 2 MiB pages from the kernel as they are;
//! this module tells which file system a backing file is on and checks the
//! mapping's 2 MiB alignment against its guest address.

use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd};
use std::path::Path;

use vm_memory::mmap::MmapRegionBuilder;
use vm_memory::{GuestAddress, GuestMemoryMmap, GuestRegionMmap};

/// 2 MiB, the huge page size pmemvm uses.
pub const HUGE_PAGE_SIZE: u64 = 2 << 20;
/// memfd_create flags (linux/memfd.h).
const MFD_CLOEXEC: libc::c_uint = 1;
const MFD_HUGETLB: libc::c_uint = 4;

/// Errors with huge pages.
#[derive(Debug, thiserror::Error)]
pub enum HugePageError {
    /// A `--memory` option that is not known.
    #[error("--memory option '{0}' is not known; accepted: SIZE[,hugepages|,thp]")]
    MemoryOption(String),
    /// A size that is not a multiple of 2 MiB.
    #[error("{what} {size} bytes is not a multiple of 2 MiB, which hugetlb pages need; use a multiple of 2M")]
    Unaligned {
        /// "--memory", "--nvdimm".
        what: &'static str,
        /// Bytes.
        size: u64,
    },
    /// Not enough free hugetlb pages.
    #[error("{what} needs {needed} free 2 MiB huge pages but this host has {free} (HugePages_Free less HugePages_Rsvd in /proc/meminfo); reserve more with `echo N > /proc/sys/vm/nr_hugepages`, or use ordinary pages there")]
    NotEnough {
        /// What asks for them.
        what: String,
        /// Pages needed.
        needed: u64,
        /// Pages free.
        free: u64,
    },
    /// Creating or mapping hugetlb memory failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
}

impl crate::exit_status::Classified for HugePageError {
    fn kind(&self) -> crate::exit_status::ErrorKind {
        use crate::exit_status::ErrorKind::*;
        match self {
            Self::Io { .. } => Environment,
            _ => Usage,
        }
    }
}

pub use crate::config::RamPages;

/// `--memory SIZE[,hugepages|,thp]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemorySpec {
    /// Bytes.
    pub size: u64,
    /// Page kind.
    pub pages: RamPages,
}

impl std::str::FromStr for MemorySpec {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let mut parts = s.split(',');
        let size = crate::config::parse_size(parts.next().unwrap_or_default())
            .map_err(|e| e.to_string())?;
        let mut pages = RamPages::Default;
        for p in parts {
            pages = match (p, pages) {
                ("hugepages", RamPages::Default) => RamPages::Hugetlb,
                ("thp", RamPages::Default) => RamPages::Thp,
                _ => return Err(HugePageError::MemoryOption(p.to_string()).to_string()),
            };
        }
        Ok(Self { size, pages })
    }
}

impl std::fmt::Display for MemorySpec {
    /// The `--memory` text that parses back to this spec (the size in bytes).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.size)?;
        match self.pages {
            RamPages::Default => Ok(()),
            RamPages::Hugetlb => f.write_str(",hugepages"),
            RamPages::Thp => f.write_str(",thp"),
        }
    }
}

/// Free 2 MiB hugetlb pages (HugePages_Free − HugePages_Rsvd), from /proc/meminfo.
pub fn free_huge_pages() -> u64 {
    let text = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    if field("Hugepagesize:") != HUGE_PAGE_SIZE >> 10 {
        return 0;
    }
    field("HugePages_Free:").saturating_sub(field("HugePages_Rsvd:"))
}

/// Bytes a hugetlb DIMM of `file_len` bytes takes (rounded up to 2 MiB).
pub fn huge_len(file_len: u64) -> u64 {
    file_len.div_ceil(HUGE_PAGE_SIZE) * HUGE_PAGE_SIZE
}

/// Checks, before anything is created, that RAM and the hugetlb DIMMs fit
/// in the free hugetlb pages.
pub fn check(
    memory: &MemorySpec,
    dimms: &[crate::config::NvdimmSpec],
) -> Result<(), HugePageError> {
    let mut needed = 0u64;
    let mut what = Vec::new();
    if memory.pages == RamPages::Hugetlb {
        if !memory.size.is_multiple_of(HUGE_PAGE_SIZE) {
            return Err(HugePageError::Unaligned {
                what: "--memory",
                size: memory.size,
            });
        }
        needed += memory.size / HUGE_PAGE_SIZE;
        what.push(format!(
            "--memory {},hugepages",
            crate::config::size_text(memory.size)
        ));
    }
    for d in dimms.iter().filter(|d| d.hugepages) {
        needed += huge_len(d.file_len()) / HUGE_PAGE_SIZE;
        what.push(format!("--nvdimm {},hugepages", d.size_text));
    }
    // A new file on hugetlbfs takes its pages from the same pool (an
    // existing one may have them already).
    for (d, path) in dimms
        .iter()
        .filter_map(|d| d.file.as_deref().map(|p| (d, p)))
        .filter(|(_, p)| !p.exists() && on_hugetlbfs(p))
    {
        needed += huge_len(d.file_len()) / HUGE_PAGE_SIZE;
        what.push(format!("--nvdimm {},file={}", d.size_text, path.display()));
    }
    let free = free_huge_pages();
    if needed > free {
        return Err(HugePageError::NotEnough {
            what: what.join(" and "),
            needed,
            free,
        });
    }
    Ok(())
}

/// The file system a backing file is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FsKind {
    /// hugetlbfs.
    Hugetlbfs,
    /// tmpfs/shmem (2 MiB pages when mounted with `huge=`).
    Tmpfs,
    /// Anything else (4 KiB page cache pages on ext4, xfs, ...).
    Other,
}

/// The file system holding `file`.
pub fn fs_kind(file: &File) -> FsKind {
    // SAFETY: a zeroed statfs is a valid out-parameter; fstatfs only reads
    // the fd (kept open by `file`) and fills the struct.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::fstatfs(file.as_raw_fd(), &mut st) } != 0 {
        return FsKind::Other;
    }
    match st.f_type {
        libc::HUGETLBFS_MAGIC => FsKind::Hugetlbfs,
        libc::TMPFS_MAGIC => FsKind::Tmpfs,
        _ => FsKind::Other,
    }
}

/// A nameless hugetlb file of `len` bytes (rounded up to 2 MiB), for a
/// temporary DIMM; its pages are reserved when it is mapped.
pub fn temporary_file(len: u64) -> Result<File, HugePageError> {
    let io = |source| HugePageError::Io {
        what: "creating a hugetlb memfd for a temporary NVDIMM".into(),
        source,
    };
    // SAFETY: the name is a NUL-terminated literal; memfd_create returns a new fd or -1.
    let fd = unsafe { libc::memfd_create(c"pmemvm-nvdimm".as_ptr(), MFD_CLOEXEC | MFD_HUGETLB) };
    if fd < 0 {
        return Err(io(std::io::Error::last_os_error()));
    }
    // SAFETY: `fd` is a new fd owned by nobody else.
    let file = unsafe { File::from_raw_fd(fd) };
    file.set_len(huge_len(len)).map_err(io)?;
    Ok(file)
}

/// Writes `bytes` at `offset` of a hugetlbfs file (which has no write(2)) through shared
/// mappings of the 2 MiB pages holding them.
pub use devices::mapped_write::write_through_mapping;

/// Guest RAM for `ranges` with the pages `pages` asks for.
pub fn guest_ram(
    ranges: &[(GuestAddress, usize)],
    pages: RamPages,
) -> Result<GuestMemoryMmap, HugePageError> {
    let io = |what: String| move |source| HugePageError::Io { what, source };
    let mut regions = Vec::with_capacity(ranges.len());
    for &(base, len) in ranges {
        let mut flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS;
        if pages == RamPages::Hugetlb {
            // No MAP_NORESERVE: the kernel reserves every huge page now,
            // so a shortage fails here and not in the middle of a run.
            flags |= libc::MAP_HUGETLB;
        } else {
            flags |= libc::MAP_NORESERVE;
        }
        let region = MmapRegionBuilder::new(len)
            .with_mmap_prot(libc::PROT_READ | libc::PROT_WRITE)
            .with_mmap_flags(flags)
            .with_hugetlbfs(pages == RamPages::Hugetlb)
            .build()
            .map_err(|e| HugePageError::Io {
                what: format!("mapping {len} bytes of guest RAM"),
                source: std::io::Error::other(e.to_string()),
            })?;
        if pages == RamPages::Thp {
            if let Some(w) = thp_warning(pages).filter(|_| regions.is_empty()) {
                log::warn!("{w}");
            }
            // SAFETY: madvise only changes the paging advice of this live
            // mapping, owned by `region`.
            let rc = unsafe { libc::madvise(region.as_ptr().cast(), len, libc::MADV_HUGEPAGE) };
            if rc != 0 {
                return Err(io(
                    "asking for transparent huge pages (MADV_HUGEPAGE)".into()
                )(std::io::Error::last_os_error()));
            }
        }
        let region = GuestRegionMmap::new(region, base).ok_or_else(|| HugePageError::Io {
            what: "placing guest RAM".into(),
            source: std::io::Error::from(std::io::ErrorKind::InvalidInput),
        })?;
        regions.push(region);
    }
    GuestMemoryMmap::from_regions(regions).map_err(|e| HugePageError::Io {
        what: "placing guest RAM".into(),
        source: std::io::Error::other(e.to_string()),
    })
}

/// Where the host says whether transparent huge pages may be used.
const THP_ENABLED: &str = "/sys/kernel/mm/transparent_hugepage/enabled";

/// The warning for `--memory SIZE,thp` on a host whose THP setting
/// (`enabled`, the text of [`THP_ENABLED`]) gives no huge pages to a
/// `MADV_HUGEPAGE` mapping: `[never]`, or no THP at all.
pub fn thp_warning_for(enabled: Option<&str>) -> Option<String> {
    let selected = enabled.and_then(|t| {
        let start = t.find('[')?;
        let end = t[start..].find(']')?;
        Some(t[start + 1..start + end].to_owned())
    });
    match selected.as_deref() {
        Some("always" | "madvise") => None,
        Some(other) => Some(format!(
            "--memory SIZE,thp: transparent huge pages are '{other}' on this host ({THP_ENABLED}), \
             so guest RAM gets 4 KiB pages; 'echo madvise > {THP_ENABLED}' allows them"
        )),
        None => Some(format!(
            "--memory SIZE,thp: this host has no transparent huge pages ({THP_ENABLED} is \
             missing or unreadable), so guest RAM gets 4 KiB pages"
        )),
    }
}

/// [`thp_warning_for`] this host, for `pages`.
pub fn thp_warning(pages: RamPages) -> Option<String> {
    if pages != RamPages::Thp {
        return None;
    }
    thp_warning_for(std::fs::read_to_string(THP_ENABLED).ok().as_deref())
}

/// True when host address `host` and guest address `guest` are 2 MiB
/// aligned relative to each other (a PMD-mapped host page then covers
/// whole guest 2 MiB pages, so KVM can map them large too).
pub fn relatively_aligned(host: u64, guest: u64) -> bool {
    host % HUGE_PAGE_SIZE == guest % HUGE_PAGE_SIZE
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
/// labels and identity page; on hugetlbfs rounded up to whole 2 MiB pages
/// (its label and identity writes go through a mapping of that tail).
pub fn backing_len(spec: &crate::config::NvdimmSpec, path: &Path) -> Result<u64, HugePageError> {
    if !on_hugetlbfs(path) {
        return Ok(spec.file_len());
    }
    Ok(huge_len(spec.file_len()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exit_status::Classified;

    #[test]
    fn memory_specs_read_back_as_written() {
        for text in ["512M", "4G,hugepages", "1G,thp"] {
            let m: MemorySpec = text.parse().unwrap();
            assert_eq!(m.to_string().parse::<MemorySpec>(), Ok(m), "{text:?}");
        }
        assert_eq!(
            "1G,thp".parse::<MemorySpec>().unwrap().to_string(),
            "1073741824,thp"
        );
    }

    #[test]
    fn memory_specs() {
        let m: MemorySpec = "512M".parse().unwrap();
        assert_eq!((m.size, m.pages), (512 << 20, RamPages::Default));
        let m: MemorySpec = "1G,hugepages".parse().unwrap();
        assert_eq!(m.pages, RamPages::Hugetlb);
        let m: MemorySpec = "1G,thp".parse().unwrap();
        assert_eq!(m.pages, RamPages::Thp);
        for bad in ["1G,huge", "1G,thp,hugepages", "x,thp"] {
            assert!(bad.parse::<MemorySpec>().is_err(), "{bad}");
        }
        let e = "1G,bogus".parse::<MemorySpec>().unwrap_err();
        assert!(e.contains("'bogus'"), "{e}");
    }

    #[test]
    fn shortage_and_alignment_are_found_up_front() {
        let free = free_huge_pages();
        let too_much = MemorySpec {
            size: (free + 1) * HUGE_PAGE_SIZE,
            pages: RamPages::Hugetlb,
        };
        let e = check(&too_much, &[]).unwrap_err();
        assert!(e.is_usage());
        assert!(
            e.to_string().contains(&format!("this host has {free}")),
            "{e}"
        );
        let odd = MemorySpec {
            size: 3 << 20,
            pages: RamPages::Hugetlb,
        };
        assert!(matches!(
            check(&odd, &[]),
            Err(HugePageError::Unaligned { .. })
        ));
        // A hugetlb DIMM with labels counts its label and identity tail too.
        let dimm: crate::config::NvdimmSpec = "16M,hugepages".parse().unwrap();
        let e = check(
            &MemorySpec {
                size: 1 << 30,
                pages: RamPages::Default,
            },
            &[dimm],
        );
        if free < 9 {
            let e = e.unwrap_err().to_string();
            assert!(e.contains("needs 9 free 2 MiB huge pages"), "{e}");
        } else {
            assert!(e.is_ok(), "{e:?}");
        }
        assert_eq!(huge_len((16 << 20) + 4096), 18 << 20);
        assert!(relatively_aligned(0x7f00_0020_0000, 0x1_0000_0000));
        assert!(!relatively_aligned(0x7f00_0020_1000, 0x1_0000_0000));
    }

    #[test]
    fn thp_ram_is_advised() {
        let _lock = crate::memory_test_lock();
        let mem = guest_ram(&[(GuestAddress(0), 4 << 20)], RamPages::Thp).unwrap();
        let host = vm_memory::GuestMemoryBackend::get_host_address(&mem, GuestAddress(0)).unwrap();
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let head = format!("{:x}-", host as usize);
        let flags = smaps
            .split_inclusive('\n')
            .skip_while(|l| !l.starts_with(&head))
            .find(|l| l.starts_with("VmFlags:"))
            .unwrap_or_default();
        assert!(flags.split_whitespace().any(|f| f == "hg"), "{flags}");
    }

    #[test]
    fn thp_that_gives_no_huge_pages_is_warned_about() {
        assert_eq!(thp_warning_for(Some("always [madvise] never\n")), None);
        assert_eq!(thp_warning_for(Some("[always] madvise never\n")), None);
        let never = thp_warning_for(Some("always madvise [never]\n")).expect("never warns");
        assert!(never.contains("are 'never' on this host"), "{never}");
        assert!(never.contains("4 KiB pages"), "{never}");
        assert!(thp_warning_for(None).is_some_and(|w| w.contains("no transparent huge pages")));
        assert!(thp_warning_for(Some("garbage")).is_some());
        assert_eq!(thp_warning(RamPages::Default), None);
        assert_eq!(thp_warning(RamPages::Hugetlb), None);
    }
}
