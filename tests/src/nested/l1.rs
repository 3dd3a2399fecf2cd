//! The L1 machine of nested mode: its kernel and initramfs (prepared and
//! cached by `tests/l1/prepare.sh`), its QEMU command line, and the host
//! lookups every harness shares (QEMU, the pmemvm binary, the guest image).

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use lab::qemu::{QemuAccel, QemuCommand};

use super::{io_err, unavailable, workspace_root, NestedError};
use crate::skip::Skip;

/// The prepared L1 kernel and initramfs.
#[derive(Debug, Clone)]
pub struct L1Image {
    /// Debian's stock kernel.
    pub vmlinuz: PathBuf,
    /// busybox + modules + tests/l1/init.
    pub initramfs: PathBuf,
    /// Initramfs of the "stock" L2 guest: busybox, the NVDIMM modules of the
    /// same kernel and tests/l1/l2-init, for booting `vmlinuz` under pmemvm.
    pub l2_initramfs: PathBuf,
    /// `package=... version=... kernel=...` as recorded by prepare.sh.
    pub kernel_package: String,
}

/// Cache directory of the harness: `$PMEMVM_TEST_CACHE` or `tests/.cache/`.
pub fn cache_dir() -> PathBuf {
    match std::env::var_os("PMEMVM_TEST_CACHE") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => Path::new(env!("CARGO_MANIFEST_DIR")).join(".cache"),
    }
}

/// True if `/proc/cpuinfo` lists `vmx` or `svm`, i.e. hardware virtualization.
pub fn host_has_hw_virt() -> bool {
    fs::read_to_string("/proc/cpuinfo")
        .map(|info| cpuinfo_has_hw_virt(&info))
        .unwrap_or(false)
}

pub(super) fn cpuinfo_has_hw_virt(info: &str) -> bool {
    info.lines()
        .filter(|l| l.starts_with("flags"))
        .flat_map(|l| l.split_whitespace())
        .any(|f| f == "vmx" || f == "svm")
}

pub(super) fn kvm_opens() -> bool {
    fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/kvm")
        .is_ok()
}

pub(crate) fn find_in_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

/// A binary named by an environment variable: nothing at that path means
/// the tool is missing (a skip that names the variable); something there that
/// is not an executable file is a misconfiguration, and the test fails.
pub(super) fn user_binary(var: &str, path: PathBuf) -> Result<PathBuf, Skip> {
    use std::os::unix::fs::PermissionsExt;
    match fs::metadata(&path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Err(Skip::new(format!(
            "{var}={} does not exist (install the tool there, or unset {var})",
            path.display()
        ))),
        Err(e) => panic!("{var}={}: {e}", path.display()),
        Ok(m) if !m.is_file() || m.permissions().mode() & 0o111 == 0 => panic!(
            "{var}={} is not an executable file: name the binary, or unset {var}",
            path.display()
        ),
        Ok(_) => Ok(path),
    }
}

/// The QEMU binary: `$PMEMVM_QEMU` or `qemu-system-x86_64` on `PATH`.
pub fn find_qemu() -> Result<PathBuf, Skip> {
    if let Some(q) = std::env::var_os("PMEMVM_QEMU").filter(|q| !q.is_empty()) {
        return user_binary("PMEMVM_QEMU", PathBuf::from(q));
    }
    lab::qemu::find_qemu().ok_or_else(|| {
        Skip::new("qemu-system-x86_64 not found (install the Debian package qemu-system-x86)")
    })
}

/// The `pmemvm` binary: `$PMEMVM_BIN`, else the newer of
/// `target/release/pmemvm` and `target/debug/pmemvm` (honouring
/// `$CARGO_TARGET_DIR`).
pub fn find_pmemvm() -> Result<PathBuf, Skip> {
    if let Some(bin) = std::env::var_os("PMEMVM_BIN").filter(|b| !b.is_empty()) {
        return user_binary("PMEMVM_BIN", PathBuf::from(bin));
    }
    let target = match std::env::var_os("CARGO_TARGET_DIR") {
        Some(t) if !t.is_empty() => {
            let t = PathBuf::from(t);
            if t.is_absolute() {
                t
            } else {
                workspace_root().join(t)
            }
        }
        _ => workspace_root().join("target"),
    };
    ["release", "debug"]
        .iter()
        .map(|profile| target.join(profile).join("pmemvm"))
        .filter_map(|p| {
            let mtime = fs::metadata(&p).and_then(|m| m.modified()).ok()?;
            Some((mtime, p))
        })
        .max_by_key(|(mtime, _)| *mtime)
        .map(|(_, p)| p)
        .ok_or_else(|| {
            Skip::new(format!(
                "pmemvm binary not found (set PMEMVM_BIN or run `cargo build -p pmemvm`; looked in {})",
                target.display()
            ))
        })
}

/// A file of the project's guest image: `$PMEMVM_IMAGE_DIR/NAME` or
/// `guest-images/out/NAME` (e.g. `bzImage`, `vmlinux`, `initramfs.cpio.gz`).
pub fn guest_image(name: &str) -> Result<PathBuf, Skip> {
    let dir = match std::env::var_os("PMEMVM_IMAGE_DIR") {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => workspace_root().join("guest-images").join("out"),
    };
    let path = dir.join(name);
    if path.is_file() {
        Ok(path)
    } else {
        Err(Skip::new(format!(
            "guest image {} not built (run guest-images/build.sh)",
            path.display()
        )))
    }
}

/// Prepares (or finds cached) the L1 kernel and initramfs with
/// `tests/l1/prepare.sh`. Missing tools or an unreachable Debian archive are
/// reported as [`NestedError::Unavailable`].
pub fn prepare_l1() -> Result<L1Image, NestedError> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("l1")
        .join("prepare.sh");
    let bash = find_in_path("bash").ok_or_else(|| unavailable("bash not found"))?;
    let cache = cache_dir();
    let out = Command::new(bash)
        .arg(&script)
        .arg(&cache)
        .stdin(Stdio::null())
        .output()
        .map_err(io_err(format!("run {}", script.display())))?;
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    if !out.status.success() {
        if out.status.code() == Some(3) {
            let reason = stderr.lines().last().unwrap_or("prepare.sh failed").trim();
            return Err(unavailable(format!("cannot prepare the L1 VM: {reason}")));
        }
        return Err(NestedError::Prepare {
            status: out.status.to_string(),
            stderr,
        });
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let dir = stdout
        .lines()
        .last()
        .map(|l| PathBuf::from(l.trim()))
        .ok_or_else(|| NestedError::Prepare {
            status: "no output directory printed".to_string(),
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

/// The L1's QEMU command: TCG with emulated AMD SVM (`-cpu max,vendor=AuthenticAMD`),
/// the prepared kernel and initramfs, COM1 to `console`, `share` as the 9p tag `share`.
pub(super) fn l1_command(
    qemu: &Path,
    l1: &L1Image,
    memory_mib: u32,
    cpus: u32,
    console: &Path,
    share: &Path,
) -> Command {
    let mut q = QemuCommand::new(qemu, QemuAccel::Tcg, "max,vendor=AuthenticAMD");
    q.memory(&format!("{memory_mib}M"))
        .smp(cpus)
        .serial_file(console)
        .kernel(
            &l1.vmlinuz,
            Some(&l1.initramfs),
            "console=ttyS0 panic=-1 rdinit=/init",
        )
        .virtfs(share, "share");
    q.into_command()
}
