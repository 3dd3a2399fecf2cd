//! NFIT (NVDIMM Firmware Interface Table), ACPI 6.5 §5.2.26.
//!
//! Per DIMM: an SPA range (type 0), a region mapping (type 1), an NVDIMM
//! control region (type 4) and, when the DIMM has one, a flush hint address
//! structure (type 6). One platform capabilities structure (type 7) closes
//! the table. Linux rejects the whole table when a structure has the wrong
//! length, so the lengths below are exact.

use crate::sdt::{Sdt, OEM_TABLE_ID};
use crate::NvdimmDescription;

/// NFIT revision.
const NFIT_REVISION: u8 = 1;
/// Structure type: System Physical Address range.
const TYPE_SPA: u16 = 0;
/// Structure type: NVDIMM region mapping.
const TYPE_REGION_MAPPING: u16 = 1;
/// Structure type: NVDIMM control region.
const TYPE_CONTROL_REGION: u16 = 4;
/// Structure type: flush hint address.
const TYPE_FLUSH_HINT: u16 = 6;
/// Structure type: platform capabilities.
const TYPE_PLATFORM_CAPABILITIES: u16 = 7;

/// Length of an SPA range structure.
pub const SPA_LEN: u16 = 56;
/// Length of a region mapping structure.
pub const REGION_MAPPING_LEN: u16 = 48;
/// Length of a control region structure (with the block-window fields).
pub const CONTROL_REGION_LEN: u16 = 80;
/// Length of a flush hint structure with one address.
pub const FLUSH_HINT_LEN: u16 = 24;
/// Length of the platform capabilities structure.
pub const PLATFORM_CAPABILITIES_LEN: u16 = 16;

/// Address range type GUID "Persistent Memory Region"
/// (66f0d379-b4f3-4074-ac43-0d3318b78cdb) in its in-table byte order.
pub const PERSISTENT_MEMORY_GUID: [u8; 16] = [
    0x79, 0xd3, 0xf0, 0x66, 0xf3, 0xb4, 0x74, 0x40, 0xac, 0x43, 0x0d, 0x33, 0x18, 0xb7, 0x8c, 0xdb,
];
/// SPA memory attributes: `EFI_MEMORY_WB | EFI_MEMORY_NV`.
const SPA_ATTRIBUTES: u64 = 0x8008;
/// Region mapping flag bit 3: "not armed" (Linux makes the region read-only).
pub const MAPPING_FLAG_NOT_ARMED: u16 = 1 << 3;

/// Control region vendor id: "PM" (0x504d), not a registered JEDEC id, so it
/// cannot be mistaken for real hardware. Stable across releases: it is part
/// of the DIMM id Linux writes into namespace labels.
pub const DCR_VENDOR_ID: u16 = 0x504d;
/// Control region device id.
pub const DCR_DEVICE_ID: u16 = 0x0001;
/// Control region revision id.
pub const DCR_REVISION_ID: u16 = 0x0001;
/// Manufacturing location reported in the control region.
pub const DCR_MFG_LOCATION: u8 = 0x01;
/// Manufacturing date reported in the control region.
pub const DCR_MFG_DATE: u16 = 0x2601;
/// Format interface code 0x0301: byte-addressable energy-backed persistent memory.
pub const FORMAT_INTERFACE_CODE: u16 = 0x0301;
/// Valid-fields bit 0: manufacturing location and date are valid.
const DCR_VALID_MFG: u8 = 1;

/// Platform capabilities: highest valid capability bit.
const CAPABILITIES_HIGHEST_VALID: u8 = 1;
/// Capability bit 1: the memory controller is flushed to persistence on
/// power loss. pmemvm does not claim bit 0 (CPU caches flushed): guest
/// stores sit in the host page cache until pmemvm fdatasyncs the backing
/// file, which it does on every flush-hint write.
pub const CAPABILITY_MEMORY_CONTROLLER_FLUSH: u32 = 1 << 1;

