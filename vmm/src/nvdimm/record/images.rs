//! Crash images from a flush log (`pmemvm crash-images`): the DIMM file as
//! power loss right after flush N would leave it — base.img with epochs
//! 1..=N applied — and, with a seed, a torn variant of each that also holds
//! a random subset of the 64-byte lines stored after flush N (what reaches
//! the media of a platform whose caches drain in no promised order before
//! the next flush). The same log and seed give the same bytes.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use super::log::{EpochEntry, FlushLog, LogError, PAGE};
use super::sparse;
pub use super::torn::TornSpec;
use super::torn::{tear, TearError};

/// Which flushes get an image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Selection {
    /// Every flush, and flush 0 (power lost before the first flush).
    All,
    /// Only flush N.
    At(u64),
    /// Flushes 0, K, 2K, ... and the last.
    Every(u64),
}

impl Selection {
    fn wants(self, n: u64, last: u64) -> bool {
        match self {
            Selection::All => true,
            Selection::At(at) => n == at,
            Selection::Every(k) => n.is_multiple_of(k.max(1)) || n == last,
        }
    }
}

/// Errors making images. Each names the value or file.
#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    /// The log cannot be used.
    #[error(transparent)]
    Log(#[from] LogError),
    /// OUT exists and holds files.
    #[error("--out {0} is not empty; crash images go into a new or empty directory (pmemvm never overwrites files it did not write)")]
    OutNotEmpty(PathBuf),
    /// OUT cannot be created.
    #[error("--out {path} cannot be used: {why}; give a directory pmemvm can create and write")]
    OutUnusable {
        /// The directory.
        path: PathBuf,
        /// What failed.
        why: String,
    },
    /// `--at` past the log's last flush.
    #[error("--at {at} is past the last flush of {log}, which recorded flushes 1 to {last} (0 is the state before the first); give --at from 0 to {last}")]
    AtPastEnd {
        /// What was asked.
        at: u64,
        /// The log.
        log: PathBuf,
        /// Its last flush.
        last: u64,
    },
    /// `--every 0`.
    #[error("--every 0 is not valid; give a number of flushes from 1 up")]
    EveryZero,
    /// Reading or writing failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The cause.
        source: std::io::Error,
    },
}

impl crate::exit_status::Classified for ImageError {
    fn kind(&self) -> crate::exit_status::ErrorKind {
        use crate::exit_status::ErrorKind::*;
        match self {
            Self::Io { .. } => Environment,
            _ => Usage,
        }
    }
}

impl From<TearError> for ImageError {
    fn from(e: TearError) -> Self {
        match e {
            TearError::Log(l) => Self::Log(l),
            TearError::Io(source) => Self::Io {
                what: "writing a torn crash image".into(),
                source,
            },
        }
    }
}

/// One image in the manifest.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ImageInfo {
    /// The flush after which power was lost (0: before the first).
    pub flush: u64,
    /// Its file, in OUT.
    pub file: String,
    /// Nanoseconds from the recording's start to that flush.
    pub time_ns: u64,
    /// The vCPU that flushed (`None` for flush 0 or an unknown thread).
    pub vcpu: Option<u32>,
    /// The torn variant, with `--torn`.
    pub torn: Option<TornInfo>,
}

/// A torn variant: which later lines it holds.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TornInfo {
    /// Its file, in OUT.
    pub file: String,
    /// The seed it was drawn with.
    pub seed: u64,
    /// Bytes a store is torn at: 64 (a cache line, the default) or 8 (the
    /// pmem driver's stores), 16 or 32.
    #[serde(default = "super::torn::default_granule")]
    pub granule: u64,
    /// Where the later stores come from: "flush N+1" or "tail".
    pub from: String,
    /// Pieces of `granule` bytes stored after the flush (different from the image).
    pub lines_after: u64,
    /// Byte offsets in the region of the pieces this variant holds.
    pub lines_applied: Vec<u64>,
}

/// What `crash-images` wrote (OUT/images.json).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Manifest {
    /// The recorded DIMM.
    pub dimm: String,
    /// Bytes of its region.
    pub region_size: u64,
    /// Its last recorded flush.
    pub last_flush: u64,
    /// False when the log was used with --partial.
    pub complete: bool,
    /// Where and why reading the log stopped before its end record.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cut: Option<String>,
    /// The images.
    pub images: Vec<ImageInfo>,
}

