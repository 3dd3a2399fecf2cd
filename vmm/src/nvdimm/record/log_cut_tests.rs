//! Logs cut anywhere: at every byte of a small recording, with zeros after the
//! cut (a host crash), and with a frame appended after a cut one (the writer
//! went on after a write error): `--partial` reads every complete flush.

use super::tests::write_log;
use super::*;

fn tmp(name: &str) -> PathBuf {
    crate::fresh_test_dir(&format!("log-cut-{name}"))
}

/// The byte after each frame of `bytes` (a whole log), in order.
fn frame_ends(bytes: &[u8]) -> Vec<usize> {
    let mut at = 8;
    let mut ends = Vec::new();
    while at + FRAME_HEAD <= bytes.len() {
        let size = usize::try_from(le_u64(&bytes[at + 4..at + 12])).unwrap();
        at += FRAME_HEAD + size + 4;
        ends.push(at);
    }
    ends
}

#[test]
fn a_log_cut_at_any_byte_or_followed_by_zeros_gives_every_complete_flush_with_partial() {
    let d = tmp("every");
    let path = write_log(&d, &[(vec![1], 1), (vec![2], 2), (vec![4], 3)], true);
    let good = std::fs::read(&path).unwrap();
    let ends = frame_ends(&good);
    let header_end = ends[0];
    for cut in 0..good.len() {
        // Epoch frames are frames 1..=3; complete ones end at or before the cut.
        let complete = ends[1..4].iter().filter(|&&e| e <= cut).count() as u64;
        // Zeros after the cut: at every frame's end and on a stride between.
        let zero_cases: &[usize] = if ends.contains(&cut) || cut % 97 == 0 {
            &[0, 4096]
        } else {
            &[0]
        };
        for &zeros in zero_cases {
            let mut bytes = good[..cut].to_vec();
            bytes.resize(cut + zeros, 0);
            std::fs::write(&path, &bytes).unwrap();
            match FlushLog::open(&d, true) {
                Ok(log) => {
                    assert!(cut >= header_end, "cut {cut}: read without its header");
                    assert_eq!(log.last(), complete, "cut {cut}, {zeros} zeros after");
                    assert!(!log.complete, "cut {cut}: the end record was cut off");
                    assert!(log.cut.is_some(), "cut {cut}: says where");
                }
                Err(e) => assert!(
                    cut < header_end,
                    "cut {cut}, {zeros} zeros after, past the header: {e}"
                ),
            }
        }
    }
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn a_frame_written_after_a_cut_one_does_not_hide_the_flushes_before_it() {
    // The shape a write error left before the writer stopped at it: flush 2's
    // frame cut short, then the tail and end frames of the exit.
    let d = tmp("after");
    let path = write_log(&d, &[(vec![1], 1), (vec![2], 2)], false);
    let mut bytes = std::fs::read(&path).unwrap();
    bytes.truncate(bytes.len() - 1000);
    let head = EpochHead {
        number: 2,
        time_ns: 0,
        vcpu: u32::MAX,
        pages: 0,
        meta_len: 0,
    };
    bytes.extend_from_slice(&frame(KIND_TAIL, &epoch_payload(&head, &[], &[], &[])));
    bytes.extend_from_slice(&frame(KIND_END, b"{}"));
    std::fs::write(&path, &bytes).unwrap();
    assert!(
        FlushLog::open(&d, false).is_err(),
        "without --partial the bad frame is an error"
    );
    let log = FlushLog::open(&d, true).unwrap();
    assert_eq!(log.last(), 1);
    assert!(
        log.cut.as_deref().unwrap_or_default().contains("at byte"),
        "{:?}",
        log.cut
    );
    std::fs::remove_dir_all(&d).unwrap();
}
