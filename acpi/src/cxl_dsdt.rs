//! The DSDT's CXL objects, for the `\_SB` scope: the CXL root and one PCI
//! root per CXL host bridge, as Linux's `cxl_acpi` and the ACPI PCI root
//! driver find them:
//!
//! ```text
//! Device (CXLM) { Name (_HID, "ACPI0017") }   // the CXL root
//! Device (CH00) {                             // one per host bridge, CH00, CH01, ...
//!     Name (_HID, "ACPI0016")                 // exactly this _HID: cxl_acpi compares it
//!     Name (_CID, Package () { EisaId ("PNP0A08"), EisaId ("PNP0A03") })  // PNP0A03 binds pci_root
//!     Name (_UID, uid)                        // an integer, the CEDT CHBS's uid
//!     Name (_BBN, root bus)
//!     Name (_CRS, ResourceTemplate () {
//!         WordBusNumber (root bus .. last bus)
//!         DWordMemory (the BAR window below 4 GiB)
//!     })
//!     Method (_OSC, 4, Serialized) { ... }    // see below
//! }
//! ```
//!
//! The `_OSC` answers the PCI Express UUID and the CXL one (CXL 2.0 9.14.2,
//! five dwords) and grants two controls: PCI Express Capability Structure
//! control (bit 4 of the control dword; hot-plug, SHPC, PME, AER and LTR stay
//! with the platform: the root ports have no interrupt) and CXL Memory Error
//! Reporting control (bit 0 of the CXL control dword), so Linux reads the
//! memory devices' event logs itself (`native_cxl_error`). Any other control
//! asked for is masked off with the "capabilities masked" bit, as firmware
//! does; another UUID gets "unrecognized UUID", another revision
//! "unrecognized revision", a CXL buffer shorter than five dwords "failure".
//!
//! and the ECAM as a motherboard resource, where Linux looks for it before
//! it uses the MCFG's window (`is_acpi_reserved`, arch/x86/pci/mmconfig-shared.c):
//!
//! ```text
//! Device (CXLR) {
//!     Name (_HID, EisaId ("PNP0C02"))
//!     Name (_UID, "CXL ECAM")
//!     Name (_CRS, ResourceTemplate () { Memory32Fixed (ReadWrite, ECAM, its size) })
//! }
//! ```
//!
//! The fixed memory windows and the component registers stay out of every
//! `_CRS` (and out of E820): Linux claims them itself.

use crate::aml;
use crate::CxlDescription;

fn eisa(id: &str) -> Vec<u8> {
    aml::integer(u64::from(aml::eisa_id(id).unwrap_or(0)))
}

/// The CXL root, a device per host bridge, in `cxl.host_bridges` order (at
/// most 256: the names are `CH00` to `CHFF`), and the ECAM's reservation.
pub fn devices(cxl: &CxlDescription) -> Vec<Vec<u8>> {
    let mut out = vec![aml::device(
        "CXLM",
        &[aml::name("_HID", &aml::string("ACPI0017"))],
    )];
    for (i, b) in cxl.host_bridges.iter().enumerate().take(256) {
        out.push(aml::device(
            &format!("CH{i:02X}"),
            &[
                aml::name("_HID", &aml::string("ACPI0016")),
                aml::name("_CID", &aml::package(&[eisa("PNP0A08"), eisa("PNP0A03")])),
                aml::name("_UID", &aml::integer(u64::from(b.uid))),
                aml::name("_BBN", &aml::integer(u64::from(b.buses.0))),
                aml::name(
                    "_CRS",
                    &aml::resource::template(&[
                        word_bus_number(b.buses.0, b.buses.1),
                        dword_memory(b.mmio32.0, b.mmio32.1),
                    ]),
                ),
                osc_method(),
            ],
        ));
    }
    let ecam = &cxl.ecam;
    let start = ecam.base + (u64::from(ecam.first_bus) << 20);
    out.push(aml::device(
        "CXLR",
        &[
            aml::name("_HID", &eisa("PNP0C02")),
            aml::name("_UID", &aml::string("CXL ECAM")),
            aml::name(
                "_CRS",
                &aml::resource::template(&[aml::resource::memory32_fixed(
                    u32::try_from(start).unwrap_or(0),
                    u32::try_from(ecam.size()).unwrap_or(0),
                )]),
            ),
        ],
    ));
    out
}

/// The PCI Firmware Specification's `_OSC` UUID for PCI Express host bridges.
pub const PCI_OSC_UUID: &str = "33db4d5b-1ff7-401c-9657-7441c03dd766";
/// The CXL host bridges' `_OSC` UUID (CXL 2.0 9.14.2).
pub const CXL_OSC_UUID: &str = "68f2d50b-c469-4d8a-bd3d-941a103fd3fc";
/// PCIe controls granted (dword 3): PCI Express Capability Structure only.
pub const PCIE_CONTROLS_GRANTED: u64 = 1 << 4;
/// CXL controls granted (dword 5): CXL Memory Error Reporting.
pub const CXL_CONTROLS_GRANTED: u64 = 1;
/// `_OSC` status bits in dword 1.
const OSC_FAILURE: u64 = 1 << 1;
const OSC_UNRECOGNIZED_UUID: u64 = 1 << 2;
const OSC_UNRECOGNIZED_REVISION: u64 = 1 << 3;
const OSC_CAPABILITIES_MASKED: u64 = 1 << 4;

