//! The state of a vCPU that shut down (a triple fault), as one phrase for the
//! user: what a guest kernel developer reads first when a guest dies without
//! a word on its console. On AMD SVM there is none to give: KVM puts the
//! vCPU through INIT on a shutdown intercept before userspace sees the exit,
//! and that is what the user is told.

use devices::exit::TripleFault;
use kvm_bindings::{kvm_regs, kvm_sregs};

/// What KVM left in a vCPU after its shutdown exit: RIP apart (the VMM names
/// it from the kernel's symbols), then RSP, RFLAGS, the control registers,
/// EFER, CS and SS selectors, and the IDT and GDT a fault is delivered
/// through. Either part may be missing when KVM could not give it.
///
/// `trace_rip` gives the RIP the `kvm:kvm_exit` tracepoint recorded for this
/// vCPU's shutdown exit ([`shutdown_rip`]); it is asked only when KVM reset
/// the vCPU.
pub fn triple_fault(
    vcpu: usize,
    regs: Option<&kvm_regs>,
    sregs: Option<&kvm_sregs>,
    trace_rip: impl FnOnce() -> Option<u64>,
) -> TripleFault {
    if let (Some(r), Some(s)) = (regs, sregs) {
        if reset_by_kvm(r, s) {
            let trace_rip = trace_rip();
            let state = match trace_rip {
                Some(_) => format!(
                    "RIP from the kvm:kvm_exit tracepoint; {}",
                    RESET_BY_KVM.replacen("its registers", "its other registers", 1)
                ),
                None => format!("{RESET_BY_KVM}; {TRACE_HINT}"),
            };
            return TripleFault {
                vcpu,
                rip: trace_rip,
                symbol: None,
                host_module: None,
                state,
            };
        }
    }
    let mut parts = Vec::new();
    if let Some(r) = regs {
        parts.push(format!("RSP {:#x}", r.rsp));
        parts.push(format!("RFLAGS {:#x}", r.rflags));
    }
    if let Some(s) = sregs {
        parts.push(format!("CR0 {:#x}", s.cr0));
        parts.push(format!("CR2 {:#x}", s.cr2));
        parts.push(format!("CR3 {:#x}", s.cr3));
        parts.push(format!("CR4 {:#x}", s.cr4));
        parts.push(format!("EFER {:#x}", s.efer));
        parts.push(format!("CS {:#x}", s.cs.selector));
        parts.push(format!("SS {:#x}", s.ss.selector));
        parts.push(format!("IDT {:#x} limit {:#x}", s.idt.base, s.idt.limit));
        parts.push(format!("GDT {:#x} limit {:#x}", s.gdt.base, s.gdt.limit));
    }
    TripleFault {
        vcpu,
        rip: regs.map(|r| r.rip),
        symbol: None,
        host_module: None,
        state: parts.join(", "),
    }
}

/// Said instead of registers when KVM reset the vCPU before returning the exit.
pub const RESET_BY_KVM: &str = "its registers at the fault are lost: this host's KVM put the \
     vCPU through INIT on the shutdown (AMD SVM does: the VMCB is undefined after one), so it \
     reads as a CPU at its reset vector";

/// How a user keeps the RIP of the next fault on such a host.
pub const TRACE_HINT: &str = "to keep the RIP of the next one, enable the kvm:kvm_exit \
     tracepoint (echo 1 > /sys/kernel/tracing/events/kvm/kvm_exit/enable; a filter \
     'exit_reason == 127' keeps only shutdowns) and pmemvm reads it from the trace";

/// Where the kernel's trace buffer is read.
const TRACE_FILES: [&str; 2] = [
    "/sys/kernel/tracing/trace",
    "/sys/kernel/debug/tracing/trace",
];

/// The RIP of the last shutdown exit that thread `tid` took, from the
/// `kvm:kvm_exit` tracepoint's lines in the host's trace buffer (`None` when
/// tracing is off, unreadable, or has no such line). KVM traces the exit
/// before SVM resets the vCPU, so the RIP survives there.
pub fn shutdown_rip(tid: i32) -> Option<u64> {
    TRACE_FILES
        .iter()
        .find_map(|f| std::fs::read_to_string(f).ok())
        .and_then(|t| shutdown_rip_in(&t, tid))
}

/// [`shutdown_rip`] on the trace's text: lines such as
/// `vcpu0-4242 [001] d..1. 12.5: kvm_exit: vcpu 0 reason shutdown rip 0xffffffff81002fad info1 ...`
/// (task name, thread id, then the event).
fn shutdown_rip_in(trace: &str, tid: i32) -> Option<u64> {
    trace
        .lines()
        .rev()
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| {
            let (task, event) = l.split_once(" [")?;
            let (_, pid) = task.trim().rsplit_once('-')?;
            if pid.parse::<i32>().ok()? != tid {
                return None;
            }
            let (_, exit) = event.split_once("kvm_exit: ")?;
            let mut words = exit.split_whitespace();
            let reason = words.by_ref().skip_while(|w| *w != "reason").nth(1)?;
            if !reason.eq_ignore_ascii_case("shutdown") {
                return None;
            }
            let rip = words.skip_while(|w| *w != "rip").nth(1)?;
            u64::from_str_radix(rip.trim_start_matches("0x"), 16).ok()
        })
}

