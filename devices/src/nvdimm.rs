//! NVDIMM flush hints: one unmapped MMIO page per DIMM. Linux writes to a hint
//! after its fence when it flushes the region (REQ_PREFLUSH, FUA, shutdown,
//! `deep_flush`); the write exits to pmemvm, which fdatasyncs that DIMM's
//! backing file before the vCPU continues — so a guest flush means the data
//! is on the host's stable storage. A [`FlushObserver`] (the flush recorder
//! of `record=`) sees each flush after the sync, before the vCPU goes on.

use std::fs::File;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::bus::BusDevice;
use crate::exit::{ExitNotifier, ExitRequest};

/// Per-DIMM flush counters, shared with the VMM for its statistics.
#[derive(Debug, Default)]
pub struct FlushStats {
    /// Successful fdatasync calls triggered by guest flush-hint writes.
    pub flushes: AtomicU64,
    /// fdatasync calls that failed.
    pub failures: AtomicU64,
}

/// Something that must see every guest flush of one DIMM before the
/// vCPU continues (pmemvm's flush recorder).
pub trait FlushObserver: Send + Sync + std::fmt::Debug {
    /// Called on the flushing vCPU's thread; an error ends the VM with it.
    fn flushed(&self) -> Result<(), String>;
}

/// One DIMM's backing file as seen by the flush-hint device.
#[derive(Debug)]
pub struct FlushTarget {
    /// Backing file (shared with the mapping's owner).
    pub file: Arc<File>,
    /// Host path, for messages.
    pub path: String,
    /// Counters of this DIMM.
    pub stats: Arc<FlushStats>,
    /// Sees each flush once the file is synced (`None`: nothing extra).
    pub observer: Option<Arc<dyn FlushObserver>>,
}

/// Flush-hint pages of all DIMM slots, `page_size` bytes each, in slot
/// order; a slot without a DIMM ignores writes until one is hot-added.
#[derive(Debug)]
pub struct FlushHintDevice {
    targets: Vec<FlushTarget>,
    slots: usize,
    page_size: u64,
    exit: Arc<ExitNotifier>,
}

impl FlushHintDevice {
    /// A device covering `targets.len()` pages of `page_size` bytes.
    pub fn new(targets: Vec<FlushTarget>, page_size: u64, exit: Arc<ExitNotifier>) -> Self {
        let slots = targets.len();
        Self::with_slots(targets, slots, page_size, exit)
    }

    /// A device covering `slots` pages (at least one per target).
    pub fn with_slots(
        targets: Vec<FlushTarget>,
        slots: usize,
        page_size: u64,
        exit: Arc<ExitNotifier>,
    ) -> Self {
        Self {
            slots: slots.max(targets.len()),
            targets,
            page_size,
            exit,
        }
    }

    /// The DIMM hot-added into the next slot; `false` (and nothing changes)
    /// when every slot has one.
    pub fn add(&mut self, target: FlushTarget) -> bool {
        if self.targets.len() >= self.slots {
            return false;
        }
        self.targets.push(target);
        true
    }

    /// Bytes of bus address space the device needs.
    pub fn len(&self) -> u64 {
        self.page_size * self.slots as u64
    }

    /// True when there are no slots.
    pub fn is_empty(&self) -> bool {
        self.slots == 0
    }
}

impl BusDevice for FlushHintDevice {
    fn read(&mut self, _offset: u64, data: &mut [u8]) {
        data.fill(0);
    }

