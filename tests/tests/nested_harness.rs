//! Tests of the end-to-end harness itself (tier 5 infrastructure): a command
//! runs on a machine with a real KVM — an L1 VM under QEMU TCG with emulated
//! SVM here, the host itself on hardware-virtualization hosts — and its exit
//! status, output and files come back. Each test skips with `SKIP: <reason>`
//! when QEMU, the Debian kernel package or KVM is unavailable.

use std::fs;
use std::time::Duration;

use pmemvm_tests::nested::{Mode, NestedError, NestedVm, RUN_MARKER};
use pmemvm_tests::require;

/// The test helper binary that drives /dev/kvm (tests/l1/kvm_probe.rs).
const KVM_PROBE: &str = env!("CARGO_BIN_EXE_pmemvm-kvm-probe");

#[test]
fn exit_status_and_output_reach_the_host() {
    let vm = require!(NestedVm::new()).deadline(Duration::from_secs(120));
    let out = vm
        .run(&["sh", "-c", "echo to-stdout; echo to-stderr >&2; exit 7"])
        .expect("run a command");
    assert_eq!(out.status, 7, "{}", out.dump());
    assert_eq!(out.stdout, "to-stdout\n", "{}", out.dump());
    assert_eq!(out.stderr, "to-stderr\n", "{}", out.dump());
    if out.mode == Mode::Nested {
        assert!(
            out.l1_console.contains("PMEMVM-L1-STATUS 7"),
            "{}",
            out.dump()
        );
        eprintln!(
            "nested/TCG: L1 {} ran the command {:.2} s after its kernel started; round trip {:.1?}",
            out.l1_kernel.as_deref().unwrap_or("?"),
            out.l1_uptime_at_run.unwrap_or(f64::NAN),
            out.elapsed
        );
    }

    let out = vm.run(&["true"]).expect("run true");
    assert_eq!(out.status, 0, "{}", out.dump());
}

#[test]
fn kvm_runs_guest_code() {
    let vm = require!(NestedVm::new())
        .deadline(Duration::from_secs(120))
        .binary("pmemvm-kvm-probe", KVM_PROBE);
    let script = if vm.mode() == Mode::Nested {
        // kvm-amd on QEMU's emulated SVM, with nested paging.
        "test -c /dev/kvm && test -d /sys/module/kvm_amd && \
         echo nested=$(cat /sys/module/kvm_amd/parameters/nested) && \
         echo npt=$(cat /sys/module/kvm_amd/parameters/npt) && pmemvm-kvm-probe"
    } else {
        "test -c /dev/kvm && pmemvm-kvm-probe"
    };
    let out = vm.run(&["sh", "-c", script]).expect("run the KVM probe");
    assert_eq!(out.status, 0, "{}", out.dump());
    assert!(
        out.stdout.contains("kvm-probe: api=12 out=0x42 hlt=ok"),
        "{}",
        out.dump()
    );
    if out.mode == Mode::Nested {
        assert!(out.stdout.contains("npt=Y"), "{}", out.dump());
    }
}

#[test]
fn files_travel_both_ways_through_the_share() {
    let vm = require!(NestedVm::new())
        .deadline(Duration::from_secs(120))
        .bytes("in/greeting.txt", "hello from the host\n");
    let out = vm
        .run(&[
            "sh",
            "-c",
            "set -e; tr a-z A-Z < in/greeting.txt > shout.txt; \
             head -c 1048576 /dev/zero | tr '\\000' 'Z' > big.bin; mkdir -p out; \
             echo \"$(pwd)\" > out/cwd.txt",
        ])
        .expect("run a command writing files");
    assert_eq!(out.status, 0, "{}", out.dump());
    let shout = fs::read_to_string(out.path("shout.txt")).expect("shout.txt on the host");
    assert_eq!(shout, "HELLO FROM THE HOST\n");
    let big = fs::read(out.path("big.bin")).expect("big.bin on the host");
    assert_eq!(big.len(), 1 << 20);
    assert!(big.iter().all(|&b| b == b'Z'));
    let cwd = fs::read_to_string(out.path("out/cwd.txt")).expect("cwd.txt on the host");
    if out.mode == Mode::Nested {
        assert_eq!(cwd, "/share\n");
    }
}

#[test]
fn hung_command_is_killed_at_the_deadline() {
    let deadline = Duration::from_secs(30);
    let vm = require!(NestedVm::new()).deadline(deadline);
    let mode = vm.mode();
    let started = std::time::Instant::now();
    let err = vm
        .run(&["sh", "-c", "echo going to hang >&2; sleep 100000"])
        .expect_err("a hung command must not return a status");
    let took = started.elapsed();
    let NestedError::Deadline {
        console, run_dir, ..
    } = &err
    else {
        panic!("expected a deadline error, got: {err}");
    };
    assert!(
        took >= deadline && took < deadline + Duration::from_secs(15),
        "took {took:?}"
    );
    let message = err.to_string();
    assert!(message.contains("did not finish within 30s"), "{message}");
    if mode == Mode::Nested {
        // The console shows how far L1 got: it was running the command.
        assert!(console.contains(RUN_MARKER), "{message}");
        assert!(message.contains(RUN_MARKER), "{message}");
    } else {
        assert!(console.contains("going to hang"), "{message}");
    }
    let _ = fs::remove_dir_all(run_dir);
}
