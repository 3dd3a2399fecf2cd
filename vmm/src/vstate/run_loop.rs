//! Running a built [`Vm`] to its end: one event loop on the calling thread
//! (rust-vmm's event-manager) and one thread per vCPU.
//!
//! The loop's subscribers: the exit notifier's eventfd (devices and vCPUs
//! post their [`ExitRequest`] there), a signalfd for SIGINT/SIGTERM/SIGHUP
//! ([`StopSignals`], blocked on this thread before any vCPU thread starts),
//! stdin for the console ([`ConsoleInput`], with the terminal in raw mode
//! for the run) and, for `pmemvm run`, a timerfd watchdog. The loop runs
//! until a request is recorded. Then, on every path — also when a vCPU
//! thread could not be started —
//!
//! 1. every started vCPU is kicked once and joined within
//!    [`STOP_DEADLINE`]; one that does not return is named, and the VM's
//!    memory is left mapped (never unmapped under a live memslot) until the
//!    process exits;
//! 2. every writable backing file is fdatasynced, within [`SYNC_DEADLINE`]
//!    for all of them; a sync that does not finish is named (status 6);
//! 3. the request becomes the [`RunOutcome`].

use std::sync::atomic::{AtomicBool, Ordering as AtomicOrdering};
use std::sync::Arc;
use std::time::Duration;

use devices::exit::{ExitNotifier, ExitRequest};
use event_manager::{EventManager, EventOps, EventSet, Events, MutEventSubscriber, SubscriberOps};
use vmm_sys_util::timerfd::TimerFd;

use crate::console::{ConsoleInput, RawTerminal};
use crate::fault::Faults;
use crate::signals::StopSignals;
use crate::vstate::vcpu::{DimmRange, VcpuContext, VcpuSet, STOP_DEADLINE};
use crate::vstate::vm::{RunOutcome, Vm, VmError};

use crate::vstate::exit_sync::SyncOnUnwind;
pub use crate::vstate::exit_sync::SYNC_DEADLINE;

/// How a run is watched.
#[derive(Debug, Clone, Copy)]
pub struct RunOptions {
    /// End the VM (status 124, [`crate::exit_status::TIMED_OUT`]) when it runs longer than this.
    pub timeout: Option<Duration>,
    /// Faults to inject (tests; see [`crate::fault`]).
    pub faults: Faults,
}

impl Default for RunOptions {
    fn default() -> Self {
        Self {
            timeout: None,
            faults: Faults::from_env(),
        }
    }
}

type Subscriber = Box<dyn MutEventSubscriber>;

/// The event loop and what it watches while the VM runs.
struct Watched {
    events: EventManager<Subscriber>,
    /// SIGQUIT asked where the vCPUs are.
    describe: Arc<AtomicBool>,
    /// The lost-interrupt watch is due.
    watch_due: Arc<AtomicBool>,
    watch: crate::vstate::lost_interrupt::InterruptWatch,
    /// The terminal in raw mode while the console takes its input.
    terminal: Option<RawTerminal>,
}

/// Drains the exit eventfd; the request itself is read from the notifier.
struct ExitEvent(Arc<ExitNotifier>, Faults);

impl MutEventSubscriber for ExitEvent {
    fn init(&mut self, ops: &mut EventOps) {
        if let Err(e) = ops.add(Events::new(self.0.event(), EventSet::IN)) {
            self.0.request(ExitRequest::Fatal(format!(
                "watching the exit eventfd failed: {e}"
            )));
        }
    }

    fn process(&mut self, _: Events, _: &mut EventOps) {
        let _ = self.0.event().read();
        if self.1.loop_panics {
            panic!("fault injection: the event loop panics");
        }
    }
}

/// Turns SIGINT, SIGTERM and SIGHUP into an orderly stop, and SIGQUIT into a
/// request for [`Vm::run_with`]'s loop to say where each vCPU is.
struct SignalEvent {
    signals: StopSignals,
    exit: Arc<ExitNotifier>,
    describe: Arc<std::sync::atomic::AtomicBool>,
}

impl MutEventSubscriber for SignalEvent {
    fn init(&mut self, ops: &mut EventOps) {
        if let Err(e) = ops.add(Events::new(&self.signals, EventSet::IN)) {
            self.exit.request(ExitRequest::Fatal(format!(
                "watching the stop signals failed: {e}"
            )));
        }
    }

