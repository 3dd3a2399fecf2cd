//! vCPU threads: each runs `KVM_RUN` and dispatches its exits by bus lookup;
//! [`VcpuSet`] starts them, kicks them out of `KVM_RUN` (see
//! [`crate::signals`]) and joins them within a deadline.
//!
//! The memslots point into mappings the `Vm` owns, so no vCPU may still be
//! in `KVM_RUN` when they are unmapped: every path out of `Vm::run` goes
//! through [`VcpuSet::stop_and_join`], and a `VcpuSet` dropped with threads
//! still registered (an unwinding panic) stops them first. A vCPU that does
//! not return within the deadline is reported by index; its VM's memory is
//! then left mapped until the process exits.

use std::cell::Cell;
use std::collections::BTreeSet;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use devices::bus::Bus;
use devices::exit::{ExitNotifier, ExitRequest};
use kvm_bindings::kvm_run;
use kvm_ioctls::{VcpuExit, VcpuFd};
use vm_memory::GuestMemoryMmap;
use vmm_sys_util::signal::{register_signal_handler, Killable};

use crate::fault::Faults;
pub use crate::nvdimm::dimm_fault::{memory_fault, DimmRange};
use crate::stats::ExitStats;

thread_local! {
    /// This thread's `kvm_run` while its vCPU loop runs (null otherwise),
    /// for the kick handler. Const-initialised and without a destructor, so
    /// reading it in a signal handler allocates nothing and cannot fail.
    static KVM_RUN: Cell<*mut kvm_run> = const { Cell::new(std::ptr::null_mut()) };
}

extern "C" fn on_kick(_: libc::c_int, _: *mut libc::siginfo_t, _: *mut libc::c_void) {
    let run = KVM_RUN.with(Cell::get);
    if !run.is_null() {
        // SAFETY: a non-null value was set by this thread's vCPU loop to its
        // own VcpuFd's kvm_run mapping and is cleared before that loop ends
        // (and so before the VcpuFd and its mapping go away). The store is
        // a single volatile byte, what `set_kvm_immediate_exit` writes too.
        unsafe { std::ptr::addr_of_mut!((*run).immediate_exit).write_volatile(1) };
    }
    std::sync::atomic::fence(Ordering::SeqCst);
}

/// Clears [`KVM_RUN`] when the vCPU loop ends, however it ends.
struct KvmRunRegistration;

impl KvmRunRegistration {
    fn new(vcpu: &mut VcpuFd) -> Self {
        let run: *mut kvm_run = vcpu.get_kvm_run();
        KVM_RUN.with(|c| c.set(run));
        Self
    }
}

impl Drop for KvmRunRegistration {
    fn drop(&mut self) {
        KVM_RUN.with(|c| c.set(std::ptr::null_mut()));
    }
}

/// How long stopping waits for every vCPU to leave `KVM_RUN`.
pub const STOP_DEADLINE: Duration = Duration::from_secs(5);

/// Sends the vCPU's index when its thread body ends (also by a panic).
struct Done(Sender<usize>, usize);

impl Drop for Done {
    fn drop(&mut self) {
        let _ = self.0.send(self.1);
    }
}

/// The started vCPU threads and their stop flag.
#[derive(Debug)]
pub struct VcpuSet {
    threads: Vec<(usize, JoinHandle<()>)>,
    stop: Arc<AtomicBool>,
    done_tx: Sender<usize>,
    done_rx: Receiver<usize>,
    finished: BTreeSet<usize>,
}

impl VcpuSet {
    /// An empty set; installs the kick handler (stateless, so installing it
    /// again for the next VM changes nothing).
    pub fn new() -> std::io::Result<Self> {
        register_signal_handler(crate::signals::kick_signal(), on_kick)
            .map_err(|e| std::io::Error::from_raw_os_error(e.errno()))?;
        let (done_tx, done_rx) = channel();
        Ok(Self {
            threads: Vec::new(),
            stop: Arc::new(AtomicBool::new(false)),
            done_tx,
            done_rx,
            finished: BTreeSet::new(),
        })
    }

    /// The flag the threads check before every `KVM_RUN`.
    pub fn stop_flag(&self) -> Arc<AtomicBool> {
        self.stop.clone()
    }

