//! One instant per epoch: the VM's [`StoreGate`] with the vCPU threads to
//! kick out of `KVM_RUN`.
//!
//! A recording takes each epoch (KVM's dirty log, then the dirty pages and
//! the label area) through [`EpochGate::quiesce`]: every vCPU is out of the
//! guest and kept out, and no disk or label store is in flight, from before
//! the dirty log is read until the last page is copied. The image after
//! flush N is then memory at one instant — the moment the flushing vCPU's
//! flush reached the DIMM — whatever the number of vCPUs.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use devices::store_gate::{GateError, Kick, Quiesced, StoreGate};

/// How long an epoch waits for the vCPUs to leave the guest (a kicked vCPU
/// leaves within microseconds; a host under heavy load may take longer).
pub const QUIESCE_DEADLINE: Duration = Duration::from_secs(10);

/// The gate and the vCPU threads it kicks.
#[derive(Debug)]
pub struct EpochGate {
    gate: Arc<StoreGate>,
    /// Each vCPU's thread while its loop runs.
    threads: Mutex<Vec<Option<libc::pthread_t>>>,
    signal: libc::c_int,
}

impl EpochGate {
    /// A gate for `vcpus` vCPUs, kicked with the vCPU kick signal.
    pub fn new(vcpus: usize) -> Self {
        Self {
            gate: Arc::new(StoreGate::new(vcpus)),
            threads: Mutex::new(vec![None; vcpus]),
            signal: crate::signals::kick_signal(),
        }
    }

    /// The store gate (disks and label writes hold its shared side).
    pub fn store_gate(&self) -> Arc<StoreGate> {
        self.gate.clone()
    }

    /// Registers the calling thread as vCPU `index`'s until the guard drops.
    pub fn enter(&self, index: usize) -> Registered<'_> {
        if let Ok(mut t) = self.threads.lock() {
            if let Some(slot) = t.get_mut(index) {
                // SAFETY: pthread_self has no arguments and cannot fail.
                *slot = Some(unsafe { libc::pthread_self() });
            }
        }
        Registered { gate: self, index }
    }

    /// vCPU `index` is about to enter `KVM_RUN` (waits while an epoch is taken).
    pub fn enter_guest(&self, index: usize) {
        self.gate.enter_guest(index);
    }

    /// vCPU `index` left `KVM_RUN`.
    pub fn left_guest(&self, index: usize) {
        self.gate.left_guest(index);
    }

    /// Stops every store into guest memory until the guard drops.
    pub fn quiesce(&self) -> Result<Quiesced<'_>, GateError> {
        self.gate.quiesce(self, QUIESCE_DEADLINE)
    }
}

impl Kick for EpochGate {
    fn kick(&self, indices: &[usize]) {
        let Ok(threads) = self.threads.lock() else {
            return;
        };
        for &i in indices {
            if let Some(Some(t)) = threads.get(i) {
                // SAFETY: `t` is a vCPU thread still inside its loop: its
                // `Registered` guard removes it under this same lock before
                // the thread can end, so the thread exists. The kick signal's
                // handler only sets that thread's `immediate_exit`.
                let rc = unsafe { libc::pthread_kill(*t, self.signal) };
                if rc != 0 {
                    log::debug!("kicking vCPU {i} for an epoch failed: {rc}");
                }
            }
        }
    }
}

/// Unregisters a vCPU thread when its loop ends; it is out of the guest then.
#[derive(Debug)]
pub struct Registered<'a> {
    gate: &'a EpochGate,
    index: usize,
}

impl Drop for Registered<'_> {
    fn drop(&mut self) {
        if let Ok(mut t) = self.gate.threads.lock() {
            if let Some(slot) = t.get_mut(self.index) {
                *slot = None;
            }
        }
        self.gate.left_guest(self.index);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_that_left_its_loop_is_out_of_the_guest_and_never_kicked() {
        let g = EpochGate::new(2);
        std::thread::scope(|s| {
            s.spawn(|| {
                let _r = g.enter(1);
                g.enter_guest(1);
            });
        });
        assert!(g.threads.lock().unwrap()[1].is_none());
        // vCPU 1 "entered the guest" and its thread ended: not waited for.
        let q = g.quiesce().expect("nothing runs");
        drop(q);
    }
}
