//! Tier 5 for the user's own modular kernel: the bzImage of
//! `guest-images/build.sh --modular` (Debian's linux-source-6.1, the project's
//! fragment, `CONFIG_MODULES=y`, the NVDIMM drivers as .ko.xz modules) booted
//! by `pmemvm run --kernel bzImage --modules DIR` inside the nested harness's
//! L1, with `nd_pmem.nowait=1` on the command line. In the guest: the modules
//! are loaded (`lsmod`, /sys/module), the parameter reached the modular
//! nd_pmem, `ndctl list` sees the namespace, and a pattern written to
//! /dev/pmem0 reads back and lands in the host's backing file. The same with
//! Debian's stock kernel (`linux-image-*-amd64`, the L1's own) and its
//! package's module tree after `depmod -b`: a distribution kernel whose NVDIMM
//! drivers and file systems are .ko.xz modules, booted with the guest image's
//! initramfs through `--modules`.

use std::fs;
use std::time::Duration;

use pmemvm_tests::nested::{guest_image, NestedVm, RunOutput};
use pmemvm_tests::own_kernel::{debian_module_tree, files_under, modular_kernel};
use pmemvm_tests::pmemvm::TempDir;
use pmemvm_tests::require;

/// Quiet: every console byte is an expensive exit when nested.
const CMDLINE: &str = "console=ttyS0 reboot=acpi panic=-1 quiet nd_pmem.nowait=1";
const PATTERN: &str = "PMEMVM-OWN-KERNEL-PATTERN";

const GUEST_SCRIPT: &str = r#"set -e
P='@PATTERN@'
echo "release $(uname -r)"
lsmod | sed 's/^/lsmod /'
for m in libnvdimm nfit nd_pmem; do test -d /sys/module/$m && echo "sysmodule $m"; done
echo "nowait $(cat /sys/module/nd_pmem/parameters/nowait)"
printf '%s' "$P" | dd of=/dev/pmem0 bs=4096 conv=sync,fsync 2>/dev/null
echo "readback $(head -c ${#P} /dev/pmem0)"
ndctl list -N | tr -d ' \n' | sed 's/^/ndctl /'; echo
"#;

/// Boots `kernel` (a share file name) with `--modules mods` and GUEST_SCRIPT in `vm`; returns
/// the script's stdout, the run's status and a context for messages.
fn boot_with_modules(
    vm: NestedVm,
    kernel: &str,
    cmdline: &str,
) -> (String, String, String, RunOutput) {
    let steps = format!(
        "pmemvm run --kernel {kernel} --initrd initramfs.cpio.gz --modules mods --memory 512M \
         --cmdline '{cmdline}' --nvdimm 64M,label-size=0,file=pm0.img \
         --console-log console.txt --json run.json -- sh -c \"$(cat t.sh)\" >run.stdout 2>run.stderr; \
         echo $? >run.status"
    );
    let out = vm
        .run(&["sh", "-c", &steps])
        .expect("run pmemvm in the harness");
    let read = |name: &str| fs::read_to_string(out.path(name)).unwrap_or_default();
    let stdout = read("run.stdout");
    let context = format!(
        "{}\nrun.stdout:\n{stdout}\nrun.stderr:\n{}\nguest console (last lines):\n{}",
        out.dump(),
        read("run.stderr"),
        pmemvm_tests::nested::tail(&read("console.txt"), 40)
    );
    (stdout, read("run.status"), context, out)
}

/// What every booted kernel shows: its release, the NVDIMM modules loaded, the pattern
/// through /dev/pmem0 into the backing file, ndctl's namespace.
fn check_guest(stdout: &str, release: &str, context: &str, out: &RunOutput) {
    assert!(stdout.contains(&format!("release {release}")), "{context}");
    for m in ["libnvdimm", "nfit", "nd_pmem"] {
        assert!(
            stdout
                .lines()
                .any(|l| l.starts_with(&format!("lsmod {m} "))),
            "{m} not in lsmod\n{context}"
        );
        assert!(stdout.contains(&format!("sysmodule {m}")), "{context}");
    }
    assert!(stdout.contains(&format!("readback {PATTERN}")), "{context}");
    assert!(
        stdout
            .lines()
            .any(|l| l.starts_with("ndctl ") && l.contains("\"dev\":\"namespace0.0\"")),
        "{context}"
    );
    let backing = fs::read(out.path("pm0.img")).expect("backing file on the host");
    assert!(
        backing.starts_with(PATTERN.as_bytes()),
        "the pattern is not at the start of the backing file\n{context}"
    );
}

#[test]
fn a_modular_kernel_boots_with_its_modules_and_their_parameters() {
    let k = require!(modular_kernel());
    let initrd = require!(guest_image("initramfs.cpio.gz"));
    let mut vm = require!(NestedVm::new().and_then(NestedVm::with_pmemvm))
        .deadline(Duration::from_secs(600))
        .file("bzImage", &k.bz_image)
        .file("initramfs.cpio.gz", &initrd)
        .bytes("t.sh", GUEST_SCRIPT.replace("@PATTERN@", PATTERN));
    for (rel, path) in files_under(&k.modules) {
        vm = vm.file(&format!("mods/{rel}"), path);
    }
    let (stdout, status, context, out) = boot_with_modules(vm, "bzImage", CMDLINE);
    assert_eq!(status.trim(), "0", "{context}");
    check_guest(&stdout, &k.release, &context, &out);
    assert!(
        stdout.contains("nowait Y"),
        "nd_pmem.nowait=1 did not reach the module\n{context}"
    );
    let console = fs::read_to_string(out.path("console.txt")).unwrap_or_default();
    eprintln!(
        "{}: modular kernel {} booted with {} modules loaded by the init; pmemvm run took \
         {:.1?} in all (L1 boot included)",
        out.mode,
        k.release,
        console.matches("pmemvm-init: module ").count(),
        out.elapsed
    );
}

#[test]
fn debians_stock_kernel_boots_with_its_packages_modules() {
    let vm = require!(NestedVm::new().and_then(NestedVm::with_pmemvm));
    let l1 = require!(vm.stock_kernel());
    let initrd = require!(guest_image("initramfs.cpio.gz"));
    let dir = TempDir::new("own-debian");
    let (tree, release) = debian_module_tree(&pmemvm_tests::stock_kernel::deb(), &dir.0)
        .expect("the stock kernel package's module tree");
    let mut vm = vm
        .deadline(Duration::from_secs(600))
        .file("vmlinuz", &l1.vmlinuz)
        .file("initramfs.cpio.gz", &initrd)
        .bytes("t.sh", GUEST_SCRIPT.replace("@PATTERN@", PATTERN));
    for (rel, path) in files_under(&tree) {
        vm = vm.file(&format!("mods/{rel}"), path);
    }
    let (stdout, status, context, out) =
        boot_with_modules(vm, "vmlinuz", "console=ttyS0 reboot=acpi panic=-1 quiet");
    assert_eq!(status.trim(), "0", "{context}");
    check_guest(&stdout, &release, &context, &out);
    let console = fs::read_to_string(out.path("console.txt")).unwrap_or_default();
    eprintln!(
        "{}: Debian's {release} booted with {} of its modules loaded by the init; pmemvm run \
         took {:.1?} in all (L1 boot included)",
        out.mode,
        console.matches("pmemvm-init: module ").count(),
        out.elapsed
    );
}
