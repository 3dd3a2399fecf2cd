// SPDX-License-Identifier: Apache-2.0
//! Fuzz body: a CXL Type-3 device's configuration space and component
//! registers (HDM decoders), written and read as a hostile guest would.
//!
//! One input is a sequence of accesses of 12 bytes: a control byte (bit 0:
//! component registers or configuration space, bit 1: write, bits 2-4:
//! width 1-8), an offset (u16, folded near the interesting registers when
//! bit 5 is clear), and up to 8 data bytes. When bit 6 is set, a write to a
//! decoder's control register sets Commit with plausible base, size and
//! skip written first, so commits succeed often enough to matter. When bit
//! 7 is set, a configuration access goes through ports 0xCF8/0xCFC
//! (`devices::pci_host`, sharing the ECAM's functions): the address register
//! selects the device and the offset's dword (or, with bit 5, any address
//! the offset and data make), then the data port is read or written at the
//! offset's byte.
//!
//! Checked after every access: the configuration space's read-only bits are
//! as built (ids, class, capability chain, DVSEC contents but for the
//! control and range base, MSI but for its enable bit, address and data);
//! BAR0 still sizes to 128 KiB; an enabled MSI message has a dword-aligned
//! address and 16-bit data; every commit
//! reported lies inside the address space, within the device's capacity in
//! DPA, and no two committed ranges overlap; a reset names a decoder
//! committed before.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use devices::bus::BusDevice;
use devices::cxl::component::ComponentRegisters;
use devices::cxl::hdm::{DecoderEvent, DecoderSide, DECODERS, HDM_UNIT};
use devices::cxl::pci_config::{type3_endpoint, ConfigSpace, BAR0_SIZE, CONFIG_LEN};
use devices::cxl::root_port::root_port;
use devices::pci_ecam::Ecam;
use devices::pci_host::PciHostBridge;

/// The device's capacity.
pub const CAPACITY: u64 = 2 << 30;
/// Where 0d:00.0 starts in the ECAM window of buses 0c-0f; an offset past
/// its 4 KiB reaches other functions (absent, or the root port below it
/// when the offset wraps).
const DEVICE_IN_ECAM: u64 = 1 << 20;
const HDM: u64 = 0x1100;

/// The device's registers and what its commits have mapped.
#[derive(Debug)]
pub struct Device {
    /// The device's configuration space, also at 0d:00.0 of `ecam` (buses
    /// 0c-0f, a root port at 0c:00.0).
    config: Arc<Mutex<ConfigSpace>>,
    ecam: Ecam,
    /// Ports 0xCF8-0xCFF over the ECAM's functions.
    ports: PciHostBridge,
    /// The first [`CHECKED`] bytes as built.
    built: Vec<u8>,
    component: ComponentRegisters,
    /// Committed decoders: index → (HPA, size, DPA).
    mapped: BTreeMap<usize, (u64, u64, u64)>,
    commits: u64,
    resets: u64,
    /// Reads of the device's ids through the ports that found them.
    port_id_reads: u64,
}

impl Device {
    /// Commits and resets seen so far.
    pub fn counts(&self) -> (u64, u64) {
        (self.commits, self.resets)
    }

    /// Reads of the device's ids through ports 0xCF8/0xCFC that found them.
    pub fn port_id_reads(&self) -> u64 {
        self.port_id_reads
    }
}

/// A fresh device.
pub fn device() -> Device {
    let space = type3_endpoint(0x1234, CAPACITY);
    let built = read_prefix(&space);
    let config = Arc::new(Mutex::new(space));
    let mut ecam = Ecam::new(0x0c, 0x0f);
    ecam.add((0x0c, 0, 0), Arc::new(Mutex::new(root_port(0))))
        .expect("the root port's address");
    ecam.add((0x0d, 0, 0), config.clone())
        .expect("the device's address");
    let ports = PciHostBridge::with_functions(ecam.functions());
    Device {
        built,
        config,
        ecam,
        ports,
        component: ComponentRegisters::new(DecoderSide::Endpoint { capacity: CAPACITY }),
        mapped: BTreeMap::new(),
        commits: 0,
        resets: 0,
        port_id_reads: 0,
    }
}

/// Runs one input on a fresh device.
pub fn run(data: &[u8]) {
    run_on(&mut device(), data);
}

/// Runs one input's accesses on `dev`.
pub fn run_on(dev: &mut Device, data: &[u8]) {
    for op in data.chunks(12) {
        let pick = |i: usize| op.get(i).copied().unwrap_or(0);
        let control = pick(0);
        let width = usize::from((control >> 2) & 7) + 1;
        let raw = u64::from(u16::from_le_bytes([pick(1), pick(2)]));
        let bytes: Vec<u8> = (0..width).map(|i| pick(3 + i)).collect();
        let component = control & 1 != 0;
        let offset = match (control & 0x20 != 0, component) {
            (true, _) => raw,
            (false, true) => HDM + raw % 0xa0,
            (false, false) => {
                [0x04, 0x10, 0x80, 0x110, 0x130][usize::from(pick(1) % 5)] + raw % 0x40
            }
        };
        if component && control & 0x40 != 0 {
            commit(dev, usize::from(pick(11)) % DECODERS, pick(10));
        } else if !component && control & 0x80 != 0 {
            through_ports(dev, control, offset, &bytes);
        } else if control & 2 != 0 {
            if component {
                dev.component.write(offset, &bytes);
            } else {
                dev.ecam.write(DEVICE_IN_ECAM + offset, &bytes);
            }
        } else {
            let mut buf = vec![0u8; width];
            if component {
                dev.component.read(offset, &mut buf);
            } else {
                dev.ecam.read(DEVICE_IN_ECAM + offset, &mut buf);
            }
        }
        check(dev);
    }
}

