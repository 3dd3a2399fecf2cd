//! The media state of each DIMM at start and at an orderly end: bad ranges
//! (`badblocks=` and those the guest injected in earlier runs), health
//! injections and the unsafe shutdown count
//! ([`devices::nvdimm_media`] holds the state and its on-disk block).
//!
//! The block is the second half of the backing file's identity page
//! ([`crate::nvdimm::identity`]): it goes wherever the file goes, like the labels
//! and the serial, needs no second file to lock or to forget in a copy, and
//! is outside the guest's reach. Unsafe shutdowns are counted as on a real
//! NVDIMM: the dirty flag is set (and synced) when pmemvm starts on the
//! file and cleared only after the final fdatasync of an orderly end
//! ([`mark_clean`]). A start that finds the flag still set — the previous
//! run was killed, or the host crashed — adds one to the count and reports
//! the last shutdown as dirty.
//!
//! Temporary DIMMs, files on hugetlbfs (no `write(2)` there) and read-only
//! files keep their state in memory for the run (a read-only file's
//! recorded state is read, never written).

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use devices::nvdimm_media::{
    DimmMedia, FileMedia, MediaState, MediaStore, FLAG_DIRTY, FLAG_LAST_SHUTDOWN_DIRTY,
    MEDIA_BLOCK_OFFSET, MEDIA_BLOCK_SIZE,
};

pub use devices::nvdimm_media::{MediaState as State, MEDIA_BLOCK_SIZE as BLOCK_SIZE};

use crate::config::size_text;
use crate::layout;
use crate::memory::backing::NvdimmBacking;
use crate::nvdimm::identity::{self, Block, Identity};