/// The manifest's file name in OUT.
pub const MANIFEST: &str = "images.json";

/// What to make.
#[derive(Debug, Clone)]
pub struct Request {
    /// The record directory.
    pub dir: PathBuf,
    /// Where images go (new or empty).
    pub out: PathBuf,
    /// Which flushes.
    pub select: Selection,
    /// Torn variants: the seed and the granule.
    pub torn: Option<TornSpec>,
    /// Accept a log without its end record.
    pub partial: bool,
}

/// Opens the log of `req` and checks its selection against it.
fn open_checked(req: &Request) -> Result<FlushLog, ImageError> {
    if req.select == Selection::Every(0) {
        return Err(ImageError::EveryZero);
    }
    let log = FlushLog::open(&req.dir, req.partial)?;
    let last = log.last();
    if let Selection::At(at) = req.select {
        if at > last {
            return Err(ImageError::AtPastEnd {
                at,
                log: log.path.clone(),
                last,
            });
        }
    }
    Ok(log)
}

/// The flushes `req` selects, in order, as [`write`] would make their
/// images; writes nothing (`crash-check --slurm` gives each its own task).
pub fn plan(req: &Request) -> Result<Vec<u64>, ImageError> {
    let last = open_checked(req)?.last();
    Ok((0..=last).filter(|&n| req.select.wants(n, last)).collect())
}

/// Writes the images `req` asks for and their manifest; returns the manifest.
pub fn write(req: &Request) -> Result<Manifest, ImageError> {
    write_each(req, |_, _| Ok::<(), ImageError>(()))
}

/// [`write`], calling `each` with every image (and its torn variant) and
/// the recorded DIMM's region size as soon as the image is written, before
/// the next is made — so a caller can use an image and remove it, and
/// hundreds of images of a large DIMM never need room at once. An error of
/// `each` ends the run as an error of the images does: what this call
/// wrote into OUT is removed.
pub fn write_each<E: From<ImageError>>(
    req: &Request,
    mut each: impl FnMut(&ImageInfo, u64) -> Result<(), E>,
) -> Result<Manifest, E> {
    let mut log = open_checked(req)?;
    let last = log.last();
    let created = prepare_out(&req.out)?;
    let mut guard = OutGuard {
        out: req.out.clone(),
        created,
        files: Vec::new(),
        armed: true,
    };
    let io = |what: String| move |source| ImageError::Io { what, source };
    let work_path = req.out.join(".work.img");
    let work = new_file(&work_path).map_err(io(format!("creating {}", work_path.display())))?;
    guard.files.push(work_path.clone());
    let base = File::open(&log.base).map_err(io(format!("opening {}", log.base.display())))?;
    let size = log.header.file_size;
    sparse::copy(&base, &work, size).map_err(io(format!("copying {}", log.base.display())))?;
    let mut images = Vec::new();
    let epochs = log.epochs.clone();
    for n in 0..=last {
        let entry = match n {
            0 => None,
            _ => epochs.get(usize::try_from(n - 1).unwrap_or(usize::MAX)),
        };
        if let Some(e) = entry {
            apply(&mut log, e, &work)?;
        }
        if !req.select.wants(n, last) {
            continue;
        }
        let name = format!("flush-{n:06}.img");
        let path = req.out.join(&name);
        copy_to(&work, &path, size, &mut guard)?;
        let torn = match req.torn {
            None => None,
            Some(spec) => Some(torn_image(&mut log, &epochs, n, spec, &work, &mut guard)?),
        };
        let info = ImageInfo {
            flush: n,
            file: name,
            time_ns: entry.map_or(0, |e| e.head.time_ns),
            vcpu: entry.and_then(|e| (e.head.vcpu != u32::MAX).then_some(e.head.vcpu)),
            torn,
        };
        each(&info, log.header.region_size)?;
        images.push(info);
    }
    drop(work);
    std::fs::remove_file(&work_path).map_err(io(format!("removing {}", work_path.display())))?;
    guard.files.retain(|p| p != &work_path);
    let manifest = Manifest {
        dimm: log.header.dimm.clone(),
        region_size: log.header.region_size,
        last_flush: last,
        complete: log.complete,
        cut: log.cut.clone(),
        images,
    };
    let json = serde_json::to_vec_pretty(&manifest).map_err(|e| ImageError::Io {
        what: "writing the manifest".into(),
        source: std::io::Error::other(e),
    })?;
    let mpath = req.out.join(MANIFEST);
    std::fs::write(&mpath, json).map_err(io(format!("writing {}", mpath.display())))?;
    guard.armed = false;
    Ok(manifest)
}

