//! What a vCPU thread does for the debugger: park and serve its requests,
//! and tell a debug exit's cause (single step, the debugger's `int3`, a
//! debug register) from the guest's own `int3`/`#DB`, which go back to the
//! guest as the exception it raised.

use std::sync::atomic::{AtomicBool, Ordering};

use kvm_bindings::{kvm_debug_exit_arch, kvm_guest_debug};
use kvm_ioctls::VcpuFd;

use super::hub::{CpuRegisters, DebugHub, Request, StopCause};

/// #DB.
const DEBUG_VECTOR: u32 = 1;
/// #BP (`int3`).
const BREAKPOINT_VECTOR: u32 = 3;
/// DR6.BS: the #DB came from single-stepping.
const DR6_BS: u64 = 1 << 14;

/// Set once KVM refused `KVM_GUESTDBG_BLOCKIRQ` (kernels before 5.15 and
/// KVMs without it): steps then may enter an interrupt handler.
static NO_BLOCKIRQ: AtomicBool = AtomicBool::new(false);

fn read(vcpu: &VcpuFd) -> Result<CpuRegisters, String> {
    Ok(CpuRegisters {
        regs: vcpu
            .get_regs()
            .map_err(|e| format!("reading registers: {e}"))?,
        sregs: vcpu
            .get_sregs()
            .map_err(|e| format!("reading segment registers: {e}"))?,
        fpu: vcpu
            .get_fpu()
            .map_err(|e| format!("reading FPU state: {e}"))?,
    })
}

fn write(vcpu: &VcpuFd, r: &CpuRegisters) -> Result<(), String> {
    vcpu.set_regs(&r.regs)
        .map_err(|e| format!("writing registers: {e}"))?;
    vcpu.set_fpu(&r.fpu)
        .map_err(|e| format!("writing FPU state: {e}"))
}

fn set_debug(vcpu: &VcpuFd, mut debug: kvm_guest_debug) -> Result<(), String> {
    if NO_BLOCKIRQ.load(Ordering::Relaxed) {
        debug.control &= !kvm_bindings::KVM_GUESTDBG_BLOCKIRQ;
    }
    match vcpu.set_guest_debug(&debug) {
        Err(e)
            if e.errno() == libc::EINVAL
                && debug.control & kvm_bindings::KVM_GUESTDBG_BLOCKIRQ != 0 =>
        {
            NO_BLOCKIRQ.store(true, Ordering::Relaxed);
            log::info!("gdb: this KVM cannot block interrupts while stepping; a step may enter an interrupt handler");
            debug.control &= !kvm_bindings::KVM_GUESTDBG_BLOCKIRQ;
            vcpu.set_guest_debug(&debug)
                .map_err(|e| format!("KVM_SET_GUEST_DEBUG: {e}"))
        }
        other => other.map_err(|e| format!("KVM_SET_GUEST_DEBUG: {e}")),
    }
}

/// Parks vCPU `index` for `cause` and serves the debugger until it resumes
/// the vCPU or the VM stops.
pub fn park(hub: &DebugHub, index: usize, vcpu: &VcpuFd, cause: StopCause, stop: &AtomicBool) {
    hub.parked(index, cause);
    loop {
        match hub.next_request(index) {
            Some(Request::Resume) => break,
            Some(Request::Read(reply)) => {
                let _ = reply.send(read(vcpu));
            }
            Some(Request::Write(regs, reply)) => {
                let _ = reply.send(write(vcpu, &regs));
            }
            Some(Request::Debug(debug, reply)) => {
                let _ = reply.send(set_debug(vcpu, debug));
            }
            None => {
                if stop.load(Ordering::SeqCst) {
                    break;
                }
            }
        }
    }
    hub.unparked(index);
}

/// Gives the guest back the exception `vector` it raised itself.
fn reinject(vcpu: &VcpuFd, vector: u8) -> Result<(), String> {
    let mut events = vcpu
        .get_vcpu_events()
        .map_err(|e| format!("reading vCPU events: {e}"))?;
    events.exception.injected = 1;
    events.exception.nr = vector;
    events.exception.has_error_code = 0;
    vcpu.set_vcpu_events(&events)
        .map_err(|e| format!("injecting exception {vector}: {e}"))
}

/// The cause of a `KVM_EXIT_DEBUG`, or `None` when the exception was the
/// guest's own and went back to it.
pub fn debug_exit(
    hub: &DebugHub,
    vcpu: &VcpuFd,
    index: usize,
    exit: &kvm_debug_exit_arch,
) -> Result<Option<StopCause>, String> {
    match exit.exception {
        BREAKPOINT_VECTOR => {
            if hub.is_sw_breakpoint(exit.pc) {
                Ok(Some(StopCause::SwBreak))
            } else {
                reinject(vcpu, 3).map(|()| None)
            }
        }
        DEBUG_VECTOR => {
            if let Some(slot) = (0..4).find(|i| exit.dr6 & (1 << i) != 0 && hub.uses_slot(*i)) {
                Ok(Some(StopCause::DebugRegister(slot)))
            } else if exit.dr6 & DR6_BS != 0 || hub.stepping(index) {
                Ok(Some(StopCause::Step))
            } else {
                reinject(vcpu, 1).map(|()| None)
            }
        }
        other => Err(format!(
            "KVM reported debug exception {other}, which pmemvm did not ask for"
        )),
    }
}
