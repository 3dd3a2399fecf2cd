//! VMM side of the NVDIMM `_DSM` label transport.
//!
//! The AML in pmemvm's NVDIMM SSDT (see the `acpi` crate and
//! `docs/nvdimm.md`) copies each `_DSM` call of the Intel NVDIMM family
//! into a 4 KiB guest page and writes the page address to an I/O port. The
//! VMM then reads the page, calls [`DsmHandler::handle`], which replaces the
//! request with the response in place, and writes the page back.
//!
//! Request (guest → VMM), little-endian:
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 4 | NFIT device handle |
//! | 4 | 4 | `_DSM` revision (Arg1) |
//! | 8 | 4 | function index (Arg2) |
//! | 12 | 4 | input length *n* (size of the buffer in Arg3's first element) |
//! | 16 | *n* ≤ 4080 | input bytes |
//!
//! Response (VMM → guest): output length *m* (u32) at 0, *m* ≤ 4092 output
//! bytes at 4; the rest of the page is zeroed. The AML returns those *m*
//! bytes as the `_DSM` result buffer.
//!
//! Every field is guest controlled and treated as hostile: nothing here
//! panics or reads/writes outside the label area, whatever the page holds.
//!
//! A label write is durable before the guest sees success: the handler
//! writes the bytes, then calls [`LabelStorage::sync_labels`] (fdatasync of
//! the backing file for [`FileLabels`]) and answers "success" only when
//! both worked; any failure is status 4 (`HardwareError`), which Linux
//! turns into -EIO for the label update.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Size of the shared DSM page.
pub const DSM_PAGE_SIZE: usize = 4096;
/// Offset of the request's input bytes.
const REQ_IN_DATA: usize = 16;
/// Most input bytes a request can carry.
pub const DSM_IN_DATA_MAX: usize = DSM_PAGE_SIZE - REQ_IN_DATA;
/// Offset of the response's output bytes.
const RESP_OUT_DATA: usize = 4;
/// Most output bytes a response can carry.
pub const DSM_OUT_DATA_MAX: usize = DSM_PAGE_SIZE - RESP_OUT_DATA;
/// Largest label transfer of one call (reported by "get label size"):
/// limited by a write's input (offset + length + data ≤ 4080 bytes); a read's
/// output (status + data ≤ 4092 bytes) allows more.
#[allow(clippy::cast_possible_truncation)] // 4072 fits
pub const MAX_LABEL_TRANSFER: u32 = (DSM_IN_DATA_MAX - 8) as u32;

/// The only `_DSM` revision of the Intel family pmemvm implements.
pub const DSM_REVISION: u32 = 1;
/// Function 0: query the supported functions.
pub const FUNC_QUERY: u32 = 0;
/// Function 4: get namespace label size.
pub const FUNC_GET_LABEL_SIZE: u32 = 4;
/// Function 5: get namespace label data.
pub const FUNC_GET_LABEL_DATA: u32 = 5;
/// Function 6: set namespace label data.
pub const FUNC_SET_LABEL_DATA: u32 = 6;

/// Intel NVDIMM DSM status codes (the first u32 of every output except
/// function 0's bitmap).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum DsmStatus {
    /// Success.
    Success = 0,
    /// Function not supported (also: revision not supported, or a write to a
    /// read-only DIMM).
    NotSupported = 1,
    /// No DIMM with that handle.
    NoSuchDevice = 2,
    /// Invalid input (bad lengths, offset beyond the label area, ...).
    InvalidInput = 3,
    /// The backing file could not be read or written.
    HardwareError = 4,
}

use crate::nvdimm_ars::{RootDsm, ROOT_FUNCTIONS};
use crate::nvdimm_health::{self as health, HEALTH_FUNCTIONS};
use crate::nvdimm_labels::{get_label_data, set_label_data};
pub use crate::nvdimm_labels::{FileLabels, LabelStorage};
use crate::nvdimm_media::DimmMedia;

