//! Tier 4: pmemvm on this host's KVM with tiny purpose-built guests
//! (tests/guests/*.S): console output, exit paths, NVDIMM bytes both ways,
//! flush hints. Skips with a reason when /dev/kvm is unusable.

use std::time::Duration;

use pmemvm_tests::pmemvm::{run, TempDir};
use pmemvm_tests::skip::Skip;
use pmemvm_tests::tiny::{guest, kvm_available};
use pmemvm_tests::{require, skip};

const DEADLINE: Duration = Duration::from_secs(60);

fn boot(name: &str, extra: &[&str]) -> Result<pmemvm_tests::pmemvm::Output, Skip> {
    kvm_available()?;
    let g = guest(name)?.to_string_lossy().into_owned();
    let mut args = vec!["boot", "--kernel", g.as_str()];
    args.extend_from_slice(extra);
    Ok(run(&args, DEADLINE))
}

#[test]
fn serial_output_and_guest_exit_status() {
    let out = require!(boot("hello", &[]));
    assert!(!out.timed_out, "{}", out.dump());
    assert_eq!(out.status, Some(42), "{}", out.dump());
    assert!(
        out.stdout.contains("hello from the tiny guest"),
        "{}",
        out.dump()
    );
}

#[test]
fn acpi_power_off_exits_zero() {
    let out = require!(boot("poweroff", &[]));
    assert_eq!(out.status, Some(0), "{}", out.dump());
    assert!(out.stdout.contains("powering off"), "{}", out.dump());
}

#[test]
fn reset_request_has_its_own_status() {
    let out = require!(boot("reset", &[]));
    assert_eq!(out.status, Some(3), "{}", out.dump());
    assert!(out.stderr.contains("reset"), "{}", out.dump());
}

#[test]
fn triple_fault_ends_the_vm() {
    let out = require!(boot("triplefault", &[]));
    assert!(!out.timed_out, "{}", out.dump());
    assert_eq!(out.status, Some(4), "{}", out.dump());
    assert!(out.stderr.contains("triple"), "{}", out.dump());
}

#[test]
fn nvdimm_bytes_reach_the_file_and_host_bytes_reach_the_guest() {
    let dir = TempDir::new("tiny-nvdimm");
    let file = dir.join("pm0.img");
    // The file exists with the exact size and a host pattern at offset 4096.
    let mut data = vec![0u8; 4 << 20];
    data[4096..4112].copy_from_slice(b"HOST-PATTERN-123");
    std::fs::write(&file, &data).unwrap();
    let spec = format!("4M,file={},label-size=0", file.display());
    let out = require!(boot("nvdimm", &["-v", "--nvdimm", &spec]));
    assert_eq!(
        out.status,
        Some(0x11),
        "guest did not see the host pattern:\n{}",
        out.dump()
    );
    let after = std::fs::read(&file).unwrap();
    assert_eq!(after.len(), 4 << 20, "size unchanged");
    assert_eq!(&after[0..16], b"GUEST-WROTE-THIS", "{}", out.dump());
    assert!(after[8192..12288].iter().all(|&b| b == 0xa5));
    assert_eq!(&after[4096..4112], b"HOST-PATTERN-123");
    assert!(after[12288..].iter().all(|&b| b == 0));
    assert!(
        out.stderr.contains("1 flushes"),
        "the flush-hint write was not counted as an fdatasync:\n{}",
        out.dump()
    );
}

#[test]
fn emulation_failure_is_reported_with_rip_bytes_and_host_reason() {
    let host = vmm::host::HostKvm::probe();
    if host.hw_virt || !host.pvm {
        skip!("this host's KVM is not PVM, so int3 is no emulation failure here");
    }
    let out = require!(boot("emulfail", &[]));
    assert!(!out.timed_out, "{}", out.dump());
    assert_eq!(out.status, Some(5), "{}", out.dump());
    assert!(
        out.stderr.contains("emulation failure at RIP 0x"),
        "{}",
        out.dump()
    );
    // The instruction bytes start with int3 (0xcc).
    assert!(
        out.stderr.contains("instruction bytes cc"),
        "{}",
        out.dump()
    );
    assert!(
        out.stderr.contains("cannot run an unmodified kernel"),
        "{}",
        out.dump()
    );
}

#[test]
fn boot_gdt_is_not_overwritten_by_the_idt() {
    let out = require!(boot("gdtcheck", &[]));
    assert!(!out.timed_out, "{}", out.dump());
    assert_eq!(
        out.status,
        Some(0x11),
        "0x21: GDT limit wrong, 0x22: TSS descriptor overwritten\n{}",
        out.dump()
    );
}

#[test]
fn label_calls_are_counted_per_dimm() {
    let out = require!(boot("dsmcall", &["-v", "--nvdimm", "4M", "--nvdimm", "4M"]));
    assert_eq!(out.status, Some(42), "{}", out.dump());
    let calls: Vec<&str> = out
        .stderr
        .lines()
        .filter(|l| l.contains("label calls"))
        .collect();
    assert_eq!(calls.len(), 2, "{}", out.dump());
    assert!(calls[0].ends_with(" 0 label calls"), "{}", out.dump());
    assert!(calls[1].ends_with(" 1 label calls"), "{}", out.dump());
}
