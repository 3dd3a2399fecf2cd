//! virtio devices on the virtio-mmio transport (virtio 1.2, §4.2 "Virtio Over
//! MMIO", the modern register layout only): the [`mmio`] transport, and the
//! [`blk`] block device that carries the root file system and the `--put` /
//! `--get` transfer images outside the NVDIMM bus.
//!
//! The guest finds each device as an `LNRO0005` device of the DSDT (what
//! Linux's virtio_mmio driver matches on ACPI platforms); the NFIT never sees
//! these disks, so ndctl's tests can own the whole NVDIMM bus.
//!
//! Queues are the rust-vmm `virtio-queue` crate's split virtqueues; every
//! descriptor, ring index and address the guest writes is validated by it or
//! here before it is used, and nothing the guest writes makes the device panic.

pub mod blk;
pub mod dma;
#[cfg(test)]
mod hostile_tests;
pub mod mmio;
#[cfg(test)]
mod test_driver;

use virtio_queue::Queue;

use dma::DmaMemory;

/// Bytes of MMIO space one virtio-mmio device takes (registers + config space).
pub const MMIO_DEVICE_SIZE: u64 = 0x1000;

/// What a device model gives the [`mmio::MmioTransport`].
pub trait VirtioDevice: Send {
    /// The virtio device ID (2 = block).
    fn device_id(&self) -> u32;
    /// Feature bits the device offers (`VIRTIO_F_VERSION_1` is added by the transport).
    fn features(&self) -> u64;
    /// The largest size of each queue, one entry per queue (powers of two).
    fn queue_max_sizes(&self) -> &[u16];
    /// Reads the device-specific configuration space at `offset`; bytes past
    /// its end read as zero.
    fn read_config(&self, offset: u64, data: &mut [u8]);
    /// Handles the driver's notification of queue `index`: consumes the
    /// available buffers, reading guest memory through `mem.readable` and
    /// writing it only through `mem.writable`.
    fn process_queue(&mut self, index: usize, queue: &mut Queue, mem: &DmaMemory) -> Served;
}

/// What one notification did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Served {
    /// Chains put in the used ring.
    pub used: usize,
    /// Why the device stopped and needs a reset (a chain it could not
    /// complete), if it did.
    pub broken: Option<&'static str>,
}
