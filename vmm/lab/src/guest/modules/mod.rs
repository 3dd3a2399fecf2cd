//! `--modules DIR`: the modules of the user's own kernel, packed into the job's initrd.
//!
//! DIR is what `make modules_install INSTALL_MOD_PATH=X` wrote: X itself, or
//! `X/lib/modules/<release>`. [`ModuleTree::open`] finds the release directory
//! and refuses one whose release is not the kernel's (read from the bzImage's
//! setup header or the vmlinux's `Linux version` banner, [`kernel_release`]) or
//! that has no `modules.dep`. [`ModuleTree::pack`] takes the modules a pmemvm
//! job can need ([`WANTED`]) and what they depend on, decompressed (busybox
//! `insmod` in the guest reads plain ELF only), re-indexed with the host's
//! `depmod` where there is one, and a load list `pmemvm.load` in dependency
//! order, which the guest's `/init` loads before it looks for `/dev/pmem*`.

mod pack;

use std::path::{Path, PathBuf};

pub use pack::{load_order, parse_modules_dep, ModuleDep};

/// The modules packed when present (with their dependencies): the NVDIMM
/// stack, device DAX and its system-RAM mode, and what the experiments' jobs
/// use (file systems, bcache, null_blk, loop, the crc32c they need), legacy
/// E820 pmem, and the virtio-mmio disks that carry `--rootfs`, `--put`,
/// `--get` and `--disk` (Debian's kernels build them as modules).
pub const WANTED: &[&str] = &[
    "libnvdimm",
    "nfit",
    "nd_e820",
    "virtio_mmio",
    "virtio_blk",
    "nd_pmem",
    "nd_btt",
    "nd_pfn",
    "dax",
    "device_dax",
    "dax_pmem",
    "dax_pmem_core",
    "dax_pmem_compat",
    "kmem",
    "xfs",
    "ext4",
    "bcache",
    "null_blk",
    "loop",
    "crc32c_generic",
    "crc32c_intel",
    "libcrc32c",
];

/// Modules packed when present (with their dependencies) but not loaded by the guest's
/// init: the kernel's nfit_test emulation (tools/testing/nvdimm), which ndctl's tests
/// load and unload themselves with `modprobe` (`pmemvm suite ndctl --nfit-test`).
pub const ON_DEMAND: &[&str] = &["nfit_test"];

/// The name of the load list inside `lib/modules/<release>/`.
pub const LOAD_LIST: &str = "pmemvm.load";

/// Errors of `--modules`: each names the value and what is accepted.
#[derive(Debug, thiserror::Error)]
pub enum ModulesError {
    /// DIR does not exist or is not a directory.
    #[error("--modules {} is not a directory ({reason}); give what `make modules_install INSTALL_MOD_PATH=X` wrote: X or X/lib/modules/RELEASE", dir.display())]
    NotADirectory {
        /// DIR.
        dir: PathBuf,
        /// Why.
        reason: String,
    },
    /// Neither DIR/modules.dep nor DIR/lib/modules/*/modules.dep.
    #[error("--modules {} has no modules.dep (looked in {} and {}/lib/modules/*/); give what `make modules_install INSTALL_MOD_PATH=X` wrote: X or X/lib/modules/RELEASE", dir.display(), dir.display(), dir.display())]
    NoModulesDep {
        /// DIR.
        dir: PathBuf,
    },
    /// The modules are of another release than the kernel.
    #[error("--modules {} holds modules of release {found}, but kernel {} is release {kernel_release}; give the modules of the same build", dir.display(), kernel.display())]
    ReleaseMismatch {
        /// DIR.
        dir: PathBuf,
        /// Release(s) found in DIR.
        found: String,
        /// The kernel.
        kernel: PathBuf,
        /// Its release.
        kernel_release: String,
    },
    /// The kernel's release string cannot be found.
    #[error("cannot read the release of kernel {} for --modules ({reason}); --modules needs a Linux bzImage or vmlinux", kernel.display())]
    NoRelease {
        /// The kernel.
        kernel: PathBuf,
        /// Why.
        reason: String,
    },
    /// A file of the tree cannot be read or decompressed.
    #[error("--modules: cannot read {}: {reason}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// modules.dep names a file outside the release directory.
    #[error("--modules: {} names {path}, which is not a path inside {}; give a tree that `depmod` wrote (relative paths such as kernel/drivers/nvdimm/nd_pmem.ko)", file.display(), dir.display())]
    OutsideTree {
        /// modules.dep.
        file: PathBuf,
        /// The release directory.
        dir: PathBuf,
        /// The path as written.
        path: String,
    },
    /// Scratch files or depmod on the host.
    #[error("--modules: {what}: {reason}")]
    Host {
        /// What was being done.
        what: String,
        /// Why.
        reason: String,
    },
}

impl vmm::exit_status::Classified for ModulesError {
    fn kind(&self) -> vmm::exit_status::ErrorKind {
        use vmm::exit_status::ErrorKind::*;
        match self {
            Self::Host { .. } => Environment,
            _ => Usage,
        }
    }
}

/// Offset of the bzImage setup header's `kernel_version` field.
const SETUP_KERNEL_VERSION: usize = 0x20e;
/// Offset of the setup header's "HdrS" magic.
const SETUP_MAGIC: usize = 0x202;
/// `kernel_version` points this far before the string (the boot sector).
const SETUP_VERSION_BASE: usize = 0x200;
/// What precedes the release in a vmlinux's `linux_banner`.
const BANNER: &[u8] = b"Linux version ";

