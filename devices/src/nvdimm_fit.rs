//! The NFIT's structures as `_FIT` reads them through the `_DSM` page (the
//! root function [`FUNC_READ_FIT`]): at the root device's probe and after
//! notification 0x80, when a DIMM was hot-added.
//!
//! Input: the offset into the structures, a little-endian integer of 4 or 8
//! bytes (the AML passes `ToBuffer` of an Integer: 8). Output: a status
//! (u32) and up to [`CHUNK_MAX`] bytes from that offset; none at or past
//! the end. Status [`STATUS_CHANGED`] means the table changed since the read
//! at offset 0 began: the AML starts again from 0, so Linux never merges a
//! mix of two tables. Every input is the guest's and bound-checked.

use std::sync::Mutex;

/// The root `_DSM` function of `_FIT` (the `acpi` crate's AML asks for the same).
pub const FUNC_READ_FIT: u32 = 0x1_0000;
/// The read succeeded (the bytes follow).
pub const STATUS_OK: u32 = 0;
/// The table changed since offset 0 was read: read again from 0.
pub const STATUS_CHANGED: u32 = 1;
/// The input is not an offset.
pub const STATUS_INVALID: u32 = 2;
/// Most structure bytes one reply carries: the status and these are at most
/// 4,088 bytes, less than the page's 4,092, so the AML can tell a reply from
/// a page nothing answered (which reads back as 4,092 bytes).
pub const CHUNK_MAX: usize = 4084;

#[derive(Debug, Default)]
struct State {
    bytes: Vec<u8>,
    /// Changed since the last read at offset 0.
    changed: bool,
}

/// The structures `_FIT` returns; replaced whole when a DIMM arrives.
#[derive(Debug, Default)]
pub struct FitTable(Mutex<State>);

impl FitTable {
    /// A table holding `bytes` (the NFIT without its 40-byte header).
    pub fn new(bytes: Vec<u8>) -> Self {
        Self(Mutex::new(State {
            bytes,
            changed: false,
        }))
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Replaces the structures; a read in progress starts again.
    pub fn replace(&self, bytes: Vec<u8>) {
        let mut s = self.state();
        s.bytes = bytes;
        s.changed = true;
    }

    /// The structures now (for tests and the VMM's own checks).
    pub fn bytes(&self) -> Vec<u8> {
        self.state().bytes.clone()
    }

    /// The reply to a read with `input` (see the module docs).
    pub fn read(&self, input: &[u8]) -> Vec<u8> {
        let offset = match input.len() {
            4 => input
                .try_into()
                .map(|b: [u8; 4]| u64::from(u32::from_le_bytes(b))),
            8 => input.try_into().map(u64::from_le_bytes),
            _ => return STATUS_INVALID.to_le_bytes().to_vec(),
        };
        let Ok(offset) = offset else {
            return STATUS_INVALID.to_le_bytes().to_vec();
        };
        let mut s = self.state();
        if offset == 0 {
            s.changed = false;
        } else if s.changed {
            return STATUS_CHANGED.to_le_bytes().to_vec();
        }
        let mut out = STATUS_OK.to_le_bytes().to_vec();
        let start = usize::try_from(offset)
            .unwrap_or(usize::MAX)
            .min(s.bytes.len());
        let end = start.saturating_add(CHUNK_MAX).min(s.bytes.len());
        out.extend_from_slice(&s.bytes[start..end]);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the AML does: read from 0 until an empty chunk, starting again
    /// on STATUS_CHANGED; `between` runs before each read.
    fn read_all(t: &FitTable, mut between: impl FnMut(usize)) -> Vec<u8> {
        let mut fit = Vec::new();
        for round in 0..100 {
            between(round);
            let r = t.read(&(fit.len() as u64).to_le_bytes());
            let status = u32::from_le_bytes(r[..4].try_into().unwrap());
            match status {
                STATUS_CHANGED => fit.clear(),
                STATUS_OK if r.len() == 4 => return fit,
                STATUS_OK => fit.extend_from_slice(&r[4..]),
                s => panic!("status {s}"),
            }
        }
        panic!("no end")
    }

    #[test]
    fn the_whole_table_is_read_in_chunks() {
        let bytes: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        let t = FitTable::new(bytes.clone());
        assert_eq!(read_all(&t, |_| {}), bytes);
        // 4-byte offsets too; past the end: no bytes.
        assert_eq!(t.read(&4084u32.to_le_bytes()).len(), 4 + 4084);
        assert_eq!(t.read(&u64::MAX.to_le_bytes()), STATUS_OK.to_le_bytes());
    }

    #[test]
    fn a_change_during_a_read_restarts_it_with_the_new_table() {
        let old: Vec<u8> = vec![1; 9000];
        let new: Vec<u8> = vec![2; 9500];
        let t = FitTable::new(old);
        let got = read_all(&t, |round| {
            if round == 1 {
                t.replace(new.clone());
            }
        });
        assert_eq!(got, new);
    }

    #[test]
    fn bad_offsets_are_refused() {
        let t = FitTable::new(vec![0; 10]);
        for input in [&[][..], &[1, 2, 3], &[0; 5], &[0; 16]] {
            assert_eq!(t.read(input), STATUS_INVALID.to_le_bytes(), "{input:?}");
        }
    }
}
