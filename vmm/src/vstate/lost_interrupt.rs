//! The lost-interrupt watch. A UART's or virtio disk's interrupt the guest has
//! not answered (a UART's IIR not read, a disk's interrupt status not
//! acknowledged) while every vCPU is idle (halted with interrupts on) was lost between
//! pmemvm's irqfd and the guest: an idle vCPU takes a deliverable interrupt
//! at once. That happens below pmemvm, in the host's KVM or its CPU
//! virtualization (seen with KVM on a TCG-emulated SVM: a guest that had
//! finished its command sat idle, its status line never sent, until
//! `--timeout`; a virtio disk's completion is watched the same way). Every [`TICK`] the run's loop asks each device how long its
//! interrupt has waited; past [`GRACE`] it reads the vCPUs, and with all of
//! them idle it signals the line again (a dropped edge recovers so) and, if
//! the interrupt is still unanswered [`GRACE`] after that with the guest
//! still idle, ends the run with the vCPUs' local APIC state instead of
//! waiting for `--timeout`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use devices::exit::{ExitNotifier, ExitRequest};
use devices::interrupt_line::InterruptLine;
use event_manager::{EventOps, EventSet, Events, MutEventSubscriber};
use vmm_sys_util::timerfd::TimerFd;

/// How often the loop asks the devices.
pub const TICK: Duration = Duration::from_secs(5);
/// How long an interrupt may wait before the vCPUs are read, and how long
/// after it was raised again before the run ends.
pub const GRACE: Duration = Duration::from_secs(10);

/// One watched device: a UART or a virtio disk.
#[derive(Clone)]
pub struct Line {
    /// Its name for the user ("ttyS1", "virtio disk 0 (rootfs.img)").
    pub name: String,
    /// Its ISA interrupt line.
    pub irq: u32,
    /// The device.
    pub device: Arc<Mutex<dyn InterruptLine + Send>>,
}

impl std::fmt::Debug for Line {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Line")
            .field("name", &self.name)
            .field("irq", &self.irq)
            .finish_non_exhaustive()
    }
}

/// Sets a flag every [`TICK`] for the run's loop (which can read the vCPUs).
#[derive(Debug)]
pub struct Ticker {
    timer: TimerFd,
    due: Arc<AtomicBool>,
    exit: Arc<ExitNotifier>,
}

impl Ticker {
    /// A ticker setting `due`; a failure to start it is reported on `exit`.
    pub fn new(due: Arc<AtomicBool>, exit: Arc<ExitNotifier>) -> std::io::Result<Self> {
        let mut timer = TimerFd::new()?;
        timer.reset(TICK, Some(TICK))?;
        Ok(Self { timer, due, exit })
    }
}

impl MutEventSubscriber for Ticker {
    fn init(&mut self, ops: &mut EventOps) {
        if let Err(e) = ops.add(Events::new(&self.timer, EventSet::IN)) {
            self.exit.request(ExitRequest::Fatal(format!(
                "starting the lost-interrupt watch failed: {e}"
            )));
        }
    }

    fn process(&mut self, _: Events, _: &mut EventOps) {
        let _ = self.timer.wait();
        self.due.store(true, Ordering::Release);
    }
}

/// What to do about one device's waiting interrupt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Nothing yet.
    Wait,
    /// Signal the line again.
    RaiseAgain,
    /// Give up: the interrupt is lost.
    Lost,
}

/// The decision for an interrupt that has waited past [`GRACE`]: `idle` when
/// every vCPU was just seen idle; `raised_again` when the watch signalled it again.
pub fn decide(idle: bool, raised_again: Option<Instant>, now: Instant) -> Step {
    match (idle, raised_again) {
        (false, _) => Step::Wait,
        (true, None) => Step::RaiseAgain,
        (true, Some(t)) if now.saturating_duration_since(t) >= GRACE => Step::Lost,
        (true, Some(_)) => Step::Wait,
    }
}

/// The devices and when each one's waiting interrupt was raised again.
#[derive(Debug)]
pub struct InterruptWatch {
    lines: Vec<Line>,
    raised_again: Vec<Option<Instant>>,
}

impl InterruptWatch {
    /// Watches `lines`.
    pub fn new(lines: Vec<Line>) -> Self {
        let raised_again = vec![None; lines.len()];
        Self {
            lines,
            raised_again,
        }
    }

    /// The devices whose interrupt has waited [`GRACE`] or more, with how long
    /// (a device that was answered starts over).
    pub fn overdue(&mut self) -> Vec<(usize, Duration)> {
        let mut late = Vec::new();
        for (i, u) in self.lines.iter().enumerate() {
            let waited = u.device.lock().ok().and_then(|d| d.unanswered());
            match waited {
                Some(w) if w >= GRACE => late.push((i, w)),
                Some(_) => {}
                None => self.raised_again[i] = None,
            }
        }
        late
    }

