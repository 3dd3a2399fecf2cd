#![allow(clippy::cast_possible_truncation)] // test patterns and register halves, reduced on purpose

//! A minimal virtio-mmio driver for the unit tests: it sets a device up the
//! way Linux's virtio_mmio and virtio_blk drivers do (status steps, feature
//! pages, one split queue) and submits requests through guest memory.

use std::io::Write as _;

use vm_memory::{Address, Bytes, GuestAddress, GuestMemoryMmap};
use vmm_sys_util::eventfd::EventFd;
use vmm_sys_util::tempfile::TempFile;

use super::blk::Block;
use super::dma::{DmaMemory, DmaView};
use super::mmio::MmioTransport;
use crate::bus::BusDevice;

pub const DESC: u64 = 0x1000;
pub const AVAIL: u64 = 0x2000;
pub const USED: u64 = 0x3000;
pub const HEADER: u64 = 0x4000;
pub const STATUS: u64 = 0x5000;
pub const DATA: u64 = 0x10000;
pub const QSIZE: u16 = 16;
pub const F_NEXT: u16 = 1;
pub const F_WRITE: u16 = 2;

pub struct Driver {
    pub dev: MmioTransport<Block>,
    pub mem: GuestMemoryMmap,
    /// The views the device uses (RAM until a test adds a range).
    pub view: DmaView,
    pub irq: EventFd,
    pub file: TempFile,
    avail_idx: u16,
}

pub fn reg_read(dev: &mut impl BusDevice, off: u64) -> u32 {
    let mut b = [0u8; 4];
    dev.read(off, &mut b);
    u32::from_le_bytes(b)
}

pub fn reg_write(dev: &mut impl BusDevice, off: u64, v: u32) {
    dev.write(off, &v.to_le_bytes());
}

impl Driver {
    /// A disk of `bytes` (pattern: byte i = i % 251) on a fresh transport.
    pub fn new(bytes: usize, readonly: bool) -> Self {
        let mem = GuestMemoryMmap::<()>::from_ranges(&[(GuestAddress(0), 0x20_0000)]).unwrap();
        let file = TempFile::new().unwrap();
        let data: Vec<u8> = (0..bytes).map(|i| (i % 251) as u8).collect();
        file.as_file().write_all(&data).unwrap();
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(!readonly)
            .open(file.as_path())
            .unwrap();
        let blk = Block::new(f, "test.img", readonly, "pmemvm-test-disk").unwrap();
        let irq = EventFd::new(libc::EFD_NONBLOCK).unwrap();
        let view = DmaView::new(DmaMemory::ram(&mem));
        let dev = MmioTransport::new(blk, view.clone(), irq.try_clone().unwrap()).unwrap();
        Self {
            dev,
            mem,
            view,
            irq,
            file,
            avail_idx: 0,
        }
    }

    pub fn features(&mut self) -> u64 {
        reg_write(&mut self.dev, 0x14, 0);
        let lo = reg_read(&mut self.dev, 0x10);
        reg_write(&mut self.dev, 0x14, 1);
        let hi = reg_read(&mut self.dev, 0x10);
        u64::from(lo) | (u64::from(hi) << 32)
    }

    /// Negotiates `accept` and returns the status register after FEATURES_OK.
    pub fn negotiate(&mut self, accept: u64) -> u32 {
        reg_write(&mut self.dev, 0x70, 1);
        reg_write(&mut self.dev, 0x70, 1 | 2);
        reg_write(&mut self.dev, 0x24, 0);
        reg_write(&mut self.dev, 0x20, accept as u32);
        reg_write(&mut self.dev, 0x24, 1);
        reg_write(&mut self.dev, 0x20, (accept >> 32) as u32);
        reg_write(&mut self.dev, 0x70, 1 | 2 | 8);
        reg_read(&mut self.dev, 0x70)
    }

    /// The whole set-up with every offered feature; panics if refused.
    pub fn ready(bytes: usize, readonly: bool) -> Self {
        let mut d = Self::new(bytes, readonly);
        let f = d.features();
        assert_eq!(d.negotiate(f) & 8, 8, "FEATURES_OK refused");
        d.setup_queue(QSIZE, DESC, AVAIL, USED);
        reg_write(&mut d.dev, 0x70, 1 | 2 | 8 | 4);
        d
    }

