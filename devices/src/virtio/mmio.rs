//! The virtio-mmio transport (virtio 1.2 §4.2.2, version 2 registers): feature
//! negotiation, device status, queue set-up and notification, the interrupt
//! status, and the device's configuration space from offset 0x100.
//!
//! Register accesses other than 4-byte aligned ones below 0x100 are ignored
//! (reads give all ones), as the specification allows for invalid accesses;
//! queue addresses and sizes are checked by `virtio-queue` before the first
//! buffer is taken, and a queue that does not fit guest memory is never used.

use std::sync::Arc;
use virtio_bindings::virtio_config::{
    VIRTIO_CONFIG_S_ACKNOWLEDGE, VIRTIO_CONFIG_S_DRIVER, VIRTIO_CONFIG_S_DRIVER_OK,
    VIRTIO_CONFIG_S_FAILED, VIRTIO_CONFIG_S_FEATURES_OK, VIRTIO_F_VERSION_1,
};
use virtio_bindings::virtio_mmio::{
    VIRTIO_MMIO_CONFIG, VIRTIO_MMIO_CONFIG_GENERATION, VIRTIO_MMIO_DEVICE_FEATURES,
    VIRTIO_MMIO_DEVICE_FEATURES_SEL, VIRTIO_MMIO_DEVICE_ID, VIRTIO_MMIO_DRIVER_FEATURES,
    VIRTIO_MMIO_DRIVER_FEATURES_SEL, VIRTIO_MMIO_INTERRUPT_ACK, VIRTIO_MMIO_INTERRUPT_STATUS,
    VIRTIO_MMIO_MAGIC_VALUE, VIRTIO_MMIO_QUEUE_AVAIL_HIGH, VIRTIO_MMIO_QUEUE_AVAIL_LOW,
    VIRTIO_MMIO_QUEUE_DESC_HIGH, VIRTIO_MMIO_QUEUE_DESC_LOW, VIRTIO_MMIO_QUEUE_NOTIFY,
    VIRTIO_MMIO_QUEUE_NUM, VIRTIO_MMIO_QUEUE_NUM_MAX, VIRTIO_MMIO_QUEUE_READY,
    VIRTIO_MMIO_QUEUE_SEL, VIRTIO_MMIO_QUEUE_USED_HIGH, VIRTIO_MMIO_QUEUE_USED_LOW,
    VIRTIO_MMIO_STATUS, VIRTIO_MMIO_VENDOR_ID, VIRTIO_MMIO_VERSION,
};

use virtio_queue::{Queue, QueueT};
use vmm_sys_util::eventfd::EventFd;

use super::dma::DmaView;
use super::queues::Shared;
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

/// One virtio device on the MMIO bus: its registers. The queues, status and
/// interrupt state it shares with the device's I/O thread ([`Shared`]).
pub struct MmioTransport<D: VirtioDevice> {
    shared: Arc<Shared<D>>,
    device_id: u32,
    offered: u64,
    queue_max: Vec<u16>,
    /// The configuration space, read once (no device here changes it).
    config: Vec<u8>,
    /// Where a notification goes: the I/O thread, or served here when none.
    kick: Option<EventFd>,
    queue_sel: u32,
    device_features_sel: u32,
    driver_features_sel: u32,
    driver_features: u64,
}

impl<D: VirtioDevice> std::fmt::Debug for MmioTransport<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MmioTransport")
            .field("device_id", &self.device_id)
            .field("driver_features", &self.driver_features)
            .finish_non_exhaustive()
    }
}

/// Bytes of configuration space a device may have (0x100 to the page end).
const CONFIG_SPACE: usize = 0xf00;

