// test-queue: tcg
//! Tier 3: real Linux accepts pmemvm's NVDIMM tables.
//!
//! Debian's stock 6.1 kernel (the nested harness's L1 kernel, with the
//! `libnvdimm`, `nd_btt`, `nd_pmem` and `nfit` modules of the same package)
//! boots under QEMU TCG with QEMU's own FADT/MADT/DSDT plus **our** NFIT and
//! NVDIMM SSDT (`-acpitable`), over `pc-dimm`s backed by files at the
//! addresses our NFIT names (QEMU's pc-dimm makes no NFIT of its own). A small
//! init prints what libnvdimm built from the tables; the test checks regions,
//! namespaces, `/dev/pmem*`, read-only handling, persistence domain, flush
//! hints (FUA), DIMM ids, and that a guest write lands in the right backing
//! file at the right offset (so the SPA base is right). Our SPA ranges name
//! proximity domains 1 and 2; QEMU's memory hotplug makes an SRAT of its own
//! (node 0 only), which Linux reads instead of ours (it takes the first), so
//! here the domains map to no node and Linux falls back to node 0 — the
//! proof that our SRAT gives real nodes is the nested test under pmemvm
//! (`nested_nvdimm_defaults`). With the `_DSM`
//! transport present (its page on a `memmap=`-reserved RAM page; nothing
//! answers the doorbell under QEMU), Linux's ACPICA must run `NCAL` without
//! an error and see the Intel family with no label functions.
//!
//! Skips with `SKIP:` when QEMU, the Debian kernel package (apt) or the
//! unpacking tools are missing.
#![allow(clippy::unwrap_used)] // a failed step fails the test with its message

use pmemvm_tests::pmemvm::TempDir;
use std::collections::BTreeMap;
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use acpi::{build_tables, nfit_handle, DsmTransport, GuestPlatform, NvdimmDescription};
use lab::guest::qemu::{opt_escape, QemuAccel, QemuCommand};
use pmemvm_tests::nested::{cache_dir, find_qemu, prepare_l1, NestedError};
use pmemvm_tests::process::wait_with_deadline;
use pmemvm_tests::require;
use pmemvm_tests::skip::Skip;

/// Each boot must finish within this.
const DEADLINE: Duration = Duration::from_secs(180);
/// Size of each DIMM (pc-dimm and SPA range).
const DIMM_SIZE: u64 = 256 << 20;
/// A guest RAM page reserved with `memmap=` for the DSM page.
const DSM_PAGE: u64 = 0x1000_0000;

const INIT: &str = r#"#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs dev /dev
echo "QT-INIT"
for m in libnvdimm nd_btt nd_pmem nfit; do
    insmod /lib/modules/$m.ko || echo "QT-ERROR insmod $m"