    fn write(&mut self, offset: u64, _data: &[u8]) {
        let index = offset / self.page_size.max(1);
        let Some(target) = usize::try_from(index)
            .ok()
            .and_then(|i| self.targets.get(i))
        else {
            return;
        };
        match target.file.sync_data() {
            Ok(()) => {
                target.stats.flushes.fetch_add(1, Ordering::Relaxed);
                // After the sync: a file shared into an L1 by 9p (cache=mmap)
                // shows the guest's stores to read(2) only once they are written back.
                if let Some(observer) = &target.observer {
                    if let Err(e) = observer.flushed() {
                        target.stats.failures.fetch_add(1, Ordering::Relaxed);
                        self.exit.request(ExitRequest::StorageFailure(format!(
                            "recording a guest flush of NVDIMM {} failed: {e}",
                            target.path
                        )));
                    }
                }
            }
            Err(e) => {
                target.stats.failures.fetch_add(1, Ordering::Relaxed);
                self.exit.request(ExitRequest::StorageFailure(format!(
                    "fdatasync of NVDIMM backing file {} failed on a guest flush: {e}",
                    target.path
                )));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hint_write_syncs_the_right_dimm() {
        let dir = std::env::temp_dir();
        let mk = |n: &str| {
            let p = dir.join(format!("pmemvm-flush-test-{}-{n}", std::process::id()));
            let f = File::create(&p).unwrap();
            std::fs::remove_file(&p).unwrap();
            FlushTarget {
                file: Arc::new(f),
                path: n.to_string(),
                stats: Arc::new(FlushStats::default()),
                observer: None,
            }
        };
        let (a, b) = (mk("a"), mk("b"));
        let (sa, sb) = (a.stats.clone(), b.stats.clone());
        let exit = Arc::new(ExitNotifier::new().unwrap());
        let mut d = FlushHintDevice::new(vec![a, b], 4096, exit.clone());
        assert_eq!(d.len(), 8192);
        d.write(4096 + 8, &[1, 0, 0, 0, 0, 0, 0, 0]);
        d.write(4096, &[1]);
        d.write(0, &[1]);
        d.write(8192, &[1]); // beyond the last DIMM: ignored
        d.write(u64::MAX, &[1]);
        assert_eq!(sa.flushes.load(Ordering::Relaxed), 1);
        // A slot without a DIMM ignores writes; the DIMM hot-added into it is flushed.
        let (c, extra) = (mk("c"), mk("d"));
        let sc = c.stats.clone();
        let mut d2 = FlushHintDevice::with_slots(vec![mk("e")], 2, 4096, exit.clone());
        assert_eq!(d2.len(), 8192);
        d2.write(4096, &[1]);
        assert!(d2.add(c));
        assert!(!d2.add(extra), "no third slot");
        d2.write(4096, &[1]);
        assert_eq!(sc.flushes.load(Ordering::Relaxed), 1);
        assert_eq!(sb.flushes.load(Ordering::Relaxed), 2);
        assert_eq!(exit.get(), None);
    }

    #[derive(Debug, Default)]
    struct Counting {
        calls: AtomicU64,
        fail: bool,
    }

    impl FlushObserver for Counting {
        fn flushed(&self) -> Result<(), String> {
            self.calls.fetch_add(1, Ordering::Relaxed);
            match self.fail {
                true => Err("the log's disk is full".into()),
                false => Ok(()),
            }
        }
    }

    #[test]
    fn the_observer_sees_each_flush_and_its_failure_ends_the_vm() {
        let f = |n: &str| {
            let p =
                std::env::temp_dir().join(format!("pmemvm-flush-obs-{}-{n}", std::process::id()));
            let f = File::create(&p).unwrap();
            std::fs::remove_file(&p).unwrap();
            Arc::new(f)
        };
        let ok = Arc::new(Counting::default());
        let bad = Arc::new(Counting {
            fail: true,
            ..Counting::default()
        });
        let target = |name: &str, o: &Arc<Counting>| FlushTarget {
            file: f(name),
            path: name.to_string(),
            stats: Arc::new(FlushStats::default()),
            observer: Some(o.clone() as Arc<dyn FlushObserver>),
        };
        let exit = Arc::new(ExitNotifier::new().unwrap());
        let mut d = FlushHintDevice::new(
            vec![target("a", &ok), target("b", &bad)],
            4096,
            exit.clone(),
        );
        d.write(0, &[1]);
        d.write(0, &[1]);
        assert_eq!(ok.calls.load(Ordering::Relaxed), 2);
        assert_eq!(exit.get(), None);
        d.write(4096, &[1]);
        assert_eq!(bad.calls.load(Ordering::Relaxed), 1);
        match exit.get() {
            Some(ExitRequest::StorageFailure(m)) => {
                assert!(
                    m.contains(
                        "recording a guest flush of NVDIMM b failed: the log's disk is full"
                    ),
                    "{m}"
                );
            }
            other => panic!("{other:?}"),
        }
    }
}
