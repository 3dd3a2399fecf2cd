//! Guest physical memory arrangement: RAM split around the 32-bit MMIO hole,
//! NVDIMM placement above it, legacy persistent memory above the NVDIMMs,
//! and the E820 map the guest is given.
//! Pure arithmetic, unit tested; mapping happens in `vm.rs` and `backing.rs`.

pub mod backing;
pub mod dma_memory;
pub mod hugepages;
pub mod memory_placement;
pub mod placement;

use crate::layout;

/// Errors in the memory arrangement.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum MemoryLayoutError {
    /// RAM smaller than what pmemvm needs below 1 MiB plus a little.
    #[error("--memory {0} bytes is too small; at least 16M is needed")]
    RamTooSmall(u64),
    /// RAM larger than this layout supports.
    #[error("--memory {0} bytes is too large; at most 1T is supported")]
    RamTooLarge(u64),
    /// NVDIMMs reaching beyond the physical address space.
    #[error("the NVDIMMs do not fit below the {bits}-bit guest physical address limit; use fewer or smaller DIMMs")]
    AddressSpace {
        /// Guest physical address bits.
        bits: u8,
    },
    /// Legacy persistent memory reaching beyond the physical address space.
    #[error("--pmem-legacy {size} would end at {end:#x}, beyond the {bits}-bit guest physical address limit ({limit:#x}); use fewer or smaller ranges")]
    LegacyAddressSpace {
        /// The range's size as `--pmem-legacy` spells it.
        size: String,
        /// Where it would end (saturated at `u64::MAX`).
        end: u64,
        /// Guest physical address bits.
        bits: u8,
        /// 2^bits.
        limit: u64,
    },
    /// The CXL devices do not fit.
    #[error(transparent)]
    Cxl(#[from] crate::cxl::CxlError),
}

/// Smallest RAM accepted.
pub const MIN_RAM: u64 = 16 << 20;
/// Largest RAM accepted.
pub const MAX_RAM: u64 = 1 << 40;
/// Guest physical address bits when CPUID has no usable leaf 0x8000_0008
/// (the architectural width with PAE).
pub const DEFAULT_PHYS_ADDR_BITS: u8 = 36;
/// Most physical address bits x86-64 defines.
pub const MAX_PHYS_ADDR_BITS: u8 = 52;

/// The physical address width a guest with this CPUID sees: leaf
/// 0x8000_0008 EAX[7:0], or [`DEFAULT_PHYS_ADDR_BITS`] when the leaf is
/// missing or its value is outside what x86-64 allows.
pub fn phys_addr_bits(cpuid: &[kvm_bindings::kvm_cpuid_entry2]) -> u8 {
    cpuid
        .iter()
        .find(|e| e.function == 0x8000_0008)
        .and_then(|e| u8::try_from(e.eax & 0xff).ok())
        .filter(|b| (DEFAULT_PHYS_ADDR_BITS..=MAX_PHYS_ADDR_BITS).contains(b))
        .unwrap_or(DEFAULT_PHYS_ADDR_BITS)
}

/// The host CPU's physical address width (for `pmemvm acpi`, which opens
/// no KVM; KVM passes the host's width on to its guests).
pub fn host_phys_addr_bits() -> u8 {
    let max_leaf = std::arch::x86_64::__cpuid(0x8000_0000).eax;
    if max_leaf < 0x8000_0008 {
        return DEFAULT_PHYS_ADDR_BITS;
    }
    let leaf = kvm_bindings::kvm_cpuid_entry2 {
        function: 0x8000_0008,
        eax: std::arch::x86_64::__cpuid(0x8000_0008).eax,
        ..Default::default()
    };
    phys_addr_bits(&[leaf])
}

/// A RAM region: guest address and length.
pub type RamRegion = (u64, u64);

