//! Tier 4: a hostile driver's disk DMA under pmemvm on this host's KVM. The
//! tiny `diskdma` guest asks pmemvm's first virtio disk to read sector 0 into
//! guest-physical 4 GiB + 4 KiB, where the first NVDIMM or legacy range lies,
//! and exits with the request's status byte. One vCPU: the guest is a single
//! driver; what this proves is that device writes are checked against what
//! the guest may write, on the host kind the run has (PVM here, hardware KVM
//! where the tier runs there).

use std::time::Duration;

use pmemvm_tests::pmemvm::{run, TempDir};
use pmemvm_tests::require;
use pmemvm_tests::skip::Skip;
use pmemvm_tests::tiny::{guest, kvm_available};

const DEADLINE: Duration = Duration::from_secs(60);
/// The guest's exit statuses (tests/guests/diskdma.S).
const S_OK: i32 = 0;
const S_IOERR: i32 = 1;

/// A disk whose sector 0 is a recognisable pattern; a 16 MiB range file of zeros
/// (plus `extra` bytes: an NVDIMM's identity page).
fn files(dir: &TempDir, extra: usize) -> (std::path::PathBuf, std::path::PathBuf, Vec<u8>) {
    let disk = dir.join("disk.img");
    let sector: Vec<u8> = (0..512u32)
        .map(|i| u8::try_from(i % 250 + 3).unwrap_or(0))
        .collect();
    let mut d = sector.clone();
    d.resize(8192, 0);
    std::fs::write(&disk, &d).expect("writing the disk file");
    let pmem = dir.join("pmem.img");
    std::fs::write(&pmem, vec![0u8; (16 << 20) + extra]).expect("writing the range file");
    (disk, pmem, sector)
}

fn diskdma(range: &[&str], disk: &std::path::Path) -> Result<pmemvm_tests::pmemvm::Output, Skip> {
    kvm_available()?;
    let g = guest("diskdma")?.to_string_lossy().into_owned();
    let disk = disk.to_string_lossy().into_owned();
    let mut args = vec!["boot", "--kernel", g.as_str(), "--disk", disk.as_str()];
    args.extend_from_slice(range);
    Ok(run(&args, DEADLINE))
}

#[test]
fn a_disk_read_into_a_readonly_nvdimm_or_legacy_range_fails_and_pmemvm_lives() {
    let dir = TempDir::new("disk-dma-ro");
    let (disk, pmem, _) = files(&dir, 4096);
    let before = std::fs::read(&pmem).unwrap();
    let spec = format!("16M,file={},label-size=0,readonly", pmem.display());
    let out = require!(diskdma(&["--nvdimm", &spec], &disk));
    assert_eq!(
        out.status,
        Some(S_IOERR),
        "the request into a readonly DIMM did not end with VIRTIO_BLK_S_IOERR \
         (before: pmemvm died with SIGSEGV):\n{}",
        out.dump()
    );
    assert!(
        std::fs::read(&pmem).unwrap() == before,
        "a readonly DIMM's file changed"
    );

    let (disk, legacy, _) = files(&dir, 0);
    let spec = format!("16M,file={},readonly", legacy.display());
    let out = require!(diskdma(&["--pmem-legacy", &spec], &disk));
    assert_eq!(out.status, Some(S_IOERR), "{}", out.dump());
    assert!(
        std::fs::read(&legacy).unwrap().iter().all(|&b| b == 0),
        "a readonly legacy range's file changed"
    );
}

#[test]
fn a_disk_read_into_a_writable_nvdimm_lands_in_its_file() {
    let dir = TempDir::new("disk-dma-rw");
    let (disk, pmem, sector) = files(&dir, 4096);
    let spec = format!("16M,file={},label-size=0", pmem.display());
    let out = require!(diskdma(&["--nvdimm", &spec], &disk));
    assert_eq!(out.status, Some(S_OK), "{}", out.dump());
    let after = std::fs::read(&pmem).unwrap();
    assert_eq!(&after[4096..4608], &sector[..], "{}", out.dump());
}

#[test]
fn a_disk_read_into_an_empty_slot_gets_an_error_not_a_silent_success() {
    // `--nvdimm-slots 1` and no DIMM: 4 GiB is where a hot-add would go; nothing
    // is there yet. Before, the chain came back with no status byte and Linux
    // read the stale byte as success.
    let dir = TempDir::new("disk-dma-slot");
    let (disk, _, _) = files(&dir, 0);
    let out = require!(diskdma(&["--nvdimm-slots", "1"], &disk));
    assert_eq!(out.status, Some(S_IOERR), "{}", out.dump());
}

#[test]
fn a_disk_read_into_a_recorded_nvdimm_is_in_the_crash_image_after_the_next_flush() {
    // The guest's flush after the read makes flush 1; the disk's bytes at DIMM
    // offset 4096 must be in its image (before, KVM's dirty log, which sees only
    // vCPU stores, left them out).
    let dir = TempDir::new("disk-dma-record");
    let (disk, pmem, sector) = files(&dir, 4096);
    let rec = dir.join("rec");
    let spec = format!(
        "16M,file={},label-size=0,record={}",
        pmem.display(),
        rec.display()
    );
    let out = require!(diskdma(&["--nvdimm", &spec], &disk));
    assert_eq!(out.status, Some(S_OK), "{}", out.dump());
    let img = dir.join("img");
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
    let image = std::fs::read(img.join("flush-000001.img")).expect("the image after flush 1");
    assert_eq!(&image[4096..4608], &sector[..], "{}", r.dump());
    let before = std::fs::read(img.join("flush-000000.img")).expect("the image before");
    assert!(before[4096..4608].iter().all(|&b| b == 0));
}
