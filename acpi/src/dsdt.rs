//! DSDT: the `_S5_` soft-off package, the 16550 serial ports and the
//! virtio-mmio devices.

use crate::aml;
use crate::sdt::{Sdt, OEM_TABLE_ID};
use crate::GuestPlatform;

/// DSDT revision 2: AML integers are 64 bits wide.
const DSDT_REVISION: u8 = 2;

/// Builds the DSDT:
///
/// ```text
/// Name (_S5, Package () { S5, S5, 0, 0 })
/// Scope (\_SB) {
///     Device (COM1) {                       // one per serial port, COM1, COM2, ...
///         Name (_HID, EisaId ("PNP0501"))
///         Name (_UID, 1)
///         Name (_CRS, ResourceTemplate () {
///             IO (Decode16, base, base, 0x01, 0x08)
///             IRQNoFlags () { irq }
///         })
///     }
///     Device (VR00) {                       // one per virtio-mmio device, VR00, VR01, ...
///         Name (_HID, "LNRO0005")
///         Name (_UID, 0)
///         Name (_CRS, ResourceTemplate () {
///             Memory32Fixed (ReadWrite, base, 0x1000)
///             IRQNoFlags () { irq }
///         })
///     }
///     Device (PEVT) {                       // with a pvpanic port
///         Name (_HID, "QEMU0001")
///         Name (_CRS, ResourceTemplate () { IO (Decode16, port, port, 1, 1) })
///         Name (_STA, 0x0B)                 // present, enabled, not shown
///     }
/// }
/// ```
/// The caller has checked there are at most 9 serial ports, at most 100
/// virtio-mmio devices, and every IRQ is below 16.
pub fn build(desc: &GuestPlatform) -> Vec<u8> {
    let mut t = Sdt::new(*b"DSDT", DSDT_REVISION, OEM_TABLE_ID);
    let s5 = u64::from(desc.s5_slp_typ);
    t.append(&aml::name(
        "_S5",
        &aml::package(&[
            aml::integer(s5),
            aml::integer(s5),
            aml::integer(0),
            aml::integer(0),
        ]),
    ));
    let mut devices = Vec::new();
    for (i, (base, irq)) in desc.serial_ports.iter().enumerate() {
        let uid = u64::try_from(i + 1).unwrap_or(u64::MAX);
        devices.push(aml::device(
            &format!("COM{}", i + 1),
            &[
                aml::name("_HID", &aml::integer(u64::from(PNP0501))),
                aml::name("_UID", &aml::integer(uid)),
                aml::name(
                    "_CRS",
                    &aml::resource::template(&[
                        aml::resource::io16(*base, 8),
                        aml::resource::irq_no_flags(*irq),
                    ]),
                ),
            ],
        ));
    }
    for (i, (base, irq)) in desc.virtio_mmio.iter().enumerate() {
        devices.push(aml::device(
            &format!("VR{:02}", i % 100),
            &[
                aml::name("_HID", &aml::string(VIRTIO_MMIO_HID)),
                aml::name("_UID", &aml::integer(i as u64)),
                aml::name(
                    "_CRS",
                    &aml::resource::template(&[
                        aml::resource::memory32_fixed(*base, VIRTIO_MMIO_SIZE),
                        aml::resource::irq_no_flags(*irq),
                    ]),
                ),
            ],
        ));
    }
    if let Some(port) = desc.pvpanic_port {
        devices.push(aml::device(
            "PEVT",
            &[
                aml::name("_HID", &aml::string(PVPANIC_HID)),
                aml::name(
                    "_CRS",
                    &aml::resource::template(&[aml::resource::io16(port, 1)]),
                ),
                aml::name("_STA", &aml::integer(0x0b)),
            ],
        ));
    }
    if let Some(cxl) = &desc.cxl {
        devices.extend(crate::cxl_dsdt::devices(cxl));
    }
    if !devices.is_empty() {
        t.append(&aml::scope("\\_SB", &devices));
    }
    t.finish()
}

/// The ACPI ID of QEMU's pvpanic device, which Linux's pvpanic-mmio driver
/// matches (an I/O port or an MMIO register, from `_CRS`).
const PVPANIC_HID: &str = "QEMU0001";