/// RAM regions for `ram` bytes: below the MMIO hole, and the rest above 4 GiB.
pub fn ram_regions(ram: u64) -> Result<Vec<RamRegion>, MemoryLayoutError> {
    if ram < MIN_RAM {
        return Err(MemoryLayoutError::RamTooSmall(ram));
    }
    if ram > MAX_RAM {
        return Err(MemoryLayoutError::RamTooLarge(ram));
    }
    let low_end = layout::MMIO_HOLE_START.0;
    if ram <= low_end {
        Ok(vec![(0, ram)])
    } else {
        Ok(vec![
            (0, low_end),
            (layout::RAM_64BIT_START.0, ram - low_end),
        ])
    }
}

/// End (exclusive) of the highest RAM region.
pub fn ram_end(regions: &[RamRegion]) -> u64 {
    regions.iter().map(|(a, l)| a + l).max().unwrap_or(0)
}

fn align_up(v: u64, align: u64) -> Option<u64> {
    v.checked_add(align - 1).map(|x| x & !(align - 1))
}

/// Where a machine's memory lies in the guest's physical address space:
/// the one placement `Vm::build` maps and `pmemvm acpi` describes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MachineLayout {
    /// RAM regions.
    pub ram: Vec<RamRegion>,
    /// Each NVDIMM's range (base, length of its SPA range), in order.
    pub nvdimms: Vec<(u64, u64)>,
    /// Each legacy persistent-memory range (base, length), in order.
    pub legacy: Vec<(u64, u64)>,
    /// The CXL devices, their host bridges and windows, above all of these.
    pub cxl: crate::cxl::CxlPlatform,
}

/// The layout of `machine` in an address space of `phys_bits` bits: RAM
/// ([`ram_regions`]), the NVDIMMs above it ([`nvdimm_bases`]), the legacy
/// ranges after them ([`legacy_pmem_bases`]).
pub fn machine_layout(
    machine: &crate::config::MachineSpec,
    phys_bits: u8,
) -> Result<MachineLayout, MemoryLayoutError> {
    let ram = ram_regions(machine.memory)?;
    let sizes: Vec<u64> = machine.nvdimms.iter().map(|n| n.spa_size()).collect();
    let bases = nvdimm_bases(&ram, &sizes, phys_bits)?;
    let nvdimms: Vec<(u64, u64)> = bases.into_iter().zip(sizes).collect();
    let legacy_sizes: Vec<u64> = machine.legacy_pmem.iter().map(|l| l.size).collect();
    let legacy_bases = legacy_pmem_bases(&ram, &nvdimms, &legacy_sizes, phys_bits)?;
    let legacy: Vec<(u64, u64)> = legacy_bases.into_iter().zip(legacy_sizes).collect();
    let above = nvdimms
        .iter()
        .chain(&legacy)
        .map(|&(b, l)| b.saturating_add(l))
        .fold(ram_end(&ram).max(layout::RAM_64BIT_START.0), u64::max);
    let cxl = crate::cxl::CxlPlatform::place(&machine.cxl_pmem, above, phys_bits)?;
    Ok(MachineLayout {
        ram,
        nvdimms,
        legacy,
        cxl,
    })
}

/// Guest base address of each NVDIMM range of the given lengths: the first at
/// the first 1 GiB boundary at or above max(4 GiB, end of RAM), each next one
/// at the 1 GiB boundary after its predecessor.
/// Every DIMM must end below 2^`phys_bits`.
pub fn nvdimm_bases(
    ram: &[RamRegion],
    lengths: &[u64],
    phys_bits: u8,
) -> Result<Vec<u64>, MemoryLayoutError> {
    let bits = phys_bits.min(MAX_PHYS_ADDR_BITS);
    let limit = 1u64 << bits;
    let err = MemoryLayoutError::AddressSpace { bits };
    let mut next = ram_end(ram).max(layout::RAM_64BIT_START.0);
    let mut bases = Vec::with_capacity(lengths.len());
    for &len in lengths {
        let base = align_up(next, layout::NVDIMM_ALIGN).ok_or(err.clone())?;
        let end = base.checked_add(len).ok_or(err.clone())?;
        if end > limit {
            return Err(err);
        }
        bases.push(base);
        next = end;
    }
    Ok(bases)
}

