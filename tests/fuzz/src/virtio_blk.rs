// SPDX-License-Identifier: Apache-2.0
//! Fuzz body: the virtio-blk device on its virtio-mmio transport, driven by a
//! hostile guest.
//!
//! One input is: a control byte (bit 0: read-only disk; bits 1-4: log2 of
//! the queue size the driver asks for), a count byte N, then N operations of
//! 7 bytes: a kind (register write, register read, config read, or a queue
//! notification after moving the available index), an offset and a value;
//! the rest (0x3000 bytes at most) is guest memory laid over the descriptor
//! table, available ring and used ring, so every descriptor, flag, index and
//! ring entry is the fuzzer's, and short inputs already reach the queue. The
//! set-up is done as Linux's driver does it, so the inputs reach request
//! processing.
//!
//! Beside RAM the devices see a read-only persistent-memory range (a
//! `PROT_READ` mapping, as a `readonly` NVDIMM is mapped) right above it, and
//! a fifth operation kind hot-adds a writable range above that: descriptors,
//! buffers and rings may point into either, before and after the hot-add.
//!
//! Checked: nothing panics, and nothing is stored through the read-only
//! mapping (that would be SIGSEGV); the read-only range keeps its bytes; the
//! disk file keeps its size; a read-only disk's bytes never change; no
//! operation returns more than one queue's worth of chains (the guest may
//! overwrite its own rings with disk data, so the rings themselves prove
//! nothing).
#![allow(clippy::cast_possible_truncation)] // register halves and patterns, reduced on purpose

use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::sync::atomic::Ordering;

use devices::bus::BusDevice;
use devices::virtio::blk::Block;
use devices::virtio::dma::{DmaMemory, DmaView};
use devices::virtio::mmio::MmioTransport;
use vm_memory::mmap::MmapRegion;
use vm_memory::{Bytes, FileOffset, GuestAddress, GuestMemoryMmap};
use vmm_sys_util::eventfd::EventFd;

/// Guest memory of the fuzzed guest.
const MEM: u64 = 0x1_0000;
/// Where the fuzzer's bytes go: descriptor table, then the rings.
const RINGS: u64 = 0x1000;
const DESC: u64 = 0x1000;
const AVAIL: u64 = 0x2000;
const USED: u64 = 0x3000;
/// Disk bytes.
const DISK: usize = 16 * 1024;
/// The read-only range: guest address and length.
const RO_BASE: u64 = MEM;
const RO_LEN: usize = 0x1_0000;
/// The range a hot-add brings: guest address and length.
const ADDED_BASE: u64 = RO_BASE + RO_LEN as u64;
const ADDED_LEN: usize = 0x1_0000;

/// An unnamed in-memory file holding the disk.
fn memfd() -> File {
    use std::os::fd::FromRawFd;
    // SAFETY: memfd_create takes a NUL-terminated name and flags; it returns
    // a new fd or -1.
    let fd = unsafe { libc::memfd_create(c"pmemvm-fuzz-blk".as_ptr(), libc::MFD_CLOEXEC) };
    assert!(fd >= 0, "memfd_create: {}", std::io::Error::last_os_error());
    // SAFETY: fd was just created and is owned by nothing else.
    unsafe { File::from_raw_fd(fd) }
}

fn contents(f: &mut File) -> Vec<u8> {
    let mut v = Vec::new();
    f.seek(SeekFrom::Start(0)).expect("seek");
    f.read_to_end(&mut v).expect("read the disk");
    v
}

/// A `PROT_READ` shared mapping of a memfd holding `bytes` (as a read-only
/// NVDIMM's file is mapped), with the memfd to read its bytes back.
fn read_only_range(bytes: &[u8]) -> (MmapRegion, File) {
    let mut f = memfd();
    f.write_all(bytes).expect("read-only range");
    let region = MmapRegion::build(
        Some(FileOffset::new(f.try_clone().expect("dup"), 0)),
        bytes.len(),
        libc::PROT_READ,
        libc::MAP_SHARED,
    )
    .expect("read-only mapping");
    (region, f)
}

fn write_reg(dev: &mut impl BusDevice, off: u64, v: u32) {
    dev.write(off, &v.to_le_bytes());
}

