//! What pmemvm reads from an ELF kernel itself, before linux-loader loads it:
//! the program headers (to check that every segment is in the file and fits
//! in RAM, so a failure names its real cause), the physical entry point of a
//! kernel without a PVH note, and Linux's ELF notes.
//!
//! linux-loader's `Elf::load` reports a segment that does not fit and a file
//! that ends early with one error (`ReadKernelImage`) and returns the entry
//! as the ELF's virtual `e_entry`; both need the program headers, which it
//! does not expose, so the few fields needed are read here.

use std::fs::File;
use std::io::{Seek, SeekFrom};

const PT_LOAD: u32 = 1;
const PT_NOTE: u32 = 4;
/// Size of an ELF64 header.
const EHDR_SIZE: usize = 64;
/// Size of an ELF64 program header.
const PHDR_SIZE: u64 = 56;
/// More program headers than any kernel has; bounds the reads.
const MAX_PHDRS: u16 = 256;

/// One program header (the fields pmemvm uses).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    /// `p_type`.
    pub kind: u32,
    /// `p_offset`.
    pub offset: u64,
    /// `p_vaddr`.
    pub vaddr: u64,
    /// `p_paddr`.
    pub paddr: u64,
    /// `p_filesz`.
    pub filesz: u64,
    /// `p_memsz`.
    pub memsz: u64,
}

/// The ELF header fields and program headers of a kernel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ElfInfo {
    /// `e_entry` (virtual for a Linux vmlinux).
    pub entry: u64,
    /// Program headers.
    pub segments: Vec<Segment>,
}

/// Why the ELF headers cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ElfHeaderError {
    /// The file ends inside the ELF header or the program headers.
    #[error("its {0} extends past the end of the file")]
    Truncated(&'static str),
    /// The program header entry size is not ELF64's.
    #[error("its program headers are not ELF64 program headers (entry size {0})")]
    BadPhentsize(u16),
}

fn u16_at(b: &[u8], o: usize) -> u16 {
    u16::from_le_bytes([b[o], b[o + 1]])
}

fn u32_at(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]])
}

fn u64_at(b: &[u8], o: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[o..o + 8]);
    u64::from_le_bytes(a)
}

/// Reads the ELF header and program headers of `f`.
pub fn read_info(f: &mut File) -> std::io::Result<Result<ElfInfo, ElfHeaderError>> {
    let mut ehdr = [0u8; EHDR_SIZE];
    f.seek(SeekFrom::Start(0))?;
    if super::read_up_to(f, &mut ehdr)? < EHDR_SIZE {
        return Ok(Err(ElfHeaderError::Truncated("ELF header")));
    }
    let phoff = u64_at(&ehdr, 0x20);
    let phentsize = u16_at(&ehdr, 0x36);
    let phnum = u16_at(&ehdr, 0x38).min(MAX_PHDRS);
    if phnum > 0 && u64::from(phentsize) != PHDR_SIZE {
        return Ok(Err(ElfHeaderError::BadPhentsize(phentsize)));
    }
    let mut segments = Vec::with_capacity(phnum.into());
    for i in 0..u64::from(phnum) {
        let mut ph = [0u8; 56];
        f.seek(SeekFrom::Start(phoff.saturating_add(i * PHDR_SIZE)))?;
        if super::read_up_to(f, &mut ph)? < ph.len() {
            return Ok(Err(ElfHeaderError::Truncated("program header table")));
        }
        segments.push(Segment {
            kind: u32_at(&ph, 0),
            offset: u64_at(&ph, 0x08),
            vaddr: u64_at(&ph, 0x10),
            paddr: u64_at(&ph, 0x18),
            filesz: u64_at(&ph, 0x20),
            memsz: u64_at(&ph, 0x28),
        });
    }
    Ok(Ok(ElfInfo {
        entry: u64_at(&ehdr, 0x18),
        segments,
    }))
}

impl ElfInfo {
    /// Loadable segments with bytes in the file, as linux-loader loads them.
    fn loads(&self) -> impl Iterator<Item = &Segment> {
        self.segments
            .iter()
            .filter(|s| s.kind == PT_LOAD && s.filesz > 0)
    }

    /// The first loadable segment whose file bytes end beyond `file_len`.
    pub fn truncated_segment(&self, file_len: u64) -> Option<usize> {
        self.loads().position(|s| {
            s.offset
                .checked_add(s.filesz)
                .is_none_or(|end| end > file_len)
        })
    }

    /// The highest guest physical address the loaded segments occupy
    /// (exclusive), saturating.
    pub fn load_end(&self) -> u64 {
        self.loads()
            .map(|s| s.paddr.saturating_add(s.memsz.max(s.filesz)))
            .max()
            .unwrap_or(0)
    }

