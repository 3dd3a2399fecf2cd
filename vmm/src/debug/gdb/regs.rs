//! KVM's register structures in gdb's x86-64 layout and back, and the
//! debug-register settings (DR0..DR3, DR7) for hardware breakpoints and
//! watchpoints.

use gdbstub_arch::x86::reg::{X86SegmentRegs, X86_64CoreRegs, X87FpuInternalRegs};
use kvm_bindings::{kvm_fpu, kvm_regs, kvm_sregs};

/// gdb's register set from KVM's.
pub fn to_gdb(regs: &kvm_regs, sregs: &kvm_sregs, fpu: &kvm_fpu) -> X86_64CoreRegs {
    let mut st = [[0u8; 10]; 8];
    for (dst, src) in st.iter_mut().zip(fpu.fpr.iter()) {
        dst.copy_from_slice(&src[..10]);
    }
    // FXSAVE's abridged tag (1 = valid) to the full tag word (00 valid, 11 empty).
    let ftag = (0..8).fold(0u32, |tag, i| {
        if fpu.ftwx & (1 << i) != 0 {
            tag
        } else {
            tag | (3 << (2 * i))
        }
    });
    X86_64CoreRegs {
        regs: [
            regs.rax, regs.rbx, regs.rcx, regs.rdx, regs.rsi, regs.rdi, regs.rbp, regs.rsp,
            regs.r8, regs.r9, regs.r10, regs.r11, regs.r12, regs.r13, regs.r14, regs.r15,
        ],
        // RFLAGS' upper half is reserved (zero).
        eflags: u32::try_from(regs.rflags & 0xffff_ffff).unwrap_or(0),
        rip: regs.rip,
        segments: X86SegmentRegs {
            cs: sregs.cs.selector.into(),
            ss: sregs.ss.selector.into(),
            ds: sregs.ds.selector.into(),
            es: sregs.es.selector.into(),
            fs: sregs.fs.selector.into(),
            gs: sregs.gs.selector.into(),
        },
        st,
        fpu: X87FpuInternalRegs {
            fctrl: fpu.fcw.into(),
            fstat: fpu.fsw.into(),
            ftag,
            fiseg: 0,
            fioff: u32::try_from(fpu.last_ip & 0xffff_ffff).unwrap_or(0),
            foseg: 0,
            fooff: u32::try_from(fpu.last_dp & 0xffff_ffff).unwrap_or(0),
            fop: fpu.last_opcode.into(),
        },
        xmm: std::array::from_fn(|i| u128::from_le_bytes(fpu.xmm[i])),
        mxcsr: fpu.mxcsr,
    }
}

/// KVM's general and FPU registers with gdb's values written in. Segment
/// selectors are not written (a selector without its descriptor would
/// corrupt the vCPU); the caller refuses a change to them.
pub fn from_gdb(g: &X86_64CoreRegs, regs: &mut kvm_regs, fpu: &mut kvm_fpu) {
    let r = &g.regs;
    (regs.rax, regs.rbx, regs.rcx, regs.rdx) = (r[0], r[1], r[2], r[3]);
    (regs.rsi, regs.rdi, regs.rbp, regs.rsp) = (r[4], r[5], r[6], r[7]);
    (regs.r8, regs.r9, regs.r10, regs.r11) = (r[8], r[9], r[10], r[11]);
    (regs.r12, regs.r13, regs.r14, regs.r15) = (r[12], r[13], r[14], r[15]);
    regs.rip = g.rip;
    regs.rflags = u64::from(g.eflags);
    for (dst, src) in fpu.fpr.iter_mut().zip(g.st.iter()) {
        dst[..10].copy_from_slice(src);
    }
    fpu.fcw = u16::try_from(g.fpu.fctrl & 0xffff).unwrap_or(fpu.fcw);
    fpu.fsw = u16::try_from(g.fpu.fstat & 0xffff).unwrap_or(fpu.fsw);
    for (dst, src) in fpu.xmm.iter_mut().zip(g.xmm.iter()) {
        *dst = src.to_le_bytes();
    }
    fpu.mxcsr = g.mxcsr;
}

/// True when gdb's segment selectors differ from the vCPU's.
pub fn segments_changed(g: &X86_64CoreRegs, sregs: &kvm_sregs) -> bool {
    let s = &g.segments;
    [s.cs, s.ss, s.ds, s.es, s.fs, s.gs]
        != [
            sregs.cs.selector,
            sregs.ss.selector,
            sregs.ds.selector,
            sregs.es.selector,
            sregs.fs.selector,
            sregs.gs.selector,
        ]
        .map(u32::from)
}

