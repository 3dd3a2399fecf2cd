//! The memory device register block (CXL 2.0 8.2.8) that the Register
//! Locator DVSEC names as block 3: a capability array Linux's
//! `cxl_probe_device_regs` walks, and the three capabilities `cxl_pci`
//! requires:
//!
//! | offset | what |
//! |---|---|
//! | 0x000 | capabilities array register (64-bit): ID 0, version 1, 3 capabilities |
//! | 0x010 | header: device status (ID 1), at 0x100, 8 bytes |
//! | 0x020 | header: primary mailbox (ID 2), at 0x200, [`MAILBOX_LEN`] bytes |
//! | 0x030 | header: memory device status (ID 0x4000), at 0xc00, 8 bytes |
//! | 0x100 | event status: bits 0-3 set while the Informational, Warning, Failure, Fatal event log holds records ([`CommandSet::event_status`]) |
//! | 0x200 | the primary mailbox ([`super::mailbox`]) |
//! | 0xc00 | memory device status: media ready, mailbox ready |
//!
//! Linux maps each capability at its offset for its length, so the lengths
//! are exact and the ranges do not overlap.

use super::mailbox::{Mailbox, MAILBOX_LEN};
use super::CommandSet;

/// Bytes of the block (one 64 KiB register-locator unit).
pub const DEVICE_REGS_LEN: usize = 0x10000;
const CAPABILITIES: [(u16, usize, usize); 3] = [
    (1, DEVICE_STATUS, 8),
    (2, MAILBOX, MAILBOX_LEN),
    (0x4000, MEMDEV_STATUS, 8),
];
const DEVICE_STATUS: usize = 0x100;
const MAILBOX: usize = 0x200;
const MEMDEV_STATUS: usize = 0xc00;
/// Memory device status: media status ready ([3:2] = 1), mailbox interface
/// ready (bit 4); no fatal error, no firmware halt, no reset needed.
const MEMDEV_READY: u64 = 1 << 2 | 1 << 4;

/// One memory device's register block.
#[derive(Debug)]
pub struct DeviceRegisters<C> {
    mailbox: Mailbox<C>,
}

impl<C: CommandSet> DeviceRegisters<C> {
    /// The block in front of `commands`.
    pub fn new(commands: C) -> Self {
        Self {
            mailbox: Mailbox::new(commands),
        }
    }

    /// The mailbox.
    pub fn mailbox(&self) -> &Mailbox<C> {
        &self.mailbox
    }

    /// The mailbox, to change the device behind it.
    pub fn mailbox_mut(&mut self) -> &mut Mailbox<C> {
        &mut self.mailbox
    }

    /// The byte at `at` outside the mailbox.
    fn status_byte(&self, at: usize) -> u8 {
        let (reg, value) = match at {
            DEVICE_STATUS..0x108 => (
                DEVICE_STATUS,
                u64::from(self.mailbox.commands().event_status()),
            ),
            0x00..0x08 => (0x00, 1u64 << 16 | 3 << 32),
            0x10..0x40 => {
                let slot = at / 0x10 - 1;
                let (id, offset, len) = CAPABILITIES[slot];
                let base = 0x10 * (slot + 1);
                match at - base {
                    0..8 => (base, u64::from(id) | 1 << 16 | (offset as u64) << 32),
                    _ => (base + 8, len as u64),
                }
            }
            MEMDEV_STATUS..0xc08 => (MEMDEV_STATUS, MEMDEV_READY),
            _ => return 0,
        };
        value.to_le_bytes()[at - reg]
    }

    /// A guest read of `data.len()` bytes at `offset`.
    pub fn read(&self, offset: u64, data: &mut [u8]) {
        for (i, b) in data.iter_mut().enumerate() {
            *b = match super::byte_in(offset, i, DEVICE_REGS_LEN) {
                Some(at) if (MAILBOX..MAILBOX + MAILBOX_LEN).contains(&at) => {
                    let mut one = [0u8];
                    self.mailbox.read((at - MAILBOX) as u64, &mut one);
                    one[0]
                }
                Some(at) => self.status_byte(at),
                None => 0,
            };
        }
    }

