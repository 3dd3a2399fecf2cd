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

/// Which option a backing file of this layout belongs to: the words its
/// messages use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FileKind {
    /// `--nvdimm`.
    #[default]
    Nvdimm,
    /// `--cxl-pmem` (the same layout: capacity, label area, identity page).
    CxlPmem,
}

impl FileKind {
    /// The option, as typed.
    pub fn option(self) -> &'static str {
        match self {
            Self::Nvdimm => "--nvdimm",
            Self::CxlPmem => "--cxl-pmem",
        }
    }

    /// What a file that cannot be written can do instead.
    fn read_only_hint(self) -> &'static str {
        match self {
            Self::Nvdimm => "add ',readonly' to use it read-only",
            Self::CxlPmem => "give a file pmemvm may write (--cxl-pmem has no read-only mode)",
        }
    }
}

impl std::fmt::Display for FileKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Nvdimm => "NVDIMM backing file",
            Self::CxlPmem => "--cxl-pmem backing file",
        })
    }
}

/// Errors opening or mapping a backing file.
#[derive(Debug, thiserror::Error)]
pub enum BackingError {
    /// What is wrong with a backing file of `kind`.
    #[error("{kind} {cause}")]
    File {
        /// Whose file.
        kind: FileKind,
        /// What is wrong.
        cause: FileCause,
    },
    /// Huge pages: hugetlbfs files, hugetlb temporary DIMMs.
    #[error(transparent)]
    Huge(#[from] crate::memory::hugepages::HugePageError),
}

impl BackingError {
    /// `cause` of a file of `kind`.
    pub fn of(kind: FileKind, cause: FileCause) -> Self {
        Self::File { kind, cause }
    }

    /// What is wrong with the file (`None` for huge-page errors).
    pub fn cause(&self) -> Option<&FileCause> {
        match self {
            Self::File { cause, .. } => Some(cause),
            Self::Huge(_) => None,
        }
    }
}

/// What is wrong with a backing file; each message follows the file's kind
/// ("NVDIMM backing file " or "--cxl-pmem backing file ").
#[derive(Debug, thiserror::Error)]
pub enum FileCause {
    /// The path is a directory.
    #[error("{0} is a directory; give a path to a regular file")]
    IsDirectory(PathBuf),
    /// The path is a device, FIFO or socket.
    #[error("{0} is not a regular file; give a path to a regular file")]
    NotRegular(PathBuf),
    /// The existing file's size differs from the requested one.
    #[error("{path} is {actual} bytes but {wanted_text} needs a file of {wanted} bytes (the device's memory, then the label area and pmemvm's 4 KiB identity page); pmemvm never resizes an existing file — give the size it was made for or another path")]
    WrongSize {
        /// Path.
        path: PathBuf,
        /// Size on disk.
        actual: u64,
        /// Requested size.
        wanted: u64,
        /// The option and size as typed ("--nvdimm 1G").
        wanted_text: String,
    },
    /// A file of pmemvm 0.1's layout (labels inside the file's last bytes).
    #[error("{path} is {actual} bytes, the layout of pmemvm 0.1, which kept the labels in the file's last {label} bytes and gave the guest a smaller region; pmemvm now gives the guest exactly {wanted_text} and keeps the labels after it: run `truncate -s {wanted} {path}` to keep the first {wanted_text} as the region (old namespace labels are not carried over; see docs/nvdimm.md, \"Backing files of pmemvm 0.1\")")]
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
    #[error("{path} was made for {recorded}; give that size and label-size (or another path)")]
    OtherGeometry {
        /// Path.
        path: PathBuf,
        /// "--nvdimm 1G,label-size=128K".
        recorded: String,
    },
    /// The identity block holds something pmemvm did not write.
    #[error("{path} has the right size but its last 4 KiB are not a pmemvm identity block (bytes {offset} to the end); pmemvm will not overwrite them — give another path")]
    ForeignIdentity {
        /// Path.
        path: PathBuf,
        /// Offset of the block.
        offset: u64,
    },
    /// Two files with the same serial (one is a copy of the other).
    #[error("{second} carries the serial number {serial:#010x} of {first} (one is a copy of the other); Linux cannot tell their namespaces apart — use one of them per guest")]
    DuplicateIdentity {
        /// First file.
        first: String,
        /// Second file.
        second: String,
        /// The serial.
        serial: u32,
    },
    /// The file cannot be opened for writing.
    #[error("{path} is not writable; {hint}")]
    ReadOnlyFile {
        /// Path.
        path: PathBuf,
        /// What to do instead.
        hint: &'static str,
    },
    /// `readonly` for a file that does not exist.
    #[error("{0} does not exist; a readonly DIMM needs an existing file")]
    ReadOnlyMissing(PathBuf),
    /// The parent directory is missing.
    #[error("{0} cannot be created: its directory does not exist")]
    MissingParent(PathBuf),
    /// Another process holds the lock.
    #[error("{0} is in use by another pmemvm (it holds the file's lock)")]
    Locked(PathBuf),
    /// The same file given twice.
    #[error("{0} is given more than once")]
    Duplicate(PathBuf),
    /// Not enough space for `prealloc`.
    #[error("{path} cannot be preallocated ({size} bytes): {source}")]
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
    #[error("{path}: {source}")]
    Io {
        /// Path.
        path: String,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// mmap failed.
    #[error("{path} cannot be mapped into memory: {source}")]
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
            Self::File {
                cause: FileCause::Io { .. } | FileCause::Map { .. },
                ..
            } => Environment,
            Self::Huge(e) => e.kind(),
            Self::File { .. } => Usage,
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
    /// Whose file it is (the words of its messages).
    pub kind: FileKind,
    /// A file this process created (removed again if setup fails).
    created: Created,
}

impl NvdimmBacking {
    /// Opens (or creates) and locks the backing file of `spec`.
    pub fn open(spec: &NvdimmSpec) -> Result<Self, BackingError> {
        Self::open_as(spec, FileKind::Nvdimm)
    }