/// The ACPI ID Linux's virtio_mmio driver matches (`virtio_mmio_acpi_match`).
const VIRTIO_MMIO_HID: &str = "LNRO0005";
/// Register window of one virtio-mmio device.
const VIRTIO_MMIO_SIZE: u32 = 0x1000;

/// `EisaId ("PNP0501")`: 16550A-compatible UART.
const PNP0501: u32 = 0x0105_d041;

#[cfg(test)]
mod tests {
    use super::*;

    use crate::sdt::checksum;

    #[test]
    fn one_serial_port_golden() {
        let desc = GuestPlatform {
            serial_ports: vec![(0x3f8, 4)],
            ..GuestPlatform::example(1)
        };
        let t = build(&desc);
        assert_eq!(checksum(&t), 0);
        assert_eq!(&t[0..4], b"DSDT");
        assert_eq!(t[8], 2);
        #[rustfmt::skip]
        let body: Vec<u8> = vec![
            // Name (_S5, Package (0x04) { 0x05, 0x05, Zero, Zero })
            0x08, b'_', b'S', b'5', b'_', 0x12, 0x08, 0x04, 0x0a, 0x05, 0x0a, 0x05, 0x00, 0x00,
            // Scope (\_SB) {
            0x10, 0x33, b'\\', b'_', b'S', b'B', b'_',
            //   Device (COM1) {
            0x5b, 0x82, 0x2b, b'C', b'O', b'M', b'1',
            //     Name (_HID, EisaId ("PNP0501"))
            0x08, b'_', b'H', b'I', b'D', 0x0c, 0x41, 0xd0, 0x05, 0x01,
            //     Name (_UID, One)
            0x08, b'_', b'U', b'I', b'D', 0x01,
            //     Name (_CRS, ResourceTemplate () {
            //       IO (Decode16, 0x03F8, 0x03F8, 0x01, 0x08)  IRQNoFlags () {4} })
            0x08, b'_', b'C', b'R', b'S', 0x11, 0x10, 0x0a, 0x0d,
            0x47, 0x01, 0xf8, 0x03, 0xf8, 0x03, 0x01, 0x08,
            0x22, 0x10, 0x00,
            0x79, 0x00,
        ];
        assert_eq!(t[36..], body[..]);
    }

    #[test]
    fn virtio_mmio_devices_have_lnro0005_their_window_and_irq() {
        let desc = GuestPlatform {
            virtio_mmio: vec![(0xd000_0000, 5), (0xd000_1000, 6)],
            ..GuestPlatform::example(1)
        };
        let t = build(&desc);
        assert_eq!(checksum(&t), 0);
        #[rustfmt::skip]
        let vr01: Vec<u8> = vec![
            // Device (VR01) {
            0x5b, 0x82, 0x34, b'V', b'R', b'0', b'1',
            //   Name (_HID, "LNRO0005")
            0x08, b'_', b'H', b'I', b'D', 0x0d, b'L', b'N', b'R', b'O', b'0', b'0', b'0', b'5', 0x00,
            //   Name (_UID, One)
            0x08, b'_', b'U', b'I', b'D', 0x01,
            //   Name (_CRS, ResourceTemplate () {
            //     Memory32Fixed (ReadWrite, 0xD0001000, 0x1000)  IRQNoFlags () {6} })
            0x08, b'_', b'C', b'R', b'S', 0x11, 0x14, 0x0a, 0x11,
            0x86, 0x09, 0x00, 0x01, 0x00, 0x10, 0x00, 0xd0, 0x00, 0x10, 0x00, 0x00,
            0x22, 0x40, 0x00,
            0x79, 0x00,
        ];
        let at = t
            .windows(vr01.len())
            .position(|w| w == vr01.as_slice())
            .expect("VR01 as iasl would encode it");
        assert!(at > 36);
        assert!(t.windows(4).any(|w| w == b"VR00"));
    }

    #[test]
    fn pnp0501_constant_matches_encoder() {
        assert_eq!(aml::eisa_id("PNP0501"), Some(PNP0501));
    }
}