    pub fn setup_queue(&mut self, size: u16, desc: u64, avail: u64, used: u64) {
        reg_write(&mut self.dev, 0x30, 0);
        reg_write(&mut self.dev, 0x38, size.into());
        for (off, addr) in [(0x80, desc), (0x90, avail), (0xa0, used)] {
            reg_write(&mut self.dev, off, addr as u32);
            reg_write(&mut self.dev, off + 4, (addr >> 32) as u32);
        }
        reg_write(&mut self.dev, 0x44, 1);
    }

    pub fn put_desc(&self, i: u16, addr: u64, len: u32, flags: u16, next: u16) {
        let at = GuestAddress(DESC + 16 * u64::from(i));
        self.mem.write_obj(addr, at).unwrap();
        self.mem.write_obj(len, at.unchecked_add(8)).unwrap();
        self.mem.write_obj(flags, at.unchecked_add(12)).unwrap();
        self.mem.write_obj(next, at.unchecked_add(14)).unwrap();
    }

    pub fn header(&self, kind: u32, sector: u64) {
        self.mem.write_obj(kind, GuestAddress(HEADER)).unwrap();
        self.mem.write_obj(0u32, GuestAddress(HEADER + 4)).unwrap();
        self.mem
            .write_obj(sector, GuestAddress(HEADER + 8))
            .unwrap();
        self.mem.write_obj(0xeeu8, GuestAddress(STATUS)).unwrap();
    }

    /// Makes chain `head` available and notifies queue 0.
    pub fn submit(&mut self, head: u16) {
        let slot = u64::from(self.avail_idx % QSIZE);
        self.mem
            .write_obj(head, GuestAddress(AVAIL + 4 + 2 * slot))
            .unwrap();
        self.avail_idx = self.avail_idx.wrapping_add(1);
        self.mem
            .write_obj(self.avail_idx, GuestAddress(AVAIL + 2))
            .unwrap();
        reg_write(&mut self.dev, 0x50, 0);
    }

    /// A request of the usual three descriptors: header, data, status.
    pub fn request(&mut self, kind: u32, sector: u64, len: u32, data_writable: bool) {
        self.header(kind, sector);
        self.put_desc(0, HEADER, 16, F_NEXT, 1);
        let f = if data_writable { F_WRITE } else { 0 };
        self.put_desc(1, DATA, len, F_NEXT | f, 2);
        self.put_desc(2, STATUS, 1, F_WRITE, 0);
        self.submit(0);
    }

    pub fn used_idx(&self) -> u16 {
        self.mem.read_obj(GuestAddress(USED + 2)).unwrap()
    }

    /// (head, len) of used entry `i`.
    pub fn used(&self, i: u16) -> (u32, u32) {
        let at = USED + 4 + 8 * u64::from(i % QSIZE);
        (
            self.mem.read_obj(GuestAddress(at)).unwrap(),
            self.mem.read_obj(GuestAddress(at + 4)).unwrap(),
        )
    }

    pub fn status(&self) -> u8 {
        self.mem.read_obj(GuestAddress(STATUS)).unwrap()
    }

    pub fn data(&self, len: usize) -> Vec<u8> {
        let mut v = vec![0u8; len];
        self.mem.read_slice(&mut v, GuestAddress(DATA)).unwrap();
        v
    }

    pub fn file_bytes(&self) -> Vec<u8> {
        std::fs::read(self.file.as_path()).unwrap()
    }
}

/// A `PROT_READ` shared mapping of a file holding `bytes`: what a `readonly`
/// NVDIMM or legacy range is to the devices. The file is returned to read back.
pub fn read_only_range(bytes: &[u8]) -> (vm_memory::mmap::MmapRegion, TempFile) {
    let file = TempFile::new().unwrap();
    file.as_file().write_all(bytes).unwrap();
    let region = vm_memory::mmap::MmapRegion::build(
        Some(vm_memory::FileOffset::new(
            std::fs::File::open(file.as_path()).unwrap(),
            0,
        )),
        bytes.len(),
        libc::PROT_READ,
        libc::MAP_SHARED,
    )
    .unwrap();
    (region, file)
}
