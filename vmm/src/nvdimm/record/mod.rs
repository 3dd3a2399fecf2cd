//! The flush recorder of `--nvdimm ...,record=DIR`: power loss at every
//! flush, written down while the guest runs.
//!
//! The DIMM's memslot has KVM's dirty logging on. At each guest flush (a
//! write to the DIMM's flush hint, which Linux's `nvdimm_flush()` does on
//! REQ_PREFLUSH/FUA, fsync and `dax_writeback`) the recorder takes the pages
//! the guest stored to since the previous flush from KVM's dirty log and
//! appends them to DIR/flush.log as one epoch, before the vCPU goes on; at
//! exit the stores after the last flush become the tail. DIR/base.img is the
//! DIMM file as it was when the VM started, so the file after flush N is
//! base.img with epochs 1..=N applied ([`images`]). The format is in
//! [`log`]; docs/crash-consistency.md says what it means and where it ends.

pub mod images;
pub mod instant;
pub mod log;
pub mod sparse;
pub mod torn;

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use kvm_ioctls::VmFd;

use self::log::{EpochHead, Header, KIND_END, KIND_EPOCH, KIND_HEADER, KIND_TAIL, PAGE};

/// Errors starting or writing a recording. Each names the directory or file.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    /// DIR exists and holds files.
    #[error("record={0} is not empty; a recording needs a new or empty directory (pmemvm never mixes two recordings or removes files it did not write)")]
    NotEmpty(PathBuf),
    /// DIR is a file.
    #[error("record={0} is not a directory; give a new or empty directory")]
    NotADirectory(PathBuf),
    /// DIR cannot be created or written.
    #[error("record={path} cannot be used: {why}; give a directory pmemvm can create and write")]
    NotWritable {
        /// The directory.
        path: PathBuf,
        /// What failed.
        why: String,
    },
    /// A read-only DIMM.
    #[error("record= needs a writable DIMM: {0} is mapped read-only, so the guest can store nothing to record")]
    ReadOnly(String),
    /// Writing the log or reading the DIMM failed while recording.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The cause.
        source: std::io::Error,
    },
    /// KVM's dirty log could not be read.
    #[error("KVM_GET_DIRTY_LOG on the DIMM's memory slot failed: {0}")]
    DirtyLog(kvm_ioctls::Error),
    /// The vCPUs could not be stopped for an epoch.
    #[error("{0}")]
    Quiesce(devices::store_gate::GateError),
}

impl crate::exit_status::Classified for RecordError {
    fn kind(&self) -> crate::exit_status::ErrorKind {
        use crate::exit_status::ErrorKind::*;
        match self {
            Self::Io { .. } | Self::DirtyLog(_) | Self::Quiesce(_) => Environment,
            _ => Usage,
        }
    }
}

/// Checks `dir` before anything of the user's is created: new (its parent
/// exists) or an empty directory.
pub fn check_dir(dir: &Path) -> Result<(), RecordError> {
    match std::fs::read_dir(dir) {
        Ok(mut entries) => match entries.next() {
            None => Ok(()),
            Some(_) => Err(RecordError::NotEmpty(dir.to_path_buf())),
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let parent = match dir.parent() {
                Some(p) if !p.as_os_str().is_empty() => p,
                _ => Path::new("."),
            };
            match parent.is_dir() {
                true => Ok(()),
                false => Err(RecordError::NotWritable {
                    path: dir.to_path_buf(),
                    why: format!("its parent {} is not a directory", parent.display()),
                }),
            }
        }
        Err(_) if dir.exists() && !dir.is_dir() => {
            Err(RecordError::NotADirectory(dir.to_path_buf()))
        }
        Err(e) => Err(RecordError::NotWritable {
            path: dir.to_path_buf(),
            why: e.to_string(),
        }),
    }
}

