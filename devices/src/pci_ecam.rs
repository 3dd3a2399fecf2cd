//! PCI Express enhanced configuration access (ECAM): a memory window in
//! which each function's 4 KiB configuration space sits at
//! `(bus − first bus) << 20 | device << 15 | function << 12` from the
//! window's start — which is the MCFG base plus first bus × 1 MiB, as the
//! MCFG counts from bus 0 (`acpi::mcfg::EcamWindow`). This is how Linux
//! reaches the extended configuration space (the CXL DVSECs at 0x100 and
//! up) once the MCFG table names the window.
//!
//! Functions are added by bus, device and function number and shared with
//! the VMM (which also needs them for their BARs and events). A function
//! that is not there reads all ones (Linux's "no device" vendor id) and
//! drops writes; an access is decoded byte by byte, so one that crosses a
//! function's space reaches each function only with its own bytes.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use crate::cxl::pci_config::{ConfigSpace, CONFIG_LEN};

/// One PCI function's configuration space, as ECAM reaches it.
pub trait PciFunction: Send + std::fmt::Debug {
    /// Reads `data.len()` bytes at `offset` (below 4096).
    fn config_read(&self, offset: u64, data: &mut [u8]);
    /// Writes `data` at `offset` (below 4096).
    fn config_write(&mut self, offset: u64, data: &[u8]);
}

impl PciFunction for ConfigSpace {
    fn config_read(&self, offset: u64, data: &mut [u8]) {
        self.read(offset, data);
    }
    fn config_write(&mut self, offset: u64, data: &[u8]) {
        self.write(offset, data);
    }
}

impl PciFunction for crate::cxl::type3::Type3Device {
    fn config_read(&self, offset: u64, data: &mut [u8]) {
        Self::config_read(self, offset, data);
    }
    fn config_write(&mut self, offset: u64, data: &[u8]) {
        Self::config_write(self, offset, data);
    }
}

/// A shared function.
pub type SharedFunction = Arc<Mutex<dyn PciFunction>>;

/// Bus, device (0..32) and function (0..8) numbers.
pub type Bdf = (u8, u8, u8);

/// An ECAM window over buses `first..=last`.
#[derive(Debug)]
pub struct Ecam {
    first: u8,
    last: u8,
    functions: BTreeMap<Bdf, SharedFunction>,
}

/// A bus, device or function number the window cannot hold.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum EcamError {
    /// Outside `first..=last`, device ≥ 32 or function ≥ 8.
    #[error("PCI function {bus:02x}:{device:02x}.{function} is outside the ECAM window of buses {first:02x}-{last:02x}")]
    Outside {
        /// Bus.
        bus: u8,
        /// Device.
        device: u8,
        /// Function.
        function: u8,
        /// The window's first bus.
        first: u8,
        /// Its last bus.
        last: u8,
    },
    /// Two functions at one address.
    #[error("PCI function {0:02x}:{1:02x}.{2} is there twice")]
    Taken(u8, u8, u8),
}

impl Ecam {
    /// An empty window over buses `first..=last` (`first <= last`).
    pub fn new(first: u8, last: u8) -> Self {
        Self {
            first,
            last: last.max(first),
            functions: BTreeMap::new(),
        }
    }

    /// Bytes of the window: 1 MiB per bus.
    pub fn len(&self) -> u64 {
        (u64::from(self.last - self.first) + 1) << 20
    }

    /// Always false: a window holds at least one bus.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Puts `function` at `bdf`.
    pub fn add(&mut self, bdf: Bdf, function: SharedFunction) -> Result<(), EcamError> {
        let (bus, device, f) = bdf;
        if bus < self.first || bus > self.last || device >= 32 || f >= 8 {
            return Err(EcamError::Outside {
                bus,
                device,
                function: f,
                first: self.first,
                last: self.last,
            });
        }
        if self.functions.contains_key(&bdf) {
            return Err(EcamError::Taken(bus, device, f));
        }
        self.functions.insert(bdf, function);
        Ok(())
    }

    /// The window's functions, shared (for the port-based configuration
    /// mechanism, which reaches the same spaces).
    pub fn functions(&self) -> BTreeMap<Bdf, SharedFunction> {
        self.functions.clone()
    }

