//! What each vCPU thread was doing when the VM was stopped: in the guest
//! (`KVM_RUN`; then halted or running, and where: RIP, interrupts on or off,
//! the kernel symbol when the kernel file has a symbol table) or in pmemvm,
//! handling which exit for how long (a device's host call: a flush hint's
//! `fdatasync`, a label write). The thread publishes its phase around every
//! `KVM_RUN` (two relaxed atomic stores) and, when the stop's kick brings it
//! out of the guest, its registers; [`VcpuStatus::describe`] turns that into
//! the sentence a timed-out run prints for each vCPU.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

/// The thread has not entered the guest yet.
const STARTING: u8 = 0;
/// In `KVM_RUN`.
const IN_GUEST: u8 = 1;
/// Handling an exit in pmemvm (see [`Exit`]).
const IN_EXIT: u8 = 2;
/// Left its loop.
const DONE: u8 = 3;

/// An exit being handled in pmemvm.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Exit {
    /// A port read.
    PortIn = 1,
    /// A port write.
    PortOut = 2,
    /// An MMIO read.
    MmioRead = 3,
    /// An MMIO write (the flush hints, the `_DSM` doorbell).
    MmioWrite = 4,
    /// Anything else.
    Other = 5,
    /// Parked: held by the debugger (`--gdb`) or the control socket's
    /// `pause`, or a dump in progress.
    Parked = 6,
}

impl Exit {
    fn from_u8(v: u8) -> Self {
        match v {
            1 => Self::PortIn,
            2 => Self::PortOut,
            3 => Self::MmioRead,
            4 => Self::MmioWrite,
            6 => Self::Parked,
            _ => Self::Other,
        }
    }

    fn words(self) -> &'static str {
        match self {
            Self::PortIn => "a port read at",
            Self::PortOut => "a port write at",
            Self::MmioRead => "an MMIO read at",
            Self::MmioWrite => "an MMIO write at",
            Self::Other => "an exit at",
            Self::Parked => "a stop at",
        }
    }
}

/// The registers a kicked vCPU saw on its way out of the guest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Snapshot {
    /// Guest RIP.
    pub rip: u64,
    /// Guest RFLAGS (IF is bit 9).
    pub rflags: u64,
    /// KVM's MP state (`KVM_MP_STATE_*`), when it could be read.
    pub mp_state: Option<u32>,
    /// The local APIC's in-service and pending vectors, when they could be read.
    pub lapic: Option<LapicVectors>,
    /// Kernel code addresses on its stack when it was in the kernel (empty
    /// otherwise), newest first.
    pub stack: crate::debug::stack_scan::StackWords,
}

impl Snapshot {
    /// Where `vcpu` is, read on its own thread while it is out of `KVM_RUN`;
    /// `None` when its registers cannot be read.
    pub fn of_vcpu(vcpu: &kvm_ioctls::VcpuFd, mem: &vm_memory::GuestMemoryMmap) -> Option<Self> {
        let regs = vcpu.get_regs().ok()?;
        Some(Self {
            rip: regs.rip,
            rflags: regs.rflags,
            mp_state: vcpu.get_mp_state().ok().map(|m| m.mp_state),
            lapic: vcpu
                .get_lapic()
                .ok()
                .map(|l| LapicVectors::from_page(&l.regs)),
            stack: crate::debug::stack_scan::of_vcpu(vcpu, mem, regs.rip, regs.rsp),
        })
    }

    /// Halted in the guest with interrupts on: any deliverable interrupt
    /// would have woken it.
    pub fn idle(&self) -> bool {
        self.mp_state == Some(3) && self.rflags & (1 << 9) != 0
    }
}

/// A local APIC's in-service (ISR) and requested (IRR) vectors, 256 bits each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LapicVectors {
    /// ISR: delivered, not yet ended by the guest's EOI.
    pub in_service: [u32; 8],
    /// IRR: requested, not yet delivered.
    pub pending: [u32; 8],
}

/// ISR's and IRR's offsets in the APIC register page; each is eight 32-bit
/// registers 16 bytes apart.
const APIC_ISR: usize = 0x100;
const APIC_IRR: usize = 0x200;

impl LapicVectors {
    /// From the register page `KVM_GET_LAPIC` returns.
    pub fn from_page(page: &[std::os::raw::c_char]) -> Self {
        let word = |base: usize, i: usize| {
            let at = base + 16 * i;
            let b = |k: usize| {
                page.get(at + k)
                    .map_or(0, |&c| u32::from(c.to_ne_bytes()[0]))
            };
            b(0) | b(1) << 8 | b(2) << 16 | b(3) << 24
        };
        Self {
            in_service: std::array::from_fn(|i| word(APIC_ISR, i)),
            pending: std::array::from_fn(|i| word(APIC_IRR, i)),
        }
    }

