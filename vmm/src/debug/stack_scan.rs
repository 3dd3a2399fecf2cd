//! The kernel code addresses on a stopped vCPU's stack, for a report of
//! where a guest is stuck: the words from RSP to the end of the kernel stack
//! that point into the kernel's code, newest first. Like the `?` entries of a
//! Linux oops, some are stale (left by calls that returned), but the callers
//! of the function at RIP are among them. The stack and page tables are the
//! guest's: every read goes through the bounds-checked page walk, and the
//! scan stops at the first page that does not translate.

use kvm_ioctls::VcpuFd;
use vm_memory::GuestMemoryMmap;

use crate::debug::gdb::paging::{self, GuestRam, Paging, PhysRead};

/// Most code addresses kept from one stack.
pub const MAX_WORDS: usize = 24;
/// x86-64 Linux's kernel stacks are 16 KiB, aligned to their size (32 KiB
/// with KASAN: a scan to the first 16 KiB boundary still reads the newest
/// frames).
const STACK_ALIGN: u64 = 16 << 10;
/// The kernel's text and modules: from the kernel image mapping
/// (`__START_KERNEL_map`) to the fixmap.
const KERNEL_CODE: std::ops::Range<u64> = 0xffff_ffff_8000_0000..0xffff_ffff_ff00_0000;

/// Code addresses found on a stack, newest first (a fixed array, so a
/// snapshot of a vCPU stays `Copy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StackWords {
    words: [u64; MAX_WORDS],
    len: u8,
}

impl StackWords {
    /// The addresses, newest first.
    pub fn words(&self) -> &[u64] {
        &self.words[..usize::from(self.len)]
    }

    fn push(&mut self, w: u64) -> bool {
        match self.words.get_mut(usize::from(self.len)) {
            Some(slot) => {
                *slot = w;
                self.len += 1;
                true
            }
            None => false,
        }
    }
}

/// True for an address in a kernel's upper half: the vCPU was in the kernel.
pub fn in_kernel(rip: u64) -> bool {
    KERNEL_CODE.contains(&rip)
}

/// The kernel code addresses on the stack at `rsp`, read through the page
/// tables under `cr3` in mode `paging`, up to the end of the 16 KiB-aligned
/// kernel stack that holds `rsp`.
pub fn scan(mem: &impl PhysRead, paging: Paging, cr3: u64, rsp: u64) -> StackWords {
    let mut found = StackWords::default();
    let start = rsp & !7;
    let end = (start | (STACK_ALIGN - 1)).saturating_add(1);
    let mut at = start;
    while at < end {
        let Ok(t) = paging::translate(mem, paging, cr3, at) else {
            break;
        };
        let in_page = t.left_in_page.min(end - at);
        let mut off = 0;
        while off + 8 <= in_page {
            let Some(w) = t.gpa.checked_add(off).and_then(|a| mem.read_u64(a)) else {
                return found;
            };
            if KERNEL_CODE.contains(&w) && !found.push(w) {
                return found;
            }
            off += 8;
        }
        let Some(next) = at.checked_add(in_page.max(8)) else {
            break;
        };
        at = next;
    }
    found
}

/// The kernel code addresses on the stack of `vcpu`, stopped (out of
/// `KVM_RUN`, on its own thread) at `rip` with `rsp`: nothing when it was not
/// in the kernel or its registers or page tables do not lead to the stack.
pub fn of_vcpu(vcpu: &VcpuFd, mem: &GuestMemoryMmap, rip: u64, rsp: u64) -> StackWords {
    if !in_kernel(rip) {
        return StackWords::default();
    }
    let Ok(sregs) = vcpu.get_sregs() else {
        return StackWords::default();
    };
    let paging = Paging::from_registers(sregs.cr0, sregs.cr4, sregs.efer);
    scan(&GuestRam(mem), paging, sregs.cr3, rsp)
}

/// Stack words for other modules' tests.
#[cfg(test)]
pub mod tests_support {
    use super::StackWords;

