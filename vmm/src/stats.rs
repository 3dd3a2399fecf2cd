//! Counters of VM exits by reason, and of NVDIMM flushes, shared by all vCPU
//! threads (relaxed atomics: they are statistics, not synchronisation).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use devices::nvdimm::FlushStats;

use serde::{Deserialize, Serialize};

/// VM exits seen by pmemvm, by reason.
#[derive(Debug, Default)]
pub struct ExitStats {
    /// Port reads.
    pub io_in: AtomicU64,
    /// Port writes.
    pub io_out: AtomicU64,
    /// MMIO reads.
    pub mmio_read: AtomicU64,
    /// MMIO writes.
    pub mmio_write: AtomicU64,
    /// MMIO writes that hit a read-only NVDIMM (dropped).
    pub readonly_writes: AtomicU64,
    /// Accesses no device claimed ("unhandled": the guest probing hardware
    /// pmemvm does not have — a PIT speaker port, a PCI configuration port, a
    /// CMOS/RTC register; reads give all ones, writes are dropped).
    pub unhandled: AtomicU64,
    /// Where the unclaimed accesses went: the first [`UNCLAIMED_KEPT`]
    /// distinct addresses, each with its count.
    pub unclaimed: Mutex<Vec<UnclaimedAccess>>,
    /// HLT exits (none with the in-kernel LAPIC).
    pub hlt: AtomicU64,
    /// KVM_RUN interrupted by a signal.
    pub interrupted: AtomicU64,
    /// Anything else.
    pub other: AtomicU64,
}

/// A plain copy of the counters, for reports.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExitCounts {
    /// Port reads.
    pub io_in: u64,
    /// Port writes.
    pub io_out: u64,
    /// MMIO reads.
    pub mmio_read: u64,
    /// MMIO writes.
    pub mmio_write: u64,
    /// Dropped writes to read-only NVDIMMs.
    pub readonly_writes: u64,
    /// Unclaimed accesses.
    pub unhandled: u64,
    /// Where they went (the first few distinct addresses).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unclaimed: Vec<UnclaimedAccess>,
    /// HLT exits.
    pub hlt: u64,
    /// Signal interruptions.
    pub interrupted: u64,
    /// Other exits.
    pub other: u64,
}

/// Distinct unclaimed addresses kept with their counts (the rest are only counted).
pub const UNCLAIMED_KEPT: usize = 16;

/// One address no device claimed, and how often the guest went there.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnclaimedAccess {
    /// `port-read`, `port-write`, `mmio-read` or `mmio-write`.
    pub kind: String,
    /// The port or guest-physical address.
    pub addr: u64,
    /// Accesses.
    pub count: u64,
}

impl ExitStats {
    /// Counts an access no device claimed; the first one at each address is
    /// logged (info), and the first [`UNCLAIMED_KEPT`] addresses are kept.
    pub fn unclaimed_access(&self, vcpu: usize, kind: &'static str, addr: u64) {
        Self::bump(&self.unhandled);
        let Ok(mut list) = self.unclaimed.lock() else {
            return;
        };
        if let Some(a) = list.iter_mut().find(|a| a.kind == kind && a.addr == addr) {
            a.count += 1;
            return;
        }
        log::info!(
            "vCPU {vcpu}: {kind} at {addr:#x} is claimed by no device (pmemvm's machine has none there;              reads give all ones, writes are dropped)"
        );
        if list.len() < UNCLAIMED_KEPT {
            list.push(UnclaimedAccess {
                kind: kind.to_string(),
                addr,
                count: 1,
            });
        }
    }

    /// Adds one to `counter`.
    pub fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// A snapshot.
    pub fn snapshot(&self) -> ExitCounts {
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        ExitCounts {
            io_in: g(&self.io_in),
            io_out: g(&self.io_out),
            mmio_read: g(&self.mmio_read),
            mmio_write: g(&self.mmio_write),
            readonly_writes: g(&self.readonly_writes),
            unhandled: g(&self.unhandled),
            unclaimed: self.unclaimed.lock().map(|u| u.clone()).unwrap_or_default(),
            hlt: g(&self.hlt),
            interrupted: g(&self.interrupted),
            other: g(&self.other),
        }
    }
}

/// One DIMM's counters, as the VM keeps them.
#[derive(Debug, Clone)]
pub struct DimmCounters {
    /// The backing file, as the user named it.
    pub file: String,
    /// Guest base address.
    pub base: u64,
    /// Bytes the guest sees.
    pub size: u64,
    /// NFIT handle (for its `_DSM` calls).
    pub handle: u32,
    /// Its flush counters.
    pub flush: Arc<FlushStats>,
    /// Its memory slots around poisoned pages (`mce=on`), which count the
    /// machine checks raised.
    pub poison: Option<Arc<crate::nvdimm::mce::PoisonSlots>>,
}

/// Per-DIMM flush statistics for reports.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NvdimmCounts {
    /// Backing file.
    pub file: String,
    /// Guest base address.
    pub base: u64,
    /// Bytes the guest sees.
    pub size: u64,
    /// fdatasync calls from guest flush hints.
    pub flushes: u64,
    /// Failed fdatasync calls.
    pub flush_failures: u64,
    /// Label _DSM calls.
    pub label_calls: u64,
    /// Machine checks raised on loads from its bad ranges; `None` (left
    /// out of the JSON) without `mce=on`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine_checks: Option<u64>,
}

