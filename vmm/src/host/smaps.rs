//! Which host page size actually backs a mapping, measured from
//! `/proc/self/smaps`: resident bytes mapped by PMD (`AnonHugePages`,
//! `ShmemPmdMapped`, `FilePmdMapped`) or by hugetlb pages
//! (`Shared_Hugetlb`, `Private_Hugetlb`, with `KernelPageSize` giving the
//! hugetlb page size) against all resident bytes.

use serde::{Deserialize, Serialize};

/// Errors reading smaps.
#[derive(Debug, thiserror::Error)]
pub enum SmapsError {
    /// /proc/self/smaps cannot be read.
    #[error("reading /proc/self/smaps failed (needed to measure the page size backing guest memory): {0}")]
    Read(#[source] std::io::Error),
}

/// How one guest mapping (RAM or a DIMM) is backed on the host.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MappingPages {
    /// What the mapping is: `ram` or `nvdimm0`, `nvdimm1`, ...
    pub what: String,
    /// Length of the mapping in bytes.
    pub size: u64,
    /// Bytes resident when measured (what the guest touched, or was preallocated).
    pub resident: u64,
    /// Of those, bytes mapped with pages larger than the base page
    /// (2 MiB PMD mappings or hugetlb pages).
    pub huge_resident: u64,
    /// The page size backing most resident bytes: 4096, 2097152 or
    /// 1073741824; 0 when nothing was resident.
    pub page_size: u64,
    /// Resident bytes per host NUMA node, from `/proc/self/numa_maps`
    /// (`N<node>=<pages>`): where the pages really are, whatever the policy
    /// says. Empty when the kernel has no numa_maps.
    #[serde(default)]
    pub node_bytes: Vec<(u32, u64)>,
}

impl MappingPages {
    /// "2M", "4K", "1G", or "none resident", with the share when mixed.
    pub fn describe(&self) -> String {
        if self.resident == 0 {
            return "no page resident".into();
        }
        let name = crate::config::size_text(self.page_size);
        if self.huge_resident == 0 || self.huge_resident == self.resident {
            format!("{name} pages")
        } else {
            let share = self.huge_resident.saturating_mul(100) / self.resident;
            format!("{name} pages ({share}% of resident bytes in huge pages)")
        }
    }
}

/// Totals of the smaps fields for the VMAs overlapping one range.
#[derive(Debug, Default, Clone, Copy)]
struct Totals {
    rss_kib: u64,
    pmd_kib: u64,
    hugetlb_kib: u64,
    hugetlb_page_kib: u64,
    base_page_kib: u64,
}

/// The address range `start-end` (hex) that opens a VMA's block in
/// `/proc/PID/smaps`, or None for any other first word of a line.
pub(crate) fn vma_range(first_word: &str) -> Option<(usize, usize)> {
    let (a, b) = first_word.split_once('-')?;
    Some((
        usize::from_str_radix(a, 16).ok()?,
        usize::from_str_radix(b, 16).ok()?,
    ))
}

/// True when the VMA `(start, end)` shares a byte with `len` bytes at `addr`.
pub(crate) fn overlaps((start, end): (usize, usize), addr: usize, len: usize) -> bool {
    start < addr.saturating_add(len) && addr < end
}

/// Measures each `(what, host address, length)` mapping from the text of
/// `/proc/self/smaps`.
pub fn measure_text(smaps: &str, maps: &[(String, usize, usize)]) -> Vec<MappingPages> {
    let mut totals = vec![Totals::default(); maps.len()];
    let mut current: Vec<usize> = Vec::new();
    for line in smaps.lines() {
        let mut fields = line.split_whitespace();
        let Some(first) = fields.next() else { continue };
        if let Some(vma) = vma_range(first) {
            current = maps
                .iter()
                .enumerate()
                .filter(|(_, (_, g, len))| overlaps(vma, *g, *len))
                .map(|(i, _)| i)
                .collect();
            continue;
        }
        let kib = || {
            fields
                .clone()
                .next()
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0)
        };
        for &i in &current {
            let t = &mut totals[i];
            match first {
                "Rss:" => t.rss_kib += kib(),
                "AnonHugePages:" | "ShmemPmdMapped:" | "FilePmdMapped:" => t.pmd_kib += kib(),
                "Shared_Hugetlb:" | "Private_Hugetlb:" => t.hugetlb_kib += kib(),
                "KernelPageSize:" => {
                    let k = kib();
                    if k > 4 {
                        t.hugetlb_page_kib = t.hugetlb_page_kib.max(k);
                    } else {
                        t.base_page_kib = k;
                    }
                }
                _ => {}
            }
        }
    }
    maps.iter()
        .zip(totals)
        .map(|((what, _, len), t)| {
            // hugetlb pages are not counted in Rss.
            let resident_kib = t.rss_kib + t.hugetlb_kib;
            let huge_kib = t.pmd_kib + t.hugetlb_kib;
            let base = if t.base_page_kib == 0 {
                4
            } else {
                t.base_page_kib
            };
            let huge_page_kib = if t.hugetlb_kib > 0 {
                t.hugetlb_page_kib
            } else {
                2048
            };
            let page_kib = if resident_kib == 0 {
                0
            } else if huge_kib * 2 > resident_kib {
                huge_page_kib
            } else {
                base
            };
            MappingPages {
                what: what.clone(),
                size: *len as u64,
                resident: resident_kib << 10,
                huge_resident: huge_kib << 10,
                page_size: page_kib << 10,
                node_bytes: Vec::new(),
            }
        })
        .collect()
}

