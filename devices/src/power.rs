//! Small platform devices that end the VM: the ACPI sleep/reset registers
//! (FADT, hardware-reduced), the i8042 reset line (vm-superio's
//! `I8042Device`) and the guest-exit port.

use std::sync::Arc;

use crate::bus::BusDevice;
use crate::exit::{ExitNotifier, ExitRequest};

/// SLP_EN bit of the ACPI sleep control register.
const SLP_EN: u8 = 1 << 5;

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

/// Posts a reset request when vm-superio's i8042 sees the reset command.
#[derive(Debug)]
pub struct ResetTrigger(Arc<ExitNotifier>);

impl vm_superio::Trigger for ResetTrigger {
    type E = std::convert::Infallible;

    fn trigger(&self) -> Result<(), Self::E> {
        self.0.request(ExitRequest::Reset);
        Ok(())
    }
}

/// The i8042 keyboard controller (data port at offset 0, command port at
/// offset 4), reduced to its reset command (Linux's `reboot=kbd` path).
#[derive(Debug)]
pub struct I8042Device(vm_superio::I8042Device<ResetTrigger>);

impl I8042Device {
    /// Ports the device spans (0x60-0x64).
    pub const LEN: u64 = 5;

    /// A device that posts reset when 0xfe is written to its command port.
    pub fn new(exit: Arc<ExitNotifier>) -> Self {
        Self(vm_superio::I8042Device::new(ResetTrigger(exit)))
    }
}

impl BusDevice for I8042Device {
    fn read(&mut self, offset: u64, data: &mut [u8]) {
        if let (Ok(off), Some(first)) = (u8::try_from(offset), data.first_mut()) {
            *first = self.0.read(off);
        }
    }

    fn write(&mut self, offset: u64, data: &[u8]) {
        if let (Ok(off), Some(&value)) = (u8::try_from(offset), data.first()) {
            let Ok(()) = self.0.write(off, value);
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
        let mut k = I8042Device::new(n.clone());
        k.write(4, &[0xd1]);
        k.write(0, &[0xfe]);
        assert_eq!(n.get(), None, "0xfe on the data port is no reset");
        k.write(4, &[0xfe]);
        assert_eq!(n.get(), Some(ExitRequest::Reset));

        let n = notifier();
        let mut g = GuestExitDevice::new(n.clone());
        g.write(0, &[]);
        assert_eq!(n.get(), None);
        g.write(0, &[42, 0, 0, 0]);
        assert_eq!(n.get(), Some(ExitRequest::GuestExit(42)));
    }
}
