//! What a vCPU thread does with an exit inside an mce=on DIMM's hole.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use devices::bus::Bus;
use devices::exit::ExitRequest;
use kvm_ioctls::VcpuFd;

use super::broadcast::{McBroadcast, Taken};
use super::deliver::{self, Delivery, MmioData, Vendor};
use super::PoisonSlots;

/// A read of `data.len()` bytes at `addr` inside `p`'s DIMM that KVM sent
/// to pmemvm: the file's bytes, and a machine check when it touches a bad
/// range. `None`: the guest goes on.
pub fn read(
    index: usize,
    vcpu: &mut VcpuFd,
    (vendor, broadcast): (Option<Vendor>, Option<&McBroadcast>),
    p: &Arc<PoisonSlots>,
    mmio: &Bus,
    (addr, len): (u64, usize),
) -> Option<ExitRequest> {
    if !p.poisoned(addr, len) {
        return None;
    }
    let vendor = vendor?;
    let serve = |a: u64, d: MmioData<'_>| {
        let inside = p.contains(a);
        let failed = match (d, inside) {
            (MmioData::Read(buf), true) => p.read(a, buf).is_err(),
            (MmioData::Write(buf), true) => p.write(a, buf).is_err(),
            (MmioData::Read(buf), false) => mmio.read(a, buf).is_err(),
            (MmioData::Write(buf), false) => mmio.write(a, buf).is_err(),
        };
        if failed {
            log::warn!(
                "vCPU {index}: an access at {a:#x} while finishing a poisoned load was not served"
            );
        }
    };
    match deliver::raise(vcpu, vendor, addr, serve) {
        Ok(Delivery::Raised(bank)) => {
            p.raised.fetch_add(1, Ordering::Relaxed);
            if let Some(b) = broadcast {
                b.signal_others(index);
            }
            log::warn!(
                "vCPU {index}: machine check for the load at guest address {addr:#x} ({}, a bad range), bank {bank}",
                p.describe(addr)
            );
            None
        }
        Ok(Delivery::Masked) => {
            log::warn!(
                "vCPU {index}: load at guest address {addr:#x} ({}, a bad range) with machine-check reporting disabled by the guest (MCG_CTL or every bank's MCi_CTL): given the file's bytes",
                p.describe(addr)
            );
            None
        }
        Ok(Delivery::InHandler) => {
            log::warn!(
                "vCPU {index}: load at guest address {addr:#x} ({}, a bad range) inside a machine-check handler: given the file's bytes",
                p.describe(addr)
            );
            None
        }
        Err(e) => Some(ExitRequest::Fatal(format!("vCPU {index}: {e}"))),
    }
}

/// A store inside the hole: into the file (stores do not clear poison).
pub fn write(index: usize, p: &PoisonSlots, addr: u64, data: &[u8]) -> Option<ExitRequest> {
    p.write(addr, data)
        .err()
        .map(|e| ExitRequest::StorageFailure(format!("vCPU {index}: {e}")))
}

/// Before `KVM_RUN` on vCPU `index`'s thread: the broadcast #MC another
/// vCPU's machine check left for it (Intel guests with several vCPUs).
pub fn take_broadcast(index: usize, vcpu: &VcpuFd, b: &McBroadcast) -> Option<ExitRequest> {
    match b.take(index, vcpu)? {
        Ok(Taken::Raised(bank)) => {
            log::info!("vCPU {index}: machine check broadcast from another vCPU, bank {bank} (not enabled: no error of its own)");
            None
        }
        Ok(Taken::Skipped(why)) => {
            log::info!("vCPU {index}: no broadcast machine check: {why}");
            None
        }
        Err(e) => Some(ExitRequest::Fatal(format!("vCPU {index}: {e}"))),
    }
}