/// The torn variant of image `n`: a copy of it holding the seeded subset of
/// the next epoch's (or the tail's) lines.
fn torn_image(
    log: &mut FlushLog,
    epochs: &[EpochEntry],
    n: u64,
    TornSpec { seed, granule }: TornSpec,
    work: &File,
    guard: &mut OutGuard,
) -> Result<TornInfo, ImageError> {
    let size = log.header.file_size;
    let next = epochs
        .get(usize::try_from(n).unwrap_or(usize::MAX))
        .map(|e| (e.clone(), format!("flush {}", n + 1)))
        .or_else(|| log.tail.clone().map(|t| (t, "tail".to_string())));
    let torn_name = format!("flush-{n:06}-torn.img");
    let torn_path = guard.out.join(&torn_name);
    let torn_file = copy_to(work, &torn_path, size, guard)?;
    let (lines_after, lines_applied) = match &next {
        Some((e, _)) => {
            let seed_n = seed ^ n.wrapping_mul(0x9e37_79b9_7f4a_7c15);
            tear(log, e, work, &torn_file, seed_n, granule).map_err(ImageError::from)?
        }
        None => (0, Vec::new()),
    };
    Ok(TornInfo {
        file: torn_name,
        seed,
        granule: granule as u64,
        from: next.map_or_else(
            || "nothing (no stores after it were recorded)".into(),
            |(_, f)| f,
        ),
        lines_after,
        lines_applied,
    })
}

/// Applies epoch `e`'s pages and label-area bytes to `work`.
fn apply(log: &mut FlushLog, e: &EpochEntry, work: &File) -> Result<(), ImageError> {
    let io = |what: &str| {
        let what = what.to_string();
        move |source| ImageError::Io { what, source }
    };
    let indexes = log.indexes(e)?;
    let mut page = vec![0u8; PAGE];
    for (i, &idx) in indexes.iter().enumerate() {
        log.page(e, i, &mut page)?;
        work.write_all_at(&page, idx * PAGE as u64)
            .map_err(io("writing a crash image"))?;
    }
    let meta = log.meta(e)?;
    if !meta.is_empty() {
        work.write_all_at(&meta, log.header.region_size)
            .map_err(io("writing a crash image's label area"))?;
    }
    Ok(())
}

fn new_file(p: &Path) -> std::io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(p)
}

/// A sparse copy of `work` at `path`, remembered for removal on failure.
fn copy_to(work: &File, path: &Path, size: u64, guard: &mut OutGuard) -> Result<File, ImageError> {
    let f = new_file(path).map_err(|source| ImageError::Io {
        what: format!("creating {}", path.display()),
        source,
    })?;
    guard.files.push(path.to_path_buf());
    sparse::copy(work, &f, size).map_err(|source| ImageError::Io {
        what: format!("writing {}", path.display()),
        source,
    })?;
    Ok(f)
}

/// OUT must be new (its parent existing) or empty; true when it was created.
fn prepare_out(out: &Path) -> Result<bool, ImageError> {
    let unusable = |why: String| ImageError::OutUnusable {
        path: out.to_path_buf(),
        why,
    };
    match std::fs::read_dir(out) {
        Ok(mut entries) => match entries.next() {
            None => Ok(false),
            Some(_) => Err(ImageError::OutNotEmpty(out.to_path_buf())),
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => std::fs::create_dir(out)
            .map(|()| true)
            .map_err(|e| unusable(e.to_string())),
        Err(_) if out.exists() && !out.is_dir() => Err(unusable("it is not a directory".into())),
        Err(e) => Err(unusable(e.to_string())),
    }
}

/// Removes what a failed run wrote into OUT (and OUT, when it made it).
struct OutGuard {
    out: PathBuf,
    created: bool,
    files: Vec<PathBuf>,
    armed: bool,
}

impl Drop for OutGuard {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        for f in &self.files {
            let _ = std::fs::remove_file(f);
        }
        if self.created {
            let _ = std::fs::remove_dir(&self.out);
        }
    }
}

#[cfg(test)]
#[path = "images_tests.rs"]
mod tests;