    /// [`Self::open`] for a file of `kind`: its messages name that option,
    /// and a `--cxl-pmem` file's new label area is left all zero (as a new
    /// CXL memory device's; `ndctl init-labels` writes its index).
    pub fn open_as(spec: &NvdimmSpec, kind: FileKind) -> Result<Self, BackingError> {
        let backing = match &spec.file {
            Some(path) => Self::open_path(spec, path, kind)?,
            None => Self::open_temporary(spec, kind)?,
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

    /// An error of this file.
    pub(crate) fn fail(&self, cause: FileCause) -> BackingError {
        BackingError::of(self.kind, cause)
    }

    fn io(&self) -> impl Fn(std::io::Error) -> BackingError + '_ {
        move |source| {
            self.fail(FileCause::Io {
                path: self.display.clone(),
                source,
            })
        }
    }

    fn open_path(spec: &NvdimmSpec, path: &Path, kind: FileKind) -> Result<Self, BackingError> {
        // hugetlbfs: label-size=0 only, the length rounded up to 2 MiB.
        let want = crate::memory::hugepages::backing_len(spec, path)?;
        let opened = open_named(path, want, spec.readonly).map_err(|e| {
            let path = path.to_path_buf();
            let cause = match e {
                NamedFileError::IsDirectory => FileCause::IsDirectory(path),
                NamedFileError::NotRegular => FileCause::NotRegular(path),
                NamedFileError::WrongSize { actual } => wrong_size(spec, kind, &path, actual, want),
                NamedFileError::ReadOnlyFile => FileCause::ReadOnlyFile {
                    path,
                    hint: kind.read_only_hint(),
                },
                NamedFileError::ReadOnlyMissing => FileCause::ReadOnlyMissing(path),
                NamedFileError::MissingParent => FileCause::MissingParent(path),
                NamedFileError::Io(source) => FileCause::Io {
                    path: path.display().to_string(),
                    source,
                },
            };
            BackingError::of(kind, cause)
        })?;
        Ok(Self::from_opened(spec, opened, FsKind::Other, kind))
    }

    fn open_temporary(spec: &NvdimmSpec, kind: FileKind) -> Result<Self, BackingError> {
        if spec.hugepages {
            let file = crate::memory::hugepages::temporary_file(spec.file_len())?;
            let opened = Opened {
                file,
                display: "(temporary, hugetlb)".into(),
                created: Created::default(),
            };
            return Ok(Self::from_opened(spec, opened, FsKind::Hugetlbfs, kind));
        }
        let opened = open_temporary(spec.file_len()).map_err(|(dir, source)| {
            BackingError::of(
                kind,
                FileCause::Io {
                    path: dir.display().to_string(),
                    source,
                },
            )
        })?;
        Ok(Self::from_opened(spec, opened, FsKind::Other, kind))
    }

    fn from_opened(spec: &NvdimmSpec, opened: Opened, fs: FsKind, kind: FileKind) -> Self {
        Self {
            spec: spec.clone(),
            file: Arc::new(opened.file),
            display: opened.display,
            serial: None,
            fs,
            kind,
            created: opened.created,
        }
    }

    fn lock(&self) -> Result<(), BackingError> {
        match try_lock(&self.file, self.spec.readonly) {
            Ok(true) => Ok(()),
            Ok(false) => Err(self.fail(FileCause::Locked(self.display.clone().into()))),
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
                    return Err(self.fail(FileCause::OtherGeometry {
                        path,
                        recorded: format!("{} {}", self.kind.option(), geometry_text(&id)),
                    }));
                }
                Ok(Some(id.serial))
            }
            Block::Foreign => Err(self.fail(FileCause::ForeignIdentity { path, offset })),
            Block::Empty if self.spec.readonly => {
                log::info!(
                    "{} {} has no identity block yet (read-only): order-based serial",
                    self.kind,
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
        if self.kind == FileKind::CxlPmem {
            return Ok(());
        }
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
        .map_err(|e| {
            self.fail(match e {
                MapError::TooLarge => FileCause::Io {
                    path: self.display.clone(),
                    source: std::io::Error::from(ErrorKind::InvalidInput),
                },
                MapError::Mmap(source) => FileCause::Map {
                    path: self.display.clone(),
                    source,
                },
            })
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
pub use set::{open_all, open_all_as, space_report};

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