/// What a debug register watches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Watch {
    /// Instruction fetch (a hardware breakpoint).
    Execute,
    /// Data writes.
    Write,
    /// Data reads and writes (x86 has no read-only watch).
    Access,
}

/// One of the four debug registers in use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HwSlot {
    /// Linear address.
    pub addr: u64,
    /// Bytes watched: 1, 2, 4 or 8 (1 for breakpoints).
    pub len: u64,
    /// What fires it.
    pub watch: Watch,
}

impl HwSlot {
    /// A slot if x86 can watch `len` bytes at `addr` (aligned 1, 2, 4 or 8).
    pub fn new(addr: u64, len: u64, watch: Watch) -> Option<Self> {
        let len = if watch == Watch::Execute { 1 } else { len };
        (matches!(len, 1 | 2 | 4 | 8) && addr.is_multiple_of(len)).then_some(Self {
            addr,
            len,
            watch,
        })
    }
}

/// DR7 for these slots: global enable, R/W type and length per slot, and
/// GE (exact data breakpoints) when any is in use.
pub fn dr7(slots: &[Option<HwSlot>; 4]) -> u64 {
    let mut dr7 = 0u64;
    for (i, slot) in slots.iter().enumerate() {
        let Some(s) = slot else { continue };
        let rw: u64 = match s.watch {
            Watch::Execute => 0b00,
            Watch::Write => 0b01,
            Watch::Access => 0b11,
        };
        let len: u64 = match s.len {
            2 => 0b01,
            8 => 0b10,
            4 => 0b11,
            _ => 0b00,
        };
        dr7 |= 2 << (2 * i);
        dr7 |= (rw | (len << 2)) << (16 + 4 * i);
    }
    if dr7 != 0 {
        dr7 |= 1 << 9;
    }
    dr7
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registers_go_to_gdb_and_back() {
        let mut regs = kvm_regs {
            rax: 1,
            rbx: 2,
            rsp: 0xffff_c900_0000_0f00,
            r15: 15,
            rip: 0xffff_ffff_8100_1000,
            rflags: 0x246,
            ..Default::default()
        };
        let mut sregs = kvm_sregs::default();
        sregs.cs.selector = 0x10;
        sregs.ss.selector = 0x18;
        let mut fpu = kvm_fpu {
            fcw: 0x37f,
            mxcsr: 0x1f80,
            ftwx: 0b1,
            ..Default::default()
        };
        fpu.xmm[3] = 7u128.to_le_bytes();
        let g = to_gdb(&regs, &sregs, &fpu);
        assert_eq!(g.regs[0], 1);
        assert_eq!(g.regs[1], 2);
        assert_eq!(g.regs[7], 0xffff_c900_0000_0f00, "rsp is gdb's eighth");
        assert_eq!(g.regs[15], 15);
        assert_eq!((g.rip, g.eflags), (0xffff_ffff_8100_1000, 0x246));
        assert_eq!((g.segments.cs, g.segments.ss), (0x10, 0x18));
        assert_eq!(g.fpu.ftag, 0xfffc, "st0 valid, the rest empty");
        assert_eq!(g.xmm[3], 7);
        assert!(!segments_changed(&g, &sregs));

        let mut g2 = g.clone();
        g2.rip += 1;
        g2.regs[2] = 0xabc;
        g2.xmm[0] = 9;
        from_gdb(&g2, &mut regs, &mut fpu);
        assert_eq!((regs.rip, regs.rcx), (0xffff_ffff_8100_1001, 0xabc));
        assert_eq!(u128::from_le_bytes(fpu.xmm[0]), 9);
        g2.segments.cs = 0x33;
        assert!(segments_changed(&g2, &sregs));
    }

    #[test]
    fn dr7_encodes_type_length_and_enable_per_slot() {
        let mut slots = [None; 4];
        assert_eq!(dr7(&slots), 0);
        slots[0] = HwSlot::new(0x1000, 99, Watch::Execute);
        slots[2] = HwSlot::new(0x2000, 8, Watch::Write);
        slots[3] = HwSlot::new(0x3004, 4, Watch::Access);
        let v = dr7(&slots);
        assert_eq!(v & 0xff, 0b1010_0010, "G0, G2 and G3");
        assert_eq!((v >> 16) & 0xf, 0b0000, "slot 0: execute, 1 byte");
        assert_eq!((v >> 24) & 0xf, 0b1001, "slot 2: write, 8 bytes");
        assert_eq!((v >> 28) & 0xf, 0b1111, "slot 3: access, 4 bytes");
        assert_ne!(v & (1 << 9), 0);
        assert!(HwSlot::new(0x1002, 4, Watch::Write).is_none(), "unaligned");
        assert!(HwSlot::new(0x1000, 3, Watch::Write).is_none(), "3 bytes");
    }
}
