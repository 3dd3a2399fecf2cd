//! A machine check with two vCPUs, on this host's KVM with the tiny `mcsmp`
//! guest (tests/guests/mcsmp.S): vCPU 0 loads from a bad block of an
//! `mce=on` DIMM while vCPU 1 runs. The guest's CPU vendor is the host's.
//!
//! - Intel (this workplace's PVM host, Intel hardware KVM): the error is
//!   signalled to every vCPU as an Intel processor without local machine
//!   checks does — vCPU 0 with MCIP|EIPV|RIPV and the error in its bank,
//!   vCPU 1 with MCIP|RIPV — so Linux's rendezvous (`mce_start`) finds every
//!   CPU in its handler instead of panicking ("Timeout: Not all CPUs entered
//!   broadcast exception handler").
//! - AMD (the nested L1's SVM, run by the hardware-KVM tier): only vCPU 0
//!   takes it, as AMD processors signal it; Linux does not rendezvous there.
//!
//! Linux itself with two vCPUs is the nested tier's (`nested_mce`, AMD).

use std::time::Duration;

use pmemvm_tests::pmemvm::{run, TempDir};
use pmemvm_tests::require;
use pmemvm_tests::tiny::{guest, kvm_available};

const DEADLINE: Duration = Duration::from_secs(60);

/// The host CPU's vendor (the guest gets the same CPUID vendor).
fn host_is_amd() -> bool {
    std::fs::read_to_string("/proc/cpuinfo")
        .expect("/proc/cpuinfo")
        .lines()
        .find(|l| l.starts_with("vendor_id"))
        .is_some_and(|l| l.contains("AuthenticAMD") || l.contains("HygonGenuine"))
}

#[test]
fn a_poisoned_load_reaches_every_vcpu_on_intel_and_only_its_own_on_amd() {
    require!(kvm_available());
    let k = require!(guest("mcsmp"));
    let d = TempDir::new("mce-smp");
    let dimm = d.join("pm0.img");
    std::fs::write(&dimm, vec![0u8; (16 << 20) + 4096]).expect("DIMM file");
    let spec = format!(
        "16M,file={},label-size=0,badblocks=1048576+512,mce=on",
        dimm.display()
    );
    let out = run(
        &[
            "boot",
            "-v",
            "--kernel",
            &k.to_string_lossy(),
            "--cpus",
            "2",
            "--nvdimm",
            &spec,
        ],
        DEADLINE,
    );
    let (want, seen) = match host_is_amd() {
        true => (0x4e, "mcg0=07 mcg1=00"),
        false => (0x4d, "mcg0=07 mcg1=05"),
    };
    assert_eq!(
        out.status,
        Some(want),
        "0x4d: broadcast, 0x4e: local only, 0x7a: vCPU 1's MCG_STATUS wrong, \
         0x7b: vCPU 0's wrong, 0x7c: vCPU 1 did not start, 0x7d: no machine check\n{}",
        out.dump()
    );
    assert!(out.stdout.contains(seen), "{}", out.dump());
}
