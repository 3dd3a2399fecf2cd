//! One CXL Type-3 persistent memory device, whole: its configuration space
//! ([`super::pci_config`]) and its BAR0 — the component registers with the
//! HDM decoders at 0, the memory device registers with the mailbox at
//! [`DEVICE_REGS_OFFSET`] — in front of a [`Memdev`].
//!
//! The VMM routes ECAM accesses to [`Type3Device::config_read`] and
//! [`Type3Device::config_write`], and BAR0 accesses (at [`Type3Device::bar0`]
//! while memory decoding is on) to [`Type3Device::bar_read`] and
//! [`Type3Device::bar_write`]; after each write it takes the decoders'
//! commits and resets ([`Type3Device::take_events`]) to map or unmap the
//! device's memory.
//!
//! A media error the host injects goes in with
//! [`Type3Device::record_media_error`] (poison and a Failure event record);
//! the VMM then sends the MSI message [`Type3Device::take_interrupt`] gives,
//! if any, and the guest reads the record through the mailbox.

use super::component::{ComponentRegisters, COMPONENT_LEN};
use super::device_regs::DeviceRegisters;
use super::hdm::{DecoderEvent, DecoderSide};
use super::memdev::Memdev;
use super::pci_config::{
    type3_endpoint, ConfigSpace, MsiMessage, BAR0_SIZE, DEVICE_REGS_OFFSET, MSI_CAPABILITY,
};
use super::ReturnCode;

/// A Type-3 device.
#[derive(Debug)]
pub struct Type3Device {
    config: ConfigSpace,
    component: ComponentRegisters,
    regs: DeviceRegisters<Memdev>,
}

/// Which register block a BAR0 offset falls in, and the offset inside it.
enum Block {
    Component(u64),
    Device(u64),
    None,
}

fn block(offset: u64) -> Block {
    match offset {
        o if o < COMPONENT_LEN as u64 => Block::Component(o),
        o if (DEVICE_REGS_OFFSET..BAR0_SIZE).contains(&o) => Block::Device(o - DEVICE_REGS_OFFSET),
        _ => Block::None,
    }
}

impl Type3Device {
    /// The device of `memdev` with device serial number `serial`.
    pub fn new(serial: u64, memdev: Memdev) -> Self {
        let capacity = memdev.capacity();
        Self {
            config: type3_endpoint(serial, capacity),
            component: ComponentRegisters::new(DecoderSide::Endpoint { capacity }),
            regs: DeviceRegisters::new(memdev),
        }
    }

    /// The memory device behind the mailbox.
    pub fn memdev(&self) -> &Memdev {
        self.regs.mailbox().commands()
    }

    /// The memory device, for host-side changes (poison from the host).
    pub fn memdev_mut(&mut self) -> &mut Memdev {
        self.regs.mailbox_mut().commands_mut()
    }

    /// A configuration-space read.
    pub fn config_read(&self, offset: u64, data: &mut [u8]) {
        self.config.read(offset, data);
    }

    /// A configuration-space write.
    pub fn config_write(&mut self, offset: u64, data: &[u8]) {
        self.config.write(offset, data);
    }

    /// Where BAR0 is while memory decoding is on.
    pub fn bar0(&self) -> Option<u64> {
        self.config.bar0()
    }

    /// Whether the guest has enabled the device's memory: DVSEC Mem_Enable
    /// and the HDM decoders' global enable.
    pub fn memory_enabled(&self) -> bool {
        self.config.mem_enabled() && self.component.hdm().enabled()
    }

    /// A read at `offset` in BAR0.
    pub fn bar_read(&self, offset: u64, data: &mut [u8]) {
        match block(offset) {
            Block::Component(o) => self.component.read(o, data),
            Block::Device(o) => self.regs.read(o, data),
            Block::None => data.fill(0),
        }
    }

    /// A write at `offset` in BAR0.
    pub fn bar_write(&mut self, offset: u64, data: &[u8]) {
        match block(offset) {
            Block::Component(o) => self.component.write(o, data),
            Block::Device(o) => self.regs.write(o, data),
            Block::None => {}
        }
    }

