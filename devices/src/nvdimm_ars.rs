//! The NVDIMM root device's `_DSM` (UUID 2f10e7a4-9e91-11e4-89d3-123b93f75cba):
//! address range scrub (ARS), clear uncorrectable error and ARS error
//! injection, as ACPI 6.4 section 9.20.7 ("NVDIMM Root Device _DSMs")
//! defines them and Linux 6.1's `drivers/acpi/nfit/core.c` uses them.
//!
//! | function | name | input | output |
//! |---|---|---|---|
//! | 1 | Query ARS Capabilities | SPA base, length (u64 each) | status (u32, extended status in the high half), max ARS status output size, clear-error unit (u32 each), flags, reserved (u16 each) |
//! | 2 | Start ARS | SPA base, length, type (u16), flags (u8), 5 reserved | status, estimated scrub time (u32 each) |
//! | 3 | Query ARS Status | — | status, output length, scrub base/length, restart base/length, type, flags, record count, records (handle u32, reserved u32, SPA u64, length u64) |
//! | 4 | Clear Uncorrectable Error | SPA base, length | status, reserved (u32 each), bytes cleared (u64) |
//! | 7 | ARS Error Inject | SPA base, length, options (u8) | status |
//! | 8 | ARS Error Inject Clear | SPA base, length | status |
//! | 9 | ARS Error Inject Status Query | — | status, record count (u32 each), records (SPA base, length: u64 each) |
//!
//! A scrub completes at once: pmemvm knows every bad range (they are the
//! ones injected, by the guest or with `badblocks=` on the host), so "Start
//! ARS" records the scrubbed range and "Query ARS Status" reports it
//! complete with every bad range inside it. Injected errors are media
//! errors straight away: the next scrub reports them, as a platform whose
//! injection poisons the media does. Clearing (function 4 or 8) removes
//! them. Bad ranges are kept in 512-byte blocks.
//!
//! Every input is guest controlled: lengths are checked, SPA ranges are
//! intersected with the DIMMs with checked arithmetic, and no output grows
//! beyond the DSM page.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::nvdimm_media::{DimmMedia, MediaError, BAD_BLOCK_SIZE};

/// Function numbers of the root `_DSM`.
pub const FUNC_ARS_CAP: u32 = 1;
/// Start ARS.
pub const FUNC_ARS_START: u32 = 2;
/// Query ARS status.
pub const FUNC_ARS_STATUS: u32 = 3;
/// Clear uncorrectable error.
pub const FUNC_CLEAR_ERROR: u32 = 4;
/// ARS error inject.
pub const FUNC_INJECT_SET: u32 = 7;
/// ARS error inject clear.
pub const FUNC_INJECT_CLEAR: u32 = 8;
/// ARS error inject status query.
pub const FUNC_INJECT_STATUS: u32 = 9;

/// Function 0's bitmap: 0-4 and 7-9 (no 5, translate SPA; no 6, reserved).
pub const ROOT_FUNCTIONS: u32 = 1
    | 1 << FUNC_ARS_CAP
    | 1 << FUNC_ARS_START
    | 1 << FUNC_ARS_STATUS
    | 1 << FUNC_CLEAR_ERROR
    | 1 << FUNC_INJECT_SET
    | 1 << FUNC_INJECT_CLEAR
    | 1 << FUNC_INJECT_STATUS;

/// Root `_DSM` status codes (ACPI 6.4, 9.20.7.1).
pub const STATUS_SUCCESS: u32 = 0;
/// Function not supported.
pub const STATUS_NOT_SUPPORTED: u32 = 1;
/// Invalid input parameters.
pub const STATUS_INVALID_INPUT: u32 = 2;
/// Hardware error (here: the state could not be saved).
pub const STATUS_HW_ERROR: u32 = 3;
/// Function-specific error (here: too many bad ranges).
pub const STATUS_FUNCTION_SPECIFIC: u32 = 6;

