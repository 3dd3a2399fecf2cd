//! The set of backing files of one VM: opening them all (the same file
//! twice, or two copies with one DIMM serial, are refused) and the
//! free-space phrase of storage-failure messages; preallocation.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use super::{BackingError, FileCause, FileKind, NvdimmBacking};
use crate::config::NvdimmSpec;

impl NvdimmBacking {
    /// `fallocate`s the whole file (the `prealloc` option).
    pub(crate) fn preallocate(&self) -> Result<(), BackingError> {
        let len = libc::off_t::try_from(self.spec.file_len()).map_err(|_| {
            self.fail(FileCause::Prealloc {
                path: self.display.clone(),
                size: self.spec.file_len(),
                source: std::io::Error::from(std::io::ErrorKind::InvalidInput),
            })
        })?;
        // SAFETY: fallocate only reads the fd, which `self.file` keeps open; mode 0
        // allocates blocks without changing the file size (already `len`).
        let rc = unsafe { libc::fallocate(self.file.as_raw_fd(), 0, 0, len) };
        if rc != 0 {
            return Err(self.fail(FileCause::Prealloc {
                path: self.display.clone(),
                size: self.spec.file_len(),
                source: std::io::Error::last_os_error(),
            }));
        }
        Ok(())
    }
}

/// The free space of the file system holding `file`, as a phrase for
/// storage-failure messages ("its file system has 0 of 8388608 bytes free").
pub fn space_report(file: &File) -> String {
    // SAFETY: a zeroed statvfs is a valid out-parameter; fstatvfs only reads
    // the fd (kept open by `file`) and fills the struct.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::fstatvfs(file.as_raw_fd(), &mut st) } != 0 {
        return format!(
            "its file system's free space is unknown ({})",
            std::io::Error::last_os_error()
        );
    }
    let free = st.f_bavail.saturating_mul(st.f_frsize);
    let total = st.f_blocks.saturating_mul(st.f_frsize);
    if free == 0 {
        format!("its file system is full (0 of {total} bytes free)")
    } else {
        format!("its file system has {free} of {total} bytes free")
    }
}

/// Opens every backing file; refuses the same path twice. On error, files
/// created so far are removed (their `Drop`).
pub fn open_all(specs: &[NvdimmSpec]) -> Result<Vec<NvdimmBacking>, BackingError> {
    open_all_as(specs, FileKind::Nvdimm)
}

/// [`open_all`] for files of `kind`.
pub fn open_all_as(
    specs: &[NvdimmSpec],
    kind: FileKind,
) -> Result<Vec<NvdimmBacking>, BackingError> {
    let mut seen: Vec<FileKey> = Vec::new();
    for path in specs.iter().filter_map(|s| s.file.as_ref()) {
        let key = FileKey::of(path);
        if seen.contains(&key) {
            return Err(BackingError::of(kind, FileCause::Duplicate(path.clone())));
        }
        seen.push(key);
    }
    let backings: Vec<NvdimmBacking> = specs
        .iter()
        .map(|s| NvdimmBacking::open_as(s, kind))
        .collect::<Result<_, _>>()?;
    for (i, a) in backings.iter().enumerate() {
        let twin = backings[..i]
            .iter()
            .find(|b| a.serial.is_some() && b.serial == a.serial);
        if let (Some(b), Some(serial)) = (twin, a.serial) {
            return Err(a.fail(FileCause::DuplicateIdentity {
                first: b.display.clone(),
                second: a.display.clone(),
                serial,
            }));
        }
    }
    Ok(backings)
}

/// What makes two `file=` paths the same file: the inode of an existing file
/// (catches hard links and symlinks), else the canonical directory plus name
/// (`a.img` and `./a.img` before either exists).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum FileKey {
    Inode(u64, u64),
    Path(PathBuf),
}

impl FileKey {
    pub(crate) fn of(path: &Path) -> Self {
        use std::os::unix::fs::MetadataExt;
        if let Ok(md) = std::fs::metadata(path) {
            return Self::Inode(md.dev(), md.ino());
        }
        let dir = match path.parent().filter(|p| !p.as_os_str().is_empty()) {
            Some(p) => p.to_path_buf(),
            None => PathBuf::from("."),
        };
        let dir = std::fs::canonicalize(&dir).unwrap_or(dir);
        Self::Path(match path.file_name() {
            Some(name) => dir.join(name),
            None => path.to_path_buf(),
        })
    }
}
