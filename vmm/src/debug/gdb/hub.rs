//! Where the debugger's thread and the vCPU threads meet. A vCPU thread
//! parks here when the debugger holds it (an interrupt, another vCPU's
//! breakpoint, `--gdb-wait`) or when its own exit is a debug event; while
//! parked it serves the debugger's requests on its `VcpuFd` (registers,
//! debug registers, resume) — KVM's vCPU calls stay on the vCPU's thread.
//! The debugger's thread holds every vCPU, kicks those in `KVM_RUN` out with
//! the kick signal and waits until all are parked before it answers gdb.
//!
//! The debugger is not the only one that stops vCPUs: the control socket's
//! `pause` and a memory dump (`ctl dump`, `--dump-on-panic`) do too. Each
//! holds by its name ([`Holder`]) and releases only its own hold; a vCPU
//! runs when nobody holds it, so `resume` never lets go of vCPUs a dump is
//! reading, and a dump's end never resumes a paused guest.

use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use kvm_bindings::{kvm_fpu, kvm_guest_debug, kvm_regs, kvm_sregs};

/// Why a vCPU parked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopCause {
    /// The debugger held it (interrupt, `--gdb-wait`, another vCPU stopped).
    Held,
    /// One instruction was stepped.
    Step,
    /// It reached one of the debugger's `int3` breakpoints.
    SwBreak,
    /// A debug register it watched fired (slot 0..3).
    DebugRegister(usize),
}

/// A parked vCPU's stop, for the debugger.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stop {
    /// vCPU index.
    pub vcpu: usize,
    /// Why.
    pub cause: StopCause,
}

/// A vCPU's registers as the debugger sees them.
#[derive(Debug, Clone, Copy, Default)]
pub struct CpuRegisters {
    /// General registers.
    pub regs: kvm_regs,
    /// Segment and control registers.
    pub sregs: kvm_sregs,
    /// x87/SSE state.
    pub fpu: kvm_fpu,
}

/// What the debugger asks of a parked vCPU; each carries where the answer goes.
#[derive(Debug)]
pub enum Request {
    /// Read the registers.
    Read(Sender<Result<CpuRegisters, String>>),
    /// Write general registers and FPU state.
    Write(Box<CpuRegisters>, Sender<Result<(), String>>),
    /// Set `KVM_SET_GUEST_DEBUG`.
    Debug(kvm_guest_debug, Sender<Result<(), String>>),
    /// Leave the park and run the guest.
    Resume,
}

/// Who holds a vCPU; a vCPU is held while anyone does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Holder {
    /// gdb (an interrupt, a breakpoint, `--gdb-wait`).
    Debugger,
    /// The control socket's `pause`, until its `resume`.
    Pause,
    /// A memory dump being written.
    Dump,
}

impl Holder {
    fn bit(self) -> u8 {
        match self {
            Self::Debugger => 1,
            Self::Pause => 2,
            Self::Dump => 4,
        }
    }
}

#[derive(Debug)]
struct Slot {
    /// Who holds the vCPU ([`Holder::bit`]s).
    hold: AtomicU8,
    parked: AtomicBool,
    stepping: AtomicBool,
    requests: Sender<Request>,
    inbox: Mutex<Receiver<Request>>,
}

/// The meeting point (one per VM with `--gdb`).
#[derive(Debug)]
pub struct DebugHub {
    slots: Vec<Slot>,
    stops: Sender<Stop>,
    stop_inbox: Mutex<Receiver<Stop>>,
    /// The vCPU threads, to kick (None once a thread left its loop).
    threads: Mutex<Vec<Option<libc::pthread_t>>>,
    /// Linear addresses of the debugger's `int3` breakpoints.
    sw_breakpoints: Mutex<Vec<u64>>,
    /// Debug registers in use (bit i: DRi).
    hw_slots: AtomicU8,
}

/// How long a parked vCPU waits for a request before it looks at the VM's
/// stop flag again.
const PARK_POLL: Duration = Duration::from_millis(50);

impl DebugHub {
    /// A hub for `vcpus` vCPUs; with `hold`, each parks before its first
    /// `KVM_RUN`, held by the debugger (`--gdb-wait`).
    pub fn new(vcpus: usize, hold: bool) -> Self {
        let (stops, stop_inbox) = channel();
        let slots = (0..vcpus)
            .map(|_| {
                let (requests, inbox) = channel();
                Slot {
                    hold: AtomicU8::new(if hold { Holder::Debugger.bit() } else { 0 }),
                    parked: AtomicBool::new(false),
                    stepping: AtomicBool::new(false),
                    requests,
                    inbox: Mutex::new(inbox),
                }
            })
            .collect();
        Self {
            slots,
            stops,
            stop_inbox: Mutex::new(stop_inbox),
            threads: Mutex::new(vec![None; vcpus]),
            sw_breakpoints: Mutex::new(Vec::new()),
            hw_slots: AtomicU8::new(0),
        }
    }