/// The NFIT device handle the root device's `_DSM` puts in its requests
/// (no DIMM has it: DIMM handles are 1..=256).
pub const ROOT_HANDLE: u32 = u32::MAX;

/// Counters of the DSM handler (reported at shutdown / in `run --json`).
#[derive(Debug, Default)]
pub struct DsmStats {
    /// `_DSM` calls handled.
    pub calls: AtomicU64,
    /// Calls answered with a non-success status (or an empty bitmap).
    pub errors: AtomicU64,
    /// Label bytes read by the guest.
    pub label_bytes_read: AtomicU64,
    /// Label bytes written by the guest.
    pub label_bytes_written: AtomicU64,
    /// Successful syncs of label writes to stable storage.
    pub label_syncs: AtomicU64,
}

/// Answers `_DSM` requests for a set of DIMMs, keyed by NFIT device handle,
/// and (once [`DsmHandler::enable_root`] is called) for the NVDIMM root
/// device, whose requests carry [`ROOT_HANDLE`].
#[derive(Debug)]
pub struct DsmHandler<L: LabelStorage = FileLabels> {
    dimms: BTreeMap<u32, L>,
    /// Media state (bad ranges, health) of the DIMMs that have one.
    media: BTreeMap<u32, Arc<DimmMedia>>,
    root: Option<RootDsm>,
    stats: DsmStats,
    /// Calls addressed to each known DIMM, by handle.
    calls_by_handle: BTreeMap<u32, AtomicU64>,
}

impl<L: LabelStorage> Default for DsmHandler<L> {
    fn default() -> Self {
        Self::new()
    }
}

fn get_u32(page: &[u8; DSM_PAGE_SIZE], off: usize) -> u32 {
    let mut b = [0u8; 4];
    b.copy_from_slice(&page[off..off + 4]);
    u32::from_le_bytes(b)
}

/// The response of one call, before it is written to the page.
pub(crate) enum Reply {
    /// Function 0: the supported-functions bitmap (as few bytes as hold it).
    Bitmap(u32),
    /// Status only.
    Status(DsmStatus),
    /// Success status followed by data.
    Data(Vec<u8>),
    /// A whole output buffer (status included), from the root or health functions.
    Raw(Vec<u8>),
}

impl<L: LabelStorage> DsmHandler<L> {
    /// A handler without DIMMs.
    pub fn new() -> Self {
        Self {
            dimms: BTreeMap::new(),
            media: BTreeMap::new(),
            root: None,
            stats: DsmStats::default(),
            calls_by_handle: BTreeMap::new(),
        }
    }

    /// Adds (or replaces) the label storage of the DIMM with `handle`.
    pub fn add_dimm(&mut self, handle: u32, labels: L) {
        self.dimms.insert(handle, labels);
        self.calls_by_handle.entry(handle).or_default();
    }

    /// Gives the DIMM `media.handle` (added with [`Self::add_dimm`]) its
    /// media state: the health functions then answer for it, and the root
    /// device reports its bad ranges.
    pub fn add_media(&mut self, media: Arc<DimmMedia>) {
        self.media.insert(media.handle, media);
    }

    /// Answers the root device's `_DSM` (ARS, clear error, error injection)
    /// over the DIMMs given media so far.
    pub fn enable_root(&mut self) {
        self.root = Some(RootDsm::new(self.media.values().cloned().collect()));
    }

    /// Whether the guest should get the root device's "new uncorrectable
    /// errors" notification now (read through the doorbell by the AML).
    pub fn take_notification(&self) -> bool {
        self.root.as_ref().is_some_and(RootDsm::take_notification)
    }

    /// The root device, when enabled (for its counters).
    pub fn root(&self) -> Option<&RootDsm> {
        self.root.as_ref()
    }

    /// `_DSM` calls addressed to the DIMM with `handle` (0 for an unknown one).
    pub fn calls_for(&self, handle: u32) -> u64 {
        self.calls_by_handle
            .get(&handle)
            .map_or(0, |c| c.load(Ordering::Relaxed))
    }

