//! DSDT: the `_S5_` soft-off package and the 16550 serial ports.

use crate::aml;
use crate::sdt::{Sdt, OEM_TABLE_ID};
use crate::MachineDescription;

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
/// }
/// ```
/// The caller has checked there are at most 9 serial ports and every IRQ is
/// below 16.
pub fn build(desc: &MachineDescription) -> Vec<u8> {
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
    if !devices.is_empty() {
        t.append(&aml::scope("\\_SB", &devices));
    }
    t.finish()
}

/// `EisaId ("PNP0501")`: 16550A-compatible UART.
const PNP0501: u32 = 0x0105_d041;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pnp0501_constant_matches_encoder() {
        assert_eq!(aml::eisa_id("PNP0501"), Some(PNP0501));
    }
}
