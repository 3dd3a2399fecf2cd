// SPDX-License-Identifier: Apache-2.0
//! Fuzz body: the root device's `_DSM` (ARS, clear error, error injection)
//! and the DIMMs' health functions, on one handler with two 1 GiB DIMMs
//! that carry media state — one saved to an in-memory store, one whose
//! store always fails — and a label-less DIMM without media.
//!
//! An input is a sequence of calls: per call a selector byte, a function
//! byte, an input-length byte and up to 40 input bytes. The selector picks
//! the handle (the root, a DIMM, or raw), whether the 8-byte words of the
//! input are steered (bytes 32 and 33 say how) towards the DIMMs' SPA
//! ranges (inside, aligned or not, or at their edges, with lengths of 0,
//! one byte, a few blocks, huge or overflowing), and whether the input
//! length is the function's own; the function byte maps onto the
//! implemented functions or anything else.
//!
//! Checked after every call: the output stays within the page and the rest
//! of the page is zero; every DIMM's state keeps its invariants (bad ranges
//! sorted, disjoint, not adjacent, 512-byte aligned, inside the region, at
//! most `MAX_BAD_RANGES`), survives an encode/decode round trip, and the
//! state the store holds is the handler's (a failed save changed nothing).

use std::io;
use std::sync::{Arc, Mutex};

use devices::nvdimm_dsm::{DsmHandler, LabelStorage, DSM_OUT_DATA_MAX, DSM_PAGE_SIZE, ROOT_HANDLE};
use devices::nvdimm_media::{DimmMedia, MediaState, MediaStore, BAD_BLOCK_SIZE, MAX_BAD_RANGES};

/// Guest physical base of the first DIMM; the second follows it.
pub const BASE: u64 = 1 << 32;
/// Region size of each DIMM.
pub const SIZE: u64 = 1 << 30;
const HANDLES: [u32; 3] = [1, 2, 3];

/// No labels (the health and root paths do not touch them).
#[derive(Debug)]
pub struct NoLabels;

impl LabelStorage for NoLabels {
    fn label_size(&self) -> u32 {
        0
    }
    fn read_label(&self, _: u64, _: &mut [u8]) -> io::Result<()> {
        panic!("label read on a label-less DIMM")
    }
    fn write_label(&self, _: u64, _: &[u8]) -> io::Result<()> {
        panic!("label write on a label-less DIMM")
    }
    fn sync_labels(&self) -> io::Result<()> {
        panic!("label sync on a label-less DIMM")
    }
    fn readonly(&self) -> bool {
        false
    }
}

/// A store that keeps the last saved state, or always fails.
#[derive(Debug, Default)]
pub struct MemStore {
    saved: Arc<Mutex<Option<MediaState>>>,
    fail: bool,
}

impl MediaStore for MemStore {
    fn save(&self, state: &MediaState) -> io::Result<()> {
        if self.fail {
            return Err(io::ErrorKind::Other.into());
        }
        *self.saved.lock().unwrap_or_else(|e| e.into_inner()) = Some(state.clone());
        Ok(())
    }
}

/// The handler, the two DIMMs' media, and what the working store saved.
pub struct Setup {
    /// The handler under test.
    pub handler: DsmHandler<NoLabels>,
    /// The DIMMs with media.
    pub media: Vec<Arc<DimmMedia>>,
    /// The first DIMM's saved state.
    pub saved: Arc<Mutex<Option<MediaState>>>,
}

/// A fresh setup.
pub fn setup() -> Setup {
    let saved = Arc::new(Mutex::new(None));
    let good = MemStore {
        saved: saved.clone(),
        fail: false,
    };
    let bad = MemStore {
        saved: Arc::new(Mutex::new(None)),
        fail: true,
    };
    let media = vec![
        Arc::new(DimmMedia::new(
            HANDLES[0],
            BASE,
            SIZE,
            MediaState::default(),
            Some(Box::new(good)),
        )),
        Arc::new(DimmMedia::new(
            HANDLES[1],
            BASE + SIZE,
            SIZE,
            MediaState::default(),
            Some(Box::new(bad)),
        )),
    ];
    let mut handler = DsmHandler::new();
    for (h, m) in HANDLES.iter().zip(&media) {
        handler.add_dimm(*h, NoLabels);
        handler.add_media(m.clone());
    }
    handler.add_dimm(HANDLES[2], NoLabels);
    handler.enable_root();
    // `_FIT`'s reads: a table of more than two chunks.
    handler.set_fit((0..10_000u32).map(|i| (i % 251) as u8).collect());
    Setup {
        handler,
        media,
        saved,
    }
}

/// Root functions, then health functions, with their input sizes.
const FUNCS: [(u32, u32, usize); 13] = [
    (u32::MAX, 0, 0), // function 0 on the root
    (u32::MAX, 1, 16),
    (u32::MAX, 2, 24),
    (u32::MAX, 3, 0),
    (u32::MAX, 4, 16),
    (u32::MAX, 7, 17),
    (u32::MAX, 8, 16),
    (u32::MAX, 9, 0),
    (u32::MAX, devices::nvdimm_fit::FUNC_READ_FIT, 8),
    (1, 1, 0),
    (1, 2, 0),
    (1, 17, 7),
    (1, 18, 15),
];