/// `If (field != granted & field) { CDW1 |= masked }; field &= granted`,
/// with `Local(n)` as the scratch value.
fn grant_only(field: &str, granted: u64, scratch: u8) -> Vec<Vec<u8>> {
    let cdw1 = aml::path("CDW1");
    vec![
        aml::and_into(
            &aml::path(field),
            &aml::integer(granted),
            &aml::local(scratch),
        ),
        aml::if_(
            &aml::lnot(&aml::lequal(&aml::path(field), &aml::local(scratch))),
            &[aml::or_into(
                &cdw1,
                &aml::integer(OSC_CAPABILITIES_MASKED),
                &cdw1,
            )],
        ),
        aml::store(&aml::local(scratch), &aml::path(field)),
    ]
}

/// The host bridge's `_OSC (UUID, revision, count, capabilities)`: returns
/// the capabilities buffer with the granted controls (module docs).
fn osc_method() -> Vec<u8> {
    let uuid_is = |text: &str| {
        let bytes = aml::uuid(text).unwrap_or([0; 16]);
        aml::lequal(&aml::arg(0), &aml::buffer(&bytes))
    };
    let cdw1 = aml::path("CDW1");
    let set = |bit: u64| aml::or_into(&cdw1, &aml::integer(bit), &cdw1);
    let mut cxl = vec![aml::create_dword_field(&aml::arg(3), 16, "CDW5")];
    cxl.extend(grant_only("CDW5", CXL_CONTROLS_GRANTED, 1));
    let cxl_long_enough = aml::lgreater(&aml::size_of(&aml::arg(3)), &aml::integer(19));
    let mut known = vec![aml::create_dword_field(&aml::arg(3), 8, "CDW3")];
    known.extend(grant_only("CDW3", PCIE_CONTROLS_GRANTED, 0));
    known.push(aml::if_(
        &uuid_is(CXL_OSC_UUID),
        &[
            aml::if_(&cxl_long_enough, &cxl),
            aml::else_(&[set(OSC_FAILURE)]),
        ],
    ));
    known.push(aml::if_(
        &aml::lnot(&aml::lequal(&aml::arg(1), &aml::integer(1))),
        &[set(OSC_UNRECOGNIZED_REVISION)],
    ));
    aml::method(
        "_OSC",
        4,
        true,
        &[
            aml::create_dword_field(&aml::arg(3), 0, "CDW1"),
            aml::if_(
                &aml::lor(&uuid_is(PCI_OSC_UUID), &uuid_is(CXL_OSC_UUID)),
                &known,
            ),
            aml::else_(&[set(OSC_UNRECOGNIZED_UUID)]),
            aml::ret(&aml::arg(3)),
        ],
    )
}

/// General flags of an address space descriptor the bridge produces: a
/// fixed minimum and maximum, positive decode.
const PRODUCER_FIXED: u8 = 0b1100;

/// `WordBusNumber (ResourceProducer, MinFixed, MaxFixed, PosDecode, 0,
/// first, last, 0, count)`.
fn word_bus_number(first: u8, last: u8) -> Vec<u8> {
    let last = last.max(first);
    let mut v = vec![0x88, 0x0d, 0x00, 0x02, PRODUCER_FIXED, 0x00];
    for field in [
        0,
        u16::from(first),
        u16::from(last),
        0,
        u16::from(last - first) + 1,
    ] {
        v.extend_from_slice(&field.to_le_bytes());
    }
    v
}

/// `DWordMemory (ResourceProducer, PosDecode, MinFixed, MaxFixed,
/// NonCacheable, ReadWrite, 0, base, base + len − 1, 0, len)`.
fn dword_memory(base: u32, len: u32) -> Vec<u8> {
    let max = base.saturating_add(len.saturating_sub(1));
    let mut v = vec![0x87, 0x17, 0x00, 0x00, PRODUCER_FIXED, 0x01];
    for field in [0, base, max, 0, len] {
        v.extend_from_slice(&field.to_le_bytes());
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptors_have_the_lengths_and_fields_acpi_gives_them() {
        let w = word_bus_number(0x0c, 0x0f);
        assert_eq!(w.len(), 3 + 0x0d);
        assert_eq!(&w[..6], &[0x88, 0x0d, 0, 2, 0x0c, 0]);
        assert_eq!(&w[8..12], &[0x0c, 0, 0x0f, 0]);
        assert_eq!(&w[14..16], &[4, 0], "four buses");
        let d = dword_memory(0xfe00_0000, 0x10_0000);
        assert_eq!(d.len(), 3 + 0x17);
        assert_eq!(&d[10..14], &0xfe00_0000u32.to_le_bytes());
        assert_eq!(&d[14..18], &0xfe0f_ffffu32.to_le_bytes());
        assert_eq!(&d[22..26], &0x10_0000u32.to_le_bytes());
    }

    #[test]
    fn one_root_one_bridge_per_host_bridge_and_the_ecam_reserved() {
        let b = crate::cedt::HostBridge {
            uid: 12,
            registers: 0xfe80_0000,
            buses: (0x0c, 0x0f),
            mmio32: (0xfe00_0000, 0x10_0000),
        };
        let cxl = CxlDescription {
            host_bridges: vec![b, crate::cedt::HostBridge { uid: 16, ..b }],
            windows: Vec::new(),
            ecam: crate::mcfg::EcamWindow {
                base: 0xe000_0000,
                segment: 0,
                first_bus: 0x0c,
                last_bus: 0x0f,
            },
        };
        let d = devices(&cxl);
        assert_eq!(d.len(), 4);
        let has = |bytes: &[u8], needle: &[u8]| bytes.windows(needle.len()).any(|w| w == needle);
        assert!(has(&d[0], b"ACPI0017"));
        assert!(has(&d[1], b"CH00") && has(&d[1], b"ACPI0016"));
        assert!(has(&d[2], b"CH01"));
        let ecam = aml::resource::memory32_fixed(0xe0c0_0000, 4 << 20);
        assert!(has(&d[3], b"CXLR") && has(&d[3], &ecam), "{:x?}", d[3]);
    }
}
