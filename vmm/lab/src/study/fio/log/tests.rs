//! The log parser on real fio 3.33 logs (fixture `logs`: 4 io_uring randread jobs, 5 s,
//! `per_job_logs=0`) and on what a damaged or hostile guest could send.

use super::*;
use crate::study::fio::parse_fio_json;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/fio");

fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(format!("{FIXTURES}/{name}")).unwrap()
}

#[test]
fn real_logs_sum_the_jobs_per_second_and_agree_with_the_json() {
    let iops = parse_log(&fixture("logs_iops.log"), LOG_PERIOD_MS, 1.0).unwrap();
    let bw = parse_log(&fixture("logs_bw.log"), LOG_PERIOD_MS, 1.0 / 1024.0).unwrap();
    // Four jobs, one direction: four streams; five seconds, the fifth logged by one job only.
    assert_eq!((iops.streams, bw.streams), (4, 4));
    assert_eq!(iops.values.len(), 5);
    assert_eq!(iops.complete, 4, "{iops:?}");
    assert_eq!(iops.period_ms, 1000);
    // The first second is the four jobs' first lines (999, 1001, 1000, 1001 ms), nearly whole.
    let first: f64 = 8573.0 + 11116.0 + 10986.0 + 10933.0;
    assert!((iops.values[0] - first).abs() / first < 0.005, "{iops:?}");
    // The complete seconds average to fio's own IOPS and bandwidth of the group.
    let out = parse_fio_json(&fixture("logs.json")).unwrap();
    let s = out.group_summary(0).unwrap();
    let mean = iops.complete_mean().unwrap();
    assert!(
        (mean - s.iops).abs() / s.iops < 0.03,
        "{mean} vs {}",
        s.iops
    );
    #[allow(clippy::cast_precision_loss)]
    let bw_json = s.bw_bytes as f64 / f64::from(1 << 20);
    let bw_mean = bw.complete_mean().unwrap();
    assert!(
        (bw_mean - bw_json).abs() / bw_json < 0.03,
        "{bw_mean} vs {bw_json}"
    );
    // The partial last second holds the one job that logged it, a quarter of the rate.
    assert!(iops.values[4] < mean / 2.0, "{iops:?}");
}

#[test]
fn phase_series_reads_both_files_or_says_there_are_none() {
    assert!(phase_series(None, None).is_none());
    let both = phase_series(
        Some(&fixture("logs_iops.log")),
        Some(&fixture("logs_bw.log")),
    )
    .unwrap()
    .unwrap();
    // 4 KiB blocks: MiB/s = IOPS / 256, point for point.
    for (i, b) in both.iops.values.iter().zip(&both.bw_mib_s.values) {
        assert!((i / 256.0 - b).abs() / b < 0.01, "{i} IOPS vs {b} MiB/s");
    }
    let half = phase_series(Some(&fixture("logs_iops.log")), None).unwrap();
    assert_eq!(
        half.unwrap_err().to_string(),
        "the guest sent fio's IOPS log of the phase but not its bandwidth log"
    );
    // A job shorter than one period: fio writes empty logs, a series without points.
    let short = phase_series(Some(b""), Some(b"")).unwrap().unwrap();
    assert!(short.iops.values.is_empty() && short.iops.complete_mean().is_none());
    assert_eq!(short.bw_mib_s.streams, 0);
}

#[test]
fn missing_windows_stream_ends_and_directions() {
    // Job 1 lost its 2 s line: its 3 s line covers (1, 3] s. Job 2 is a fill that ended at
    // 2.5 s. Both write (ddir 1); a third stream reads (ddir 0), its one line covering (2, 3] s.
    let log = b"1000, 100, 1, 4096, 0\n3000, 200, 1, 4096, 0\n\
                1000, 10, 1, 4096, 0\n2000, 10, 1, 4096, 0\n2500, 40, 1, 4096, 0\n\
                3000, 7, 0, 4096, 0\n";
    let s = parse_log(log, 1000, 1.0).unwrap();
    assert_eq!(s.streams, 3);
    assert_eq!(s.values.len(), 3);
    assert!((s.values[0] - 110.0).abs() < 1e-9, "{s:?}");
    assert!((s.values[1] - (200.0 + 10.0)).abs() < 1e-9, "{s:?}");
    // Second 3: job 1's 200, half a second of job 2's 40, the reader's 7.
    assert!((s.values[2] - (200.0 + 20.0 + 7.0)).abs() < 1e-9, "{s:?}");
    // The fill's stream ended in second 3: seconds 1 and 2 are complete.
    assert_eq!(s.complete, 2);
    // Four-field lines (older fio) and blank lines parse.
    let old = parse_log(b"1000, 5, 0, 4096\n\n2000, 6, 0, 4096\n", 1000, 1.0).unwrap();
    assert_eq!(old.values, [5.0, 6.0]);
    assert_eq!(old.complete, 2);
}

#[test]
fn hostile_or_damaged_logs_are_errors_not_panics() {
    let bad = |b: &[u8]| parse_log(b, 1000, 1.0).unwrap_err();
    assert!(parse_log(b"\n \n", 1000, 1.0).unwrap().values.is_empty());
    assert!(matches!(
        bad(b"1000, x, 0\n"),
        FioLogError::BadLine { line: 1, .. }
    ));
    assert!(matches!(bad(b"1000\n"), FioLogError::BadLine { .. }));
    assert!(matches!(bad(b"-5, 3, 0\n"), FioLogError::BadLine { .. }));
    assert!(matches!(
        bad(b"1000, 1, 0\n99999999999999999999, 1, 0\n"),
        FioLogError::BadLine { line: 2, .. }
    ));
    assert!(matches!(
        bad(b"1000, 1, 0\n999999999999, 1, 0\n"),
        FioLogError::TooLong { .. }
    ));
    let text = bad("1000, 1, 0\n\u{fffd}\u{fffd}".repeat(2).as_bytes()).to_string();
    assert!(text.contains("line 2"), "{text}");
    // Too large, before anything is read.
    let big = vec![b'1'; MAX_LOG_BYTES + 1];
    assert!(matches!(bad(&big), FioLogError::TooLarge { .. }));
    // Every line a new stream (time never increases): bounded.
    let many: String = (0..=MAX_STREAMS).map(|_| "1000, 1, 0\n").collect();
    assert_eq!(
        bad(many.as_bytes()),
        FioLogError::TooManyStreams { max: MAX_STREAMS }
    );
    // Streams that each span a day: bounded work, an error, quickly.
    let wide: String = (0..2000).map(|_| "1, 1, 0\n86400000, 1, 0\n").collect();
    assert!(matches!(
        bad(wide.as_bytes()),
        FioLogError::TooManyStreams { .. }
    ));
    // A zero period is read as 1 ms, not a division by zero.
    assert_eq!(parse_log(b"3, 1, 0\n", 0, 1.0).unwrap().values.len(), 3);
}

#[test]
fn log_options_are_the_documented_ones() {
    let o = log_options("/tmp/randread-1");
    assert_eq!(
        o.lines().collect::<Vec<_>>(),
        [
            "write_iops_log=/tmp/randread-1",
            "write_bw_log=/tmp/randread-1",
            "log_avg_msec=1000",
            "per_job_logs=0",
            "slat_percentiles=1",
            "clat_percentiles=1",
            "lat_percentiles=1",
        ]
    );
    for line in o.lines() {
        let key = line.split('=').next().unwrap();
        assert!(LOG_OPTIONS.contains(key), "{key} not in LOG_OPTIONS");
    }
}
