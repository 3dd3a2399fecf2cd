//! Counters of VM exits by reason, and of NVDIMM flushes, shared by all vCPU
//! threads (relaxed atomics: they are statistics, not synchronisation).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Instant;

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
    /// Accesses no device claimed.
    pub unhandled: AtomicU64,
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
    /// HLT exits.
    pub hlt: u64,
    /// Signal interruptions.
    pub interrupted: u64,
    /// Other exits.
    pub other: u64,
}

impl ExitStats {
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
            hlt: g(&self.hlt),
            interrupted: g(&self.interrupted),
            other: g(&self.other),
        }
    }
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
}

static PROCESS_START: OnceLock<Instant> = OnceLock::new();

/// Records the start of `main` (the reference for startup figures).
pub fn mark_process_start() {
    let _ = PROCESS_START.set(Instant::now());
}

/// Microseconds since [`mark_process_start`] (None if it was never called).
pub fn micros_since_start() -> Option<u128> {
    PROCESS_START.get().map(|t| t.elapsed().as_micros())
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
        if let Some((a, b)) = first.split_once('-') {
            if let (Ok(start), Ok(end)) =
                (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16))
            {
                current_is_guest = guest
                    .iter()
                    .any(|&(g, len)| start < g.saturating_add(len) && g < end);
                continue;
            }
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
}
