//! The event logs of a CXL memory device (CXL 2.0 8.2.9.1) and the four
//! commands that reach them:
//!
//! | opcode | command | payload in → out (bytes) |
//! |---|---|---|
//! | 0x0100 | Get Event Records | 1 (log) → 0x20 + 128 per record |
//! | 0x0101 | Clear Event Records | 6 + 2 per handle → 0 |
//! | 0x0102 | Get Event Interrupt Policy | 0 → 4 |
//! | 0x0103 | Set Event Interrupt Policy | 4 → 0 |
//!
//! Four logs — Informational (0), Warning (1), Failure (2), Fatal (3) — each
//! hold at most [`LOG_CAPACITY`] records of 128 bytes, oldest first. A record
//! that finds its log full is dropped and counted in the log's overflow state
//! (count, first and last overflow timestamps), which Get Event Records
//! reports until Clear Event Records next removes a record. Handles are per
//! log, non-zero and increasing, wrapping past 0; a log's live handles are
//! consecutive, so never repeated.
//!
//! Get Event Records returns the oldest records, as many whole ones as the
//! payload holds, with "more records" when some are left; the records stay
//! until cleared. Clear Event Records takes the handles of the oldest records
//! in order (what Linux's `cxl_clear_event_record` sends after a Get), or
//! "clear all" with no handles on a log that overflowed; any other handle
//! list answers Invalid Handle and clears nothing.
//!
//! The interrupt policy is each log's mode: none (0) or MSI/MSI-X (1). The
//! firmware mode (2; there is no firmware-first path) and 3 are refused. The
//! device has one interrupt vector, so Get reports message number 0 in bits
//! 7:4; Set's bits 7:2 are reserved and ignored. While a log's mode is MSI, a
//! record pushed to it (stored or dropped by overflow) leaves an interrupt
//! pending for [`EventLogs::take_interrupt`]: once per record, or once for
//! several pushed between two takes. That is more often than CXL's "the log
//! went from empty to not empty"; an extra interrupt finds the logs already
//! read, which Linux's `cxl_event_thread` takes in its stride.

use std::collections::VecDeque;

use super::{CommandResult, ReturnCode};

/// Records each log holds (Identify's event log sizes).
pub const LOG_CAPACITY: u16 = 64;
/// Bytes of one event record.
pub const RECORD_LEN: usize = 128;
/// Bytes of Get Event Records' output before the records.
pub const GET_HEADER_LEN: usize = 0x20;
/// The General Media Event Record's UUID, `fbcd0a77-c260-417f-85a9-088b1621eba6`.
pub const GENERAL_MEDIA_UUID: [u8; 16] = [
    0xfb, 0xcd, 0x0a, 0x77, 0xc2, 0x60, 0x41, 0x7f, 0x85, 0xa9, 0x08, 0x8b, 0x16, 0x21, 0xeb, 0xa6,
];

/// Record flag: a permanent condition.
pub const FLAG_PERMANENT: u32 = 1 << 2;
/// Record flag: maintenance needed.
pub const FLAG_MAINTENANCE_NEEDED: u32 = 1 << 3;
/// Record flag: performance degraded.
pub const FLAG_PERFORMANCE_DEGRADED: u32 = 1 << 4;
/// Record flag: hardware replacement needed.
pub const FLAG_HARDWARE_REPLACEMENT: u32 = 1 << 5;
/// General Media descriptor: an uncorrectable event.
pub const DESCRIPTOR_UNCORRECTABLE: u8 = 1 << 0;
/// General Media descriptor: a threshold event.
pub const DESCRIPTOR_THRESHOLD: u8 = 1 << 1;
/// General Media descriptor: the poison list overflowed.
pub const DESCRIPTOR_POISON_LIST_OVERFLOW: u8 = 1 << 2;

/// Get Event Records' output flags.
const FLAG_OVERFLOW: u8 = 1 << 0;
const FLAG_MORE_RECORDS: u8 = 1 << 1;
/// Clear Event Records' input flags.
const CLEAR_ALL: u8 = 1 << 0;
const CLEAR_HEADER_LEN: usize = 6;
/// An interrupt setting's mode bits and the MSI/MSI-X mode.
const MODE_MASK: u8 = 0b11;
const MODE_MSI: u8 = 1;
/// Where the record handle sits in a record.
const HANDLE_AT: usize = 0x14;

/// One of the four event logs; also a record's severity (header flags bits
/// 1:0).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventLog {
    /// Informational.
    Informational = 0,
    /// Warning.
    Warning = 1,
    /// Failure.
    Failure = 2,
    /// Fatal.
    Fatal = 3,
}

