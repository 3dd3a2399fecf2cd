// test-queue: tcg
//! Namespace labels end to end: Debian's stock 6.1 kernel booted by pmemvm
//! (nested harness: pmemvm in an L1 with a real KVM) manages labels with the
//! real `ndctl` through pmemvm's `_DSM` transport, and they persist in the
//! label area of the backing file across two boots.
//!
//! Boot 1: the new DIMM starts with pmemvm's empty label index, which the
//! stock kernel accepts: a labelled region, all of it available, no
//! namespace and no `/dev/pmem0`; `ndctl init-labels -f` rewrites the index
//! blocks (DSM function 6), `ndctl create-namespace -m raw` writes a namespace label,
//! and a pattern goes to the new `/dev/pmem0`. Boot 2 (same backing file):
//! the kernel reads the labels back (functions 4 and 5) and shows the same
//! namespace uuid, with the pattern. The host then finds the index block
//! signature in the 128 KiB after the region and the pattern in the region.
//!
//! The second test does the same with the DIMM file on hugetlbfs in the L1: hugetlbfs
//! has no write(2), so pmemvm writes the labels through a mapping of the file's tail.
//!
//! Skips with `SKIP:` when the nested tier (QEMU, the Debian kernel package,
//! a built pmemvm) or ndctl is missing.
#![allow(clippy::unwrap_used)] // a failed step fails the test with its message

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::Duration;

use pmemvm_tests::nested::{cache_dir, NestedVm};
use pmemvm_tests::require;
use pmemvm_tests::skip::Skip;

/// Region size; the backing file holds the region, then the 128 KiB label
/// area, then pmemvm's 4 KiB identity page.
const DIMM_MIB: u64 = 64;
/// Default label area size.
const LABEL_SIZE: usize = 128 << 10;

const INIT: &str = r#"#!/bin/busybox sh
/bin/busybox mkdir -p /bin /proc /sys /dev /tmp /run
/bin/busybox --install -s /bin
export PATH=/bin:/usr/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
phase=$(tr ' ' '\n' </proc/cmdline | sed -n 's/^pmemvm_label_phase=//p')
token=$(tr ' ' '\n' </proc/cmdline | sed -n 's/^pmemvm_label_token=//p')
echo "LT-START phase=$phase"
finish() {
    echo "LT-EXIT $1"
    sync
    printf "\\$(printf %03o "$1")" | dd of=/dev/port bs=1 seek=1281 count=1 conv=notrunc 2>/dev/null
    poweroff -f
}
for m in libnvdimm nd_btt nd_pmem nfit; do
    insmod /lib/modules/$m.ko || { echo "LT-ERROR insmod $m"; finish 90; }
done
i=0
while [ $i -lt 100 ] && [ ! -e /sys/bus/nd/devices/region0 ]; do sleep 0.1; i=$((i+1)); done
sleep 1
n=/sys/bus/nd/devices/nmem0
echo "LT-ATTR family $(cat $n/nfit/family)"
echo "LT-ATTR dsm_mask $(cat $n/nfit/dsm_mask)"
echo "LT-ATTR commands $(cat $n/commands)"
wait_pmem() {
    i=0
    while [ $i -lt 50 ] && [ ! -b /dev/pmem0 ]; do sleep 0.1; i=$((i+1)); done
    [ -b /dev/pmem0 ]
}
if [ "$phase" = 1 ]; then
    wait_pmem && echo "LT-ATTR pmem_before yes" || echo "LT-ATTR pmem_before no"
    echo "LT-ATTR available_before $(cat /sys/bus/nd/devices/region0/available_size)"
    ndctl disable-region all || finish 91
    ndctl init-labels -f all 2>&1 | sed 's/^/LT-NDCTL /'
    ndctl enable-region all || finish 92
    ndctl create-namespace -r region0 -m raw -f > /tmp/ns.json 2>&1 || { sed 's/^/LT-NDCTL /' /tmp/ns.json; finish 93; }
    sed 's/^/LT-NDCTL /' /tmp/ns.json
    wait_pmem || { echo "LT-ERROR no /dev/pmem0 after create-namespace"; finish 94; }
    yes "$token" | tr -d '\n' | head -c 4096 >/tmp/pattern
    dd if=/tmp/pattern of=/dev/pmem0 bs=4096 seek=5 count=1 conv=fsync 2>/dev/null || finish 95
