//! The PCI configuration space (4 KiB, reached through ECAM) of a CXL Type-3
//! memory device, as Linux's `cxl_pci` binds it (class 05/02/10) and
//! `cxl_port`/`cxl_mem` read it:
//!
//! | offset | what |
//! |---|---|
//! | 0x000 | type-0 header: QEMU's `cxl-type3` ids (8086:0d93), class 0x050210, BAR0 64-bit memory of [`BAR0_SIZE`], capabilities list, no interrupt pin |
//! | 0x040 | PCI Express capability, version 2, endpoint; next: MSI |
//! | 0x080 | MSI capability: one vector, 64-bit address, no per-vector masking ([`ConfigSpace::msi`]) |
//! | 0x100 | Device Serial Number (the DIMM-like serial `cxl list` shows) |
//! | 0x110 | DVSEC 0, PCIe DVSEC for CXL Devices: Mem_Capable, one HDM range of the capacity, valid and active; Mem_Enable 0 at reset and writable |
//! | 0x148 | DVSEC 8, Register Locator: component registers at BAR0 + 0, memory device registers at BAR0 + 0x10000 |
//!
//! Each byte has a write mask: the command register's memory, bus-master
//! and INTx-disable bits, the BAR's address bits, MSI's enable bit, address
//! and data, DVSEC 0's control and range base; everything else is read-only.
//! The device raises no INTx (Linux's `cxl_pci` takes MSI or MSI-X only). Any offset and width is taken;
//! bytes past 4 KiB read 0.

/// Bytes of one function's configuration space.
pub const CONFIG_LEN: usize = 4096;
/// BAR0: the component registers, then the memory device registers.
pub const BAR0_SIZE: u64 = 0x20000;
/// Where the memory device registers start in BAR0.
pub const DEVICE_REGS_OFFSET: u64 = 0x10000;
// Both 64 KiB register blocks lie inside BAR0.
const _: () = assert!(DEVICE_REGS_OFFSET + 0x10000 <= BAR0_SIZE);

/// Intel, as QEMU's `cxl-type3`.
pub const VENDOR_ID: u16 = 0x8086;
/// QEMU's `cxl-type3` device id.
pub const DEVICE_ID: u16 = 0x0d93;
/// The CXL consortium's DVSEC vendor id.
pub const CXL_DVSEC_VENDOR: u16 = 0x1e98;

const COMMAND: usize = 0x04;
const COMMAND_MEMORY: u16 = 1 << 1;
const COMMAND_BUS_MASTER: u16 = 1 << 2;
const COMMAND_WRITABLE: u16 = COMMAND_MEMORY | COMMAND_BUS_MASTER | 1 << 10;
const BAR0: usize = 0x10;
const PCIE_CAP: usize = 0x40;
/// Where the MSI capability starts.
pub const MSI_CAPABILITY: usize = 0x80;
/// MSI's Message Control: bit 0 enable (writable), bit 7 64-bit address
/// capable; Multiple Message Capable and Enable (one vector) read 0.
const MSI_CONTROL: usize = MSI_CAPABILITY + 2;
const MSI_ENABLE: u16 = 1 << 0;
const MSI_64BIT: u16 = 1 << 7;
const MSI_ADDRESS: usize = MSI_CAPABILITY + 4;
const MSI_DATA: usize = MSI_CAPABILITY + 0x0c;
const DSN: usize = 0x100;
const DVSEC_DEVICE: usize = 0x110;
const DVSEC_DEVICE_LEN: usize = 0x38;
const DVSEC_LOCATOR: usize = DVSEC_DEVICE + DVSEC_DEVICE_LEN;
const DVSEC_LOCATOR_LEN: usize = 0x0c + 8 * 2;
/// DVSEC 0's control register: bit 2 Mem_Enable (bit 1 IO_Enable).
const DVSEC_CONTROL: usize = DVSEC_DEVICE + 0x0c;
const MEM_ENABLE: u16 = 1 << 2;

/// An MSI message the device sends: `data` written to `address`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MsiMessage {
    /// The message address (the guest's, 64-bit).
    pub address: u64,
    /// The message data.
    pub data: u32,
}

/// A configuration space: values and which bits the guest may change.
#[derive(Debug, Clone)]
pub struct ConfigSpace {
    value: Box<[u8; CONFIG_LEN]>,
    writable: Box<[u8; CONFIG_LEN]>,
}

