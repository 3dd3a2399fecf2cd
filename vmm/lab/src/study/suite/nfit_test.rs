//! `pmemvm suite ndctl --nfit-test`: ndctl's default test set on the kernel's own NVDIMM
//! emulation, `nfit_test`, as ndctl's maintainers run it (run_qemu's `--nfit-test-run`).
//!
//! The emulation is out-of-tree modules from the kernel's `tools/testing/nvdimm`, linked
//! against mocked resource calls; they replace the kernel's libnvdimm, nfit, nd_pmem,
//! nd_btt, nd_e820, device_dax and dax_pmem, so they must be built against the user's own
//! modular kernel (`--kernel`, `--modules`) and its build tree. The build is
//! `guest-images/suites/nfit-test-build.sh` (cached by the sources' and the tree's hash);
//! its module tree, with the test modules in `extra/` as ndctl's `test/core.c` checks, is
//! the boot's `--modules`. The guest has no NVDIMM of pmemvm's: its buses are
//! `nfit_test.0` and `nfit_test.1`.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::ndctl::{check_names, t, Boot, Bus, KnownTest, PlanError, Shape};
use crate::guest::modules::{ModuleTree, ModulesError};

/// The build script (host side).
pub const NFIT_TEST_BUILD: &str = "guest-images/suites/nfit-test-build.sh";

/// ndctl v81's default set (`test/meson.build`'s `tests`, less the CXL ones, which need
/// the kernel's cxl_test) and its destructive `firmware-update.sh`: every test that runs
/// on `nfit_test.0`/`nfit_test.1`, in meson's order.
pub const TESTS: &[KnownTest] = &[
    t("libndctl", Bus::NfitTest, Shape::NfitTest),
    t("dsm-fail", Bus::NfitTest, Shape::NfitTest),
    t("create.sh", Bus::NfitTest, Shape::NfitTest),
    t("clear.sh", Bus::NfitTest, Shape::NfitTest),
    t("pmem-errors.sh", Bus::NfitTest, Shape::NfitTest),
    t("daxdev-errors.sh", Bus::NfitTest, Shape::NfitTest),
    t("multi-dax.sh", Bus::NfitTest, Shape::NfitTest),
    t("btt-check.sh", Bus::NfitTest, Shape::NfitTest),
    t("label-compat.sh", Bus::NfitTest, Shape::NfitTest),
    t("sector-mode.sh", Bus::NfitTest, Shape::NfitTest),
    t("inject-error.sh", Bus::NfitTest, Shape::NfitTest),
    t("btt-errors.sh", Bus::NfitTest, Shape::NfitTest),
    t("hugetlb", Bus::NfitTest, Shape::NfitTest),
    t("btt-pad-compat.sh", Bus::NfitTest, Shape::NfitTest),
    t("ack-shutdown-count-set", Bus::NfitTest, Shape::NfitTest),
    t("rescan-partitions.sh", Bus::NfitTest, Shape::NfitTest),
    t("inject-smart.sh", Bus::NfitTest, Shape::NfitTest),
    t("monitor.sh", Bus::NfitTest, Shape::NfitTest),
    t("max_extent_ns", Bus::NfitTest, Shape::NfitTest),
    t("pfn-meta-errors.sh", Bus::NfitTest, Shape::NfitTest),
    t("track-uuid.sh", Bus::NfitTest, Shape::NfitTest),
    t("firmware-update.sh", Bus::NfitTest, Shape::NfitTest),
];

/// The names of [`TESTS`].
pub fn names() -> Vec<&'static str> {
    TESTS.iter().map(|k| k.name).collect()
}

/// The one boot that runs `tests` (empty: all of [`TESTS`]) in [`TESTS`]' order.
pub fn plan(tests: &[String]) -> Result<Vec<Boot>, PlanError> {
    check_names(tests, TESTS, |name| PlanError::UnknownNfitTest {
        name,
        list: names().join(", "),
    })?;
    let chosen: Vec<KnownTest> = TESTS
        .iter()
        .filter(|k| tests.is_empty() || tests.iter().any(|t| t == k.name))
        .copied()
        .collect();
    Ok(vec![Boot {
        shape: Shape::NfitTest,
        tests: chosen,
        legacy: false,
    }])
}

