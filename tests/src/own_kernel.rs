//! The modular kernel `guest-images/build.sh --modular` builds (Debian's
//! linux-source-6.1 with the project's fragment, `CONFIG_MODULES=y` and the
//! NVDIMM drivers as xz-compressed modules): the user's own kernel of the
//! `--modules` tests.

use std::path::{Path, PathBuf};

use pmemvm_skip::Skip;

/// `guest-images/out/modular/` as `build.sh --modular` writes it.
#[derive(Debug, Clone)]
pub struct ModularKernel {
    /// The bzImage.
    pub bz_image: PathBuf,
    /// Its release (`kernelrelease`), e.g. `6.1.158-pmemvm-modular`.
    pub release: String,
    /// What `make modules_install INSTALL_MOD_PATH=modules` wrote (holds `lib/modules/<release>/`).
    pub modules: PathBuf,
}

/// The built modular kernel, or a skip saying how to build it (tests/run.sh does).
pub fn modular_kernel() -> Result<ModularKernel, Skip> {
    let dir = crate::pmemvm::workspace_root().join("guest-images/out/modular");
    let release = std::fs::read_to_string(dir.join("kernelrelease"))
        .map(|s| s.trim().to_owned())
        .unwrap_or_default();
    let k = ModularKernel {
        bz_image: dir.join("bzImage"),
        modules: dir.join("modules"),
        release,
    };
    let dep = k
        .modules
        .join("lib/modules")
        .join(&k.release)
        .join("modules.dep");
    if k.release.is_empty() || !k.bz_image.is_file() || !dep.is_file() {
        return Err(Skip::new(format!(
            "the modular kernel is not built in {} (run guest-images/build.sh --modular)",
            dir.display()
        )));
    }
    Ok(k)
}

/// Every file under `dir`, as (path relative to `dir`, path): to copy a tree into a share.
pub fn files_under(dir: &Path) -> Vec<(String, PathBuf)> {
    fn walk(dir: &Path, rel: &str, out: &mut Vec<(String, PathBuf)>) {
        let Ok(rd) = std::fs::read_dir(dir) else {
            return;
        };
        for e in rd.filter_map(Result::ok) {
            let name = e.file_name().to_string_lossy().into_owned();
            let r = if rel.is_empty() {
                name
            } else {
                format!("{rel}/{name}")
            };
            match e.file_type() {
                Ok(t) if t.is_dir() => walk(&e.path(), &r, out),
                Ok(t) if t.is_file() => out.push((r, e.path())),
                _ => {}
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, "", &mut out);
    out.sort();
    out
}
