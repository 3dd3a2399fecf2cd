//! The virtio block device (virtio 1.2 §5.2) over a host file: one request
//! queue, requests executed synchronously in the vCPU thread that notified
//! the queue (reads and writes with `pread`/`pwrite` through a bounded bounce
//! buffer, flush as `fdatasync`).
//!
//! Every request is checked before the file is touched: the header must be
//! complete, the data must lie inside the disk (no sector arithmetic may
//! overflow), a write to a read-only disk fails with `VIRTIO_BLK_S_IOERR`, and
//! a chain without room for the status byte is returned unused. Descriptor
//! chains themselves (loops, indices, addresses outside guest RAM) are
//! validated by `virtio-queue`.

use std::fs::File;
use std::io::{Read, Write};
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use virtio_bindings::virtio_blk::{
    VIRTIO_BLK_F_BLK_SIZE, VIRTIO_BLK_F_FLUSH, VIRTIO_BLK_F_RO, VIRTIO_BLK_F_SEG_MAX,
    VIRTIO_BLK_ID_BYTES, VIRTIO_BLK_S_IOERR, VIRTIO_BLK_S_OK, VIRTIO_BLK_S_UNSUPP,
    VIRTIO_BLK_T_FLUSH, VIRTIO_BLK_T_GET_ID, VIRTIO_BLK_T_IN, VIRTIO_BLK_T_OUT,
};
use virtio_queue::{DescriptorChain, Queue, QueueT, Reader, Writer};
use vm_memory::GuestMemoryMmap;

use super::VirtioDevice;

/// virtio device ID of a block device.
pub const DEVICE_ID: u32 = 2;
/// Bytes per sector in virtio-blk requests, whatever the block size.
pub const SECTOR_SIZE: u64 = 512;
/// Entries of the request queue.
pub const QUEUE_SIZE: u16 = 256;
/// Largest piece of a request copied at once (the bounce buffer).
const CHUNK: usize = 1 << 20;
/// Bytes of a request header: type, reserved, sector.
const HEADER_LEN: usize = 16;

/// Errors opening a disk.
#[derive(Debug, thiserror::Error)]
pub enum BlockError {
    /// The file's size cannot be read.
    #[error("cannot read the size of the disk file {path}: {source}")]
    Metadata {
        /// The file.
        path: String,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// The file is empty or smaller than one sector.
    #[error("the disk file {path} is {len} bytes; a disk needs at least {SECTOR_SIZE} bytes")]
    TooSmall {
        /// The file.
        path: String,
        /// Its length.
        len: u64,
    },
}

/// What a disk did, for the run's record.
#[derive(Debug, Default)]
pub struct BlockStats {
    /// Requests completed (any type, any status).
    pub requests: AtomicU64,
    /// Bytes the guest read.
    pub bytes_read: AtomicU64,
    /// Bytes the guest wrote.
    pub bytes_written: AtomicU64,
    /// Flush requests (each an fdatasync of a writable disk).
    pub flushes: AtomicU64,
    /// Well-formed requests that ended with an error status.
    pub errors: AtomicU64,
    /// Chains returned unused (no header, no status byte, outside guest memory).
    pub malformed: AtomicU64,
}

/// A virtio block device backed by an open host file.
#[derive(Debug)]
pub struct Block {
    file: File,
    path: String,
    capacity: u64,
    readonly: bool,
    id: [u8; VIRTIO_BLK_ID_BYTES as usize],
    queue_sizes: [u16; 1],
    stats: Arc<BlockStats>,
    buf: Vec<u8>,
}

impl Block {
    /// A disk over `file` (opened read-only or read-write to match
    /// `readonly`); `path` names it in messages, `serial` is what the guest
    /// reads as its ID (`/sys/block/vdX/serial`), cut to 20 bytes. The disk
    /// has the file's length rounded down to whole sectors.
    pub fn new(file: File, path: &str, readonly: bool, serial: &str) -> Result<Self, BlockError> {
        let len = file
            .metadata()
            .map_err(|source| BlockError::Metadata {
                path: path.to_string(),
                source,
            })?
            .len();
        let capacity = len - len % SECTOR_SIZE;
        if capacity == 0 {
            return Err(BlockError::TooSmall {
                path: path.to_string(),
                len,
            });
        }
        let mut id = [0u8; VIRTIO_BLK_ID_BYTES as usize];
        let n = serial.len().min(id.len());
        id[..n].copy_from_slice(&serial.as_bytes()[..n]);
        Ok(Self {
            file,
            path: path.to_string(),
            capacity,
            readonly,
            id,
            queue_sizes: [QUEUE_SIZE],
            stats: Arc::new(BlockStats::default()),
            buf: Vec::new(),
        })
    }

