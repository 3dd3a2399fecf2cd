//! The control socket's `media` command on a CXL memory device (`"cxl": N`,
//! `pmemvm ctl SOCKET media inject --cxl N RANGE`): what a device's media
//! scrub finds, told as a device tells it. Each 64-byte unit of the range
//! joins the device's poison list (Get Poison List shows it with source
//! "external"), and one General Media event record per range goes into the
//! device's Failure log; the device raises its event interrupt (MSI) when
//! the guest has asked for one (Linux 6.3 and later, with CXL memory error
//! reporting granted by `_OSC`), and Linux traces `cxl_general_media` with
//! the region and host address when the DPA is mapped. A guest that has not
//! enabled the interrupt finds the record the next time it reads the log.
//! Clear takes the units off the poison list; list shows it.
//!
//! The poison list is the device's, kept while the VM runs (not in the
//! backing file, unlike an NVDIMM's error list).

use std::sync::{Arc, Mutex, MutexGuard};

use devices::cxl::bus::SharedType3;
use devices::cxl::memdev::{PoisonSource, POISON_UNIT};
use devices::cxl::pci_config::MsiMessage;
use devices::cxl::type3::Type3Device;
use kvm_ioctls::VmFd;
use serde_json::{json, Value};

use super::protocol::{MediaAction, MediaRefusal};
use crate::config::badblocks::parse_badblocks;
use crate::config::ConfigError;

/// Delivers a device's MSI to the guest: the VM's fd, or a recorder in tests.
pub trait MsiSender: Send + Sync {
    /// Sends `message`.
    fn send(&self, message: MsiMessage) -> Result<(), String>;
}

impl MsiSender for VmFd {
    fn send(&self, m: MsiMessage) -> Result<(), String> {
        let msi = kvm_bindings::kvm_msi {
            address_lo: (m.address & 0xffff_ffff) as u32,
            address_hi: (m.address >> 32) as u32,
            data: m.data,
            ..Default::default()
        };
        self.signal_msi(msi).map(|_| ()).map_err(|e| e.to_string())
    }
}

/// The CXL devices `media` reaches, in `--cxl-pmem` order.
#[derive(Default)]
pub struct CxlMedia {
    /// The devices.
    pub devices: Vec<SharedType3>,
    /// Where their interrupts go.
    pub msi: Option<Arc<dyn MsiSender>>,
}

impl std::fmt::Debug for CxlMedia {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CxlMedia")
            .field("devices", &self.devices.len())
            .finish_non_exhaustive()
    }
}

/// The device physical addresses of the 64-byte units of `[offset, offset + len)`.
fn units(offset: u64, len: u64) -> impl Iterator<Item = u64> {
    (0..len / POISON_UNIT).map(move |i| offset + i * POISON_UNIT)
}

fn lock(d: &Mutex<Type3Device>) -> MutexGuard<'_, Type3Device> {
    d.lock().unwrap_or_else(|e| e.into_inner())
}

/// The poison list as Get Poison List's runs, in bytes.
fn poison_json(d: &Type3Device) -> Vec<Value> {
    d.memdev()
        .poison_runs()
        .iter()
        .map(|(dpa, units, source)| {
            let source = match source {
                PoisonSource::Injected => "injected",
                _ => "external",
            };
            json!({"dpa": dpa, "length": units * POISON_UNIT, "source": source})
        })
        .collect()
}

impl CxlMedia {
    fn device(&self, index: u32) -> Result<&SharedType3, MediaRefusal> {
        let n = self.devices.len();
        usize::try_from(index)
            .ok()
            .and_then(|i| self.devices.get(i))
            .ok_or_else(|| {
                let have = match n {
                    0 => "this VM has no CXL memory device".to_owned(),
                    1 => "this VM has one CXL memory device, 0".to_owned(),
                    n => format!("this VM has {n} CXL memory devices, 0 to {}", n - 1),
                };
                (format!("CXL device {index} does not exist: {have}"), true)
            })
    }

    fn list(d: &Type3Device, index: u32) -> Value {
        json!({"cxl": index, "capacity": d.memdev().capacity(), "poison": poison_json(d)})
    }

