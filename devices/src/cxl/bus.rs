//! The CXL platform's MMIO, as one bus device over one guest physical range
//! (the VMM's layout puts the ECAM, the host bridges' BAR windows and their
//! component registers one after another below 4 GiB): an access is routed
//! to the ECAM's functions, to a host bridge's component registers (CHBCR),
//! or to the Type-3 device whose BAR0 the guest placed there with memory
//! decoding on. Anything else reads all ones and drops writes.
//!
//! After each write the device's HDM decoder commits and resets become
//! [`Mapping`]s for the VMM: a committed endpoint decoder maps the backing
//! file's DPA range at its host address — but only inside the device's own
//! fixed memory window and only while the device's memory is enabled (a
//! hostile guest may commit a decoder over RAM, or anywhere; that is
//! refused, never mapped).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use super::component::{ComponentRegisters, COMPONENT_LEN};
use super::hdm::{DecoderEvent, DecoderSide};
use super::pci_config::BAR0_SIZE;
use super::type3::Type3Device;
use crate::bus::BusDevice;
use crate::pci_ecam::{Bdf, Ecam, SharedFunction};

/// A shared Type-3 device (the ECAM holds it too).
pub type SharedType3 = Arc<Mutex<Type3Device>>;

/// One Type-3 device on the bus and the host range it may be decoded into.
#[derive(Debug)]
pub struct BusType3 {
    /// The device.
    pub device: SharedType3,
    /// Its fixed memory window: base, size.
    pub window: (u64, u64),
}

/// What the VMM does about a decoder change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mapping {
    /// Map device `device`'s DPA `[dpa, dpa + size)` at host address `hpa`
    /// (decoder `decoder` committed it).
    Map {
        /// Which device, in bus order.
        device: usize,
        /// Which endpoint decoder.
        decoder: usize,
        /// Host physical base.
        hpa: u64,
        /// Bytes.
        size: u64,
        /// Device physical base.
        dpa: u64,
    },
    /// Unmap what decoder `decoder` of device `device` mapped.
    Unmap {
        /// Which device.
        device: usize,
        /// Which endpoint decoder.
        decoder: usize,
    },
    /// A commit that is not mapped, and why (for the VMM's log).
    Refused {
        /// Which device.
        device: usize,
        /// Which endpoint decoder.
        decoder: usize,
        /// Why, in words.
        why: String,
    },
}

/// The CXL platform's MMIO range.
#[derive(Debug)]
pub struct CxlBus {
    /// Guest physical address of offset 0.
    base: u64,
    /// The ECAM's offset in the range.
    ecam_at: u64,
    ecam: Ecam,
    /// Each host bridge's component registers with their offset in the range.
    bridges: Vec<(u64, ComponentRegisters)>,
    devices: Vec<BusType3>,
    /// Per device: its memory enabled at the last look, and its committed
    /// endpoint decoders (their commit events).
    seen: Vec<(bool, BTreeMap<usize, DecoderEvent>)>,
}

impl CxlBus {
    /// A bus at guest address `base` with `ecam` at `ecam_at` from it, a
    /// bridge component block at each offset of `chbcr_at` and `devices`
    /// (already in the ECAM).
    pub fn new(
        base: u64,
        ecam_at: u64,
        ecam: Ecam,
        chbcr_at: &[u64],
        devices: Vec<BusType3>,
    ) -> Self {
        Self {
            base,
            ecam_at,
            ecam,
            bridges: chbcr_at
                .iter()
                .map(|&at| (at, ComponentRegisters::new(DecoderSide::Bridge)))
                .collect(),
            seen: devices.iter().map(|_| (false, BTreeMap::new())).collect(),
            devices,
        }
    }