static PROCESS_START_NS: OnceLock<u64> = OnceLock::new();

/// CLOCK_MONOTONIC now, in ns: one clock for every process of the host, so a
/// start recorded before an exec stays the reference after it.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec owned by this frame; CLOCK_MONOTONIC always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    // CLOCK_MONOTONIC counts up from boot: neither field is negative.
    let secs = u64::try_from(ts.tv_sec).unwrap_or(0);
    let nanos = u64::try_from(ts.tv_nsec).unwrap_or(0);
    secs * 1_000_000_000 + nanos
}

/// Records the start of `main` (the reference for startup figures).
pub fn mark_process_start() {
    mark_process_start_at(monotonic_ns());
}

/// Records a start taken earlier ([`process_start_ns`] of the program that
/// handed this one the VM).
pub fn mark_process_start_at(ns: u64) {
    let _ = PROCESS_START_NS.set(ns);
}

/// The recorded start ([`monotonic_ns`]), if any.
pub fn process_start_ns() -> Option<u64> {
    PROCESS_START_NS.get().copied()
}

/// Microseconds since [`mark_process_start`] (None if it was never called).
pub fn micros_since_start() -> Option<u128> {
    process_start_ns().map(|s| u128::from(monotonic_ns().saturating_sub(s) / 1000))
}

/// Resident memory of this process outside the given guest mappings (host
/// address, length), in KiB, from /proc/self/smaps: the VMM's own footprint.
pub fn rss_excluding_kib(guest: &[(usize, usize)]) -> Option<u64> {
    let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
    Some(rss_in_smaps_excluding(&smaps, guest))
}

/// [`rss_excluding_kib`] over an smaps text already read.
fn rss_in_smaps_excluding(smaps: &str, guest: &[(usize, usize)]) -> u64 {
    let mut total = 0u64;
    let mut current_is_guest = false;
    for line in smaps.lines() {
        let mut fields = line.split_whitespace();
        let Some(first) = fields.next() else { continue };
        if let Some(vma) = crate::host::smaps::vma_range(first) {
            current_is_guest = guest
                .iter()
                .any(|&(g, len)| crate::host::smaps::overlaps(vma, g, len));
            continue;
        }
        if first == "Rss:" && !current_is_guest {
            total += fields
                .next()
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0);
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rss_excludes_the_named_mapping() {
        let _lock = crate::memory_test_lock();
        let len = 8 << 20;
        let mut v = vec![1u8; len];
        v[len - 1] = 2;
        // One snapshot for both sums: other tests' threads allocate meanwhile.
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let all = rss_in_smaps_excluding(&smaps, &[]);
        let without = rss_in_smaps_excluding(&smaps, &[(v.as_ptr() as usize, len)]);
        assert!(rss_excluding_kib(&[]).is_some_and(|n| n > 0));
        assert!(
            all >= without + 7 * 1024,
            "all {all} KiB, without {without} KiB"
        );
        assert_eq!(v[len - 1], 2);
    }

    #[test]
    fn unclaimed_accesses_are_counted_by_address_and_kept_up_to_a_limit() {
        let stats = ExitStats::default();
        stats.unclaimed_access(0, "port-read", 0x61);
        stats.unclaimed_access(1, "port-read", 0x61);
        stats.unclaimed_access(0, "port-write", 0x61);
        stats.unclaimed_access(0, "mmio-read", 0xfed0_0000);
        let snap = stats.snapshot();
        assert_eq!(snap.unhandled, 4);
        assert_eq!(
            snap.unclaimed,
            [
                UnclaimedAccess {
                    kind: "port-read".into(),
                    addr: 0x61,
                    count: 2
                },
                UnclaimedAccess {
                    kind: "port-write".into(),
                    addr: 0x61,
                    count: 1
                },
                UnclaimedAccess {
                    kind: "mmio-read".into(),
                    addr: 0xfed0_0000,
                    count: 1
                },
            ]
        );
        for port in 0..100u64 {
            stats.unclaimed_access(0, "port-write", 0x1000 + port);
        }
        let snap = stats.snapshot();
        assert_eq!(snap.unhandled, 104, "every access is counted");
        assert_eq!(snap.unclaimed.len(), UNCLAIMED_KEPT, "the list is bounded");
        let json = serde_json::to_string(&snap).unwrap();
        assert!(
            json.contains("\"unclaimed\":[{\"kind\":\"port-read\",\"addr\":97,\"count\":2}"),
            "{json}"
        );
        let back: ExitCounts = serde_json::from_str(&json).unwrap();
        assert_eq!(back, snap);
        let old: ExitCounts = serde_json::from_str(
            r#"{"io_in":1,"io_out":2,"mmio_read":0,"mmio_write":0,"readonly_writes":0,"unhandled":3,"hlt":0,"interrupted":0,"other":0}"#,
        )
        .unwrap();
        assert!(
            old.unclaimed.is_empty(),
            "records without the list still read"
        );
    }
}