/// One DIMM's recording.
#[derive(Debug)]
pub struct FlushRecorder {
    vm: Arc<VmFd>,
    slot: u32,
    region_size: u64,
    file_size: u64,
    dimm: Arc<File>,
    dimm_display: String,
    start: Instant,
    state: Mutex<State>,
    /// Pages the disks wrote since the last epoch (KVM's dirty log sees only
    /// the vCPUs' stores).
    dma_dirty: Mutex<std::collections::BTreeSet<u64>>,
    /// Stops every store while an epoch is taken.
    instant: Arc<instant::EpochGate>,
    /// The guest's view of the region (its mapping of the file), where the
    /// pages are copied from.
    region: vm_memory::GuestMemoryMmap,
}

#[derive(Debug)]
struct State {
    log: BufWriter<File>,
    log_path: PathBuf,
    epochs: u64,
    meta: Vec<u8>,
    ended: bool,
}

/// Removes a directory this module created when the start fails.
struct Created(Option<PathBuf>);

impl Drop for Created {
    fn drop(&mut self) {
        if let Some(d) = self.0.take() {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

impl FlushRecorder {
    /// Starts recording DIMM `dimm` (mapped at memory slot `slot`, which
    /// has dirty logging on) into `dir`: creates it if needed, copies the
    /// file as base.img and writes the log's header.
    pub fn start(
        dir: &Path,
        vm: Arc<VmFd>,
        slot: u32,
        dimm: Arc<File>,
        dimm_display: &str,
        mapping: &vm_memory::mmap::MmapRegion,
        instant: Arc<instant::EpochGate>,
    ) -> Result<Self, RecordError> {
        let region_size = mapping.size() as u64;
        // The pages are read where the guest stores them: a file system
        // whose read(2) does not see a shared mapping's stores before they
        // are written back (9p with cache=mmap, some FUSE ones) would give
        // older pages than the guest's.
        let region = devices::virtio::dma::DmaMemory::ram(&vm_memory::GuestMemoryMmap::default())
            .with_range(0, mapping)
            .map_err(|e| RecordError::Io {
                what: format!("viewing the mapping of {dimm_display}"),
                source: std::io::Error::other(e),
            })?
            .readable;
        check_dir(dir)?;
        let not_writable = |e: std::io::Error| RecordError::NotWritable {
            path: dir.to_path_buf(),
            why: e.to_string(),
        };
        let mut created = Created(None);
        if !dir.exists() {
            std::fs::create_dir(dir).map_err(not_writable)?;
            created.0 = Some(dir.to_path_buf());
        }
        let io = |what: String| move |source| RecordError::Io { what, source };
        let log_path = dir.join(log::LOG_FILE);
        let base_path = dir.join(log::BASE_FILE);
        let new_file = |p: &Path| {
            OpenOptions::new()
                .write(true)
                .read(true)
                .create_new(true)
                .open(p)
        };
        let log_file = new_file(&log_path).map_err(not_writable)?;
        // From here on the files are ours: a failure removes them.
        let mut ours = RemoveOnFail(vec![log_path.clone(), base_path.clone()], true);
        let base = new_file(&base_path).map_err(not_writable)?;
        let file_size = dimm
            .metadata()
            .map_err(io(format!("reading the size of {dimm_display}")))?
            .len();
        sparse::copy(&dimm, &base, file_size).map_err(io(format!(
            "copying {dimm_display} to {}",
            base_path.display()
        )))?;
        base.sync_data()
            .map_err(io(format!("syncing {}", base_path.display())))?;
        let mut log = BufWriter::new(log_file);
        let header = Header::new(dimm_display.to_string(), region_size, file_size);
        let json = serde_json::to_vec(&header).map_err(|e| RecordError::Io {
            what: "writing the log header".into(),
            source: std::io::Error::other(e),
        })?;
        log.write_all(log::MAGIC)
            .and_then(|()| log.write_all(&log::frame(KIND_HEADER, &json)))
            .and_then(|()| log.flush())
            .map_err(io(format!("writing {}", log_path.display())))?;
        let mut meta =
            vec![0u8; usize::try_from(file_size.saturating_sub(region_size)).unwrap_or(0)];
        dimm.read_exact_at(&mut meta, region_size)
            .map_err(io(format!("reading the label area of {dimm_display}")))?;
        ours.1 = false;
        created.0 = None;
        Ok(Self {
            vm,
            slot,
            region_size,
            file_size,
            dimm,
            dimm_display: dimm_display.to_string(),
            start: Instant::now(),
            state: Mutex::new(State {
                log,
                log_path,
                epochs: 0,
                meta,
                ended: false,
            }),
            dma_dirty: Mutex::default(),
            instant,
            region,
        })
    }

    /// The gate the DIMM's user-space writers (disks, label writes) hold.
    pub fn store_gate(&self) -> Arc<devices::store_gate::StoreGate> {
        self.instant.store_gate()
    }

    /// Flushes recorded so far.
    pub fn epochs(&self) -> u64 {
        self.state.lock().map_or(0, |s| s.epochs)
    }

    /// At exit: the stores after the last flush as the tail, the end
    /// record, and the log synced. Later calls do nothing.
    pub fn finish(&self) -> Result<(), RecordError> {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if s.ended {
            return Ok(());
        }
        s.ended = true;
        let number = s.epochs + 1;
        self.append(&mut s, KIND_TAIL, number, u32::MAX)?;
        let end = serde_json::json!({ "epochs": s.epochs }).to_string();
        let path = s.log_path.display().to_string();
        s.log
            .write_all(&log::frame(KIND_END, end.as_bytes()))
            .and_then(|()| s.log.flush())
            .and_then(|()| s.log.get_ref().sync_data())
            .map_err(|source| RecordError::Io {
                what: format!("ending {path}"),
                source,
            })
    }

    /// Reads the dirty pages and appends one frame of `kind`.
    fn append(&self, s: &mut State, kind: u32, number: u64, vcpu: u32) -> Result<(), RecordError> {
        let size = usize::try_from(self.region_size).unwrap_or(usize::MAX);
        let bitmap = self
            .vm
            .get_dirty_log(self.slot, size)
            .map_err(RecordError::DirtyLog)?;
        let pages = self.region_size / PAGE as u64;
        let mut dirty = std::mem::take(
            &mut *self
                .dma_dirty
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        dirty.extend(bitmap.iter().enumerate().flat_map(|(w, &word)| {
            (0..64u64)
                .filter(move |b| word & (1 << b) != 0)
                .map(move |b| w as u64 * 64 + b)
        }));
        let indexes: Vec<u64> = dirty.into_iter().filter(|&i| i < pages).collect();
        let mut meta = vec![0u8; s.meta.len()];
        self.dimm
            .read_exact_at(&mut meta, self.region_size)
            .map_err(|source| RecordError::Io {
                what: format!("reading the label area of {}", self.dimm_display),
                source,
            })?;
        let meta_changed = meta != s.meta;
        let meta_len = if meta_changed { meta.len() } else { 0 };
        let head = EpochHead {
            number,
            time_ns: u64::try_from(self.start.elapsed().as_nanos()).unwrap_or(u64::MAX),
            vcpu,
            pages: u32::try_from(indexes.len()).unwrap_or(u32::MAX),
            meta_len: u32::try_from(meta_len).unwrap_or(0),
        };
        let io = |what: String| move |source| RecordError::Io { what, source };
        // The payload streams through the CRC: an epoch can be the whole DIMM.
        let head_bytes = log::epoch_payload(&head, &indexes, &[], &[]);
        let payload_len =
            head_bytes.len() as u64 + indexes.len() as u64 * PAGE as u64 + meta_len as u64;
        let mut frame_head = Vec::with_capacity(12);
        frame_head.extend_from_slice(&kind.to_le_bytes());
        frame_head.extend_from_slice(&payload_len.to_le_bytes());
        let mut crc = crc32fast::Hasher::new();
        let log_name = s.log_path.display().to_string();
        let mut put = |log: &mut BufWriter<File>, bytes: &[u8]| {
            crc.update(bytes);
            log.write_all(bytes)
        };
        put(&mut s.log, &frame_head).map_err(io(format!("writing {log_name}")))?;
        put(&mut s.log, &head_bytes).map_err(io(format!("writing {log_name}")))?;
        let mut page = vec![0u8; PAGE];
        for &i in &indexes {
            vm_memory::Bytes::read_slice(
                &self.region,
                &mut page,
                vm_memory::GuestAddress(i * PAGE as u64),
            )
            .map_err(|e| RecordError::Io {
                what: format!("reading page {i} of {}", self.dimm_display),
                source: std::io::Error::other(e),
            })?;
            put(&mut s.log, &page).map_err(io(format!("writing {log_name}")))?;
        }
        if meta_changed {
            put(&mut s.log, &meta).map_err(io(format!("writing {log_name}")))?;
            s.meta = meta;
        }
        let sum = crc.finalize();
        s.log
            .write_all(&sum.to_le_bytes())
            .and_then(|()| s.log.flush())
            .map_err(io(format!("writing {log_name}")))?;
        if kind == KIND_EPOCH {
            s.epochs = number;
        }
        Ok(())
    }

    /// The whole file's size when recording started.
    pub fn file_size(&self) -> u64 {
        self.file_size
    }
}

impl devices::virtio::dma::DmaWriteWatcher for FlushRecorder {
    fn wrote(&self, offset: u64, len: u64) {
        if len == 0 {
            return;
        }
        let first = offset / PAGE as u64;
        let last = offset.saturating_add(len - 1) / PAGE as u64;
        self.dma_dirty
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .extend(first..=last);
    }

    fn store_gate(&self) -> Option<Arc<devices::store_gate::StoreGate>> {
        Some(self.instant.store_gate())
    }
}

impl devices::nvdimm::FlushObserver for FlushRecorder {
    fn flushed(&self) -> Result<(), String> {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if s.ended {
            return Ok(());
        }
        let number = s.epochs + 1;
        let vcpu = current_vcpu();
        // Every vCPU out of the guest and every device store done, from the
        // dirty log's read to the last page's copy: the epoch is one instant.
        let appended = match self.instant.quiesce() {
            Ok(_quiesced) => self.append(&mut s, KIND_EPOCH, number, vcpu),
            Err(e) => Err(RecordError::Quiesce(e)),
        };
        if appended.is_err() {
            // The log ends where the error left it: a frame after a cut one would
            // hide every complete flush from `crash-images --partial`.
            s.ended = true;
        }
        appended.map_err(|e| e.to_string())
    }
}

/// The vCPU whose thread this is (threads are named `vcpuN`), or `u32::MAX`.
fn current_vcpu() -> u32 {
    std::thread::current()
        .name()
        .and_then(|n| n.strip_prefix("vcpu"))
        .and_then(|n| n.parse().ok())
        .unwrap_or(u32::MAX)
}

/// Removes the listed files on drop while `.1` is true.
struct RemoveOnFail(Vec<PathBuf>, bool);

impl Drop for RemoveOnFail {
    fn drop(&mut self) {
        if self.1 {
            for p in &self.0 {
                let _ = std::fs::remove_file(p);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(name: &str) -> PathBuf {
        crate::fresh_test_dir(&format!("rec-{name}"))
    }

    #[test]
    fn the_directory_must_be_new_or_empty_and_a_directory() {
        let d = tmp("dir");
        assert!(check_dir(&d).is_ok());
        assert!(check_dir(&d.join("new")).is_ok());
        let e = check_dir(&d.join("no/such/parent"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("parent") && e.contains("is not a directory"),
            "{e}"
        );
        std::fs::write(d.join("f"), b"x").unwrap();
        let e = check_dir(&d).unwrap_err().to_string();
        assert!(e.contains("is not empty"), "{e}");
        let e = check_dir(&d.join("f")).unwrap_err().to_string();
        assert!(e.contains("is not a directory"), "{e}");
        assert_eq!(std::fs::read(d.join("f")).unwrap(), b"x");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn vcpu_threads_are_named_by_index() {
        assert_eq!(current_vcpu(), u32::MAX);
        let got = std::thread::Builder::new()
            .name("vcpu7".into())
            .spawn(current_vcpu)
            .unwrap()
            .join()
            .unwrap();
        assert_eq!(got, 7);
    }
}