/// Guest base address of each legacy persistent-memory range of the given
/// lengths: the first at the first [`layout::LEGACY_PMEM_ALIGN`] boundary at
/// or above the end of the last NVDIMM (or where the first NVDIMM would
/// be), each next one at the boundary after its predecessor — so the
/// NVDIMMs keep their addresses (the first at 4 GiB with RAM below 3 GiB).
/// Every range must end below 2^`phys_bits`.
pub fn legacy_pmem_bases(
    ram: &[RamRegion],
    nvdimms: &[(u64, u64)],
    lengths: &[u64],
    phys_bits: u8,
) -> Result<Vec<u64>, MemoryLayoutError> {
    let bits = phys_bits.min(MAX_PHYS_ADDR_BITS);
    let limit = 1u64 << bits;
    let mut next = nvdimms
        .iter()
        .map(|&(b, l)| b.saturating_add(l))
        .max()
        .unwrap_or(0)
        .max(ram_end(ram))
        .max(layout::RAM_64BIT_START.0);
    let mut bases = Vec::with_capacity(lengths.len());
    for &len in lengths {
        let end = align_up(next, layout::LEGACY_PMEM_ALIGN).and_then(|b| b.checked_add(len));
        match end {
            Some(end) if end <= limit => {
                bases.push(end - len);
                next = end;
            }
            _ => {
                return Err(MemoryLayoutError::LegacyAddressSpace {
                    size: crate::config::size_text(len),
                    end: end.unwrap_or(u64::MAX),
                    bits,
                    limit,
                })
            }
        }
    }
    Ok(bases)
}

/// E820 entry types used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum E820Type {
    /// Usable RAM.
    Ram = 1,
    /// Reserved.
    Reserved = 2,
    /// Legacy persistent memory (`E820_TYPE_PRAM`, what `memmap=nn!ss`
    /// makes): Linux prints it as "persistent (type 12)" and its `nd_e820`
    /// driver makes one `e820` bus region of each.
    Pram = 12,
}

/// One E820 entry: address, length, type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct E820Entry {
    /// Start.
    pub addr: u64,
    /// Length.
    pub size: u64,
    /// Kind.
    pub kind: E820Type,
}

/// The E820 map: RAM below the EBDA, the reserved BIOS area (ACPI tables and
/// the DSM page live there), RAM above 1 MiB and above 4 GiB, then each
/// legacy persistent-memory range (base, length) as type 12 and each
/// `reserved` range (the CXL platform's ECAM, which Linux uses for MMCONFIG
/// only where the firmware reserved it). NVDIMM ranges and CXL windows are
/// deliberately absent (as with QEMU): the NFIT and the CEDT describe them.
/// Entries are sorted by address.
pub fn e820_map(
    ram: &[RamRegion],
    legacy_pmem: &[(u64, u64)],
    reserved: &[(u64, u64)],
) -> Vec<E820Entry> {
    let mut map = Vec::new();
    let mut push = |addr, size, kind| {
        if size > 0 {
            map.push(E820Entry { addr, size, kind });
        }
    };
    for &(addr, len) in ram {
        let end = addr + len;
        if addr == 0 {
            let ebda = layout::EBDA_START.0;
            let high = layout::HIGH_RAM_START.0;
            push(0, ebda.min(end), E820Type::Ram);
            push(ebda, high - ebda, E820Type::Reserved);
            push(high, end.saturating_sub(high), E820Type::Ram);
        } else {
            push(addr, len, E820Type::Ram);
        }
    }
    for &(addr, len) in legacy_pmem {
        push(addr, len, E820Type::Pram);
    }
    for &(addr, len) in reserved {
        push(addr, len, E820Type::Reserved);
    }
    map.sort_by_key(|e| e.addr);
    map
}

#[cfg(test)]
mod tests {
    use super::*;

    const G: u64 = 1 << 30;
    const M: u64 = 1 << 20;

