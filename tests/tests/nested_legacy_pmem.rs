//! Tier 5 for legacy persistent memory (`--pmem-legacy`, E820 type 12)
//! through the product: `pmemvm run --engine nested` (pmemvm inside a QEMU
//! TCG L1 with emulated SVM) with the project's guest image, two runs on one
//! backing file on the host:
//!
//! 1. `--pmem-legacy 256M,file=F`: the guest's dmesg lists the E820 range as
//!    `[mem 0x0000000100000000-0x000000010fffffff] persistent (type 12)`
//!    (the first range with RAM below 3 GiB and no NVDIMM is at 4 GiB),
//!    `/dev/pmem0` is that range (256 MiB), `ndctl list -BR` shows it as a
//!    region of the `e820` bus, and a marker written with `dd` at 1 MiB +
//!    12 KiB is in F on the host afterwards at that offset (F is exactly
//!    256 MiB: offset *n* of the file is byte *n* of the range);
//! 2. `--pmem-legacy 256M,file=F,readonly`: a second boot reads the marker
//!    back from `/dev/pmem0`.
//!
//! Skips (through the skip crate) when QEMU, the guest image or a tool of the
//! L1 preparation is missing. Holds the machine's TCG lock while its L1s run.

use std::process::Command;
use std::time::{Duration, Instant};

use pmemvm_tests::pmemvm::{pmemvm_bin, Output, TempDir};
use pmemvm_tests::require;

/// One L1 boot (about 5 s under TCG), the guest and its command, with room for a loaded host.
const DEADLINE: Duration = Duration::from_secs(600);
/// Quiet on the console (every byte is an expensive exit when nested); dmesg keeps everything.
const CMDLINE: &str = "console=ttyS0 reboot=acpi panic=-1 quiet";
/// The range: 256 MiB.
const SIZE: u64 = 256 << 20;
/// Where the guest writes the marker: 1 MiB + 12 KiB into the range.
const MARK_BLOCK: u64 = 259;
/// The E820 line Linux prints for the range (base 4 GiB, the last byte 4 GiB + 256 MiB - 1).
const E820_LINE: &str = "[mem 0x0000000100000000-0x000000010fffffff] persistent (type 12)";

/// `pmemvm run --engine nested --pmem-legacy SPEC -- sh -c SCRIPT`.
fn run_nested(spec: &str, script: &str) -> Output {
    let started = Instant::now();
    // A platform breakdown (the L1's own, or a guest triple fault at a RIP inside the L1's
    // modules) runs the step again; any other end is the result.
    let out = pmemvm_tests::nested::run_engine_nested(
        || {
            let mut cmd = Command::new(pmemvm_bin());
            cmd.args([
                "run",
                "--engine",
                "nested",
                "--cmdline",
                CMDLINE,
                "--pmem-legacy",
                spec,
                "--",
                "sh",
                "-c",
                script,
            ])
            .env("PMEMVM_L1_CACHE", pmemvm_tests::nested::cache_dir());
            cmd
        },
        DEADLINE,
    );
    eprintln!(
        "run --engine nested --pmem-legacy {spec}: status {:?} in {:.1} s",
        out.status,
        started.elapsed().as_secs_f64()
    );
    out
}

#[test]
fn legacy_pmem_is_an_e820_region_backed_by_the_users_file() {
    let _tcg = require!(pmemvm_tests::nested::engine_ready());
    let dir = TempDir::new("nested-legacy-pmem");
    let img = dir.join("e820.img");
    let mark = format!("PMEMVM-E820-{}", std::process::id());
    let offset = usize::try_from(MARK_BLOCK * 4096).expect("offset");

    // 1. The range as Linux sees it, and a marker written to it.
    let spec = format!("256M,file={}", img.display());
    let script = format!(
        "dmesg | grep -F 'persistent (type 12)'; \
         echo pmem0-sectors $(cat /sys/block/pmem0/size); \
         ndctl list -BR | tr -d ' \\n'; echo; \
         printf {mark} | dd of=/dev/pmem0 bs=4096 seek={MARK_BLOCK} conv=fsync 2>/dev/null; \
         echo written"
    );
    let out = run_nested(&spec, &script);
    assert_eq!(out.status, Some(0), "{}", out.dump());
    assert!(
        out.stdout.lines().any(|l| l.ends_with(E820_LINE)),
        "the guest's E820 map lacks {E820_LINE:?}\n{}",
        out.dump()
    );
    assert!(
        out.stdout
            .contains(&format!("pmem0-sectors {}", SIZE / 512)),
        "/dev/pmem0 is not the 256 MiB range\n{}",
        out.dump()
    );
    assert!(
        out.stdout.contains("\"provider\":\"e820\"") && out.stdout.contains("\"regions\":[{"),
        "ndctl shows no region on the e820 bus\n{}",
        out.dump()
    );
    assert!(out.stdout.contains("written"), "{}", out.dump());
    let bytes = std::fs::read(&img).expect("the backing file is on the host");
    assert_eq!(bytes.len() as u64, SIZE, "the file is exactly the range");
    assert_eq!(
        &bytes[offset..offset + mark.len()],
        mark.as_bytes(),
        "the guest's marker is not at offset {offset} of {}",
        img.display()
    );
    drop(bytes);

    // 2. A second boot of the same file (read-only) reads the marker back.
    let spec = format!("256M,file={},readonly", img.display());
    let script = format!(
        "echo guest-read $(dd if=/dev/pmem0 bs=4096 skip={MARK_BLOCK} count=1 2>/dev/null | head -c {})",
        mark.len()
    );
    let out = run_nested(&spec, &script);
    assert_eq!(out.status, Some(0), "{}", out.dump());
    assert!(
        out.stdout.contains(&format!("guest-read {mark}")),
        "the second boot did not read the marker back\n{}",
        out.dump()
    );
    println!("legacy pmem: E820 type 12 at 4 GiB, e820 region, marker at {offset} in the host file and read back by a second boot");
}