    fn process(&mut self, _: Events, _: &mut EventOps) {
        while let Some(signal) = self.signals.read() {
            if signal == crate::signals::DESCRIBE_SIGNAL {
                self.describe
                    .store(true, std::sync::atomic::Ordering::Release);
            } else {
                self.exit.request(ExitRequest::Signal(signal));
            }
        }
    }
}

/// Ends the VM when its time is up.
struct Watchdog {
    timer: TimerFd,
    timeout: Duration,
    exit: Arc<ExitNotifier>,
}

impl MutEventSubscriber for Watchdog {
    fn init(&mut self, ops: &mut EventOps) {
        if let Err(e) = ops.add(Events::new(&self.timer, EventSet::IN)) {
            self.exit.request(ExitRequest::Fatal(format!(
                "starting the watchdog failed: {e}"
            )));
        }
    }

    fn process(&mut self, _: Events, _: &mut EventOps) {
        let _ = self.timer.wait();
        self.exit
            .request(ExitRequest::Timeout(self.timeout.as_secs()));
    }
}

fn io_err(what: &str) -> impl FnOnce(std::io::Error) -> VmError + '_ {
    move |source| VmError::Io {
        what: what.into(),
        source,
    }
}

impl Vm {
    /// Runs the VM until the guest or the host ends it (see the module docs).
    pub fn run(self) -> Result<RunOutcome, VmError> {
        self.run_with(RunOptions::default())
    }

    /// [`Vm::run`] with a watchdog and injected faults.
    pub fn run_with(mut self, opts: RunOptions) -> Result<RunOutcome, VmError> {
        let exit = self.exit.clone();
        let mut watched = self.watched(&opts)?;
        let mut unwind_sync = SyncOnUnwind(Some(self.writable_files()));
        let mut vcpus = VcpuSet::new().map_err(io_err("installing the vCPU kick signal"))?;
        // The VMM's own threads (this one, and what it starts) off the vCPUs' CPUs.
        let _others = crate::memory::placement::OtherThreads::enter(&self.placement)?;
        let statuses: Vec<Arc<crate::vstate::vcpu_status::VcpuStatus>> = (0..self.vcpus.len())
            .map(|_| Arc::new(crate::vstate::vcpu_status::VcpuStatus::new()))
            .collect();
        let hub = self.debug_hub();
        let dumper = self.arm_dumps(hub.as_ref());
        let started = self.start_vcpus(&mut vcpus, opts.faults, &statuses, hub.as_ref());
        let services = match &started {
            Ok(()) => self.start_services(hub, dumper, &exit),
            Err(_) => crate::vstate::services::Services::default(),
        };
        if started.is_ok() {
            self.serve(&mut watched, &vcpus, &statuses);
        }
        // KVM's mappings as the guest left them: read before the vCPUs are closed, which can
        // drop them (on this workplace's PVM KVM, read after the join, the ring-3 ratio
        // guest's 16 MiB DIMM showed 4 × 4K in one run and all its pages in another).
        let kvm_pages = crate::host::kvm_stats::read(&*self.vm_fd)
            .map_err(|e| log::info!("memory: {e}"))
            .ok();
        let stopped = vcpus.stop_and_join(STOP_DEADLINE);
        services.join();
        unwind_sync.0 = None;
        drop(watched.terminal.take());
        let outcome = self.finish(exit.get(), stopped, &statuses, kvm_pages);
        drop(watched);
        if let (Err(_), ExitRequest::StorageFailure(e)) = (&started, &outcome.reason) {
            // The start failure is the error returned; this one is logged.
            log::error!("{e}");
        }
        started.map(|()| outcome)
    }

