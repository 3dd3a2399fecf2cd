//! A guest laid out as Linux lays itself out (4-level page tables, the kernel
//! image moved by KASLR, the IDT at the CPU entry area, the direct map), with
//! the kernel's note and a user's forged one at a lower address.

use std::io;

use super::*;
use crate::debug::dump::vmcoreinfo;

const RAM: usize = 16 << 20;
/// The KASLR offset of this guest.
const KASLR: u64 = 0x1e00_0000;
const ANCHORS: Anchors = Anchors {
    note_pointer: 0xffff_ffff_8260_0040,
    divide_error: 0xffff_ffff_81a0_0100,
};
const IDT: u64 = 0xffff_fe00_0000_0000;
const DIRECT_MAP: u64 = 0xffff_8880_0000_0000;
const PML4: u64 = 0x10000;
/// The kernel's note and the forged one (lower: a scan meets it first).
const REAL_NOTE: u64 = 0x80_0000;
const FORGED_NOTE: u64 = 0x10_0000;

struct Flat(Vec<u8>);

impl Ram for Flat {
    fn ranges(&self) -> Vec<(u64, u64)> {
        vec![(0, self.0.len() as u64)]
    }
    fn read(&self, gpa: u64, buf: &mut [u8]) -> io::Result<()> {
        let at = usize::try_from(gpa).map_err(io::Error::other)?;
        let src = self
            .0
            .get(at..at + buf.len())
            .ok_or_else(|| io::Error::other("outside"))?;
        buf.copy_from_slice(src);
        Ok(())
    }
}

impl Flat {
    fn put(&mut self, gpa: u64, bytes: &[u8]) {
        let at = usize::try_from(gpa).unwrap();
        self.0[at..at + bytes.len()].copy_from_slice(bytes);
    }
    fn entry(&mut self, table: u64, index: u64, value: u64) {
        self.put(table + 8 * index, &value.to_le_bytes());
    }
}

fn index(va: u64, level: u32) -> u64 {
    (va >> (12 + 9 * (level - 1))) & 511
}

/// The guest, its note saying `offset` as KERNELOFFSET.
fn guest(offset: u64) -> Flat {
    let mut m = Flat(vec![0u8; RAM]);
    let (pdpt_k, pd_k, pdpt_cea, pd_cea, pt_cea, pdpt_dm) =
        (0x20000, 0x21000, 0x22000, 0x23000, 0x24000, 0x25000);
    // The kernel image's 2 MiB page holding the pointer, at 4 MiB.
    let ptr_va = ANCHORS.note_pointer + KASLR;
    m.entry(PML4, index(ptr_va, 4), pdpt_k | 3);
    m.entry(pdpt_k, index(ptr_va, 3), pd_k | 3);
    m.entry(pd_k, index(ptr_va, 2), 0x40_0000 | 0x83);
    m.put(
        0x40_0000 + (ptr_va & 0x1f_ffff),
        &(DIRECT_MAP + REAL_NOTE).to_le_bytes(),
    );
    // The IDT's page, at 0x5000; gate 0 holds the relocated handler.
    m.entry(PML4, index(IDT, 4), pdpt_cea | 3);
    m.entry(pdpt_cea, index(IDT, 3), pd_cea | 3);
    m.entry(pd_cea, index(IDT, 2), pt_cea | 3);
    m.entry(pt_cea, index(IDT, 1), 0x5000 | 3);
    let h = ANCHORS.divide_error + KASLR;
    let lo = (h & 0xffff) | (0x10 << 16) | (0x8e00 << 32) | ((h >> 16) & 0xffff) << 48;
    m.put(0x5000, &lo.to_le_bytes());
    m.put(0x5008, &(h >> 32).to_le_bytes());
    // The direct map: one 1 GiB page over all of RAM.
    m.entry(PML4, index(DIRECT_MAP, 4), pdpt_dm | 3);
    m.entry(pdpt_dm, index(DIRECT_MAP, 3), 0x83);
    let text = |off: u64| format!("OSRELEASE=6.1.0-pmemvm\nPAGESIZE=4096\nKERNELOFFSET={off:x}\n");
    m.put(
        REAL_NOTE,
        &crate::debug::dump::elf::note("VMCOREINFO", 0, text(offset).as_bytes()),
    );
    m.put(
        FORGED_NOTE,
        &crate::debug::dump::elf::note("VMCOREINFO", 0, text(0x4200_0000).as_bytes()),
    );
    m
}

fn vcpu(cr3: u64) -> VcpuState {
    let mut v = VcpuState::default();
    v.sregs.cr0 = 0x8000_0001;
    v.sregs.cr4 = 0x20;
    v.sregs.efer = 0x500;
    v.sregs.cr3 = cr3;
    v.sregs.idt.base = IDT;
    v
}

#[test]
fn the_kernels_own_note_is_found_where_a_scan_finds_the_users_forgery() {
    let m = guest(KASLR);
    let scanned = vmcoreinfo::find(&m).unwrap().unwrap();
    assert_eq!(
        scanned.gpa, FORGED_NOTE,
        "the scan meets the lower, forged note"
    );
    let found = locate(&m, &[vcpu(PML4)], ANCHORS).unwrap();
    assert_eq!(found.gpa, REAL_NOTE);
    assert_eq!(found.value("KERNELOFFSET").as_deref(), Some("1e000000"));
    // A vCPU in user mode under page-table isolation (the user half, PCID set).
    let found = locate(&m, &[vcpu(PML4 + 0x1000 + 5)], ANCHORS).unwrap();
    assert_eq!(found.gpa, REAL_NOTE);
}

#[test]
fn a_note_that_disagrees_with_the_idt_or_a_kernel_not_up_gives_no_note() {
    let m = guest(0x4200_0000);
    let e = locate(&m, &[vcpu(PML4)], ANCHORS).unwrap_err();
    assert!(e.contains("does not agree with the running kernel"), "{e}");
    let mut real_mode = vcpu(PML4);
    real_mode.sregs.cr0 = 1;
    let e = locate(&guest(KASLR), &[real_mode], ANCHORS).unwrap_err();
    assert!(e.contains("not up yet"), "{e}");
    // Page tables that lead nowhere: named, not a panic.
    let e = locate(&guest(KASLR), &[vcpu(0x3000)], ANCHORS).unwrap_err();
    assert!(e.contains("vCPU 0"), "{e}");
}
