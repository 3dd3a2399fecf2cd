//! The ELF core file of a guest's memory, in the layout `crash` and `drgn`
//! read from Linux's `/proc/vmcore` and QEMU's `dump-guest-memory`: an
//! `ET_CORE` file for `EM_X86_64`, one `PT_NOTE` segment (an `NT_PRSTATUS`
//! note per vCPU, then the guest kernel's `VMCOREINFO` note when it has
//! one) and one `PT_LOAD` segment per guest RAM range, by physical address
//! (`p_paddr`; `p_vaddr` is 0, as QEMU writes it without paging — the
//! tools translate through the kernel's page tables).
//!
//! Pages that are all zero are left as holes in the file, so a dump of a
//! lightly used guest takes the disk space of what the guest wrote.

use std::io::{self, Seek, SeekFrom, Write};

use kvm_bindings::{kvm_regs, kvm_sregs};

/// The ELF header's size.
const EHDR_SIZE: usize = 64;
/// One program header's size.
const PHDR_SIZE: usize = 56;
/// The same sizes as the header fields hold them.
const EHDR_SIZE_U16: u16 = 64;
const PHDR_SIZE_U16: u16 = 56;
/// `ET_CORE`.
const ET_CORE: u16 = 4;
/// `EM_X86_64`.
const EM_X86_64: u16 = 62;
/// `PT_LOAD`.
const PT_LOAD: u32 = 1;
/// `PT_NOTE`.
const PT_NOTE: u32 = 4;
/// `PF_X | PF_W | PF_R`.
const PF_RWX: u32 = 7;
/// `NT_PRSTATUS`.
pub const NT_PRSTATUS: u32 = 1;
/// `sizeof(struct elf_prstatus)` on x86_64.
pub const PRSTATUS_SIZE: usize = 336;
/// Where `pr_reg` (a `struct user_regs_struct`) starts in it.
const PR_REG_OFFSET: usize = 112;
/// Memory is written in pages of this size; a zero page is a hole.
pub const PAGE: usize = 4096;

/// A vCPU's registers for its `NT_PRSTATUS` note.
#[derive(Debug, Clone, Copy, Default)]
pub struct VcpuState {
    /// General registers.
    pub regs: kvm_regs,
    /// Segment registers (selectors, FS and GS bases).
    pub sregs: kvm_sregs,
}

/// One guest RAM range and where its bytes come from.
pub trait Ram {
    /// The guest-physical ranges, (start, length), in address order.
    fn ranges(&self) -> Vec<(u64, u64)>;
    /// Fills `buf` from guest-physical address `gpa`.
    fn read(&self, gpa: u64, buf: &mut [u8]) -> io::Result<()>;
}

/// What a dump contains, for the user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CoreSummary {
    /// Bytes of guest RAM described.
    pub ram_bytes: u64,
    /// Bytes of it written (the rest were zero pages, holes in the file).
    pub data_bytes: u64,
    /// vCPUs with a register note.
    pub vcpus: usize,
    /// The file's length.
    pub file_bytes: u64,
}

/// The `struct elf_prstatus` of vCPU `index` (x86_64 layout): `pr_pid` is
/// the vCPU's number plus one (as QEMU writes it), `pr_reg` its registers
/// in `struct user_regs_struct` order.
pub fn prstatus(index: usize, s: &VcpuState) -> [u8; PRSTATUS_SIZE] {
    let mut p = [0u8; PRSTATUS_SIZE];
    let pid = u32::try_from(index + 1).unwrap_or(u32::MAX);
    // pr_pid follows pr_info (12), pr_cursig (2 + 2 padding), pr_sigpend
    // and pr_sighold (8 each).
    p[32..36].copy_from_slice(&pid.to_le_bytes());
    let (r, sr) = (&s.regs, &s.sregs);
    let user_regs: [u64; 27] = [
        r.r15,
        r.r14,
        r.r13,
        r.r12,
        r.rbp,
        r.rbx,
        r.r11,
        r.r10,
        r.r9,
        r.r8,
        r.rax,
        r.rcx,
        r.rdx,
        r.rsi,
        r.rdi,
        // orig_rax: no system call in progress.
        u64::MAX,
        r.rip,
        sr.cs.selector.into(),
        r.rflags,
        r.rsp,
        sr.ss.selector.into(),
        sr.fs.base,
        sr.gs.base,
        sr.ds.selector.into(),
        sr.es.selector.into(),
        sr.fs.selector.into(),
        sr.gs.selector.into(),
    ];
    for (i, v) in user_regs.iter().enumerate() {
        let at = PR_REG_OFFSET + 8 * i;
        p[at..at + 8].copy_from_slice(&v.to_le_bytes());
    }
    p
}

