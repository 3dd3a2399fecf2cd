//! Guest virtual to guest physical addresses, read the way the guest's MMU
//! reads them: the page tables under the vCPU's CR3 in guest memory, in the
//! paging mode its CR0, CR4 and EFER select (none, 32-bit, PAE, 4-level and
//! 5-level, with 4 MiB / 2 MiB / 1 GiB pages). The tables are the guest's
//! and may hold anything: every entry is bounds-checked through
//! [`PhysRead`], a walk visits at most five levels, and nothing it reads is
//! trusted to stay inside guest memory.

use thiserror::Error;
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

use crate::vstate::cpu::{CR0_PG, CR4_PAE, EFER_LMA};

/// CR4.PSE: 4 MiB pages in 32-bit paging.
const CR4_PSE: u64 = 1 << 4;
/// CR4.LA57: 5-level paging in long mode.
const CR4_LA57: u64 = 1 << 12;

/// Present bit of every entry.
const PRESENT: u64 = 1;
/// Page-size bit of a directory entry (a large page, not a table).
const PAGE_SIZE: u64 = 1 << 7;
/// Physical-address bits of a 64-bit entry (bits 12..51).
const ADDR_MASK: u64 = 0x000f_ffff_ffff_f000;

/// Reads guest physical memory for the walk.
pub trait PhysRead {
    /// The 8 bytes at `gpa`, little endian; `None` outside guest memory.
    fn read_u64(&self, gpa: u64) -> Option<u64>;
    /// The 4 bytes at `gpa`; `None` outside guest memory.
    fn read_u32(&self, gpa: u64) -> Option<u32>;
}

/// Guest RAM for the walk (an address outside it reads as `None`).
#[derive(Debug, Clone, Copy)]
pub struct GuestRam<'a>(pub &'a GuestMemoryMmap);

impl PhysRead for GuestRam<'_> {
    fn read_u64(&self, gpa: u64) -> Option<u64> {
        self.0.read_obj::<u64>(GuestAddress(gpa)).ok()
    }
    fn read_u32(&self, gpa: u64) -> Option<u32> {
        self.0.read_obj::<u32>(GuestAddress(gpa)).ok()
    }
}

/// Why an address has no translation.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum PagingError {
    /// An entry on the way is not present.
    #[error("guest address {gva:#x} is not mapped (level-{level} entry not present)")]
    NotPresent {
        /// The virtual address.
        gva: u64,
        /// The level whose entry was empty (1 = page table).
        level: u8,
    },
    /// The address is not canonical for the paging mode.
    #[error("guest address {gva:#x} is not canonical for {bits}-bit virtual addresses")]
    NonCanonical {
        /// The virtual address.
        gva: u64,
        /// Virtual-address width of the mode.
        bits: u8,
    },
    /// A table lies outside guest memory.
    #[error("the guest's page table at physical address {gpa:#x} lies outside guest memory")]
    TableOutside {
        /// Where the table entry would be.
        gpa: u64,
    },
}

/// The paging mode a vCPU is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Paging {
    /// CR0.PG clear: virtual is physical.
    Off,
    /// 32-bit paging (2 levels, 4-byte entries).
    Bits32 {
        /// CR4.PSE: 4 MiB pages allowed.
        pse: bool,
    },
    /// PAE paging outside long mode (3 levels).
    Pae,
    /// Long mode, 4 levels (48-bit addresses).
    Level4,
    /// Long mode, 5 levels (57-bit addresses).
    Level5,
}

impl Paging {
    /// The mode CR0, CR4 and EFER select.
    pub fn from_registers(cr0: u64, cr4: u64, efer: u64) -> Self {
        if cr0 & CR0_PG == 0 {
            Self::Off
        } else if efer & EFER_LMA != 0 {
            if cr4 & CR4_LA57 != 0 {
                Self::Level5
            } else {
                Self::Level4
            }
        } else if cr4 & CR4_PAE != 0 {
            Self::Pae
        } else {
            Self::Bits32 {
                pse: cr4 & CR4_PSE != 0,
            }
        }
    }
}