/// The kernel release of a bzImage (its setup header's version string) or an ELF
/// vmlinux (its `Linux version` banner), e.g. `6.1.158-pmemvm-modular`.
pub fn kernel_release(kernel: &Path) -> Result<String, ModulesError> {
    let no = |reason: String| ModulesError::NoRelease {
        kernel: kernel.to_owned(),
        reason,
    };
    let bytes = std::fs::read(kernel).map_err(|e| no(e.to_string()))?;
    if bytes.get(SETUP_MAGIC..SETUP_MAGIC + 4) == Some(b"HdrS") {
        let at = bytes
            .get(SETUP_KERNEL_VERSION..SETUP_KERNEL_VERSION + 2)
            .map(|b| usize::from(u16::from_le_bytes([b[0], b[1]])))
            .unwrap_or(0);
        if at == 0 {
            return Err(no("its setup header has no kernel_version string".into()));
        }
        return first_word(bytes.get(at + SETUP_VERSION_BASE..).unwrap_or_default())
            .ok_or_else(|| no("its setup header's kernel_version string is empty".into()));
    }
    if bytes.starts_with(b"\x7fELF") {
        return bytes
            .windows(BANNER.len())
            .position(|w| w == BANNER)
            .and_then(|i| first_word(&bytes[i + BANNER.len()..]))
            .ok_or_else(|| no("it has no 'Linux version' banner".into()));
    }
    Err(no("it is neither a bzImage nor an ELF file".into()))
}

/// The printable word at the start of `bytes` (up to a space or NUL).
fn first_word(bytes: &[u8]) -> Option<String> {
    let end = bytes
        .iter()
        .position(|&b| b == 0 || b.is_ascii_whitespace() || !b.is_ascii_graphic())
        .unwrap_or(bytes.len());
    (end > 0 && end < 256).then(|| String::from_utf8_lossy(&bytes[..end]).into_owned())
}

/// What `--modules` packed, as a run records it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PackedModules {
    /// The release directory (`.../lib/modules/<release>`).
    pub dir: String,
    /// The kernel release.
    pub release: String,
    /// The modules the guest loads, in order ([`LOAD_LIST`]).
    pub load: Vec<String>,
}

/// A module tree of one release: `.../lib/modules/<release>/`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModuleTree {
    /// The release directory (holds modules.dep).
    pub dir: PathBuf,
    /// Its release (the directory's name).
    pub release: String,
}

impl ModuleTree {
    /// The tree in `dir` (X or X/lib/modules/RELEASE) for `kernel`.
    pub fn open(dir: &Path, kernel: &Path) -> Result<Self, ModulesError> {
        let meta = std::fs::metadata(dir).map_err(|e| ModulesError::NotADirectory {
            dir: dir.to_owned(),
            reason: e.to_string(),
        })?;
        if !meta.is_dir() {
            return Err(ModulesError::NotADirectory {
                dir: dir.to_owned(),
                reason: "it is a file".into(),
            });
        }
        let release = kernel_release(kernel)?;
        let mismatch = |found: String| ModulesError::ReleaseMismatch {
            dir: dir.to_owned(),
            found,
            kernel: kernel.to_owned(),
            kernel_release: release.clone(),
        };
        if dir.join("modules.dep").is_file() {
            let name = std::fs::canonicalize(dir)
                .ok()
                .and_then(|d| d.file_name().map(|n| n.to_string_lossy().into_owned()))
                .unwrap_or_default();
            if name != release {
                return Err(mismatch(name));
            }
            return Ok(Self {
                dir: dir.to_owned(),
                release,
            });
        }
        let base = dir.join("lib/modules");
        let mut found: Vec<String> = std::fs::read_dir(&base)
            .map(|rd| {
                rd.filter_map(|e| e.ok())
                    .filter(|e| e.path().join("modules.dep").is_file())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        found.sort();
        if found.is_empty() {
            return Err(ModulesError::NoModulesDep {
                dir: dir.to_owned(),
            });
        }
        if !found.contains(&release) {
            return Err(mismatch(found.join(", ")));
        }
        Ok(Self {
            dir: base.join(&release),
            release,
        })
    }

    /// The archive files (path, contents, mode) that put the wanted modules and
    /// their dependencies into the guest's `lib/modules/<release>/`.
    pub fn pack(&self) -> Result<Vec<(String, Vec<u8>, u32)>, ModulesError> {
        // Absolute, so no file name is taken for an option by the decompressors.
        let dir = std::fs::canonicalize(&self.dir).map_err(|e| ModulesError::Read {
            path: self.dir.clone(),
            reason: e.to_string(),
        })?;
        pack::pack(&Self {
            dir,
            release: self.release.clone(),
        })
    }
}

impl ModuleTree {
    /// What [`ModuleTree::pack`] packed (`files`), for the run's record.
    pub fn describe(&self, files: &[(String, Vec<u8>, u32)]) -> PackedModules {
        let list = format!("lib/modules/{}/{LOAD_LIST}", self.release);
        let load = files
            .iter()
            .find(|(p, _, _)| *p == list)
            .map(|(_, d, _)| {
                String::from_utf8_lossy(d)
                    .lines()
                    .map(|l| {
                        let base = l.rsplit('/').next().unwrap_or(l);
                        base.trim_end_matches(".ko").to_owned()
                    })
                    .collect()
            })
            .unwrap_or_default();
        PackedModules {
            dir: self.dir.display().to_string(),
            release: self.release.clone(),
            load,
        }
    }
}

#[cfg(test)]
mod tests;