    /// Every device's poison list.
    pub fn list_all(&self) -> Vec<Value> {
        (0u32..)
            .zip(&self.devices)
            .map(|(i, d)| Self::list(&lock(d), i))
            .collect()
    }

    /// The ranges of `text` on a device of `capacity` bytes.
    fn ranges(text: &str, index: u32, capacity: u64) -> Result<Vec<(u64, u64)>, MediaRefusal> {
        parse_badblocks(text, capacity).map_err(|e| match e {
            ConfigError::BadBlocks { why, .. } => (
                format!(
                    "media range '{text}' is not valid for CXL device {index}: {why}; use \
                     OFFSET+LEN[:OFFSET+LEN...] in bytes from the start of its {capacity}-byte \
                     capacity (the device physical address), multiples of 512 with an optional \
                     K, M or G suffix (e.g. 1M+4K)"
                ),
                true,
            ),
            other => (other.to_string(), true),
        })
    }

    /// Runs `media ACTION --cxl INDEX [RANGE]`.
    pub fn run(
        &self,
        action: MediaAction,
        index: u32,
        range: Option<&str>,
    ) -> Result<Value, MediaRefusal> {
        let shared = self.device(index)?;
        let mut d = lock(shared);
        if action == MediaAction::List {
            return Ok(json!({"cxl_devices": [Self::list(&d, index)]}));
        }
        let text = range.ok_or_else(|| ("media needs a range".to_owned(), true))?;
        let ranges = Self::ranges(text, index, d.memdev().capacity())?;
        if action == MediaAction::Clear {
            let mut cleared = 0u64;
            for (offset, len) in &ranges {
                for dpa in units(*offset, *len) {
                    cleared += u64::from(d.clear_poison_from_host(dpa)) * POISON_UNIT;
                }
            }
            let mut out = Self::list(&d, index);
            out["cleared_bytes"] = json!(cleared);
            return Ok(out);
        }
        self.inject(&mut d, index, &ranges)
    }

    /// Poisons every unit of `ranges` and records one event per range; all
    /// or nothing.
    fn inject(
        &self,
        d: &mut Type3Device,
        index: u32,
        ranges: &[(u64, u64)],
    ) -> Result<Value, MediaRefusal> {
        let known: std::collections::BTreeSet<u64> =
            d.memdev().poisoned().map(|(dpa, _)| dpa).collect();
        let new: std::collections::BTreeSet<u64> = ranges
            .iter()
            .flat_map(|(o, l)| units(*o, *l))
            .filter(|dpa| !known.contains(dpa))
            .collect();
        let limit = usize::from(devices::cxl::memdev::POISON_LIMIT);
        if known.len() + new.len() > limit {
            return Err((
                format!(
                    "CXL device {index} keeps at most {limit} poisoned 64-byte units; it has {} \
                     and the range adds {}; nothing changed (clear some first)",
                    known.len(),
                    new.len()
                ),
                true,
            ));
        }
        for (offset, len) in ranges {
            for dpa in units(*offset, *len).skip(1) {
                let _ = d.memdev_mut().poison_from_host(dpa);
            }
            d.record_media_error(*offset).map_err(|rc| {
                (
                    format!("CXL device {index} refused poison at DPA {offset:#x}: {rc:?}"),
                    false,
                )
            })?;
        }
        let mut out = Self::list(d, index);
        out["notified"] = json!(self.interrupt(d));
        Ok(out)
    }

    /// Sends the device's pending event interrupt; whether the guest was
    /// interrupted.
    fn interrupt(&self, d: &mut Type3Device) -> bool {
        let Some(message) = d.take_interrupt() else {
            log::info!(
                "media inject: the event record waits in the device's log (the guest has not enabled its event interrupt)"
            );
            return false;
        };
        match self.msi.as_ref().map(|m| m.send(message)) {
            Some(Ok(())) => true,
            Some(Err(e)) => {
                log::warn!("media inject: the device's MSI was not delivered: {e}");
                false
            }
            None => false,
        }
    }
}

#[cfg(test)]
#[path = "cxl_media_tests.rs"]
mod tests;
