//! The guest as gdb's target: one thread per vCPU, registers through the
//! parked vCPU threads, memory by guest virtual address (the vCPU's page
//! tables, see [`super::paging`]) or, after `monitor phys on`, by physical
//! address; `int3` breakpoints written into guest memory, hardware
//! breakpoints and watchpoints in the four debug registers, single step.

use std::collections::BTreeMap;
use std::sync::mpsc::channel;
use std::sync::Arc;
use std::time::Duration;

use gdbstub::common::{Signal, Tid};
use gdbstub::outputln;
use gdbstub::target::ext::base::multithread::{
    MultiThreadBase, MultiThreadResume, MultiThreadResumeOps, MultiThreadSchedulerLocking,
    MultiThreadSchedulerLockingOps, MultiThreadSingleStep, MultiThreadSingleStepOps,
};
use gdbstub::target::ext::base::BaseOps;
use gdbstub::target::ext::breakpoints::{BreakpointsOps, WatchKind};
use gdbstub::target::ext::monitor_cmd::{ConsoleOutput, MonitorCmd, MonitorCmdOps};
use gdbstub::target::{Target, TargetError, TargetResult};
use gdbstub_arch::x86::reg::X86_64CoreRegs;
use gdbstub_arch::x86::X86_64_SSE;
use kvm_bindings::kvm_guest_debug;
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

use super::hub::{CpuRegisters, DebugHub, Holder, Request, Stop, StopCause};
use super::paging::{self, GuestRam, Paging};
use super::regs::{self, HwSlot, Watch};
use super::GdbError;

/// How long a parked vCPU may take to answer.
const ANSWER: Duration = Duration::from_secs(5);

/// What gdb asked a vCPU to do at the next resume.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    Continue,
    Step,
}

/// The guest, seen by gdb.
#[derive(Debug)]
pub struct GuestTarget {
    hub: Arc<DebugHub>,
    pub(super) mem: GuestMemoryMmap,
    /// The debugger's `int3`s: virtual address → (physical, the byte it replaced).
    pub(super) sw: BTreeMap<u64, (u64, u8)>,
    hw: [Option<HwSlot>; 4],
    actions: Vec<Option<Action>>,
    cache: Vec<Option<CpuRegisters>>,
    physical: bool,
    /// How breakpoints are made on this KVM.
    pub(super) breakpoints: BreakpointMode,
    /// gdb locked the scheduler for this resume: vCPUs without an action stay.
    locked: bool,
    /// The user was told breakpoints cannot work here.
    told: bool,
}

/// How gdb's breakpoints are made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BreakpointMode {
    /// `int3` written into guest memory, #BP intercepted (hardware KVM).
    Int3,
    /// Software breakpoints in the debug registers too, four in all with
    /// the watchpoints: for KVM under QEMU TCG, whose emulated SVM delivers
    /// `int3` to the guest despite the #BP intercept.
    DebugRegisters,
    /// None: PVM stops the guest on neither `int3` nor debug registers in
    /// ring-0 guest code.
    Unsupported,
}

impl BreakpointMode {
    /// The mode for this host.
    pub fn for_host(host: &crate::host::HostKvm) -> Self {
        if host.pvm {
            Self::Unsupported
        } else if crate::host::under_tcg() {
            Self::DebugRegisters
        } else {
            Self::Int3
        }
    }
}

fn vcpu_of(tid: Tid) -> usize {
    tid.get() - 1
}

/// gdb's thread id of vCPU `index`.
pub fn tid_of(index: usize) -> Option<Tid> {
    Tid::new(index + 1)
}

pub(super) fn nonfatal<T>(e: String) -> TargetResult<T, GuestTarget> {
    log::info!("gdb: {e}");
    Err(TargetError::NonFatal)
}

