//! Small platform devices that end the VM: the ACPI sleep/reset registers
//! (FADT, hardware-reduced), the i8042 reset line and the guest-exit port.

use std::sync::Arc;

use crate::bus::BusDevice;
use crate::exit::{ExitNotifier, ExitRequest};

/// SLP_EN bit of the ACPI sleep control register.
const SLP_EN: u8 = 1 << 5;
/// i8042 command "pulse reset line".
const I8042_RESET_CMD: u8 = 0xfe;

/// ACPI hardware-reduced sleep control (offset 0), sleep status (offset 1)
/// and reset (offset 2) registers, one byte each.
#[derive(Debug)]
pub struct AcpiPowerDevice {
    exit: Arc<ExitNotifier>,
    s5_slp_typ: u8,
    reset_value: u8,
}

impl AcpiPowerDevice {
    /// Offset of the sleep control register.
    pub const SLEEP_CONTROL: u64 = 0;
    /// Offset of the sleep status register.
    pub const SLEEP_STATUS: u64 = 1;
    /// Offset of the reset register.
    pub const RESET: u64 = 2;
    /// Ports the device spans.
    pub const LEN: u64 = 3;

    /// A device that posts power-off for SLP_TYP `s5_slp_typ` and reset for `reset_value`.
    pub fn new(exit: Arc<ExitNotifier>, s5_slp_typ: u8, reset_value: u8) -> Self {
        Self {
            exit,
            s5_slp_typ,
            reset_value,
        }
    }
}

impl BusDevice for AcpiPowerDevice {
    fn read(&mut self, _offset: u64, data: &mut [u8]) {
        // Nothing is pending: wake status clear, sleep control reads as zero.
        data.fill(0);
    }

    fn write(&mut self, offset: u64, data: &[u8]) {
        let Some(&value) = data.first() else { return };
        match offset {
            Self::SLEEP_CONTROL if value & SLP_EN != 0 => {
                let slp_typ = (value >> 2) & 0x7;
                if slp_typ == self.s5_slp_typ {
                    self.exit.request(ExitRequest::PowerOff);
                } else {
                    log::debug!("guest asked for unsupported sleep type {slp_typ}");
                }
            }
            Self::RESET if value == self.reset_value => self.exit.request(ExitRequest::Reset),
            _ => {}
        }
    }
}

/// The i8042 keyboard controller's command port, reduced to its reset command
/// (Linux's `reboot=kbd` path).
#[derive(Debug)]
pub struct I8042ResetDevice {
    exit: Arc<ExitNotifier>,
}

impl I8042ResetDevice {
    /// A device that posts reset when 0xfe is written.
    pub fn new(exit: Arc<ExitNotifier>) -> Self {
        Self { exit }
    }
}

impl BusDevice for I8042ResetDevice {
    fn read(&mut self, _offset: u64, data: &mut [u8]) {
        // Status register: output buffer empty, input buffer empty.
        data.fill(0);
    }

    fn write(&mut self, _offset: u64, data: &[u8]) {
        if data.first() == Some(&I8042_RESET_CMD) {
            self.exit.request(ExitRequest::Reset);
        }
    }
}

/// The guest-exit port: the first byte of any write becomes pmemvm's exit status.
#[derive(Debug)]
pub struct GuestExitDevice {
    exit: Arc<ExitNotifier>,
}

impl GuestExitDevice {
    /// A device that posts [`ExitRequest::GuestExit`].
    pub fn new(exit: Arc<ExitNotifier>) -> Self {
        Self { exit }
    }
}

impl BusDevice for GuestExitDevice {
    fn write(&mut self, _offset: u64, data: &[u8]) {
        if let Some(&status) = data.first() {
            self.exit.request(ExitRequest::GuestExit(status));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn notifier() -> Arc<ExitNotifier> {
        Arc::new(ExitNotifier::new().unwrap())
    }

    #[test]
    fn s5_powers_off_other_sleep_types_do_not() {
        let n = notifier();
        let mut d = AcpiPowerDevice::new(n.clone(), 5, 1);
        d.write(AcpiPowerDevice::SLEEP_CONTROL, &[(3 << 2) | SLP_EN]);
        assert_eq!(n.get(), None);
        d.write(AcpiPowerDevice::SLEEP_CONTROL, &[5 << 2]);
        assert_eq!(n.get(), None, "without SLP_EN nothing happens");
        d.write(AcpiPowerDevice::SLEEP_CONTROL, &[]);
        d.write(AcpiPowerDevice::SLEEP_CONTROL, &[(5 << 2) | SLP_EN]);
        assert_eq!(n.get(), Some(ExitRequest::PowerOff));
    }

    #[test]
    fn reset_register_needs_the_reset_value() {
        let n = notifier();
        let mut d = AcpiPowerDevice::new(n.clone(), 5, 1);
        d.write(AcpiPowerDevice::RESET, &[2]);
        assert_eq!(n.get(), None);
        d.write(AcpiPowerDevice::RESET, &[1]);
        assert_eq!(n.get(), Some(ExitRequest::Reset));
    }

    #[test]
    fn i8042_and_guest_exit() {
        let n = notifier();
        let mut k = I8042ResetDevice::new(n.clone());
        k.write(0, &[0xd1]);
        assert_eq!(n.get(), None);
        k.write(0, &[0xfe]);
        assert_eq!(n.get(), Some(ExitRequest::Reset));

        let n = notifier();
        let mut g = GuestExitDevice::new(n.clone());
        g.write(0, &[]);
        assert_eq!(n.get(), None);
        g.write(0, &[42, 0, 0, 0]);
        assert_eq!(n.get(), Some(ExitRequest::GuestExit(42)));
    }
}
