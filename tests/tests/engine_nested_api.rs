// test-queue: tcg
//! Tier 5 through the product: `pmemvm run --engine nested --api SOCKET`, as a
//! user types it. pmemvm listens at the user's path on this host (owner-only,
//! each peer checked) and relays the bytes through the L1's QEMU to a serial
//! port of the L1, where pmemvm serves the
//! control protocol; `pmemvm ctl SOCKET media inject 0 1M+4K` on this host
//! then reaches the guest inside: its platform event makes Linux scrub the
//! DIMM and `/sys/block/pmem0/badblocks` gains `2048 8`, which the guest's
//! command waits for and prints; the machine has an empty NVDIMM slot
//! (`--nvdimm-slots 2`, carried to the L1 in its machine description), and
//! `pmemvm ctl SOCKET nvdimm add 64M` on this host hot-adds a DIMM the guest
//! then sees as region1 of 64 MiB. The socket is gone after the run. And
//! `pmemvm bench pmem-nowait --engine nested --only on:1 --api SOCKET` (one
//! boot of one side, so one L1): the boot serves the socket while it runs
//! (`ctl SOCKET stats` answers with the guest's DIMM), and the bench ends with
//! status 0 and a report that says engine nested, functional only.
//!
//! Skips when QEMU, the guest image or a tool of the L1 preparation is
//! missing. Holds the machine's TCG lock while its L1 runs.

use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::process::Command;
use std::time::Duration;

use pmemvm_tests::pmemvm::{pmemvm_bin, run, Background, Output, TempDir};
use pmemvm_tests::require;
use pmemvm_tests::skip::Skip;
use pmemvm_tests::tcg::TcgGuard;

/// One L1 boot and the guest's wait, with room for a loaded host.
const DEADLINE: Duration = Duration::from_secs(900);
const CMDLINE: &str = "console=ttyS0 reboot=acpi panic=-1 quiet";

fn ready() -> Result<TcgGuard, Skip> {
    pmemvm_tests::nested::engine_ready()
}

/// The guest waits (up to 300 s) for the injected range to reach its badblocks.
const WAIT_FOR_BADBLOCKS: &str = "i=0; \
    while [ $i -lt 600 ] && ! grep -qx '2048 8' /sys/block/pmem0/badblocks; do sleep 0.5; i=$((i+1)); done; \
    echo badblocks: $(cat /sys/block/pmem0/badblocks); \
    i=0; while [ $i -lt 600 ] && [ ! -e /sys/bus/nd/devices/region1 ]; do sleep 0.5; i=$((i+1)); done; \
    echo region1: $(cat /sys/bus/nd/devices/region1/size)";

/// One `pmemvm ARGS` (with `--api DIR/api.sock` added) in the background, and
/// `pmemvm ctl SOCKET CTL...` for each of `ctls`, in order, once the socket is
/// announced. Returns pmemvm's output and what each `ctl` said (none when the
/// socket was not announced).
fn one_run(dir: &std::path::Path, args: &[&str], ctls: &[&[&str]]) -> (Output, Vec<Output>) {
    let sock = dir.join("api.sock");
    let _ = std::fs::remove_file(&sock);
    let _ = std::fs::remove_dir_all(dir.join("report"));
    let child = Background::start(
        Command::new(pmemvm_bin())
            .arg(args[0])
            .arg("--api")
            .arg(&sock)
            .args(&args[1..])
            .env("PMEMVM_L1_CACHE", pmemvm_tests::nested::cache_dir()),
        dir,
    );
    let announced = format!("control socket at {} (through the L1)", sock.display());
    let mut ctl: Vec<Output> = Vec::new();
    let out = child.watch(DEADLINE, |err| {
        if ctl.is_empty() && err.contains(&announced) {
            let meta = std::fs::symlink_metadata(&sock).expect("the socket exists");
            assert!(meta.file_type().is_socket(), "{}", sock.display());
            assert_eq!(
                meta.permissions().mode() & 0o077,
                0,
                "the socket is the user's alone"
            );
            for args in ctls {
                let mut all = vec!["ctl", sock.to_str().expect("a UTF-8 path")];
                all.extend_from_slice(args);
                ctl.push(run(&all, Duration::from_secs(60)));
            }
        }
    });
    eprintln!(
        "{} --engine nested --api: status {:?} in {:.1} s",
        args[0],
        out.status,
        out.elapsed.as_secs_f64()
    );
    (out, ctl)
}

/// The platform's breakdown in a run that ended (see `retry_breakdowns`).
fn breakdown((out, _): &(Output, Vec<Output>)) -> Option<String> {
    (!out.timed_out)
        .then(|| pmemvm_tests::nested::platform_breakdown(&out.stderr))
        .flatten()
}

