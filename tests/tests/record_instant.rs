//! Each crash image of a recording is one instant of memory, with two vCPUs
//! running at once, on this host's KVM with the tiny `recordab` guest
//! (tests/guests/recordab.S): vCPU 1 stores a count to page A and then to
//! page B in a loop while vCPU 0 flushes 50 times. Memory never holds B
//! ahead of A, nor A two ahead of B; an image copied while vCPU 1 runs
//! (page A read, then page B after more stores) would.
//!
//! Proves the recorder's quiesce on the host kind the test runs on (PVM or
//! hardware KVM, where vCPUs run in parallel on separate host CPUs; the
//! hardware-KVM tier runs it inside the nested L1 too). A Linux guest with
//! a DAX program is the nested tier's (`nested_crash_consistency`).

use std::path::Path;
use std::time::Duration;

use pmemvm_tests::pmemvm::{run, TempDir};
use pmemvm_tests::require;
use pmemvm_tests::tiny::{guest, kvm_available};

const PAGE: usize = 4096;
const FLUSHES: u64 = 50;
const DEADLINE: Duration = Duration::from_secs(120);

/// The counts on pages A (1) and B (2) of an image.
fn a_and_b(img: &Path) -> (u64, u64) {
    let bytes = std::fs::read(img).unwrap_or_else(|e| panic!("{}: {e}", img.display()));
    let at = |page: usize| {
        u64::from_le_bytes(
            bytes[page * PAGE..page * PAGE + 8]
                .try_into()
                .expect("8 bytes"),
        )
    };
    (at(1), at(2))
}

#[test]
fn every_plain_image_of_a_two_vcpu_recording_is_one_instant() {
    require!(kvm_available());
    let k = require!(guest("recordab"));
    let d = TempDir::new("record-instant");
    // pmemvm makes the file (16 MiB of region and its label area).
    let dimm = d.join("pm0.img");
    let rec = d.join("rec");
    let spec = format!(
        "16M,file={},label-size=0,record={}",
        dimm.display(),
        rec.display()
    );
    let out = run(
        &[
            "boot",
            "--kernel",
            &k.to_string_lossy(),
            "--cpus",
            "2",
            "--nvdimm",
            &spec,
        ],
        DEADLINE,
    );
    assert_eq!(out.status, Some(0), "{}", out.dump());
    assert!(out.stdout.contains("ab done"), "{}", out.dump());
    let img = d.join("img");
    let r = run(
        &[
            "crash-images",
            &rec.to_string_lossy(),
            "--out",
            &img.to_string_lossy(),
            "--all",
        ],
        DEADLINE,
    );
    assert_eq!(r.status, Some(0), "{}", r.dump());
    let m: serde_json::Value =
        serde_json::from_slice(&std::fs::read(img.join("images.json")).expect("manifest"))
            .expect("manifest JSON");
    assert_eq!(m["last_flush"], FLUSHES, "{m}");
    let mut running = 0;
    let mut wrong = Vec::new();
    for n in 1..=FLUSHES {
        let (a, b) = a_and_b(&img.join(format!("flush-{n:06}.img")));
        if a > 0 {
            running += 1;
        }
        if b > a || a > b + 1 {
            wrong.push(format!("flush {n}: A = {a}, B = {b}"));
        }
    }
    assert!(
        wrong.is_empty(),
        "{} of {FLUSHES} images are no instant of memory: {}",
        wrong.len(),
        wrong.join("; ")
    );
    // vCPU 1 stored during the flushes (else the check proves nothing).
    assert!(
        running >= FLUSHES / 2,
        "vCPU 1 stored before only {running} flushes"
    );
    let (a, b) = a_and_b(&dimm);
    assert!(a == b && a > 0, "the file ends with A = {a}, B = {b}");
}