/// Runs one input (see the module docs).
pub fn run(data: &[u8]) {
    let [control, count, rest @ ..] = data else {
        return;
    };
    let readonly = control & 1 == 1;
    let queue_size = 1u32 << ((control >> 1) & 0xf).min(9);
    let (ops, rings) = rest.split_at(rest.len().min(usize::from(*count) * 7));
    let rings = &rings[..rings.len().min(0x3000)];
    let mem = GuestMemoryMmap::<()>::from_ranges(&[(GuestAddress(0), MEM as usize)])
        .expect("guest memory");
    mem.write_slice(rings, GuestAddress(RINGS)).expect("rings");
    let mut file = memfd();
    let pattern: Vec<u8> = (0..DISK).map(|i| (i % 253) as u8).collect();
    file.write_all(&pattern).expect("disk");
    let blk = Block::new(file.try_clone().expect("dup"), "fuzz.img", readonly, "fuzz")
        .expect("disk of 16 KiB");
    let irq = EventFd::new(libc::EFD_NONBLOCK).expect("eventfd");
    let stats = blk.stats();
    let ro_pattern: Vec<u8> = (0..RO_LEN).map(|i| (i % 241) as u8).collect();
    let (ro, mut ro_file) = read_only_range(&ro_pattern);
    let added = MmapRegion::new(ADDED_LEN).expect("hot-added range");
    let view = DmaView::new(
        DmaMemory::ram(&mem)
            .with_range(RO_BASE, &ro)
            .expect("read-only range"),
    );
    let mut dev = MmioTransport::new(blk, view.clone(), irq).expect("transport");
    let returned =
        || stats.requests.load(Ordering::Relaxed) + stats.malformed.load(Ordering::Relaxed);

    // Linux's order: ACKNOWLEDGE, DRIVER, features, FEATURES_OK, queue, DRIVER_OK.
    write_reg(&mut dev, 0x70, 1);
    write_reg(&mut dev, 0x70, 3);
    for sel in 0..2u32 {
        write_reg(&mut dev, 0x14, sel);
        let mut f = [0u8; 4];
        dev.read(0x10, &mut f);
        write_reg(&mut dev, 0x24, sel);
        write_reg(&mut dev, 0x20, u32::from_le_bytes(f));
    }
    write_reg(&mut dev, 0x70, 11);
    write_reg(&mut dev, 0x30, 0);
    write_reg(&mut dev, 0x38, queue_size);
    for (off, addr) in [(0x80u64, DESC), (0x90, AVAIL), (0xa0, USED)] {
        write_reg(&mut dev, off, addr as u32);
        write_reg(&mut dev, off + 4, 0);
    }
    write_reg(&mut dev, 0x44, 1);
    write_reg(&mut dev, 0x70, 15);

    for op in ops.chunks(7) {
        let mut b = [0u8; 7];
        b[..op.len()].copy_from_slice(op);
        let offset = u64::from(u16::from_le_bytes([b[1], b[2]]) & 0x1ff);
        let value = u32::from_le_bytes([b[3], b[4], b[5], b[6]]);
        let before = returned();
        match b[0] % 5 {
            0 => write_reg(&mut dev, offset & !3, value),
            1 => {
                let mut r = [0u8; 4];
                dev.read(offset & !3, &mut r);
            }
            2 => {
                let len = usize::from(b[0] >> 2) % 9;
                let mut r = vec![0u8; len];
                dev.read(0x100 + offset, &mut r);
            }
            3 => {
                mem.write_obj(value as u16, GuestAddress(AVAIL + 2))
                    .expect("avail idx");
                write_reg(&mut dev, 0x50, 0);
            }
            // A hot-add (a second one is refused: the range is there).
            _ => {
                let _ = view.add_range(ADDED_BASE, &added);
            }
        }
        assert!(
            returned() - before <= 256,
            "one notification returned more than a queue of chains"
        );
    }
    assert!(
        contents(&mut ro_file) == ro_pattern,
        "the read-only range was written"
    );
    let now = contents(&mut file);
    assert_eq!(now.len(), DISK, "the disk file changed size");
    if readonly {
        assert!(now == pattern, "a read-only disk was written");
    }
}
