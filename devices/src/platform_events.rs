//! Platform events: how pmemvm tells the guest about a change made while it
//! runs (a media error injected or cleared through the control socket, a
//! DIMM's health set), as firmware does on a server — an interrupt to the
//! ACPI Generic Event Device (`ACPI0013`), whose `_EVT` method reads which
//! events are pending from one register and sends the ACPI notifications
//! (`Notify (\_SB.NVDR, 0x81)` for new media errors, `Notify (\_SB.NVDR.NVxx,
//! 0x81)` for a DIMM's health). pmemvm's platform is hardware-reduced ACPI
//! (no SCI, no GPE blocks), so the GED is the one way an event reaches the
//! guest's AML without the guest asking.
//!
//! The register is 32 bits at one I/O port; a read returns the pending
//! events and clears them (so two raises before one read are one `_EVT`
//! run that sees both). Writes are ignored. Bits: [`MEDIA_ERRORS`],
//! [`NFIT_CHANGED`], and [`dimm_health`] for DIMMs 0 to
//! [`HEALTH_DIMMS`] − 1.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use vmm_sys_util::eventfd::EventFd;

use crate::bus::BusDevice;

/// Event bit: the root device's error list grew (notification 0x81: Linux
/// runs an address range scrub and adds the new ranges to its badblocks).
pub const MEDIA_ERRORS: u32 = 1 << 0;
/// Event bit: the NFIT changed (notification 0x80 on the root device).
pub const NFIT_CHANGED: u32 = 1 << 1;
/// First bit of the per-DIMM health events.
const HEALTH_SHIFT: u32 = 2;
/// DIMMs that have a health event bit (the rest of the register).
pub const HEALTH_DIMMS: usize = (32 - HEALTH_SHIFT) as usize;

/// The event bit of DIMM `index`'s health change (notification 0x81 on the
/// DIMM's device), `None` past [`HEALTH_DIMMS`].
pub fn dimm_health(index: usize) -> Option<u32> {
    let i = u32::try_from(index).ok()?;
    (index < HEALTH_DIMMS).then(|| 1 << (HEALTH_SHIFT + i))
}

/// The pending events and the interrupt line that announces them.
#[derive(Debug)]
pub struct PlatformEvents {
    pending: AtomicU32,
    irq: EventFd,
    raised: AtomicU64,
    read: AtomicU64,
}

impl PlatformEvents {
    /// Events raised on `irq` (an irqfd of the GED's edge-triggered GSI).
    pub fn new(irq: EventFd) -> Self {
        Self {
            pending: AtomicU32::new(0),
            irq,
            raised: AtomicU64::new(0),
            read: AtomicU64::new(0),
        }
    }

    /// Marks `events` pending and interrupts the guest.
    pub fn raise(&self, events: u32) -> std::io::Result<()> {
        self.pending.fetch_or(events, Ordering::SeqCst);
        self.raised.fetch_add(1, Ordering::Relaxed);
        self.irq.write(1)
    }

    /// The pending events, now cleared (the guest's read of the register).
    pub fn take(&self) -> u32 {
        let events = self.pending.swap(0, Ordering::SeqCst);
        if events != 0 {
            self.read.fetch_add(1, Ordering::Relaxed);
        }
        events
    }

    /// (interrupts raised, reads of the register that found events).
    pub fn counts(&self) -> (u64, u64) {
        (
            self.raised.load(Ordering::Relaxed),
            self.read.load(Ordering::Relaxed),
        )
    }
}

/// The register on the I/O bus.
#[derive(Debug)]
pub struct PlatformEventPort(pub std::sync::Arc<PlatformEvents>);

impl BusDevice for PlatformEventPort {
    /// A read at offset 0 of up to 4 bytes takes the pending events (a
    /// narrower read gets their low bytes, and loses the rest: the AML reads
    /// the whole register). Any other read gives zeros.
    fn read(&mut self, offset: u64, data: &mut [u8]) {
        data.fill(0);
        if offset != 0 || data.is_empty() || data.len() > 4 {
            return;
        }
        let events = self.0.take().to_le_bytes();
        data.copy_from_slice(&events[..data.len()]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn events() -> Arc<PlatformEvents> {
        Arc::new(PlatformEvents::new(
            EventFd::new(libc::EFD_NONBLOCK).unwrap(),
        ))
    }

    #[test]
    fn a_read_takes_what_was_raised_and_the_line_is_signalled() {
        let e = events();
        let mut port = PlatformEventPort(e.clone());
        let mut data = [0xffu8; 4];
        port.read(0, &mut data);
        assert_eq!(data, [0; 4], "nothing pending");
        e.raise(MEDIA_ERRORS).unwrap();
        e.raise(dimm_health(3).unwrap()).unwrap();
        assert_eq!(e.irq.read().unwrap(), 2, "one signal per raise");
        port.read(0, &mut data);
        assert_eq!(u32::from_le_bytes(data), MEDIA_ERRORS | 1 << 5);
        port.read(0, &mut data);
        assert_eq!(data, [0; 4], "a read clears");
        assert_eq!(e.counts(), (2, 1));
    }

    #[test]
    fn odd_guest_accesses_take_nothing() {
        let e = events();
        let mut port = PlatformEventPort(e.clone());
        e.raise(NFIT_CHANGED).unwrap();
        let mut wide = [0xffu8; 8];
        port.read(0, &mut wide);
        assert_eq!(wide, [0; 8]);
        let mut off = [0xffu8; 1];
        port.read(2, &mut off);
        assert_eq!(off, [0]);
        port.read(0, &mut []);
        port.write(0, &[0xff; 4]);
        assert_eq!(e.take(), NFIT_CHANGED, "still pending, writes ignored");
    }

    #[test]
    fn health_bits_cover_the_register_and_no_more() {
        assert_eq!(dimm_health(0), Some(1 << 2));
        assert_eq!(dimm_health(HEALTH_DIMMS - 1), Some(1 << 31));
        assert_eq!(dimm_health(HEALTH_DIMMS), None);
        assert_eq!(dimm_health(usize::MAX), None);
    }
}