    #[test]
    fn ram_split_around_the_hole() {
        assert_eq!(ram_regions(512 * M).unwrap(), vec![(0, 512 * M)]);
        assert_eq!(ram_regions(3 * G).unwrap(), vec![(0, 3 * G)]);
        assert_eq!(
            ram_regions(5 * G).unwrap(),
            vec![(0, 3 * G), (4 * G, 2 * G)]
        );
        assert_eq!(ram_regions(M), Err(MemoryLayoutError::RamTooSmall(M)));
        assert!(ram_regions(2 << 40).is_err());
    }

    #[test]
    fn nvdimm_placement() {
        let ram = ram_regions(512 * M).unwrap();
        assert_eq!(nvdimm_bases(&ram, &[G], 46).unwrap(), vec![4 * G]);
        assert_eq!(
            nvdimm_bases(&ram, &[G - 2 * M, 2 * M, 128 * G], 46).unwrap(),
            vec![4 * G, 5 * G, 6 * G]
        );
        let ram = ram_regions(5 * G).unwrap(); // RAM ends at 6 GiB
        assert_eq!(nvdimm_bases(&ram, &[G, G], 46).unwrap(), vec![6 * G, 7 * G]);
        let ram = ram_regions(5 * G + 1).unwrap();
        assert_eq!(nvdimm_bases(&ram, &[2 * M], 46).unwrap(), vec![7 * G]);
        assert!(nvdimm_bases(&ram, &[1 << 46], 46).is_err());
        assert!(nvdimm_bases(&ram, &[u64::MAX - G], 46).is_err());
        // The width comes from the CPU: 1 TiB fits under 48 bits, not under 36.
        assert!(nvdimm_bases(&ram, &[1 << 40], 48).is_ok());
        assert_eq!(
            nvdimm_bases(&ram, &[1 << 40], 36),
            Err(MemoryLayoutError::AddressSpace { bits: 36 })
        );
    }

    #[test]
    fn e820_contents() {
        let map = e820_map(&ram_regions(512 * M).unwrap(), &[], &[]);
        assert_eq!(
            map,
            vec![
                E820Entry {
                    addr: 0,
                    size: 0x9fc00,
                    kind: E820Type::Ram
                },
                E820Entry {
                    addr: 0x9fc00,
                    size: 0x100000 - 0x9fc00,
                    kind: E820Type::Reserved
                },
                E820Entry {
                    addr: 0x100000,
                    size: 512 * M - 0x100000,
                    kind: E820Type::Ram
                },
            ]
        );
        let map = e820_map(&ram_regions(4 * G).unwrap(), &[], &[]);
        assert_eq!(map.len(), 4);
        assert_eq!(
            map[3],
            E820Entry {
                addr: 4 * G,
                size: G,
                kind: E820Type::Ram
            }
        );
        // No entry touches the NVDIMM area or the MMIO hole.
        assert!(map
            .iter()
            .all(|e| e.addr + e.size <= 3 * G || e.addr >= 4 * G));
    }

    #[test]
    fn legacy_pmem_goes_after_the_last_nvdimm_at_1g_boundaries() {
        let ram = ram_regions(512 * M).unwrap();
        // No NVDIMM: where the first DIMM would be.
        assert_eq!(
            legacy_pmem_bases(&ram, &[], &[256 * M], 46).unwrap(),
            vec![4 * G]
        );
        // After the DIMMs, which keep their addresses (the first at 4 GiB).
        let dimms = nvdimm_bases(&ram, &[G, 16 * M], 46).unwrap();
        assert_eq!(dimms, vec![4 * G, 5 * G]);
        let placed: Vec<(u64, u64)> = dimms.iter().copied().zip([G, 16 * M]).collect();
        assert_eq!(
            legacy_pmem_bases(&ram, &placed, &[256 * M, 2 * G + 16 * M, 16 * M], 46).unwrap(),
            vec![6 * G, 7 * G, 10 * G]
        );
        // RAM above 4 GiB: after RAM.
        let ram = ram_regions(5 * G + 16 * M).unwrap(); // ends at 6 GiB + 16 MiB
        assert_eq!(legacy_pmem_bases(&ram, &[], &[G], 46).unwrap(), vec![7 * G]);
        for b in legacy_pmem_bases(&ram, &[], &[16 * M, 48 * M, 3 * G], 46).unwrap() {
            assert_eq!(b % layout::LEGACY_PMEM_ALIGN, 0, "{b:#x}");
            assert_eq!(b % (2 * M), 0, "memremap_pages subsection: {b:#x}");
        }
    }

