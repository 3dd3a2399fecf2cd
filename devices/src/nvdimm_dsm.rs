//! VMM side of the NVDIMM `_DSM` transport: the Intel-family label
//! functions here, the health functions in [`crate::nvdimm_health`], the
//! root device's scrub and error injection in [`crate::nvdimm_ars`].
//!
//! The AML in pmemvm's NVDIMM SSDT (see the `acpi` crate and
//! `docs/nvdimm.md`) copies each `_DSM` call of the Intel NVDIMM family
//! (and each root device call, with the handle [`ROOT_HANDLE`])
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
//! panics or reads/writes outside the label area or the media state,
//! whatever the page holds.
//!
//! A label write is durable before the guest sees success: the handler
//! writes the bytes, then calls [`LabelStorage::sync_labels`] (fdatasync of
//! the backing file for [`FileLabels`]) and answers "success" only when
//! both worked; any failure is status 4 (`HardwareError`), which Linux
//! turns into -EIO for the label update.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::nvdimm_ars::{RootDsm, ROOT_FUNCTIONS};
pub use crate::nvdimm_dsm_page::{
    DsmStats, DsmStatus, DSM_IN_DATA_MAX, DSM_OUT_DATA_MAX, DSM_PAGE_SIZE, DSM_REVISION,
    DSM_REVISION_2, FUNC_GET_LABEL_DATA, FUNC_GET_LABEL_SIZE, FUNC_QUERY, FUNC_SET_LABEL_DATA,
    MAX_LABEL_TRANSFER,
};
pub(crate) use crate::nvdimm_dsm_page::{Reply, REQ_IN_DATA, RESP_OUT_DATA};
use crate::nvdimm_fit::{FitTable, FUNC_READ_FIT};
use crate::nvdimm_health::{self as health, HEALTH_FUNCTIONS};
use crate::nvdimm_labels::{get_label_data, set_label_data};
pub use crate::nvdimm_labels::{FileLabels, LabelStorage};
use crate::nvdimm_media::DimmMedia;
use crate::platform_events::{dimm_health, PlatformEvents};

/// The NFIT device handle the root device's `_DSM` puts in its requests
/// (no DIMM has it: DIMM handles are 1..=256).
pub const ROOT_HANDLE: u32 = u32::MAX;

/// Answers `_DSM` requests for a set of DIMMs, keyed by NFIT device handle,
/// and (once [`DsmHandler::enable_root`] is called) for the NVDIMM root
/// device, whose requests carry [`ROOT_HANDLE`]. DIMMs can join while the
/// guest runs ([`DsmHandler::hot_add`]): the maps are behind read-write
/// locks that a call holds for reading.
#[derive(Debug)]
pub struct DsmHandler<L: LabelStorage = FileLabels> {
    dimms: RwLock<BTreeMap<u32, L>>,
    /// Media state (bad ranges, health) of the DIMMs that have one.
    media: RwLock<BTreeMap<u32, Arc<DimmMedia>>>,
    root: Option<RootDsm>,
    stats: DsmStats,
    /// Calls addressed to each known DIMM, by handle.
    calls_by_handle: RwLock<BTreeMap<u32, AtomicU64>>,
    /// Where a DIMM's health notification (0x81) is raised, and each DIMM's
    /// event index by handle ([`Self::notify_health_on`]).
    health_events: Option<(Arc<PlatformEvents>, HealthIndex)>,
    /// The NFIT's structures, for `_FIT`.
    fit: FitTable,
}

/// Each DIMM's health-event index, by NFIT handle.
type HealthIndex = RwLock<BTreeMap<u32, usize>>;

