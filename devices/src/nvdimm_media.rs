//! The media state of one NVDIMM: its bad ranges (poisoned 512-byte
//! blocks), its health (SMART) values and injections, and the unsafe
//! shutdown count with the dirty flag that drives it.
//!
//! The state persists with the backing file, in the second half of the 4 KiB
//! identity page pmemvm keeps at the end of every backing file (the first
//! half holds the DIMM's identity: see `vmm/src/identity.rs`). The block is
//! outside everything the guest maps, travels with the file on a copy or a
//! `mv` as the labels do, and is written with `pwrite` + `fdatasync` before
//! the guest (or the user) sees a change succeed. Layout, little-endian:
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 16 | magic `PMEMVM-NVDIMM-MS` |
//! | 16 | 4 | version (1) |
//! | 20 | 4 | flags (see `FLAG_*`) |
//! | 24 | 4 | unsafe shutdown count |
//! | 28 | 2 | injected media temperature (1/16 °C, bit 15 = negative) |
//! | 30 | 1 | injected spares (%) |
//! | 31 | 1 | spares alarm threshold (%) |
//! | 32 | 2 | alarm control (bit 0 spares, 1 media temperature, 2 controller temperature) |
//! | 34 | 2 | media temperature threshold |
//! | 36 | 2 | controller temperature threshold |
//! | 38 | 1 | health status set from outside (valid with `FLAG_HEALTH_SET`: 1 non-critical, 2 critical) |
//! | 39 | 1 | zero |
//! | 40 | 4 | number of bad ranges *n* ≤ [`MAX_BAD_RANGES`] |
//! | 44 | 4 | zero |
//! | 48 | 16·*n* | bad ranges: offset from the region start (u64), length (u64), bytes |
//! | 2040 | 8 | FNV-1a 64 of bytes 0..2040 |
//!
//! A block of zeros is a DIMM that never had any of this (a file made by an
//! older pmemvm): no bad range, count 0, default health.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::Mutex;

/// Size of the block (the second half of the identity page).
pub const MEDIA_BLOCK_SIZE: usize = 2048;
/// Offset of the block within the identity page.
pub const MEDIA_BLOCK_OFFSET: usize = 2048;
/// Magic at offset 0.
pub const MEDIA_MAGIC: [u8; 16] = *b"PMEMVM-NVDIMM-MS";
/// Block format version.
const MEDIA_VERSION: u32 = 1;
/// Offset of the first bad range.
const RANGES_AT: usize = 48;
/// Offset of the checksum.
const SUM_AT: usize = MEDIA_BLOCK_SIZE - 8;
/// Most bad ranges one DIMM records (what fits in the block).
pub const MAX_BAD_RANGES: usize = (SUM_AT - RANGES_AT) / 16;
/// Granularity of bad ranges: Linux's badblocks are 512-byte sectors.
pub const BAD_BLOCK_SIZE: u64 = 512;

/// Flag: a pmemvm run holds the file and has not ended in order.
pub const FLAG_DIRTY: u32 = 1 << 0;
/// Flag: the last shutdown before this run was not orderly.
pub const FLAG_LAST_SHUTDOWN_DIRTY: u32 = 1 << 1;
/// Flag: a fatal health state was injected.
pub const FLAG_FATAL: u32 = 1 << 2;
/// Flag: a media temperature was injected.
pub const FLAG_MTEMP_INJECTED: u32 = 1 << 3;
/// Flag: a spares value was injected.
pub const FLAG_SPARES_INJECTED: u32 = 1 << 4;
/// Flag: the thresholds below were set (otherwise the defaults apply).
pub const FLAG_THRESHOLDS_SET: u32 = 1 << 5;
/// Flag: a health status was set through the control socket (`health set`).
pub const FLAG_HEALTH_SET: u32 = 1 << 6;
const KNOWN_FLAGS: u32 = (1 << 7) - 1;

/// Default media temperature threshold: 85 °C in 1/16 °C.
pub const DEFAULT_MTEMP_THRESHOLD: u16 = 85 * 16;
/// Default controller temperature threshold: 85 °C.
pub const DEFAULT_CTEMP_THRESHOLD: u16 = 85 * 16;
/// Default spares threshold: 10 %.
pub const DEFAULT_SPARES_THRESHOLD: u8 = 10;