/// Kernel parameters of the nfit_test boot: two 1 GiB huge pages reserved at boot for
/// `hugetlb`, whose last step maps 2 × 1 GiB of `MAP_HUGE_1GB` memory (asked for at run
/// time in a 2 GiB guest, they cannot be had: "Cannot allocate memory", a skip).
pub const HUGETLB_CMDLINE: &str = "hugepagesz=1G hugepages=2";
/// Guest RAM the nfit_test boot gets beyond `--memory` for those pages: each needs a free
/// 1 GiB-aligned GiB at boot, and the kernel's early allocations (the struct pages, from
/// the top of RAM) and the initrd take parts of others. Measured: with 2 GiB more (4 GiB in
/// all) the kernel got none of the two ("allocating 2 of page size 1.00 GiB failed"); with
/// 4 GiB more it got both and `hugetlb` passed.
pub const HUGETLB_BYTES: u64 = 4 << 30;

/// Whether `boot` runs `hugetlb`, whose huge pages it then reserves ([`HUGETLB_CMDLINE`],
/// [`HUGETLB_BYTES`] more RAM).
pub fn wants_huge_pages(boot: &Boot) -> bool {
    boot.tests.iter().any(|t| t.name == "hugetlb")
}

/// The kernel the nfit_test modules are built for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NfitTestKernel {
    /// `--kernel`: the user's bzImage (or vmlinux).
    pub kernel: PathBuf,
    /// `--modules`: what its `make modules_install` wrote.
    pub modules: PathBuf,
    /// `--kernel-tree`: its configured and built source tree (default: the modules'
    /// `lib/modules/<release>/build` link).
    pub tree: Option<PathBuf>,
}

/// What [`check`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// `lib/modules/<release>` of `--modules`.
    pub release_dir: PathBuf,
    /// The kernel's build tree.
    pub tree: PathBuf,
}

/// The options `tools/testing/nvdimm/config_check.c` requires as modules, and
/// `X86_PMEM_LEGACY` (ndctl's `test/core.c` wants `nd_e820` from `extra/` too).
pub const MODULE_OPTIONS: &[&str] = &[
    "LIBNVDIMM",
    "BLK_DEV_PMEM",
    "ND_BTT",
    "ND_PFN",
    "ACPI_NFIT",
    "DEV_DAX",
    "DEV_DAX_PMEM",
    "X86_PMEM_LEGACY",
];