    /// Acts on the `overdue` devices given whether every vCPU is `idle`:
    /// signals lines again (with a warning) and returns the sentence that
    /// ends the run when one is lost (`vcpus`: where each vCPU was).
    pub fn judge(
        &mut self,
        overdue: &[(usize, Duration)],
        idle: bool,
        vcpus: &[String],
    ) -> Option<String> {
        let now = Instant::now();
        for &(i, waited) in overdue {
            let (Some(u), Some(again)) = (self.lines.get(i), self.raised_again.get(i).copied())
            else {
                continue;
            };
            match decide(idle, again, now) {
                Step::Wait => {}
                Step::RaiseAgain => {
                    log::warn!(
                        "{}'s interrupt (IRQ {}) has waited {:.1} s though every vCPU is idle: \
                         raising it again",
                        u.name,
                        u.irq,
                        waited.as_secs_f64()
                    );
                    if let Ok(d) = u.device.lock() {
                        if let Err(e) = d.raise_again() {
                            log::warn!("raising {}'s interrupt again failed: {e}", u.name);
                        }
                    }
                    self.raised_again[i] = Some(now);
                }
                Step::Lost => {
                    return Some(lost_sentence(u, waited, again, now, vcpus));
                }
            }
        }
        None
    }
}

fn lost_sentence(
    u: &Line,
    waited: Duration,
    again: Option<Instant>,
    now: Instant,
    vcpus: &[String],
) -> String {
    let again = again.map_or(0.0, |t| now.saturating_duration_since(t).as_secs_f64());
    format!(
        "{}'s interrupt (IRQ {}) has gone unanswered for {:.1} s though every vCPU is idle \
         (halted, interrupts on), also after pmemvm raised it again {again:.1} s ago: the \
         interrupt was lost below pmemvm, in the host's KVM or its CPU virtualization; {}",
        u.name,
        u.irq,
        waited.as_secs_f64(),
        vcpus.join("; ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use devices::serial::{LostInterrupts, SerialDevice};
    use vmm_sys_util::eventfd::EventFd;

    #[test]
    fn an_idle_guest_is_given_the_interrupt_again_then_the_run_ends() {
        let now = Instant::now();
        assert_eq!(decide(false, None, now), Step::Wait);
        assert_eq!(decide(false, Some(now - GRACE * 2), now), Step::Wait);
        assert_eq!(decide(true, None, now), Step::RaiseAgain);
        assert_eq!(decide(true, Some(now - GRACE / 2), now), Step::Wait);
        assert_eq!(decide(true, Some(now - GRACE), now), Step::Lost);
    }

    #[test]
    fn the_watch_raises_a_waiting_interrupt_once_and_says_when_it_is_lost() {
        let irq = EventFd::new(libc::EFD_NONBLOCK).unwrap();
        let dev = SerialDevice::new(irq.try_clone().unwrap(), Box::new(std::io::sink()));
        dev.lose_interrupts(LostInterrupts::Once(1));
        let device = Arc::new(Mutex::new(dev));
        let mut watch = InterruptWatch::new(vec![Line {
            name: "ttyS1".into(),
            irq: 3,
            device: device.clone(),
        }]);
        // The guest sends its first byte, then (after its handler answered)
        // enables the transmitter-empty interrupt to send again: raised, and lost.
        devices::bus::BusDevice::write(&mut *device.lock().unwrap(), 0, b"x");
        devices::bus::BusDevice::write(&mut *device.lock().unwrap(), 1, &[2]);
        assert!(irq.read().is_err(), "the first interrupt was dropped");
        assert!(watch.overdue().is_empty(), "not overdue before GRACE");
        // Past GRACE (the waiting time is handed in as the loop would see it).
        let late = [(0, GRACE)];
        assert_eq!(watch.judge(&late, false, &[]), None);
        assert!(irq.read().is_err(), "a busy guest is left alone");
        assert_eq!(watch.judge(&late, true, &[]), None);
        assert_eq!(irq.read().unwrap(), 1, "raised again for an idle guest");
        assert_eq!(
            watch.judge(&late, true, &[]),
            None,
            "not again within GRACE"
        );
        watch.raised_again[0] = Some(Instant::now() - GRACE);
        let lost = watch
            .judge(&late, true, &["vCPU 0: in the guest, halted".into()])
            .expect("lost");
        assert!(
            lost.starts_with("ttyS1's interrupt (IRQ 3) has gone unanswered for 10.0 s")
                && lost.contains("the interrupt was lost below pmemvm")
                && lost.ends_with("; vCPU 0: in the guest, halted"),
            "{lost}"
        );
        // Answered (IIR read): the watch starts over.
        let mut b = [0u8];
        devices::bus::BusDevice::read(&mut *device.lock().unwrap(), 2, &mut b);
        assert!(watch.overdue().is_empty());
        assert_eq!(watch.raised_again[0], None);
    }
}
