//! gdb's breakpoints and watchpoints on the guest: `int3`s written into
//! guest memory (at the physical address the vCPU's page tables give, the
//! replaced byte kept), hardware breakpoints and watchpoints in the four
//! debug registers of every vCPU.

use gdbstub::target::ext::breakpoints::{
    Breakpoints, HwBreakpoint, HwBreakpointOps, HwWatchpoint, HwWatchpointOps, SwBreakpoint,
    SwBreakpointOps, WatchKind,
};
use gdbstub::target::TargetResult;
use vm_memory::{Bytes, GuestAddress};

use super::regs::{HwSlot, Watch};
use super::target::{nonfatal, BreakpointMode, GuestTarget};

impl Breakpoints for GuestTarget {
    fn support_sw_breakpoint(&mut self) -> Option<SwBreakpointOps<'_, Self>> {
        Some(self)
    }
    fn support_hw_breakpoint(&mut self) -> Option<HwBreakpointOps<'_, Self>> {
        Some(self)
    }
    fn support_hw_watchpoint(&mut self) -> Option<HwWatchpointOps<'_, Self>> {
        Some(self)
    }
}

impl SwBreakpoint for GuestTarget {
    fn add_sw_breakpoint(&mut self, addr: u64, _kind: usize) -> TargetResult<bool, Self> {
        if self.sw.contains_key(&addr) {
            return Ok(true);
        }
        if !self.can_break() {
            return Ok(false);
        }
        if self.breakpoints == BreakpointMode::DebugRegisters {
            return self.add_hw(HwSlot::new(addr, 1, Watch::Execute));
        }
        let vcpu = self.any_vcpu();
        let t = match self.translate(vcpu, addr) {
            Ok(t) => t,
            Err(e) => return nonfatal(e),
        };
        let Ok(byte) = self.mem.read_obj::<u8>(GuestAddress(t.gpa)) else {
            return nonfatal(format!(
                "breakpoint at {addr:#x}: physical {:#x} is not RAM",
                t.gpa
            ));
        };
        if self.mem.write_obj(0xccu8, GuestAddress(t.gpa)).is_err() {
            return nonfatal(format!(
                "breakpoint at {addr:#x}: cannot write physical {:#x}",
                t.gpa
            ));
        }
        self.sw.insert(addr, (t.gpa, byte));
        self.publish_breakpoints();
        Ok(true)
    }

    fn remove_sw_breakpoint(&mut self, addr: u64, _kind: usize) -> TargetResult<bool, Self> {
        if self.breakpoints == BreakpointMode::DebugRegisters {
            return self.remove_hw(addr, Watch::Execute);
        }
        let Some((gpa, byte)) = self.sw.remove(&addr) else {
            return Ok(false);
        };
        self.publish_breakpoints();
        match self.mem.write_obj(byte, GuestAddress(gpa)) {
            Ok(()) => Ok(true),
            Err(_) => nonfatal(format!(
                "breakpoint at {addr:#x}: cannot restore physical {gpa:#x}"
            )),
        }
    }
}

impl HwBreakpoint for GuestTarget {
    fn add_hw_breakpoint(&mut self, addr: u64, _kind: usize) -> TargetResult<bool, Self> {
        self.add_hw(HwSlot::new(addr, 1, Watch::Execute))
    }
    fn remove_hw_breakpoint(&mut self, addr: u64, _kind: usize) -> TargetResult<bool, Self> {
        self.remove_hw(addr, Watch::Execute)
    }
}

fn watch_of(kind: WatchKind) -> Option<Watch> {
    match kind {
        WatchKind::Write => Some(Watch::Write),
        WatchKind::ReadWrite => Some(Watch::Access),
        // x86 debug registers cannot watch reads alone.
        WatchKind::Read => None,
    }
}

impl HwWatchpoint for GuestTarget {
    fn add_hw_watchpoint(
        &mut self,
        addr: u64,
        len: u64,
        kind: WatchKind,
    ) -> TargetResult<bool, Self> {
        let slot = watch_of(kind).and_then(|w| HwSlot::new(addr, len, w));
        self.add_hw(slot)
    }
    fn remove_hw_watchpoint(
        &mut self,
        addr: u64,
        _len: u64,
        kind: WatchKind,
    ) -> TargetResult<bool, Self> {
        match watch_of(kind) {
            Some(w) => self.remove_hw(addr, w),
            None => Ok(false),
        }
    }
}