/// Errors reading or starting a DIMM's media state.
#[derive(Debug, thiserror::Error)]
pub enum MediaSetupError {
    /// The media block holds something pmemvm did not write.
    #[error("NVDIMM backing file {path} has a damaged media-state block (bytes {offset} to {end} of its identity page: bad ranges, health and unsafe shutdown count); pmemvm will not overwrite it — restore the file or give another path")]
    Damaged {
        /// Path.
        path: String,
        /// File offset of the block.
        offset: u64,
        /// One past its end.
        end: u64,
    },
    /// A `badblocks=` range the DIMM cannot record.
    #[error("NVDIMM backing file {path}: badblocks= {why}")]
    BadRanges {
        /// Path.
        path: String,
        /// What went wrong.
        why: String,
    },
    /// The file is not a pmemvm backing file (for `pmemvm nvdimm badblocks`).
    #[error("{path} is not a pmemvm NVDIMM backing file (its last 4 KiB are not a pmemvm identity page); give a file pmemvm made")]
    NotBacking {
        /// Path.
        path: PathBuf,
    },
    /// `pmemvm nvdimm badblocks` on a path that does not exist.
    #[error("NVDIMM backing file {0} does not exist; give the file=PATH of an --nvdimm")]
    Missing(PathBuf),
    /// I/O.
    #[error("NVDIMM backing file {path}: {source}")]
    Io {
        /// Path.
        path: String,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
}

impl crate::exit_status::Classified for MediaSetupError {
    fn kind(&self) -> crate::exit_status::ErrorKind {
        use crate::exit_status::ErrorKind::*;
        match self {
            Self::Io { .. } => Environment,
            _ => Usage,
        }
    }
}

/// File offset of the media block of `backing`'s file.
fn block_offset(identity_offset: u64) -> u64 {
    identity_offset + MEDIA_BLOCK_OFFSET as u64
}

/// Reads the media block at `offset` of `file` (`path` for messages).
fn read_block(file: &File, offset: u64, path: &str) -> Result<MediaState, MediaSetupError> {
    let mut b = vec![0u8; MEDIA_BLOCK_SIZE];
    file.read_exact_at(&mut b, offset)
        .map_err(|source| MediaSetupError::Io {
            path: path.to_string(),
            source,
        })?;
    match MediaState::decode(&b) {
        Ok(state) => Ok(state.unwrap_or_default()),
        Err(()) => Err(MediaSetupError::Damaged {
            path: path.to_string(),
            offset,
            end: offset + MEDIA_BLOCK_SIZE as u64,
        }),
    }
}

/// The media of the DIMM `backing` at guest base `base` with NFIT `handle`,
/// started: a file-backed writable DIMM with an identity counts an unsafe
/// previous shutdown, records `badblocks=`, sets its dirty flag and syncs
/// all that before the guest runs.
/// `guard` keeps what the file held, for a setup that fails later.
pub fn start(
    backing: &NvdimmBacking,
    handle: u32,
    base: u64,
    guard: &mut SetupGuard,
) -> Result<Arc<DimmMedia>, MediaSetupError> {
    let spec = &backing.spec;
    let path = backing.display.clone();
    // hugetlbfs has no write(2) (and rounds the file up): its state lasts for the run.
    let persistent = spec.file.is_some()
        && backing.serial.is_some()
        && backing.fs != crate::memory::hugepages::FsKind::Hugetlbfs;
    let offset = block_offset(spec.identity_offset());
    let mut state = if persistent {
        read_block(&backing.file, offset, &path)?
    } else {
        MediaState::default()
    };
    let found = state.clone();
    for (o, l) in &spec.badblocks {
        state
            .add_bad(*o, *l, spec.size)
            .map_err(|e| MediaSetupError::BadRanges {
                path: path.clone(),
                why: e.to_string(),
            })?;
    }
    let store: Option<Box<dyn MediaStore>> = if persistent && !spec.readonly {
        let dirty = state.has(FLAG_DIRTY);
        if dirty {
            state.shutdown_count = state.shutdown_count.saturating_add(1);
            log::info!(
                "NVDIMM backing file {path}: the previous run did not end in order; unsafe shutdown count now {}",
                state.shutdown_count
            );
        }
        state.set(FLAG_LAST_SHUTDOWN_DIRTY, dirty);
        state.set(FLAG_DIRTY, true);
        let file = backing
            .file
            .try_clone()
            .map_err(|source| MediaSetupError::Io {
                path: path.clone(),
                source,
            })?;
        let store = FileMedia { file, offset };
        store.save(&state).map_err(|source| MediaSetupError::Io {
            path: path.clone(),
            source,
        })?;
        Some(Box::new(store))
    } else {
        None
    };
    let saved = store.is_some();
    let media = Arc::new(DimmMedia::new(handle, base, spec.spa_size(), state, store));
    if saved {
        guard.0.push((media.clone(), found));
    }
    Ok(media)
}

/// After the final fdatasync of an orderly end: clears the dirty flag (and
/// syncs it), so the next start does not count an unsafe shutdown.
pub fn mark_clean(media: &DimmMedia) -> std::io::Result<()> {
    media
        .update(|s| {
            s.set(FLAG_DIRTY, false);
            Ok(())
        })
        .map(|_| ())
}

/// The media a VM's setup started, with the state their files held before:
/// if the setup fails after them, no guest ran, so each file gets back what
/// it held (dirty flag, unsafe shutdown count, last-shutdown flag, ranges)
/// and the next start counts exactly what this one would have.
/// [`SetupGuard::disarm`] once the VM is built.
#[derive(Debug, Default)]
pub struct SetupGuard(Vec<(Arc<DimmMedia>, MediaState)>);

impl SetupGuard {
    /// The setup succeeded: the dirty flags stay set while the guest runs.
    pub fn disarm(mut self) {
        self.0.clear();
    }
}

impl Drop for SetupGuard {
    fn drop(&mut self) {
        for (m, found) in &self.0 {
            let restored = m.update(|s| {
                *s = found.clone();
                Ok(())
            });
            if let Err(e) = restored {
                log::warn!(
                    "restoring an NVDIMM's media state after the failed setup failed ({e}); its next start may count an unsafe shutdown"
                );
            }
        }
    }
}

/// What `pmemvm nvdimm badblocks FILE` shows: the identity and media state
/// recorded in a backing file (read only; works while a VM runs on it).
pub fn read_file(path: &Path) -> Result<(Identity, MediaState), MediaSetupError> {
    let io = |source| MediaSetupError::Io {
        path: path.display().to_string(),
        source,
    };
    let file = File::open(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => MediaSetupError::Missing(path.into()),
        _ => io(e),
    })?;
    let md = file.metadata().map_err(io)?;
    let len = md.len();
    let not_ours = || MediaSetupError::NotBacking { path: path.into() };
    if !md.is_file() {
        return Err(not_ours());
    }
    let at = len
        .checked_sub(layout::NVDIMM_IDENTITY_SIZE)
        .ok_or_else(not_ours)?;
    let Block::Valid(id) = identity::read_at(&file, at).map_err(io)? else {
        return Err(not_ours());
    };
    if id.region_size + id.label_size != at {
        return Err(not_ours());
    }
    let state = read_block(&file, block_offset(at), &path.display().to_string())?;
    Ok((id, state))
}

