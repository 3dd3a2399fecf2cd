//! NVDIMM backing files: open or create, size check, lock, identity,
//! optional preallocation, and the `MAP_SHARED` mapping that becomes guest
//! memory.
//!
//! A backing file is the guest's region (`--nvdimm` SIZE bytes from offset
//! 0), then the label area, then pmemvm's identity block ([`crate::nvdimm::identity`]).
//! Nothing the user owns is changed unless asked: an existing file must have
//! exactly that length (never truncated or grown; a file of pmemvm 0.1's
//! layout gets [`BackingError::OldLayout`] with the command that converts
//! it), a read-only file needs `readonly`, and a file this module created is
//! removed again if the VM cannot be set up. The only write to an existing
//! file is its identity block, when that block is still all zero.

use std::fs::File;
use std::io::ErrorKind;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use vm_memory::MmapRegion;

use crate::config::NvdimmSpec;
use crate::memory::hugepages::{fs_kind, FsKind};
use crate::nvdimm::identity::{self, geometry_text, Block, Identity};

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
    #[error("NVDIMM backing file {path} is {actual} bytes but --nvdimm {wanted_text} needs a file of {wanted} bytes (the region, then the label area and pmemvm's 4 KiB identity page); pmemvm never resizes an existing file — give the size it was made for or another path")]
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
    /// A file of pmemvm 0.1's layout (labels inside the file's last bytes).
    #[error("NVDIMM backing file {path} is {actual} bytes, the layout of pmemvm 0.1, which kept the labels in the file's last {label} bytes and gave the guest a smaller region; pmemvm now gives the guest exactly {wanted_text} and keeps the labels after it: run `truncate -s {wanted} {path}` to keep the first {wanted_text} as the region (old namespace labels are not carried over; see docs/nvdimm.md, \"Backing files of pmemvm 0.1\")")]
    OldLayout {
        /// Path.
        path: PathBuf,
        /// Size on disk.
        actual: u64,
        /// Label bytes asked for.
        label: u64,
        /// The new file length.
        wanted: u64,
        /// Region size as typed.
        wanted_text: String,
    },
    /// A pmemvm backing file made for another geometry.
    #[error("NVDIMM backing file {path} was made for --nvdimm {recorded}; give that size and label-size (or another path)")]
    OtherGeometry {
        /// Path.
        path: PathBuf,
        /// "1G,label-size=128K".
        recorded: String,
    },
    /// The identity block holds something pmemvm did not write.
    #[error("NVDIMM backing file {path} has the right size but its last 4 KiB are not a pmemvm identity block (bytes {offset} to the end); pmemvm will not overwrite them — give another path")]
    ForeignIdentity {
        /// Path.
        path: PathBuf,
        /// Offset of the block.
        offset: u64,
    },
    /// Two files with the same DIMM serial (one is a copy of the other).
    #[error("NVDIMM backing files {first} and {second} carry the same DIMM serial number {serial:#010x} (one is a copy of the other); Linux cannot tell their namespaces apart — use one of them per guest")]
    DuplicateIdentity {
        /// First file.
        first: String,
        /// Second file.
        second: String,
        /// The serial.
        serial: u32,
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
    /// Huge pages: hugetlbfs files, hugetlb temporary DIMMs.
    #[error(transparent)]
    Huge(#[from] crate::memory::hugepages::HugePageError),
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

impl crate::exit_status::Classified for BackingError {
    fn kind(&self) -> crate::exit_status::ErrorKind {
        use crate::exit_status::ErrorKind::*;
        match self {
            Self::Io { .. } | Self::Map { .. } => Environment,
            Self::Huge(e) => e.kind(),
            _ => Usage,
        }
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
    /// The DIMM serial number recorded in the file's identity block; `None`
    /// for temporary DIMMs and read-only files without one (order-based).
    pub serial: Option<u32>,
    /// The file system the file is on (decides the page size it can get).
    pub fs: FsKind,
    /// A file this process created (removed again if setup fails).
    created: Created,
}

impl NvdimmBacking {
    /// Opens (or creates) and locks the backing file of `spec`.
    pub fn open(spec: &NvdimmSpec) -> Result<Self, BackingError> {
        let backing = match &spec.file {
            Some(path) => Self::open_path(spec, path)?,
            None => Self::open_temporary(spec)?,
        };
        let mut backing = backing;
        if backing.fs != FsKind::Hugetlbfs {
            backing.fs = fs_kind(&backing.file);
        }
        backing.lock()?;
        if spec.prealloc {
            backing.preallocate()?;
        }
        if spec.file.is_some() {
            backing.serial = backing.identity()?;
        } else {
            backing.init_labels()?;
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
        // hugetlbfs: label-size=0 only, the length rounded up to 2 MiB.
        let want = crate::memory::hugepages::backing_len(spec, path)?;
        let opened = open_named(path, want, spec.readonly).map_err(|e| {
            let path = path.to_path_buf();
            match e {
                NamedFileError::IsDirectory => BackingError::IsDirectory(path),
                NamedFileError::NotRegular => BackingError::NotRegular(path),
                NamedFileError::WrongSize { actual } => wrong_size(spec, &path, actual, want),
                NamedFileError::ReadOnlyFile => BackingError::ReadOnlyFile(path),
                NamedFileError::ReadOnlyMissing => BackingError::ReadOnlyMissing(path),
                NamedFileError::MissingParent => BackingError::MissingParent(path),
                NamedFileError::Io(source) => BackingError::Io {
                    path: path.display().to_string(),
                    source,
                },
            }
        })?;
        Ok(Self::from_opened(spec, opened, FsKind::Other))
    }

    fn open_temporary(spec: &NvdimmSpec) -> Result<Self, BackingError> {
        if spec.hugepages {
            let file = crate::memory::hugepages::temporary_file(spec.file_len())?;
            let opened = Opened {
                file,
                display: "(temporary, hugetlb)".into(),
                created: Created::default(),
            };
            return Ok(Self::from_opened(spec, opened, FsKind::Hugetlbfs));
        }
        let opened = open_temporary(spec.file_len()).map_err(|(dir, source)| BackingError::Io {
            path: dir.display().to_string(),
            source,
        })?;
        Ok(Self::from_opened(spec, opened, FsKind::Other))
    }

    fn from_opened(spec: &NvdimmSpec, opened: Opened, fs: FsKind) -> Self {
        Self {
            spec: spec.clone(),
            file: Arc::new(opened.file),
            display: opened.display,
            serial: None,
            fs,
            created: opened.created,
        }
    }

    fn lock(&self) -> Result<(), BackingError> {
        match try_lock(&self.file, self.spec.readonly) {
            Ok(true) => Ok(()),
            Ok(false) => Err(BackingError::Locked(self.display.clone().into())),
            Err(e) => Err((self.io())(e)),
        }
    }

    /// Reads the identity block of a named file (the lock is held), writing
    /// a new one when it is still all zero and the DIMM is writable.
    fn identity(&self) -> Result<Option<u32>, BackingError> {
        let path = PathBuf::from(&self.display);
        let offset = self.spec.identity_offset();
        match identity::read_at(&self.file, offset).map_err(self.io())? {
            Block::Valid(id) => {
                if id.region_size != self.spec.size || id.label_size != self.spec.label_size {
                    return Err(BackingError::OtherGeometry {
                        path,
                        recorded: geometry_text(&id),
                    });
                }
                Ok(Some(id.serial))
            }
            Block::Foreign => Err(BackingError::ForeignIdentity { path, offset }),
            Block::Empty if self.spec.readonly => {
                log::info!(
                    "NVDIMM backing file {} has no identity block yet (read-only): order-based serial",
                    self.display
                );
                Ok(None)
            }
            Block::Empty => {
                let id = Identity::new_random(self.spec.size, self.spec.label_size)
                    .map_err(self.io())?;
                // A DIMM pmemvm has not seen before: labels as on a new NVDIMM.
                self.init_labels()?;
                if self.fs == FsKind::Hugetlbfs {
                    // hugetlbfs has no write(2): through a mapping of its page.
                    crate::memory::hugepages::write_through_mapping(
                        &self.file,
                        offset,
                        &id.encode(),
                    )
                } else {
                    identity::write_at(&self.file, offset, &id)
                }
                .map_err(self.io())?;
                Ok(Some(id.serial))
            }
        }
    }

    /// Writes an empty label index ([`crate::nvdimm::label_index`]) into a label
    /// area that is still all zero, so the guest sees a labelled DIMM with
    /// no namespace and its whole region free (as `ndctl init-labels` leaves
    /// it). A label area with anything in it is the user's and is left alone.
    fn init_labels(&self) -> Result<(), BackingError> {
        init_empty_labels(&self.file, &self.spec)
            .map(|_| ())
            .map_err(self.io())
    }

    /// Maps the guest's region (`spec.spa_size()` bytes
    /// from offset 0) `MAP_SHARED`, read-only when the DIMM is.
    pub fn map(&self) -> Result<MmapRegion, BackingError> {
        // hugetlb: no MAP_NORESERVE, so the pages are reserved now (counted
        // up front by `hugepages::check`) and never missing mid-run.
        let hugetlb = self.fs == FsKind::Hugetlbfs;
        map_shared(
            &self.file,
            self.spec.spa_size(),
            self.spec.readonly,
            hugetlb,
        )
        .map_err(|e| match e {
            MapError::TooLarge => BackingError::Io {
                path: self.display.clone(),
                source: std::io::Error::from(ErrorKind::InvalidInput),
            },
            MapError::Mmap(source) => BackingError::Map {
                path: self.display.clone(),
                source,
            },
        })
    }

    /// Keeps a created file when the VM was set up successfully.
    pub fn keep(&mut self) {
        self.created.keep();
    }

    /// Syncs the file's data to stable storage (writable DIMMs only).
    pub fn sync(&self) -> std::io::Result<()> {
        if self.spec.readonly {
            return Ok(());
        }
        self.file.sync_data()
    }
}

/// Takes pmemvm's lock on a backing file or disk without waiting: exclusive,
/// or shared for a read-only one (read-only users share a file, a writer has
/// it alone); the nested engine takes the same lock on the host. `Ok(false)` when another process holds a conflicting lock.
pub fn try_lock(file: &File, readonly: bool) -> std::io::Result<bool> {
    let op = if readonly {
        libc::LOCK_SH
    } else {
        libc::LOCK_EX
    };
    // SAFETY: flock only reads the fd, which `file` keeps open.
    let rc = unsafe { libc::flock(file.as_raw_fd(), op | libc::LOCK_NB) };
    if rc == 0 {
        return Ok(true);
    }
    let e = std::io::Error::last_os_error();
    if e.kind() == ErrorKind::WouldBlock {
        Ok(false)
    } else {
        Err(e)
    }
}

mod file;
mod geometry;
pub mod legacy;
mod set;

use file::{map_shared, open_named, open_temporary, Created, MapError, NamedFileError, Opened};
use geometry::wrong_size;
pub use legacy::{LegacyBackingError, LegacyPmemBacking};
pub use set::{open_all, space_report};

/// Writes an empty, valid label index into the label area of `spec`'s file
/// when that area is still all zero (a new DIMM), so the guest sees a
/// labelled DIMM with no namespace and its whole region free, as `ndctl
/// init-labels` leaves it; a label area with anything in it is the user's and
/// is left alone, as are read-only and label-less DIMMs. Returns whether it
/// wrote. Every engine calls this, so a new DIMM looks the same on each.
pub fn init_empty_labels(file: &File, spec: &NvdimmSpec) -> std::io::Result<bool> {
    use std::os::unix::fs::FileExt;
    if spec.readonly || spec.label_size == 0 {
        return Ok(false);
    }
    let Some(index) = crate::nvdimm::label_index::empty_index(spec.label_size) else {
        return Ok(false);
    };
    let len = usize::try_from(spec.label_size).map_err(|_| {
        std::io::Error::new(
            ErrorKind::InvalidInput,
            "label area larger than this host's address space",
        )
    })?;
    let mut area = vec![0u8; len];
    file.read_exact_at(&mut area, spec.label_offset())?;
    if area.iter().any(|&b| b != 0) {
        return Ok(false);
    }
    // Durable like every label write (the guest's go through _DSM + fdatasync).
    if crate::memory::hugepages::fs_kind(file) == FsKind::Hugetlbfs {
        // hugetlbfs has no write(2): through a mapping of the tail's page.
        crate::memory::hugepages::write_through_mapping(file, spec.label_offset(), &index)?;
    } else {
        file.write_all_at(&index, spec.label_offset())?;
    }
    file.sync_data()?;
    Ok(true)
}

#[cfg(test)]
mod tests;