/// Extended status of ARS capabilities: persistent memory scrub supported.
const ARS_CAP_PERSISTENT: u32 = 1 << 1;
/// ARS type bit of persistent memory.
const ARS_TYPE_PERSISTENT: u16 = 1 << 1;
/// Extended status of Query ARS Status: no ARS performed since boot.
const ARS_STATUS_NONE: u32 = 2 << 16;
/// Extended status of Query ARS Status: stopped early (records overflowed).
const ARS_STATUS_STOPPED: u32 = 3 << 16;
/// Query ARS Status flag: more records than fit.
const ARS_FLAG_OVERFLOW: u16 = 1;
/// Fixed part of Query ARS Status output (status through record count).
const ARS_STATUS_HEADER: usize = 48;
/// One ARS record.
const ARS_RECORD: usize = 24;
/// Largest output the page carries (its first 4 bytes are the length).
const OUT_MAX: usize = 4092;
/// Records that fit in one Query ARS Status output.
pub const MAX_ARS_RECORDS: usize = (OUT_MAX - ARS_STATUS_HEADER) / ARS_RECORD;
/// "Max Query ARS Status Output Buffer Size" reported by function 1.
#[allow(clippy::cast_possible_truncation)] // 4080 fits
const MAX_ARS_OUT: u32 = (ARS_STATUS_HEADER + MAX_ARS_RECORDS * ARS_RECORD) as u32;
/// Records of the inject status query that fit in the output size function 1
/// reports (ndctl sizes its buffer by it).
const MAX_INJECT_RECORDS: usize = (MAX_ARS_OUT as usize - 8) / 16;

/// Counters of the root `_DSM`.
#[derive(Debug, Default)]
pub struct ArsStats {
    /// Scrubs started.
    pub scrubs: AtomicU64,
    /// Ranges injected by the guest.
    pub injected: AtomicU64,
    /// Bytes cleared by the guest.
    pub cleared_bytes: AtomicU64,
}

/// The root device: all DIMMs' media and the last scrub.
#[derive(Debug, Default)]
pub struct RootDsm {
    /// The DIMMs' media, in NFIT order (hot-added ones join at the end).
    dimms: std::sync::RwLock<Vec<Arc<DimmMedia>>>,
    /// (base, length) of the last "Start ARS" of this boot.
    last_scrub: Mutex<Option<(u64, u64)>>,
    /// An injection asked for notification and it was not yet taken.
    notify: AtomicBool,
    stats: ArsStats,
}

fn u64_in(input: &[u8], at: usize) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&input[at..at + 8]);
    u64::from_le_bytes(b)
}

fn status_only(s: u32) -> Vec<u8> {
    s.to_le_bytes().to_vec()
}

impl RootDsm {
    /// A root device over `dimms`.
    pub fn new(dimms: Vec<Arc<DimmMedia>>) -> Self {
        Self {
            dimms: std::sync::RwLock::new(dimms),
            last_scrub: Mutex::new(None),
            notify: AtomicBool::new(false),
            stats: ArsStats::default(),
        }
    }

    /// The counters.
    pub fn stats(&self) -> &ArsStats {
        &self.stats
    }

    fn dimms(&self) -> std::sync::RwLockReadGuard<'_, Vec<Arc<DimmMedia>>> {
        self.dimms
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A DIMM hot-added while the guest runs: scrubs cover it from now on.
    pub fn add_dimm(&self, media: Arc<DimmMedia>) {
        self.dimms
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(media);
    }

    /// Whether an injection since the last call asked for the platform's
    /// "new uncorrectable errors" notification (and forgets it).
    pub fn take_notification(&self) -> bool {
        self.notify.swap(false, Ordering::Relaxed)
    }

    /// Answers root function `function` on `input`: the whole output buffer.
    pub fn call(&self, function: u32, input: &[u8]) -> Vec<u8> {
        match function {
            FUNC_ARS_CAP => self.ars_cap(input),
            FUNC_ARS_START => self.ars_start(input),
            FUNC_ARS_STATUS => self.ars_status(),
            FUNC_CLEAR_ERROR => self.clear_error(input),
            FUNC_INJECT_SET => self.inject(input),
            FUNC_INJECT_CLEAR => self.inject_clear(input),
            FUNC_INJECT_STATUS => self.inject_status(),
            _ => status_only(STATUS_NOT_SUPPORTED),
        }
    }

    /// The parts of SPA `base..base+len` on each DIMM, as (DIMM, region
    /// offset, length); `None` if the range is empty, overflows, or any
    /// byte of it is on no DIMM.
    fn split(&self, base: u64, len: u64) -> Option<Vec<(Arc<DimmMedia>, u64, u64)>> {
        let end = base.checked_add(len)?;
        if len == 0 {
            return None;
        }
        let mut parts = Vec::new();
        let mut covered = 0u64;
        for d in self.dimms().iter() {
            let d_end = d.spa_base.saturating_add(d.spa_size);
            let (s, e) = (base.max(d.spa_base), end.min(d_end));
            if s < e {
                parts.push((d.clone(), s - d.spa_base, e - s));
                covered += e - s;
            }
        }
        (covered == len).then_some(parts)
    }