/// An ELF note: name (NUL-terminated, padded to 4), type, description
/// (padded to 4).
pub fn note(name: &str, kind: u32, desc: &[u8]) -> Vec<u8> {
    let pad4 = |n: usize| n.div_ceil(4) * 4;
    let namesz = name.len() + 1;
    let mut v = Vec::with_capacity(12 + pad4(namesz) + pad4(desc.len()));
    v.extend_from_slice(&u32::try_from(namesz).unwrap_or(0).to_le_bytes());
    v.extend_from_slice(&u32::try_from(desc.len()).unwrap_or(0).to_le_bytes());
    v.extend_from_slice(&kind.to_le_bytes());
    v.extend_from_slice(name.as_bytes());
    v.resize(12 + pad4(namesz), 0);
    v.extend_from_slice(desc);
    v.resize(12 + pad4(namesz) + pad4(desc.len()), 0);
    v
}

fn phdr(kind: u32, flags: u32, offset: u64, paddr: u64, size: u64, align: u64) -> [u8; PHDR_SIZE] {
    let mut h = [0u8; PHDR_SIZE];
    h[0..4].copy_from_slice(&kind.to_le_bytes());
    h[4..8].copy_from_slice(&flags.to_le_bytes());
    h[8..16].copy_from_slice(&offset.to_le_bytes());
    // p_vaddr stays 0.
    h[24..32].copy_from_slice(&paddr.to_le_bytes());
    h[32..40].copy_from_slice(&size.to_le_bytes());
    h[40..48].copy_from_slice(&size.to_le_bytes());
    h[48..56].copy_from_slice(&align.to_le_bytes());
    h
}

fn ehdr(phnum: u16) -> [u8; EHDR_SIZE] {
    let mut e = [0u8; EHDR_SIZE];
    e[0..4].copy_from_slice(b"\x7fELF");
    e[4] = 2; // ELFCLASS64
    e[5] = 1; // ELFDATA2LSB
    e[6] = 1; // EV_CURRENT
    e[16..18].copy_from_slice(&ET_CORE.to_le_bytes());
    e[18..20].copy_from_slice(&EM_X86_64.to_le_bytes());
    e[20..24].copy_from_slice(&1u32.to_le_bytes());
    e[32..40].copy_from_slice(&(EHDR_SIZE as u64).to_le_bytes()); // e_phoff
    e[52..54].copy_from_slice(&EHDR_SIZE_U16.to_le_bytes());
    e[54..56].copy_from_slice(&PHDR_SIZE_U16.to_le_bytes());
    e[56..58].copy_from_slice(&phnum.to_le_bytes());
    e
}

