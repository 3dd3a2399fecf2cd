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
    // The instruction is finished only so KVM can take the machine check
    // before the load (its registers go back to before it): a store it makes
    // on the way — the write-back of `add` or `xchg` to the poisoned line,
    // `movs` to elsewhere — never happened on hardware, so it is dropped.
    let serve = |a: u64, d: MmioData<'_>| {
        let inside = p.contains(a);
        let failed = match (d, inside) {
            (MmioData::Read(buf), true) => p.read(a, buf).is_err(),
            (MmioData::Read(buf), false) => mmio.read(a, buf).is_err(),
            (MmioData::Write(buf), _) => {
                log::debug!(
                    "vCPU {index}: a store of {} bytes at {a:#x} by the poisoned load's instruction was dropped",
                    buf.len()
                );
                false
            }
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

/// A store inside the hole: into the file (stores do not clear poison). It
/// ends a locked instruction's hold on the holes.
pub fn write(index: usize, p: &PoisonSlots, addr: u64, data: &[u8]) -> Option<ExitRequest> {
    p.rmw.acquire(index);
    let written = p.write(addr, data);
    p.rmw.release(index);
    written
        .err()
        .map(|e| ExitRequest::StorageFailure(format!("vCPU {index}: {e}")))
}

/// A load inside the hole: takes the DIMM's [`super::rmw::HoleLock`] and
/// fills `data` from the file.
pub fn hole_fill(
    index: usize,
    p: &PoisonSlots,
    addr: u64,
    data: &mut [u8],
) -> Result<(), ExitRequest> {
    p.rmw.acquire(index);
    p.read(addr, data).map_err(|e| {
        p.rmw.release(index);
        ExitRequest::StorageFailure(format!("vCPU {index}: {e}"))
    })
}

/// After [`hole_fill`]: the lock is held on to when the instruction is
/// `locked` (its write follows), let go otherwise or when the load is a
/// machine check, which [`read`] raises.
pub fn hole_loaded(
    index: usize,
    vcpu: &mut VcpuFd,
    mce: (Option<Vendor>, Option<&McBroadcast>),
    p: &Arc<PoisonSlots>,
    mmio: &Bus,
    (addr, len, locked): (u64, usize, bool),
) -> Option<ExitRequest> {
    if !locked || p.poisoned(addr, len) {
        p.rmw.release(index);
    }
    read(index, vcpu, mce, p, mmio, (addr, len))
}

/// Lets go of every hole `index` holds (its exit is not a locked
/// instruction's write).
pub fn release_holes(index: usize, dimms: &[crate::nvdimm::dimm_fault::DimmRange]) {
    for p in dimms.iter().filter_map(|d| d.poison.as_deref()) {
        p.rmw.release(index);
    }
}

/// Whether the instruction at the vCPU's RIP is a locked read-modify-write
/// (its bytes read from guest RAM `mem`; unknown bytes: not locked).
pub fn locked_instruction(vcpu: &VcpuFd, mem: &vm_memory::GuestMemoryMmap) -> bool {
    let Some(linear) = vcpu
        .get_regs()
        .ok()
        .zip(vcpu.get_sregs().ok())
        .map(|(r, s)| s.cs.base.wrapping_add(r.rip))
    else {
        return false;
    };
    let Some(gpa) = vcpu
        .translate_gva(linear)
        .ok()
        .filter(|t| t.valid != 0)
        .map(|t| t.physical_address)
    else {
        return false;
    };
    let mut bytes = [0u8; 15];
    // The bytes up to the end of the page hold the prefixes that matter.
    let n = usize::try_from(4096 - gpa % 4096).map_or(15, |n| n.min(15));
    vm_memory::Bytes::read_slice(mem, &mut bytes[..n], vm_memory::GuestAddress(gpa)).is_ok()
        && super::rmw::is_locked_rmw(&bytes[..n])
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

/// KVM could not fetch the instruction at the vCPU's RIP (an emulation
/// failure): when its bytes lie in a poisoned line of `p`, that is a machine
/// check at the instruction, as a fetch from poison is on hardware.
/// `None`: not a fetch from poison (the caller reports the failure);
/// `Some(None)`: raised, the guest goes on.
pub fn fetch(
    index: usize,
    vcpu: &VcpuFd,
    (vendor, broadcast): (Option<Vendor>, Option<&McBroadcast>),
    p: &PoisonSlots,
    gpa: u64,
) -> Option<Option<ExitRequest>> {
    // The up to 15 bytes of one instruction, within the DIMM.
    if !p.contains(gpa) || !p.poisoned(gpa, 15) {
        return None;
    }
    let vendor = vendor?;
    let raised = deliver::bank_state(vcpu).and_then(|state| {
        if state.mcg_status & deliver::MCG_STATUS_MCIP != 0 {
            return Ok(Delivery::InHandler);
        }
        deliver::queue(vcpu, vendor, &state, |bank| vendor.fetch_error(gpa, bank))
    });
    Some(match raised {
        Ok(Delivery::Raised(bank)) => {
            p.raised.fetch_add(1, Ordering::Relaxed);
            if let Some(b) = broadcast {
                b.signal_others(index);
            }
            log::warn!(
                "vCPU {index}: machine check for the instruction fetch at guest address {gpa:#x} ({}, a bad range), bank {bank}",
                p.describe(gpa)
            );
            None
        }
        // Hardware shuts down (a second #MC in a handler) or, with reporting
        // off, cannot run the line: the VM ends with the fetch named.
        Ok(Delivery::InHandler | Delivery::Masked) => Some(ExitRequest::Fatal(format!(
            "vCPU {index}: instruction fetch from poison at guest address {gpa:#x} ({}) with machine checks masked or inside a machine-check handler: the vCPU cannot go on",
            p.describe(gpa)
        ))),
        Err(e) => Some(ExitRequest::Fatal(format!("vCPU {index}: {e}"))),
    })
}
