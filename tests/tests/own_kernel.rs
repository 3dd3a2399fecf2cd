//! The user's own modular kernel on the host side, with the real kernel of
//! `guest-images/build.sh --modular` (NVDIMM drivers as .ko.xz modules):
//! `kconfig --check` accepts its `=m` options and says they need `--modules`;
//! its module tree packs into the job archive decompressed, in dependency
//! order, indexed; the guest image's built-in kernel refuses those modules
//! (another release); `bench --plan` takes them per side. Booting it is
//! tests/tests/nested_own_kernel.rs.

use std::time::Duration;

use pmemvm_tests::nested::guest_image;
use pmemvm_tests::own_kernel::modular_kernel;
use pmemvm_tests::pmemvm::{run, TempDir};
use pmemvm_tests::require;

const DEADLINE: Duration = Duration::from_secs(60);

fn s(p: &std::path::Path) -> String {
    p.display().to_string()
}

#[test]
fn kconfig_check_accepts_the_modular_kernel_and_says_its_modules_need_modules() {
    let k = require!(modular_kernel());
    let out = run(&["kconfig", "--check", &s(&k.bz_image)], DEADLINE);
    assert_eq!(out.status, Some(0), "{}", out.dump());
    for (opt, module) in [
        ("CONFIG_ACPI_NFIT", "nfit"),
        ("CONFIG_LIBNVDIMM", "libnvdimm"),
        ("CONFIG_BLK_DEV_PMEM", "nd_pmem"),
        ("CONFIG_DEV_DAX_KMEM", "kmem"),
    ] {
        let line = format!("{opt} is a module (=m, {module}.ko): boot with --modules DIR");
        assert!(out.stdout.contains(&line), "no {line:?}:\n{}", out.dump());
    }
    // The console driver as a module cannot work: the guest needs it before its init runs.
    let text = run(&["kconfig", "--extract", &s(&k.bz_image)], DEADLINE);
    assert_eq!(text.status, Some(0), "{}", text.dump());
    let dir = TempDir::new("own-kconfig");
    let config = dir.join("serial-m.config");
    std::fs::write(
        &config,
        text.stdout
            .replace("CONFIG_SERIAL_8250=y\n", "CONFIG_SERIAL_8250=m\n"),
    )
    .expect("write config");
    let out = run(&["kconfig", "--check", &s(&config)], DEADLINE);
    assert_eq!(out.status, Some(2), "{}", out.dump());
    assert!(
        out.stderr
            .contains("CONFIG_SERIAL_8250 (a module, which it cannot be"),
        "{}",
        out.dump()
    );
}

#[test]
fn the_module_tree_packs_decompressed_in_dependency_order() {
    let k = require!(modular_kernel());
    let tree =
        lab::guest::modules::ModuleTree::open(&k.modules, &k.bz_image).expect("open the tree");
    assert_eq!(tree.release, k.release);
    let t0 = std::time::Instant::now();
    let files = tree.pack().expect("pack the tree");
    let total: usize = files.iter().map(|(_, d, _)| d.len()).sum();
    eprintln!(
        "packed {} files, {} KiB, in {:.2?}",
        files.len(),
        total >> 10,
        t0.elapsed()
    );
    let base = format!("lib/modules/{}/", k.release);
    let get = |name: &str| {
        files
            .iter()
            .find(|(p, _, _)| p == &format!("{base}{name}"))
            .map(|(_, d, _)| d.clone())
    };
    let load = String::from_utf8(get("pmemvm.load").expect("pmemvm.load")).expect("utf-8");
    let order: Vec<&str> = load
        .lines()
        .map(|l| l.rsplit('/').next().unwrap_or(l))
        .collect();
    let at = |m: &str| {
        order
            .iter()
            .position(|o| *o == m)
            .unwrap_or_else(|| panic!("{m} not in pmemvm.load:\n{load}"))
    };
    assert!(at("libnvdimm.ko") < at("nfit.ko"), "{load}");
    assert!(at("libnvdimm.ko") < at("nd_pmem.ko"), "{load}");
    assert!(at("nd_btt.ko") < at("nd_pmem.ko"), "{load}");
    for m in ["dax_pmem.ko", "device_dax.ko", "kmem.ko", "nd_btt.ko"] {
        at(m);
    }
    for line in load.lines() {
        let data = get(line).unwrap_or_else(|| panic!("{line} listed but not packed"));
        assert!(
            data.starts_with(b"\x7fELF"),
            "{line} is not decompressed ELF"
        );
    }
    assert!(
        !files.iter().any(|(p, _, _)| p.ends_with(".xz")),
        "a compressed module was packed"
    );
    let dep = String::from_utf8(get("modules.dep").expect("modules.dep")).expect("utf-8");
    assert!(dep.contains("nd_pmem.ko:"), "{dep}");
    assert!(get("modules.builtin").is_some(), "no modules.builtin");
    // depmod (kmod, installed by guest-images/build.sh) wrote the index libkmod reads.
    assert!(get("modules.dep.bin").is_some(), "no modules.dep.bin");
}

#[test]
fn modules_of_another_release_are_refused_and_bench_takes_them_per_side() {
    let k = require!(modular_kernel());
    let vmlinux = require!(guest_image("vmlinux"));
    let initrd = require!(guest_image("initramfs.cpio.gz"));
    let dir = TempDir::new("own-mismatch");
    let job = dir.join("job.fio");
    std::fs::write(&job, "[j]\nrw=read\nsize=1M\n").expect("job");
    let out = run(
        &[
            "run",
            "--kernel",
            &s(&vmlinux),
            "--initrd",
            &s(&initrd),
            "--modules",
            &s(&k.modules),
            "--fio",
            &s(&job),
        ],
        DEADLINE,
    );
    assert_eq!(out.status, Some(2), "{}", out.dump());
    let want = format!("holds modules of release {}, but kernel", k.release);
    assert!(out.stderr.contains(&want), "{}", out.dump());
    assert_eq!(
        out.stderr.lines().filter(|l| !l.trim().is_empty()).count(),
        1,
        "{}",
        out.dump()
    );

    let release_dir = k.modules.join("lib/modules").join(&k.release);
    let out = run(
        &[
            "bench",
            "pmem-nowait",
            "--plan",
            "--json",
            "--side",
            &format!("base:kernel={},modules={}", s(&k.bz_image), s(&k.modules)),
            "--side",
            &format!(
                "patched:kernel={},modules={},append=nd_pmem.nowait=1",
                s(&k.bz_image),
                s(&release_dir)
            ),
        ],
        DEADLINE,
    );
    assert_eq!(out.status, Some(0), "{}", out.dump());
    let plan: serde_json::Value = serde_json::from_str(&out.stdout).expect("plan JSON");
    let sides = plan["sides"].as_array().expect("sides");
    assert_eq!(sides[0]["modules"], s(&k.modules), "{}", out.stdout);
    assert_eq!(sides[1]["modules"], s(&release_dir), "{}", out.stdout);
}
