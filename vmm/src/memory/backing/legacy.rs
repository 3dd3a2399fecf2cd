//! Backing files of legacy persistent memory (`--pmem-legacy`): a file of
//! exactly the range's size (offset *n* of the file is byte *n* of the
//! range; no label area, no identity page — an e820 region has neither),
//! created sparse when missing, never resized, locked like an NVDIMM's
//! ([`super::try_lock`]) and mapped `MAP_SHARED` into a KVM memslot.
//! A file this module created is removed again if the VM cannot be set up.

use std::fs::{File, OpenOptions};
use std::io::ErrorKind;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use vm_memory::mmap::MmapRegionBuilder;
use vm_memory::{FileOffset, MmapRegion};

use super::set::FileKey;
use crate::config::{size_text, LegacyPmemSpec, NvdimmSpec};

/// Errors opening or mapping a legacy persistent-memory backing file.
#[derive(Debug, thiserror::Error)]
pub enum LegacyBackingError {
    /// The path is a directory.
    #[error("--pmem-legacy backing file {0} is a directory; give a path to a regular file")]
    IsDirectory(PathBuf),
    /// The path is a device, FIFO or socket.
    #[error("--pmem-legacy backing file {0} is not a regular file; give a path to a regular file")]
    NotRegular(PathBuf),
    /// An existing file shorter than the range.
    #[error("--pmem-legacy backing file {path} is {actual} bytes, smaller than the {wanted} bytes of --pmem-legacy {size}; pmemvm never resizes an existing file — give the size it was made for or another path")]
    TooSmall {
        /// Path.
        path: PathBuf,
        /// Size on disk.
        actual: u64,
        /// The range's size.
        wanted: u64,
        /// The range's size as `--pmem-legacy` spells it.
        size: String,
    },
    /// An existing file longer than the range.
    #[error("--pmem-legacy backing file {path} is {actual} bytes, larger than the {wanted} bytes of --pmem-legacy {size}; pmemvm never truncates an existing file — give the size it was made for or another path")]
    TooLarge {
        /// Path.
        path: PathBuf,
        /// Size on disk.
        actual: u64,
        /// The range's size.
        wanted: u64,
        /// The range's size as `--pmem-legacy` spells it.
        size: String,
    },
    /// The file cannot be opened for writing.
    #[error("--pmem-legacy backing file {0} is not writable; add ',readonly' to use it read-only")]
    ReadOnlyFile(PathBuf),
    /// `readonly` for a file that does not exist.
    #[error(
        "--pmem-legacy backing file {0} does not exist; a readonly range needs an existing file"
    )]
    ReadOnlyMissing(PathBuf),
    /// The parent directory is missing.
    #[error("--pmem-legacy backing file {0} cannot be created: its directory does not exist")]
    MissingParent(PathBuf),
    /// Another process holds the lock.
    #[error(
        "--pmem-legacy backing file {0} is in use by another pmemvm (it holds the file's lock)"
    )]
    Locked(PathBuf),
    /// The same file given twice (for two ranges, or a range and an NVDIMM).
    #[error(
        "--pmem-legacy backing file {0} is given more than once (for another range or an --nvdimm)"
    )]
    Duplicate(PathBuf),
    /// Any other I/O error.
    #[error("--pmem-legacy backing file {path}: {source}")]
    Io {
        /// Path.
        path: String,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// mmap failed.
    #[error("mapping --pmem-legacy backing file {path} into memory failed: {source}")]
    Map {
        /// Path.
        path: String,
        /// Cause.
        #[source]
        source: vm_memory::mmap::MmapRegionError,
    },
}

impl crate::exit_status::Classified for LegacyBackingError {
    fn kind(&self) -> crate::exit_status::ErrorKind {
        use crate::exit_status::ErrorKind::*;
        match self {
            Self::Io { .. } | Self::Map { .. } => Environment,
            _ => Usage,
        }
    }
}

/// An open, locked backing file of one legacy range.
#[derive(Debug)]
pub struct LegacyPmemBacking {
    /// What the user asked for.
    pub spec: LegacyPmemSpec,
    /// The open file.
    pub file: Arc<File>,
    /// The path for messages ("(temporary in DIR)" for unnamed files).
    pub display: String,
    /// Path of a file this process created (removed again if setup fails).
    created: Option<PathBuf>,
}

/// Refuses a `file=` that names the same file as another legacy range or
/// an NVDIMM, before any file is opened or created.
pub fn check_paths(
    legacy: &[LegacyPmemSpec],
    nvdimms: &[NvdimmSpec],
) -> Result<(), LegacyBackingError> {
    let mut seen: Vec<FileKey> = nvdimms
        .iter()
        .filter_map(|n| n.file.as_deref())
        .map(FileKey::of)
        .collect();
    for path in legacy.iter().filter_map(|s| s.file.as_ref()) {
        let key = FileKey::of(path);
        if seen.contains(&key) {
            return Err(LegacyBackingError::Duplicate(path.clone()));
        }
        seen.push(key);
    }
    Ok(())
}

