//! HDM decoders (CXL 2.0 8.2.5.12): the registers through which the guest
//! places a device's memory in host physical address space, at an endpoint
//! (decoding host addresses into device physical addresses, DPA) or at a host
//! bridge (routing them to root ports).
//!
//! Layout from the capability's start, 32-bit registers:
//!
//! | offset | register |
//! |---|---|
//! | 0x00 | Capability: decoder count [3:0] (n → 2n, 0 → 1), target count [7:4] |
//! | 0x04 | Global Control: bit 0 poison on decode error, bit 1 HDM decoder enable |
//! | 0x10 + 0x20·n | Decoder n: Base Low [31:28], Base High, Size Low [31:28], Size High, Control, then Target List (bridge) or DPA Skip (endpoint) Low/High |
//!
//! Control: IG [3:0] (256 B << IG), IW [7:4], bit 8 lock on commit, bit 9
//! commit, bit 10 committed, bit 11 error not committed, bit 12 target type.
//!
//! A write that sets Commit checks the decoder at once (Linux polls
//! Committed for 20 ms): in order after the decoders below it, base and
//! size in 256 MiB units and size above 0, IG at most 16 KiB, no overlap
//! with another committed decoder's addresses, and at an endpoint one-way
//! (interleaving is not decoded here) and a DPA range inside the capacity.
//! Then Committed is set and the commit is reported as a [`DecoderEvent`];
//! otherwise Error Not Committed. Clearing Commit undoes it. While committed,
//! a decoder's address, size and skip or targets do not change.

/// Bytes of the capability with [`DECODERS`] decoders.
pub const HDM_LEN: usize = 0x10 + 0x20 * DECODERS;
/// Decoders per capability (the count field's 2 → 4 decoders).
pub const DECODERS: usize = 4;
const COUNT_FIELD: u32 = 2;
/// Address and size granularity.
pub const HDM_UNIT: u64 = 256 << 20;

const CAPABILITY: usize = 0x00;
const GLOBAL_CONTROL: usize = 0x04;
const GLOBAL_WRITABLE: u32 = 0b11;
const CTRL_IG: u32 = 0xf;
const CTRL_IW_SHIFT: u32 = 4;
const CTRL_LOCK: u32 = 1 << 8;
const CTRL_COMMIT: u32 = 1 << 9;
const CTRL_COMMITTED: u32 = 1 << 10;
const CTRL_ERROR: u32 = 1 << 11;
const CTRL_TYPE: u32 = 1 << 12;
const CTRL_WRITABLE: u32 = 0xff | CTRL_LOCK | CTRL_COMMIT | CTRL_TYPE;

/// Which side of the link the decoders sit on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecoderSide {
    /// A memory device of this many bytes: decoders map into its DPA space
    /// (the last pair of each decoder is its DPA skip).
    Endpoint {
        /// Device capacity in bytes.
        capacity: u64,
    },
    /// A host bridge or switch: the last pair is the target list.
    Bridge,
}

/// A commit or its undoing, for the VMM to map or unmap memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecoderEvent {
    /// Decoder `index` now decodes `[hpa, hpa + size)`; at an endpoint from
    /// DPA `dpa` on.
    Committed {
        /// Which decoder.
        index: usize,
        /// Host physical base.
        hpa: u64,
        /// Bytes.
        size: u64,
        /// Device physical base (0 at a bridge).
        dpa: u64,
    },
    /// Decoder `index` no longer decodes anything.
    Reset {
        /// Which decoder.
        index: usize,
    },
}

#[derive(Debug, Clone, Copy, Default)]
struct Decoder {
    base: u64,
    size: u64,
    control: u32,
    /// Target list (bridge) or DPA skip (endpoint), low then high dword.
    last: u64,
}

impl Decoder {
    fn committed(&self) -> bool {
        self.control & CTRL_COMMITTED != 0
    }
    fn ways_field(&self) -> u32 {
        (self.control >> CTRL_IW_SHIFT) & 0xf
    }
}

/// One HDM decoder capability.
#[derive(Debug)]
pub struct HdmDecoders {
    side: DecoderSide,
    global: u32,
    decoders: [Decoder; DECODERS],
    events: Vec<DecoderEvent>,
}

impl HdmDecoders {
    /// Uncommitted decoders on `side`.
    pub fn new(side: DecoderSide) -> Self {
        Self {
            side,
            global: 0,
            decoders: [Decoder::default(); DECODERS],
            events: Vec::new(),
        }
    }

    /// The commits and resets since the last call, oldest first.
    pub fn take_events(&mut self) -> Vec<DecoderEvent> {
        std::mem::take(&mut self.events)
    }

    /// Whether the guest has enabled the decoders (Global Control bit 1).
    pub fn enabled(&self) -> bool {
        self.global & 0b10 != 0
    }

