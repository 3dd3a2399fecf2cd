use std::sync::{Arc, Mutex};

use devices::bus::BusDevice;

use super::*;
use crate::cxl::assemble::tests::{ecam, one_device, read32, write32};
use crate::cxl::assemble::{assemble, DeviceFile};
use crate::cxl::CxlPlatform;

/// One slot change: slot, guest address, bytes, host address.
type SlotChange = (u32, u64, u64, u64);

/// Records each slot change; refuses every new slot when `.1`.
#[derive(Clone, Default)]
struct Recorder(Arc<Mutex<Vec<SlotChange>>>, bool);

impl Memslots for Recorder {
    unsafe fn set(&self, slot: u32, gpa: u64, len: u64, host: u64) -> Result<(), String> {
        if self.1 && len > 0 {
            return Err("File exists (os error 17)".into());
        }
        self.0.lock().unwrap().push((slot, gpa, len, host));
        Ok(())
    }
}

const BAR: u64 = 0xe800_0000;
/// Endpoint decoder 0's registers in BAR0 (HDM capability at 0x1100).
const DEC0: u64 = BAR + 0x1100 + 0x10;

fn mmio(fail: bool) -> (CxlMmio<Recorder>, Recorder, CxlPlatform, u64) {
    let (platform, file, tmp) = one_device();
    let file: DeviceFile = file;
    let bus = assemble(&platform, &[file]).unwrap().unwrap();
    let mapping = MmapRegion::build(
        Some(vm_memory::FileOffset::new(
            tmp.as_file().try_clone().unwrap(),
            0,
        )),
        256 << 20,
        libc::PROT_READ | libc::PROT_WRITE,
        libc::MAP_SHARED,
    )
    .unwrap();
    let host = mapping.as_ptr() as u64;
    let rec = Recorder(Arc::default(), fail);
    (
        CxlMmio::new(bus, vec![mapping], rec.clone(), 40),
        rec,
        platform,
        host,
    )
}

/// Enables the device's memory (HDM global enable, DVSEC Mem_Enable) and
/// commits decoder 0 at `hpa` for `size` bytes.
fn enable_and_commit(m: &mut CxlMmio<Recorder>, dev_bus: u8, hpa: u64, size: u32) {
    write32(m, BAR + 0x1104, 2);
    m.write(
        ecam(dev_bus, 0x110 + 0x0c) - crate::layout::CXL_ECAM_START.0,
        &[4, 0],
    );
    write32(m, DEC0, u32::try_from(hpa & 0xffff_ffff).unwrap());
    write32(m, DEC0 + 4, u32::try_from(hpa >> 32).unwrap());
    write32(m, DEC0 + 8, size);
    write32(m, DEC0 + 0x10, 1 << 9 | 1 << 12);
}

#[test]
fn a_commit_in_the_window_is_one_slot_over_the_file_and_a_reset_removes_it() {
    let (mut m, rec, platform, host) = mmio(false);
    let window = platform.devices[0].window.base;
    enable_and_commit(&mut m, platform.devices[0].device_bus(), window, 256 << 20);
    assert_eq!(*rec.0.lock().unwrap(), vec![(40, window, 256 << 20, host)]);
    assert_eq!(m.mapped(), vec![(0, 0, window, 256 << 20)]);
    // The committed bit reads back.
    assert_ne!(read32(&mut m, DEC0 + 0x10) & 1 << 10, 0);
    write32(&mut m, DEC0 + 0x10, 0);
    assert_eq!(rec.0.lock().unwrap()[1], (40, window, 0, 0));
    assert!(m.mapped().is_empty());
}

#[test]
fn a_hostile_commit_outside_the_window_maps_nothing() {
    let (mut m, rec, platform, _) = mmio(false);
    // Over guest RAM at 1 GiB.
    enable_and_commit(&mut m, platform.devices[0].device_bus(), 1 << 30, 256 << 20);
    assert!(rec.0.lock().unwrap().is_empty());
    assert!(m.mapped().is_empty());
}

#[test]
fn a_slot_kvm_refuses_is_not_counted_as_mapped() {
    let (mut m, rec, platform, _) = mmio(true);
    let window = platform.devices[0].window.base;
    enable_and_commit(&mut m, platform.devices[0].device_bus(), window, 256 << 20);
    assert!(rec.0.lock().unwrap().is_empty());
    assert!(m.mapped().is_empty());
    assert_eq!(slots_needed(3), 12);
}