    fn vectors(bits: &[u32; 8]) -> Vec<u8> {
        (0..=255u8)
            .filter(|&v| bits[usize::from(v / 32)] & (1 << (v % 32)) != 0)
            .collect()
    }

    /// The vectors delivered and not ended.
    pub fn in_service_vectors(&self) -> Vec<u8> {
        Self::vectors(&self.in_service)
    }

    /// "local APIC: vector 0x21 in service, 0x22 pending" (empty when both are).
    pub fn words(&self) -> String {
        let list = |v: Vec<u8>| {
            v.iter()
                .map(|x| format!("{x:#x}"))
                .collect::<Vec<_>>()
                .join(" ")
        };
        let (isr, irr) = (self.in_service_vectors(), Self::vectors(&self.pending));
        let mut parts = Vec::new();
        if !isr.is_empty() {
            parts.push(format!("vector {} in service", list(isr)));
        }
        if !irr.is_empty() {
            parts.push(format!("vector {} pending", list(irr)));
        }
        match parts.is_empty() {
            true => String::new(),
            false => format!("local APIC: {}", parts.join(", ")),
        }
    }
}

/// One vCPU's published state.
#[derive(Debug)]
pub struct VcpuStatus {
    phase: AtomicU8,
    exit: AtomicU8,
    addr: AtomicU64,
    /// Microseconds since [`epoch`] when the phase began.
    since_us: AtomicU64,
    snapshot: Mutex<Option<Snapshot>>,
    /// SIGQUIT asked for the registers at the next kick.
    snapshot_wanted: AtomicBool,
}

fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

fn now_us() -> u64 {
    u64::try_from(epoch().elapsed().as_micros()).unwrap_or(u64::MAX)
}

impl Default for VcpuStatus {
    fn default() -> Self {
        Self::new()
    }
}

impl VcpuStatus {
    /// A vCPU that has not started.
    pub fn new() -> Self {
        epoch();
        Self {
            phase: AtomicU8::new(STARTING),
            exit: AtomicU8::new(0),
            addr: AtomicU64::new(0),
            since_us: AtomicU64::new(now_us()),
            snapshot: Mutex::new(None),
            snapshot_wanted: AtomicBool::new(false),
        }
    }

    /// Entering `KVM_RUN`.
    pub fn in_guest(&self) {
        self.phase.store(IN_GUEST, Ordering::Relaxed);
    }

    /// `KVM_RUN` returned with `exit` at `addr`; pmemvm handles it now.
    pub fn in_exit(&self, exit: Exit, addr: u64) {
        self.exit.store(exit as u8, Ordering::Relaxed);
        self.addr.store(addr, Ordering::Relaxed);
        self.since_us.store(now_us(), Ordering::Relaxed);
        self.phase.store(IN_EXIT, Ordering::Release);
    }

    /// The loop ended.
    pub fn done(&self) {
        self.phase.store(DONE, Ordering::Release);
    }

    /// True while the thread is in `KVM_RUN` (it can be kicked without
    /// interrupting a device's host call).
    pub fn in_guest_now(&self) -> bool {
        self.phase.load(Ordering::Acquire) == IN_GUEST
    }

    /// Asks for the registers at the next kick (SIGQUIT), dropping the last ones.
    pub fn request_snapshot(&self) {
        if let Ok(mut s) = self.snapshot.lock() {
            *s = None;
        }
        self.snapshot_wanted.store(true, Ordering::Release);
    }

    /// Whether a snapshot was asked for (and clears the request).
    pub fn take_snapshot_request(&self) -> bool {
        self.snapshot_wanted.swap(false, Ordering::AcqRel)
    }

    /// Whether registers were recorded since the last request.
    pub fn has_snapshot(&self) -> bool {
        self.snapshot.lock().is_ok_and(|s| s.is_some())
    }

    /// The registers recorded at the last kick, if any.
    pub fn snapshot(&self) -> Option<Snapshot> {
        self.snapshot.lock().ok().and_then(|s| *s)
    }

    /// The registers seen when a kick brought the vCPU out of the guest.
    pub fn record(&self, snapshot: Snapshot) {
        if let Ok(mut s) = self.snapshot.lock() {
            *s = Some(snapshot);
        }
    }

