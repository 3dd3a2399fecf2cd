//! 16550 UART (vm-superio) on the PIO bus, its interrupt raised through an
//! eventfd registered with KVM as an irqfd.
//!
//! Each UART remembers when it raised an interrupt the guest has not yet
//! answered (read the interrupt identification register): pmemvm's
//! lost-interrupt watch (`vmm::vstate::lost_interrupt`) asks it how long that has been.

use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use vm_superio::{Serial, Trigger};
use vmm_sys_util::eventfd::EventFd;

use crate::bus::BusDevice;

/// The interrupt enable and identification registers' offsets (with DLAB
/// set, offset 1 is the divisor's high byte, whose write raises nothing).
const THR: u8 = 0;
const IER: u8 = 1;
const IIR: u8 = 2;
/// LCR bit 7: the divisor latch is addressed at offsets 0 and 1.
const LCR_DLAB: u8 = 0x80;
/// IIR bit 0: no interrupt pending.
const IIR_NONE: u8 = 1;
/// IER bits 0 and 1: received data, transmitter empty.
const IER_DATA_AND_EMPTY: u8 = 0b11;

fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// Microseconds since [`epoch`], plus one (0 means "never").
fn stamp() -> u64 {
    u64::try_from(epoch().elapsed().as_micros())
        .unwrap_or(u64::MAX - 1)
        .saturating_add(1)
}

/// An injected loss of interrupts (`PMEMVM_TEST_FAULT`, debug builds): the
/// irqfd is not signalled, as if the host had dropped the edge. Counted are
/// the interrupts raised by the guest enabling one in IER once it has sent
/// its first byte (as Linux's 8250 driver does to start sending again after
/// it sent all it had): one raised while the guest's handler runs is found
/// by the handler's next pass over IIR even when its edge is lost, so only
/// these leave a guest waiting; the driver's probes and port setup before
/// the first byte are not counted, so the n-th is the n-th time the guest
/// started sending anew, whatever the kernel did at boot and however its
/// output was cut into writes (a count from boot was not reproducible).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LostInterrupts {
    /// Only the n-th such interrupt (counting from 1) is lost.
    Once(u64),
    /// Every such interrupt from the n-th on is lost, and every one raised
    /// after it, raised again or not.
    From(u64),
}

/// Raises the UART's interrupt line by signalling an irqfd, and notes when
/// an unanswered interrupt was first raised.
#[derive(Debug)]
pub struct EventFdTrigger {
    evt: EventFd,
    /// [`stamp`] of the first raise not yet answered; 0 when none.
    raised: Arc<AtomicU64>,
    /// Interrupts raised by IER writes, for [`LostInterrupts`].
    count: AtomicU64,
    /// Set while the guest's IER write is being handled.
    in_ier_write: AtomicBool,
    /// Set once the guest has written its first byte to THR.
    sending: AtomicBool,
    /// Set once a `From` loss has begun: every edge after it is lost.
    losing: AtomicBool,
    lost: OnceLock<LostInterrupts>,
}

impl EventFdTrigger {
    /// Wraps `evt`.
    pub fn new(evt: EventFd) -> Self {
        Self {
            evt,
            raised: Arc::new(AtomicU64::new(0)),
            count: AtomicU64::new(0),
            in_ier_write: AtomicBool::new(false),
            sending: AtomicBool::new(false),
            losing: AtomicBool::new(false),
            lost: OnceLock::new(),
        }
    }

    /// Signals the irqfd unless an injected fault drops this edge.
    fn signal(&self) -> std::io::Result<()> {
        if let Some(lost) = self.lost.get() {
            if self.drops(*lost) {
                log::debug!("serial interrupt dropped (PMEMVM_TEST_FAULT)");
                return Ok(());
            }
        }
        self.evt.write(1)
    }

    /// Whether the injected `lost` drops this edge.
    fn drops(&self, lost: LostInterrupts) -> bool {
        if self.losing.load(Ordering::Relaxed) {
            return true;
        }
        if !self.in_ier_write.load(Ordering::Relaxed) || !self.sending.load(Ordering::Relaxed) {
            return false;
        }
        let n = self.count.fetch_add(1, Ordering::Relaxed) + 1;
        match lost {
            LostInterrupts::Once(k) => n == k,
            LostInterrupts::From(k) if n >= k => {
                self.losing.store(true, Ordering::Relaxed);
                true
            }
            LostInterrupts::From(_) => false,
        }
    }
}

impl Trigger for EventFdTrigger {
    type E = std::io::Error;

