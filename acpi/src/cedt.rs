//! CEDT (CXL Early Discovery Table), CXL 2.0 §9.14.1: where the CXL host
//! bridges' component registers are and which host physical address windows
//! CXL memory may be decoded into. Linux's `cxl_acpi` reads it once it has
//! found the CXL root (`ACPI0017`) in the DSDT.
//!
//! Structures (little-endian), each opening with type (1 byte), a reserved
//! byte and its length (2 bytes):
//!
//! * CHBS, CXL Host Bridge Structure (type 0, 32 bytes): 4 the host bridge's
//!   `_UID`, 8 CXL version (1: CXL 2.0, whose base is the Component
//!   Registers' 64 KiB block, CHBCR), 12 reserved, 16 base, 24 length.
//! * CFMWS, CXL Fixed Memory Window Structure (type 1, 36 + 4 × ways
//!   bytes): 4 reserved, 8 base HPA, 16 window size, 24 encoded interleave
//!   ways (ENIW), 25 interleave arithmetic (0: modulo), 26 reserved, 28 host
//!   bridge interleave granularity (HBIG, encoded), 32 window restrictions,
//!   34 QTG id, 36 the interleave targets (each a host bridge's `_UID`).
//!
//! Linux (`drivers/cxl/acpi.c`, `cxl_acpi_cfmws_verify`) leaves out a window
//! whose ways it cannot decode, whose arithmetic is not modulo (6.1), whose
//! base or size is not 256 MiB aligned, or whose length is short of its
//! targets; and a window naming a host bridge it did not find fails its whole
//! probe. [`build`] refuses all of these before any guest sees the table, and
//! asks what the CXL specification asks of a size: a multiple of 256 MiB × ways.

use crate::sdt::{Sdt, OEM_TABLE_ID};

/// CEDT revision 1 (CXL 2.0).
const CEDT_REVISION: u8 = 1;
/// Structure type: CXL Host Bridge Structure.
const TYPE_CHBS: u8 = 0;
/// Structure type: CXL Fixed Memory Window Structure.
const TYPE_CFMWS: u8 = 1;
/// Length of a CHBS.
pub const CHBS_LEN: u16 = 32;
/// Length of a CFMWS without its targets.
pub const CFMWS_LEN: u16 = 36;
/// CHBS version: CXL 2.0 (the base is the host bridge's CHBCR).
pub const CHBS_CXL20: u32 = 1;
/// Size of a CXL 2.0 host bridge's component register block.
pub const CHBCR_SIZE: u64 = 0x1_0000;
/// A window's size and base are multiples of this per interleave way.
pub const WINDOW_ALIGN: u64 = 256 << 20;

/// Window restriction: Type 2 devices (device-coherent) may use it.
pub const RESTRICT_TYPE2: u16 = 1 << 0;
/// Window restriction: Type 3 devices (host-only coherent) may use it.
pub const RESTRICT_TYPE3: u16 = 1 << 1;
/// Window restriction: volatile memory may be mapped there.
pub const RESTRICT_VOLATILE: u16 = 1 << 2;
/// Window restriction: persistent memory may be mapped there.
pub const RESTRICT_PMEM: u16 = 1 << 3;
/// Window restriction: the configuration is fixed by the platform.
pub const RESTRICT_FIXED: u16 = 1 << 4;

/// A CXL host bridge as ACPI describes it: its `_UID`, where its component
/// registers are (the CEDT's CHBS), and what its root bus decodes (the DSDT
/// ACPI0016 device's `_BBN` and `_CRS`: [`crate::cxl_dsdt`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostBridge {
    /// The `_UID` of the ACPI0016 device.
    pub uid: u32,
    /// Base of its 64 KiB component register block (CHBCR).
    pub registers: u64,
    /// Its root bus and the last bus below it.
    pub buses: (u8, u8),
    /// The memory window below 4 GiB its devices' BARs go in: base, length.
    pub mmio32: (u32, u32),
}

/// A fixed memory window: a host physical range CXL memory may be decoded
/// into, interleaved across `targets` (host bridge `_UID`s) at `granularity`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FixedWindow {
    /// Base host physical address.
    pub base: u64,
    /// Size in bytes.
    pub size: u64,
    /// Bytes of each interleave step across the host bridges (256 to 16 KiB, a power of two).
    pub granularity: u32,
    /// `RESTRICT_*` bits.
    pub restrictions: u16,
    /// The QoS throttling group.
    pub qtg_id: u16,
    /// Each interleave way's host bridge `_UID`, in order.
    pub targets: Vec<u32>,
}