    /// One sentence: where vCPU `index` was. `symbol` names a guest address;
    /// `owner` names the device (and its host file) an exit's address belongs to.
    pub fn describe(
        &self,
        index: usize,
        symbol: &dyn Fn(u64) -> Option<String>,
        owner: &dyn Fn(Exit, u64) -> Option<String>,
    ) -> String {
        let snapshot = self.snapshot.lock().ok().and_then(|s| *s);
        match (self.phase.load(Ordering::Acquire), snapshot) {
            (IN_EXIT, _) => {
                let secs =
                    now_us().saturating_sub(self.since_us.load(Ordering::Relaxed)) as f64 / 1e6;
                let exit = Exit::from_u8(self.exit.load(Ordering::Relaxed));
                if exit == Exit::Parked {
                    return format!(
                        "vCPU {index}: stopped for {secs:.1} s, held by gdb (--gdb), the \
                         control socket's pause, or a dump being written"
                    );
                }
                let addr = self.addr.load(Ordering::Relaxed);
                let what = owner(exit, addr).unwrap_or_else(|| {
                    "no device claims it; a device's host call would be a flush hint's \
                     fdatasync or a label write"
                        .to_owned()
                });
                format!(
                    "vCPU {index}: in pmemvm for {secs:.1} s, handling {} {addr:#x} ({what})",
                    exit.words(),
                )
            }
            (STARTING, _) => format!("vCPU {index}: never entered the guest"),
            (_, Some(s)) => {
                let at = match symbol(s.rip) {
                    Some(name) => format!("RIP {:#x} ({name})", s.rip),
                    None => format!("RIP {:#x}", s.rip),
                };
                let intr = if s.rflags & (1 << 9) != 0 {
                    "on"
                } else {
                    "off"
                };
                let state = match s.mp_state {
                    Some(0) | None => "running".to_owned(),
                    Some(1 | 2) => {
                        "not started by the guest (waiting for its INIT and start-up IPI)"
                            .to_owned()
                    }
                    Some(3) => "halted, waiting for an interrupt".to_owned(),
                    Some(4) => "starting (start-up IPI received)".to_owned(),
                    Some(n) => format!("in KVM MP state {n}"),
                };
                let apic = s
                    .lapic
                    .map(|l| l.words())
                    .filter(|w| !w.is_empty())
                    .map(|w| format!("; {w}"))
                    .unwrap_or_default();
                let stack = stack_words(&s.stack, symbol);
                format!(
                    "vCPU {index}: in the guest, {state}, at {at}, interrupts {intr}{apic}{stack}"
                )
            }
            (_, None) => format!("vCPU {index}: in the guest (its registers could not be read)"),
        }
    }
}

/// Most callers named in one sentence.
const STACK_NAMED: usize = 12;

