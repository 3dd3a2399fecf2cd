//! The L1 machine of nested mode — prepared, started and read by the
//! product's `lab::guest::nested` (the same code as `--engine nested`) — and the host
//! lookups every harness shares (QEMU, the pmemvm binary, the guest image).

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

pub use lab::guest::nested::L1Image;

use super::{unavailable, NestedError};
use crate::skip::Skip;

/// Cache directory of the harness: `$PMEMVM_TEST_CACHE` or `tests/.cache/`
/// (tests that run `--engine nested` point `PMEMVM_L1_CACHE` at it too).
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
    vmm::host::HostKvm::from_sources(info, false).hw_virt
}

pub(super) fn kvm_opens() -> bool {
    fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/kvm")
        .is_ok()
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
    lab::guest::qemu::find_qemu().ok_or_else(|| {
        Skip::new("qemu-system-x86_64 not found (install the Debian package qemu-system-x86)")
    })
}

/// A QEMU 10 or newer for the tests that need one (`nested_hang_loops` and
/// others): `$PMEMVM_QEMU_10`, else the one of [`find_qemu`]. tests/run.sh sets
/// it to a QEMU 10 unpacked from bookworm-backports when the one on `PATH` is
/// Debian 12's 7.2, which runs the rest of the suite (docs/nested-platform.md,
/// "Which QEMU runs the suite").
pub fn find_qemu_10() -> Result<PathBuf, Skip> {
    match std::env::var_os("PMEMVM_QEMU_10").filter(|q| !q.is_empty()) {
        Some(q) => user_binary("PMEMVM_QEMU_10", PathBuf::from(q)),
        None => find_qemu(),
    }
}

/// The `pmemvm` binary: `$PMEMVM_BIN` (which must exist), else the one
/// [`crate::pmemvm::pmemvm_bin`] builds: the tests' one lookup, never a stale binary.
pub fn find_pmemvm() -> Result<PathBuf, Skip> {
    match std::env::var_os("PMEMVM_BIN").filter(|b| !b.is_empty()) {
        Some(bin) => user_binary("PMEMVM_BIN", PathBuf::from(bin)),
        None => Ok(crate::pmemvm::pmemvm_bin()),
    }
}

pub use crate::image::guest_image;

/// Prepares (or finds cached) the L1 kernel and initramfs with the
/// product's `lab::guest::nested::prepare_l1` in [`cache_dir`]. A missing tool is
/// [`NestedError::Unavailable`] (a skip); an unreachable Debian archive or a
/// missing package fails the test.
pub fn prepare_l1() -> Result<L1Image, NestedError> {
    match lab::guest::nested::prepare_l1(&cache_dir()) {
        Ok(l1) => Ok(l1),
        Err(e @ lab::guest::nested::NestedError::MissingTool { .. }) => {
            Err(unavailable(format!("cannot prepare the L1 VM: {e}")))
        }
        Err(lab::guest::nested::NestedError::Prepare { message, stderr }) => {
            Err(NestedError::Prepare {
                status: message,
                stderr,
            })
        }
        Err(e) => Err(NestedError::Product(e)),
    }
}