impl<D: VirtioDevice> MmioTransport<D> {
    /// A transport for `device` that reaches guest memory through `mem` (the
    /// views every device shares) and raises its interrupt by writing `irq`
    /// (an eventfd registered as a KVM irqfd). Notifications are served in
    /// the notifying thread until [`Self::set_kick`] names an I/O thread.
    pub fn new(device: D, mem: DmaView, irq: EventFd) -> Result<Self, MmioError> {
        let queue_max = device.queue_max_sizes().to_vec();
        let queues = queue_max
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
        let mut config = vec![0u8; CONFIG_SPACE];
        device.read_config(0, &mut config);
        Ok(Self {
            device_id: device.device_id(),
            offered: device.features() | (1u64 << VIRTIO_F_VERSION_1),
            queue_max,
            config,
            kick: None,
            shared: Arc::new(Shared::new(device, queues, irq, mem)),
            queue_sel: 0,
            device_features_sel: 0,
            driver_features_sel: 0,
            driver_features: 0,
        })
    }

    /// What the device shares with its I/O thread and the lost-interrupt watch.
    pub fn shared(&self) -> Arc<Shared<D>> {
        self.shared.clone()
    }

    /// From now on a notification that reaches the transport (one the KVM
    /// ioeventfd did not take) writes `kick` instead of being served here.
    pub fn set_kick(&mut self, kick: EventFd) {
        self.kick = Some(kick);
    }