impl GuestTarget {
    /// A target over `hub`'s vCPUs and guest RAM `mem`.
    pub fn new(hub: Arc<DebugHub>, mem: GuestMemoryMmap, breakpoints: BreakpointMode) -> Self {
        let n = hub.vcpus();
        Self {
            hub,
            mem,
            sw: BTreeMap::new(),
            hw: [None; 4],
            actions: vec![None; n],
            cache: vec![None; n],
            physical: false,
            breakpoints,
            locked: false,
            told: false,
        }
    }

    fn ask<T>(
        &self,
        vcpu: usize,
        make: impl FnOnce(std::sync::mpsc::Sender<Result<T, String>>) -> Request,
    ) -> Result<T, String> {
        let (tx, rx) = channel();
        self.hub.send(vcpu, make(tx))?;
        rx.recv_timeout(ANSWER)
            .map_err(|_| format!("vCPU {vcpu} did not answer within {} s", ANSWER.as_secs()))?
    }

    fn registers(&mut self, vcpu: usize) -> Result<CpuRegisters, String> {
        if let Some(Some(r)) = self.cache.get(vcpu) {
            return Ok(*r);
        }
        let r = self.ask(vcpu, Request::Read)?;
        if let Some(c) = self.cache.get_mut(vcpu) {
            *c = Some(r);
        }
        Ok(r)
    }

    /// The first vCPU that answers (breakpoints are set without a thread).
    pub(super) fn any_vcpu(&self) -> usize {
        (0..self.hub.vcpus())
            .find(|&i| self.hub.is_parked(i))
            .unwrap_or(0)
    }

    pub(super) fn translate(
        &mut self,
        vcpu: usize,
        addr: u64,
    ) -> Result<paging::Translation, String> {
        if self.physical {
            return paging::translate(&GuestRam(&self.mem), Paging::Off, 0, addr)
                .map_err(|e| e.to_string());
        }
        let r = self.registers(vcpu)?;
        let mode = Paging::from_registers(r.sregs.cr0, r.sregs.cr4, r.sregs.efer);
        paging::translate(&GuestRam(&self.mem), mode, r.sregs.cr3, addr).map_err(|e| e.to_string())
    }

    /// Reads guest memory at virtual `addr` page by page; the bytes read.
    fn read_virtual(&mut self, vcpu: usize, addr: u64, data: &mut [u8]) -> Result<usize, String> {
        let mut done = 0usize;
        while done < data.len() {
            let at = addr.wrapping_add(done as u64);
            let t = match self.translate(vcpu, at) {
                Ok(t) => t,
                Err(e) if done == 0 => return Err(e),
                Err(_) => break,
            };
            let n = (data.len() - done).min(usize::try_from(t.left_in_page).unwrap_or(usize::MAX));
            if self
                .mem
                .read_slice(&mut data[done..done + n], GuestAddress(t.gpa))
                .is_err()
            {
                if done == 0 {
                    return Err(format!(
                        "guest address {at:#x} (physical {:#x}) is not RAM",
                        t.gpa
                    ));
                }
                break;
            }
            done += n;
        }
        Ok(done)
    }

    fn write_virtual(&mut self, vcpu: usize, addr: u64, data: &[u8]) -> Result<(), String> {
        let mut done = 0usize;
        while done < data.len() {
            let at = addr.wrapping_add(done as u64);
            let t = self.translate(vcpu, at)?;
            let n = (data.len() - done).min(usize::try_from(t.left_in_page).unwrap_or(usize::MAX));
            self.mem
                .write_slice(&data[done..done + n], GuestAddress(t.gpa))
                .map_err(|_| format!("guest address {at:#x} (physical {:#x}) is not RAM", t.gpa))?;
            done += n;
        }
        Ok(())
    }