/// One bad range: bytes from the start of the DIMM's region.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct BadRange {
    /// Offset from the region start (a multiple of 512).
    pub offset: u64,
    /// Length (a non-zero multiple of 512).
    pub length: u64,
}

impl BadRange {
    /// One past the last byte.
    pub fn end(&self) -> u64 {
        self.offset.saturating_add(self.length)
    }
}

/// Why a media change was refused.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum MediaError {
    /// The range is empty or does not fit in the region.
    #[error("bad range {offset}+{length} is empty or does not fit in the {region}-byte region")]
    OutOfRegion {
        /// Offset asked for.
        offset: u64,
        /// Length asked for.
        length: u64,
        /// Region size.
        region: u64,
    },
    /// More ranges than the block can hold.
    #[error("a DIMM records at most {MAX_BAD_RANGES} separate bad ranges")]
    TooManyRanges,
}

/// Everything persisted about a DIMM's media (see the module docs).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MediaState {
    /// `FLAG_*` bits.
    pub flags: u32,
    /// Unsafe shutdown count.
    pub shutdown_count: u32,
    /// Injected media temperature (valid with [`FLAG_MTEMP_INJECTED`]).
    pub media_temperature: u16,
    /// Injected spares (valid with [`FLAG_SPARES_INJECTED`]).
    pub spares: u8,
    /// Spares threshold (valid with [`FLAG_THRESHOLDS_SET`]).
    pub spares_threshold: u8,
    /// Alarm control bits.
    pub alarm_control: u16,
    /// Media temperature threshold (valid with [`FLAG_THRESHOLDS_SET`]).
    pub mtemp_threshold: u16,
    /// Controller temperature threshold (valid with [`FLAG_THRESHOLDS_SET`]).
    pub ctemp_threshold: u16,
    /// Health status bits set from outside (valid with [`FLAG_HEALTH_SET`]).
    pub health: u8,
    /// Bad ranges, sorted, merged, none empty.
    pub bad_ranges: Vec<BadRange>,
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

fn u64_at(b: &[u8], o: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[o..o + 8]);
    u64::from_le_bytes(a)
}

fn u32_at(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]])
}

fn u16_at(b: &[u8], o: usize) -> u16 {
    u16::from_le_bytes([b[o], b[o + 1]])
}

impl MediaState {
    /// The block bytes.
    pub fn encode(&self) -> [u8; MEDIA_BLOCK_SIZE] {
        let mut b = [0u8; MEDIA_BLOCK_SIZE];
        b[0..16].copy_from_slice(&MEDIA_MAGIC);
        b[16..20].copy_from_slice(&MEDIA_VERSION.to_le_bytes());
        b[20..24].copy_from_slice(&self.flags.to_le_bytes());
        b[24..28].copy_from_slice(&self.shutdown_count.to_le_bytes());
        b[28..30].copy_from_slice(&self.media_temperature.to_le_bytes());
        b[30] = self.spares;
        b[31] = self.spares_threshold;
        b[32..34].copy_from_slice(&self.alarm_control.to_le_bytes());
        b[34..36].copy_from_slice(&self.mtemp_threshold.to_le_bytes());
        b[36..38].copy_from_slice(&self.ctemp_threshold.to_le_bytes());
        b[38] = self.health;
        let n = self.bad_ranges.len().min(MAX_BAD_RANGES);
        b[40..44].copy_from_slice(&u32::try_from(n).unwrap_or(0).to_le_bytes());
        for (i, r) in self.bad_ranges.iter().take(n).enumerate() {
            let at = RANGES_AT + 16 * i;
            b[at..at + 8].copy_from_slice(&r.offset.to_le_bytes());
            b[at + 8..at + 16].copy_from_slice(&r.length.to_le_bytes());
        }
        let sum = fnv1a(&b[..SUM_AT]);
        b[SUM_AT..].copy_from_slice(&sum.to_le_bytes());
        b
    }

