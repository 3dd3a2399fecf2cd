//! An Intel machine check reaches every vCPU.
//!
//! An Intel processor without local machine checks (LMCE) signals an
//! uncorrected error to every logical processor, and Linux on Intel waits
//! in `mce_start()` for every CPU to enter its handler — one that never
//! comes makes it panic ("Timeout: Not all CPUs entered broadcast exception
//! handler"). So when a vCPU of an Intel guest with more than one vCPU takes
//! a machine check ([`super::deliver::raise`]), every other vCPU gets one
//! too, as the SDM describes the processors the error did not come from:
//! MCG_STATUS with MCIP and RIPV, not EIPV, and no enabled error in a bank
//! (a valid, uncorrected, *not enabled* status in the lowest enabled bank,
//! which KVM needs to queue a #MC and Linux grades as no error — QEMU's
//! broadcast writes the same). AMD processors signal it only to the core
//! that consumed the data, and Linux does not rendezvous there: nothing is
//! broadcast.
//!
//! KVM's vCPU calls belong to the vCPU's thread, so each other vCPU is
//! marked and kicked out of `KVM_RUN`; its thread queues its own #MC before
//! it runs the guest again ([`McBroadcast::take`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use kvm_bindings::kvm_x86_mce;
use kvm_ioctls::VcpuFd;

use super::deliver::{self, MCG_STATUS_MCIP, MCG_STATUS_RIPV, MCI_STATUS_UC, MCI_STATUS_VAL};
use super::McError;
use crate::vstate::vcpu_threads::VcpuThreads;

/// CR4.MCE: machine checks enabled (else a #MC shuts the vCPU down).
const CR4_MCE: u64 = 1 << 6;
/// KVM_MP_STATE_RUNNABLE and KVM_MP_STATE_HALTED: a vCPU that runs (a vCPU
/// waiting for its SIPI takes no machine check).
const MP_RUNNABLE: u32 = 0;
const MP_HALTED: u32 = 3;

/// What a vCPU made of its broadcast.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Taken {
    /// Its #MC is queued, the status in this bank.
    Raised(u8),
    /// Not running (waiting for its SIPI), machine checks off (CR4.MCE),
    /// already in a handler (MCIP: a second #MC would shut it down) or
    /// every bank disabled: nothing queued, as hardware does then.
    Skipped(&'static str),
}

/// The broadcasts waiting for each vCPU.
#[derive(Debug)]
pub struct McBroadcast {
    pending: Vec<AtomicBool>,
    threads: Arc<VcpuThreads>,
}

impl McBroadcast {
    /// For `vcpus` vCPUs, whose threads `threads` kicks.
    pub fn new(vcpus: usize, threads: Arc<VcpuThreads>) -> Self {
        Self {
            pending: (0..vcpus).map(|_| AtomicBool::new(false)).collect(),
            threads,
        }
    }

    /// vCPU `me` took a machine check: every other vCPU takes one before it
    /// runs the guest again.
    pub fn signal_others(&self, me: usize) {
        let others: Vec<usize> = (0..self.pending.len()).filter(|&i| i != me).collect();
        for &i in &others {
            self.pending[i].store(true, Ordering::SeqCst);
        }
        self.threads.kick(&others);
    }

    /// On vCPU `index`'s thread, before `KVM_RUN`: its broadcast #MC, if one
    /// waits.
    pub fn take(&self, index: usize, vcpu: &VcpuFd) -> Option<Result<Taken, McError>> {
        let pending = self.pending.get(index)?;
        pending
            .swap(false, Ordering::SeqCst)
            .then(|| queue_broadcast(vcpu))
    }
}

/// Queues a broadcast #MC on `vcpu` when it can take one.
fn queue_broadcast(vcpu: &VcpuFd) -> Result<Taken, McError> {
    let kvm = |what| {
        move |e: kvm_ioctls::Error| McError::Kvm {
            what,
            source: std::io::Error::from_raw_os_error(e.errno()),
        }
    };
    let mp = vcpu.get_mp_state().map_err(kvm("KVM_GET_MP_STATE"))?;
    if mp.mp_state != MP_RUNNABLE && mp.mp_state != MP_HALTED {
        return Ok(Taken::Skipped("not started"));
    }
    let sregs = vcpu.get_sregs().map_err(kvm("KVM_GET_SREGS"))?;
    if sregs.cr4 & CR4_MCE == 0 {
        return Ok(Taken::Skipped("CR4.MCE clear"));
    }
    let state = deliver::bank_state(vcpu)?;
    if state.mcg_status & MCG_STATUS_MCIP != 0 {
        return Ok(Taken::Skipped("already in a machine-check handler"));
    }
    let Some(bank) = deliver::choose_bank(1, state.mcg_ctl, &state.ctls) else {
        return Ok(Taken::Skipped("machine-check reporting disabled"));
    };
    let error = kvm_x86_mce {
        status: MCI_STATUS_VAL | MCI_STATUS_UC,
        mcg_status: MCG_STATUS_MCIP | MCG_STATUS_RIPV,
        bank,
        ..Default::default()
    };
    deliver::set_mce(vcpu, &error)?;
    Ok(Taken::Raised(bank))
}