/// Writes the core of `ram` with `vcpus`' registers and `vmcoreinfo` (the
/// guest kernel's note description, when found) to `out`, which must be
/// empty; zero pages become holes.
pub fn write_core<W: Write + Seek>(
    out: &mut W,
    ram: &dyn Ram,
    vcpus: &[VcpuState],
    vmcoreinfo: Option<&[u8]>,
) -> io::Result<CoreSummary> {
    let ranges = ram.ranges();
    let phnum = u16::try_from(ranges.len() + 1)
        .ok()
        .filter(|&n| n < u16::MAX)
        .ok_or_else(|| io::Error::other("too many guest RAM ranges for one ELF file"))?;
    let mut notes = Vec::new();
    for (i, s) in vcpus.iter().enumerate() {
        notes.extend(note("CORE", NT_PRSTATUS, &prstatus(i, s)));
    }
    if let Some(info) = vmcoreinfo {
        notes.extend(note("VMCOREINFO", 0, info));
    }
    let notes_at = (EHDR_SIZE + PHDR_SIZE * usize::from(phnum)) as u64;
    let data_at = (notes_at + notes.len() as u64).div_ceil(PAGE as u64) * PAGE as u64;
    let mut headers = Vec::with_capacity(usize::from(phnum) * PHDR_SIZE);
    headers.extend(phdr(PT_NOTE, 0, notes_at, 0, notes.len() as u64, 4));
    let mut at = data_at;
    for &(start, len) in &ranges {
        headers.extend(phdr(PT_LOAD, PF_RWX, at, start, len, PAGE as u64));
        at += len;
    }
    out.write_all(&ehdr(phnum))?;
    out.write_all(&headers)?;
    out.write_all(&notes)?;
    let mut summary = CoreSummary {
        ram_bytes: 0,
        data_bytes: 0,
        vcpus: vcpus.len(),
        file_bytes: at,
    };
    let mut buf = vec![0u8; 256 * PAGE];
    let mut offset = data_at;
    for &(start, len) in &ranges {
        let mut done = 0u64;
        while done < len {
            let n = usize::try_from((len - done).min(buf.len() as u64)).unwrap_or(buf.len());
            ram.read(start + done, &mut buf[..n])?;
            for (i, page) in buf[..n].chunks(PAGE).enumerate() {
                if page.iter().any(|&b| b != 0) {
                    out.seek(SeekFrom::Start(offset + done + (i * PAGE) as u64))?;
                    out.write_all(page)?;
                    summary.data_bytes += page.len() as u64;
                }
            }
            done += n as u64;
        }
        summary.ram_bytes += len;
        offset += len;
    }
    // The file ends where the last range ends, holes included.
    out.seek(SeekFrom::Start(at))?;
    out.flush()?;
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;

    struct Fake(Vec<(u64, Vec<u8>)>);
    impl Ram for Fake {
        fn ranges(&self) -> Vec<(u64, u64)> {
            self.0.iter().map(|(a, b)| (*a, b.len() as u64)).collect()
        }
        fn read(&self, gpa: u64, buf: &mut [u8]) -> io::Result<()> {
            for (a, b) in &self.0 {
                if gpa >= *a && gpa + buf.len() as u64 <= a + b.len() as u64 {
                    let s = usize::try_from(gpa - a).unwrap();
                    buf.copy_from_slice(&b[s..s + buf.len()]);
                    return Ok(());
                }
            }
            Err(io::Error::other("outside"))
        }
    }

    fn u16_at(b: &[u8], at: usize) -> u16 {
        u16::from_le_bytes(b[at..at + 2].try_into().unwrap())
    }
    fn u32_at(b: &[u8], at: usize) -> u32 {
        u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
    }
    fn u64_at(b: &[u8], at: usize) -> u64 {
        u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
    }

    #[test]
    fn notes_are_padded_as_elf_says() {
        let n = note("VMCOREINFO", 0, b"OSRELEASE=6.1\n");
        assert_eq!(u32_at(&n, 0), 11, "namesz counts the NUL");
        assert_eq!(u32_at(&n, 4), 14);
        assert_eq!(&n[12..23], b"VMCOREINFO\0");
        assert_eq!(&n[24..38], b"OSRELEASE=6.1\n", "the name is padded to 12");
        assert_eq!(n.len(), 24 + 16);
    }

    #[test]
    fn prstatus_puts_registers_where_user_regs_struct_has_them() {
        let mut s = VcpuState::default();
        s.regs.rip = 0xffff_ffff_8100_0000;
        s.regs.rsp = 0x1234;
        s.regs.r15 = 15;
        s.sregs.cs.selector = 0x10;
        s.sregs.gs.base = 0xffff_8880_0000_0000;
        let p = prstatus(1, &s);
        assert_eq!(u32_at(&p, 32), 2, "pr_pid is the vCPU number plus one");
        assert_eq!(u64_at(&p, PR_REG_OFFSET), 15, "r15 first");
        assert_eq!(u64_at(&p, PR_REG_OFFSET + 16 * 8), s.regs.rip);
        assert_eq!(u64_at(&p, PR_REG_OFFSET + 17 * 8), 0x10);
        assert_eq!(u64_at(&p, PR_REG_OFFSET + 19 * 8), 0x1234);
        assert_eq!(u64_at(&p, PR_REG_OFFSET + 22 * 8), s.sregs.gs.base);
        assert_eq!(
            PR_REG_OFFSET + 27 * 8 + 8,
            PRSTATUS_SIZE,
            "pr_fpvalid and padding end it"
        );
    }

    #[test]
    fn a_core_has_headers_notes_and_ram_by_physical_address_with_holes() {
        let mut low = vec![0u8; 4 * PAGE];
        low[PAGE + 5] = 0xaa;
        let mut high = vec![0u8; 2 * PAGE];
        high[2 * PAGE - 1] = 0x55;
        let ram = Fake(vec![(0, low), (0x1_0000_0000, high)]);
        let vcpus = [VcpuState::default(); 2];
        let mut out = Cursor::new(Vec::new());
        let s = write_core(&mut out, &ram, &vcpus, Some(b"OSRELEASE=x\n")).unwrap();
        let f = out.into_inner();
        assert_eq!(&f[0..4], b"\x7fELF");
        assert_eq!(u16_at(&f, 16), ET_CORE);
        assert_eq!(u16_at(&f, 18), EM_X86_64);
        assert_eq!(u16_at(&f, 56), 3, "a note segment and two RAM ranges");
        let ph = |i: usize| EHDR_SIZE + i * PHDR_SIZE;
        assert_eq!(u32_at(&f, ph(0)), PT_NOTE);
        let at = |o: usize| usize::try_from(u64_at(&f, o)).unwrap();
        let (noff, nsz) = (at(ph(0) + 8), at(ph(0) + 32));
        let notes = &f[noff..noff + nsz];
        assert_eq!(u32_at(notes, 8), NT_PRSTATUS);
        let second = 12 + 8 + PRSTATUS_SIZE;
        assert_eq!(u32_at(&notes[second..], 8), NT_PRSTATUS);
        let info = &notes[2 * second..];
        assert_eq!(&info[12..23], b"VMCOREINFO\0");
        for (i, gpa, len) in [(1, 0u64, 4 * PAGE), (2, 0x1_0000_0000, 2 * PAGE)] {
            assert_eq!(u32_at(&f, ph(i)), PT_LOAD);
            assert_eq!(u64_at(&f, ph(i) + 16), 0, "p_vaddr");
            assert_eq!(u64_at(&f, ph(i) + 24), gpa, "p_paddr");
            assert_eq!(u64_at(&f, ph(i) + 32), len as u64);
            assert_eq!(u64_at(&f, ph(i) + 8) % PAGE as u64, 0, "page-aligned data");
        }
        let low_at = at(ph(1) + 8);
        let high_at = at(ph(2) + 8);
        assert_eq!(f[low_at + PAGE + 5], 0xaa);
        assert_eq!(f[high_at + 2 * PAGE - 1], 0x55);
        assert_eq!(
            f.len(),
            high_at + 2 * PAGE,
            "the file ends with the last range"
        );
        assert_eq!(s.ram_bytes, 6 * PAGE as u64);
        assert_eq!(
            s.data_bytes,
            2 * PAGE as u64,
            "only the two non-zero pages are written"
        );
        assert_eq!(s.file_bytes, f.len() as u64);
        assert_eq!(s.vcpus, 2);
    }
}
