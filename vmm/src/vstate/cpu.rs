//! vCPU register state at power-on: CPUID (KVM's supported set with the
//! hypervisor leaf and topology filled in), MSRs, FPU, LAPIC LINT pins,
//! general and segment registers for the PVH or 64-bit entry.

use kvm_bindings::{
    kvm_fpu, kvm_lapic_state, kvm_msr_entry, kvm_regs, kvm_segment, kvm_sregs, CpuId, Msrs,
};
use kvm_ioctls::VcpuFd;
use vm_memory::{Bytes, GuestMemoryMmap};

use crate::boot::EntryPoint;
use crate::layout;

/// Errors configuring a vCPU.
#[derive(Debug, thiserror::Error)]
pub enum CpuSetupError {
    /// A KVM ioctl failed.
    #[error("configuring vCPU {cpu} failed at {step}: {source}")]
    Kvm {
        /// vCPU index.
        cpu: u8,
        /// What was being set.
        step: &'static str,
        /// Cause.
        #[source]
        source: kvm_ioctls::Error,
    },
    /// Writing the GDT failed.
    #[error("writing the boot GDT into guest memory failed: {0}")]
    GuestMemory(#[from] vm_memory::GuestMemoryError),
}

const EFER_LME: u64 = 1 << 8;
pub(crate) const EFER_LMA: u64 = 1 << 10;
const CR0_PE: u64 = 1 << 0;
const CR0_ET: u64 = 1 << 4;
pub(crate) const CR0_PG: u64 = 1 << 31;
pub(crate) const CR4_PAE: u64 = 1 << 5;

const MSR_IA32_SYSENTER_CS: u32 = 0x174;
const MSR_IA32_SYSENTER_ESP: u32 = 0x175;
const MSR_IA32_SYSENTER_EIP: u32 = 0x176;
const MSR_STAR: u32 = 0xc000_0081;
const MSR_LSTAR: u32 = 0xc000_0082;
const MSR_CSTAR: u32 = 0xc000_0083;
const MSR_SYSCALL_MASK: u32 = 0xc000_0084;
const MSR_KERNEL_GS_BASE: u32 = 0xc000_0102;
const MSR_IA32_TSC: u32 = 0x10;
const MSR_IA32_MISC_ENABLE: u32 = 0x1a0;
const MSR_IA32_MISC_ENABLE_FAST_STRING: u64 = 1;
const MSR_MTRR_DEF_TYPE: u32 = 0x2ff;
const MTRR_ENABLE: u64 = 1 << 11;
const MTRR_TYPE_WB: u64 = 6;

const APIC_LVT0: usize = 0x350;
const APIC_LVT1: usize = 0x360;
const APIC_MODE_NMI: u32 = 0x4;
const APIC_MODE_EXTINT: u32 = 0x7;

/// Patches KVM's supported CPUID for vCPU `cpu` of `count`.
pub fn patch_cpuid(cpuid: &mut CpuId, cpu: u8, count: u8) {
    let count = u32::from(count.max(1));
    let apic_id = u32::from(cpu);
    // Bits needed to number `count` cores in the x2APIC id.
    let core_bits = 32 - (count - 1).leading_zeros();
    for e in cpuid.as_mut_slice() {
        match e.function {
            0x1 => {
                // Initial APIC id, logical processor count, HTT, hypervisor present.
                e.ebx = (e.ebx & 0x0000_ffff) | (apic_id << 24) | ((count & 0xff) << 16);
                e.edx |= 1 << 28;
                e.ecx |= 1 << 31;
            }
            0x4 => {
                // Cores per package - 1 in EAX[31:26]; no SMT sharing caches.
                e.eax = (e.eax & 0x3ff) | ((count - 1) << 26) & 0xfc00_0000;
            }
            0xb | 0x1f => {
                // Extended topology: level 0 = SMT (1 thread), level 1 = core.
                e.edx = apic_id;
                match e.index {
                    0 => {
                        e.eax = 0;
                        e.ebx = 1;
                        e.ecx = (1 << 8) | e.index;
                    }
                    1 => {
                        e.eax = core_bits;
                        e.ebx = count;
                        e.ecx = (2 << 8) | e.index;
                    }
                    _ => {
                        e.eax = 0;
                        e.ebx = 0;
                        e.ecx = e.index;
                    }
                }
            }
            0x4000_0000 => {
                // KVM signature so the guest uses KVM's paravirt clock and features.
                e.eax = 0x4000_0001;
                e.ebx = u32::from_le_bytes(*b"KVMK");
                e.ecx = u32::from_le_bytes(*b"VMKV");
                e.edx = u32::from_le_bytes(*b"M\0\0\0");
            }
            0x8000_0008 => {
                // AMD: number of cores - 1, and the APIC id size.
                e.ecx = (e.ecx & !0xf0ff) | (count - 1) | (core_bits << 12);
            }
            _ => {}
        }
    }
}

fn segment(selector: u16, base: u64, limit: u32, type_: u8, db: u8, l: u8) -> kvm_segment {
    kvm_segment {
        base,
        limit,
        selector,
        type_,
        present: 1,
        dpl: 0,
        db,
        s: 1,
        l,
        g: 1,
        avl: 0,
        unusable: 0,
        padding: 0,
    }
}

/// Configures vCPU `cpu` (only the boot vCPU gets registers; the others wait
/// for INIT/SIPI in the in-kernel LAPIC).
pub fn configure(
    vcpu: &VcpuFd,
    mem: &GuestMemoryMmap,
    mut cpuid: CpuId,
    cpu: u8,
    count: u8,
    entry: EntryPoint,
) -> Result<(), CpuSetupError> {
    let err = |step| move |source| CpuSetupError::Kvm { cpu, step, source };
    patch_cpuid(&mut cpuid, cpu, count);
    vcpu.set_cpuid2(&cpuid).map_err(err("CPUID"))?;
    set_boot_msrs(vcpu, cpu)?;
    let fpu = kvm_fpu {
        fcw: 0x37f,
        mxcsr: 0x1f80,
        ..Default::default()
    };
    vcpu.set_fpu(&fpu).map_err(err("FPU"))?;
    let mut lapic: kvm_lapic_state = vcpu.get_lapic().map_err(err("LAPIC read"))?;
    set_lvt_mode(&mut lapic, APIC_LVT0, APIC_MODE_EXTINT);
    set_lvt_mode(&mut lapic, APIC_LVT1, APIC_MODE_NMI);
    vcpu.set_lapic(&lapic).map_err(err("LAPIC"))?;
    if cpu != 0 {
        return Ok(());
    }
    let mut sregs: kvm_sregs = vcpu.get_sregs().map_err(err("segment registers read"))?;
    write_boot_gdt(mem, &mut sregs)?;
    let regs = enter_at(entry, &mut sregs);
    vcpu.set_sregs(&sregs).map_err(err("segment registers"))?;
    vcpu.set_regs(&regs).map_err(err("registers"))?;
    Ok(())
}

/// The MSRs a vCPU boots with (fast strings on, write-back MTRR default).
fn set_boot_msrs(vcpu: &VcpuFd, cpu: u8) -> Result<(), CpuSetupError> {
    let msrs: Vec<kvm_msr_entry> = [
        (MSR_IA32_SYSENTER_CS, 0),
        (MSR_IA32_SYSENTER_ESP, 0),
        (MSR_IA32_SYSENTER_EIP, 0),
        (MSR_STAR, 0),
        (MSR_CSTAR, 0),
        (MSR_KERNEL_GS_BASE, 0),
        (MSR_SYSCALL_MASK, 0),
        (MSR_LSTAR, 0),
        (MSR_IA32_TSC, 0),
        (MSR_IA32_MISC_ENABLE, MSR_IA32_MISC_ENABLE_FAST_STRING),
        (MSR_MTRR_DEF_TYPE, MTRR_ENABLE | MTRR_TYPE_WB),
    ]
    .iter()
    .map(|&(index, data)| kvm_msr_entry {
        index,
        data,
        ..Default::default()
    })
    .collect();
    let msrs = Msrs::from_entries(&msrs).map_err(|_| CpuSetupError::Kvm {
        cpu,
        step: "MSR list",
        source: kvm_ioctls::Error::new(libc::E2BIG),
    })?;
    let set = vcpu.set_msrs(&msrs).map_err(|source| CpuSetupError::Kvm {
        cpu,
        step: "MSRs",
        source,
    })?;
    if set != msrs.as_slice().len() {
        log::debug!(
            "vCPU {cpu}: KVM accepted {set} of {} boot MSRs",
            msrs.as_slice().len()
        );
    }
    Ok(())
}

/// The boot GDT (null, 64-bit code, flat data, 32-bit code for PVH, a TSS
/// placeholder) and an empty IDT in guest memory, and the segment registers
/// over them. The GDT's size is the layout's, so it cannot grow into the IDT.
fn write_boot_gdt(mem: &GuestMemoryMmap, sregs: &mut kvm_sregs) -> Result<(), CpuSetupError> {
    let gdt: [u64; layout::BOOT_GDT_ENTRIES] = [
        0,
        0x00af_9b00_0000_ffff,
        0x00cf_9300_0000_ffff,
        0x00cf_9b00_0000_ffff,
        0x0080_8b00_0000_0000,
    ];
    for (i, d) in gdt.iter().enumerate() {
        mem.write_obj(
            *d,
            vm_memory::GuestAddress(layout::BOOT_GDT_START.0 + 8 * i as u64),
        )?;
    }
    mem.write_obj(0u64, layout::BOOT_IDT_START)?;
    sregs.gdt.base = layout::BOOT_GDT_START.0;
    sregs.gdt.limit = u16::try_from(gdt.len() * 8 - 1).unwrap_or(0);
    sregs.idt.base = layout::BOOT_IDT_START.0;
    sregs.idt.limit = u16::try_from(layout::BOOT_IDT_SIZE - 1).unwrap_or(0);
    let data = segment(0x10, 0, 0xffff_ffff, 3, 1, 0);
    let mut tss = segment(0x20, 0, 0xfffff, 11, 0, 0);
    tss.s = 0;
    sregs.ds = data;
    sregs.es = data;
    sregs.fs = data;
    sregs.gs = data;
    sregs.ss = data;
    sregs.tr = tss;
    Ok(())
}

/// The boot vCPU's mode and registers for `entry`: PVH's 32-bit protected
/// mode with the start info in RBX, or Linux's 64-bit entry with the boot
/// page tables, stack and zero page.
fn enter_at(entry: EntryPoint, sregs: &mut kvm_sregs) -> kvm_regs {
    let mut regs = kvm_regs {
        rflags: 0x2,
        ..Default::default()
    };
    match entry {
        EntryPoint::Pvh(rip) => {
            sregs.cs = segment(0x18, 0, 0xffff_ffff, 11, 1, 0);
            sregs.cr0 = CR0_PE | CR0_ET;
            sregs.cr4 = 0;
            sregs.efer = 0;
            regs.rip = rip;
            regs.rbx = layout::PVH_INFO_START.0;
        }
        EntryPoint::Linux64(rip) => {
            sregs.cs = segment(0x8, 0, 0xffff_ffff, 11, 0, 1);
            sregs.cr3 = layout::PML4_START.0;
            sregs.cr4 |= CR4_PAE;
            sregs.cr0 |= CR0_PE | CR0_PG | CR0_ET;
            sregs.efer |= EFER_LME | EFER_LMA;
            regs.rip = rip;
            regs.rsp = layout::BOOT_STACK_POINTER.0;
            regs.rbp = layout::BOOT_STACK_POINTER.0;
            regs.rsi = layout::ZERO_PAGE_START.0;
        }
    }
    regs
}

fn set_lvt_mode(lapic: &mut kvm_lapic_state, reg: usize, mode: u32) {
    let bytes: Vec<u8> = lapic.regs[reg..reg + 4]
        .iter()
        .map(|b| b.to_ne_bytes()[0])
        .collect();
    let mut v = u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
    v = (v & !0x700) | (mode << 8);
    for (dst, src) in lapic.regs[reg..reg + 4].iter_mut().zip(v.to_le_bytes()) {
        *dst = i8::from_ne_bytes([src]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kvm_bindings::kvm_cpuid_entry2;

    fn entry(function: u32, index: u32) -> kvm_cpuid_entry2 {
        kvm_cpuid_entry2 {
            function,
            index,
            ..Default::default()
        }
    }

    #[test]
    fn topology_and_hypervisor_leaves() {
        let mut c = CpuId::from_entries(&[
            entry(1, 0),
            entry(0xb, 0),
            entry(0xb, 1),
            entry(0x4000_0000, 0),
        ])
        .unwrap();
        patch_cpuid(&mut c, 2, 4);
        let s = c.as_slice();
        assert_eq!(s[0].ebx >> 24, 2, "APIC id");
        assert_eq!((s[0].ebx >> 16) & 0xff, 4, "logical count");
        assert_ne!(s[0].ecx & (1 << 31), 0, "hypervisor bit");
        assert_eq!((s[1].ebx, s[1].edx, s[1].ecx >> 8), (1, 2, 1));
        assert_eq!((s[2].eax, s[2].ebx, s[2].ecx >> 8), (2, 4, 2));
        assert_eq!(&s[3].ebx.to_le_bytes(), b"KVMK");
    }

    #[test]
    fn lvt_mode_bits() {
        let mut l = kvm_lapic_state::default();
        set_lvt_mode(&mut l, APIC_LVT0, APIC_MODE_EXTINT);
        assert_eq!(l.regs[APIC_LVT0 + 1].cast_unsigned(), 0x7);
        set_lvt_mode(&mut l, APIC_LVT0, APIC_MODE_NMI);
        assert_eq!(l.regs[APIC_LVT0 + 1].cast_unsigned(), 0x4);
    }
}
