//! An empty, valid namespace label index for a new DIMM's label area — what
//! `ndctl init-labels` writes, and what Linux writes itself before its first
//! label (drivers/nvdimm/label.c, `init_labels`).
//!
//! Why: Linux treats a DIMM whose label area holds no valid index as
//! label-less. Its region then gets one raw namespace over all of its
//! capacity, so `ndctl create-namespace` finds no free space and fails; only
//! `create-namespace -f -e namespace0.0` (which makes ndctl initialise the
//! labels) works. A new pmemvm DIMM with a label area therefore starts like a
//! new NVDIMM of a real platform: labels initialised, no namespace, the whole
//! region free for `ndctl create-namespace`. `label-size=0` keeps the
//! label-less behaviour (an immediate raw `/dev/pmem0`).
//!
//! Layout (UEFI 2.7 "Label Storage Area", labels v1.2 of 256 bytes): two
//! index blocks, then `nslot` label slots. Each index block is the 72-byte
//! header followed by a free-slot bitmap, padded to 256 bytes; its checksum
//! is Fletcher-64 over 32-bit little-endian words with the checksum field
//! zero. Index 0 has sequence number 3 and index 1 sequence number 2, so
//! index 0 is current (the sequence numbers cycle 1, 2, 3).

/// Label size of version 1.2 labels.
pub const LABEL_SIZE: u64 = 256;
/// Index blocks are multiples of this.
const INDEX_ALIGN: u64 = 256;
/// Size of the fixed part of an index block.
const INDEX_HEADER: u64 = 72;
const SIGNATURE: &[u8; 16] = b"NAMESPACE_INDEX\0";

fn align(v: u64, a: u64) -> u64 {
    v.div_ceil(a) * a
}

/// Size of one index block for `nslot` label slots.
fn index_size_for(nslot: u64) -> u64 {
    align(INDEX_HEADER + nslot.div_ceil(8), INDEX_ALIGN)
}

/// The label slots and the index block size Linux computes for a label area
/// of `config_size` bytes, or `None` when it is too small for two index
/// blocks and two labels.
pub fn geometry(config_size: u64) -> Option<(u64, u64)> {
    let tmp_nslot = config_size / LABEL_SIZE;
    let first = index_size_for(tmp_nslot);
    let nslot = config_size.checked_sub(2 * first)? / LABEL_SIZE;
    let space = config_size - nslot * LABEL_SIZE;
    let size = index_size_for(nslot) * 2;
    (size <= space && nslot >= 2).then_some((nslot, size / 2))
}

/// Fletcher-64 over little-endian 32-bit words, as the kernel's `nd_fletcher64`.
pub fn fletcher64(data: &[u8]) -> u64 {
    let (mut lo, mut hi) = (0u32, 0u64);
    for w in data.chunks_exact(4) {
        lo = lo.wrapping_add(u32::from_le_bytes([w[0], w[1], w[2], w[3]]));
        hi = hi.wrapping_add(u64::from(lo));
    }
    (hi << 32) | u64::from(lo)
}

/// The two index blocks of an empty label area of `config_size` bytes
/// (`2 × index size` bytes, to be written at the start of the area), or
/// `None` when the area cannot hold labels.
pub fn empty_index(config_size: u64) -> Option<Vec<u8>> {
    let (nslot, isize) = geometry(config_size)?;
    let isize_usize = usize::try_from(isize).ok()?;
    let mut out = vec![0u8; 2 * isize_usize];
    for (i, block) in out.chunks_exact_mut(isize_usize).enumerate() {
        let i = i as u64;
        block[0..16].copy_from_slice(SIGNATURE);
        // flags[3] = 0; labelsize: 256 << 0 ... stored as log2(size) - 7.
        block[19] = 1;
        let seq: u32 = if i == 0 { 3 } else { 2 };
        block[20..24].copy_from_slice(&seq.to_le_bytes());
        block[24..32].copy_from_slice(&(i * isize).to_le_bytes()); // myoff
        block[32..40].copy_from_slice(&isize.to_le_bytes()); // mysize
        block[40..48].copy_from_slice(&((1 - i) * isize).to_le_bytes()); // otheroff
        block[48..56].copy_from_slice(&(2 * isize).to_le_bytes()); // labeloff
        block[56..60].copy_from_slice(&u32::try_from(nslot).ok()?.to_le_bytes());
        block[60..62].copy_from_slice(&1u16.to_le_bytes()); // major
        block[62..64].copy_from_slice(&2u16.to_le_bytes()); // minor
                                                            // Free bitmap: one bit per slot, all free; the rest of the last word clear.
        let full_bytes = usize::try_from(nslot / 8).ok()?;
        let free = &mut block[72..];
        free[..full_bytes].fill(0xff);
        let rest = nslot % 8;
        if rest != 0 {
            free[full_bytes] = (1u8 << rest) - 1;
        }
        let sum = fletcher64(block);
        block[64..72].copy_from_slice(&sum.to_le_bytes());
    }
    Some(out)
}