/// A translated address and how far the same page goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Translation {
    /// Guest physical address of the byte.
    pub gpa: u64,
    /// Bytes from `gpa` to the end of its page (4 KiB, 2/4 MiB or 1 GiB).
    pub left_in_page: u64,
}

fn entry64(mem: &impl PhysRead, gpa: u64) -> Result<u64, PagingError> {
    mem.read_u64(gpa).ok_or(PagingError::TableOutside { gpa })
}

fn in_page(gpa_base: u64, gva: u64, page_bits: u32) -> Translation {
    let offset_mask = (1u64 << page_bits) - 1;
    let offset = gva & offset_mask;
    Translation {
        gpa: (gpa_base & !offset_mask) | offset,
        left_in_page: (1u64 << page_bits) - offset,
    }
}

/// Walks 64-bit-entry tables from `table` for the `levels` lowest levels of
/// `gva` (9 index bits each); large pages are allowed at levels 2 and 3.
fn walk64(
    mem: &impl PhysRead,
    mut table: u64,
    gva: u64,
    levels: u8,
) -> Result<Translation, PagingError> {
    for level in (1..=levels).rev() {
        let shift = 12 + 9 * u32::from(level - 1);
        let index = (gva >> shift) & 0x1ff;
        let entry = entry64(mem, (table & ADDR_MASK) + index * 8)?;
        if entry & PRESENT == 0 {
            return Err(PagingError::NotPresent { gva, level });
        }
        if level == 1 || ((level == 2 || level == 3) && entry & PAGE_SIZE != 0) {
            return Ok(in_page(entry & ADDR_MASK, gva, shift));
        }
        table = entry;
    }
    // `levels` is at least 1, so the loop returned.
    Err(PagingError::NotPresent { gva, level: 1 })
}

fn canonical(gva: u64, bits: u8) -> Result<(), PagingError> {
    let top = gva >> (bits - 1);
    let ones = u64::MAX >> (bits - 1);
    if top == 0 || top == ones {
        Ok(())
    } else {
        Err(PagingError::NonCanonical { gva, bits })
    }
}

