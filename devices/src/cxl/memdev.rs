//! The command set of a persistent-only CXL memory device (CXL 2.0 8.2.9),
//! the opcodes Linux 6.1 and 6.12 send while probing a memdev and those the
//! `cxl` and `ndctl` tools reach through them:
//!
//! | opcode | command | payload in → out (bytes) |
//! |---|---|---|
//! | 0x0100 / 0x0101 | Get / Clear Event Records | 1 → 0x20 + 128 per record / 6 + 2 per handle → 0 ([`super::events`]) |
//! | 0x0102 / 0x0103 | Get / Set Event Interrupt Policy | 0 → 4 / 4 → 0 ([`super::events`]) |
//! | 0x0200 | Get FW Info | 0 → 0x50 |
//! | 0x0300 / 0x0301 | Get / Set Timestamp | 0 → 8 / 8 → 0 |
//! | 0x0400 | Get Supported Logs | 0 → 8 + 20 (the Command Effects Log) |
//! | 0x0401 | Get Log | 0x18 → the asked part of the CEL |
//! | 0x4000 | Identify | 0 → 0x43 |
//! | 0x4100 | Get Partition Info | 0 → 0x20 |
//! | 0x4102 / 0x4103 | Get / Set LSA | 8 → length / 8 + data → 0 |
//! | 0x4200 | Get Health Info | 0 → 0x12 |
//! | 0x4201 / 0x4202 | Get / Set Alert Configuration | 0 → 0x10 / 0x0C → 0 ([`super::alerts`]) |
//! | 0x4300 | Get Poison List | 0x10 → 0x20 (count at 0x0a) + 16 per record |
//! | 0x4301 / 0x4302 | Inject / Clear Poison | 8 → 0 / 0x48 → 0 |
//!
//! Any other opcode answers Unsupported. A command whose input length is not
//! its own answers Invalid Payload Length; offsets, lengths and device
//! physical addresses (DPA) are checked against the label area and the
//! capacity before anything is read or written. The whole capacity is
//! persistent (no volatile partition, partition alignment 0: Linux then asks
//! for no partition change). Poison is kept per 64-byte unit, for the device's
//! life. A media error the host reports ([`Memdev::record_media_error`])
//! poisons its unit and adds a General Media record to the Failure event log.

use std::collections::BTreeMap;
use std::io;
use std::time::Instant;

use super::alerts::AlertConfig;
use super::events::{EventLog, EventLogs, GeneralMedia, LOG_CAPACITY};
use super::{CommandResult, CommandSet, ReturnCode};
use crate::nvdimm_labels::LabelStorage;

/// Capacity is counted in these (CXL's 256 MiB multiplier).
pub const CAPACITY_UNIT: u64 = 256 << 20;
/// Poison granularity: one cache line.
pub const POISON_UNIT: u64 = 64;
/// Poisoned units the device keeps (Identify's poison list maximum and
/// injection limit).
pub const POISON_LIMIT: u16 = 256;

/// The Command Effects Log's UUID, `0da9c0b5-bf41-4b78-8f79-96b1623b3f17`.
pub const CEL_UUID: [u8; 16] = [
    0x0d, 0xa9, 0xc0, 0xb5, 0xbf, 0x41, 0x4b, 0x78, 0x8f, 0x79, 0x96, 0xb1, 0x62, 0x3b, 0x3f, 0x17,
];

const GET_EVENT_RECORDS: u16 = 0x0100;
const CLEAR_EVENT_RECORDS: u16 = 0x0101;
const GET_EVENT_POLICY: u16 = 0x0102;
const SET_EVENT_POLICY: u16 = 0x0103;
const GET_FW_INFO: u16 = 0x0200;
const GET_TIMESTAMP: u16 = 0x0300;
const SET_TIMESTAMP: u16 = 0x0301;
const GET_SUPPORTED_LOGS: u16 = 0x0400;
const GET_LOG: u16 = 0x0401;
const IDENTIFY: u16 = 0x4000;
const GET_PARTITION_INFO: u16 = 0x4100;
const GET_LSA: u16 = 0x4102;
const SET_LSA: u16 = 0x4103;
const GET_HEALTH_INFO: u16 = 0x4200;
const GET_ALERT_CONFIG: u16 = 0x4201;
const SET_ALERT_CONFIG: u16 = 0x4202;
const GET_POISON_LIST: u16 = 0x4300;
const INJECT_POISON: u16 = 0x4301;
const CLEAR_POISON: u16 = 0x4302;