#[cfg(test)]
#[allow(clippy::cast_possible_truncation)] // test offsets are small
mod tests {
    use super::*;

    fn u64_at(b: &[u8], o: usize) -> u64 {
        u64::from_le_bytes(b[o..o + 8].try_into().unwrap())
    }

    /// The checks of the kernel's `__nd_label_validate`, written from its rules.
    fn kernel_accepts(area: &[u8], config_size: u64, i: usize) -> bool {
        let (_, isize) = geometry(config_size).unwrap();
        let b = &area[i * isize as usize..(i + 1) * isize as usize];
        let mut zeroed = b.to_vec();
        zeroed[64..72].fill(0);
        b[0..16] == SIGNATURE[..]
            && u16::from_le_bytes([b[60], b[61]]) * 100 + u16::from_le_bytes([b[62], b[63]]) >= 102
            && (1u64 << (7 + u64::from(b[19]))) == LABEL_SIZE
            && fletcher64(&zeroed) == u64_at(b, 64)
            && u32::from_le_bytes(b[20..24].try_into().unwrap()) & 3 != 0
            && u64_at(b, 24) == i as u64 * isize
            && u64_at(b, 40) == (1 - i as u64) * isize
            && u64_at(b, 48) == 2 * isize
            && u64_at(b, 32) <= isize
            && u64_at(b, 32) >= INDEX_HEADER
            && u64::from(u32::from_le_bytes(b[56..60].try_into().unwrap())) * LABEL_SIZE + 2 * isize
                <= config_size
    }

    #[test]
    fn default_area_has_510_slots_in_256_byte_indexes() {
        assert_eq!(geometry(128 << 10), Some((510, 256)));
        let area = empty_index(128 << 10).unwrap();
        assert_eq!(area.len(), 512);
        assert!(kernel_accepts(&area, 128 << 10, 0));
        assert!(kernel_accepts(&area, 128 << 10, 1));
        // 510 free slots: 63 bytes of ones, then 0b0011_1111.
        assert!(area[72..72 + 63].iter().all(|&b| b == 0xff));
        assert_eq!(area[72 + 63], 0x3f);
        assert_eq!(area[72 + 64], 0);
        // Index 0 is current: sequence 3 after 2 in the 1-2-3 cycle.
        assert_eq!(u32::from_le_bytes(area[20..24].try_into().unwrap()), 3);
        assert_eq!(
            u32::from_le_bytes(area[256 + 20..256 + 24].try_into().unwrap()),
            2
        );
    }

    #[test]
    fn larger_areas_grow_the_index_and_tiny_ones_are_refused() {
        for size in [256u64 << 10, 1 << 20, 4 << 20] {
            let (nslot, isize) = geometry(size).unwrap();
            assert!(nslot * LABEL_SIZE + 2 * isize <= size);
            assert_eq!(isize, index_size_for(nslot));
            let area = empty_index(size).unwrap();
            assert!(
                kernel_accepts(&area, size, 0) && kernel_accepts(&area, size, 1),
                "{size}"
            );
        }
        assert_eq!(
            geometry(1024),
            Some((2, 256)),
            "the UEFI minimum: two indexes, two labels"
        );
        assert!(geometry(768).is_none());
        assert!(empty_index(0).is_none());
    }

    #[test]
    fn a_damaged_byte_breaks_the_checksum() {
        let mut area = empty_index(128 << 10).unwrap();
        area[100] ^= 1;
        assert!(!kernel_accepts(&area, 128 << 10, 0));
        assert!(kernel_accepts(&area, 128 << 10, 1));
    }

    #[test]
    fn fletcher64_matches_a_hand_computed_value() {
        // words 1, 2: lo = 1 then 3; hi = 1 then 4.
        let data = [1u8, 0, 0, 0, 2, 0, 0, 0];
        assert_eq!(fletcher64(&data), (4u64 << 32) | 3);
    }
}