    /// Where range offset `offset` goes: the ECAM, a host bridge's block
    /// (by index) or the device whose BAR0 the guest placed there, with the
    /// offset inside it.
    fn route(&self, offset: u64) -> Target {
        if let Some(o) = offset
            .checked_sub(self.ecam_at)
            .filter(|o| *o < self.ecam.len())
        {
            return Target::Ecam(o);
        }
        let bridge = self.bridges.iter().enumerate().find_map(|(i, (at, _))| {
            let o = offset.checked_sub(*at)?;
            (o < COMPONENT_LEN as u64).then_some(Target::Bridge(i, o))
        });
        let addr = self.base.saturating_add(offset);
        let device = || {
            self.devices.iter().find_map(|d| {
                let o = addr.checked_sub(lock(&d.device).bar0()?)?;
                (o < BAR0_SIZE).then(|| Target::Device(d.device.clone(), o))
            })
        };
        bridge.or_else(device).unwrap_or(Target::None)
    }

    /// The decoder changes of every device since the last call, as mappings.
    /// A device whose memory was turned off (HDM Global Enable or DVSEC
    /// Mem_Enable cleared) has its committed decoders unmapped, and mapped
    /// again when it is turned on.
    pub fn take_mappings(&mut self) -> Vec<Mapping> {
        let mut out = Vec::new();
        for (i, (d, (was_enabled, committed))) in
            self.devices.iter().zip(self.seen.iter_mut()).enumerate()
        {
            let mut dev = lock(&d.device);
            let enabled = dev.memory_enabled();
            if enabled != *was_enabled {
                for (&decoder, &event) in committed.iter() {
                    out.push(match enabled {
                        true => mapping(i, d.window, true, event),
                        false => Mapping::Unmap { device: i, decoder },
                    });
                }
                *was_enabled = enabled;
            }
            for event in dev.take_events() {
                match event {
                    DecoderEvent::Committed { index, .. } => committed.insert(index, event),
                    DecoderEvent::Reset { index } => committed.remove(&index),
                };
                out.push(mapping(i, d.window, enabled, event));
            }
        }
        for (_, bridge) in &mut self.bridges {
            // A bridge decoder routes; the endpoint's commit is what maps.
            bridge.take_events();
        }
        out
    }

    /// The PCI functions of the bus (root ports and devices), shared with
    /// its ECAM, for the port-based configuration mechanism.
    pub fn pci_functions(&self) -> BTreeMap<Bdf, SharedFunction> {
        self.ecam.functions()
    }

    /// The Type-3 devices, in bus order.
    pub fn devices(&self) -> &[BusType3] {
        &self.devices
    }
}

/// The mapping an endpoint decoder `event` of device `device` asks for.
fn mapping(device: usize, window: (u64, u64), enabled: bool, event: DecoderEvent) -> Mapping {
    match event {
        DecoderEvent::Reset { index } => Mapping::Unmap {
            device,
            decoder: index,
        },
        DecoderEvent::Committed {
            index,
            hpa,
            size,
            dpa,
        } => {
            let (base, len) = window;
            let inside = hpa >= base && hpa.checked_add(size).is_some_and(|e| e <= base + len);
            let why = match (enabled, inside) {
                (false, _) => Some("the device's memory is not enabled (DVSEC Mem_Enable and the HDM decoder enable)".to_string()),
                (_, false) => Some(format!(
                    "{hpa:#x}+{size:#x} is not inside the device's fixed memory window {base:#x}+{len:#x}"
                )),
                (true, true) => None,
            };
            match why {
                Some(why) => Mapping::Refused {
                    device,
                    decoder: index,
                    why,
                },
                None => Mapping::Map {
                    device,
                    decoder: index,
                    hpa,
                    size,
                    dpa,
                },
            }
        }
    }
}

fn lock(d: &SharedType3) -> std::sync::MutexGuard<'_, Type3Device> {
    d.lock().unwrap_or_else(|e| e.into_inner())
}

/// Where an access goes ([`CxlBus::route`]).
enum Target {
    Ecam(u64),
    Bridge(usize, u64),
    Device(SharedType3, u64),
    None,
}

