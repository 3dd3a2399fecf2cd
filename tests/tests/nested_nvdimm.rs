//! Tier 5 for the NVDIMM feature with the project's guest image under pmemvm
//! (nested): `ndctl list -DRN` matches pmemvm's NFIT, an fsdax namespace
//! created in one run is still there in a second run on the same backing
//! file (labels through the `_DSM` doorbell, stored in the file), and writes
//! to the region's `deep_flush` reach pmemvm as flush-hint fdatasyncs.

use std::fs;
use std::time::Duration;

use lab::guest::guest_job::{parse_channel, GuestReport};
use pmemvm_tests::image::setup_job_initrd;
use pmemvm_tests::nested::{guest_image, NestedVm};
use pmemvm_tests::require;

const DEEP_FLUSHES: u32 = 5;

fn job_initrd(base: &[u8], setup: &str) -> Vec<u8> {
    setup_job_initrd(base, setup)
}

const FIRST: &str = r#"
ndctl list -DRN > $PMEMVM_OUT/list-before.json
ndctl disable-region all
ndctl init-labels -f all
ndctl enable-region all
ndctl create-namespace -r region0 -m fsdax -M dev > $PMEMVM_OUT/created.json
i=0
while [ $i -lt DEEP ]; do echo 1 > /sys/bus/nd/devices/region0/deep_flush; i=$((i+1)); done
"#;

const SECOND: &str = r#"
ndctl list -N > $PMEMVM_OUT/list-after.json
test -b /dev/pmem0 && echo present > $PMEMVM_OUT/pmem0
"#;

fn flushes(stderr: &str) -> Option<u64> {
    // "NVDIMM <file>: <n> flushes, <m> label calls" (pmemvm -v).
    stderr.lines().find_map(|l| {
        let counts = l.split(": ").last()?;
        counts
            .split(", ")
            .find_map(|c| c.strip_suffix(" flushes"))?
            .trim()
            .parse()
            .ok()
    })
}

fn text(r: &GuestReport, name: &str) -> String {
    r.files
        .get(name)
        .map(|b| String::from_utf8_lossy(b).into_owned())
        .unwrap_or_default()
}

#[test]
fn fsdax_namespace_survives_a_second_run_and_deep_flush_syncs() {
    let vm = require!(NestedVm::new().and_then(NestedVm::with_pmemvm));
    let kernel = require!(guest_image("vmlinux"));
    let initrd = require!(guest_image("initramfs.cpio.gz"));
    let base = fs::read(&initrd).expect("initramfs");
    let first = FIRST.replace("DEEP", &DEEP_FLUSHES.to_string());
    // --nvdimm 256M: a 256 MiB region; the default 128 KiB label area and the
    // identity page follow it in the file.
    let boot = |n: u32| {
        format!(
            "pmemvm -v boot --kernel vmlinux --initrd run{n}.img \
             --cmdline 'console=ttyS0 reboot=acpi panic=-1 quiet' --memory 512M \
             --nvdimm 256M,file=pm0.img --console-log console{n}.txt --channel channel{n}.bin \
             2> pmemvm{n}.err; echo \"run{n} exited $?\""
        )
    };
    let script = format!("{}; {}", boot(1), boot(2));
    let out = vm
        .deadline(Duration::from_secs(500))
        .file("vmlinux", kernel)
        .bytes("run1.img", job_initrd(&base, &first))
        .bytes("run2.img", job_initrd(&base, SECOND))
        .run(&["sh", "-c", &script])
        .expect("run pmemvm twice in the harness");
    let read = |f: &str| fs::read_to_string(out.path(f)).unwrap_or_default();
    let ctx = format!(
        "{}\n--- run 1 stderr ---\n{}\n--- run 1 console ---\n{}\n--- run 2 console ---\n{}",
        out.dump(),
        read("pmemvm1.err"),
        read("console1.txt"),
        read("console2.txt")
    );
    assert!(out.stdout.contains("run1 exited 0"), "{ctx}");
    assert!(out.stdout.contains("run2 exited 0"), "{ctx}");
    let r1 =
        parse_channel(&fs::read(out.path("channel1.bin")).unwrap_or_default()).expect("channel 1");
    let r2 =
        parse_channel(&fs::read(out.path("channel2.bin")).unwrap_or_default()).expect("channel 2");
    assert_eq!(
        r1.status,
        Some(0),
        "{ctx}\nsetup: {}",
        text(&r1, "setup.log")
    );

    // ndctl sees pmemvm's NFIT: handle 1, our serial, one 256 MiB pmem region.
    let before: serde_json::Value =
        serde_json::from_str(&text(&r1, "list-before.json")).expect("ndctl list -DRN");
    let dimm = &before["dimms"][0];
    assert_eq!(dimm["handle"], 1, "{before:#}");
    // Linux prints the NFIT serial big-endian; the serial is the one in the
    // backing file's identity block (its last 4 KiB).
    let backing = fs::read(out.path("pm0.img")).expect("backing file");
    let block: [u8; 4096] = backing[backing.len() - 4096..]
        .try_into()
        .expect("identity page");
    let vmm::nvdimm::identity::Block::Valid(id) = vmm::nvdimm::identity::parse(&block) else {
        panic!("no identity block at the end of pm0.img\n{ctx}");
    };
    let serial = format!("{:08x}", id.serial.swap_bytes());
    assert!(
        dimm["id"].as_str().is_some_and(|id| id.ends_with(&serial)),
        "{before:#}"
    );
    let region = &before["regions"][0];
    assert_eq!(region["size"], 256u64 << 20, "{before:#}");
    assert_eq!(region["type"], "pmem", "{before:#}");
    assert_eq!(
        region["persistence_domain"], "memory_controller",
        "{before:#}"
    );

    let created: serde_json::Value =
        serde_json::from_str(&text(&r1, "created.json")).expect("create-namespace JSON");
    assert_eq!(created["mode"], "fsdax", "{created:#}");
    let uuid = created["uuid"]
        .as_str()
        .expect("namespace uuid")
        .to_string();

    // Every deep_flush write was an fdatasync of the backing file.
    let n = flushes(&read("pmemvm1.err")).expect("flush counter in pmemvm's log");
    assert!(
        n >= u64::from(DEEP_FLUSHES),
        "only {n} flushes for {DEEP_FLUSHES} deep_flush writes\n{ctx}"
    );

    // Second run, same file: the labelled fsdax namespace is back.
    assert_eq!(r2.status, Some(0), "{ctx}");
    let after = text(&r2, "list-after.json");
    assert!(
        after.contains(&uuid),
        "namespace {uuid} is gone after a second run:\n{after}\n{ctx}"
    );
    assert!(after.contains("\"mode\":\"fsdax\""), "{after}");
    assert_eq!(text(&r2, "pmem0").trim(), "present", "{ctx}");

    // The labels live right after the region in the host file: an index block is there.
    assert_eq!(backing.len(), (256 << 20) + (128 << 10) + 4096);
    let labels = &backing[256 << 20..(256 << 20) + (128 << 10)];
    assert!(
        labels.windows(16).any(|w| w == b"NAMESPACE_INDEX\0"),
        "no label index in the file's label area"
    );
}
