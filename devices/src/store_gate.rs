//! The one place every store into a recorded NVDIMM passes, so a recording
//! can take an epoch at one instant.
//!
//! Three kinds of writer store into guest memory: vCPUs in `KVM_RUN`, vCPU
//! threads that emulate a store in user space (a hole page's good bytes, a
//! label write) and device threads doing DMA (virtio disks). A vCPU says when
//! it enters and leaves the guest ([`StoreGate::enter_guest`],
//! [`StoreGate::left_guest`]); the others hold a [`StoreGate::storing`] guard
//! while they store. [`StoreGate::quiesce`] stops all three — each vCPU out of
//! `KVM_RUN` (kicked out if need be) and kept out, each user-space store
//! finished — and keeps them stopped until its guard drops: what the holder
//! reads meanwhile (KVM's dirty log, then the pages) is one instant of memory.
//!
//! A vCPU blocked in user space (in a device's lock, another flush) is
//! already out of the guest, so the holder never waits for it: there is no
//! lock order between the gate and what exit handlers take.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::{Duration, Instant};

/// How long a kicked vCPU may stay in the guest before it is kicked again.
const KICK_AGAIN: Duration = Duration::from_millis(2);

/// Errors quiescing the writers.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum GateError {
    /// vCPUs still in the guest at the deadline.
    #[error(
        "vCPU(s) {0:?} did not leave the guest within {1:?} to let the recording take its epoch"
    )]
    StillRunning(Vec<usize>, Duration),
}

/// How a quiescer makes vCPUs leave `KVM_RUN` (the kick signal).
pub trait Kick: Send + Sync {
    /// Makes the vCPUs of `indices` leave `KVM_RUN` soon.
    fn kick(&self, indices: &[usize]);
}

/// The gate of one VM.
#[derive(Debug)]
pub struct StoreGate {
    /// vCPU i is in `KVM_RUN` or about to enter it.
    in_guest: Vec<AtomicBool>,
    /// A quiescer holds the vCPUs out.
    holding: AtomicBool,
    /// User-space stores take it shared; a quiescer exclusive.
    stores: RwLock<()>,
    /// One quiescer at a time.
    quiescer: Mutex<()>,
    /// vCPUs kept out wait here.
    reopened: (Mutex<()>, Condvar),
}

/// Everything stopped while it lives.
#[derive(Debug)]
pub struct Quiesced<'a> {
    gate: &'a StoreGate,
    _one: std::sync::MutexGuard<'a, ()>,
    _stores: RwLockWriteGuard<'a, ()>,
}

impl Drop for Quiesced<'_> {
    fn drop(&mut self) {
        let (lock, open) = &self.gate.reopened;
        let _g = lock
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        self.gate.holding.store(false, Ordering::SeqCst);
        open.notify_all();
    }
}

impl StoreGate {
    /// A gate for `vcpus` vCPUs, open.
    pub fn new(vcpus: usize) -> Self {
        Self {
            in_guest: (0..vcpus).map(|_| AtomicBool::new(false)).collect(),
            holding: AtomicBool::new(false),
            stores: RwLock::new(()),
            quiescer: Mutex::new(()),
            reopened: (Mutex::new(()), Condvar::new()),
        }
    }

    /// vCPU `index` is about to enter `KVM_RUN`; waits while a quiescer
    /// holds the vCPUs out.
    pub fn enter_guest(&self, index: usize) {
        let Some(flag) = self.in_guest.get(index) else {
            return;
        };
        loop {
            // Said first, then the hold looked at: a quiescer that set its
            // hold before this load sees this store (both SeqCst), so it
            // never reads memory while this vCPU runs.
            flag.store(true, Ordering::SeqCst);
            if !self.holding.load(Ordering::SeqCst) {
                return;
            }
            flag.store(false, Ordering::SeqCst);
            let (lock, open) = &self.reopened;
            let mut g = lock
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            while self.holding.load(Ordering::SeqCst) {
                g = open
                    .wait(g)
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
            }
        }
    }

    /// vCPU `index` left `KVM_RUN` (or never entered it).
    pub fn left_guest(&self, index: usize) {
        if let Some(flag) = self.in_guest.get(index) {
            flag.store(false, Ordering::SeqCst);
        }
    }

    /// Held while user space stores into a watched DIMM (an emulated store,
    /// a label write, DMA).
    pub fn storing(&self) -> RwLockReadGuard<'_, ()> {
        self.stores
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Stops every writer: the vCPUs out of the guest (those still in it are
    /// kicked through `kick` until they leave, up to `deadline`) and the
    /// user-space stores finished. Called from a vCPU thread, that vCPU is
    /// out of the guest already.
    pub fn quiesce(&self, kick: &dyn Kick, deadline: Duration) -> Result<Quiesced<'_>, GateError> {
        let one = self
            .quiescer
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        self.holding.store(true, Ordering::SeqCst);
        let start = Instant::now();
        // One kick makes a vCPU leave (the signal sets its `immediate_exit`,
        // so even one about to enter `KVM_RUN` returns at once); a vCPU
        // still in after KICK_AGAIN is kicked again, in case the first came
        // before it said it entered.
        let mut kicked: Option<Instant> = None;
        loop {
            let running: Vec<usize> = self
                .in_guest
                .iter()
                .enumerate()
                .filter(|(_, f)| f.load(Ordering::SeqCst))
                .map(|(i, _)| i)
                .collect();
            if running.is_empty() {
                break;
            }
            if start.elapsed() >= deadline {
                let (lock, open) = &self.reopened;
                let _g = lock
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                self.holding.store(false, Ordering::SeqCst);
                open.notify_all();
                return Err(GateError::StillRunning(running, deadline));
            }
            if kicked.is_none_or(|t| t.elapsed() >= KICK_AGAIN) {
                kick.kick(&running);
                kicked = Some(Instant::now());
            }
            // The kicked threads need a CPU to leave: give them this one.
            std::thread::yield_now();
        }
        let stores = self
            .stores
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        Ok(Quiesced {
            gate: self,
            _one: one,
            _stores: stores,
        })
    }