    /// A media error at device physical address `dpa` (64-byte aligned,
    /// inside the capacity): the unit is poisoned and a General Media record
    /// goes to the Failure event log ([`Memdev::record_media_error`]).
    pub fn record_media_error(&mut self, dpa: u64) -> Result<(), ReturnCode> {
        self.memdev_mut().record_media_error(dpa)
    }

    /// The MSI message to send for event records pushed since the last
    /// call into logs whose interrupt policy is MSI; None when there were
    /// none or MSI is off (then the interrupt is dropped: Linux reads every
    /// log when it sets its interrupts up). Several records between two
    /// calls give one message.
    pub fn take_interrupt(&mut self) -> Option<MsiMessage> {
        let pending = self.memdev_mut().events_mut().take_interrupt();
        pending.then(|| self.config.msi()).flatten()
    }

    /// Takes the unit at `dpa` off the poison list from the host side
    /// ([`Memdev::clear_poison_from_host`]); whether it was poisoned.
    pub fn clear_poison_from_host(&mut self, dpa: u64) -> bool {
        self.memdev_mut().clear_poison_from_host(dpa)
    }

    /// Where the MSI capability starts in the configuration space.
    pub fn msi_capability_offset(&self) -> u64 {
        MSI_CAPABILITY as u64
    }

    /// Records held by each event log, Informational to Fatal.
    pub fn event_records(&self) -> [usize; 4] {
        self.memdev().events().counts()
    }

