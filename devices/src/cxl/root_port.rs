//! The configuration space of a CXL root port under a CXL host bridge: the
//! one bridge Linux 6.1 accepts between a host bridge's root bus and a
//! Type-3 device (`devm_cxl_port_enumerate_dports` takes only PCIe root
//! ports there). A type-1 header with bus numbers and memory windows the
//! guest programs, and a PCI Express capability of a root port whose Link
//! Capabilities carry the port number — the dport id Linux writes into the
//! host bridge's HDM target lists. No BAR, no I/O window, no interrupt pin,
//! no CXL DVSEC (neither kernel reads one on a root port).

use super::pci_config::ConfigSpace;

/// QEMU's `cxl-rp` ids (Intel 8086:7075).
pub const ROOT_PORT_IDS: (u16, u16) = (0x8086, 0x7075);
const PCIE_CAP: usize = 0x40;

/// The root port with `port_number` (unique under its host bridge).
pub fn root_port(port_number: u8) -> ConfigSpace {
    let mut c = ConfigSpace::empty();
    c.put16(0x00, ROOT_PORT_IDS.0);
    c.put16(0x02, ROOT_PORT_IDS.1);
    // Command: memory space, bus master, SERR#, INTx disable.
    let command: u16 = 1 << 1 | 1 << 2 | 1 << 8 | 1 << 10;
    c.put(0x04, &[0, 0], &command.to_le_bytes());
    c.put16(0x06, 1 << 4); // status: capabilities list
    c.put32(0x08, 0x0604_0000); // class: PCI-to-PCI bridge
    c.put(0x0c, &[0, 0, 0x01, 0], &[]); // header type 1
                                        // Primary, secondary and subordinate bus numbers.
    c.put(0x18, &[0; 3], &[0xff; 3]);
    // Memory base and limit: address bits 31:20 in bits 15:4.
    c.put(0x20, &[0; 4], &[0xf0, 0xff, 0xf0, 0xff]);
    // Prefetchable base and limit, 64-bit (type 1 in bits 3:0), and their
    // upper halves.
    c.put(0x24, &[0x01, 0, 0x01, 0], &[0xf0, 0xff, 0xf0, 0xff]);
    c.put(0x28, &[0; 8], &[0xff; 8]);
    c.put(0x34, &[u8::try_from(PCIE_CAP).unwrap_or(0)], &[]);
    // Bridge control: parity, SERR#, ISA, VGA, master abort, secondary reset.
    c.put(0x3e, &[0, 0], &0x007fu16.to_le_bytes());
    // PCI Express capability, version 2, root port (type 4).
    c.put16(PCIE_CAP, 0x0010);
    c.put16(PCIE_CAP + 2, 0x0002 | 4 << 4);
    // Device Capabilities: Role-Based Error Reporting.
    c.put32(PCIE_CAP + 4, 1 << 15);
    // Link Capabilities: the port number in bits 31:24, x1 at 2.5 GT/s.
    c.put32(PCIE_CAP + 0x0c, u32::from(port_number) << 24 | 1 << 4 | 1);
    // Link Status: x1 at 2.5 GT/s.
    c.put16(PCIE_CAP + 0x12, 1 << 4 | 1);
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r32(c: &ConfigSpace, at: u64) -> u32 {
        let mut b = [0u8; 4];
        c.read(at, &mut b);
        u32::from_le_bytes(b)
    }

    #[test]
    fn linux_sees_a_root_port_with_its_port_number() {
        let c = root_port(3);
        assert_eq!(r32(&c, 0x08) >> 8, 0x06_04_00, "PCI-to-PCI bridge");
        assert_eq!(r32(&c, 0x0c) >> 16 & 0x7f, 1, "header type 1");
        let cap = u64::from(r32(&c, 0x34) & 0xff);
        let head = r32(&c, cap);
        assert_eq!(head & 0xff, 0x10, "PCI Express capability");
        assert_eq!(head >> 20 & 0xf, 4, "PCI_EXP_TYPE_ROOT_PORT");
        assert_eq!(
            r32(&c, cap + 0x0c) >> 24,
            3,
            "Link Capabilities: port number"
        );
        assert_ne!(r32(&c, cap + 4) & 1 << 15, 0, "Device Capabilities: RBER");
        assert_eq!(r32(&c, 0x100), 0, "no extended capability");
        assert_eq!(r32(&c, 0x10) | r32(&c, 0x14), 0, "no BAR");
        assert_eq!(r32(&c, 0x3c) >> 8 & 0xff, 0, "no interrupt pin");
    }

    #[test]
    fn bus_numbers_and_windows_are_programmable_the_rest_read_only() {
        let mut c = root_port(0);
        c.write(0x18, &[0x0c, 0x0d, 0x0f, 0xff]);
        assert_eq!(r32(&c, 0x18) & 0xff_ffff, 0x0f_0d_0c);
        c.write(0x20, &0xfeb0_fea0u32.to_le_bytes());
        assert_eq!(r32(&c, 0x20), 0xfeb0_fea0);
        c.write(0x24, &0xffff_ffffu32.to_le_bytes());
        assert_eq!(
            r32(&c, 0x24) & 0x000f_000f,
            0x0001_0001,
            "64-bit prefetchable"
        );
        c.write(0x1c, &[0xff; 4]);
        assert_eq!(r32(&c, 0x1c) & 0xffff, 0, "no I/O window");
        c.write(0x40, &[0xff; 0x40]);
        assert_eq!(r32(&c, 0x4c) >> 24, 0, "the capability is read-only");
        c.write(0, &[0; 4]);
        assert_eq!(r32(&c, 0), 0x7075_8086);
    }
}
