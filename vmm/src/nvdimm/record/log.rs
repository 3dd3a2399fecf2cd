//! The flush log's file format: what `record=` writes and `crash-images`
//! reads (docs/crash-consistency.md, "The log").
//!
//! `flush.log` starts with the 8 bytes `PMEMVMFL`, then frames:
//!
//! ```text
//! kind u32 | payload length u64 | payload | CRC-32 of kind, length and payload (u32)
//! ```
//!
//! all little-endian. Kinds: 1 the header (JSON: format, version, DIMM,
//! sizes), 2 an epoch (what one guest flush made durable), 3 the tail (the
//! stores after the last flush, taken at exit), 4 the end (JSON: the epoch
//! count). An epoch or tail payload is
//!
//! ```text
//! number u64 | time ns u64 | vCPU u32 | pages u32 | meta bytes u32 | 0 u32
//! page indexes (u64 each) | page contents (4 KiB each) | meta bytes
//! ```
//!
//! where "meta" is the backing file's bytes after the region (label area
//! and identity block), present only when they changed since the previous
//! epoch. A frame is written whole or not at all as far as a reader can
//! tell: one cut short or with a wrong CRC is where the log ends.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

/// The bytes a flush log starts with.
pub const MAGIC: &[u8; 8] = b"PMEMVMFL";
/// Page granularity of the dirty log and of epochs.
pub const PAGE: usize = 4096;
/// Cache-line granularity of torn images.
pub const LINE: usize = 64;
/// Version of the format written here.
pub const VERSION: u32 = 1;
/// The log's file name inside the record directory.
pub const LOG_FILE: &str = "flush.log";
/// The DIMM file as it was when recording started.
pub const BASE_FILE: &str = "base.img";

/// Frame kinds.
pub const KIND_HEADER: u32 = 1;
/// An epoch frame.
pub const KIND_EPOCH: u32 = 2;
/// The tail frame.
pub const KIND_TAIL: u32 = 3;
/// The end frame.
pub const KIND_END: u32 = 4;

const FRAME_HEAD: usize = 12;
const EPOCH_HEAD: usize = 32;
/// Largest payload a reader accepts (a hostile length must not make it
/// allocate without bound): 64 GiB of pages.
const MAX_PAYLOAD: u64 = 64 << 30;

/// Errors reading a flush log. Each names the file and what is wrong.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// The directory has no log or the file is not one.
    #[error("{0} is not a pmemvm flush log (record=DIR writes DIR/flush.log and DIR/base.img); give the directory a recording wrote")]
    NotALog(PathBuf),
    /// A frame whose CRC or fields are wrong before the log's end.
    #[error("flush log {path} is corrupted at byte {offset}: {why}; it cannot be used (record the run again)")]
    Corrupt {
        /// The log.
        path: PathBuf,
        /// Where the bad frame starts.
        offset: u64,
        /// What is wrong.
        why: String,
    },
    /// The log stops before its end record.
    #[error("flush log {path} ends after flush {epochs} without pmemvm's end record (pmemvm was killed while recording, or the file was cut short); give --partial to use its {epochs} complete flushes")]
    Truncated {
        /// The log.
        path: PathBuf,
        /// Complete epochs before the cut.
        epochs: u64,
    },
    /// The header does not match the base image beside it.
    #[error("flush log {path} is of a DIMM file of {logged} bytes but {base} is {actual} bytes; the log and its base image are from different DIMMs")]
    SizeMismatch {
        /// The log.
        path: PathBuf,
        /// The base image.
        base: PathBuf,
        /// File size the header names.
        logged: u64,
        /// The base image's size.
        actual: u64,
    },
    /// Reading failed.
    #[error("reading {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
}

/// The log's self-description (the header frame's JSON).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Header {
    /// Always "pmemvm flush log".
    pub format: String,
    /// [`VERSION`].
    pub version: u32,
    /// The DIMM's backing file as the user named it.
    pub dimm: String,
    /// Bytes of the guest's region (offset 0 of the file).
    pub region_size: u64,
    /// Bytes of the whole backing file (region, label area, identity block).
    pub file_size: u64,
    /// [`PAGE`].
    pub page_size: u64,
    /// [`LINE`].
    pub line_size: u64,
}

