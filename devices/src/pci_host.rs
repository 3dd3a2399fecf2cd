//! PCI configuration mechanism #1 (ports 0xCF8 address, 0xCFC-0xCFF data)
//! with one read-only host bridge at 00:00.0 and nothing else.
//!
//! Why a VMM without PCI devices has it: Linux inserts the E820 ranges that
//! are not "busy" — legacy persistent memory (type 12) among them — into
//! `/proc/iomem` only from `pcibios_resource_survey()` →
//! `e820__reserve_resources_late()` (arch/x86/pci/i386.c), which
//! `pcibios_init()` skips when it found no PCI configuration access ("PCI:
//! System does not support PCI"). Without that, `nd_e820` finds no range and
//! the guest gets no `e820` region. Linux's type-1 probe
//! (`pci_check_type1`, arch/x86/pci/direct.c) wants the address register to
//! read back what was written and, on a machine without DMI, a host bridge
//! on bus 0 (`pci_sanity_check`). With ACPI and no PCI root bridge in the
//! DSDT Linux scans no bus, so the bridge is never enumerated.
//!
//! With CXL devices the same ports also reach their functions (the root
//! ports and Type-3 endpoints, [`PciHostBridge::with_functions`]): Linux on
//! x86 reads the first 256 bytes of every function through ports 0xCF8/0xCFC
//! and only the extended space through ECAM, and it takes the MCFG's ECAM
//! (reserved in the E820 map) only where this mechanism exists
//! (`pci_mmcfg_check_reserved`, arch/x86/pci/mmconfig-shared.c). Both paths
//! reach one configuration space: the functions are shared with the ECAM.
//!
//! Guest input is hostile: any address, width and value is accepted; reads
//! of a function that is not there return all ones, writes to it are dropped,
//! and the bridge's own header is read-only.

use std::collections::BTreeMap;

use crate::bus::BusDevice;
use crate::pci_ecam::{Bdf, SharedFunction};

/// Ports: the address register (0xCF8..0xCFB) and the data window (0xCFC..0xCFF).
pub const LEN: u64 = 8;
/// Vendor id of the bridge: Red Hat, Inc. (QEMU's PCIe host bridge ids, which
/// no Linux driver binds to).
pub const VENDOR_ID: u16 = 0x1b36;
/// Device id of the bridge.
pub const DEVICE_ID: u16 = 0x0008;
/// Class code: bridge (0x06), host bridge (0x00), prog-if 0.
const CLASS_HOST_BRIDGE: u32 = 0x0006_0000;
/// The enable bit of the address register.
const ENABLE: u32 = 0x8000_0000;

/// The 64-byte type-0 header of the bridge (the rest of its 256 bytes is zero).
fn header() -> [u8; 64] {
    let mut h = [0u8; 64];
    h[0..2].copy_from_slice(&VENDOR_ID.to_le_bytes());
    h[2..4].copy_from_slice(&DEVICE_ID.to_le_bytes());
    // Revision 0, then the class code in bytes 9..12.
    h[8..12].copy_from_slice(&(CLASS_HOST_BRIDGE << 8).to_le_bytes());
    h[0x2c..0x2e].copy_from_slice(&VENDOR_ID.to_le_bytes());
    h[0x2e..0x30].copy_from_slice(&0x1100u16.to_le_bytes());
    h
}

/// The configuration mechanism, its host bridge and the functions behind it.
#[derive(Debug, Default)]
pub struct PciHostBridge {
    address: u32,
    /// Functions other than the bridge (00:00.0), by bus, device and function.
    functions: BTreeMap<Bdf, SharedFunction>,
}

/// What the address register selects: the bridge, a function, or nothing.
enum Selected<'a> {
    Bridge,
    Function(&'a SharedFunction),
    Absent,
}

impl PciHostBridge {
    /// A bridge with the address register cleared and nothing behind it.
    pub fn new() -> Self {
        Self::default()
    }

