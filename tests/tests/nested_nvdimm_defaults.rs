//! Tier 5: NVDIMMs that `ndctl` and `daxctl` accept on default `--nvdimm`
//! specs, under pmemvm itself (nested: pmemvm in an L1 with a real KVM,
//! booting the project's guest image). One L1 boot runs three pmemvm boots:
//!
//! 1. `--nvdimm 1G,file=a.img --nvdimm 1G,file=b.img`: the fresh DIMMs have
//!    initialised, empty labels (as a new NVDIMM, or one after `ndctl
//!    init-labels`): regions of exactly 1 GiB, all of it available, no
//!    namespace; `ndctl create-namespace` with no arguments (→ fsdax
//!    `namespace0.0`), `-f -e namespace0.0 -m devdax`, `-f -e namespace0.0
//!    -m fsdax`, `destroy-namespace -f`, `-m devdax`, `-m sector`, `-m raw`,
//!    `-f -e NS -m devdax|fsdax` on region0 (a.img); `ndctl
//!    create-namespace -r region1` (b.img); ext4 and XFS on the fsdax `/dev/pmem*`, each mounted `-o dax`,
//!    a file written and read back, its STATX_ATTR_DAX bit read with
//!    `xfs_io -c 'statx -r'`; a token written to b's device.
//! 2. The same files with the `--nvdimm` options swapped: both namespaces
//!    are back with their uuids, each on the region of its own file (the
//!    XFS file on a's, the token on b's); then b's namespace becomes devdax
//!    and `daxctl reconfigure-device --mode=system-ram` onlines it into a
//!    CPU-less NUMA node.
//! 3. `--nvdimm 64M,file=c.img` under `strace`: the guest creates a
//!    namespace (label writes through the `_DSM` doorbell), says so on its
//!    console, and pmemvm is killed with SIGKILL; the host finds the labels
//!    in c.img's label area and, in the trace, an fdatasync after the last
//!    label write and before the kill.
//!
//! What the guest's tools print is kept in `target/nested-nvdimm-defaults/`
//! (the fixtures of `nvdimm_fixtures.rs` were taken from there).
#![allow(clippy::unwrap_used)] // a failed step fails the test with its message

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use lab::guest::guest_job::{parse_channel, GuestReport};
use pmemvm_tests::image::setup_job_initrd;
use pmemvm_tests::label_trace::label_writes_synced;
use pmemvm_tests::nested::{guest_image, workspace_root, NestedVm};
use pmemvm_tests::require;

const GIB: u64 = 1 << 30;
const LABELS: u64 = 128 << 10;

/// Helpers every guest script starts with.
const PRELUDE: &str = r#"set +e
O=$PMEMVM_OUT
step() { n=$1; shift; "$@" > $O/$n.out 2>&1; echo "$n $?" >> $O/steps.txt; }
field() { sed -n "s/.*\"$1\":\"\([^\"]*\)\".*/\1/p" "$2" | head -n 1; }
"#;

const RUN1: &str = r#"
ndctl list -DRN > $O/list-fresh.json 2>&1
for r in /sys/bus/nd/devices/region*; do
    echo "${r##*/} $(cat $r/numa_node) $(cat $r/target_node)" >> $O/region-nodes.txt
