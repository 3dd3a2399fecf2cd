//! The event logs as Linux 6.12 reads them: record bytes at the offsets of
//! `include/cxl/event.h` (`cxl_event_record_hdr`, `cxl_event_media_hdr`,
//! `cxl_event_gen_media`), Get Event Records' header at those of
//! `cxlmem.h`'s `cxl_get_event_payload`, and the Get/Clear loop of
//! `core/mbox.c:cxl_mem_get_records_log`.

use super::*;
use crate::cxl::mailbox::PAYLOAD_SIZE;

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

/// Pushes `n` scrub findings at DPA 0x1000 × i into `log`, stamped i.
fn push(e: &mut EventLogs, log: EventLog, n: u64) {
    for i in 0..n {
        e.push_general_media(log, &GeneralMedia::scrub_uncorrectable(i << 12), i);
    }
}

/// Get Event Records with `len` bytes of payload.
fn get(e: &mut EventLogs, log: u8, len: usize) -> Result<Vec<u8>, ReturnCode> {
    let mut out = vec![0xaa; len];
    e.get_records(log, &mut out).map(|n| out[..n].to_vec())
}

/// Clear Event Records' input for `handles` of `log`.
fn clear_input(log: u8, handles: &[u16]) -> Vec<u8> {
    let mut b = vec![log, 0, u8::try_from(handles.len()).unwrap(), 0, 0, 0];
    b.extend(handles.iter().flat_map(|h| h.to_le_bytes()));
    b
}

fn handles(got: &[u8]) -> Vec<u16> {
    (0..usize::from(u16_at(got, 20)))
        .map(|i| u16_at(got, 0x20 + RECORD_LEN * i + 0x14))
        .collect()
}

#[test]
fn a_general_media_record_has_linuxs_layout_byte_for_byte() {
    let event = GeneralMedia {
        dpa: 0x1234_5678_9ac0 | 0x3f,
        volatile: true,
        flags: FLAG_MAINTENANCE_NEEDED | 0b11,
        descriptor: DESCRIPTOR_UNCORRECTABLE | DESCRIPTOR_THRESHOLD,
        event_type: MediaEventType::DataPathError,
        transaction: Transaction::HostInjectPoison,
    };
    let r = event.record(EventLog::Failure, 0xbeef, 0x0102_0304_0506_0708);
    let mut want = [0u8; RECORD_LEN];
    // uuid_t, big-endian: fbcd0a77-c260-417f-85a9-088b1621eba6.
    want[..16].copy_from_slice(&[
        0xfb, 0xcd, 0x0a, 0x77, 0xc2, 0x60, 0x41, 0x7f, 0x85, 0xa9, 0x08, 0x8b, 0x16, 0x21, 0xeb,
        0xa6,
    ]);
    want[0x10] = 0x80; // hdr.length
    want[0x11] = 0b1010; // hdr.flags[0]: failure, MAINTENANCE_NEEDED (bits 1:0 from the log)
    want[0x14..0x16].copy_from_slice(&[0xef, 0xbe]); // hdr.handle
    want[0x18..0x20].copy_from_slice(&[8, 7, 6, 5, 4, 3, 2, 1]); // hdr.timestamp
                                                                 // media_hdr.phys_addr: DPA bits 63:6, bit 0 VOLATILE.
    want[0x30..0x38].copy_from_slice(&(0x1234_5678_9ac0u64 | 1).to_le_bytes());
    want[0x38] = 0b11; // descriptor: UNCORRECTABLE_EVENT | THRESHOLD_EVENT
    want[0x39] = 2; // type: Data Path Error
    want[0x3a] = 4; // transaction_type: Host Inject Poison
                    // validity_flags 0x3b, channel 0x3d, rank 0x3e, device 0x3f,
                    // component_id 0x42..0x52, reserved to 0x80: all 0.
    assert_eq!(r, want);
    assert_eq!(r.len(), 16 + 0x70, "uuid_t + union cxl_event");

    let scrub = GeneralMedia::scrub_uncorrectable(0x40).record(EventLog::Failure, 1, 0);
    assert_eq!(u64_at(&scrub, 0x30), 0x40, "persistent: VOLATILE clear");
    assert_eq!(&scrub[0x11..0x14], &[2, 0, 0], "failure, no other flag");
    assert_eq!(
        (scrub[0x38], scrub[0x39], scrub[0x3a]),
        (1, 0, 5),
        "uncorrectable, ECC Error, Internal Media Scrub"
    );
}

