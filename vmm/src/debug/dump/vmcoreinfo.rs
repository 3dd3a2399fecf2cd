//! Finding the guest kernel's `VMCOREINFO` note in its RAM. A Linux kernel
//! built with `CONFIG_CRASH_CORE` (every distribution kernel: kexec and
//! kdump select it) keeps, from early boot on, an ELF note named
//! "VMCOREINFO" whose text (`OSRELEASE=...`, `PAGESIZE=...`,
//! `SYMBOL(swapper_pg_dir)=...`, `NUMBER(phys_base)=...`,
//! `KERNELOFFSET=...`) is what `crash` and `drgn` need to read a core of
//! it: the release, the page tables and the KASLR offset. QEMU learns the
//! note's address from a guest driver (its vmcoreinfo device); pmemvm finds
//! it by its shape — note header, name, and a text that starts with
//! `OSRELEASE=` — which needs nothing in the guest.
//!
//! The guest is not trusted: the size is bounded by a page (the kernel's
//! own `VMCOREINFO_BYTES`), and what is found is only copied into the
//! dump.

use std::io;

use super::elf::Ram;

/// The note's name as it lies in memory: "VMCOREINFO", NUL, padding to 12.
pub(super) const NAME: &[u8; 12] = b"VMCOREINFO\0\0";
/// How the description starts.
pub(super) const FIRST_KEY: &[u8] = b"OSRELEASE=";
/// The kernel's bound on the description (`VMCOREINFO_BYTES`, a page).
pub(super) const MAX_DESC: usize = 4096;
/// Bytes read at a time.
const CHUNK: usize = 4 << 20;

/// A `VMCOREINFO` description found in guest RAM, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    /// The note's guest-physical address.
    pub gpa: u64,
    /// The description (the `KEY=value` lines).
    pub desc: Vec<u8>,
}

impl Found {
    /// The value of `key` in the description (`OSRELEASE` → "6.1.0").
    pub fn value(&self, key: &str) -> Option<String> {
        String::from_utf8_lossy(&self.desc)
            .lines()
            .find_map(|l| l.strip_prefix(key)?.strip_prefix('=').map(str::to_string))
    }
}

/// The note whose name starts at `name_at` in `buf`, if the bytes there are
/// one: the header before it (name size 11, type 0, a bounded size), the
/// description after it starting with `OSRELEASE=` and fitting in `buf`.
fn note_at(buf: &[u8], name_at: usize) -> Option<&[u8]> {
    let header = buf.get(name_at.checked_sub(12)?..name_at)?;
    let word =
        |i: usize| u32::from_le_bytes([header[i], header[i + 1], header[i + 2], header[i + 3]]);
    let (namesz, descsz, kind) = (word(0), usize::try_from(word(4)).ok()?, word(8));
    if namesz != 11 || kind != 0 || descsz < FIRST_KEY.len() || descsz > MAX_DESC {
        return None;
    }
    let desc = buf.get(name_at + NAME.len()..name_at + NAME.len() + descsz)?;
    desc.starts_with(FIRST_KEY).then_some(desc)
}

/// Searches guest RAM for the note; the first one found wins.
pub fn find(ram: &dyn Ram) -> io::Result<Option<Found>> {
    // Chunks overlap by a note's whole length, so none is cut in two.
    let overlap = 12 + NAME.len() + MAX_DESC;
    let mut buf = vec![0u8; CHUNK + overlap];
    let finder = memchr::memmem::Finder::new(NAME);
    for (start, len) in ram.ranges() {
        let mut at = 0u64;
        while at < len {
            let n = usize::try_from((len - at).min(buf.len() as u64)).unwrap_or(buf.len());
            ram.read(start + at, &mut buf[..n])?;
            for name_at in finder.find_iter(&buf[..n]) {
                if let Some(desc) = note_at(&buf[..n], name_at) {
                    return Ok(Some(Found {
                        gpa: start + at + name_at as u64 - 12,
                        desc: desc.to_vec(),
                    }));
                }
            }
            if n < buf.len() {
                break;
            }
            at += CHUNK as u64;
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Flat(Vec<u8>);
    impl Ram for Flat {
        fn ranges(&self) -> Vec<(u64, u64)> {
            vec![(0x10_0000, self.0.len() as u64)]
        }
        fn read(&self, gpa: u64, buf: &mut [u8]) -> io::Result<()> {
            let s = usize::try_from(gpa - 0x10_0000).unwrap();
            buf.copy_from_slice(&self.0[s..s + buf.len()]);
            Ok(())
        }
    }

    fn planted(at: usize, desc: &[u8], total: usize) -> Flat {
        let mut m = vec![0u8; total];
        let n = super::super::elf::note("VMCOREINFO", 0, desc);
        m[at..at + n.len()].copy_from_slice(&n);
        Flat(m)
    }

    #[test]
    fn the_note_is_found_by_its_shape_also_across_a_chunk_boundary() {
        let desc = b"OSRELEASE=6.1.0-pmemvm\nPAGESIZE=4096\nKERNELOFFSET=0\n";
        for at in [0x2000, CHUNK - 10, CHUNK + 4096] {
            let ram = planted(at, desc, 2 * CHUNK);
            let f = find(&ram).unwrap().expect("found");
            assert_eq!(f.gpa, 0x10_0000 + at as u64);
            assert_eq!(f.desc, desc);
            assert_eq!(f.value("OSRELEASE").as_deref(), Some("6.1.0-pmemvm"));
            assert_eq!(f.value("PAGESIZE").as_deref(), Some("4096"));
            assert_eq!(f.value("PAGE"), None);
        }
    }

    #[test]
    fn lookalikes_are_not_the_note() {
        let mut m = vec![0u8; 64 << 10];
        // The name alone (as in the kernel's .rodata), a raw description
        // without its header, and a header claiming more than a page.
        m[100..112].copy_from_slice(NAME);
        m[1000..1010].copy_from_slice(FIRST_KEY);
        let mut big = super::super::elf::note("VMCOREINFO", 0, b"OSRELEASE=1\n");
        big[4..8].copy_from_slice(&(u32::try_from(MAX_DESC).unwrap() + 1).to_le_bytes());
        m[5000..5000 + big.len()].copy_from_slice(&big);
        assert_eq!(find(&Flat(m.clone())).unwrap(), None);
        // A note at the very end whose description runs past RAM.
        let mut short = super::super::elf::note("VMCOREINFO", 0, b"OSRELEASE=1\n");
        short[4..8].copy_from_slice(&100u32.to_le_bytes());
        let end = m.len() - short.len();
        m[end..].copy_from_slice(&short);
        assert_eq!(find(&Flat(m)).unwrap(), None);
    }

    #[test]
    fn random_memory_never_panics_the_scan() {
        // Hostile guest bytes: headers with every size around the bounds.
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..200 {
            let mut m = vec![0u8; 8192];
            for b in m.iter_mut() {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                *b = seed.to_le_bytes()[0];
            }
            let at = usize::try_from(seed % (8192 - 24)).unwrap();
            m[at..at + 4].copy_from_slice(&11u32.to_le_bytes());
            m[at + 4..at + 8]
                .copy_from_slice(&(u32::try_from((seed >> 20) % 10_000).unwrap()).to_le_bytes());
            m[at + 8..at + 12].copy_from_slice(&0u32.to_le_bytes());
            m[at + 12..at + 24].copy_from_slice(NAME);
            let _ = find(&Flat(m)).unwrap();
        }
    }
}
