//! One instant per epoch: the VM's [`StoreGate`] with the vCPU threads to
//! kick out of `KVM_RUN`.
//!
//! A recording takes each epoch (KVM's dirty log, then the dirty pages and
//! the label area) through [`EpochGate::quiesce`]: every vCPU is out of the
//! guest and kept out, and no disk or label store is in flight, from before
//! the dirty log is read until the last page is copied. The image after
//! flush N is then memory at one instant — the moment the flushing vCPU's
//! flush reached the DIMM — whatever the number of vCPUs.

use std::sync::Arc;
use std::time::Duration;

use devices::store_gate::{GateError, Kick, Quiesced, StoreGate};

use crate::vstate::vcpu_threads::VcpuThreads;

/// How long an epoch waits for the vCPUs to leave the guest (a kicked vCPU
/// leaves within microseconds; a host under heavy load may take longer).
pub const QUIESCE_DEADLINE: Duration = Duration::from_secs(10);

/// The gate and the vCPU threads it kicks.
#[derive(Debug)]
pub struct EpochGate {
    gate: Arc<StoreGate>,
    threads: Arc<VcpuThreads>,
}

impl EpochGate {
    /// A gate for the vCPUs of `threads`.
    pub fn new(vcpus: usize, threads: Arc<VcpuThreads>) -> Self {
        Self {
            gate: Arc::new(StoreGate::new(vcpus)),
            threads,
        }
    }

    /// The store gate (disks and label writes hold its shared side).
    pub fn store_gate(&self) -> Arc<StoreGate> {
        self.gate.clone()
    }

    /// vCPU `index` is about to enter `KVM_RUN` (waits while an epoch is taken).
    pub fn enter_guest(&self, index: usize) {
        self.gate.enter_guest(index);
    }

    /// vCPU `index` left `KVM_RUN`, or its loop ended.
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
        self.threads.kick(indices);
    }
}

/// Says the vCPU is out of the guest when its loop ends, however it ends.
#[derive(Debug)]
pub struct LeftAtEnd<'a>(pub &'a EpochGate, pub usize);

impl Drop for LeftAtEnd<'_> {
    fn drop(&mut self) {
        self.0.left_guest(self.1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_vcpu_whose_loop_ended_is_out_of_the_guest() {
        let g = EpochGate::new(2, Arc::new(VcpuThreads::new(2)));
        std::thread::scope(|s| {
            s.spawn(|| {
                let _end = LeftAtEnd(&g, 1);
                g.enter_guest(1);
            });
        });
        // vCPU 1 "entered the guest" and its loop ended: not waited for.
        let q = g.quiesce().expect("nothing runs");
        drop(q);
    }
}