    /// `KVM_SET_GUEST_DEBUG` for the breakpoints set now, stepping or not.
    fn guest_debug(&self, step: bool) -> kvm_guest_debug {
        let mut d = kvm_guest_debug::default();
        if !self.sw.is_empty() {
            d.control |= kvm_bindings::KVM_GUESTDBG_ENABLE | kvm_bindings::KVM_GUESTDBG_USE_SW_BP;
        }
        if self.hw.iter().any(Option::is_some) {
            d.control |= kvm_bindings::KVM_GUESTDBG_ENABLE | kvm_bindings::KVM_GUESTDBG_USE_HW_BP;
            for (i, s) in self.hw.iter().enumerate() {
                d.arch.debugreg[i] = s.map_or(0, |s| s.addr);
            }
            d.arch.debugreg[7] = regs::dr7(&self.hw);
        }
        if step {
            d.control |= kvm_bindings::KVM_GUESTDBG_ENABLE
                | kvm_bindings::KVM_GUESTDBG_SINGLESTEP
                | kvm_bindings::KVM_GUESTDBG_BLOCKIRQ;
        }
        d
    }

    /// Takes every breakpoint out and lets every vCPU run (gdb detached).
    pub fn release_all(&mut self) {
        let sw: Vec<(u64, u8)> = self.sw.values().copied().collect();
        for (gpa, byte) in sw {
            let _ = self.mem.write_obj(byte, GuestAddress(gpa));
        }
        self.sw.clear();
        self.hw = [None; 4];
        self.hub.set_sw_breakpoints(Vec::new());
        self.hub.set_hw_slots(0);
        self.actions = vec![Some(Action::Continue); self.hub.vcpus()];
        if let Err(e) = self.resume() {
            log::warn!("gdb: resuming the vCPUs after the debugger left: {e}");
        }
    }

    /// gdb's stop reply for a vCPU's stop.
    pub fn stop_reason(&self, stop: Stop) -> Option<gdbstub::stub::MultiThreadStopReason<u64>> {
        use gdbstub::stub::MultiThreadStopReason as R;
        let tid = tid_of(stop.vcpu)?;
        Some(match stop.cause {
            StopCause::Held => R::SignalWithThread {
                tid,
                signal: Signal::SIGINT,
            },
            StopCause::Step => R::SignalWithThread {
                tid,
                signal: Signal::SIGTRAP,
            },
            StopCause::SwBreak => R::SwBreak(tid),
            StopCause::DebugRegister(i) => match self.hw.get(i).copied().flatten() {
                Some(HwSlot {
                    watch: Watch::Execute,
                    ..
                })
                | None => R::HwBreak(tid),
                Some(HwSlot { addr, watch, .. }) => R::Watch {
                    tid,
                    kind: if watch == Watch::Write {
                        WatchKind::Write
                    } else {
                        WatchKind::ReadWrite
                    },
                    addr,
                },
            },
        })
    }

    fn set_action(&mut self, tid: Tid, action: Action) {
        if let Some(a) = self.actions.get_mut(vcpu_of(tid)) {
            *a = Some(action);
        }
    }

    pub(super) fn publish_breakpoints(&self) {
        self.hub
            .set_sw_breakpoints(self.sw.keys().copied().collect());
        let mask = self
            .hw
            .iter()
            .enumerate()
            .filter(|(_, s)| s.is_some())
            .fold(0u8, |m, (i, _)| m | (1 << i));
        self.hub.set_hw_slots(mask);
    }

    /// False, with the reason said once, where this KVM cannot break.
    pub(super) fn can_break(&mut self) -> bool {
        if self.breakpoints == BreakpointMode::Unsupported {
            if std::mem::replace(&mut self.told, true) {
                return false;
            }
            eprintln!("pmemvm: gdb: this host's KVM (PVM) cannot stop the guest on breakpoints or watchpoints; single step, registers and memory work");
            return false;
        }
        true
    }

    pub(super) fn add_hw(&mut self, slot: Option<HwSlot>) -> TargetResult<bool, Self> {
        if !self.can_break() {
            return Ok(false);
        }
        let Some(slot) = slot else { return Ok(false) };
        let Some(free) = self.hw.iter().position(Option::is_none) else {
            return Ok(false);
        };
        self.hw[free] = Some(slot);
        self.publish_breakpoints();
        Ok(true)
    }