/// One configuration access through ports 0xCF8/0xCFC.
fn through_ports(dev: &mut Device, control: u8, offset: u64, bytes: &[u8]) {
    let address = if control & 0x20 != 0 {
        // Any address register value: enable bit, bus, device, function.
        u32::from_le_bytes([bytes[0], bytes.get(1).copied().unwrap_or(0), 0x0d, 0x80])
            ^ u32::try_from(offset).unwrap_or(0) << 16
    } else {
        0x8000_0000 | 0x0d << 16 | u32::try_from(offset & 0xfc).unwrap_or(0)
    };
    dev.ports.write(0, &address.to_le_bytes());
    let port = 4 + (offset & 3);
    if control & 2 != 0 {
        dev.ports.write(port, bytes);
    } else {
        let mut buf = vec![0u8; bytes.len()];
        dev.ports.read(port, &mut buf);
        let ids = 0x0d93_8086u32.to_le_bytes();
        if address == 0x800d_0000 && port == 4 && buf.get(..4) == Some(&ids[..]) {
            dev.port_id_reads += 1;
        }
    }
}

/// Programs decoder `index` as Linux does and sets Commit: 256 MiB-unit
/// base, size and skip from `seed`.
fn commit(dev: &mut Device, index: usize, seed: u8) {
    let reg = |r: u64| HDM + 0x10 + 0x20 * index as u64 + r;
    let base = (16 + u64::from(seed & 7)) * HDM_UNIT;
    let size = (u64::from((seed >> 3) & 3) + 1) * HDM_UNIT;
    let skip = u64::from((seed >> 5) & 1) * HDM_UNIT;
    for (r, v) in [
        (0x04, base >> 32),
        (0x00, base),
        (0x0c, size >> 32),
        (0x08, size),
        (0x18, skip >> 32),
        (0x14, skip),
    ] {
        let low = u32::try_from(v & 0xffff_ffff).unwrap_or(0);
        dev.component.write(reg(r), &low.to_le_bytes());
    }
    dev.component
        .write(reg(0x10), &(1u32 << 9 | 1 << 12).to_le_bytes());
}

/// The bytes that hold the header and every capability (past them the space
/// reads 0 and takes no write: spot-checked at its end).
const CHECKED: usize = 0x200;

fn read_prefix(c: &ConfigSpace) -> Vec<u8> {
    let mut b = vec![0u8; CHECKED];
    c.read(0, &mut b);
    b
}

/// The invariants after every access.
fn check(dev: &mut Device) {
    let config = dev.config.lock().unwrap_or_else(|e| e.into_inner());
    let now = read_prefix(&config);
    // Writable places: command, BAR0/1, MSI control, address and data,
    // DVSEC 0 control, range 1 base.
    let writable = |at: usize| {
        matches!(
            at,
            0x04..=0x05 | 0x10..=0x17 | 0x82 | 0x84..=0x8d | 0x11c..=0x11d | 0x130..=0x137
        )
    };
    assert_eq!(
        now[0x82] & !1,
        dev.built[0x82] & !1,
        "MSI control: only enable"
    );
    for at in (0..CHECKED).filter(|&a| !writable(a)) {
        assert_eq!(
            now[at], dev.built[at],
            "read-only config byte {at:#x} changed"
        );
    }
    if let Some(msi) = config.msi() {
        assert!(msi.address & 3 == 0 && msi.data <= 0xffff, "{msi:x?}");
    }
    let mut end = [0u8; 4];
    config.read(CONFIG_LEN as u64 - 4, &mut end);
    drop(config);
    assert_eq!(end, [0; 4], "the space's end");
    // BAR0's low bits: 64-bit memory, and the 128 KiB below the address
    // bits stay 0 (what sizing reads back).
    let bar = u32::from_le_bytes([now[0x10], now[0x11], now[0x12], now[0x13]]);
    assert_eq!(
        u64::from(bar) & (BAR0_SIZE - 1),
        0b0100,
        "BAR0 sizes to 128 KiB"
    );
    for e in dev.component.take_events() {
        match e {
            DecoderEvent::Committed {
                index,
                hpa,
                size,
                dpa,
            } => {
                assert!(size > 0 && hpa.checked_add(size).is_some(), "{e:?}");
                assert!(
                    dpa.checked_add(size).is_some_and(|end| end <= CAPACITY),
                    "{e:?}"
                );
                for (&other, &(h, s, _)) in &dev.mapped {
                    assert!(
                        other == index || hpa + size <= h || h + s <= hpa,
                        "{e:?} overlaps {other}"
                    );
                }
                assert!(
                    dev.mapped.insert(index, (hpa, size, dpa)).is_none(),
                    "{e:?} twice"
                );
                dev.commits += 1;
            }
            DecoderEvent::Reset { index } => {
                assert!(
                    dev.mapped.remove(&index).is_some(),
                    "reset of {index}, not committed"
                );
                dev.resets += 1;
            }
        }
    }
}