    fn trigger(&self) -> std::io::Result<()> {
        let _ = self
            .raised
            .compare_exchange(0, stamp(), Ordering::Relaxed, Ordering::Relaxed);
        self.signal()
    }
}

/// A sink for guest serial output that flushes after every write, so an
/// interactive prompt shows up at once.
pub struct FlushingWriter(Box<dyn Write + Send>);

impl std::fmt::Debug for FlushingWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FlushingWriter")
    }
}

impl FlushingWriter {
    /// Wraps `w`.
    pub fn new(w: Box<dyn Write + Send>) -> Self {
        Self(w)
    }
}

impl Write for FlushingWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.0.write(buf)?;
        self.0.flush()?;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

/// One 16550 UART.
pub struct SerialDevice {
    uart: Serial<EventFdTrigger, vm_superio::serial::NoEvents, FlushingWriter>,
    /// The trigger's [`EventFdTrigger::raised`].
    raised: Arc<AtomicU64>,
}

impl std::fmt::Debug for SerialDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SerialDevice").finish_non_exhaustive()
    }
}

impl SerialDevice {
    /// A UART that raises `irq` and writes guest output to `out`.
    pub fn new(irq: EventFd, out: Box<dyn Write + Send>) -> Self {
        let trigger = EventFdTrigger::new(irq);
        let raised = trigger.raised.clone();
        Self {
            uart: Serial::new(trigger, FlushingWriter::new(out)),
            raised,
        }
    }

    /// Drops interrupts as `lost` says (an injected fault, for tests).
    pub fn lose_interrupts(&self, lost: LostInterrupts) {
        let _ = self.uart.interrupt_evt().lost.set(lost);
    }

    /// How long an interrupt the guest still wants (enabled in IER, pending
    /// in IIR) has gone unanswered; `None` when there is none.
    pub fn unanswered(&self) -> Option<Duration> {
        let raised = self.raised.load(Ordering::Relaxed);
        if raised == 0 {
            return None;
        }
        let state = self.uart.state();
        let pending = state.interrupt_identification & IIR_NONE == 0;
        let wanted = state.interrupt_enable & IER_DATA_AND_EMPTY != 0;
        (pending && wanted).then(|| Duration::from_micros(stamp().saturating_sub(raised)))
    }

    /// Signals the interrupt line again (for an interrupt left unanswered
    /// while the guest is idle); the time it was first raised is kept.
    pub fn raise_again(&self) -> std::io::Result<()> {
        self.uart.interrupt_evt().signal()
    }

    /// Queues host input for the guest; returns how many bytes fit in the FIFO.
    pub fn enqueue_input(&mut self, input: &[u8]) -> usize {
        let n = input.len().min(self.uart.fifo_capacity());
        match self.uart.enqueue_raw_bytes(&input[..n]) {
            Ok(done) => done,
            Err(e) => {
                log::debug!("serial input dropped: {e:?}");
                0
            }
        }
    }
}

impl BusDevice for SerialDevice {
    fn read(&mut self, offset: u64, data: &mut [u8]) {
        if let (Ok(off), Some(first)) = (u8::try_from(offset), data.first_mut()) {
            if off == IIR {
                // Reading IIR answers (and clears) what was raised.
                self.raised.store(0, Ordering::Relaxed);
            }
            *first = self.uart.read(off);
        }
    }

    fn write(&mut self, offset: u64, data: &[u8]) {
        if let (Ok(off), Some(&value)) = (u8::try_from(offset), data.first()) {
            let trigger = self.uart.interrupt_evt();
            if off == THR
                && !trigger.sending.load(Ordering::Relaxed)
                && self.uart.state().line_control & LCR_DLAB == 0
            {
                trigger.sending.store(true, Ordering::Relaxed);
            }
            trigger.in_ier_write.store(off == IER, Ordering::Relaxed);
            let result = self.uart.write(off, value);
            self.uart
                .interrupt_evt()
                .in_ier_write
                .store(false, Ordering::Relaxed);
            if let Err(e) = result {
                // Host output failing (e.g. a closed pipe) must not stop the guest.
                log::debug!("serial output failed: {e:?}");
            }
        }
    }
}

impl crate::interrupt_line::InterruptLine for SerialDevice {
    fn unanswered(&self) -> Option<Duration> {
        SerialDevice::unanswered(self)
    }

