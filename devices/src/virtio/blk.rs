//! The virtio block device (virtio 1.2 §5.2) over a host file: one request
//! queue, requests executed synchronously in the vCPU thread that notified
//! the queue (reads and writes with `pread`/`pwrite` through a bounded bounce
//! buffer, flush as `fdatasync`).
//!
//! Every request is checked before the file is touched: the header must be
//! complete, the data must lie inside the disk (no sector arithmetic may
//! overflow), a write to a read-only disk fails with `VIRTIO_BLK_S_IOERR`.
//! Buffers are read from the readable view of guest memory and written only
//! through the writable one ([`super::dma`]): a buffer in a read-only NVDIMM,
//! past RAM or in a range the devices do not know fails the request with
//! `VIRTIO_BLK_S_IOERR` in its status byte; a chain whose status byte or used
//! ring entry cannot be written puts the device in DEVICE_NEEDS_RESET. Nothing
//! is completed silently. Descriptor chains themselves (loops, indices) are
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
use virtio_queue::{DescriptorChain, Reader, Writer};
use vm_memory::{Address, Bytes, GuestMemoryMmap};

use super::dma::DmaMemory;
use super::{Unservable, VirtioDevice};

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
    /// Chains the device could not serve (a short header, a buffer outside what
    /// the device may read or write): completed with `VIRTIO_BLK_S_IOERR` where
    /// their status byte is writable, else the device needed a reset.
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
    /// buffers (the used length), status byte included. A request whose
    /// buffers lie outside what the device may read or write completes with
    /// `VIRTIO_BLK_S_IOERR` where its status byte is writable; one whose
    /// status byte is not is [`Unservable`].
    fn execute(
        &mut self,
        chain: DescriptorChain<&GuestMemoryMmap>,
        mem: &DmaMemory,
    ) -> Result<u32, Unservable> {
        // What the device will write, for the watchers of recorded DIMMs (none:
        // nothing to note on the request's path).
        let written: Vec<(u64, u32)> = match mem.watched() {
            true => chain
                .clone()
                .writable()
                .map(|d| (d.addr().0, d.len()))
                .collect(),
            false => Vec::new(),
        };
        // A recorded DIMM's epoch is taken with no store in flight: this
        // request's stores and their notes happen on one side of it.
        let _storing = mem.storing(&written);
        let Ok(mut writer) = Writer::new(&mem.writable, chain.clone()) else {
            return self.fail_at_last_byte(
                &chain,
                mem,
                "a buffer the device writes lies outside the guest's writable memory",
            );
        };
        let Some(status_at) = writer.available_bytes().checked_sub(1) else {
            return Err(Unservable("it has no room for the status byte"));
        };
        let Ok(mut status_writer) = writer.split_at(status_at) else {
            return Err(Unservable("its status byte cannot be reached"));
        };
        let (status, data_len) = match Reader::new(&mem.readable, chain) {
            Err(_) => self.refused("a buffer the device reads lies outside guest memory"),
            Ok(mut reader) => {
                let mut header = [0u8; HEADER_LEN];
                if reader.read_exact(&mut header).is_err() {
                    self.refused("its header is shorter than 16 bytes")
                } else {
                    let kind = u32::from_le_bytes([header[0], header[1], header[2], header[3]]);
                    let mut sector_bytes = [0u8; 8];
                    sector_bytes.copy_from_slice(&header[8..16]);
                    let sector = u64::from_le_bytes(sector_bytes);
                    let (status, data_len) = self.serve(kind, sector, &mut reader, &mut writer);
                    if status != VIRTIO_BLK_S_OK {
                        self.stats.errors.fetch_add(1, Ordering::Relaxed);
                    }
                    self.stats.requests.fetch_add(1, Ordering::Relaxed);
                    (status, data_len)
                }
            }
        };
        let status_byte = u8::try_from(status).unwrap_or(u8::MAX);
        if status_writer.write_all(&[status_byte]).is_err() {
            return Err(Unservable("its status byte cannot be written"));
        }
        // The data from the start of the device-writable buffers, the status
        // in their last byte.
        let total: u64 = written.iter().map(|&(_, l)| u64::from(l)).sum();
        tell_watchers(mem, &written, 0, data_len as u64);
        tell_watchers(mem, &written, total.saturating_sub(1), 1);
        Ok(u32::try_from(data_len + 1).unwrap_or(u32::MAX))
    }

    /// A request refused before the file is touched: counted, `VIRTIO_BLK_S_IOERR`.
    fn refused(&self, why: &str) -> (u32, usize) {
        log::debug!("{}: a request was refused: {why}", self.path);
        self.stats.malformed.fetch_add(1, Ordering::Relaxed);
        (VIRTIO_BLK_S_IOERR, 0)
    }

    /// Completes a chain whose buffers cannot all be written with
    /// `VIRTIO_BLK_S_IOERR` in the last byte of its last descriptor, when that
    /// descriptor is device-writable and lies in the writable view.
    fn fail_at_last_byte(
        &self,
        chain: &DescriptorChain<&GuestMemoryMmap>,
        mem: &DmaMemory,
        why: &'static str,
    ) -> Result<u32, Unservable> {
        let last = chain.clone().last().ok_or(Unservable(why))?;
        let status_at = last
            .len()
            .checked_sub(1)
            .and_then(|off| last.addr().checked_add(u64::from(off)))
            .filter(|_| last.is_write_only())
            .ok_or(Unservable(why))?;
        let status = u8::try_from(VIRTIO_BLK_S_IOERR).unwrap_or(u8::MAX);
        // Under the caller's `storing` guard: this byte is in its last writable descriptor.
        mem.writable
            .write_obj(status, status_at)
            .map_err(|_| Unservable(why))?;
        mem.wrote(status_at.0, 1);
        self.refused(why);
        Ok(1)
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
}

/// Tells `mem`'s watchers of the `len` bytes at offset `from` of the
/// device-writable descriptors `written` (address, length), in chain order.
fn tell_watchers(mem: &DmaMemory, written: &[(u64, u32)], from: u64, len: u64) {
    let (mut skip, mut left) = (from, len);
    for &(addr, dlen) in written {
        let dlen = u64::from(dlen);
        if skip >= dlen {
            skip -= dlen;
            continue;
        }
        let n = left.min(dlen - skip);
        mem.wrote(addr.saturating_add(skip), n);
        left -= n;
        skip = 0;
        if left == 0 {
            break;
        }
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

    fn serve(
        &mut self,
        _index: usize,
        chain: DescriptorChain<&GuestMemoryMmap>,
        mem: &DmaMemory,
    ) -> Result<u32, Unservable> {
        let served = self.execute(chain, mem);
        if served.is_err() {
            self.stats.malformed.fetch_add(1, Ordering::Relaxed);
        }
        served
    }
}

#[cfg(test)]
#[path = "blk_tests.rs"]
mod tests;
