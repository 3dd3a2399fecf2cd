//! A memory device's alert configuration (CXL 2.0 8.2.9.5.3.2-3): Get Alert
//! Configuration (0x4201, 0 → 0x10 bytes) and Set Alert Configuration
//! (0x4202, 0x0C → 0), what `cxl list -A` shows and `cxl set-alert-config`
//! changes. The device measures neither temperature nor errors, so no alert
//! ever fires; the thresholds are kept and checked as a device would.

use super::ReturnCode;

/// Programmable warnings: life used (bit 0), over- and under-temperature
/// (bits 1 and 2), corrected persistent memory errors (bit 4). Bit 3
/// (corrected volatile memory errors) is not: the device has no volatile
/// capacity.
pub const PROGRAMMABLE: u8 = 0b1_0111;
/// Life used (percent) at which the device reports a critical alert.
pub const LIFE_USED_CRITICAL: u8 = 100;
/// Device temperatures (°C) of the critical alerts.
pub const OVER_TEMPERATURE_CRITICAL: i16 = 85;
/// See [`OVER_TEMPERATURE_CRITICAL`].
pub const UNDER_TEMPERATURE_CRITICAL: i16 = -10;

/// The programmable warnings: which are enabled, and their thresholds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AlertConfig {
    enabled: u8,
    life_used: u8,
    over_temperature: i16,
    under_temperature: i16,
    corrected_persistent: u16,
}

impl AlertConfig {
    /// Get Alert Configuration's output.
    pub fn get(&self) -> [u8; 0x10] {
        let mut out = [0u8; 0x10];
        out[0] = self.enabled;
        out[1] = PROGRAMMABLE;
        out[2] = LIFE_USED_CRITICAL;
        out[3] = self.life_used;
        out[4..6].copy_from_slice(&OVER_TEMPERATURE_CRITICAL.to_le_bytes());
        out[6..8].copy_from_slice(&UNDER_TEMPERATURE_CRITICAL.to_le_bytes());
        out[8..10].copy_from_slice(&self.over_temperature.to_le_bytes());
        out[10..12].copy_from_slice(&self.under_temperature.to_le_bytes());
        out[14..16].copy_from_slice(&self.corrected_persistent.to_le_bytes());
        out
    }

    /// Set Alert Configuration: the actions named valid in byte 0 take the
    /// enable bit of byte 1 and their threshold. A warning that is not
    /// programmable, or a threshold beyond its critical alert, is Invalid
    /// Input and changes nothing.
    pub fn set(&mut self, input: &[u8; 0x0c]) -> Result<(), ReturnCode> {
        let (valid, enable) = (input[0], input[1]);
        if valid & !PROGRAMMABLE != 0 {
            return Err(ReturnCode::InvalidInput);
        }
        let i16_at = |at: usize| i16::from_le_bytes([input[at], input[at + 1]]);
        let mut next = *self;
        if valid & 1 != 0 {
            next.life_used = input[2];
        }
        if valid & 1 << 1 != 0 {
            next.over_temperature = i16_at(4);
        }
        if valid & 1 << 2 != 0 {
            next.under_temperature = i16_at(6);
        }
        if valid & 1 << 4 != 0 {
            next.corrected_persistent = u16::from_le_bytes([input[10], input[11]]);
        }
        next.enabled = (self.enabled & !valid) | (enable & valid);
        let on = |bit: u8| next.enabled & 1 << bit != 0;
        let beyond = (on(0) && next.life_used >= LIFE_USED_CRITICAL)
            || (on(1) && next.over_temperature >= OVER_TEMPERATURE_CRITICAL)
            || (on(2) && next.under_temperature <= UNDER_TEMPERATURE_CRITICAL);
        if beyond {
            return Err(ReturnCode::InvalidInput);
        }
        *self = next;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set_input(valid: u8, enable: u8, life: u8, over: i16, under: i16, pmem: u16) -> [u8; 12] {
        let mut b = [0u8; 12];
        b[0] = valid;
        b[1] = enable;
        b[2] = life;
        b[4..6].copy_from_slice(&over.to_le_bytes());
        b[6..8].copy_from_slice(&under.to_le_bytes());
        b[10..12].copy_from_slice(&pmem.to_le_bytes());
        b
    }

    #[test]
    fn a_set_warning_reads_back_with_the_critical_thresholds() {
        let mut a = AlertConfig::default();
        let fresh = a.get();
        assert_eq!(fresh[0], 0, "nothing enabled");
        assert_eq!(fresh[1], PROGRAMMABLE);
        assert_eq!(fresh[2], 100);
        assert_eq!(i16::from_le_bytes([fresh[4], fresh[5]]), 85);
        assert_eq!(i16::from_le_bytes([fresh[6], fresh[7]]), -10);
        a.set(&set_input(0b1_0011, 0b1_0011, 80, 70, 0, 12))
            .unwrap();
        let got = a.get();
        assert_eq!(got[0], 0b1_0011);
        assert_eq!(got[3], 80);
        assert_eq!(i16::from_le_bytes([got[8], got[9]]), 70);
        assert_eq!(u16::from_le_bytes([got[14], got[15]]), 12);
        // Only the valid actions change: disabling life used keeps the rest.
        a.set(&set_input(0b1, 0, 0, 0, 0, 0)).unwrap();
        assert_eq!(a.get()[0], 0b1_0010);
        assert_eq!(a.get()[3], 0, "the threshold of a valid action is taken");
    }

    #[test]
    fn unprogrammable_warnings_and_thresholds_past_critical_change_nothing() {
        let mut a = AlertConfig::default();
        let before = a;
        for bad in [
            set_input(1 << 3, 1 << 3, 0, 0, 0, 0),
            set_input(1 << 7, 0, 0, 0, 0, 0),
            set_input(1, 1, 100, 0, 0, 0),
            set_input(1 << 1, 1 << 1, 0, 85, 0, 0),
            set_input(1 << 2, 1 << 2, 0, 0, -10, 0),
        ] {
            assert_eq!(a.set(&bad), Err(ReturnCode::InvalidInput), "{bad:?}");
            assert_eq!(a, before);
        }
        // A threshold past critical is fine while its warning stays off.
        a.set(&set_input(1, 0, 100, 0, 0, 0)).unwrap();
    }
}