    /// The disk's size in bytes (whole sectors).
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// The counters, shared with whoever reports them.
    pub fn stats(&self) -> Arc<BlockStats> {
        self.stats.clone()
    }

    /// The byte range of `len` bytes at `sector`, if it lies inside the disk.
    fn range(&self, sector: u64, len: usize) -> Option<u64> {
        let offset = sector.checked_mul(SECTOR_SIZE)?;
        let end = offset.checked_add(u64::try_from(len).ok()?)?;
        (end <= self.capacity).then_some(offset)
    }

    /// Executes one request; returns the bytes written into the guest's
    /// buffers (the used length), status byte included.
    fn execute(&mut self, chain: DescriptorChain<&GuestMemoryMmap>, mem: &GuestMemoryMmap) -> u32 {
        let (Ok(mut reader), Ok(mut writer)) =
            (Reader::new(mem, chain.clone()), Writer::new(mem, chain))
        else {
            return self.malformed("its descriptors do not lie in guest memory");
        };
        let mut header = [0u8; HEADER_LEN];
        if reader.read_exact(&mut header).is_err() {
            return self.malformed("its header is shorter than 16 bytes");
        }
        let Some(status_at) = writer.available_bytes().checked_sub(1) else {
            return self.malformed("it has no room for the status byte");
        };
        let Ok(mut status_writer) = writer.split_at(status_at) else {
            return self.malformed("its status byte cannot be reached");
        };
        let kind = u32::from_le_bytes([header[0], header[1], header[2], header[3]]);
        let mut sector_bytes = [0u8; 8];
        sector_bytes.copy_from_slice(&header[8..16]);
        let sector = u64::from_le_bytes(sector_bytes);
        let (status, data_len) = self.serve(kind, sector, &mut reader, &mut writer);
        if status != VIRTIO_BLK_S_OK {
            self.stats.errors.fetch_add(1, Ordering::Relaxed);
        }
        self.stats.requests.fetch_add(1, Ordering::Relaxed);
        let status_byte = u8::try_from(status).unwrap_or(u8::MAX);
        if status_writer.write_all(&[status_byte]).is_err() {
            return self.malformed("its status byte cannot be written");
        }
        u32::try_from(data_len + 1).unwrap_or(u32::MAX)
    }

    /// Serves a well-formed request: (status, bytes written to the guest before the status).
    fn serve(
        &mut self,
        kind: u32,
        sector: u64,
        reader: &mut Reader<'_>,
        writer: &mut Writer<'_>,
    ) -> (u32, usize) {
        match kind {
            VIRTIO_BLK_T_IN => {
                let len = writer.available_bytes();
                let Some(offset) = self.range(sector, len) else {
                    log::debug!(
                        "{}: read of {len} bytes at sector {sector} past the end",
                        self.path
                    );
                    return (VIRTIO_BLK_S_IOERR, 0);
                };
                match file_to_guest(&self.file, &mut self.buf, offset, len, writer) {
                    Ok(()) => {
                        self.stats
                            .bytes_read
                            .fetch_add(len as u64, Ordering::Relaxed);
                        (VIRTIO_BLK_S_OK, len)
                    }
                    Err(e) => {
                        log::warn!("{}: reading {len} bytes at {offset} failed: {e}", self.path);
                        (VIRTIO_BLK_S_IOERR, writer.bytes_written())
                    }
                }
            }
            VIRTIO_BLK_T_OUT => {
                let len = reader.available_bytes();
                if self.readonly {
                    return (VIRTIO_BLK_S_IOERR, 0);
                }
                let Some(offset) = self.range(sector, len) else {
                    log::debug!(
                        "{}: write of {len} bytes at sector {sector} past the end",
                        self.path
                    );
                    return (VIRTIO_BLK_S_IOERR, 0);
                };
                match guest_to_file(&self.file, &mut self.buf, offset, len, reader) {
                    Ok(()) => {
                        self.stats
                            .bytes_written
                            .fetch_add(len as u64, Ordering::Relaxed);
                        (VIRTIO_BLK_S_OK, 0)
                    }
                    Err(e) => {
                        log::warn!("{}: writing {len} bytes at {offset} failed: {e}", self.path);
                        (VIRTIO_BLK_S_IOERR, 0)
                    }
                }
            }
            VIRTIO_BLK_T_FLUSH => {
                self.stats.flushes.fetch_add(1, Ordering::Relaxed);
                if self.readonly {
                    return (VIRTIO_BLK_S_OK, 0);
                }
                match self.file.sync_data() {
                    Ok(()) => (VIRTIO_BLK_S_OK, 0),
                    Err(e) => {
                        log::warn!("{}: fdatasync failed: {e}", self.path);
                        (VIRTIO_BLK_S_IOERR, 0)
                    }
                }
            }
            VIRTIO_BLK_T_GET_ID => {
                let n = writer.available_bytes().min(self.id.len());
                match writer.write_all(&self.id[..n]) {
                    Ok(()) => (VIRTIO_BLK_S_OK, n),
                    Err(_) => (VIRTIO_BLK_S_IOERR, 0),
                }
            }
            _ => (VIRTIO_BLK_S_UNSUPP, 0),
        }
    }

