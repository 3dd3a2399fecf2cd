//! Unit tests of `record::log`.

use super::*;
use std::io::Write;

pub(crate) fn write_log(dir: &Path, epochs: &[(Vec<u64>, u8)], end: bool) -> PathBuf {
    let region = 16 * PAGE as u64;
    let file_size = region + PAGE as u64;
    std::fs::write(
        dir.join(BASE_FILE),
        vec![0u8; usize::try_from(file_size).unwrap()],
    )
    .unwrap();
    let path = dir.join(LOG_FILE);
    let mut f = File::create(&path).unwrap();
    f.write_all(MAGIC).unwrap();
    let h = Header::new("pm0.img".into(), region, file_size);
    f.write_all(&frame(KIND_HEADER, &serde_json::to_vec(&h).unwrap()))
        .unwrap();
    for (n, (pages, fill)) in epochs.iter().enumerate() {
        let head = EpochHead {
            number: n as u64 + 1,
            time_ns: 10 * n as u64,
            vcpu: 0,
            pages: u32::try_from(pages.len()).unwrap(),
            meta_len: 0,
        };
        let contents = vec![*fill; PAGE * pages.len()];
        f.write_all(&frame(
            KIND_EPOCH,
            &epoch_payload(&head, pages, &contents, &[]),
        ))
        .unwrap();
    }
    if end {
        f.write_all(&frame(KIND_END, b"{}")).unwrap();
    }
    path
}

fn tmp(name: &str) -> PathBuf {
    crate::fresh_test_dir(&format!("log-{name}"))
}

#[test]
fn a_written_log_reads_back_with_its_pages() {
    let d = tmp("roundtrip");
    write_log(&d, &[(vec![1, 3], 0xaa), (vec![3], 0xbb)], true);
    let mut log = FlushLog::open(&d, false).unwrap();
    assert!(log.complete);
    assert_eq!(log.last(), 2);
    let e2 = log.epochs[1].clone();
    assert_eq!(log.indexes(&e2).unwrap(), [3]);
    let mut page = vec![0u8; PAGE];
    log.page(&e2, 0, &mut page).unwrap();
    assert!(page.iter().all(|&b| b == 0xbb));
    assert!(log.meta(&e2).unwrap().is_empty());
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn a_log_cut_short_is_refused_unless_partial() {
    let d = tmp("cut");
    let path = write_log(&d, &[(vec![1], 1), (vec![2], 2)], false);
    let e = FlushLog::open(&d, false).unwrap_err().to_string();
    assert!(
        e.contains("ends after flush 2") && e.contains("--partial"),
        "{e}"
    );
    // Cut inside the second epoch: one complete epoch is left.
    let len = std::fs::metadata(&path).unwrap().len();
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    f.set_len(len - 100).unwrap();
    let log = FlushLog::open(&d, true).unwrap();
    assert_eq!(log.last(), 1);
    assert!(!log.complete);
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn a_flipped_byte_or_a_foreign_file_is_named() {
    let d = tmp("flip");
    let path = write_log(&d, &[(vec![1], 1), (vec![2], 2)], true);
    let mut bytes = std::fs::read(&path).unwrap();
    let at = bytes.len() - 200;
    bytes[at] ^= 1;
    std::fs::write(&path, &bytes).unwrap();
    let e = FlushLog::open(&d, false).unwrap_err().to_string();
    assert!(
        e.contains("corrupted at byte") && e.contains("checksum"),
        "{e}"
    );
    // With --partial the log ends at the bad frame, and says where and why.
    let log = FlushLog::open(&d, true).unwrap();
    assert_eq!(log.last(), 1);
    let cut = log.cut.clone().unwrap();
    assert!(cut.contains("at byte") && cut.contains("checksum"), "{cut}");
    std::fs::write(&path, b"not a log at all").unwrap();
    let e = FlushLog::open(&d, true).unwrap_err().to_string();
    assert!(e.contains("is not a pmemvm flush log"), "{e}");
    let e = FlushLog::open(&d.join("absent"), true)
        .unwrap_err()
        .to_string();
    assert!(e.contains("is not a pmemvm flush log"), "{e}");
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn mangled_logs_are_refused_or_read_never_a_panic() {
    let d = tmp("mangle");
    let path = write_log(&d, &[(vec![1, 2], 1), (vec![2], 2)], true);
    let good = std::fs::read(&path).unwrap();
    let mut x = 0x2545_f491_4f6c_dd1du64;
    for round in 0..400 {
        let mut bytes = good.clone();
        for _ in 0..1 + round % 4 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let at = usize::try_from(x % bytes.len() as u64).unwrap();
            bytes[at] = x.to_le_bytes()[4];
        }
        if round % 5 == 0 {
            bytes.truncate(usize::try_from(x % bytes.len() as u64).unwrap());
        }
        std::fs::write(&path, &bytes).unwrap();
        if let Ok(mut log) = FlushLog::open(&d, true) {
            for e in log.epochs.clone() {
                let n = log.indexes(&e).unwrap().len();
                let mut page = vec![0u8; PAGE];
                for i in 0..n {
                    log.page(&e, i, &mut page).unwrap();
                }
            }
        }
    }
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn a_base_of_another_size_or_a_page_past_the_region_is_refused() {
    let d = tmp("size");
    write_log(&d, &[(vec![1], 1)], true);
    std::fs::write(d.join(BASE_FILE), vec![0u8; 3 * PAGE]).unwrap();
    let e = FlushLog::open(&d, false).unwrap_err().to_string();
    assert!(e.contains("different DIMMs"), "{e}");
    write_log(&d, &[(vec![16], 1)], true);
    let e = FlushLog::open(&d, false).unwrap_err().to_string();
    assert!(
        e.contains("names page 16, beyond the region's 16 pages"),
        "{e}"
    );
    std::fs::remove_dir_all(&d).unwrap();
}