    fn ars_cap(&self, input: &[u8]) -> Vec<u8> {
        if input.len() != 16 {
            return status_only(STATUS_INVALID_INPUT);
        }
        if self.split(u64_in(input, 0), u64_in(input, 8)).is_none() {
            return status_only(STATUS_INVALID_INPUT);
        }
        let mut out = (STATUS_SUCCESS | ARS_CAP_PERSISTENT << 16)
            .to_le_bytes()
            .to_vec();
        out.extend_from_slice(&MAX_ARS_OUT.to_le_bytes());
        #[allow(clippy::cast_possible_truncation)] // 512
        out.extend_from_slice(&(BAD_BLOCK_SIZE as u32).to_le_bytes());
        out.extend_from_slice(&[0; 4]); // flags: no notification of new errors; reserved
        out
    }

    fn ars_start(&self, input: &[u8]) -> Vec<u8> {
        if input.len() != 24 {
            return status_only(STATUS_INVALID_INPUT);
        }
        let (base, len) = (u64_in(input, 0), u64_in(input, 8));
        let ty = u16::from_le_bytes([input[16], input[17]]);
        if ty & ARS_TYPE_PERSISTENT == 0 || self.split(base, len).is_none() {
            return status_only(STATUS_INVALID_INPUT);
        }
        *self.last_scrub.lock().unwrap_or_else(|e| e.into_inner()) = Some((base, len));
        self.stats.scrubs.fetch_add(1, Ordering::Relaxed);
        let mut out = status_only(STATUS_SUCCESS);
        out.extend_from_slice(&1u32.to_le_bytes()); // estimated scrub time: 1 s
        out
    }

    fn ars_status(&self) -> Vec<u8> {
        let scrub = *self.last_scrub.lock().unwrap_or_else(|e| e.into_inner());
        let Some((base, len)) = scrub else {
            let mut out = vec![0u8; ARS_STATUS_HEADER];
            out[0..4].copy_from_slice(&(STATUS_SUCCESS | ARS_STATUS_NONE).to_le_bytes());
            let len = u32::try_from(ARS_STATUS_HEADER - 4).unwrap_or(0);
            out[4..8].copy_from_slice(&len.to_le_bytes());
            return out;
        };
        let end = base.saturating_add(len);
        let mut records = Vec::new();
        for d in self.dimms().iter() {
            for r in d.state().bad_ranges {
                let s = d.spa_base.saturating_add(r.offset).max(base);
                let e = d.spa_base.saturating_add(r.end()).min(end);
                if s < e {
                    records.push((d.handle, s, e - s));
                }
            }
        }
        let overflow = records.len() > MAX_ARS_RECORDS;
        records.truncate(MAX_ARS_RECORDS);
        let n = records.len();
        let mut out = Vec::with_capacity(ARS_STATUS_HEADER + n * ARS_RECORD);
        let status = if overflow {
            STATUS_SUCCESS | ARS_STATUS_STOPPED
        } else {
            STATUS_SUCCESS
        };
        out.extend_from_slice(&status.to_le_bytes());
        // Output length counts from this field on (Linux: records start at 44).
        let out_len = u32::try_from(ARS_STATUS_HEADER - 4 + n * ARS_RECORD).unwrap_or(0);
        out.extend_from_slice(&out_len.to_le_bytes());
        out.extend_from_slice(&base.to_le_bytes());
        out.extend_from_slice(&len.to_le_bytes());
        // Restart range: where a stopped scrub would go on.
        let (rs, rl) = match (overflow, records.last()) {
            (true, Some((_, s, l))) => (s + l, end - (s + l)),
            _ => (0, 0),
        };
        out.extend_from_slice(&rs.to_le_bytes());
        out.extend_from_slice(&rl.to_le_bytes());
        out.extend_from_slice(&ARS_TYPE_PERSISTENT.to_le_bytes());
        let flags = if overflow { ARS_FLAG_OVERFLOW } else { 0 };
        out.extend_from_slice(&flags.to_le_bytes());
        out.extend_from_slice(&u32::try_from(n).unwrap_or(0).to_le_bytes());
        for (handle, s, l) in records {
            out.extend_from_slice(&handle.to_le_bytes());
            out.extend_from_slice(&[0; 4]);
            out.extend_from_slice(&s.to_le_bytes());
            out.extend_from_slice(&l.to_le_bytes());
        }
        out
    }