    /// Reads a block: `Ok(None)` for all zeros, `Err(())` for anything pmemvm
    /// did not write (never panics, whatever the bytes).
    #[allow(clippy::result_unit_err)] // the caller names the file and offset
    pub fn decode(b: &[u8]) -> Result<Option<Self>, ()> {
        if b.len() != MEDIA_BLOCK_SIZE {
            return Err(());
        }
        if b.iter().all(|x| *x == 0) {
            return Ok(None);
        }
        if b[0..16] != MEDIA_MAGIC
            || u32_at(b, 16) != MEDIA_VERSION
            || u64_at(b, SUM_AT) != fnv1a(&b[..SUM_AT])
            || u32_at(b, 20) & !KNOWN_FLAGS != 0
        {
            return Err(());
        }
        let n = usize::try_from(u32_at(b, 40)).map_err(|_| ())?;
        if n > MAX_BAD_RANGES {
            return Err(());
        }
        let mut ranges = Vec::with_capacity(n);
        for i in 0..n {
            let at = RANGES_AT + 16 * i;
            let r = BadRange {
                offset: u64_at(b, at),
                length: u64_at(b, at + 8),
            };
            let aligned = (r.offset | r.length).is_multiple_of(BAD_BLOCK_SIZE);
            let after_prev = ranges.last().is_none_or(|p: &BadRange| p.end() < r.offset);
            if r.length == 0 || !aligned || r.offset.checked_add(r.length).is_none() || !after_prev
            {
                return Err(());
            }
            ranges.push(r);
        }
        Ok(Some(Self {
            flags: u32_at(b, 20),
            shutdown_count: u32_at(b, 24),
            media_temperature: u16_at(b, 28),
            spares: b[30],
            spares_threshold: b[31],
            alarm_control: u16_at(b, 32),
            mtemp_threshold: u16_at(b, 34),
            ctemp_threshold: u16_at(b, 36),
            health: b[38],
            bad_ranges: ranges,
        }))
    }

    /// Whether `flag` is set.
    pub fn has(&self, flag: u32) -> bool {
        self.flags & flag != 0
    }

    /// Sets or clears `flag`.
    pub fn set(&mut self, flag: u32, on: bool) {
        if on {
            self.flags |= flag;
        } else {
            self.flags &= !flag;
        }
    }

    /// Marks `offset..offset+length` bad in a region of `region` bytes,
    /// widened to whole 512-byte blocks and merged with its neighbours.
    pub fn add_bad(&mut self, offset: u64, length: u64, region: u64) -> Result<(), MediaError> {
        let (start, end) = block_span(offset, length, region)?;
        let mut merged = BadRange {
            offset: start,
            length: end - start,
        };
        let mut out = Vec::with_capacity(self.bad_ranges.len() + 1);
        for r in &self.bad_ranges {
            if r.end() < merged.offset || r.offset > merged.end() {
                out.push(*r);
            } else {
                let s = r.offset.min(merged.offset);
                let e = r.end().max(merged.end());
                merged = BadRange {
                    offset: s,
                    length: e - s,
                };
            }
        }
        out.push(merged);
        out.sort();
        if out.len() > MAX_BAD_RANGES {
            return Err(MediaError::TooManyRanges);
        }
        self.bad_ranges = out;
        Ok(())
    }

    /// Clears `offset..offset+length` (widened to whole blocks); returns
    /// the bytes that were bad and are not any more.
    pub fn clear_bad(&mut self, offset: u64, length: u64, region: u64) -> Result<u64, MediaError> {
        let (start, end) = block_span(offset, length, region)?;
        let mut out = Vec::with_capacity(self.bad_ranges.len() + 1);
        let mut cleared = 0;
        for r in &self.bad_ranges {
            if r.end() <= start || r.offset >= end {
                out.push(*r);
                continue;
            }
            cleared += r.end().min(end) - r.offset.max(start);
            if r.offset < start {
                out.push(BadRange {
                    offset: r.offset,
                    length: start - r.offset,
                });
            }
            if r.end() > end {
                out.push(BadRange {
                    offset: end,
                    length: r.end() - end,
                });
            }
        }
        if out.len() > MAX_BAD_RANGES {
            return Err(MediaError::TooManyRanges);
        }
        self.bad_ranges = out;
        Ok(cleared)
    }
}