    #[test]
    fn legacy_pmem_beyond_the_address_width_is_refused() {
        let ram = ram_regions(512 * M).unwrap();
        // 36 bits = 64 GiB: 4 GiB + 60 GiB fits exactly, one more byte does not.
        assert!(legacy_pmem_bases(&ram, &[], &[60 * G], 36).is_ok());
        let e = legacy_pmem_bases(&ram, &[], &[60 * G, 16 * M], 36).unwrap_err();
        assert_eq!(
            e,
            MemoryLayoutError::LegacyAddressSpace {
                size: "16M".into(),
                end: 64 * G + 16 * M,
                bits: 36,
                limit: 64 * G
            }
        );
        assert!(e.to_string().contains("--pmem-legacy 16M"), "{e}");
        assert!(e.to_string().contains("36-bit"), "{e}");
        let e = legacy_pmem_bases(&ram, &[], &[u64::MAX - G], 52).unwrap_err();
        assert!(
            matches!(
                e,
                MemoryLayoutError::LegacyAddressSpace { end: u64::MAX, .. }
            ),
            "{e}"
        );
    }

    #[test]
    fn e820_lists_legacy_pmem_as_type_12() {
        let ram = ram_regions(512 * M).unwrap();
        let map = e820_map(&ram, &[(5 * G, 256 * M), (4 * G, 16 * M)], &[]);
        assert_eq!(map.len(), 5);
        assert_eq!(
            &map[3..],
            &[
                E820Entry {
                    addr: 4 * G,
                    size: 16 * M,
                    kind: E820Type::Pram
                },
                E820Entry {
                    addr: 5 * G,
                    size: 256 * M,
                    kind: E820Type::Pram
                },
            ]
        );
        assert_eq!(E820Type::Pram as u32, 12);
        assert!(map.windows(2).all(|w| w[0].addr + w[0].size <= w[1].addr));
        // RAM above 4 GiB comes first, the range after it.
        let ram = ram_regions(4 * G).unwrap();
        let base = legacy_pmem_bases(&ram, &[], &[G], 46).unwrap()[0];
        let map = e820_map(&ram, &[(base, G)], &[]);
        assert_eq!(map[3].kind, E820Type::Ram);
        assert_eq!(
            map[4],
            E820Entry {
                addr: 5 * G,
                size: G,
                kind: E820Type::Pram
            }
        );
    }

    #[test]
    fn phys_bits_come_from_cpuid_leaf_8000_0008() {
        let leaf = |eax| kvm_bindings::kvm_cpuid_entry2 {
            function: 0x8000_0008,
            eax,
            ..Default::default()
        };
        assert_eq!(phys_addr_bits(&[leaf(0x3028)]), 40);
        assert_eq!(phys_addr_bits(&[leaf(0x3030)]), 48);
        // Missing or nonsense: the architectural default.
        assert_eq!(phys_addr_bits(&[]), DEFAULT_PHYS_ADDR_BITS);
        assert_eq!(phys_addr_bits(&[leaf(0xff)]), DEFAULT_PHYS_ADDR_BITS);
        assert_eq!(phys_addr_bits(&[leaf(0x10)]), DEFAULT_PHYS_ADDR_BITS);
        let host = host_phys_addr_bits();
        assert!((DEFAULT_PHYS_ADDR_BITS..=MAX_PHYS_ADDR_BITS).contains(&host));
    }
}
