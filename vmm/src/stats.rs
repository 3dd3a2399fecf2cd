//! Counters of VM exits by reason, and of NVDIMM flushes, shared by all vCPU
//! threads (relaxed atomics: they are statistics, not synchronisation).

use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;

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
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
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
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
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