/// Steers an offset (`length` false) or a length word: mostly into the
/// DIMMs (block aligned or not) with a few typical lengths, sometimes to
/// their edges, to zero, one byte or lengths that overflow.
fn steer(word: u64, pick: u8, length: bool) -> u64 {
    const MIB: u64 = 1 << 20;
    if length {
        let lens = [
            512,
            4096,
            MIB,
            0,
            1,
            SIZE,
            u64::MAX,
            u64::MAX - BASE,
            512 * 3,
        ];
        return lens[usize::from(pick) % lens.len()];
    }
    let edges = [BASE, BASE + SIZE, BASE + 2 * SIZE, 0, u64::MAX];
    match pick % 4 {
        0 => edges[usize::from(pick / 4) % edges.len()].wrapping_sub(word % MIB),
        1 => BASE + word % (2 * SIZE) + 1,
        _ => BASE + (word % (2 * SIZE)) / 512 * 512,
    }
}

fn check(s: &Setup) {
    for m in &s.media {
        let st = m.state();
        assert!(st.bad_ranges.len() <= MAX_BAD_RANGES, "too many ranges");
        let mut prev_end: Option<u64> = None;
        for r in &st.bad_ranges {
            assert!(r.length > 0, "empty range {r:?}");
            assert_eq!((r.offset | r.length) % BAD_BLOCK_SIZE, 0, "unaligned {r:?}");
            assert!(
                r.offset.checked_add(r.length).is_some_and(|e| e <= SIZE),
                "outside {r:?}"
            );
            assert!(
                prev_end.is_none_or(|e| e < r.offset),
                "unsorted or unmerged {r:?}"
            );
            prev_end = Some(r.end());
        }
        assert_eq!(
            MediaState::decode(&st.encode()),
            Ok(Some(st.clone())),
            "round trip"
        );
    }
    let saved = s.saved.lock().unwrap_or_else(|e| e.into_inner()).clone();
    assert_eq!(
        saved.unwrap_or_default(),
        s.media[0].state(),
        "the store and the handler disagree"
    );
    assert_eq!(
        s.media[1].state(),
        MediaState::default(),
        "a failed save changed the state"
    );
}

/// Runs one input (see the module docs) on a fresh setup.
pub fn run(data: &[u8]) {
    let s = setup();
    run_on(&s, data);
}

/// Runs one input on `s`.
pub fn run_on(s: &Setup, data: &[u8]) {
    for call in data.chunks(43) {
        let [sel, func, len, input @ ..] = call else {
            continue;
        };
        let (handle, function, size) = FUNCS[usize::from(*func) % FUNCS.len()];
        // The function's own handle (root, or a DIMM for the health
        // functions), another DIMM, or raw.
        let handle = match sel & 3 {
            0 | 1 if handle == 1 => HANDLES[usize::from(sel >> 2) % 3],
            0 | 1 => ROOT_HANDLE,
            2 => HANDLES[usize::from(sel >> 2) % 3],
            _ => u32::from_le_bytes([sel.wrapping_mul(31), *func, *len, 0]),
        };
        let function = if *func >= 0xf0 {
            u32::from(*len) << 3
        } else {
            function
        };
        let mut bytes = input.to_vec();
        bytes.resize(40, 0);
        if sel & 0x10 != 0 {
            // Bytes 32 and 33 of the input pick how the two words are steered.
            let picks = [bytes[32], bytes[33]];
            for (i, (w, pick)) in bytes.chunks_mut(8).take(2).zip(picks).enumerate() {
                let mut b = [0u8; 8];
                b.copy_from_slice(w);
                w.copy_from_slice(&steer(u64::from_le_bytes(b), pick, i == 1).to_le_bytes());
            }
        }
        let in_len = if sel & 0x20 != 0 {
            size
        } else {
            usize::from(*len)
        };
        let mut page = Box::new([0u8; DSM_PAGE_SIZE]);
        page[0..4].copy_from_slice(&handle.to_le_bytes());
        page[4..8].copy_from_slice(&(if sel & 0x40 != 0 { 2u32 } else { 1 }).to_le_bytes());
        page[8..12].copy_from_slice(&function.to_le_bytes());
        let in_len32 = if sel & 0x80 != 0 && *len > 0xf0 {
            u32::MAX - u32::from(*len)
        } else {
            u32::try_from(in_len).unwrap_or(0)
        };
        page[12..16].copy_from_slice(&in_len32.to_le_bytes());
        let n = in_len.min(bytes.len());
        page[16..16 + n].copy_from_slice(&bytes[..n]);
        s.handler.handle(&mut page);
        let out = u32::from_le_bytes([page[0], page[1], page[2], page[3]]);
        let out = usize::try_from(out).unwrap_or(usize::MAX);
        assert!((1..=DSM_OUT_DATA_MAX).contains(&out), "output length {out}");
        assert!(
            page[4 + out..].iter().all(|b| *b == 0),
            "page not zeroed after {out} bytes"
        );
        let _ = s.handler.take_notification();
        check(s);
    }
}
