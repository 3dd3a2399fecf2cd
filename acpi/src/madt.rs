//! MADT ("APIC"): one local APIC per vCPU, one I/O APIC and the ISA
//! IRQ0 → GSI2 interrupt source override every PC-compatible VMM reports.

use crate::sdt::{Sdt, OEM_TABLE_ID};
use crate::GuestPlatform;

/// MADT revision (ACPI 6.x).
const MADT_REVISION: u8 = 5;
/// MADT `Flags` bit 0: `PCAT_COMPAT` (dual 8259 present; KVM's in-kernel
/// irqchip emulates them).
const PCAT_COMPAT: u32 = 1;
/// Local APIC structure flag: enabled.
const LAPIC_ENABLED: u32 = 1;

/// Builds the MADT. The caller has checked `desc.cpus` fits 8-bit APIC ids.
pub fn build(desc: &GuestPlatform) -> Vec<u8> {
    let mut t = Sdt::new(*b"APIC", MADT_REVISION, OEM_TABLE_ID);
    t.u32(desc.lapic_addr); // 36 Local Interrupt Controller Address
    t.u32(PCAT_COMPAT); // 40 Flags
    for cpu in 0..desc.cpus {
        let id = u8::try_from(cpu).unwrap_or(u8::MAX);
        // Processor Local APIC: type 0, length 8, ACPI processor UID, APIC id, flags.
        t.append(&[0, 8, id, id]);
        t.u32(LAPIC_ENABLED);
    }
    // I/O APIC: type 1, length 12, id, reserved, address, GSI base.
    t.append(&[1, 12, desc.ioapic_id, 0]);
    t.u32(desc.ioapic_addr);
    t.u32(0);
    // Interrupt Source Override: type 2, length 10, bus 0 (ISA), source IRQ 0,
    // GSI 2, flags 0 (conforms to the bus: edge, active high).
    t.append(&[2, 10, 0, 0]);
    t.u32(2);
    t.u16(0);
    t.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sdt::checksum;

    #[test]
    fn two_cpus_golden() {
        let desc = GuestPlatform {
            ..GuestPlatform::example(2)
        };
        let t = build(&desc);
        assert_eq!(checksum(&t), 0);
        assert_eq!(&t[0..4], b"APIC");
        assert_eq!(t[8], 5);
        #[rustfmt::skip]
        let body: [u8; 46] = [
            0x00, 0x00, 0xe0, 0xfe,             // Local Apic Address : FEE00000
            0x01, 0x00, 0x00, 0x00,             // Flags : PC-AT compatibility
            0x00, 0x08, 0x00, 0x00,             // Local APIC: UID 0, APIC id 0
            0x01, 0x00, 0x00, 0x00,             //   enabled
            0x00, 0x08, 0x01, 0x01,             // Local APIC: UID 1, APIC id 1
            0x01, 0x00, 0x00, 0x00,             //   enabled
            0x01, 0x0c, 0x02, 0x00,             // I/O APIC: id 2
            0x00, 0x00, 0xc0, 0xfe,             //   address FEC00000
            0x00, 0x00, 0x00, 0x00,             //   GSI base 0
            0x02, 0x0a, 0x00, 0x00,             // Interrupt Source Override: ISA IRQ 0
            0x02, 0x00, 0x00, 0x00,             //   GSI 2
            0x00, 0x00,                         //   flags: conforms to the bus
        ];
        assert_eq!(t[36..], body);
    }
}
