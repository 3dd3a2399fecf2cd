//! The common System Description Table header, checksums and Generic
//! Address Structures.

/// OEM id in every header and the RSDP.
pub const OEM_ID: [u8; 6] = *b"PMEMVM";
/// OEM table id of the tables pmemvm builds (the NVDIMM SSDT has its own).
pub const OEM_TABLE_ID: [u8; 8] = *b"PMEMVM  ";
/// OEM table id of the NVDIMM SSDT.
pub const NVDIMM_SSDT_OEM_TABLE_ID: [u8; 8] = *b"NVDIMM  ";
/// OEM revision in every header.
pub const OEM_REVISION: u32 = 1;
/// Creator id ("PMVM") in every header.
pub const CREATOR_ID: [u8; 4] = *b"PMVM";
/// Creator revision in every header.
pub const CREATOR_REVISION: u32 = 1;
/// Size of the standard SDT header.
pub const HEADER_LEN: usize = 36;

/// The byte that makes `bytes` sum to zero (mod 256) when added.
pub fn checksum(bytes: &[u8]) -> u8 {
    let sum = bytes.iter().fold(0u8, |acc, b| acc.wrapping_add(*b));
    0u8.wrapping_sub(sum)
}

/// A table being built: the 36-byte header followed by the body.
#[derive(Debug, Clone)]
pub struct Sdt {
    bytes: Vec<u8>,
}

impl Sdt {
    /// Starts a table with the given signature, revision and OEM table id.
    pub fn new(signature: [u8; 4], revision: u8, oem_table_id: [u8; 8]) -> Self {
        let mut bytes = Vec::with_capacity(256);
        bytes.extend_from_slice(&signature);
        bytes.extend_from_slice(&0u32.to_le_bytes()); // length, set by finish()
        bytes.push(revision);
        bytes.push(0); // checksum, set by finish()
        bytes.extend_from_slice(&OEM_ID);
        bytes.extend_from_slice(&oem_table_id);
        bytes.extend_from_slice(&OEM_REVISION.to_le_bytes());
        bytes.extend_from_slice(&CREATOR_ID);
        bytes.extend_from_slice(&CREATOR_REVISION.to_le_bytes());
        Self { bytes }
    }

    /// Appends raw bytes to the body.
    pub fn append(&mut self, data: &[u8]) {
        self.bytes.extend_from_slice(data);
    }

    /// Appends a `u8`.
    pub fn u8(&mut self, v: u8) {
        self.bytes.push(v);
    }

    /// Appends a little-endian `u16`.
    pub fn u16(&mut self, v: u16) {
        self.append(&v.to_le_bytes());
    }

    /// Appends a little-endian `u32`.
    pub fn u32(&mut self, v: u32) {
        self.append(&v.to_le_bytes());
    }

    /// Appends a little-endian `u64`.
    pub fn u64(&mut self, v: u64) {
        self.append(&v.to_le_bytes());
    }

    /// Current length of the table in bytes.
    pub fn current_len(&self) -> usize {
        self.bytes.len()
    }

    /// Fills in the length and checksum and returns the table bytes.
    pub fn finish(mut self) -> Vec<u8> {
        let len = u32::try_from(self.bytes.len()).unwrap_or(u32::MAX);
        self.bytes[4..8].copy_from_slice(&len.to_le_bytes());
        self.bytes[9] = 0;
        self.bytes[9] = checksum(&self.bytes);
        self.bytes
    }
}

/// Generic Address Structure for an 8-bit register in I/O port space
/// (address space 1 = SystemIO, width 8, offset 0, access size 1 = byte).
pub fn gas_io8(port: u16) -> [u8; 12] {
    let mut g = [0u8; 12];
    g[0] = 1;
    g[1] = 8;
    g[2] = 0;
    g[3] = 1;
    g[4..12].copy_from_slice(&u64::from(port).to_le_bytes());
    g
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checksum_makes_sum_zero() {
        let data = [1u8, 2, 3, 250];
        let c = checksum(&data);
        let total = data.iter().fold(c, |a, b| a.wrapping_add(*b));
        assert_eq!(total, 0);
        assert_eq!(checksum(&[]), 0);
    }

    #[test]
    fn empty_table_header() {
        let t = Sdt::new(*b"TEST", 2, OEM_TABLE_ID).finish();
        assert_eq!(t.len(), HEADER_LEN);
        assert_eq!(&t[0..4], b"TEST");
        assert_eq!(u32::from_le_bytes([t[4], t[5], t[6], t[7]]), 36);
        assert_eq!(t[8], 2);
        assert_eq!(&t[10..16], b"PMEMVM");
        assert_eq!(&t[16..24], b"PMEMVM  ");
        assert_eq!(&t[28..32], b"PMVM");
        assert_eq!(checksum(&t), 0);
    }

    #[test]
    fn gas_for_port() {
        assert_eq!(gas_io8(0x600), [1, 8, 0, 1, 0x00, 0x06, 0, 0, 0, 0, 0, 0]);
    }
}