    /// `StackWords` holding `w` (at most [`super::MAX_WORDS`]).
    pub fn words(w: &[u64]) -> StackWords {
        let mut s = StackWords::default();
        for &x in w {
            s.push(x);
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// Guest memory as a map of 8-byte words.
    struct Mem(HashMap<u64, u64>);

    impl PhysRead for Mem {
        fn read_u64(&self, gpa: u64) -> Option<u64> {
            self.0
                .get(&gpa)
                .copied()
                .or(Some(0))
                .filter(|_| gpa < 1 << 30)
        }
        fn read_u32(&self, gpa: u64) -> Option<u32> {
            self.read_u64(gpa).map(|v| (v & 0xffff_ffff) as u32)
        }
    }

    /// 4-level tables at 0x1000.. mapping the 16 KiB stack at `stack_va`
    /// to physical 0x100000 (4 KiB pages).
    fn tables(stack_va: u64, pages: u64) -> Mem {
        let mut m = HashMap::new();
        let idx = |level: u32| (stack_va >> (12 + 9 * (level - 1))) & 0x1ff;
        m.insert(0x1000 + idx(4) * 8, 0x2000 | 3);
        m.insert(0x2000 + idx(3) * 8, 0x3000 | 3);
        m.insert(0x3000 + idx(2) * 8, 0x4000 | 3);
        for p in 0..pages {
            m.insert(0x4000 + (idx(1) + p) * 8, (0x100000 + p * 4096) | 3);
        }
        Mem(m)
    }

    const STACK: u64 = 0xffff_c900_0001_0000;

    #[test]
    fn code_words_from_rsp_to_the_stacks_end_are_found_newest_first() {
        let mut mem = tables(STACK, 4);
        // Below RSP (not scanned), at RSP, data, and on the stack's last page.
        mem.0.insert(0x100000 + 0x100, 0xffff_ffff_8100_0001);
        mem.0.insert(0x100000 + 0x200, 0xffff_ffff_8123_4567);
        mem.0.insert(0x100000 + 0x208, 0xffff_8880_0000_1000);
        mem.0.insert(0x100000 + 0x3ff8, 0xffff_ffff_c03d_f20c);
        let w = scan(&mem, Paging::Level4, 0x1000, STACK + 0x200);
        assert_eq!(w.words(), &[0xffff_ffff_8123_4567, 0xffff_ffff_c03d_f20c]);
    }

    #[test]
    fn an_unmapped_page_ends_the_scan_and_a_full_stack_keeps_the_newest() {
        let mut mem = tables(STACK, 1);
        mem.0.insert(0x100000 + 0xff8, 0xffff_ffff_8100_0010);
        let w = scan(&mem, Paging::Level4, 0x1000, STACK + 0xff8);
        assert_eq!(w.words(), &[0xffff_ffff_8100_0010]);
        // Nothing mapped at all: nothing found, no panic.
        assert!(scan(&mem, Paging::Level4, 0x1000, 0xffff_c900_0900_0000)
            .words()
            .is_empty());
        let mut full = tables(STACK, 4);
        for i in 0..100 {
            full.0.insert(0x100000 + i * 8, 0xffff_ffff_8100_0000 + i);
        }
        let w = scan(&full, Paging::Level4, 0x1000, STACK);
        assert_eq!(w.words().len(), MAX_WORDS);
        assert_eq!(w.words()[0], 0xffff_ffff_8100_0000);
        // Page tables outside guest memory and a hostile RSP at the top of
        // the address space end the scan without a panic.
        assert!(scan(&full, Paging::Level4, 1 << 40, STACK)
            .words()
            .is_empty());
        let _ = scan(&full, Paging::Level4, 0x1000, u64::MAX);
        let _ = scan(&full, Paging::Off, 0, u64::MAX - 3);
    }

    /// Hostile guests: page tables and stacks of random words (every entry
    /// present half the time, addresses anywhere), random CR3 and RSP, every
    /// paging mode — the scan never panics and keeps only kernel code words.
    #[test]
    fn random_tables_and_stacks_never_panic_and_keep_only_code_words() {
        struct Noise(u64);
        impl PhysRead for Noise {
            fn read_u64(&self, gpa: u64) -> Option<u64> {
                if gpa >= 1 << 32 {
                    return None;
                }
                let mut x = gpa.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ self.0;
                x ^= x >> 29;
                x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
                // Low half: table entries inside 4 GiB; high half: code-ish words.
                Some(if x & 1 == 0 {
                    (x & 0xffff_f000) | (x >> 40 & 0x81)
                } else {
                    0xffff_ffff_8000_0000 | (x & 0x7fff_ffff)
                })
            }
            fn read_u32(&self, gpa: u64) -> Option<u32> {
                self.read_u64(gpa).map(|v| (v & 0xffff_ffff) as u32)
            }
        }
        let mut seed = 0x1234_5678_u64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let modes = [
            Paging::Off,
            Paging::Bits32 { pse: true },
            Paging::Pae,
            Paging::Level4,
            Paging::Level5,
        ];
        for i in 0..3000 {
            let mem = Noise(next());
            let w = scan(&mem, modes[i % modes.len()], next(), next());
            assert!(w.words().len() <= MAX_WORDS);
            assert!(w.words().iter().all(|x| KERNEL_CODE.contains(x)));
        }
    }

    #[test]
    fn only_upper_half_kernel_code_counts_as_in_the_kernel() {
        assert!(in_kernel(0xffff_ffff_8100_0000));
        assert!(in_kernel(0xffff_ffff_c03d_f20c));
        assert!(!in_kernel(0x7fff_0000_1000));
        assert!(!in_kernel(0xffff_8880_0000_0000));
    }
}