#[test]
fn ctl_on_this_host_reaches_pmemvm_in_the_l1_and_the_guest_sees_the_injected_range() {
    let _tcg = require!(ready());
    let dir = TempDir::new("nested-api");
    let (out, ctl) = pmemvm_tests::nested::retry_breakdowns(
        "nested --api",
        || {
            one_run(
                &dir.0,
                &[
                    "run",
                    "--engine",
                    "nested",
                    "--cmdline",
                    CMDLINE,
                    "--nvdimm",
                    "64M,label-size=0,mce=on",
                    "--nvdimm-slots",
                    "2",
                    "--timeout",
                    "500",
                    "--",
                    "sh",
                    "-c",
                    WAIT_FOR_BADBLOCKS,
                ],
                &[
                    &["media", "inject", "0", "1M+4K"],
                    &["nvdimm", "add", "64M"],
                    &["stats"],
                ],
            )
        },
        breakdown,
    );
    let [inject, add, stats] = &ctl[..] else {
        panic!("the socket was never announced\n{}", out.dump())
    };
    assert_eq!(inject.status, Some(0), "{}\n{}", inject.dump(), out.dump());
    assert!(
        inject
            .stdout
            .contains("DIMM 0: bad ranges now 1048576+4096; the guest was notified"),
        "{}",
        inject.dump()
    );
    assert_eq!(add.status, Some(0), "{}\n{}", add.dump(), out.dump());
    assert!(
        add.stdout.starts_with("DIMM 1 hot-added: 67108864 bytes")
            && add
                .stdout
                .contains("2 of 2 slots used; the guest was notified"),
        "{}",
        add.dump()
    );
    // mce=on reached the L1's pmemvm through the machine description: its
    // DIMM counts machine checks (none: nothing loads from the range here;
    // nested_mce proves the loads), the hot-added one does not.
    let st: serde_json::Value = serde_json::from_str(&stats.stdout)
        .unwrap_or_else(|e| panic!("stats is not JSON ({e}): {}", stats.dump()));
    assert_eq!(st["nvdimms"][0]["machine_checks"], 0, "{st:#}");
    assert!(st["nvdimms"][1].get("machine_checks").is_none(), "{st:#}");
    assert_eq!(out.status, Some(0), "{}", out.dump());
    assert!(out.stdout.contains("badblocks: 2048 8"), "{}", out.dump());
    assert!(
        out.stdout.contains("region1: 67108864"),
        "the hot-added DIMM is a region of the guest\n{}",
        out.dump()
    );
    assert!(
        !dir.join("api.sock").exists(),
        "the socket is removed after the run"
    );
}

#[test]
#[ignore = "full: a bench of two nested boots; the control socket under --engine nested lands through ctl_on_this_host_reaches_pmemvm_in_the_l1_and_the_guest_sees_the_injected_range"]
fn bench_on_nested_serves_the_control_socket_per_boot_and_reports_functional_only() {
    let _tcg = require!(ready());
    let dir = TempDir::new("nested-bench-api");
    let report = dir.join("report");
    let report_arg = report.to_str().expect("a UTF-8 path").to_owned();
    let (out, ctl) = pmemvm_tests::nested::retry_breakdowns(
        "nested bench --api",
        || {
            one_run(
                &dir.0,
                &[
                    "bench",
                    "pmem-nowait",
                    "--engine",
                    "nested",
                    "--runs",
                    "1",
                    "--runtime",
                    "5",
                    "--size",
                    "16M",
                    "--nvdimm",
                    "64M",
                    "--cpus",
                    "1",
                    "--timeout",
                    "400",
                    "--only",
                    "on:1",
                    "--out",
                    &report_arg,
                ],
                &[&["stats"]],
            )
        },
        breakdown,
    );
    let ctl = ctl
        .first()
        .unwrap_or_else(|| panic!("the socket was never announced\n{}", out.dump()));
    assert_eq!(ctl.status, Some(0), "{}\n{}", ctl.dump(), out.dump());
    let stats: serde_json::Value =
        serde_json::from_str(&ctl.stdout).unwrap_or_else(|e| panic!("{e}: {}", ctl.dump()));
    assert_eq!(
        stats["nvdimms"].as_array().map(Vec::len),
        Some(1),
        "the boot's DIMM: {stats:#}"
    );
    assert_eq!(out.status, Some(0), "{}", out.dump());
    let text = std::fs::read_to_string(report.join("report.txt"))
        .unwrap_or_else(|e| panic!("report.txt: {e}\n{}", out.dump()));
    assert!(text.contains("engine nested, accelerator nested"), "{text}");
    assert!(
        text.contains("*** NESTED: functional only, not performance ***"),
        "{text}"
    );
    let json: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(report.join("report.json")).expect("report.json"),
    )
    .expect("report.json is JSON");
    assert_eq!(json["engine"], "nested");
    assert_eq!(json["performance"], false);
    assert!(
        !dir.join("api.sock").exists(),
        "the socket is removed after the boot"
    );
}
