//! Tier 5: what a CXL user types first, on pmemvm's `--cxl-pmem` under pmemvm
//! nested with a two-vCPU guest (a two-vCPU L1 on this host): `cxl list -M`
//! names the memdev with its pmem size and serial; `cxl create-region -m -t
//! pmem -d decoder0.0 mem0` makes a region; `ndctl create-namespace -r
//! regionN -m fsdax` gives `/dev/pmem0`; XFS with `-o dax` on it takes a
//! 64 MiB fio write with verify, 0 errors; the bytes written are in the host's
//! backing file; and in a second run on the same file (a power cycle), the
//! same region command brings back the namespace (its labels, in the file's
//! label area through Get/Set LSA) and the file system with its file.
//!
//! What it proves: Linux 6.1's cxl_acpi, cxl_pci, cxl_port, cxl_mem,
//! cxl_pmem and the region driver on pmemvm's CEDT, ECAM, component
//! registers and mailbox, with the guest's accesses to the region through
//! the memory slot the decoders' commit maps, on an AMD (SVM) L1. Skips when
//! QEMU or the guest image is missing.

use std::process::Command;
use std::time::Duration;

use pmemvm_tests::pmemvm::{pmemvm_bin, Output, TempDir};
use pmemvm_tests::require;

const DEADLINE: Duration = Duration::from_secs(1500);
const MARKER: &str = "pmemvm-cxl-region-marker-7f3a9c";

/// The first run: list, region, namespace, file system, fio, a marker file.
const FIRST: &str = r#"set -e
echo "== cxl list -M"; cxl list -M
echo "== create-region"; cxl create-region -m -t pmem -d decoder0.0 mem0
nd=$(ndctl list -R | grep -o '"dev":"region[0-9]*"' | head -n 1 | cut -d'"' -f4)
echo "== nd region $nd"
echo "== create-namespace"; ndctl create-namespace -r "$nd" -m fsdax
mkfs.xfs -f -q /dev/pmem0
mount -o dax /dev/pmem0 /mnt
echo "== fio"
fio --name=cxl --filename=/mnt/fio.dat --size=64M --bs=4k --rw=write --ioengine=psync \
    --verify=crc32c --do_verify=1 --verify_fatal=1 --minimal > /tmp/fio.txt
cut -d';' -f1-5 /tmp/fio.txt
echo "MARKER" > /mnt/marker
sync
umount /mnt
echo "== dmesg"; dmesg | grep -i cxl || true
echo FIRST-DONE
"#;

/// The second run: the same region command; the namespace and the file come back.
const SECOND: &str = r#"set -e
cxl create-region -m -t pmem -d decoder0.0 mem0
echo "== list -N"; ndctl list -N
mount -o dax /dev/pmem0 /mnt
echo "== marker $(cat /mnt/marker)"
umount /mnt
echo SECOND-DONE
"#;

fn run_in_l1(file: &std::path::Path, script: &str) -> Output {
    let spec = format!("512M,file={}", file.display());
    let script = script.replace("MARKER", MARKER);
    pmemvm_tests::nested::run_engine_nested(
        || {
            let mut cmd = Command::new(pmemvm_bin());
            cmd.args([
                "run",
                "--engine",
                "nested",
                "--cpus",
                "2",
                "--memory",
                "1G",
                "--cxl-pmem",
                &spec,
                "--timeout",
                "1200",
                "--",
                "sh",
                "-c",
                &script,
            ])
            .env("PMEMVM_L1_CACHE", pmemvm_tests::nested::cache_dir());
            cmd
        },
        DEADLINE,
    )
}

/// The namespace uuid `ndctl create-namespace` or `ndctl list -N` printed.
fn namespace_uuid(stdout: &str) -> Option<String> {
    let at = stdout.find("\"uuid\":\"")? + "\"uuid\":\"".len();
    Some(stdout[at..].split('"').next()?.to_string())
}

#[test]
#[ignore = "full: two nested boots with a two-vCPU L1; the CXL platform lands through kvm_cxl"]
// test-slots: 2
fn cxl_region_namespace_xfs_dax_and_fio_and_the_labels_bring_it_back() {
    let _tcg = require!(pmemvm_tests::nested::engine_ready());
    let dir = TempDir::new("nested-cxl-region");
    let file = dir.join("cxl0.img");

    let first = run_in_l1(&file, FIRST);
    assert_eq!(first.status, Some(0), "{}", first.dump());
    let out = &first.stdout;
    assert!(out.contains("FIRST-DONE"), "{}", first.dump());
    let list = out.split("== create-region").next().unwrap_or_default();
    for key in ["\"memdev\":\"mem0\"", "\"pmem_size\":", "\"serial\":"] {
        assert!(
            list.contains(key),
            "cxl list -M lacks {key}: {}",
            first.dump()
        );
    }
    assert!(
        out.contains("\"region\":\"region"),
        "create-region: {}",
        first.dump()
    );
    let uuid = namespace_uuid(out).unwrap_or_else(|| panic!("no namespace: {}", first.dump()));
    let fio = out
        .lines()
        .find(|l| l.starts_with("3;"))
        .unwrap_or_else(|| panic!("no fio terse line: {}", first.dump()));
    assert_eq!(fio.split(';').nth(4), Some("0"), "fio's error: {fio}");
    let bytes = std::fs::read(&file).expect("read the backing file");
    assert!(
        bytes.windows(MARKER.len()).any(|w| w == MARKER.as_bytes()),
        "the marker file's bytes are not in {}",
        file.display()
    );

    let second = run_in_l1(&file, SECOND);
    assert_eq!(second.status, Some(0), "{}", second.dump());
    assert_eq!(
        namespace_uuid(&second.stdout).as_deref(),
        Some(uuid.as_str()),
        "the namespace after a power cycle: {}",
        second.dump()
    );
    assert!(
        second.stdout.contains(&format!("== marker {MARKER}")),
        "{}",
        second.dump()
    );
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_uuid_is_read_from_ndctl_json() {
        let json =
            "{\n  \"dev\":\"namespace0.0\",\n  \"uuid\":\"1b2c-3d\",\n  \"mode\":\"fsdax\"\n}";
        assert_eq!(super::namespace_uuid(json).as_deref(), Some("1b2c-3d"));
        assert_eq!(super::namespace_uuid("[]"), None);
    }
}