    /// The function and register a window offset falls on.
    fn decode(&self, at: u64) -> Option<(Bdf, u64)> {
        let bus = u8::try_from(at >> 20).ok()?.checked_add(self.first)?;
        if bus > self.last {
            return None;
        }
        let device = u8::try_from((at >> 15) & 0x1f).ok()?;
        let function = u8::try_from((at >> 12) & 7).ok()?;
        Some(((bus, device, function), at & (CONFIG_LEN as u64 - 1)))
    }

    /// A read of `data.len()` bytes at `offset` in the window.
    pub fn read(&self, offset: u64, data: &mut [u8]) {
        for (i, b) in data.iter_mut().enumerate() {
            let f = offset
                .checked_add(i as u64)
                .and_then(|at| self.decode(at))
                .and_then(|(bdf, reg)| Some((self.functions.get(&bdf)?, reg)));
            *b = match f {
                Some((f, reg)) => {
                    let mut one = [0u8];
                    f.lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .config_read(reg, &mut one);
                    one[0]
                }
                None => 0xff,
            };
        }
    }

    /// A write of `data` at `offset` in the window: each function gets its
    /// own bytes in one write.
    pub fn write(&mut self, offset: u64, data: &[u8]) {
        let mut i = 0;
        while i < data.len() {
            let Some((bdf, reg)) = offset.checked_add(i as u64).and_then(|at| self.decode(at))
            else {
                return;
            };
            // The bytes up to the end of this function's space.
            let room = usize::try_from(CONFIG_LEN as u64 - reg).unwrap_or(0).max(1);
            let end = (i + room).min(data.len());
            if let Some(f) = self.functions.get(&bdf) {
                f.lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .config_write(reg, &data[i..end]);
            }
            i = end;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cxl::root_port::root_port;

    fn at(bus: u8, device: u8, function: u8, reg: u64) -> u64 {
        (u64::from(bus - 0x0c) << 20) | u64::from(device) << 15 | u64::from(function) << 12 | reg
    }

    #[test]
    fn functions_answer_at_their_address_and_empty_ones_read_all_ones() {
        let mut e = Ecam::new(0x0c, 0x0f);
        assert_eq!(e.len(), 4 << 20);
        let rp: SharedFunction = Arc::new(Mutex::new(root_port(0)));
        e.add((0x0c, 0, 0), rp.clone()).unwrap();
        let mut id = [0u8; 4];
        e.read(at(0x0c, 0, 0, 0), &mut id);
        assert_eq!(u32::from_le_bytes(id), 0x7075_8086);
        e.read(at(0x0c, 1, 0, 0), &mut id);
        assert_eq!(id, [0xff; 4], "no device");
        e.read(at(0x0d, 0, 0, 0), &mut id);
        assert_eq!(id, [0xff; 4]);
        // A write reaches the function's space.
        e.write(at(0x0c, 0, 0, 0x18), &[0x0c, 0x0d, 0x0d]);
        let mut buses = [0u8; 3];
        rp.lock().unwrap().config_read(0x18, &mut buses);
        assert_eq!(buses, [0x0c, 0x0d, 0x0d]);
        // Past the window and across a function's end: no panic, nothing else hit.
        e.write(e.len() - 2, &[1; 8]);
        e.write(u64::MAX - 3, &[1; 8]);
        e.write(at(0x0c, 0, 0, 0xffe), &[0xee; 4]);
        e.read(u64::MAX - 1, &mut id);
        assert_eq!(id, [0xff; 4]);
    }

    #[test]
    fn an_address_outside_the_window_or_taken_twice_is_refused() {
        let mut e = Ecam::new(0x0c, 0x0f);
        let f = || -> SharedFunction { Arc::new(Mutex::new(root_port(0))) };
        assert!(matches!(
            e.add((0x10, 0, 0), f()),
            Err(EcamError::Outside { .. })
        ));
        assert!(matches!(
            e.add((0x0c, 32, 0), f()),
            Err(EcamError::Outside { .. })
        ));
        assert!(matches!(
            e.add((0x0c, 0, 8), f()),
            Err(EcamError::Outside { .. })
        ));
        e.add((0x0c, 0, 0), f()).unwrap();
        let err = e.add((0x0c, 0, 0), f()).unwrap_err();
        assert_eq!(err, EcamError::Taken(0x0c, 0, 0));
        assert_eq!(err.to_string(), "PCI function 0c:00.0 is there twice");
    }
}