done
dmesg | grep -E "SRAT|NUMA" > $O/dmesg-numa.txt
step 01-create ndctl create-namespace
first=$(field dev $O/01-create.out)
step 02-e-devdax ndctl create-namespace -f -e "$first" -m devdax
step 03-e-fsdax ndctl create-namespace -f -e "$first" -m fsdax
step 04-destroy ndctl destroy-namespace -f "$first"
step 05-devdax ndctl create-namespace -r region0 -m devdax
step 06-destroy ndctl destroy-namespace -f "$(field dev $O/05-devdax.out)"
step 07-sector ndctl create-namespace -r region0 -m sector
step 08-destroy ndctl destroy-namespace -f "$(field dev $O/07-sector.out)"
step 09-raw ndctl create-namespace -r region0 -m raw
step 10-e-devdax ndctl create-namespace -f -e "$(field dev $O/09-raw.out)" -m devdax
step 11-e-fsdax ndctl create-namespace -f -e "$(field dev $O/10-e-devdax.out)" -m fsdax
step 12-b-fsdax ndctl create-namespace -r region1
ndctl list -DRN > $O/ndctl-list-DRN.json 2>&1
daxctl list > $O/daxctl-list-fsdax.json 2>&1
dev=/dev/$(field blockdev $O/11-e-fsdax.out)
mkdir -p /mnt/t
for fs in ext4 xfs; do
    if [ $fs = ext4 ]; then step mkfs-$fs mkfs.ext4 -F -q $dev
    else step mkfs-$fs mkfs.xfs -f -q -m reflink=0 $dev; fi
    step mount-$fs mount -o dax $dev /mnt/t
    grep " /mnt/t " /proc/mounts > $O/mounts-$fs.txt
    echo "TOKEN-$fs-@TOKEN@" > /mnt/t/file
    sync
    cat /mnt/t/file > $O/read-$fs.txt
    step statx-$fs xfs_io -c 'statx -r' /mnt/t/file
    umount /mnt/t
done
bdev=/dev/$(field blockdev $O/12-b-fsdax.out)
printf 'TOKEN-b-@TOKEN@' | dd of=$bdev bs=4096 seek=4096 conv=sync,fsync 2>/dev/null
echo "token-b $?" >> $O/steps.txt
"#;