/// The guest physical address of `gva` under `cr3` in mode `paging`.
pub fn translate(
    mem: &impl PhysRead,
    paging: Paging,
    cr3: u64,
    gva: u64,
) -> Result<Translation, PagingError> {
    match paging {
        Paging::Off => Ok(Translation {
            gpa: gva,
            left_in_page: 4096 - (gva & 0xfff),
        }),
        Paging::Bits32 { pse } => {
            let gva = gva & 0xffff_ffff;
            let pde_at = (cr3 & 0xffff_f000) + ((gva >> 22) & 0x3ff) * 4;
            let pde = u64::from(
                mem.read_u32(pde_at)
                    .ok_or(PagingError::TableOutside { gpa: pde_at })?,
            );
            if pde & PRESENT == 0 {
                return Err(PagingError::NotPresent { gva, level: 2 });
            }
            if pse && pde & PAGE_SIZE != 0 {
                return Ok(in_page(pde & 0xffc0_0000, gva, 22));
            }
            let pte_at = (pde & 0xffff_f000) + ((gva >> 12) & 0x3ff) * 4;
            let pte = u64::from(
                mem.read_u32(pte_at)
                    .ok_or(PagingError::TableOutside { gpa: pte_at })?,
            );
            if pte & PRESENT == 0 {
                return Err(PagingError::NotPresent { gva, level: 1 });
            }
            Ok(in_page(pte & 0xffff_f000, gva, 12))
        }
        Paging::Pae => {
            let gva = gva & 0xffff_ffff;
            let pdpte_at = (cr3 & 0xffff_ffe0) + ((gva >> 30) & 3) * 8;
            let pdpte = entry64(mem, pdpte_at)?;
            if pdpte & PRESENT == 0 {
                return Err(PagingError::NotPresent { gva, level: 3 });
            }
            walk64(mem, pdpte, gva, 2)
        }
        Paging::Level4 => {
            canonical(gva, 48)?;
            walk64(mem, cr3, gva, 4)
        }
        Paging::Level5 => {
            canonical(gva, 57)?;
            walk64(mem, cr3, gva, 5)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// Sparse guest memory of 8-byte words below `limit`.
    struct Mem {
        words: HashMap<u64, u64>,
        limit: u64,
    }

    impl Mem {
        fn new() -> Self {
            Self {
                words: HashMap::new(),
                limit: 1 << 32,
            }
        }
        fn set(&mut self, gpa: u64, v: u64) {
            self.words.insert(gpa, v);
        }
    }

    impl PhysRead for Mem {
        fn read_u64(&self, gpa: u64) -> Option<u64> {
            (gpa.checked_add(8)? <= self.limit).then(|| *self.words.get(&gpa).unwrap_or(&0))
        }
        fn read_u32(&self, gpa: u64) -> Option<u32> {
            let word = self.read_u64(gpa & !7)?;
            u32::try_from((word >> ((gpa & 4) * 8)) & 0xffff_ffff).ok()
        }
    }

    const KERNEL: u64 = 0xffff_ffff_8100_0000;

    /// A 4-level map of KERNEL+0x1000 → 0x0123_4000 through tables at
    /// 0x1000 (PML4), 0x2000, 0x3000, 0x4000 (PT); and KERNEL+2M as a 2 MiB page.
    fn four_level() -> Mem {
        let mut m = Mem::new();
        let idx = |gva: u64, level: u32| (gva >> (12 + 9 * (level - 1))) & 0x1ff;
        m.set(0x1000 + idx(KERNEL, 4) * 8, 0x2000 | 3);
        m.set(0x2000 + idx(KERNEL, 3) * 8, 0x3000 | 3);
        m.set(0x3000 + idx(KERNEL, 2) * 8, 0x4000 | 3);
        m.set(
            0x4000 + idx(KERNEL + 0x1000, 1) * 8,
            0x0123_4000 | 3 | (1 << 63),
        );
        m.set(
            0x3000 + idx(KERNEL + 0x20_0000, 2) * 8,
            0x0400_0000 | PAGE_SIZE | 3,
        );
        m
    }

    #[test]
    fn four_level_pages_and_large_pages_translate() {
        let m = four_level();
        let t = translate(&m, Paging::Level4, 0x1000, KERNEL + 0x1234).unwrap();
        assert_eq!(
            t,
            Translation {
                gpa: 0x0123_4234,
                left_in_page: 0xdcc
            }
        );
        let t = translate(&m, Paging::Level4, 0x1000, KERNEL + 0x20_0000 + 0x1_2345).unwrap();
        assert_eq!(t.gpa, 0x0401_2345);
        assert_eq!(t.left_in_page, 0x20_0000 - 0x1_2345);
        // The NX bit (63) is not part of the address.
        assert_eq!(
            translate(&m, Paging::Level4, 0x1000, KERNEL).unwrap_err(),
            PagingError::NotPresent {
                gva: KERNEL,
                level: 1
            }
        );
    }

    #[test]
    fn five_level_adds_a_level_and_widens_canonical_addresses() {
        let mut m = four_level();
        // PML5 at 0x5000: index of KERNEL at level 5 is 511 (all ones).
        m.set(0x5000 + 511 * 8, 0x1000 | 3);
        let t = translate(&m, Paging::Level5, 0x5000, KERNEL + 0x1008).unwrap();
        assert_eq!(t.gpa, 0x0123_4008);
        // Bit 60 set with bit 56 clear: not canonical for 57 bits.
        assert!(matches!(
            translate(&m, Paging::Level5, 0x5000, 1 << 60),
            Err(PagingError::NonCanonical { bits: 57, .. })
        ));
        assert!(matches!(
            translate(&m, Paging::Level4, 0x1000, 0x0000_8000_0000_0000),
            Err(PagingError::NonCanonical { bits: 48, .. })
        ));
    }

    #[test]
    fn one_gib_pages_and_the_mode_from_registers() {
        let mut m = Mem::new();
        m.set(0x1000, 0x2000 | 3);
        m.set(0x2000 + 8, 0x8000_0000 | PAGE_SIZE | 3); // 1 GiB..2 GiB → 2 GiB
        let t = translate(&m, Paging::Level4, 0x1000, 0x4000_0123).unwrap();
        assert_eq!(t.gpa, 0x8000_0123);
        assert_eq!(t.left_in_page, (1 << 30) - 0x123);
        let lma = Paging::from_registers(CR0_PG | 1, CR4_PAE, EFER_LMA | (1 << 8));
        assert_eq!(lma, Paging::Level4);
        assert_eq!(
            Paging::from_registers(CR0_PG, CR4_PAE | CR4_LA57, EFER_LMA),
            Paging::Level5
        );
        assert_eq!(Paging::from_registers(1, CR4_PAE, 0), Paging::Off);
        assert_eq!(Paging::from_registers(CR0_PG, CR4_PAE, 0), Paging::Pae);
        assert_eq!(
            Paging::from_registers(CR0_PG, CR4_PSE, 0),
            Paging::Bits32 { pse: true }
        );
    }

    #[test]
    fn thirty_two_bit_and_pae_walks() {
        let mut m = Mem::new();
        // 32-bit: PD at 0x1000; 0xc000_0000 → PDE 768 → PT at 0x2000.
        let pde_at = 0x1000 + 768 * 4;
        m.set(pde_at & !7, u64::from(0x2000u32 | 3) << ((pde_at & 4) * 8));
        m.set(0x2000 + 8, (0x0055_5000u64 | 3) << 32); // PTE 3 (upper half of word 1)
        let t = translate(&m, Paging::Bits32 { pse: false }, 0x1000, 0xc000_3abc).unwrap();
        assert_eq!(t.gpa, 0x0055_5abc);
        // PAE: PDPT at 0x3000, entry 3 → PD at 0x4000, a 2 MiB page at PDE 0.
        m.set(0x3000 + 24, 0x4000 | 1);
        m.set(0x4000, 0x0060_0000 | PAGE_SIZE | 3);
        let t = translate(&m, Paging::Pae, 0x3000, 0xc001_0000).unwrap();
        assert_eq!(t.gpa, 0x0061_0000);
        assert_eq!(
            translate(&m, Paging::Pae, 0x3000, 0x0000_1000).unwrap_err(),
            PagingError::NotPresent {
                gva: 0x1000,
                level: 3
            }
        );
    }

    #[test]
    fn tables_outside_memory_are_an_error_not_a_read() {
        let mut m = Mem::new();
        m.set(0x1000, 0xffff_ffff_f000 | 3); // PDPT far beyond memory
        assert!(matches!(
            translate(&m, Paging::Level4, 0x1000, 0x1000),
            Err(PagingError::TableOutside { .. })
        ));
        assert!(matches!(
            translate(&m, Paging::Level4, ADDR_MASK, 0),
            Err(PagingError::TableOutside { .. })
        ));
    }

    /// Hostile tables: random entries and addresses never panic or loop.
    #[test]
    fn random_tables_never_panic() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for _ in 0..10_000 {
            let mut m = Mem::new();
            m.limit = 0x10_0000;
            for _ in 0..64 {
                let at = (next() % 0x10_0000) & !7;
                let v = next();
                m.set(at, v);
            }
            let cr3 = next() % 0x10_0000;
            let gva = next();
            for mode in [
                Paging::Off,
                Paging::Bits32 { pse: true },
                Paging::Pae,
                Paging::Level4,
                Paging::Level5,
            ] {
                let _ = translate(&m, mode, cr3, gva);
            }
        }
    }
}