    /// The physical address of the entry point: a Linux vmlinux's `e_entry`
    /// is virtual (0xffffffff81000000), so it is translated through the
    /// loadable segment that contains it; an entry outside every segment's
    /// virtual range is taken as physical.
    pub fn physical_entry(&self) -> u64 {
        self.loads()
            .find(|s| self.entry >= s.vaddr && self.entry - s.vaddr < s.memsz.max(s.filesz))
            .map_or(self.entry, |s| s.paddr.wrapping_add(self.entry - s.vaddr))
    }

    /// True when a PT_NOTE segment holds a note named "Linux".
    pub fn has_linux_note(&self, f: &mut File) -> std::io::Result<bool> {
        for s in self.segments.iter().filter(|s| s.kind == PT_NOTE) {
            let mut notes = vec![0u8; usize::try_from(s.filesz.min(1 << 16)).unwrap_or(0)];
            f.seek(SeekFrom::Start(s.offset))?;
            let n = super::read_up_to(f, &mut notes)?;
            if notes[..n].windows(6).any(|w| w == b"Linux\0") {
                return Ok(true);
            }
        }
        Ok(false)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A minimal x86-64 ELF executable: entry `entry`, one PT_LOAD of
    /// `filesz` file bytes at file offset 0x1000, loaded at `paddr` with
    /// virtual address `vaddr`. The file is cut to `file_len` bytes.
    pub(crate) fn elf(entry: u64, vaddr: u64, paddr: u64, filesz: u64, file_len: usize) -> Vec<u8> {
        let mut v = Vec::new();
        v.extend_from_slice(b"\x7fELF\x02\x01\x01\x00");
        v.extend_from_slice(&[0; 8]);
        v.extend_from_slice(&2u16.to_le_bytes()); // ET_EXEC
        v.extend_from_slice(&0x3eu16.to_le_bytes()); // x86-64
        v.extend_from_slice(&1u32.to_le_bytes());
        v.extend_from_slice(&entry.to_le_bytes());
        v.extend_from_slice(&64u64.to_le_bytes()); // phoff
        v.extend_from_slice(&0u64.to_le_bytes()); // shoff
        v.extend_from_slice(&0u32.to_le_bytes());
        for h in [64u16, 56, 1, 0, 0, 0] {
            v.extend_from_slice(&h.to_le_bytes());
        }
        v.extend_from_slice(&PT_LOAD.to_le_bytes());
        v.extend_from_slice(&5u32.to_le_bytes()); // R+X
        for q in [0x1000u64, vaddr, paddr, filesz, filesz, 0x1000] {
            v.extend_from_slice(&q.to_le_bytes());
        }
        v.resize(0x1000, 0);
        v.resize(0x1000 + usize::try_from(filesz).unwrap(), 0xf4); // hlt
        v.resize(file_len, 0);
        v
    }

    fn info_of(bytes: &[u8]) -> Result<ElfInfo, ElfHeaderError> {
        let p = std::env::temp_dir().join(format!(
            "pmemvm-elf-{}-{:x}",
            std::process::id(),
            bytes.len() ^ (bytes.as_ptr() as usize)
        ));
        std::fs::write(&p, bytes).unwrap();
        let r = read_info(&mut File::open(&p).unwrap()).unwrap();
        std::fs::remove_file(&p).unwrap();
        r
    }

    #[test]
    fn entry_above_2_gib_is_kept() {
        // vaddr == paddr at 2 GiB + 1 MiB: masking with 0x7fff_ffff gave 1 MiB.
        let i = info_of(&elf(0x8010_0000, 0x8010_0000, 0x8010_0000, 16, 0x1010)).unwrap();
        assert_eq!(i.physical_entry(), 0x8010_0000);
        assert_eq!(i.load_end(), 0x8010_0010);
    }

    #[test]
    fn virtual_entry_is_translated_through_its_segment() {
        let i = info_of(&elf(
            0xffff_ffff_8100_0040,
            0xffff_ffff_8100_0000,
            0x100_0000,
            0x100,
            0x1100,
        ))
        .unwrap();
        assert_eq!(i.physical_entry(), 0x100_0040);
    }

    #[test]
    fn truncated_segments_and_headers_are_found() {
        let i = info_of(&elf(0x10_0000, 0x10_0000, 0x10_0000, 0x100, 0x1080)).unwrap();
        assert_eq!(i.truncated_segment(0x1080), Some(0));
        assert_eq!(i.truncated_segment(0x1100), None);
        assert_eq!(
            info_of(&elf(0x10_0000, 0x10_0000, 0x10_0000, 0x100, 100)),
            Err(ElfHeaderError::Truncated("program header table"))
        );
        assert_eq!(
            info_of(b"\x7fELF\x02\x01"),
            Err(ElfHeaderError::Truncated("ELF header"))
        );
    }
}
