//! Tier 5 for the guest-vs-host ratio benchmark's fio half (`vmm/lab/benches/ratio/fio_half.rs`,
//! included here as it is): both sides run the same job on the same bytes. Its guest side
//! under pmemvm (nested here; the half itself runs only on hardware KVM, where the figures
//! mean something): the guest's setup makes the label-less DIMM a devdax namespace and
//! reports its data offset, fio's `mmap` engine runs the benchmark's job on `/dev/dax0.0`, and
//! what it stored is in the DIMM's backing file at that offset — where the host side's job
//! (same text, the file and the offset swapped in) reads and writes. Functional only.

use std::os::unix::fs::FileExt;
use std::time::Duration;

use pmemvm_tests::nested::{guest_image, NestedError, NestedVm};
use pmemvm_tests::require;

#[allow(dead_code)] // the half's runner needs hardware KVM; its job and setup are tested here
#[path = "../../vmm/lab/benches/ratio/fio_half.rs"]
mod fio_half;

/// A pattern the guest's job stores (fio's `buffer_pattern`), to find in the host's file.
const PATTERN: u32 = 0x5a17_c0de;

#[test]
fn both_sides_jobs_differ_only_in_the_file_and_its_offset() {
    let guest = fio_half::job("/dev/dax0.0", 0, "randread");
    let host = fio_half::job("/tmp/pm.img", 4 << 20, "randread");
    let strip = |j: &str| -> Vec<String> {
        j.lines()
            .filter(|l| !l.starts_with("filename=") && !l.starts_with("offset="))
            .map(str::to_owned)
            .collect()
    };
    assert_eq!(strip(&guest), strip(&host));
    assert!(
        guest.contains("ioengine=mmap\n") && guest.contains("offset=0\n"),
        "{guest}"
    );
    assert!(host.contains("filename=/tmp/pm.img\n") && host.contains("offset=4194304\n"));
    assert_eq!(fio_half::data_offset("2097152\n"), Ok(2 << 20));
    for bad in ["", "x", "4097", "1073741824", "18446744073709551615"] {
        assert!(fio_half::data_offset(bad).is_err(), "{bad:?} accepted");
    }
}

#[test]
fn the_guests_devdax_job_stores_into_the_host_files_bytes_at_the_reported_offset() {
    let vm = require!(NestedVm::new().and_then(NestedVm::with_pmemvm));
    let image = |name| guest_image(name).map_err(NestedError::Unavailable);
    let (kernel, initrd) = (
        require!(image("vmlinux")),
        require!(image("initramfs.cpio.gz")),
    );
    // The benchmark's job as the guest runs it, writing (sequentially: offset 0 is
    // written first) a pattern the host can find.
    let job = format!(
        "{}buffer_pattern={PATTERN:#x}\n",
        fio_half::job("/dev/dax0.0", 0, "write")
    );
    let out = vm
        .deadline(Duration::from_secs(600))
        .l1_memory_mib(4096)
        .file("vmlinux", kernel)
        .file("initramfs.cpio.gz", initrd)
        .bytes("job.fio", job)
        .bytes("setup.sh", fio_half::SETUP)
        .run(&[
            "sh",
            "-c",
            "pmemvm run --kernel vmlinux --initrd initramfs.cpio.gz --nvdimm \
             1G,file=dimm.img,label-size=0 --memory 1G --fio job.fio \
             --setup @setup.sh --json r.json --timeout 400; echo run-status=$?",
        ])
        .expect("run pmemvm in the harness");
    assert!(out.stdout.contains("run-status=0"), "{}", out.dump());
    let record: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.path("r.json")).unwrap_or_default())
            .unwrap_or_else(|e| panic!("r.json: {e}\n{}", out.dump()));
    let offset_text = record["guest_files"]["data-offset"].as_str().unwrap_or("");
    let offset = fio_half::data_offset(offset_text)
        .unwrap_or_else(|e| panic!("{e}\n{:#}\n{}", record["guest_files"], out.dump()));
    let fio = &record["fio"]["jobs"][0];
    assert_eq!(fio["error"], 0, "{fio:#}");
    assert!(
        fio["write"]["total_ios"].as_u64().unwrap_or(0) > 0,
        "{fio:#}"
    );
    let dimm = std::fs::File::open(out.path("dimm.img")).expect("the DIMM's backing file");
    let word = |at: u64| {
        let mut b = [0u8; 4];
        dimm.read_exact_at(&mut b, at).expect("read the DIMM file");
        u32::from_be_bytes(b)
    };
    // fio repeats the pattern's bytes as written (big-endian as given).
    assert_eq!(
        word(offset),
        PATTERN,
        "the guest's first devdax block is not at file offset {offset}"
    );
    assert_eq!(word(offset + 4092), PATTERN);
    // The bytes before the data area are the namespace's (its info block), not the job's.
    assert_ne!(
        word(offset - 4096),
        PATTERN,
        "the data area starts before {offset}"
    );
    eprintln!("devdax data offset {offset}: the guest's mmap job stored into the host file there");
}