    /// The counters.
    pub fn stats(&self) -> &DsmStats {
        &self.stats
    }

    /// Handles the request in `page` and replaces it with the response.
    pub fn handle(&self, page: &mut [u8; DSM_PAGE_SIZE]) {
        self.stats.calls.fetch_add(1, Ordering::Relaxed);
        if let Some(c) = self.calls_by_handle.get(&get_u32(page, 0)) {
            c.fetch_add(1, Ordering::Relaxed);
        }
        let reply = self.dispatch(page);
        let out: Vec<u8> = match reply {
            Reply::Bitmap(b) => {
                if b == 0 {
                    self.stats.errors.fetch_add(1, Ordering::Relaxed);
                }
                let bytes = b.to_le_bytes();
                let n = bytes.iter().rposition(|x| *x != 0).map_or(1, |i| i + 1);
                bytes[..n].to_vec()
            }
            Reply::Status(s) => {
                if s != DsmStatus::Success {
                    self.stats.errors.fetch_add(1, Ordering::Relaxed);
                }
                (s as u32).to_le_bytes().to_vec()
            }
            Reply::Data(mut d) => {
                let mut v = (DsmStatus::Success as u32).to_le_bytes().to_vec();
                v.append(&mut d);
                v
            }
            Reply::Raw(v) => {
                if v.get(..2) != Some(&[0, 0]) {
                    self.stats.errors.fetch_add(1, Ordering::Relaxed);
                }
                v
            }
        };
        // Every reply is at most 4 + MAX_LABEL_TRANSFER bytes (labels) or
        // 4092 bytes (root functions), within the page.
        let len = out.len().min(DSM_OUT_DATA_MAX);
        page.fill(0);
        page[..4].copy_from_slice(&u32::try_from(len).unwrap_or(0).to_le_bytes());
        page[RESP_OUT_DATA..RESP_OUT_DATA + len].copy_from_slice(&out[..len]);
    }

    /// The input bytes of the request, if its length fits the page.
    fn input(page: &[u8; DSM_PAGE_SIZE]) -> Option<&[u8]> {
        usize::try_from(get_u32(page, 12))
            .ok()
            .filter(|n| *n <= DSM_IN_DATA_MAX)
            .map(|n| &page[REQ_IN_DATA..REQ_IN_DATA + n])
    }

    fn dispatch_root(&self, page: &[u8; DSM_PAGE_SIZE]) -> Reply {
        let (revision, function) = (get_u32(page, 4), get_u32(page, 8));
        let Some(root) = &self.root else {
            return match function {
                FUNC_QUERY => Reply::Bitmap(0),
                _ => Reply::Status(DsmStatus::NoSuchDevice),
            };
        };
        if function == FUNC_QUERY {
            return Reply::Bitmap(if revision == DSM_REVISION {
                ROOT_FUNCTIONS
            } else {
                0
            });
        }
        if revision != DSM_REVISION || function >= 32 || ROOT_FUNCTIONS & (1 << function) == 0 {
            return Reply::Status(DsmStatus::NotSupported);
        }
        match Self::input(page) {
            // Root status 2 is "invalid input parameters".
            None => Reply::Raw(2u32.to_le_bytes().to_vec()),
            Some(input) => Reply::Raw(root.call(function, input)),
        }
    }