/// The CEL: each supported opcode with its effects (bit 2: immediate data
/// change, bit 3: immediate policy change, bit 4: immediate log change;
/// Linux reads only the opcodes).
const CEL: [(u16, u16); 19] = [
    (GET_EVENT_RECORDS, 0),
    (CLEAR_EVENT_RECORDS, 1 << 4),
    (GET_EVENT_POLICY, 0),
    (SET_EVENT_POLICY, 1 << 3),
    (GET_FW_INFO, 0),
    (GET_TIMESTAMP, 0),
    (SET_TIMESTAMP, 0),
    (GET_SUPPORTED_LOGS, 0),
    (GET_LOG, 0),
    (IDENTIFY, 0),
    (GET_PARTITION_INFO, 0),
    (GET_LSA, 0),
    (SET_LSA, 1 << 2),
    (GET_HEALTH_INFO, 0),
    (GET_ALERT_CONFIG, 0),
    (SET_ALERT_CONFIG, 1 << 3),
    (GET_POISON_LIST, 0),
    (INJECT_POISON, 1 << 2),
    (CLEAR_POISON, 1 << 2),
];

/// Where Clear Poison's replacement data goes: the device's media.
pub trait MediaWrite {
    /// Writes `data` at device physical address `dpa` (checked to lie
    /// within the capacity).
    fn write_media(&self, dpa: u64, data: &[u8]) -> io::Result<()>;
}

/// Where a poisoned unit came from (Get Poison List's source field).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PoisonSource {
    /// Put there by Inject Poison.
    Injected = 3,
    /// Put there by the host (pmemvm's media-error commands).
    External = 1,
}

/// One persistent memory device's commands and state.
pub struct Memdev {
    capacity: u64,
    firmware: [u8; 16],
    labels: Box<dyn LabelStorage + Send>,
    media: Box<dyn MediaWrite + Send>,
    /// Poisoned 64-byte units by DPA.
    poison: BTreeMap<u64, PoisonSource>,
    /// Where the next Get Poison List of the same range goes on, after one
    /// that said "more".
    poison_cursor: Option<(u64, u64, u64)>,
    /// The last Set Timestamp: its value (ns) and when it came.
    timestamp: Option<(u64, Instant)>,
    dirty_shutdowns: u32,
    alerts: AlertConfig,
    events: EventLogs,
}

impl std::fmt::Debug for Memdev {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Memdev")
            .field("capacity", &self.capacity)
            .field("label_size", &self.labels.label_size())
            .field("poisoned_units", &self.poison.len())
            .finish_non_exhaustive()
    }
}

/// A bad device description.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum MemdevError {
    /// The capacity is not a positive multiple of 256 MiB.
    #[error("a CXL memory device's capacity must be a multiple of 256 MiB above 0, not {0} bytes")]
    Capacity(u64),
}

impl Memdev {
    /// A device of `capacity` bytes (a multiple of [`CAPACITY_UNIT`]) with its
    /// label storage area in `labels` and its media behind `media`.
    pub fn new(
        capacity: u64,
        labels: Box<dyn LabelStorage + Send>,
        media: Box<dyn MediaWrite + Send>,
    ) -> Result<Self, MemdevError> {
        if capacity == 0 || !capacity.is_multiple_of(CAPACITY_UNIT) {
            return Err(MemdevError::Capacity(capacity));
        }
        let mut firmware = [0u8; 16];
        let name = format!("pmemvm {}", env!("CARGO_PKG_VERSION"));
        let n = name.len().min(16);
        firmware[..n].copy_from_slice(&name.as_bytes()[..n]);
        Ok(Self {
            capacity,
            firmware,
            labels,
            media,
            poison: BTreeMap::new(),
            poison_cursor: None,
            timestamp: None,
            dirty_shutdowns: 0,
            alerts: AlertConfig::default(),
            events: EventLogs::new(),
        })
    }

    /// The dirty shutdown count Get Health Info reports.
    pub fn with_dirty_shutdowns(mut self, count: u32) -> Self {
        self.dirty_shutdowns = count;
        self
    }