/// `offset..offset+length` widened to 512-byte blocks, checked against the region.
fn block_span(offset: u64, length: u64, region: u64) -> Result<(u64, u64), MediaError> {
    let bad = MediaError::OutOfRegion {
        offset,
        length,
        region,
    };
    let end = offset.checked_add(length).ok_or(bad.clone())?;
    if length == 0 || end > region {
        return Err(bad);
    }
    let start = offset - offset % BAD_BLOCK_SIZE;
    let end = end
        .checked_add(BAD_BLOCK_SIZE - 1)
        .map(|e| e - e % BAD_BLOCK_SIZE)
        .ok_or(bad)?
        .min(region);
    Ok((start, end))
}

/// Where a DIMM's media state is saved.
pub trait MediaStore: Send + Sync + std::fmt::Debug {
    /// Puts `state` on stable storage.
    fn save(&self, state: &MediaState) -> io::Result<()>;
}

/// Told when a DIMM's bad ranges change (the platform's view of the media:
/// pmemvm's machine-check holes follow it).
pub trait MediaWatch: Send + Sync + std::fmt::Debug {
    /// The bad ranges of `state` are new; called with the state locked, so
    /// calls come in the order of the changes.
    fn bad_ranges_changed(&self, state: &MediaState);
}

/// The media block of a backing file, at `offset` (the identity page's second half).
#[derive(Debug)]
pub struct FileMedia {
    /// The backing file (opened writable).
    pub file: File,
    /// Offset of the media block in the file.
    pub offset: u64,
}

impl MediaStore for FileMedia {
    fn save(&self, state: &MediaState) -> io::Result<()> {
        self.file.write_all_at(&state.encode(), self.offset)?;
        self.file.sync_data()
    }
}

/// One DIMM's media as the `_DSM` handler sees it: where it is in guest
/// physical memory, its state, and where changes are saved (`None`: a
/// temporary or read-only DIMM, whose changes last for this run only).
#[derive(Debug)]
pub struct DimmMedia {
    /// NFIT device handle.
    pub handle: u32,
    /// Guest physical base of the region.
    pub spa_base: u64,
    /// Region size.
    pub spa_size: u64,
    state: Mutex<MediaState>,
    store: Option<Box<dyn MediaStore>>,
    watch: std::sync::OnceLock<std::sync::Arc<dyn MediaWatch>>,
}

impl DimmMedia {
    /// A DIMM at `spa_base..spa_base+spa_size` with `state`.
    pub fn new(
        handle: u32,
        spa_base: u64,
        spa_size: u64,
        state: MediaState,
        store: Option<Box<dyn MediaStore>>,
    ) -> Self {
        Self {
            handle,
            spa_base,
            spa_size,
            state: Mutex::new(state),
            store,
            watch: std::sync::OnceLock::new(),
        }
    }

    /// Tells `w` of every later change of the bad ranges (one watcher per
    /// DIMM; false when one is already set).
    pub fn watch(&self, w: std::sync::Arc<dyn MediaWatch>) -> bool {
        self.watch.set(w).is_ok()
    }

