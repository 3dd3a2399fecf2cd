//! The Type-3 configuration space read as Linux's PCI core and `cxl_pci`
//! read it (`pci_find_ext_capability`, `pci_find_dvsec_capability`,
//! `cxl_find_regblock`, BAR sizing).

use super::*;

const GIB: u64 = 1 << 30;

fn r32(c: &ConfigSpace, at: usize) -> u32 {
    let mut b = [0u8; 4];
    c.read(at as u64, &mut b);
    u32::from_le_bytes(b)
}

fn w32(c: &mut ConfigSpace, at: usize, v: u32) {
    c.write(at as u64, &v.to_le_bytes());
}

/// Extended capabilities as (id, offset), following the next pointers.
fn ext_caps(c: &ConfigSpace) -> Vec<(u32, usize)> {
    let mut out = Vec::new();
    let mut at = 0x100;
    while at != 0 && out.len() < 64 {
        let h = r32(c, at);
        out.push((h & 0xffff, at));
        at = (h >> 20) as usize;
    }
    out
}

/// Linux's `pci_find_dvsec_capability(dev, PCI_DVSEC_VENDOR_ID_CXL, id)`.
fn dvsec(c: &ConfigSpace, id: u16) -> Option<usize> {
    ext_caps(c).into_iter().find_map(|(cap, at)| {
        let h1 = r32(c, at + 4);
        let h2 = r32(c, at + 8);
        (cap == 0x23 && h1 & 0xffff == u32::from(CXL_DVSEC_VENDOR) && h2 & 0xffff == u32::from(id))
            .then_some(at)
    })
}

#[test]
fn cxl_pci_binds_by_class_and_finds_serial_and_both_dvsecs() {
    let c = type3_endpoint(0x5eed_0001, 4 * GIB);
    assert_eq!(
        r32(&c, 0),
        u32::from(DEVICE_ID) << 16 | u32::from(VENDOR_ID)
    );
    assert_eq!(
        r32(&c, 0x08) >> 8,
        0x05_02_10,
        "class memory / CXL / prog-if 0x10"
    );
    assert_eq!(r32(&c, 0x0c) >> 16 & 0x7f, 0, "header type 0");
    assert_eq!(r32(&c, 0x3c) >> 8 & 0xff, 0, "no interrupt pin");
    // The capability list: PCI Express, endpoint.
    assert_ne!(r32(&c, 0x04) >> 16 & 1 << 4, 0);
    let pcie = (r32(&c, 0x34) & 0xff) as usize;
    assert_eq!(r32(&c, pcie) & 0xff, 0x10);
    assert_eq!(r32(&c, pcie) >> 16 & 0xf, 2, "capability version 2");
    assert_eq!(r32(&c, pcie) >> 20 & 0xf, 0, "port type: endpoint");
    assert_ne!(r32(&c, pcie + 4) & 1 << 15, 0, "Device Capabilities: RBER");
    let caps = ext_caps(&c);
    assert_eq!(
        caps.iter().map(|c| c.0).collect::<Vec<_>>(),
        [0x3, 0x23, 0x23]
    );
    assert_eq!(
        u64::from(r32(&c, 0x104)) | u64::from(r32(&c, 0x108)) << 32,
        0x5eed_0001
    );
    assert_eq!(dvsec(&c, 0), Some(0x110));
    assert_eq!(dvsec(&c, 8), Some(0x148));
    assert_eq!(dvsec(&c, 3), None);
}

#[test]
fn dvsec_0_is_mem_capable_with_one_valid_active_range_of_the_capacity() {
    let mut c = type3_endpoint(1, 4 * GIB + (1 << 28));
    let d = dvsec(&c, 0).unwrap();
    assert_eq!(r32(&c, d + 4) >> 20, 0x38, "length");
    let cap = r32(&c, d + 8) >> 16;
    assert_ne!(cap & 1 << 2, 0, "Mem_Capable");
    assert_eq!(cap >> 4 & 3, 1, "HDM_Count 1");
    let (hi, lo) = (r32(&c, d + 0x18), r32(&c, d + 0x1c));
    assert_eq!(lo & 0b11, 0b11, "Mem_Info_Valid and Mem_Active");
    assert_eq!(
        u64::from(hi) << 32 | u64::from(lo & 0xf000_0000),
        4 * GIB + (1 << 28)
    );
    // Mem_Enable reads 0 at reset and is writable; IO_Enable reads 1 and
    // stays; the capability is read-only.
    assert!(!c.mem_enabled());
    assert_eq!(r32(&c, d + 0x0c) & 0xffff, 1 << 1, "IO_Enable");
    c.write((d + 0x0c) as u64, &[0xff, 0xff]);
    assert!(c.mem_enabled());
    c.write((d + 0x0c) as u64, &[0, 0]);
    assert_eq!(r32(&c, d + 0x0c) & 0xffff, 1 << 1, "IO_Enable is read-only");
    assert!(!c.mem_enabled());
    w32(&mut c, d + 8, 0);
    assert_eq!(r32(&c, d + 8) >> 16, cap);
    // Range base: address bits writable, size read-only.
    w32(&mut c, d + 0x24, 0xffff_ffff);
    w32(&mut c, d + 0x1c, 0);
    assert_eq!(r32(&c, d + 0x24), 0xf000_0000);
    assert_eq!(r32(&c, d + 0x1c), lo);
}

