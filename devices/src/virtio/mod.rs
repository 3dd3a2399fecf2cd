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
#[cfg(test)]
mod io_thread_tests;
pub mod mmio;
pub mod queues;
#[cfg(test)]
mod test_driver;

use virtio_queue::DescriptorChain;
use vm_memory::GuestMemoryMmap;

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
    /// Serves one chain of queue `index`, reading guest memory through
    /// `mem.readable` and writing it only through `mem.writable`: the bytes it
    /// wrote into the chain (the used length), or why the chain cannot be
    /// completed (the device then needs a reset).
    fn serve(
        &mut self,
        index: usize,
        chain: DescriptorChain<&GuestMemoryMmap>,
        mem: &DmaMemory,
    ) -> Result<u32, Unservable>;
}

/// A chain a device cannot complete (its status byte is not writable): why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unservable(pub &'static str);