    /// Kicks the threads of `indices` out of `KVM_RUN` once, without asking
    /// them to stop: they record their registers and go back into the guest
    /// (SIGQUIT's report).
    pub fn kick(&self, indices: &[usize]) {
        for (i, t) in &self.threads {
            if indices.contains(i) {
                if let Err(e) = t.kill(crate::signals::kick_signal()) {
                    log::debug!("kicking vCPU {i} failed: {e}");
                }
            }
        }
    }

    /// Starts thread `vcpu<index>` running `body`.
    pub fn spawn(
        &mut self,
        index: usize,
        body: impl FnOnce() + Send + 'static,
    ) -> std::io::Result<()> {
        let done = Done(self.done_tx.clone(), index);
        let handle = std::thread::Builder::new()
            .name(format!("vcpu{index}"))
            .spawn(move || {
                let _done = done;
                body();
            })?;
        self.threads.push((index, handle));
        Ok(())
    }

    /// Number of started threads not yet joined.
    pub fn len(&self) -> usize {
        self.threads.len()
    }

    /// True when no thread is started (or all were joined).
    pub fn is_empty(&self) -> bool {
        self.threads.is_empty()
    }

    /// Sets the stop flag, kicks every thread once and joins those that
    /// return within `deadline`; the indices of the others are the error
    /// (their threads are left running, detached).
    pub fn stop_and_join(&mut self, deadline: Duration) -> Result<(), Vec<usize>> {
        self.stop.store(true, Ordering::SeqCst);
        for (i, t) in &self.threads {
            if let Err(e) = t.kill(crate::signals::kick_signal()) {
                log::debug!("kicking vCPU {i} failed: {e}");
            }
        }
        let end = Instant::now() + deadline;
        while self.finished.len() < self.threads.len() {
            let left = end.saturating_duration_since(Instant::now());
            match self.done_rx.recv_timeout(left) {
                Ok(i) => {
                    self.finished.insert(i);
                }
                Err(_) => break,
            }
        }
        let mut stuck = Vec::new();
        for (i, t) in self.threads.drain(..) {
            if self.finished.contains(&i) {
                // Its body has returned; join only reaps the thread.
                let _ = t.join();
            } else {
                stuck.push(i);
            }
        }
        if stuck.is_empty() {
            Ok(())
        } else {
            Err(stuck)
        }
    }
}

impl Drop for VcpuSet {
    /// Reached with threads only when a panic unwinds through `Vm::run`:
    /// stop them before the VM's memory goes; if one cannot be stopped the
    /// process ends here rather than unmap memory under a running vCPU.
    fn drop(&mut self) {
        if self.threads.is_empty() {
            return;
        }
        if let Err(stuck) = self.stop_and_join(STOP_DEADLINE) {
            eprintln!(
                "pmemvm: vCPU {stuck:?} did not leave KVM_RUN within {} s; exiting",
                STOP_DEADLINE.as_secs()
            );
            std::process::exit(crate::exit_status::VCPU_FAILURE.into());
        }
    }
}

/// Everything one vCPU thread needs.
#[derive(Debug)]
pub struct VcpuContext {
    /// vCPU index.
    pub index: usize,
    /// Its fd.
    pub vcpu: VcpuFd,
    /// Port I/O bus.
    pub pio: Arc<Bus>,
    /// MMIO bus.
    pub mmio: Arc<Bus>,
    /// Where exit requests go.
    pub exit: Arc<ExitNotifier>,
    /// Exit counters.
    pub stats: Arc<ExitStats>,
    /// Set when the VM stops.
    pub stop: Arc<AtomicBool>,
    /// The DIMMs' guest ranges.
    pub dimms: Arc<Vec<DimmRange>>,
    /// Guest RAM (for instruction bytes in error reports).
    pub mem: GuestMemoryMmap,
    /// Injected faults (tests).
    pub faults: Faults,
    /// What this thread is doing, for a report when the VM is stopped.
    pub status: Arc<crate::vstate::vcpu_status::VcpuStatus>,
    /// Where the debugger meets this vCPU (`--gdb`, and the control
    /// socket's pause and dump).
    pub debug: Option<Arc<crate::debug::gdb::hub::DebugHub>>,
    /// The pvpanic device (the guest kernel reports its panic there).
    pub pvpanic: Arc<crate::pvpanic::PvPanic>,
    /// The guest's CPU vendor when a DIMM has `mce=on` (how its machine
    /// checks are written).
    pub mce_vendor: Option<crate::nvdimm::mce::deliver::Vendor>,
    /// With a recorded DIMM: where this vCPU stops while an epoch is taken.
    pub epoch_gate: Option<Arc<crate::nvdimm::record::instant::EpochGate>>,
    /// The VM's vCPU threads (this one registers itself).
    pub threads: Arc<crate::vstate::vcpu_threads::VcpuThreads>,
    /// An Intel guest's machine checks reach every vCPU.
    pub mce_broadcast: Option<Arc<crate::nvdimm::mce::broadcast::McBroadcast>>,
}