/// The NFIT device handle of the DIMM at `index` (0-based): `index + 1`,
/// like QEMU. Linux only uses the handle to match the NFIT structures to the
/// ACPI child device (`_ADR`) and shows it in sysfs; it places no meaning on
/// the socket/controller/channel bit fields, and handle 0 stays unused.
pub fn nfit_handle(index: u32) -> u32 {
    index.wrapping_add(1)
}

/// SPA range flag bit 1: the proximity domain field is valid.
pub const SPA_FLAG_PROXIMITY_VALID: u16 = 1 << 1;

/// One SPA range structure (type 0, 56 bytes) with range index `index`, in
/// proximity domain `domain` when given (flag bit 1; Linux maps it through
/// the SRAT to the region's `numa_node` and `target_node`).
pub fn spa_range(index: u16, base: u64, size: u64, domain: Option<u32>) -> Vec<u8> {
    let flags = if domain.is_some() {
        SPA_FLAG_PROXIMITY_VALID
    } else {
        0
    };
    let mut s = Vec::with_capacity(SPA_LEN.into());
    s.extend_from_slice(&TYPE_SPA.to_le_bytes()); // 0 type
    s.extend_from_slice(&SPA_LEN.to_le_bytes()); // 2 length
    s.extend_from_slice(&index.to_le_bytes()); // 4 SPA range structure index
    s.extend_from_slice(&flags.to_le_bytes()); // 6 flags
    s.extend_from_slice(&0u32.to_le_bytes()); // 8 reserved
    s.extend_from_slice(&domain.unwrap_or(0).to_le_bytes()); // 12 proximity domain
    s.extend_from_slice(&PERSISTENT_MEMORY_GUID); // 16 address range type GUID
    s.extend_from_slice(&base.to_le_bytes()); // 32 SPA range base
    s.extend_from_slice(&size.to_le_bytes()); // 40 SPA range length
    s.extend_from_slice(&SPA_ATTRIBUTES.to_le_bytes()); // 48 memory mapping attributes
    s
}

/// One region mapping structure (type 1, 48 bytes) mapping the whole DIMM
/// into SPA range `index` with control region `index`, not interleaved.
pub fn region_mapping(index: u16, handle: u32, size: u64, readonly: bool) -> Vec<u8> {
    let mut s = Vec::with_capacity(REGION_MAPPING_LEN.into());
    s.extend_from_slice(&TYPE_REGION_MAPPING.to_le_bytes()); // 0 type
    s.extend_from_slice(&REGION_MAPPING_LEN.to_le_bytes()); // 2 length
    s.extend_from_slice(&handle.to_le_bytes()); // 4 NFIT device handle
    s.extend_from_slice(&(index - 1).to_le_bytes()); // 8 NVDIMM physical id
    s.extend_from_slice(&0u16.to_le_bytes()); // 10 NVDIMM region id
    s.extend_from_slice(&index.to_le_bytes()); // 12 SPA range structure index
    s.extend_from_slice(&index.to_le_bytes()); // 14 control region structure index
    s.extend_from_slice(&size.to_le_bytes()); // 16 region size
    s.extend_from_slice(&0u64.to_le_bytes()); // 24 region offset
    s.extend_from_slice(&0u64.to_le_bytes()); // 32 physical address region base (DPA)
    s.extend_from_slice(&0u16.to_le_bytes()); // 40 interleave structure index
    s.extend_from_slice(&1u16.to_le_bytes()); // 42 interleave ways
    let flags = if readonly { MAPPING_FLAG_NOT_ARMED } else { 0 };
    s.extend_from_slice(&flags.to_le_bytes()); // 44 NVDIMM state flags
    s.extend_from_slice(&0u16.to_le_bytes()); // 46 reserved
    s
}

