//! The `_DSM` page's terms, shared by the transport ([`crate::nvdimm_dsm`]) and the
//! label functions ([`crate::nvdimm_labels`]): its layout, the Intel family's function
//! numbers and status codes, the handler's counters, and one call's reply. A leaf: it
//! uses no other module of the crate.

use std::sync::atomic::AtomicU64;

/// Size of the shared DSM page.
pub const DSM_PAGE_SIZE: usize = 4096;
/// Offset of the request's input bytes.
pub(crate) const REQ_IN_DATA: usize = 16;
/// Most input bytes a request can carry.
pub const DSM_IN_DATA_MAX: usize = DSM_PAGE_SIZE - REQ_IN_DATA;
/// Offset of the response's output bytes.
pub(crate) const RESP_OUT_DATA: usize = 4;
/// Most output bytes a response can carry.
pub const DSM_OUT_DATA_MAX: usize = DSM_PAGE_SIZE - RESP_OUT_DATA;
/// Largest label transfer of one call (reported by "get label size"):
/// limited by a write's input (offset + length + data ≤ 4080 bytes); a read's
/// output (status + data ≤ 4092 bytes) allows more.
#[allow(clippy::cast_possible_truncation)] // 4072 fits
pub const MAX_LABEL_TRANSFER: u32 = (DSM_IN_DATA_MAX - 8) as u32;

/// The Intel family's first `_DSM` revision (and the root device's only one).
pub const DSM_REVISION: u32 = 1;
/// The Intel family's second revision (accepted for every DIMM function).
pub const DSM_REVISION_2: u32 = 2;
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