#[test]
fn get_returns_the_oldest_records_and_says_more_when_the_payload_is_full() {
    let mut e = EventLogs::new();
    push(&mut e, EventLog::Warning, 3);
    // Room for two records and most of a third.
    let got = get(&mut e, 1, 0x20 + 2 * RECORD_LEN + 100).unwrap();
    assert_eq!(got.len(), 0x20 + 2 * RECORD_LEN);
    assert_eq!(got[0], 1 << 1, "more records, no overflow");
    assert_eq!(&got[1..20], &[0; 19], "no overflow count or timestamps");
    assert_eq!(u16_at(&got, 20), 2, "record_count");
    assert_eq!(&got[22..0x20], &[0; 10], "reserved");
    assert_eq!(handles(&got), [1, 2]);
    assert_eq!(u64_at(&got, 0x20 + RECORD_LEN + 0x30), 0x1000, "second DPA");
    assert_eq!(got[0x20 + 0x11] & 3, 1, "warning severity");
    // Get alone removes nothing: the same records again, all of them now.
    let all = get(&mut e, 1, PAYLOAD_SIZE).unwrap();
    assert_eq!((all[0], handles(&all)), (0, vec![1, 2, 3]));
    // Just the header: no record fits, "more" says there are some.
    let none = get(&mut e, 1, 0x20).unwrap();
    assert_eq!((none.len(), none[0], u16_at(&none, 20)), (0x20, 2, 0));
    assert_eq!(get(&mut e, 1, 0x1f), Err(ReturnCode::InvalidPayloadLength));
    assert_eq!(get(&mut e, 4, PAYLOAD_SIZE), Err(ReturnCode::InvalidInput));
    assert_eq!(
        get(&mut e, 0xff, PAYLOAD_SIZE),
        Err(ReturnCode::InvalidInput)
    );
    let empty = get(&mut e, 0, PAYLOAD_SIZE).unwrap();
    assert_eq!(empty, [0; 0x20], "another log: empty");
}

#[test]
fn clear_takes_the_oldest_handles_in_order_and_a_wrong_one_changes_nothing() {
    let mut e = EventLogs::new();
    push(&mut e, EventLog::Failure, 4);
    let refused = [
        (clear_input(2, &[2]), ReturnCode::InvalidHandle),
        (clear_input(2, &[2, 1]), ReturnCode::InvalidHandle),
        (clear_input(2, &[1, 3]), ReturnCode::InvalidHandle),
        (clear_input(2, &[1, 2, 3, 4, 5]), ReturnCode::InvalidHandle),
        (clear_input(2, &[0]), ReturnCode::InvalidHandle),
        (clear_input(1, &[1]), ReturnCode::InvalidHandle),
        (clear_input(4, &[1]), ReturnCode::InvalidInput),
        (
            clear_input(2, &[1])[..7].to_vec(),
            ReturnCode::InvalidPayloadLength,
        ),
        (
            [clear_input(2, &[1]), vec![0]].concat(),
            ReturnCode::InvalidPayloadLength,
        ),
        (vec![2, 0, 0, 0, 0], ReturnCode::InvalidPayloadLength),
        (vec![2, 1, 0, 0, 0, 0], ReturnCode::InvalidInput),
    ];
    for (input, code) in refused {
        assert_eq!(e.clear_records(&input), Err(code), "{input:02x?}");
        assert_eq!(e.counts(), [0, 0, 4, 0], "{input:02x?} cleared nothing");
    }
    assert_eq!(e.clear_records(&clear_input(2, &[1, 2])), Ok(0));
    assert_eq!(handles(&get(&mut e, 2, PAYLOAD_SIZE).unwrap()), [3, 4]);
    assert_eq!(
        e.clear_records(&clear_input(2, &[])),
        Ok(0),
        "no handles: no-op"
    );
    assert_eq!(e.clear_records(&clear_input(2, &[3, 4])), Ok(0));
    assert_eq!(e.counts(), [0; 4]);
    // Handles go on increasing after a clear.
    push(&mut e, EventLog::Failure, 1);
    assert_eq!(handles(&get(&mut e, 2, PAYLOAD_SIZE).unwrap()), [5]);
}

#[test]
fn linuxs_get_and_clear_loop_drains_a_full_log_in_mailbox_sized_steps() {
    let mut e = EventLogs::new();
    push(&mut e, EventLog::Fatal, u64::from(LOG_CAPACITY));
    let mut seen = Vec::new();
    let mut gets = 0;
    loop {
        gets += 1;
        let got = get(&mut e, 3, PAYLOAD_SIZE).unwrap();
        let h = handles(&got);
        if h.is_empty() {
            break;
        }
        assert!(h.len() <= (PAYLOAD_SIZE - 0x20) / RECORD_LEN);
        assert_eq!(e.clear_records(&clear_input(3, &h)), Ok(0));
        seen.extend(h);
    }
    assert_eq!(seen, (1..=LOG_CAPACITY).collect::<Vec<_>>());
    assert_eq!(gets, 6, "15 records a Get: 5 Gets with records, one empty");
    assert_eq!(e.status(), 0);
}

