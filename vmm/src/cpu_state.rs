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
pub fn triple_fault(
    vcpu: usize,
    regs: Option<&kvm_regs>,
    sregs: Option<&kvm_sregs>,
) -> TripleFault {
    if let (Some(r), Some(s)) = (regs, sregs) {
        if reset_by_kvm(r, s) {
            return TripleFault {
                vcpu,
                rip: None,
                symbol: None,
                state: RESET_BY_KVM.to_owned(),
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
        state: parts.join(", "),
    }
}

/// Said instead of registers when KVM reset the vCPU before returning the exit.
pub const RESET_BY_KVM: &str = "its registers at the fault are lost: this host's KVM put the \
     vCPU through INIT on the shutdown (AMD SVM does: the VMCB is undefined after one), so it \
     reads as a CPU at its reset vector";

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
        let t = triple_fault(2, Some(&regs), Some(&sregs));
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
        let lost = triple_fault(0, Some(&init_regs), Some(&init_sregs));
        assert_eq!((lost.rip, lost.state.as_str()), (None, RESET_BY_KVM));
        // The same RIP in protected mode is a real fault there.
        init_sregs.cr0 = 0x11;
        let kept = triple_fault(0, Some(&init_regs), Some(&init_sregs));
        assert_eq!(kept.rip, Some(0xfff0));
        let none = triple_fault(0, None, None);
        assert_eq!((none.rip, none.state.as_str()), (None, ""));
    }
}