    /// Capacity in bytes.
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// The poisoned units, by DPA.
    pub fn poisoned(&self) -> impl Iterator<Item = (u64, PoisonSource)> + '_ {
        self.poison.iter().map(|(&dpa, &s)| (dpa, s))
    }

    /// The whole poison list as Get Poison List reports it: runs of consecutive
    /// units of one source, as (DPA, units, source).
    pub fn poison_runs(&self) -> Vec<(u64, u64, PoisonSource)> {
        poison_runs(&self.poison, 0, u64::MAX, usize::MAX)
    }

    /// Poisons the unit at `dpa` from the host side (a media error pmemvm
    /// was asked to inject): as Inject Poison, with source "external".
    pub fn poison_from_host(&mut self, dpa: u64) -> Result<(), ReturnCode> {
        self.add_poison(dpa, PoisonSource::External)
    }

    /// A media error at `dpa` found by the device: poisons the unit as
    /// [`Memdev::poison_from_host`] does and adds a General Media record (an
    /// uncorrectable ECC error found by the media scrub,
    /// [`GeneralMedia::scrub_uncorrectable`]) to the Failure log, stamped with
    /// the device's time. Neither happens when the unit cannot be poisoned.
    pub fn record_media_error(&mut self, dpa: u64) -> Result<(), ReturnCode> {
        self.poison_from_host(dpa)?;
        let now = self.now_ns();
        let event = GeneralMedia::scrub_uncorrectable(dpa);
        self.events
            .push_general_media(EventLog::Failure, &event, now);
        Ok(())
    }

    /// Takes the unit at `dpa` off the poison list from the host side (a
    /// media error pmemvm was asked to clear); the media are not written.
    /// Whether the unit was poisoned.
    pub fn clear_poison_from_host(&mut self, dpa: u64) -> bool {
        self.poison.remove(&dpa).is_some()
    }

    /// Records held by `log`.
    pub fn event_count(&self, log: EventLog) -> usize {
        self.events.counts()[log as usize]
    }

    /// The event logs.
    pub fn events(&self) -> &EventLogs {
        &self.events
    }

    /// The event logs, for host-side records and the pending interrupt.
    pub fn events_mut(&mut self) -> &mut EventLogs {
        &mut self.events
    }

    /// A 64-byte-aligned DPA inside the capacity, or the code refusing it.
    fn checked_dpa(&self, dpa: u64) -> Result<u64, ReturnCode> {
        if !dpa.is_multiple_of(POISON_UNIT) || dpa >= self.capacity {
            return Err(ReturnCode::InvalidPhysicalAddress);
        }
        Ok(dpa)
    }

    fn add_poison(&mut self, dpa: u64, source: PoisonSource) -> Result<(), ReturnCode> {
        let dpa = self.checked_dpa(dpa)?;
        if !self.poison.contains_key(&dpa) && self.poison.len() >= usize::from(POISON_LIMIT) {
            return Err(ReturnCode::InjectPoisonLimitReached);
        }
        self.poison.entry(dpa).or_insert(source);
        Ok(())
    }
}

/// `input` as exactly `N` bytes, or Invalid Payload Length.
fn exact<const N: usize>(input: &[u8]) -> Result<[u8; N], ReturnCode> {
    input
        .try_into()
        .map_err(|_| ReturnCode::InvalidPayloadLength)
}

fn le_u32(b: &[u8]) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[..4]);
    u32::from_le_bytes(a)
}

fn le_u64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_le_bytes(a)
}

/// Writes `bytes` at the start of `out`, or Invalid Payload Length when the
/// payload cannot hold them.
fn answer(out: &mut [u8], bytes: &[u8]) -> CommandResult {
    let slot = out
        .get_mut(..bytes.len())
        .ok_or(ReturnCode::InvalidPayloadLength)?;
    slot.copy_from_slice(bytes);
    Ok(bytes.len())
}

impl CommandSet for Memdev {
    fn execute(&mut self, opcode: u16, input: &[u8], output: &mut [u8]) -> CommandResult {
        match opcode {
            GET_EVENT_RECORDS => self.events.get_records(exact::<1>(input)?[0], output),
            CLEAR_EVENT_RECORDS => self.events.clear_records(input),
            GET_EVENT_POLICY => {
                exact::<0>(input).and_then(|_| answer(output, &self.events.policy()))
            }
            SET_EVENT_POLICY => self.events.set_policy(exact::<4>(input)?).map(|()| 0),
            GET_FW_INFO => exact::<0>(input).and_then(|_| answer(output, &self.fw_info())),
            GET_TIMESTAMP => {
                exact::<0>(input).and_then(|_| answer(output, &self.now_ns().to_le_bytes()))
            }
            SET_TIMESTAMP => {
                let ns = u64::from_le_bytes(exact::<8>(input)?);
                self.timestamp = Some((ns, Instant::now()));
                Ok(0)
            }
            GET_SUPPORTED_LOGS => exact::<0>(input).and_then(|_| answer(output, &supported_logs())),
            GET_LOG => get_log(&exact::<0x18>(input)?, output),
            IDENTIFY => exact::<0>(input).and_then(|_| answer(output, &self.identify())),
            GET_PARTITION_INFO => {
                exact::<0>(input).and_then(|_| answer(output, &self.partition_info()))
            }
            GET_LSA => self.get_lsa(&exact::<8>(input)?, output),
            SET_LSA => self.set_lsa(input),
            GET_HEALTH_INFO => exact::<0>(input).and_then(|_| answer(output, &self.health_info())),
            GET_ALERT_CONFIG => exact::<0>(input).and_then(|_| answer(output, &self.alerts.get())),
            SET_ALERT_CONFIG => self.alerts.set(&exact::<0x0c>(input)?).map(|()| 0),
            GET_POISON_LIST => self.poison_list(&exact::<0x10>(input)?, output),
            INJECT_POISON => {
                let dpa = u64::from_le_bytes(exact::<8>(input)?);
                self.add_poison(dpa, PoisonSource::Injected).map(|()| 0)
            }
            CLEAR_POISON => self.clear_poison(&exact::<0x48>(input)?),
            _ => Err(ReturnCode::Unsupported),
        }
    }