impl Header {
    /// The header of a recording of a DIMM file of these sizes.
    pub fn new(dimm: String, region_size: u64, file_size: u64) -> Self {
        Self {
            format: "pmemvm flush log".into(),
            version: VERSION,
            dimm,
            region_size,
            file_size,
            page_size: PAGE as u64,
            line_size: LINE as u64,
        }
    }
}

/// The fixed fields of an epoch or tail frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EpochHead {
    /// Flush number, from 1 (the tail: the last flush's + 1).
    pub number: u64,
    /// Nanoseconds since recording started.
    pub time_ns: u64,
    /// The flushing vCPU (`u32::MAX`: not a vCPU, e.g. the tail).
    pub vcpu: u32,
    /// Pages in the frame.
    pub pages: u32,
    /// Bytes of the file after the region carried (0: unchanged).
    pub meta_len: u32,
}

/// One frame's bytes, ready to append.
pub fn frame(kind: u32, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(FRAME_HEAD + payload.len() + 4);
    out.extend_from_slice(&kind.to_le_bytes());
    out.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    out.extend_from_slice(payload);
    let crc = crc32fast::hash(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// An epoch payload: `pages` are (index, contents) pairs, contents [`PAGE`] bytes.
pub fn epoch_payload(head: &EpochHead, indexes: &[u64], contents: &[u8], meta: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(EPOCH_HEAD + indexes.len() * 8 + contents.len() + meta.len());
    out.extend_from_slice(&head.number.to_le_bytes());
    out.extend_from_slice(&head.time_ns.to_le_bytes());
    out.extend_from_slice(&head.vcpu.to_le_bytes());
    out.extend_from_slice(&head.pages.to_le_bytes());
    out.extend_from_slice(&head.meta_len.to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
    for i in indexes {
        out.extend_from_slice(&i.to_le_bytes());
    }
    out.extend_from_slice(contents);
    out.extend_from_slice(meta);
    out
}

/// Where one epoch (or the tail) sits in the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EpochEntry {
    /// Its fixed fields.
    pub head: EpochHead,
    /// Byte offset of its payload in the log.
    pub payload_at: u64,
}

impl EpochEntry {
    fn indexes_at(&self) -> u64 {
        self.payload_at + EPOCH_HEAD as u64
    }

    fn contents_at(&self) -> u64 {
        self.indexes_at() + 8 * u64::from(self.head.pages)
    }

    fn meta_at(&self) -> u64 {
        self.contents_at() + PAGE as u64 * u64::from(self.head.pages)
    }
}

/// A flush log, checked end to end and indexed.
#[derive(Debug)]
pub struct FlushLog {
    /// The log file.
    pub path: PathBuf,
    /// The base image beside it.
    pub base: PathBuf,
    /// Its header.
    pub header: Header,
    /// Epochs 1..=N in order.
    pub epochs: Vec<EpochEntry>,
    /// The stores after the last flush, when pmemvm ended in order.
    pub tail: Option<EpochEntry>,
    /// True when the end record was read.
    pub complete: bool,
    /// Where and why reading stopped before the end record (with `partial`).
    pub cut: Option<String>,
    file: File,
}

impl FlushLog {
    /// Opens and checks `dir`'s log. A log without its end record is
    /// refused unless `partial`, then its complete epochs are used.
    pub fn open(dir: &Path, partial: bool) -> Result<Self, LogError> {
        let path = dir.join(LOG_FILE);
        let base = dir.join(BASE_FILE);
        let io = |p: &Path| {
            let p = p.to_path_buf();
            move |source| LogError::Io { path: p, source }
        };
        if !path.is_file() || !base.is_file() {
            return Err(LogError::NotALog(dir.to_path_buf()));
        }
        let mut file = File::open(&path).map_err(io(&path))?;
        let len = file.metadata().map_err(io(&path))?.len();
        let mut magic = [0u8; 8];
        if len < 8 || file.read_exact(&mut magic).is_err() || &magic != MAGIC {
            return Err(LogError::NotALog(path));
        }
        let mut scan = Scan {
            path: &path,
            partial,
            header: None,
            epochs: Vec::new(),
            tail: None,
            complete: false,
            // Before the header is read, no index can be checked (and none is there).
            region_pages: u64::MAX,
            cut: None,
        };
        let mut at = 8u64;
        while let Some((kind, size, kept)) =
            read_frame(&mut file, at, len, scan.region_pages).map_err(io(&path))?
        {
            if !scan.frame(at, kind, size, &kept)? {
                break;
            }
            at += FRAME_HEAD as u64 + size + 4;
        }
        let Scan {
            header,
            epochs,
            tail,
            complete,
            mut cut,
            ..
        } = scan;
        if cut.is_none() && !complete {
            cut = Some(match at < len {
                true => format!("the file ends inside the frame at byte {at}"),
                false => format!("the file ends at byte {at}, before the end record"),
            });
        }
        let Some(header) = header else {
            return Err(LogError::NotALog(path));
        };
        if !complete && !partial {
            return Err(LogError::Truncated {
                path,
                epochs: epochs.len() as u64,
            });
        }
        let actual = std::fs::metadata(&base).map_err(io(&base))?.len();
        if actual != header.file_size || header.region_size > header.file_size {
            return Err(LogError::SizeMismatch {
                path,
                base,
                logged: header.file_size,
                actual,
            });
        }
        Ok(Self {
            path,
            base,
            header,
            epochs,
            tail,
            complete,
            cut,
            file,
        })
    }

    /// The number of the last flush.
    pub fn last(&self) -> u64 {
        self.epochs.len() as u64
    }

    /// An epoch's page indexes.
    pub fn indexes(&mut self, e: &EpochEntry) -> Result<Vec<u64>, LogError> {
        let mut raw = vec![0u8; 8 * e.head.pages as usize];
        self.read_at(e.indexes_at(), &mut raw)?;
        Ok(raw.chunks_exact(8).map(le_u64).collect())
    }

    /// Page `i` (in the epoch's order) of an epoch, into `buf` ([`PAGE`] bytes).
    pub fn page(&mut self, e: &EpochEntry, i: usize, buf: &mut [u8]) -> Result<(), LogError> {
        self.read_at(e.contents_at() + (i * PAGE) as u64, buf)
    }

    /// The bytes after the region an epoch carries (empty: unchanged).
    pub fn meta(&mut self, e: &EpochEntry) -> Result<Vec<u8>, LogError> {
        let mut buf = vec![0u8; e.head.meta_len as usize];
        self.read_at(e.meta_at(), &mut buf)?;
        Ok(buf)
    }

    fn read_at(&mut self, at: u64, buf: &mut [u8]) -> Result<(), LogError> {
        let path = self.path.clone();
        self.file
            .seek(SeekFrom::Start(at))
            .and_then(|_| self.file.read_exact(buf))
            .map_err(|source| LogError::Io { path, source })
    }
}

/// What [`FlushLog::open`] has read of a log so far.
struct Scan<'a> {
    path: &'a Path,
    /// `--partial`: a frame that cannot be read ends the log instead of failing it.
    partial: bool,
    header: Option<Header>,
    epochs: Vec<EpochEntry>,
    tail: Option<EpochEntry>,
    /// The end record was read.
    complete: bool,
    /// Pages of the region (an epoch's index is checked against them once known).
    region_pages: u64,
    /// Where and why a partial log was cut.
    cut: Option<String>,
}

impl Scan<'_> {
    fn corrupt(&self, offset: u64, why: String) -> LogError {
        LogError::Corrupt {
            path: self.path.to_path_buf(),
            offset,
            why,
        }
    }

    /// The frame at byte `at`: false when it ends the log (a partial log cut
    /// there), an error when the log is not one this pmemvm reads.
    fn frame(&mut self, at: u64, kind: Frame, size: u64, kept: &Kept) -> Result<bool, LogError> {
        // With --partial, the first frame that cannot be read ends the log
        // (a write error cut it, or a host crash left zeros after it).
        let bad = |scan: &mut Self, why: String| match scan.partial && scan.header.is_some() {
            true => {
                scan.cut = Some(format!("at byte {at}: {why}"));
                Ok(false)
            }
            false => Err(scan.corrupt(at, why)),
        };
        let open = self.header.is_some() && self.tail.is_none() && !self.complete;
        match kind {
            Frame::Bad(why) => bad(self, why),
            Frame::Ok(KIND_HEADER) if self.header.is_none() && at == 8 => {
                let h: Header = serde_json::from_slice(&kept.bytes)
                    .map_err(|e| self.corrupt(at, format!("its header is not readable ({e})")))?;
                if h.version != VERSION || h.page_size != PAGE as u64 {
                    let (v, p) = (h.version, h.page_size);
                    let why = format!(
                        "it is format version {v} with {p}-byte pages; \
                         this pmemvm reads version {VERSION} with {PAGE}-byte pages"
                    );
                    return Err(self.corrupt(at, why));
                }
                self.region_pages = h.region_size / PAGE as u64;
                self.header = Some(h);
                Ok(true)
            }
            Frame::Ok(k @ (KIND_EPOCH | KIND_TAIL)) if open => {
                let next = self.epochs.len() as u64 + 1;
                let checked = self
                    .header
                    .as_ref()
                    .map_or(Err(String::new()), |h| check_epoch(h, next, size, kept));
                let head = match checked {
                    Ok(head) => head,
                    Err(why) => return bad(self, why),
                };
                let entry = EpochEntry {
                    head,
                    payload_at: at + FRAME_HEAD as u64,
                };
                match k == KIND_EPOCH {
                    true => self.epochs.push(entry),
                    false => self.tail = Some(entry),
                }
                Ok(true)
            }
            Frame::Ok(KIND_END) if self.header.is_some() => {
                self.complete = true;
                Ok(true)
            }
            Frame::Ok(k) => bad(self, format!("a frame of kind {k} where it cannot be")),
        }
    }
}

