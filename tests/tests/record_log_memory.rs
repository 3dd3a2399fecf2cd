//! The flush log's reader holds no epoch in memory: a log whose one epoch is
//! 4 GiB of pages (a whole 4 GiB DIMM dirtied between two flushes; the file
//! is sparse, so the test costs no disk) is opened, checked end to end (its
//! checksum covers every byte) and read back, and the process's peak RSS stays
//! under 64 MiB. Before, the reader allocated each frame's payload to check
//! it: 4 GiB here. This binary holds this one test, so the peak is its own.

use std::fs::File;
use std::io::{Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;

use pmemvm_tests::pmemvm::TempDir;
use vmm::nvdimm::record::log::{self, EpochHead, FlushLog, Header};

const GIB: u64 = 1 << 30;
const PAGE: u64 = log::PAGE as u64;

/// The process's peak resident set (VmHWM), in bytes.
fn peak_rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("VmHWM");
    kib * 1024
}

/// Writes `dir`'s log: the header, one epoch naming every page of a 4 GiB
/// region (their contents a hole of zeros), the end record; and a sparse base.
fn write_sparse_log(dir: &std::path::Path) {
    let region = 4 * GIB;
    let pages = region / PAGE;
    File::create(dir.join(log::BASE_FILE))
        .and_then(|f| f.set_len(region))
        .expect("the base image");
    let mut f = File::create(dir.join(log::LOG_FILE)).expect("the log");
    let header = Header::new("pm0.img".into(), region, region);
    f.write_all(log::MAGIC).expect("magic");
    f.write_all(&log::frame(
        log::KIND_HEADER,
        &serde_json::to_vec(&header).expect("json"),
    ))
    .expect("header");
    let head = EpochHead {
        number: 1,
        time_ns: 1,
        vcpu: 0,
        pages: u32::try_from(pages).expect("pages"),
        meta_len: 0,
    };
    let indexes: Vec<u64> = (0..pages).collect();
    let head_and_indexes = log::epoch_payload(&head, &indexes, &[], &[]);
    let size = head_and_indexes.len() as u64 + pages * PAGE;
    let mut frame_head = log::KIND_EPOCH.to_le_bytes().to_vec();
    frame_head.extend_from_slice(&size.to_le_bytes());
    let mut crc = crc32fast::Hasher::new();
    crc.update(&frame_head);
    crc.update(&head_and_indexes);
    let zeros = vec![0u8; 1 << 20];
    for _ in 0..(pages * PAGE) / zeros.len() as u64 {
        crc.update(&zeros);
    }
    f.write_all(&frame_head).expect("frame head");
    f.write_all(&head_and_indexes).expect("indexes");
    // The contents: a hole of 4 GiB, then the checksum and the end record.
    let end_of_contents = f.stream_position().expect("position") + pages * PAGE;
    f.seek(SeekFrom::Start(end_of_contents)).expect("seek");
    f.write_all(&crc.finalize().to_le_bytes()).expect("crc");
    f.write_all(&log::frame(log::KIND_END, b"{\"epochs\":1}"))
        .expect("end");
}

#[test]
fn a_4_gib_epoch_is_checked_and_read_back_in_under_64_mib_of_rss() {
    let dir = TempDir::new("record-log-memory");
    write_sparse_log(&dir.0);
    let before = peak_rss();
    let mut log = FlushLog::open(&dir.0, false).expect("the log opens, its checksum good");
    assert!(log.complete);
    assert_eq!(log.last(), 1);
    let e = log.epochs[0].clone();
    assert_eq!(u64::from(e.head.pages), 4 * GIB / PAGE);
    let mut page = vec![0xffu8; log::PAGE];
    log.page(&e, 1_000_000, &mut page).expect("a page far in");
    assert!(page.iter().all(|&b| b == 0));
    let peak = peak_rss();
    assert!(
        peak < 64 << 20,
        "peak RSS {} MiB reading a 4 GiB epoch (before the open: {} MiB)",
        peak >> 20,
        before >> 20
    );
    // The reader's checksum is a real one: a flipped byte in the hole fails it.
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(dir.join(log::LOG_FILE))
        .expect("the log");
    f.write_all_at(&[1], 3 * GIB).expect("flip");
    let e = FlushLog::open(&dir.0, false).expect_err("a corrupt epoch");
    assert!(e.to_string().contains("checksum"), "{e}");
}
