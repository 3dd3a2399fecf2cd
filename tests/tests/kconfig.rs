//! `pmemvm kconfig --check` on real kernels: the project's guest image
//! (vmlinux and its xz-compressed bzImage, both with an embedded config;
//! what every guest needs, and what --cxl-pmem needs besides),
//! that config with options taken out, Debian's stock kernel (no embedded
//! config: a clear message) and the stock kernel's own /boot/config (options
//! built as modules are named as such).

use std::path::Path;
use std::time::Duration;

use pmemvm_tests::nested::{guest_image, prepare_l1};
use pmemvm_tests::pmemvm::{run, Output, TempDir};
use pmemvm_tests::require;

const DEADLINE: Duration = Duration::from_secs(60);

fn kconfig(args: &[&str]) -> Output {
    let mut all = vec!["kconfig"];
    all.extend_from_slice(args);
    let out = run(&all, DEADLINE);
    assert!(!out.timed_out, "{}", out.dump());
    out
}

fn path(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

#[test]
fn the_guest_image_has_everything_and_a_stripped_config_names_what_is_missing() {
    for name in ["vmlinux", "bzImage"] {
        let kernel = require!(guest_image(name));
        let out = kconfig(&["--check", &path(&kernel)]);
        assert_eq!(out.status, Some(0), "{}", out.dump());
        assert!(
            out.stdout.contains("options pmemvm's guests need are set"),
            "{}",
            out.dump()
        );
        assert!(
            out.stdout.contains("for --gdb: DWARF debug information"),
            "the image's kernel has what gdb needs: {}",
            out.dump()
        );
        assert!(
            out.stdout
                .contains("for dumps: VMCOREINFO (CONFIG_CRASH_CORE) and the pvpanic driver"),
            "the image's kernel has what crash, drgn and --dump-on-panic need: {}",
            out.dump()
        );
        assert!(
            out.stdout
                .contains("for --cxl-pmem: the CXL drivers, from the CEDT to pmem regions"),
            "the image's kernel has what --cxl-pmem needs: {}",
            out.dump()
        );
    }
    let kernel = require!(guest_image("bzImage"));
    let extracted = kconfig(&["--extract", &path(&kernel)]);
    assert_eq!(extracted.status, Some(0), "{}", extracted.dump());
    assert!(
        extracted.stdout.contains("CONFIG_ACPI_NFIT=y"),
        "{}",
        extracted.dump()
    );

    let dir = TempDir::new("kconfig");
    let stripped = dir.join("stripped.config");
    let text: String = extracted
        .stdout
        .lines()
        .filter(|l| !l.starts_with("CONFIG_ACPI_NFIT=") && !l.starts_with("CONFIG_IO_URING="))
        .filter(|l| !l.starts_with("CONFIG_DEBUG_INFO_DWARF_TOOLCHAIN_DEFAULT="))
        .filter(|l| !l.starts_with("CONFIG_CRASH_CORE="))
        .filter(|l| !l.starts_with("CONFIG_CXL_REGION="))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(&stripped, text).expect("write stripped config");
    let out = kconfig(&["--check", &path(&stripped)]);
    assert_eq!(out.status, Some(2), "{}", out.dump());
    assert!(
        out.stderr
            .contains("2 option(s) pmemvm's guests need are missing"),
        "{}",
        out.dump()
    );
    assert!(
        out.stderr
            .contains("CONFIG_ACPI_NFIT (not set): the NFIT is ignored"),
        "{}",
        out.dump()
    );
    assert!(
        out.stderr.contains("CONFIG_IO_URING (not set)"),
        "{}",
        out.dump()
    );
    assert!(
        out.stderr
            .contains("for --gdb: CONFIG_DEBUG_INFO_DWARF_TOOLCHAIN_DEFAULT (not set"),
        "what gdb misses is named beside the check: {}",
        out.dump()
    );
    assert!(
        out.stderr.contains("for dumps: CONFIG_CRASH_CORE (not set"),
        "what crash and drgn miss is named beside the check: {}",
        out.dump()
    );
    assert!(
        out.stderr
            .contains("for --cxl-pmem: CONFIG_CXL_REGION (not set): `cxl create-region` fails"),
        "what --cxl-pmem misses is named beside the check: {}",
        out.dump()
    );
}

#[test]
fn debian_stock_kernel_needs_its_config_file_and_has_modules() {
    let l1 = require!(prepare_l1());
    let out = kconfig(&["--check", &path(&l1.vmlinuz)]);
    assert_eq!(out.status, Some(2), "{}", out.dump());
    let errors: Vec<&str> = out
        .stderr
        .lines()
        .filter(|l| l.starts_with("pmemvm: error:"))
        .collect();
    assert_eq!(errors.len(), 1, "{}", out.dump());
    assert!(
        errors[0].contains("built without CONFIG_IKCONFIG"),
        "{}",
        out.dump()
    );
    assert!(
        errors[0].contains("--check path/to/.config"),
        "{}",
        out.dump()
    );

    // The package's own /boot/config-*: NVDIMM support as modules.
    let deb = pmemvm_tests::stock_kernel::deb();
    let dir = TempDir::new("kconfig-stock");
    let unpack = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "dpkg-deb --fsys-tarfile '{}' | tar -x -C '{}' --wildcards './boot/config-*'",
            deb.display(),
            dir.0.display()
        ))
        .status()
        .expect("run dpkg-deb");
    assert!(
        unpack.success(),
        "cannot unpack /boot/config from {}",
        deb.display()
    );
    let config = std::fs::read_dir(dir.join("boot"))
        .expect("boot/ unpacked")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .next()
        .expect("a boot/config-* file");
    let out = kconfig(&["--check", &path(&config)]);
    assert!(
        out.stdout.contains("CONFIG_ACPI_NFIT is a module")
            || out.stderr.contains("CONFIG_ACPI_NFIT is a module"),
        "{}",
        out.dump()
    );
}
