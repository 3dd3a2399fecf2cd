//! MCFG (PCI Express memory-mapped configuration space), PCI Firmware 3.x
//! §4.1.2: where each PCI segment's ECAM window is, so the guest reaches
//! extended configuration space (offsets 0x100 to 0xFFF: CXL's DVSECs live
//! there). Each allocation (16 bytes): 0 ECAM base, 8 segment group, 10
//! first bus, 11 last bus, 12 reserved. The window is 1 MiB per bus, from
//! bus `first_bus` at `base` + `first_bus` × 1 MiB (Linux's
//! `pci_mmcfg_arch_map` counts from bus 0 of the base).

use crate::sdt::{Sdt, OEM_TABLE_ID};

/// MCFG revision 1.
const MCFG_REVISION: u8 = 1;
/// Bytes of configuration space per bus (32 devices × 8 functions × 4 KiB).
pub const ECAM_BUS_SIZE: u64 = 1 << 20;
/// Length of one allocation structure.
pub const ALLOCATION_LEN: usize = 16;

/// One segment's ECAM window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EcamWindow {
    /// Address of bus 0's configuration space (the window itself starts
    /// at `base + first_bus` MiB).
    pub base: u64,
    /// PCI segment group.
    pub segment: u16,
    /// First bus decoded.
    pub first_bus: u8,
    /// Last bus decoded.
    pub last_bus: u8,
}

impl EcamWindow {
    /// Bytes the window decodes.
    pub fn size(&self) -> u64 {
        (u64::from(self.last_bus.saturating_sub(self.first_bus)) + 1) * ECAM_BUS_SIZE
    }
}

/// The MCFG with one allocation per window.
pub fn build(windows: &[EcamWindow]) -> Vec<u8> {
    let mut t = Sdt::new(*b"MCFG", MCFG_REVISION, OEM_TABLE_ID);
    t.append(&[0u8; 8]); // 36 reserved
    for w in windows {
        t.append(&w.base.to_le_bytes()); // 0 base
        t.append(&w.segment.to_le_bytes()); // 8 segment
        t.append(&[w.first_bus, w.last_bus]); // 10 first bus, 11 last bus
        t.append(&[0u8; 4]); // 12 reserved
    }
    t.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sdt::HEADER_LEN;

    #[test]
    fn each_window_is_one_allocation_after_eight_reserved_bytes() {
        let w = EcamWindow {
            base: 0xe000_0000,
            segment: 0,
            first_bus: 0,
            last_bus: 15,
        };
        let t = build(&[w]);
        assert_eq!(&t[0..4], b"MCFG");
        assert_eq!(t.len(), HEADER_LEN + 8 + ALLOCATION_LEN);
        assert_eq!(
            u32::from_le_bytes(t[4..8].try_into().unwrap()) as usize,
            t.len()
        );
        assert_eq!(t.iter().fold(0u8, |a, b| a.wrapping_add(*b)), 0, "checksum");
        let a = &t[HEADER_LEN + 8..];
        assert_eq!(u64::from_le_bytes(a[0..8].try_into().unwrap()), 0xe000_0000);
        assert_eq!(u16::from_le_bytes([a[8], a[9]]), 0);
        assert_eq!((a[10], a[11]), (0, 15));
        assert_eq!(w.size(), 16 << 20);
    }
}