impl ConfigSpace {
    pub(super) fn empty() -> Self {
        Self {
            value: Box::new([0; CONFIG_LEN]),
            writable: Box::new([0; CONFIG_LEN]),
        }
    }

    pub(super) fn put(&mut self, at: usize, bytes: &[u8], writable: &[u8]) {
        self.value[at..at + bytes.len()].copy_from_slice(bytes);
        if !writable.is_empty() {
            self.writable[at..at + writable.len()].copy_from_slice(writable);
        }
    }

    pub(super) fn put16(&mut self, at: usize, v: u16) {
        self.put(at, &v.to_le_bytes(), &[]);
    }

    pub(super) fn put32(&mut self, at: usize, v: u32) {
        self.put(at, &v.to_le_bytes(), &[]);
    }

    pub(super) fn u16_at(&self, at: usize) -> u16 {
        u16::from_le_bytes([self.value[at], self.value[at + 1]])
    }

    pub(super) fn u32_at(&self, at: usize) -> u32 {
        let mut b = [0u8; 4];
        b.copy_from_slice(&self.value[at..at + 4]);
        u32::from_le_bytes(b)
    }

    /// A guest read of `data.len()` bytes at `offset`.
    pub fn read(&self, offset: u64, data: &mut [u8]) {
        for (i, b) in data.iter_mut().enumerate() {
            *b = super::byte_in(offset, i, CONFIG_LEN).map_or(0, |at| self.value[at]);
        }
    }

    /// A guest write of `data` at `offset`: each byte changes only in its
    /// writable bits.
    pub fn write(&mut self, offset: u64, data: &[u8]) {
        for (i, &b) in data.iter().enumerate() {
            if let Some(at) = super::byte_in(offset, i, CONFIG_LEN) {
                let mask = self.writable[at];
                self.value[at] = (self.value[at] & !mask) | (b & mask);
            }
        }
    }

    /// BAR0's address while the command register enables memory decoding.
    pub fn bar0(&self) -> Option<u64> {
        if self.u16_at(COMMAND) & COMMAND_MEMORY == 0 {
            return None;
        }
        let low = u64::from(self.u32_at(BAR0) & !0xf);
        Some(u64::from(self.u32_at(BAR0 + 4)) << 32 | low)
    }

    /// The message of the device's one MSI vector while the guest has
    /// enabled MSI and bus mastering (a function that may not master sends
    /// no message); None otherwise.
    pub fn msi(&self) -> Option<MsiMessage> {
        let enabled = self.u16_at(MSI_CONTROL) & MSI_ENABLE != 0
            && self.u16_at(COMMAND) & COMMAND_BUS_MASTER != 0;
        enabled.then(|| MsiMessage {
            address: u64::from(self.u32_at(MSI_ADDRESS + 4)) << 32
                | u64::from(self.u32_at(MSI_ADDRESS)),
            data: u32::from(self.u16_at(MSI_DATA)),
        })
    }

    /// Whether the guest set DVSEC 0's Mem_Enable (the device's memory is
    /// in use through its HDM decoders).
    pub fn mem_enabled(&self) -> bool {
        self.u16_at(DVSEC_CONTROL) & MEM_ENABLE != 0
    }
}

/// The configuration space of a Type-3 device of `capacity` bytes (a
/// multiple of 256 MiB) with device serial number `serial`.
pub fn type3_endpoint(serial: u64, capacity: u64) -> ConfigSpace {
    let mut c = ConfigSpace::empty();
    c.put16(0x00, VENDOR_ID);
    c.put16(0x02, DEVICE_ID);
    c.put(COMMAND, &[0, 0], &COMMAND_WRITABLE.to_le_bytes());
    c.put16(0x06, 1 << 4); // status: capabilities list
                           // Class 05/02, prog-if 0x10, revision 0.
    c.put32(0x08, 0x0502_1000);
    // BAR0: 64-bit memory, not prefetchable; its size in the address bits
    // that stay 0.
    let size_mask = u32::try_from(!(BAR0_SIZE - 1) & 0xffff_fff0).unwrap_or(0);
    c.put(BAR0, &0b0100u32.to_le_bytes(), &size_mask.to_le_bytes());
    c.put(BAR0 + 4, &[0; 4], &[0xff; 4]);
    c.put16(0x2c, VENDOR_ID);
    c.put16(0x2e, DEVICE_ID);
    c.value[0x34] = u8::try_from(PCIE_CAP).unwrap_or(0);
    // PCI Express capability: ID 0x10, MSI next, version 2, endpoint.
    c.put16(
        PCIE_CAP,
        0x0010 | u16::try_from(MSI_CAPABILITY << 8).unwrap_or(0),
    );
    c.put16(PCIE_CAP + 2, 0x0002);
    // Device Capabilities: Role-Based Error Reporting (every PCIe 1.1 and
    // later device has it; Linux disables ASPM on one without).
    c.put32(PCIE_CAP + 4, 1 << 15);
    msi_capability(&mut c);
    ext_header(&mut c, DSN, 0x0003, DVSEC_DEVICE);
    c.put32(DSN + 4, u32::try_from(serial & 0xffff_ffff).unwrap_or(0));
    c.put32(DSN + 8, u32::try_from(serial >> 32).unwrap_or(0));
    device_dvsec(&mut c, capacity);
    register_locator(&mut c);
    c
}