    /// Number of vCPUs.
    pub fn vcpus(&self) -> usize {
        self.slots.len()
    }

    // ---- the vCPU's side ----

    /// Registers the calling thread as vCPU `index`'s (to be kicked) until
    /// the returned guard drops.
    pub fn enter(&self, index: usize) -> ThreadGuard<'_> {
        if let Ok(mut t) = self.threads.lock() {
            if let Some(slot) = t.get_mut(index) {
                // SAFETY: pthread_self has no arguments and cannot fail.
                *slot = Some(unsafe { libc::pthread_self() });
            }
        }
        ThreadGuard { hub: self, index }
    }

    /// True when anyone wants vCPU `index` parked.
    pub fn held(&self, index: usize) -> bool {
        self.slots
            .get(index)
            .is_some_and(|s| s.hold.load(Ordering::SeqCst) != 0)
    }

    /// True when `holder` holds vCPU `index`.
    pub fn held_by(&self, index: usize, holder: Holder) -> bool {
        self.slots
            .get(index)
            .is_some_and(|s| s.hold.load(Ordering::SeqCst) & holder.bit() != 0)
    }

    /// Announces that vCPU `index` parked for `cause`; a debug event (step,
    /// breakpoint, watchpoint) holds it for the debugger.
    pub fn parked(&self, index: usize, cause: StopCause) {
        if let Some(s) = self.slots.get(index) {
            if cause != StopCause::Held {
                s.hold.fetch_or(Holder::Debugger.bit(), Ordering::SeqCst);
            }
            s.parked.store(true, Ordering::SeqCst);
        }
        let _ = self.stops.send(Stop { vcpu: index, cause });
    }

    /// The next request for parked vCPU `index`, waiting a little.
    pub fn next_request(&self, index: usize) -> Option<Request> {
        let slot = self.slots.get(index)?;
        let inbox = slot.inbox.lock().ok()?;
        inbox.recv_timeout(PARK_POLL).ok()
    }

    /// vCPU `index` left its park.
    pub fn unparked(&self, index: usize) {
        if let Some(s) = self.slots.get(index) {
            s.parked.store(false, Ordering::SeqCst);
        }
    }

    /// True when `linear` is one of the debugger's breakpoints.
    pub fn is_sw_breakpoint(&self, linear: u64) -> bool {
        self.sw_breakpoints
            .lock()
            .is_ok_and(|b| b.contains(&linear))
    }

    /// True when the debugger uses debug register `slot`.
    pub fn uses_slot(&self, slot: usize) -> bool {
        slot < 4 && self.hw_slots.load(Ordering::SeqCst) & (1 << slot) != 0
    }

    /// True when the debugger asked vCPU `index` to step.
    pub fn stepping(&self, index: usize) -> bool {
        self.slots
            .get(index)
            .is_some_and(|s| s.stepping.load(Ordering::SeqCst))
    }

    // ---- the debugger's side ----

    /// Records which debug registers are in use (bit i: DRi).
    pub fn set_hw_slots(&self, mask: u8) {
        self.hw_slots.store(mask, Ordering::SeqCst);
    }

    /// Records whether vCPU `index` steps when it next runs.
    pub fn set_stepping(&self, index: usize, step: bool) {
        if let Some(s) = self.slots.get(index) {
            s.stepping.store(step, Ordering::SeqCst);
        }
    }

    /// Records the debugger's `int3` breakpoints (linear addresses).
    pub fn set_sw_breakpoints(&self, linear: Vec<u64>) {
        if let Ok(mut b) = self.sw_breakpoints.lock() {
            *b = linear;
        }
    }

    /// Holds every vCPU for `holder` and waits until each is parked or has
    /// left its loop; the vCPUs still running after `deadline` are the error
    /// (still held: the caller releases them).
    pub fn hold_all(
        &self,
        holder: Holder,
        kick: libc::c_int,
        deadline: Duration,
    ) -> Result<(), Vec<usize>> {
        let all: Vec<usize> = (0..self.slots.len()).collect();
        self.hold_some(holder, &all, kick, deadline)
    }

    /// As [`Self::hold_all`] for the vCPUs in `indices` only (a vCPU that
    /// takes a dump holds the others).
    pub fn hold_some(
        &self,
        holder: Holder,
        indices: &[usize],
        kick: libc::c_int,
        deadline: Duration,
    ) -> Result<(), Vec<usize>> {
        for &i in indices {
            if let Some(s) = self.slots.get(i) {
                s.hold.fetch_or(holder.bit(), Ordering::SeqCst);
            }
        }
        let end = Instant::now() + deadline;
        loop {
            let running: Vec<usize> = {
                let threads = self.threads.lock().map_err(|_| Vec::new())?;
                indices
                    .iter()
                    .copied()
                    .filter(|&i| {
                        threads.get(i).is_some_and(Option::is_some)
                            && !self.slots[i].parked.load(Ordering::SeqCst)
                    })
                    .collect()
            };
            if running.is_empty() {
                return Ok(());
            }
            if Instant::now() >= end {
                return Err(running);
            }
            self.kick(&running, kick);
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    fn kick(&self, indices: &[usize], signal: libc::c_int) {
        let Ok(threads) = self.threads.lock() else {
            return;
        };
        for &i in indices {
            if let Some(Some(t)) = threads.get(i) {
                // SAFETY: `t` is the pthread_t of a vCPU thread still inside
                // its loop: its guard removes it under this same lock before
                // the thread can end, so the thread exists. The kick
                // signal's handler only sets `immediate_exit`.
                let rc = unsafe { libc::pthread_kill(*t, signal) };
                if rc != 0 {
                    log::debug!("kicking vCPU {i} for the debugger failed: {rc}");
                }
            }
        }
    }

    /// The next stop a vCPU announced, waiting up to `timeout`.
    pub fn next_stop(&self, timeout: Duration) -> Option<Stop> {
        let inbox = self.stop_inbox.lock().ok()?;
        inbox.recv_timeout(timeout).ok()
    }

    /// Drops the stops announced so far (the debugger has accounted for
    /// every vCPU's state another way).
    pub fn drain_stops(&self) {
        while self.next_stop(Duration::ZERO).is_some() {}
    }

    /// True when vCPU `index` is parked (answers requests).
    pub fn is_parked(&self, index: usize) -> bool {
        self.slots
            .get(index)
            .is_some_and(|s| s.parked.load(Ordering::SeqCst))
    }

    /// Sends `request` to parked vCPU `index`.
    pub fn send(&self, index: usize, request: Request) -> Result<(), String> {
        let slot = self
            .slots
            .get(index)
            .ok_or_else(|| format!("there is no vCPU {index}"))?;
        if !slot.parked.load(Ordering::SeqCst) {
            return Err(format!("vCPU {index} is not stopped"));
        }
        slot.requests
            .send(request)
            .map_err(|_| format!("vCPU {index} has ended"))
    }

    /// Takes `holder`'s hold off vCPU `index`, and wakes it when nobody
    /// else holds it.
    pub fn release(&self, holder: Holder, index: usize) {
        if let Some(s) = self.slots.get(index) {
            let before = s.hold.fetch_and(!holder.bit(), Ordering::SeqCst);
            if before & !holder.bit() == 0 {
                let _ = s.requests.send(Request::Resume);
            }
        }
    }

    /// Takes `holder`'s hold off every vCPU.
    pub fn release_all(&self, holder: Holder) {
        for i in 0..self.slots.len() {
            self.release(holder, i);
        }
    }

    /// True when vCPU `index`'s thread is inside its loop.
    pub fn alive(&self, index: usize) -> bool {
        self.threads
            .lock()
            .is_ok_and(|t| t.get(index).is_some_and(Option::is_some))
    }
}

/// Unregisters a vCPU thread when its loop ends.
#[derive(Debug)]
pub struct ThreadGuard<'a> {
    hub: &'a DebugHub,
    index: usize,
}

