//! NVDIMM backing files: open or create, size check, lock, optional
//! preallocation, and the `MAP_SHARED` mapping that becomes guest memory.
//!
//! Nothing the user owns is changed unless asked: an existing file must have
//! exactly the requested size (never truncated or grown), a read-only file
//! needs `readonly`, and a file this module created is removed again if the
//! VM cannot be set up.

use std::fs::{File, OpenOptions};
use std::io::ErrorKind;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use vm_memory::mmap::MmapRegionBuilder;
use vm_memory::{FileOffset, MmapRegion};

use crate::config::NvdimmSpec;

/// Errors opening or mapping a backing file.
#[derive(Debug, thiserror::Error)]
pub enum BackingError {
    /// The path is a directory.
    #[error("NVDIMM backing file {0} is a directory; give a path to a regular file")]
    IsDirectory(PathBuf),
    /// The path is a device, FIFO or socket.
    #[error("NVDIMM backing file {0} is not a regular file; give a path to a regular file")]
    NotRegular(PathBuf),
    /// The existing file's size differs from the requested one.
    #[error("NVDIMM backing file {path} is {actual} bytes but --nvdimm asks for {wanted} bytes ({wanted_text}); pmemvm never resizes an existing file — give its exact size or another path")]
    WrongSize {
        /// Path.
        path: PathBuf,
        /// Size on disk.
        actual: u64,
        /// Requested size.
        wanted: u64,
        /// Requested size as typed.
        wanted_text: String,
    },
    /// The file cannot be opened for writing.
    #[error("NVDIMM backing file {0} is not writable; add ',readonly' to use it read-only")]
    ReadOnlyFile(PathBuf),
    /// `readonly` for a file that does not exist.
    #[error("NVDIMM backing file {0} does not exist; a readonly DIMM needs an existing file")]
    ReadOnlyMissing(PathBuf),
    /// The parent directory is missing.
    #[error("NVDIMM backing file {0} cannot be created: its directory does not exist")]
    MissingParent(PathBuf),
    /// Another process holds the lock.
    #[error("NVDIMM backing file {0} is in use by another pmemvm (it holds the file's lock)")]
    Locked(PathBuf),
    /// The same file given twice.
    #[error("NVDIMM backing file {0} is given more than once")]
    Duplicate(PathBuf),
    /// Not enough space for `prealloc`.
    #[error("NVDIMM backing file {path} cannot be preallocated ({size} bytes): {source}")]
    Prealloc {
        /// Path.
        path: String,
        /// Bytes wanted.
        size: u64,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// Any other I/O error.
    #[error("NVDIMM backing file {path}: {source}")]
    Io {
        /// Path.
        path: String,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// mmap failed.
    #[error("mapping NVDIMM backing file {path} into memory failed: {source}")]
    Map {
        /// Path.
        path: String,
        /// Cause.
        #[source]
        source: vm_memory::mmap::MmapRegionError,
    },
}

impl BackingError {
    /// True when the error is the user's input (exit status 2) rather than a host failure.
    pub fn is_usage(&self) -> bool {
        !matches!(self, Self::Io { .. } | Self::Map { .. })
    }
}

/// An open, locked backing file.
#[derive(Debug)]
pub struct NvdimmBacking {
    /// What the user asked for.
    pub spec: NvdimmSpec,
    /// The open file.
    pub file: Arc<File>,
    /// The path for messages ("(temporary)" for unnamed files).
    pub display: String,
    /// Path of a file this process created (removed again if setup fails).
    created: Option<PathBuf>,
}

impl NvdimmBacking {
    /// Opens (or creates) and locks the backing file of `spec`.
    pub fn open(spec: &NvdimmSpec) -> Result<Self, BackingError> {
        let backing = match &spec.file {
            Some(path) => Self::open_path(spec, path)?,
            None => Self::open_temporary(spec)?,
        };
        backing.lock()?;
        if spec.prealloc {
            backing.preallocate()?;
        }
        Ok(backing)
    }

    fn io(&self) -> impl Fn(std::io::Error) -> BackingError + '_ {
        move |source| BackingError::Io {
            path: self.display.clone(),
            source,
        }
    }

    fn open_path(spec: &NvdimmSpec, path: &Path) -> Result<Self, BackingError> {
        let io = |source| BackingError::Io {
            path: path.display().to_string(),
            source,
        };
        match std::fs::metadata(path) {
            Ok(md) => {
                let ft = md.file_type();
                if ft.is_dir() {
                    return Err(BackingError::IsDirectory(path.into()));
                }
                if !ft.is_file() || ft.is_block_device() {
                    return Err(BackingError::NotRegular(path.into()));
                }
                if md.len() != spec.size {
                    return Err(BackingError::WrongSize {
                        path: path.into(),
                        actual: md.len(),
                        wanted: spec.size,
                        wanted_text: spec.size_text.clone(),
                    });
                }
                let file = OpenOptions::new()
                    .read(true)
                    .write(!spec.readonly)
                    .custom_flags(libc::O_CLOEXEC)
                    .open(path)
                    .map_err(|e| match e.kind() {
                        ErrorKind::PermissionDenied | ErrorKind::ReadOnlyFilesystem => {
                            BackingError::ReadOnlyFile(path.into())
                        }
                        _ => io(e),
                    })?;
                Ok(Self {
                    spec: spec.clone(),
                    file: Arc::new(file),
                    display: path.display().to_string(),
                    created: None,
                })
            }
            Err(e) if e.kind() == ErrorKind::NotFound => {
                if spec.readonly {
                    return Err(BackingError::ReadOnlyMissing(path.into()));
                }
                let parent = path.parent().filter(|p| !p.as_os_str().is_empty());
                if parent.is_some_and(|p| !p.is_dir()) {
                    return Err(BackingError::MissingParent(path.into()));
                }
                let file = OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create_new(true)
                    .mode(0o644)
                    .custom_flags(libc::O_CLOEXEC)
                    .open(path)
                    .map_err(io)?;
                let backing = Self {
                    spec: spec.clone(),
                    file: Arc::new(file),
                    display: path.display().to_string(),
                    created: Some(path.into()),
                };
                backing.file.set_len(spec.size).map_err(backing.io())?;
                Ok(backing)
            }
            Err(e) => Err(io(e)),
        }
    }

    fn open_temporary(spec: &NvdimmSpec) -> Result<Self, BackingError> {
        let dir = std::env::temp_dir();
        let io = |source| BackingError::Io {
            path: dir.display().to_string(),
            source,
        };
        // O_TMPFILE: the file has no name, so no exit path (not even SIGKILL) can leak it.
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_TMPFILE | libc::O_CLOEXEC)
            .mode(0o600)
            .open(&dir)
            .map_err(io)?;
        file.set_len(spec.size).map_err(io)?;
        Ok(Self {
            spec: spec.clone(),
            file: Arc::new(file),
            display: format!("(temporary in {})", dir.display()),
            created: None,
        })
    }