#[test]
fn the_register_locator_names_component_and_memdev_blocks_in_bar0() {
    let c = type3_endpoint(1, GIB);
    let d = dvsec(&c, 8).unwrap();
    let len = (r32(&c, d + 4) >> 20) as usize;
    let blocks: Vec<(u32, u32, u64)> = (0..(len - 0x0c) / 8)
        .map(|i| {
            let lo = r32(&c, d + 0x0c + 8 * i);
            let hi = r32(&c, d + 0x10 + 8 * i);
            (
                lo & 7,
                lo >> 8 & 0xff,
                u64::from(hi) << 32 | u64::from(lo & 0xffff_0000),
            )
        })
        .collect();
    assert_eq!(blocks, [(0, 1, 0), (0, 3, DEVICE_REGS_OFFSET)]);
}

#[test]
fn bar0_sizes_as_128k_64bit_and_decodes_only_with_memory_enabled() {
    let mut c = type3_endpoint(1, GIB);
    w32(&mut c, 0x10, 0xffff_ffff);
    w32(&mut c, 0x14, 0xffff_ffff);
    let lo = r32(&c, 0x10);
    assert_eq!(lo & 0xf, 0b0100, "64-bit memory, not prefetchable");
    let size_mask = u64::from(r32(&c, 0x14)) << 32 | u64::from(lo & !0xf);
    assert_eq!(!size_mask + 1, BAR0_SIZE);
    w32(&mut c, 0x10, 0xfe02_0000);
    w32(&mut c, 0x14, 0x1);
    assert_eq!(c.bar0(), None, "memory decoding off");
    c.write(0x04, &[0x06, 0x00]);
    assert_eq!(c.bar0(), Some(0x1_fe02_0000));
    // Read-only ids and class.
    w32(&mut c, 0, 0);
    w32(&mut c, 8, 0);
    assert_eq!(r32(&c, 0) & 0xffff, u32::from(VENDOR_ID));
    assert_eq!(r32(&c, 8) >> 8, 0x05_02_10);
}

#[test]
fn hostile_offsets_and_widths_are_harmless() {
    let mut c = type3_endpoint(1, GIB);
    let before = (0..CONFIG_LEN)
        .step_by(4)
        .map(|a| r32(&c, a))
        .collect::<Vec<_>>();
    c.write(u64::MAX, &[0xff; 8]);
    c.write(CONFIG_LEN as u64 - 2, &[0xff; 8]);
    // The serial number and the register locator.
    c.write(0x100, &[0xff; 0x10]);
    c.write(0x148, &[0xff; 0x1c]);
    let after = (0..CONFIG_LEN)
        .step_by(4)
        .map(|a| r32(&c, a))
        .collect::<Vec<_>>();
    assert_eq!(
        before, after,
        "read-only capabilities, nothing past the space"
    );
    let mut b = [0xaa; 8];
    c.read(CONFIG_LEN as u64 - 4, &mut b);
    assert_eq!(&b[4..], &[0; 4]);
}

/// The standard capability list from 0x34, as (id, offset).
fn caps(c: &ConfigSpace) -> Vec<(u32, usize)> {
    let mut out = Vec::new();
    let mut at = (r32(c, 0x34) & 0xfc) as usize;
    while at != 0 && out.len() < 48 {
        let h = r32(c, at);
        out.push((h & 0xff, at));
        at = (h >> 8 & 0xfc) as usize;
    }
    out
}

#[test]
fn msi_follows_the_pcie_capability_with_one_vector_and_a_64bit_address() {
    let c = type3_endpoint(1, GIB);
    assert_eq!(caps(&c), [(0x10, 0x40), (0x05, 0x80)]);
    let control = r32(&c, 0x80) >> 16;
    assert_eq!(
        control,
        1 << 7,
        "64-bit, one vector capable, disabled, no masking"
    );
    assert_eq!(c.msi(), None);
}

#[test]
fn msi_takes_enable_address_and_data_and_gives_the_message_only_when_enabled() {
    let mut c = type3_endpoint(1, GIB);
    // As Linux's pci_msi_setup: address and data first, then enable.
    w32(&mut c, 0x84, 0xfee0_100f);
    w32(&mut c, 0x88, 0x0000_0001);
    w32(&mut c, 0x8c, 0xffff_4021);
    assert_eq!(r32(&c, 0x84), 0xfee0_100c, "address bits 1:0 read 0");
    assert_eq!(r32(&c, 0x8c), 0x4021, "16-bit data; the rest reserved");
    // Every control bit but enable is read-only (MME 0: one vector).
    c.write(0x82, &[0xff, 0xff]);
    assert_eq!(r32(&c, 0x80) >> 16, 1 << 7 | 1);
    assert_eq!(c.msi(), None, "no bus mastering yet");
    c.write(0x04, &[0x04, 0x04]); // bus master, INTx disable
    assert_eq!(
        c.msi(),
        Some(MsiMessage {
            address: 0x1_fee0_100c,
            data: 0x4021
        })
    );
    c.write(0x82, &[0, 0]);
    assert_eq!(c.msi(), None, "MSI disabled");
    // The header and next pointer are read-only.
    w32(&mut c, 0x80, 0xffff_ffff);
    assert_eq!(r32(&c, 0x80) & 0xffff, 0x0005);
    assert_eq!(caps(&c), [(0x10, 0x40), (0x05, 0x80)]);
}
