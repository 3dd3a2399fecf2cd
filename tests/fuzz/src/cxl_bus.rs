// SPDX-License-Identifier: Apache-2.0
//! Fuzz body: the CXL platform's MMIO range as the VMM puts it on its bus
//! (`devices::cxl::bus::CxlBus`): the ECAM with a root port and a Type-3
//! device, a host bridge's component registers and the device's BAR0
//! wherever the guest places it — accessed as a hostile guest would.
//!
//! One input is a sequence of accesses of 12 bytes: a control byte (bit 0
//! write, bits 1-3 width 1-8, bits 4-5 which region: ECAM at the device,
//! CHBCR, the BAR window, anywhere in the range), an offset (u32 folded into
//! the region), and up to 7 data bytes. Bit 6 places BAR0 in the window with
//! memory decoding on; bit 7 enables the device's memory (HDM global
//! enable, DVSEC Mem_Enable) and commits a decoder (mostly 0) at a base
//! picked by the data (inside the window or not), or uncommits it.
//!
//! Checked after every access: each mapping the bus asks for lies inside
//! the device's window and within its capacity, no two mapped ranges
//! overlap, and an unmap names a decoder mapped before (or one whose commit
//! was refused).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use devices::bus::BusDevice;
use devices::cxl::bus::{BusType3, CxlBus, Mapping, SharedType3};
use devices::cxl::memdev::Memdev;
use devices::cxl::root_port::root_port;
use devices::cxl::type3::Type3Device;
use devices::pci_ecam::Ecam;

use crate::cxl_mailbox::{Labels, Media, CAPACITY, LSA};

/// The range's base, as the VMM's layout has it.
const BASE: u64 = 0xe000_0000;
/// The ECAM (buses 0 to 0x0f) at the range's start; the device at 0d:00.0.
const DEVICE_IN_ECAM: u64 = 0x0d << 20;
const ECAM_BUSES: u64 = 0x10;
/// The host bridge's BAR window and its component registers.
const BAR_WINDOW: u64 = 0xe800_0000;
const CHBCR: u64 = 0xf000_0000;
/// The range's end.
const END: u64 = 0xf001_0000;
/// The device's fixed memory window.
const WINDOW: (u64, u64) = (64 << 30, CAPACITY);

/// The bus and what it has mapped.
#[derive(Debug)]
pub struct Platform {
    bus: CxlBus,
    /// Decoder → (HPA, size, DPA) of the mapped ranges.
    mapped: BTreeMap<usize, (u64, u64, u64)>,
    maps: u64,
    refusals: u64,
}

impl Platform {
    /// Maps and refused commits seen so far.
    pub fn counts(&self) -> (u64, u64) {
        (self.maps, self.refusals)
    }
}

/// A fresh platform of one host bridge, root port and device.
pub fn platform() -> Platform {
    let labels = Labels(Arc::new(Mutex::new(vec![0u8; LSA])));
    let memdev = Memdev::new(CAPACITY, Box::new(labels), Box::new(Media)).expect("a valid device");
    let device: SharedType3 = Arc::new(Mutex::new(Type3Device::new(0x5eed, memdev)));
    let mut ecam = Ecam::new(0, u8::try_from(ECAM_BUSES - 1).unwrap_or(0));
    ecam.add((0x0c, 0, 0), Arc::new(Mutex::new(root_port(0))))
        .expect("the root port's address");
    ecam.add((0x0d, 0, 0), device.clone())
        .expect("the device's address");
    let bus = CxlBus::new(
        BASE,
        0,
        ecam,
        &[CHBCR - BASE],
        vec![BusType3 {
            device,
            window: WINDOW,
        }],
    );
    Platform {
        bus,
        mapped: BTreeMap::new(),
        maps: 0,
        refusals: 0,
    }
}

/// Runs one input on a fresh platform.
pub fn run(data: &[u8]) {
    run_on(&mut platform(), data);
}

fn write32(p: &mut Platform, addr: u64, v: u32) {
    p.bus.write(addr - BASE, &v.to_le_bytes());
}