/// One NVDIMM control region structure (type 4, 80 bytes), byte
/// addressable (format interface code 0x0301), no block windows.
pub fn control_region(index: u16, serial: u32) -> Vec<u8> {
    let mut s = Vec::with_capacity(CONTROL_REGION_LEN.into());
    s.extend_from_slice(&TYPE_CONTROL_REGION.to_le_bytes()); // 0 type
    s.extend_from_slice(&CONTROL_REGION_LEN.to_le_bytes()); // 2 length
    s.extend_from_slice(&index.to_le_bytes()); // 4 control region structure index
    s.extend_from_slice(&DCR_VENDOR_ID.to_le_bytes()); // 6 vendor id
    s.extend_from_slice(&DCR_DEVICE_ID.to_le_bytes()); // 8 device id
    s.extend_from_slice(&DCR_REVISION_ID.to_le_bytes()); // 10 revision id
    s.extend_from_slice(&DCR_VENDOR_ID.to_le_bytes()); // 12 subsystem vendor id
    s.extend_from_slice(&DCR_DEVICE_ID.to_le_bytes()); // 14 subsystem device id
    s.extend_from_slice(&DCR_REVISION_ID.to_le_bytes()); // 16 subsystem revision id
    s.push(DCR_VALID_MFG); // 18 valid fields
    s.push(DCR_MFG_LOCATION); // 19 manufacturing location
    s.extend_from_slice(&DCR_MFG_DATE.to_le_bytes()); // 20 manufacturing date
    s.extend_from_slice(&[0; 2]); // 22 reserved
    s.extend_from_slice(&serial.to_le_bytes()); // 24 serial number
    s.extend_from_slice(&FORMAT_INTERFACE_CODE.to_le_bytes()); // 28 region format interface code
    s.extend_from_slice(&0u16.to_le_bytes()); // 30 number of block control windows
    s.extend_from_slice(&[0; 40]); // 32 block control/command/status window fields
    s.extend_from_slice(&0u16.to_le_bytes()); // 72 NVDIMM control region flags
    s.extend_from_slice(&[0; 6]); // 74 reserved
    s
}

/// One flush hint address structure (type 6) with a single hint address.
pub fn flush_hint(handle: u32, addr: u64) -> Vec<u8> {
    let mut s = Vec::with_capacity(FLUSH_HINT_LEN.into());
    s.extend_from_slice(&TYPE_FLUSH_HINT.to_le_bytes()); // 0 type
    s.extend_from_slice(&FLUSH_HINT_LEN.to_le_bytes()); // 2 length
    s.extend_from_slice(&handle.to_le_bytes()); // 4 NFIT device handle
    s.extend_from_slice(&1u16.to_le_bytes()); // 8 number of flush hint addresses
    s.extend_from_slice(&[0; 6]); // 10 reserved
    s.extend_from_slice(&addr.to_le_bytes()); // 16 flush hint address
    s
}

/// The platform capabilities structure (type 7, 16 bytes).
pub fn platform_capabilities() -> Vec<u8> {
    let mut s = Vec::with_capacity(PLATFORM_CAPABILITIES_LEN.into());
    s.extend_from_slice(&TYPE_PLATFORM_CAPABILITIES.to_le_bytes()); // 0 type
    s.extend_from_slice(&PLATFORM_CAPABILITIES_LEN.to_le_bytes()); // 2 length
    s.push(CAPABILITIES_HIGHEST_VALID); // 4 highest valid capability
    s.extend_from_slice(&[0; 3]); // 5 reserved
    s.extend_from_slice(&CAPABILITY_MEMORY_CONTROLLER_FLUSH.to_le_bytes()); // 8 capabilities
    s.extend_from_slice(&[0; 4]); // 12 reserved
    s
}

/// The NFIT's structures for `dimms`, without the table's header: what
/// `_FIT` returns. The caller has checked that there are at most 65535
/// DIMMs (structure indices are 16 bits).
pub fn fit(dimms: &[NvdimmDescription]) -> Vec<u8> {
    let mut s = Vec::new();
    for (i, d) in dimms.iter().enumerate() {
        let index = u16::try_from(i + 1).unwrap_or(u16::MAX);
        s.extend(spa_range(index, d.spa_base, d.spa_size, d.proximity_domain));
        s.extend(region_mapping(index, d.handle, d.spa_size, d.readonly));
        s.extend(control_region(index, d.serial));
        if let Some(addr) = d.flush_hint_addr {
            s.extend(flush_hint(d.handle, addr));
        }
    }
    s.extend(platform_capabilities());
    s
}