impl Drop for ThreadGuard<'_> {
    fn drop(&mut self) {
        if let Ok(mut t) = self.hub.threads.lock() {
            if let Some(slot) = t.get_mut(self.index) {
                *slot = None;
            }
        }
        if let Some(s) = self.hub.slots.get(self.index) {
            s.parked.store(false, Ordering::SeqCst);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// A hub of two vCPU stand-ins ([`vcpu`]), both running; the flag ends them.
    fn two_running_vcpus() -> (
        Arc<DebugHub>,
        Arc<AtomicBool>,
        Vec<std::thread::JoinHandle<u32>>,
    ) {
        let hub = Arc::new(DebugHub::new(2, false));
        let end = Arc::new(AtomicBool::new(false));
        let threads = (0..2).map(|i| vcpu(hub.clone(), i, end.clone())).collect();
        while !(hub.alive(0) && hub.alive(1)) {
            std::thread::sleep(Duration::from_millis(1));
        }
        (hub, end, threads)
    }

    /// A vCPU stand-in: runs (sleeps) until held, then parks and serves
    /// requests until resumed; ends when `end` is set.
    fn vcpu(
        hub: Arc<DebugHub>,
        index: usize,
        end: Arc<AtomicBool>,
    ) -> std::thread::JoinHandle<u32> {
        std::thread::spawn(move || {
            let _g = hub.enter(index);
            let mut resumes = 0;
            while !end.load(Ordering::SeqCst) {
                if hub.held(index) {
                    hub.parked(index, StopCause::Held);
                    loop {
                        match hub.next_request(index) {
                            Some(Request::Resume) => {
                                resumes += 1;
                                break;
                            }
                            Some(Request::Read(tx)) => {
                                let mut r = CpuRegisters::default();
                                r.regs.rip = 0x1000 + index as u64;
                                let _ = tx.send(Ok(r));
                            }
                            Some(_) => {}
                            None if end.load(Ordering::SeqCst) => return resumes,
                            None => {}
                        }
                    }
                    hub.unparked(index);
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            resumes
        })
    }

    #[test]
    fn hold_all_parks_every_vcpu_and_release_lets_them_run() {
        // The kick handler must be installed for the signal not to end the process.
        let _set = crate::vstate::vcpu::VcpuSet::new().unwrap();
        let (hub, end, threads) = two_running_vcpus();
        hub.hold_all(
            Holder::Debugger,
            crate::signals::kick_signal(),
            Duration::from_secs(5),
        )
        .unwrap();
        assert!(hub.is_parked(0) && hub.is_parked(1));
        let (tx, rx) = channel();
        hub.send(1, Request::Read(tx)).unwrap();
        assert_eq!(rx.recv().unwrap().unwrap().regs.rip, 0x1001);
        hub.release(Holder::Debugger, 0);
        hub.release(Holder::Debugger, 1);
        while hub.is_parked(0) || hub.is_parked(1) {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(
            hub.send(0, Request::Resume).is_err(),
            "a running vCPU takes no request"
        );
        end.store(true, Ordering::SeqCst);
        for t in threads {
            assert_eq!(t.join().unwrap(), 1);
        }
        assert!(!hub.alive(0), "a vCPU that ended is not waited for");
        assert_eq!(
            hub.hold_all(
                Holder::Pause,
                crate::signals::kick_signal(),
                Duration::from_millis(10)
            ),
            Ok(())
        );
    }

    #[test]
    fn each_holder_releases_only_its_own_hold() {
        // The kick handler must be installed for the signal not to end the process.
        let _set = crate::vstate::vcpu::VcpuSet::new().unwrap();
        let (hub, end, threads) = two_running_vcpus();
        let kick = crate::signals::kick_signal();
        let long = Duration::from_secs(5);
        // A dump (--dump-on-panic, taken by vCPU 0) holds vCPU 1 ...
        hub.hold_some(Holder::Dump, &[1], kick, long).unwrap();
        // ... while the control socket pauses and resumes the guest.
        hub.hold_all(Holder::Pause, kick, long).unwrap();
        hub.release_all(Holder::Pause);
        let settle = Instant::now() + Duration::from_millis(200);
        while Instant::now() < settle {
            assert!(hub.is_parked(1), "resume let go of the dump's vCPU");
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(hub.held_by(1, Holder::Dump) && !hub.held_by(1, Holder::Pause));
        while hub.is_parked(0) {
            std::thread::sleep(Duration::from_millis(1));
        }
        // A pause during the dump outlives the dump.
        hub.hold_all(Holder::Pause, kick, long).unwrap();
        hub.release(Holder::Dump, 1);
        std::thread::sleep(Duration::from_millis(100));
        assert!(
            hub.is_parked(0) && hub.is_parked(1),
            "the guest stays paused"
        );
        hub.release_all(Holder::Pause);
        while hub.is_parked(0) || hub.is_parked(1) {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(!hub.held(0) && !hub.held(1));
        end.store(true, Ordering::SeqCst);
        for t in threads {
            t.join().unwrap();
        }
    }

    #[test]
    fn a_vcpu_that_never_parks_is_named() {
        let hub = Arc::new(DebugHub::new(1, false));
        let h = hub.clone();
        let (ready_tx, ready_rx) = channel();
        let t = std::thread::spawn(move || {
            let _g = h.enter(0);
            let _ = ready_tx.send(());
            std::thread::sleep(Duration::from_millis(300));
        });
        ready_rx.recv().unwrap();
        // The kick handler must be installed for the signal not to end the process.
        let _set = crate::vstate::vcpu::VcpuSet::new().unwrap();
        assert_eq!(
            hub.hold_all(
                Holder::Debugger,
                crate::signals::kick_signal(),
                Duration::from_millis(50)
            ),
            Err(vec![0])
        );
        t.join().unwrap();
    }

    #[test]
    fn breakpoints_are_known_by_linear_address() {
        let hub = DebugHub::new(1, true);
        assert!(hub.held(0), "--gdb-wait holds from the start");
        hub.set_sw_breakpoints(vec![0xffff_ffff_8100_0000]);
        assert!(hub.is_sw_breakpoint(0xffff_ffff_8100_0000));
        assert!(!hub.is_sw_breakpoint(0xffff_ffff_8100_0001));
    }
}