    fn raise_again(&self) -> std::io::Result<()> {
        SerialDevice::raise_again(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    #[derive(Clone, Default)]
    struct Shared(Arc<Mutex<Vec<u8>>>);
    impl Write for Shared {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn output_and_input_with_interrupts() {
        let out = Shared::default();
        let irq = EventFd::new(libc::EFD_NONBLOCK).unwrap();
        let mut s = SerialDevice::new(irq.try_clone().unwrap(), Box::new(out.clone()));
        for b in b"hi" {
            s.write(0, &[*b]);
        }
        assert_eq!(&*out.0.lock().unwrap(), b"hi");
        // Enable the "received data available" interrupt (IER bit 0), then feed input.
        s.write(1, &[1]);
        assert_eq!(s.enqueue_input(b"ok"), 2);
        assert!(irq.read().unwrap() >= 1);
        let mut b = [0u8];
        s.read(0, &mut b);
        assert_eq!(b[0], b'o');
        // Out-of-range offsets are ignored, not a panic.
        s.write(0x1_0000, &[1]);
        s.read(0x1_0000, &mut b);
        s.write(0, &[]);
    }

    #[test]
    fn an_unanswered_interrupt_is_timed_until_iir_is_read() {
        let irq = EventFd::new(libc::EFD_NONBLOCK).unwrap();
        let mut s = SerialDevice::new(irq.try_clone().unwrap(), Box::new(std::io::sink()));
        assert_eq!(s.unanswered(), None);
        // Enabling the transmitter-empty interrupt raises it at once (THR is empty).
        s.write(1, &[2]);
        assert_eq!(irq.read().unwrap(), 1);
        std::thread::sleep(Duration::from_millis(20));
        let first = s.unanswered().expect("raised and not answered");
        assert!(first >= Duration::from_millis(20), "{first:?}");
        // More output keeps the first raise's time.
        s.write(0, b"x");
        assert!(s.unanswered().unwrap() >= first);
        // Raised again: the line is signalled, the time is kept.
        s.raise_again().unwrap();
        assert_eq!(irq.read().unwrap(), 1);
        assert!(s.unanswered().unwrap() >= first);
        // Reading IIR answers it.
        let mut b = [0u8];
        s.read(2, &mut b);
        assert_eq!(b[0] & IIR_NONE, 0, "IIR said an interrupt was pending");
        assert_eq!(s.unanswered(), None);
        // Raised, then disabled (a port being closed): nothing is owed.
        s.write(0, b"y");
        assert!(s.unanswered().is_some());
        s.write(1, &[0]);
        assert_eq!(s.unanswered(), None);
    }

    #[test]
    fn injected_losses_skip_the_irqfd() {
        // Whether each step signalled the irqfd.
        let fired = |irq: &EventFd| irq.read().is_ok();
        let answer = |s: &mut SerialDevice| {
            let mut b = [0u8];
            s.read(2, &mut b);
        };
        // Starts sending anew: THRE disabled, then enabled (raised at once).
        let restart = |s: &mut SerialDevice| {
            s.write(1, &[0]);
            s.write(1, &[2]);
        };
        let irq = EventFd::new(libc::EFD_NONBLOCK).unwrap();
        let mut s = SerialDevice::new(irq.try_clone().unwrap(), Box::new(std::io::sink()));
        s.lose_interrupts(LostInterrupts::Once(2));
        // Before the first byte (the driver probing and setting up the
        // port) no IER write is counted, with or without the divisor latch
        // addressed at offset 0.
        for _ in 0..3 {
            restart(&mut s);
            assert!(
                fired(&irq),
                "an IER write before the first byte is not counted"
            );
            answer(&mut s);
        }
        s.write(3, &[LCR_DLAB]);
        s.write(0, &[1]);
        s.write(3, &[0x03]);
        restart(&mut s);
        assert!(fired(&irq), "a divisor write is not the first byte");
        // The first byte, then output raising it twice more (each after an
        // IIR read, as the guest's handler does): not counted either.
        for _ in 0..2 {
            answer(&mut s);
            s.write(0, b"x");
            assert!(fired(&irq), "an interrupt raised by output is not counted");
        }
        // IER write 1 after the first byte arrives, 2 is lost, 3 arrives.
        for expect in [true, false, true] {
            answer(&mut s);
            restart(&mut s);
            assert_eq!(fired(&irq), expect);
        }
        // From the 2nd IER write on, every edge is lost, raised again or by output.
        let irq = EventFd::new(libc::EFD_NONBLOCK).unwrap();
        let mut s = SerialDevice::new(irq.try_clone().unwrap(), Box::new(std::io::sink()));
        s.lose_interrupts(LostInterrupts::From(2));
        s.write(0, b"x");
        restart(&mut s);
        assert!(fired(&irq));
        answer(&mut s);
        restart(&mut s);
        assert!(!fired(&irq));
        s.raise_again().unwrap();
        answer(&mut s);
        s.write(0, b"x");
        assert!(!fired(&irq));
    }
}
