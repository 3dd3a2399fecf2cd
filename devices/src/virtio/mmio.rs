//! The virtio-mmio transport (virtio 1.2 §4.2.2, version 2 registers): feature
//! negotiation, device status, queue set-up and notification, the interrupt
//! status, and the device's configuration space from offset 0x100.
//!
//! Register accesses other than 4-byte aligned ones below 0x100 are ignored
//! (reads give all ones), as the specification allows for invalid accesses;
//! queue addresses and sizes are checked by `virtio-queue` before the first
//! buffer is taken, and a queue that does not fit guest memory is never used.

use virtio_bindings::virtio_config::{
    VIRTIO_CONFIG_S_ACKNOWLEDGE, VIRTIO_CONFIG_S_DRIVER, VIRTIO_CONFIG_S_DRIVER_OK,
    VIRTIO_CONFIG_S_FAILED, VIRTIO_CONFIG_S_FEATURES_OK, VIRTIO_F_VERSION_1,
};
use virtio_bindings::virtio_mmio::{
    VIRTIO_MMIO_CONFIG, VIRTIO_MMIO_CONFIG_GENERATION, VIRTIO_MMIO_DEVICE_FEATURES,
    VIRTIO_MMIO_DEVICE_FEATURES_SEL, VIRTIO_MMIO_DEVICE_ID, VIRTIO_MMIO_DRIVER_FEATURES,
    VIRTIO_MMIO_DRIVER_FEATURES_SEL, VIRTIO_MMIO_INTERRUPT_ACK, VIRTIO_MMIO_INTERRUPT_STATUS,
    VIRTIO_MMIO_INT_CONFIG, VIRTIO_MMIO_INT_VRING, VIRTIO_MMIO_MAGIC_VALUE,
    VIRTIO_MMIO_QUEUE_AVAIL_HIGH, VIRTIO_MMIO_QUEUE_AVAIL_LOW, VIRTIO_MMIO_QUEUE_DESC_HIGH,
    VIRTIO_MMIO_QUEUE_DESC_LOW, VIRTIO_MMIO_QUEUE_NOTIFY, VIRTIO_MMIO_QUEUE_NUM,
    VIRTIO_MMIO_QUEUE_NUM_MAX, VIRTIO_MMIO_QUEUE_READY, VIRTIO_MMIO_QUEUE_SEL,
    VIRTIO_MMIO_QUEUE_USED_HIGH, VIRTIO_MMIO_QUEUE_USED_LOW, VIRTIO_MMIO_STATUS,
    VIRTIO_MMIO_VENDOR_ID, VIRTIO_MMIO_VERSION,
};
use virtio_queue::{Queue, QueueT};
use vm_memory::{GuestAddress, GuestMemoryBackend};
use vmm_sys_util::eventfd::EventFd;

use super::dma::{DmaMemory, DmaView};
use super::VirtioDevice;
use crate::bus::BusDevice;

/// "virt" in little-endian: the value every virtio-mmio device reads at 0.
const MAGIC: u32 = 0x7472_6976;
/// The modern (virtio 1.x) register layout.
const VERSION: u32 = 2;
/// pmemvm's vendor ID ("PMVM").
const VENDOR_ID: u32 = 0x4d56_4d50;

/// Errors setting up a transport.
#[derive(Debug, thiserror::Error)]
pub enum MmioError {
    /// A device declared a queue size virtio-queue cannot hold.
    #[error("virtio queue {index} cannot have {size} entries: {source:?}")]
    QueueSize {
        /// Queue index.
        index: usize,
        /// Size asked for.
        size: u16,
        /// What virtio-queue said.
        source: virtio_queue::Error,
    },
}

/// One virtio device on the MMIO bus.
pub struct MmioTransport<D: VirtioDevice> {
    device: D,
    mem: DmaView,
    irq: EventFd,
    queues: Vec<Queue>,
    queue_sel: u32,
    device_features_sel: u32,
    driver_features_sel: u32,
    driver_features: u64,
    status: u32,
    interrupt_status: u32,
    /// When `interrupt_status` last went from clear to set (the guest has not
    /// acknowledged it since); for the VMM's lost-interrupt watch.
    raised_at: Option<std::time::Instant>,
    /// Set when the driver broke the protocol; the device then ignores the
    /// queues until it is reset (the guest sees DEVICE_NEEDS_RESET).
    needs_reset: bool,
}