fi
if [ "$phase" = 2 ]; then
    wait_pmem || { echo "LT-ERROR no /dev/pmem0"; finish 96; }
    yes "$token" | tr -d '\n' | head -c 4096 >/tmp/pattern
    dd if=/dev/pmem0 of=/tmp/readback bs=4096 skip=5 count=1 2>/dev/null
    cmp -s /tmp/pattern /tmp/readback && echo "LT-PATTERN ok" || echo "LT-PATTERN differs"
fi
ndctl list -N 2>&1 | sed 's/^/LT-LIST /'
echo "LT-UUID $(ndctl list -N | sed -n 's/.*"uuid":"\([^"]*\)".*/\1/p' | head -n1)"
echo "LT-ATTR ns_size $(cat /sys/bus/nd/devices/namespace0.0/size)"
finish 0
"#;

fn sh(script: &str) -> Result<String, String> {
    let out = Command::new("bash")
        .arg("-c")
        .arg(format!("set -eu -o pipefail\n{script}"))
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("bash: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).to_string())
    } else {
        Err(format!(
            "{script}\n{}",
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// The L2 initramfs: busybox, the NVDIMM modules of the L1 kernel package,
/// ndctl with its shared libraries, and the init above. Cached by package.
fn initramfs(deb: &Path) -> Result<PathBuf, Skip> {
    static BUILD: Mutex<()> = Mutex::new(());
    let _one = BUILD.lock().unwrap_or_else(|e| e.into_inner());
    for tool in ["dpkg-deb", "cpio", "gzip", "busybox", "ndctl", "ldd"] {
        if sh(&format!("command -v {tool} >/dev/null")).is_err() {
            return Err(Skip::new(format!(
                "{tool} not found (ndctl: Debian package ndctl)"
            )));
        }
    }
    let stem = deb.file_stem().unwrap().to_string_lossy().to_string();
    let dir = cache_dir().join(format!("labels-l2-{stem}"));
    let out = dir.join("initramfs.cpio.gz");
    if dir.join("ready").is_file()
        && std::fs::read_to_string(dir.join("init")).ok().as_deref() == Some(INIT)
    {
        return Ok(out);
    }
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("init"), INIT).unwrap();
    pmemvm_tests::stock_kernel::unpack_nvdimm_modules(deb, &dir)
        .unwrap_or_else(|e| panic!("cannot build the label-test initramfs: {e}"));
    sh(&format!(
        "cd '{d}'
         mkdir -p root/bin root/usr/bin root/etc
         cp \"$(command -v busybox)\" root/bin/busybox
         nd=$(command -v ndctl)
         cp \"$nd\" root/usr/bin/ndctl
         for lib in $(ldd \"$nd\" | awk '/=> \\//{{print $3}} /^\\t\\//{{print $1}}'); do
             mkdir -p \"root$(dirname \"$lib\")\"
             cp -L \"$lib\" \"root$lib\"
         done
         cp init root/init
         chmod 755 root/init root/bin/busybox
         (cd root && find . | sort | cpio -o -H newc -R 0:0 --quiet) | gzip -1 > initramfs.cpio.gz
         rm -rf pkg root
         touch ready",
        d = dir.display()
    ))
    .unwrap_or_else(|e| panic!("cannot build the label-test initramfs: {e}"));
    Ok(out)
}

fn lines<'a>(console: &'a str, prefix: &str) -> Vec<&'a str> {
    console
        .lines()
        .filter_map(|l| {
            l.trim_end_matches('\r')
                .split_once(prefix)
                .map(|(_, rest)| rest.trim())
        })
        .collect()
}

fn attr<'a>(console: &'a str, name: &str) -> &'a str {
    lines(console, "LT-ATTR ")
        .into_iter()
        .find_map(|l| {
            l.strip_prefix(name)
                .map(str::trim)
                .filter(|_| l.starts_with(&format!("{name} ")))
        })
        .unwrap_or_else(|| panic!("no LT-ATTR {name} in:\n{console}"))
}

#[test]
fn ndctl_labels_persist_across_boots() {
    labels_persist_across_boots(false);
}

/// The same on a DIMM file on hugetlbfs in the L1 (QEMU's `mem-path=/dev/hugepages` habit):
/// hugetlbfs has no write(2), so pmemvm writes the guest's labels through a mapping.
#[test]
fn ndctl_labels_persist_across_boots_on_hugetlbfs() {
    labels_persist_across_boots(true);
}

fn labels_persist_across_boots(on_hugetlbfs: bool) {
    let vm = require!(NestedVm::new().and_then(NestedVm::with_pmemvm));
    let l1 = require!(vm.stock_kernel());
    let deb = pmemvm_tests::stock_kernel::deb();
    let initrd = require!(initramfs(&deb));
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let token = format!("PMEMVM-LABELS-{nanos:x}");
    // On hugetlbfs: a mount and 40 huge pages in the L1 (the DIMM takes 33), and the file
    // copied into the share at the end (hugetlbfs has read(2)).
    let dimm = if on_hugetlbfs {
        "/hp/pm0.img"
    } else {
        "pm0.img"
    };
    let boot = |phase: u32| {
        format!(
            "pmemvm boot --kernel vmlinuz --initrd initrd.gz --memory 512M \
             --nvdimm {DIMM_MIB}M,file={dimm} --console-log console{phase}.txt \
             --cmdline 'console=ttyS0 panic=-1 quiet pmemvm_label_phase={phase} pmemvm_label_token={token}'; \
             echo \"boot {phase} status $?\""
        )
    };
    let script = if on_hugetlbfs {
        format!(
            "mkdir -p /hp && mount -t hugetlbfs -o pagesize=2M none /hp && \
             echo 40 >/proc/sys/vm/nr_hugepages && {}; {}; cat /hp/pm0.img >pm0.img",
            boot(1),
            boot(2)
        )
    } else {
        format!("{}; {}", boot(1), boot(2))
    };
    let out = vm
        .deadline(Duration::from_secs(600))
        .file("vmlinuz", &l1.vmlinuz)
        .file("initrd.gz", &initrd)
        .run(&["sh", "-c", &script])
        .expect("run pmemvm in the harness");
    let c1 = std::fs::read_to_string(out.path("console1.txt")).unwrap_or_default();
    let c2 = std::fs::read_to_string(out.path("console2.txt")).unwrap_or_default();
    let context = format!("{}\n--- boot 1:\n{c1}\n--- boot 2:\n{c2}", out.dump());
    assert!(c1.contains("LT-EXIT 0"), "boot 1 failed\n{context}");
    assert!(c2.contains("LT-EXIT 0"), "boot 2 failed\n{context}");
    // Linux found the Intel family with the three label functions and the
    // health ones (1 SMART, 2 threshold, 17 set threshold, 18 SMART inject).
    assert_eq!(attr(&c1, "family"), "0", "{context}");
    assert_eq!(attr(&c1, "dsm_mask"), "0x60076", "{context}");
    let commands = attr(&c1, "commands");
    for c in ["get_size", "get_data", "set_data"] {
        assert!(commands.contains(c), "{commands}\n{context}");
    }
    // A fresh DIMM has labels (pmemvm's empty index) and no namespace yet:
    // no /dev/pmem0, the whole region available for ndctl create-namespace.
    assert_eq!(attr(&c1, "pmem_before"), "no", "{context}");
    assert_eq!(
        attr(&c1, "available_before"),
        (DIMM_MIB << 20).to_string(),
        "the kernel did not take pmemvm's empty label index\n{context}"
    );
    // The namespace created in boot 1 comes back from the labels in boot 2.
    let uuid1 = lines(&c1, "LT-UUID ").first().copied().unwrap_or("");
    let uuid2 = lines(&c2, "LT-UUID ").first().copied().unwrap_or("");
    assert_eq!(
        uuid1.len(),
        36,
        "no namespace uuid after create-namespace\n{context}"
    );
    assert_eq!(uuid1, uuid2, "{context}");
    assert_eq!(attr(&c2, "ns_size"), attr(&c1, "ns_size"), "{context}");
    assert!(c2.contains("LT-PATTERN ok"), "{context}");
    // On the host: index blocks in the label area, pattern in the data area.
    let backing = std::fs::read(out.path("pm0.img")).unwrap();
    let region = usize::try_from(DIMM_MIB << 20).unwrap();
    let file_len = region + LABEL_SIZE + 4096;
    let file_len = if on_hugetlbfs {
        file_len.div_ceil(2 << 20) * (2 << 20)
    } else {
        file_len
    };
    assert_eq!(backing.len(), file_len, "{context}");
    let labels = &backing[region..region + LABEL_SIZE];
    let sig = b"NAMESPACE_INDEX\0";
    assert!(
        labels.windows(sig.len()).filter(|w| *w == sig).count() >= 2,
        "{context}"
    );
    let data = &backing[..region];
    let pattern: Vec<u8> = token.bytes().cycle().take(4096).collect();
    assert!(
        data.windows(4096)
            .step_by(512)
            .any(|w| w == pattern.as_slice()),
        "pattern not in the data area\n{context}"
    );
    eprintln!(
        "labels persisted{}: namespace {uuid1}; {:.1?} total",
        if on_hugetlbfs { " on hugetlbfs" } else { "" },
        out.elapsed
    );
}