    /// A bridge that also reaches `functions` (the ECAM's, shared); one at
    /// 00:00.0 is not reachable, the bridge is there.
    pub fn with_functions(functions: BTreeMap<Bdf, SharedFunction>) -> Self {
        Self {
            address: 0,
            functions,
        }
    }

    /// The target of the current address and its register (dword-aligned).
    fn selected(&self) -> (Selected<'_>, u64) {
        let a = self.address;
        let reg = u64::from(a & 0xfc);
        if a & ENABLE == 0 {
            return (Selected::Absent, reg);
        }
        let [_, devfn, bus, _] = a.to_le_bytes();
        let bdf = (bus, devfn >> 3, devfn & 7);
        let target = match (bdf, self.functions.get(&bdf)) {
            ((0, 0, 0), _) => Selected::Bridge,
            (_, Some(f)) => Selected::Function(f),
            (_, None) => Selected::Absent,
        };
        (target, reg)
    }

    /// The configuration-space byte the data window shows at `port_offset`
    /// (0..4 within 0xCFC) under the current address.
    fn config_byte(&self, port_offset: u64) -> u8 {
        let (target, reg) = self.selected();
        let at = reg + (port_offset & 3);
        match target {
            Selected::Bridge => usize::try_from(at)
                .ok()
                .and_then(|i| header().get(i).copied())
                .unwrap_or(0),
            Selected::Function(f) => {
                let mut one = [0xffu8];
                f.lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .config_read(at, &mut one);
                one[0]
            }
            Selected::Absent => 0xff,
        }
    }

    /// A write of `data` to the data window at `port_offset` (0..4): only a
    /// function's space changes, and only within the selected dword.
    fn config_write(&self, port_offset: u64, data: &[u8]) {
        let (Selected::Function(f), reg) = self.selected() else {
            return;
        };
        let room = usize::try_from(4 - (port_offset & 3)).unwrap_or(0);
        let data = &data[..data.len().min(room)];
        f.lock()
            .unwrap_or_else(|e| e.into_inner())
            .config_write(reg + (port_offset & 3), data);
    }
}

impl BusDevice for PciHostBridge {
    fn read(&mut self, offset: u64, data: &mut [u8]) {
        for (i, byte) in data.iter_mut().enumerate() {
            let at = offset + i as u64;
            let address = self.address.to_le_bytes();
            *byte = match at {
                0..=3 => usize::try_from(at)
                    .ok()
                    .and_then(|i| address.get(i).copied())
                    .unwrap_or(0xff),
                4..=7 => self.config_byte(at - 4),
                _ => 0xff,
            };
        }
    }

