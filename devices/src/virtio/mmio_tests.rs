use virtio_bindings::virtio_blk::VIRTIO_BLK_T_IN;

use super::*;
use crate::virtio::test_driver::*;

#[test]
fn the_identity_registers_say_virtio_block_version_2() {
    let mut d = Driver::new(4096, false);
    assert_eq!(reg_read(&mut d.dev, 0x0), 0x7472_6976);
    assert_eq!(reg_read(&mut d.dev, 0x4), 2);
    assert_eq!(reg_read(&mut d.dev, 0x8), 2);
    reg_write(&mut d.dev, 0x30, 0);
    assert_eq!(reg_read(&mut d.dev, 0x34), 256);
    reg_write(&mut d.dev, 0x30, 7);
    assert_eq!(reg_read(&mut d.dev, 0x34), 0, "no queue 7");
    assert_ne!(d.features() & (1 << VIRTIO_F_VERSION_1), 0);
}

#[test]
fn features_not_offered_or_without_version_1_are_refused() {
    let mut d = Driver::new(4096, false);
    let f = d.features();
    assert_eq!(d.negotiate(f | (1 << 40)) & 8, 0, "an unoffered bit");
    reg_write(&mut d.dev, 0x70, 0);
    assert_eq!(reg_read(&mut d.dev, 0x70), 0, "a reset clears the status");
    assert_eq!(d.negotiate(f & !(1 << VIRTIO_F_VERSION_1)) & 8, 0, "legacy");
    reg_write(&mut d.dev, 0x70, 0);
    assert_eq!(d.negotiate(f) & 8, 8);
}

#[test]
fn misaligned_and_odd_sized_register_accesses_are_ignored() {
    let mut d = Driver::new(4096, false);
    let mut b = [0u8; 2];
    d.dev.read(0x0, &mut b);
    assert_eq!(b, [0xff, 0xff]);
    let mut w = [0u8; 4];
    d.dev.read(0x2, &mut w);
    assert_eq!(w, [0xff; 4]);
    d.dev.write(0x70, &[1]);
    assert_eq!(reg_read(&mut d.dev, 0x70), 0);
    d.dev.write(u64::MAX, &[1, 2, 3, 4]);
}

#[test]
fn a_queue_is_not_used_before_driver_ok_nor_when_it_lies_outside_memory() {
    let mut d = Driver::new(8192, false);
    let f = d.features();
    d.negotiate(f);
    d.setup_queue(QSIZE, DESC, AVAIL, USED);
    d.request(VIRTIO_BLK_T_IN, 0, 512, true);
    assert_eq!(d.used_idx(), 0, "no DRIVER_OK yet");
    reg_write(&mut d.dev, 0x70, 0);
    d.negotiate(f);
    d.setup_queue(QSIZE, DESC, AVAIL, 0x1_0000_0000);
    reg_write(&mut d.dev, 0x70, 1 | 2 | 8 | 4);
    reg_write(&mut d.dev, 0x50, 0);
    assert_ne!(reg_read(&mut d.dev, 0x70) & 64, 0, "DEVICE_NEEDS_RESET");
    assert_eq!(
        reg_read(&mut d.dev, 0x60),
        2,
        "a configuration interrupt (virtio 1.2 §2.1.2), no used buffer"
    );
    assert_eq!(d.irq.read().unwrap(), 1);
}

#[test]
fn queue_registers_are_frozen_once_ready_and_the_interrupt_is_acked() {
    let mut d = Driver::ready(8192, false);
    // Moving the used ring after DRIVER_OK is ignored.
    reg_write(&mut d.dev, 0xa0, 0x8000);
    d.request(VIRTIO_BLK_T_IN, 0, 512, true);
    assert_eq!(d.used_idx(), 1);
    assert_eq!(reg_read(&mut d.dev, 0x60), 1);
    reg_write(&mut d.dev, 0x64, 1);
    assert_eq!(reg_read(&mut d.dev, 0x60), 0);
    // A queue size that is not a power of two keeps the old size.
    let mut e = Driver::new(8192, false);
    let f = e.features();
    e.negotiate(f);
    e.setup_queue(3, DESC, AVAIL, USED);
    reg_write(&mut e.dev, 0x70, 1 | 2 | 8 | 4);
    e.request(VIRTIO_BLK_T_IN, 0, 512, true);
    assert_eq!(e.used_idx(), 0, "a queue of invalid size is not used");
}

#[test]
fn an_unacknowledged_interrupt_is_unanswered_until_acked_and_can_be_raised_again() {
    use crate::interrupt_line::InterruptLine;
    let mut d = Driver::ready(8192, false);
    assert_eq!(d.dev.shared().unanswered(), None, "nothing raised yet");
    d.request(VIRTIO_BLK_T_IN, 0, 512, true);
    assert_eq!(d.irq.read().unwrap(), 1, "the completion raised the line");
    std::thread::sleep(std::time::Duration::from_millis(20));
    let waited = d
        .dev
        .shared()
        .unanswered()
        .expect("raised, not acknowledged");
    assert!(waited >= std::time::Duration::from_millis(20), "{waited:?}");
    // A second completion before the acknowledgement keeps the first time.
    d.request(VIRTIO_BLK_T_IN, 0, 512, true);
    assert!(d.dev.shared().unanswered().unwrap() >= waited);
    let _ = d.irq.read();
    d.dev.shared().raise_again().unwrap();
    assert_eq!(d.irq.read().unwrap(), 1, "signalled again");
    assert!(
        d.dev.shared().unanswered().unwrap() >= waited,
        "the first time is kept"
    );
    reg_write(&mut d.dev, 0x64, 1);
    assert_eq!(d.dev.shared().unanswered(), None, "acknowledged");
}