    /// Applies `op` to each DIMM's part of the SPA range; the root status.
    fn each_part(
        &self,
        base: u64,
        len: u64,
        op: impl Fn(&DimmMedia, u64, u64) -> Result<Result<u64, MediaError>, std::io::Error>,
    ) -> Result<u64, u32> {
        let parts = self.split(base, len).ok_or(STATUS_INVALID_INPUT)?;
        let mut total = 0;
        for (d, off, l) in parts {
            match op(&d, off, l) {
                Ok(Ok(n)) => total += n,
                Ok(Err(MediaError::TooManyRanges)) => return Err(STATUS_FUNCTION_SPECIFIC),
                Ok(Err(MediaError::OutOfRegion { .. })) => return Err(STATUS_INVALID_INPUT),
                Err(e) => {
                    log::warn!(
                        "saving the media state of NVDIMM {:#x} failed: {e}",
                        d.handle
                    );
                    return Err(STATUS_HW_ERROR);
                }
            }
        }
        Ok(total)
    }

    fn clear_error(&self, input: &[u8]) -> Vec<u8> {
        if input.len() != 16 {
            return status_only(STATUS_INVALID_INPUT);
        }
        let (base, len) = (u64_in(input, 0), u64_in(input, 8));
        // Linux aligns clears to the unit function 1 reports.
        if (base | len) % BAD_BLOCK_SIZE != 0 {
            return status_only(STATUS_INVALID_INPUT);
        }
        let r = self.each_part(base, len, |d, off, l| {
            d.update(|s| s.clear_bad(off, l, d.spa_size))
                .map(|r| r.map(|_| l))
        });
        match r {
            Ok(cleared) => {
                self.stats
                    .cleared_bytes
                    .fetch_add(cleared, Ordering::Relaxed);
                let mut out = status_only(STATUS_SUCCESS);
                out.extend_from_slice(&[0; 4]);
                out.extend_from_slice(&cleared.to_le_bytes());
                out
            }
            Err(s) => status_only(s),
        }
    }

    fn inject(&self, input: &[u8]) -> Vec<u8> {
        // base, length, options (bit 0: notify the OS, which then scrubs)
        if input.len() != 17 {
            return status_only(STATUS_INVALID_INPUT);
        }
        let r = self.each_part(u64_in(input, 0), u64_in(input, 8), |d, off, l| {
            d.update(|s| s.add_bad(off, l, d.spa_size).map(|()| 1))
        });
        match r {
            Ok(n) => {
                self.stats.injected.fetch_add(n, Ordering::Relaxed);
                if input[16] & 1 != 0 {
                    self.notify.store(true, Ordering::Relaxed);
                }
                status_only(STATUS_SUCCESS)
            }
            Err(s) => status_only(s),
        }
    }

    fn inject_clear(&self, input: &[u8]) -> Vec<u8> {
        if input.len() != 16 {
            return status_only(STATUS_INVALID_INPUT);
        }
        let r = self.each_part(u64_in(input, 0), u64_in(input, 8), |d, off, l| {
            d.update(|s| s.clear_bad(off, l, d.spa_size))
        });
        status_only(r.map_or_else(|s| s, |_| STATUS_SUCCESS))
    }