    fn dispatch(&self, page: &[u8; DSM_PAGE_SIZE]) -> Reply {
        let handle = get_u32(page, 0);
        let revision = get_u32(page, 4);
        let function = get_u32(page, 8);
        let in_len = get_u32(page, 12);
        log::debug!("nvdimm dsm: handle {handle:#x} rev {revision} fn {function} in {in_len}");
        if handle == ROOT_HANDLE {
            return self.dispatch_root(page);
        }
        let dimm = self.dimms.get(&handle);
        let media = self.media.get(&handle);
        if function == FUNC_QUERY {
            return Reply::Bitmap(match dimm {
                Some(d) if revision == DSM_REVISION => supported_functions(d, media.is_some()),
                _ => 0,
            });
        }
        let Some(dimm) = dimm else {
            return Reply::Status(DsmStatus::NoSuchDevice);
        };
        if revision != DSM_REVISION {
            return Reply::Status(DsmStatus::NotSupported);
        }
        if function >= 32 || supported_functions(dimm, media.is_some()) & (1 << function) == 0 {
            return Reply::Status(DsmStatus::NotSupported);
        }
        let Some(input) = Self::input(page) else {
            return Reply::Status(DsmStatus::InvalidInput);
        };
        match (function, media) {
            (FUNC_GET_LABEL_SIZE, _) => {
                let mut d = dimm.label_size().to_le_bytes().to_vec();
                d.extend_from_slice(&MAX_LABEL_TRANSFER.to_le_bytes());
                Reply::Data(d)
            }
            (FUNC_GET_LABEL_DATA, _) => get_label_data(&self.stats, dimm, input),
            (FUNC_SET_LABEL_DATA, _) => set_label_data(&self.stats, dimm, input),
            (health::FUNC_SMART, Some(m)) => Reply::Raw(health::smart(&m.state())),
            (health::FUNC_SMART_THRESHOLD, Some(m)) => Reply::Raw(health::threshold(&m.state())),
            (health::FUNC_SET_THRESHOLD, Some(m)) => Reply::Raw(health::set_threshold(m, input)),
            (health::FUNC_SMART_INJECT, Some(m)) => Reply::Raw(health::inject(m, input)),
            _ => Reply::Status(DsmStatus::NotSupported),
        }
    }
}

fn bit(function: u32) -> u32 {
    match function {
        0..=31 => 1 << function,
        _ => 0,
    }
}

