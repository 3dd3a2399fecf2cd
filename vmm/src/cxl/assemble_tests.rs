use std::os::unix::fs::FileExt;
use std::sync::Arc;

use devices::bus::BusDevice;
use devices::cxl::pci_config::{DEVICE_ID, VENDOR_ID};
use vmm_sys_util::tempfile::TempFile;

use super::*;
use crate::config::CxlPmemSpec;

const SIZE: u64 = 256 << 20;
const LABELS: u32 = 128 << 10;

/// A platform of one 256 MiB device over a sparse temporary file.
pub(crate) fn one_device() -> (CxlPlatform, DeviceFile, TempFile) {
    let platform = CxlPlatform::place(&[CxlPmemSpec::temporary(SIZE)], 8 << 30, 46).unwrap();
    let tmp = TempFile::new().unwrap();
    tmp.as_file().set_len(SIZE + u64::from(LABELS)).unwrap();
    let file = DeviceFile {
        serial: 0x1234_5678_9abc,
        file: Arc::new(tmp.as_file().try_clone().unwrap()),
        label_size: LABELS,
    };
    (platform, file, tmp)
}

pub(crate) fn read32(bus: &mut impl BusDevice, addr: u64) -> u32 {
    let mut v = [0u8; 4];
    bus.read(addr - layout::CXL_ECAM_START.0, &mut v);
    u32::from_le_bytes(v)
}

pub(crate) fn write32(bus: &mut impl BusDevice, addr: u64, v: u32) {
    bus.write(addr - layout::CXL_ECAM_START.0, &v.to_le_bytes());
}

/// ECAM address of bus `bus`, device 0, function 0, register `reg`.
pub(crate) fn ecam(bus: u8, reg: u64) -> u64 {
    layout::CXL_ECAM_START.0 + (u64::from(bus) << 20) + reg
}

#[test]
fn each_host_bridge_has_a_second_root_port_with_an_empty_bus_and_closed_windows() {
    let (platform, file, _tmp) = one_device();
    let mut bus = assemble(&platform, &[file]).unwrap().unwrap();
    let rp = platform.devices[0].root_port_bus();
    // Device 1 of the root bus: a root port (class 0604) whose port number is 1.
    let spare = ecam(rp, 0) + (u64::from(SPARE_ROOT_PORT) << 15);
    assert_eq!(read32(&mut bus, spare) & 0xffff, 0x8086);
    assert_eq!(read32(&mut bus, spare + 0x08) >> 16, 0x0604);
    assert_eq!(
        read32(&mut bus, spare + 0x40 + 0x0c) >> 24,
        1,
        "port number"
    );
    // Primary 0c, secondary and subordinate 0e: below the device's bus, nothing on it.
    assert_eq!(read32(&mut bus, spare + 0x18) & 0xff_ffff, 0x0e0e0c);
    assert_eq!(
        read32(&mut bus, ecam(0x0e, 0)),
        0xffff_ffff,
        "no device on bus 0e"
    );
    // Both windows closed (base above limit).
    let mem = read32(&mut bus, spare + 0x20);
    assert!(mem & 0xfff0 > mem >> 16 & 0xfff0, "{mem:#x}");
    assert_eq!(read32(&mut bus, spare + 0x24), 0x0001_fff1);
}

#[test]
fn the_firmware_leaves_the_root_port_and_the_devices_bar_placed() {
    let (platform, file, _tmp) = one_device();
    let mut bus = assemble(&platform, &[file]).unwrap().unwrap();
    let d = &platform.devices[0];
    let (rp, dev) = (d.root_port_bus(), d.device_bus());
    assert_eq!((rp, dev), (0x0c, 0x0d));
    assert_eq!(
        read32(&mut bus, ecam(dev, 0)),
        u32::from(DEVICE_ID) << 16 | u32::from(VENDOR_ID)
    );
    // Root port: primary 0c, secondary and subordinate 0d; window e80-e83.
    assert_eq!(read32(&mut bus, ecam(rp, 0x18)) & 0xff_ffff, 0x0d0d0c);
    assert_eq!(read32(&mut bus, ecam(rp, 0x20)), 0xe830_e800);
    // The prefetchable window closed: base 0xfff00000 above limit 0xfffff.
    assert_eq!(read32(&mut bus, ecam(rp, 0x24)), 0x0001_fff1);
    // BAR0 at the bridge's window, memory decoding on: the endpoint's
    // component registers answer there (the CXL.cache/mem array header).
    assert_eq!(read32(&mut bus, ecam(dev, 0x10)) & !0xf, 0xe800_0000);
    assert_eq!(read32(&mut bus, 0xe800_1000) & 0xffff, 1);
    // The host bridge's component registers at its CHBCR.
    assert_eq!(
        read32(&mut bus, d.host_bridge.registers + 0x1000) & 0xffff,
        1
    );
    assert_eq!(range_len(1), 0x1001_0000);
}

#[test]
fn the_label_area_and_clear_poisons_data_are_the_files() {
    let (platform, file, tmp) = one_device();
    let bus = assemble(&platform, &[file]).unwrap().unwrap();
    let device = bus.devices()[0].device.clone();
    let mut dev = device.lock().unwrap();
    // Set LSA (0x4103): offset 8, then the data; Get LSA (0x4102) reads it back.
    let mut input = vec![0u8; 8];
    input[0..4].copy_from_slice(&8u32.to_le_bytes());
    input.extend_from_slice(b"LABEL-BYTES!");
    let mut out = vec![0u8; 64];
    use devices::cxl::CommandSet;
    assert_eq!(dev.memdev_mut().execute(0x4103, &input, &mut out), Ok(0));
    let mut got = [0u8; 12];
    tmp.as_file().read_exact_at(&mut got, SIZE + 8).unwrap();
    assert_eq!(&got, b"LABEL-BYTES!");
    // Clear Poison (0x4302): DPA 4096, 64 bytes of replacement data.
    let mut clear = vec![0u8; 0x48];
    clear[0..8].copy_from_slice(&4096u64.to_le_bytes());
    clear[8..].fill(0x5a);
    assert_eq!(dev.memdev_mut().execute(0x4302, &clear, &mut out), Ok(0));
    let mut media = [0u8; 64];
    tmp.as_file().read_exact_at(&mut media, 4096).unwrap();
    assert_eq!(media, [0x5a; 64]);
}

#[test]
fn no_devices_is_no_bus_and_a_missing_file_is_refused() {
    let none = CxlPlatform::place(&[], 8 << 30, 46).unwrap();
    assert!(assemble(&none, &[]).unwrap().is_none());
    let (platform, _, _tmp) = one_device();
    let e = assemble(&platform, &[]).unwrap_err();
    assert!(e.to_string().contains("0 CXL backing files for 1"), "{e}");
}