    /// A copy of the current state.
    pub fn state(&self) -> MediaState {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Applies `f` to a copy of the state, saves the copy, and only then
    /// makes it the state: a failed save leaves everything as it was.
    /// `f` returning an error changes nothing either.
    pub fn update<R>(
        &self,
        f: impl FnOnce(&mut MediaState) -> Result<R, MediaError>,
    ) -> Result<Result<R, MediaError>, io::Error> {
        let mut guard = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let mut next = guard.clone();
        let r = match f(&mut next) {
            Ok(r) => r,
            Err(e) => return Ok(Err(e)),
        };
        if next != *guard {
            if let Some(s) = &self.store {
                s.save(&next)?;
            }
            let ranges_changed = next.bad_ranges != guard.bad_ranges;
            *guard = next;
            if let (true, Some(w)) = (ranges_changed, self.watch.get()) {
                w.bad_ranges_changed(&guard);
            }
        }
        Ok(Ok(r))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const REGION: u64 = 1 << 30;

    fn ranges(s: &MediaState) -> Vec<(u64, u64)> {
        s.bad_ranges.iter().map(|r| (r.offset, r.length)).collect()
    }

    #[test]
    fn add_merges_widens_and_clear_splits() {
        let mut s = MediaState::default();
        s.add_bad(4096, 512, REGION).unwrap();
        s.add_bad(8192, 1, REGION).unwrap(); // widened to one block
        assert_eq!(ranges(&s), [(4096, 512), (8192, 512)]);
        s.add_bad(4608, 3584, REGION).unwrap(); // bridges both
        assert_eq!(ranges(&s), [(4096, 4608)]);
        assert_eq!(s.clear_bad(5120, 1024, REGION), Ok(1024));
        assert_eq!(ranges(&s), [(4096, 1024), (6144, 2560)]);
        assert_eq!(s.clear_bad(0, REGION, REGION), Ok(3584));
        assert!(s.bad_ranges.is_empty());
        // The last block of the region, and refusals.
        s.add_bad(REGION - 1, 1, REGION).unwrap();
        assert_eq!(ranges(&s), [(REGION - 512, 512)]);
        for (o, l) in [
            (0, 0),
            (REGION, 1),
            (REGION - 1, 2),
            (u64::MAX, 2),
            (1, u64::MAX),
        ] {
            assert!(s.add_bad(o, l, REGION).is_err(), "{o}+{l}");
            assert!(s.clear_bad(o, l, REGION).is_err(), "{o}+{l}");
        }
    }

    #[test]
    fn too_many_ranges_is_refused_unchanged() {
        let mut s = MediaState::default();
        for i in 0..MAX_BAD_RANGES as u64 {
            s.add_bad(i * 1024, 512, REGION).unwrap();
        }
        let before = s.clone();
        assert_eq!(
            s.add_bad(REGION - 512, 512, REGION),
            Err(MediaError::TooManyRanges)
        );
        // Splitting a range in two would also exceed the limit.
        s.add_bad(REGION - 2048, 2048, REGION).unwrap_err();
        assert_eq!(s, before);
        // Merging into a neighbour does not add a range.
        s.add_bad(512, 512, REGION).unwrap();
        assert_eq!(s.bad_ranges.len(), MAX_BAD_RANGES - 1);
    }

    #[test]
    fn encode_decode_round_trip_and_damage() {
        assert_eq!(MediaState::decode(&[0; MEDIA_BLOCK_SIZE]), Ok(None));
        let mut s = MediaState {
            flags: FLAG_DIRTY | FLAG_FATAL | FLAG_HEALTH_SET,
            shutdown_count: 7,
            media_temperature: 52 * 16,
            health: 2,
            ..MediaState::default()
        };
        s.add_bad(1 << 20, 4096, REGION).unwrap();
        s.add_bad(0, 512, REGION).unwrap();
        let b = s.encode();
        assert_eq!(&b[0..16], b"PMEMVM-NVDIMM-MS");
        assert_eq!(b[38], 2, "the health set from outside");
        assert_eq!(b[40..44], [2, 0, 0, 0]);
        assert_eq!(b[48..56], [0; 8]);
        assert_eq!(b[56..64], [0, 2, 0, 0, 0, 0, 0, 0]);
        assert_eq!(MediaState::decode(&b), Ok(Some(s)));
        for at in [0, 16, 20, 24, 40, 48, 100, 2039, 2047] {
            let mut d = b;
            d[at] ^= 1;
            assert_eq!(MediaState::decode(&d), Err(()), "byte {at}");
        }
        assert_eq!(MediaState::decode(&b[1..]), Err(()));
    }

    #[derive(Debug)]
    struct Failing;
    impl MediaStore for Failing {
        fn save(&self, _: &MediaState) -> io::Result<()> {
            Err(io::ErrorKind::Other.into())
        }
    }

    #[test]
    fn failed_save_changes_nothing() {
        let m = DimmMedia::new(
            1,
            1 << 32,
            REGION,
            MediaState::default(),
            Some(Box::new(Failing)),
        );
        assert!(m.update(|s| s.add_bad(0, 512, REGION)).is_err());
        assert_eq!(m.state(), MediaState::default());
        let m = DimmMedia::new(1, 1 << 32, REGION, MediaState::default(), None);
        m.update(|s| s.add_bad(0, 512, REGION)).unwrap().unwrap();
        assert_eq!(m.state().bad_ranges.len(), 1);
    }
}
