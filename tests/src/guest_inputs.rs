//! Host-side inputs of the nested command tests: the Debian root file system of
//! `guest-images/rootfs-debian.sh` and fio's `t/` directory (fio's own test suite).

use std::path::PathBuf;
use std::process::Command;

use crate::pmemvm::workspace_root;
use crate::skip::Skip;

/// The Debian root file system (cached build of `guest-images/rootfs-debian.sh`,
/// which tests/run.sh runs first). A build that fails fails the test, in every mode.
pub fn debian_rootfs() -> PathBuf {
    rootfs_or_fail(&[])
}

/// `guest-images/rootfs-debian.sh ARGS`'s image; a failed build fails the test.
pub fn rootfs_or_fail(args: &[&str]) -> PathBuf {
    rootfs_build(args).unwrap_or_else(|why| panic!("{why}"))
}

/// Runs `guest-images/rootfs-debian.sh ARGS` and returns the image it printed,
/// or why it did not make one.
pub fn rootfs_build(args: &[&str]) -> Result<PathBuf, String> {
    let script = workspace_root().join("guest-images/rootfs-debian.sh");
    let out = Command::new("bash")
        .arg(&script)
        .args(args)
        .output()
        .map_err(|e| format!("cannot run {}: {e}", script.display()))?;
    let path = String::from_utf8_lossy(&out.stdout)
        .lines()
        .last()
        .map(PathBuf::from)
        .filter(|p| out.status.success() && p.is_file());
    path.ok_or_else(|| {
        format!(
            "the Debian root file system could not be built ({} {}, {}): {}",
            script.display(),
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr)
                .lines()
                .last()
                .unwrap_or("")
        )
    })
}

/// fio's `t/` directory from Debian's fio source package: the one the guest-image
/// build unpacked (`guest-images/build/fio/src/t`), else unpacked by
/// `guest-images/suites/fio-source.sh` (a cached image build leaves no source).
pub fn fio_t_dir() -> Result<PathBuf, String> {
    let built = workspace_root().join("guest-images/build/fio/src/t");
    if built.join("run-fio-tests.py").is_file() {
        return Ok(built);
    }
    let script = workspace_root().join("guest-images/suites/fio-source.sh");
    let out = Command::new("bash")
        .arg(&script)
        .output()
        .map_err(|e| format!("cannot run {}: {e}", script.display()))?;
    let path = String::from_utf8_lossy(&out.stdout)
        .lines()
        .last()
        .map(|l| PathBuf::from(l).join("t"))
        .filter(|p| out.status.success() && p.join("run-fio-tests.py").is_file());
    path.ok_or_else(|| {
        format!(
            "{} did not unpack fio's source: {}",
            script.display(),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// The host's `mke2fs`, for the L1 (whose user space is busybox): pmemvm makes the
/// `--put` image with it. Put it on the L1's `PATH` with `NestedVm::binary`.
pub fn mke2fs() -> Result<PathBuf, Skip> {
    ["/usr/sbin/mke2fs", "/sbin/mke2fs"]
        .into_iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
        .ok_or_else(|| Skip::new("no mke2fs (e2fsprogs) on the host"))
}
