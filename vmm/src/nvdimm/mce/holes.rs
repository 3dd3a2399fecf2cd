//! Where a DIMM's memory slots leave holes: every 4 KiB page a bad range
//! touches is outside KVM's slots, so a guest access to it exits to pmemvm.
//! At most [`HOLES_MAX`] holes per DIMM: beyond that the holes closest to
//! each other are merged (the good pages between them are then reached
//! through pmemvm, slower but the same bytes), so a DIMM never needs more
//! than `HOLES_MAX + 1` slots.

/// Page size of the holes.
pub const PAGE: u64 = 4096;

/// Holes per DIMM at most.
pub const HOLES_MAX: usize = 32;

/// Memory slots one DIMM may use: the pieces between its holes.
pub const SLOTS_PER_DIMM: usize = HOLES_MAX + 1;

/// The holes (offset, length; page-aligned, sorted, apart) for `bad`
/// ranges (offset, length from the region start) in a region of `size`
/// bytes. Ranges reaching past `size` are cut at it; empty ones ignored.
pub fn holes(bad: &[(u64, u64)], size: u64) -> Vec<(u64, u64)> {
    let mut pages: Vec<(u64, u64)> = bad
        .iter()
        .filter(|(off, len)| *len > 0 && *off < size)
        .map(|&(off, len)| {
            let start = off - off % PAGE;
            let end = off.saturating_add(len).min(size);
            let end = end.div_ceil(PAGE).saturating_mul(PAGE).min(size);
            (start, end)
        })
        .collect();
    pages.sort_unstable();
    let mut merged: Vec<(u64, u64)> = Vec::with_capacity(pages.len());
    for (s, e) in pages {
        match merged.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => merged.push((s, e)),
        }
    }
    while merged.len() > HOLES_MAX {
        // Merge the two neighbours with the smallest gap between them.
        let i = (0..merged.len() - 1)
            .min_by_key(|&i| merged[i + 1].0 - merged[i].1)
            .unwrap_or(0);
        merged[i].1 = merged[i + 1].1;
        merged.remove(i + 1);
    }
    merged.into_iter().map(|(s, e)| (s, e - s)).collect()
}

/// The pieces of `0..size` between `holes` (as [`holes`] gives them).
pub fn pieces(holes: &[(u64, u64)], size: u64) -> Vec<(u64, u64)> {
    let mut out = Vec::with_capacity(holes.len() + 1);
    let mut at = 0;
    for &(off, len) in holes {
        if off > at {
            out.push((at, off - at));
        }
        at = off + len;
    }
    if at < size {
        out.push((at, size - at));
    }
    out
}

/// Whether `off..off+len` overlaps one of `bad` (offset, length).
pub fn overlaps(bad: &[(u64, u64)], off: u64, len: u64) -> bool {
    let end = off.saturating_add(len.max(1));
    bad.iter()
        .any(|&(b, l)| b < end && off < b.saturating_add(l))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn a_bad_block_makes_its_page_a_hole() {
        assert_eq!(holes(&[(MIB + 512, 512)], 16 * MIB), [(MIB, PAGE)]);
        // Across a page boundary: both pages.
        assert_eq!(
            holes(&[(MIB - 512, 1024)], 16 * MIB),
            [(MIB - PAGE, 2 * PAGE)]
        );
        // Neighbours and overlaps merge; order does not matter.
        assert_eq!(
            holes(&[(3 * PAGE, 512), (0, PAGE), (PAGE, 1)], 16 * MIB),
            [(0, 2 * PAGE), (3 * PAGE, PAGE)]
        );
        // The last page, a range past the end cut, empty ones ignored.
        assert_eq!(
            holes(&[(16 * MIB - 1, 100), (16 * MIB, 512), (0, 0)], 16 * MIB),
            [(16 * MIB - PAGE, PAGE)]
        );
        assert!(holes(&[], 16 * MIB).is_empty());
    }

    #[test]
    fn too_many_holes_merge_where_they_are_closest() {
        let size = 1 << 30;
        // 40 bad pages, 1 MiB apart, but pages 10 and 11 only 2 pages apart.
        let mut bad: Vec<(u64, u64)> = (0..40u64).map(|i| (i * MIB, 512)).collect();
        bad.push((10 * MIB + 2 * PAGE, 512));
        let h = holes(&bad, size);
        assert_eq!(h.len(), HOLES_MAX);
        // Every bad block is inside a hole.
        for &(off, len) in &bad {
            assert!(
                h.iter().any(|&(s, l)| s <= off && off + len <= s + l),
                "{off}"
            );
        }
        // The close pair was merged (its gap of 1 page), then 8 gaps of
        // about 1 MiB: not 9 of them.
        let in_holes: u64 = h.iter().map(|(_, l)| l).sum();
        assert!(in_holes < 8 * MIB + MIB / 2, "{in_holes} {h:?}");
        assert!(in_holes > 8 * MIB - MIB / 2, "{in_holes} {h:?}");
        let p = pieces(&h, size);
        assert_eq!(
            p.len(),
            HOLES_MAX,
            "the first hole is at 0: no piece before it"
        );
        let covered: u64 = p.iter().chain(h.iter()).map(|(_, l)| l).sum();
        assert_eq!(covered, size);
    }

    #[test]
    fn pieces_fill_the_rest() {
        let size = 16 * MIB;
        assert_eq!(pieces(&[], size), [(0, size)]);
        assert_eq!(pieces(&[(0, PAGE)], size), [(PAGE, size - PAGE)]);
        assert_eq!(
            pieces(&[(MIB, PAGE), (size - PAGE, PAGE)], size),
            [(0, MIB), (MIB + PAGE, size - PAGE - MIB - PAGE)]
        );
    }

    #[test]
    fn overlap_is_by_byte() {
        let bad = [(MIB, 512)];
        assert!(overlaps(&bad, MIB, 8));
        assert!(overlaps(&bad, MIB + 511, 1));
        assert!(overlaps(&bad, MIB - 4, 8));
        assert!(!overlaps(&bad, MIB + 512, 8));
        assert!(!overlaps(&bad, MIB - 8, 8));
        assert!(!overlaps(&bad, u64::MAX - 2, 8));
    }
}