impl<D: VirtioDevice> std::fmt::Debug for MmioTransport<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MmioTransport")
            .field("device_id", &self.device.device_id())
            .field("status", &self.status)
            .field("driver_features", &self.driver_features)
            .finish_non_exhaustive()
    }
}

/// DEVICE_NEEDS_RESET (virtio 1.2 §2.1).
const STATUS_NEEDS_RESET: u32 = 64;

impl<D: VirtioDevice> MmioTransport<D> {
    /// A transport for `device` that reaches guest memory through `mem` (the
    /// views every device shares) and raises its interrupt by writing `irq`
    /// (an eventfd registered as a KVM irqfd).
    pub fn new(device: D, mem: DmaView, irq: EventFd) -> Result<Self, MmioError> {
        let queues = device
            .queue_max_sizes()
            .iter()
            .enumerate()
            .map(|(index, &size)| {
                Queue::new(size).map_err(|source| MmioError::QueueSize {
                    index,
                    size,
                    source,
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            device,
            mem,
            irq,
            queues,
            queue_sel: 0,
            device_features_sel: 0,
            driver_features_sel: 0,
            driver_features: 0,
            status: 0,
            interrupt_status: 0,
            raised_at: None,
            needs_reset: false,
        })
    }

    /// The device model (for its statistics).
    pub fn device(&self) -> &D {
        &self.device
    }

    /// Everything the device offers, with the transport's own bit.
    fn offered_features(&self) -> u64 {
        self.device.features() | (1u64 << VIRTIO_F_VERSION_1)
    }

    fn selected_queue(&mut self) -> Option<&mut Queue> {
        let i = usize::try_from(self.queue_sel).ok()?;
        self.queues.get_mut(i)
    }

    fn reset(&mut self) {
        for q in &mut self.queues {
            q.reset();
        }
        self.queue_sel = 0;
        self.device_features_sel = 0;
        self.driver_features_sel = 0;
        self.driver_features = 0;
        self.status = 0;
        self.interrupt_status = 0;
        self.raised_at = None;
        self.needs_reset = false;
    }

    fn set_status(&mut self, value: u32) {
        if value == 0 {
            self.reset();
            return;
        }
        let mut value = value & 0xff;
        // FEATURES_OK is kept only when the driver accepted a subset of what
        // was offered that includes VERSION_1 (no legacy interface here).
        let newly_ok = value & VIRTIO_CONFIG_S_FEATURES_OK != 0
            && self.status & VIRTIO_CONFIG_S_FEATURES_OK == 0;
        if newly_ok {
            let offered = self.offered_features();
            let accepted = self.driver_features & !offered == 0
                && self.driver_features & (1u64 << VIRTIO_F_VERSION_1) != 0;
            if !accepted {
                log::warn!(
                    "virtio-mmio: the driver accepted features {:#x} of {offered:#x}; FEATURES_OK refused",
                    self.driver_features
                );
                value &= !VIRTIO_CONFIG_S_FEATURES_OK;
            }
        }
        // DRIVER_OK only after the device accepted the features (§3.1.1).
        if value & VIRTIO_CONFIG_S_DRIVER_OK != 0
            && (self.status | value) & VIRTIO_CONFIG_S_FEATURES_OK == 0
        {
            log::warn!("virtio-mmio: DRIVER_OK without FEATURES_OK refused");
            value &= !VIRTIO_CONFIG_S_DRIVER_OK;
        }
        // The driver may only add bits (§3.1.1); FAILED is the driver's to set.
        self.status |= value
            & (VIRTIO_CONFIG_S_ACKNOWLEDGE
                | VIRTIO_CONFIG_S_DRIVER
                | VIRTIO_CONFIG_S_FEATURES_OK
                | VIRTIO_CONFIG_S_DRIVER_OK
                | VIRTIO_CONFIG_S_FAILED);
    }

    fn driver_ok(&self) -> bool {
        self.status & VIRTIO_CONFIG_S_DRIVER_OK != 0 && !self.needs_reset
    }

    /// Queue configuration may change only before the queue is made ready
    /// and before DRIVER_OK.
    fn configure_queue(&mut self, f: impl FnOnce(&mut Queue)) {
        if self.status & VIRTIO_CONFIG_S_DRIVER_OK != 0 {
            return;
        }
        if let Some(q) = self.selected_queue() {
            if !q.ready() {
                f(q);
            }
        }
    }

    fn notify(&mut self, index: u32) {
        if !self.driver_ok() {
            return;
        }
        let Ok(i) = usize::try_from(index) else {
            return;
        };
        let mem = self.mem.current();
        let Some(queue) = self.queues.get_mut(i) else {
            return;
        };
        if !rings_reachable(queue, &mem) {
            self.needs_reset(&format!(
                "queue {i} was notified but its rings do not lie in guest memory the device may use"
            ));
            return;
        }
        let served = self.device.process_queue(i, queue, &mem);
        let notify = served.used > 0 && queue.needs_notification(&mem.readable).unwrap_or(true);
        if notify {
            self.raise(VIRTIO_MMIO_INT_VRING);
        }
        if let Some(why) = served.broken {
            self.needs_reset(&format!("queue {i}: {why}"));
        }
    }

    /// Sets `bit` in the interrupt status and signals the guest.
    fn raise(&mut self, bit: u32) {
        if self.interrupt_status == 0 {
            self.raised_at = Some(std::time::Instant::now());
        }
        self.interrupt_status |= bit;
        if let Err(e) = self.irq.write(1) {
            log::warn!("virtio-mmio: raising the interrupt failed: {e}");
        }
    }

    /// The driver broke the protocol: the device stops using its queues until
    /// the driver resets it, says so in DEVICE_NEEDS_RESET and, once the driver
    /// had set DRIVER_OK, with a configuration change interrupt (§2.1.2).
    fn needs_reset(&mut self, why: &str) {
        log::warn!("virtio-mmio: {why}; the device needs a reset");
        self.needs_reset = true;
        self.status |= STATUS_NEEDS_RESET;
        if self.status & VIRTIO_CONFIG_S_DRIVER_OK != 0 {
            self.raise(VIRTIO_MMIO_INT_CONFIG);
        }
    }

    fn read_register(&self, offset: u32) -> u32 {
        let q = usize::try_from(self.queue_sel)
            .ok()
            .and_then(|i| self.queues.get(i));
        match offset {
            VIRTIO_MMIO_MAGIC_VALUE => MAGIC,
            VIRTIO_MMIO_VERSION => VERSION,
            VIRTIO_MMIO_DEVICE_ID => self.device.device_id(),
            VIRTIO_MMIO_VENDOR_ID => VENDOR_ID,
            VIRTIO_MMIO_DEVICE_FEATURES => match self.device_features_sel {
                0 => low32(self.offered_features()),
                1 => low32(self.offered_features() >> 32),
                _ => 0,
            },
            VIRTIO_MMIO_QUEUE_NUM_MAX => q.map_or(0, |q| q.max_size().into()),
            VIRTIO_MMIO_QUEUE_READY => q.map_or(0, |q| q.ready().into()),
            VIRTIO_MMIO_INTERRUPT_STATUS => self.interrupt_status,
            VIRTIO_MMIO_STATUS => self.status,
            VIRTIO_MMIO_CONFIG_GENERATION => 0,
            _ => 0,
        }
    }

    fn write_register(&mut self, offset: u32, value: u32) {
        match offset {
            VIRTIO_MMIO_DEVICE_FEATURES_SEL => self.device_features_sel = value,
            VIRTIO_MMIO_DRIVER_FEATURES_SEL => self.driver_features_sel = value,
            VIRTIO_MMIO_DRIVER_FEATURES => {
                // Features are fixed once FEATURES_OK is set.
                if self.status & VIRTIO_CONFIG_S_FEATURES_OK != 0 {
                    return;
                }
                match self.driver_features_sel {
                    0 => {
                        self.driver_features =
                            (self.driver_features & !0xffff_ffff) | u64::from(value);
                    }
                    1 => {
                        self.driver_features =
                            (self.driver_features & 0xffff_ffff) | (u64::from(value) << 32);
                    }
                    _ => {}
                }
            }
            VIRTIO_MMIO_QUEUE_SEL => self.queue_sel = value,
            VIRTIO_MMIO_QUEUE_NUM => {
                // A size above the maximum or not a power of two breaks the
                // driver's view of the rings: the device stops until reset.
                let mut refused = false;
                self.configure_queue(|q| {
                    refused = u16::try_from(value)
                        .ok()
                        .is_none_or(|size| q.try_set_size(size).is_err());
                });
                if refused {
                    self.needs_reset(&format!("queue size {value} refused"));
                }
            }
            VIRTIO_MMIO_QUEUE_READY => {
                if self.status & VIRTIO_CONFIG_S_DRIVER_OK != 0 {
                    return;
                }
                if let Some(q) = self.selected_queue() {
                    q.set_ready(value == 1);
                }
            }
            VIRTIO_MMIO_QUEUE_DESC_LOW => {
                self.configure_queue(|q| q.set_desc_table_address(Some(value), None));
            }
            VIRTIO_MMIO_QUEUE_DESC_HIGH => {
                self.configure_queue(|q| q.set_desc_table_address(None, Some(value)));
            }
            VIRTIO_MMIO_QUEUE_AVAIL_LOW => {
                self.configure_queue(|q| q.set_avail_ring_address(Some(value), None));
            }
            VIRTIO_MMIO_QUEUE_AVAIL_HIGH => {
                self.configure_queue(|q| q.set_avail_ring_address(None, Some(value)));
            }
            VIRTIO_MMIO_QUEUE_USED_LOW => {
                self.configure_queue(|q| q.set_used_ring_address(Some(value), None));
            }
            VIRTIO_MMIO_QUEUE_USED_HIGH => {
                self.configure_queue(|q| q.set_used_ring_address(None, Some(value)));
            }
            VIRTIO_MMIO_QUEUE_NOTIFY => self.notify(value),
            VIRTIO_MMIO_INTERRUPT_ACK => {
                self.interrupt_status &= !value;
                if self.interrupt_status == 0 {
                    self.raised_at = None;
                }
            }
            VIRTIO_MMIO_STATUS => self.set_status(value),
            _ => {}
        }
    }
}

/// Whether `queue`'s descriptor table and available ring lie in what the
/// device may read and its used ring in what it may write.
fn rings_reachable(queue: &Queue, mem: &DmaMemory) -> bool {
    // The used ring: flags, index, 8 bytes an entry, avail_event (the length
    // virtio-queue checks).
    let used_len = 6 + 8 * usize::from(queue.size());
    queue.is_valid(&mem.readable)
        && mem
            .writable
            .check_range(GuestAddress(queue.used_ring()), used_len)
}

fn low32(v: u64) -> u32 {
    u32::try_from(v & 0xffff_ffff).unwrap_or(0)
}

/// A register access: 4 bytes, 4-byte aligned, below the config space.
fn register(offset: u64, len: usize) -> Option<u32> {
    let off = u32::try_from(offset).ok()?;
    (len == 4 && off % 4 == 0 && off < VIRTIO_MMIO_CONFIG).then_some(off)
}

impl<D: VirtioDevice> crate::interrupt_line::InterruptLine for MmioTransport<D> {
    fn unanswered(&self) -> Option<std::time::Duration> {
        (self.interrupt_status != 0)
            .then_some(self.raised_at)
            .flatten()
            .map(|t| t.elapsed())
    }

    fn raise_again(&self) -> std::io::Result<()> {
        self.irq.write(1)
    }
}

impl<D: VirtioDevice> BusDevice for MmioTransport<D> {
    fn read(&mut self, offset: u64, data: &mut [u8]) {
        let config = u64::from(VIRTIO_MMIO_CONFIG);
        if offset >= config {
            self.device.read_config(offset - config, data);
            return;
        }
        match register(offset, data.len()) {
            Some(off) => data.copy_from_slice(&self.read_register(off).to_le_bytes()),
            None => data.fill(0xff),
        }
    }

    fn write(&mut self, offset: u64, data: &[u8]) {
        // The block device's configuration space is read-only (no WCE).
        let Some(off) = register(offset, data.len()) else {
            return;
        };
        let mut bytes = [0u8; 4];
        bytes.copy_from_slice(data);
        self.write_register(off, u32::from_le_bytes(bytes));
    }
}

#[cfg(test)]
#[path = "mmio_tests.rs"]
mod tests;