    fn event_status(&self) -> u32 {
        self.events.status()
    }
}

fn supported_logs() -> [u8; 28] {
    let mut out = [0u8; 28];
    out[0..2].copy_from_slice(&1u16.to_le_bytes());
    out[8..24].copy_from_slice(&CEL_UUID);
    let size = u32::try_from(CEL.len() * 4).unwrap_or(0);
    out[24..28].copy_from_slice(&size.to_le_bytes());
    out
}

fn cel_bytes() -> Vec<u8> {
    CEL.iter()
        .flat_map(|(op, effects)| op.to_le_bytes().into_iter().chain(effects.to_le_bytes()))
        .collect()
}

fn get_log(input: &[u8; 0x18], output: &mut [u8]) -> CommandResult {
    if input[..16] != CEL_UUID {
        return Err(ReturnCode::InvalidInput);
    }
    let offset = usize::try_from(le_u32(&input[16..])).unwrap_or(usize::MAX);
    let length = usize::try_from(le_u32(&input[20..])).unwrap_or(usize::MAX);
    if length > output.len() {
        return Err(ReturnCode::InvalidPayloadLength);
    }
    let cel = cel_bytes();
    let part = offset
        .checked_add(length)
        .and_then(|end| cel.get(offset..end))
        .ok_or(ReturnCode::InvalidInput)?;
    answer(output, part)
}

impl Memdev {
    fn capacity_units(&self) -> u64 {
        self.capacity / CAPACITY_UNIT
    }

    fn now_ns(&self) -> u64 {
        self.timestamp.map_or(0, |(ns, at)| {
            let since = u64::try_from(at.elapsed().as_nanos()).unwrap_or(u64::MAX);
            ns.saturating_add(since)
        })
    }

    fn fw_info(&self) -> [u8; 0x50] {
        let mut out = [0u8; 0x50];
        out[0] = 1; // one slot
        out[1] = 1; // slot 1 active, none staged
        out[0x10..0x20].copy_from_slice(&self.firmware);
        out
    }

    fn identify(&self) -> [u8; 0x43] {
        let mut out = [0u8; 0x43];
        out[0..16].copy_from_slice(&self.firmware);
        let units = self.capacity_units();
        out[0x10..0x18].copy_from_slice(&units.to_le_bytes()); // total
        out[0x20..0x28].copy_from_slice(&units.to_le_bytes()); // persistent only
        for log in 0..4 {
            // Informational, warning, failure and fatal event log sizes.
            out[0x30 + 2 * log..0x32 + 2 * log].copy_from_slice(&LOG_CAPACITY.to_le_bytes());
        }
        out[0x38..0x3c].copy_from_slice(&self.labels.label_size().to_le_bytes());
        out[0x3c..0x3f].copy_from_slice(&u32::from(POISON_LIMIT).to_le_bytes()[..3]);
        out[0x3f..0x41].copy_from_slice(&POISON_LIMIT.to_le_bytes());
        out
    }

    fn partition_info(&self) -> [u8; 0x20] {
        let mut out = [0u8; 0x20];
        out[8..16].copy_from_slice(&self.capacity_units().to_le_bytes());
        out
    }

    fn health_info(&self) -> [u8; 0x12] {
        let mut out = [0u8; 0x12];
        // Health, media and extended status normal, no life used; the
        // temperature is not measured (0xffff says so).
        out[4..6].copy_from_slice(&0xffffu16.to_le_bytes());
        out[6..10].copy_from_slice(&self.dirty_shutdowns.to_le_bytes());
        out
    }

