//! The L1 kernel and initramfs: `guest-images/l1/prepare.sh` (embedded in the
//! binary with the L1 `init` and the stock L2 `l2-init`, so an installed
//! `pmemvm` needs no source tree) fetches Debian's stock 6.1 kernel package
//! with `apt-get download`, unpacks it (never installs it) and builds the
//! initramfs. The result is cached by a hash of the three scripts (and
//! `$PMEMVM_L1_KERNEL_PKG`) in [`cache_dir`]; a warm call only hashes.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::{find_in_path, io_err, NestedError};

const PREPARE_SH: &str = include_str!("../../../../../guest-images/l1/prepare.sh");
const INIT: &str = include_str!("../../../../../guest-images/l1/init");
const L2_INIT: &str = include_str!("../../../../../guest-images/l1/l2-init");

/// What prepare.sh needs, and the Debian package of each (busybox must be
/// the static one: it runs in the L1 and L2 initramfs).
pub const TOOLS: &[(&str, &str)] = &[
    ("apt-get", "apt"),
    ("apt-cache", "apt"),
    ("dpkg-deb", "dpkg"),
    ("cpio", "cpio"),
    ("gzip", "gzip"),
    ("xz", "xz-utils"),
    ("zstd", "zstd"),
    ("busybox", "busybox-static"),
];

/// The prepared L1 kernel and initramfs.
#[derive(Debug, Clone)]
pub struct L1Image {
    /// Debian's stock kernel.
    pub vmlinuz: PathBuf,
    /// busybox + modules + the L1 init.
    pub initramfs: PathBuf,
    /// Initramfs of the "stock" L2 guest: busybox, the NVDIMM modules of the
    /// same kernel and l2-init, for booting `vmlinuz` under pmemvm.
    pub l2_initramfs: PathBuf,
    /// `package=... version=... kernel=...` as recorded by prepare.sh.
    pub kernel_package: String,
}

/// The product's L1 cache: `$PMEMVM_L1_CACHE`, else
/// `$XDG_CACHE_HOME/pmemvm/l1`, else `~/.cache/pmemvm/l1`.
pub fn cache_dir() -> PathBuf {
    let var = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty());
    if let Some(dir) = var("PMEMVM_L1_CACHE") {
        return PathBuf::from(dir);
    }
    if let Some(xdg) = var("XDG_CACHE_HOME") {
        return PathBuf::from(xdg).join("pmemvm").join("l1");
    }
    match var("HOME") {
        Some(home) => PathBuf::from(home).join(".cache").join("pmemvm").join("l1"),
        None => std::env::temp_dir().join("pmemvm-l1-cache"),
    }
}

/// What the L1 needs beside the guest's RAM: its kernel and initramfs, pmemvm
/// and the page cache of the kernel, initrd and the mapped DIMM pages.
pub const L1_OVERHEAD_MIB: u64 = 1024;

/// The Debian packages of the preparation tools that are missing here
/// (deduplicated, in [`TOOLS`] order).
pub fn missing_tool_packages() -> Vec<&'static str> {
    let mut out: Vec<&'static str> = Vec::new();
    for (tool, package) in TOOLS {
        let missing = match find_in_path(tool) {
            None => true,
            Some(path) if *tool == "busybox" => is_dynamic(&path),
            Some(_) => false,
        };
        if missing && !out.contains(package) {
            out.push(package);
        }
    }
    out
}

fn is_dynamic(binary: &Path) -> bool {
    super::share::libraries_of(binary).is_ok_and(|libs| !libs.is_empty())
}

/// Writes the embedded scripts into `cache/scripts/` (only when they
/// differ: several preparations may run at once) and returns that directory.
fn write_scripts(cache: &Path) -> Result<PathBuf, NestedError> {
    let dir = cache.join("scripts");
    fs::create_dir_all(&dir).map_err(io_err(format!("create {}", dir.display())))?;
    for (name, text) in [
        ("prepare.sh", PREPARE_SH),
        ("init", INIT),
        ("l2-init", L2_INIT),
    ] {
        let path = dir.join(name);
        if fs::read_to_string(&path).is_ok_and(|t| t == text) {
            continue;
        }
        // Unique per call: threads of one process may write at once.
        static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tmp = dir.join(format!(".{name}.{}.{n}", std::process::id()));
        fs::write(&tmp, text).map_err(io_err(format!("write {}", tmp.display())))?;
        fs::rename(&tmp, &path).map_err(io_err(format!("write {}", path.display())))?;
    }
    Ok(dir)
}

/// Prepares (or finds cached in `cache`) the L1 kernel and initramfs.
pub fn prepare_l1(cache: &Path) -> Result<L1Image, NestedError> {
    let scripts = write_scripts(cache)?;
    let bash = find_in_path("bash").ok_or_else(|| NestedError::MissingTool {
        detail: "'bash' not found (Debian package bash)".into(),
    })?;
    let out = Command::new(bash)
        .arg(scripts.join("prepare.sh"))
        .arg(cache)
        .stdin(Stdio::null())
        .output()
        .map_err(io_err("run the L1 preparation (prepare.sh)"))?;
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let last = stderr
        .lines()
        .last()
        .unwrap_or("prepare.sh failed")
        .trim()
        .trim_start_matches("prepare.sh: ")
        .to_string();
    if !out.status.success() {
        if out.status.code() == Some(3) {
            return Err(NestedError::MissingTool { detail: last });
        }
        return Err(NestedError::Prepare {
            message: last,
            stderr,
        });
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let dir = stdout
        .lines()
        .last()
        .map(|l| PathBuf::from(l.trim()))
        .ok_or_else(|| NestedError::Prepare {
            message: "prepare.sh printed no output directory".into(),
            stderr: stderr.clone(),
        })?;
    let kernel_package = fs::read_to_string(dir.join("kernel-package.txt"))
        .map_err(io_err(format!("read {}/kernel-package.txt", dir.display())))?
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    Ok(L1Image {
        vmlinuz: dir.join("vmlinuz"),
        initramfs: dir.join("initramfs.cpio.gz"),
        l2_initramfs: dir.join("l2-initramfs.cpio.gz"),
        kernel_package,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scripts_are_embedded_and_written_once() {
        assert!(PREPARE_SH.contains("make_initramfs"));
        assert!(INIT.contains(super::super::STATUS_MARKER));
        let dir = std::env::temp_dir().join(format!("pmemvm-l1-scripts-{}", std::process::id()));
        let scripts = write_scripts(&dir).expect("write");
        assert_eq!(
            fs::read_to_string(scripts.join("init")).expect("init"),
            INIT
        );
        write_scripts(&dir).expect("rewrite");
        fs::remove_dir_all(&dir).expect("cleanup");
    }

    #[test]
    fn every_tool_names_its_package() {
        assert!(TOOLS.iter().any(|(t, p)| *t == "xz" && *p == "xz-utils"));
        // Packages are listed once even when two tools share one.
        let pkgs = missing_tool_packages();
        let mut dedup = pkgs.clone();
        dedup.dedup();
        assert_eq!(pkgs, dedup);
    }
}