/// Bytes of the NFIT before its structures: the header and 4 reserved.
pub const HEADER_LEN: usize = 40;

/// Builds the NFIT for `dimms`: the header, then [`fit`].
pub fn build(dimms: &[NvdimmDescription]) -> Vec<u8> {
    let mut t = Sdt::new(*b"NFIT", NFIT_REVISION, OEM_TABLE_ID);
    t.u32(0); // 36 reserved
    t.append(&fit(dimms));
    t.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sdt::checksum;

    #[test]
    fn spa_range_golden() {
        // Type 0000 [System Physical Address Range], Length 0038
        // Range Index 0001, Flags 0000, Reserved, Proximity Domain 0,
        // Region Type GUID 66F0D379-B4F3-4074-AC43-0D3318B78CDB,
        // Address Range Base 0000000100000000, Length 0000000010000000,
        // Memory Map Attribute 0000000000008008 (WB | NV)
        #[rustfmt::skip]
        let expected: [u8; 56] = [
            0x00, 0x00, 0x38, 0x00,                         // type, length
            0x01, 0x00, 0x00, 0x00,                         // range index, flags
            0x00, 0x00, 0x00, 0x00,                         // reserved
            0x00, 0x00, 0x00, 0x00,                         // proximity domain
            0x79, 0xd3, 0xf0, 0x66, 0xf3, 0xb4, 0x74, 0x40, // GUID
            0xac, 0x43, 0x0d, 0x33, 0x18, 0xb7, 0x8c, 0xdb,
            0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, // base
            0x00, 0x00, 0x00, 0x10, 0x00, 0x00, 0x00, 0x00, // length
            0x08, 0x80, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // attributes
        ];
        assert_eq!(spa_range(1, 0x1_0000_0000, 0x1000_0000, None), expected);
        // Proximity domain 1: Flags 0002 (Proximity Domain Valid), domain 00000001.
        let mut with = expected;
        with[6] = 0x02;
        with[12] = 0x01;
        assert_eq!(spa_range(1, 0x1_0000_0000, 0x1000_0000, Some(1)), with);
    }

    #[test]
    fn region_mapping_golden() {
        // Type 0001 [Memory Range Map], Length 0030, Device Handle 00000002,
        // Physical Id 0001, Region Id 0000, Range Index 0002, Control Region
        // Index 0002, Region Size 0000000040000000, Region Offset 0, Address
        // Region Base 0, Interleave Index 0, Interleave Ways 0001,
        // Flags 0008 (Device not armed), Reserved 0000
        #[rustfmt::skip]
        let expected: [u8; 48] = [
            0x01, 0x00, 0x30, 0x00,                         // type, length
            0x02, 0x00, 0x00, 0x00,                         // device handle
            0x01, 0x00, 0x00, 0x00,                         // physical id, region id
            0x02, 0x00, 0x02, 0x00,                         // SPA index, DCR index
            0x00, 0x00, 0x00, 0x40, 0x00, 0x00, 0x00, 0x00, // region size
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // region offset
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // DPA base
            0x00, 0x00, 0x01, 0x00,                         // interleave index, ways
            0x08, 0x00, 0x00, 0x00,                         // flags, reserved
        ];
        assert_eq!(region_mapping(2, 2, 0x4000_0000, true), expected);
        // Writable: flags 0.
        assert_eq!(region_mapping(2, 2, 0x4000_0000, false)[44..46], [0, 0]);
    }

    #[test]
    fn control_region_golden() {
        // Type 0004 [NVDIMM Control Region], Length 0050, Region Index 0001,
        // Vendor Id 504D, Device Id 0001, Revision Id 0001, Subsystem Vendor
        // 504D, Device 0001, Revision 0001, Valid Fields 01, Manufacturing
        // Location 01, Date 2601, Serial Number 12345678, Code 0301,
        // Window Count 0, window fields 0, Flags 0
        #[rustfmt::skip]
        let mut expected = vec![
            0x04, 0x00, 0x50, 0x00,                         // type, length
            0x01, 0x00, 0x4d, 0x50,                         // index, vendor
            0x01, 0x00, 0x01, 0x00,                         // device, revision
            0x4d, 0x50, 0x01, 0x00,                         // subsystem vendor, device
            0x01, 0x00, 0x01, 0x01,                         // subsystem rev, valid, location
            0x01, 0x26, 0x00, 0x00,                         // date, reserved
            0x78, 0x56, 0x34, 0x12,                         // serial
            0x01, 0x03, 0x00, 0x00,                         // format code, windows
        ];
        expected.extend_from_slice(&[0; 48]); // window fields, flags, reserved
        assert_eq!(control_region(1, 0x1234_5678), expected);
    }

    #[test]
    fn flush_hint_golden() {
        // Type 0006 [Flush Hint Address], Length 0018, Device Handle 00000001,
        // Hint Count 0001, Reserved, Hint Address 00000000FE000000
        #[rustfmt::skip]
        let expected: [u8; 24] = [
            0x06, 0x00, 0x18, 0x00, 0x01, 0x00, 0x00, 0x00,
            0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
            0x00, 0x00, 0x00, 0xfe, 0x00, 0x00, 0x00, 0x00,
        ];
        assert_eq!(flush_hint(1, 0xfe00_0000), expected);
    }

    #[test]
    fn platform_capabilities_golden() {
        // Type 0007 [Platform Capabilities], Length 0010, Highest Capability
        // 01, Capabilities 00000002 (Memory Flush to NVDIMM, not Cache Flush)
        #[rustfmt::skip]
        let expected: [u8; 16] = [
            0x07, 0x00, 0x10, 0x00, 0x01, 0x00, 0x00, 0x00,
            0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        ];
        assert_eq!(platform_capabilities(), expected);
    }

    #[test]
    fn structure_lengths_match_their_length_fields() {
        for s in [
            spa_range(1, 0, 1, Some(3)),
            region_mapping(1, 1, 1, false),
            control_region(1, 0),
            flush_hint(1, 0),
            platform_capabilities(),
        ] {
            assert_eq!(usize::from(u16::from_le_bytes([s[2], s[3]])), s.len());
        }
    }

    fn dimm(i: u32, hint: bool) -> NvdimmDescription {
        NvdimmDescription {
            handle: nfit_handle(i),
            spa_base: (4 + u64::from(i)) << 30,
            spa_size: 1 << 30,
            flush_hint_addr: hint.then_some(0xfe00_0000 + u64::from(i) * 0x1000),
            readonly: false,
            serial: i,
            label_size: 0,
            proximity_domain: None,
        }
    }

    #[test]
    fn table_size_and_order() {
        let t = build(&[dimm(0, true), dimm(1, false)]);
        // 36 header + 4 reserved + (56 + 48 + 80 + 24) + (56 + 48 + 80) + 16
        assert_eq!(t.len(), 40 + 208 + 184 + 16);
        assert_eq!(checksum(&t), 0);
        assert_eq!(&t[0..4], b"NFIT");
        assert_eq!(t[8], 1);
        assert_eq!(
            u32::from_le_bytes([t[4], t[5], t[6], t[7]]) as usize,
            t.len()
        );
        // Walk the structures: types in order.
        let mut off = 40;
        let mut types = Vec::new();
        while off < t.len() {
            types.push(u16::from_le_bytes([t[off], t[off + 1]]));
            off += usize::from(u16::from_le_bytes([t[off + 2], t[off + 3]]));
        }
        assert_eq!(off, t.len());
        assert_eq!(types, [0, 1, 4, 6, 0, 1, 4, 7]);
    }

    #[test]
    fn handles() {
        assert_eq!(nfit_handle(0), 1);
        assert_eq!(nfit_handle(255), 256);
    }
}
