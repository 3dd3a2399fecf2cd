// SPDX-License-Identifier: Apache-2.0
//! Fuzz body: the NVDIMM `_DSM` handler on arbitrary 4 KiB request pages.
//!
//! One input is a sequence of calls on one handler with three DIMMs: a
//! writable 128 KiB label area, a read-only one (filled with a known byte)
//! and a label-less DIMM. Each call takes a selector byte and up to 4096
//! page bytes (zero-padded). The selector can force a known handle, revision
//! 1, a small function index and a plausible label transfer (offset, length
//! and input length that fit together), so the fuzzer — and the feedback-free
//! smoke run — reach the label paths without guessing 32-bit values;
//! everything else is raw input.
//!
//! Checked after every call: the output length is within the page, the rest
//! of the page is zeroed, the label storage was only touched inside its
//! area, the read-only DIMM's labels never change and a label-less DIMM is
//! never read or written.

use std::io;
use std::sync::{Arc, Mutex};

use devices::nvdimm_dsm::{DsmHandler, LabelStorage, DSM_OUT_DATA_MAX, DSM_PAGE_SIZE};

/// Label bytes of the DIMMs that have labels.
pub const LABEL_SIZE: usize = 128 << 10;
/// What the read-only DIMM's label area holds.
const RO_FILL: u8 = 0x5a;
/// NFIT handles of the writable, read-only and label-less DIMMs.
pub const HANDLES: [u32; 3] = [0x0001, 0x0101, 0x1001];

/// In-memory label storage that panics on any access the handler promised
/// never to make.
#[derive(Debug)]
pub struct MemLabels {
    data: Arc<Mutex<Vec<u8>>>,
    readonly: bool,
}

impl MemLabels {
    /// `size` bytes of `fill`.
    pub fn new(size: usize, fill: u8, readonly: bool) -> Self {
        Self {
            data: Arc::new(Mutex::new(vec![fill; size])),
            readonly,
        }
    }

    fn range(&self, off: u64, len: usize) -> std::ops::Range<usize> {
        let size = self.data.lock().unwrap_or_else(|e| e.into_inner()).len();
        let start = usize::try_from(off).unwrap_or(usize::MAX);
        let end = start.saturating_add(len);
        assert!(
            end <= size,
            "handler accessed labels {start:#x}..{end:#x} outside the {size:#x}-byte area"
        );
        start..end
    }

    /// True when every byte is `fill`.
    pub fn all(&self, fill: u8) -> bool {
        // Slice comparisons (memcmp), not a byte loop: this runs on every input.
        let want = [fill; 4096];
        self.data
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .chunks(want.len())
            .all(|c| c == &want[..c.len()])
    }
}

impl LabelStorage for MemLabels {
    fn label_size(&self) -> u32 {
        let len = self.data.lock().unwrap_or_else(|e| e.into_inner()).len();
        u32::try_from(len).unwrap_or(u32::MAX)
    }

    fn read_label(&self, off: u64, buf: &mut [u8]) -> io::Result<()> {
        let r = self.range(off, buf.len());
        buf.copy_from_slice(&self.data.lock().unwrap_or_else(|e| e.into_inner())[r]);
        Ok(())
    }

    fn write_label(&self, off: u64, data: &[u8]) -> io::Result<()> {
        assert!(!self.readonly, "handler wrote to a read-only label area");
        let r = self.range(off, data.len());
        self.data.lock().unwrap_or_else(|e| e.into_inner())[r].copy_from_slice(data);
        Ok(())
    }

    fn sync_labels(&self) -> io::Result<()> {
        assert!(!self.readonly, "handler synced a read-only label area");
        Ok(())
    }

    fn readonly(&self) -> bool {
        self.readonly
    }
}

/// A handler with the three DIMMs, and a view of the read-only DIMM's labels.
pub fn handler() -> (DsmHandler<MemLabels>, MemLabels) {
    let mut h = DsmHandler::new();
    let ro = MemLabels::new(LABEL_SIZE, RO_FILL, true);
    let view = MemLabels {
        data: ro.data.clone(),
        readonly: true,
    };
    h.add_dimm(HANDLES[0], MemLabels::new(LABEL_SIZE, 0, false));
    h.add_dimm(HANDLES[1], ro);
    h.add_dimm(HANDLES[2], MemLabels::new(0, 0, false));
    (h, view)
}

/// Builds one request page from a selector byte and raw bytes.
fn page_from(selector: u8, raw: &[u8]) -> Box<[u8; DSM_PAGE_SIZE]> {
    let mut page = Box::new([0u8; DSM_PAGE_SIZE]);
    let n = raw.len().min(DSM_PAGE_SIZE);
    page[..n].copy_from_slice(&raw[..n]);
    match selector & 3 {
        0 => {}
        i => page[0..4].copy_from_slice(&HANDLES[usize::from(i - 1)].to_le_bytes()),
    }
    if selector & 4 != 0 {
        page[4..8].copy_from_slice(&1u32.to_le_bytes());
    }
    if selector & 8 != 0 {
        page[8..12].copy_from_slice(&u32::from((selector >> 4) & 7).to_le_bytes());
    }
    if selector & 0x80 != 0 {
        // A plausible label transfer: offset and length near the label
        // area's bounds, and an input length that matches them.
        let le = |b: &[u8]| u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        let area = u32::try_from(LABEL_SIZE).unwrap_or(u32::MAX);
        let offset = le(&page[16..20]) % (area + 8192);
        let length = le(&page[20..24]) % 4200;
        page[16..20].copy_from_slice(&offset.to_le_bytes());
        page[20..24].copy_from_slice(&length.to_le_bytes());
        let write = le(&page[8..12]) == 6;
        let in_len = if write { 8 + length.min(4072) } else { 8 };
        page[12..16].copy_from_slice(&in_len.to_le_bytes());
    }
    page
}

/// Runs one input (see the module docs) on a fresh handler.
pub fn run(data: &[u8]) {
    let (h, ro) = handler();
    run_on(&h, &ro, data);
}

/// Runs one input on `h`, whose read-only DIMM's labels are `ro`.
pub fn run_on(h: &DsmHandler<MemLabels>, ro: &MemLabels, data: &[u8]) {
    for chunk in data.chunks(DSM_PAGE_SIZE + 1) {
        let Some((&selector, raw)) = chunk.split_first() else {
            continue;
        };
        let mut page = page_from(selector, raw);
        h.handle(&mut page);
        let len = u32::from_le_bytes([page[0], page[1], page[2], page[3]]);
        let len = usize::try_from(len).unwrap_or(usize::MAX);
        assert!(
            len <= DSM_OUT_DATA_MAX,
            "output length {len} beyond the page"
        );
        assert!(
            page[4 + len..].iter().all(|b| *b == 0),
            "response page not zeroed after {len} output bytes"
        );
    }
    assert!(ro.all(RO_FILL), "the read-only DIMM's labels changed");
}
