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

/// Names the background build of tests/run.sh: `$BASE.lock` (held while it
/// runs), `$BASE.status` (its exit status), `$BASE.log`.
pub const BACKGROUND_BUILD_ENV: &str = "PMEMVM_MODULAR_BUILD";

/// Waits for tests/run.sh's background `build.sh --modular`, when there is one;
/// a build that failed fails the test.
fn wait_for_background_build() {
    let Some(base) = std::env::var_os(BACKGROUND_BUILD_ENV).filter(|b| !b.is_empty()) else {
        return;
    };
    let base = PathBuf::from(base);
    let with = |ext: &str| PathBuf::from(format!("{}.{ext}", base.display()));
    let lock = std::fs::File::open(with("lock")).unwrap_or_else(|e| {
        panic!(
            "{BACKGROUND_BUILD_ENV}={}: no {} ({e})",
            base.display(),
            with("lock").display()
        )
    });
    let started = std::time::Instant::now();
    // SAFETY: flock on a file descriptor this function owns; blocks until the
    // build's exclusive lock is released, and the lock goes with `lock`.
    let rc = unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&lock), libc::LOCK_SH) };
    assert_eq!(
        rc,
        0,
        "flock {}: {}",
        with("lock").display(),
        std::io::Error::last_os_error()
    );
    let status = std::fs::read_to_string(with("status")).unwrap_or_default();
    if status.trim() != "0" {
        let log = std::fs::read_to_string(with("log")).unwrap_or_default();
        panic!(
            "the background modular kernel build (tests/run.sh) ended with status {:?}:\n{}",
            status.trim(),
            crate::nested::tail(&log, 30)
        );
    }
    let waited = started.elapsed();
    if waited.as_secs() >= 1 {
        eprintln!("own kernel: waited {waited:.1?} for the background modular kernel build");
    }
}

/// The built modular kernel, or a skip saying how to build it (tests/run.sh
/// does, in the background: this waits for it).
pub fn modular_kernel() -> Result<ModularKernel, Skip> {
    wait_for_background_build();
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

/// The Linux 6.12 guest kernel (`guest-images/build.sh --linux 6.12`, beside the
/// guest image: `linux-6.12/` of its directory): its bzImage and the module tree that
/// gives the image's initramfs its modules.builtin (`--modules`).
#[derive(Debug, Clone)]
pub struct Linux612 {
    /// The kernel.
    pub bz_image: PathBuf,
    /// `--modules` for it.
    pub modules: PathBuf,
}

/// The built Linux 6.12 kernel, or a skip saying how to build it (`tests/run.sh
/// --full` does before the tests).
pub fn linux_612() -> Result<Linux612, Skip> {
    let image = crate::image::image_dir()?;
    let dir = image.dir.join("linux-6.12");
    let k = Linux612 {
        bz_image: dir.join("bzImage"),
        modules: dir.join("modules"),
    };
    if !k.bz_image.is_file() || !k.modules.is_dir() {
        return Err(Skip::new(format!(
            "the Linux 6.12 guest kernel is not built in {} (run guest-images/build.sh --linux 6.12; tests/run.sh --full does)",
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

/// The module tree of Debian's stock kernel package `deb` as a user has it after unpacking the
/// package and running `depmod -b`, cut to what `--modules` packs (the modules of
/// [`lab::guest::modules::WANTED`] and their dependencies) and the index files: `dir/tree/lib/modules/
/// <release>/`. Returns (`dir/tree`, release). Uses `dir/full` as scratch space.
pub fn debian_module_tree(deb: &Path, dir: &Path) -> Result<(PathBuf, String), String> {
    let full = dir.join("full");
    std::fs::create_dir_all(&full).map_err(|e| format!("{}: {e}", full.display()))?;
    let script = format!(
        "set -eu -o pipefail
         dpkg-deb --fsys-tarfile '{deb}' | tar -x -C '{full}' --wildcards './lib/modules/*'
         rel=$(ls '{full}/lib/modules')
         depmod -b '{full}' \"$rel\"
         echo \"$rel\"",
        deb = deb.display(),
        full = full.display()
    );
    let out = std::process::Command::new("bash")
        .arg("-c")
        .arg(&script)
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| format!("bash: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "unpacking the modules of {} failed: {}",
            deb.display(),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let release = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    let src = full.join("lib/modules").join(&release);
    let dst = dir.join("tree/lib/modules").join(&release);
    let dep = std::fs::read_to_string(src.join("modules.dep"))
        .map_err(|e| format!("modules.dep of {release}: {e}"))?;
    let deps = lab::guest::modules::parse_modules_dep(&dep);
    let mut files: Vec<String> =
        lab::guest::modules::load_order(&deps, lab::guest::modules::WANTED)
            .into_iter()
            .map(|i| deps[i].path.clone())
            .collect();
    files.extend(
        [
            "modules.dep",
            "modules.builtin",
            "modules.builtin.modinfo",
            "modules.order",
        ]
        .map(String::from),
    );
    for f in &files {
        let to = dst.join(f);
        if let Some(parent) = to.parent() {
            std::fs::create_dir_all(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
        }
        std::fs::copy(src.join(f), &to).map_err(|e| format!("copying {f}: {e}"))?;
    }
    let _ = std::fs::remove_dir_all(&full);
    Ok((dir.join("tree"), release))
}