impl BusDevice for CxlBus {
    fn read(&mut self, offset: u64, data: &mut [u8]) {
        match self.route(offset) {
            Target::Ecam(o) => self.ecam.read(o, data),
            Target::Bridge(i, o) => self.bridges[i].1.read(o, data),
            Target::Device(d, o) => lock(&d).bar_read(o, data),
            Target::None => data.fill(0xff),
        }
    }

    fn write(&mut self, offset: u64, data: &[u8]) {
        match self.route(offset) {
            Target::Ecam(o) => self.ecam.write(o, data),
            Target::Bridge(i, o) => self.bridges[i].1.write(o, data),
            Target::Device(d, o) => lock(&d).bar_write(o, data),
            Target::None => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cxl::pci_config::{DEVICE_ID, VENDOR_ID};

    const BASE: u64 = 0xe000_0000;
    const BAR: u64 = 0xe800_0000;
    const CHBCR: u64 = 0xf000_0000;
    const WINDOW: (u64, u64) = (16 << 30, 1 << 30);
    /// The device at 0d:00.0 (behind a host bridge whose root bus is 0c).
    const ECAM_DEVICE: u64 = 0x0d << 20;

    fn bus() -> CxlBus {
        let device: SharedType3 = Arc::new(Mutex::new(crate::cxl::type3::tests::device()));
        let mut ecam = Ecam::new(0, 0x0f);
        ecam.add((0x0d, 0, 0), device.clone()).unwrap();
        CxlBus::new(
            BASE,
            0,
            ecam,
            &[CHBCR - BASE],
            vec![BusType3 {
                device,
                window: WINDOW,
            }],
        )
    }

    fn read32(b: &mut CxlBus, addr: u64) -> u32 {
        let mut v = [0u8; 4];
        b.read(addr - BASE, &mut v);
        u32::from_le_bytes(v)
    }

    fn write32(b: &mut CxlBus, addr: u64, v: u32) {
        b.write(addr - BASE, &v.to_le_bytes());
    }

    /// BAR0 at [`BAR`] with memory decoding on, through ECAM.
    fn place_bar(b: &mut CxlBus) {
        write32(b, BASE + ECAM_DEVICE + 0x10, u32::try_from(BAR).unwrap());
        write32(b, BASE + ECAM_DEVICE + 0x14, 0);
        write32(b, BASE + ECAM_DEVICE + 0x04, 1 << 1);
    }

    /// Commits endpoint decoder 0 at `hpa` for 1 GiB through BAR0.
    fn commit(b: &mut CxlBus, hpa: u64) {
        let dec = BAR + 0x1100 + 0x10;
        write32(b, dec, u32::try_from(hpa & 0xffff_ffff).unwrap());
        write32(b, dec + 0x04, u32::try_from(hpa >> 32).unwrap());
        write32(b, dec + 0x08, 0x4000_0000);
        write32(b, dec + 0x10, 1 << 9 | 1 << 12);
    }

    #[test]
    fn ecam_reaches_the_device_and_nothing_else_answers() {
        let mut b = bus();
        let id = read32(&mut b, BASE + ECAM_DEVICE);
        assert_eq!(id, u32::from(DEVICE_ID) << 16 | u32::from(VENDOR_ID));
        assert_eq!(
            read32(&mut b, BASE + (0x0d << 20) + (1 << 15)),
            u32::MAX,
            "no 0d:01.0"
        );
        assert_eq!(
            read32(&mut b, BASE + (0x0c << 20)),
            u32::MAX,
            "no root port added here"
        );
        // The host bridge's component registers: the CXL.cache/mem array header.
        assert_eq!(read32(&mut b, CHBCR + 0x1000) & 0xffff, 1);
    }

    #[test]
    fn bar0_answers_only_where_the_guest_placed_it_with_memory_decoding_on() {
        let mut b = bus();
        assert_eq!(read32(&mut b, BAR + 0x1000), u32::MAX, "not placed yet");
        place_bar(&mut b);
        assert_eq!(
            read32(&mut b, BAR + 0x1000) & 0xffff,
            1,
            "the endpoint's array header"
        );
        assert_ne!(
            read32(&mut b, BAR + 0x10000),
            u32::MAX,
            "the device registers"
        );
        write32(&mut b, BASE + ECAM_DEVICE + 0x04, 0);
        assert_eq!(read32(&mut b, BAR + 0x1000), u32::MAX, "decoding off");
    }

    #[test]
    fn a_commit_maps_only_inside_the_window_with_memory_enabled() {
        let mut b = bus();
        place_bar(&mut b);
        commit(&mut b, WINDOW.0);
        let refused = b.take_mappings();
        assert!(
            matches!(&refused[..], [Mapping::Refused { why, .. }] if why.contains("not enabled")),
            "{refused:?}"
        );
        write32(&mut b, BAR + 0x1110 + 0x10, 0); // uncommit
        assert_eq!(
            b.take_mappings(),
            vec![Mapping::Unmap {
                device: 0,
                decoder: 0
            }]
        );
        // Enable: HDM global enable, DVSEC Mem_Enable.
        write32(&mut b, BAR + 0x1104, 2);
        b.write(ECAM_DEVICE + 0x110 + 0x0c, &[4, 0]);
        commit(&mut b, WINDOW.0);
        assert_eq!(
            b.take_mappings(),
            vec![Mapping::Map {
                device: 0,
                decoder: 0,
                hpa: WINDOW.0,
                size: 1 << 30,
                dpa: 0
            }]
        );
        write32(&mut b, BAR + 0x1110 + 0x10, 0);
        assert_eq!(
            b.take_mappings(),
            vec![Mapping::Unmap {
                device: 0,
                decoder: 0
            }]
        );
        // A hostile guest's commit over low memory is refused, not mapped.
        commit(&mut b, 1 << 30);
        let refused = b.take_mappings();
        assert!(
            matches!(&refused[..], [Mapping::Refused { why, .. }] if why.contains("not inside")),
            "{refused:?}"
        );
    }

    #[test]
    fn turning_the_memory_off_unmaps_the_commits_and_turning_it_on_maps_them_again() {
        let mut b = bus();
        place_bar(&mut b);
        write32(&mut b, BAR + 0x1104, 2);
        b.write(ECAM_DEVICE + 0x110 + 0x0c, &[4, 0]);
        commit(&mut b, WINDOW.0);
        let map = Mapping::Map {
            device: 0,
            decoder: 0,
            hpa: WINDOW.0,
            size: 1 << 30,
            dpa: 0,
        };
        let unmap = Mapping::Unmap {
            device: 0,
            decoder: 0,
        };
        assert_eq!(b.take_mappings(), vec![map.clone()]);
        // Linux's cxl_port unbind clears Mem_Enable, then HDM Global Enable.
        b.write(ECAM_DEVICE + 0x110 + 0x0c, &[0, 0]);
        assert_eq!(b.take_mappings(), vec![unmap.clone()]);
        write32(&mut b, BAR + 0x1104, 0);
        assert_eq!(b.take_mappings(), vec![], "already off");
        write32(&mut b, BAR + 0x1104, 2);
        assert_eq!(b.take_mappings(), vec![], "Mem_Enable still off");
        b.write(ECAM_DEVICE + 0x110 + 0x0c, &[4, 0]);
        assert_eq!(b.take_mappings(), vec![map], "on again: the commit");
        // Reset while off: nothing to map when it comes back on.
        write32(&mut b, BAR + 0x1104, 0);
        write32(&mut b, BAR + 0x1110 + 0x10, 0);
        assert_eq!(b.take_mappings(), vec![unmap.clone(), unmap]);
        write32(&mut b, BAR + 0x1104, 2);
        assert_eq!(b.take_mappings(), vec![]);
    }
}