/// Whether the registers are a vCPU's state after INIT (real mode, CS 0xf000 based
/// at 0xffff0000, RIP 0xfff0): AMD SVM's KVM resets a vCPU on a shutdown intercept
/// before userspace sees the exit, so there is nothing of the fault left to show.
fn reset_by_kvm(r: &kvm_regs, s: &kvm_sregs) -> bool {
    r.rip == 0xfff0 && s.cs.selector == 0xf000 && s.cs.base == 0xffff_0000 && s.cr0 & 1 == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registers_read_as_one_phrase() {
        let regs = kvm_regs {
            rip: 0x1234,
            rsp: 0x9_0000,
            rflags: 0x2,
            ..Default::default()
        };
        let mut sregs = kvm_sregs {
            cr0: 0x11,
            cr3: 0x5000,
            ..Default::default()
        };
        sregs.cs.selector = 0x8;
        sregs.idt.limit = 0;
        sregs.gdt.base = 0x500;
        sregs.gdt.limit = 0x17;
        let t = triple_fault(2, Some(&regs), Some(&sregs), || None);
        assert_eq!(t.vcpu, 2);
        assert_eq!(t.rip, Some(0x1234));
        assert_eq!(
            t.state,
            "RSP 0x90000, RFLAGS 0x2, CR0 0x11, CR2 0x0, CR3 0x5000, CR4 0x0, EFER 0x0, \
             CS 0x8, SS 0x0, IDT 0x0 limit 0x0, GDT 0x500 limit 0x17"
        );
        // A vCPU KVM put through INIT (AMD SVM): no registers, the reason why.
        let init_regs = kvm_regs {
            rip: 0xfff0,
            rflags: 0x2,
            ..Default::default()
        };
        let mut init_sregs = kvm_sregs {
            cr0: 0x10,
            ..Default::default()
        };
        init_sregs.cs.selector = 0xf000;
        init_sregs.cs.base = 0xffff_0000;
        let lost = triple_fault(0, Some(&init_regs), Some(&init_sregs), || None);
        assert_eq!(lost.rip, None);
        assert!(lost.state.starts_with(RESET_BY_KVM), "{}", lost.state);
        assert!(lost.state.contains("kvm_exit/enable"), "{}", lost.state);
        // The tracepoint kept the RIP: it is given, and said where it came from.
        let traced = triple_fault(0, Some(&init_regs), Some(&init_sregs), || {
            Some(0xffff_ffff_8100_2fad)
        });
        assert_eq!(traced.rip, Some(0xffff_ffff_8100_2fad));
        assert!(
            traced.state.starts_with(
                "RIP from the kvm:kvm_exit tracepoint; its other registers at the fault are lost"
            ),
            "{}",
            traced.state
        );
        // The same RIP in protected mode is a real fault there.
        init_sregs.cr0 = 0x11;
        let kept = triple_fault(0, Some(&init_regs), Some(&init_sregs), || {
            panic!("the trace is read only for a vCPU KVM reset")
        });
        assert_eq!(kept.rip, Some(0xfff0));
        let none = triple_fault(0, None, None, || None);
        assert_eq!((none.rip, none.state.as_str()), (None, ""));
    }

    #[test]
    fn the_shutdown_rip_is_read_from_the_kvm_exit_trace_of_this_thread() {
        let trace = "\
# tracer: nop
#
           vcpu0-4242    [001] d..1.    12.500000: kvm_exit: vcpu 0 reason shutdown rip 0xffffffff81000001 info1 0x0000000000000000 info2 0x0000000000000000 intr_info 0x00000000 error_code 0x00000000
           vcpu1-4243    [000] d..1.    12.600000: kvm_exit: vcpu 1 reason shutdown rip 0xffffffff81000002 info1 0x0 info2 0x0 intr_info 0x0 error_code 0x0
           vcpu0-4242    [001] d..1.    12.700000: kvm_exit: vcpu 0 reason npf rip 0xffffffff81000003 info1 0x0 info2 0x0 intr_info 0x0 error_code 0x0
 my-vm-vcpu0-4242    [001] d..1.    13.000000: kvm_exit: vcpu 0 reason shutdown rip 0xffffffff81000004 info1 0x0 info2 0x0 intr_info 0x0 error_code 0x0
";
        // The last shutdown of this thread; other threads and other reasons are not it.
        assert_eq!(shutdown_rip_in(trace, 4242), Some(0xffff_ffff_8100_0004));
        assert_eq!(shutdown_rip_in(trace, 4243), Some(0xffff_ffff_8100_0002));
        assert_eq!(shutdown_rip_in(trace, 4244), None);
        assert_eq!(shutdown_rip_in("", 4242), None);
        assert_eq!(
            shutdown_rip_in("garbage [ kvm_exit: reason shutdown rip zz", 1),
            None
        );
        // An exit trace without a shutdown: nothing.
        let npf = "vcpu0-7 [000] d..1. 1.0: kvm_exit: vcpu 0 reason npf rip 0x10 info1 0x0";
        assert_eq!(shutdown_rip_in(npf, 7), None);
    }
}