impl EventLog {
    /// The log a guest's log type byte names, if any.
    pub fn from_byte(b: u8) -> Option<Self> {
        match b {
            0 => Some(Self::Informational),
            1 => Some(Self::Warning),
            2 => Some(Self::Failure),
            3 => Some(Self::Fatal),
            _ => None,
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// A General Media record's memory event type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MediaEventType {
    /// An ECC error.
    EccError = 0,
    /// An invalid address.
    InvalidAddress = 1,
    /// A data path error.
    DataPathError = 2,
}

/// A General Media record's transaction type: what the device was doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transaction {
    /// Unknown.
    Unknown = 0,
    /// A host read.
    HostRead = 1,
    /// A host write.
    HostWrite = 2,
    /// A host's Scan Media.
    HostScanMedia = 3,
    /// A host's Inject Poison.
    HostInjectPoison = 4,
    /// The device's own media scrub.
    InternalMediaScrub = 5,
    /// The device's own media management.
    InternalMediaManagement = 6,
}

/// What a General Media Event Record (CXL 2.0 8.2.9.1.1.1) says; channel,
/// rank, device and component id are not reported (validity flags 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GeneralMedia {
    /// The device physical address; bits 5:0 are not kept.
    pub dpa: u64,
    /// Whether the address is in volatile memory.
    pub volatile: bool,
    /// Header flags beyond the severity ([`FLAG_PERMANENT`] ...).
    pub flags: u32,
    /// Memory event descriptor ([`DESCRIPTOR_UNCORRECTABLE`] ...).
    pub descriptor: u8,
    /// Memory event type.
    pub event_type: MediaEventType,
    /// Transaction type.
    pub transaction: Transaction,
}

impl GeneralMedia {
    /// An uncorrectable ECC error the device's media scrub found at `dpa` in
    /// persistent memory: what a device reports for a unit it found
    /// poisoned on its own.
    pub fn scrub_uncorrectable(dpa: u64) -> Self {
        Self {
            dpa,
            volatile: false,
            flags: 0,
            descriptor: DESCRIPTOR_UNCORRECTABLE,
            event_type: MediaEventType::EccError,
            transaction: Transaction::InternalMediaScrub,
        }
    }

    /// The 128 bytes of the record: UUID, common header (CXL 2.0 table
    /// 8-42; Linux's `cxl_event_record_hdr`), then the General Media fields
    /// (Linux's `cxl_event_media_hdr` and `cxl_event_gen_media`).
    pub fn record(&self, severity: EventLog, handle: u16, timestamp: u64) -> [u8; RECORD_LEN] {
        let mut r = [0u8; RECORD_LEN];
        r[..0x10].copy_from_slice(&GENERAL_MEDIA_UUID);
        r[0x10] = 0x80; // length: RECORD_LEN
        let flags = (self.flags & !0b11 & 0x00ff_ffff) | severity as u32;
        r[0x11..0x14].copy_from_slice(&flags.to_le_bytes()[..3]);
        r[HANDLE_AT..HANDLE_AT + 2].copy_from_slice(&handle.to_le_bytes());
        // Related handle 0x16: none; maintenance operation class 0x20: none.
        r[0x18..0x20].copy_from_slice(&timestamp.to_le_bytes());
        let address = (self.dpa & !0x3f) | u64::from(self.volatile);
        r[0x30..0x38].copy_from_slice(&address.to_le_bytes());
        r[0x38] = self.descriptor;
        r[0x39] = self.event_type as u8;
        r[0x3a] = self.transaction as u8;
        // Validity flags 0x3b, channel 0x3d, rank 0x3e, device 0x3f,
        // component id 0x42: not reported.
        r
    }
}

/// Records the log could not keep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Overflow {
    count: u16,
    first: u64,
    last: u64,
}

/// One log: its records, oldest first, and its overflow state.
#[derive(Debug, Default)]
struct Log {
    records: VecDeque<[u8; RECORD_LEN]>,
    next_handle: u16,
    overflow: Option<Overflow>,
}

impl Log {
    /// The next handle: non-zero, increasing, wrapping past 0.
    fn take_handle(&mut self) -> u16 {
        self.next_handle = self.next_handle.wrapping_add(1).max(1);
        self.next_handle
    }

    fn overflowed(&mut self, timestamp: u64) {
        let o = self.overflow.get_or_insert(Overflow {
            count: 0,
            first: timestamp,
            last: timestamp,
        });
        // The count does not wrap (CXL 2.0 table 8-35).
        o.count = o.count.saturating_add(1);
        o.last = timestamp;
    }
}

fn handle_of(record: &[u8; RECORD_LEN]) -> u16 {
    u16::from_le_bytes([record[HANDLE_AT], record[HANDLE_AT + 1]])
}

/// The four event logs, their interrupt policy and the pending interrupt.
#[derive(Debug, Default)]
pub struct EventLogs {
    logs: [Log; 4],
    /// Each log's interrupt mode (0 none, 1 MSI/MSI-X).
    modes: [u8; 4],
    interrupt: bool,
}

