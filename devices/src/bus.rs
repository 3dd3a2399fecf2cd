//! A bus of port-I/O or MMIO devices: exits are dispatched by address lookup,
//! never by literal port numbers in the vCPU loop.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// A device reachable through a [`Bus`]. Offsets are relative to the base of
/// the range the device was inserted at. Data slices come straight from the
/// guest's access (1, 2, 4 or 8 bytes) and must be bound-checked by the device.
pub trait BusDevice: Send {
    /// Handles a guest read; unhandled bytes stay as the bus pre-filled them (0xff).
    fn read(&mut self, _offset: u64, _data: &mut [u8]) {}
    /// Handles a guest write.
    fn write(&mut self, _offset: u64, _data: &[u8]) {}
}

/// Errors of [`Bus`] operations.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BusError {
    /// Two devices would share an address.
    #[error("bus range {base:#x}+{len:#x} overlaps a device already on the bus")]
    Overlap {
        /// Base of the rejected range.
        base: u64,
        /// Length of the rejected range.
        len: u64,
    },
    /// A range of zero length or one that wraps around the address space.
    #[error("bus range {base:#x}+{len:#x} is empty or wraps around")]
    InvalidRange {
        /// Base of the rejected range.
        base: u64,
        /// Length of the rejected range.
        len: u64,
    },
    /// No device claims the address.
    #[error("no device at bus address {0:#x}")]
    NoDevice(u64),
}

/// A shared, lockable device on a bus.
pub type SharedDevice = Arc<Mutex<dyn BusDevice>>;

#[derive(Clone)]
struct Entry {
    len: u64,
    device: SharedDevice,
}

/// An address space of devices, keyed by base address, with no overlaps.
#[derive(Clone, Default)]
pub struct Bus {
    devices: BTreeMap<u64, Entry>,
}

impl std::fmt::Debug for Bus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ranges: Vec<(u64, u64)> = self.devices.iter().map(|(b, e)| (*b, e.len)).collect();
        f.debug_struct("Bus").field("ranges", &ranges).finish()
    }
}

impl Bus {
    /// An empty bus.
    pub fn new() -> Self {
        Self::default()
    }

    /// Puts `device` at `[base, base + len)`.
    pub fn insert(&mut self, device: SharedDevice, base: u64, len: u64) -> Result<(), BusError> {
        let end = match base.checked_add(len) {
            Some(end) if len > 0 => end,
            _ => return Err(BusError::InvalidRange { base, len }),
        };
        // The closest device starting below `end` is the only one that can overlap.
        if let Some((&other_base, other)) = self.devices.range(..end).next_back() {
            if other_base + other.len > base {
                return Err(BusError::Overlap { base, len });
            }
        }
        self.devices.insert(base, Entry { len, device });
        Ok(())
    }

    fn lookup(&self, addr: u64) -> Option<(u64, &SharedDevice)> {
        let (&base, entry) = self.devices.range(..=addr).next_back()?;
        let offset = addr - base;
        (offset < entry.len).then_some((offset, &entry.device))
    }

    /// Dispatches a read; `data` is filled with 0xff first, as on real hardware
    /// with nothing decoding the address.
    pub fn read(&self, addr: u64, data: &mut [u8]) -> Result<(), BusError> {
        data.fill(0xff);
        let (offset, device) = self.lookup(addr).ok_or(BusError::NoDevice(addr))?;
        lock(device).read(offset, data);
        Ok(())
    }

    /// Dispatches a write.
    pub fn write(&self, addr: u64, data: &[u8]) -> Result<(), BusError> {
        let (offset, device) = self.lookup(addr).ok_or(BusError::NoDevice(addr))?;
        lock(device).write(offset, data);
        Ok(())
    }
}

/// Locks a device, recovering from a poisoned lock (a device that panicked
/// keeps its last state; the VM goes on).
fn lock(device: &SharedDevice) -> std::sync::MutexGuard<'_, dyn BusDevice + 'static> {
    device.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default)]
    struct Recorder {
        writes: Vec<(u64, Vec<u8>)>,
    }
    impl BusDevice for Recorder {
        fn read(&mut self, offset: u64, data: &mut [u8]) {
            data[0] = u8::try_from(offset).unwrap_or(0xff);
        }
        fn write(&mut self, offset: u64, data: &[u8]) {
            self.writes.push((offset, data.to_vec()));
        }
    }

    #[test]
    fn dispatches_by_range_with_offsets() {
        let mut bus = Bus::new();
        let a = Arc::new(Mutex::new(Recorder::default()));
        bus.insert(a.clone(), 0x3f8, 8).unwrap();
        let mut b = [0u8; 1];
        bus.read(0x3fd, &mut b).unwrap();
        assert_eq!(b[0], 5);
        bus.write(0x3f8, &[7]).unwrap();
        assert_eq!(a.lock().unwrap().writes, vec![(0, vec![7])]);
        assert_eq!(bus.read(0x400, &mut b), Err(BusError::NoDevice(0x400)));
        assert_eq!(bus.write(0x3f7, &[1]), Err(BusError::NoDevice(0x3f7)));
    }

    #[test]
    fn rejects_overlaps_and_bad_ranges() {
        let mut bus = Bus::new();
        let d = || Arc::new(Mutex::new(Recorder::default())) as SharedDevice;
        bus.insert(d(), 0x100, 0x10).unwrap();
        assert!(matches!(
            bus.insert(d(), 0x10f, 1),
            Err(BusError::Overlap { .. })
        ));
        assert!(matches!(
            bus.insert(d(), 0xf8, 0x9),
            Err(BusError::Overlap { .. })
        ));
        assert!(matches!(
            bus.insert(d(), 0x0, 0x1000),
            Err(BusError::Overlap { .. })
        ));
        bus.insert(d(), 0x110, 1).unwrap();
        bus.insert(d(), 0xf0, 0x10).unwrap();
        assert!(matches!(
            bus.insert(d(), 0x200, 0),
            Err(BusError::InvalidRange { .. })
        ));
        assert!(matches!(
            bus.insert(d(), u64::MAX, 2),
            Err(BusError::InvalidRange { .. })
        ));
    }

    #[test]
    fn unclaimed_read_is_all_ones() {
        let bus = Bus::new();
        let mut b = [0u8; 4];
        assert!(bus.read(0x80, &mut b).is_err());
        assert_eq!(b, [0xff; 4]);
    }
}