    /// The event loop with its subscribers — the exit eventfd, the stop
    /// signals, the watchdog, the lost-interrupt ticker, the console's input —
    /// and the interrupt watch over the serial ports and disks.
    fn watched(&self, opts: &RunOptions) -> Result<Watched, VmError> {
        let exit = self.exit.clone();
        let mut events = EventManager::<Subscriber>::new().map_err(|e| VmError::Io {
            what: "creating the event loop".into(),
            source: std::io::Error::other(e.to_string()),
        })?;
        events.add_subscriber(Box::new(ExitEvent(exit.clone(), opts.faults)));
        let signals =
            StopSignals::block().map_err(io_err("blocking SIGINT/SIGTERM/SIGHUP/SIGQUIT"))?;
        let describe = Arc::new(AtomicBool::new(false));
        events.add_subscriber(Box::new(SignalEvent {
            signals,
            exit: exit.clone(),
            describe: describe.clone(),
        }));
        if let Some(timeout) = opts.timeout {
            let mut timer = TimerFd::new()
                .map_err(std::io::Error::from)
                .map_err(io_err("creating the watchdog timer"))?;
            timer
                .reset(timeout, None)
                .map_err(std::io::Error::from)
                .map_err(io_err("arming the watchdog timer"))?;
            let exit = exit.clone();
            events.add_subscriber(Box::new(Watchdog {
                timer,
                timeout,
                exit,
            }));
        }
        let watch_due = Arc::new(AtomicBool::new(false));
        let ticker = crate::vstate::lost_interrupt::Ticker::new(watch_due.clone(), exit.clone())
            .map_err(io_err("starting the lost-interrupt watch"))?;
        events.add_subscriber(Box::new(ticker));
        let mut lines = self.serial.watched();
        lines.extend(self.disks.iter().map(|d| d.line.clone()));
        if let (Some(lost), Ok(com2)) =
            (opts.faults.channel_interrupts_lost, self.serial.com2.lock())
        {
            com2.lose_interrupts(lost);
        }
        let terminal = match self.serial.console_in() {
            Some(com1) => {
                let input = ConsoleInput::new(com1, exit).map_err(io_err("console input"))?;
                events.add_subscriber(Box::new(input));
                Some(RawTerminal::new())
            }
            None => None,
        };
        Ok(Watched {
            events,
            describe,
            watch_due,
            watch: crate::vstate::lost_interrupt::InterruptWatch::new(lines),
            terminal,
        })
    }

    /// The loop while the guest runs: events until a request ends the VM,
    /// the lost-interrupt watch when due, SIGQUIT's report of the vCPUs.
    fn serve(
        &self,
        w: &mut Watched,
        vcpus: &VcpuSet,
        statuses: &[Arc<crate::vstate::vcpu_status::VcpuStatus>],
    ) {
        let exit = &self.exit;
        while exit.get().is_none() {
            if let Err(e) = w.events.run() {
                exit.request(ExitRequest::Fatal(format!(
                    "pmemvm's event loop failed: {e}"
                )));
            }
            if w.watch_due.swap(false, AtomicOrdering::AcqRel) {
                let overdue = w.watch.overdue();
                if !overdue.is_empty() {
                    let (lines, idle) = self.describe_vcpus(vcpus, statuses);
                    if let Some(lost) = w.watch.judge(&overdue, idle, &lines) {
                        exit.request(ExitRequest::Fatal(lost));
                    }
                }
            }
            if w.describe.swap(false, AtomicOrdering::AcqRel) {
                for line in self.describe_vcpus(vcpus, statuses).0 {
                    eprintln!("pmemvm: SIGQUIT: {line}");
                }
                eprintln!("pmemvm: SIGQUIT: the guest goes on (SIGINT or SIGTERM stops it)");
            }
        }
    }

    /// Where each vCPU is now, without stopping the guest: the vCPUs in the
    /// guest are kicked once to record their registers (those in pmemvm,
    /// handling an exit, are described from their phase and not disturbed);
    /// and whether every vCPU was in the guest and idle (halted, interrupts on).
    fn describe_vcpus(
        &self,
        vcpus: &VcpuSet,
        statuses: &[Arc<crate::vstate::vcpu_status::VcpuStatus>],
    ) -> (Vec<String>, bool) {
        let in_guest: Vec<usize> = statuses
            .iter()
            .enumerate()
            .filter(|(_, s)| s.in_guest_now())
            .map(|(i, _)| i)
            .collect();
        for &i in &in_guest {
            statuses[i].request_snapshot();
        }
        vcpus.kick(&in_guest);
        let deadline = std::time::Instant::now() + Duration::from_millis(500);
        while std::time::Instant::now() < deadline
            && !in_guest.iter().all(|&i| statuses[i].has_snapshot())
        {
            std::thread::sleep(Duration::from_millis(5));
        }
        let idle = in_guest.len() == statuses.len()
            && statuses
                .iter()
                .all(|s| s.snapshot().is_some_and(|x| x.idle()));
        (self.describe_statuses(statuses), idle)
    }