    fn write(&mut self, offset: u64, data: &[u8]) {
        // Only a whole 32-bit write sets the address (a byte to 0xCFB is
        // the type-2 probe, which this bridge does not implement); the
        // bridge's header is read-only.
        match offset {
            0 => {
                if let Ok(bytes) = <[u8; 4]>::try_from(data) {
                    self.address = u32::from_le_bytes(bytes);
                }
            }
            4..=7 => self.config_write(offset - 4, data),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read32(d: &mut PciHostBridge, offset: u64) -> u32 {
        let mut b = [0u8; 4];
        d.read(offset, &mut b);
        u32::from_le_bytes(b)
    }

    fn config(d: &mut PciHostBridge, bus: u32, devfn: u32, reg: u32) -> u32 {
        d.write(0, &(ENABLE | bus << 16 | devfn << 8 | reg).to_le_bytes());
        read32(d, 4)
    }

    #[test]
    fn linux_type1_probe_finds_a_host_bridge() {
        let mut d = PciHostBridge::new();
        // pci_check_type1: outb(0x01, 0xCFB) is ignored; the address reads back.
        d.write(3, &[1]);
        d.write(0, &ENABLE.to_le_bytes());
        assert_eq!(read32(&mut d, 0), ENABLE);
        // pci_sanity_check: a 16-bit read of PCI_CLASS_DEVICE (0x0a) at devfn 0.
        d.write(0, &(ENABLE | 0x08).to_le_bytes());
        let mut class = [0u8; 2];
        d.read(4 + 2, &mut class);
        assert_eq!(u16::from_le_bytes(class), 0x0600, "PCI_CLASS_BRIDGE_HOST");
        assert_eq!(config(&mut d, 0, 0, 0), 0x0008_1b36);
        assert_eq!(config(&mut d, 0, 0, 8), 0x0600_0000);
    }

    #[test]
    fn everything_else_is_absent_and_read_only() {
        let mut d = PciHostBridge::new();
        assert_eq!(config(&mut d, 0, 8, 0), u32::MAX, "device 1");
        assert_eq!(config(&mut d, 1, 0, 0), u32::MAX, "bus 1");
        d.write(0, &0u32.to_le_bytes());
        assert_eq!(read32(&mut d, 4), u32::MAX, "enable bit clear");
        // Beyond the header: zero; writes to the data window change nothing.
        assert_eq!(config(&mut d, 0, 0, 0x40), 0);
        d.write(4, &0xdead_beefu32.to_le_bytes());
        assert_eq!(config(&mut d, 0, 0, 0), 0x0008_1b36);
        // Any width and offset, no panic.
        for offset in 0..LEN + 2 {
            for len in [1usize, 2, 3, 4, 8] {
                let mut b = vec![0u8; len];
                d.read(offset, &mut b);
                d.write(offset, &b);
            }
        }
    }

    #[test]
    fn functions_behind_the_bridge_share_one_space_with_the_ecam() {
        use crate::cxl::root_port::root_port;
        use crate::pci_ecam::Ecam;
        use std::sync::{Arc, Mutex};
        let port: SharedFunction = Arc::new(Mutex::new(root_port(0)));
        let mut ecam = Ecam::new(0x0c, 0x0f);
        ecam.add((0x0c, 0, 0), port.clone()).unwrap();
        let mut functions = ecam.functions();
        let shadow: SharedFunction = Arc::new(Mutex::new(root_port(0)));
        functions.insert((0, 0, 0), shadow);
        let mut d = PciHostBridge::with_functions(functions);
        assert_eq!(config(&mut d, 0x0c, 0, 0), 0x7075_8086, "the root port");
        assert_eq!(
            config(&mut d, 0, 0, 0),
            0x0008_1b36,
            "00:00.0 stays the bridge"
        );
        assert_eq!(config(&mut d, 0x0c, 1, 0), u32::MAX, "no device 1");
        // Bus numbers written through 0xCFC are what the ECAM reads.
        d.write(0, &(ENABLE | 0x0c << 16 | 0x18).to_le_bytes());
        d.write(4, &[0x0c, 0x0d, 0x0d]);
        let mut buses = [0u8; 3];
        ecam.read(0x18, &mut buses);
        assert_eq!(buses, [0x0c, 0x0d, 0x0d]);
        // A byte write at 0xCFE lands on the dword's third byte, no further.
        d.write(0, &(ENABLE | 0x0c << 16 | 0x18).to_le_bytes());
        d.write(6, &[0x0e, 0xaa, 0xbb]);
        let mut dword = [0u8; 4];
        ecam.read(0x18, &mut dword);
        assert_eq!(&dword[..3], &[0x0c, 0x0d, 0x0e]);
        let mut next = [0u8; 1];
        ecam.read(0x1c, &mut next);
        assert_ne!(next[0], 0xaa, "the write stayed in its dword");
        // Disabled: nothing read, nothing written.
        d.write(0, &(0x0cu32 << 16 | 0x18).to_le_bytes());
        assert_eq!(read32(&mut d, 4), u32::MAX);
        d.write(4, &[0; 4]);
        ecam.read(0x18, &mut buses);
        assert_eq!(buses, [0x0c, 0x0d, 0x0e]);
    }
}