    /// The label area's `offset..offset + length`, checked, or the code
    /// refusing it.
    fn lsa_range(&self, offset: u32, length: usize) -> Result<u64, ReturnCode> {
        let size = self.labels.label_size();
        if size == 0 {
            return Err(ReturnCode::Unsupported);
        }
        let end = u64::from(offset).checked_add(u64::try_from(length).unwrap_or(u64::MAX));
        match end {
            Some(end) if end <= u64::from(size) => Ok(u64::from(offset)),
            _ => Err(ReturnCode::InvalidInput),
        }
    }

    fn get_lsa(&self, input: &[u8; 8], output: &mut [u8]) -> CommandResult {
        let length = usize::try_from(le_u32(&input[4..])).unwrap_or(usize::MAX);
        if length > output.len() {
            return Err(ReturnCode::InvalidPayloadLength);
        }
        let offset = self.lsa_range(le_u32(input), length)?;
        self.labels
            .read_label(offset, &mut output[..length])
            .map_err(|_| ReturnCode::InternalError)?;
        Ok(length)
    }

    fn set_lsa(&mut self, input: &[u8]) -> CommandResult {
        let (head, data) = input
            .split_at_checked(8)
            .ok_or(ReturnCode::InvalidPayloadLength)?;
        let offset = self.lsa_range(le_u32(head), data.len())?;
        if self.labels.readonly() {
            return Err(ReturnCode::Unsupported);
        }
        self.labels
            .write_label(offset, data)
            .and_then(|()| self.labels.sync_labels())
            .map_err(|_| ReturnCode::InternalError)?;
        Ok(0)
    }

    fn clear_poison(&mut self, input: &[u8; 0x48]) -> CommandResult {
        let dpa = self.checked_dpa(le_u64(input))?;
        self.media
            .write_media(dpa, &input[8..])
            .map_err(|_| ReturnCode::InternalError)?;
        self.poison.remove(&dpa);
        Ok(0)
    }

    /// Get Poison List of `[dpa, dpa + units × 64)`: records of runs of
    /// poisoned units of one source, as many as the payload holds; "more"
    /// when some are left, and the same request again goes on from there.
    fn poison_list(&mut self, input: &[u8; 0x10], output: &mut [u8]) -> CommandResult {
        let dpa = le_u64(input);
        let units = le_u64(&input[8..]);
        let end = units
            .checked_mul(POISON_UNIT)
            .and_then(|len| dpa.checked_add(len))
            .filter(|&end| units > 0 && dpa.is_multiple_of(POISON_UNIT) && end <= self.capacity)
            .ok_or(ReturnCode::InvalidPhysicalAddress)?;
        let room = output.len().saturating_sub(0x20) / 16;
        let from = match self.poison_cursor {
            Some((d, u, next)) if d == dpa && u == units => next,
            _ => dpa,
        };
        let records = poison_runs(&self.poison, from, end, room + 1);
        let more = records.len() > room;
        let shown = &records[..records.len().min(room)];
        self.poison_cursor = match (more, shown.last()) {
            (true, Some(&(start, n, _))) => Some((dpa, units, start + n * POISON_UNIT)),
            _ => None,
        };
        let mut out = vec![0u8; 0x20 + 16 * shown.len()];
        out[0] = u8::from(more);
        // Header: flags, reserved, overflow timestamp (u64), count (u16) at
        // 0x0a, 20 reserved (Linux's `cxl_mbox_poison_out`).
        out[0x0a..0x0c].copy_from_slice(&u16::try_from(shown.len()).unwrap_or(0).to_le_bytes());
        for (i, &(start, n, source)) in shown.iter().enumerate() {
            let at = 0x20 + 16 * i;
            out[at..at + 8].copy_from_slice(&(start | source as u64).to_le_bytes());
            out[at + 8..at + 12]
                .copy_from_slice(&u32::try_from(n).unwrap_or(u32::MAX).to_le_bytes());
        }
        answer(output, &out)
    }
}

/// The runs of consecutive poisoned units of one source in `[from, end)`,
/// as (first DPA, units, source), at most `max` of them.
fn poison_runs(
    poison: &BTreeMap<u64, PoisonSource>,
    from: u64,
    end: u64,
    max: usize,
) -> Vec<(u64, u64, PoisonSource)> {
    let mut runs: Vec<(u64, u64, PoisonSource)> = Vec::new();
    for (&dpa, &source) in poison.range(from..end) {
        let full = runs.len() == max;
        match runs.last_mut() {
            Some((start, n, s)) if *s == source && *start + *n * POISON_UNIT == dpa => *n += 1,
            _ if full => break,
            _ => runs.push((dpa, 1, source)),
        }
    }
    runs
}

#[cfg(test)]
#[path = "memdev_tests.rs"]
mod tests;
