//! Tier 5: `pmemvm bench pmem-nowait --cxl-pmem 256M` — the thread's experiment ("pmem: set
//! QUEUE_FLAG_NOWAIT") with its persistent memory on a CXL Type-3 device instead of an
//! NVDIMM, as a user types it, with the project's guest image under pmemvm (inside a
//! QEMU-TCG L1 with emulated SVM here, directly on hosts with hardware virtualization).
//!
//! Proves that each boot's guest made the device's region and a raw namespace before the
//! experiment (its fio ran on /dev/pmem0 of the CXL region: every run "ok"), that both sides
//! ran, and that the report names the device (text and JSON) so its figures are never pooled
//! with an NVDIMM's. Functional figures only: speed on CXL against an NVDIMM needs hardware
//! virtualization (docs/cxl.md). Skips when QEMU, the L1 kernel package or the guest image is
//! missing.

use std::fs;
use std::time::Duration;

use pmemvm_tests::nested::{guest_image, Mode, NestedVm};
use pmemvm_tests::require;

#[test]
#[ignore = "full: two pmemvm boots with a CXL device; the CXL platform lands through nested_cxl and kvm_cxl, the bench through nested_pmemvm"]
fn bench_pmem_nowait_on_cxl_pmem_runs_both_sides_on_the_cxl_region() {
    let vm = require!(NestedVm::new().and_then(NestedVm::with_pmemvm));
    let kernel = require!(guest_image("vmlinux"));
    let initrd = require!(guest_image("initramfs.cpio.gz"));
    let out = vm
        .deadline(Duration::from_secs(900))
        .file("vmlinux", kernel)
        .file("initramfs.cpio.gz", initrd)
        .run(&[
            "pmemvm",
            "bench",
            "pmem-nowait",
            "--kernel",
            "vmlinux",
            "--initrd",
            "initramfs.cpio.gz",
            "--runs",
            "1",
            "--cpus",
            "1",
            "--jobs",
            "1",
            "--cxl-pmem",
            "256M",
            "--size",
            "8M",
            "--runtime",
            "1",
            "--out",
            "report",
        ])
        .expect("run pmemvm in the harness");
    assert_eq!(out.status, 0, "{}", out.dump());
    let text = fs::read_to_string(out.path("report/report.json")).expect("report.json");
    let report: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    assert_eq!(report["host"]["pmem_device"], "cxl", "{text}");
    assert_eq!(report["host"]["nvdimm_bytes"], 256u64 << 20, "{text}");
    let runs = report["runs"].as_array().expect("runs");
    let sides: Vec<&str> = runs.iter().filter_map(|r| r["side"].as_str()).collect();
    assert_eq!(sides, ["off", "off", "off", "on", "on", "on"], "{text}");
    for c in report["checks"].as_array().expect("checks") {
        assert!(c["error"].is_null(), "{c:#}");
    }
    for r in runs {
        assert_eq!(r["outcome"]["status"], "ok", "{r:#}");
    }
    let txt = fs::read_to_string(out.path("report/report.txt")).expect("report.txt");
    assert!(txt.contains("CXL pmem 256 MiB"), "{txt}");
    if out.mode == Mode::Nested {
        assert_eq!(report["accelerator"], "nested", "{text}");
        assert!(txt.contains("functional only"), "{txt}");
    }
}