    fn malformed(&self, why: &str) -> u32 {
        log::debug!("{}: a request was returned unused: {why}", self.path);
        self.stats.malformed.fetch_add(1, Ordering::Relaxed);
        0
    }
}

/// The bounce buffer for the next piece of a `left`-byte copy.
fn bounce(buf: &mut Vec<u8>, left: usize) -> &mut [u8] {
    let n = left.min(CHUNK);
    if buf.len() < n {
        buf.resize(n, 0);
    }
    &mut buf[..n]
}

/// Reads `len` bytes at `offset` of `file` into the guest's buffers.
fn file_to_guest(
    file: &File,
    buf: &mut Vec<u8>,
    offset: u64,
    len: usize,
    out: &mut Writer<'_>,
) -> std::io::Result<()> {
    let mut done = 0usize;
    while done < len {
        let chunk = bounce(buf, len - done);
        file.read_exact_at(chunk, offset + done as u64)?;
        out.write_all(chunk)?;
        done += chunk.len();
    }
    Ok(())
}

/// Writes `len` bytes of the guest's buffers at `offset` of `file`.
fn guest_to_file(
    file: &File,
    buf: &mut Vec<u8>,
    offset: u64,
    len: usize,
    data: &mut Reader<'_>,
) -> std::io::Result<()> {
    let mut done = 0usize;
    while done < len {
        let chunk = bounce(buf, len - done);
        data.read_exact(chunk)?;
        file.write_all_at(chunk, offset + done as u64)?;
        done += chunk.len();
    }
    Ok(())
}

impl VirtioDevice for Block {
    fn device_id(&self) -> u32 {
        DEVICE_ID
    }

    fn features(&self) -> u64 {
        let mut f = (1u64 << VIRTIO_BLK_F_SEG_MAX) | (1u64 << VIRTIO_BLK_F_BLK_SIZE);
        f |= if self.readonly {
            1u64 << VIRTIO_BLK_F_RO
        } else {
            1u64 << VIRTIO_BLK_F_FLUSH
        };
        f
    }

    fn queue_max_sizes(&self) -> &[u16] {
        &self.queue_sizes
    }

    fn read_config(&self, offset: u64, data: &mut [u8]) {
        // struct virtio_blk_config: capacity (sectors), size_max, seg_max,
        // geometry, blk_size; the rest reads as zero.
        let mut config = [0u8; 24];
        config[0..8].copy_from_slice(&(self.capacity / SECTOR_SIZE).to_le_bytes());
        config[12..16].copy_from_slice(&u32::from(QUEUE_SIZE - 2).to_le_bytes());
        config[20..24].copy_from_slice(&u32::try_from(SECTOR_SIZE).unwrap_or(512).to_le_bytes());
        for (i, b) in data.iter_mut().enumerate() {
            *b = usize::try_from(offset)
                .ok()
                .and_then(|o| o.checked_add(i))
                .and_then(|at| config.get(at))
                .copied()
                .unwrap_or(0);
        }
    }

    fn process_queue(&mut self, _index: usize, queue: &mut Queue, mem: &GuestMemoryMmap) -> usize {
        // At most one queue's worth per notification: a guest whose data
        // buffers overwrite its own available ring cannot keep the vCPU here;
        // a well-behaved driver notifies again for chains it adds meanwhile.
        let mut used = 0;
        while used < usize::from(queue.size()) {
            let Some(chain) = queue.pop_descriptor_chain(mem) else {
                break;
            };
            let head = chain.head_index();
            let len = self.execute(chain, mem);
            if let Err(e) = queue.add_used(mem, head, len) {
                log::warn!("{}: the used ring cannot be written: {e:?}", self.path);
                break;
            }
            used += 1;
        }
        used
    }
}

#[cfg(test)]
#[path = "blk_tests.rs"]
mod tests;