/// What a CEDT cannot say.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CedtError {
    /// The interleave ways have no encoding.
    #[error("a CXL window cannot be interleaved {0} ways; the ways CXL encodes are 1, 2, 3, 4, 6, 8, 12 and 16")]
    Ways(usize),
    /// The granularity has no encoding.
    #[error("a CXL window's interleave granularity cannot be {0} bytes; CXL encodes 256, 512, 1K, 2K, 4K, 8K and 16K")]
    Granularity(u32),
    /// Base or size not a multiple of 256 MiB × ways.
    #[error(
        "CXL window {base:#x}+{size:#x} is not aligned to 256 MiB × {ways} way(s) in base and size"
    )]
    Alignment {
        /// Base.
        base: u64,
        /// Size.
        size: u64,
        /// Interleave ways.
        ways: usize,
    },
    /// A target is not one of the host bridges.
    #[error("CXL window {base:#x} targets host bridge {uid}, which the table does not describe")]
    UnknownTarget {
        /// The window's base.
        base: u64,
        /// The `_UID` it names.
        uid: u32,
    },
}

/// The ENIW encoding of `ways` interleave ways.
pub fn encode_ways(ways: usize) -> Result<u8, CedtError> {
    match ways {
        1 => Ok(0),
        2 => Ok(1),
        4 => Ok(2),
        8 => Ok(3),
        16 => Ok(4),
        3 => Ok(8),
        6 => Ok(9),
        12 => Ok(10),
        other => Err(CedtError::Ways(other)),
    }
}

/// The HBIG encoding of an interleave granularity in bytes.
pub fn encode_granularity(bytes: u32) -> Result<u32, CedtError> {
    match bytes {
        256 | 512 | 1024 | 2048 | 4096 | 8192 | 16384 => Ok(bytes.trailing_zeros() - 8),
        other => Err(CedtError::Granularity(other)),
    }
}

/// One CHBS (type 0, 32 bytes).
pub fn chbs(bridge: &HostBridge) -> Vec<u8> {
    let mut s = Vec::with_capacity(CHBS_LEN.into());
    s.push(TYPE_CHBS); // 0 type
    s.push(0); // 1 reserved
    s.extend_from_slice(&CHBS_LEN.to_le_bytes()); // 2 length
    s.extend_from_slice(&bridge.uid.to_le_bytes()); // 4 _UID
    s.extend_from_slice(&CHBS_CXL20.to_le_bytes()); // 8 CXL version
    s.extend_from_slice(&0u32.to_le_bytes()); // 12 reserved
    s.extend_from_slice(&bridge.registers.to_le_bytes()); // 16 base
    s.extend_from_slice(&CHBCR_SIZE.to_le_bytes()); // 24 length
    s
}

/// One CFMWS (type 1, 36 + 4 × ways bytes), checked as Linux checks it.
pub fn cfmws(w: &FixedWindow) -> Result<Vec<u8>, CedtError> {
    let ways = w.targets.len();
    let eniw = encode_ways(ways)?;
    let hbig = encode_granularity(w.granularity)?;
    let align = WINDOW_ALIGN.saturating_mul(ways as u64);
    if w.size == 0 || !w.size.is_multiple_of(align) || !w.base.is_multiple_of(WINDOW_ALIGN) {
        return Err(CedtError::Alignment {
            base: w.base,
            size: w.size,
            ways,
        });
    }
    // At most 16 targets: the length fits in 16 bits.
    let len = CFMWS_LEN + 4 * u16::try_from(ways).map_err(|_| CedtError::Ways(ways))?;
    let mut s = Vec::with_capacity(len.into());
    s.push(TYPE_CFMWS); // 0 type
    s.push(0); // 1 reserved
    s.extend_from_slice(&len.to_le_bytes()); // 2 length
    s.extend_from_slice(&0u32.to_le_bytes()); // 4 reserved
    s.extend_from_slice(&w.base.to_le_bytes()); // 8 base HPA
    s.extend_from_slice(&w.size.to_le_bytes()); // 16 window size
    s.push(eniw); // 24 ENIW
    s.push(0); // 25 interleave arithmetic: modulo
    s.extend_from_slice(&0u16.to_le_bytes()); // 26 reserved
    s.extend_from_slice(&hbig.to_le_bytes()); // 28 HBIG
    s.extend_from_slice(&w.restrictions.to_le_bytes()); // 32 restrictions
    s.extend_from_slice(&w.qtg_id.to_le_bytes()); // 34 QTG id
    for t in &w.targets {
        s.extend_from_slice(&t.to_le_bytes()); // 36 + 4i target
    }
    Ok(s)
}