#[test]
fn a_full_log_counts_overflows_until_a_clear_and_clear_all_needs_one() {
    let mut e = EventLogs::new();
    push(&mut e, EventLog::Informational, u64::from(LOG_CAPACITY));
    assert_eq!(
        e.clear_records(&[0, 1, 0, 0, 0, 0]),
        Err(ReturnCode::InvalidInput)
    );
    let stored: Vec<bool> = (100..103)
        .map(|t| {
            e.push_general_media(
                EventLog::Informational,
                &GeneralMedia::scrub_uncorrectable(0),
                t,
            )
        })
        .collect();
    assert_eq!(stored, [false; 3]);
    assert_eq!(e.counts()[0], usize::from(LOG_CAPACITY));
    let got = get(&mut e, 0, PAYLOAD_SIZE).unwrap();
    assert_eq!(got[0], 0b11, "overflow and more records");
    assert_eq!(u16_at(&got, 2), 3, "overflow_err_count");
    assert_eq!(u64_at(&got, 4), 100, "first_overflow_timestamp");
    assert_eq!(u64_at(&got, 12), 102, "last_overflow_timestamp");
    // Clearing one record ends the overflow state; the freed slot takes the
    // next record with the next handle.
    assert_eq!(e.clear_records(&clear_input(0, &[1])), Ok(0));
    let got = get(&mut e, 0, 0x20).unwrap();
    assert_eq!((got[0], u16_at(&got, 2)), (0b10, 0));
    assert!(e.push_general_media(
        EventLog::Informational,
        &GeneralMedia::scrub_uncorrectable(0),
        7
    ));
    assert!(!e.push_general_media(
        EventLog::Informational,
        &GeneralMedia::scrub_uncorrectable(0),
        8
    ));
    // Clear all, with no handles, on the overflowed log.
    assert_eq!(
        e.clear_records(&[0, 1, 1, 0, 0, 0, 2, 0]),
        Err(ReturnCode::InvalidInput)
    );
    assert_eq!(e.clear_records(&[0, 1, 0, 0, 0, 0]), Ok(0));
    assert_eq!(get(&mut e, 0, PAYLOAD_SIZE).unwrap(), [0; 0x20]);
}

#[test]
fn the_overflow_count_saturates_and_handles_skip_zero_when_they_wrap() {
    let mut e = EventLogs::new();
    e.logs[0].overflow = Some(Overflow {
        count: u16::MAX - 1,
        first: 1,
        last: 1,
    });
    e.logs[0].overflowed(5);
    e.logs[0].overflowed(6);
    assert_eq!(
        e.logs[0].overflow,
        Some(Overflow {
            count: u16::MAX,
            first: 1,
            last: 6
        })
    );
    e.logs[1].next_handle = u16::MAX - 1;
    push(&mut e, EventLog::Warning, 3);
    assert_eq!(
        handles(&get(&mut e, 1, PAYLOAD_SIZE).unwrap()),
        [u16::MAX, 1, 2]
    );
}

#[test]
fn status_has_a_bit_per_non_empty_log() {
    let mut e = EventLogs::new();
    assert_eq!(e.status(), 0);
    push(&mut e, EventLog::Warning, 1);
    push(&mut e, EventLog::Fatal, 2);
    assert_eq!(e.status(), 0b1010);
    assert_eq!(e.counts(), [0, 1, 0, 2]);
    e.clear_records(&clear_input(3, &[1, 2])).unwrap();
    assert_eq!(e.status(), 0b0010);
}

#[test]
fn the_interrupt_policy_is_set_read_back_and_refuses_firmware_mode() {
    let mut e = EventLogs::new();
    assert_eq!(e.policy(), [0; 4], "no interrupts at reset");
    // Linux's {1, 1, 1, 1}; the message number reads 0 (one vector).
    e.set_policy([1; 4]).unwrap();
    assert_eq!(e.policy(), [1; 4]);
    // Reserved bits 7:2 are not kept.
    e.set_policy([0xf0, 0x01, 0xfc, 0x11]).unwrap();
    assert_eq!(e.policy(), [0, 1, 0, 1]);
    for bad in [[2, 1, 1, 1], [1, 1, 1, 3], [0, 0xfe, 0, 0]] {
        assert_eq!(e.set_policy(bad), Err(ReturnCode::InvalidInput), "{bad:?}");
        assert_eq!(e.policy(), [0, 1, 0, 1], "{bad:?} changed nothing");
    }
}

#[test]
fn an_interrupt_is_pending_only_for_logs_in_msi_mode() {
    let mut e = EventLogs::new();
    push(&mut e, EventLog::Failure, 1);
    assert!(!e.take_interrupt(), "mode none");
    e.set_policy([0, 0, 1, 0]).unwrap();
    push(&mut e, EventLog::Warning, 1);
    assert!(!e.take_interrupt(), "the warning log has no interrupt");
    push(&mut e, EventLog::Failure, 2);
    assert!(e.take_interrupt());
    assert!(!e.take_interrupt(), "taken once for both records");
    // A record the full log drops still signals.
    push(&mut e, EventLog::Failure, u64::from(LOG_CAPACITY));
    e.take_interrupt();
    assert!(!e.push_general_media(EventLog::Failure, &GeneralMedia::scrub_uncorrectable(0), 0));
    assert!(e.take_interrupt());
}
