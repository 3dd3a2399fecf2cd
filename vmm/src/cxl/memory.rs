//! The CXL platform's MMIO range as the VM sees it ([`CxlMmio`]): the bus of
//! `devices::cxl::bus` and, behind it, the devices' capacity as KVM memory.
//!
//! After every guest write to the range the bus reports its HDM decoder
//! changes; a committed endpoint decoder inside its device's own window
//! becomes a KVM memory slot over the backing file's mapping (the guest's
//! loads and stores then run at memory speed, no exit), a reset decoder
//! removes its slot. Each decoder has a slot number of its own, reserved when
//! the VM is built. A commit the bus refused (outside the window, memory not
//! enabled) or one KVM refuses (a range another slot holds) maps nothing: the
//! guest's accesses there then exit and read all ones, as on a bus with
//! nothing behind the address.

use std::sync::Arc;

use devices::bus::BusDevice;
use devices::cxl::bus::{CxlBus, Mapping};
use devices::cxl::hdm::DECODERS;
use devices::pci_ecam::{Bdf, SharedFunction};
use kvm_ioctls::VmFd;
use vm_memory::MmapRegion;

/// Sets KVM memory slots: the VM's fd, or a recorder in tests.
pub trait Memslots: Send {
    /// Maps `len` bytes at host address `host` as guest range `gpa` in
    /// `slot`; `len` 0 deletes the slot.
    ///
    /// # Safety
    /// `host..host + len` must be a mapping that stays valid while the slot
    /// exists.
    unsafe fn set(&self, slot: u32, gpa: u64, len: u64, host: u64) -> Result<(), String>;
}

impl Memslots for Arc<VmFd> {
    unsafe fn set(&self, slot: u32, gpa: u64, len: u64, host: u64) -> Result<(), String> {
        let region = kvm_bindings::kvm_userspace_memory_region {
            slot,
            flags: 0,
            guest_phys_addr: gpa,
            memory_size: len,
            userspace_addr: host,
        };
        // SAFETY: the caller promises `host..host + len` stays mapped while
        // the slot exists (a deletion, `len` 0, maps nothing).
        unsafe { self.set_user_memory_region(region) }.map_err(|e| e.to_string())
    }
}

/// One device's capacity and the slots its decoders hold.
struct DeviceMemory {
    /// The backing file's capacity (DPA 0 at offset 0), `MAP_SHARED`.
    mapping: MmapRegion,
    /// Per endpoint decoder: what it mapped (guest address, bytes).
    mapped: [Option<(u64, u64)>; DECODERS],
}

/// The CXL range's MMIO device.
pub struct CxlMmio<S: Memslots = Arc<VmFd>> {
    bus: CxlBus,
    slots: S,
    /// The first reserved slot number: device `d`'s decoder `i` uses
    /// `first_slot + d * DECODERS + i`.
    first_slot: u32,
    devices: Vec<DeviceMemory>,
}

impl<S: Memslots> std::fmt::Debug for CxlMmio<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CxlMmio")
            .field("bus", &self.bus)
            .field("first_slot", &self.first_slot)
            .field("devices", &self.devices.len())
            .finish_non_exhaustive()
    }
}

/// Memory slots the CXL devices reserve: one per endpoint decoder.
pub fn slots_needed(devices: usize) -> usize {
    devices * DECODERS
}

impl<S: Memslots> CxlMmio<S> {
    /// The range of `bus`, whose device `d` has its capacity in `mappings[d]`,
    /// with slots from `first_slot` on (`slots_needed` of them).
    pub fn new(bus: CxlBus, mappings: Vec<MmapRegion>, slots: S, first_slot: u32) -> Self {
        let devices = mappings
            .into_iter()
            .map(|mapping| DeviceMemory {
                mapping,
                mapped: [None; DECODERS],
            })
            .collect();
        Self {
            bus,
            slots,
            first_slot,
            devices,
        }
    }

    /// The bus's PCI functions (root ports and devices), shared with its ECAM.
    pub fn pci_functions(&self) -> std::collections::BTreeMap<Bdf, SharedFunction> {
        self.bus.pci_functions()
    }