/// Opens every range's file (see [`LegacyPmemBacking::open`]); on an error
/// the files created so far are removed again.
pub fn open_all(specs: &[LegacyPmemSpec]) -> Result<Vec<LegacyPmemBacking>, LegacyBackingError> {
    specs.iter().map(LegacyPmemBacking::open).collect()
}

impl LegacyPmemBacking {
    /// Opens (or creates) and locks the backing file of `spec`.
    pub fn open(spec: &LegacyPmemSpec) -> Result<Self, LegacyBackingError> {
        let backing = match &spec.file {
            Some(path) => Self::open_path(spec, path)?,
            None => Self::open_temporary(spec)?,
        };
        match super::try_lock(&backing.file, spec.readonly) {
            Ok(true) => Ok(backing),
            Ok(false) => Err(LegacyBackingError::Locked(backing.display.clone().into())),
            Err(source) => Err(LegacyBackingError::Io {
                path: backing.display.clone(),
                source,
            }),
        }
    }

    fn open_path(spec: &LegacyPmemSpec, path: &Path) -> Result<Self, LegacyBackingError> {
        let io = |source| LegacyBackingError::Io {
            path: path.display().to_string(),
            source,
        };
        let named = |file: File, created: Option<PathBuf>| Self {
            spec: spec.clone(),
            file: Arc::new(file),
            display: path.display().to_string(),
            created,
        };
        match std::fs::metadata(path) {
            Ok(md) => {
                let ft = md.file_type();
                if ft.is_dir() {
                    return Err(LegacyBackingError::IsDirectory(path.into()));
                }
                if !ft.is_file() || ft.is_block_device() {
                    return Err(LegacyBackingError::NotRegular(path.into()));
                }
                let (actual, wanted, size) = (md.len(), spec.size, size_text(spec.size));
                let path = path.to_path_buf();
                if actual < wanted {
                    return Err(LegacyBackingError::TooSmall {
                        path,
                        actual,
                        wanted,
                        size,
                    });
                }
                if actual > wanted {
                    return Err(LegacyBackingError::TooLarge {
                        path,
                        actual,
                        wanted,
                        size,
                    });
                }
                let file = OpenOptions::new()
                    .read(true)
                    .write(!spec.readonly)
                    .custom_flags(libc::O_CLOEXEC)
                    .open(&path)
                    .map_err(|e| match e.kind() {
                        ErrorKind::PermissionDenied | ErrorKind::ReadOnlyFilesystem => {
                            LegacyBackingError::ReadOnlyFile(path.clone())
                        }
                        _ => io(e),
                    })?;
                Ok(named(file, None))
            }
            Err(e) if e.kind() == ErrorKind::NotFound => {
                if spec.readonly {
                    return Err(LegacyBackingError::ReadOnlyMissing(path.into()));
                }
                let parent = path.parent().filter(|p| !p.as_os_str().is_empty());
                if parent.is_some_and(|p| !p.is_dir()) {
                    return Err(LegacyBackingError::MissingParent(path.into()));
                }
                let file = OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create_new(true)
                    .mode(0o644)
                    .custom_flags(libc::O_CLOEXEC)
                    .open(path)
                    .map_err(io)?;
                // From here on the Drop of `backing` removes the file again.
                let backing = named(file, Some(path.into()));
                backing.file.set_len(spec.size).map_err(io)?;
                Ok(backing)
            }
            Err(e) => Err(io(e)),
        }
    }