    /// True while a quiescer holds the writers (for tests and reports).
    pub fn holding(&self) -> bool {
        self.holding.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;
    use std::sync::Arc;

    /// Kicks by setting a per-vCPU flag the stand-in vCPUs poll.
    struct FlagKick(Arc<Vec<AtomicBool>>);

    impl Kick for FlagKick {
        fn kick(&self, indices: &[usize]) {
            for &i in indices {
                self.0[i].store(true, Ordering::SeqCst);
            }
        }
    }

    /// Two stand-in vCPUs each store counter values to A then B "in the
    /// guest" (between enter_guest and left_guest, leaving only when
    /// kicked); the quiescer reads A and B: B is never ahead of A, and no
    /// vCPU advances while quiesced.
    #[test]
    fn nothing_stores_while_quiesced_and_stores_go_on_after() {
        let gate = Arc::new(StoreGate::new(2));
        let kicked = Arc::new((0..2).map(|_| AtomicBool::new(false)).collect::<Vec<_>>());
        let mem = Arc::new([AtomicU64::new(0), AtomicU64::new(0)]);
        let end = Arc::new(AtomicBool::new(false));
        let threads: Vec<_> = (0..2)
            .map(|i| {
                let (gate, kicked, mem, end) =
                    (gate.clone(), kicked.clone(), mem.clone(), end.clone());
                std::thread::spawn(move || {
                    let mut n = 0u64;
                    while !end.load(Ordering::SeqCst) {
                        gate.enter_guest(i);
                        while !kicked[i].swap(false, Ordering::SeqCst) {
                            if i == 0 {
                                n += 1;
                                mem[0].store(n, Ordering::SeqCst);
                                mem[1].store(n, Ordering::SeqCst);
                            } else {
                                std::hint::spin_loop();
                            }
                        }
                        gate.left_guest(i);
                    }
                    n
                })
            })
            .collect();
        let kick = FlagKick(kicked.clone());
        let mut seen = 0;
        for _ in 0..200 {
            let q = gate.quiesce(&kick, Duration::from_secs(10)).unwrap();
            let a = mem[0].load(Ordering::SeqCst);
            std::thread::sleep(Duration::from_micros(200));
            let b = mem[1].load(Ordering::SeqCst);
            assert_eq!(a, b, "a store went on while quiesced");
            assert_eq!(mem[0].load(Ordering::SeqCst), a);
            drop(q);
            seen = a;
            std::thread::sleep(Duration::from_micros(100));
        }
        end.store(true, Ordering::SeqCst);
        kick.kick(&[0, 1]);
        let n = threads
            .into_iter()
            .map(|t| t.join().unwrap())
            .max()
            .unwrap();
        assert!(n >= seen && seen > 0, "the writer never ran between holds");
    }

    #[test]
    fn a_vcpu_that_never_leaves_is_named_and_the_gate_opens_again() {
        let gate = StoreGate::new(3);
        gate.enter_guest(2);
        struct Deaf;
        impl Kick for Deaf {
            fn kick(&self, _: &[usize]) {}
        }
        let e = gate.quiesce(&Deaf, Duration::from_millis(20)).unwrap_err();
        assert_eq!(
            e,
            GateError::StillRunning(vec![2], Duration::from_millis(20))
        );
        assert!(e
            .to_string()
            .contains("vCPU(s) [2] did not leave the guest"));
        assert!(!gate.holding());
        gate.enter_guest(1);
        gate.left_guest(2);
        gate.left_guest(1);
        let q = gate.quiesce(&Deaf, Duration::from_millis(20)).unwrap();
        assert!(gate.holding());
        drop(q);
        assert!(!gate.holding());
    }

    #[test]
    fn user_space_stores_finish_before_the_quiescer_goes_on() {
        let gate = Arc::new(StoreGate::new(1));
        let storing = gate.storing();
        let (tx, rx) = std::sync::mpsc::channel();
        let g2 = gate.clone();
        let t = std::thread::spawn(move || {
            struct Deaf;
            impl Kick for Deaf {
                fn kick(&self, _: &[usize]) {}
            }
            let _q = g2.quiesce(&Deaf, Duration::from_secs(5)).unwrap();
            tx.send(()).unwrap();
        });
        assert!(rx.recv_timeout(Duration::from_millis(100)).is_err());
        drop(storing);
        rx.recv_timeout(Duration::from_secs(5)).unwrap();
        t.join().unwrap();
    }
}