    /// The bus's Type-3 devices, in bus order.
    pub fn devices(&self) -> Vec<devices::cxl::bus::SharedType3> {
        self.bus
            .devices()
            .iter()
            .map(|d| d.device.clone())
            .collect()
    }

    /// What each device's decoders map now: (device, decoder, guest address, bytes).
    pub fn mapped(&self) -> Vec<(usize, usize, u64, u64)> {
        let mut out = Vec::new();
        for (d, dev) in self.devices.iter().enumerate() {
            for (i, m) in dev.mapped.iter().enumerate() {
                if let Some((gpa, len)) = m {
                    out.push((d, i, *gpa, *len));
                }
            }
        }
        out
    }

    fn slot(&self, device: usize, decoder: usize) -> Option<u32> {
        let n = u32::try_from(device.checked_mul(DECODERS)?.checked_add(decoder)?).ok()?;
        self.first_slot.checked_add(n)
    }

    /// Applies the bus's decoder changes.
    fn apply_mappings(&mut self) {
        for m in self.bus.take_mappings() {
            match m {
                Mapping::Map {
                    device,
                    decoder,
                    hpa,
                    size,
                    dpa,
                } => self.map(device, decoder, (hpa, size), dpa),
                Mapping::Unmap { device, decoder } => self.unmap(device, decoder),
                Mapping::Refused {
                    device,
                    decoder,
                    why,
                } => {
                    self.unmap(device, decoder);
                    log::warn!("CXL device {device} decoder {decoder}: commit not mapped: {why}");
                }
            }
        }
    }

    /// Maps DPA `dpa..dpa + size` of `device` at `hpa` in the decoder's slot.
    fn map(&mut self, device: usize, decoder: usize, (hpa, size): (u64, u64), dpa: u64) {
        self.unmap(device, decoder);
        let (Some(slot), Some(dev)) = (self.slot(device, decoder), self.devices.get(device)) else {
            return;
        };
        let capacity = dev.mapping.size() as u64;
        let inside = dpa.checked_add(size).is_some_and(|end| end <= capacity) && size > 0;
        if !inside || decoder >= DECODERS {
            log::warn!("CXL device {device} decoder {decoder}: DPA {dpa:#x}+{size:#x} is not inside its {capacity:#x} bytes; not mapped");
            return;
        }
        // dpa < capacity = the mapping's size, which fits in usize.
        let host = dev.mapping.as_ptr() as u64 + dpa;
        // SAFETY: `host..host + size` lies inside `dev.mapping` (checked
        // above), which this device keeps for as long as it exists; the slot
        // is deleted before any other mapping is put in it.
        match unsafe { self.slots.set(slot, hpa, size, host) } {
            Ok(()) => self.devices[device].mapped[decoder] = Some((hpa, size)),
            Err(e) => log::warn!(
                "CXL device {device} decoder {decoder}: KVM refused a memory slot at {hpa:#x}+{size:#x}: {e}; not mapped"
            ),
        }
    }

    /// Removes what `decoder` of `device` mapped, if anything.
    fn unmap(&mut self, device: usize, decoder: usize) {
        let Some(slot) = self.slot(device, decoder) else {
            return;
        };
        let Some(m) = self
            .devices
            .get_mut(device)
            .and_then(|d| d.mapped.get_mut(decoder))
        else {
            return;
        };
        let Some((gpa, _)) = m.take() else {
            return;
        };
        // SAFETY: a deletion (length 0) maps nothing.
        if let Err(e) = unsafe { self.slots.set(slot, gpa, 0, 0) } {
            log::warn!(
                "CXL device {device} decoder {decoder}: removing its memory slot failed: {e}"
            );
        }
    }
}

impl<S: Memslots> BusDevice for CxlMmio<S> {
    fn read(&mut self, offset: u64, data: &mut [u8]) {
        self.bus.read(offset, data);
    }

    fn write(&mut self, offset: u64, data: &[u8]) {
        self.bus.write(offset, data);
        self.apply_mappings();
    }
}

#[cfg(test)]
#[path = "memory_tests.rs"]
mod tests;