    /// Reads the 32-bit register at `offset` (0 outside the capability).
    pub fn read32(&self, offset: usize) -> u32 {
        match offset {
            CAPABILITY => COUNT_FIELD | 1 << 4,
            GLOBAL_CONTROL => self.global,
            o if (0x10..HDM_LEN).contains(&o) => {
                let d = &self.decoders[(o - 0x10) / 0x20];
                let lo = |v: u64| u32::try_from(v & 0xffff_ffff).unwrap_or(0);
                match (o - 0x10) % 0x20 {
                    0x00 => lo(d.base),
                    0x04 => lo(d.base >> 32),
                    0x08 => lo(d.size),
                    0x0c => lo(d.size >> 32),
                    0x10 => d.control,
                    0x14 => lo(d.last),
                    0x18 => lo(d.last >> 32),
                    _ => 0,
                }
            }
            _ => 0,
        }
    }

    /// Writes the 32-bit register at `offset` (dropped outside the
    /// capability and on read-only bits).
    pub fn write32(&mut self, offset: usize, value: u32) {
        match offset {
            GLOBAL_CONTROL => self.global = value & GLOBAL_WRITABLE,
            o if (0x10..HDM_LEN).contains(&o) => {
                self.write_decoder((o - 0x10) / 0x20, (o - 0x10) % 0x20, value);
            }
            _ => {}
        }
    }

    fn write_decoder(&mut self, index: usize, reg: usize, value: u32) {
        let d = self.decoders[index];
        if reg == 0x10 {
            return self.write_control(index, value);
        }
        // Address, size and skip or targets hold still while committed.
        if d.committed() {
            return;
        }
        let set_lo = |old: u64, v: u32, mask: u32| (old & !0xffff_ffff) | u64::from(v & mask);
        let set_hi = |old: u64, v: u32| (old & 0xffff_ffff) | (u64::from(v) << 32);
        let unit_mask = 0xf000_0000;
        let d = &mut self.decoders[index];
        match reg {
            0x00 => d.base = set_lo(d.base, value, unit_mask),
            0x04 => d.base = set_hi(d.base, value),
            0x08 => d.size = set_lo(d.size, value, unit_mask),
            0x0c => d.size = set_hi(d.size, value),
            0x14 => {
                let mask = match self.side {
                    DecoderSide::Endpoint { .. } => unit_mask,
                    DecoderSide::Bridge => u32::MAX,
                };
                d.last = set_lo(d.last, value, mask);
            }
            0x18 => d.last = set_hi(d.last, value),
            _ => {}
        }
    }

    fn write_control(&mut self, index: usize, value: u32) {
        let d = self.decoders[index];
        if d.committed() && d.control & CTRL_LOCK != 0 {
            return;
        }
        let status = d.control & (CTRL_COMMITTED | CTRL_ERROR);
        self.decoders[index].control = (value & CTRL_WRITABLE) | status;
        match (d.control & CTRL_COMMIT != 0, value & CTRL_COMMIT != 0) {
            (false, true) => self.commit(index),
            (true, false) => self.reset(index),
            _ => {}
        }
    }

    fn commit(&mut self, index: usize) {
        let result = self.check_commit(index);
        let d = &mut self.decoders[index];
        match result {
            Ok(dpa) => {
                d.control = (d.control | CTRL_COMMITTED) & !CTRL_ERROR;
                self.events.push(DecoderEvent::Committed {
                    index,
                    hpa: d.base,
                    size: d.size,
                    dpa,
                });
            }
            Err(why) => {
                log::debug!("HDM decoder {index} not committed: {why}");
                d.control = (d.control | CTRL_ERROR) & !CTRL_COMMITTED;
            }
        }
    }

    fn reset(&mut self, index: usize) {
        let d = &mut self.decoders[index];
        let was = d.committed();
        d.control &= !(CTRL_COMMITTED | CTRL_ERROR);
        if was {
            self.events.push(DecoderEvent::Reset { index });
        }
    }

    /// The DPA at which decoder `index` starts, or why it cannot commit.
    fn check_commit(&self, index: usize) -> Result<u64, &'static str> {
        let d = &self.decoders[index];
        if index > 0 && !self.decoders[index - 1].committed() {
            return Err("the decoder below it is not committed");
        }
        if d.size == 0 {
            return Err("its size is 0");
        }
        let end = d.base.checked_add(d.size).ok_or("its range wraps")?;
        if d.control & CTRL_IG > 6 {
            return Err("its interleave granularity is above 16 KiB");
        }
        let overlaps = self.decoders.iter().enumerate().any(|(i, o)| {
            i != index && o.committed() && d.base < o.base.saturating_add(o.size) && o.base < end
        });
        if overlaps {
            return Err("it overlaps a committed decoder");
        }
        match self.side {
            DecoderSide::Bridge => Ok(0),
            DecoderSide::Endpoint { capacity } => {
                if d.ways_field() != 0 {
                    return Err("interleaving is not decoded at this endpoint");
                }
                // Each decoder's DPA follows the ones below it, after its skip.
                let below: u64 = self.decoders[..index]
                    .iter()
                    .map(|o| o.last.saturating_add(o.size))
                    .fold(0, u64::saturating_add);
                let dpa = below.saturating_add(d.last);
                match dpa.checked_add(d.size) {
                    Some(dpa_end) if dpa_end <= capacity => Ok(dpa),
                    _ => Err("its device addresses pass the capacity"),
                }
            }
        }
    }
}

#[cfg(test)]
#[path = "hdm_tests.rs"]
mod tests;