/// Bytes per NUMA node of each `(what, host address, length)` mapping, from
/// the text of `/proc/self/numa_maps`: every line whose start lies in the
/// mapping (a mapping split by `mbind` or `madvise` has several) adds its
/// `N<node>=<pages>` times its `kernelpagesize_kB`.
pub fn nodes_text(numa_maps: &str, maps: &[(String, usize, usize)]) -> Vec<Vec<(u32, u64)>> {
    let mut out: Vec<std::collections::BTreeMap<u32, u64>> = vec![Default::default(); maps.len()];
    for line in numa_maps.lines() {
        let mut words = line.split_whitespace();
        let Some(start) = words.next().and_then(|a| usize::from_str_radix(a, 16).ok()) else {
            continue;
        };
        let Some(i) = maps
            .iter()
            .position(|(_, g, len)| start >= *g && start < g.saturating_add(*len))
        else {
            continue;
        };
        let words: Vec<&str> = words.collect();
        let page_kib = words
            .iter()
            .find_map(|w| w.strip_prefix("kernelpagesize_kB="))
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(4);
        for w in &words {
            let Some((node, pages)) = w.strip_prefix('N').and_then(|r| r.split_once('=')) else {
                continue;
            };
            if let (Ok(node), Ok(pages)) = (node.parse::<u32>(), pages.parse::<u64>()) {
                *out[i].entry(node).or_default() += pages.saturating_mul(page_kib << 10);
            }
        }
    }
    out.into_iter().map(|m| m.into_iter().collect()).collect()
}

/// Measures each `(what, host address, length)` mapping of this process:
/// page sizes from smaps, nodes from numa_maps (where the kernel has it).
pub fn measure(maps: &[(String, usize, usize)]) -> Result<Vec<MappingPages>, SmapsError> {
    let text = std::fs::read_to_string("/proc/self/smaps").map_err(SmapsError::Read)?;
    let mut pages = measure_text(&text, maps);
    if let Ok(numa) = std::fs::read_to_string("/proc/self/numa_maps") {
        for (p, nodes) in pages.iter_mut().zip(nodes_text(&numa, maps)) {
            p.node_bytes = nodes;
        }
    }
    Ok(pages)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numa_maps_lines_add_up_per_mapping_and_node() {
        let text = "\
7f0000000000 bind:0 anon=3 dirty=3 N0=3 kernelpagesize_kB=4
7f0000003000 bind:0 file=/tmp/pm.img mapped=512 N0=500 N1=12 kernelpagesize_kB=4
7f0000400000 default anon=2 N1=2 kernelpagesize_kB=2048
7f1000000000 default N0=99 kernelpagesize_kB=4
garbage line
";
        let maps = vec![
            ("nvdimm0".to_string(), 0x7f00_0000_0000usize, 0x40_0000usize),
            ("ram".to_string(), 0x7f00_0040_0000, 0x40_0000),
        ];
        assert_eq!(
            nodes_text(text, &maps),
            [
                vec![(0, (3 + 500) * 4096), (1, 12 * 4096)],
                vec![(1, 2 * (2 << 20))]
            ]
        );
    }

    #[test]
    fn touched_anonymous_memory_is_measured_in_4k_pages_without_thp() {
        let _lock = crate::memory_test_lock();
        let len = 8 << 20;
        let region = vm_memory::mmap::MmapRegion::<()>::new(len).expect("an anonymous mapping");
        let p = region.as_ptr().cast::<libc::c_void>();
        // SAFETY: `p` is the region's live mapping of `len` bytes, unmapped when it drops.
        unsafe {
            libc::madvise(p, len, libc::MADV_NOHUGEPAGE);
            std::ptr::write_bytes(p.cast::<u8>(), 1, len / 2);
        }
        let m = measure(&[("ram".into(), p as usize, len)]).unwrap();
        assert_eq!(m[0].page_size, 4096, "{m:?}");
        assert!(m[0].resident >= (len / 2) as u64, "{m:?}");
        assert_eq!(m[0].huge_resident, 0);
        assert_eq!(m[0].describe(), "4K pages");
    }

    #[test]
    fn pmd_and_hugetlb_fields_decide_the_page_size() {
        let text = "\
7f0000000000-7f0000400000 rw-s 00000000 00:2d 12 /mnt/huge/pm0.img
Size:               4096 kB
KernelPageSize:        4 kB
Rss:                4096 kB
ShmemPmdMapped:     4096 kB
FilePmdMapped:         0 kB
Shared_Hugetlb:        0 kB
7f0000400000-7f0000800000 rw-s 00000000 00:2e 13 /dev/hugepages/pm1.img
Size:               4096 kB
KernelPageSize:     2048 kB
Rss:                   0 kB
Shared_Hugetlb:     2048 kB
Private_Hugetlb:       0 kB
7f0000800000-7f0000c00000 rw-s 00000000 fe:00 14 /var/tmp/pm2.img
Size:               4096 kB
KernelPageSize:        4 kB
Rss:                 100 kB
FilePmdMapped:         0 kB
";
        let maps = [
            ("nvdimm0".to_string(), 0x7f00_0000_0000, 4 << 20),
            ("nvdimm1".to_string(), 0x7f00_0040_0000, 4 << 20),
            ("nvdimm2".to_string(), 0x7f00_0080_0000, 4 << 20),
            ("ram".to_string(), 0x1000, 4096),
        ];
        let m = measure_text(text, &maps);
        assert_eq!(m[0].page_size, 2 << 20);
        assert_eq!(m[1].page_size, 2 << 20);
        assert_eq!(m[1].resident, 2 << 20);
        assert_eq!(m[2].page_size, 4096);
        assert_eq!(m[3].page_size, 0);
        assert_eq!(m[3].describe(), "no page resident");
    }
}