    fn lock(&self) -> Result<(), BackingError> {
        let op = if self.spec.readonly {
            libc::LOCK_SH
        } else {
            libc::LOCK_EX
        };
        // SAFETY: flock only reads the fd, which `self.file` keeps open.
        let rc = unsafe { libc::flock(self.file.as_raw_fd(), op | libc::LOCK_NB) };
        if rc == 0 {
            return Ok(());
        }
        let e = std::io::Error::last_os_error();
        if e.kind() == ErrorKind::WouldBlock {
            Err(BackingError::Locked(self.display.clone().into()))
        } else {
            Err((self.io())(e))
        }
    }

    fn preallocate(&self) -> Result<(), BackingError> {
        let len = libc::off_t::try_from(self.spec.size).map_err(|_| BackingError::Prealloc {
            path: self.display.clone(),
            size: self.spec.size,
            source: std::io::Error::from(ErrorKind::InvalidInput),
        })?;
        // SAFETY: fallocate only reads the fd, which `self.file` keeps open; mode 0
        // allocates blocks without changing the file size (already `len`).
        let rc = unsafe { libc::fallocate(self.file.as_raw_fd(), 0, 0, len) };
        if rc != 0 {
            return Err(BackingError::Prealloc {
                path: self.display.clone(),
                size: self.spec.size,
                source: std::io::Error::last_os_error(),
            });
        }
        Ok(())
    }

    /// Maps the persistent-memory part of the file (`spec.spa_size()` bytes
    /// from offset 0) `MAP_SHARED`, read-only when the DIMM is.
    pub fn map(&self) -> Result<MmapRegion, BackingError> {
        let size = usize::try_from(self.spec.spa_size()).map_err(|_| BackingError::Io {
            path: self.display.clone(),
            source: std::io::Error::from(ErrorKind::InvalidInput),
        })?;
        let prot = if self.spec.readonly {
            libc::PROT_READ
        } else {
            libc::PROT_READ | libc::PROT_WRITE
        };
        MmapRegionBuilder::new(size)
            .with_file_offset(FileOffset::from_arc(self.file.clone(), 0))
            .with_mmap_prot(prot)
            .with_mmap_flags(libc::MAP_SHARED | libc::MAP_NORESERVE)
            .build()
            .map_err(|source| BackingError::Map {
                path: self.display.clone(),
                source,
            })
    }

    /// Keeps a created file when the VM was set up successfully.
    pub fn keep(&mut self) {
        self.created = None;
    }

    /// Syncs the file's data to stable storage (writable DIMMs only).
    pub fn sync(&self) -> std::io::Result<()> {
        if self.spec.readonly {
            return Ok(());
        }
        self.file.sync_data()
    }
}