/// Runs one input's accesses on `p`.
pub fn run_on(p: &mut Platform, data: &[u8]) {
    for op in data.chunks(12) {
        let pick = |i: usize| op.get(i).copied().unwrap_or(0);
        let control = pick(0);
        let width = usize::from((control >> 1) & 7) + 1;
        let raw = u64::from(u32::from_le_bytes([pick(1), pick(2), pick(3), pick(4)]));
        let bytes: Vec<u8> = (0..width).map(|i| pick(5 + i.min(6))).collect();
        if control & 0x40 != 0 {
            write32(
                p,
                BASE + DEVICE_IN_ECAM + 0x10,
                u32::try_from(BAR_WINDOW).unwrap_or(0),
            );
            write32(p, BASE + DEVICE_IN_ECAM + 0x14, 0);
            write32(p, BASE + DEVICE_IN_ECAM + 0x04, 1 << 1);
        }
        if control & 0x80 != 0 {
            commit(p, usize::try_from(raw % 4).unwrap_or(0), pick(5));
        } else {
            let addr = match (control >> 4) & 3 {
                0 => BASE + DEVICE_IN_ECAM + raw % 0x1000,
                1 => CHBCR + raw % 0x10000,
                2 => BAR_WINDOW + raw % 0x40000,
                _ => BASE + raw % (END - BASE),
            };
            if control & 1 != 0 {
                p.bus.write(addr - BASE, &bytes);
            } else {
                let mut buf = vec![0u8; width];
                p.bus.read(addr - BASE, &mut buf);
            }
        }
        check(p);
    }
}

/// BAR0 at the window's start with memory decoding on, as Linux places it.
fn place_bar(p: &mut Platform) {
    write32(
        p,
        BASE + DEVICE_IN_ECAM + 0x10,
        u32::try_from(BAR_WINDOW).unwrap_or(0),
    );
    write32(p, BASE + DEVICE_IN_ECAM + 0x14, 0);
    write32(p, BASE + DEVICE_IN_ECAM + 0x04, 1 << 1);
}

/// Places BAR0, enables the device's memory and commits endpoint decoder `index` for
/// 256 MiB × (1 + seed bits 3-4) at a base from `seed`: in the window,
/// below it or over its end.
fn commit(p: &mut Platform, index: usize, seed: u8) {
    let unit = 256u64 << 20;
    let base = match seed & 7 {
        0 => 4 << 30,
        1 => WINDOW.0 + WINDOW.1 - unit,
        n => WINDOW.0 + u64::from(n - 2) * unit,
    };
    let size = (u64::from((seed >> 3) & 3) + 1) * unit;
    place_bar(p);
    write32(p, BAR_WINDOW + 0x1104, 2);
    p.bus.write(DEVICE_IN_ECAM + 0x110 + 0x0c, &[4, 0]);
    let dec = BAR_WINDOW + 0x1110 + 0x20 * index as u64;
    for (r, v) in [
        (0x04, base >> 32),
        (0x00, base),
        (0x0c, size >> 32),
        (0x08, size),
    ] {
        write32(p, dec + r, u32::try_from(v & 0xffff_ffff).unwrap_or(0));
    }
    write32(p, dec + 0x10, 1 << 9 | 1 << 12);
}

/// The invariants after every access.
fn check(p: &mut Platform) {
    for m in p.bus.take_mappings() {
        match m {
            Mapping::Map {
                device,
                decoder,
                hpa,
                size,
                dpa,
            } => {
                assert_eq!(device, 0, "{m:?}");
                let end = hpa.checked_add(size).expect("an end in the address space");
                assert!(
                    hpa >= WINDOW.0 && end <= WINDOW.0 + WINDOW.1,
                    "{m:?} outside the window"
                );
                assert!(
                    dpa.checked_add(size).is_some_and(|e| e <= CAPACITY),
                    "{m:?} beyond the capacity"
                );
                for (&other, &(h, s, _)) in &p.mapped {
                    assert!(
                        other == decoder || end <= h || h + s <= hpa,
                        "{m:?} overlaps {other}"
                    );
                }
                assert!(
                    p.mapped.insert(decoder, (hpa, size, dpa)).is_none(),
                    "{m:?} twice"
                );
                p.maps += 1;
            }
            Mapping::Unmap { decoder, .. } => {
                p.mapped.remove(&decoder);
            }
            Mapping::Refused { .. } => p.refusals += 1,
        }
    }
}