    /// One sentence per vCPU from its published state, guest RIPs named from
    /// the kernel's symbols.
    pub(crate) fn describe_statuses(
        &self,
        statuses: &[Arc<crate::vstate::vcpu_status::VcpuStatus>],
    ) -> Vec<String> {
        let symbols = crate::debug::symbols::Symbols::load(&self.kernel);
        let dimms: Vec<String> = self
            .nvdimms
            .iter()
            .map(|d| d.backing.display.clone())
            .collect();
        let disks: Vec<String> = self
            .disks
            .iter()
            .map(|d| d.path.display().to_string())
            .collect();
        let owners = crate::vstate::exit_owner::ExitOwners::new(&dimms, &disks);
        statuses
            .iter()
            .enumerate()
            .map(|(i, s)| s.describe(i, &|rip| symbols.name(rip), &|e, a| owners.name(e, a)))
            .collect()
    }

    /// Starts one thread per vCPU; on an error the threads already started
    /// stay in `vcpus` for the caller to stop.
    fn start_vcpus(
        &mut self,
        vcpus: &mut VcpuSet,
        faults: Faults,
        statuses: &[Arc<crate::vstate::vcpu_status::VcpuStatus>],
        debug: Option<&Arc<crate::debug::gdb::hub::DebugHub>>,
    ) -> Result<(), VmError> {
        let dimms: Arc<Vec<DimmRange>> = Arc::new(
            self.nvdimms
                .iter()
                .map(|n| DimmRange {
                    base: n.base,
                    size: n.size(),
                    readonly: n.backing.spec.readonly,
                    path: n.backing.display.clone(),
                    file: n.backing.file.clone(),
                    poison: n.poison.as_ref().map(|g| g.0.clone()),
                })
                .chain(self.legacy_pmem.iter().map(|l| DimmRange {
                    base: l.base,
                    size: l.mapping.size() as u64,
                    readonly: l.backing.spec.readonly,
                    path: l.backing.display.clone(),
                    file: l.backing.file.clone(),
                    poison: None,
                }))
                .collect(),
        );
        for (index, vcpu) in std::mem::take(&mut self.vcpus).into_iter().enumerate() {
            let ctx = VcpuContext {
                index,
                vcpu,
                pio: self.pio.clone(),
                mmio: self.mmio.clone(),
                exit: self.exit.clone(),
                stats: self.stats.clone(),
                stop: vcpus.stop_flag(),
                dimms: dimms.clone(),
                mem: self.mem.clone(),
                faults,
                status: statuses[index].clone(),
                debug: debug.cloned(),
                pvpanic: self.pvpanic.clone(),
                mce_vendor: self.mce_vendor,
                epoch_gate: self.epoch_gate.clone(),
                threads: self.vcpu_threads.clone(),
                mce_broadcast: self.mce_broadcast.clone(),
            };
            let pin: Vec<u32> = self.placement.pin.get(index).copied().into_iter().collect();
            let node = self.placement.host_node;
            let policy = self.vcpu_policy.clone();
            let exit = self.exit.clone();
            let spawned = if faults.vcpu_spawn_fails == Some(index) {
                Err(std::io::Error::other("injected fault"))
            } else {
                vcpus.spawn(index, move || {
                    let what = format!("vCPU {index}");
                    let placed = crate::memory::placement::pin_current_thread(&pin, &what)
                        .and_then(|()| {
                            // The page cache of file-backed DIMMs follows the faulting
                            // thread's policy, not the mapping's.
                            node.map_or(Ok(()), |n| {
                                crate::memory::placement::bind_current_thread(n, &what)
                            })
                        });
                    if index == 0 {
                        if let Ok(mut p) = policy.lock() {
                            *p = crate::memory::placement::current_thread_policy();
                        }
                    }
                    match placed {
                        Ok(()) => ctx.run(),
                        Err(e) => exit.request(ExitRequest::Fatal(e.to_string())),
                    }
                })
            };
            spawned.map_err(|source| VmError::Io {
                what: format!("starting the thread of vCPU {index}"),
                source,
            })?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn release_builds_unwind() {
        // With panic = "abort" a vCPU panic would skip the exit fdatasync.
        let manifest = include_str!("../../../Cargo.toml");
        assert!(
            manifest.contains("[workspace]") && manifest.contains("[profile.release]"),
            "not the workspace's manifest, or it has no release profile"
        );
        let release = manifest
            .split("[profile.release]")
            .nth(1)
            .map(|rest| rest.split("\n[").next().unwrap_or(rest))
            .unwrap_or("");
        let settings: Vec<String> = release
            .lines()
            .map(|l| l.split('#').next().unwrap_or("").replace(' ', ""))
            .collect();
        assert!(
            !settings.iter().any(|l| l == "panic=\"abort\""),
            "{release}"
        );
    }
}
