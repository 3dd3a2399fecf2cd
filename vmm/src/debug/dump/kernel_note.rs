//! Where the running kernel keeps its `VMCOREINFO` note, as the kernel itself
//! says, so a guest user cannot plant a note a dump would carry. Since Linux
//! 4.13 the note lives in a page the kernel allocated, and its address is in
//! the kernel's pointer `vmcoreinfo_note`. pmemvm reads that pointer through
//! a vCPU's page tables at its symbol's address in the `--kernel` vmlinux,
//! moved by the KASLR offset that the running kernel's IDT shows (vector 0's
//! gate holds the relocated `asm_exc_divide_error`). Page tables, IDT and the
//! pointer are the kernel's: nothing a user process writes is on the way. The
//! note's own `KERNELOFFSET` must agree with that offset.
//!
//! A kernel file without these symbols (a bzImage, a stripped vmlinux) leaves
//! only the scan of [`super::vmcoreinfo::find`]; the dump then says so.

use std::path::Path;

use super::elf::{Ram, VcpuState};
use super::vmcoreinfo::{Found, FIRST_KEY, MAX_DESC, NAME};
use crate::debug::gdb::paging::{translate, Paging, PhysRead};

/// The kernel's pointer to its note.
const NOTE_POINTER: &str = "vmcoreinfo_note";
/// Vector 0's handler (the IDT gate read for the KASLR offset).
const DIVIDE_ERROR: &str = "asm_exc_divide_error";

/// The two symbols' unrelocated addresses in the kernel file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Anchors {
    /// `vmcoreinfo_note` (a `u32 *`).
    pub note_pointer: u64,
    /// `asm_exc_divide_error`.
    pub divide_error: u64,
}

impl Anchors {
    /// The anchors of the kernel file at `kernel`; `None` when it lacks them.
    pub fn of(kernel: &Path) -> Option<Self> {
        let a = crate::debug::symbols::addresses(kernel, &[NOTE_POINTER, DIVIDE_ERROR]);
        Some(Self {
            note_pointer: a.first().copied().flatten()?,
            divide_error: a.get(1).copied().flatten()?,
        })
    }
}

/// Guest RAM as the page walk reads it.
struct Phys<'a>(&'a dyn Ram);

impl PhysRead for Phys<'_> {
    fn read_u64(&self, gpa: u64) -> Option<u64> {
        let mut b = [0u8; 8];
        self.0.read(gpa, &mut b).ok()?;
        Some(u64::from_le_bytes(b))
    }
    fn read_u32(&self, gpa: u64) -> Option<u32> {
        let mut b = [0u8; 4];
        self.0.read(gpa, &mut b).ok()?;
        Some(u32::from_le_bytes(b))
    }
}

/// The kernel's note, found through the first vCPU in long mode whose page
/// tables lead to it; why not, otherwise.
pub fn locate(ram: &dyn Ram, vcpus: &[VcpuState], a: Anchors) -> Result<Found, String> {
    let mut why = "no vCPU runs with 4- or 5-level paging (the kernel is not up yet)".to_string();
    for (i, v) in vcpus.iter().enumerate() {
        let s = &v.sregs;
        let paging = Paging::from_registers(s.cr0, s.cr4, s.efer);
        if !matches!(paging, Paging::Level4 | Paging::Level5) {
            continue;
        }
        // With page-table isolation a vCPU in user mode runs on the user half
        // of a pair; the kernel's is the page below it.
        for cr3 in [s.cr3 & !0x1fff, s.cr3 & !0xfff] {
            match through(ram, paging, cr3, s.idt.base, a) {
                Ok(found) => return Ok(found),
                Err(e) => why = format!("vCPU {i}: {e}"),
            }
        }
    }
    Err(why)
}

/// The note through the page tables at `cr3`, the IDT at `idt`.
fn through(ram: &dyn Ram, paging: Paging, cr3: u64, idt: u64, a: Anchors) -> Result<Found, String> {
    let mem = Phys(ram);
    let gpa = |gva: u64| {
        translate(&mem, paging, cr3, gva)
            .map(|t| t.gpa)
            .map_err(|e| e.to_string())
    };
    let read = |at: u64| {
        mem.read_u64(at)
            .ok_or(format!("{at:#x} is outside guest RAM"))
    };
    let gate = gpa(idt)?;
    let (lo, hi) = (read(gate)?, read(gate + 8)?);
    let handler = (lo & 0xffff) | ((lo >> 48) << 16) | ((hi & 0xffff_ffff) << 32);
    let offset = handler.wrapping_sub(a.divide_error);
    let pointer = gpa(a.note_pointer.wrapping_add(offset))?;
    let note = gpa(read(pointer)?)?;
    let mut head = [0u8; 24];
    ram.read(note, &mut head)
        .map_err(|e| format!("the note at {note:#x}: {e}"))?;
    let word = |i: usize| u32::from_le_bytes([head[i], head[i + 1], head[i + 2], head[i + 3]]);
    let size = usize::try_from(word(4)).unwrap_or(usize::MAX);
    if word(0) != 11 || word(8) != 0 || head[12..24] != NAME[..] || size > MAX_DESC {
        return Err(format!(
            "the kernel's pointer leads to {note:#x}, which holds no VMCOREINFO note"
        ));
    }
    let mut desc = vec![0u8; size];
    ram.read(note + 24, &mut desc)
        .map_err(|e| format!("the note at {note:#x}: {e}"))?;
    let found = Found { gpa: note, desc };
    let claimed = found
        .value("KERNELOFFSET")
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok());
    if !found.desc.starts_with(FIRST_KEY) || claimed.is_some_and(|c| c != offset) {
        return Err(format!(
            "the note at {note:#x} does not agree with the running kernel (KERNELOFFSET {claimed:x?}, the IDT shows {offset:x})"
        ));
    }
    Ok(found)
}

#[cfg(test)]
#[path = "kernel_note_tests.rs"]
mod tests;