impl EventLogs {
    /// Empty logs, no interrupts.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a General Media record of `event` to `log` (its severity too),
    /// stamped `timestamp` (the device's time, ns). False when the log was
    /// full and the record only counted as an overflow.
    pub fn push_general_media(
        &mut self,
        log: EventLog,
        event: &GeneralMedia,
        timestamp: u64,
    ) -> bool {
        let l = &mut self.logs[log.index()];
        let stored = l.records.len() < usize::from(LOG_CAPACITY);
        if stored {
            let handle = l.take_handle();
            l.records.push_back(event.record(log, handle, timestamp));
        } else {
            l.overflowed(timestamp);
        }
        if self.modes[log.index()] == MODE_MSI {
            self.interrupt = true;
        }
        stored
    }

    /// Records held by each log, Informational to Fatal.
    pub fn counts(&self) -> [usize; 4] {
        [0, 1, 2, 3].map(|i| self.logs[i].records.len())
    }

    /// The event status register: bit n set while log n holds records.
    pub fn status(&self) -> u32 {
        (0..4)
            .filter(|&i| !self.logs[i].records.is_empty())
            .fold(0, |s, i| s | 1 << i)
    }

    /// Whether an interrupt is pending since the last call; clears it.
    pub fn take_interrupt(&mut self) -> bool {
        std::mem::take(&mut self.interrupt)
    }

    fn log_mut(&mut self, byte: u8) -> Result<&mut Log, ReturnCode> {
        let log = EventLog::from_byte(byte).ok_or(ReturnCode::InvalidInput)?;
        Ok(&mut self.logs[log.index()])
    }

    /// Get Event Records of the log `log` names, into `output`.
    pub fn get_records(&mut self, log: u8, output: &mut [u8]) -> CommandResult {
        let l = self.log_mut(log)?;
        let room = output
            .len()
            .checked_sub(GET_HEADER_LEN)
            .ok_or(ReturnCode::InvalidPayloadLength)?
            / RECORD_LEN;
        let shown = l.records.len().min(room).min(usize::from(u16::MAX));
        let header = &mut output[..GET_HEADER_LEN];
        header.fill(0);
        let mut flags = 0;
        if let Some(o) = l.overflow {
            flags |= FLAG_OVERFLOW;
            header[2..4].copy_from_slice(&o.count.to_le_bytes());
            header[4..12].copy_from_slice(&o.first.to_le_bytes());
            header[12..20].copy_from_slice(&o.last.to_le_bytes());
        }
        if shown < l.records.len() {
            flags |= FLAG_MORE_RECORDS;
        }
        header[0] = flags;
        let count = u16::try_from(shown).unwrap_or(u16::MAX);
        header[20..22].copy_from_slice(&count.to_le_bytes());
        let body = &mut output[GET_HEADER_LEN..GET_HEADER_LEN + shown * RECORD_LEN];
        for (slot, record) in body.chunks_exact_mut(RECORD_LEN).zip(&l.records) {
            slot.copy_from_slice(record);
        }
        Ok(GET_HEADER_LEN + shown * RECORD_LEN)
    }

    /// Clear Event Records: log u8, flags u8, handle count u8, 3 reserved,
    /// then the handles (u16 each).
    pub fn clear_records(&mut self, input: &[u8]) -> CommandResult {
        let (head, handles) = input
            .split_at_checked(CLEAR_HEADER_LEN)
            .ok_or(ReturnCode::InvalidPayloadLength)?;
        let n = usize::from(head[2]);
        if handles.len() != 2 * n {
            return Err(ReturnCode::InvalidPayloadLength);
        }
        let l = self.log_mut(head[0])?;
        if head[1] & CLEAR_ALL != 0 {
            // Only with no handles, and only on a log that overflowed
            // (CXL 2.0 8.2.9.1.3).
            if n != 0 || l.overflow.is_none() {
                return Err(ReturnCode::InvalidInput);
            }
            l.records.clear();
            l.overflow = None;
            return Ok(0);
        }
        let oldest_in_order = n <= l.records.len()
            && handles
                .chunks_exact(2)
                .map(|h| u16::from_le_bytes([h[0], h[1]]))
                .zip(l.records.iter().map(handle_of))
                .all(|(asked, held)| asked == held);
        if !oldest_in_order {
            return Err(ReturnCode::InvalidHandle);
        }
        if n > 0 {
            l.records.drain(..n);
            l.overflow = None;
        }
        Ok(0)
    }

    /// Get Event Interrupt Policy: each log's setting, mode in bits 1:0,
    /// message number (0, the one vector) in bits 7:4.
    pub fn policy(&self) -> [u8; 4] {
        self.modes
    }

    /// Set Event Interrupt Policy: each log's mode in bits 1:0 (bits 7:2
    /// reserved); anything but none or MSI/MSI-X refuses the whole setting.
    pub fn set_policy(&mut self, input: [u8; 4]) -> Result<(), ReturnCode> {
        let modes = input.map(|s| s & MODE_MASK);
        if modes.iter().any(|&m| m > MODE_MSI) {
            return Err(ReturnCode::InvalidInput);
        }
        self.modes = modes;
        Ok(())
    }
}

#[cfg(test)]
#[path = "events_tests.rs"]
mod tests;