done
i=0
while [ $i -lt 50 ] && ! ls /dev/pmem* >/dev/null 2>&1; do sleep 0.2; i=$((i+1)); done
sleep 1
for d in /sys/bus/nd/devices/*; do
    n=$(basename $d)
    for a in size read_only persistence_domain mode deep_flush numa_node target_node nfit/handle nfit/id \
             nfit/flags nfit/family nfit/dsm_mask nfit/vendor nfit/format nfit/phys_id; do
        [ -r $d/$a ] && echo "QT-ATTR $n $a $(cat $d/$a 2>/dev/null | tr '\n' ' ')"
    done
done
for p in /sys/block/pmem*; do
    b=$(basename $p)
    echo "QT-ATTR $b sectors $(cat $p/size)"
    echo "QT-ATTR $b ro $(cat $p/ro)"
    echo "QT-ATTR $b fua $(cat $p/queue/fua)"
done
if [ -b /dev/pmem0 ]; then
    echo -n "PMEMVM-QEMU-TABLES" | dd of=/dev/pmem0 bs=1 seek=12288 conv=notrunc 2>/dev/null
    echo 1 > /sys/bus/nd/devices/region0/deep_flush 2>/dev/null && echo "QT-ATTR region0 deep_flush_write ok"
    sync
    echo "QT-WROTE"
fi
dmesg | grep -E "ACPI (BIOS )?(Error|Warning)|nfit|nd_pmem|ACPI: (NFIT|SSDT)" | sed 's/^/QT-DMESG /'
echo "QT-DONE"
poweroff -f
"#;

/// Kernel and initramfs for these boots, cached by the kernel package.
struct Image {
    vmlinuz: PathBuf,
    initramfs: PathBuf,
}

fn sh(script: &str) -> Result<(), String> {
    let out = Command::new("bash")
        .arg("-c")
        .arg(format!("set -eu -o pipefail\n{script}"))
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("bash: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{script}\n{}",
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// Builds the image once per test process (tests run in parallel threads).
fn image() -> Result<Image, NestedError> {
    static BUILD: Mutex<()> = Mutex::new(());
    let _one = BUILD.lock().unwrap_or_else(|e| e.into_inner());
    build_image()
}

fn build_image() -> Result<Image, NestedError> {
    for tool in ["dpkg-deb", "cpio", "gzip", "busybox"] {
        if sh(&format!("command -v {tool} >/dev/null")).is_err() {
            return Err(NestedError::Unavailable(Skip::new(format!(
                "{tool} not found"
            ))));
        }
    }
    // The L1 preparation downloads (and caches) Debian's kernel package.
    let l1 = prepare_l1()?;
    let deb = pmemvm_tests::stock_kernel::deb();
    let stem = deb.file_stem().unwrap().to_string_lossy().to_string();
    // The init script's hash is in the name: other versions of this test
    // sharing the cache keep their own image instead of rebuilding this one.
    let hash = INIT.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    let dir = cache_dir().join(format!("qemu-tables-{stem}-{:08x}", hash >> 32));
    let image = Image {
        vmlinuz: l1.vmlinuz,
        initramfs: dir.join("initramfs.cpio.gz"),
    };
    if dir.join("ready").is_file()
        && std::fs::read_to_string(dir.join("init")).ok().as_deref() == Some(INIT)
    {
        return Ok(image);
    }
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("root/lib/modules")).unwrap();
    std::fs::create_dir_all(dir.join("root/bin")).unwrap();
    std::fs::write(dir.join("init"), INIT).unwrap();
    pmemvm_tests::stock_kernel::unpack_nvdimm_modules(&deb, &dir)
        .unwrap_or_else(|e| panic!("cannot build the test initramfs: {e}"));
    let d = dir.display();
    sh(&format!(
        "cd '{d}'
         cp \"$(command -v busybox)\" root/bin/busybox
         cp init root/init
         chmod 755 root/init root/bin/busybox
         mkdir -p root/dev root/proc root/sys
         (cd root && find . | sort | cpio -o -H newc -R 0:0 --quiet) | gzip -1 > initramfs.cpio.gz
         rm -rf pkg root
         touch ready"
    ))
    .unwrap_or_else(|e| panic!("cannot build the test initramfs: {e}"));
    Ok(image)
}

fn dimm(i: u32, readonly: bool) -> NvdimmDescription {
    NvdimmDescription {
        handle: nfit_handle(i),
        spa_base: (4 + u64::from(i)) << 30,
        spa_size: DIMM_SIZE,
        flush_hint_addr: Some(0xfe00_0000 + u64::from(i) * 0x1000),
        readonly,
        serial: 0x504d_0000 | i,
        label_size: 0,
        proximity_domain: Some(1 + i),
    }
}

fn machine(nvdimms: Vec<NvdimmDescription>, dsm: Option<DsmTransport>) -> GuestPlatform {
    GuestPlatform {
        nvdimms,
        dsm,
        ..GuestPlatform::example(1)
    }
}

struct Boot {
    console: String,
    /// (device, attribute) → value.
    attrs: BTreeMap<(String, String), String>,
    dir: TempDir,
}

impl Boot {
    fn attr(&self, dev: &str, name: &str) -> &str {
        self.attrs
            .get(&(dev.to_string(), name.to_string()))
            .map(String::as_str)
            .unwrap_or_else(|| panic!("no {dev}/{name} in the guest's output:\n{}", self.console))
    }
}

/// Boots the kernel with our NFIT and SSDT for `desc`, one pc-dimm per DIMM.
fn boot(tag: &str, image: &Image, desc: &GuestPlatform, extra_cmdline: &str) -> Boot {
    let qemu = find_qemu().unwrap();
    let dir = TempDir::new(tag);
    let tables = build_tables(desc, 0xe_0000, 0xe_1000, 0x1_e000).unwrap();
    let console_path = dir.0.join("console.log");
    let mut q = QemuCommand::new(&qemu, QemuAccel::Tcg, "max");
    q.machine("pc")
        .memory("512M,slots=4,maxmem=4G")
        .serial_file(&console_path)
        .kernel(
            &image.vmlinuz,
            Some(&image.initramfs),
            &format!("console=ttyS0 panic=-1 quiet loglevel=4 acpi_no_memhotplug {extra_cmdline}"),
        );
    for t in tables
        .tables
        .iter()
        .filter(|t| t.name == "NFIT" || t.name.starts_with("SSDT"))
    {
        let f = dir.0.join(format!("{}.aml", t.name));
        std::fs::write(&f, &t.bytes).unwrap();
        q.acpitable(&f);
    }
    for (i, d) in desc.nvdimms.iter().enumerate() {
        let f = dir.0.join(format!("pm{i}.img"));
        std::fs::File::create(&f)
            .unwrap()
            .set_len(d.spa_size)
            .unwrap();
        q.object(&format!(
            "memory-backend-file,id=m{i},share=on,mem-path={},size={}",
            opt_escape(&f.to_string_lossy()),
            d.spa_size
        ));
        q.device(&format!("pc-dimm,memdev=m{i},addr={:#x}", d.spa_base));
    }
    let mut tcg = pmemvm_tests::tcg::lock().expect("take the TCG lock");
    tcg.note_console(&console_path);
    let start = Instant::now();
    let mut child = q
        .into_command()
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .unwrap();
    let waited = wait_with_deadline(&mut child, DEADLINE).expect("wait for QEMU");
    drop(tcg);
    let read_console = || {
        String::from_utf8_lossy(&std::fs::read(&console_path).unwrap_or_default()).replace('\r', "")
    };
    if waited.is_none() {
        panic!(
            "QEMU did not finish within {DEADLINE:?}; console:\n{}",
            read_console()
        );
    }
    let mut err = String::new();
    let _ = child.stderr.take().unwrap().read_to_string(&mut err);
    let console = read_console();
    eprintln!("{tag}: guest ran {:.1} s", start.elapsed().as_secs_f64());
    assert!(
        console.contains("QT-DONE"),
        "guest did not finish:\n{console}\n{err}"
    );
    assert!(!console.contains("QT-ERROR"), "{console}");
    let mut attrs = BTreeMap::new();
    for line in console.lines() {
        if let Some(rest) = line.trim().strip_prefix("QT-ATTR ") {
            let mut it = rest.splitn(3, ' ');
            let (dev, name) = (it.next().unwrap_or(""), it.next().unwrap_or(""));
            let value = it.next().unwrap_or("").trim().to_string();
            attrs.insert((dev.to_string(), name.to_string()), value);
        }
    }
    Boot {
        console,
        attrs,
        dir,
    }
}

fn no_acpi_errors(b: &Boot) {
    for line in b.console.lines().filter(|l| l.starts_with("QT-DMESG")) {
        assert!(
            !line.contains("ACPI Error")
                && !line.contains("ACPI Warning")
                && !line.contains("ACPI BIOS"),
            "{line}\n{}",
            b.console
        );
    }
}

#[test]
fn linux_builds_pmem_from_our_nfit_and_ssdt() {
    let _ = require!(find_qemu());
    let image = require!(image());
    let desc = machine(vec![dimm(0, false), dimm(1, true)], None);
    let b = boot("nodsm", &image, &desc, "");
    no_acpi_errors(&b);
    assert!(b.console.contains("ACPI: NFIT"), "{}", b.console);
    assert!(b.console.contains("PMEMVM NVDIMM"), "{}", b.console);
    // Two regions of the full size, the second read-only ("not armed").
    assert_eq!(b.attr("region0", "size"), DIMM_SIZE.to_string());
    assert_eq!(b.attr("region1", "size"), DIMM_SIZE.to_string());
    assert_eq!(b.attr("region0", "read_only"), "0");
    assert_eq!(b.attr("region1", "read_only"), "1");
    assert_eq!(b.attr("region0", "persistence_domain"), "memory_controller");
    // Proximity domains 1 and 2 are in no SRAT Linux reads here: the
    // regions fall back to node 0 and register normally.
    assert_eq!(b.attr("region0", "target_node"), "0");
    assert_eq!(b.attr("region1", "numa_node"), "0");
    assert!(
        b.console
            .contains("changing target node from -1 to 0 for nfit region [0x0000000100000000-"),
        "{}",
        b.console
    );
    // Label-less: raw namespaces over the whole range.
    assert_eq!(b.attr("namespace0.0", "mode"), "raw");
    assert_eq!(b.attr("namespace0.0", "size"), DIMM_SIZE.to_string());
    assert_eq!(b.attr("pmem0", "sectors"), (DIMM_SIZE / 512).to_string());
    assert_eq!(b.attr("pmem0", "ro"), "0");
    assert_eq!(b.attr("pmem1", "ro"), "1");
    // A flush hint exists → Linux advertises FUA and deep_flush works.
    assert_eq!(b.attr("pmem0", "fua"), "1");
    assert_eq!(b.attr("region0", "deep_flush_write"), "ok");
    // DIMMs: handles, flags, the DIMM id Linux derives from the control region.
    assert_eq!(b.attr("nmem0", "nfit/handle"), "0x1");
    assert_eq!(b.attr("nmem1", "nfit/handle"), "0x2");
    assert_eq!(b.attr("nmem1", "nfit/flags"), "not_armed");
    assert_eq!(b.attr("nmem0", "nfit/id"), "4d50-01-0126-00004d50");
    assert_eq!(b.attr("nmem0", "nfit/format"), "0x0301");
    // No _DSM: no command family (the attribute reads as an error).
    assert_eq!(b.attr("nmem0", "nfit/family"), "");
    // The guest's write went to pm0.img at the same offset: the SPA base is right.
    assert!(b.console.contains("QT-WROTE"), "{}", b.console);
    let bytes = std::fs::read(b.dir.0.join("pm0.img")).unwrap();
    assert_eq!(
        &bytes[12288..12288 + 18],
        b"PMEMVM-QEMU-TABLES",
        "{}",
        b.console
    );
    assert!(std::fs::read(b.dir.0.join("pm1.img"))
        .unwrap()
        .iter()
        .all(|x| *x == 0));
}

#[test]
fn linux_runs_our_dsm_aml() {
    let _ = require!(find_qemu());
    let image = require!(image());
    let mut d = dimm(0, false);
    d.label_size = 128 << 10;
    d.proximity_domain = None; // and so no SRAT
    let desc = machine(
        vec![d],
        Some(DsmTransport {
            page_addr: DSM_PAGE,
            doorbell_port: 0x510,
            event_port: 0x514,
            event_gsi: 16,
        }),
    );
    let b = boot("dsm", &image, &desc, &format!("memmap=4K${DSM_PAGE:#x}"));
    no_acpi_errors(&b);
    // Nothing answers the doorbell under QEMU, so the page still holds the
    // request: the "response" is 1 byte (length = handle 1) = revision 1,
    // i.e. function 0 supported and nothing else. Linux must therefore have
    // evaluated NCAL successfully, matched the Intel family (0) and enabled no
    // label commands; the DIMM stays label-less and /dev/pmem0 appears.
    assert_eq!(b.attr("nmem0", "nfit/family"), "0");
    assert_eq!(b.attr("nmem0", "nfit/dsm_mask"), "0x0");
    assert_eq!(b.attr("region0", "target_node"), "0");
    assert_eq!(b.attr("namespace0.0", "mode"), "raw");
    assert_eq!(b.attr("pmem0", "sectors"), (DIMM_SIZE / 512).to_string());
    let bytes = std::fs::read(b.dir.0.join("pm0.img")).unwrap();
    assert_eq!(&bytes[12288..12288 + 18], b"PMEMVM-QEMU-TABLES");
}