    /// A guest write of `data` at `offset`: only the mailbox takes writes
    /// (the rest is read-only status).
    pub fn write(&mut self, offset: u64, data: &[u8]) {
        let Some(at) = super::byte_in(offset, 0, DEVICE_REGS_LEN) else {
            return;
        };
        let end = at.saturating_add(data.len()).min(MAILBOX + MAILBOX_LEN);
        let start = at.max(MAILBOX);
        if start < end {
            let slice = &data[start - at..end - at];
            self.mailbox.write((start - MAILBOX) as u64, slice);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cxl::{CommandResult, ReturnCode};

    #[derive(Debug)]
    struct Identify;

    impl CommandSet for Identify {
        fn execute(&mut self, opcode: u16, _: &[u8], out: &mut [u8]) -> CommandResult {
            match opcode {
                0x4000 => {
                    out[..3].copy_from_slice(b"yes");
                    Ok(3)
                }
                _ => Err(ReturnCode::Unsupported),
            }
        }
    }

    fn read64(r: &DeviceRegisters<Identify>, at: u64) -> u64 {
        let mut b = [0u8; 8];
        r.read(at, &mut b);
        u64::from_le_bytes(b)
    }

    #[test]
    fn linux_finds_status_mailbox_and_memdev_with_exact_non_overlapping_ranges() {
        let r = DeviceRegisters::new(Identify);
        let array = read64(&r, 0);
        assert_eq!(array & 0xffff, 0, "capabilities array ID");
        let count = (array >> 32) & 0xffff;
        let mut caps = Vec::new();
        for i in 1..=count {
            let h = read64(&r, 0x10 * i);
            let len = read64(&r, 0x10 * i + 8) & 0xffff_ffff;
            caps.push((h & 0xffff, h >> 32, len));
        }
        assert_eq!(
            caps,
            [
                (1, 0x100, 8),
                (2, 0x200, MAILBOX_LEN as u64),
                (0x4000, 0xc00, 8)
            ]
        );
        for w in caps.windows(2) {
            assert!(w[0].1 + w[0].2 <= w[1].1, "{caps:x?}");
        }
        let status = read64(&r, 0xc00);
        assert_eq!((status >> 2) & 3, 1, "media ready");
        assert_eq!(status & 1 << 4, 1 << 4, "mailbox ready");
        assert_eq!(read64(&r, 0x100), 0, "no event");
    }

    #[test]
    fn the_mailbox_answers_through_the_block_and_status_is_read_only() {
        let mut r = DeviceRegisters::new(Identify);
        r.write(0x200 + 0x08, &0x4000u64.to_le_bytes());
        r.write(0x200 + 0x04, &[1]);
        assert_eq!(r.mailbox().commands_run(), 1);
        let mut out = [0u8; 3];
        r.read(0x200 + 0x20, &mut out);
        assert_eq!(&out, b"yes");
        r.write(0xc00, &[0; 8]);
        r.write(0, &[0xff; 0x40]);
        assert_eq!(read64(&r, 0xc00), MEMDEV_READY);
        assert_eq!(read64(&r, 0) & 0xffff, 0);
        // A write that starts before the mailbox and runs into it reaches
        // only the mailbox's part.
        r.write(0x1f8, &[0xee; 16]);
        let mut caps = [0u8; 4];
        r.read(0x200, &mut caps);
        assert_eq!(
            u32::from_le_bytes(caps),
            11,
            "mailbox capabilities read-only"
        );
        r.write(u64::MAX, &[1; 8]);
        r.write(DEVICE_REGS_LEN as u64 - 1, &[1; 8]);
    }

    /// Event logs whose status the test sets.
    #[derive(Debug)]
    struct Logs(u32);

    impl CommandSet for Logs {
        fn execute(&mut self, _: u16, _: &[u8], _: &mut [u8]) -> CommandResult {
            Err(ReturnCode::Unsupported)
        }
        fn event_status(&self) -> u32 {
            self.0
        }
    }

    #[test]
    fn event_status_follows_the_logs_and_is_read_only() {
        let mut r = DeviceRegisters::new(Logs(0b0100));
        let mut b = [0u8; 8];
        r.read(0x100, &mut b);
        assert_eq!(u64::from_le_bytes(b), 0b0100, "failure log non-empty");
        // Linux's readl of the low half, and a byte read.
        let mut low = [0u8; 4];
        r.read(0x100, &mut low);
        assert_eq!(u32::from_le_bytes(low), 0b0100);
        r.write(0x100, &[0; 8]);
        r.mailbox_mut().commands_mut().0 = 0b1001;
        let mut one = [0u8; 1];
        r.read(0x100, &mut one);
        assert_eq!(one[0], 0b1001);
        r.mailbox_mut().commands_mut().0 = 0;
        r.read(0x100, &mut b);
        assert_eq!(
            b, [0; 8],
            "all logs empty: 0, what cxl_event_thread waits for"
        );
    }
}
