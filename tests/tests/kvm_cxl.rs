//! Tier 4: a CXL persistent-memory device (`--cxl-pmem`) on this host's KVM
//! with the tiny guest `cxlpmem` (tests/guests/cxlpmem.S): the device found
//! through ECAM where the firmware left it, its HDM decoder committed by the
//! guest, the window then the backing file at memory speed (the host's
//! bytes reach the guest, the guest's reach the file), and after the
//! decoder's reset nothing behind the window. One vCPU (a tiny guest);
//! Linux's drivers on it are the nested tier's. Skips when /dev/kvm is unusable.

use std::time::Duration;

use pmemvm_tests::pmemvm::{run, TempDir};
use pmemvm_tests::require;
use pmemvm_tests::tiny::{guest, kvm_available};

const DEADLINE: Duration = Duration::from_secs(60);
const SIZE: usize = 256 << 20;
const LABELS: usize = 128 << 10;

#[test]
fn a_committed_decoder_maps_the_file_and_a_reset_one_unmaps_it() {
    require!(kvm_available());
    let kernel = require!(guest("cxlpmem"));
    let dir = TempDir::new("tiny-cxl");
    let file = dir.join("cxl0.img");
    // The file as pmemvm makes it: capacity, label area, identity page (zero:
    // pmemvm writes the device's identity there), a host pattern at 4096.
    let mut data = vec![0u8; SIZE + LABELS + 4096];
    data[4096..4112].copy_from_slice(b"HOST-PATTERN-123");
    std::fs::write(&file, &data).unwrap();
    let spec = format!("256M,file={}", file.display());
    let k = kernel.display().to_string();
    let out = run(
        &[
            "boot",
            "--kernel",
            &k,
            "--memory",
            "64M",
            "--cxl-pmem",
            &spec,
        ],
        DEADLINE,
    );
    assert_eq!(
        out.status,
        Some(0x11),
        "0x31: ids, 0x32: component registers, 0x33: not committed, 0x22: no host pattern:\n{}",
        out.dump()
    );
    assert!(out.stdout.contains("cxl test done"), "{}", out.dump());
    let after = std::fs::read(&file).unwrap();
    assert_eq!(after.len(), data.len(), "size unchanged");
    assert_eq!(&after[0..16], b"GUEST-WROTE-THIS", "{}", out.dump());
    assert_eq!(&after[4096..4112], b"HOST-PATTERN-123");
    assert_eq!(
        &after[64..80],
        &[0u8; 16],
        "a store after the decoder's reset reached the file"
    );
    // pmemvm wrote the device's identity (its serial number) into the last page.
    let tail: [u8; 4096] = after[SIZE + LABELS..].try_into().unwrap();
    assert!(matches!(
        vmm::nvdimm::identity::parse(&tail),
        vmm::nvdimm::identity::Block::Valid(_)
    ));
}

#[test]
fn a_cxl_pmem_file_of_another_size_is_refused_and_left_alone() {
    require!(kvm_available());
    let kernel = require!(guest("cxlpmem"));
    let dir = TempDir::new("tiny-cxl-size");
    let file = dir.join("cxl0.img");
    std::fs::write(&file, vec![7u8; 4096]).unwrap();
    let spec = format!("256M,file={}", file.display());
    let k = kernel.display().to_string();
    let out = run(&["boot", "--kernel", &k, "--cxl-pmem", &spec], DEADLINE);
    assert_eq!(out.status, Some(2), "{}", out.dump());
    let want = format!(
        "--cxl-pmem backing file {} is 4096 bytes but --cxl-pmem 256M needs a file of {} bytes",
        file.display(),
        SIZE + LABELS + 4096
    );
    assert!(out.stderr.contains(&want), "{}", out.dump());
    assert_eq!(std::fs::read(&file).unwrap(), vec![7u8; 4096], "untouched");
}