    pub(super) fn remove_hw(&mut self, addr: u64, watch: Watch) -> TargetResult<bool, Self> {
        match self
            .hw
            .iter()
            .position(|s| s.is_some_and(|s| s.addr == addr && s.watch == watch))
        {
            Some(i) => {
                self.hw[i] = None;
                self.publish_breakpoints();
                Ok(true)
            }
            None => Ok(false),
        }
    }
}

impl Target for GuestTarget {
    type Arch = X86_64_SSE;
    type Error = GdbError;

    fn base_ops(&mut self) -> BaseOps<'_, Self::Arch, Self::Error> {
        BaseOps::MultiThread(self)
    }

    fn support_breakpoints(&mut self) -> Option<BreakpointsOps<'_, Self>> {
        Some(self)
    }

    fn support_monitor_cmd(&mut self) -> Option<MonitorCmdOps<'_, Self>> {
        Some(self)
    }
}

impl MultiThreadBase for GuestTarget {
    fn read_registers(&mut self, out: &mut X86_64CoreRegs, tid: Tid) -> TargetResult<(), Self> {
        match self.registers(vcpu_of(tid)) {
            Ok(r) => {
                *out = regs::to_gdb(&r.regs, &r.sregs, &r.fpu);
                Ok(())
            }
            Err(e) => nonfatal(e),
        }
    }

    fn write_registers(&mut self, g: &X86_64CoreRegs, tid: Tid) -> TargetResult<(), Self> {
        let vcpu = vcpu_of(tid);
        let mut r = match self.registers(vcpu) {
            Ok(r) => r,
            Err(e) => return nonfatal(e),
        };
        if regs::segments_changed(g, &r.sregs) {
            return nonfatal(format!(
                "vCPU {vcpu}: segment selectors cannot be changed from gdb"
            ));
        }
        regs::from_gdb(g, &mut r.regs, &mut r.fpu);
        match self.ask(vcpu, |tx| Request::Write(Box::new(r), tx)) {
            Ok(()) => {
                self.cache[vcpu] = Some(r);
                Ok(())
            }
            Err(e) => nonfatal(e),
        }
    }

    fn read_addrs(&mut self, start: u64, data: &mut [u8], tid: Tid) -> TargetResult<usize, Self> {
        match self.read_virtual(vcpu_of(tid), start, data) {
            Ok(n) => Ok(n),
            Err(e) => nonfatal(e),
        }
    }

    fn write_addrs(&mut self, start: u64, data: &[u8], tid: Tid) -> TargetResult<(), Self> {
        self.write_virtual(vcpu_of(tid), start, data)
            .or_else(nonfatal)
    }

    fn list_active_threads(&mut self, active: &mut dyn FnMut(Tid)) -> Result<(), Self::Error> {
        for i in 0..self.hub.vcpus() {
            if self.hub.alive(i) {
                if let Some(tid) = tid_of(i) {
                    active(tid);
                }
            }
        }
        Ok(())
    }

    fn support_resume(&mut self) -> Option<MultiThreadResumeOps<'_, Self>> {
        Some(self)
    }
}

impl MultiThreadResume for GuestTarget {
    fn resume(&mut self) -> Result<(), Self::Error> {
        let n = self.hub.vcpus();
        let stepping: Vec<usize> = (0..n)
            .filter(|&i| self.actions[i] == Some(Action::Step))
            .collect();
        // Stepping one vCPU keeps the others stopped, so a step is one
        // instruction of that vCPU and nothing else moves.
        log::debug!("gdb: resume: actions {:?}", self.actions);
        let mut run: Vec<usize> = if stepping.is_empty() {
            (0..n).filter(|&i| self.actions[i].is_some()).collect()
        } else {
            stepping.clone()
        };
        if run.is_empty() && !self.locked {
            run = (0..n).collect();
        }
        for i in 0..n {
            if !self.hub.is_parked(i) {
                continue;
            }
            let step = stepping.contains(&i);
            self.hub.set_stepping(i, step);
            let debug = self.guest_debug(step);
            log::debug!(
                "gdb: vCPU {i}: guest debug control {:#x}, DR7 {:#x}",
                debug.control,
                debug.arch.debugreg[7]
            );
            self.ask(i, |tx| Request::Debug(debug, tx))
                .map_err(GdbError::Vcpu)?;
        }
        self.hub.drain_stops();
        self.cache = vec![None; n];
        for i in run {
            self.hub.release(Holder::Debugger, i);
        }
        Ok(())
    }