impl Drop for NvdimmBacking {
    fn drop(&mut self) {
        if let Some(path) = self.created.take() {
            let _ = std::fs::remove_file(path);
        }
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
    let mut seen: Vec<FileKey> = Vec::new();
    for path in specs.iter().filter_map(|s| s.file.as_ref()) {
        let key = FileKey::of(path);
        if seen.contains(&key) {
            return Err(BackingError::Duplicate(path.clone()));
        }
        seen.push(key);
    }
    specs.iter().map(NvdimmBacking::open).collect()
}

/// What makes two `file=` paths the same file: the inode of an existing file
/// (catches hard links and symlinks), else the canonical directory plus name
/// (`a.img` and `./a.img` before either exists).
#[derive(Debug, PartialEq, Eq)]
enum FileKey {
    Inode(u64, u64),
    Path(PathBuf),
}

impl FileKey {
    fn of(path: &Path) -> Self {
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    fn tmpdir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("pmemvm-backing-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn spec(s: &str) -> NvdimmSpec {
        s.parse().unwrap()
    }

    #[test]
    fn creates_sparse_and_removes_on_failure() {
        let d = tmpdir("create");
        let p = d.join("a.img");
        let b = NvdimmBacking::open(&spec(&format!("64M,file={}", p.display()))).unwrap();
        let md = std::fs::metadata(&p).unwrap();
        assert_eq!(md.len(), 64 << 20);
        assert_eq!(md.blocks(), 0, "a new backing file is sparse");
        drop(b); // not kept: setup "failed"
        assert!(!p.exists());
        let mut b = NvdimmBacking::open(&spec(&format!("64M,file={}", p.display()))).unwrap();
        b.keep();
        drop(b);
        assert!(p.exists());
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn refuses_wrong_size_dir_and_readonly_without_flag() {
        let d = tmpdir("refuse");
        let p = d.join("b.img");
        std::fs::write(&p, vec![7u8; 4096]).unwrap();
        let e = NvdimmBacking::open(&spec(&format!("64M,file={}", p.display()))).unwrap_err();
        assert!(
            matches!(e, BackingError::WrongSize { actual: 4096, .. }),
            "{e}"
        );
        assert_eq!(std::fs::read(&p).unwrap(), vec![7u8; 4096], "untouched");
        let e = NvdimmBacking::open(&spec(&format!("64M,file={}", d.display()))).unwrap_err();
        assert!(matches!(e, BackingError::IsDirectory(_)), "{e}");
        let e = NvdimmBacking::open(&spec("64M,file=/dev/null")).unwrap_err();
        assert!(matches!(e, BackingError::NotRegular(_)), "{e}");
        let e = NvdimmBacking::open(&spec(&format!("64M,file={}/no/such/x.img", d.display())))
            .unwrap_err();
        assert!(matches!(e, BackingError::MissingParent(_)), "{e}");
        let e = NvdimmBacking::open(&spec(&format!("64M,file={}/x.img,readonly", d.display())))
            .unwrap_err();
        assert!(matches!(e, BackingError::ReadOnlyMissing(_)), "{e}");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn second_writer_is_refused_and_readers_share() {
        let d = tmpdir("lock");
        let p = d.join("c.img");
        let s = spec(&format!("4M,file={}", p.display()));
        let mut a = NvdimmBacking::open(&s).unwrap();
        a.keep();
        let e = NvdimmBacking::open(&s).unwrap_err();
        assert!(matches!(e, BackingError::Locked(_)), "{e}");
        drop(a); // lock released with the fd
        let ro = spec(&format!("4M,file={},readonly", p.display()));
        let r1 = NvdimmBacking::open(&ro).unwrap();
        let r2 = NvdimmBacking::open(&ro).unwrap();
        assert!(matches!(
            NvdimmBacking::open(&s),
            Err(BackingError::Locked(_))
        ));
        drop((r1, r2));
        let dup = [s.clone(), s];
        assert!(matches!(open_all(&dup), Err(BackingError::Duplicate(_))));
        // Not created yet, spelled two ways: still the same file, and nothing is created.
        let new = d.join("new.img");
        let dot = d.join(".").join("new.img");
        let dup = [
            spec(&format!("4M,file={}", new.display())),
            spec(&format!("4M,file={}", dot.display())),
        ];
        assert!(matches!(open_all(&dup), Err(BackingError::Duplicate(_))));
        assert!(!new.exists());
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn temporary_and_mapping() {
        let b = NvdimmBacking::open(&spec("4M,label-size=0")).unwrap();
        let m = b.map().unwrap();
        assert_eq!(m.size(), 4 << 20);
        let b = NvdimmBacking::open(&spec("4M")).unwrap();
        assert_eq!(b.map().unwrap().size(), 2 << 20, "label area is not mapped");
    }
}