/// Function 0's bitmap for `dimm`: the health functions (1, 2, 17, 18)
/// when it has a media state; for labels, nothing for a label-less DIMM
/// (Linux then treats it as label-less), 4, 5 for a read-only one, 4, 5, 6
/// otherwise.
fn supported_functions<L: LabelStorage>(dimm: &L, has_media: bool) -> u32 {
    let health = if has_media { HEALTH_FUNCTIONS } else { 0 };
    if dimm.label_size() == 0 {
        return bit(FUNC_QUERY) | health;
    }
    let mut b = bit(FUNC_QUERY) | bit(FUNC_GET_LABEL_SIZE) | bit(FUNC_GET_LABEL_DATA) | health;
    if !dimm.readonly() {
        b |= bit(FUNC_SET_LABEL_DATA);
    }
    b
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io;
    use std::sync::Mutex;

    /// In-memory labels for tests; `fail` makes every access an I/O error,
    /// `fail_sync` only the sync after a write. `durable` is what a crash
    /// would leave: the bytes of the last successful sync.
    struct MemLabels {
        data: Mutex<Vec<u8>>,
        durable: Mutex<Vec<u8>>,
        readonly: bool,
        fail: bool,
        fail_sync: bool,
    }

    impl MemLabels {
        fn new(size: usize, readonly: bool) -> Self {
            Self {
                data: Mutex::new(vec![0; size]),
                durable: Mutex::new(vec![0; size]),
                readonly,
                fail: false,
                fail_sync: false,
            }
        }
    }

    impl LabelStorage for MemLabels {
        fn label_size(&self) -> u32 {
            u32::try_from(self.data.lock().unwrap().len()).unwrap()
        }
        fn read_label(&self, off: u64, buf: &mut [u8]) -> io::Result<()> {
            if self.fail {
                return Err(io::ErrorKind::Other.into());
            }
            let off = usize::try_from(off).unwrap();
            buf.copy_from_slice(&self.data.lock().unwrap()[off..off + buf.len()]);
            Ok(())
        }
        fn write_label(&self, off: u64, data: &[u8]) -> io::Result<()> {
            if self.fail {
                return Err(io::ErrorKind::Other.into());
            }
            let off = usize::try_from(off).unwrap();
            self.data.lock().unwrap()[off..off + data.len()].copy_from_slice(data);
            Ok(())
        }
        fn sync_labels(&self) -> io::Result<()> {
            if self.fail_sync {
                return Err(io::ErrorKind::Other.into());
            }
            let data = self.data.lock().unwrap().clone();
            *self.durable.lock().unwrap() = data;
            Ok(())
        }
        fn readonly(&self) -> bool {
            self.readonly
        }
    }

    const LABEL_SIZE: usize = 128 << 10;

    fn handler() -> DsmHandler<MemLabels> {
        let mut h = DsmHandler::new();
        h.add_dimm(1, MemLabels::new(LABEL_SIZE, false));
        h.add_dimm(2, MemLabels::new(LABEL_SIZE, true));
        h.add_dimm(3, MemLabels::new(0, false));
        let mut broken = MemLabels::new(LABEL_SIZE, false);
        broken.fail = true;
        h.add_dimm(4, broken);
        let mut unsyncable = MemLabels::new(LABEL_SIZE, false);
        unsyncable.fail_sync = true;
        h.add_dimm(5, unsyncable);
        h
    }

    fn request(
        handle: u32,
        revision: u32,
        function: u32,
        input: &[u8],
    ) -> Box<[u8; DSM_PAGE_SIZE]> {
        let mut page = Box::new([0xaau8; DSM_PAGE_SIZE]);
        page[0..4].copy_from_slice(&handle.to_le_bytes());
        page[4..8].copy_from_slice(&revision.to_le_bytes());
        page[8..12].copy_from_slice(&function.to_le_bytes());
        page[12..16].copy_from_slice(&u32::try_from(input.len()).unwrap().to_le_bytes());
        page[16..16 + input.len()].copy_from_slice(input);
        page
    }

    /// Runs one call; returns the output bytes.
    fn call(h: &DsmHandler<MemLabels>, page: &mut [u8; DSM_PAGE_SIZE]) -> Vec<u8> {
        h.handle(page);
        let len = usize::try_from(get_u32(page, 0)).unwrap();
        assert!(len <= DSM_OUT_DATA_MAX);
        assert!(
            page[4 + len..].iter().all(|b| *b == 0),
            "rest of the page not zeroed"
        );
        page[4..4 + len].to_vec()
    }

    fn status(out: &[u8]) -> u32 {
        u32::from_le_bytes([out[0], out[1], out[2], out[3]])
    }

    fn rw_input(offset: u32, length: u32, data: &[u8]) -> Vec<u8> {
        let mut v = offset.to_le_bytes().to_vec();
        v.extend_from_slice(&length.to_le_bytes());
        v.extend_from_slice(data);
        v
    }

    #[test]
    fn query_bitmaps() {
        let h = handler();
        assert_eq!(call(&h, &mut request(1, 1, 0, &[])), vec![0x71]);
        assert_eq!(call(&h, &mut request(2, 1, 0, &[])), vec![0x31]);
        assert_eq!(call(&h, &mut request(3, 1, 0, &[])), vec![0x01]);
        // Unknown handle and unknown revision: nothing supported.
        assert_eq!(call(&h, &mut request(9, 1, 0, &[])), vec![0x00]);
        assert_eq!(call(&h, &mut request(1, 2, 0, &[])), vec![0x00]);
        assert_eq!(h.stats().calls.load(Ordering::Relaxed), 5);
        assert_eq!(h.stats().errors.load(Ordering::Relaxed), 2);
        // Per DIMM: handle 1 got two calls, 2 and 3 one each, 9 is unknown.
        assert_eq!([1, 2, 3, 9].map(|handle| h.calls_for(handle)), [2, 1, 1, 0]);
    }

    #[test]
    fn label_size() {
        let h = handler();
        let out = call(&h, &mut request(1, 1, 4, &[]));
        assert_eq!(out.len(), 12);
        assert_eq!(status(&out), 0);
        assert_eq!(status(&out[4..]), 128 << 10);
        assert_eq!(status(&out[8..]), 4072);
        // Label-less DIMM: not supported.
        assert_eq!(call(&h, &mut request(3, 1, 4, &[])), 1u32.to_le_bytes());
    }

    #[test]
    fn round_trip() {
        let h = handler();
        let data: Vec<u8> = (0..4072u32).map(|i| (i * 7).to_le_bytes()[0]).collect();
        let off = u32::try_from(LABEL_SIZE).unwrap() - 4072;
        let out = call(&h, &mut request(1, 1, 6, &rw_input(off, 4072, &data)));
        assert_eq!(out, 0u32.to_le_bytes());
        let out = call(&h, &mut request(1, 1, 5, &rw_input(off, 4072, &[])));
        assert_eq!(out.len(), 4 + 4072);
        assert_eq!(status(&out), 0);
        assert_eq!(&out[4..], &data[..]);
        // Other bytes untouched.
        let out = call(&h, &mut request(1, 1, 5, &rw_input(0, 16, &[])));
        assert_eq!(&out[4..], &[0u8; 16]);
        assert_eq!(h.stats().label_bytes_written.load(Ordering::Relaxed), 4072);
        assert_eq!(
            h.stats().label_bytes_read.load(Ordering::Relaxed),
            4072 + 16
        );
        assert_eq!(h.stats().errors.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn zero_length_transfers() {
        let h = handler();
        let out = call(&h, &mut request(1, 1, 5, &rw_input(0, 0, &[])));
        assert_eq!(out, 0u32.to_le_bytes());
        let out = call(&h, &mut request(1, 1, 6, &rw_input(128 << 10, 0, &[])));
        assert_eq!(out, 0u32.to_le_bytes());
    }

    #[test]
    fn unknown_handle_revision_function() {
        let h = handler();
        assert_eq!(status(&call(&h, &mut request(0, 1, 4, &[]))), 2);
        assert_eq!(
            status(&call(
                &h,
                &mut request(u32::MAX, 1, 5, &rw_input(0, 8, &[]))
            )),
            2
        );
        assert_eq!(status(&call(&h, &mut request(1, 0, 4, &[]))), 1);
        assert_eq!(status(&call(&h, &mut request(1, u32::MAX, 5, &[]))), 1);
        for f in [1, 2, 3, 7, 8, 31, 32, 255, u32::MAX] {
            assert_eq!(
                status(&call(&h, &mut request(1, 1, f, &[]))),
                1,
                "function {f}"
            );
        }
        // Write on a read-only DIMM (function not in its bitmap).
        let out = call(&h, &mut request(2, 1, 6, &rw_input(0, 4, &[1, 2, 3, 4])));
        assert_eq!(status(&out), 1);
    }

    #[test]
    fn bad_lengths_and_ranges() {
        let h = handler();
        let size = u32::try_from(LABEL_SIZE).unwrap();
        let bad: Vec<(u32, Vec<u8>)> = vec![
            (5, vec![]),                                // no offset/length
            (5, vec![0; 7]),                            // short header
            (5, rw_input(0, 8, &[0])),                  // trailing bytes
            (5, rw_input(0, 4073, &[])),                // above max transfer
            (5, rw_input(size - 8, 16, &[])),           // beyond the label area
            (5, rw_input(size, 1, &[])),                // starts at the end
            (5, rw_input(u32::MAX, 2, &[])),            // would overflow in u32
            (5, rw_input(u32::MAX - 3, u32::MAX, &[])), // both huge
            (6, vec![1, 2, 3]),                         // short header
            (6, rw_input(0, 8, &[1, 2, 3])),            // data shorter than length
            (6, rw_input(0, 2, &[1, 2, 3])),            // data longer than length
            (6, rw_input(size - 2, 4, &[1, 2, 3, 4])),  // beyond the label area
            (6, rw_input(u32::MAX, 1, &[9])),           // overflow
            (6, rw_input(0, 4073, &[0; 4072])),         // length above max transfer
        ];
        for (f, input) in bad {
            let out = call(&h, &mut request(1, 1, f, &input));
            assert_eq!(
                out,
                3u32.to_le_bytes(),
                "function {f}, input {:?}",
                &input[..input.len().min(8)]
            );
        }
        // Nothing was written by the rejected calls.
        let out = call(&h, &mut request(1, 1, 5, &rw_input(0, 8, &[])));
        assert_eq!(&out[4..], &[0u8; 8]);
        let out = call(&h, &mut request(1, 1, 5, &rw_input(size - 8, 8, &[])));
        assert_eq!(&out[4..], &[0u8; 8]);
    }

    #[test]
    fn input_length_beyond_page() {
        let h = handler();
        for in_len in [4081u32, 4096, 0x8000_0000, u32::MAX] {
            let mut page = request(1, 1, 5, &rw_input(0, 8, &[]));
            page[12..16].copy_from_slice(&in_len.to_le_bytes());
            assert_eq!(call(&h, &mut page), 3u32.to_le_bytes(), "in_len {in_len}");
        }
        // Exactly a full page of input is accepted as input (then rejected as
        // a malformed write: length field says 0 but 4072 data bytes follow).
        let mut page = request(1, 1, 6, &rw_input(0, 0, &[]));
        page[12..16].copy_from_slice(&4080u32.to_le_bytes());
        assert_eq!(call(&h, &mut page), 3u32.to_le_bytes());
    }

    #[test]
    fn success_means_synced() {
        let h = handler();
        let out = call(&h, &mut request(1, 1, 6, &rw_input(8, 3, b"abc")));
        assert_eq!(out, 0u32.to_le_bytes());
        let durable = h.dimms[&1].durable.lock().unwrap().clone();
        assert_eq!(&durable[8..11], b"abc", "success before the sync");
        assert_eq!(h.stats().label_syncs.load(Ordering::Relaxed), 1);
        // A write whose sync fails is an error for the guest, not a success.
        let out = call(&h, &mut request(5, 1, 6, &rw_input(0, 1, &[1])));
        assert_eq!(status(&out), 4);
        assert_eq!(h.stats().label_syncs.load(Ordering::Relaxed), 1);
        assert_eq!(h.stats().label_bytes_written.load(Ordering::Relaxed), 3);
    }

    #[test]
    fn io_errors_become_hardware_error() {
        let h = handler();
        assert_eq!(
            status(&call(&h, &mut request(4, 1, 5, &rw_input(0, 8, &[])))),
            4
        );
        assert_eq!(
            status(&call(&h, &mut request(4, 1, 6, &rw_input(0, 1, &[1])))),
            4
        );
    }

    #[test]
    #[allow(clippy::cast_possible_truncation)] // values reduced modulo small numbers
    fn random_pages_never_panic() {
        let h = handler();
        // A small xorshift generator: deterministic, no dependency.
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..20_000 {
            let mut page = Box::new([0u8; DSM_PAGE_SIZE]);
            for chunk in page.chunks_mut(8) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                chunk.copy_from_slice(&x.to_le_bytes()[..chunk.len()]);
            }
            // Steer half the pages towards valid handles/functions/lengths.
            if x & 1 == 0 {
                page[0..4].copy_from_slice(&(((x >> 8) % 5) as u32).to_le_bytes());
                page[4..8].copy_from_slice(&1u32.to_le_bytes());
                page[8..12].copy_from_slice(&(((x >> 16) % 8) as u32).to_le_bytes());
                page[12..16].copy_from_slice(&(((x >> 24) % 4200) as u32).to_le_bytes());
            }
            h.handle(&mut page);
            let len = usize::try_from(get_u32(&page, 0)).unwrap();
            assert!((1..=DSM_OUT_DATA_MAX).contains(&len));
        }
    }
}
