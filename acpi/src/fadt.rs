//! FADT ("FACP"), revision 6: a hardware-reduced ACPI platform whose sleep
//! and reset registers are 8-bit I/O ports handled by pmemvm.

use crate::sdt::{gas_io8, Sdt, OEM_TABLE_ID};
use crate::GuestPlatform;

/// Length of a revision 6 FADT (ACPI 6.x).
pub const FADT_LEN: usize = 276;
/// FADT revision.
const FADT_REVISION: u8 = 6;
/// FADT minor version (ACPI 6.5).
const FADT_MINOR_VERSION: u8 = 5;
/// `Flags` bit 10: `RESET_REG_SUP`.
const FLAG_RESET_REG_SUP: u32 = 1 << 10;
/// `Flags` bit 20: `HW_REDUCED_ACPI`.
const FLAG_HW_REDUCED_ACPI: u32 = 1 << 20;
/// `IAPC_BOOT_ARCH` bit 2: VGA not present.
const BOOT_ARCH_VGA_NOT_PRESENT: u16 = 1 << 2;
/// `IAPC_BOOT_ARCH` bit 5: CMOS RTC not present.
const BOOT_ARCH_CMOS_RTC_NOT_PRESENT: u16 = 1 << 5;

/// Builds the FADT pointing at the DSDT at `dsdt_addr`.
///
/// `IAPC_BOOT_ARCH` says: no 8042 (bit 1 clear, so Linux does not probe a
/// keyboard controller), no VGA, no CMOS RTC. `SCI_INT` stays 0: a
/// hardware-reduced platform has no SCI.
pub fn build(desc: &GuestPlatform, dsdt_addr: u64) -> Vec<u8> {
    let mut t = Sdt::new(*b"FACP", FADT_REVISION, OEM_TABLE_ID);
    t.u32(0); // 36 FIRMWARE_CTRL
    t.u32(0); // 40 DSDT (32-bit; X_DSDT is used)
    t.u8(0); // 44 reserved
    t.u8(0); // 45 Preferred_PM_Profile: unspecified
    t.u16(0); // 46 SCI_INT
    t.u32(0); // 48 SMI_CMD
    t.append(&[0; 4]); // 52 ACPI_ENABLE, ACPI_DISABLE, S4BIOS_REQ, PSTATE_CNT
    t.append(&[0; 32]); // 56 PM1a/b EVT, PM1a/b CNT, PM2 CNT, PM TMR, GPE0, GPE1 blocks
    t.append(&[0; 8]); // 88 PM1_EVT_LEN .. CST_CNT
    t.append(&[0; 8]); // 96 P_LVL2_LAT, P_LVL3_LAT, FLUSH_SIZE, FLUSH_STRIDE
    t.append(&[0; 5]); // 104 DUTY_OFFSET, DUTY_WIDTH, DAY_ALRM, MON_ALRM, CENTURY
    t.u16(BOOT_ARCH_VGA_NOT_PRESENT | BOOT_ARCH_CMOS_RTC_NOT_PRESENT); // 109 IAPC_BOOT_ARCH
    t.u8(0); // 111 reserved
    t.u32(FLAG_HW_REDUCED_ACPI | FLAG_RESET_REG_SUP); // 112 Flags
    t.append(&gas_io8(desc.reset_port)); // 116 RESET_REG
    t.u8(desc.reset_value); // 128 RESET_VALUE
    t.u16(0); // 129 ARM_BOOT_ARCH
    t.u8(FADT_MINOR_VERSION); // 131 FADT Minor Version
    t.u64(0); // 132 X_FIRMWARE_CTRL
    t.u64(dsdt_addr); // 140 X_DSDT
    t.append(&[0; 96]); // 148 X_PM1a_EVT_BLK .. X_GPE1_BLK (8 GAS)
    t.append(&gas_io8(desc.sleep_control_port)); // 244 SLEEP_CONTROL_REG
    t.append(&gas_io8(desc.sleep_status_port)); // 256 SLEEP_STATUS_REG
    t.u64(0); // 268 Hypervisor Vendor Identity
    debug_assert_eq!(t.current_len(), FADT_LEN);
    t.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sdt::checksum;

    fn desc() -> GuestPlatform {
        GuestPlatform::example(1)
    }

    #[test]
    fn fields_at_their_offsets() {
        let t = build(&desc(), 0xe_1000);
        assert_eq!(t.len(), FADT_LEN);
        assert_eq!(&t[0..4], b"FACP");
        assert_eq!(t[8], 6); // revision
        assert_eq!(checksum(&t), 0);
        // [070h 0112 4] Flags : 00100400 (HW_REDUCED_ACPI, RESET_REG_SUP)
        assert_eq!(t[112..116], [0x00, 0x04, 0x10, 0x00]);
        // [06Dh 0109 2] Boot Flags : 0024 (no VGA, no CMOS RTC, no 8042)
        assert_eq!(t[109..111], [0x24, 0x00]);
        // [074h 0116 12] Reset Register: SystemIO, 8 bit, byte access, 0x602
        assert_eq!(t[116..128], [1, 8, 0, 1, 0x02, 0x06, 0, 0, 0, 0, 0, 0]);
        // [080h 0128 1] Value to cause reset : 01
        assert_eq!(t[128], 1);
        // [083h 0131 1] FADT Minor Revision : 05
        assert_eq!(t[131], 5);
        // [08Ch 0140 8] DSDT Address : 00000000000E1000; 32-bit DSDT 0
        assert_eq!(t[140..148], 0xe_1000u64.to_le_bytes());
        assert_eq!(t[40..44], [0; 4]);
        // [0F4h 0244 12] Sleep Control Register, [100h 0256 12] Sleep Status Register
        assert_eq!(t[244..256], [1, 8, 0, 1, 0x00, 0x06, 0, 0, 0, 0, 0, 0]);
        assert_eq!(t[256..268], [1, 8, 0, 1, 0x01, 0x06, 0, 0, 0, 0, 0, 0]);
        // Everything else in the body is zero.
        for (i, b) in t.iter().enumerate().skip(36) {
            let known = matches!(i, 109 | 112..=114 | 116..=119 | 120..=121 | 128 | 131
                | 140..=142 | 244..=249 | 256..=261);
            if !known {
                assert_eq!(*b, 0, "byte {i}");
            }
        }
    }
}
