//! Backing files of legacy persistent memory (`--pmem-legacy`): a file of
//! exactly the range's size (offset *n* of the file is byte *n* of the
//! range; no label area, no identity page — an e820 region has neither),
//! created sparse when missing, never resized, locked like an NVDIMM's
//! ([`super::try_lock`]) and mapped `MAP_SHARED` into a KVM memslot.
//! A file this module created is removed again if the VM cannot be set up.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use vm_memory::MmapRegion;

use super::file::{
    map_shared, open_named, open_temporary, Created, MapError, NamedFileError, Opened,
};
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
    /// A file this process created (removed again if setup fails).
    created: Created,
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
        let opened = open_named(path, spec.size, spec.readonly).map_err(|e| {
            let path = path.to_path_buf();
            let (wanted, size) = (spec.size, size_text(spec.size));
            match e {
                NamedFileError::IsDirectory => LegacyBackingError::IsDirectory(path),
                NamedFileError::NotRegular => LegacyBackingError::NotRegular(path),
                NamedFileError::WrongSize { actual } if actual < wanted => {
                    LegacyBackingError::TooSmall {
                        path,
                        actual,
                        wanted,
                        size,
                    }
                }
                NamedFileError::WrongSize { actual } => LegacyBackingError::TooLarge {
                    path,
                    actual,
                    wanted,
                    size,
                },
                NamedFileError::ReadOnlyFile => LegacyBackingError::ReadOnlyFile(path),
                NamedFileError::ReadOnlyMissing => LegacyBackingError::ReadOnlyMissing(path),
                NamedFileError::MissingParent => LegacyBackingError::MissingParent(path),
                NamedFileError::Io(source) => LegacyBackingError::Io {
                    path: path.display().to_string(),
                    source,
                },
            }
        })?;
        Ok(Self::from_opened(spec, opened))
    }

    fn open_temporary(spec: &LegacyPmemSpec) -> Result<Self, LegacyBackingError> {
        let opened = open_temporary(spec.size).map_err(|(dir, source)| LegacyBackingError::Io {
            path: dir.display().to_string(),
            source,
        })?;
        Ok(Self::from_opened(spec, opened))
    }

    fn from_opened(spec: &LegacyPmemSpec, opened: Opened) -> Self {
        Self {
            spec: spec.clone(),
            file: Arc::new(opened.file),
            display: opened.display,
            created: opened.created,
        }
    }

    /// Maps the whole file `MAP_SHARED` (read-only for `readonly`).
    pub fn map(&self) -> Result<MmapRegion, LegacyBackingError> {
        map_shared(&self.file, self.spec.size, self.spec.readonly, false).map_err(|e| match e {
            MapError::TooLarge => LegacyBackingError::Io {
                path: self.display.clone(),
                source: std::io::Error::from(std::io::ErrorKind::InvalidInput),
            },
            MapError::Mmap(source) => LegacyBackingError::Map {
                path: self.display.clone(),
                source,
            },
        })
    }

    /// Keeps a created file when the VM was set up successfully.
    pub fn keep(&mut self) {
        self.created.keep();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exit_status::Classified;
    use std::os::unix::fs::MetadataExt;

    fn tmpdir(name: &str) -> PathBuf {
        crate::fresh_test_dir(&format!("legacy-{name}"))
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
