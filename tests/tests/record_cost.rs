//! What recording costs a flush (a benchmark; full tier): the tiny
//! `flushrate` guest (tests/guests/flushrate.S) writes its DIMM's flush hint
//! 20,000 times while its other vCPUs store to the DIMM, with and without
//! `record=`, with 1 and 4 vCPUs, three runs each. A recorded flush reads
//! KVM's dirty log and copies the dirty pages with every other vCPU kicked
//! out of the guest and held ([`vmm::nvdimm::record::instant`]), so its cost grows
//! with the vCPUs that must stop.
//!
//! Flushes per second = 20,000 / (time of a run with them − time of a run
//! with none), the median of three; the DIMM file is on /dev/shm, so the
//! flush's own fdatasync costs nothing and the recorder's work is what is
//! measured. Run with `--ignored --nocapture` to see the table; the figures
//! in docs/crash-consistency.md come from it.

use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::{Duration, Instant};

use pmemvm_tests::pmemvm::{run, TempDir};
use pmemvm_tests::require;
use pmemvm_tests::tiny::{guest, kvm_available};

const FLUSHES: u32 = 20_000;
const DEADLINE: Duration = Duration::from_secs(300);

/// Seconds of one boot of the guest making `flushes` flushes with `cpus`
/// vCPUs, recorded or not.
fn one_run(dir: &Path, cpus: u32, flushes: u32, record: bool) -> f64 {
    let k = guest("flushrate").expect("the flushrate guest");
    let file = dir.join(format!("pm-{cpus}-{flushes}-{record}.img"));
    let rec = dir.join(format!("rec-{cpus}-{flushes}-{record}"));
    let _ = std::fs::remove_file(&file);
    let _ = std::fs::remove_dir_all(&rec);
    let f = std::fs::File::create(&file).expect("DIMM file");
    f.set_len((16 << 20) + (128 << 10) + 4096).expect("size");
    let mut block = b"FLUSHRT1".to_vec();
    block.extend_from_slice(&flushes.to_le_bytes());
    block.extend_from_slice(&cpus.to_le_bytes());
    f.write_all_at(&block, 0).expect("parameter block");
    let mut spec = format!("16M,file={}", file.display());
    if record {
        spec.push_str(&format!(",record={}", rec.display()));
    }
    let cpus = cpus.to_string();
    let started = Instant::now();
    let out = run(
        &[
            "boot",
            "--kernel",
            &k.to_string_lossy(),
            "--cpus",
            &cpus,
            "--nvdimm",
            &spec,
        ],
        DEADLINE,
    );
    let seconds = started.elapsed().as_secs_f64();
    assert_eq!(out.status, Some(0), "{}", out.dump());
    assert!(out.stdout.contains("flushes done"), "{}", out.dump());
    if record {
        let log = std::fs::metadata(rec.join("flush.log")).expect("the recording's log");
        assert!(log.len() > 0);
    }
    seconds
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

#[test]
#[ignore = "full: a benchmark (about a minute); its table is in docs/crash-consistency.md"]
fn recorded_flushes_per_second_with_one_and_four_vcpus() {
    require!(kvm_available());
    require!(guest("flushrate"));
    let shm = Path::new("/dev/shm");
    let d = TempDir::new_in(
        if shm.is_dir() { shm } else { Path::new("/tmp") },
        "record-cost",
    );
    println!("vCPUs  record  flushes/s  (median of 3; {FLUSHES} flushes a run)");
    let mut rates = Vec::new();
    for cpus in [1, 4] {
        for record in [false, true] {
            let rate = median(
                (0..3)
                    .map(|_| {
                        let with = one_run(&d.0, cpus, FLUSHES, record);
                        let without = one_run(&d.0, cpus, 0, record);
                        f64::from(FLUSHES) / (with - without).max(1e-3)
                    })
                    .collect(),
            );
            println!(
                "{cpus:>5}  {:>6}  {rate:>9.0}",
                if record { "on" } else { "off" }
            );
            rates.push(rate);
        }
    }
    assert!(rates.iter().all(|&r| r > 0.0 && r.is_finite()), "{rates:?}");
}
