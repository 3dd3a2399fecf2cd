//! A hostile driver against the disk's view of guest memory: buffers, status
//! bytes and rings in a read-only NVDIMM (or legacy range: the same
//! `PROT_READ` mapping), in a DIMM hot-added after boot, past RAM. Each
//! request gets its status or the device needs a reset; nothing is stored
//! through the read-only mapping (a store would end this test process with
//! SIGSEGV) and its file keeps its bytes.

use virtio_bindings::virtio_blk::{VIRTIO_BLK_T_IN, VIRTIO_BLK_T_OUT};
use vm_memory::{Bytes, GuestAddress};

use super::test_driver::*;

const S_OK: u8 = 0;
const S_IOERR: u8 = 1;
/// Where the read-only range sits (above the 2 MiB of test RAM).
const RO_BASE: u64 = 0x100_0000;
const RO_LEN: usize = 0x10_0000;

fn ro_pattern() -> Vec<u8> {
    (0..RO_LEN)
        .map(|i| u8::try_from(i % 239).unwrap())
        .collect()
}

/// A ready driver whose devices also see a read-only range at `RO_BASE`.
fn with_read_only_range() -> (
    Driver,
    vm_memory::mmap::MmapRegion,
    vmm_sys_util::tempfile::TempFile,
) {
    let d = Driver::ready(64 * 1024, false);
    let (ro, file) = read_only_range(&ro_pattern());
    d.view.add_range(RO_BASE, &ro).unwrap();
    (d, ro, file)
}

fn needs_reset(d: &mut Driver) -> bool {
    reg_read(&mut d.dev, 0x70) & 64 != 0
}

#[test]
fn a_read_into_a_read_only_range_fails_with_ioerr_and_its_file_keeps_its_bytes() {
    let (mut d, _ro, file) = with_read_only_range();
    d.header(VIRTIO_BLK_T_IN, 0);
    d.put_desc(0, HEADER, 16, F_NEXT, 1);
    d.put_desc(1, RO_BASE + 4096, 4096, F_NEXT | F_WRITE, 2);
    d.put_desc(2, STATUS, 1, F_WRITE, 0);
    d.submit(0);
    assert_eq!(d.used(0), (0, 1), "returned with its status byte");
    assert_eq!(d.status(), S_IOERR);
    assert_eq!(std::fs::read(file.as_path()).unwrap(), ro_pattern());
    assert!(!needs_reset(&mut d));
    // The device goes on: a read into RAM works.
    d.request(VIRTIO_BLK_T_IN, 0, 512, true);
    assert_eq!((d.used_idx(), d.status()), (2, S_OK));
}

#[test]
fn a_write_from_a_read_only_range_stores_its_bytes_on_the_disk() {
    // Reading guest memory the guest may read is allowed.
    let (mut d, _ro, _file) = with_read_only_range();
    d.header(VIRTIO_BLK_T_OUT, 2);
    d.put_desc(0, HEADER, 16, F_NEXT, 1);
    d.put_desc(1, RO_BASE, 512, F_NEXT, 2);
    d.put_desc(2, STATUS, 1, F_WRITE, 0);
    d.submit(0);
    assert_eq!(d.status(), S_OK);
    assert_eq!(&d.file_bytes()[1024..1536], &ro_pattern()[..512]);
}