    fn open_temporary(spec: &LegacyPmemSpec) -> Result<Self, LegacyBackingError> {
        let dir = std::env::temp_dir();
        let io = |source| LegacyBackingError::Io {
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

    /// Maps the whole file `MAP_SHARED` (read-only for `readonly`).
    pub fn map(&self) -> Result<MmapRegion, LegacyBackingError> {
        let size = usize::try_from(self.spec.size).map_err(|_| LegacyBackingError::Io {
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
            .map_err(|source| LegacyBackingError::Map {
                path: self.display.clone(),
                source,
            })
    }

    /// Keeps a created file when the VM was set up successfully.
    pub fn keep(&mut self) {
        self.created = None;
    }
}

impl Drop for LegacyPmemBacking {
    fn drop(&mut self) {
        if let Some(path) = self.created.take() {
            let _ = std::fs::remove_file(path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exit_status::Classified;
    use std::os::unix::fs::MetadataExt;

    fn tmpdir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("pmemvm-legacy-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn spec(s: &str) -> LegacyPmemSpec {
        s.parse().unwrap()
    }

    #[test]
    fn creates_an_exact_sparse_file_and_removes_it_unless_kept() {
        let d = tmpdir("create");
        let p = d.join("e820.img");
        let s = spec(&format!("256M,file={}", p.display()));
        let b = LegacyPmemBacking::open(&s).unwrap();
        let md = std::fs::metadata(&p).unwrap();
        assert_eq!(md.len(), 256 << 20, "exactly the range, nothing after it");
        assert_eq!(md.blocks(), 0, "sparse");
        drop(b);
        assert!(!p.exists(), "a file of a failed setup is removed");
        let mut b = LegacyPmemBacking::open(&s).unwrap();
        b.keep();
        let m = b.map().unwrap();
        assert_eq!(m.size(), 256 << 20);
        // A store through the mapping is at the same offset of the file.
        // SAFETY: offset 0x10_0000 + 8 is inside the live 256 MiB mapping `m`.
        unsafe {
            m.as_ptr()
                .add(0x10_0000)
                .cast::<u64>()
                .write_unaligned(0x1122_3344);
        };
        drop((m, b));
        let bytes = std::fs::read(&p).unwrap();
        assert_eq!(&bytes[0x10_0000..0x10_0004], &0x1122_3344u32.to_le_bytes());
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn refuses_wrong_sizes_and_kinds_untouched() {
        let d = tmpdir("refuse");
        let small = d.join("small.img");
        std::fs::write(&small, vec![7u8; 4096]).unwrap();
        let e =
            LegacyPmemBacking::open(&spec(&format!("16M,file={}", small.display()))).unwrap_err();
        assert!(
            matches!(e, LegacyBackingError::TooSmall { actual: 4096, .. }),
            "{e}"
        );
        assert!(
            e.is_usage()
                && e.to_string()
                    .contains("smaller than the 16777216 bytes of --pmem-legacy 16M"),
            "{e}"
        );
        assert_eq!(std::fs::read(&small).unwrap(), vec![7u8; 4096], "untouched");
        let big = d.join("big.img");
        File::create(&big).unwrap().set_len(32 << 20).unwrap();
        let e = LegacyPmemBacking::open(&spec(&format!("16M,file={}", big.display()))).unwrap_err();
        assert!(matches!(e, LegacyBackingError::TooLarge { .. }), "{e}");
        assert_eq!(std::fs::metadata(&big).unwrap().len(), 32 << 20);
        let e = LegacyPmemBacking::open(&spec(&format!("16M,file={}", d.display()))).unwrap_err();
        assert!(matches!(e, LegacyBackingError::IsDirectory(_)), "{e}");
        let e = LegacyPmemBacking::open(&spec("16M,file=/dev/null")).unwrap_err();
        assert!(matches!(e, LegacyBackingError::NotRegular(_)), "{e}");
        let missing = d.join("no/such/x.img");
        let e =
            LegacyPmemBacking::open(&spec(&format!("16M,file={}", missing.display()))).unwrap_err();
        assert!(matches!(e, LegacyBackingError::MissingParent(_)), "{e}");
        let e = LegacyPmemBacking::open(&spec(&format!("16M,file={}/x.img,readonly", d.display())))
            .unwrap_err();
        assert!(matches!(e, LegacyBackingError::ReadOnlyMissing(_)), "{e}");
        assert!(!d.join("x.img").exists());
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn one_writer_or_many_readers_and_no_file_twice() {
        let d = tmpdir("lock");
        let p = d.join("c.img");
        let s = spec(&format!("16M,file={}", p.display()));
        let mut a = LegacyPmemBacking::open(&s).unwrap();
        a.keep();
        let e = LegacyPmemBacking::open(&s).unwrap_err();
        assert!(matches!(e, LegacyBackingError::Locked(_)), "{e}");
        drop(a);
        let ro = spec(&format!("16M,file={},readonly", p.display()));
        let r1 = LegacyPmemBacking::open(&ro).unwrap();
        let r2 = LegacyPmemBacking::open(&ro).unwrap();
        assert!(matches!(
            LegacyPmemBacking::open(&s),
            Err(LegacyBackingError::Locked(_))
        ));
        assert_eq!(r1.map().unwrap().size(), 16 << 20);
        drop((r1, r2));
        // Twice, or once as an NVDIMM's file: refused before anything is opened.
        assert!(matches!(
            check_paths(&[s.clone(), s.clone()], &[]),
            Err(LegacyBackingError::Duplicate(_))
        ));
        let dimm: NvdimmSpec = format!("16M,file={}", p.display()).parse().unwrap();
        assert!(matches!(
            check_paths(std::slice::from_ref(&s), &[dimm]),
            Err(LegacyBackingError::Duplicate(_))
        ));
        assert!(check_paths(&[s, spec("16M"), spec("16M")], &[]).is_ok());
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn temporary_ranges_have_no_name() {
        let b = LegacyPmemBacking::open(&LegacyPmemSpec::temporary(16 << 20)).unwrap();
        assert_eq!(b.file.metadata().unwrap().len(), 16 << 20);
        assert!(b.display.starts_with("(temporary in "));
        assert_eq!(b.map().unwrap().size(), 16 << 20);
    }
}