enum Frame {
    Ok(u32),
    Bad(String),
}

/// The most of a header or end frame's payload kept in memory (its JSON).
const KEEP_SMALL: usize = 1 << 20;
/// Bytes read at a time while a frame's checksum is computed.
const CHUNK: usize = 1 << 20;

/// What is kept of a frame while its checksum streams: the whole payload of
/// a small frame, the head of an epoch frame with its page indexes checked
/// on the way (the page contents are never held: an epoch can be the whole
/// DIMM, and reading it takes memory of one chunk).
struct Kept {
    /// The payload's first bytes (all of a small frame).
    bytes: Vec<u8>,
    /// The epoch head, once its bytes passed.
    head: Option<EpochHead>,
    /// The first page index at or past `region_pages`, if any.
    bad_index: Option<u64>,
    region_pages: u64,
    /// Bytes of an index cut by a chunk's end.
    carry: Vec<u8>,
}

impl Kept {
    fn new(region_pages: u64) -> Self {
        Self {
            bytes: Vec::new(),
            head: None,
            bad_index: None,
            region_pages,
            carry: Vec::new(),
        }
    }

    /// Takes `chunk`, the payload's bytes from offset `at`.
    fn take(&mut self, at: usize, chunk: &[u8]) {
        let room = KEEP_SMALL.saturating_sub(self.bytes.len());
        if at == self.bytes.len() {
            self.bytes
                .extend_from_slice(&chunk[..chunk.len().min(room)]);
        }
        if self.head.is_none() && self.bytes.len() >= EPOCH_HEAD {
            self.head = parse_head(&self.bytes);
        }
        let Some(head) = self.head else {
            return;
        };
        let indexes_end = EPOCH_HEAD + 8 * usize::try_from(head.pages).unwrap_or(usize::MAX);
        let from = at.max(EPOCH_HEAD);
        let to = (at + chunk.len()).min(indexes_end);
        if from >= to || self.bad_index.is_some() {
            return;
        }
        self.carry.extend_from_slice(&chunk[from - at..to - at]);
        let whole = self.carry.len() / 8 * 8;
        self.bad_index = self.carry[..whole]
            .chunks_exact(8)
            .map(le_u64)
            .find(|&i| i >= self.region_pages);
        self.carry.drain(..whole);
    }
}

