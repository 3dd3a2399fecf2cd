#![allow(clippy::cast_possible_truncation)] // test patterns and register halves, reduced on purpose

use vm_memory::{Bytes, GuestAddress};

use super::*;
use crate::virtio::test_driver::*;

const S_OK: u8 = 0;
const S_IOERR: u8 = 1;
const S_UNSUPP: u8 = 2;

fn pattern(from: usize, len: usize) -> Vec<u8> {
    (from..from + len).map(|i| (i % 251) as u8).collect()
}

#[test]
fn a_read_returns_the_files_bytes_and_raises_the_interrupt() {
    let mut d = Driver::ready(64 * 1024, false);
    d.request(VIRTIO_BLK_T_IN, 3, 4096, true);
    assert_eq!(d.used_idx(), 1);
    assert_eq!(d.used(0), (0, 4097), "data and status written");
    assert_eq!(d.status(), S_OK);
    assert_eq!(d.data(4096), pattern(3 * 512, 4096));
    assert_eq!(d.irq.read().unwrap(), 1, "the irqfd was signalled");
    let st = d.dev.device().stats();
    assert_eq!(st.bytes_read.load(Ordering::Relaxed), 4096);
}

#[test]
fn a_write_lands_in_the_file_and_a_flush_succeeds() {
    let mut d = Driver::ready(64 * 1024, false);
    d.mem
        .write_slice(&[0xabu8; 1024], GuestAddress(DATA))
        .unwrap();
    d.request(VIRTIO_BLK_T_OUT, 8, 1024, false);
    assert_eq!(d.status(), S_OK);
    assert_eq!(
        d.used(0).1,
        1,
        "only the status byte is written to the guest"
    );
    let bytes = d.file_bytes();
    assert_eq!(&bytes[4096..5120], &[0xab; 1024]);
    assert_eq!(&bytes[5120..5130], &pattern(5120, 10)[..]);
    // Flush: header + status only.
    d.header(VIRTIO_BLK_T_FLUSH, 0);
    d.put_desc(0, HEADER, 16, F_NEXT, 2);
    d.put_desc(2, STATUS, 1, F_WRITE, 0);
    d.submit(0);
    assert_eq!(d.status(), S_OK);
    assert_eq!(d.dev.device().stats().flushes.load(Ordering::Relaxed), 1);
}

#[test]
fn a_large_read_crosses_the_bounce_buffer() {
    let size = 3 * CHUNK + 4096;
    let mut d = Driver::ready(size + 4096, false);
    // The data descriptor reaches past the 2 MiB of test memory: one read of
    // 1.5 MiB instead, still more than one chunk.
    let len = CHUNK + CHUNK / 2;
    d.request(VIRTIO_BLK_T_IN, 1, u32::try_from(len).unwrap(), true);
    assert_eq!(d.status(), S_OK);
    assert_eq!(d.data(len), pattern(512, len));
}

#[test]
fn requests_past_the_end_fail_without_touching_the_file() {
    let mut d = Driver::ready(8192, false);
    let before = d.file_bytes();
    d.request(VIRTIO_BLK_T_IN, 15, 1024, true);
    assert_eq!(d.status(), S_IOERR, "a read that crosses the end");
    d.request(VIRTIO_BLK_T_OUT, 16, 512, false);
    assert_eq!(d.status(), S_IOERR, "a write at the end");
    d.request(VIRTIO_BLK_T_OUT, u64::MAX, 512, false);
    assert_eq!(d.status(), S_IOERR, "a sector whose offset overflows");
    d.request(VIRTIO_BLK_T_IN, u64::MAX / 512, 4096, true);
    assert_eq!(d.status(), S_IOERR, "an end that overflows");
    assert_eq!(d.file_bytes(), before);
    assert_eq!(d.used_idx(), 4, "every request was returned");
}

#[test]
fn a_read_only_disk_refuses_writes_and_offers_no_flush() {
    let mut d = Driver::ready(8192, true);
    let f = d.dev.device().features();
    assert_ne!(f & (1 << VIRTIO_BLK_F_RO), 0);
    assert_eq!(f & (1 << VIRTIO_BLK_F_FLUSH), 0);
    let before = d.file_bytes();
    d.request(VIRTIO_BLK_T_OUT, 0, 512, false);
    assert_eq!(d.status(), S_IOERR);
    assert_eq!(d.file_bytes(), before);
    d.request(VIRTIO_BLK_T_IN, 0, 512, true);
    assert_eq!(d.status(), S_OK);
}