/// MSI: ID 0x05, last in the list; one vector, a 64-bit address (its low
/// two bits read 0) and 16 bits of data, all the guest's.
fn msi_capability(c: &mut ConfigSpace) {
    c.put16(MSI_CAPABILITY, 0x0005);
    c.put(
        MSI_CONTROL,
        &MSI_64BIT.to_le_bytes(),
        &MSI_ENABLE.to_le_bytes(),
    );
    c.put(MSI_ADDRESS, &[0; 4], &0xffff_fffcu32.to_le_bytes());
    c.put(MSI_ADDRESS + 4, &[0; 4], &[0xff; 4]);
    c.put(MSI_DATA, &[0; 2], &[0xff; 2]);
}

/// An extended capability header: `id`, version 1, next at `next`.
fn ext_header(c: &mut ConfigSpace, at: usize, id: u16, next: usize) {
    let next = u32::try_from(next).unwrap_or(0);
    c.put32(at, u32::from(id) | 1 << 16 | next << 20);
}

/// A DVSEC's two headers: revision and length, then its id.
fn dvsec_header(c: &mut ConfigSpace, at: usize, next: usize, revision: u32, len: usize, id: u16) {
    ext_header(c, at, 0x0023, next);
    let len = u32::try_from(len).unwrap_or(0);
    c.put32(
        at + 4,
        u32::from(CXL_DVSEC_VENDOR) | revision << 16 | len << 20,
    );
    c.put16(at + 8, id);
}

/// DVSEC 0: Mem_Capable with one HDM range (HDM_Count 1), the range's size
/// valid and active.
fn device_dvsec(c: &mut ConfigSpace, capacity: u64) {
    let at = DVSEC_DEVICE;
    dvsec_header(c, at, DVSEC_LOCATOR, 1, DVSEC_DEVICE_LEN, 0);
    // IO_Capable, Mem_Capable, HDM_Count 1.
    c.put16(at + 0x0a, 1 << 1 | 1 << 2 | 1 << 4);
    // Control: IO_Enable reads 1 and is read-only (CXL 2.0 8.1.3.2);
    // Mem_Enable is the guest's.
    c.put(
        at + 0x0c,
        &(1u16 << 1).to_le_bytes(),
        &MEM_ENABLE.to_le_bytes(),
    );
    c.put32(at + 0x18, u32::try_from(capacity >> 32).unwrap_or(0));
    // Valid, active, media type 2 and memory class 2 (as described by the
    // device, QEMU's values), size bits 31:28.
    let low = u32::try_from(capacity & 0xf000_0000).unwrap_or(0) | 2 << 5 | 2 << 2 | 0b11;
    c.put32(at + 0x1c, low);
    c.put(at + 0x20, &[0; 4], &[0xff; 4]);
    c.put(at + 0x24, &[0; 4], &0xf000_0000u32.to_le_bytes());
}

/// DVSEC 8: the component block at BAR0 + 0 (block id 1), the memory device
/// block at BAR0 + [`DEVICE_REGS_OFFSET`] (block id 3).
fn register_locator(c: &mut ConfigSpace) {
    let at = DVSEC_LOCATOR;
    dvsec_header(c, at, 0, 0, DVSEC_LOCATOR_LEN, 8);
    let entry =
        |block: u32, offset: u64| block << 8 | u32::try_from(offset & 0xffff_0000).unwrap_or(0);
    c.put32(at + 0x0c, entry(1, 0));
    c.put32(at + 0x14, entry(3, DEVICE_REGS_OFFSET));
}

#[cfg(test)]
#[path = "pci_config_tests.rs"]
mod tests;
