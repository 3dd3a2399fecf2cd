//! What every backing file of guest memory does alike — an NVDIMM's
//! ([`super::NvdimmBacking`]) and a legacy range's
//! ([`super::LegacyPmemBacking`]): open a named file of an exact length or
//! create it sparse, make a nameless temporary one, remove a file this
//! process created when setup fails, and map it `MAP_SHARED`. Each kind
//! words the failures for its own option ([`NamedFileError`]).

use std::fs::{File, OpenOptions};
use std::io::ErrorKind;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use vm_memory::mmap::{MmapRegionBuilder, MmapRegionError};
use vm_memory::{FileOffset, MmapRegion};

/// A file this process created, removed again on drop unless [`Self::keep`]
/// was called (the VM was set up).
#[derive(Debug, Default)]
pub(crate) struct Created(Option<PathBuf>);

impl Created {
    /// Keeps the file.
    pub(crate) fn keep(&mut self) {
        self.0 = None;
    }
}

impl Drop for Created {
    fn drop(&mut self) {
        if let Some(path) = self.0.take() {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// An opened backing file.
#[derive(Debug)]
pub(crate) struct Opened {
    /// The file.
    pub file: File,
    /// Its path for messages ("(temporary in DIR)" for a nameless one).
    pub display: String,
    /// Set when this process created it.
    pub created: Created,
}

/// Why a named backing file cannot be used.
#[derive(Debug)]
pub(crate) enum NamedFileError {
    /// A directory.
    IsDirectory,
    /// A device, FIFO or socket.
    NotRegular,
    /// An existing file of another length (pmemvm never resizes one).
    WrongSize {
        /// Its length.
        actual: u64,
    },
    /// It cannot be opened for writing.
    ReadOnlyFile,
    /// Read-only, and missing.
    ReadOnlyMissing,
    /// Its directory is missing.
    MissingParent,
    /// Any other I/O error.
    Io(std::io::Error),
}

/// Opens `path`, which must be a regular file of `len` bytes, or creates it
/// sparse with that length (not when `readonly`).
pub(crate) fn open_named(path: &Path, len: u64, readonly: bool) -> Result<Opened, NamedFileError> {
    let named = |file: File, created: Created| Opened {
        file,
        display: path.display().to_string(),
        created,
    };
    match std::fs::metadata(path) {
        Ok(md) => {
            let ft = md.file_type();
            if ft.is_dir() {
                return Err(NamedFileError::IsDirectory);
            }
            if !ft.is_file() || ft.is_block_device() {
                return Err(NamedFileError::NotRegular);
            }
            if md.len() != len {
                return Err(NamedFileError::WrongSize { actual: md.len() });
            }
            let file = OpenOptions::new()
                .read(true)
                .write(!readonly)
                .custom_flags(libc::O_CLOEXEC)
                .open(path)
                .map_err(|e| match e.kind() {
                    ErrorKind::PermissionDenied | ErrorKind::ReadOnlyFilesystem => {
                        NamedFileError::ReadOnlyFile
                    }
                    _ => NamedFileError::Io(e),
                })?;
            Ok(named(file, Created::default()))
        }
        Err(e) if e.kind() == ErrorKind::NotFound => {
            if readonly {
                return Err(NamedFileError::ReadOnlyMissing);
            }
            let parent = path.parent().filter(|p| !p.as_os_str().is_empty());
            if parent.is_some_and(|p| !p.is_dir()) {
                return Err(NamedFileError::MissingParent);
            }
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .mode(0o644)
                .custom_flags(libc::O_CLOEXEC)
                .open(path)
                .map_err(NamedFileError::Io)?;
            // From here on the file is removed again if anything fails.
            let opened = named(file, Created(Some(path.into())));
            opened.file.set_len(len).map_err(NamedFileError::Io)?;
            Ok(opened)
        }
        Err(e) => Err(NamedFileError::Io(e)),
    }
}

/// A nameless file of `len` bytes in the temporary directory (O_TMPFILE: no
/// exit path, not even SIGKILL, can leak it). The error names the directory.
pub(crate) fn open_temporary(len: u64) -> Result<Opened, (PathBuf, std::io::Error)> {
    let dir = std::env::temp_dir();
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_TMPFILE | libc::O_CLOEXEC)
        .mode(0o600)
        .open(&dir)
        .and_then(|file| file.set_len(len).map(|()| file));
    match file {
        Ok(file) => Ok(Opened {
            file,
            display: format!("(temporary in {})", dir.display()),
            created: Created::default(),
        }),
        Err(e) => Err((dir, e)),
    }
}

/// Why a backing file could not be mapped.
#[derive(Debug)]
pub(crate) enum MapError {
    /// The length does not fit this host's address space.
    TooLarge,
    /// mmap failed.
    Mmap(MmapRegionError),
}

/// Maps `len` bytes of `file` from offset 0 `MAP_SHARED`, read-only for
/// `readonly`; `MAP_NORESERVE` unless `hugetlb` (whose pages are then
/// reserved now, never missing mid-run).
pub(crate) fn map_shared(
    file: &Arc<File>,
    len: u64,
    readonly: bool,
    hugetlb: bool,
) -> Result<MmapRegion, MapError> {
    let size = usize::try_from(len).map_err(|_| MapError::TooLarge)?;
    let prot = if readonly {
        libc::PROT_READ
    } else {
        libc::PROT_READ | libc::PROT_WRITE
    };
    let flags = if hugetlb {
        libc::MAP_SHARED
    } else {
        libc::MAP_SHARED | libc::MAP_NORESERVE
    };
    MmapRegionBuilder::new(size)
        .with_file_offset(FileOffset::from_arc(file.clone(), 0))
        .with_mmap_prot(prot)
        .with_mmap_flags(flags)
        .with_hugetlbfs(hugetlb)
        .build()
        .map_err(MapError::Mmap)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(name: &str) -> PathBuf {
        crate::fresh_test_dir(&format!("file-{name}"))
    }

    #[test]
    fn a_created_file_is_removed_unless_kept_and_an_existing_one_never() {
        let d = dir("created");
        let p = d.join("a.img");
        drop(open_named(&p, 4096, false).unwrap());
        assert!(
            !p.exists(),
            "a file created for a VM that was not set up is removed"
        );
        let mut kept = open_named(&p, 4096, false).unwrap();
        kept.created.keep();
        drop(kept);
        assert_eq!(std::fs::metadata(&p).unwrap().len(), 4096);
        drop(open_named(&p, 4096, false).unwrap());
        assert!(p.exists(), "an existing file is the user's");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_named_file_of_another_kind_or_length_is_refused_with_its_reason() {
        let d = dir("refused");
        let p = d.join("b.img");
        std::fs::write(&p, [0u8; 512]).unwrap();
        assert!(matches!(
            open_named(&p, 4096, false),
            Err(NamedFileError::WrongSize { actual: 512 })
        ));
        assert!(matches!(
            open_named(&d, 4096, false),
            Err(NamedFileError::IsDirectory)
        ));
        assert!(matches!(
            open_named(Path::new("/dev/null"), 0, true),
            Err(NamedFileError::NotRegular)
        ));
        assert!(matches!(
            open_named(&d.join("none"), 4096, true),
            Err(NamedFileError::ReadOnlyMissing)
        ));
        assert!(matches!(
            open_named(&d.join("no/dir/c.img"), 4096, false),
            Err(NamedFileError::MissingParent)
        ));
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_temporary_file_has_its_length_and_maps_read_only_when_asked() {
        let t = open_temporary(1 << 20).unwrap();
        assert_eq!(t.file.metadata().unwrap().len(), 1 << 20);
        assert!(t.display.starts_with("(temporary in "), "{}", t.display);
        let file = Arc::new(t.file);
        let m = map_shared(&file, 1 << 20, true, false).unwrap();
        assert_eq!(m.size(), 1 << 20);
    }
}