/// The frame at `at`: `None` when the file ends there or the frame is cut
/// short (the log ends), its kind and what [`Kept`] kept of its payload, or
/// why it is bad. The checksum streams through one chunk of memory.
fn read_frame(
    file: &mut File,
    at: u64,
    len: u64,
    region_pages: u64,
) -> std::io::Result<Option<(Frame, u64, Kept)>> {
    if len.saturating_sub(at) < FRAME_HEAD as u64 {
        return Ok(None);
    }
    file.seek(SeekFrom::Start(at))?;
    let mut head = [0u8; FRAME_HEAD];
    file.read_exact(&mut head)?;
    let kind = u32::from_le_bytes([head[0], head[1], head[2], head[3]]);
    let size = le_u64(&head[4..12]);
    let mut kept = Kept::new(region_pages);
    if size > MAX_PAYLOAD {
        let why = format!("a frame claims {size} bytes");
        return Ok(Some((Frame::Bad(why), 0, kept)));
    }
    if (len - at - FRAME_HEAD as u64) < size + 4 {
        return Ok(None);
    }
    let mut h = crc32fast::Hasher::new();
    h.update(&head);
    let mut buf = vec![0u8; CHUNK.min(usize::try_from(size).unwrap_or(CHUNK))];
    let mut done = 0u64;
    while done < size {
        let n = usize::try_from((size - done).min(buf.len() as u64)).unwrap_or(buf.len());
        file.read_exact(&mut buf[..n])?;
        h.update(&buf[..n]);
        kept.take(usize::try_from(done).unwrap_or(usize::MAX), &buf[..n]);
        done += n as u64;
    }
    let mut crc = [0u8; 4];
    file.read_exact(&mut crc)?;
    if h.finalize() != u32::from_le_bytes(crc) {
        let why = "a frame's checksum does not match its bytes".to_string();
        return Ok(Some((Frame::Bad(why), size, kept)));
    }
    Ok(Some((Frame::Ok(kind), size, kept)))
}