    fn clear_resume_actions(&mut self) -> Result<(), Self::Error> {
        self.actions = vec![None; self.hub.vcpus()];
        self.locked = false;
        Ok(())
    }

    fn set_resume_action_continue(
        &mut self,
        tid: Tid,
        _signal: Option<Signal>,
    ) -> Result<(), Self::Error> {
        self.set_action(tid, Action::Continue);
        Ok(())
    }

    fn support_single_step(&mut self) -> Option<MultiThreadSingleStepOps<'_, Self>> {
        Some(self)
    }

    fn support_scheduler_locking(&mut self) -> Option<MultiThreadSchedulerLockingOps<'_, Self>> {
        Some(self)
    }
}

impl MultiThreadSchedulerLocking for GuestTarget {
    /// Only the vCPUs given an action run: what `resume` does already
    /// (gdb's `set scheduler-locking step`, used when it steps over a
    /// breakpoint).
    fn set_resume_action_scheduler_lock(&mut self) -> Result<(), Self::Error> {
        self.locked = true;
        Ok(())
    }
}

impl MultiThreadSingleStep for GuestTarget {
    fn set_resume_action_step(
        &mut self,
        tid: Tid,
        _signal: Option<Signal>,
    ) -> Result<(), Self::Error> {
        self.set_action(tid, Action::Step);
        Ok(())
    }
}

const MONITOR_HELP: &str = "pmemvm monitor commands:\n  regs       control registers, EFER, segment bases, IDT and GDT of every stopped vCPU\n  phys on    memory addresses are guest physical\n  phys off   memory addresses are guest virtual (the vCPU's page tables; the default)";

impl MonitorCmd for GuestTarget {
    fn handle_monitor_cmd(
        &mut self,
        cmd: &[u8],
        mut out: ConsoleOutput<'_>,
    ) -> Result<(), Self::Error> {
        let cmd = String::from_utf8_lossy(cmd);
        let words: Vec<&str> = cmd.split_whitespace().collect();
        match words.as_slice() {
            ["regs"] => {
                for i in 0..self.hub.vcpus() {
                    match self.registers(i) {
                        Ok(r) => {
                            let s = &r.sregs;
                            outputln!(out, "vCPU {i}: CR0 {:#x} CR2 {:#x} CR3 {:#x} CR4 {:#x} CR8 {:#x} EFER {:#x}", s.cr0, s.cr2, s.cr3, s.cr4, s.cr8, s.efer);
                            outputln!(out, "vCPU {i}: FS base {:#x} GS base {:#x} IDT {:#x} limit {:#x} GDT {:#x} limit {:#x} APIC base {:#x}", s.fs.base, s.gs.base, s.idt.base, s.idt.limit, s.gdt.base, s.gdt.limit, s.apic_base);
                        }
                        Err(e) => outputln!(out, "vCPU {i}: {e}"),
                    }
                }
            }
            ["phys", "on"] => {
                self.physical = true;
                outputln!(out, "memory addresses are guest physical");
            }
            ["phys", "off"] => {
                self.physical = false;
                outputln!(out, "memory addresses are guest virtual");
            }
            _ => outputln!(out, "{MONITOR_HELP}"),
        }
        Ok(())
    }
}