#[test]
fn a_status_byte_or_used_ring_in_a_read_only_range_needs_a_reset_with_a_config_interrupt() {
    let (mut d, _ro, file) = with_read_only_range();
    d.header(VIRTIO_BLK_T_IN, 0);
    d.put_desc(0, HEADER, 16, F_NEXT, 1);
    d.put_desc(1, DATA, 512, F_NEXT | F_WRITE, 2);
    d.put_desc(2, RO_BASE + 100, 1, F_WRITE, 0);
    d.submit(0);
    assert_eq!(d.used_idx(), 0, "not returned");
    assert!(needs_reset(&mut d));
    assert_ne!(reg_read(&mut d.dev, 0x60) & 2, 0, "configuration interrupt");
    assert_eq!(d.irq.read().unwrap(), 1, "the line was raised");

    // The used ring there: refused at the notification, before any request.
    let mut e = Driver::new(64 * 1024, false);
    let (ro, _file2) = read_only_range(&ro_pattern());
    e.view.add_range(RO_BASE, &ro).unwrap();
    let f = e.features();
    e.negotiate(f);
    e.setup_queue(QSIZE, DESC, AVAIL, RO_BASE);
    reg_write(&mut e.dev, 0x70, 1 | 2 | 8 | 4);
    let before = e.file_bytes();
    e.request(VIRTIO_BLK_T_OUT, 0, 512, false);
    assert!(needs_reset(&mut e));
    assert_eq!(e.file_bytes(), before, "the request was not executed");
    assert_eq!(std::fs::read(file.as_path()).unwrap(), ro_pattern());
    // A reset brings the device back.
    reg_write(&mut e.dev, 0x70, 0);
    assert!(!needs_reset(&mut e));
}

#[test]
fn a_buffer_in_a_dimm_added_after_boot_fails_before_the_add_and_is_served_after_it() {
    let mut d = Driver::ready(64 * 1024, false);
    let added = vm_memory::mmap::MmapRegion::new(0x10_0000).unwrap();
    let base = 0x4000_0000u64;
    let read_into_added = |d: &mut Driver| {
        d.header(VIRTIO_BLK_T_IN, 1);
        d.put_desc(0, HEADER, 16, F_NEXT, 1);
        d.put_desc(1, base + 8192, 1024, F_NEXT | F_WRITE, 2);
        d.put_desc(2, STATUS, 1, F_WRITE, 0);
        d.submit(0);
    };
    read_into_added(&mut d);
    assert_eq!(d.status(), S_IOERR, "not a silent success");
    d.view.add_range(base, &added).unwrap();
    read_into_added(&mut d);
    assert_eq!(d.status(), S_OK);
    assert_eq!(d.used(1), (0, 1025));
    // SAFETY: the region is 1 MiB long and mapped; reading 1 KiB at 8 KiB.
    let seen = unsafe { std::slice::from_raw_parts(added.as_ptr().add(8192), 1024) };
    let want: Vec<u8> = (512..1536usize)
        .map(|i| u8::try_from(i % 251).unwrap())
        .collect();
    assert_eq!(seen, &want[..], "the disk's bytes landed in the DIMM");
}

#[test]
fn past_ram_a_header_gets_ioerr_and_a_status_byte_needs_a_reset() {
    let mut d = Driver::ready(8192, false);
    d.put_desc(0, 0x7000_0000, 16, F_NEXT, 2);
    d.put_desc(2, STATUS, 1, F_WRITE, 0);
    d.mem.write_obj(0xeeu8, GuestAddress(STATUS)).unwrap();
    d.submit(0);
    assert_eq!((d.used(0), d.status()), ((0, 1), S_IOERR));
    d.header(VIRTIO_BLK_T_IN, 0);
    d.put_desc(0, HEADER, 16, F_NEXT, 2);
    d.put_desc(2, 0x7000_0000, 1, F_WRITE, 0);
    d.submit(0);
    assert_eq!(d.used_idx(), 1);
    assert!(needs_reset(&mut d));
}

#[test]
fn driver_ok_without_features_ok_is_refused() {
    let mut d = Driver::new(8192, false);
    reg_write(&mut d.dev, 0x70, 1);
    reg_write(&mut d.dev, 0x70, 1 | 2);
    d.setup_queue(QSIZE, DESC, AVAIL, USED);
    reg_write(&mut d.dev, 0x70, 1 | 2 | 4);
    assert_eq!(reg_read(&mut d.dev, 0x70) & 4, 0, "DRIVER_OK not taken");
    d.request(VIRTIO_BLK_T_IN, 0, 512, true);
    assert_eq!(d.used_idx(), 0, "the queue is not used");
}