/// The fields of an epoch frame of `size` payload bytes (`kept` holds its
/// head and its indexes' check), checked against the header: its length, its
/// number (`next`), its pages inside the region, its meta size.
fn check_epoch(h: &Header, next: u64, size: u64, kept: &Kept) -> Result<EpochHead, String> {
    let head = kept.head.ok_or("an epoch frame is too short")?;
    let n = head.number;
    let want =
        EPOCH_HEAD as u64 + u64::from(head.pages) * (8 + PAGE as u64) + u64::from(head.meta_len);
    if want != size {
        return Err(format!(
            "flush {n}'s frame holds {size} bytes where its fields need {want}"
        ));
    }
    if n != next {
        return Err(format!("flush {n} follows flush {}", next - 1));
    }
    if let Some(bad) = kept.bad_index {
        let region_pages = h.region_size / PAGE as u64;
        return Err(format!(
            "flush {n} names page {bad}, beyond the region's {region_pages} pages"
        ));
    }
    let meta_max = h.file_size.saturating_sub(h.region_size);
    if head.meta_len != 0 && u64::from(head.meta_len) != meta_max {
        let m = head.meta_len;
        return Err(format!(
            "flush {n} carries {m} bytes after the region, not the file's {meta_max}"
        ));
    }
    Ok(head)
}

fn parse_head(p: &[u8]) -> Option<EpochHead> {
    if p.len() < EPOCH_HEAD {
        return None;
    }
    let u32_at = |o: usize| u32::from_le_bytes([p[o], p[o + 1], p[o + 2], p[o + 3]]);
    Some(EpochHead {
        number: le_u64(&p[0..8]),
        time_ns: le_u64(&p[8..16]),
        vcpu: u32_at(16),
        pages: u32_at(20),
        meta_len: u32_at(24),
    })
}

fn le_u64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_le_bytes(a)
}

#[cfg(test)]
#[path = "log_tests.rs"]
pub(crate) mod tests;

#[cfg(test)]
#[path = "log_cut_tests.rs"]
mod cut_tests;
