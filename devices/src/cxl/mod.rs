//! CXL Type-3 persistent memory, the device side: the primary [`mailbox`]
//! register block of a memory device and the [`memdev`] command set behind it
//! (identity, partitions, the label storage area, health, firmware and
//! timestamp, poison, the [`events`] logs). Written to what Linux's `cxl_pci`
//! and `cxl_mem` ask of a device (6.1 and 6.12) and the CXL 2.0
//! specification's layouts.
//!
//! Every value the guest puts in the registers or the payload is hostile:
//! lengths, offsets and addresses are checked before use, a command never
//! reads or writes outside the payload, the label area or the device's
//! capacity, and a return code is always one Linux can index (at most
//! [`ReturnCode::InvalidPayloadLength`]).

pub mod alerts;
pub mod bus;
pub mod component;
pub mod device_regs;
pub mod events;
pub mod hdm;
pub mod mailbox;
pub mod memdev;
pub mod pci_config;
pub mod root_port;
pub mod type3;

/// A mailbox command's return code (CXL 2.0 table 8-34; Linux's
/// `CMD_CMD_RC_TABLE`, which it indexes without a bound: no code above 0x16
/// may reach the guest).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u16)]
pub enum ReturnCode {
    /// The command completed.
    Success = 0,
    /// A field of the input is not valid.
    InvalidInput = 2,
    /// The opcode is not supported.
    Unsupported = 3,
    /// The device failed internally (the host's storage failed).
    InternalError = 4,
    /// An event record handle that is not the log's oldest in order.
    InvalidHandle = 0xe,
    /// A device physical address outside the device, or misaligned.
    InvalidPhysicalAddress = 0xf,
    /// No more poison can be injected.
    InjectPoisonLimitReached = 0x10,
    /// The payload length does not fit the command.
    InvalidPayloadLength = 0x16,
}

/// What a command answers: the output length, or the return code of its
/// failure (no output).
pub type CommandResult = Result<usize, ReturnCode>;

/// The commands behind a mailbox.
pub trait CommandSet {
    /// Runs `opcode` on `input`, writing at most `output.len()` bytes of
    /// output (the payload area).
    fn execute(&mut self, opcode: u16, input: &[u8], output: &mut [u8]) -> CommandResult;

    /// The event status register (the device status capability's first
    /// register): bit n set while event log n holds records. None by default.
    fn event_status(&self) -> u32 {
        0
    }
}

/// Byte `i` of a guest access at `offset` as an index into a register block
/// of `len` bytes, or None when it falls outside (or the sum overflows).
pub(crate) fn byte_in(offset: u64, i: usize, len: usize) -> Option<usize> {
    usize::try_from(offset)
        .ok()?
        .checked_add(i)
        .filter(|&at| at < len)
}
