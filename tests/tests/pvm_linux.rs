//! On a host whose KVM cannot run an unmodified kernel (this workplace's PVM),
//! booting Linux must end with a clear message — a warning up front, then
//! exit status 5 with the vCPU's RIP, the instruction bytes and the reason —
//! never a hang. Skips elsewhere (hardware KVM boots Linux; see nested tests).

use std::time::Duration;

use pmemvm_tests::pmemvm::run;
use pmemvm_tests::{require, skip};

#[test]
fn linux_on_pvm_ends_with_a_clear_message() {
    let host = vmm::host::HostKvm::probe();
    if host.hw_virt || !host.pvm {
        skip!("this host's KVM is not PVM; Linux is expected to boot here");
    }
    let image = require!(pmemvm_tests::image::image_dir());
    let kernel = image.vmlinux.to_string_lossy().into_owned();
    let out = run(
        &[
            "boot",
            "--kernel",
            &kernel,
            "--nvdimm",
            "64M",
            "--console-log",
            "/dev/null",
        ],
        Duration::from_secs(300),
    );
    assert!(
        !out.timed_out,
        "pmemvm hung instead of reporting:\n{}",
        out.dump()
    );
    assert_eq!(out.status, Some(5), "{}", out.dump());
    assert!(
        out.stderr
            .contains("warning: this host's KVM cannot run an unmodified kernel"),
        "{}",
        out.dump()
    );
    assert!(out.stderr.contains("at RIP 0x"), "{}", out.dump());
    assert!(out.stderr.contains("instruction bytes"), "{}", out.dump());
    assert!(out.stderr.contains("it is PVM"), "{}", out.dump());
}