/// `; kernel code on its stack (callers, newest first; some may be stale):
/// a+0x1, b+0x2` — the words that name a function, or every word as a number
/// when none does (no vmlinux with symbols); empty when the scan found none.
fn stack_words(
    stack: &crate::debug::stack_scan::StackWords,
    symbol: &dyn Fn(u64) -> Option<String>,
) -> String {
    let words = stack.words();
    if words.is_empty() {
        return String::new();
    }
    // A function's name and offset has no space; "in a kernel module, …" has.
    let named: Vec<String> = words
        .iter()
        .filter_map(|&w| symbol(w).filter(|n| !n.contains(' ')))
        .take(STACK_NAMED)
        .collect();
    let list = if named.is_empty() {
        words
            .iter()
            .take(STACK_NAMED)
            .map(|w| format!("{w:#x}"))
            .collect::<Vec<_>>()
            .join(", ")
    } else {
        named.join(", ")
    };
    format!("; kernel code on its stack (callers, newest first; some may be stale): {list}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_owner(_: Exit, _: u64) -> Option<String> {
        None
    }

    #[test]
    fn a_parked_vcpu_says_who_may_hold_it() {
        let s = VcpuStatus::new();
        s.in_exit(Exit::Parked, 0);
        let d = s.describe(1, &|_| None, &no_owner);
        assert!(d.starts_with("vCPU 1: stopped for "), "{d}");
        assert!(
            d.ends_with("held by gdb (--gdb), the control socket's pause, or a dump being written"),
            "{d}"
        );
    }

    #[test]
    fn each_phase_reads_as_one_sentence() {
        let s = VcpuStatus::new();
        let none = |_| None;
        assert_eq!(
            s.describe(0, &none, &no_owner),
            "vCPU 0: never entered the guest"
        );
        s.in_guest();
        s.record(Snapshot {
            rip: 0xffff_ffff_8100_1234,
            rflags: 0x246,
            mp_state: Some(3),
            lapic: None,
            stack: Default::default(),
        });
        s.done();
        let named = |rip: u64| (rip == 0xffff_ffff_8100_1234).then(|| "default_idle+0x4".into());
        assert_eq!(
            s.describe(1, &named, &no_owner),
            "vCPU 1: in the guest, halted, waiting for an interrupt, at RIP 0xffffffff81001234 \
             (default_idle+0x4), interrupts on"
        );
        let spin = VcpuStatus::new();
        spin.in_guest();
        spin.record(Snapshot {
            rip: 0x1000,
            rflags: 0x2,
            mp_state: Some(0),
            lapic: None,
            stack: Default::default(),
        });
        assert_eq!(
            spin.describe(2, &none, &no_owner),
            "vCPU 2: in the guest, running, at RIP 0x1000, interrupts off"
        );
        spin.record(Snapshot {
            rip: 0xfff0,
            rflags: 0x2,
            mp_state: Some(1),
            lapic: None,
            stack: Default::default(),
        });
        assert!(spin
            .describe(2, &none, &no_owner)
            .contains("not started by the guest (waiting for its INIT and start-up IPI)"));
        let busy = VcpuStatus::new();
        busy.in_exit(Exit::MmioWrite, 0xfed0_0000);
        let d = busy.describe(3, &none, &no_owner);
        assert!(
            d.starts_with("vCPU 3: in pmemvm for 0.")
                && d.contains("an MMIO write at 0xfed00000 (no device claims it"),
            "{d}"
        );
        let flush = |exit: Exit, addr: u64| {
            (exit == Exit::MmioWrite && addr == 0xfed0_0000)
                .then(|| "NVDIMM 0's flush hint: fdatasync of /tmp/a.img".to_owned())
        };
        let d = busy.describe(3, &none, &flush);
        assert!(
            d.ends_with(
                "an MMIO write at 0xfed00000 (NVDIMM 0's flush hint: fdatasync of /tmp/a.img)"
            ),
            "{d}"
        );
    }

    #[test]
    fn a_vcpu_stopped_in_the_kernel_names_the_code_on_its_stack() {
        use crate::debug::stack_scan::tests_support::words;
        let s = VcpuStatus::new();
        s.in_guest();
        s.record(Snapshot {
            rip: 0xffff_ffff_8100_1234,
            rflags: 0x246,
            mp_state: Some(0),
            lapic: None,
            stack: words(&[
                0xffff_ffff_8100_2000,
                0xffff_ffff_c03d_f20c,
                0xffff_ffff_8100_3010,
            ]),
        });
        let named = |a: u64| match a {
            0xffff_ffff_8100_2000 => Some("nd_btt_probe+0x20".to_owned()),
            0xffff_ffff_8100_3010 => Some("really_probe+0x10".to_owned()),
            0xffff_ffff_c03d_f20c => Some("in a kernel module, whose symbols …".to_owned()),
            _ => None,
        };
        assert!(s.describe(0, &named, &no_owner).ends_with(
            "interrupts on; kernel code on its stack (callers, newest first; some may be \
             stale): nd_btt_probe+0x20, really_probe+0x10"
        ));
        // Without symbols, the words as numbers.
        assert!(s
            .describe(0, &|_| None, &no_owner)
            .ends_with("stale): 0xffffffff81002000, 0xffffffffc03df20c, 0xffffffff81003010"));
    }

    #[test]
    fn the_local_apic_vectors_are_read_from_the_register_page() {
        let mut page = [0 as std::os::raw::c_char; 1024];
        // ISR bit 0x21 (register 1, bit 1); IRR bits 0x22 and 0xec.
        page[0x110] = 0x02;
        page[0x210] = 0x04;
        page[0x270 + 1] = 0x10;
        let l = LapicVectors::from_page(&page);
        assert_eq!(l.in_service_vectors(), vec![0x21]);
        assert_eq!(
            l.words(),
            "local APIC: vector 0x21 in service, vector 0x22 0xec pending"
        );
        assert_eq!(LapicVectors::default().words(), "");
        // A short page reads as zeros, not a panic.
        assert_eq!(
            LapicVectors::from_page(&page[..0x111]).in_service_vectors(),
            vec![0x21]
        );
        let s = VcpuStatus::new();
        s.in_guest();
        let snap = Snapshot {
            rip: 0x1000,
            rflags: 0x202,
            mp_state: Some(3),
            lapic: Some(l),
            stack: Default::default(),
        };
        assert!(snap.idle());
        assert!(!Snapshot {
            rflags: 0x2,
            ..snap
        }
        .idle());
        s.record(snap);
        assert!(s.describe(0, &|_| None, &no_owner).ends_with(
            "interrupts on; local APIC: vector 0x21 in service, vector 0x22 0xec pending"
        ));
    }
}