/// The CEDT: a CHBS per host bridge, then a CFMWS per window; every
/// window's targets must be among the bridges.
pub fn build(bridges: &[HostBridge], windows: &[FixedWindow]) -> Result<Vec<u8>, CedtError> {
    let mut t = Sdt::new(*b"CEDT", CEDT_REVISION, OEM_TABLE_ID);
    for b in bridges {
        t.append(&chbs(b));
    }
    for w in windows {
        if let Some(&uid) = w
            .targets
            .iter()
            .find(|u| bridges.iter().all(|b| b.uid != **u))
        {
            return Err(CedtError::UnknownTarget { base: w.base, uid });
        }
        t.append(&cfmws(w)?);
    }
    Ok(t.finish())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sdt::HEADER_LEN;

    fn u16_at(b: &[u8], o: usize) -> u16 {
        u16::from_le_bytes([b[o], b[o + 1]])
    }
    fn u32_at(b: &[u8], o: usize) -> u32 {
        u32::from_le_bytes(b[o..o + 4].try_into().unwrap())
    }
    fn u64_at(b: &[u8], o: usize) -> u64 {
        u64::from_le_bytes(b[o..o + 8].try_into().unwrap())
    }

    fn pmem_window(targets: Vec<u32>) -> FixedWindow {
        FixedWindow {
            base: 0x10_0000_0000,
            size: 4 << 30,
            granularity: 8192,
            restrictions: RESTRICT_TYPE3 | RESTRICT_PMEM,
            qtg_id: 0,
            targets,
        }
    }

    #[test]
    fn the_table_is_a_chbs_per_bridge_then_a_cfmws_per_window_at_the_offsets_linux_reads() {
        let bridge = HostBridge {
            uid: 7,
            registers: 0xfe10_0000,
            buses: (0x0c, 0x0f),
            mmio32: (0xfe00_0000, 0x10_0000),
        };
        let t = build(&[bridge], &[pmem_window(vec![7])]).unwrap();
        assert_eq!(&t[0..4], b"CEDT");
        assert_eq!(t[8], CEDT_REVISION);
        assert_eq!(u32_at(&t, 4) as usize, t.len());
        assert_eq!(t.iter().fold(0u8, |a, b| a.wrapping_add(*b)), 0, "checksum");
        let c = &t[HEADER_LEN..];
        assert_eq!((c[0], u16_at(c, 2)), (TYPE_CHBS, CHBS_LEN));
        assert_eq!(u32_at(c, 4), 7);
        assert_eq!(u32_at(c, 8), CHBS_CXL20);
        assert_eq!(u64_at(c, 16), 0xfe10_0000);
        assert_eq!(u64_at(c, 24), 0x1_0000);
        let w = &c[CHBS_LEN as usize..];
        assert_eq!((w[0], u16_at(w, 2)), (TYPE_CFMWS, CFMWS_LEN + 4));
        assert_eq!(u64_at(w, 8), 0x10_0000_0000);
        assert_eq!(u64_at(w, 16), 4 << 30);
        assert_eq!((w[24], w[25]), (0, 0), "one way, modulo");
        assert_eq!(u32_at(w, 28), 5, "8 KiB granularity");
        assert_eq!(u16_at(w, 32), 0x000a, "Type 3, persistent");
        assert_eq!(u32_at(w, 36), 7);
        assert_eq!(w.len(), usize::from(CFMWS_LEN) + 4);
    }

    #[test]
    fn ways_and_granularity_take_cxl_s_encodings_and_nothing_else() {
        let ways: Vec<u8> = [1, 2, 4, 8, 16, 3, 6, 12]
            .iter()
            .map(|&w| encode_ways(w).unwrap())
            .collect();
        assert_eq!(ways, [0, 1, 2, 3, 4, 8, 9, 10]);
        for bad in [0, 5, 7, 32] {
            assert_eq!(encode_ways(bad), Err(CedtError::Ways(bad)));
        }
        assert_eq!(encode_granularity(256), Ok(0));
        assert_eq!(encode_granularity(16384), Ok(6));
        for bad in [0, 128, 768, 32768] {
            assert_eq!(encode_granularity(bad), Err(CedtError::Granularity(bad)));
        }
    }

    #[test]
    fn windows_linux_would_refuse_are_refused_with_the_value_named() {
        let bridges = [
            HostBridge {
                uid: 0,
                registers: 0,
                buses: (0x0c, 0x0f),
                mmio32: (0xfe00_0000, 0x10_0000),
            },
            HostBridge {
                uid: 1,
                registers: 0x1_0000,
                buses: (0x10, 0x13),
                mmio32: (0xfe10_0000, 0x10_0000),
            },
        ];
        let mut w = pmem_window(vec![0, 1]);
        w.size = 256 << 20; // two ways need 512 MiB steps
        let e = build(&bridges, &[w]).unwrap_err();
        assert!(e.to_string().contains("256 MiB × 2 way(s)"), "{e}");
        let mut w = pmem_window(vec![0]);
        w.base += 4096;
        assert!(matches!(
            build(&bridges, &[w]),
            Err(CedtError::Alignment { .. })
        ));
        let e = build(&bridges, &[pmem_window(vec![9])]).unwrap_err();
        assert_eq!(
            e,
            CedtError::UnknownTarget {
                base: 0x10_0000_0000,
                uid: 9
            }
        );
        let mut w = pmem_window(vec![0]);
        w.granularity = 100;
        assert_eq!(build(&bridges, &[w]), Err(CedtError::Granularity(100)));
        assert_eq!(
            build(&bridges, &[pmem_window(vec![0, 1, 0, 1, 0])]),
            Err(CedtError::Ways(5))
        );
    }
}