    /// The decoders' commits and resets since the last call.
    pub fn take_events(&mut self) -> Vec<DecoderEvent> {
        self.component.take_events()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::io;

    use super::*;
    use crate::cxl::events::EventLog;
    use crate::cxl::memdev::MediaWrite;
    use crate::nvdimm_labels::LabelStorage;

    #[derive(Debug)]
    struct NoLabels;

    impl LabelStorage for NoLabels {
        fn label_size(&self) -> u32 {
            4096
        }
        fn read_label(&self, _: u64, buf: &mut [u8]) -> io::Result<()> {
            buf.fill(0);
            Ok(())
        }
        fn write_label(&self, _: u64, _: &[u8]) -> io::Result<()> {
            Ok(())
        }
        fn sync_labels(&self) -> io::Result<()> {
            Ok(())
        }
        fn readonly(&self) -> bool {
            false
        }
    }

    #[derive(Debug)]
    struct NoMedia;

    impl MediaWrite for NoMedia {
        fn write_media(&self, _: u64, _: &[u8]) -> io::Result<()> {
            Ok(())
        }
    }

    /// A 1 GiB device with serial 7, a 4 KiB label area that reads zeros and media
    /// that take every write.
    pub(crate) fn device() -> Type3Device {
        let memdev = Memdev::new(1 << 30, Box::new(NoLabels), Box::new(NoMedia)).unwrap();
        Type3Device::new(7, memdev)
    }

    #[test]
    fn bar0_reaches_the_decoders_and_the_mailbox_and_a_commit_is_reported() {
        let mut d = device();
        // Identify through the mailbox at BAR0 + 0x10000 + 0x200.
        let mbox = DEVICE_REGS_OFFSET + 0x200;
        d.bar_write(mbox + 0x08, &0x4000u64.to_le_bytes());
        d.bar_write(mbox + 0x04, &[1]);
        let mut status = [0u8; 8];
        d.bar_read(mbox + 0x10, &mut status);
        assert_eq!(u64::from_le_bytes(status) >> 32, 0, "Identify succeeded");
        assert_eq!(d.memdev().capacity(), 1 << 30);
        // Decoder 0 at 16 GiB for the whole GiB, through BAR0 + 0x1100.
        let dec = 0x1100 + 0x10;
        d.bar_write(dec + 0x04, &4u32.to_le_bytes());
        d.bar_write(dec + 0x08, &0x4000_0000u32.to_le_bytes());
        d.bar_write(dec + 0x10, &(1u32 << 9 | 1 << 12).to_le_bytes());
        assert_eq!(
            d.take_events(),
            vec![DecoderEvent::Committed {
                index: 0,
                hpa: 16 << 30,
                size: 1 << 30,
                dpa: 0
            }]
        );
        // Enabled only with both DVSEC Mem_Enable and the HDM global enable.
        assert!(!d.memory_enabled());
        d.bar_write(0x1104, &[2]);
        d.config_write(0x110 + 0x0c, &[4, 0]);
        assert!(d.memory_enabled());
        // Between and past the blocks: nothing.
        let mut b = [0xaa; 4];
        d.bar_read(BAR0_SIZE, &mut b);
        assert_eq!(b, [0; 4]);
        d.bar_write(BAR0_SIZE + 8, &[1; 4]);
    }

    /// Sets Set Event Interrupt Policy to `modes` through BAR0's mailbox.
    fn set_policy(d: &mut Type3Device, modes: [u8; 4]) {
        let mbox = DEVICE_REGS_OFFSET + 0x200;
        d.bar_write(mbox + 0x20, &modes);
        d.bar_write(mbox + 0x08, &(0x0103u64 | 4 << 16).to_le_bytes());
        d.bar_write(mbox + 0x04, &[1]);
        let mut status = [0u8; 8];
        d.bar_read(mbox + 0x10, &mut status);
        assert_eq!(
            u64::from_le_bytes(status) >> 32,
            0,
            "Set Event Interrupt Policy"
        );
    }

    #[test]
    fn a_media_error_interrupts_only_with_msi_policy_and_msi_enabled() {
        let mut d = device();
        let status = |d: &Type3Device| {
            let mut b = [0u8; 4];
            d.bar_read(DEVICE_REGS_OFFSET + 0x100, &mut b);
            u32::from_le_bytes(b)
        };
        d.record_media_error(0x1000).unwrap();
        assert_eq!(d.event_records(), [0, 0, 1, 0]);
        assert_eq!(status(&d), 0b0100, "event status through BAR0");
        assert_eq!(d.take_interrupt(), None, "policy none, MSI off");
        // MSI on (address, data, bus master, enable), policy still none.
        let msi = d.msi_capability_offset();
        assert_eq!(msi, 0x80);
        d.config_write(msi + 4, &0xfee0_0000u32.to_le_bytes());
        d.config_write(msi + 0x0c, &0x0041u16.to_le_bytes());
        d.config_write(0x04, &[0x06, 0x04]);
        d.config_write(msi + 2, &[1]);
        d.record_media_error(0x2000).unwrap();
        assert_eq!(d.take_interrupt(), None, "policy none");
        set_policy(&mut d, [1; 4]);
        d.record_media_error(0x3000).unwrap();
        let msi = Some(MsiMessage {
            address: 0xfee0_0000,
            data: 0x41,
        });
        assert_eq!(d.take_interrupt(), msi);
        assert_eq!(d.take_interrupt(), None, "once");
        // Again for a record pushed while the log still holds others.
        d.record_media_error(0x4000).unwrap();
        assert_eq!(d.take_interrupt(), msi);
        assert_eq!(d.event_records(), [0, 0, 4, 0]);
        // MSI off again: the pending interrupt is dropped.
        d.config_write(0x82, &[0]);
        d.record_media_error(0x5000).unwrap();
        assert_eq!(d.take_interrupt(), None);
        d.config_write(0x82, &[1]);
        assert_eq!(d.take_interrupt(), None, "not kept for later");
        // A refused DPA: nothing logged, no interrupt.
        assert_eq!(
            d.record_media_error(1 << 30),
            Err(ReturnCode::InvalidPhysicalAddress)
        );
        assert_eq!(d.take_interrupt(), None);
        assert_eq!(d.event_records(), [0, 0, 5, 0]);
        assert_eq!(d.memdev().event_count(EventLog::Failure), 5);
        assert_eq!(d.memdev().event_count(EventLog::Fatal), 0);
        assert_eq!(d.memdev().poisoned().count(), 5);
        // The host clears poison without touching the records.
        assert!(d.clear_poison_from_host(0x1000));
        assert!(!d.clear_poison_from_host(0x1000), "no longer poisoned");
        assert!(!d.clear_poison_from_host(u64::MAX));
        assert_eq!(d.memdev().poisoned().count(), 4);
        assert_eq!(d.event_records(), [0, 0, 5, 0]);
    }

    #[test]
    fn the_configuration_space_is_the_type3_one_with_the_serial() {
        let d = device();
        let mut b = [0u8; 8];
        d.config_read(0x104, &mut b);
        assert_eq!(u64::from_le_bytes(b), 7);
        assert_eq!(d.bar0(), None);
    }
}
