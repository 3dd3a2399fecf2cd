//! A CXL component register block (CXL 2.0 8.2.4): 64 KiB whose CXL.cache
//! and CXL.mem registers start at 0x1000 with a capability array that
//! Linux's `cxl_probe_component_regs` walks:
//!
//! | offset | what |
//! |---|---|
//! | 0x1000 | array header: ID 1, version 1, cache/mem version 1, 2 entries |
//! | 0x1004 | RAS capability header: ID 2, version 2, at 0x1080 |
//! | 0x1008 | HDM decoder capability header: ID 5, version 1, at 0x1100 |
//! | 0x1080 | RAS capability (0x58 bytes): no error recorded, masks kept |
//! | 0x1100 | HDM decoders ([`super::hdm`]) |
//!
//! Everything else reads 0 and drops writes. Accesses of 1 to 8 bytes at any
//! offset are split into the 32-bit registers they touch (Linux uses 32-bit
//! accesses here).

use super::hdm::{DecoderEvent, DecoderSide, HdmDecoders, HDM_LEN};

/// Bytes of the block.
pub const COMPONENT_LEN: usize = 0x10000;
const CACHE_MEM: usize = 0x1000;
const RAS: usize = CACHE_MEM + 0x80;
const RAS_LEN: usize = 0x58;
const HDM: usize = CACHE_MEM + 0x100;
/// RAS registers the guest may write and read back: the uncorrectable
/// mask and severity, the correctable mask.
const RAS_WRITABLE: [usize; 3] = [0x04, 0x08, 0x10];

/// One component register block.
#[derive(Debug)]
pub struct ComponentRegisters {
    hdm: HdmDecoders,
    ras_writable: [u32; 3],
}

impl ComponentRegisters {
    /// The block of a device or bridge on `side`.
    pub fn new(side: DecoderSide) -> Self {
        Self {
            hdm: HdmDecoders::new(side),
            ras_writable: [0; 3],
        }
    }

    /// The HDM decoders.
    pub fn hdm(&self) -> &HdmDecoders {
        &self.hdm
    }

    /// The decoders' commits and resets since the last call.
    pub fn take_events(&mut self) -> Vec<DecoderEvent> {
        self.hdm.take_events()
    }

    fn read32(&self, at: usize) -> u32 {
        let header = |id: u32, version: u32, pointer: usize| {
            id | version << 16 | u32::try_from(pointer - CACHE_MEM).unwrap_or(0) << 20
        };
        match at {
            CACHE_MEM => 1 | 1 << 16 | 1 << 20 | 2 << 24,
            a if a == CACHE_MEM + 4 => header(2, 2, RAS),
            a if a == CACHE_MEM + 8 => header(5, 1, HDM),
            a if (RAS..RAS + RAS_LEN).contains(&a) => RAS_WRITABLE
                .iter()
                .position(|&r| r == a - RAS)
                .map_or(0, |i| self.ras_writable[i]),
            a if (HDM..HDM + HDM_LEN).contains(&a) => self.hdm.read32(a - HDM),
            _ => 0,
        }
    }

    fn write32(&mut self, at: usize, value: u32) {
        if let Some(i) = at
            .checked_sub(RAS)
            .and_then(|r| RAS_WRITABLE.iter().position(|&w| w == r))
        {
            self.ras_writable[i] = value;
        } else if (HDM..HDM + HDM_LEN).contains(&at) {
            self.hdm.write32(at - HDM, value);
        }
    }

    /// A guest read of `data.len()` bytes at `offset`.
    pub fn read(&self, offset: u64, data: &mut [u8]) {
        for (i, b) in data.iter_mut().enumerate() {
            *b = super::byte_in(offset, i, COMPONENT_LEN)
                .map_or(0, |at| self.read32(at & !3).to_le_bytes()[at & 3]);
        }
    }

    /// A guest write of `data` at `offset`: each 32-bit register it touches
    /// is written once, with the bytes outside the access read back first.
    pub fn write(&mut self, offset: u64, data: &[u8]) {
        let mut i = 0;
        while i < data.len() {
            let Some(at) = super::byte_in(offset, i, COMPONENT_LEN) else {
                return;
            };
            let dword = at & !3;
            let mut bytes = self.read32(dword).to_le_bytes();
            while i < data.len()
                && super::byte_in(offset, i, COMPONENT_LEN).is_some_and(|a| a & !3 == dword)
            {
                let a = super::byte_in(offset, i, COMPONENT_LEN).unwrap_or(dword);
                bytes[a & 3] = data[i];
                i += 1;
            }
            self.write32(dword, u32::from_le_bytes(bytes));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read32(c: &ComponentRegisters, at: u64) -> u32 {
        let mut b = [0u8; 4];
        c.read(at, &mut b);
        u32::from_le_bytes(b)
    }

    #[test]
    fn the_capability_array_leads_linux_to_ras_and_hdm() {
        let c = ComponentRegisters::new(DecoderSide::Endpoint { capacity: 1 << 30 });
        let head = read32(&c, 0x1000);
        assert_eq!(head & 0xffff, 1, "CXL capability header ID");
        let entries = head >> 24;
        let caps: Vec<(u32, u32)> = (1..=entries)
            .map(|i| {
                let h = read32(&c, 0x1000 + 4 * u64::from(i));
                (h & 0xffff, 0x1000 + (h >> 20))
            })
            .collect();
        assert_eq!(caps, [(2, 0x1080), (5, 0x1100)]);
        // The HDM capability is there: 4 decoders.
        assert_eq!(read32(&c, 0x1100) & 0xf, 2);
        assert_eq!(read32(&c, 0), 0, "CXL.io space reads 0");
    }

    #[test]
    fn byte_and_qword_accesses_reach_the_registers_they_touch() {
        let mut c = ComponentRegisters::new(DecoderSide::Endpoint { capacity: 1 << 30 });
        // Base High of decoder 0 (0x1114) and Size Low (0x1118) in one 8-byte write.
        c.write(0x1114, &[0x04, 0, 0, 0, 0, 0, 0, 0x40]);
        assert_eq!(read32(&c, 0x1114), 4);
        assert_eq!(read32(&c, 0x1118), 0x4000_0000);
        // One byte of Global Control.
        c.write(0x1104, &[2]);
        assert!(c.hdm().enabled());
        // RAS masks are kept; the status registers stay clear.
        c.write(0x1084, &0xffu32.to_le_bytes());
        c.write(0x1080, &0xffu32.to_le_bytes());
        assert_eq!((read32(&c, 0x1084), read32(&c, 0x1080)), (0xff, 0));
        // Past the block: nothing, and no panic.
        c.write(COMPONENT_LEN as u64 - 2, &[1; 8]);
        c.write(u64::MAX, &[1; 8]);
        let mut b = [0xaa; 8];
        c.read(COMPONENT_LEN as u64 - 4, &mut b);
        assert_eq!(&b[4..], &[0; 4]);
    }
}