/// A panic payload as text.
fn panic_text(payload: &(dyn std::any::Any + Send)) -> &str {
    payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)")
}

impl VcpuContext {
    /// The thread body: runs until the VM stops; a panic becomes a fatal
    /// exit request, so the VM still ends in order (stop, fdatasync).
    pub fn run(self) {
        let exit = self.exit.clone();
        let index = self.index;
        if let Err(p) = std::panic::catch_unwind(AssertUnwindSafe(|| self.run_loop())) {
            exit.request(ExitRequest::Fatal(format!(
                "vCPU {index} failed: pmemvm bug: {}",
                panic_text(p.as_ref())
            )));
        }
    }

    fn run_loop(mut self) {
        struct Done<'a>(&'a crate::vstate::vcpu_status::VcpuStatus);
        impl Drop for Done<'_> {
            fn drop(&mut self) {
                self.0.done();
            }
        }
        let status = self.status.clone();
        let _done = Done(&status);
        let _registered = KvmRunRegistration::new(&mut self.vcpu);
        let hub = self.debug.clone();
        let _debugged = hub.as_deref().map(|h| h.enter(self.index));
        let threads = self.threads.clone();
        let _kickable = threads.enter(self.index);
        let gate = self.epoch_gate.clone();
        let _out_at_end = gate
            .as_deref()
            .map(|g| crate::nvdimm::record::instant::LeftAtEnd(g, self.index));
        if self.index == 0 {
            if let Some(us) = crate::stats::micros_since_start() {
                log::info!("startup: first KVM_RUN {us} us after main");
            }
        }
        loop {
            if self.stop.load(Ordering::SeqCst) {
                if self.faults.vcpu_ignores_stop {
                    log::warn!("fault injection: vCPU {} ignores the stop", self.index);
                    loop {
                        std::thread::sleep(Duration::from_secs(3600));
                    }
                }
                return;
            }
            if let Some(h) = hub.as_deref() {
                if h.held(self.index) {
                    self.status
                        .in_exit(crate::vstate::vcpu_status::Exit::Parked, 0);
                    let cause = crate::debug::gdb::hub::StopCause::Held;
                    crate::debug::gdb::vcpu_side::park(
                        h, self.index, &self.vcpu, cause, &self.stop,
                    );
                    continue;
                }
            }
            if let Some(b) = &self.mce_broadcast {
                if let Some(request) =
                    crate::nvdimm::mce::vcpu_side::take_broadcast(self.index, &self.vcpu, b)
                {
                    self.exit.request(request);
                    return;
                }
            }
            if let Some(request) = self.run_once() {
                self.exit.request(request);
                return;
            }
        }
    }

    /// One KVM_RUN; returns a request when the VM must end.
    fn run_once(&mut self) -> Option<ExitRequest> {
        self.status.in_guest();
        if let Some(g) = &self.epoch_gate {
            g.enter_guest(self.index);
        }
        let ran = self.vcpu.run();
        if let Some(g) = &self.epoch_gate {
            g.left_guest(self.index);
        }
        // A locked instruction's hold on a hole lasts until its write (a kick
        // in between keeps it).
        let rmw_goes_on = match &ran {
            Ok(VcpuExit::MmioWrite(..)) => true,
            Err(e) => e.errno() == libc::EINTR || e.errno() == libc::EAGAIN,
            Ok(_) => false,
        };
        if !rmw_goes_on {
            crate::nvdimm::mce::vcpu_side::release_holes(self.index, &self.dimms);
        }
        match ran {
            Ok(VcpuExit::IoIn(port, data)) => {
                let (ptr, len) = (data.as_mut_ptr(), data.len());
                self.port_in(port, ptr, len)
            }
            Ok(VcpuExit::IoOut(port, data)) => {
                let (ptr, len) = (data.as_ptr(), data.len());
                self.port_out(port, ptr, len)
            }
            Ok(VcpuExit::MmioRead(addr, data)) => {
                self.status.in_exit(crate::vstate::vcpu_status::Exit::MmioRead, addr);
                ExitStats::bump(&self.stats.mmio_read);
                // A DIMM page KVM could not read (e.g. a hole the full host
                // file system cannot back) comes here instead of the guest.
                let Some(d) = self.dimms.iter().find(|d| d.contains(addr)) else {
                    if self.mmio.read(addr, data).is_err() {
                        self.stats.unclaimed_access(self.index, "mmio-read", addr);
                    }
                    return None;
                };
                let Some(p) = d.poison.clone() else {
                    return Some(d.storage_failure(self.index, "read", addr));
                };
                // mce=on: a hole around a poisoned page.
                let len = data.len();
                if let Err(e) = crate::nvdimm::mce::vcpu_side::hole_fill(self.index, &p, addr, data) {
                    return Some(e);
                }
                self.hole_read(&p, addr, len)
            }
            Ok(VcpuExit::MmioWrite(addr, data)) => {
                // MMIO carries at most 8 bytes (kvm_run's mmio.data).
                let mut bytes = [0u8; 8];
                let n = data.len().min(bytes.len());
                bytes[..n].copy_from_slice(&data[..n]);
                self.mmio_write(addr, &bytes[..n])
            }
            Ok(VcpuExit::Hlt) => {
                ExitStats::bump(&self.stats.hlt);
                None
            }
            Ok(VcpuExit::Shutdown) => self.triple_fault(),
            Ok(VcpuExit::SystemEvent(kind, _)) => Some(self.system_event(kind)),
            Ok(VcpuExit::Debug(arch)) => self.debug_exit(&arch),
            Ok(VcpuExit::MemoryFault { gpa, size, .. }) => {
                Some(memory_fault(self.index, &self.dimms, gpa, size))
            }
            Ok(VcpuExit::InternalError) => match self.fetch_from_poison() {
                Some(raised) => raised,
                None => Some(ExitRequest::Fatal(self.internal_error())),
            },
            Ok(VcpuExit::FailEntry(reason, cpu)) => Some(ExitRequest::Fatal(format!(
                "vCPU {} could not enter the guest (hardware entry failure reason {reason:#x} on host CPU {cpu})",
                self.index
            ))),
            Ok(other) => {
                ExitStats::bump(&self.stats.other);
                Some(ExitRequest::Fatal(format!(
                    "vCPU {} stopped on an exit pmemvm does not handle: {other:?}",
                    self.index
                )))
            }
            Err(e) => self.kvm_run_error(&e),
        }
    }

    /// A `KVM_EXIT_DEBUG`: parks for the debugger, or gives the guest its
    /// own exception back.
    fn debug_exit(&mut self, arch: &kvm_bindings::kvm_debug_exit_arch) -> Option<ExitRequest> {
        let Some(hub) = self.debug.clone() else {
            return Some(ExitRequest::Fatal(format!(
                "vCPU {} stopped on a debug exit with no debugger attached",
                self.index
            )));
        };
        match crate::debug::gdb::vcpu_side::debug_exit(&hub, &self.vcpu, self.index, arch) {
            Ok(Some(cause)) => {
                self.status
                    .in_exit(crate::vstate::vcpu_status::Exit::Parked, 0);
                crate::debug::gdb::vcpu_side::park(&hub, self.index, &self.vcpu, cause, &self.stop);
                None
            }
            Ok(None) => None,
            Err(e) => Some(ExitRequest::Fatal(format!("vCPU {}: {e}", self.index))),
        }
    }
}

#[cfg(test)]
#[path = "vcpu_tests.rs"]
mod tests;
