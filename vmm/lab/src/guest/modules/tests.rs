use super::pack::parse_modules_dep;
use super::*;
use vmm::exit_status::Classified;

/// A scratch directory removed on drop.
struct Dir(PathBuf);

impl Dir {
    fn new() -> Self {
        use std::sync::atomic::{AtomicU32, Ordering};
        static N: AtomicU32 = AtomicU32::new(0);
        let p = std::env::temp_dir().join(format!(
            "pmemvm-modules-test-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&p).unwrap();
        Self(p)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A bzImage-shaped file whose setup header names `version`.
fn bz_image(dir: &Path, version: &str) -> PathBuf {
    let mut b = vec![0u8; 0x600];
    b[0x202..0x206].copy_from_slice(b"HdrS");
    let at: u16 = 0x300;
    b[0x20e..0x210].copy_from_slice(&at.to_le_bytes());
    let s = usize::from(at) + 0x200;
    b[s..s + version.len()].copy_from_slice(version.as_bytes());
    let p = dir.join("bzImage");
    std::fs::write(&p, b).unwrap();
    p
}

#[test]
fn release_comes_from_the_setup_header_or_the_banner() {
    let d = Dir::new();
    let k = bz_image(&d.0, "6.1.158-pmemvm-modular (pmemvm@pmemvm) #1 SMP");
    assert_eq!(kernel_release(&k).unwrap(), "6.1.158-pmemvm-modular");
    let elf = d.0.join("vmlinux");
    let mut b = b"\x7fELF\x02\x01\x01".to_vec();
    b.extend_from_slice(&[0; 100]);
    b.extend_from_slice(b"Linux version 6.1.0-27-amd64 (debian-kernel@lists.debian.org)\0");
    std::fs::write(&elf, b).unwrap();
    assert_eq!(kernel_release(&elf).unwrap(), "6.1.0-27-amd64");
    let junk = d.0.join("junk");
    std::fs::write(&junk, b"not a kernel").unwrap();
    let e = kernel_release(&junk).unwrap_err().to_string();
    assert!(e.contains("neither a bzImage nor an ELF file"), "{e}");
}

fn tree(d: &Path, release: &str) -> PathBuf {
    let r = d.join("lib/modules").join(release);
    std::fs::create_dir_all(&r).unwrap();
    std::fs::write(r.join("modules.dep"), "").unwrap();
    r
}

#[test]
fn the_tree_is_found_from_either_directory_and_checked_against_the_kernel() {
    let d = Dir::new();
    let k = bz_image(&d.0, "6.1.1-a #1");
    let x = d.0.join("x");
    let r = tree(&x, "6.1.1-a");
    tree(&x, "6.1.2-b");
    let want = ModuleTree {
        dir: r.clone(),
        release: "6.1.1-a".into(),
    };
    assert_eq!(ModuleTree::open(&x, &k).unwrap(), want);
    assert_eq!(ModuleTree::open(&r, &k).unwrap().release, "6.1.1-a");

    let other = bz_image(&d.0.join("x"), "6.1.9-c #1");
    let e = ModuleTree::open(&x, &other).unwrap_err();
    assert!(e.is_usage());
    let e = e.to_string();
    assert!(
        e.contains("holds modules of release 6.1.1-a, 6.1.2-b, but kernel")
            && e.contains("is release 6.1.9-c"),
        "{e}"
    );
    let e = ModuleTree::open(&r, &other).unwrap_err().to_string();
    assert!(e.contains("release 6.1.1-a, but kernel"), "{e}");

    let empty = d.0.join("empty");
    std::fs::create_dir_all(empty.join("lib/modules/6.1.1-a")).unwrap();
    let e = ModuleTree::open(&empty, &k).unwrap_err().to_string();
    assert!(e.contains("has no modules.dep"), "{e}");
    let e = ModuleTree::open(&d.0.join("missing"), &k)
        .unwrap_err()
        .to_string();
    assert!(e.contains("is not a directory"), "{e}");
}

#[test]
fn dependencies_load_first_and_unwanted_modules_stay_out() {
    let text = "kernel/drivers/nvdimm/nd_pmem.ko.xz: kernel/drivers/nvdimm/nd_btt.ko.xz kernel/drivers/nvdimm/libnvdimm.ko.xz\n\
                kernel/drivers/nvdimm/nd_btt.ko.xz: kernel/drivers/nvdimm/libnvdimm.ko.xz\n\
                kernel/drivers/acpi/nfit/nfit.ko.xz: kernel/drivers/nvdimm/libnvdimm.ko.xz\n\
                kernel/drivers/nvdimm/libnvdimm.ko.xz:\n\
                kernel/sound/snd.ko.xz:\n\
                \n\
                garbage line\n";
    let deps = parse_modules_dep(text);
    assert_eq!(deps.len(), 5);
    assert_eq!(deps[0].name(), "nd_pmem");
    let names: Vec<String> = load_order(&deps, &["nd_pmem", "nfit", "nd-btt"])
        .into_iter()
        .map(|i| deps[i].name())
        .collect();
    assert_eq!(names, ["libnvdimm", "nd_btt", "nd_pmem", "nfit"]);
    assert!(load_order(&deps, &["absent"]).is_empty());
    // A cycle in a broken modules.dep ends.
    let cyc = parse_modules_dep("a.ko: b.ko\nb.ko: a.ko\n");
    assert_eq!(load_order(&cyc, &["a"]).len(), 2);
}

#[test]
fn a_modules_dep_naming_files_outside_the_tree_is_refused_before_anything_is_read() {
    let d = Dir::new();
    // A host file where an absolute or `..` entry of modules.dep points.
    let victim = d.0.join("nd_pmem.ko");
    std::fs::write(&victim, b"host file").unwrap();
    for (i, path) in [
        victim.display().to_string(),
        "../../../nd_pmem.ko".to_owned(),
        "kernel/../../nd_pmem.ko".to_owned(),
    ]
    .iter()
    .enumerate()
    {
        let r = d.0.join(format!("t{i}/lib/modules/6.1.1-a"));
        std::fs::create_dir_all(&r).unwrap();
        std::fs::write(r.join("modules.dep"), format!("{path}:\n")).unwrap();
        let t = ModuleTree {
            dir: r,
            release: "6.1.1-a".into(),
        };
        let e = super::pack::pack(&t).unwrap_err();
        assert!(e.is_usage(), "{e}");
        let e = e.to_string();
        assert!(
            e.contains(&format!("names {path}, which is not a path inside")),
            "{e}"
        );
    }
    assert_eq!(std::fs::read(&victim).unwrap(), b"host file");
}

#[test]
fn on_demand_modules_are_packed_but_not_loaded_by_the_init() {
    let d = Dir::new();
    let rel = "6.1.1-nfit";
    let r = d.0.join("lib/modules").join(rel);
    std::fs::create_dir_all(r.join("extra")).unwrap();
    // An ELF header is all the packer checks of a module.
    for m in ["libnvdimm", "nfit_test_iomap", "nfit_test", "nfit"] {
        std::fs::write(r.join(format!("extra/{m}.ko")), b"\x7fELF module").unwrap();
    }
    std::fs::write(
        r.join("modules.dep"),
        "extra/nfit_test.ko: extra/nfit.ko extra/libnvdimm.ko extra/nfit_test_iomap.ko\n\
         extra/nfit.ko: extra/libnvdimm.ko extra/nfit_test_iomap.ko\n\
         extra/libnvdimm.ko: extra/nfit_test_iomap.ko\n\
         extra/nfit_test_iomap.ko:\n",
    )
    .unwrap();
    let t = ModuleTree {
        dir: r,
        release: rel.into(),
    };
    let files = super::pack::pack(&t).unwrap();
    let names: Vec<&str> = files.iter().map(|(p, _, _)| p.as_str()).collect();
    assert!(
        names.contains(&"lib/modules/6.1.1-nfit/extra/nfit_test.ko"),
        "{names:?}"
    );
    let load = t.describe(&files).load;
    assert_eq!(load, ["nfit_test_iomap", "libnvdimm", "nfit"]);
}