    /// The device model (waits for a chain being served).
    pub fn device(&self) -> std::sync::MutexGuard<'_, D> {
        self.shared.device()
    }

    fn reset(&mut self) {
        self.shared.reset();
        self.queue_sel = 0;
        self.device_features_sel = 0;
        self.driver_features_sel = 0;
        self.driver_features = 0;
    }

    fn set_status(&mut self, value: u32) {
        if value == 0 {
            self.reset();
            return;
        }
        let mut value = value & 0xff;
        let mut link = self.shared.link();
        // FEATURES_OK is kept only when the driver accepted a subset of what
        // was offered that includes VERSION_1 (no legacy interface here).
        let newly_ok = value & VIRTIO_CONFIG_S_FEATURES_OK != 0
            && link.status & VIRTIO_CONFIG_S_FEATURES_OK == 0;
        if newly_ok {
            let accepted = self.driver_features & !self.offered == 0
                && self.driver_features & (1u64 << VIRTIO_F_VERSION_1) != 0;
            if !accepted {
                log::warn!(
                    "virtio-mmio: the driver accepted features {:#x} of {:#x}; FEATURES_OK refused",
                    self.driver_features,
                    self.offered
                );
                value &= !VIRTIO_CONFIG_S_FEATURES_OK;
            }
        }
        // DRIVER_OK only after the device accepted the features (§3.1.1).
        if value & VIRTIO_CONFIG_S_DRIVER_OK != 0
            && (link.status | value) & VIRTIO_CONFIG_S_FEATURES_OK == 0
        {
            log::warn!("virtio-mmio: DRIVER_OK without FEATURES_OK refused");
            value &= !VIRTIO_CONFIG_S_DRIVER_OK;
        }
        // The driver may only add bits (§3.1.1); FAILED is the driver's to set.
        link.status |= value
            & (VIRTIO_CONFIG_S_ACKNOWLEDGE
                | VIRTIO_CONFIG_S_DRIVER
                | VIRTIO_CONFIG_S_FEATURES_OK
                | VIRTIO_CONFIG_S_DRIVER_OK
                | VIRTIO_CONFIG_S_FAILED);
    }

    fn driver_ok(&self) -> bool {
        self.shared.link().status & VIRTIO_CONFIG_S_DRIVER_OK != 0
    }

    /// Queue configuration may change only before the queue is made ready
    /// and before DRIVER_OK.
    fn configure_queue(&mut self, f: impl FnOnce(&mut Queue)) {
        if self.driver_ok() {
            return;
        }
        let Ok(i) = usize::try_from(self.queue_sel) else {
            return;
        };
        if let Some(q) = self.shared.queues().get_mut(i) {
            if !q.ready() {
                f(q);
            }
        }
    }

    fn notify(&mut self, index: u32) {
        let Ok(i) = usize::try_from(index) else {
            return;
        };
        if i >= self.queue_max.len() || !self.shared.link().live() {
            return;
        }
        match &self.kick {
            Some(kick) => {
                if let Err(e) = kick.write(1) {
                    log::warn!("virtio-mmio: waking the device's I/O thread failed: {e}");
                }
            }
            None => self.shared.process(i),
        }
    }

    fn selected_queue_value(&self, f: impl FnOnce(&Queue) -> u32) -> u32 {
        usize::try_from(self.queue_sel)
            .ok()
            .and_then(|i| self.shared.queues().get(i).map(f))
            .unwrap_or(0)
    }

    fn read_register(&self, offset: u32) -> u32 {
        match offset {
            VIRTIO_MMIO_MAGIC_VALUE => MAGIC,
            VIRTIO_MMIO_VERSION => VERSION,
            VIRTIO_MMIO_DEVICE_ID => self.device_id,
            VIRTIO_MMIO_VENDOR_ID => VENDOR_ID,
            VIRTIO_MMIO_DEVICE_FEATURES => match self.device_features_sel {
                0 => low32(self.offered),
                1 => low32(self.offered >> 32),
                _ => 0,
            },
            VIRTIO_MMIO_QUEUE_NUM_MAX => self.selected_queue_value(|q| q.max_size().into()),
            VIRTIO_MMIO_QUEUE_READY => self.selected_queue_value(|q| q.ready().into()),
            VIRTIO_MMIO_INTERRUPT_STATUS => self.shared.link().interrupt_status,
            VIRTIO_MMIO_STATUS => self.shared.link().status,
            VIRTIO_MMIO_CONFIG_GENERATION => 0,
            _ => 0,
        }
    }

    fn write_register(&mut self, offset: u32, value: u32) {
        match offset {
            VIRTIO_MMIO_DEVICE_FEATURES_SEL => self.device_features_sel = value,
            VIRTIO_MMIO_DRIVER_FEATURES_SEL => self.driver_features_sel = value,
            VIRTIO_MMIO_DRIVER_FEATURES => self.write_driver_features(value),
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
                    self.shared
                        .needs_reset(&format!("queue size {value} refused"));
                }
            }
            VIRTIO_MMIO_QUEUE_READY => {
                if self.driver_ok() {
                    return;
                }
                let Ok(i) = usize::try_from(self.queue_sel) else {
                    return;
                };
                if let Some(q) = self.shared.queues().get_mut(i) {
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
                let mut link = self.shared.link();
                link.interrupt_status &= !value;
                if link.interrupt_status == 0 {
                    link.raised_at = None;
                }
            }
            VIRTIO_MMIO_STATUS => self.set_status(value),
            _ => {}
        }
    }

    /// Features are fixed once FEATURES_OK is set.
    fn write_driver_features(&mut self, value: u32) {
        if self.shared.link().status & VIRTIO_CONFIG_S_FEATURES_OK != 0 {
            return;
        }
        match self.driver_features_sel {
            0 => self.driver_features = (self.driver_features & !0xffff_ffff) | u64::from(value),
            1 => {
                self.driver_features =
                    (self.driver_features & 0xffff_ffff) | (u64::from(value) << 32);
            }
            _ => {}
        }
    }
}

fn low32(v: u64) -> u32 {
    u32::try_from(v & 0xffff_ffff).unwrap_or(0)
}

/// A register access: 4 bytes, 4-byte aligned, below the config space.
fn register(offset: u64, len: usize) -> Option<u32> {
    let off = u32::try_from(offset).ok()?;
    (len == 4 && off % 4 == 0 && off < VIRTIO_MMIO_CONFIG).then_some(off)
}

impl<D: VirtioDevice> BusDevice for MmioTransport<D> {
    fn read(&mut self, offset: u64, data: &mut [u8]) {
        let config = u64::from(VIRTIO_MMIO_CONFIG);
        if offset >= config {
            for (i, b) in data.iter_mut().enumerate() {
                *b = usize::try_from(offset - config)
                    .ok()
                    .and_then(|o| o.checked_add(i))
                    .and_then(|at| self.config.get(at))
                    .copied()
                    .unwrap_or(0);
            }
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