/// The report of [`read_file`]: a comment line, then one `OFFSET+LENGTH`
/// line per bad range (bytes from the region start, the `badblocks=` syntax).
pub fn report(path: &Path, id: &Identity, s: &MediaState) -> String {
    let n = s.bad_ranges.len();
    let mut out = format!(
        "# {}: region {}, {n} bad range{}, unsafe shutdown count {}{}{}\n",
        path.display(),
        size_text(id.region_size),
        if n == 1 { "" } else { "s" },
        s.shutdown_count,
        if s.has(FLAG_LAST_SHUTDOWN_DIRTY) {
            ", last shutdown dirty"
        } else {
            ""
        },
        if s.has(FLAG_DIRTY) {
            ", in use or not ended in order"
        } else {
            ""
        },
    );
    for r in &s.bad_ranges {
        out.push_str(&format!("{}+{}\n", r.offset, r.length));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::badblocks::parse_badblocks;
    use crate::config::ConfigError;
    use crate::config::NvdimmSpec;
    use crate::exit_status::Classified;

    fn tmpdir(name: &str) -> PathBuf {
        crate::fresh_test_dir(&format!("media-{name}"))
    }

    #[test]
    fn badblocks_parse() {
        let r = 1 << 30;
        assert_eq!(
            parse_badblocks("0+512:1M+4K", r).unwrap(),
            [(0, 512), (1 << 20, 4096)]
        );
        assert_eq!(
            parse_badblocks("1073741312+512", r).unwrap(),
            [(r - 512, 512)]
        );
        for (bad, what) in [
            ("", "is not OFFSET+LEN"),
            ("4096", "is not OFFSET+LEN"),
            ("1+512", "multiple of 512"),
            ("0+100", "multiple of 512"),
            ("0+0", "is empty"),
            ("1G+512", "beyond the 1G"),
            ("x+512", "'x' is not a size"),
            ("0+512:", "is not OFFSET+LEN"),
            ("18446744073709551104+1K", "beyond"),
        ] {
            let e = parse_badblocks(bad, r).unwrap_err().to_string();
            assert!(e.contains(what), "{bad}: {e}");
            assert!(
                e.starts_with(&format!("--nvdimm badblocks={bad} is not valid")),
                "{e}"
            );
        }
        let e = "1G,badblocks=3+1".parse::<NvdimmSpec>().unwrap_err();
        assert!(matches!(e, ConfigError::BadBlocks { .. }), "{e}");
    }

    fn open(spec: &NvdimmSpec) -> (NvdimmBacking, Arc<DimmMedia>) {
        let mut b = NvdimmBacking::open(spec).unwrap();
        b.keep();
        let mut guard = SetupGuard::default();
        let m = start(&b, 1, 1 << 32, &mut guard).unwrap();
        guard.disarm();
        (b, m)
    }

    #[test]
    fn unsafe_shutdowns_are_counted_and_ranges_persist() {
        let d = tmpdir("count");
        let p = d.join("pm.img");
        let spec: NvdimmSpec = format!("16M,file={},badblocks=4K+1K", p.display())
            .parse()
            .unwrap();
        // First start: nothing to count; dirty while running.
        let (b, m) = open(&spec);
        let s = m.state();
        assert_eq!((s.shutdown_count, s.has(FLAG_DIRTY)), (0, true));
        assert!(!s.has(FLAG_LAST_SHUTDOWN_DIRTY));
        // "Killed": no mark_clean. The next start counts one.
        drop((b, m));
        let plain: NvdimmSpec = format!("16M,file={}", p.display()).parse().unwrap();
        let (b, m) = open(&plain);
        let s = m.state();
        assert_eq!(s.shutdown_count, 1);
        assert!(s.has(FLAG_LAST_SHUTDOWN_DIRTY));
        assert_eq!(s.bad_ranges.len(), 1, "badblocks= persisted");
        // Orderly end: the next start counts nothing.
        mark_clean(&m).unwrap();
        drop((b, m));
        let (id, s) = read_file(&p).unwrap();
        assert!(!s.has(FLAG_DIRTY));
        let text = report(&p, &id, &s);
        assert!(text.ends_with("\n4096+1024\n"), "{text}");
        assert!(
            text.contains("1 bad range, unsafe shutdown count 1, last shutdown dirty"),
            "{text}"
        );
        let (_b, m) = open(&plain);
        let s = m.state();
        assert_eq!(s.shutdown_count, 1);
        assert!(!s.has(FLAG_LAST_SHUTDOWN_DIRTY));
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_setup_that_fails_after_the_media_started_leaves_the_file_as_it_was() {
        let d = tmpdir("setup-guard");
        let p = d.join("pm.img");
        let spec: NvdimmSpec = format!("16M,file={}", p.display()).parse().unwrap();
        let failed_start = |spec: &NvdimmSpec| {
            let b = NvdimmBacking::open(spec).unwrap();
            let mut guard = SetupGuard::default();
            let m = start(&b, 1, 1 << 32, &mut guard).unwrap();
            assert!(m.state().has(FLAG_DIRTY));
            drop((guard, m, b)); // armed: the setup failed after the media started
        };
        // A run that was killed: the flag stays set.
        drop(open(&spec));
        let (_, killed) = read_file(&p).unwrap();
        assert!(killed.has(FLAG_DIRTY));
        // A setup that fails then gives the file back as it was...
        failed_start(&spec);
        assert_eq!(read_file(&p).unwrap().1, killed);
        // ... so the next start counts the killed run once and says so.
        let (b, m) = open(&spec);
        let s = m.state();
        assert_eq!(s.shutdown_count, 1);
        assert!(s.has(FLAG_LAST_SHUTDOWN_DIRTY));
        // After an orderly end, a failed setup counts nothing either.
        mark_clean(&m).unwrap();
        drop((b, m));
        let (_, clean) = read_file(&p).unwrap();
        failed_start(&spec);
        assert_eq!(read_file(&p).unwrap().1, clean);
        let (_b, m) = open(&spec);
        assert_eq!(m.state().shutdown_count, 1);
        assert!(!m.state().has(FLAG_LAST_SHUTDOWN_DIRTY));
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn readonly_and_damaged_blocks_are_not_written() {
        let d = tmpdir("ro");
        let p = d.join("pm.img");
        let spec: NvdimmSpec = format!("16M,file={}", p.display()).parse().unwrap();
        drop(open(&spec));
        let before = std::fs::read(&p).unwrap();
        let ro: NvdimmSpec = format!("16M,file={},readonly,badblocks=0+512", p.display())
            .parse()
            .unwrap();
        let (_b, m) = open(&ro);
        assert_eq!(m.state().bad_ranges.len(), 1);
        m.update(|s| s.add_bad(8192, 512, 16 << 20))
            .unwrap()
            .unwrap();
        drop((_b, m));
        assert!(
            std::fs::read(&p).unwrap() == before,
            "read-only file changed"
        );
        // Damage one byte of the media block: refused, file untouched.
        let f = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
        let at = spec.identity_offset() + 2048 + 30;
        f.write_all_at(&[0x77], at).unwrap();
        let damaged = std::fs::read(&p).unwrap();
        let b = NvdimmBacking::open(&spec).unwrap();
        let e = start(&b, 1, 1 << 32, &mut SetupGuard::default()).unwrap_err();
        assert!(
            e.is_usage() && e.to_string().contains("damaged media-state block"),
            "{e}"
        );
        drop(b);
        assert!(std::fs::read(&p).unwrap() == damaged);
        // A file that is not a backing file at all.
        let other = d.join("other");
        std::fs::write(&other, vec![1u8; 8192]).unwrap();
        assert!(matches!(
            read_file(&other),
            Err(MediaSetupError::NotBacking { .. })
        ));
        std::fs::remove_dir_all(&d).unwrap();
    }
}