#[test]
fn unknown_types_are_unsupported_and_get_id_names_the_disk() {
    let mut d = Driver::ready(8192, false);
    d.request(99, 0, 512, true);
    assert_eq!(d.status(), S_UNSUPP);
    d.request(VIRTIO_BLK_T_GET_ID, 0, 20, true);
    assert_eq!(d.status(), S_OK);
    assert_eq!(&d.data(16), b"pmemvm-test-disk");
}

#[test]
fn malformed_chains_get_an_error_status_and_one_without_a_status_byte_stops_the_device() {
    let mut d = Driver::ready(8192, false);
    // A header shorter than 16 bytes.
    d.header(VIRTIO_BLK_T_IN, 0);
    d.put_desc(0, HEADER, 8, F_NEXT, 2);
    d.put_desc(2, STATUS, 1, F_WRITE, 0);
    d.submit(0);
    assert_eq!(d.used(0), (0, 1), "the status byte only");
    assert_eq!(d.status(), S_IOERR);
    // A data descriptor outside guest memory.
    d.header(VIRTIO_BLK_T_IN, 0);
    d.put_desc(0, HEADER, 16, F_NEXT, 1);
    d.put_desc(1, 0x1_0000_0000, 512, F_NEXT | F_WRITE, 2);
    d.put_desc(2, STATUS, 1, F_WRITE, 0);
    d.submit(0);
    assert_eq!(d.used(1), (0, 1));
    assert_eq!(d.status(), S_IOERR);
    // A descriptor loop is cut after one queue of descriptors (virtio-queue's
    // TTL) and served as what it then is; it does not hang the device.
    d.put_desc(0, HEADER, 16, F_NEXT, 1);
    d.put_desc(1, DATA, 512, F_NEXT | F_WRITE, 0);
    d.submit(0);
    assert_eq!(d.used_idx(), 3);
    assert_eq!(d.dev.device().stats().malformed.load(Ordering::Relaxed), 2);
    assert_eq!(reg_read(&mut d.dev, 0x70) & 64, 0, "still working");
    // No writable byte for the status: nothing to complete it with.
    d.header(VIRTIO_BLK_T_IN, 0);
    d.put_desc(0, HEADER, 16, 0, 0);
    d.submit(0);
    assert_eq!(d.used_idx(), 3, "not returned");
    assert_ne!(reg_read(&mut d.dev, 0x70) & 64, 0, "DEVICE_NEEDS_RESET");
    assert_ne!(
        reg_read(&mut d.dev, 0x60) & 2,
        0,
        "a configuration interrupt"
    );
    // The device ignores its queue until the driver resets it.
    d.request(VIRTIO_BLK_T_IN, 0, 512, true);
    assert_eq!(d.used_idx(), 3);
}

#[test]
fn the_config_space_gives_capacity_seg_max_and_block_size() {
    let d = Driver::new(10 * 512 + 100, false);
    let blk = d.dev.device();
    assert_eq!(blk.capacity(), 10 * 512, "rounded down to whole sectors");
    let mut b = [0u8; 8];
    blk.read_config(0, &mut b);
    assert_eq!(u64::from_le_bytes(b), 10);
    let mut w = [0u8; 4];
    blk.read_config(12, &mut w);
    assert_eq!(u32::from_le_bytes(w), u32::from(QUEUE_SIZE - 2));
    blk.read_config(20, &mut w);
    assert_eq!(u32::from_le_bytes(w), 512);
    blk.read_config(u64::MAX - 1, &mut w);
    assert_eq!(w, [0; 4], "far offsets read as zero");
}

#[test]
fn a_file_smaller_than_a_sector_is_refused() {
    let f = vmm_sys_util::tempfile::TempFile::new().unwrap();
    let err = Block::new(f.into_file(), "tiny.img", true, "x").unwrap_err();
    assert!(err.to_string().contains("tiny.img is 0 bytes"), "{err}");
}