    fn inject_status(&self) -> Vec<u8> {
        let mut records = Vec::new();
        for d in self.dimms().iter() {
            for r in d.state().bad_ranges {
                records.push((d.spa_base.saturating_add(r.offset), r.length));
            }
        }
        records.truncate(MAX_INJECT_RECORDS);
        let mut out = status_only(STATUS_SUCCESS);
        out.extend_from_slice(&u32::try_from(records.len()).unwrap_or(0).to_le_bytes());
        for (s, l) in records {
            out.extend_from_slice(&s.to_le_bytes());
            out.extend_from_slice(&l.to_le_bytes());
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nvdimm_media::MediaState;

    const BASE: u64 = 1 << 32;
    const SIZE: u64 = 1 << 30;

    fn root() -> RootDsm {
        let d = |i: u64| {
            Arc::new(DimmMedia::new(
                u32::try_from(i + 1).unwrap(),
                BASE + i * SIZE,
                SIZE,
                MediaState::default(),
                None,
            ))
        };
        RootDsm::new(vec![d(0), d(1)])
    }

    fn range(base: u64, len: u64) -> Vec<u8> {
        let mut v = base.to_le_bytes().to_vec();
        v.extend_from_slice(&len.to_le_bytes());
        v
    }

    fn u32_at(b: &[u8], o: usize) -> u32 {
        u32::from_le_bytes(b[o..o + 4].try_into().unwrap())
    }
    fn u64_at(b: &[u8], o: usize) -> u64 {
        u64::from_le_bytes(b[o..o + 8].try_into().unwrap())
    }

    fn start(r: &RootDsm, base: u64, len: u64) -> Vec<u8> {
        let mut i = range(base, len);
        i.extend_from_slice(&[2, 0, 2, 0, 0, 0, 0, 0]); // persistent, return previous data
        r.call(FUNC_ARS_START, &i)
    }

    #[test]
    fn cap_reports_persistent_scrub_and_units() {
        let r = root();
        let out = r.call(FUNC_ARS_CAP, &range(BASE, SIZE));
        assert_eq!(out.len(), 16);
        assert_eq!(u32_at(&out, 0), 2 << 16);
        assert_eq!(u32_at(&out, 4), 4080);
        assert_eq!(u32_at(&out, 8), 512);
        // Outside every DIMM, or a wrong input size.
        assert_eq!(r.call(FUNC_ARS_CAP, &range(0, 4096)), [2, 0, 0, 0]);
        assert_eq!(
            r.call(FUNC_ARS_CAP, &range(BASE, 2 * SIZE + 1)),
            [2, 0, 0, 0]
        );
        assert_eq!(r.call(FUNC_ARS_CAP, &[0; 15]), [2, 0, 0, 0]);
    }

    /// Records the bad ranges each change shows (the machine-check slots'
    /// view of the media).
    #[derive(Debug, Default)]
    struct Seen(std::sync::Mutex<Vec<Vec<(u64, u64)>>>);
    impl crate::nvdimm_media::MediaWatch for Seen {
        fn bad_ranges_changed(&self, state: &MediaState) {
            let r = state
                .bad_ranges
                .iter()
                .map(|b| (b.offset, b.length))
                .collect();
            self.0.lock().unwrap().push(r);
        }
    }

    #[test]
    fn the_guests_inject_and_clear_reach_the_media_watcher() {
        let dimm = Arc::new(DimmMedia::new(1, BASE, SIZE, MediaState::default(), None));
        let seen = Arc::new(Seen::default());
        assert!(dimm.watch(seen.clone()));
        assert!(!dimm.watch(seen.clone()), "one watcher");
        let r = RootDsm::new(vec![dimm.clone()]);
        let mut inj = range(BASE + (1 << 20), 1024);
        inj.push(1);
        assert_eq!(r.call(FUNC_INJECT_SET, &inj), [0; 4]);
        // Injecting it again changes nothing: no second call.
        assert_eq!(r.call(FUNC_INJECT_SET, &inj), [0; 4]);
        let out = r.call(FUNC_CLEAR_ERROR, &range(BASE + (1 << 20), 512));
        assert_eq!(u32_at(&out, 0), 0, "{out:?}");
        assert_eq!(
            *seen.0.lock().unwrap(),
            [vec![(1 << 20, 1024)], vec![((1 << 20) + 512, 512)]]
        );
    }

    #[test]
    fn inject_scrub_status_clear() {
        let r = root();
        // Before any scrub: "no ARS performed".
        let out = r.call(FUNC_ARS_STATUS, &[]);
        assert_eq!(u32_at(&out, 0), 2 << 16);
        // Inject 1 KiB at 1 MiB of DIMM 0 and 512 B straddling into DIMM 1.
        let mut inj = range(BASE + (1 << 20), 1024);
        inj.push(1);
        assert_eq!(r.call(FUNC_INJECT_SET, &inj), [0; 4]);
        assert!(r.take_notification(), "notify option");
        assert!(!r.take_notification(), "taken once");
        let mut inj = range(BASE + SIZE - 512, 1024);
        inj.push(0);
        assert_eq!(r.call(FUNC_INJECT_SET, &inj), [0; 4]);
        assert!(!r.take_notification(), "no notify option");
        assert_eq!(start(&r, BASE, SIZE), [0, 0, 0, 0, 1, 0, 0, 0]);
        let out = r.call(FUNC_ARS_STATUS, &[]);
        assert_eq!(u32_at(&out, 0), 0, "complete");
        assert_eq!(u32_at(&out, 44), 2, "records in the scrubbed range only");
        assert_eq!(u32_at(&out, 4) as usize, 44 + 2 * 24);
        assert_eq!(out.len(), 48 + 2 * 24);
        assert_eq!((u64_at(&out, 8), u64_at(&out, 16)), (BASE, SIZE));
        assert_eq!(u32_at(&out, 48), 1, "handle");
        assert_eq!(
            (u64_at(&out, 56), u64_at(&out, 64)),
            (BASE + (1 << 20), 1024)
        );
        assert_eq!(
            (u64_at(&out, 80), u64_at(&out, 88)),
            (BASE + SIZE - 512, 512)
        );
        // Inject status lists all three DIMM parts... merged per DIMM.
        let out = r.call(FUNC_INJECT_STATUS, &[]);
        assert_eq!(u32_at(&out, 4), 3);
        // Clear 512 B of the first range: unaligned is refused, aligned works.
        assert_eq!(
            r.call(FUNC_CLEAR_ERROR, &range(BASE + (1 << 20), 100)),
            [2, 0, 0, 0]
        );
        let out = r.call(FUNC_CLEAR_ERROR, &range(BASE + (1 << 20), 512));
        assert_eq!((u32_at(&out, 0), u64_at(&out, 8)), (0, 512));
        assert_eq!(
            r.dimms()[0].state().bad_ranges[0].offset,
            (1 << 20) + 512,
            "the rest stays bad"
        );
        // Inject clear of everything on both DIMMs.
        assert_eq!(r.call(FUNC_INJECT_CLEAR, &range(BASE, 2 * SIZE)), [0; 4]);
        start(&r, BASE, SIZE);
        assert_eq!(u32_at(&r.call(FUNC_ARS_STATUS, &[]), 44), 0);
    }

    #[test]
    fn hostile_inputs() {
        let r = root();
        for (f, input) in [
            (FUNC_ARS_START, range(BASE, SIZE)),                   // short
            (FUNC_INJECT_SET, range(u64::MAX - 10, 100)),          // overflow
            (FUNC_INJECT_SET, [range(BASE, 0), vec![0]].concat()), // empty
            (FUNC_INJECT_CLEAR, range(0, u64::MAX)),
            (FUNC_CLEAR_ERROR, range(u64::MAX - 511, 512)),
            (FUNC_CLEAR_ERROR, range(BASE, 0)),
        ] {
            assert_eq!(r.call(f, &input), [2, 0, 0, 0], "function {f}");
        }
        let mut wrong_type = range(BASE, SIZE);
        wrong_type.extend_from_slice(&[1, 0, 0, 0, 0, 0, 0, 0]); // volatile only
        assert_eq!(r.call(FUNC_ARS_START, &wrong_type), [2, 0, 0, 0]);
        assert_eq!(r.call(5, &[]), [1, 0, 0, 0]);
        assert_eq!(r.call(u32::MAX, &[]), [1, 0, 0, 0]);
    }

    #[test]
    fn overflowing_records_are_flagged() {
        let r = RootDsm::new(
            (0..2)
                .map(|i| {
                    let mut s = MediaState::default();
                    for k in 0..100 {
                        s.add_bad(k * 4096, 512, SIZE).unwrap();
                    }
                    Arc::new(DimmMedia::new(
                        i + 1,
                        BASE + u64::from(i) * SIZE,
                        SIZE,
                        s,
                        None,
                    ))
                })
                .collect(),
        );
        start(&r, BASE, 2 * SIZE);
        let out = r.call(FUNC_ARS_STATUS, &[]);
        assert!(out.len() <= OUT_MAX);
        assert_eq!(u32_at(&out, 0), 3 << 16);
        assert_eq!(u32_at(&out, 44) as usize, MAX_ARS_RECORDS);
        assert_eq!(u16::from_le_bytes([out[42], out[43]]), 1);
        assert!(r.call(FUNC_INJECT_STATUS, &[]).len() <= MAX_ARS_OUT as usize);
    }
}
