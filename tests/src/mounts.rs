//! File systems and hugetlb pages a test sets up for itself (tmpfs with huge
//! pages, a small tmpfs that fills up, hugetlbfs), given back on drop.
//!
//! Not being root and a missing `mount` program are the only skips (missing
//! privilege or tool); a directory that cannot be made, a mount that fails as
//! root, or a hugetlb reservation that a root cannot write is a failure.

use std::io;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::skip::{MaybeSkip, Skip};

/// Why a test's mount or reservation was not made.
#[derive(Debug)]
pub enum SetupError {
    /// A missing privilege or tool: the test skips.
    Unavailable(Skip),
    /// Anything else: the test fails.
    Failed(String),
}

impl std::fmt::Display for SetupError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SetupError::Unavailable(s) => write!(f, "{s}"),
            SetupError::Failed(why) => write!(f, "{why}"),
        }
    }
}

impl MaybeSkip for SetupError {
    fn skip_reason(&self) -> Option<&str> {
        match self {
            SetupError::Unavailable(s) => Some(s.reason()),
            SetupError::Failed(_) => None,
        }
    }
}

/// True when this process runs as root.
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// A file system mounted at a directory for one test, unmounted (lazily) on drop.
#[derive(Debug)]
pub struct Mounted(pub PathBuf);

impl Mounted {
    /// `mount -t FSTYPE -o OPTS none DIR`, creating DIR first.
    pub fn new(dir: &Path, fstype: &str, opts: &str) -> Result<Self, SetupError> {
        if !is_root() {
            return Err(SetupError::Unavailable(Skip::new(format!(
                "mounting {fstype} needs root"
            ))));
        }
        std::fs::create_dir_all(dir)
            .map_err(|e| SetupError::Failed(format!("mkdir {}: {e}", dir.display())))?;
        let out = Command::new("mount")
            .args(["-t", fstype, "-o", opts, "none"])
            .arg(dir)
            .output();
        let out = match out {
            Ok(out) => out,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(SetupError::Unavailable(Skip::new(
                    "mount is not installed (Debian package mount)",
                )))
            }
            Err(e) => return Err(SetupError::Failed(format!("cannot run mount: {e}"))),
        };
        if !out.status.success() {
            return Err(SetupError::Failed(format!(
                "mount -t {fstype} -o {opts} on {} failed as root: {}",
                dir.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        Ok(Self(dir.to_path_buf()))
    }

    /// The mount point.
    pub fn path(&self) -> &Path {
        &self.0
    }

    /// A path below the mount point.
    pub fn join(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

const NR_HUGEPAGES: &str = "/proc/sys/vm/nr_hugepages";

/// `n` more hugetlb pages reserved than before; the old count back on drop.
#[derive(Debug)]
pub struct HugePages(u64);

impl HugePages {
    /// Raises `vm.nr_hugepages` by `n`.
    pub fn reserve(n: u64) -> Result<Self, SetupError> {
        let old: u64 = std::fs::read_to_string(NR_HUGEPAGES)
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .ok_or_else(|| {
                SetupError::Unavailable(Skip::new(
                    "this kernel has no hugetlb pages (no /proc/sys/vm/nr_hugepages)",
                ))
            })?;
        if !is_root() {
            return Err(SetupError::Unavailable(Skip::new(
                "reserving hugetlb pages needs root",
            )));
        }
        std::fs::write(NR_HUGEPAGES, (old + n).to_string()).map_err(|e| {
            SetupError::Failed(format!("writing {} to {NR_HUGEPAGES}: {e}", old + n))
        })?;
        Ok(Self(old))
    }
}

impl Drop for HugePages {
    fn drop(&mut self) {
        let _ = std::fs::write(NR_HUGEPAGES, self.0.to_string());
    }
}