fn read<T>(l: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn write<T>(l: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(std::sync::PoisonError::into_inner)
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

impl<L: LabelStorage> DsmHandler<L> {
    /// A handler without DIMMs.
    pub fn new() -> Self {
        Self {
            dimms: RwLock::default(),
            media: RwLock::default(),
            root: None,
            stats: DsmStats::default(),
            calls_by_handle: RwLock::default(),
            health_events: None,
            fit: FitTable::default(),
        }
    }

    /// Raises DIMM `index`'s health event on `events` (`Notify (NVxx, 0x81)`,
    /// through the GED) when the guest's own set-threshold or SMART-inject
    /// call leaves the DIMM with something to report — an enabled alarm
    /// tripped, a health status other than healthy, a dirty last shutdown —
    /// as a DIMM's firmware signals a health event (and as the kernel's
    /// nfit_test does after those calls): `ndctl monitor` then reads the
    /// SMART data again. `index_by_handle`: each DIMM's position.
    pub fn notify_health_on(
        &mut self,
        events: Arc<PlatformEvents>,
        index_by_handle: BTreeMap<u32, usize>,
    ) {
        self.health_events = Some((events, RwLock::new(index_by_handle)));
    }

    /// After a successful health-changing call on DIMM `handle`.
    fn health_changed(&self, handle: u32, media: &DimmMedia, reply: &[u8]) {
        let ok = reply.get(..4) == Some(&health::STATUS_SUCCESS.to_le_bytes()[..]);
        let Some((events, index)) = &self.health_events else {
            return;
        };
        if !ok || !health::notable(&media.state()) {
            return;
        }
        let bit = read(index).get(&handle).copied().and_then(dimm_health);
        if let Some(bit) = bit {
            if let Err(e) = events.raise(bit) {
                log::warn!("raising NVDIMM {handle:#x}'s health event failed: {e}");
            }
        }
    }

    /// Adds (or replaces) the label storage of the DIMM with `handle`.
    pub fn add_dimm(&mut self, handle: u32, labels: L) {
        write(&self.dimms).insert(handle, labels);
        write(&self.calls_by_handle).entry(handle).or_default();
    }

    /// Gives the DIMM `media.handle` (added with [`Self::add_dimm`]) its
    /// media state: the health functions then answer for it, and the root
    /// device reports its bad ranges.
    pub fn add_media(&mut self, media: Arc<DimmMedia>) {
        write(&self.media).insert(media.handle, media);
    }

    /// Answers the root device's `_DSM` (ARS, clear error, error injection)
    /// over the DIMMs given media so far.
    pub fn enable_root(&mut self) {
        self.root = Some(RootDsm::new(read(&self.media).values().cloned().collect()));
    }

    /// The NFIT's structures `_FIT` returns (replacing the ones before; a
    /// read in progress starts again).
    pub fn set_fit(&self, structures: Vec<u8>) {
        self.fit.replace(structures);
    }

    /// The structures `_FIT` returns now.
    pub fn fit(&self) -> Vec<u8> {
        self.fit.bytes()
    }

    /// A DIMM that arrives while the guest runs: its labels, media state
    /// and place among the DIMMs (its health event), under `handle`. The
    /// caller then replaces the FIT ([`Self::set_fit`]) and notifies the root device.
    pub fn hot_add(&self, handle: u32, labels: L, media: Arc<DimmMedia>, index: usize) {
        write(&self.dimms).insert(handle, labels);
        write(&self.calls_by_handle).entry(handle).or_default();
        if let Some(root) = &self.root {
            root.add_dimm(media.clone());
        }
        write(&self.media).insert(handle, media);
        if let Some((_, by_handle)) = &self.health_events {
            write(by_handle).insert(handle, index);
        }
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
        read(&self.calls_by_handle)
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
        if let Some(c) = read(&self.calls_by_handle).get(&get_u32(page, 0)) {
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
        if function == FUNC_READ_FIT {
            return match Self::input(page) {
                Some(input) => Reply::Raw(self.fit.read(input)),
                None => Reply::Raw(crate::nvdimm_fit::STATUS_INVALID.to_le_bytes().to_vec()),
            };
        }
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
        let dimms = read(&self.dimms);
        let media = read(&self.media);
        let dimm = dimms.get(&handle);
        let media = media.get(&handle);
        if function == FUNC_QUERY {
            return Reply::Bitmap(match dimm {
                Some(d) if dimm_revision(revision) => supported_functions(d, media.is_some()),
                _ => 0,
            });
        }
        let Some(dimm) = dimm else {
            return Reply::Status(DsmStatus::NoSuchDevice);
        };
        if !dimm_revision(revision) {
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
            (health::FUNC_SET_THRESHOLD, Some(m)) => {
                let reply = health::set_threshold(m, input);
                self.health_changed(m.handle, m, &reply);
                Reply::Raw(reply)
            }
            (health::FUNC_SMART_INJECT, Some(m)) => {
                let reply = health::inject(m, input);
                self.health_changed(m.handle, m, &reply);
                Reply::Raw(reply)
            }
            _ => Reply::Status(DsmStatus::NotSupported),
        }
    }
}

/// The Intel family revisions a DIMM answers: 1, and 2, which Linux 6.1
/// uses for functions 11 to 30 (`nfit_dsm_revid`: set threshold 17 and
/// SMART inject 18 among them); revision 2 of the Intel DSM interface keeps
/// every revision 1 function as it was.
fn dimm_revision(revision: u32) -> bool {
    revision == DSM_REVISION || revision == DSM_REVISION_2
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
#[path = "nvdimm_dsm_tests.rs"]
mod tests;