const RUN2: &str = r#"
ndctl list -DRN > $O/list-swapped.json 2>&1
mkdir -p /mnt/t
for n in /sys/bus/nd/devices/namespace*.*; do
    ns=${n##*/}
    ndctl list -n $ns > $O/ns-$ns.json 2>&1
    blk=$(field blockdev $O/ns-$ns.json)
    [ -n "$blk" ] || continue
    echo "$ns $(cat $n/uuid) $blk" >> $O/found.txt
    dd if=/dev/$blk bs=4096 skip=4096 count=1 2>/dev/null | head -c 64 > $O/raw-$ns.txt
    if mount -o dax,ro /dev/$blk /mnt/t 2>/dev/null; then
        cat /mnt/t/file > $O/file-$ns.txt
        umount /mnt/t
    fi
    grep -q TOKEN-b $O/raw-$ns.txt && bns=$ns
done
zcat /proc/config.gz | grep -E "^CONFIG_DEV_DAX_KMEM=" > $O/kmem-config.txt
step 21-devdax ndctl create-namespace -f -e "$bns" -m devdax
dax=$(field chardev $O/21-devdax.out)
r=${bns#namespace}
r=region${r%.*}
cat /sys/bus/nd/devices/$r/target_node > $O/target-node.txt
daxctl list > $O/daxctl-list-devdax.json 2>&1
grep MemTotal /proc/meminfo > $O/mem-before.txt
step 22-system-ram daxctl reconfigure-device --mode=system-ram $dax
grep MemTotal /proc/meminfo > $O/mem-after.txt
daxctl list > $O/daxctl-list-system-ram.json 2>&1
for d in /sys/devices/system/node/node*; do
    echo "${d##*/} cpus=[$(cat $d/cpulist)] $(grep MemTotal $d/meminfo | sed 's/.*MemTotal: *//')" >> $O/nodes.txt
done
"#;

const RUN3: &str = r#"
for s in "create-namespace" "create-namespace -f -e namespace0.0 -m devdax" "create-namespace -f -e namespace0.0 -m fsdax"; do
    out=$(ndctl $s 2>&1)
    echo "R3-STEP rc=$? ndctl $s: $(echo $out | tr -d ' \n')"
done
echo "NSUUID $(cat /sys/bus/nd/devices/namespace0.0/uuid)"
echo "LABELS-WRITTEN"
sleep 600
"#;

/// L1 script: three pmemvm boots; the third is killed once its guest has
/// written labels.
const L1_SCRIPT: &str = r#"
pm() {
    n=$1; shift
    pmemvm -v boot --kernel vmlinux --initrd run$n.img \
        --cmdline 'console=ttyS0 reboot=acpi panic=-1 quiet' --memory 512M "$@" \
        --console-log console$n.txt --channel channel$n.bin 2> pmemvm$n.err
    echo "run$n exited $?"
}
pm 1 --nvdimm 1G,file=a.img --nvdimm 1G,file=b.img
pm 2 --nvdimm 1G,file=b.img --nvdimm 1G,file=a.img
strace -f --seccomp-bpf -e trace=pwrite64,fdatasync -o strace3.log \
    pmemvm -v boot --kernel vmlinux --initrd run3.img \
    --cmdline 'console=ttyS0 reboot=acpi panic=-1 quiet' --memory 512M \
    --nvdimm 64M,file=c.img --console-log console3.txt --channel channel3.bin 2> pmemvm3.err &
spid=$!
i=0
while [ $i -lt 900 ] && ! grep -q LABELS-WRITTEN console3.txt 2>/dev/null; do
    sleep 0.2; i=$((i+1))
done
grep -q LABELS-WRITTEN console3.txt && echo "run3 labels written"
pid=$(cat /proc/$spid/task/$spid/children 2>/dev/null | tr -d ' ')
[ -n "$pid" ] && kill -9 $pid && echo "run3 pmemvm $pid killed"
wait $spid
echo "run3 strace exited $?"
"#;

/// True when the image's initramfs lists a `modules.builtin.bin`.
fn image_has_builtin_index() -> bool {
    guest_image("manifest.json")
        .ok()
        .and_then(|p| fs::read_to_string(p).ok())
        .is_some_and(|m| m.contains("modules.builtin.bin"))
}

fn job_initrd(base: &[u8], script: &str, token: &str) -> Vec<u8> {
    setup_job_initrd(
        base,
        &format!("{PRELUDE}{}", script.replace("@TOKEN@", token)),
    )
}

fn text(r: &GuestReport, name: &str) -> String {
    r.files
        .get(name)
        .map(|b| String::from_utf8_lossy(b).into_owned())
        .unwrap_or_default()
}

fn json(r: &GuestReport, name: &str, ctx: &str) -> serde_json::Value {
    let t = text(r, name);
    serde_json::from_str(&t).unwrap_or_else(|e| panic!("{name} is not JSON ({e}):\n{t}\n{ctx}"))
}

/// "name status" lines of steps.txt.
fn steps(r: &GuestReport) -> BTreeMap<String, String> {
    text(r, "steps.txt")
        .lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(a, b)| (a.to_string(), b.trim().to_string()))
        .collect()
}

/// The serial in a backing file's identity page (its last 4 KiB).
fn serial_of(path: &Path) -> u32 {
    use std::os::unix::fs::FileExt;
    let f = fs::File::open(path).unwrap();
    let len = f.metadata().unwrap().len();
    let mut block = [0u8; 4096];
    f.read_exact_at(&mut block, len - 4096).unwrap();
    match vmm::nvdimm::identity::parse(&block) {
        vmm::nvdimm::identity::Block::Valid(id) => id.serial,
        other => panic!("{}: no identity ({other:?})", path.display()),
    }
}

fn kib(line: &str) -> u64 {
    line.split_whitespace()
        .find_map(|w| w.parse().ok())
        .unwrap_or(0)
}

/// Keeps what the guest's tools printed, for humans and fixtures.
fn keep(reports: &[(&str, &GuestReport)], extra: &[(&str, PathBuf)]) -> PathBuf {
    let dir = workspace_root().join("target/nested-nvdimm-defaults");
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    for (run, r) in reports {
        for (name, bytes) in &r.files {
            fs::write(dir.join(format!("{run}-{name}")), bytes).unwrap();
        }
    }
    for (name, src) in extra {
        let _ = fs::copy(src, dir.join(name));
    }
    dir
}

#[test]
fn ndctl_and_daxctl_work_on_default_nvdimms() {
    let vm = require!(NestedVm::new().and_then(NestedVm::with_pmemvm));
    let kernel = require!(guest_image("vmlinux"));
    let initrd = require!(guest_image("initramfs.cpio.gz"));
    if !Path::new("/usr/bin/strace").is_file() {
        pmemvm_tests::skip!("/usr/bin/strace missing (Debian package strace): it traces run 3");
    }
    // daxctl asks libkmod for "kmem" before system-ram; libkmod knows it is
    // built in only from /lib/modules/REL/modules.builtin.bin in the image.
    assert!(
        image_has_builtin_index(),
        "the guest image ships no modules.builtin.bin (guest-images/lib/initramfs.sh): daxctl system-ram would fail"
    );
    let base = fs::read(&initrd).expect("initramfs");
    let token = format!(
        "{:x}",
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
    );
    let out = vm
        .deadline(Duration::from_secs(900))
        .binary("strace", "/usr/bin/strace")
        .file("vmlinux", kernel)
        .bytes("run1.img", job_initrd(&base, RUN1, &token))
        .bytes("run2.img", job_initrd(&base, RUN2, &token))
        .bytes("run3.img", job_initrd(&base, RUN3, &token))
        .run(&["sh", "-c", L1_SCRIPT])
        .expect("three pmemvm boots in the harness");
    let read = |f: &str| fs::read_to_string(out.path(f)).unwrap_or_default();
    let ctx = format!(
        "{}\n--- pmemvm1.err ---\n{}\n--- console1 ---\n{}\n--- console2 ---\n{}\n--- console3 ---\n{}\n--- pmemvm3.err ---\n{}",
        out.dump(),
        read("pmemvm1.err"),
        read("console1.txt"),
        read("console2.txt"),
        read("console3.txt"),
        read("pmemvm3.err"),
    );
    let channel = |n: u32| {
        parse_channel(&fs::read(out.path(&format!("channel{n}.bin"))).unwrap_or_default())
            .unwrap_or_else(|e| panic!("channel {n}: {e}\n{ctx}"))
    };
    let (r1, r2) = (channel(1), channel(2));
    let kept = keep(
        &[("run1", &r1), ("run2", &r2)],
        &[
            ("console3.txt", out.path("console3.txt")),
            ("strace3.log", out.path("strace3.log")),
        ],
    );
    eprintln!(
        "nested NVDIMM defaults: {:.1?} in all; guest outputs in {}",
        out.elapsed,
        kept.display()
    );
    let ctx = format!("{ctx}\n(guest outputs in {})", kept.display());
    assert!(out.stdout.contains("run1 exited 0"), "{ctx}");
    assert!(out.stdout.contains("run2 exited 0"), "{ctx}");
    assert_eq!(r1.status, Some(0), "{}\n{ctx}", text(&r1, "setup.log"));
    assert_eq!(r2.status, Some(0), "{}\n{ctx}", text(&r2, "setup.log"));

    check_run1(&r1, &ctx);
    check_swap(&r1, &r2, &out.path("a.img"), &out.path("b.img"), &ctx);
    check_system_ram(&r2, &ctx);
    check_sigkill(
        &read("console3.txt"),
        &read("strace3.log"),
        &out.path("c.img"),
        &out.stdout,
        &ctx,
    );
}

/// Every namespace operation of run 1 succeeded with the sizes the geometry promises.
fn check_run1(r1: &GuestReport, ctx: &str) {
    let st = steps(r1);
    for (name, status) in &st {
        assert_eq!(
            status,
            "0",
            "step {name} failed:\n{}\n{ctx}",
            text(r1, &format!("{name}.out"))
        );
    }
    for name in [
        "01-create",
        "02-e-devdax",
        "03-e-fsdax",
        "04-destroy",
        "05-devdax",
        "07-sector",
        "09-raw",
        "10-e-devdax",
        "11-e-fsdax",
        "12-b-fsdax",
        "mkfs-ext4",
        "mount-xfs",
        "statx-xfs",
        "token-b",
    ] {
        assert!(st.contains_key(name), "step {name} did not run\n{ctx}");
    }
    // The fresh DIMMs: labelled (initialised, empty) regions of exactly
    // 1 GiB, all of it available, no namespace; default align 16 MiB.
    let fresh = json(r1, "list-fresh.json", ctx);
    let regions = fresh["regions"].as_array().expect("regions");
    assert_eq!(regions.len(), 2, "{fresh:#}");
    for r in regions {
        assert_eq!(r["size"], GIB, "{fresh:#}");
        assert_eq!(r["available_size"], GIB, "{fresh:#}");
        assert_eq!(r["align"], 16 << 20, "{fresh:#}");
        assert!(
            r["namespaces"].as_array().is_none_or(Vec::is_empty),
            "a fresh DIMM has no namespace: {fresh:#}"
        );
    }
    // NUMA from the SRAT: DIMM i is node i + 1, its nearest CPU node is 0.
    let nodes = text(r1, "region-nodes.txt");
    assert!(nodes.contains("region0 0 1"), "{nodes}\n{ctx}");
    assert!(nodes.contains("region1 0 2"), "{nodes}\n{ctx}");
    let made = |n: &str| json(r1, &format!("{n}.out"), ctx);
    let size = |v: &serde_json::Value| v["size"].as_u64().unwrap_or(0);
    let c = made("01-create");
    assert_eq!(c["mode"], "fsdax", "no-argument create-namespace: {c:#}");
    for (n, mode) in [
        ("01-create", "fsdax"),
        ("02-e-devdax", "devdax"),
        ("03-e-fsdax", "fsdax"),
        ("05-devdax", "devdax"),
        ("07-sector", "sector"),
        ("09-raw", "raw"),
        ("10-e-devdax", "devdax"),
        ("11-e-fsdax", "fsdax"),
        ("12-b-fsdax", "fsdax"),
    ] {
        let v = made(n);
        assert_eq!(v["mode"], mode, "{n}: {v:#}");
        let s = size(&v);
        // raw: the whole region; others: the region less their metadata
        // (fsdax/devdax keep struct pages on the device: 64 B per 4 KiB,
        // plus alignment; BTT under 3 %).
        if mode == "raw" {
            assert_eq!(s, GIB, "{n}: {v:#}");
        } else {
            assert!(s < GIB && s > GIB - GIB / 64 - (32 << 20), "{n}: {v:#}");
        }
    }
    assert!(
        made("12-b-fsdax")["dev"]
            .as_str()
            .is_some_and(|d| d.starts_with("namespace1.")),
        "{ctx}"
    );
    // ext4 and XFS, mounted with DAX: in /proc/mounts, the file read back,
    // and STATX_ATTR_DAX (0x200000) set on the file.
    for fs in ["ext4", "xfs"] {
        let m = text(r1, &format!("mounts-{fs}.txt"));
        assert!(
            m.contains(&format!(" /mnt/t {fs} ")) && m.contains("dax"),
            "{fs} not mounted with dax: {m}\n{ctx}"
        );
        let back = text(r1, &format!("read-{fs}.txt"));
        assert!(back.starts_with(&format!("TOKEN-{fs}-")), "{fs}: {back}");
        let statx = text(r1, &format!("statx-{fs}.out"));
        let attrs = statx
            .lines()
            .find_map(|l| l.trim().strip_prefix("stat.attributes = "))
            .and_then(|v| u64::from_str_radix(v.trim().trim_start_matches("0x"), 16).ok())
            .unwrap_or_else(|| panic!("no stat.attributes in {fs}'s statx:\n{statx}"));
        assert_ne!(attrs & 0x20_0000, 0, "{fs}: no STATX_ATTR_DAX\n{statx}");
    }
}

/// (region, "uuid raw_uuid", namespace) of each namespace in `ndctl list
/// -DRN` (for fsdax, `uuid` is the info block's and `raw_uuid` the label's).
fn namespaces(list: &serde_json::Value) -> Vec<(String, String, String)> {
    let mut v = Vec::new();
    for r in list["regions"].as_array().into_iter().flatten() {
        for n in r["namespaces"].as_array().into_iter().flatten() {
            let s = |k: &str| n[k].as_str().unwrap_or("").to_string();
            v.push((
                r["dev"].as_str().unwrap_or("").to_string(),
                format!("{} {}", s("uuid"), s("raw_uuid")),
                s("dev"),
            ));
        }
    }
    v
}

/// After swapping the `--nvdimm` options, each namespace is back, on the
/// region (and DIMM serial) of its own file, holding its own data.
fn check_swap(r1: &GuestReport, r2: &GuestReport, a: &Path, b: &Path, ctx: &str) {
    let before = namespaces(&json(r1, "ndctl-list-DRN.json", ctx));
    let after_list = json(r2, "list-swapped.json", ctx);
    let after = namespaces(&after_list);
    let uuid_of = |region: &str| {
        before
            .iter()
            .find(|(r, _, _)| r == region)
            .map(|(_, u, _)| u.clone())
            .unwrap_or_else(|| panic!("no namespace on {region} in run 1: {before:?}\n{ctx}"))
    };
    let (ua, ub) = (uuid_of("region0"), uuid_of("region1"));
    let region_now = |uuid: &str| {
        after
            .iter()
            .find(|(_, u, _)| u == uuid)
            .map(|(r, _, n)| (r.clone(), n.clone()))
            .unwrap_or_else(|| panic!("namespace {uuid} gone after the swap: {after:?}\n{ctx}"))
    };
    // Swapped: b.img is DIMM 0 (region0), a.img DIMM 1 (region1).
    let (ra, na) = region_now(&ua);
    let (rb, nb) = region_now(&ub);
    assert_eq!((ra.as_str(), rb.as_str()), ("region1", "region0"), "{ctx}");
    // The DIMM of each region carries its file's serial (Linux prints it big-endian).
    let dimm_ids: BTreeMap<String, String> = after_list["dimms"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|d| {
            let s = |k: &str| d[k].as_str().unwrap_or("").to_string();
            (s("dev"), s("id"))
        })
        .collect();
    let ends = |i: usize, p: &Path| {
        let s = format!("{:08x}", serial_of(p).swap_bytes());
        assert!(
            dimm_ids
                .get(&format!("nmem{i}"))
                .is_some_and(|id| id.ends_with(&s)),
            "nmem{i} should be {}: {dimm_ids:?}",
            p.display()
        );
    };
    ends(0, b);
    ends(1, a);
    // a's XFS file and b's raw token, read through the namespaces found by uuid.
    let file_a = text(r2, &format!("file-{na}.txt"));
    assert!(file_a.starts_with("TOKEN-xfs-"), "a: {file_a}\n{ctx}");
    let raw_b = text(r2, &format!("raw-{nb}.txt"));
    assert!(raw_b.starts_with("TOKEN-b-"), "b: {raw_b}\n{ctx}");
    // And on the host the token is in b.img, where b's fsdax data starts
    // (region offset: 1 GiB less the namespace's size) plus 16 MiB, and not
    // at that place in a.img.
    use std::os::unix::fs::FileExt;
    let data_start = GIB
        - json(r1, "12-b-fsdax.out", ctx)["size"]
            .as_u64()
            .unwrap_or(0);
    let token_b = raw_b.trim_end_matches('\0').as_bytes().to_vec();
    let at = |p: &Path| {
        let f = fs::File::open(p).unwrap();
        assert_eq!(f.metadata().unwrap().len(), GIB + LABELS + 4096);
        let mut buf = vec![0u8; token_b.len()];
        f.read_exact_at(&mut buf, data_start + (16 << 20)).unwrap();
        buf
    };
    assert_eq!(at(b), token_b, "token not at its place in b.img");
    assert_ne!(at(a), token_b, "b's token in a.img");
}

/// system-ram: MemTotal grows by about the devdax size, in a CPU-less node.
fn check_system_ram(r2: &GuestReport, ctx: &str) {
    let st = steps(r2);
    for n in ["21-devdax", "22-system-ram"] {
        assert_eq!(
            st.get(n).map(String::as_str),
            Some("0"),
            "{n}:\n{}\n{ctx}",
            text(r2, &format!("{n}.out"))
        );
    }
    let devdax = json(r2, "21-devdax.out", ctx);
    let dax_bytes = devdax["size"].as_u64().unwrap_or(0);
    let before = kib(&text(r2, "mem-before.txt")) << 10;
    let after = kib(&text(r2, "mem-after.txt")) << 10;
    let grown = after.saturating_sub(before);
    // kmem onlines whole 128 MiB memory blocks inside the dax range.
    assert!(
        grown <= dax_bytes && grown + (256 << 20) >= dax_bytes,
        "MemTotal grew {grown} bytes for a {dax_bytes}-byte devdax\n{ctx}"
    );
    let node: u32 = text(r2, "target-node.txt").trim().parse().unwrap_or(0);
    assert_ne!(node, 0, "target_node is the CPUs' node\n{ctx}");
    let nodes = text(r2, "nodes.txt");
    let line = nodes
        .lines()
        .find(|l| l.starts_with(&format!("node{node} ")))
        .unwrap_or_else(|| panic!("no node{node}:\n{nodes}\n{ctx}"));
    assert!(line.contains("cpus=[]"), "node{node} has CPUs: {line}");
    assert!(
        kib(line.split(']').nth(1).unwrap_or("")) << 10 >= grown,
        "{line}"
    );
    assert_eq!(
        text(r2, "kmem-config.txt").trim(),
        "CONFIG_DEV_DAX_KMEM=y",
        "{ctx}"
    );
    let sysram = text(r2, "daxctl-list-system-ram.json");
    assert!(sysram.contains("\"mode\":\"system-ram\""), "{sysram}");
}

/// A label write, then SIGKILL: the label is in c.img, and the trace shows
/// the fdatasync after the last label write, before the kill.
fn check_sigkill(console: &str, strace: &str, c: &Path, l1_stdout: &str, ctx: &str) {
    assert!(l1_stdout.contains("run3 labels written"), "{ctx}");
    // One fresh DIMM: the no-argument create makes namespace0.0, which the
    // literal `-f -e namespace0.0` recipes then reconfigure.
    let steps: Vec<&str> = console
        .lines()
        .filter_map(|l| l.split_once("R3-STEP ").map(|(_, r)| r))
        .collect();
    assert_eq!(steps.len(), 3, "{ctx}");
    for (step, mode) in steps.iter().zip(["fsdax", "devdax", "fsdax"]) {
        assert!(step.starts_with("rc=0 "), "{step}\n{ctx}");
        assert!(step.contains("\"dev\":\"namespace0.0\""), "{step}");
        assert!(step.contains(&format!("\"mode\":\"{mode}\"")), "{step}");
    }
    assert!(l1_stdout.contains("killed"), "{ctx}");
    // The label's uuid (sysfs namespace uuid; ndctl's "uuid" of an fsdax
    // namespace is its info block's).
    let uuid = console
        .lines()
        .find_map(|l| l.trim().strip_prefix("NSUUID "))
        .map(|u| u.trim().to_string())
        .filter(|u| u.len() == 36)
        .unwrap_or_else(|| panic!("no namespace uuid on the console\n{ctx}"));
    let raw: Vec<u8> = (0..16)
        .map(|i| {
            let hex: String = uuid.chars().filter(|c| *c != '-').collect();
            u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap()
        })
        .collect();
    let bytes = fs::read(c).unwrap();
    let region = 64usize << 20;
    assert_eq!(bytes.len(), region + (128 << 10) + 4096);
    let labels = &bytes[region..region + (128 << 10)];
    assert!(
        labels
            .windows(16)
            .filter(|w| *w == b"NAMESPACE_INDEX\0")
            .count()
            >= 2,
        "no label index in c.img after SIGKILL"
    );
    assert!(
        labels.windows(16).any(|w| w == raw.as_slice()),
        "namespace {uuid} has no label in c.img after SIGKILL"
    );
    // The trace, thread by thread: every label write (pwrite64 at an offset
    // in the label area) is followed by that thread's fdatasync returning 0
    // before the thread makes any other traced call.
    let (writes, unsynced) = label_writes_synced(strace, 64 << 20..(64 << 20) + LABELS);
    assert!(writes > 0, "no label pwrite64 in the trace:\n{strace}");
    assert!(
        unsynced.is_empty(),
        "label writes not followed by an fdatasync: {unsynced:?}\n{strace}"
    );
}
