//! Reading an ELF core the way crash does: its PT_LOAD segments by
//! guest-physical address (the dumps of `pmemvm ctl dump` and
//! `--dump-on-panic`).

/// The little-endian number of `n` bytes at `at`.
fn le(b: &[u8], at: usize, n: usize) -> u64 {
    b[at..at + n]
        .iter()
        .rev()
        .fold(0, |v, &x| (v << 8) | u64::from(x))
}

/// Each PT_LOAD of `core`: its guest-physical address and the bytes the file
/// holds for it.
pub fn loads(core: &[u8]) -> Vec<(u64, &[u8])> {
    assert_eq!(&core[..4], b"\x7fELF", "an ELF file");
    let at = |v: u64| usize::try_from(v).expect("an offset of this host");
    let (phoff, phnum) = (at(le(core, 32, 8)), at(le(core, 56, 2)));
    (0..phnum)
        .filter_map(|i| {
            let h = phoff + i * 56;
            let (kind, off, paddr, filesz) = (
                le(core, h, 4),
                le(core, h + 8, 8),
                le(core, h + 24, 8),
                le(core, h + 32, 8),
            );
            let bytes = core.get(at(off)..at(off + filesz))?;
            (kind == 1).then_some((paddr, bytes))
        })
        .collect()
}

/// The 8 bytes at guest-physical `gpa`, `None` where no PT_LOAD holds them.
pub fn read_u64(core: &[u8], gpa: u64) -> Option<u64> {
    loads(core).into_iter().find_map(|(paddr, bytes)| {
        let off = usize::try_from(gpa.checked_sub(paddr)?).ok()?;
        let b = bytes.get(off..off + 8)?;
        Some(le(b, 0, 8))
    })
}

/// The lowest guest-physical address where `needle` lies in a PT_LOAD.
pub fn lowest(core: &[u8], needle: &[u8]) -> Option<u64> {
    loads(core)
        .into_iter()
        .filter_map(|(paddr, bytes)| {
            bytes
                .windows(needle.len())
                .position(|w| w == needle)
                .map(|p| paddr + p as u64)
        })
        .min()
}