/// Errors of `--nfit-test`; each names the value and what is accepted.
#[derive(Debug, thiserror::Error)]
pub enum NfitTestError {
    /// `--kernel`/`--modules`.
    #[error(transparent)]
    Modules(#[from] ModulesError),
    /// No tree given and no `build` link.
    #[error("--modules {}: lib/modules/{release}/build does not name the kernel's build tree; give it with --kernel-tree DIR (the tree the kernel and its modules were built in)", modules.display())]
    NoTree {
        /// `--modules`.
        modules: PathBuf,
        /// The release.
        release: String,
    },
    /// The tree is not a built kernel tree of this release.
    #[error("--kernel-tree {}: {why}; give the tree the kernel and its modules were built in", tree.display())]
    BadTree {
        /// The tree.
        tree: PathBuf,
        /// What is wrong.
        why: String,
    },
    /// Options nfit_test needs as modules are not.
    #[error("the kernel of {} does not have what nfit_test needs as modules: {} (tools/testing/nvdimm/config_check.c; ndctl's test/core.c wants nd_e820 too); rebuild it with them =m", tree.display(), missing.join(", "))]
    Config {
        /// The tree.
        tree: PathBuf,
        /// `CONFIG_X=m` lines that are missing.
        missing: Vec<String>,
    },
    /// The build failed.
    #[error("building the nfit_test modules ({NFIT_TEST_BUILD}) failed: {0}")]
    Build(String),
}

impl vmm::exit_status::Classified for NfitTestError {
    fn kind(&self) -> vmm::exit_status::ErrorKind {
        use vmm::exit_status::ErrorKind::*;
        match self {
            Self::Modules(e) => e.kind(),
            Self::NoTree { .. } | Self::BadTree { .. } | Self::Config { .. } => Usage,
            Self::Build(_) => Environment,
        }
    }
}

/// The `CONFIG_X=m` lines of [`MODULE_OPTIONS`] that `config` (a `.config`) lacks.
pub fn missing_options(config: &str) -> Vec<String> {
    MODULE_OPTIONS
        .iter()
        .map(|o| format!("CONFIG_{o}=m"))
        .filter(|want| !config.lines().any(|l| l.trim() == want))
        .collect()
}

/// Checks the kernel, its modules and its tree before anything is built; reads only.
pub fn check(k: &NfitTestKernel) -> Result<Resolved, NfitTestError> {
    let modules = ModuleTree::open(&k.modules, &k.kernel)?;
    let tree = match &k.tree {
        Some(t) => t.clone(),
        None => {
            std::fs::canonicalize(modules.dir.join("build")).map_err(|_| NfitTestError::NoTree {
                modules: k.modules.clone(),
                release: modules.release.clone(),
            })?
        }
    };
    let bad = |why: String| NfitTestError::BadTree {
        tree: tree.clone(),
        why,
    };
    let config = std::fs::read_to_string(tree.join(".config"))
        .map_err(|e| bad(format!("no .config there ({e})")))?;
    if !tree.join("Module.symvers").is_file() {
        return Err(bad(
            "no Module.symvers there: the kernel was not built in it".into(),
        ));
    }
    if !tree.join("tools/testing/nvdimm/Kbuild").is_file() {
        return Err(bad("no tools/testing/nvdimm/Kbuild there".into()));
    }
    let tree_release = std::fs::read_to_string(tree.join("include/config/kernel.release"))
        .unwrap_or_default()
        .trim()
        .to_string();
    if tree_release != modules.release {
        return Err(bad(format!(
            "it is the tree of release {}, the kernel is {}",
            if tree_release.is_empty() {
                "unknown (no include/config/kernel.release)"
            } else {
                &tree_release
            },
            modules.release
        )));
    }
    let missing = missing_options(&config);
    if !missing.is_empty() {
        return Err(NfitTestError::Config { tree, missing });
    }
    Ok(Resolved {
        release_dir: modules.dir,
        tree,
    })
}

/// Builds the nfit_test modules (or finds them in the cache) and writes the guest's
/// module tree into `out` (a new directory); returns `out`, to be given as `--modules`.
pub fn build(script: &Path, r: &Resolved, out: &Path) -> Result<PathBuf, NfitTestError> {
    log::info!(
        "building or finding the nfit_test modules for {}",
        r.tree.display()
    );
    let run = Command::new("bash")
        .arg(script)
        .arg(&r.release_dir)
        .arg(&r.tree)
        .arg(out)
        .stderr(std::process::Stdio::piped())
        .output()
        .map_err(|e| NfitTestError::Build(format!("cannot run bash: {e}")))?;
    if run.status.success() && out.join("lib/modules").is_dir() {
        return Ok(out.to_path_buf());
    }
    let err = String::from_utf8_lossy(&run.stderr);
    let lines: Vec<&str> = err.lines().collect();
    Err(NfitTestError::Build(
        lines[lines.len().saturating_sub(4)..].join(" / "),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use vmm::exit_status::Classified;

    #[test]
    fn the_nfit_test_plan_is_one_boot_without_nvdimms_in_meson_order() {
        let boots = plan(&[]).unwrap();
        assert_eq!(boots.len(), 1);
        let b = &boots[0];
        assert_eq!(b.tests.len(), TESTS.len());
        assert!(b.shape.nvdimms().is_empty() && b.legacy_specs().is_empty());
        let argv = b.argv();
        assert!(!argv.contains(&"--bus".to_string()), "{argv:?}");
        assert_eq!(argv[3], "libndctl");
        let chosen = plan(&["monitor.sh".into(), "create.sh".into()]).unwrap();
        let names: Vec<&str> = chosen[0].tests.iter().map(|k| k.name).collect();
        assert_eq!(names, ["create.sh", "monitor.sh"]);
        // Only a boot with hugetlb reserves its pages.
        assert!(wants_huge_pages(b));
        assert!(!wants_huge_pages(&chosen[0]));
    }

    #[test]
    fn tests_outside_the_set_are_refused_with_the_list() {
        let e = plan(&["pmem-ns".into()]).unwrap_err();
        assert!(
            matches!(&e, PlanError::UnknownNfitTest { name, .. } if name == "pmem-ns"),
            "{e}"
        );
        assert!(e.to_string().contains("libndctl, dsm-fail"), "{e}");
        let e = plan(&["create.sh".into(), "create.sh".into()]).unwrap_err();
        assert_eq!(e, PlanError::Twice("create.sh".into()));
    }

    #[test]
    fn missing_module_options_are_named() {
        let all: String = MODULE_OPTIONS
            .iter()
            .map(|o| format!("CONFIG_{o}=m\n"))
            .collect();
        assert!(missing_options(&all).is_empty());
        let built_in = all.replace("CONFIG_ND_PFN=m", "CONFIG_ND_PFN=y");
        assert_eq!(missing_options(&built_in), ["CONFIG_ND_PFN=m"]);
        let none = missing_options("# CONFIG_LIBNVDIMM is not set\n");
        assert_eq!(none.len(), MODULE_OPTIONS.len());
    }

    /// A kernel, its modules and a tree, each planted wrong in turn.
    #[test]
    fn a_tree_that_cannot_build_nfit_test_is_refused_before_anything_is_built() {
        let base = std::env::temp_dir().join(format!("pmemvm-nfit-check-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let rel = "6.1.0-test";
        let mods = base.join("mods");
        let rel_dir = mods.join("lib/modules").join(rel);
        std::fs::create_dir_all(&rel_dir).unwrap();
        std::fs::write(rel_dir.join("modules.dep"), "").unwrap();
        // A vmlinux-shaped kernel: an ELF file with the banner.
        let kernel = base.join("vmlinux");
        std::fs::write(&kernel, format!("\x7fELF....Linux version {rel} (x)")).unwrap();
        let k = NfitTestKernel {
            kernel: kernel.clone(),
            modules: mods.clone(),
            tree: None,
        };
        let e = check(&k).unwrap_err();
        assert!(
            matches!(e, NfitTestError::NoTree { .. }) && e.is_usage(),
            "{e}"
        );
        assert!(e.to_string().contains("--kernel-tree"), "{e}");
        let tree = base.join("tree");
        std::fs::create_dir_all(tree.join("include/config")).unwrap();
        std::os::unix::fs::symlink(&tree, rel_dir.join("build")).unwrap();
        let e = check(&k).unwrap_err();
        assert!(e.to_string().contains("no .config"), "{e}");
        std::fs::write(tree.join(".config"), "CONFIG_LIBNVDIMM=m\n").unwrap();
        let e = check(&k).unwrap_err();
        assert!(e.to_string().contains("Module.symvers"), "{e}");
        std::fs::write(tree.join("Module.symvers"), "").unwrap();
        std::fs::create_dir_all(tree.join("tools/testing/nvdimm")).unwrap();
        std::fs::write(tree.join("tools/testing/nvdimm/Kbuild"), "").unwrap();
        std::fs::write(tree.join("include/config/kernel.release"), "6.1.0-other\n").unwrap();
        let e = check(&k).unwrap_err();
        assert!(
            e.to_string()
                .contains("release 6.1.0-other, the kernel is 6.1.0-test"),
            "{e}"
        );
        std::fs::write(
            tree.join("include/config/kernel.release"),
            format!("{rel}\n"),
        )
        .unwrap();
        let e = check(&k).unwrap_err();
        assert!(
            matches!(&e, NfitTestError::Config { missing, .. } if missing.len() == MODULE_OPTIONS.len() - 1),
            "{e}"
        );
        let all: String = MODULE_OPTIONS
            .iter()
            .map(|o| format!("CONFIG_{o}=m\n"))
            .collect();
        std::fs::write(tree.join(".config"), all).unwrap();
        let r = check(&k).unwrap();
        assert_eq!(r.tree, std::fs::canonicalize(&tree).unwrap());
        assert_eq!(r.release_dir, rel_dir);
        let _ = std::fs::remove_dir_all(&base);
    }
}
